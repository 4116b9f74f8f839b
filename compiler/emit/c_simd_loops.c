/* compiler/emit/c_simd_loops.c — the kernels written as plain C loops:
 * elementwise chains (numpy broadcasting by stride 0, masks from the row and
 * column index), reductions, softmax over an axis other than the last, data
 * movement and the cross-entropy loss. Each loops over rows of the output
 * and runs on the model's threads through nnc_glue_rows; values are f32
 * (i32 tensors are computed in double and truncated, as C does). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

#define EXPR 512
/* Outputs a task of a reduction over a leading axis sums at once. */
#define RED_BLOCK 64
/* The side of a transpose's tile. */
#define TILE 16

/* Whether transpose n swaps the last two of its rank axes alone. */
static bool swaps_last_two(const nnc_node *n, int rank) {
  if (rank < 2 || n->attrs.perm[rank - 2] != rank - 1 || n->attrs.perm[rank - 1] != rank - 2) return false;
  for (int i = 0; i < rank - 2; i++)
    if (n->attrs.perm[i] != i) return false;
  return true;
}

static char *dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* k<ki>_rows, whose body reads the run context c, then k<ki>, which runs it
 * over `rows` rows of `cols` elements on the model's threads; frees body. */
void cs_emit_rows_fns(const ec_ctx *x, int ki, const char *rows, const char *cols, nnc_sb *body, nnc_sb *b) {
  char head[96];
  snprintf(head, sizeof head, "static void k%d_rows(void *p, int64_t r0, int64_t r1)", ki);
  ec_emit_function(x, b, head, "  const run_ctx *c = p;\n", "c->d", body);
  nnc_sb call;
  nnc_sb_init(&call);
  nnc_sb_printf(&call, "  nnc_glue_rows(&c->m->pool, %s, %s, k%d_rows, (void *)c);\n  return 0;\n", rows, cols, ki);
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &call);
}

/* Statements naming those of i0..i{lead-1}, the indices of row r along the
 * output's leading dims, that the text `uses` reads. */
static void unravel(const ec_ctx *x, int out, int lead, const char *uses, nnc_sb *b, int ind) {
  int lo = -1;
  for (int dd = lead - 1; dd >= 0; dd--) {
    char id[16];
    snprintf(id, sizeof id, "i%d", dd);
    if (ec_names(uses, id)) lo = dd;
  }
  if (lo < 0) return;
  if (lead == 1) {
    nnc_sb_printf(b, "%*sconst int64_t i0 = r;\n", ind, "");
    return;
  }
  /* r walks down from the last leading dim; rem only when it must divide */
  const char *v = "r";
  if (lo < lead - 1) {
    nnc_sb_printf(b, "%*sint64_t rem = r;\n", ind, "");
    v = "rem";
  }
  for (int dd = lead - 1; dd >= 1 && dd >= lo; dd--) {
    char e[EXPR], f[EXPR], id[16];
    dim_of(x, out, dd, e, sizeof e);
    ec_mul(e, "1", f, sizeof f);
    snprintf(id, sizeof id, "i%d", dd);
    bool one = strcmp(f, "1") == 0;   /* a dim of 1: its index is 0 and it divides nothing */
    if (ec_names(uses, id)) {
      if (one) nnc_sb_printf(b, "%*sconst int64_t i%d = 0;\n", ind, "", dd);
      else nnc_sb_printf(b, strchr(f, ' ') ? "%*sconst int64_t i%d = %s %% (%s);\n" : "%*sconst int64_t i%d = %s %% %s;\n",
                         ind, "", dd, v, f);   /* a dim that is a product stays whole */
    }
    if (dd > lo && !one) nnc_sb_printf(b, "%*srem /= %s;\n", ind, "", f);
  }
  if (lo == 0) nnc_sb_printf(b, "%*sconst int64_t i0 = %s;\n", ind, "", v);
}

/* ----------------------------------------------------------- elementwise */

