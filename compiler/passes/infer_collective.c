/* compiler/passes/infer_collective.c — the collectives of a parallel plan:
 * all_reduce sums a float tensor over the plan's ranks; its output is its
 * input's shape. all_gather stacks every rank's tensor: [ranks, ...x]. */
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

nnc_status nnc_infer_all_gather(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  char d[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (st) return st;
  if (c->n->attrs.ranks < 2)
    return nnc_infer_fail(c, NNC_E_INTERNAL, "expected an all_gather over 2 or more ranks, found %d", c->n->attrs.ranks);
  if (x->rank >= NNC_MAX_RANK)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected an input of rank < %d (the output adds the ranks' dim), found %s",
                          NNC_MAX_RANK, nnc_infer_desc(c, x, d));
  nnc_dim out[NNC_MAX_RANK];
  out[0] = nnc_dim_const(c->n->attrs.ranks);
  for (int i = 0; i < x->rank; i++) out[i + 1] = x->shape[i];
  nnc_infer_set(c, 0, x->dtype, x->rank + 1, out);
  return NNC_OK;
}
