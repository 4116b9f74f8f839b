/* templates/cuda/rows.cuh — the machinery shared by the row kernels
 * (softmax, layernorm, rmsnorm, the cross-entropy and its gradient): a row
 * held in registers, the choice of configuration from the row length, and
 * the launch.
 *
 * One pass over memory: a group of TPR threads (a part of a warp, a warp, or
 * a whole block) owns one row. Each thread loads VPT 16-byte vectors of it
 * into float registers, the group reduces its statistics by warp shuffles
 * (plus shared memory across warps when TPR > 32), and each thread writes
 * its vectors once. A row whose start is not 16-byte aligned (an odd row
 * length with ld == cols) is split into a scalar head up to the first
 * 16-byte boundary, full vectors, and a scalar tail; the head and tail
 * elements (fewer than 2 * VEC) are spread over the group's threads.
 *
 * Rows too long for the largest register configuration, or whose input and
 * output are not equally aligned, take the streaming kernel: one block per
 * row, scalar loads, one read of the row per statistic (the re-reads mostly
 * hit L2). */
#ifndef NNC_CUDA_ROWS_CUH
#define NNC_CUDA_ROWS_CUH

#include <type_traits>

#include "nnc_cuda.cuh"
#include "pdl.cuh"

/* The arguments of every row kernel. Row r of x starts at x + r * ldx (ld in
 * elements, >= cols). gamma/beta have cols elements and may be NULL (then 1
 * and 0); softmax ignores them and eps. */
template <typename T> struct nnc_rows_args {
  int rows, cols;
  const T *x;
  ptrdiff_t ldx;
  T *y;
  ptrdiff_t ldy;
  const T *gamma, *beta;
  float eps;
};

/* One row in the registers of TPR threads, VPT vectors each. RAW keeps the
 * vectors as loaded (T) and converts at each use: half the registers for
 * bf16/f16, which lets more warps fit; map() needs floats (RAW false). */
template <typename T, int TPR, int VPT, bool RAW = false> struct nnc_row_regs {
  static constexpr int VEC = nnc_dtype<T>::VEC;
  /* Head and tail hold at most 2 * (VEC - 1) elements. */
  static constexpr int EXTRA = (2 * (VEC - 1) + TPR - 1) / TPR;
  using elem = typename std::conditional<RAW, T, float>::type;

  alignas(16) elem v[VPT][VEC];
  float e[EXTRA];
  int ecol[EXTRA]; /* column of e[k], -1 when the slot is unused */
  alignas(16) T pv[2][VPT][VEC]; /* params(): p0's and p1's values at this thread's columns */
  float pe[2][EXTRA];
  int head, nvec, lane;

  __device__ __forceinline__ bool has_vec(int i) const { return i * TPR + lane < nvec; }
  __device__ __forceinline__ int vec_col(int i) const { return head + (i * TPR + lane) * VEC; }
  __device__ __forceinline__ float at(int i, int j) const {
    if constexpr (RAW) return nnc_dtype<T>::load(v[i][j]);
    else return v[i][j];
  }

  /* Loads cols elements at x (cols 0 loads nothing); unused slots get pad. */
  __device__ __forceinline__ void load(const T *x, int cols, int lane_, float pad) {
    lane = lane_;
    const int h = (int)(((16u - (reinterpret_cast<uintptr_t>(x) & 15u)) & 15u) / sizeof(T));
    head = h < cols ? h : cols;
    nvec = (cols - head) / VEC;
    const int tail = cols - head - nvec * VEC;
    /* All vector loads are issued before any value is used. */
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (has_vec(i)) {
        if constexpr (RAW) *reinterpret_cast<uint4 *>(v[i]) = *reinterpret_cast<const uint4 *>(x + vec_col(i));
        else nnc_load_vec(x + vec_col(i), v[i]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          if constexpr (RAW) v[i][j] = nnc_dtype<T>::store(pad);
          else v[i][j] = pad;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < EXTRA; ++k) {
      const int s = k * TPR + lane;
      const int col = s < head ? s : (s - head < tail ? head + nvec * VEC + (s - head) : -1);
      ecol[k] = col;
      e[k] = col >= 0 ? nnc_dtype<T>::load(x[col]) : pad;
    }
  }

  /* acc = f(acc, value) over this thread's elements of the row. */
  template <class F> __device__ __forceinline__ float fold(float acc, F f) const {
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      if (has_vec(i)) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc = f(acc, at(i, j));
      }
#pragma unroll
    for (int k = 0; k < EXTRA; ++k)
      if (ecol[k] >= 0) acc = f(acc, e[k]);
    return acc;
  }

  /* value = f(value) in place, pads included (f must accept them). */
  template <class F> __device__ __forceinline__ void map(F f) {
    static_assert(!RAW, "map() writes floats");
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[i][j] = f(v[i][j]);
#pragma unroll
    for (int k = 0; k < EXTRA; ++k) e[k] = f(e[k]);
  }

  /* Loads p0's and p1's values at this thread's columns (a layernorm's
   * gamma and beta; NULL: 1 and 0) for store(). Called right after load(),
   * so that their latency passes under the row's reductions instead of
   * after them. */
  __device__ __forceinline__ void params(const T *p0, const T *p1) {
    const T *p[2] = {p0, p1};
#pragma unroll
    for (int q = 0; q < 2; ++q) {
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        const T *src = p[q] && has_vec(i) ? p[q] + vec_col(i) : nullptr;
        if (src && nnc_is_aligned16(src)) {
          *reinterpret_cast<uint4 *>(pv[q][i]) = *reinterpret_cast<const uint4 *>(src);
        } else if (src) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) pv[q][i][j] = src[j];
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) pv[q][i][j] = nnc_dtype<T>::store(q == 0 ? 1.0f : 0.0f);
        }
      }
