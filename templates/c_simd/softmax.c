/* templates/c_simd/softmax.c — softmax over the rows of a matrix.
 *
 * Three passes per row: the maximum, e^(x - max) (stored in y) with its sum,
 * and the scaling by 1/sum. Subtracting the maximum keeps e^ in range; a
 * row whose maximum is -inf (every entry masked) gives zeros rather than
 * the NaN of -inf - -inf. */
#include "internal.h"
#include "simd_math.h"

static const char *const KERNEL = "nnc_simd_softmax";

typedef struct softmax_job {
  int cols;
  const float *x;
  ptrdiff_t ldx;
  float *y;
  ptrdiff_t ldy;
} softmax_job;

static void softmax_row(const float *x, float *y, int n) {
  nnc_vf vm = nnc_vset1(-INFINITY);
  int j = 0;
  for (; j + NNC_VW <= n; j += NNC_VW) vm = nnc_vmax(vm, nnc_vload(x + j));
  float m = nnc_vhmax(vm);
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  if (m == -INFINITY) {
    for (j = 0; j < n; ++j) y[j] = 0.0f;
    return;
  }
  nnc_vf vmax = nnc_vset1(m), vs = nnc_vzero();
  for (j = 0; j + NNC_VW <= n; j += NNC_VW) {
    nnc_vf e = nnc_vexp(nnc_vsub(nnc_vload(x + j), vmax));
    nnc_vstore(y + j, e);
    vs = nnc_vadd(vs, e);
  }
  float s = nnc_vhsum(vs);
  if (j < n) {
    /* The tail through a padded vector: padding -inf gives e^ = 0. */
    float buf[NNC_VW];
    for (int t = 0; t < NNC_VW; ++t) buf[t] = j + t < n ? x[j + t] : -INFINITY;
    nnc_vstore(buf, nnc_vexp(nnc_vsub(nnc_vload(buf), vmax)));
    for (int t = 0; j + t < n; ++t) {
      y[j + t] = buf[t];
      s += buf[t];
    }
  }
  nnc_vf inv = nnc_vset1(1.0f / s);
  for (j = 0; j + NNC_VW <= n; j += NNC_VW) nnc_vstore(y + j, nnc_vmul(nnc_vload(y + j), inv));
  for (; j < n; ++j) y[j] *= 1.0f / s;
}

static void softmax_rows(void *ctx, int r0, int r1) {
  const softmax_job *jb = ctx;
  for (int r = r0; r < r1; ++r)
    softmax_row(jb->x + (ptrdiff_t)r * jb->ldx, jb->y + (ptrdiff_t)r * jb->ldy, jb->cols);
}

nnc_simd_status nnc_simd_softmax(int rows, int cols, const float *x, ptrdiff_t ldx,
                                 float *y, ptrdiff_t ldy, const nnc_simd_par *par,
                                 nnc_simd_error *err) {
  if (rows < 0 || cols < 0)
    return nnc_simd_fail(err, KERNEL, "expected rows, cols >= 0, found rows=%d cols=%d",
                         rows, cols);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (rows == 0 || cols == 0) return NNC_SIMD_OK;
  if (!x || !y)
    return nnc_simd_fail(err, KERNEL, "expected input and output, found x=%p y=%p",
                         (const void *)x, (void *)y);
  if (ldx < cols || ldy < cols)
    return nnc_simd_fail(err, KERNEL, "expected ldx, ldy >= cols=%d, found ldx=%td ldy=%td",
                         cols, ldx, ldy);
  softmax_job jb = {cols, x, ldx, y, ldy};
  nnc_simd_run_rows(par, rows, cols, softmax_rows, &jb);
  return NNC_SIMD_OK;
}
