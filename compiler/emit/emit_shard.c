/* compiler/emit/emit_shard.c — the ops of tensor-parallel training that read
 * the rank they run on (ir.h: rank_slice, cross_entropy_shard and its
 * gradient), for C SIMD (the rank from the model's MPI communicator) and
 * CUDA (run_args.rank). Each is a loop kernel of its own, like the
 * collectives around it (emit_collective.c). */
#include <stdio.h>

#include "c_simd.h"
#include "cuda.h"

/* Rows and R of a cross_entropy_shard node: the targets' elements and the
 * logits' last dim. */
static void ce_sizes(const ec_ctx *x, const nnc_node *n, char *rows, char *R, size_t len) {
  const nnc_tensor *l = &x->g->tensors[n->in[0]];
  ec_elems(x, n->in[1], rows, len);
  ec_dims_product(x, n->in[0], l->rank - 1, l->rank, R, len);
}

/* The loop over one row shared by both targets: `ld` reads a logit as float,
 * `fail` is the statement a target outside the vocabulary runs. */
static void ce_row(nnc_sb *b, bool grad, long long V, const char *ld, const char *fail) {
  nnc_sb_printf(b,
    "    const float *xr = x + r * R;\n"
    "    if (t[r] < 0 || t[r] >= %lld) %s\n"
    "    /* this rank's classes [first, first + R), those below the vocabulary's %lld real */\n"
    "    const long long local = (long long)t[r] - first, valid = %lldLL - first < R ? %lldLL - first : R;\n",
    V, fail, V, V, V);
  if (grad)
    nnc_sb_printf(b,
      "    for (long long v = 0; v < R; v++)\n"
      "      y[r * R + v] = v < valid ? (float)((double)ds[2 * r] * exp((double)%s(xr[v]) - (double)shift[r]) +\n"
      "                                         (v == local ? (double)ds[2 * r + 1] : 0.0)) : 0.0f;\n", ld);
  else
    nnc_sb_printf(b,
      "    double sum = 0;\n"
      "    for (long long v = 0; v < valid; v++) sum += exp((double)%s(xr[v]) - (double)shift[r]);\n"
      "    y[2 * r] = (float)sum;\n"
      "    y[2 * r + 1] = local >= 0 && local < R ? %s(xr[local]) - shift[r] : 0.0f;\n", ld, ld);
}

static const char *ce_what(const nnc_node *n) {
  return n->op == NNC_OP_CE_SHARD_GRAD
             ? "the gradient of this rank's classes: softmax - onehot, times the loss's gradient"
             : "each row's sum of exp(logit - max) over this rank's classes and the target's logit if it holds it";
}

nnc_status cs_emit_rank_slice(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char count[EC_EXPR], head[64];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* this rank's entry of the %d ranks' gradient: what its part of an all_gather gets */\n",
                n->attrs.ranks);
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body, "  const size_t count = (size_t)(%s);\n"
                       "  memcpy(y, x + (size_t)c->m->%s->rank * count, count * sizeof *y);\n  return 0;\n",
                ec_elems(x, n->out[0], count, sizeof count), x->tpc);
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, out, head, NULL, "c->d", &body);
  return NNC_OK;
}

nnc_status cs_emit_ce_shard(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const bool grad = n->op == NNC_OP_CE_SHARD_GRAD;
  char rows[EC_EXPR], R[EC_EXPR], head[64], fail[160];
  ce_sizes(x, n, rows, R, sizeof rows);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* %s (%d ranks) */\n", ce_what(n), n->attrs.ranks);
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "const int32_t *t", n->in[1]);
  ec_assign(x, &body, 2, "const float *shift", n->in[2]);
  if (grad) ec_assign(x, &body, 2, "const float *ds", n->in[3]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body, "  const long long rows = %s, R = %s, first = (long long)c->m->%s->rank * R;\n"
                       "  for (long long r = 0; r < rows; r++) {\n", rows, R, x->tpc);
  snprintf(fail, sizeof fail, "return kernel_failed(c->m, %d, \"a target outside the vocabulary of %lld\");", ki,
           (long long)n->attrs.vocab);
  ce_row(&body, grad, (long long)n->attrs.vocab, "", fail);
  nnc_sb_printf(&body, "  }\n  return 0;\n");
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, out, head, NULL, "c->d", &body);
  return NNC_OK;
}

