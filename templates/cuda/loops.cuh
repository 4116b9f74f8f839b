/* templates/cuda/loops.cuh — what the CUDA kernels nnc writes itself
 * (elementwise chains, data movement, reductions, gathers) use: loads that
 * turn any stored element into float, stores that round a float to the
 * element type, and the grid of a loop over n elements.
 *
 * Those kernels give each thread one output element at a time (a grid-stride
 * loop over the flat index), so consecutive threads touch consecutive
 * addresses of the output; or, where rows are whole 16-byte vectors, one
 * vector at a time (nnc_vld, nnc_vst, nnc_gather). */
#ifndef NNC_CUDA_LOOPS_CUH
#define NNC_CUDA_LOOPS_CUH

#include "nnc_cuda.cuh"
#include "pdl.cuh"

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
/* The elements of one vector of the vector loops: unrolled, so that their
 * arrays stay in registers. */
#define NNC_VEC_FOR(l, V) _Pragma("unroll") for (int l = 0; l < (V); l++)

/* The row and reduce kernels that carry elementwise chains (nnc's
 * device_loops_chains.c). A row kernel gives a warp a row, NNC_ROW_WARPS
 * rows a block: NNC_ROW names the row r and the lane, and returns from a
 * warp past the last row (all its lanes alike, before any shuffle);
 * nnc_row_sum adds a float over the warp (every lane gets the sum). A
 * reduce kernel's threads share partials through NNC_SHARED memory between
 * NNC_SYNC barriers; NNC_BLOCK and NNC_THREAD are the block's and the
 * thread's index. NNC_SLOT_FOR unrolls over a lane's slots of its row. */
#define NNC_ROW_WARPS 4
inline unsigned nnc_row_blocks(long long rows) {
  return (unsigned)((rows + NNC_ROW_WARPS - 1) / NNC_ROW_WARPS);
}
#define NNC_ROW(r, lane, rows)                                                         \
  const int r = (int)(blockIdx.x * NNC_ROW_WARPS + threadIdx.x / 32), lane = (int)(threadIdx.x % 32); \
  if (r >= (rows)) return
__device__ __forceinline__ float nnc_row_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
#define NNC_SLOT_FOR(u, U) _Pragma("unroll") for (int u = 0; u < (U); u++)
#define NNC_SHARED __shared__
#define NNC_SYNC() __syncthreads()
#define NNC_BLOCK blockIdx.x
#define NNC_THREAD threadIdx.x

/* N elements of T at p as floats through 16-byte loads, and back rounded to
 * T: p 16-byte aligned, N * sizeof(T) a multiple of 16 (an f32 array in a
 * chain with bf16 ones takes two vectors for their one). */
template <typename T, int N> __device__ __forceinline__ void nnc_vld(const T *p, float (&v)[N]) {
  static_assert(N * sizeof(T) % 16 == 0, "whole 16-byte vectors");
#pragma unroll
  for (int i = 0; i < N; i += 16 / (int)sizeof(T)) {
    const uint4 q = *reinterpret_cast<const uint4 *>(p + i);
    const T *h = reinterpret_cast<const T *>(&q);
#pragma unroll
    for (int k = 0; k < 16 / (int)sizeof(T); ++k) v[i + k] = nnc_ld(h[k]);
  }
}
template <typename T, int N> __device__ __forceinline__ void nnc_vst(T *p, const float (&v)[N]) {
  static_assert(N * sizeof(T) % 16 == 0, "whole 16-byte vectors");
#pragma unroll
  for (int i = 0; i < N; i += 16 / (int)sizeof(T)) {
    uint4 q;
    T *h = reinterpret_cast<T *>(&q);
#pragma unroll
    for (int k = 0; k < 16 / (int)sizeof(T); ++k) nnc_st(&h[k], v[i + k]);
    *reinterpret_cast<uint4 *>(p + i) = q;
  }
}

/* 16 bytes of T as V floats, and back rounded to T. */
template <typename T> struct nnc_vec {
  static constexpr int V = 16 / (int)sizeof(T);
  __device__ __forceinline__ static void load(const T *p, float (&v)[V]) { nnc_vld(p, v); }
  __device__ __forceinline__ static void store(T *p, const float (&v)[V]) { nnc_vst(p, v); }
};

/* Whether every pointer is 16-byte aligned: the vector loops' test of a
 * caller's buffer (the arena's and the weights' offsets are multiples of 256). */
template <typename... P> __host__ __device__ __forceinline__ bool nnc_aligned16(const P *...p) {
  return ((reinterpret_cast<uintptr_t>(p) | ... | uintptr_t(0)) % 16) == 0;
}

/* y[e] = f(y[e], x[e]) for e < n (READ_Y false: f(0, x[e]), y not read; x
 * NULL: f(y[e], 0)): the epilogue kernels after cuBLASLt. A thread takes
 * NNC_UNROLL 16-byte vectors of each array, every load issued before the
 * first store, where y and x start 16-byte aligned (a branch the whole grid
 * takes alike; else an element at a time); the last n % V elements go to
 * the first threads. On an H200, BERT's erf-GELU over 4096 x 1536 bf16 took
 * 20.7 us (ncu) an element at a time: 1.2 TB/s. nnc_map_blocks gives the
 * grid: a thread a vector up to its cap of blocks, NNC_UNROLL past it. It
 * may be launched early (nnc_pdl::launch): it waits for the kernels before
 * it first. */
