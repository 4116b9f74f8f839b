/* compiler/emit/c_simd_loops.c — the kernels written as plain C loops:
 * elementwise chains (numpy broadcasting by stride 0, masks from the row and
 * column index), reductions, softmax over an axis other than the last, data
 * movement and the cross-entropy loss. Each loops over rows of the output
 * and runs on the model's threads through nnc_glue_rows; values are f32
 * (i32 tensors are computed in double and truncated, as C does). */
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

#define EXPR 512

static char *dim_of(const cs_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* The rows function's opening: the run context, its dims and pointers. */
static void rows_open(const cs_ctx *x, int ki, nnc_sb *b) {
  nnc_sb_printf(b, "static void k%d_rows(void *p, int64_t r0, int64_t r1) {\n"
                   "  const run_ctx *c = p;\n  const %s_dims *d = c->d;\n  (void)d;\n", ki, x->p);
}

/* The kernel function that runs k<ki>_rows over `rows` rows of `cols`. */
static void rows_call(const cs_ctx *x, int ki, const char *rows, const char *cols, nnc_sb *b) {
  nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  (void)d;\n"
                   "  nnc_glue_rows(&c->m->pool, %s, %s, k%d_rows, (void *)c);\n  return 0;\n}\n\n",
                ki, x->p, rows, cols, ki);
}

/* Statements naming i0..i{lead-1}, the indices of row r along the output's
 * leading dims. */
static void unravel(const cs_ctx *x, int out, int lead, nnc_sb *b, int ind) {
  if (lead == 1) {
    nnc_sb_printf(b, "%*sconst int64_t i0 = r;\n", ind, "");
  } else if (lead > 1) {
    nnc_sb_printf(b, "%*sint64_t rem = r;\n", ind, "");
    for (int dd = lead - 1; dd >= 1; dd--) {
      char e[EXPR];
      dim_of(x, out, dd, e, sizeof e);
      nnc_sb_printf(b, "%*sconst int64_t i%d = rem %% (%s);\n%*srem /= %s;\n", ind, "", dd, e, ind, "", e);
    }
    nnc_sb_printf(b, "%*sconst int64_t i0 = rem;\n", ind, "");
  }
  for (int dd = 0; dd < lead; dd++) nnc_sb_printf(b, "%*s(void)i%d;\n", ind, "", dd);
}

/* ----------------------------------------------------------- elementwise */

/* Elements between consecutive indices of output dim `od` in operand t
 * (right-aligned to the output's rank); "" when it broadcasts there. */
static void operand_stride(const cs_ctx *x, int t, int out, int od, char *buf, size_t n) {
  const nnc_tensor *tt = &x->g->tensors[t], *o = &x->g->tensors[out];
  int j = od - (o->rank - tt->rank);
  buf[0] = 0;
  if (j < 0 || nnc_dim_eq_const(tt->shape[j], 1)) return;
  cs_dims_product(x, t, j + 1, tt->rank, buf, n);
}

static const char *float_fn(nnc_op op) {
  switch (op) {
  case NNC_OP_EXP: return "exp";
  case NNC_OP_LOG: return "log";
  case NNC_OP_SQRT: return "sqrt";
  case NNC_OP_TANH: return "tanh";
  default: return NULL;
  }
}

/* The expression of elementwise node n on operands a (and bb), in float
 * (dbl false) or double. */
