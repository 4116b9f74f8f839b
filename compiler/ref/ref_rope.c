/* compiler/ref/ref_rope.c — rope in float64, written the way Hugging Face's
 * LLaMA writes it rather than the way the kernels do: the cos and sin tables
 * of (position, frequency) first, then y = x * cos + rotate_half(x) * sin
 * with rotate_half(x) = (-x2, x1) for x = (x1, x2) the two halves of the
 * rotated width; the entries past it pass through. Turning back (the
 * gradient) uses -sin. */
#include <math.h>
#include <stdlib.h>

#include "ref_internal.h"

nnc_status nnc_ref_op_rope(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x, *pos = NULL;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st && n->nin > 1) st = nnc_ref_need(r, n, n->in[1], &pos, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]);
  int axis = n->attrs.axis, half = n->attrs.rot_dims / 2;
  char d[NNC_REF_DESC];
  if (sx.rank < 2 || axis < 0 || axis >= sx.rank - 1 || half < 1 || 2 * half > sx.d[sx.rank - 1])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected x [..., D] with time axis %d and %d rotated dims, "
                             "found %s", axis + 1, n->attrs.rot_dims, nnc_ref_desc(r, n->in[0], d));
  bool per_batch = pos && nnc_ref_shape_of(r, n->in[1]).rank == 2;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t D = sx.d[sx.rank - 1], rows = nnc_ref_shape_elems(&sx) / (D ? D : 1), T = sx.d[axis];
  int64_t inner = 1;   /* rows between two time steps */
  for (int i = axis + 1; i < sx.rank - 1; i++) inner *= sx.d[i];
  double sign = n->attrs.reverse ? -1.0 : 1.0;
  double *cs = malloc((size_t)(2 * half) * sizeof *cs);
  if (!cs) return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory");
  for (int64_t row = 0; row < rows; row++) {
    int64_t t = row / inner % T, b = per_batch ? row / (rows / sx.d[0]) : 0;   /* b: the index along axis 0 */
    double p = pos ? pos[per_batch ? b * T + t : t] : (double)t;
    for (int i = 0; i < half; i++) {
      double inv_freq = 1.0 / pow(n->attrs.scalar, (2.0 * i) / n->attrs.rot_dims);
      cs[i] = cos(p * inv_freq);
      cs[half + i] = sin(p * inv_freq);
    }
    const double *xr = x + row * D;
    double *yr = y + row * D;
    for (int64_t k = 0; k < D; k++) {
      if (k >= 2 * half) {
        yr[k] = xr[k];
        continue;
      }
      int64_t i = k % half;
      double rot = k < half ? -xr[k + half] : xr[k - half];
      yr[k] = xr[k] * cs[i] + rot * sign * cs[half + i];
    }
  }
  free(cs);
  return NNC_OK;
}
