/* compiler/passes/infer_grad.c — the ops only the autodiff pass writes:
 * expand, pad, the embedding's scatter-add and the cross-entropy gradient.
 * expand, pad and embedding_grad take their output shape from the output
 * tensor (set by the caller, as reshape's is), and check it here. */
#include "infer_util.h"

static bool shapes_equal(int ra, const nnc_dim *a, int rb, const nnc_dim *b) {
  if (ra != rb) return false;
  for (int i = 0; i < ra; i++)
    if (!nnc_dim_eq(a[i], b[i])) return false;
  return true;
}

static nnc_status want_out_rank(const nnc_infer_ctx *c) {
  const nnc_tensor *o = nnc_out(c, 0);
  if (o->rank >= 0 && o->rank <= NNC_MAX_RANK) return NNC_OK;
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected an output shape of rank 0 to %d, found rank %d", NNC_MAX_RANK,
                        o->rank);
}

nnc_status nnc_infer_expand(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0), *o = nnc_out(c, 0);
  nnc_status st = want_out_rank(c);
  if (!st) st = nnc_infer_want_float(c, 0, "input");
  if (st) return st;
  nnc_dim b[NNC_MAX_RANK];
  int rank, bad;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  if (!nnc_infer_broadcast(x->rank, x->shape, o->rank, o->shape, &rank, b, &bad) ||
      !shapes_equal(rank, b, o->rank, o->shape))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a shape that %s broadcasts to, found %s",
                          nnc_infer_desc(c, x, d1), nnc_infer_shape(c, o->rank, o->shape, d2));
  nnc_infer_set(c, 0, x->dtype, o->rank, o->shape);
  return NNC_OK;
}

nnc_status nnc_infer_pad(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0), *o = nnc_out(c, 0);
  int axis = c->n->attrs.axis;
  nnc_status st = want_out_rank(c);
  if (!st) st = nnc_infer_want_axis(c, 0, axis);
  if (st) return st;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  bool ok = o->rank == x->rank;
  for (int i = 0; ok && i < x->rank; i++)
    if (i != axis) ok = nnc_dim_eq(x->shape[i], o->shape[i]);
  /* start + len(x) <= len(out) at the symbols' maxima; the slice it undoes
   * was checked the same way */
  if (ok) {
    int64_t start = nnc_infer_dim_max(c, c->n->attrs.start), len = nnc_infer_dim_max(c, x->shape[axis]);
    ok = c->n->attrs.start.k >= 0 && start <= nnc_infer_dim_max(c, o->shape[axis]) - len;
  }
  if (!ok)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected an output shape that holds %s along axis %d from %s, found %s",
                          nnc_infer_desc(c, x, d1), axis + 1, nnc_infer_dim(c, c->n->attrs.start, d2),
                          nnc_infer_shape(c, o->rank, o->shape, d3));
  nnc_infer_set(c, 0, x->dtype, o->rank, o->shape);
  return NNC_OK;
}

nnc_status nnc_infer_embedding_grad(const nnc_infer_ctx *c) {
  const nnc_tensor *dy = nnc_in(c, 0), *ids = nnc_in(c, 1), *o = nnc_out(c, 0);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "gradient");
  if (st) return st;
  if (ids->dtype != NNC_I32)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected i32 ids, found %s %s", ids->name, nnc_dtype_name(ids->dtype));
  if (dy->rank != ids->rank + 1 || !shapes_equal(ids->rank, ids->shape, ids->rank, dy->shape))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a gradient of the ids' shape and one more dim, found %s for %s",
                          nnc_infer_desc(c, dy, d1), nnc_infer_desc(c, ids, d2));
  if (o->rank != 2 || !nnc_dim_is_const(o->shape[0]) || !nnc_dim_eq(o->shape[1], dy->shape[dy->rank - 1]))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a table gradient [rows, %s], found %s",
                          nnc_infer_dim(c, dy->shape[dy->rank - 1], d1),
                          nnc_infer_shape(c, o->rank, o->shape, d2));
  nnc_infer_set(c, 0, dy->dtype, 2, o->shape);
  return NNC_OK;
}

nnc_status nnc_infer_cross_entropy_grad(const nnc_infer_ctx *c) {
  const nnc_tensor *logits = nnc_in(c, 0), *t = nnc_in(c, 1), *dl = nnc_in(c, 2);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "logits tensor");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 1, "logits");
  if (!st) st = nnc_infer_want_float(c, 2, "loss gradient");
  if (st) return st;
  bool ok = t->dtype == NNC_I32 && t->rank == logits->rank - 1;
  for (int i = 0; ok && i < t->rank; i++) ok = nnc_dim_eq(t->shape[i], logits->shape[i]);
  if (!ok)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected i32 targets for logits %s, found %s",
                          nnc_infer_desc(c, logits, d1), nnc_infer_desc(c, t, d2));
  if (dl->rank != 0)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a scalar loss gradient, found %s", nnc_infer_desc(c, dl, d1));
  nnc_infer_set(c, 0, logits->dtype, logits->rank, logits->shape);
  return NNC_OK;
}