nnc_status cu_emit_rank_slice(const ec_ctx *x, int ki, nnc_sb *out, nnc_error *err) {
  (void)err;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char count[EC_EXPR], head[160], px[256], py[256];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body,
    "  /* this rank's entry of the %d ranks' gradient: what its part of an all_gather gets */\n"
    "  const size_t count = (size_t)(%s);\n"
    "  if (cudaMemcpyAsync(%s, %s + (size_t)c.rank * count, count * sizeof *%s, cudaMemcpyDeviceToDevice, s) != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"kernel %d (%%s, %%s): the rank's slice: %%s\", kernel_table[%d].name,\n"
    "                kernel_table[%d].where, cudaGetErrorString(cudaGetLastError()));\n"
    "  return 0;\n",
    n->attrs.ranks, ec_elems(x, n->out[0], count, sizeof count), ec_ptr(x, n->out[0], py, sizeof py),
    ec_ptr(x, n->in[0], px, sizeof px), py, x->P, ki, ki, ki);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, out, head, NULL, "&c.d", &body);
  return NNC_OK;
}

/* One thread a row: the loss's rows are few beside the GEMMs around them (a
 * first version: a block a row with a tree sum would read the logits at the
 * copy rate). A target outside the vocabulary writes NaN (the row's loss
 * then is not finite, which the training step refuses). */
nnc_status cu_emit_ce_shard(const ec_ctx *x, int ki, nnc_sb *out, nnc_error *err) {
  (void)err;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const bool grad = n->op == NNC_OP_CE_SHARD_GRAD;
  char rows[EC_EXPR], R[EC_EXPR], head[160], p[5][256];
  ce_sizes(x, n, rows, R, sizeof rows);
  const char *lt = cu_stype(x, n->in[0]), *st = cu_stype(x, n->out[0]), *ft = cu_stype(x, n->in[2]);
  const char *dt = grad ? cu_stype(x, n->in[3]) : "float";
  const long long V = (long long)n->attrs.vocab;
  nnc_sb_printf(out,
    "/* kernel %d: %s (%d ranks) */\n"
    "__global__ void k%d_rows(const %s *x, const int32_t *t, const %s *shift, const %s *ds, %s *y,\n"
    "                         long long rows, long long R, long long first) {\n"
    "  NNC_LOOP(r, rows) {\n"
    "    const %s *xr = x + r * R;\n"
    "    const float m = nnc_ld(shift[r]);\n"
    "    /* this rank's classes [first, first + R), those below the vocabulary's %lld real */\n"
    "    const long long tt = t[r], local = tt - first, valid = %lldLL - first < R ? %lldLL - first : R;\n"
    "    const bool bad = tt < 0 || tt >= %lldLL;\n",
    ki, ce_what(n), n->attrs.ranks, ki, lt, ft, dt, st, lt, V, V, V, V);
  if (grad)
    nnc_sb_printf(out,
      "    const float d0 = nnc_ld(ds[2 * r]), d1 = nnc_ld(ds[2 * r + 1]);\n"
      "    for (long long v = 0; v < R; v++)\n"
      "      nnc_st(&y[r * R + v], bad ? NAN : v < valid ? d0 * expf(nnc_ld(xr[v]) - m) + (v == local ? d1 : 0.0f) : 0.0f);\n");
  else
    nnc_sb_printf(out,
      "    (void)ds;\n"
      "    float sum = 0;\n"
      "    for (long long v = 0; v < valid; v++) sum += expf(nnc_ld(xr[v]) - m);\n"
      "    nnc_st(&y[2 * r], bad ? NAN : sum);\n"
      "    nnc_st(&y[2 * r + 1], local >= 0 && local < R ? nnc_ld(xr[local]) - m : 0.0f);\n");
  nnc_sb_printf(out, "  }\n}\n\n");
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body,
    "  const long long rows = %s, R = %s;\n"
    "  k%d_rows<<<nnc_loop_blocks(rows), NNC_LOOP_THREADS, 0, s>>>(%s, %s, %s, %s, %s, rows, R, (long long)c.rank * R);\n"
    "  return launched(m, %d) ? %s_E_DEVICE : 0;\n",
    rows, R, ki, ec_ptr(x, n->in[0], p[0], sizeof p[0]), ec_ptr(x, n->in[1], p[1], sizeof p[1]),
    ec_ptr(x, n->in[2], p[2], sizeof p[2]), grad ? ec_ptr(x, n->in[3], p[3], sizeof p[3]) : "nullptr",
    ec_ptr(x, n->out[0], p[4], sizeof p[4]), ki, x->P);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, out, head, NULL, "&c.d", &body);
  return NNC_OK;
}
