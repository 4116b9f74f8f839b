/* templates/c_simd/row_stats.c — the statistics of one row for layernorm
 * and rmsnorm, shared by the standalone kernels and the GEMM prologue.
 *
 * Two passes in float: the mean first, then the sums of the deviations d
 * and of d^2 from it, which avoids the cancellation of E[x^2] - E[x]^2.
 * The sum of d corrects the mean (the "corrected two-pass" algorithm): the
 * first pass rounds sums as large as n*|mean|, the deviations are small and
 * sum almost exactly, which matters when the mean is large against the
 * spread (activations with an offset). Four vector accumulators
 * (4 * NNC_VW partial sums) keep each sum short, so the rounding error grows
 * with n / (4 * NNC_VW) rather than with n. */
#include "internal.h"

#include <math.h>

static float sum_row(const float *x, int n) {
  nnc_vf s0 = nnc_vzero(), s1 = nnc_vzero(), s2 = nnc_vzero(), s3 = nnc_vzero();
  int i = 0;
  for (; i + 4 * NNC_VW <= n; i += 4 * NNC_VW) {
    s0 = nnc_vadd(s0, nnc_vload(x + i));
    s1 = nnc_vadd(s1, nnc_vload(x + i + NNC_VW));
    s2 = nnc_vadd(s2, nnc_vload(x + i + 2 * NNC_VW));
    s3 = nnc_vadd(s3, nnc_vload(x + i + 3 * NNC_VW));
  }
  for (; i + NNC_VW <= n; i += NNC_VW) s0 = nnc_vadd(s0, nnc_vload(x + i));
  float s = nnc_vhsum(nnc_vadd(nnc_vadd(s0, s1), nnc_vadd(s2, s3)));
  for (; i < n; ++i) s += x[i];
  return s;
}

/* Sums of x - c (into *sd) and of (x - c)^2 (returned). */
static float sum_sq_dev(const float *x, int n, float c, float *sd) {
  nnc_vf vc = nnc_vset1(c);
  nnc_vf s0 = nnc_vzero(), s1 = nnc_vzero(), s2 = nnc_vzero(), s3 = nnc_vzero();
  nnc_vf t0 = nnc_vzero(), t1 = nnc_vzero();
  int i = 0;
  for (; i + 4 * NNC_VW <= n; i += 4 * NNC_VW) {
    nnc_vf d0 = nnc_vsub(nnc_vload(x + i), vc);
    nnc_vf d1 = nnc_vsub(nnc_vload(x + i + NNC_VW), vc);
    nnc_vf d2 = nnc_vsub(nnc_vload(x + i + 2 * NNC_VW), vc);
    nnc_vf d3 = nnc_vsub(nnc_vload(x + i + 3 * NNC_VW), vc);
    s0 = nnc_vfma(d0, d0, s0);
    s1 = nnc_vfma(d1, d1, s1);
    s2 = nnc_vfma(d2, d2, s2);
    s3 = nnc_vfma(d3, d3, s3);
    t0 = nnc_vadd(t0, nnc_vadd(d0, d1));
    t1 = nnc_vadd(t1, nnc_vadd(d2, d3));
  }
  for (; i + NNC_VW <= n; i += NNC_VW) {
    nnc_vf d = nnc_vsub(nnc_vload(x + i), vc);
    s0 = nnc_vfma(d, d, s0);
    t0 = nnc_vadd(t0, d);
  }
  float s = nnc_vhsum(nnc_vadd(nnc_vadd(s0, s1), nnc_vadd(s2, s3)));
  float t = nnc_vhsum(nnc_vadd(t0, t1));
  for (; i < n; ++i) {
    s += (x[i] - c) * (x[i] - c);
    t += x[i] - c;
  }
  *sd = t;
  return s;
}

void nnc_simd_row_moments(const float *x, int n, float eps, float *mean, float *rstd) {
  if (n <= 0) {
    *mean = 0.0f;
    *rstd = 1.0f / sqrtf(eps);
    return;
  }
  float m = sum_row(x, n) / (float)n, sd;
  float ss = sum_sq_dev(x, n, m, &sd);
  float var = (ss - sd * sd / (float)n) / (float)n;
  *mean = m + sd / (float)n;
  *rstd = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
}

float nnc_simd_row_rms_inv(const float *x, int n, float eps) {
  if (n <= 0) return 1.0f / sqrtf(eps);
  float sd;
  return 1.0f / sqrtf(sum_sq_dev(x, n, 0.0f, &sd) / (float)n + eps);
}