static nnc_status emit_elementwise(const ec_ctx *x, int ki, nnc_sb *out_b, nnc_error *err) {
  nnc_sb *b = out_b;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_graph *g = x->g;
  int out = k->out[0];
  const nnc_tensor *o = &g->tensors[out];
  int r = o->rank, lead = r > 0 ? r - 1 : 0;
  char rows[EXPR], cols[EXPR], e[EXPR];
  ec_dims_product(x, out, 0, lead, rows, sizeof rows);
  ec_dims_product(x, out, lead, r, cols, sizeof cols);
  /* which external inputs are read elementwise (not only as a padding mask) */
  bool plain[NNC_MAX_IO] = {false}, as_mask[NNC_MAX_IO] = {false};
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &g->nodes[k->nodes[i]];
    for (int j = 0; j < n->nin; j++)
      for (int q = 0; q < k->nin; q++)
        if (k->in[q] == n->in[j]) {
          if (n->op == NNC_OP_PADDING_MASK && j == 1) as_mask[q] = true;
          else plain[q] = true;
        }
  }
  nnc_sb body, row;
  nnc_sb_init(&body);
  nnc_sb_init(&row);
  for (int q = 0; q < k->nin; q++) {
    snprintf(e, sizeof e, "const %s *x%d", ec_ctype(g, k->in[q]), q);
    ec_assign(x, &body, 2, e, k->in[q]);
  }
  snprintf(e, sizeof e, "%s *y", ec_ctype(g, out));
  ec_assign(x, &body, 2, e, out);
  nnc_sb_printf(&body, "  const int64_t cols = %s;\n", cols);
  nnc_sb_printf(&body, "  for (int64_t r = r0; r < r1; r++) {\n");
  b = &row;
  for (int q = 0; q < k->nin; q++) {
    if (!plain[q]) continue;
    nnc_sb_printf(b, "    const %s *row%d = x%d", ec_ctype(g, k->in[q]), q, q);
    for (int dd = 0; dd < lead; dd++) {
      char st[EXPR];
      ec_operand_stride(x, k->in[q], out, dd, st, sizeof st);
      char f[EXPR];
      char id[16];
      snprintf(id, sizeof id, "i%d", dd);
      if (st[0]) nnc_sb_printf(b, " + %s", ec_mul(id, st, f, sizeof f));
    }
    nnc_sb_printf(b, ";\n");
  }
  for (int q = 0; q < k->nin; q++)
    if (as_mask[q]) nnc_sb_printf(b, "    const %s *mrow%d = x%d + i0 * cols;\n", ec_ctype(g, k->in[q]), q, q);
  nnc_sb_printf(b, "    %s *yr = y + r * cols;\n", ec_ctype(g, out));
  nnc_sb_printf(b, "    for (int64_t j = 0; j < cols; j++) {\n");
  for (int q = 0; q < k->nin; q++) {
    if (!plain[q]) continue;
    char st[EXPR] = "";
    if (r > 0) ec_operand_stride(x, k->in[q], out, r - 1, st, sizeof st);
    nnc_sb_printf(b, "      const %s a%d = row%d[%s];\n", ec_ctype(g, k->in[q]), q, q, st[0] ? "j" : "0");
  }
  const char *last = "0";
  char lastbuf[32];
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &g->nodes[k->nodes[i]];
    bool dbl = g->tensors[n->out[0]].dtype == NNC_I32;
    char opnd[2][64];
    for (int j = 0; j < n->nin && j < 2; j++) {
      int t = n->in[j], q = nnc_kernel_input(k, t);
      char v[48];
      if (n->op == NNC_OP_PADDING_MASK && j == 1) snprintf(v, sizeof v, "mrow%d[j]", q);
      else if (q >= 0) snprintf(v, sizeof v, "a%d", q);
      else snprintf(v, sizeof v, "v%d", t);
      bool is_int = g->tensors[t].dtype == NNC_I32 && !(n->op == NNC_OP_PADDING_MASK && j == 1);
      if (n->op == NNC_OP_PADDING_MASK && j == 1) snprintf(opnd[j], sizeof opnd[j], "%s", v);
      else if (dbl) snprintf(opnd[j], sizeof opnd[j], "(double)%s", v);
      else snprintf(opnd[j], sizeof opnd[j], is_int ? "(float)%s" : "%s", v);
    }
    char ex[2048], where[300];
    ec_node_expr(x, n, opnd[0], n->nin > 1 ? opnd[1] : "", dbl, out, ex, sizeof ex);
    nnc_sb_printf(b, "      const %s v%d = %s%s%s;   /* %s %s */\n", ec_ctype(g, n->out[0]), n->out[0], dbl ? "to_i32(" : "",
                  ex, dbl ? ")" : "", ec_where(n->loc, where, sizeof where), nnc_op_info_of(n->op)->name);
    snprintf(lastbuf, sizeof lastbuf, "v%d", n->out[0]);
    last = lastbuf;
  }
  nnc_sb_printf(b, "      yr[j] = %s;\n    }\n  }\n", last);
  unravel(x, out, lead, row.buf, &body, 4);
  if (row.buf) nnc_sb_puts(&body, row.buf);
  if (row.oom) body.oom = true;
  nnc_sb_free(&row);
  cs_emit_rows_fns(x, ki, rows, cols, &body, out_b);
  return NNC_OK;
}

/* ------------------------------------------------------------ reductions */

/* outer x len x inner around axis of tensor t. */
static void around_axis(const ec_ctx *x, int t, int axis, char *outer, char *len, char *inner) {
  ec_dims_product(x, t, 0, axis, outer, EXPR);
  ec_dims_product(x, t, axis, axis + 1, len, EXPR);
  ec_dims_product(x, t, axis + 1, x->g->tensors[t].rank, inner, EXPR);
}

/* The body of a max over len of floats, outer x len x inner: a max of
 * floats is one of them, so float arithmetic gives the reference's double
 * result. v > m ? v : m is one maxss (maxps over a block of inner), where the
 * reference's `|| isnan(v)` made a branch per value that missed at random (a
 * max pool's 4 values took ~25 ns an output); a NaN is noted on the side and
 * wins at the end, the last one as in the reference. With inner > 1 a task
 * takes one outer index and a block of RED_BLOCK outputs, the loads
 * contiguous. */
static void emit_max_f32(nnc_sb *b, bool blocked, const char *len, const char *inner) {
  if (!blocked) {
    nnc_sb_printf(b,
      "  const int64_t len = %s;\n"
      "  for (int64_t o = r0; o < r1; o++) {\n"
      "    const float *xr = x + o * len;\n"
      "    float acc = -INFINITY;\n    int nan = 0;\n"
      "    for (int64_t l = 0; l < len; l++) {\n"
      "      acc = xr[l] > acc ? xr[l] : acc;\n      nan |= xr[l] != xr[l];\n    }\n"
      "    if (nan)   /* NaN wins, as in the reference: the last one */\n"
      "      for (int64_t l = 0; l < len; l++)\n"
      "        if (xr[l] != xr[l]) acc = xr[l];\n"
      "    y[o] = acc;\n  }\n", len);
    return;
  }
  nnc_sb_printf(b,
    "  const int64_t len = %s, inner = %s, blocks = (inner + %d) / %d;\n"
    "  for (int64_t r = r0; r < r1; r++) {\n"
    "    const int64_t o = r / blocks, i0 = r %% blocks * %d, w = inner - i0 < %d ? inner - i0 : %d;\n"
    "    const float *xo = x + o * len * inner + i0;\n"
    "    float m[%d];\n    unsigned char nan[%d];\n"
    "    for (int64_t i = 0; i < w; i++) {\n      m[i] = -INFINITY;\n      nan[i] = 0;\n    }\n"
    "    for (int64_t l = 0; l < len; l++)\n"
    "      for (int64_t i = 0; i < w; i++) {\n"
    "        const float v = xo[l * inner + i];\n"
    "        m[i] = v > m[i] ? v : m[i];\n        nan[i] |= v != v;\n      }\n"
    "    for (int64_t i = 0; i < w; i++) {\n"
    "      if (nan[i])   /* NaN wins, as in the reference: the last one */\n"
    "        for (int64_t l = 0; l < len; l++)\n"
    "          if (xo[l * inner + i] != xo[l * inner + i]) m[i] = xo[l * inner + i];\n"
    "      y[o * inner + i0 + i] = m[i];\n    }\n  }\n",
    len, inner, RED_BLOCK - 1, RED_BLOCK, RED_BLOCK, RED_BLOCK, RED_BLOCK, RED_BLOCK, RED_BLOCK);
}

