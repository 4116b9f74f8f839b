/* templates/cuda/gemm_stats.cuh — the row statistics that the GEMM's norm
 * prologue needs: for each row of A (every batch item), (mean, rstd) in f32,
 * rstd = 1 / sqrt(var + eps) with the population variance; rmsnorm stores
 * (0, 1 / sqrt(mean(x^2) + eps)) so the GEMM applies one formula,
 * (x - mean) * rstd * gamma + beta.
 *
 * One warp per row, 16-byte loads (the GEMM wrapper has already checked that
 * rows of A are 16-byte aligned and K % 8 == 0). Layernorm reads the row
 * twice, mean first and then the mean of (x - mean)^2, so no E[x^2] - mean^2
 * cancellation; the second read hits L1 (a warp's row is K * 2 bytes). */
#ifndef NNC_CUDA_GEMM_STATS_CUH
#define NNC_CUDA_GEMM_STATS_CUH

#include "nnc_cuda.cuh"

constexpr int NNC_GEMM_STATS_WARPS = 8;

template <typename T, bool RMS>
__global__ void __launch_bounds__(NNC_GEMM_STATS_WARPS * 32)
    nnc_gemm_row_stats_kernel(const T *__restrict__ a, long long lda, long long stride_a, int M,
                              int K, long long rows, float eps, float2 *__restrict__ stats) {
  constexpr int V = nnc_dtype<T>::VEC;
  const long long r = (long long)blockIdx.x * NNC_GEMM_STATS_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return; /* whole warps leave: the shuffles below stay full-warp */
  const T *x = a + (r / M) * stride_a + (r % M) * lda;
  const int nv = K / V;
  float mean = 0.0f;
  if constexpr (!RMS) {
    float s = 0.0f;
#pragma unroll 4
    for (int v = lane; v < nv; v += 32) {
      float f[V];
      nnc_load_vec(x + v * V, f);
#pragma unroll
      for (int j = 0; j < V; ++j) s += f[j];
    }
    mean = nnc_warp_reduce<nnc_sum_op, 32>(s) / (float)K;
  }
  float q = 0.0f;
#pragma unroll 4
  for (int v = lane; v < nv; v += 32) {
    float f[V];
    nnc_load_vec(x + v * V, f);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = f[j] - mean;
      q = fmaf(d, d, q);
    }
  }
  const float rstd = rsqrtf(nnc_warp_reduce<nnc_sum_op, 32>(q) / (float)K + eps);
  if (lane == 0) stats[r] = make_float2(mean, rstd);
}

/* Statistics of rows = batch * M rows of K elements (K % 8 == 0, K > 0, rows
 * 16-byte aligned: the caller checks) into stats[rows]. */
template <typename T>
nnc_cuda_status nnc_cuda_gemm_row_stats(const T *a, long long lda, long long stride_a, int M, int K,
                                        int batch, bool rms, float eps, float2 *stats,
                                        cudaStream_t stream, nnc_cuda_error *err) {
  const long long rows = (long long)M * batch;
  if (rows == 0) return NNC_CUDA_OK;
  const long long blocks = (rows + NNC_GEMM_STATS_WARPS - 1) / NNC_GEMM_STATS_WARPS;
  if (rms)
    nnc_gemm_row_stats_kernel<T, true><<<(unsigned)blocks, NNC_GEMM_STATS_WARPS * 32, 0, stream>>>(
        a, lda, stride_a, M, K, rows, eps, stats);
  else
    nnc_gemm_row_stats_kernel<T, false><<<(unsigned)blocks, NNC_GEMM_STATS_WARPS * 32, 0, stream>>>(
        a, lda, stride_a, M, K, rows, eps, stats);
  return nnc_cuda_check_launch(err, "nnc_cuda_gemm_row_stats");
}

#endif