static void node_expr(const cs_ctx *x, const nnc_node *n, const char *a, const char *bb, bool dbl, int out,
                      char *buf, size_t len) {
  const char *f = dbl ? "" : "f";
  char s[64], h[64], one[16], zero[16];
  cs_literal(n->attrs.scalar, dbl, s, sizeof s);
  snprintf(one, sizeof one, "1.0%s", f);
  snprintf(zero, sizeof zero, "0.0%s", f);
  const char *fn = float_fn(n->op);
  if (fn) {
    snprintf(buf, len, "%s%s(%s)", fn, f, a);
    return;
  }
  switch (n->op) {
  case NNC_OP_RELU: snprintf(buf, len, "(%s < %s ? %s : %s)", a, zero, zero, a); return;
  case NNC_OP_GELU:
    if (n->attrs.gelu_tanh)
      snprintf(buf, len, "(0.5%s * %s * (%s + tanh%s(%s * (%s + 0.044715%s * %s * %s * %s))))", f, a, one, f,
               cs_literal(0.79788456080286535588, dbl, h, sizeof h), a, f, a, a, a);
    else
      snprintf(buf, len, "(0.5%s * %s * (%s + erf%s(%s * %s)))", f, a, one, f, a,
               cs_literal(0.70710678118654752440, dbl, h, sizeof h));
    return;
  case NNC_OP_SILU: snprintf(buf, len, "(%s / (%s + exp%s(-%s)))", a, one, f, a); return;
  case NNC_OP_SIGMOID: snprintf(buf, len, "(%s / (%s + exp%s(-%s)))", one, one, f, a); return;
  case NNC_OP_NEG: snprintf(buf, len, "(-%s)", a); return;
  case NNC_OP_CAST: snprintf(buf, len, "%s", a); return;
  case NNC_OP_ADD_S: snprintf(buf, len, "(%s + %s)", a, s); return;
  case NNC_OP_SUB_S: snprintf(buf, len, "(%s - %s)", a, s); return;
  case NNC_OP_RSUB_S: snprintf(buf, len, "(%s - %s)", s, a); return;
  case NNC_OP_MUL_S: snprintf(buf, len, "(%s * %s)", a, s); return;
  case NNC_OP_DIV_S: snprintf(buf, len, "(%s / %s)", a, s); return;
  case NNC_OP_RDIV_S: snprintf(buf, len, "(%s / %s)", s, a); return;
  case NNC_OP_POW_S: snprintf(buf, len, "pow%s(%s, %s)", f, a, s); return;
  case NNC_OP_ADD: snprintf(buf, len, "(%s + %s)", a, bb); return;
  case NNC_OP_SUB: snprintf(buf, len, "(%s - %s)", a, bb); return;
  case NNC_OP_MUL: snprintf(buf, len, "(%s * %s)", a, bb); return;
  case NNC_OP_DIV: snprintf(buf, len, "(%s / %s)", a, bb); return;
  case NNC_OP_CAUSAL_MASK: {
    const nnc_tensor *o = &x->g->tensors[out];
    char T[EXPR], S[EXPR];
    dim_of(x, out, o->rank - 2, T, sizeof T);
    dim_of(x, out, o->rank - 1, S, sizeof S);
    snprintf(buf, len, "(j > i%d + ((%s) - (%s)) ? -INFINITY : %s)", o->rank - 2, S, T, a);
    return;
  }
  case NNC_OP_PADDING_MASK: snprintf(buf, len, "(%s == 0 ? -INFINITY : %s)", bb, a); return;
  default: snprintf(buf, len, "%s", a); return;
  }
}

static nnc_status emit_elementwise(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_graph *g = x->g;
  int out = k->out[0];
  const nnc_tensor *o = &g->tensors[out];
  int r = o->rank, lead = r > 0 ? r - 1 : 0;
  char rows[EXPR], cols[EXPR], p[256], e[EXPR];
  cs_dims_product(x, out, 0, lead, rows, sizeof rows);
  cs_dims_product(x, out, lead, r, cols, sizeof cols);
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
  rows_open(x, ki, b);
  for (int q = 0; q < k->nin; q++) {
    const nnc_tensor *t = &g->tensors[k->in[q]];
    nnc_sb_printf(b, "  const %s *x%d = %s;   /* %s */\n", cs_ctype(g, k->in[q]), q, cs_ptr(x, k->in[q], p, sizeof p),
                  nnc_emit_comment(t->name, e, sizeof e));
  }
  nnc_sb_printf(b, "  %s *y = %s;\n", cs_ctype(g, out), cs_ptr(x, out, p, sizeof p));
  nnc_sb_printf(b, "  const int64_t cols = %s;\n", cols);
  nnc_sb_printf(b, "  for (int64_t r = r0; r < r1; r++) {\n");
  unravel(x, out, lead, b, 4);
  for (int q = 0; q < k->nin; q++) {
    if (!plain[q]) continue;
    nnc_sb_printf(b, "    const %s *row%d = x%d", cs_ctype(g, k->in[q]), q, q);
    for (int dd = 0; dd < lead; dd++) {
      char st[EXPR];
      operand_stride(x, k->in[q], out, dd, st, sizeof st);
      if (st[0]) nnc_sb_printf(b, " + i%d * (%s)", dd, st);
    }
    nnc_sb_printf(b, ";\n");
  }
  for (int q = 0; q < k->nin; q++)
    if (as_mask[q]) nnc_sb_printf(b, "    const %s *mrow%d = x%d + i0 * cols;\n", cs_ctype(g, k->in[q]), q, q);
  nnc_sb_printf(b, "    %s *yr = y + r * cols;\n", cs_ctype(g, out));
  nnc_sb_printf(b, "    for (int64_t j = 0; j < cols; j++) {\n");
  for (int q = 0; q < k->nin; q++) {
    if (!plain[q]) continue;
    char st[EXPR] = "";
    if (r > 0) operand_stride(x, k->in[q], out, r - 1, st, sizeof st);
    nnc_sb_printf(b, "      const %s a%d = row%d[%s];\n", cs_ctype(g, k->in[q]), q, q, st[0] ? "j" : "0");
  }
  const char *last = "0";
  char lastbuf[32];
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &g->nodes[k->nodes[i]];
    bool dbl = g->tensors[n->out[0]].dtype == NNC_I32;
    char opnd[2][64];
    for (int j = 0; j < n->nin && j < 2; j++) {
      int t = n->in[j];
      int q = -1;
      for (int z = 0; z < k->nin; z++)
        if (k->in[z] == t) q = z;
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
    node_expr(x, n, opnd[0], n->nin > 1 ? opnd[1] : "", dbl, out, ex, sizeof ex);
    nnc_sb_printf(b, "      const %s v%d = %s%s%s;   /* %s %s */\n", cs_ctype(g, n->out[0]), n->out[0], dbl ? "to_i32(" : "",
                  ex, dbl ? ")" : "", cs_where(n->loc, where, sizeof where), nnc_op_info_of(n->op)->name);
    snprintf(lastbuf, sizeof lastbuf, "v%d", n->out[0]);
    last = lastbuf;
  }
  nnc_sb_printf(b, "      yr[j] = %s;\n    }\n  }\n}\n\n", last);
  rows_call(x, ki, rows, cols, b);
  return NNC_OK;
}

