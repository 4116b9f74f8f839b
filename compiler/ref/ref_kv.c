/* compiler/ref/ref_kv.c — kv_append in float64: the cache is the one array
 * the reference writes in place. It is zero until a call writes it, and
 * kept from one run to the next (a caller checking decode against a full
 * forward moves it from one nnc_ref to the next). */
#include <string.h>

#include "ref_internal.h"

nnc_status nnc_ref_op_kv_append(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  int c = n->in[0];
  if (!r->val[c] && !nnc_ref_alloc(r, c))
    return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory for the cache %s", r->g->tensors[c].name);
  double *cache = r->val[c], *y;
  const double *x;
  nnc_status st = nnc_ref_need(r, n, n->in[1], &x, err);
  if (!st) st = nnc_ref_out(r, n, 0, &y, err);
  if (st) return st;
  nnc_ref_shape sc = nnc_ref_shape_of(r, c), sx = nnc_ref_shape_of(r, n->in[1]), sy = nnc_ref_shape_of(r, n->out[0]);
  int k = sx.rank;
  int64_t C = sc.d[k - 2], T = sx.d[k - 2], S = sy.d[k - 2], D = sx.d[k - 1];
  char d[NNC_REF_DESC];
  if (S < T || S > C)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected T <= S <= the cache's %lld rows, found T = %lld, S = %lld "
                             "(%s)", (long long)C, (long long)T, (long long)S, nnc_ref_desc(r, n->in[1], d));
  int64_t outer = T > 0 && D > 0 ? nnc_ref_shape_elems(&sx) / (T * D) : 0;
  for (int64_t o = 0; o < outer; o++) {
    double *rows = cache + o * C * D;
    memcpy(rows + (S - T) * D, x + o * T * D, (size_t)(T * D) * sizeof *x);
    memcpy(y + o * S * D, rows, (size_t)(S * D) * sizeof *y);
  }
  return NNC_OK;
}
