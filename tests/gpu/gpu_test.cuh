/* tests/gpu/gpu_test.cuh — what the GPU kernel tests share: a CUDA call
 * that must succeed (else the test prints FAIL and exits 1), float to and
 * from the storage types, rounded to nearest even, and the median time of
 * a launch. */
#ifndef NNC_GPU_TEST_CUH
#define NNC_GPU_TEST_CUH

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

#endif
