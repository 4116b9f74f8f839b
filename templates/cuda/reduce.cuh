/* templates/cuda/reduce.cuh — a sum, mean or max over one axis of a
 * contiguous tensor seen as [outer, len, inner], into [outer, inner].
 *
 * The backward pass is full of them: a bias's gradient sums [B*T, N] over
 * its rows (inner = N, a column reduction), softmax's and the norms'
 * gradients sum over the last axis (inner = 1, a row reduction). One thread
 * per output, walking len alone, left most of the GPU idle and read memory
 * with a stride (GPT-2 124M's bias gradients: 1 ms each at 25-100 GB/s).
 * Here the threads of a warp read neighbouring elements:
 *   inner == 1: a warp per row, its lanes striding along the row, then a
 *               shuffle tree;
 *   inner == 1 and len <= NNC_REDUCE_SHORT_LEN (max pooling's windows,
 *               9 wide): a thread per row, in order; a warp per row left
 *               23 of 32 lanes idle and took 0.67 ms of ResNet-18's 3;
 *   inner > 1 and len <= NNC_REDUCE_SHORT_LEN (NHWC pooling's taps): a
 *               thread per output;
 *   inner > 1:  a block of 32 warps per 32 neighbouring outputs, lanes
 *               across the columns, warps striding down len, then the 32
 *               warps' partials added in a fixed order;
 *   inner > 1 and len >= NNC_REDUCE_SPLIT_LEN: the rows split too, since
 *               a block per 32 columns leaves most SMs idle (GPT-2's 768
 *               bias columns: 24 blocks for 132 SMs, 3.8 ms a training
 *               step): a block per 256 columns (16-byte loads; 32 where
 *               rows are not 16-byte aligned) and NNC_REDUCE_CHUNK rows
 *               writes its partials to the workspace, then a second kernel
 *               adds each column's chunks in a fixed order, 8 warps to a
 *               block of 32 columns.
 * Sums are kept in double and every order is fixed: the same bits on every
 * run. A max lets NaN win, as the reference does. Every kernel is launched
 * early (pdl.cuh) and waits for the kernel before it first. */
#ifndef NNC_CUDA_REDUCE_CUH
#define NNC_CUDA_REDUCE_CUH

#include <math.h>
#include <stdint.h>

#include "loops.cuh"

enum nnc_reduce_op { NNC_REDUCE_SUM = 0, NNC_REDUCE_MEAN = 1, NNC_REDUCE_MAX = 2 };

template <int OP> __device__ __forceinline__ double nnc_reduce_init() { return OP == NNC_REDUCE_MAX ? -INFINITY : 0.0; }

template <int OP> __device__ __forceinline__ double nnc_reduce_combine(double a, double b) {
  if (OP != NNC_REDUCE_MAX) return a + b;
  return isnan(a) ? a : (isnan(b) || b > a ? b : a);
}

template <int OP> __device__ __forceinline__ float nnc_reduce_finish(double acc, int len) {
  return (float)(OP == NNC_REDUCE_MEAN ? acc / (double)len : acc);
}

/* inner == 1: rows of len elements, a warp each. */
template <class T, class U, int OP>
__global__ void nnc_reduce_rows(const T *__restrict__ x, U *__restrict__ y, int rows, int len) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start();
  const int lane = threadIdx.x & 31;
  const int warp = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), nwarps = (int)((gridDim.x * blockDim.x) >> 5);
  for (int r = warp; r < rows; r += nwarps) {
    const T *p = x + (long long)r * len;
    double acc = nnc_reduce_init<OP>();
    for (int l = lane; l < len; l += 32) acc = nnc_reduce_combine<OP>(acc, (double)nnc_ld(p[l]));
    for (int off = 16; off > 0; off >>= 1) acc = nnc_reduce_combine<OP>(acc, __shfl_xor_sync(0xffffffffu, acc, off));
    if (lane == 0) nnc_st(&y[r], nnc_reduce_finish<OP>(acc, len));
  }
}

