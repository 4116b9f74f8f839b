/* templates/cuda/softmax.cuh — softmax over the rows of a matrix, in one
 * pass over memory (rows.cuh): the row in registers, its maximum and the sum
 * of e^(x - max) by warp reductions in f32, one write. A row whose maximum
 * is -inf (every entry masked) gives zeros rather than NaN. The same rows
 * give the cross-entropy of logits against targets and its gradient. */
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
    t.params(nullptr, nullptr);
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
    if (live) t.store(a.y + r * a.ldy, [inv](float v, float, float) { return v * inv; });
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

/* ---------------------------------------------------------- cross-entropy */

/* Rows x cols logits x (ld ldx in elements) and int32 targets t, one a row.
 * The loss writes each row's loss to part (rows floats of scratch); the
 * gradient reads dloss (one float) and writes y (ld ldy). */
template <typename T> struct nnc_ce_args {
  int rows, cols;
  const T *x;
  ptrdiff_t ldx;
  const int32_t *t;
  float *part;
  const float *dloss;
  T *y;
  ptrdiff_t ldy;
};

/* Row r's loss, max + log(sum) - x[target], from the row's maximum m and
 * sum s of e^(x - m); NaN for a target outside the row. */
template <typename T> __device__ __forceinline__ float nnc_ce_row_loss(const nnc_ce_args<T> &a, long r, float m, float s) {
  const int t = a.t[r];
  return t < 0 || t >= a.cols ? NAN : m + logf(s) - nnc_dtype<T>::load(a.x[r * a.ldx + t]);
}

/* A row of cols elements at x as 16-byte vectors: head elements before the
 * first 16-byte boundary, nvec whole vectors of V, then the tail (from
 * head + nvec * V). x is aligned to its element. */
template <typename T> struct nnc_ce_vec_split {
  static constexpr int V = 16 / (int)sizeof(T);
  int head, nvec;
  __device__ nnc_ce_vec_split(const T *x, int cols) {
    const int mis = (int)(reinterpret_cast<uintptr_t>(x) / sizeof(T) % V);
    head = min(cols, mis ? V - mis : 0);
    nvec = (cols - head) / V;
  }
};

/* A long row's maximum m and sum s of e^(x - m) in one pass over memory
 * (the rows of a vocabulary do not stay in cache between two), read as
 * 16-byte vectors (a scalar read a thread left half the bandwidth unused):
 * each thread keeps its own running max and a sum rescaled when the max
 * grows, then the block agrees on the max and adds the sums rescaled to it. */
template <typename T>
__device__ __forceinline__ void nnc_ce_stream_stats(const T *x, int cols, float *smem, float &m, float &s) {
  constexpr float LOG2E = 1.4426950408889634f;
  constexpr int V = nnc_ce_vec_split<T>::V;
  float tm = -INFINITY, ts = 0.0f;
  const auto add = [&](float v) {
    if (v > tm) {
      ts = ts * exp2f((tm - v) * LOG2E) + 1.0f;
      tm = v;
    } else {
      ts += exp2f((v - tm) * LOG2E);
    }
  };
  const nnc_ce_vec_split<T> sp(x, cols);
  const uint4 *xv = reinterpret_cast<const uint4 *>(x + sp.head);
#pragma unroll 2
  for (int i = threadIdx.x; i < sp.nvec; i += blockDim.x) {
    const uint4 u = xv[i];
    const T *e = reinterpret_cast<const T *>(&u);
    float f[V], mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < V; j++) {
      f[j] = nnc_dtype<T>::load(e[j]);
      mx = fmaxf(mx, f[j]);
    }
    if (mx > tm) {   /* one rescale for the vector's largest */
      ts *= exp2f((tm - mx) * LOG2E);
      tm = mx;
    }
#pragma unroll
    for (int j = 0; j < V; j++) ts += exp2f((f[j] - tm) * LOG2E);
  }
  for (int j = threadIdx.x; j < sp.head; j += blockDim.x) add(nnc_dtype<T>::load(x[j]));
  for (int j = sp.head + sp.nvec * V + threadIdx.x; j < cols; j += blockDim.x) add(nnc_dtype<T>::load(x[j]));
  m = nnc_group_reduce<nnc_max_op, NNC_ROWS_STREAM_THREADS>(tm, smem);
  /* a thread that saw no element (or only -inf) adds nothing */
  s = nnc_group_reduce<nnc_sum_op, NNC_ROWS_STREAM_THREADS>(tm == -INFINITY ? 0.0f : ts * exp2f((tm - m) * LOG2E),
                                                            smem);
}

