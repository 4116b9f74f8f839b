/* templates/cuda/elementwise.cuh — a generic elementwise kernel: out[i] =
 * f(in0[i], ..., in{N-1}[i]) over n elements, computed in f32. f is a
 * functor, so a fused chain of elementwise ops (bias add, then gelu, ...)
 * is one functor and one pass over memory: nnc_ew_chain composes them.
 *
 * When every pointer sits at the same offset from a 16-byte boundary, each
 * thread handles 16-byte vectors (grid-stride), with the scalar head before
 * the first boundary and the scalar tail after the last full vector done by
 * the first threads; otherwise every element is a scalar access. */
#ifndef NNC_CUDA_ELEMENTWISE_CUH
#define NNC_CUDA_ELEMENTWISE_CUH

#include <math.h>

#include "nnc_cuda.cuh"

/* ------------------------------------------------------------ functors */

struct nnc_ew_add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct nnc_ew_mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct nnc_ew_relu {
  __device__ float operator()(float a) const { return fmaxf(a, 0.0f); }
};
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
struct nnc_ew_gelu_tanh {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * fmaf(0.044715f * x, x * x, x)));
  }
};
/* x sigmoid(x) */
struct nnc_ew_silu {
  __device__ float operator()(float x) const { return x / (1.0f + expf(-x)); }
};

/* g(f(inputs...)): a chain of two; chains nest. */
template <class F, class G> struct nnc_ew_chain {
  F f;
  G g;
  template <class... A> __device__ float operator()(A... a) const { return g(f(a...)); }
};

/* ---------------------------------------------------------------- kernel */

constexpr int NNC_EW_THREADS = 256;

template <typename T, int N> struct nnc_ew_args {
  long n;
  const T *in[N];
  T *out;
};

template <int N, class F> __device__ __forceinline__ float nnc_ew_apply(const F &f, const float (&x)[N]) {
  static_assert(N >= 1 && N <= 3, "1 to 3 inputs");
  if constexpr (N == 1) return f(x[0]);
  else if constexpr (N == 2) return f(x[0], x[1]);
  else return f(x[0], x[1], x[2]);
}

template <typename T, int N, class F>
__device__ __forceinline__ void nnc_ew_scalar(const nnc_ew_args<T, N> &a, const F &f, long i) {
  float x[N];
#pragma unroll
  for (int k = 0; k < N; ++k) x[k] = nnc_dtype<T>::load(a.in[k][i]);
  a.out[i] = nnc_dtype<T>::store(nnc_ew_apply<N>(f, x));
}

template <typename T, int N, class F, bool VECTOR>
__global__ void __launch_bounds__(NNC_EW_THREADS) nnc_ew_kernel(const nnc_ew_args<T, N> a, const F f) {
  constexpr int V = nnc_dtype<T>::VEC;
  const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x;
  const long stride = (long)gridDim.x * blockDim.x;
  if constexpr (VECTOR) {
    const long h = (long)(((16u - (reinterpret_cast<uintptr_t>(a.out) & 15u)) & 15u) / sizeof(T));
    const long head = h < a.n ? h : a.n;
    const long nvec = (a.n - head) / V;
    const long tail = a.n - head - nvec * V;
    for (long i = tid; i < nvec; i += stride) {
      const long base = head + i * V;
      float x[V][N], y[V];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        float t[V];
        nnc_load_vec(a.in[k] + base, t);
#pragma unroll
        for (int j = 0; j < V; ++j) x[j][k] = t[j];
      }
#pragma unroll
      for (int j = 0; j < V; ++j) y[j] = nnc_ew_apply<N>(f, x[j]);
      nnc_store_vec(a.out + base, y);
    }
    if (tid < head) nnc_ew_scalar(a, f, tid);
    if (tid < tail) nnc_ew_scalar(a, f, head + nvec * V + tid);
  } else {
    for (long i = tid; i < a.n; i += stride) nnc_ew_scalar(a, f, i);
  }
}

/* out[i] = f(in[0][i], ..., in[N-1][i]) for i < n (T: float, __half,
 * __nv_bfloat16; f32 arithmetic). out may be one of the inputs (in place),
 * but must not partly overlap one. Launched on stream s; returns
 * NNC_CUDA_E_ARG (nothing launched) for bad arguments and NNC_CUDA_E_LAUNCH
 * when the runtime refuses the launch. */
template <typename T, int N, class F>
nnc_cuda_status nnc_cuda_elementwise(long n, const T *const (&in)[N], T *out, F f, cudaStream_t s,
                                     nnc_cuda_error *err) {
  static const char *const kernel = "nnc_cuda_elementwise";
  if (n < 0) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected n >= 0, found n=%ld", n);
  if (n == 0) return NNC_CUDA_OK;
  nnc_ew_args<T, N> a;
  a.n = n;
  a.out = out;
  if (!out) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected an output, found NULL");
  const uintptr_t po = reinterpret_cast<uintptr_t>(out);
  bool same = true;
  for (int k = 0; k < N; ++k) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(in[k]);
    if (!in[k])
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected input %d of %d, found NULL", k, N);
    if (p % sizeof(T) || po % sizeof(T))
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                           "expected %zu-byte aligned pointers (%s), found input %d=%p out=%p",
                           sizeof(T), nnc_dtype<T>::name, k, (const void *)in[k], (void *)out);
    same = same && (p - po) % 16 == 0;
    a.in[k] = in[k];
  }
  const long per_block = (long)NNC_EW_THREADS * (same ? nnc_dtype<T>::VEC : 1);
  long blocks = (n + per_block - 1) / per_block;
  /* Past this, the grid-stride loop covers the rest. */
  if (blocks > (1L << 20)) blocks = 1L << 20;
  if (same)
    nnc_ew_kernel<T, N, F, true><<<(unsigned)blocks, NNC_EW_THREADS, 0, s>>>(a, f);
  else
    nnc_ew_kernel<T, N, F, false><<<(unsigned)blocks, NNC_EW_THREADS, 0, s>>>(a, f);
  return nnc_cuda_check_launch(err, kernel);
}

#endif
