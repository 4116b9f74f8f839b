/* templates/c_simd/rmsnorm.c — rmsnorm over the rows of a matrix:
 * x / sqrt(mean(x^2) + eps) * gamma. */
#include "internal.h"

static const char *const KERNEL = "nnc_simd_rmsnorm";

typedef struct rms_job {
  int cols;
  const float *x;
  ptrdiff_t ldx;
  const float *gamma;
  float eps;
  float *y;
  ptrdiff_t ldy;
} rms_job;

static void rms_rows(void *ctx, int r0, int r1) {
  const rms_job *jb = ctx;
  int n = jb->cols;
  for (int r = r0; r < r1; ++r) {
    const float *x = jb->x + (ptrdiff_t)r * jb->ldx;
    float *y = jb->y + (ptrdiff_t)r * jb->ldy;
    float inv = nnc_simd_row_rms_inv(x, n, jb->eps);
    nnc_vf vi = nnc_vset1(inv);
    int j = 0;
    for (; j + NNC_VW <= n; j += NNC_VW) {
      nnc_vf v = nnc_vmul(nnc_vload(x + j), vi);
      if (jb->gamma) v = nnc_vmul(v, nnc_vload(jb->gamma + j));
      nnc_vstore(y + j, v);
    }
    for (; j < n; ++j) y[j] = jb->gamma ? x[j] * inv * jb->gamma[j] : x[j] * inv;
  }
}

nnc_simd_status nnc_simd_rmsnorm(int rows, int cols, const float *x, ptrdiff_t ldx,
                                 const float *gamma, float eps, float *y, ptrdiff_t ldy,
                                 const nnc_simd_par *par, nnc_simd_error *err) {
  if (rows < 0 || cols < 0)
    return nnc_simd_fail(err, KERNEL, "expected rows, cols >= 0, found rows=%d cols=%d",
                         rows, cols);
  if (!(eps >= 0.0f)) return nnc_simd_fail(err, KERNEL, "expected eps >= 0, found %g", (double)eps);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (rows == 0 || cols == 0) return NNC_SIMD_OK;
  if (!x || !y)
    return nnc_simd_fail(err, KERNEL, "expected input and output, found x=%p y=%p",
                         (const void *)x, (void *)y);
  if (ldx < cols || ldy < cols)
    return nnc_simd_fail(err, KERNEL, "expected ldx, ldy >= cols=%d, found ldx=%td ldy=%td",
                         cols, ldx, ldy);
  rms_job jb = {cols, x, ldx, gamma, eps, y, ldy};
  nnc_simd_run_rows(par, rows, cols, rms_rows, &jb);
  return NNC_SIMD_OK;
}
