/* templates/cuda/transpose.cuh — y[b, c, r] = x[b, r, c]: the swap of a
 * tensor's last two axes, which the backward pass makes of every matrix a
 * GEMM needs the other way round (the LM head's [B*T, vocab] gradient, the
 * attention's [B, H, T, T] scores).
 *
 * A thread per output element reads x with a stride of a row: every warp
 * load touched 32 lines (GPT-2's 3.3 GB LM-head gradient: 22 ms on an H100,
 * 150 GB/s). Here a block moves a 32 x 32 tile through shared memory, reading
 * rows of x and writing rows of y, both coalesced; the tile's extra column
 * keeps the column reads off one bank. */
#ifndef NNC_CUDA_TRANSPOSE_CUH
#define NNC_CUDA_TRANSPOSE_CUH

#include "nnc_cuda.cuh"

#define NNC_TRANSPOSE_TILE 32
#define NNC_TRANSPOSE_ROWS 8   /* a block is 32 x 8 threads: 4 elements each */

/* Grid: x walks the tiles of one matrix, y and z the batch. */
template <class T>
__global__ void __launch_bounds__(NNC_TRANSPOSE_TILE * NNC_TRANSPOSE_ROWS)
nnc_transpose_last2(const T *__restrict__ x, T *__restrict__ y, long long batch, int rows, int cols) {
  __shared__ T tile[NNC_TRANSPOSE_TILE][NNC_TRANSPOSE_TILE + 1];
  const long long b = blockIdx.y + (long long)blockIdx.z * gridDim.y;
  if (b >= batch) return;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col_tiles = (cols + NNC_TRANSPOSE_TILE - 1) / NNC_TRANSPOSE_TILE;
  const int tiles = (rows + NNC_TRANSPOSE_TILE - 1) / NNC_TRANSPOSE_TILE * col_tiles;
  const T *xb = x + b * rows * cols;
  T *yb = y + b * rows * cols;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int r0 = t / col_tiles * NNC_TRANSPOSE_TILE, c0 = t % col_tiles * NNC_TRANSPOSE_TILE;
    for (int i = ty; i < NNC_TRANSPOSE_TILE; i += NNC_TRANSPOSE_ROWS)
      if (r0 + i < rows && c0 + tx < cols) tile[i][tx] = xb[(long long)(r0 + i) * cols + c0 + tx];
    __syncthreads();
    for (int i = ty; i < NNC_TRANSPOSE_TILE; i += NNC_TRANSPOSE_ROWS)
      if (c0 + i < cols && r0 + tx < rows) yb[(long long)(c0 + i) * rows + r0 + tx] = tile[tx][i];
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
  const long long tiles = (long long)((rows + NNC_TRANSPOSE_TILE - 1) / NNC_TRANSPOSE_TILE) *
                          ((cols + NNC_TRANSPOSE_TILE - 1) / NNC_TRANSPOSE_TILE);
  const long long gy = batch < 65535 ? batch : 65535;
  const dim3 grid((unsigned)(tiles < 65535 ? tiles : 65535), (unsigned)gy, (unsigned)((batch + gy - 1) / gy));
  nnc_transpose_last2<T><<<grid, dim3(NNC_TRANSPOSE_TILE, NNC_TRANSPOSE_ROWS), 0, s>>>(x, y, batch, rows, cols);
  return nnc_cuda_check_launch(err, "nnc_cuda_transpose_last2");
}

#endif
