/* compiler/passes/infer_reduce.c — sum, mean, max over one axis. */
#include "infer_util.h"

nnc_status nnc_infer_reduce(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  int axis = c->n->attrs.axis;
  nnc_status st = nnc_infer_want_axis(c, 0, axis);
  if (st) return st;
  nnc_dim out[NNC_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (i != axis) out[rank++] = x->shape[i];
    else if (c->n->attrs.keepdim) out[rank++] = nnc_dim_const(1);
  }
  nnc_infer_set(c, 0, x->dtype, rank, out);
  return NNC_OK;
}
