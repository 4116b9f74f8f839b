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
 *   inner > 1:  a block of 32 warps per 32 neighbouring outputs, lanes
 *               across the columns, warps striding down len, then the 32
 *               warps' partials added in a fixed order.
 * Sums are kept in double and every order is fixed: the same bits on every
 * run. A max lets NaN win, as the reference does. */
#ifndef NNC_CUDA_REDUCE_CUH
#define NNC_CUDA_REDUCE_CUH

#include <math.h>

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

#define NNC_REDUCE_COL_WARPS 32

/* inner > 1: a block per tile of 32 outputs of one outer index. */
template <class T, class U, int OP>
__global__ void __launch_bounds__(32 * NNC_REDUCE_COL_WARPS)
nnc_reduce_cols(const T *__restrict__ x, U *__restrict__ y, int outer, int len, int inner) {
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

template <class T, class U, int OP>
inline nnc_cuda_status nnc_cuda_reduce_op(int outer, int len, int inner, const T *x, U *y, cudaStream_t s,
                                          nnc_cuda_error *err) {
  if (outer < 0 || len < 0 || inner < 0 || (!x && len > 0) || !y)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_reduce", "outer %d, len %d, inner %d, x %p, y %p", outer, len,
                         inner, (const void *)x, (void *)y);
  if (outer == 0 || inner == 0) return NNC_CUDA_OK;
  if (inner == 1) {
    const long long blocks = ((long long)outer * 32 + 255) / 256;
    nnc_reduce_rows<T, U, OP><<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, s>>>(x, y, outer, len);
  } else {
    const long long tiles = (long long)outer * ((inner + 31) / 32);
    nnc_reduce_cols<T, U, OP><<<(unsigned)(tiles < 65535 ? tiles : 65535), 32 * NNC_REDUCE_COL_WARPS, 0, s>>>(
      x, y, outer, len, inner);
  }
  return nnc_cuda_check_launch(err, "nnc_cuda_reduce");
}

/* y[o, i] = op over l of x[o, l, i], for op one of nnc_reduce_op. */
template <class T, class U>
inline nnc_cuda_status nnc_cuda_reduce(nnc_reduce_op op, int outer, int len, int inner, const T *x, U *y, cudaStream_t s,
                                       nnc_cuda_error *err) {
  if (op == NNC_REDUCE_MAX) return nnc_cuda_reduce_op<T, U, NNC_REDUCE_MAX>(outer, len, inner, x, y, s, err);
  if (op == NNC_REDUCE_MEAN) return nnc_cuda_reduce_op<T, U, NNC_REDUCE_MEAN>(outer, len, inner, x, y, s, err);
  return nnc_cuda_reduce_op<T, U, NNC_REDUCE_SUM>(outer, len, inner, x, y, s, err);
}

#endif
