/* templates/cuda/layernorm.cuh — layernorm and rmsnorm over the rows of a
 * matrix, in one pass over memory (rows.cuh). Statistics in f32: layernorm
 * takes the mean, then the mean of (x - mean)^2 from the same registers (two
 * reductions, no cancellation); rmsnorm the mean of x^2.
 *   layernorm: y = (x - mean) / sqrt(var + eps) * gamma + beta
 *   rmsnorm:   y = x / sqrt(mean(x^2) + eps) * gamma */
#ifndef NNC_CUDA_LAYERNORM_CUH
#define NNC_CUDA_LAYERNORM_CUH

#include "rows.cuh"

template <typename T> struct nnc_layernorm_op {
  using args = nnc_rows_args<T>;

  template <int TPR, int VPT>
  __device__ static void row(const args &a, long r, int lane, float *smem) {
    const bool live = r < a.rows;
    nnc_row_regs<T, TPR, VPT, true> t;
    t.load(live ? a.x + r * a.ldx : a.x, live ? a.cols : 0, lane, 0.0f);
    t.params(a.gamma, a.beta);
    const float mean = nnc_group_reduce<nnc_sum_op, TPR>(
                           t.fold(0.0f, [](float acc, float v) { return acc + v; }), smem) /
                       (float)a.cols;
    const float var = nnc_group_reduce<nnc_sum_op, TPR>(t.fold(0.0f,
                                                               [mean](float acc, float v) {
                                                                 const float d = v - mean;
                                                                 return fmaf(d, d, acc);
                                                               }),
                                                        smem) /
                      (float)a.cols;
    const float rstd = rsqrtf(var + a.eps);
    if (live)
      t.store(a.y + r * a.ldy, [mean, rstd](float v, float g, float b) { return fmaf((v - mean) * rstd, g, b); });
  }

  __device__ static void stream(const args &a, long r, float *smem) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    float s = 0.0f;
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x) s += nnc_dtype<T>::load(x[j]);
    const float mean = nnc_group_reduce<nnc_sum_op, NNC_ROWS_STREAM_THREADS>(s, smem) / (float)a.cols;
    float q = 0.0f;
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float d = nnc_dtype<T>::load(x[j]) - mean;
      q = fmaf(d, d, q);
    }
    const float var = nnc_group_reduce<nnc_sum_op, NNC_ROWS_STREAM_THREADS>(q, smem) / (float)a.cols;
    const float rstd = rsqrtf(var + a.eps);
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float g = a.gamma ? nnc_dtype<T>::load(a.gamma[j]) : 1.0f;
      const float b = a.beta ? nnc_dtype<T>::load(a.beta[j]) : 0.0f;
      y[j] = nnc_dtype<T>::store(fmaf((nnc_dtype<T>::load(x[j]) - mean) * rstd, g, b));
    }
  }
};

template <typename T> struct nnc_rmsnorm_op {
  using args = nnc_rows_args<T>;

  template <int TPR, int VPT>
  __device__ static void row(const args &a, long r, int lane, float *smem) {
    const bool live = r < a.rows;
    nnc_row_regs<T, TPR, VPT, true> t;
    t.load(live ? a.x + r * a.ldx : a.x, live ? a.cols : 0, lane, 0.0f);
    t.params(a.gamma, nullptr);
    const float ms = nnc_group_reduce<nnc_sum_op, TPR>(
                         t.fold(0.0f, [](float acc, float v) { return fmaf(v, v, acc); }), smem) /
                     (float)a.cols;
    const float inv = rsqrtf(ms + a.eps);
    if (live)
      t.store(a.y + r * a.ldy, [inv](float v, float g, float) { return v * inv * g; });
  }

  __device__ static void stream(const args &a, long r, float *smem) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    float q = 0.0f;
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float v = nnc_dtype<T>::load(x[j]);
      q = fmaf(v, v, q);
    }
    const float inv =
        rsqrtf(nnc_group_reduce<nnc_sum_op, NNC_ROWS_STREAM_THREADS>(q, smem) / (float)a.cols + a.eps);
    for (int j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float g = a.gamma ? nnc_dtype<T>::load(a.gamma[j]) : 1.0f;
      y[j] = nnc_dtype<T>::store(nnc_dtype<T>::load(x[j]) * inv * g);
    }
  }
};

/* Layernorm of each row of a rows x cols matrix (T: float, __half,
 * __nv_bfloat16; f32 statistics). gamma, beta: cols elements or NULL (1, 0).
 * ldx/ldy in elements, >= cols; eps >= 0. Launched on stream s; returns
 * NNC_CUDA_E_ARG (nothing launched) for bad arguments and NNC_CUDA_E_LAUNCH
 * when the runtime refuses the launch. */
template <typename T>
nnc_cuda_status nnc_cuda_layernorm(int rows, int cols, const T *x, ptrdiff_t ldx, const T *gamma,
                                   const T *beta, float eps, T *y, ptrdiff_t ldy, cudaStream_t s,
                                   nnc_cuda_error *err) {
  const nnc_rows_args<T> a = {rows, cols, x, ldx, y, ldy, gamma, beta, eps};
  return nnc_rows_run<nnc_layernorm_op<T>>("nnc_cuda_layernorm", a, true, s, err);
}

/* RMSnorm of each row; as nnc_cuda_layernorm without beta. */
template <typename T>
nnc_cuda_status nnc_cuda_rmsnorm(int rows, int cols, const T *x, ptrdiff_t ldx, const T *gamma,
                                 float eps, T *y, ptrdiff_t ldy, cudaStream_t s, nnc_cuda_error *err) {
  const nnc_rows_args<T> a = {rows, cols, x, ldx, y, ldy, gamma, nullptr, eps};
  return nnc_rows_run<nnc_rmsnorm_op<T>>("nnc_cuda_rmsnorm", a, true, s, err);
}

#endif
