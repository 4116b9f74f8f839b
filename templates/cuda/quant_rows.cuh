/* templates/cuda/quant_rows.cuh — one byte a value with a scale a row: the
 * kernels that quantize a GEMM's operands for --precision=fp8 (e4m3,
 * fp8.cuh) and --quantize=w8a8 (int8, w8a8.cuh). The two differ only in
 * the byte a value becomes and the largest magnitude it holds, so the
 * kernels take that as a format Q (nnc_quant_e4m3, nnc_quant_s8):
 *   Q::MAX            the largest |q| (a row's scale is its amax / MAX);
 *   Q::to(float v)    v (already divided by the scale) as its byte.
 *
 * Weights: quantized once when they load, from f32 on the device, one scale
 * per output channel, held [N, K] (K-major, what the GEMMs read) whatever
 * the file's layout.
 * Activations: each GEMM's A quantized when it runs, a scale per row (its
 * max|a| / MAX: dynamic), or one fixed scale (fp8's `nnc calibrate`;
 * values beyond it saturate), by one kernel that also applies the
 * layernorm or rmsnorm the GEMM reads, from f32, so the normalized row is
 * rounded once (to the byte), not twice (bf16, then the byte). */
#ifndef NNC_CUDA_QUANT_ROWS_CUH
#define NNC_CUDA_QUANT_ROWS_CUH

#include <cuda_fp8.h>

#include "nnc_cuda.cuh"

#define NNC_QUANT_THREADS 256

/* e4m3: round to nearest even, saturate to +-448 (cvt's .satfinite), as
 * runtime/half.c's nnrt_f32_to_e4m3 does on the host. */
struct nnc_quant_e4m3 {
  static constexpr float MAX = 448.0f;
  __device__ __forceinline__ static unsigned char to(float v) {
    return (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
};

/* int8, symmetric: round to nearest even, clamp to [-127, 127] (-128 never
 * appears, so negating a value never overflows); NaN becomes -127 (cvt.rni
 * gives INT_MIN), a poisoned row shows. */
struct nnc_quant_s8 {
  static constexpr float MAX = 127.0f;
  __device__ __forceinline__ static unsigned char to(float v) {
    const int r = __float2int_rn(v);
    return (unsigned char)(signed char)(r > 127 ? 127 : r < -127 ? -127 : r);
  }
};

/* 1 / scale for a slice whose largest magnitude is amax; 0 for a zero slice
 * (its values stay 0 and its scale is 0). */
template <class Q> __device__ __forceinline__ float nnc_quant_inv(float amax) { return amax > 0.0f ? Q::MAX / amax : 0.0f; }

/* SmoothQuant's migration (w8a8.cuh): a w8a8 weight may carry K factors
 * s_k > 0 after a 16-byte header whose first int32 says whether they are
 * on. The weight's input channel k is quantized times s_k, A's column k
 * divided by s_k: the same product, A's large channels moved into the
 * weight's per-channel scales. The factors of such a tail, or nullptr
 * (no tail, or off). */
__device__ __forceinline__ const float *nnc_quant_smooth(const void *tail) {
  return tail && *static_cast<const int *>(tail) ? reinterpret_cast<const float *>(static_cast<const char *>(tail) + 16)
                                                 : nullptr;
}

/* The largest |value| a fixed scale (> 0) stands for, or 0: each row's own.
 * Values beyond it saturate to +-MAX. */
template <class Q> __device__ __forceinline__ float nnc_quant_fixed_amax(const float *fixed) {
  const float f = fixed ? *fixed : 0.0f;
  return f > 0.0f ? f * Q::MAX : 0.0f;
}

/* Weight quantization: block n makes output channel n, q[n][k] and
 * scale[n], from w [N, K] (in_out 0) or [K, N] (in_out 1, GPT-2's Conv1D).
 * DIVIDE: C SIMD's rule (nnc_simd_q8_pack), so that both targets hold the
 * same int8 values of one f32 checkpoint: w / s with s = amax / MAX (w *
 * (MAX / amax) rounds differently about once in 10^5), a channel whose
 * amax is 0 or infinite all 0 with scale 0, a NaN 0. */
template <class Q, bool DIVIDE>
__global__ void nnc_quant_weight_kernel(const float *w, int N, int K, int in_out, const void *smooth, unsigned char *q,
                                        float *scale) {
  __shared__ float red[NNC_QUANT_THREADS / 32];
  const int n = blockIdx.x;
  const long long step = in_out ? N : 1;
  const float *row = in_out ? w + n : w + (long long)n * K;
  const float *f = nnc_quant_smooth(smooth);
  auto at = [&](int k) { return f ? row[k * step] * f[k] : row[k * step]; };
  float amax = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) amax = fmaxf(amax, fabsf(at(k)));
  amax = nnc_group_reduce<nnc_max_op, NNC_QUANT_THREADS>(amax, red);
  if (DIVIDE) {
    const float sc = amax > 0.0f && isfinite(amax) ? amax / Q::MAX : 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
      const float v = at(k);
      q[(long long)n * K + k] = Q::to(sc > 0.0f && v == v ? v / sc : 0.0f);
    }
    if (threadIdx.x == 0) scale[n] = sc;
    return;
  }
  const float inv = nnc_quant_inv<Q>(amax);
  for (int k = threadIdx.x; k < K; k += blockDim.x) q[(long long)n * K + k] = Q::to(at(k) * inv);
  if (threadIdx.x == 0) scale[n] = amax / Q::MAX;
}

