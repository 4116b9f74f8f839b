/* templates/opencl/rows.cl — row kernels: softmax, layernorm, rmsnorm.
 * One work-group of NNC_WG items (a power of two, default 256) per row:
 * global size rows * NNC_WG, local size NNC_WG. Each item strides over the
 * row; the reductions go through local memory. There is no row count
 * argument: the global size must be exactly rows * NNC_WG, because a group
 * that returns before its barriers crashes PoCL. Statistics are two-pass
 * (mean, then squared deviations) for accuracy. y may be x (same ld): an
 * item reads each element it writes before writing it. */
#ifndef NNC_WG
#define NNC_WG 256
#endif

/* y[r,:] = softmax(x[r,:]); a row that is all -inf gives zeros. */
__kernel __attribute__((reqd_work_group_size(NNC_WG, 1, 1)))
void nnc_softmax(int cols, __global const nnc_t *x, long ldx,
                 __global nnc_t *y, long ldy) {
  __local float scratch[NNC_WG];
  const long r = (long)get_group_id(0);
  const int lid = (int)get_local_id(0);
  __global const nnc_t *xr = x + r * ldx;
  __global nnc_t *yr = y + r * ldy;
  float m = -INFINITY;
  for (int c = lid; c < cols; c += NNC_WG) m = fmax(m, NNC_LOAD(xr, c));
  m = nnc_wg_max(m, scratch, NNC_WG);
  float s = 0.0f;
  if (m != -INFINITY)
    for (int c = lid; c < cols; c += NNC_WG) s += exp(NNC_LOAD(xr, c) - m);
  s = nnc_wg_sum(s, scratch, NNC_WG);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int c = lid; c < cols; c += NNC_WG)
    NNC_STORE(yr, c, m == -INFINITY ? 0.0f : exp(NNC_LOAD(xr, c) - m) * inv);
}

/* y = (x - mean) / sqrt(var + eps) * gamma + beta per row; gamma and beta
 * may be NULL (1 and 0). */
__kernel __attribute__((reqd_work_group_size(NNC_WG, 1, 1)))
void nnc_layernorm(int cols, __global const nnc_t *x, long ldx,
                   __global const nnc_t *gamma, __global const nnc_t *beta, float eps,
                   __global nnc_t *y, long ldy) {
  __local float scratch[NNC_WG];
  const long r = (long)get_group_id(0);
  const int lid = (int)get_local_id(0);
  __global const nnc_t *xr = x + r * ldx;
  __global nnc_t *yr = y + r * ldy;
  float s = 0.0f;
  for (int c = lid; c < cols; c += NNC_WG) s += NNC_LOAD(xr, c);
  const float mean = nnc_wg_sum(s, scratch, NNC_WG) / (float)cols;
  float q = 0.0f;
  for (int c = lid; c < cols; c += NNC_WG) {
    const float d = NNC_LOAD(xr, c) - mean;
    q += d * d;
  }
  const float rstd = rsqrt(nnc_wg_sum(q, scratch, NNC_WG) / (float)cols + eps);
  for (int c = lid; c < cols; c += NNC_WG) {
    float v = (NNC_LOAD(xr, c) - mean) * rstd;
    if (gamma) v *= NNC_LOAD(gamma, c);
    if (beta) v += NNC_LOAD(beta, c);
    NNC_STORE(yr, c, v);
  }
}

/* y = x / sqrt(mean(x^2) + eps) * gamma per row; gamma may be NULL. */
__kernel __attribute__((reqd_work_group_size(NNC_WG, 1, 1)))
void nnc_rmsnorm(int cols, __global const nnc_t *x, long ldx,
                 __global const nnc_t *gamma, float eps,
                 __global nnc_t *y, long ldy) {
  __local float scratch[NNC_WG];
  const long r = (long)get_group_id(0);
  const int lid = (int)get_local_id(0);
  __global const nnc_t *xr = x + r * ldx;
  __global nnc_t *yr = y + r * ldy;
  float q = 0.0f;
  for (int c = lid; c < cols; c += NNC_WG) {
    const float v = NNC_LOAD(xr, c);
    q += v * v;
  }
  const float rstd = rsqrt(nnc_wg_sum(q, scratch, NNC_WG) / (float)cols + eps);
  for (int c = lid; c < cols; c += NNC_WG) {
    float v = NNC_LOAD(xr, c) * rstd;
    if (gamma) v *= NNC_LOAD(gamma, c);
    NNC_STORE(yr, c, v);
  }
}