/* Each row's loss into part: the row's maximum, then the sum of e^(x - max). */
template <typename T> struct nnc_ce_loss_op {
  using args = nnc_ce_args<T>;
  static constexpr float LOG2E = 1.4426950408889634f;

  template <int TPR, int VPT>
  __device__ static void row(const args &a, long r, int lane, float *smem) {
    const bool live = r < a.rows;
    nnc_row_regs<T, TPR, VPT> v;
    v.load(live ? a.x + r * a.ldx : a.x, live ? a.cols : 0, lane, -INFINITY);
    const float m = nnc_group_reduce<nnc_max_op, TPR>(
        v.fold(-INFINITY, [](float acc, float x) { return fmaxf(acc, x); }), smem);
    const float s = nnc_group_reduce<nnc_sum_op, TPR>(
        v.fold(0.0f, [m](float acc, float x) { return acc + exp2f((x - m) * LOG2E); }), smem);
    if (live && lane == 0) a.part[r] = nnc_ce_row_loss(a, r, m, s);
  }

  __device__ static void stream(const args &a, long r, float *smem) {
    float m, s;
    nnc_ce_stream_stats(a.x + r * a.ldx, a.cols, smem, m, s);
    if (threadIdx.x == 0) a.part[r] = nnc_ce_row_loss(a, r, m, s);
  }
};

/* The gradient of the mean loss: (softmax(x) - onehot(t)) * dloss / rows. */
template <typename T> struct nnc_ce_grad_op {
  using args = nnc_ce_args<T>;
  static constexpr float LOG2E = 1.4426950408889634f;

  /* The element at col of a row whose target is t, from e^(x - max) / sum = p
   * and scale = dloss / rows. */
  __device__ static float grad(int cols, int t, float scale, float p, int col) {
    return t < 0 || t >= cols ? NAN : (p - (col == t ? 1.0f : 0.0f)) * scale;
  }

  template <int TPR, int VPT>
  __device__ static void row(const args &a, long r, int lane, float *smem) {
    const bool live = r < a.rows;
    nnc_row_regs<T, TPR, VPT> v;
    v.load(live ? a.x + r * a.ldx : a.x, live ? a.cols : 0, lane, -INFINITY);
    const float m = nnc_group_reduce<nnc_max_op, TPR>(
        v.fold(-INFINITY, [](float acc, float x) { return fmaxf(acc, x); }), smem);
    v.map([m](float x) { return exp2f((x - m) * LOG2E); });
    const float s = nnc_group_reduce<nnc_sum_op, TPR>(v.fold(0.0f, [](float acc, float e) { return acc + e; }), smem);
    if (!live) return;
    const int t = a.t[r], cols = a.cols;
    const float inv = 1.0f / s, scale = *a.dloss / (float)a.rows;
    v.store_cols(a.y + r * a.ldy, [=](float e, int col) { return grad(cols, t, scale, e * inv, col); });
  }

  __device__ static void stream(const args &a, long r, float *smem) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    float m, s;
    nnc_ce_stream_stats(x, a.cols, smem, m, s);
    const float inv = 1.0f / s;
    const int t = a.t[r];
    const float scale = *a.dloss / (float)a.rows;
    const auto one = [&](int j) {
      y[j] = nnc_dtype<T>::store(grad(a.cols, t, scale, exp2f((nnc_dtype<T>::load(x[j]) - m) * LOG2E) * inv, j));
    };
    const nnc_ce_vec_split<T> sp(x, a.cols);
    if (reinterpret_cast<uintptr_t>(x) % 16 != reinterpret_cast<uintptr_t>(y) % 16) {
      for (int j = threadIdx.x; j < a.cols; j += blockDim.x) one(j);
      return;
    }
    /* x and y share their offset from 16 bytes: vectors in, vectors out */
    constexpr int V = nnc_ce_vec_split<T>::V;
    const uint4 *xv = reinterpret_cast<const uint4 *>(x + sp.head);
    uint4 *yv = reinterpret_cast<uint4 *>(y + sp.head);
#pragma unroll 2
    for (int i = threadIdx.x; i < sp.nvec; i += blockDim.x) {
      const uint4 u = xv[i];
      const T *e = reinterpret_cast<const T *>(&u);
      uint4 w;
      T *o = reinterpret_cast<T *>(&w);
      const int c0 = sp.head + i * V;
#pragma unroll
      for (int j = 0; j < V; j++)
        o[j] = nnc_dtype<T>::store(grad(a.cols, t, scale, exp2f((nnc_dtype<T>::load(e[j]) - m) * LOG2E) * inv, c0 + j));
      yv[i] = w;
    }
    for (int j = threadIdx.x; j < sp.head; j += blockDim.x) one(j);
    for (int j = sp.head + sp.nvec * V + threadIdx.x; j < a.cols; j += blockDim.x) one(j);
  }
};

