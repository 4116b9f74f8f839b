/* templates/c_simd/layernorm.c — layernorm over the rows of a matrix. The
 * statistics come from row_stats.c (two passes in float), then one pass
 * writes (x - mean) * rstd * gamma + beta. */
#include "internal.h"

static const char *const KERNEL = "nnc_simd_layernorm";

typedef struct ln_job {
  int cols;
  const float *x;
  ptrdiff_t ldx;
  const float *gamma, *beta;
  float eps;
  float *y;
  ptrdiff_t ldy;
} ln_job;

static void ln_rows(void *ctx, int r0, int r1) {
  const ln_job *jb = ctx;
  int n = jb->cols;
  for (int r = r0; r < r1; ++r) {
    const float *x = jb->x + (ptrdiff_t)r * jb->ldx;
    float *y = jb->y + (ptrdiff_t)r * jb->ldy;
    float mean, rstd;
    nnc_simd_row_moments(x, n, jb->eps, &mean, &rstd);
    nnc_vf vm = nnc_vset1(mean), vr = nnc_vset1(rstd);
    int j = 0;
    for (; j + NNC_VW <= n; j += NNC_VW) {
      nnc_vf v = nnc_vmul(nnc_vsub(nnc_vload(x + j), vm), vr);
      if (jb->gamma) v = nnc_vmul(v, nnc_vload(jb->gamma + j));
      if (jb->beta) v = nnc_vadd(v, nnc_vload(jb->beta + j));
      nnc_vstore(y + j, v);
    }
    for (; j < n; ++j) {
      float v = (x[j] - mean) * rstd;
      if (jb->gamma) v *= jb->gamma[j];
      if (jb->beta) v += jb->beta[j];
      y[j] = v;
    }
  }
}

nnc_simd_status nnc_simd_layernorm(int rows, int cols, const float *x, ptrdiff_t ldx,
                                   const float *gamma, const float *beta, float eps,
                                   float *y, ptrdiff_t ldy, const nnc_simd_par *par,
                                   nnc_simd_error *err) {
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
  ln_job jb = {cols, x, ldx, gamma, beta, eps, y, ldy};
  nnc_simd_run_rows(par, rows, cols, ln_rows, &jb);
  return NNC_SIMD_OK;
}
