/* compiler/passes/infer_move.c — transpose and slice: copies that move or
 * select elements of one tensor. */
#include <stdio.h>

#include "infer_util.h"

nnc_status nnc_infer_transpose(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  const int *perm = c->n->attrs.perm;
  bool seen[NNC_MAX_RANK] = {false};
  bool ok = true;
  for (int i = 0; i < x->rank && ok; i++) {
    ok = perm[i] >= 0 && perm[i] < x->rank && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    char list[NNC_DESC_LEN], d[NNC_DESC_LEN];
    size_t used = 0;
    for (int i = 0; i < x->rank && used < sizeof list; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", i ? "," : "", perm[i] + 1);
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a permutation of 1..%d for %s, found {%s}", x->rank,
                          nnc_infer_desc(c, x, d), list);
  }
  nnc_dim out[NNC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) out[i] = x->shape[perm[i]];
  nnc_infer_set(c, 0, x->dtype, x->rank, out);
  return NNC_OK;
}

/* Symbolic bounds are checked at the symbols' maxima (wpe[0:T] with T <= 1024
 * fits a 1024-row table); the output size must still be one exact dim. */
nnc_status nnc_infer_slice(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  int axis = c->n->attrs.axis;
  nnc_dim start = c->n->attrs.start, stop = c->n->attrs.stop;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_axis(c, 0, axis);
  if (st) return st;
  if (start.k < 0)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a start >= 0, found %s", nnc_infer_dim(c, start, d1));
  if (stop.k < 1)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a stop >= 1, found %s", nnc_infer_dim(c, stop, d1));
  nnc_dim size = x->shape[axis];
  int64_t max_stop = nnc_infer_dim_max(c, stop), max_size = nnc_infer_dim_max(c, size);
  if (max_stop > max_size) {
    char up[64] = "";
    if (!nnc_dim_is_const(stop)) snprintf(up, sizeof up, " (up to %lld)", (long long)max_stop);
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a stop of at most %s (axis %d of %s), found %s%s",
                          nnc_infer_dim(c, size, d1), axis + 1, nnc_infer_desc(c, x, d2),
                          nnc_infer_dim(c, stop, d3), up);
  }
  nnc_dim out_dim;
  if (nnc_dim_is_const(start) && nnc_dim_is_const(stop)) {
    if (start.k >= stop.k)
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected start < stop, found start %lld and stop %lld",
                            (long long)start.k, (long long)stop.k);
    out_dim = nnc_dim_const(stop.k - start.k);
  } else if (nnc_dim_eq_const(start, 0)) {
    out_dim = stop;
  } else {
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a start of 0 or constant bounds, found start %s and stop %s",
                          nnc_infer_dim(c, start, d1), nnc_infer_dim(c, stop, d2));
  }
  nnc_dim out[NNC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) out[i] = i == axis ? out_dim : x->shape[i];
  nnc_infer_set(c, 0, x->dtype, x->rank, out);
  return NNC_OK;
}
