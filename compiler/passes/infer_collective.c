/* compiler/passes/infer_collective.c — the collectives of a parallel plan:
 * all_reduce sums a float tensor over the plan's ranks; its output is its
 * input's shape. all_gather stacks every rank's tensor: [ranks, ...x]. */
#include <string.h>

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

/* rank_slice: [ranks, ...x] -> [...x], the rank's own entry (all_gather's
 * gradient). */
nnc_status nnc_infer_rank_slice(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  char d[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (st) return st;
  if (c->n->attrs.ranks < 2 || x->rank < 1 || !nnc_dim_eq_const(x->shape[0], c->n->attrs.ranks))
    return nnc_infer_fail(c, NNC_E_INTERNAL, "expected an input [%d, ...] (one entry a rank), found %s",
                          c->n->attrs.ranks, nnc_infer_desc(c, x, d));
  nnc_infer_set(c, 0, x->dtype, x->rank - 1, x->shape + 1);
  return NNC_OK;
}

/* cross_entropy_shard(logits [..., R], targets i32 [...], shift [...]) ->
 * [..., 2]; cross_entropy_shard_grad(logits, targets, shift, dstats [..., 2])
 * -> logits' shape. The rows of every operand are the targets'. */
static nnc_status want_rows(const nnc_infer_ctx *c, int i, int extra, nnc_dim last) {
  const nnc_tensor *l = nnc_in(c, 0), *x = nnc_in(c, i);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  bool ok = x->rank == l->rank - 1 + extra;
  for (int k = 0; ok && k < l->rank - 1; k++) ok = nnc_dim_eq(x->shape[k], l->shape[k]);
  if (ok && extra) ok = nnc_dim_eq(x->shape[x->rank - 1], last);
  if (ok) return NNC_OK;
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected input %d with the rows of logits %s%s, found %s", i + 1,
                        nnc_infer_desc(c, l, d1), extra ? " and a last dim of 2" : "", nnc_infer_desc(c, x, d2));
}

nnc_status nnc_infer_ce_shard(const nnc_infer_ctx *c) {
  const nnc_tensor *l = nnc_in(c, 0);
  bool grad = c->n->op == NNC_OP_CE_SHARD_GRAD;
  nnc_status st = nnc_infer_want_float(c, 0, "logits tensor");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 1, "logits");
  if (!st) st = nnc_infer_want_float(c, 2, "shift");
  if (!st && grad) st = nnc_infer_want_float(c, 3, "gradient");
  if (st) return st;
  if (nnc_in(c, 1)->dtype != NNC_I32)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected i32 targets, found %s %s", nnc_in(c, 1)->name,
                          nnc_dtype_name(nnc_in(c, 1)->dtype));
  if (c->n->attrs.ranks < 2 || c->n->attrs.vocab < 1)
    return nnc_infer_fail(c, NNC_E_INTERNAL, "expected a vocabulary split over 2 or more ranks, found %d ranks of %lld",
                          c->n->attrs.ranks, (long long)c->n->attrs.vocab);
  for (int i = 1; !st && i < c->n->nin; i++) st = want_rows(c, i, i == 3, nnc_dim_const(2));
  if (st) return st;
  if (grad) {
    nnc_infer_set(c, 0, l->dtype, l->rank, l->shape);
    return NNC_OK;
  }
  nnc_dim out[NNC_MAX_RANK];
  memcpy(out, l->shape, sizeof out);
  out[l->rank - 1] = nnc_dim_const(2);
  nnc_infer_set(c, 0, NNC_F32, l->rank, out);
  return NNC_OK;
}