static nnc_status emit_reduce(const ec_ctx *x, int ki, nnc_sb *out_b, nnc_error *err) {
  nnc_sb *b = out_b;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const nnc_graph *g = x->g;
  char outer[EXPR], len[EXPR], inner[EXPR], p[256];
  around_axis(x, n->in[0], n->attrs.axis, outer, len, inner);
  bool i32 = g->tensors[n->out[0]].dtype == NNC_I32, max = n->op == NNC_OP_MAX;
  nnc_sb body;
  nnc_sb_init(&body);
  b = &body;
  snprintf(p, sizeof p, "const %s *x", ec_ctype(g, n->in[0]));
  ec_assign(x, b, 2, p, n->in[0]);
  snprintf(p, sizeof p, "%s *y", ec_ctype(g, n->out[0]));
  ec_assign(x, b, 2, p, n->out[0]);
  const char *val = n->op == NNC_OP_MEAN ? "acc / (double)len" : "acc";
  if (max && g->tensors[n->in[0]].dtype == NNC_F32 && !i32) {
    emit_max_f32(b, strcmp(inner, "1") != 0, len, inner);
    char tasks[EXPR * 3], cols[EXPR * 2 + 16];
    if (strcmp(inner, "1") != 0) {
      snprintf(tasks, sizeof tasks, "(%s) * (((%s) + %d) / %d)", outer, inner, RED_BLOCK - 1, RED_BLOCK);
      snprintf(cols, sizeof cols, "(%s) * %d", len, RED_BLOCK);
    } else {
      snprintf(tasks, sizeof tasks, "%s", outer);
      ec_mul(len, inner, cols, sizeof cols);
    }
    cs_emit_rows_fns(x, ki, tasks, cols, &body, out_b);
    return NNC_OK;
  }
  if (strcmp(inner, "1") != 0) {
    /* over a leading axis (a bias's gradient sums [B*T, N] over its rows):
     * a task takes one outer index and a block of neighbouring outputs and
     * walks len once with the block's sums in doubles, the loads contiguous
     * (vectorised) instead of a column apart; every output still adds its
     * values in the order of l, whatever the threads */
    nnc_sb_printf(b, "  const int64_t len = %s, inner = %s, blocks = (inner + %d) / %d;\n", len, inner, RED_BLOCK - 1,
                  RED_BLOCK);
    nnc_sb_printf(b,
      "  for (int64_t r = r0; r < r1; r++) {\n"
      "    const int64_t o = r / blocks, i0 = r %% blocks * %d, w = inner - i0 < %d ? inner - i0 : %d;\n"
      "    double sums[%d];\n"
      "    for (int64_t i = 0; i < w; i++) sums[i] = %s;\n"
      "    for (int64_t l = 0; l < len; l++) {\n"
      "      const %s *xr = x + (o * len + l) * inner + i0;\n"
      "      for (int64_t i = 0; i < w; i++) {\n",
      RED_BLOCK, RED_BLOCK, RED_BLOCK, RED_BLOCK, max ? "-INFINITY" : "0.0", ec_ctype(g, n->in[0]));
    if (max)
      nnc_sb_printf(b, "        const double v = xr[i];\n"
                       "        sums[i] = v > sums[i] || isnan(v) ? v : sums[i];   /* NaN wins, as in the reference */\n");
    else nnc_sb_printf(b, "        sums[i] += xr[i];\n");
    nnc_sb_printf(b, "      }\n    }\n    for (int64_t i = 0; i < w; i++) {\n      const double acc = sums[i];\n");
    if (i32) nnc_sb_printf(b, "      y[o * inner + i0 + i] = to_i32(%s);\n    }\n  }\n", val);
    else nnc_sb_printf(b, "      y[o * inner + i0 + i] = (float)(%s);\n    }\n  }\n", val);
    char tasks[EXPR * 3], cols[EXPR + 16];
    snprintf(tasks, sizeof tasks, "(%s) * (((%s) + %d) / %d)", outer, inner, RED_BLOCK - 1, RED_BLOCK);
    snprintf(cols, sizeof cols, "(%s) * %d", len, RED_BLOCK);
    cs_emit_rows_fns(x, ki, tasks, cols, &body, out_b);
    return NNC_OK;
  }
  nnc_sb_printf(b, "  const int64_t len = %s, inner = %s;\n", len, inner);
  nnc_sb_printf(b, "  for (int64_t o = r0; o < r1; o++)\n    for (int64_t i = 0; i < inner; i++) {\n"
                   "      const %s *xr = x + o * len * inner + i;\n      double acc = %s;\n"
                   "      for (int64_t l = 0; l < len; l++) {\n        const double v = xr[l * inner];\n",
                ec_ctype(g, n->in[0]), max ? "-INFINITY" : "0.0");
  if (max) nnc_sb_printf(b, "        acc = v > acc || isnan(v) ? v : acc;   /* NaN wins, as in the reference */\n");
  else nnc_sb_printf(b, "        acc += v;\n");
  nnc_sb_printf(b, "      }\n");
  if (i32) nnc_sb_printf(b, "      y[o * inner + i] = to_i32(%s);\n    }\n", val);
  else nnc_sb_printf(b, "      y[o * inner + i] = (float)(%s);\n    }\n", val);
  char cols[EXPR * 2 + 8];
  cs_emit_rows_fns(x, ki, outer, ec_mul(len, inner, cols, sizeof cols), &body, out_b);
  return NNC_OK;
}

