/* templates/cuda/softmax.cuh — softmax over the rows of a matrix, in one
 * pass over memory (rows.cuh): the row in registers, its maximum and the sum
 * of e^(x - max) by warp reductions in f32, one write. A row whose maximum
 * is -inf (every entry masked) gives zeros rather than NaN. */
#ifndef NNC_CUDA_SOFTMAX_CUH
#define NNC_CUDA_SOFTMAX_CUH

#include <math.h>

#include "rows.cuh"

template <typename T> struct nnc_softmax_op {
  using args = nnc_rows_args<T>;
  static constexpr float LOG2E = 1.4426950408889634f;

  template <int TPR, int VPT>
  __device__ static void row(const args &a, long r, int lane, float *smem) {
    const bool live = r < a.rows;
    nnc_row_regs<T, TPR, VPT> t;
    t.load(live ? a.x + r * a.ldx : a.x, live ? a.cols : 0, lane, -INFINITY);
    const float m = nnc_group_reduce<nnc_max_op, TPR>(
        t.fold(-INFINITY, [](float acc, float v) { return fmaxf(acc, v); }), smem);
    /* e^(x - m) = 2^((x - m) log2 e); pads of -inf give 0. A row of -inf
     * (m = -inf) gets 0 as its shift, so every e^ is 0 and so is inv:
     * zeros, with no early return that would leave the group's shuffles. */
    const float shift = m == -INFINITY ? 0.0f : m;
    t.map([shift](float v) { return exp2f((v - shift) * LOG2E); });
    const float s = nnc_group_reduce<nnc_sum_op, TPR>(
        t.fold(0.0f, [](float acc, float v) { return acc + v; }), smem);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    if (live) t.store(a.y + r * a.ldy, nullptr, nullptr, [inv](float v, float, float) { return v * inv; });
  }

  __device__ static void stream(const args &a, long r, float *smem) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x) m = fmaxf(m, nnc_dtype<T>::load(x[j]));
    m = nnc_group_reduce<nnc_max_op, NNC_ROWS_STREAM_THREADS>(m, smem);
    if (m == -INFINITY) {
      for (int j = threadIdx.x; j < a.cols; j += blockDim.x) y[j] = nnc_dtype<T>::store(0.0f);
      return;
    }
    float s = 0.0f;
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x)
      s += exp2f((nnc_dtype<T>::load(x[j]) - m) * LOG2E);
    const float inv = 1.0f / nnc_group_reduce<nnc_sum_op, NNC_ROWS_STREAM_THREADS>(s, smem);
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x)
      y[j] = nnc_dtype<T>::store(exp2f((nnc_dtype<T>::load(x[j]) - m) * LOG2E) * inv);
  }
};

/* y = softmax(x) along each row of a rows x cols matrix (T: float, __half,
 * __nv_bfloat16; f32 arithmetic). ldx/ldy in elements, >= cols. Launched on
 * stream s; returns NNC_CUDA_E_ARG (nothing launched) for bad arguments and
 * NNC_CUDA_E_LAUNCH when the runtime refuses the launch. */
template <typename T>
nnc_cuda_status nnc_cuda_softmax(int rows, int cols, const T *x, ptrdiff_t ldx, T *y, ptrdiff_t ldy,
                                 cudaStream_t s, nnc_cuda_error *err) {
  const nnc_rows_args<T> a = {rows, cols, x, ldx, y, ldy, nullptr, nullptr, 0.0f};
  return nnc_rows_run<nnc_softmax_op<T>>("nnc_cuda_softmax", a, false, s, err);
}

#endif