template <bool READ_Y = true, typename T, typename F>
__device__ __forceinline__ void nnc_map(T *y, const T *x, long long n, F f) {
  nnc_pdl::wait(); /* launched early (pdl.cuh): the GEMM before it may still run */
  nnc_pdl::let_next_start();
  using W = nnc_vec<T>;
  constexpr int V = W::V;
  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
  long long done = 0;
  if ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x)) % 16 == 0) {
    const long long nv = n / V;
    for (long long v0 = tid; v0 < nv; v0 += NNC_UNROLL * stride) {
      float a[NNC_UNROLL][V], b[NNC_UNROLL][V];
      NNC_UNROLL_FOR(u) {
        if (v0 + u * stride >= nv) break;
        const long long e = (v0 + u * stride) * V;
#pragma unroll
        for (int i = 0; i < V; ++i) a[u][i] = b[u][i] = 0.0f;
        if (READ_Y) W::load(y + e, a[u]);
        if (x) W::load(x + e, b[u]);
      }
      NNC_UNROLL_FOR(u) {
        if (v0 + u * stride >= nv) break;
        float o[V];
#pragma unroll
        for (int i = 0; i < V; ++i) o[i] = f(a[u][i], b[u][i]);
        W::store(y + (v0 + u * stride) * V, o);
      }
    }
    done = nv * V;
  }
  for (long long e = done + tid; e < n; e += stride)
    nnc_st(&y[e], f(READ_Y ? nnc_ld(y[e]) : 0.0f, x ? nnc_ld(x[e]) : 0.0f));
}

/* Threads for nv vectors: NNC_UNROLL a thread, or one where that leaves
 * fewer than NNC_MAP_THREADS threads: a small map spread over few SMs waits
 * on their arithmetic (BERT at B=1 T=16: 3 blocks took its erf-GELU 1.5 us
 * longer than the element loop's 24). */
#define NNC_MAP_THREADS (128 * NNC_LOOP_THREADS)
inline long long nnc_vec_threads(long long nv) {
  const long long threads = (nv + NNC_UNROLL - 1) / NNC_UNROLL;
  if (threads < NNC_MAP_THREADS) return nv < NNC_MAP_THREADS ? nv : NNC_MAP_THREADS;
  return threads;
}

/* Blocks of NNC_LOOP_THREADS for nnc_map over n elements of T: a thread a
 * vector (and one for the tail), the most loads in flight. On an H200,
 * BERT's erf-GELU over 4096 x 1536 bf16 took 9.2 us so against 10.2 with
 * NNC_UNROLL vectors a thread, and 6.4 against 7.7 with nnc_gelu_erf16
 * (bench/gpu_map.cu, L2 warm). */
template <typename T> inline unsigned nnc_map_blocks(long long n) {
  return nnc_loop_blocks(n / nnc_vec<T>::V + 1);
}

/* y[r, :] = table[ids[r], :] for rows r < rows of C elements, an id outside
 * [0, V) a row of NaN (the run cannot stop here): the embedding lookup. Where
 * C * sizeof of each type is a multiple of 16 bytes (the emitter's part) and
 * y and table start 16-byte aligned, a thread takes NNC_UNROLL vectors of N
 * elements (16 bytes of the narrower type), every load issued before the
 * first store, and divides once a vector; else an element at a time. On an
 * H200 GPT-2's 8192 x 768 bf16 lookup took 27.3 us an element a thread.
 * Grid: nnc_vec_threads(rows * C / N) threads. */
template <int N, typename Y, typename T, typename I>
__device__ __forceinline__ void nnc_gather(Y *y, const T *table, const I *ids, int rows, int V, int C) {
  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
  if (!nnc_aligned16(y, table)) {
    for (long long e = tid; e < (long long)rows * C; e += stride) {
      const int id = (int)ids[e / C];
      nnc_st(&y[e], id >= 0 && id < V ? nnc_ld(table[id * C + e % C]) : NAN);
    }
    return;
  }
  const int cv = C / N, nv = rows * cv;
  for (long long v0 = tid; v0 < nv; v0 += NNC_UNROLL * stride) {
    float a[NNC_UNROLL][N];
    NNC_UNROLL_FOR(u) {
      if (v0 + u * stride >= nv) break;
      const int v = (int)(v0 + u * stride), id = (int)ids[v / cv];
      if (id >= 0 && id < V) nnc_vld(table + id * C + v % cv * N, a[u]);
      else {
#pragma unroll
        for (int i = 0; i < N; ++i) a[u][i] = NAN;
      }
    }
    NNC_UNROLL_FOR(u) {
      if (v0 + u * stride >= nv) break;
      nnc_vst(y + (v0 + u * stride) * N, a[u]);
    }
  }
}

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