/* softmax over a middle axis: each (outer, inner) pair is a row strided by inner */
static nnc_status emit_softmax_axis(const ec_ctx *x, int ki, nnc_sb *out_b, nnc_error *err) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char outer[EXPR], len[EXPR], inner[EXPR];
  around_axis(x, n->in[0], n->attrs.axis, outer, len, inner);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb *b = &body;
  ec_assign(x, b, 2, "const float *x", n->in[0]);
  ec_assign(x, b, 2, "float *y", n->out[0]);
  nnc_sb_printf(b,
    "  const int64_t len = %s, inner = %s;\n"
    "  for (int64_t o = r0; o < r1; o++)\n"
    "    for (int64_t i = 0; i < inner; i++) {\n"
    "      const float *xr = x + o * len * inner + i;\n"
    "      float *yr = y + o * len * inner + i;\n"
    "      float max = -INFINITY;\n"
    "      for (int64_t l = 0; l < len; l++) max = xr[l * inner] > max ? xr[l * inner] : max;\n"
    "      if (max == -INFINITY) {   /* every entry masked: zeros */\n"
    "        for (int64_t l = 0; l < len; l++) yr[l * inner] = 0.0f;\n"
    "        continue;\n"
    "      }\n"
    "      double sum = 0;\n"
    "      for (int64_t l = 0; l < len; l++) sum += exp((double)xr[l * inner] - max);\n"
    "      for (int64_t l = 0; l < len; l++) yr[l * inner] = (float)(exp((double)xr[l * inner] - max) / sum);\n"
    "    }\n", len, inner);
  char cols[EXPR * 2 + 8];
  cs_emit_rows_fns(x, ki, outer, ec_mul(len, inner, cols, sizeof cols), &body, out_b);
  return NNC_OK;
}

/* ------------------------------------------------------------------ moves */

