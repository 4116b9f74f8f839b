/* compiler/passes/infer_matmul.c — linear and matmul. */
#include "infer_util.h"

nnc_status nnc_infer_linear(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0), *w = nnc_in(c, 1);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 1, "an input");
  if (st) return st;
  if (w->rank != 2)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a weight of rank 2, found %s", nnc_infer_desc(c, w, d1));
  st = nnc_infer_want_same_dtype(c, 0, 1);
  if (st) return st;
  bool in_out = c->n->attrs.weight_in_out;
  nnc_dim k = w->shape[in_out ? 0 : 1], n = w->shape[in_out ? 1 : 0];
  nnc_dim xk = x->shape[x->rank - 1];
  if (!nnc_dim_eq(xk, k))
    return nnc_infer_fail(c, NNC_E_SHAPE, "input has %s features, weight %s expects %s",
                          nnc_infer_dim(c, xk, d1), w->name, nnc_infer_dim(c, k, d2));
  if (c->n->nin == 3) {
    const nnc_tensor *b = nnc_in(c, 2);
    if (b->rank != 1 || !nnc_dim_eq(b->shape[0], n))
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected a bias [%s] for weight %s, found %s",
                            nnc_infer_dim(c, n, d1), nnc_infer_desc(c, w, d2), nnc_infer_desc(c, b, d3));
    st = nnc_infer_want_same_dtype(c, 0, 2);
    if (st) return st;
  }
  nnc_dim out[NNC_MAX_RANK];
  for (int i = 0; i < x->rank - 1; i++) out[i] = x->shape[i];
  out[x->rank - 1] = n;
  nnc_infer_set(c, 0, x->dtype, x->rank, out);
  return NNC_OK;
}

nnc_status nnc_infer_matmul(const nnc_infer_ctx *c) {
  const nnc_tensor *a = nnc_in(c, 0), *b = nnc_in(c, 1);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 2, "inputs");
  if (!st) st = nnc_infer_want_rank_min(c, 1, 2, "inputs");
  if (!st) st = nnc_infer_want_same_dtype(c, 0, 1);
  if (st) return st;
  nnc_dim m = a->shape[a->rank - 2], ka = a->shape[a->rank - 1];
  nnc_dim kb = b->shape[b->rank - 2], n = b->shape[b->rank - 1];
  if (!nnc_dim_eq(ka, kb)) {
    char s1[NNC_DESC_LEN], s2[NNC_DESC_LEN];
    return nnc_infer_fail(c, NNC_E_SHAPE, "inner dims differ: %s is %s, %s is %s (%s vs %s)", a->name,
                          nnc_infer_shape(c, a->rank, a->shape, s1), b->name,
                          nnc_infer_shape(c, b->rank, b->shape, s2), nnc_infer_dim(c, ka, d1),
                          nnc_infer_dim(c, kb, d2));
  }
  nnc_dim out[NNC_MAX_RANK];
  int rank, bad;
  if (!nnc_infer_broadcast(a->rank - 2, a->shape, b->rank - 2, b->shape, &rank, out, &bad)) {
    char s1[NNC_DESC_LEN], s2[NNC_DESC_LEN];
    int r = a->rank > b->rank ? a->rank - 2 : b->rank - 2;
    int ia = a->rank - 3 - (r - bad), ib = b->rank - 3 - (r - bad);   /* both exist: a missing dim is 1 */
    return nnc_infer_fail(c, NNC_E_SHAPE, "batch dims of %s and %s do not broadcast (dim %d: %s vs %s)",
                          nnc_infer_named_shape(c, a, s1), nnc_infer_named_shape(c, b, s2), bad,
                          nnc_infer_dim(c, ia >= 0 ? a->shape[ia] : nnc_dim_const(1), d1),
                          nnc_infer_dim(c, ib >= 0 ? b->shape[ib] : nnc_dim_const(1), d2));
  }
  out[rank] = m;
  out[rank + 1] = n;
  nnc_infer_set(c, 0, a->dtype, rank + 2, out);
  return NNC_OK;
}