/* w: N*K f32 on the device; q: N*K bytes, scale: N floats; smooth: a
 * SmoothQuant tail (nnc_quant_smooth) or nullptr. who names the caller in
 * a message. */
template <class Q, bool DIVIDE = false>
nnc_cuda_status nnc_cuda_quant_weight(const float *w, int N, int K, bool in_out, const void *smooth, unsigned char *q,
                                      float *scale, cudaStream_t s, const char *who, nnc_cuda_error *err) {
  if (!w || !q || !scale || N < 0 || K < 0) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "a NULL pointer or a negative size");
  if (N == 0) return NNC_CUDA_OK;
  nnc_quant_weight_kernel<Q, DIVIDE><<<N, NNC_QUANT_THREADS, 0, s>>>(w, N, K, in_out ? 1 : 0, smooth, q, scale);
  return nnc_cuda_check_launch(err, who);
}

/* What a GEMM's A rows are before they are quantized. */
enum nnc_quant_norm { NNC_QUANT_PLAIN, NNC_QUANT_LAYERNORM, NNC_QUANT_RMSNORM };

/* Block r quantizes row r of x (after its norm): q[r][j] and scale[r]. The
 * row is read a few times (statistics, max, values): from L1 after the
 * first. */
template <class Q, typename T, int NORM>
__global__ void nnc_quant_rows_kernel(int cols, const T *x, long long ldx, const T *gamma, const T *beta, float eps,
                                      const float *fixed, const void *smooth, unsigned char *q, float *scale) {
  __shared__ float red[NNC_QUANT_THREADS / 32];
  const long long r = blockIdx.x;
  const T *xr = x + r * ldx;
  float mean = 0.0f, rstd = 1.0f;
  if (NORM == NNC_QUANT_LAYERNORM) {
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += nnc_dtype<T>::load(xr[j]);
    mean = nnc_group_reduce<nnc_sum_op, NNC_QUANT_THREADS>(s, red) / (float)cols;
    float v = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      const float d = nnc_dtype<T>::load(xr[j]) - mean;
      v = fmaf(d, d, v);
    }
    rstd = rsqrtf(nnc_group_reduce<nnc_sum_op, NNC_QUANT_THREADS>(v, red) / (float)cols + eps);
  } else if (NORM == NNC_QUANT_RMSNORM) {
    float v = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      const float a = nnc_dtype<T>::load(xr[j]);
      v = fmaf(a, a, v);
    }
    rstd = rsqrtf(nnc_group_reduce<nnc_sum_op, NNC_QUANT_THREADS>(v, red) / (float)cols + eps);
  }
  const float *f = nnc_quant_smooth(smooth);
  auto value = [&](int j) {
    float a = nnc_dtype<T>::load(xr[j]);
    if (NORM != NNC_QUANT_PLAIN) {
      const float g = gamma ? nnc_dtype<T>::load(gamma[j]) : 1.0f;
      const float b = NORM == NNC_QUANT_LAYERNORM && beta ? nnc_dtype<T>::load(beta[j]) : 0.0f;
      a = fmaf((a - mean) * rstd, g, b);
    }
    return f ? a / f[j] : a;
  };
  float amax = nnc_quant_fixed_amax<Q>(fixed);
  if (!(amax > 0.0f)) {
    amax = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) amax = fmaxf(amax, fabsf(value(j)));
    amax = nnc_group_reduce<nnc_max_op, NNC_QUANT_THREADS>(amax, red);
  }
  const float inv = nnc_quant_inv<Q>(amax);
  unsigned char *qr = q + r * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) qr[j] = Q::to(value(j) * inv);
  if (threadIdx.x == 0) scale[r] = amax / Q::MAX;
}