static nnc_status emit_move(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  char v[64], e[EXPR], f[EXPR];
  const char *ty = ec_ctype(g, n->in[0]);
  /* a kv_append or rope comes last, after the head split it reads in place */
  if (g->nodes[k->nodes[k->nnodes - 1]].op == NNC_OP_KV_APPEND) return cs_emit_kv_append(x, ki, b);
  if (g->nodes[k->nodes[k->nnodes - 1]].op == NNC_OP_ROPE) return cs_emit_rope(x, ki, b);
  if (nnc_kernel_scan(g, k, NULL, NULL)) return cs_emit_scan(x, ki, b);
  if (n->op == NNC_OP_LSTM_SCAN_GRAD || n->op == NNC_OP_GRU_SCAN_GRAD) return cs_emit_recurrent(x, ki, b);
  if (n->op == NNC_OP_ALL_REDUCE) return cs_emit_all_reduce(x, ki, b);
  if (n->op == NNC_OP_ALL_GATHER) return cs_emit_all_gather(x, ki, b);
  if (n->op == NNC_OP_RANK_SLICE) return cs_emit_rank_slice(x, ki, b);
  if (n->op == NNC_OP_CE_SHARD || n->op == NNC_OP_CE_SHARD_GRAD) return cs_emit_ce_shard(x, ki, b);
  nnc_sb body;
  nnc_sb_init(&body);
  if (n->op == NNC_OP_RESHAPE) {
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    nnc_sb_printf(&body, "  memcpy(y, x, (size_t)(%s) * sizeof *y);\n  return 0;\n", ec_elems(x, n->out[0], e, sizeof e));
    snprintf(e, sizeof e, "static int k%d(const run_ctx *c)", ki);
    ec_emit_function(x, b, e, NULL, "c->d", &body);
    return NNC_OK;
  }
  if (n->op == NNC_OP_IM2COL) {
    /* a task writes whole output rows: one window position's C*KH*KW values */
    const nnc_window *w = &n->attrs.win;
    const nnc_tensor *in = &g->tensors[n->in[0]], *o = &g->tensors[n->out[0]];
    char rows[EXPR], cols[EXPR];
    ec_dims_product(x, n->out[0], 0, 3, rows, sizeof rows);
    ec_dims_product(x, n->out[0], 3, 5, cols, sizeof cols);
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    int64_t C = in->shape[w->nhwc ? 3 : 1].k, H = in->shape[w->nhwc ? 1 : 2].k, W = in->shape[w->nhwc ? 2 : 3].k;
    if (w->tap_major) {
      /* each tap is a run of C channels of one NHWC pixel: a copy */
      nnc_sb_printf(&body,
        "  /* windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d over an NHWC image, taps outer */\n"
        "  const int64_t C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n"
        "  for (int64_t r = r0; r < r1; r++) {\n"
        "    const int64_t b = r / (OH * OW), oh = r / OW %% OH, ow = r %% OW;\n"
        "    %s *yr = y + r * C * %d;\n"
        "    for (int64_t i = 0; i < %d; i++) {\n"
        "      const int64_t ih = oh * %d - %d + i * %d;\n"
        "      for (int64_t j = 0; j < %d; j++, yr += C) {\n"
        "        const int64_t iw = ow * %d - %d + j * %d;\n"
        "        if (ih >= 0 && ih < H && iw >= 0 && iw < W) memcpy(yr, x + ((b * H + ih) * W + iw) * C, (size_t)C * sizeof *yr);\n"
        "        else for (int64_t ch = 0; ch < C; ch++) yr[ch] = %s;\n"
        "      }\n    }\n  }\n",
        w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, (long long)C, (long long)H, (long long)W,
        (long long)o->shape[1].k, (long long)o->shape[2].k, ty, w->kh * w->kw, w->kh, w->sh, w->ph, w->dh, w->kw, w->sw,
        w->pw, w->dw, isinf(n->attrs.scalar) ? (n->attrs.scalar < 0 ? "-INFINITY" : "INFINITY") : "0");
      cs_emit_rows_fns(x, ki, rows, cols, &body, b);
      return NNC_OK;
    }
    if (w->ph == 0 && w->pw == 0) {
      /* no padding: every window lies inside the image (OH and OW are what
       * fits), so no bounds test per value; the row's pixel (oh, ow) is
       * found once and each tap is an offset from it (the test per value
       * took half of MNIST's second im2col) */
      char base[128], tap[128];
      if (w->nhwc) {
        snprintf(base, sizeof base, "((b * H + oh * %d) * W + ow * %d) * C", w->sh, w->sw);
        snprintf(tap, sizeof tap, "(i * %d * W + j * %d) * C + ch", w->dh, w->dw);
      } else {
        snprintf(base, sizeof base, "(b * C * H + oh * %d) * W + ow * %d", w->sh, w->sw);
        snprintf(tap, sizeof tap, "(ch * H + i * %d) * W + j * %d", w->dh, w->dw);
      }
      nnc_sb_printf(&body,
        "  /* windows %dx%d, stride %dx%d, no padding, dilation %dx%d over a %s image */\n"
        "  const int64_t C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n"
        "  for (int64_t r = r0; r < r1; r++) {\n"
        "    const int64_t b = r / (OH * OW), oh = r / OW %% OH, ow = r %% OW;\n"
        "    %s *yr = y + r * C * %d;\n"
        "    const %s *xp = x + %s;   /* the window's first pixel */\n"
        "    for (int64_t ch = 0; ch < C; ch++)\n"
        "      for (int64_t i = 0; i < %d; i++)\n"
        "        for (int64_t j = 0; j < %d; j++) *yr++ = xp[%s];\n"
        "  }\n",
        w->kh, w->kw, w->sh, w->sw, w->dh, w->dw, w->nhwc ? "NHWC" : "NCHW", (long long)C, (long long)H,
        (long long)W, (long long)o->shape[1].k, (long long)o->shape[2].k, ty, w->kh * w->kw, ty, base, w->kh,
        w->kw, tap);
      cs_emit_rows_fns(x, ki, rows, cols, &body, b);
      return NNC_OK;
    }
    nnc_sb_printf(&body,
      "  /* windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d over a %s image */\n"
      "  const int64_t C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n"
      "  for (int64_t r = r0; r < r1; r++) {\n"
      "    const int64_t b = r / (OH * OW), oh = r / OW %% OH, ow = r %% OW;\n"
      "    %s *yr = y + r * C * %d;\n"
      "    for (int64_t ch = 0; ch < C; ch++)\n"
      "      for (int64_t i = 0; i < %d; i++) {\n"
      "        const int64_t ih = oh * %d - %d + i * %d;\n"
      "        for (int64_t j = 0; j < %d; j++) {\n"
      "          const int64_t iw = ow * %d - %d + j * %d;\n"
      "          *yr++ = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[%s] : %s;\n"
      "        }\n      }\n  }\n",
      w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, w->nhwc ? "NHWC" : "NCHW", (long long)C, (long long)H,
      (long long)W, (long long)o->shape[1].k, (long long)o->shape[2].k, ty, w->kh * w->kw, w->kh, w->sh, w->ph, w->dh,
      w->kw, w->sw, w->pw, w->dw, w->nhwc ? "((b * H + ih) * W + iw) * C + ch" : "((b * C + ch) * H + ih) * W + iw",
      isinf(n->attrs.scalar) ? (n->attrs.scalar < 0 ? "-INFINITY" : "INFINITY") : "0");
    cs_emit_rows_fns(x, ki, rows, cols, &body, b);
    return NNC_OK;
  }
  if (n->op == NNC_OP_COL2IM) {
    /* a task writes whole image rows; each pixel gathers the window entries
     * that read it, in a fixed order (no scatter, no atomics) */
    const nnc_window *w = &n->attrs.win;
    const nnc_tensor *o = &g->tensors[n->out[0]], *in = &g->tensors[n->in[0]];
    char rows[EXPR], cols[EXPR];
    ec_dims_product(x, n->out[0], 0, 3, rows, sizeof rows);
    ec_dims_product(x, n->out[0], 3, 4, cols, sizeof cols);
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    int64_t C = o->shape[w->nhwc ? 3 : 1].k, H = o->shape[w->nhwc ? 1 : 2].k, W = o->shape[w->nhwc ? 2 : 3].k;
    char at[256];   /* the window entry of tap (i, j) of position (th, tw) */
    snprintf(at, sizeof at, w->tap_major ? "(((b * OH + th / %d) * OW + tw / %d) * %d + i * %d + j) * C + ch"
                                         : "(((b * OH + th / %d) * OW + tw / %d) * C + ch) * %d + i * %d + j",
             w->sh, w->sw, w->kh * w->kw, w->kw);
    nnc_sb_printf(&body,
      "  /* im2col's gradient: windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d, a %s image */\n"
      "  const int64_t C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld, last = %lld;\n"
      "  for (int64_t r = r0; r < r1; r++)\n"
      "    for (int64_t q = 0; q < last; q++) {\n"
      "      const int64_t e = r * last + q;\n"
      "      const int64_t %s;\n"
      "      %s acc = 0;\n"
      "      for (int64_t i = 0; i < %d; i++) {\n"
      "        const int64_t th = h + %d - i * %d;\n"
      "        if (th < 0 || th %% %d || th / %d >= OH) continue;\n"
      "        for (int64_t j = 0; j < %d; j++) {\n"
      "          const int64_t tw = w + %d - j * %d;\n"
      "          if (tw < 0 || tw %% %d || tw / %d >= OW) continue;\n"
      "          acc += x[%s];\n"
      "        }\n      }\n      y[e] = acc;\n    }\n",
      w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, w->nhwc ? "NHWC" : "NCHW", (long long)C, (long long)H,
      (long long)W, (long long)in->shape[1].k, (long long)in->shape[2].k, (long long)o->shape[3].k,
      w->nhwc ? "ch = e % C, w = e / C % W, h = e / (C * W) % H, b = e / (C * W * H)"
              : "w = e % W, h = e / W % H, ch = e / (W * H) % C, b = e / (W * H * C)",
      ty, w->kh, w->ph, w->dh, w->sh, w->sh, w->kw, w->pw, w->dw, w->sw, w->sw, at);
    cs_emit_rows_fns(x, ki, rows, cols, &body, b);
    return NNC_OK;
  }
  if (n->op == NNC_OP_TRANSPOSE && swaps_last_two(n, g->tensors[n->in[0]].rank)) {
    /* the swap of the last two axes in tiles: a task writes TILE rows of y
     * (TILE columns of x) of one matrix, a TILE x TILE tile at a time, so
     * that the column reads stay within TILE lines of x, not one a value */
    const nnc_tensor *in = &g->tensors[n->in[0]];
    char batch[EXPR], rows[EXPR], cols[EXPR], tasks[EXPR * 3], work[EXPR * 3];
    ec_dims_product(x, n->in[0], 0, in->rank - 2, batch, sizeof batch);
    dim_of(x, n->in[0], in->rank - 2, rows, sizeof rows);
    dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    nnc_sb_printf(&body,
      "  const int64_t rows = %s, cols = %s, blocks = (cols + %d) / %d;   /* x [.., rows, cols] */\n"
      "  for (int64_t r = r0; r < r1; r++) {\n"
      "    const int64_t c0 = r %% blocks * %d, cw = cols - c0 < %d ? cols - c0 : %d;\n"
      "    const %s *xm = x + r / blocks * rows * cols;\n"
      "    %s *ym = y + r / blocks * rows * cols;\n"
      "    for (int64_t t0 = 0; t0 < rows; t0 += %d) {\n"
      "      const int64_t tw = rows - t0 < %d ? rows - t0 : %d;\n"
      "      for (int64_t c = c0; c < c0 + cw; c++)\n"
      "        for (int64_t t = t0; t < t0 + tw; t++) ym[c * rows + t] = xm[t * cols + c];\n"
      "    }\n  }\n",
      rows, cols, TILE - 1, TILE, TILE, TILE, TILE, ty, ty, TILE, TILE, TILE);
    snprintf(tasks, sizeof tasks, "(%s) * (((%s) + %d) / %d)", batch, cols, TILE - 1, TILE);
    snprintf(work, sizeof work, "(%s) * %d", rows, TILE);
    cs_emit_rows_fns(x, ki, tasks, work, &body, b);
    return NNC_OK;
  }
  if (n->op == NNC_OP_TRANSPOSE) {
    const nnc_tensor *o = &g->tensors[n->out[0]], *in = &g->tensors[n->in[0]];
    int r = o->rank, lead = r - 1;
    char rows[EXPR], cols[EXPR], st[EXPR];
    ec_dims_product(x, n->out[0], 0, lead, rows, sizeof rows);
    ec_dims_product(x, n->out[0], lead, r, cols, sizeof cols);
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    nnc_sb_printf(&body, "  const int64_t cols = %s;\n  for (int64_t r = r0; r < r1; r++) {\n", cols);
    nnc_sb row;
    nnc_sb_init(&row);
    nnc_sb_printf(&row, "    const %s *xr = x", ty);
    for (int dd = 0; dd < lead; dd++) {
      ec_dims_product(x, n->in[0], n->attrs.perm[dd] + 1, in->rank, st, sizeof st);
      char id[16];
      snprintf(id, sizeof id, "i%d", dd);
      nnc_sb_printf(&row, " + %s", ec_mul(id, st, f, sizeof f));
    }
    ec_dims_product(x, n->in[0], n->attrs.perm[r - 1] + 1, in->rank, st, sizeof st);
    nnc_sb_printf(&row, ";\n    %s *yr = y + r * cols;\n    for (int64_t j = 0; j < cols; j++) yr[j] = xr[%s];\n  }\n",
                  ty, ec_mul("j", st, f, sizeof f));
    unravel(x, n->out[0], lead, row.buf, &body, 4);
    if (row.buf) nnc_sb_puts(&body, row.buf);
    if (row.oom) body.oom = true;
    nnc_sb_free(&row);
    cs_emit_rows_fns(x, ki, rows, cols, &body, b);
    return NNC_OK;
  }
  /* slice, concat, split: per outer index, contiguous chunks along the axis */
  int axis = n->attrs.axis;
  int whole = n->op == NNC_OP_SPLIT ? n->in[0] : n->out[0];
  char outer[EXPR], len[EXPR], inner[EXPR];
  around_axis(x, whole, axis, outer, len, inner);
  /* " * inner" where the chunks are more than one element wide */
  bool wide = strcmp(inner, "1") != 0;
  const char *xi = wide ? " * inner" : "";
  if (n->op == NNC_OP_PAD) {
    /* each outer row of the output: zeros, then x's chunk at start */
    char start[EXPR], inlen[EXPR];
    nnc_emit_dim_expr(g, n->attrs.start, "d->", start, sizeof start);
    dim_of(x, n->in[0], axis, inlen, sizeof inlen);
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    if (wide) nnc_sb_printf(&body, "  const int64_t inner = %s;\n", inner);
    nnc_sb_printf(&body, "  const int64_t len = %s, in_len = %s, start = %s;\n", len, inlen, start);
    nnc_sb_printf(&body, "  for (int64_t o = r0; o < r1; o++) {\n"
                         "    memset(y + o * len%s, 0, (size_t)(len%s) * sizeof *y);\n"
                         "    memcpy(y + (o * len + start)%s, x + o * in_len%s, (size_t)(in_len%s) * sizeof *y);\n"
                         "  }\n", xi, xi, xi, xi, xi);
  } else if (n->op == NNC_OP_SLICE) {
    char start[EXPR], inlen[EXPR];
    nnc_emit_dim_expr(g, n->attrs.start, "d->", start, sizeof start);
    dim_of(x, n->in[0], axis, inlen, sizeof inlen);
    snprintf(v, sizeof v, "const %s *x", ty);
    ec_assign(x, &body, 2, v, n->in[0]);
    snprintf(v, sizeof v, "%s *y", ty);
    ec_assign(x, &body, 2, v, n->out[0]);
    if (wide) nnc_sb_printf(&body, "  const int64_t inner = %s;\n", inner);
    nnc_sb_printf(&body, "  const int64_t len = %s, in_len = %s, start = %s;\n", len, inlen, start);
    if (wide)
      nnc_sb_printf(&body, "  for (int64_t o = r0; o < r1; o++)\n"
                           "    memcpy(y + o * len * inner, x + (o * in_len + start) * inner,\n"
                           "           (size_t)(len * inner) * sizeof *y);\n");
    else
      nnc_sb_printf(&body, "  for (int64_t o = r0; o < r1; o++)\n"
                           "    memcpy(y + o * len, x + o * in_len + start, (size_t)len * sizeof *y);\n");
  } else {
    /* the whole tensor, and one pointer per chunk */
    bool cat = n->op == NNC_OP_CONCAT;
    int nparts = cat ? n->nin : n->nout;
    snprintf(v, sizeof v, "%s%s *%s", cat ? "" : "const ", ty, cat ? "y" : "x");
    ec_assign(x, &body, 2, v, whole);
    for (int i = 0; i < nparts; i++) {
      snprintf(v, sizeof v, "%s%s *%s%d", cat ? "const " : "", ty, cat ? "x" : "y", i);
      ec_assign(x, &body, 2, v, cat ? n->in[i] : n->out[i]);
    }
    if (wide) nnc_sb_printf(&body, "  const int64_t inner = %s;\n", inner);
    nnc_sb_printf(&body, "  const int64_t len = %s;\n  for (int64_t o = r0; o < r1; o++) {\n", len);
    if (cat) nnc_sb_printf(&body, "    %s *dst = y + o * len%s;\n", ty, xi);
    else nnc_sb_printf(&body, "    const %s *src = x + o * len%s;\n", ty, xi);
    for (int i = 0; i < nparts; i++) {
      char l[EXPR], chunk[EXPR];
      dim_of(x, cat ? n->in[i] : n->out[i], axis, l, sizeof l);
      ec_mul(l, wide ? "inner" : "1", chunk, sizeof chunk);
      if (cat)
        nnc_sb_printf(&body, "    memcpy(dst, x%d + o * %s, (size_t)(%s) * sizeof *dst);\n    dst += %s;\n", i,
                      ec_mul(chunk, "1", f, sizeof f), chunk, chunk);
      else
        nnc_sb_printf(&body, "    memcpy(y%d + o * %s, src, (size_t)(%s) * sizeof *src);\n%s", i,
                      ec_mul(chunk, "1", f, sizeof f), chunk, i + 1 < nparts ? "    src += " : "");
      if (!cat && i + 1 < nparts) nnc_sb_printf(&body, "%s;\n", chunk);
    }
    nnc_sb_printf(&body, "  }\n");
  }
  char cols[EXPR * 2 + 8];
  cs_emit_rows_fns(x, ki, outer, ec_mul(len, inner, cols, sizeof cols), &body, b);
  return NNC_OK;
}

