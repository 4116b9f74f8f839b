/* compiler/passes/infer_elementwise.c — unary, scalar, binary and mask ops:
 * the output has the input's shape (broadcast for binary ops). */
#include "infer_util.h"

nnc_status nnc_infer_unary(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  nnc_dtype to = x->dtype;
  if (c->n->op == NNC_OP_CAST) {
    to = c->n->attrs.to;
    if ((int)to < 0 || to >= NNC_DTYPE_COUNT)
      return nnc_infer_fail(c, NNC_E_MODEL, "expected a dtype to cast to, found dtype id %d", (int)to);
  } else {
    nnc_status st = nnc_infer_want_float(c, 0, "input");
    if (st) return st;
  }
  nnc_infer_set(c, 0, to, x->rank, x->shape);
  return NNC_OK;
}

nnc_status nnc_infer_binary(const nnc_infer_ctx *c) {
  const nnc_tensor *a = nnc_in(c, 0), *b = nnc_in(c, 1);
  nnc_status st = nnc_infer_want_same_dtype(c, 0, 1);
  if (st) return st;
  nnc_dim out[NNC_MAX_RANK];
  int rank, bad;
  if (!nnc_infer_broadcast(a->rank, a->shape, b->rank, b->shape, &rank, out, &bad)) {
    char sa[NNC_DESC_LEN], sb[NNC_DESC_LEN], da[NNC_DESC_LEN], db[NNC_DESC_LEN];
    int r = a->rank > b->rank ? a->rank : b->rank;
    int ia = a->rank - 1 - (r - bad), ib = b->rank - 1 - (r - bad);   /* both exist: a missing dim is 1 */
    return nnc_infer_fail(c, NNC_E_SHAPE, "shapes %s and %s do not broadcast (dim %d: %s vs %s)",
                          nnc_infer_shape(c, a->rank, a->shape, sa),
                          nnc_infer_shape(c, b->rank, b->shape, sb), bad,
                          nnc_infer_dim(c, ia >= 0 ? a->shape[ia] : nnc_dim_const(1), da),
                          nnc_infer_dim(c, ib >= 0 ? b->shape[ib] : nnc_dim_const(1), db));
  }
  nnc_infer_set(c, 0, a->dtype, rank, out);
  return NNC_OK;
}

nnc_status nnc_infer_mask(const nnc_infer_ctx *c) {
  const nnc_tensor *s = nnc_in(c, 0);
  nnc_status st = nnc_infer_want_float(c, 0, "scores tensor");
  if (st) return st;
  if (s->rank < 2) {
    char d[NNC_DESC_LEN];
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected scores of rank >= 2 [..., T, S], found %s",
                          nnc_infer_desc(c, s, d));
  }
  if (c->n->op == NNC_OP_PADDING_MASK) {
    const nnc_tensor *m = nnc_in(c, 1);
    char ds[NNC_DESC_LEN], dm[NNC_DESC_LEN];
    if (m->rank != 2 || !nnc_dim_eq(m->shape[0], s->shape[0]) ||
        !nnc_dim_eq(m->shape[1], s->shape[s->rank - 1])) {
      char b[NNC_DESC_LEN], sl[NNC_DESC_LEN];
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected a mask [%s,%s] for scores %s, found %s",
                            nnc_infer_dim(c, s->shape[0], b), nnc_infer_dim(c, s->shape[s->rank - 1], sl),
                            nnc_infer_named_shape(c, s, ds), nnc_infer_named_shape(c, m, dm));
    }
  }
  nnc_infer_set(c, 0, s->dtype, s->rank, s->shape);
  return NNC_OK;
}