/* The same, a warp a row with the row in registers: V 16-byte vectors a
 * lane (V * 32 * VEC >= cols), read once, the bytes stored 8 (or 4) at a
 * time. For rows of 16-byte vectors (cols and ldx multiples of VEC, x,
 * gamma and beta 16-byte aligned): the block kernel above read each row
 * three or four times at 440 GB/s (GPT-2's 8192 x 768 in 42 us, H200). */
template <class Q, typename T, int NORM, int V>
__global__ void __launch_bounds__(NNC_QUANT_THREADS)
nnc_quant_rows_warp_kernel(int rows, int cols, const T *x, long long ldx, const T *gamma, const T *beta, float eps,
                           const float *fixed, const void *smooth, unsigned char *q, float *scale) {
  constexpr int E = nnc_dtype<T>::VEC;
  const int lane = threadIdx.x % 32;
  const long long r = (long long)blockIdx.x * (NNC_QUANT_THREADS / 32) + threadIdx.x / 32;
  if (r >= rows) return;   /* the whole warp: its reductions are its own */
  const int nvec = cols / E;
  const T *xr = x + r * ldx;
  float v[V][E];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = lane + i * 32;
    if (c < nvec) {
      const uint4 raw = *reinterpret_cast<const uint4 *>(xr + (long long)c * E);
      const T *t = reinterpret_cast<const T *>(&raw);
#pragma unroll
      for (int j = 0; j < E; j++) v[i][j] = nnc_dtype<T>::load(t[j]);
    } else {
#pragma unroll
      for (int j = 0; j < E; j++) v[i][j] = 0.0f;
    }
  }
  if (NORM != NNC_QUANT_PLAIN) {
    float mean = 0.0f;
    if (NORM == NNC_QUANT_LAYERNORM) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < V; i++)
#pragma unroll
        for (int j = 0; j < E; j++) s += v[i][j];
      mean = nnc_warp_reduce<nnc_sum_op, 32>(s) / (float)cols;
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++)
      if (lane + i * 32 < nvec)
#pragma unroll
        for (int j = 0; j < E; j++) ss = fmaf(v[i][j] - mean, v[i][j] - mean, ss);
    const float rstd = rsqrtf(nnc_warp_reduce<nnc_sum_op, 32>(ss) / (float)cols + eps);
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = lane + i * 32;
      if (c >= nvec) continue;
      float g[E], b[E];
#pragma unroll
      for (int j = 0; j < E; j++) g[j] = 1.0f, b[j] = 0.0f;
      if (gamma) {
        const uint4 raw = *reinterpret_cast<const uint4 *>(gamma + (long long)c * E);
#pragma unroll
        for (int j = 0; j < E; j++) g[j] = nnc_dtype<T>::load(reinterpret_cast<const T *>(&raw)[j]);
      }
      if (NORM == NNC_QUANT_LAYERNORM && beta) {
        const uint4 raw = *reinterpret_cast<const uint4 *>(beta + (long long)c * E);
#pragma unroll
        for (int j = 0; j < E; j++) b[j] = nnc_dtype<T>::load(reinterpret_cast<const T *>(&raw)[j]);
      }
#pragma unroll
      for (int j = 0; j < E; j++) v[i][j] = fmaf((v[i][j] - mean) * rstd, g[j], b[j]);
    }
  }
  if (const float *f = nnc_quant_smooth(smooth)) {
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = lane + i * 32;
      if (c >= nvec) continue;
#pragma unroll
      for (int j = 0; j < E; j++) v[i][j] /= f[(long long)c * E + j];
    }
  }
  float amax = nnc_quant_fixed_amax<Q>(fixed);
  if (!(amax > 0.0f)) {
    amax = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++)
#pragma unroll
      for (int j = 0; j < E; j++) amax = fmaxf(amax, fabsf(v[i][j]));
    amax = nnc_warp_reduce<nnc_max_op, 32>(amax);
  }
  const float inv = nnc_quant_inv<Q>(amax);
  unsigned char *qr = q + r * cols;
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = lane + i * 32;
    if (c >= nvec) continue;
    unsigned char b[E];