/* ------------------------------------------------------------------- loss */

/* The check that every index of i32 tensor t is in 0..V-1, as statements
 * returning an error from k<ki> (what names the index tensor's role). */
static void check_indices(const ec_ctx *x, int ki, const char *op, const char *what, const char *ptr,
                          const char *count, const char *V, nnc_sb *body) {
  nnc_sb_printf(body,
    "  for (int64_t r = 0; r < %s; r++)\n"
    "    if (%s[r] < 0 || %s[r] >= %s)\n"
    "      return fail(c->m, %s_E_ARG, \"kernel %d (%%s, %%s): %s: %s hold %%d at element %%lld, expected 0 to %%lld\",\n"
    "                  kernel_table[%d].name, kernel_table[%d].where, (int)%s[r], (long long)r, (long long)(%s) - 1);\n",
    count, ptr, ptr, V, x->P, ki, op, what, ki, ki, ptr, V);
}

/* k<ki>: checks the indices in i32 tensor `idx` (count of them, each below
 * V), then runs k<ki>_rows over `rows` rows of `cols` on the model's threads. */
static void checked_rows_fn(const ec_ctx *x, int ki, int idx, const char *op, const char *what, const char *count,
                            const char *V, const char *rows, const char *cols, nnc_sb *b) {
  char p[96];
  nnc_sb call;
  nnc_sb_init(&call);
  ec_assign(x, &call, 2, "const int32_t *ix", idx);
  check_indices(x, ki, op, what, "ix", count, V, &call);
  nnc_sb_printf(&call, "  nnc_glue_rows(&c->m->pool, %s, %s, k%d_rows, (void *)c);\n  return 0;\n", rows, cols, ki);
  snprintf(p, sizeof p, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, p, NULL, "c->d", &call);
}