/* ------------------------------------------------------------ reductions */

/* outer x len x inner around axis of tensor t. */
static void around_axis(const cs_ctx *x, int t, int axis, char *outer, char *len, char *inner) {
  cs_dims_product(x, t, 0, axis, outer, EXPR);
  cs_dims_product(x, t, axis, axis + 1, len, EXPR);
  cs_dims_product(x, t, axis + 1, x->g->tensors[t].rank, inner, EXPR);
}

static nnc_status emit_reduce(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const nnc_graph *g = x->g;
  char outer[EXPR], len[EXPR], inner[EXPR], p[256];
  around_axis(x, n->in[0], n->attrs.axis, outer, len, inner);
  bool i32 = g->tensors[n->out[0]].dtype == NNC_I32, max = n->op == NNC_OP_MAX;
  rows_open(x, ki, b);
  nnc_sb_printf(b, "  const %s *x = %s;\n", cs_ctype(g, n->in[0]), cs_ptr(x, n->in[0], p, sizeof p));
  nnc_sb_printf(b, "  %s *y = %s;\n", cs_ctype(g, n->out[0]), cs_ptr(x, n->out[0], p, sizeof p));
  nnc_sb_printf(b, "  const int64_t len = %s, inner = %s;\n", len, inner);
  nnc_sb_printf(b, "  for (int64_t o = r0; o < r1; o++)\n    for (int64_t i = 0; i < inner; i++) {\n"
                   "      const %s *xr = x + o * len * inner + i;\n      double acc = %s;\n"
                   "      for (int64_t l = 0; l < len; l++) {\n        const double v = xr[l * inner];\n",
                cs_ctype(g, n->in[0]), max ? "-INFINITY" : "0.0");
  if (max) nnc_sb_printf(b, "        acc = v > acc || isnan(v) ? v : acc;   /* NaN wins, as in the reference */\n");
  else nnc_sb_printf(b, "        acc += v;\n");
  nnc_sb_printf(b, "      }\n");
  const char *val = n->op == NNC_OP_MEAN ? "acc / (double)len" : "acc";
  if (i32) nnc_sb_printf(b, "      y[o * inner + i] = to_i32(%s);\n    }\n}\n\n", val);
  else nnc_sb_printf(b, "      y[o * inner + i] = (float)(%s);\n    }\n}\n\n", val);
  char cols[EXPR * 2 + 8];
  snprintf(cols, sizeof cols, "(%s) * (%s)", len, inner);
  rows_call(x, ki, outer, cols, b);
  return NNC_OK;
}

/* softmax over a middle axis: each (outer, inner) pair is a row strided by inner */
static nnc_status emit_softmax_axis(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char outer[EXPR], len[EXPR], inner[EXPR], p[256];
  around_axis(x, n->in[0], n->attrs.axis, outer, len, inner);
  rows_open(x, ki, b);
  nnc_sb_printf(b, "  const float *x = %s;\n", cs_ptr(x, n->in[0], p, sizeof p));
  nnc_sb_printf(b, "  float *y = %s;\n", cs_ptr(x, n->out[0], p, sizeof p));
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
    "    }\n}\n\n", len, inner);
  char cols[EXPR * 2 + 8];
  snprintf(cols, sizeof cols, "(%s) * (%s)", len, inner);
  rows_call(x, ki, outer, cols, b);
  return NNC_OK;
}

