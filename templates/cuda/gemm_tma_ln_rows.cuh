/* templates/cuda/gemm_tma_ln_rows.cuh — the row pieces of gemm_tma_ln.cuh's
 * epilogue, on a consumer warpgroup's accumulators in wgmma's layout
 * (wgmma.cuh): warp w holds rows 16w + lane/4 and 16w + lane/4 + 8 (hr 0
 * and 1) of its 64, and of each 8 columns nt the two at 8 nt + 2 (lane % 4),
 * in acc[4 nt + 2 hr] and acc[4 nt + 2 hr + 1]. So the four threads of a
 * quad hold all of a row's columns that the warpgroup has: a row's sums
 * over them take two shuffles.
 *
 * Elements travel in pairs (two neighbouring columns, 4 bytes of bf16/f16)
 * where the rows allow it (`pair`: the matrix and its row stride even-
 * element aligned), else one at a time; columns at or past N are neither
 * read nor written. */
#ifndef NNC_CUDA_GEMM_TMA_LN_ROWS_CUH
#define NNC_CUDA_GEMM_TMA_LN_ROWS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm_mma.cuh"
#include "nnc_cuda.cuh"

namespace nnc_gtl {

/* Columns c and c + 1 of a row (zeros at or past N), packed as nnc_mma<T>::pack2 packs. */
template <typename T> __device__ __forceinline__ uint32_t load_pair(const T *row, int c, int N, bool pair) {
  if (pair && c + 1 < N) return *reinterpret_cast<const uint32_t *>(row + c);
  const float lo = c < N ? nnc_dtype<T>::load(row[c]) : 0.0f, hi = c + 1 < N ? nnc_dtype<T>::load(row[c + 1]) : 0.0f;
  return nnc_mma<T>::pack2(lo, hi);
}

template <typename T> __device__ __forceinline__ void store_pair(T *row, int c, int N, bool pair, float lo, float hi) {
  if (pair && c + 1 < N) {
    *reinterpret_cast<uint32_t *>(row + c) = nnc_mma<T>::pack2(lo, hi);
    return;
  }
  if (c < N) row[c] = nnc_dtype<T>::store(lo);
  if (c + 1 < N) row[c + 1] = nnc_dtype<T>::store(hi);
}

/* The sum over a quad (lanes 4i .. 4i + 3), in every lane of it. */
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* The residual pairs of the thread's rows (row0: its first, m0 + 16 w + lane / 4),
 * columns c0 + 8 nt (c0: its first column in C), res[2 nt + hr]; zeros
 * without a residual or past M. */
template <typename T, int NH>
__device__ __forceinline__ void load_residual(uint32_t (&res)[NH / 4], const T *r, long long ldr, int M, int N,
                                              bool pair, int row0, int c0) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + 8 * hr;
    const bool live = r && row < M;
    const T *p = live ? r + (long long)row * ldr : r;
#pragma unroll
    for (int nt = 0; nt < NH / 8; ++nt) res[2 * nt + hr] = live ? load_pair(p, c0 + 8 * nt, N, pair) : 0u;
  }
}

/* The block's bias, gamma and beta at columns col0 + ct + nt v (v < PV, nt
 * threads; f32; past N: 0, 1, 0; NULL: the same), loaded into registers. */
template <typename T, int PV>
__device__ __forceinline__ void load_params(float (&pv)[3][PV], const T *bias, const T *gamma, const T *beta, int N,
                                            int col0, int ct, int nt) {
#pragma unroll
  for (int v = 0; v < PV; ++v) {
    const int n = col0 + ct + nt * v;
    const bool in = n < N;
    pv[0][v] = in && bias ? nnc_dtype<T>::load(bias[n]) : 0.0f;
    pv[1][v] = in && gamma ? nnc_dtype<T>::load(gamma[n]) : 1.0f;
    pv[2][v] = in && beta ? nnc_dtype<T>::load(beta[n]) : 0.0f;
  }
}

/* ... into shared memory: prm's three rows of cols. */
template <int PV>
__device__ __forceinline__ void store_params(const float (&pv)[3][PV], float *prm, int cols, int ct, int nt) {
#pragma unroll
  for (int v = 0; v < PV; ++v) {
    const int i = ct + nt * v;
    if (i < cols) prm[i] = pv[0][v], prm[cols + i] = pv[1][v], prm[2 * cols + i] = pv[2][v];
  }
}

