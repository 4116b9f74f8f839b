/* bench/gpu_attn_decode.cu — the decode attention (templates/cuda/
 * attention_decode.cuh) at GPT-2's decode shape: B rows of one query each,
 * 12 heads of 64, S cached keys in a cache of ctx rows [B, 12, ctx, 64]
 * bf16, a padding mask [B, S] of ones, causal. Times the kernel of a thread
 * a key (nnc_attn_decode_kernel) and the one of a group of threads a key
 * (nnc_attn_decode_groups_kernel, what nnc_cuda_attention launches) in the
 * same process, checks that they agree, and prints the cache bytes read a
 * call over the time beside the device-to-device copy rate (read + write)
 * measured here. Median of SAMPLES of ITERS back-to-back launches / ITERS;
 * the caches rotate over enough copies (> 400 MB) that they come from memory.
 * Correctness against float64: tests/gpu/test_attention.cu's decode cases.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda -o gpu_attn_decode bench/gpu_attn_decode.cu
 *   ./gpu_attn_decode [B] [S]      (64 544) */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "attention.cuh"

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

typedef __nv_bfloat16 bf16;
static const int SAMPLES = 15, ITERS = 20, H = 12, D = 64;

template <class F> static double time_us(F f) {
  int k = 0;
  for (int i = 0; i < 5; ++i) f(k++);
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int s = 0; s < SAMPLES; ++s) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < ITERS; ++i) f(k++);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / ITERS);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char **argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 64, S = argc > 2 ? std::atoi(argv[2]) : 544, ctx = S + 96;
  const size_t cache = (size_t)B * H * ctx * D;
  const int copies = std::max(2, (int)(400e6 / (2.0 * cache * 2)) + 1);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> h(cache);
  for (auto &x : h) x = __float2bfloat16_rn(u(rng));
  std::vector<bf16 *> ks(copies), vs(copies);
  for (int c = 0; c < copies; ++c) {
    CK(cudaMalloc(&ks[c], cache * 2));
    CK(cudaMalloc(&vs[c], cache * 2));
    CK(cudaMemcpy(ks[c], h.data(), cache * 2, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < cache; ++i) h[i] = __float2bfloat16_rn(u(rng));
    CK(cudaMemcpy(vs[c], h.data(), cache * 2, cudaMemcpyHostToDevice));
  }
  std::vector<bf16> hq((size_t)B * H * D), hm((size_t)B * S, __float2bfloat16_rn(1.0f));
  for (auto &x : hq) x = __float2bfloat16_rn(u(rng));
  bf16 *q, *mask, *o1, *o2;
  CK(cudaMalloc(&q, hq.size() * 2));
  CK(cudaMalloc(&mask, hm.size() * 2));
  CK(cudaMalloc(&o1, hq.size() * 2));
  CK(cudaMalloc(&o2, hq.size() * 2));
  CK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mask, hm.data(), hm.size() * 2, cudaMemcpyHostToDevice));
  nnc_cuda_attn_args<bf16> a = {};
  a.batch = B, a.heads = H, a.T = 1, a.S = S, a.D = D, a.Dv = D;
  a.q = q, a.q_sb = H * D, a.q_sh = D, a.q_st = D;
  a.k_sb = a.v_sb = (long long)H * ctx * D, a.k_sh = a.v_sh = (long long)ctx * D, a.k_st = a.v_st = D;
  a.o_sb = H * D, a.o_sh = D, a.o_st = D;
  a.scale = 0.125f, a.causal = 1, a.mask = mask, a.mask_sb = S;
  const unsigned rows = (unsigned)(B * H);
  auto run = [&](int which, int i, bf16 *o) {
    a.k = ks[i % copies], a.v = vs[i % copies], a.out = o;
    if (which == 0) nnc_attn_decode_kernel<bf16, 64, 4><<<rows, 128>>>(a);
    else nnc_attn_decode_groups_kernel<bf16, 64, 4, 4><<<rows, 128>>>(a);
  };
  run(0, 0, o1), run(1, 0, o2);
  CK(cudaDeviceSynchronize());
  std::vector<bf16> r1(hq.size()), r2(hq.size());
  CK(cudaMemcpy(r1.data(), o1, r1.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r2.data(), o2, r2.size() * 2, cudaMemcpyDeviceToHost));
  double maxd = 0, maxr = 0;
  for (size_t i = 0; i < r1.size(); ++i) {
    const double x = __bfloat162float(r1[i]), y = __bfloat162float(r2[i]);
    maxd = std::max(maxd, std::isnan(y) ? INFINITY : std::fabs(x - y)), maxr = std::max(maxr, std::fabs(x));
  }
  const bool ok = maxd / maxr < 1e-2;
  std::printf("%s groups vs thread-a-key kernel: max |diff| / max |out| %.3g\n", ok ? "PASS" : "FAIL", maxd / maxr);
  void *x, *y;
  const size_t cb = 256u << 20;
  CK(cudaMalloc(&x, cb));
  CK(cudaMalloc(&y, cb));
  const double copy_us = time_us([&](int) { CK(cudaMemcpyAsync(y, x, cb, cudaMemcpyDeviceToDevice)); });
  const double bw = 2.0 * cb / (copy_us * 1e-6);
  const double bytes = 2.0 * B * H * S * D * 2; /* k and v rows read */
  std::printf("B=%d S=%d: cache bytes read %.1f MB, copy %.0f GB/s, floor %.1f us\n", B, S, bytes / 1e6, bw / 1e9,
              bytes / bw * 1e6);
  const char *names[2] = {"thread a key (nnc_attn_decode_kernel)", "8 threads a key, 4 keys in flight (groups)"};
  for (int which = 0; which < 2; ++which) {
    const double us = time_us([&](int i) { run(which, i, which ? o2 : o1); });
    std::printf("| %s | %.1f us | %.0f GB/s | %.0f%% of copy |\n", names[which], us, bytes / us / 1e3,
                100 * bytes / us / 1e3 / (bw / 1e9));
  }
  return ok ? 0 : 1;
}
