/* compiler/passes/infer_attention.c — attention as one op and its gradient
 * (what --train makes of the sdpa pattern, passes/attention_op.c): q
 * [..., T, D], k [..., S, D], v [..., S, Dv] with the same batch dims, an
 * optional [B, S] padding mask; out [..., T, Dv] and the rows' log-sum-exp
 * lse f32 [..., T]. */
#include "infer_util.h"

static bool same_dims(const nnc_tensor *a, const nnc_tensor *b, int n) {
  for (int i = 0; i < n; i++)
    if (!nnc_dim_eq(a->shape[i], b->shape[i])) return false;
  return true;
}

/* The operand checks both ops share: q, k, v (and the mask at input mi, -1
 * when absent) agree. */
static nnc_status check_qkv(const nnc_infer_ctx *c, int mi) {
  const nnc_tensor *q = nnc_in(c, 0), *k = nnc_in(c, 1), *v = nnc_in(c, 2);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  for (int i = 0; i < 3; i++) {
    nnc_status st = nnc_infer_want_float(c, i, i == 0 ? "q" : i == 1 ? "k" : "v");
    if (!st) st = nnc_infer_want_rank_min(c, i, 2, i == 0 ? "q" : i == 1 ? "k" : "v");
    if (!st && i > 0) st = nnc_infer_want_same_dtype(c, 0, i);
    if (st) return st;
  }
  int r = q->rank;
  if (k->rank != r || v->rank != r || !same_dims(q, k, r - 2) || !same_dims(q, v, r - 2) ||
      !nnc_dim_eq(q->shape[r - 1], k->shape[r - 1]) || !nnc_dim_eq(k->shape[r - 2], v->shape[r - 2]))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected q [..., T, D], k [..., S, D] and v [..., S, Dv] with the same "
                          "batch dims, found %s, %s and %s", nnc_infer_named_shape(c, q, d1),
                          nnc_infer_named_shape(c, k, d2), nnc_infer_named_shape(c, v, d3));
  if (mi < 0) return NNC_OK;
  const nnc_tensor *m = nnc_in(c, mi);
  char d4[NNC_DESC_LEN];
  if (r < 3 || m->rank != 2 || !nnc_dim_eq(m->shape[0], q->shape[0]) || !nnc_dim_eq(m->shape[1], k->shape[r - 2]))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a mask [%s,%s] for q %s, found %s",
                          r < 3 ? "B" : nnc_infer_dim(c, q->shape[0], d1),
                          nnc_infer_dim(c, k->shape[r - 2], d2), nnc_infer_named_shape(c, q, d3),
                          nnc_infer_desc(c, m, d4));
  return NNC_OK;
}

nnc_status nnc_infer_attention(const nnc_infer_ctx *c) {
  nnc_status st = check_qkv(c, c->n->nin == 4 ? 3 : -1);
  if (st) return st;
  const nnc_tensor *q = nnc_in(c, 0), *v = nnc_in(c, 2);
  nnc_dim shape[NNC_MAX_RANK];
  int r = q->rank;
  for (int i = 0; i < r - 1; i++) shape[i] = q->shape[i];
  shape[r - 1] = v->shape[r - 1];
  nnc_infer_set(c, 0, q->dtype, r, shape);
  nnc_infer_set(c, 1, NNC_F32, r - 1, shape);
  return NNC_OK;
}

/* in: q, k, v, o, lse, do, [mask] */
nnc_status nnc_infer_attention_grad(const nnc_infer_ctx *c) {
  nnc_status st = check_qkv(c, c->n->nin == 7 ? 6 : -1);
  if (st) return st;
  const nnc_tensor *q = nnc_in(c, 0), *v = nnc_in(c, 2), *o = nnc_in(c, 3), *lse = nnc_in(c, 4);
  const nnc_tensor *dout = nnc_in(c, 5);
  int r = q->rank;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  bool ok = o->rank == r && dout->rank == r && same_dims(q, o, r - 1) && same_dims(o, dout, r) &&
            nnc_dim_eq(o->shape[r - 1], v->shape[r - 1]) && o->dtype == q->dtype && dout->dtype == q->dtype &&
            lse->rank == r - 1 && same_dims(q, lse, r - 1) && lse->dtype == NNC_F32;
  if (!ok)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected the attention's output, its gradient (q's batch dims, T and v's "
                          "last dim) and f32 row statistics, found %s, %s and %s", nnc_infer_desc(c, o, d1),
                          nnc_infer_desc(c, dout, d2), nnc_infer_desc(c, lse, d3));
  for (int i = 0; i < 3; i++) {
    const nnc_tensor *x = nnc_in(c, i);
    nnc_infer_set(c, i, x->dtype, x->rank, x->shape);
  }
  return NNC_OK;
}
