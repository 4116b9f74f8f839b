/* compiler/passes/infer_collective.c — the collectives of a parallel plan:
 * all_reduce sums a float tensor over the plan's ranks; its output is its
 * input's shape. */
#include "infer_util.h"

nnc_status nnc_infer_all_reduce(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (st) return st;
  if (c->n->attrs.ranks < 2)
    return nnc_infer_fail(c, NNC_E_INTERNAL, "expected an all_reduce over 2 or more ranks, found %d", c->n->attrs.ranks);
  nnc_infer_set(c, 0, x->dtype, x->rank, x->shape);
  return NNC_OK;
}
