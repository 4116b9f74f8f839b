/* tests/gpu/gpu_test.cuh — what the GPU kernel tests share: a CUDA call
 * that must succeed (else the test prints FAIL and exits 1), float to and
 * from the storage types, rounded to nearest even, the median time of a
 * launch, and operands written late by the kernel before the one tested. */
#ifndef NNC_GPU_TEST_CUH
#define NNC_GPU_TEST_CUH

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "pdl.cuh"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("FAIL cuda: %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

template <typename T> inline T h_from(float x);
template <> inline float h_from<float>(float x) { return x; }
template <> inline __nv_bfloat16 h_from<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> inline __half h_from<__half>(float x) { return __float2half_rn(x); }
inline double h_to(float x) { return x; }
inline double h_to(__nv_bfloat16 x) { return __bfloat162float(x); }
inline double h_to(__half x) { return __half2float(x); }

/* The median of 20 CUDA-event times (ms) of launch() after 5 untimed
 * runs; -1 when a launch returns false. */
template <class F> double median_ms(F launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 25; i++) {
    CK(cudaEventRecord(a));
    if (!launch()) return -1;
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    if (i >= 5) ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/* Whether the current device runs sm_90a code (compute capability 9.0);
 * else a SKIP line: the sm_90a kernels' tests then exit 77. */
inline bool sm90a_device() {
  int dev = 0, major = 0, minor = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major == 9 && minor == 0) return true;
  std::printf("SKIP: sm_90a code needs compute capability 9.0, found %d.%d\n", major, minor);
  return false;
}

/* The stream the kernel tests launch on: a created one, not the legacy
 * default stream, whose implicit synchronization could hide an early
 * start (pdl.cuh); made once. */
inline cudaStream_t test_stream() {
  static cudaStream_t s = [] {
    cudaStream_t t;
    CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    return t;
  }();
  return s;
}

/* Sets n bytes at device pointer p to v before anything launched after it,
 * on any stream: cudaMemset runs on the legacy default stream, which is not
 * ordered with test_stream()'s work (a poison fill could land after the
 * kernel under test and fail it, as gemm_w4's did once in 75 suite runs). */
inline void fill_now(void *p, int v, size_t n) {
  CK(cudaMemset(p, v, n));
  CK(cudaDeviceSynchronize());
}

/* Operands written late (pdl.cuh's contract, tested): one kernel whose
 * blocks let the next kernel start at once, sleep LATE_NS, then copy each
 * write's bytes. A kernel launched after it to start early that reads one
 * of them before its griddepcontrol.wait sees the bytes from before (the
 * tests put zeros there), and one that writes one before it has its
 * writes overwritten: either way its check fails. */
struct late_write {
  void *dst;
  const void *src;
  size_t bytes;
};
constexpr int LATE_WRITES = 4;
constexpr unsigned long long LATE_NS = 50000;
struct late_writes {
  late_write w[LATE_WRITES];
  int n;
};

__global__ void late_copy_kernel(late_writes l) {
  nnc_pdl::let_next_start();
  if (threadIdx.x == 0) {
    unsigned long long t0, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      __nanosleep(1000);
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - t0 < LATE_NS);
  }
  __syncthreads();
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (int i = 0; i < l.n; ++i) {
    unsigned char *d = static_cast<unsigned char *>(l.w[i].dst);
    const unsigned char *s = static_cast<const unsigned char *>(l.w[i].src);
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < l.w[i].bytes; b += stride) d[b] = s[b];
  }
}

/* Zeros into every write's dst, then the late kernel, on stream s. */
inline void late_copy(const std::vector<late_write> &writes, cudaStream_t s = test_stream()) {
  late_writes l = {};
  for (const late_write &w : writes) {
    if (l.n == LATE_WRITES) {
      std::printf("FAIL late_copy: more than %d writes\n", LATE_WRITES);
      std::exit(1);
    }
    CK(cudaMemsetAsync(w.dst, 0, w.bytes, s));
    l.w[l.n++] = w;
  }
  late_copy_kernel<<<64, 256, 0, s>>>(l);
  CK(cudaGetLastError());
}

#endif
