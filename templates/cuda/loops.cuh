/* templates/cuda/loops.cuh — what the CUDA kernels nnc writes itself
 * (elementwise chains, data movement, reductions, gathers) use: loads that
 * turn any stored element into float, stores that round a float to the
 * element type, and the grid of a loop over n elements.
 *
 * Those kernels give each thread one output element at a time (a grid-stride
 * loop over the flat index), so consecutive threads touch consecutive
 * addresses of the output. */
#ifndef NNC_CUDA_LOOPS_CUH
#define NNC_CUDA_LOOPS_CUH

#include "nnc_cuda.cuh"

__device__ __forceinline__ float nnc_ld(float v) { return v; }
__device__ __forceinline__ float nnc_ld(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float nnc_ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float nnc_ld(int32_t v) { return (float)v; }

__device__ __forceinline__ void nnc_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void nnc_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void nnc_st(__half *p, float v) { *p = __float2half_rn(v); }

/* float or double to int32_t as C truncates, saturating instead of
 * overflowing; NaN gives 0. */
__device__ __forceinline__ int32_t nnc_to_i32(double v) {
  return v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}

/* Threads per block of the loops, and blocks for n elements: enough to fill
 * any current GPU several times over; the grid-stride loop does the rest. */
#define NNC_LOOP_THREADS 256
inline unsigned nnc_loop_blocks(long long n) {
  long long b = (n + NNC_LOOP_THREADS - 1) / NNC_LOOP_THREADS;
  return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

/* The flat index of this thread's first element and the grid's stride. nnc
 * checks that every tensor has fewer than 2^31 elements, so indices are int:
 * 64-bit division costs several times more than 32-bit on a GPU, and the
 * loops divide to find coordinates. */
#define NNC_LOOP(e, n) \
  for (int e = (int)(blockIdx.x * blockDim.x + threadIdx.x); e < (n); e += (int)(gridDim.x * blockDim.x))

/* The elementwise kernels' loop: a thread takes NNC_UNROLL elements `stride`
 * apart (each warp access stays coalesced), e0 the first, and issues all
 * their loads before it computes: several loads in flight a thread, where one
 * element's 2-byte load kept a bf16 kernel at a third of the bandwidth. The
 * launch gives a thread to every NNC_UNROLL elements (nnc's EC_UNROLL). */
#ifndef NNC_UNROLL
#define NNC_UNROLL 4
#endif
#define NNC_LOOP_UNROLLED(e0, stride, n)                                                                     \
  for (long long e0 = blockIdx.x * (long long)blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x; \
       e0 < (n); e0 += NNC_UNROLL * stride)
#define NNC_UNROLL_FOR(u) _Pragma("unroll") for (int u = 0; u < NNC_UNROLL; u++)

/* A kernel whose work only the first thread does (a sum in a fixed order). */
#define NNC_ONE_ITEM() \
  if (blockIdx.x != 0 || threadIdx.x != 0) return

/* y[r, c] = x[r * ldx + c], a block a row: a GEMM's output computed with
 * rows padded to 16 bytes (cuBLASLt's fast kernels need aligned rows) copied
 * to its dense place, converted to y's type on the way (a folded cast of the
 * output). Launch with one block per row. */
#define NNC_UNPAD_THREADS 512
template <typename Y, typename X> __global__ void nnc_unpad_rows(Y *y, const X *x, int cols, long long ldx) {
  const long long r = blockIdx.x;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) nnc_st(&y[r * cols + c], nnc_ld(x[r * ldx + c]));
}

#endif
