/* compiler/passes/infer_reshape.c — reshape: the front-end writes the wanted
 * shape into the output tensor, with at most one dim of -1 to infer. The
 * element counts are compared symbolically (B*T*768 == (B*T)*768). */
#include "infer_util.h"

static bool is_infer_marker(nnc_dim d) { return d.k == -1 && d.nsym == 0; }

/* The product of shape's dims except dim `skip` (-1: none). */
static bool product(int rank, const nnc_dim *shape, int skip, nnc_dim *out) {
  nnc_dim p = nnc_dim_const(1);
  for (int i = 0; i < rank; i++)
    if (i != skip && !nnc_dim_mul(p, shape[i], &p)) return false;
  *out = p;
  return true;
}

nnc_status nnc_infer_reshape(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  nnc_tensor *o = nnc_out(c, 0);
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN], d4[NNC_DESC_LEN];
  if (o->rank < 0 || o->rank > NNC_MAX_RANK)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a shape of rank 0 to %d, found rank %d", NNC_MAX_RANK,
                          o->rank);
  int marker = -1;
  for (int i = 0; i < o->rank; i++) {
    bool bad = o->shape[i].k < 0 && !is_infer_marker(o->shape[i]);
    if (!bad && is_infer_marker(o->shape[i]) && marker >= 0) bad = true;
    if (bad)
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected dims >= 0 and at most one -1, found %s",
                            nnc_infer_shape(c, o->rank, o->shape, d1));
    if (is_infer_marker(o->shape[i])) marker = i;
  }
  nnc_dim nx, known;
  if (!product(x->rank, x->shape, -1, &nx) || !product(o->rank, o->shape, marker, &known))
    return nnc_infer_fail(c, NNC_E_LIMIT, "the element count of %s or of the shape %s has more than %d symbolic factors",
                          nnc_infer_desc(c, x, d1), nnc_infer_shape(c, o->rank, o->shape, d2), NNC_DIM_SYMS);
  if (marker >= 0) {
    nnc_dim inferred;
    bool ok;
    if (nx.k == 0 && known.k != 0) {   /* an empty tensor stays empty: 0 / anything */
      inferred = nnc_dim_const(0);
      ok = true;
    } else {
      ok = nnc_dim_div(nx, known, &inferred);
    }
    if (!ok)
      return nnc_infer_fail(c, NNC_E_SHAPE, "cannot infer the -1 in %s from %s: %s elements are not a multiple of %s",
                            nnc_infer_shape(c, o->rank, o->shape, d1), nnc_infer_desc(c, x, d2),
                            nnc_infer_dim(c, nx, d3), nnc_infer_dim(c, known, d4));
    o->shape[marker] = inferred;
  }
  nnc_dim no;
  if (!product(o->rank, o->shape, -1, &no))
    return nnc_infer_fail(c, NNC_E_LIMIT, "the element count of the shape %s has more than %d symbolic factors",
                          nnc_infer_shape(c, o->rank, o->shape, d1), NNC_DIM_SYMS);
  if (!nnc_dim_eq(nx, no))
    return nnc_infer_fail(c, NNC_E_SHAPE, "%s has %s elements, %s has %s", nnc_infer_named_shape(c, x, d1),
                          nnc_infer_dim(c, nx, d3), nnc_infer_shape(c, o->rank, o->shape, d2),
                          nnc_infer_dim(c, no, d4));
  o->dtype = x->dtype;
  return NNC_OK;
}
