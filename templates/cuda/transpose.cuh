/* templates/cuda/transpose.cuh — y[b, c, r] = x[b, r, c]: the swap of a
 * tensor's last two axes, which the backward pass makes of every matrix a
 * GEMM needs the other way round (the LM head's [B*T, vocab] gradient, the
 * attention's [B, H, T, T] scores).
 *
 * A thread per output element reads x with a stride of a row: every warp
 * load touched 32 lines (GPT-2's 3.3 GB LM-head gradient: 22 ms on an H100,
 * 150 GB/s). Here a block moves a tile through shared memory, reading rows
 * of x and writing rows of y, both coalesced. Tiles of 4-byte types are
 * 32 x 32; of 2-byte types 64 x 64, so that a warp's reads of a row cover
 * 128 bytes (two loads) and, where y's rows are 4-byte aligned, each thread
 * writes two neighbouring outputs as one 4-byte store (1.5 TB/s with 32 x 32
 * tiles of bf16 on the LM-head gradient). The tile's extra element a row
 * keeps the column reads off one bank (for 2-byte types too: rows of 130
 * bytes put rows 2j and 2j + 2 one bank apart). */
#ifndef NNC_CUDA_TRANSPOSE_CUH
#define NNC_CUDA_TRANSPOSE_CUH

#include <stdint.h>
#include <string.h>

#include "nnc_cuda.cuh"

#define NNC_TRANSPOSE_ROWS 8   /* a block is 32 x 8 threads */

/* Elements a thread reads from a tile row and writes to a tile column: 2
 * for 2-byte types (a 64 x 64 tile), else 1 (32 x 32). */
template <class T> __host__ __device__ constexpr int nnc_transpose_per() { return sizeof(T) == 2 ? 2 : 1; }

/* Grid: x walks the tiles of one matrix, y and z the batch. PAIR (2-byte
 * types, rows even, y 4-byte aligned): a thread's two outputs are one
 * store. */
template <class T, bool PAIR>
__global__ void __launch_bounds__(32 * NNC_TRANSPOSE_ROWS)
nnc_transpose_last2(const T *__restrict__ x, T *__restrict__ y, long long batch, int rows, int cols) {
  constexpr int P = nnc_transpose_per<T>(), W = 32 * P;
  __shared__ T tile[W][W + 1];
  const long long b = blockIdx.y + (long long)blockIdx.z * gridDim.y;
  if (b >= batch) return;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col_tiles = (cols + W - 1) / W, tiles = (rows + W - 1) / W * col_tiles;
  const T *xb = x + b * rows * cols;
  T *yb = y + b * rows * cols;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int r0 = t / col_tiles * W, c0 = t % col_tiles * W;
    for (int i = ty; i < W; i += NNC_TRANSPOSE_ROWS)
#pragma unroll
      for (int p = 0; p < P; p++) {
        const int c = c0 + tx + 32 * p;
        if (r0 + i < rows && c < cols) tile[i][tx + 32 * p] = xb[(long long)(r0 + i) * cols + c];
      }
    __syncthreads();
    const int r = P * tx;   /* the thread's first output in a row of y */
    for (int i = ty; i < W && c0 + i < cols; i += NNC_TRANSPOSE_ROWS) {
      T *yr = yb + (long long)(c0 + i) * rows + r0 + r;
      if (PAIR && r0 + r + 1 < rows) {
        uint16_t lo, hi;
        memcpy(&lo, &tile[r][i], 2);
        memcpy(&hi, &tile[r + 1][i], 2);
        *reinterpret_cast<uint32_t *>(yr) = (uint32_t)lo | (uint32_t)hi << 16;
      } else {
#pragma unroll
        for (int p = 0; p < P; p++)
          if (r0 + r + p < rows) yr[p] = tile[r + p][i];
      }
    }
    __syncthreads();   /* the tile is reused by the block's next one */
  }
}

/* y[b, c, r] = x[b, r, c] for b < batch, r < rows, c < cols. */
template <class T>
inline nnc_cuda_status nnc_cuda_transpose_last2(long long batch, int rows, int cols, const T *x, T *y, cudaStream_t s,
                                                nnc_cuda_error *err) {
  if (batch < 0 || rows < 0 || cols < 0 || ((!x || !y) && batch * rows * cols > 0))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_transpose_last2", "batch %lld, rows %d, cols %d, x %p, y %p",
                         batch, rows, cols, (const void *)x, (void *)y);
  if (batch == 0 || rows == 0 || cols == 0) return NNC_CUDA_OK;
  constexpr int W = 32 * nnc_transpose_per<T>();
  const long long tiles = (long long)((rows + W - 1) / W) * ((cols + W - 1) / W);
  const long long gy = batch < 65535 ? batch : 65535;
  const dim3 grid((unsigned)(tiles < 65535 ? tiles : 65535), (unsigned)gy, (unsigned)((batch + gy - 1) / gy));
  const dim3 block(32, NNC_TRANSPOSE_ROWS);
  if (sizeof(T) == 2 && rows % 2 == 0 && (uintptr_t)y % 4 == 0)
    nnc_transpose_last2<T, true><<<grid, block, 0, s>>>(x, y, batch, rows, cols);
  else
    nnc_transpose_last2<T, false><<<grid, block, 0, s>>>(x, y, batch, rows, cols);
  return nnc_cuda_check_launch(err, "nnc_cuda_transpose_last2");
}

#endif
