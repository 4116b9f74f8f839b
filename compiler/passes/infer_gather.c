/* compiler/passes/infer_gather.c — embedding lookup and the cross-entropy
 * loss: the two ops that read i32 indices. */
#include "infer_util.h"

nnc_status nnc_infer_embedding(const nnc_infer_ctx *c) {
  const nnc_tensor *table = nnc_in(c, 0), *ids = nnc_in(c, 1);
  char d1[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "table");
  if (st) return st;
  if (table->rank != 2)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a table of rank 2 [rows, cols], found %s",
                          nnc_infer_desc(c, table, d1));
  if (ids->dtype != NNC_I32)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected i32 ids, found %s %s", ids->name, nnc_dtype_name(ids->dtype));
  if (ids->rank >= NNC_MAX_RANK)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected ids of rank < %d (the output adds a dim), found %s",
                          NNC_MAX_RANK, nnc_infer_desc(c, ids, d1));
  /* a vocabulary split: each rank's rows, all ranks together at least the vocabulary */
  const nnc_attrs *a = &c->n->attrs;
  if (a->ranks > 1 && (!nnc_dim_is_const(table->shape[0]) || a->vocab < 1 || table->shape[0].k * a->ranks < a->vocab))
    return nnc_infer_fail(c, NNC_E_INTERNAL, "expected a table of constant rows that %d ranks' slices cover a "
                          "vocabulary of %lld, found %s", a->ranks, (long long)a->vocab, nnc_infer_desc(c, table, d1));
  nnc_dim out[NNC_MAX_RANK];
  for (int i = 0; i < ids->rank; i++) out[i] = ids->shape[i];
  out[ids->rank] = table->shape[1];
  nnc_infer_set(c, 0, table->dtype, ids->rank + 1, out);
  return NNC_OK;
}

nnc_status nnc_infer_cross_entropy(const nnc_infer_ctx *c) {
  const nnc_tensor *logits = nnc_in(c, 0), *t = nnc_in(c, 1);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "logits tensor");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 1, "logits");
  if (st) return st;
  if (t->dtype != NNC_I32)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected i32 targets, found %s %s", t->name, nnc_dtype_name(t->dtype));
  bool ok = t->rank == logits->rank - 1;
  for (int i = 0; ok && i < t->rank; i++) ok = nnc_dim_eq(t->shape[i], logits->shape[i]);
  if (!ok)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected targets %s for logits %s, found %s",
                          nnc_infer_shape(c, logits->rank - 1, logits->shape, d1),
                          nnc_infer_desc(c, logits, d2), nnc_infer_desc(c, t, d3));
  nnc_infer_set(c, 0, NNC_F32, 0, NULL);
  return NNC_OK;
}
