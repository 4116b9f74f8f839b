/* bench/gpu_timing.cuh — what the kernel benches under bench/ share: CK
 * (a CUDA call that must succeed, else the bench stops with its line) and
 * median_us, the timing rule of bench/gpu_attention.cu: CUDA events around
 * ITERS (20) back-to-back calls after WARM (10) warm-up calls, the median of
 * SAMPLES (31) samples, a launch error failing the bench. call(i) makes the
 * i-th call (a bench rotates its input sets by i, so that L2 holds none
 * between its uses). */
#ifndef NNC_BENCH_GPU_TIMING_CUH
#define NNC_BENCH_GPU_TIMING_CUH

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                       \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "cuda error: %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

template <int WARM = 10, int SAMPLES = 31, int ITERS = 20, typename F> double median_us(F call) {
  int k = 0;
  for (int i = 0; i < WARM; ++i) call(k++);
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int r = 0; r < SAMPLES; ++r) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < ITERS; ++i) call(k++);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(1000.0 * ms / ITERS);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#endif
