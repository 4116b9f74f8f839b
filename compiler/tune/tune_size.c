/* compiler/tune/tune_size.c — a kernel's problem sizes at the symbols'
 * maxima, as every family's rules read them. */
#include <stdio.h>

#include "tune_rules.h"

int64_t nnc_tune_max_dim(const nnc_graph *g, nnc_dim d) {
  int64_t v = d.k;
  for (int i = 0; i < d.nsym; i++) v *= g->syms[d.sym[i]].max;
  return v;
}

static int64_t last_dim(const nnc_graph *g, const nnc_tensor *t, int from_end) {
  return t->rank >= from_end ? nnc_tune_max_dim(g, t->shape[t->rank - from_end]) : 1;
}

nnc_gemm_size nnc_tune_gemm_size(const nnc_schedule *s, const nnc_kernel *k) {
  const nnc_graph *g = s->g;
  const nnc_gemm_desc *d = &k->d.gemm;
  const nnc_tensor *out = &g->tensors[d->out], *a = &g->tensors[d->a];
  nnc_gemm_size z = {1, 0, last_dim(g, out, 1), last_dim(g, a, d->a_trans ? 2 : 1)};
  int64_t elems = nnc_tensor_max_elems(g, out);
  /* a matmul runs one M x N product per batch item (B strided or shared);
   * a linear folds its leading dims into M */
  bool batched = k->nnodes > 0 && g->nodes[k->nodes[0]].op == NNC_OP_MATMUL && !d->b_trans && out->rank > 2;
  if (batched) {
    z.m = last_dim(g, out, 2);
    z.batch = z.m > 0 && z.n > 0 ? elems / (z.m * z.n) : 0;
  } else {
    z.m = z.n ? elems / z.n : 0;
  }
  return z;
}

nnc_attn_size nnc_tune_attn_size(const nnc_schedule *s, const nnc_kernel *k) {
  const nnc_graph *g = s->g;
  const nnc_attention_desc *d = &k->d.attn;
  const nnc_tensor *q = &g->tensors[d->q], *kt = &g->tensors[d->k], *v = &g->tensors[d->v];
  nnc_attn_size z = {0, last_dim(g, q, 2), last_dim(g, kt, 2), last_dim(g, q, 1), last_dim(g, v, 1)};
  z.heads = z.t > 0 && z.d > 0 ? nnc_tensor_max_elems(g, q) / (z.t * z.d) : 0;
  return z;
}

nnc_rows_size nnc_tune_rows_size(const nnc_schedule *s, const nnc_kernel *k) {
  const nnc_graph *g = s->g;
  int t = k->nout > 0 ? k->out[0] : -1;
  if (t < 0 && k->nnodes > 0) t = g->nodes[k->nodes[k->nnodes - 1]].out[0];
  if (t < 0) return (nnc_rows_size){0, 0};
  const nnc_tensor *x = &g->tensors[t];
  /* a row kernel's rows are its input's (a loss or a reduction writes fewer) */
  if ((k->kind == NNC_KERNEL_LOSS || k->kind == NNC_KERNEL_REDUCE) && k->nnodes > 0)
    x = &g->tensors[g->nodes[k->nodes[0]].in[0]];
  int64_t cols = last_dim(g, x, 1), elems = nnc_tensor_max_elems(g, x);
  return (nnc_rows_size){cols ? elems / cols : 0, cols};
}

bool nnc_tune_scan_size(const nnc_schedule *s, const nnc_kernel *k, nnc_gemm_size *z, int64_t *steps) {
  const nnc_graph *g = s->g;
  int64_t kd;
  const nnc_node *n = nnc_kernel_scan(g, k, NULL, &kd);
  if (!n) return false;
  const nnc_tensor *xw = &g->tensors[n->in[0]], *w_hh = &g->tensors[n->in[1]];
  z->batch = 1;
  z->m = nnc_tune_max_dim(g, xw->shape[0]);
  z->n = nnc_tune_max_dim(g, w_hh->shape[0]);
  z->k = kd;
  *steps = nnc_tune_max_dim(g, xw->shape[1]);
  return true;
}

const char *nnc_tune_batch_note(int64_t batch, char *buf, size_t n) {
  if (batch > 1) snprintf(buf, n, " batch=%lld", (long long)batch);
  else if (n) buf[0] = 0;
  return buf;
}
