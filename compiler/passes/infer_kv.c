/* compiler/passes/infer_kv.c — kv_append: this call's rows x [..., T, D]
 * go into a cache [..., C, D] (a state tensor) that then holds the S rows
 * the call attends to. The cache and x agree but for the time axis; S is a
 * symbol whose maximum fits the cache's capacity C and is at least T's (a
 * call with S < T is refused when it starts). */
#include "infer_util.h"

nnc_status nnc_infer_kv_append(const nnc_infer_ctx *c) {
  const nnc_tensor *cache = nnc_in(c, 0), *x = nnc_in(c, 1);
  nnc_dim S = c->n->attrs.stop;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  if (cache->kind != NNC_TENSOR_STATE)
    return nnc_infer_fail(c, NNC_E_MODEL, "expected a state tensor as the cache, found %s", nnc_infer_desc(c, cache, d1));
  nnc_status st = nnc_infer_want_float(c, 1, "input");
  if (!st) st = nnc_infer_want_rank_min(c, 1, 2, "an input");
  if (!st) st = nnc_infer_want_same_dtype(c, 0, 1);
  if (st) return st;
  int r = x->rank;
  bool agree = cache->rank == r && nnc_dim_is_const(cache->shape[r - 2]);
  for (int i = 0; agree && i < r; i++) agree = i == r - 2 || nnc_dim_eq(cache->shape[i], x->shape[i]);
  if (!agree)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected the cache to be x's shape but for a constant capacity at dim %d, "
                          "found cache %s and x %s", r - 1, nnc_infer_desc(c, cache, d1), nnc_infer_desc(c, x, d2));
  if (S.nsym != 1 || S.k != 1)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a symbolic dim for S (the keys after this call), found %s",
                          nnc_infer_dim(c, S, d1));
  int64_t smax = nnc_infer_dim_max(c, S), cap = cache->shape[r - 2].k, tmax = nnc_infer_dim_max(c, x->shape[r - 2]);
  if (smax > cap)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected S's maximum (%lld) to fit the cache's %lld rows, found %s",
                          (long long)smax, (long long)cap, nnc_infer_desc(c, cache, d1));
  if (tmax > smax)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected x's rows (at most %lld) to fit in S (at most %lld), found %s",
                          (long long)tmax, (long long)smax, nnc_infer_desc(c, x, d1));
  nnc_dim shape[NNC_MAX_RANK];
  for (int i = 0; i < r; i++) shape[i] = x->shape[i];
  shape[r - 2] = S;
  nnc_infer_set(c, 0, x->dtype, r, shape);
  return NNC_OK;
}