/* One block adds the rows' losses in a fixed order (thread i the rows i,
 * i + N, ... in double, then a tree over the threads), so the loss does not
 * depend on the scheduling; loss = their mean. */
constexpr int NNC_CE_SUM_THREADS = 512;
__global__ void __launch_bounds__(NNC_CE_SUM_THREADS) nnc_ce_sum_kernel(const float *part, int rows, float *loss) {
  __shared__ double acc[NNC_CE_SUM_THREADS];
  double v = 0.0;
  for (int r = threadIdx.x; r < rows; r += NNC_CE_SUM_THREADS) v += part[r];
  acc[threadIdx.x] = v;
  __syncthreads();
  for (int w = NNC_CE_SUM_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) acc[threadIdx.x] += acc[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = (float)(acc[0] / (double)rows);
}

/* Checks the arguments of a cross-entropy kernel (y: the gradient's
 * output, or NULL) and launches Op over the rows. */
template <class Op, typename T>
inline nnc_cuda_status nnc_ce_rows(const char *kernel, const nnc_ce_args<T> &a, cudaStream_t s, nnc_cuda_error *err) {
  if (a.rows < 0 || a.cols < 1)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected rows >= 0 and cols >= 1, found rows=%d cols=%d",
                         a.rows, a.cols);
  if (a.rows == 0) return NNC_CUDA_OK;
  if (!a.x || !a.t || a.ldx < a.cols || (a.y && a.ldy < a.cols))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                         "expected logits, targets and ldx, ldy >= cols=%d, found x=%p t=%p ldx=%td ldy=%td", a.cols,
                         (const void *)a.x, (const void *)a.t, a.ldx, a.ldy);
  const uintptr_t px = reinterpret_cast<uintptr_t>(a.x), py = reinterpret_cast<uintptr_t>(a.y);
  if (px % sizeof(T) || py % sizeof(T))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected %zu-byte aligned pointers (%s), found x=%p y=%p",
                         sizeof(T), nnc_dtype<T>::name, (const void *)a.x, (void *)a.y);
  /* the gradient's vectors need every row of x and y at the same offset from a 16-byte boundary */
  const bool same = !a.y || ((px - py) % 16 == 0 && (a.rows == 1 || ((a.ldx - a.ldy) * (ptrdiff_t)sizeof(T)) % 16 == 0));
  const nnc_row_config c = nnc_row_config_for<T>(a.cols, same);
  if (!nnc_rows_launch<Op>(c, a, s))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "no kernel for tpr=%d vpt=%d", c.tpr, c.vpt);
  return nnc_cuda_check_launch(err, kernel);
}

/* loss = the mean over the rows of the cross-entropy of rows x cols logits
 * x (T: float, __half, __nv_bfloat16; f32 arithmetic) against int32 targets
 * t; part: rows floats of device scratch; loss: one float. NaN when a target
 * is outside 0..cols-1, as for rows == 0. Two launches on stream s. */
template <typename T>
nnc_cuda_status nnc_cuda_cross_entropy(int rows, int cols, const T *x, ptrdiff_t ldx, const int32_t *t, float *part,
                                       float *loss, cudaStream_t s, nnc_cuda_error *err) {
  if (!part || !loss)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_cross_entropy", "expected scratch and loss, found part=%p loss=%p",
                         (void *)part, (void *)loss);
  const nnc_ce_args<T> a = {rows, cols, x, ldx, t, part, nullptr, nullptr, 0};
  nnc_cuda_status st = nnc_ce_rows<nnc_ce_loss_op<T>>("nnc_cuda_cross_entropy", a, s, err);
  if (st) return st;
  nnc_ce_sum_kernel<<<1, NNC_CE_SUM_THREADS, 0, s>>>(part, rows, loss);
  return nnc_cuda_check_launch(err, "nnc_cuda_cross_entropy");
}

/* y = (softmax(x) - onehot(t)) * dloss[0] / rows, the gradient of
 * nnc_cuda_cross_entropy's loss; dloss: one float on the device. A row
 * whose target is outside 0..cols-1 gets NaN. */
template <typename T>
nnc_cuda_status nnc_cuda_cross_entropy_grad(int rows, int cols, const T *x, ptrdiff_t ldx, const int32_t *t,
                                            const float *dloss, T *y, ptrdiff_t ldy, cudaStream_t s,
                                            nnc_cuda_error *err) {
  if (!dloss || !y)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_cross_entropy_grad", "expected dloss and y, found dloss=%p y=%p",
                         (const void *)dloss, (void *)y);
  const nnc_ce_args<T> a = {rows, cols, x, ldx, t, nullptr, dloss, y, ldy};
  return nnc_ce_rows<nnc_ce_grad_op<T>>("nnc_cuda_cross_entropy_grad", a, s, err);
}

#endif