/* inner == 1 and rows of at most NNC_REDUCE_SHORT_LEN: a thread each. */
#define NNC_REDUCE_SHORT_LEN 16
template <class T, class U, int OP>
__global__ void nnc_reduce_short_rows(const T *__restrict__ x, U *__restrict__ y, long long rows, int len) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start();
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += step) {
    const T *p = x + r * len;
    double acc = nnc_reduce_init<OP>();
    for (int l = 0; l < len; l++) acc = nnc_reduce_combine<OP>(acc, (double)nnc_ld(p[l]));
    nnc_st(&y[r], nnc_reduce_finish<OP>(acc, len));
  }
}

/* inner > 1 and at most NNC_REDUCE_SHORT_LEN rows (NHWC pooling's taps):
 * a thread per output, neighbouring threads on neighbouring columns. */
template <class T, class U, int OP>
__global__ void nnc_reduce_short_cols(const T *__restrict__ x, U *__restrict__ y, long long outer, int len, int inner) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start();
  const long long n = outer * inner, step = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
    const long long o = e / inner, i = e % inner;
    const T *p = x + o * len * inner + i;
    double acc = nnc_reduce_init<OP>();
    for (int l = 0; l < len; l++) acc = nnc_reduce_combine<OP>(acc, (double)nnc_ld(p[(long long)l * inner]));
    nnc_st(&y[e], nnc_reduce_finish<OP>(acc, len));
  }
}

#define NNC_REDUCE_COL_WARPS 32

/* inner > 1: a block per tile of 32 outputs of one outer index. */
template <class T, class U, int OP>
__global__ void __launch_bounds__(32 * NNC_REDUCE_COL_WARPS)
nnc_reduce_cols(const T *__restrict__ x, U *__restrict__ y, int outer, int len, int inner) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start();
  __shared__ double part[NNC_REDUCE_COL_WARPS][33];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int tiles = (inner + 31) / 32;
  for (int t = blockIdx.x; t < outer * tiles; t += gridDim.x) {
    const int o = t / tiles, i = (t % tiles) * 32 + lane;
    double acc = nnc_reduce_init<OP>();
    if (i < inner) {
      const T *p = x + (long long)o * len * inner + i;
#pragma unroll 4
      for (int l = w; l < len; l += NNC_REDUCE_COL_WARPS) acc = nnc_reduce_combine<OP>(acc, (double)nnc_ld(p[(long long)l * inner]));
    }
    part[w][lane] = acc;
    __syncthreads();
    if (w == 0) {
      double r = part[0][lane];
      for (int k = 1; k < NNC_REDUCE_COL_WARPS; k++) r = nnc_reduce_combine<OP>(r, part[k][lane]);
      if (i < inner) nnc_st(&y[o * inner + i], nnc_reduce_finish<OP>(r, len));
    }
    __syncthreads();   /* part is reused by the next tile */
  }
}

#define NNC_REDUCE_SPLIT_LEN 512
#define NNC_REDUCE_CHUNK 128

/* The split column reduction, part 1: block b sums rows [c*CHUNK, (c+1)*CHUNK)
 * of 32*VEC columns of one outer index (b = (o * tiles + tile) * chunks + c);
 * 8 warps, lane l on columns VEC*l .. VEC*l + VEC-1 of the tile, read as one
 * 16-byte load when VEC > 1 (a warp reads 512 neighbouring bytes of a row),
 * warp w on rows w, w+8, ...; the warps' sums add in order into
 * ws[o][c][column]. */
