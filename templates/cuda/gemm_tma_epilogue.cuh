/* templates/cuda/gemm_tma_epilogue.cuh — the epilogue of gemm_tma.cuh: a
 * consumer warpgroup's 64 x BN tile of accumulators written into C's rows,
 * whatever their length and alignment, 64 columns at a time.
 *
 * The stages belong to the producer's loads of the next tile by now, so a
 * warpgroup has a buffer of its own: 64 rows x 64 f32 (16 KB, no padding:
 * the 192 KB of stages and both buffers just fit a block's 227 KB). The
 * column chunk c of row r sits at c ^ 8 (r % 4) (gemm_tma_rows.cuh's swz),
 * so the float2 writes of a half-warp (4 rows, 8 columns) hit 32 distinct
 * banks, as do the row reads of gemm_tma_rows.cuh's loops. alpha and the
 * bias are applied on the way in; the row loops do the rest. */
#ifndef NNC_CUDA_GEMM_TMA_EPILOGUE_CUH
#define NNC_CUDA_GEMM_TMA_EPILOGUE_CUH

#include <type_traits>

#include "gemm_tma_rows.cuh"
#include "nnc_cuda.cuh"

namespace nnc_gt {

/* Named barrier 1 + wg over the 128 threads of consumer warpgroup wg (bar 0 is __syncthreads'). */
__device__ __forceinline__ void wg_sync(int wg) {
  if (wg == 0)
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

/* Columns [64 CH, 64 CH + 64) of the warpgroup's accumulators (wgmma's
 * layout, wgmma.cuh), times alpha plus the tile's bias (sbias: BN values
 * of T, zeros past N or without bias), into the buffer cs. */
template <typename T, int BN, int CH>
__device__ __forceinline__ void stage_chunk(float *cs, const float (&acc)[BN / 2], const T *sbias, float alpha,
                                            int warp, int lane) {
#pragma unroll
  for (int j = 0; j < CHUNK / 8; ++j) {
    const int col = j * 8 + 2 * (lane % 4);
    const float b0 = nnc_dtype<T>::load(sbias[CH * CHUNK + col]), b1 = nnc_dtype<T>::load(sbias[CH * CHUNK + col + 1]);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = warp * 16 + lane / 4 + 8 * hr;
      const int e = (CH * CHUNK / 8 + j) * 4 + 2 * hr;
      *reinterpret_cast<float2 *>(cs + swz(row, col)) = make_float2(fmaf(acc[e], alpha, b0), fmaf(acc[e + 1], alpha, b1));
    }
  }
}

/* f(std::integral_constant<int, ch>) for a run-time ch < N: a staging of
 * chunk ch keeps the accumulators' indices constants while the chunk loop
 * around it, and the store loops in it, are compiled once rather than
 * unrolled N times. */
template <int N, int CH = 0, class F> __device__ __forceinline__ void with_chunk(int ch, F &&f) {
  if constexpr (CH < N) {
    if (ch == CH)
      f(std::integral_constant<int, CH>());
    else
      with_chunk<N, CH + 1>(ch, f);
  }
}

/* Stores a staged chunk of at most ROWS rows: c, res (or NULL) point at
 * the chunk's first element of C and of the residual; vec: every row of
 * both starts 16-byte aligned. */
template <bool EPI, int ROWS = 64, typename TO>
__device__ __forceinline__ void store_chunk(const float *cs, TO *c, long long ldc, const TO *res, long long ldr,
                                            nnc_cuda_act act, bool act_last, bool stream, bool vec, int rows, int cols,
                                            int t) {
  if constexpr (!EPI) {
    if (vec && stream)
      store_plain16<true, TO, ROWS>(cs, c, ldc, rows, cols, t);
    else if (vec)
      store_plain16<false, TO, ROWS>(cs, c, ldc, rows, cols, t);
    else if (stream)
      store_plain<true>(cs, c, ldc, rows, cols, t);
    else
      store_plain<false>(cs, c, ldc, rows, cols, t);
  } else {
    if (vec)
      store_epi_any<true>(cs, c, ldc, res, ldr, act, act_last, stream, rows, cols, t);
    else
      store_epi_any<false>(cs, c, ldc, res, ldr, act, act_last, stream, rows, cols, t);
  }
}

}  // namespace nnc_gt

#endif