/* ------------------------------------------------------------------ moves */

static nnc_status emit_move(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const nnc_graph *g = x->g;
  char p[256], e[EXPR];
  const char *ty = cs_ctype(g, n->in[0]);
  if (n->op == NNC_OP_RESHAPE) {
    nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  (void)d;\n", ki, x->p);
    nnc_sb_printf(b, "  const %s *x = %s;\n", ty, cs_ptr(x, n->in[0], p, sizeof p));
    nnc_sb_printf(b, "  %s *y = %s;\n", ty, cs_ptr(x, n->out[0], p, sizeof p));
    nnc_sb_printf(b, "  memcpy(y, x, (size_t)(%s) * sizeof *y);\n  return 0;\n}\n\n", cs_elems(x, n->out[0], e, sizeof e));
    return NNC_OK;
  }
  if (n->op == NNC_OP_TRANSPOSE) {
    const nnc_tensor *o = &g->tensors[n->out[0]], *in = &g->tensors[n->in[0]];
    int r = o->rank, lead = r - 1;
    char rows[EXPR], cols[EXPR];
    cs_dims_product(x, n->out[0], 0, lead, rows, sizeof rows);
    cs_dims_product(x, n->out[0], lead, r, cols, sizeof cols);
    rows_open(x, ki, b);
    nnc_sb_printf(b, "  const %s *x = %s;\n", ty, cs_ptr(x, n->in[0], p, sizeof p));
    nnc_sb_printf(b, "  %s *y = %s;\n", ty, cs_ptr(x, n->out[0], p, sizeof p));
    nnc_sb_printf(b, "  const int64_t cols = %s;\n  for (int64_t r = r0; r < r1; r++) {\n", cols);
    unravel(x, n->out[0], lead, b, 4);
    nnc_sb_printf(b, "    const %s *xr = x", ty);
    for (int dd = 0; dd < lead; dd++) {
      char st[EXPR];
      cs_dims_product(x, n->in[0], n->attrs.perm[dd] + 1, in->rank, st, sizeof st);
      nnc_sb_printf(b, " + i%d * (%s)", dd, st);
    }
    char st[EXPR];
    cs_dims_product(x, n->in[0], n->attrs.perm[r - 1] + 1, in->rank, st, sizeof st);
    nnc_sb_printf(b, ";\n    %s *yr = y + r * cols;\n    for (int64_t j = 0; j < cols; j++) yr[j] = xr[j * (%s)];\n  }\n}\n\n",
                  ty, st);
    rows_call(x, ki, rows, cols, b);
    return NNC_OK;
  }
  /* slice, concat, split: per outer index, contiguous chunks along the axis */
  int axis = n->attrs.axis;
  int whole = n->op == NNC_OP_SPLIT ? n->in[0] : n->out[0];
  char outer[EXPR], len[EXPR], inner[EXPR];
  around_axis(x, whole, axis, outer, len, inner);
  rows_open(x, ki, b);
  nnc_sb_printf(b, "  const int64_t inner = %s;\n", inner);
  if (n->op == NNC_OP_SLICE) {
    char start[EXPR], inlen[EXPR];
    nnc_emit_dim_expr(g, n->attrs.start, "d->", start, sizeof start);
    dim_of(x, n->in[0], axis, inlen, sizeof inlen);
    nnc_sb_printf(b, "  const %s *x = %s;\n", ty, cs_ptr(x, n->in[0], p, sizeof p));
    nnc_sb_printf(b, "  %s *y = %s;\n", ty, cs_ptr(x, n->out[0], p, sizeof p));
    nnc_sb_printf(b, "  const int64_t len = %s, in_len = %s, start = %s;\n", len, inlen, start);
    nnc_sb_printf(b, "  for (int64_t o = r0; o < r1; o++)\n"
                     "    memcpy(y + o * len * inner, x + (o * in_len + start) * inner, (size_t)(len * inner) * sizeof *y);\n}\n\n");
  } else if (n->op == NNC_OP_CONCAT) {
    nnc_sb_printf(b, "  %s *y = %s;\n  const int64_t len = %s;\n", ty, cs_ptr(x, n->out[0], p, sizeof p), len);
    nnc_sb_printf(b, "  for (int64_t o = r0; o < r1; o++) {\n    %s *dst = y + o * len * inner;\n", ty);
    for (int i = 0; i < n->nin; i++) {
      char l[EXPR];
      dim_of(x, n->in[i], axis, l, sizeof l);
      nnc_sb_printf(b, "    {\n      const int64_t chunk = (%s) * inner;\n      const %s *x = %s;\n"
                       "      memcpy(dst, x + o * chunk, (size_t)chunk * sizeof *dst);\n      dst += chunk;\n    }\n",
                    l, ty, cs_ptr(x, n->in[i], p, sizeof p));
    }
    nnc_sb_printf(b, "  }\n}\n\n");
  } else {
    nnc_sb_printf(b, "  const %s *x = %s;\n  const int64_t len = %s;\n", ty, cs_ptr(x, n->in[0], p, sizeof p), len);
    nnc_sb_printf(b, "  for (int64_t o = r0; o < r1; o++) {\n    const %s *src = x + o * len * inner;\n", ty);
    for (int i = 0; i < n->nout; i++) {
      char l[EXPR];
      dim_of(x, n->out[i], axis, l, sizeof l);
      nnc_sb_printf(b, "    {\n      const int64_t chunk = (%s) * inner;\n      %s *y = %s;\n"
                       "      memcpy(y + o * chunk, src, (size_t)chunk * sizeof *y);\n      src += chunk;\n    }\n",
                    l, ty, cs_ptr(x, n->out[i], p, sizeof p));
    }
    nnc_sb_printf(b, "  }\n}\n\n");
  }
  char cols[EXPR * 2 + 8];
  snprintf(cols, sizeof cols, "(%s) * (%s)", len, inner);
  rows_call(x, ki, outer, cols, b);
  return NNC_OK;
}

