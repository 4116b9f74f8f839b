/* templates/cuda/nnc_cuda.cuh — what every CUDA template shares: the status
 * and error a host wrapper returns, element-type traits (float, __half,
 * __nv_bfloat16: stored narrow, computed in float), 16-byte vector loads and
 * stores, and warp / block reductions.
 *
 * Header-only CUDA C++ (C++17). The generated model folder copies this
 * directory and includes the headers it needs; nothing here depends on the
 * rest of nnc. */
#ifndef NNC_CUDA_CUH
#define NNC_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>

/* ------------------------------------------------------------ errors */

enum nnc_cuda_status {
  NNC_CUDA_OK = 0,
  NNC_CUDA_E_ARG = 1,    /* a NULL, negative, too small or misaligned argument */
  NNC_CUDA_E_LAUNCH = 2  /* the CUDA runtime refused the launch */
};

struct nnc_cuda_error {
  nnc_cuda_status code;
  char msg[256];
};

/* Fills *err (when not NULL) with "kernel: message" and returns code. */
inline nnc_cuda_status nnc_cuda_fail(nnc_cuda_error *err, nnc_cuda_status code,
                                     const char *kernel, const char *fmt, ...) {
  if (err) {
    err->code = code;
    int n = std::snprintf(err->msg, sizeof err->msg, "%s: ", kernel);
    if (n < 0 || n >= (int)sizeof err->msg) n = 0;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* After a launch: a refused launch (bad configuration, no kernel image for
 * this GPU) shows up only in cudaGetLastError. */
inline nnc_cuda_status nnc_cuda_check_launch(nnc_cuda_error *err, const char *kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return NNC_CUDA_OK;
  return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, kernel, "launch failed: %s (%s)",
                       cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ------------------------------------------- shared memory, once a device */

/* The most dynamic shared memory a kernel was allowed so far, per device
 * (the first 16): a launcher keeps one per kernel, as a static. */
struct nnc_smem_raised {
  std::atomic<int> at[16];
};

/* Allows kernel smem bytes of dynamic shared memory on the current device,
 * calling the driver only when that is more than it was allowed before:
 * cudaFuncSetAttribute costs about a microsecond of host time, and a
 * launcher runs on every launch. */
template <typename K> cudaError_t nnc_raise_smem(K kernel, size_t smem, nnc_smem_raised &raised) {
  if (smem <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const bool known = dev >= 0 && dev < 16;
  if (known && raised.at[dev].load(std::memory_order_relaxed) >= (int)smem) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess || !known) return e;
  int seen = raised.at[dev].load(std::memory_order_relaxed);
  while (seen < (int)smem && !raised.at[dev].compare_exchange_weak(seen, (int)smem)) {
  }
  return cudaSuccess;
}

/* -------------------------------------------------------- dtype traits */

/* VEC: elements in one 16-byte access. */
template <typename T> struct nnc_dtype;

template <> struct nnc_dtype<float> {
  static constexpr int VEC = 4;
  static constexpr const char *name = "f32";
  __host__ __device__ static float load(float v) { return v; }
  __host__ __device__ static float store(float v) { return v; }
};

template <> struct nnc_dtype<__half> {
  static constexpr int VEC = 8;
  static constexpr const char *name = "f16";
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

template <> struct nnc_dtype<__nv_bfloat16> {
  static constexpr int VEC = 8;
  static constexpr const char *name = "bf16";
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

/* ------------------------------------------------- 16-byte vector I/O */

template <typename T> __device__ __forceinline__ bool nnc_is_aligned16(const T *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/* Reads VEC elements at a 16-byte aligned p into floats: one 16-byte load. */
template <typename T>
__device__ __forceinline__ void nnc_load_vec(const T *p, float (&out)[nnc_dtype<T>::VEC]) {
  constexpr int V = nnc_dtype<T>::VEC;
  alignas(16) T t[V];
  *reinterpret_cast<uint4 *>(t) = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = nnc_dtype<T>::load(t[j]);
}

/* The same for any p: VEC scalar loads when p is not 16-byte aligned (used
 * for gamma/beta, which sit in cache, so the narrow loads cost no DRAM). */
template <typename T>
__device__ __forceinline__ void nnc_load_vec_any(const T *p, float (&out)[nnc_dtype<T>::VEC]) {
  if (nnc_is_aligned16(p)) {
    nnc_load_vec(p, out);
  } else {
#pragma unroll
    for (int j = 0; j < nnc_dtype<T>::VEC; ++j) out[j] = nnc_dtype<T>::load(p[j]);
  }
}

/* p must be 16-byte aligned. */
template <typename T>
__device__ __forceinline__ void nnc_store_vec(T *p, const float (&in)[nnc_dtype<T>::VEC]) {
  constexpr int V = nnc_dtype<T>::VEC;
  alignas(16) T t[V];
#pragma unroll
  for (int j = 0; j < V; ++j) t[j] = nnc_dtype<T>::store(in[j]);
  *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(t);
}

/* ---------------------------------------------------------------- math */

/* The erf-form GELU, 0.5 x (1 + erf(x / sqrt 2)), where its result is stored
 * in 16 bits: erf from Abramowitz and Stegun's 7.1.26 (|error| <= 1.5e-7,
 * 2.1e-7 in GELU; relative to GELU under bf16's 2^-9 rounding for x > -5.5,
 * 1.6e-3 at -5, and past that GELU is under 6e-9): one reciprocal, five FMAs
 * and one exp2 against erff's longer polynomial. BERT's 4096 x 1536 bf16 pass
 * on an H200 (bench/gpu_map.cu, L2 warm): 6.4 us against 9.2 with erff. With
 * q = (1 - erf(|x| / sqrt 2)) / 2, GELU is x (1 - q) for x >= 0 and x q
 * below: no cancellation in 1 - erf for negative x. */
__device__ __forceinline__ float nnc_gelu_erf16(float x) {
  const float u = fabsf(x) * 0.70710678f;
  float t, e;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.3275911f, u, 1.0f)));
  /* the coefficients halved: q, not 2 q */
  const float p = t * fmaf(t, fmaf(t, fmaf(t, fmaf(t, 0.530702715f, -0.726576014f), 0.710706871f), -0.142248368f),
                           0.127414796f);
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(u * u * -1.44269504f));
  const float q = p * e;
  return x * (x >= 0.0f ? 1.0f - q : q); /* x (1 - q), not x - x q: GELU(inf) = inf */
}

/* ---------------------------------------------------------- reductions */

struct nnc_sum_op {
  __device__ static float apply(float a, float b) { return a + b; }
};
struct nnc_max_op {
  __device__ static float apply(float a, float b) { return fmaxf(a, b); }
};

/* Reduces over aligned groups of G lanes (G a power of two <= 32); every
 * lane of the warp must take part, and every lane gets its group's result. */
template <class Op, int G> __device__ __forceinline__ float nnc_warp_reduce(float v) {
  static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "group must be a power of two <= 32");
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Reduces over a group of G threads: a warp shuffle when G <= 32, else the
 * whole block (blockDim.x == G, a multiple of 32) through smem, which needs
 * G / 32 floats. The trailing barrier lets the next call reuse smem. */
template <class Op, int G> __device__ __forceinline__ float nnc_group_reduce(float v, float *smem) {
  if constexpr (G <= 32) {
    return nnc_warp_reduce<Op, G>(v);
  } else {
    static_assert(G % 32 == 0 && G <= 1024, "a block group must be whole warps");
    constexpr int W = G / 32;
    v = nnc_warp_reduce<Op, 32>(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    float r = smem[0];
#pragma unroll
    for (int w = 1; w < W; ++w) r = Op::apply(r, smem[w]);
    __syncthreads();
    return r;
  }
}

#endif