#pragma unroll
      for (int k = 0; k < EXTRA; ++k) pe[q][k] = p[q] && ecol[k] >= 0 ? nnc_dtype<T>::load(p[q][ecol[k]]) : (q == 0 ? 1.0f : 0.0f);
    }
  }

  /* y[col] = f(value, p0[col], p1[col]) with params()' p0 and p1. y must
   * have the same alignment as the x this row was loaded from. */
  template <class F> __device__ __forceinline__ void store(T *y, F f) const {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!has_vec(i)) continue;
      float out[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out[j] = f(at(i, j), nnc_dtype<T>::load(pv[0][i][j]), nnc_dtype<T>::load(pv[1][i][j]));
      nnc_store_vec(y + vec_col(i), out);
    }
#pragma unroll
    for (int k = 0; k < EXTRA; ++k)
      if (ecol[k] >= 0) y[ecol[k]] = nnc_dtype<T>::store(f(e[k], pe[0][k], pe[1][k]));
  }

  /* y[col] = f(value, col): for a value that depends on its column (the
   * target's in the cross-entropy's gradient). Same alignment as store. */
  template <class F> __device__ __forceinline__ void store_cols(T *y, F f) const {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!has_vec(i)) continue;
      const int col = vec_col(i);
      float out[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[j] = f(at(i, j), col + j);
      nnc_store_vec(y + col, out);
    }
#pragma unroll
    for (int k = 0; k < EXTRA; ++k)
      if (ecol[k] >= 0) y[ecol[k]] = nnc_dtype<T>::store(f(e[k], ecol[k]));
  }
};

/* ------------------------------------------------------ configurations */

/* tpr threads per row, vpt vectors per thread, rows per block; stream: the
 * one-block-per-row streaming kernel instead. */
struct nnc_row_config {
  int tpr, vpt, rows_per_block;
  bool stream;
};

/* Threads in a block of the streaming kernel. */
constexpr int NNC_ROWS_STREAM_THREADS = 256;

/* The register configurations: a quarter warp per row for short rows,
 * a warp per row (4 rows in a 128-thread block) up to 8 vectors a thread,
 * then a block per row with 4 vectors a thread. The largest holds 2048
 * vectors: 16384 bf16/f16 or 8192 f32 elements. */
template <typename T> inline nnc_row_config nnc_row_config_for(int cols, bool same_alignment) {
  const int nv = cols / nnc_dtype<T>::VEC; /* no row has more full vectors */
  if (!same_alignment) return {NNC_ROWS_STREAM_THREADS, 0, 1, true};
  if (nv <= 8) return {8, 1, 16, false};
  static const int warp_vpt[] = {1, 2, 3, 4, 6, 8};
  for (int vpt : warp_vpt)
    if (nv <= 32 * vpt) return {32, vpt, 4, false};
  for (int tpr = 128; tpr <= 512; tpr *= 2)
    if (nv <= tpr * 4) return {tpr, 4, 1, false};
  return {NNC_ROWS_STREAM_THREADS, 0, 1, true};
}

/* Op provides, for its args (nnc_rows_args<T>, or another struct with rows):
 *   template <int TPR, int VPT> static __device__ void row(const args &, long row, int lane, float *smem);
 *   static __device__ void stream(const args &, long row, float *smem);   (blockDim.x == NNC_ROWS_STREAM_THREADS)
 * and row() must tolerate row >= rows (a padding row of the last block:
 * it takes part in the reductions and writes nothing). */