/* ------------------------------------------------------------------- loss */

static nnc_status emit_loss(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  const nnc_tensor *l = &g->tensors[n->in[0]];
  if (l->dtype != NNC_F32 || g->tensors[n->in[1]].dtype != NNC_I32)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "c-simd: cross_entropy expects f32 logits and i32 targets");
  char V[EXPR], rows[EXPR], p[256];
  dim_of(x, n->in[0], l->rank - 1, V, sizeof V);
  cs_elems(x, n->in[1], rows, sizeof rows);
  nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  (void)d;\n", ki, x->p);
  nnc_sb_printf(b, "  const float *x = %s;\n", cs_ptr(x, n->in[0], p, sizeof p));
  nnc_sb_printf(b, "  const int32_t *t = %s;\n", cs_ptr(x, n->in[1], p, sizeof p));
  nnc_sb_printf(b, "  float *y = %s;\n", cs_ptr(x, n->out[0], p, sizeof p));
  nnc_sb_printf(b,
    "  const int64_t V = %s, rows = %s;\n"
    "  for (int64_t r = 0; r < rows; r++)\n"
    "    if (t[r] < 0 || t[r] >= V)\n"
    "      return fail(c->m, %s_E_ARG, \"kernel %d (%%s, %%s): cross_entropy: targets hold %%d at element %%lld, expected 0 to %%lld\",\n"
    "                  kernel_table[%d].name, kernel_table[%d].where, (int)t[r], (long long)r, (long long)V - 1);\n"
    "  double total = 0;\n"
    "  for (int64_t r = 0; r < rows; r++) {\n"
    "    const float *xr = x + r * V;\n"
    "    double max = -INFINITY, sum = 0;\n"
    "    for (int64_t v = 0; v < V; v++) max = xr[v] > max ? xr[v] : max;\n"
    "    for (int64_t v = 0; v < V; v++) sum += exp((double)xr[v] - max);\n"
    "    total += max + log(sum) - xr[t[r]];\n"
    "  }\n"
    "  y[0] = (float)(total / (double)rows);\n"
    "  return 0;\n}\n\n", V, rows, x->P, ki, ki, ki);
  return NNC_OK;
}

nnc_status cs_emit_loop_kernel(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  switch (k->kind) {
  case NNC_KERNEL_ELEMENTWISE: return emit_elementwise(x, ki, b, err);
  case NNC_KERNEL_REDUCE: return emit_reduce(x, ki, b, err);
  case NNC_KERNEL_ROW: return emit_softmax_axis(x, ki, b, err);
  case NNC_KERNEL_MOVE: return emit_move(x, ki, b, err);
  case NNC_KERNEL_LOSS: return emit_loss(x, ki, b, err);
  default:
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: no code for a %s kernel", nnc_kernel_kind_name(k->kind));
  }
}
