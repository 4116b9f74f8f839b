/* bench/gpu_lm_head.cu — the LM head of a decode step (GPT-2: C [M, 50257]
 * f32 = A [M, 768] W^T, W the bf16 [50257, 768] embedding, 77.2 MB) on
 * templates/cuda/gemm_wgmma.cuh's tile shapes and gemm_skinny.cuh, at the rows of decode
 * batches; the floor is W's bytes over the device-to-device copy rate of
 * the same run (bytes read + written over the time). bench/gpu_timing.cuh's
 * median_us; W is larger than L2, so every call streams it from memory.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -Ibench \
 *     -o gpu_lm_head bench/gpu_lm_head.cu && ./gpu_lm_head
 * Prints a line a shape and M: us, % of the floor. */
#include <algorithm>
#include <cstdio>
#include <vector>

#include "gemm_skinny.cuh"
#include "gemm_wgmma.cuh"
#include "gpu_timing.cuh"

typedef __nv_bfloat16 bf16;
static const int N = 50257, K = 768, MMAX = 128;

template <class SH> static int time_shape(const char *name, const nnc_cuda_gemm_wgmma_args<bf16, float> &g0, double floor_us) {
  for (int m : {1, 16, 32, 64, 128}) {
    if (m > SH::M && SH::M == 64) continue;
    nnc_cuda_gemm_wgmma_args<bf16, float> g = g0;
    g.M = m;
    nnc_cuda_error err;
    int bad = 0;
    const double us = median_us([&](int) { bad |= nnc_gw::launch<bf16, float, false, SH>(g, 0, &err) != NNC_CUDA_OK; });
    if (bad) return std::fprintf(stderr, "%s M=%d: %s\n", name, m, err.msg), 1;
    std::printf("%-34s M=%-4d %7.1f us  %5.1f%% of the floor\n", name, m, us, 100.0 * floor_us / us);
  }
  return 0;
}

int main() {
  bf16 *a, *w, *w2;
  float *c;
  CK(cudaMalloc(&a, (size_t)MMAX * K * sizeof(bf16)));
  CK(cudaMalloc(&w, (size_t)N * K * sizeof(bf16)));
  CK(cudaMalloc(&w2, (size_t)N * K * sizeof(bf16)));
  CK(cudaMalloc(&c, (size_t)MMAX * N * sizeof(float)));
  std::vector<bf16> h((size_t)N * K);
  for (size_t i = 0; i < h.size(); i++) h[i] = __float2bfloat16((float)((i * 7919) % 997) / 997.0f - 0.5f);
  CK(cudaMemcpy(w, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(a, h.data(), (size_t)MMAX * K * sizeof(bf16), cudaMemcpyHostToDevice));
  const size_t wb = (size_t)N * K * sizeof(bf16);
  const double copy_us = median_us([&](int) { cudaMemcpyAsync(w2, w, wb, cudaMemcpyDeviceToDevice, 0); });
  const double rate = 2.0 * wb / copy_us * 1e-3; /* GB/s */
  const double floor_us = wb / rate * 1e-3;
  std::printf("copy %.0f GB/s; floor (W's %.1f MB) %.1f us\n", rate, wb * 1e-6, floor_us);
  nnc_cuda_gemm_wgmma_args<bf16, float> g = {};
  g.N = N, g.K = K, g.a = a, g.lda = K, g.b = w, g.ldb = K, g.alpha = 1.0f, g.c = c, g.ldc = N;
  using namespace nnc_gw;
  int rc = 0;
  nnc_cuda_skinny_args<bf16, float> sk = {};
  sk.N = N, sk.K = K, sk.a = a, sk.lda = K, sk.w = w, sk.ldw = K, sk.w_nk = true, sk.c = c, sk.ldc = N;
  sk.alpha = 1.0f, sk.w_fixed = true;
  for (int m : {1, 16, 32, 64}) {
    sk.M = m;
    nnc_cuda_error err;
    int bad = 0;
    const double us = median_us([&](int) { bad |= nnc_cuda_gemm_skinny(sk, 0, &err) != NNC_CUDA_OK; });
    if (bad) return std::fprintf(stderr, "skinny M=%d: %s\n", m, err.msg), 1;
    std::printf("%-34s M=%-4d %7.1f us  %5.1f%% of the floor\n", "skinny (gemm_skinny.cuh)", m, us, 100.0 * floor_us / us);
  }
  rc |= time_shape<big>("128x256, 4 stages (big)", g, floor_us);
  rc |= time_shape<shape<64, 128, 3, 3>>("64x128, 3 stages, 1 ahead", g, floor_us);
  rc |= time_shape<shape<64, 128, 3, 3, 2>>("64x128, 3 stages, 2 ahead", g, floor_us);
  rc |= time_shape<shape<64, 128, 4, 2>>("64x128, 4 stages, 2 ahead", g, floor_us);
  rc |= time_shape<shape<64, 128, 4, 2, 3>>("64x128, 4 stages, 3 ahead", g, floor_us);
  rc |= time_shape<shape<64, 128, 6, 1, 4>>("64x128, 6 stages, 4 ahead", g, floor_us);
  rc |= time_shape<shape<64, 256, 3, 1>>("64x256, 3 stages, 1 ahead", g, floor_us);
  rc |= time_shape<shape<64, 256, 4, 1, 3>>("64x256, 4 stages, 3 ahead", g, floor_us);
  return rc;
}