template <class T, int OP, int VEC>
__global__ void __launch_bounds__(256)
nnc_reduce_cols_part(const T *__restrict__ x, double *__restrict__ ws, int len, int inner, int chunks) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start();
  constexpr int W = 32 * VEC;
  __shared__ double part[8][W];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, tiles = (inner + W - 1) / W;
  const int c = (int)(blockIdx.x % (unsigned)chunks), tile = (int)(blockIdx.x / (unsigned)chunks % (unsigned)tiles);
  const long long o = blockIdx.x / ((long long)chunks * tiles);
  const int col = tile * W + VEC * lane, r1 = min(len, (c + 1) * NNC_REDUCE_CHUNK);
  const T *p = x + o * len * inner;
  double acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; j++) acc[j] = nnc_reduce_init<OP>();
  if (col < inner) {   /* inner is a multiple of VEC: the lane's columns are all in or all out */
#pragma unroll 4
    for (int r = c * NNC_REDUCE_CHUNK + w; r < r1; r += 8) {
      const T *row = p + (long long)r * inner + col;
      if (VEC > 1) {
        const uint4 u = *reinterpret_cast<const uint4 *>(row);
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = nnc_reduce_combine<OP>(acc[j], (double)nnc_ld(e[j]));
      } else {
        acc[0] = nnc_reduce_combine<OP>(acc[0], (double)nnc_ld(row[0]));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; j++) part[w][VEC * lane + j] = acc[j];
  __syncthreads();
  for (int t = threadIdx.x; t < W; t += 256) {
    double r = part[0][t];
    for (int k = 1; k < 8; k++) r = nnc_reduce_combine<OP>(r, part[k][t]);
    const int i = tile * W + t;
    if (i < inner) ws[(o * chunks + c) * inner + i] = r;
  }
}

/* Part 2: y[o, i] = the chunks' partials of column i, added in a fixed
 * order. Block b finishes 32 columns of one outer index; warp w adds chunks
 * w, w+8, ... (lane l on column l: a warp reads 256 neighbouring bytes),
 * then the 8 warp sums add in warp order, so every column's many chunks are
 * read by 8 warps at once rather than by one thread in turn. */
template <class U, int OP>
__global__ void __launch_bounds__(256)
nnc_reduce_cols_finish(const double *__restrict__ ws, U *__restrict__ y, int len, int inner, int chunks) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start();
  __shared__ double part[8][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, tiles = (inner + 31) / 32;
  const long long o = blockIdx.x / (unsigned)tiles;
  const int i = (int)(blockIdx.x % (unsigned)tiles) * 32 + lane;
  double r = nnc_reduce_init<OP>();
  if (i < inner) {
    const double *p = ws + o * chunks * (long long)inner + i;
#pragma unroll 4
    for (int c = w; c < chunks; c += 8) r = nnc_reduce_combine<OP>(r, p[(long long)c * inner]);
  }
  part[w][lane] = r;
  __syncthreads();
  if (w == 0 && i < inner) {
    for (int k = 1; k < 8; k++) r = nnc_reduce_combine<OP>(r, part[k][lane]);
    nnc_st(&y[o * inner + i], nnc_reduce_finish<OP>(r, len));
  }
}

/* Workspace bytes nnc_cuda_reduce needs for these sizes: the split column
 * reduction's partials, else 0. */
inline size_t nnc_cuda_reduce_workspace_bytes(int outer, int len, int inner) {
  if (inner <= 1 || len < NNC_REDUCE_SPLIT_LEN || outer <= 0) return 0;
  return (size_t)outer * (size_t)((len + NNC_REDUCE_CHUNK - 1) / NNC_REDUCE_CHUNK) * (size_t)inner * sizeof(double);
}

template <class T, class U, int OP>
inline nnc_cuda_status nnc_cuda_reduce_op(int outer, int len, int inner, const T *x, U *y, void *ws, size_t ws_bytes,
                                          cudaStream_t s, nnc_cuda_error *err) {
  if (outer < 0 || len < 0 || inner < 0 || (!x && len > 0) || !y)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_reduce", "outer %d, len %d, inner %d, x %p, y %p", outer, len,
                         inner, (const void *)x, (void *)y);
  if (outer == 0 || inner == 0) return NNC_CUDA_OK;
  const size_t need = nnc_cuda_reduce_workspace_bytes(outer, len, inner);
  if (need && (!ws || ws_bytes < need || (uintptr_t)ws % sizeof(double)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_reduce",
                         "outer %d, len %d, inner %d: expected a workspace of %zu bytes aligned to 8, found %zu at %p",
                         outer, len, inner, need, ws ? ws_bytes : (size_t)0, ws);
  if (need) {
    /* 16-byte loads where every row starts 16-byte aligned */
    constexpr int VEC = sizeof(T) <= 4 ? 16 / (int)sizeof(T) : 1;
    const bool vec = VEC > 1 && inner % VEC == 0 && (uintptr_t)x % 16 == 0;
    const int chunks = (len + NNC_REDUCE_CHUNK - 1) / NNC_REDUCE_CHUNK, width = vec ? 32 * VEC : 32;
    const long long blocks = (long long)outer * ((inner + width - 1) / width) * chunks;
    if (blocks >= (1ll << 31))
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_reduce", "outer %d, len %d, inner %d: %lld blocks, expected "
                           "fewer than 2^31", outer, len, inner, blocks);
    if (vec) nnc_pdl::launch(nnc_reduce_cols_part<T, OP, VEC>, (unsigned)blocks, 256, 0, s, x, (double *)ws, len, inner, chunks);
    else nnc_pdl::launch(nnc_reduce_cols_part<T, OP, 1>, (unsigned)blocks, 256, 0, s, x, (double *)ws, len, inner, chunks);
    const long long fb = (long long)outer * ((inner + 31) / 32);
    nnc_pdl::launch(nnc_reduce_cols_finish<U, OP>, (unsigned)fb, 256, 0, s, (const double *)ws, y, len, inner, chunks);
  } else if (inner == 1 && len <= NNC_REDUCE_SHORT_LEN) {
    const long long blocks = ((long long)outer + 255) / 256;
    nnc_pdl::launch(nnc_reduce_short_rows<T, U, OP>, (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), 256, 0, s, x, y,
                    outer, len);
  } else if (len <= NNC_REDUCE_SHORT_LEN) {
    const long long blocks = ((long long)outer * inner + 255) / 256;
    nnc_pdl::launch(nnc_reduce_short_cols<T, U, OP>, (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), 256, 0, s, x, y,
                    outer, len, inner);
  } else if (inner == 1) {
    const long long blocks = ((long long)outer * 32 + 255) / 256;
    nnc_pdl::launch(nnc_reduce_rows<T, U, OP>, (unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, s, x, y, outer, len);
  } else {
    const long long tiles = (long long)outer * ((inner + 31) / 32);
    nnc_pdl::launch(nnc_reduce_cols<T, U, OP>, (unsigned)(tiles < 65535 ? tiles : 65535), 32 * NNC_REDUCE_COL_WARPS, 0, s,
                    x, y, outer, len, inner);
  }
  return nnc_cuda_check_launch(err, "nnc_cuda_reduce");
}

/* y[o, i] = op over l of x[o, l, i], for op one of nnc_reduce_op; ws holds
 * nnc_cuda_reduce_workspace_bytes(outer, len, inner) bytes (may be NULL
 * when that is 0). */
template <class T, class U>
inline nnc_cuda_status nnc_cuda_reduce(nnc_reduce_op op, int outer, int len, int inner, const T *x, U *y, void *ws,
                                       size_t ws_bytes, cudaStream_t s, nnc_cuda_error *err) {
  if (op == NNC_REDUCE_MAX)
    return nnc_cuda_reduce_op<T, U, NNC_REDUCE_MAX>(outer, len, inner, x, y, ws, ws_bytes, s, err);
  if (op == NNC_REDUCE_MEAN)
    return nnc_cuda_reduce_op<T, U, NNC_REDUCE_MEAN>(outer, len, inner, x, y, ws, ws_bytes, s, err);
  return nnc_cuda_reduce_op<T, U, NNC_REDUCE_SUM>(outer, len, inner, x, y, ws, ws_bytes, s, err);
}

#endif
