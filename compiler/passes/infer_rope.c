/* compiler/passes/infer_rope.c — rope: the rotary position embedding turns
 * pairs of the last axis in place, so the output is x's shape. What can go
 * wrong is the rotated width (even, at most the last dim, which must be a
 * constant) and the positions (i32, [T] or [B, T] for x's time axis and
 * first axis). */
#include "infer_util.h"

nnc_status nnc_infer_rope(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  const nnc_attrs *a = &c->n->attrs;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 2, "an input");
  if (!st) st = nnc_infer_want_axis(c, 0, a->axis);
  if (st) return st;
  nnc_dim D = x->shape[x->rank - 1];
  if (!nnc_dim_is_const(D))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a constant last dim (the head size), found %s",
                          nnc_infer_desc(c, x, d1));
  if (a->axis == x->rank - 1)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected the time axis before the last (rotated) one, found axis %d of %s",
                          a->axis + 1, nnc_infer_desc(c, x, d1));
  if (a->rot_dims < 2 || a->rot_dims % 2 || a->rot_dims > D.k)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected dims even, >= 2 and at most the last dim %lld of %s, found %d",
                          (long long)D.k, nnc_infer_desc(c, x, d1), a->rot_dims);
  if (!(a->scalar > 0))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a base > 0, found %g", a->scalar);
  if (c->n->nin > 1) {
    const nnc_tensor *p = nnc_in(c, 1);
    nnc_dim T = x->shape[a->axis];
    bool ok = p->dtype == NNC_I32 &&
              ((p->rank == 1 && nnc_dim_eq(p->shape[0], T)) ||
               (p->rank == 2 && a->axis > 0 && nnc_dim_eq(p->shape[0], x->shape[0]) && nnc_dim_eq(p->shape[1], T)));
    if (!ok) {
      char t[NNC_DESC_LEN], b[NNC_DESC_LEN];
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected positions i32[%s] or i32[%s,%s] for %s (time axis %d), found %s",
                            nnc_infer_dim(c, T, t), nnc_infer_dim(c, x->shape[0], b), t, nnc_infer_desc(c, x, d1),
                            a->axis + 1, nnc_infer_desc(c, p, d2));
    }
  }
  nnc_infer_set(c, 0, x->dtype, x->rank, x->shape);
  return NNC_OK;
}