#pragma unroll
    for (int j = 0; j < E; j++) b[j] = Q::to(v[i][j] * inv);
    if constexpr (E == 8) *reinterpret_cast<uint2 *>(qr + (long long)c * E) = *reinterpret_cast<const uint2 *>(b);
    else *reinterpret_cast<unsigned *>(qr + (long long)c * E) = *reinterpret_cast<const unsigned *>(b);
  }
  if (lane == 0) scale[r] = amax / Q::MAX;
}

template <class Q, typename T, int NORM, int V>
static void nnc_quant_rows_warp(int rows, int cols, const T *x, long long ldx, const T *gamma, const T *beta, float eps,
                                const float *fixed, const void *smooth, unsigned char *q, float *scale, cudaStream_t s) {
  constexpr int W = NNC_QUANT_THREADS / 32;
  nnc_quant_rows_warp_kernel<Q, T, NORM, V><<<(unsigned)((rows + W - 1) / W), NNC_QUANT_THREADS, 0, s>>>(
      rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale);
}

/* The warp kernel for V vectors a lane, the smallest of 1, 2, 4, 8, 16 that
 * holds the row; false when none does (or the row is not whole vectors). */
template <class Q, typename T, int NORM>
static bool nnc_quant_rows_fast(int rows, int cols, const T *x, long long ldx, const T *gamma, const T *beta, float eps,
                                const float *fixed, const void *smooth, unsigned char *q, float *scale, cudaStream_t s) {
  constexpr int E = nnc_dtype<T>::VEC;
  auto al = [](const void *p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  if (cols % E || ldx % E || !al(x) || !al(gamma) || !al(beta) || (reinterpret_cast<uintptr_t>(q) & 7u)) return false;
  const int per = (cols / E + 31) / 32;
  if (per <= 1) nnc_quant_rows_warp<Q, T, NORM, 1>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s);
  else if (per <= 2) nnc_quant_rows_warp<Q, T, NORM, 2>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s);
  else if (per <= 4) nnc_quant_rows_warp<Q, T, NORM, 4>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s);
  else if (per <= 8) nnc_quant_rows_warp<Q, T, NORM, 8>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s);
  else if (per <= 16) nnc_quant_rows_warp<Q, T, NORM, 16>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s);
  else return false;
  return true;
}

/* Row r of x [rows, cols] (leading dimension ldx), normalized as norm says
 * (gamma, beta: cols elements or NULL), then divided by a SmoothQuant
 * tail's factors (smooth, or nullptr), to Q's bytes in q [rows, cols] with
 * its scale in scale[r]: the row's max |value| / Q::MAX, or *fixed where
 * fixed is not NULL and *fixed > 0 (a device float). who names the caller
 * in a message. */
template <class Q, typename T>
nnc_cuda_status nnc_cuda_quant_rows(nnc_quant_norm norm, int rows, int cols, const T *x, long long ldx, const T *gamma,
                                    const T *beta, float eps, const float *fixed, const void *smooth, unsigned char *q,
                                    float *scale, cudaStream_t s, const char *who, nnc_cuda_error *err) {
  if (!x || !q || !scale || rows < 0 || cols < 0 || ldx < cols)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "a NULL pointer, a negative size or ldx < cols");
  if (rows == 0) return NNC_CUDA_OK;
  const bool fast =
      norm == NNC_QUANT_LAYERNORM ? nnc_quant_rows_fast<Q, T, NNC_QUANT_LAYERNORM>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s)
    : norm == NNC_QUANT_RMSNORM   ? nnc_quant_rows_fast<Q, T, NNC_QUANT_RMSNORM>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s)
                                  : nnc_quant_rows_fast<Q, T, NNC_QUANT_PLAIN>(rows, cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale, s);
  if (fast) return nnc_cuda_check_launch(err, who);
  if (norm == NNC_QUANT_LAYERNORM)
    nnc_quant_rows_kernel<Q, T, NNC_QUANT_LAYERNORM><<<rows, NNC_QUANT_THREADS, 0, s>>>(cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale);
  else if (norm == NNC_QUANT_RMSNORM)
    nnc_quant_rows_kernel<Q, T, NNC_QUANT_RMSNORM><<<rows, NNC_QUANT_THREADS, 0, s>>>(cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale);
  else
    nnc_quant_rows_kernel<Q, T, NNC_QUANT_PLAIN><<<rows, NNC_QUANT_THREADS, 0, s>>>(cols, x, ldx, gamma, beta, eps, fixed, smooth, q, scale);
  return nnc_cuda_check_launch(err, who);
}

#endif
