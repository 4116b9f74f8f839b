/* compiler/passes/infer_row.c — softmax and the norms: row operations that
 * keep their input's shape. */
#include "infer_util.h"

/* gamma or beta (input i) must be a float [C] for x's last dim C. */
static nnc_status want_vector(const nnc_infer_ctx *c, int i, const char *role) {
  const nnc_tensor *x = nnc_in(c, 0), *v = nnc_in(c, i);
  if (v->rank == 1 && nnc_dim_eq(v->shape[0], x->shape[x->rank - 1]) && nnc_dtype_is_float(v->dtype))
    return NNC_OK;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN];
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected %s as a float [%s] for %s, found %s", role,
                        nnc_infer_dim(c, x->shape[x->rank - 1], d1), nnc_infer_desc(c, x, d2),
                        nnc_infer_desc(c, v, d3));
}

/* in: x, gamma, dy (x's shape); out: dx, dgamma and (layernorm) dbeta */
static nnc_status infer_norm_grad(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0), *gamma = nnc_in(c, 1);
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (!st) st = nnc_infer_want_rank_min(c, 0, 1, "an input");
  if (!st) st = want_vector(c, 1, "gamma");
  if (!st && !(c->n->attrs.eps > 0))
    st = nnc_infer_fail(c, NNC_E_MODEL, "expected eps > 0, found %g", c->n->attrs.eps);
  if (st) return st;
  for (int k = 2; k < c->n->nin; k++) {   /* dy, and the residual's gradient when there is one */
    const nnc_tensor *g = nnc_in(c, k);
    bool same = g->rank == x->rank && g->dtype == x->dtype;
    for (int i = 0; same && i < x->rank; i++) same = nnc_dim_eq(g->shape[i], x->shape[i]);
    if (!same) {
      char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected a gradient like the input %s, found %s", nnc_infer_desc(c, x, d1),
                            nnc_infer_desc(c, g, d2));
    }
  }
  nnc_infer_set(c, 0, x->dtype, x->rank, x->shape);
  for (int i = 1; i < c->n->nout; i++) nnc_infer_set(c, i, gamma->dtype, gamma->rank, gamma->shape);
  return NNC_OK;
}

nnc_status nnc_infer_row(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  nnc_status st = nnc_infer_want_float(c, 0, "input");
  if (st) return st;
  if (c->n->op == NNC_OP_LAYERNORM_GRAD || c->n->op == NNC_OP_RMSNORM_GRAD) return infer_norm_grad(c);
  if (c->n->op == NNC_OP_SOFTMAX) {
    st = nnc_infer_want_axis(c, 0, c->n->attrs.axis);
  } else {
    st = nnc_infer_want_rank_min(c, 0, 1, "an input");
    if (!st) st = want_vector(c, 1, "gamma");
    if (!st && c->n->op == NNC_OP_LAYERNORM) st = want_vector(c, 2, "beta");
    if (!st && !(c->n->attrs.eps > 0))
      st = nnc_infer_fail(c, NNC_E_MODEL, "expected eps > 0, found %g", c->n->attrs.eps);
  }
  if (st) return st;
  nnc_infer_set(c, 0, x->dtype, x->rank, x->shape);
  return NNC_OK;
}