/* The cross-entropy (the rows' losses in parallel into the workspace, their
 * mean in double) or its gradient, (softmax(logits) - onehot(targets)) *
 * dloss / rows, through nnc_simd_cross_entropy, which also refuses a target
 * outside the classes, naming its row. */
static nnc_status emit_loss(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  const nnc_tensor *l = &g->tensors[n->in[0]];
  const bool grad = n->op == NNC_OP_CROSS_ENTROPY_GRAD;
  if (l->dtype != NNC_F32 || g->tensors[n->in[1]].dtype != NNC_I32)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "c-simd: %s expects f32 logits and i32 targets",
                      grad ? "cross_entropy_grad" : "cross_entropy");
  char V[EXPR], rows[EXPR], p[256];
  dim_of(x, n->in[0], l->rank - 1, V, sizeof V);
  ec_elems(x, n->in[1], rows, sizeof rows);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "const int32_t *t", n->in[1]);
  if (grad) ec_assign(x, &body, 2, "const float *dloss", n->in[2]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body, "  const int rows = (int)(%s);\n", rows);
  if (!grad)
    nnc_sb_printf(&body, "  int rc = ensure_ws(c->m, (size_t)rows * sizeof(float) + 1);\n  if (rc) return rc;\n"
                         "  float *row_loss = c->m->ws;\n");
  nnc_sb_printf(&body, "  nnc_simd_error e;\n  if (nnc_simd_cross_entropy(rows, %s, x, t, %s, &c->m->par, &e))\n"
                       "    return kernel_failed(c->m, %d, e.msg);\n", V,
                grad ? "NULL, y, (float)((double)dloss[0] / (double)rows)" : "row_loss, NULL, 0.0f", ki);
  if (!grad)
    nnc_sb_printf(&body, "  double total = 0;\n  for (int r = 0; r < rows; r++) total += row_loss[r];\n"
                         "  y[0] = (float)(total / (double)rows);\n");
  nnc_sb_printf(&body, "  return 0;\n");
  snprintf(p, sizeof p, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, p, NULL, "c->d", &body);
  return NNC_OK;
}