/* acc += bias + residual; sbias: the warpgroup's NH columns (f32, zeros past N). */
template <typename T, int NH>
__device__ __forceinline__ void add_bias_residual(float (&acc)[NH / 2], const uint32_t (&res)[NH / 4],
                                                  const float *sbias, int cq) {
#pragma unroll
  for (int nt = 0; nt < NH / 8; ++nt) {
    const float2 b = *reinterpret_cast<const float2 *>(sbias + 8 * nt + cq);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float2 r = nnc_mma<T>::unpack2(res[2 * nt + hr]);
      acc[4 * nt + 2 * hr] += b.x + r.x;
      acc[4 * nt + 2 * hr + 1] += b.y + r.y;
    }
  }
}

/* The sums over the warpgroup's columns of each of the thread's two rows:
 * of x (s), then of (x - s / n)^2 (q), n = the warpgroup's columns inside
 * N; nv = n - cq: the thread's element (nt, e) counts when 8 nt + e < nv. */
template <int NH>
__device__ __forceinline__ void half_stats(const float (&acc)[NH / 2], int n, int nv, float (&s)[2], float (&q)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float a = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NH / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * nt + e < nv) a += acc[4 * nt + 2 * hr + e];
    s[hr] = quad_sum(a);
    const float mean = s[hr] / (float)n;
    float b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NH / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * nt + e < nv) {
          const float d = acc[4 * nt + 2 * hr + e] - mean;
          b = fmaf(d, d, b);
        }
    q[hr] = quad_sum(b);
  }
}

/* A row's mean and 1 / sqrt(var + eps) from the two halves' (s, q) over n0
 * and n1 columns (n1 = 0: the row is one half), Chan et al.'s merge of
 * centered sums: M2 = q0 + q1 + (mean0 - mean1)^2 n0 n1 / N. Symmetric in
 * the halves, so both compute the same bits. */
__device__ __forceinline__ float2 merge_stats(float s0, float q0, int n0, float s1, float q1, int n1, float eps) {
  const int N = n0 + n1;
  const float mean = (s0 + s1) / (float)N;
  float m2 = q0 + q1;
  if (n1 > 0) {
    const float d = s0 / (float)n0 - s1 / (float)n1;
    m2 += d * d * ((float)n0 * (float)n1 / (float)N);
  }
  return make_float2(mean, rsqrtf(m2 / (float)N + eps));
}

/* y = (x - mean) rstd gamma + beta into c's rows; st[hr]: the row's
 * (mean, rstd); sgam, sbeta: the warpgroup's columns (f32). */
template <typename T, int NH>
__device__ __forceinline__ void store_norm(const float (&acc)[NH / 2], const float2 (&st)[2], const float *sgam,
                                           const float *sbeta, T *c, long long ldc, int M, int N, bool pair, int row0,
                                           int c0, int cq) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + 8 * hr;
    if (row >= M) continue;
    T *cr = c + (long long)row * ldc;
#pragma unroll
    for (int nt = 0; nt < NH / 8; ++nt) {
      const float2 g = *reinterpret_cast<const float2 *>(sgam + 8 * nt + cq);
      const float2 b = *reinterpret_cast<const float2 *>(sbeta + 8 * nt + cq);
      const float y0 = fmaf((acc[4 * nt + 2 * hr] - st[hr].x) * st[hr].y, g.x, b.x);
      const float y1 = fmaf((acc[4 * nt + 2 * hr + 1] - st[hr].x) * st[hr].y, g.y, b.y);
      store_pair(cr, c0 + 8 * nt, N, pair, y0, y1);
    }
  }
}

/* x (the sum before the norm) into pre's rows. */
template <typename T, int NH>
__device__ __forceinline__ void store_sum(const float (&acc)[NH / 2], T *pre, long long ldp, int M, int N, bool pair,
                                          int row0, int c0) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + 8 * hr;
    if (row >= M) continue;
    T *pr = pre + (long long)row * ldp;
#pragma unroll
    for (int nt = 0; nt < NH / 8; ++nt)
      store_pair(pr, c0 + 8 * nt, N, pair, acc[4 * nt + 2 * hr], acc[4 * nt + 2 * hr + 1]);
  }
}

}  // namespace nnc_gtl

#endif