template <class Op, int TPR, int VPT, int ROWS>
__global__ void __launch_bounds__(TPR *ROWS) nnc_rows_kernel(const typename Op::args a) {
  static_assert(TPR <= 32 || ROWS == 1, "a block-wide row needs the whole block");
  __shared__ float smem[TPR > 32 ? TPR / 32 : 1];
  nnc_pdl::wait();           /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start(); /* a GEMM after it may start its own setup (pdl.cuh) */
  const long row = (long)blockIdx.x * ROWS + threadIdx.x / TPR;
  Op::template row<TPR, VPT>(a, row, (int)(threadIdx.x % TPR), smem);
}

template <class Op>
__global__ void __launch_bounds__(NNC_ROWS_STREAM_THREADS) nnc_rows_stream_kernel(const typename Op::args a) {
  __shared__ float smem[NNC_ROWS_STREAM_THREADS / 32];
  nnc_pdl::wait(); /* as nnc_rows_kernel */
  nnc_pdl::let_next_start();
  Op::stream(a, (long)blockIdx.x, smem);
}

template <class Op, int TPR, int VPT, int ROWS>
inline bool nnc_rows_try(const nnc_row_config &c, const typename Op::args &a, cudaStream_t s) {
  if (c.tpr != TPR || c.vpt != VPT || c.rows_per_block != ROWS) return false;
  const unsigned blocks = (unsigned)((a.rows + ROWS - 1) / ROWS);
  nnc_pdl::launch(nnc_rows_kernel<Op, TPR, VPT, ROWS>, blocks, TPR * ROWS, 0, s, a); /* it waits first (pdl.cuh) */
  return true;
}

/* Launches the configuration c names; false if it names none of them. */
template <class Op>
inline bool nnc_rows_launch(const nnc_row_config &c, const typename Op::args &a, cudaStream_t s) {
  if (c.stream) {
    nnc_pdl::launch(nnc_rows_stream_kernel<Op>, (unsigned)a.rows, NNC_ROWS_STREAM_THREADS, 0, s, a);
    return true;
  }
  return nnc_rows_try<Op, 8, 1, 16>(c, a, s) || nnc_rows_try<Op, 32, 1, 4>(c, a, s) ||
         nnc_rows_try<Op, 32, 2, 4>(c, a, s) || nnc_rows_try<Op, 32, 3, 4>(c, a, s) ||
         nnc_rows_try<Op, 32, 4, 4>(c, a, s) || nnc_rows_try<Op, 32, 6, 4>(c, a, s) ||
         nnc_rows_try<Op, 32, 8, 4>(c, a, s) || nnc_rows_try<Op, 128, 4, 1>(c, a, s) ||
         nnc_rows_try<Op, 256, 4, 1>(c, a, s) || nnc_rows_try<Op, 512, 4, 1>(c, a, s);
}

/* Checks the arguments, picks the configuration from the row length and
 * launches. need_eps: layernorm and rmsnorm (eps >= 0). */
template <class Op, typename T>
inline nnc_cuda_status nnc_rows_run(const char *kernel, const nnc_rows_args<T> &a, bool need_eps,
                                    cudaStream_t s, nnc_cuda_error *err) {
  if (a.rows < 0 || a.cols < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                         "expected rows, cols >= 0, found rows=%d cols=%d", a.rows, a.cols);
  if (need_eps && !(a.eps >= 0.0f))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected eps >= 0, found %g", (double)a.eps);
  if (a.rows == 0 || a.cols == 0) return NNC_CUDA_OK;
  if (!a.x || !a.y)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected input and output, found x=%p y=%p",
                         (const void *)a.x, (void *)a.y);
  if (a.ldx < a.cols || a.ldy < a.cols)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                         "expected ldx, ldy >= cols=%d, found ldx=%td ldy=%td", a.cols, a.ldx, a.ldy);
  const uintptr_t px = reinterpret_cast<uintptr_t>(a.x), py = reinterpret_cast<uintptr_t>(a.y);
  const uintptr_t pg = reinterpret_cast<uintptr_t>(a.gamma), pb = reinterpret_cast<uintptr_t>(a.beta);
  if (px % sizeof(T) || py % sizeof(T) || pg % sizeof(T) || pb % sizeof(T))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                         "expected %zu-byte aligned pointers (%s), found x=%p y=%p gamma=%p beta=%p",
                         sizeof(T), nnc_dtype<T>::name, (const void *)a.x, (void *)a.y,
                         (const void *)a.gamma, (const void *)a.beta);
  /* Vectors need every row of x and y at the same offset from a 16-byte
   * boundary. */
  const bool same = (px - py) % 16 == 0 &&
                    (a.rows == 1 || ((a.ldx - a.ldy) * (ptrdiff_t)sizeof(T)) % 16 == 0);
  const nnc_row_config c = nnc_row_config_for<T>(a.cols, same);
  if (!nnc_rows_launch<Op>(c, a, s))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "no kernel for tpr=%d vpt=%d", c.tpr, c.vpt);
  return nnc_cuda_check_launch(err, kernel);
}

#endif