/* --------------------------------------------------------- scatter-add */

/* The embedding's gradient: each thread owns a range of columns of the
 * [V, C] table gradient, zeroes it and adds every dy row into the row its id
 * names, in order (deterministic: no atomics). */
static nnc_status emit_embedding_grad(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  if (x->g->tensors[n->in[0]].dtype != NNC_F32)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "c-simd: embedding_grad expects an f32 gradient");
  char count[EXPR], V[EXPR], C[EXPR], p[256];
  ec_elems(x, n->in[1], count, sizeof count);
  dim_of(x, n->out[0], 0, V, sizeof V);
  dim_of(x, n->out[0], 1, C, sizeof C);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *dy", n->in[0]);
  ec_assign(x, &body, 2, "const int32_t *ids", n->in[1]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  /* a vocabulary split: this rank's rows are ids first .. first + V - 1; the others' ids add nowhere */
  const bool split = n->attrs.ranks > 1;
  char bound[EXPR], first[EXPR + 40], skip[EXPR + 64];
  snprintf(bound, sizeof bound, "%lld", (long long)n->attrs.vocab);
  if (split) snprintf(first, sizeof first, "(int64_t)c->m->%s->rank * (%s)", x->tpc, V);
  else snprintf(first, sizeof first, "0");
  snprintf(skip, sizeof skip, split ? "    if (row < 0 || row >= (int64_t)(%s)) continue;\n" : "", V);
  nnc_sb_printf(&body,
    "  const int64_t C = %s, count = %s, first = %s;\n"
    "  for (int64_t v = 0; v < %s; v++) memset(y + v * C + r0, 0, (size_t)(r1 - r0) * sizeof *y);\n"
    "  for (int64_t e = 0; e < count; e++) {\n"
    "    const int64_t row = (int64_t)ids[e] - first;\n"
    "%s"
    "    float *yr = y + row * C;\n"
    "    const float *dr = dy + e * C;\n"
    "    for (int64_t j = r0; j < r1; j++) yr[j] += dr[j];\n"
    "  }\n", C, count, first, V, skip);
  snprintf(p, sizeof p, "static void k%d_rows(void *p, int64_t r0, int64_t r1)", ki);
  ec_emit_function(x, b, p, "  const run_ctx *c = p;\n", "c->d", &body);
  checked_rows_fn(x, ki, n->in[1], "embedding_grad", "ids", count, split ? bound : V, C, count, b);
  return NNC_OK;
}

nnc_status cs_emit_loop_kernel(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  switch (k->kind) {
  case NNC_KERNEL_ELEMENTWISE: return emit_elementwise(x, ki, b, err);
  case NNC_KERNEL_REDUCE: return ec_kernel_is_pool(x, ki) ? cs_emit_pool(x, ki, b) : emit_reduce(x, ki, b, err);
  case NNC_KERNEL_ROW: return emit_softmax_axis(x, ki, b, err);
  case NNC_KERNEL_MOVE: return emit_move(x, ki, b, err);
  case NNC_KERNEL_LOSS: return emit_loss(x, ki, b, err);
  case NNC_KERNEL_GATHER: return emit_embedding_grad(x, ki, b, err);
  default:
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: no code for a %s kernel", nnc_kernel_kind_name(k->kind));
  }
}
