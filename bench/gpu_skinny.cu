/* bench/gpu_skinny.cu — templates/cuda/gemm_skinny.cuh on its own: every
 * case checked against a float64 reference on the host (bf16 inputs, fresh
 * random values), then GPT-2's decode GEMMs timed beside cuBLAS (cublasGemmEx,
 * bf16 in, f32 compute, its default algorithm: the same heuristic as
 * cuBLASLt's first result) in the same process. Each time is the median of
 * SAMPLES of (ITERS back-to-back launches between CUDA events) / ITERS; the
 * weight rotates over enough copies (> 100 MB) that it comes from memory, not
 * L2, as in a decode step. The floor: the weight's bytes over the
 * device-to-device copy rate measured here.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -I. -o gpu_skinny bench/gpu_skinny.cu -lcublas
 *   ./gpu_skinny            checks, then the table
 *   ./gpu_skinny --check    checks only (for compute-sanitizer)
 * Exit status 0 only when every check passed and every call succeeded. */
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "templates/cuda/gemm_skinny.cuh"
#include "gpu_timing.cuh"


typedef __nv_bfloat16 bf16;
static const int SAMPLES = 15, ITERS = 50;

/* median_us (gpu_timing.cuh) with SAMPLES of ITERS */
template <class F> static double time_us(F f) { return median_us<10, SAMPLES, ITERS>(f); }

struct gcase {
  int M, N, K;
  bool w_nk, bias, residual, f32_out;
  nnc_cuda_act act;
  const char *what;
};

static std::vector<bf16> random_host(size_t n, float scale, std::mt19937_64 &rng) {
  std::vector<bf16> h(n);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (auto &v : h) v = __float2bfloat16_rn(d(rng));
  return h;
}

template <typename V> static V *to_dev(const std::vector<V> &h) {
  V *p = nullptr;
  CK(cudaMalloc(&p, h.size() * sizeof(V) + 16));
  CK(cudaMemcpy(p, h.data(), h.size() * sizeof(V), cudaMemcpyHostToDevice));
  return p;
}

static double act_ref(nnc_cuda_act a, double v) {
  switch (a) {
  case NNC_CUDA_ACT_RELU: return v > 0 ? v : 0;
  case NNC_CUDA_ACT_GELU_TANH: return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  default: return v;
  }
}

/* Runs case c once and compares with float64; returns the relative error (max |d| / max |ref|). */
template <typename TO> static double check(const gcase &c, std::mt19937_64 &rng) {
  auto a = random_host((size_t)c.M * c.K, 1.0f, rng), w = random_host((size_t)c.N * c.K, 0.05f, rng);
  auto bias = random_host(c.N, 0.5f, rng), res = random_host((size_t)c.M * c.N, 1.0f, rng);
  std::vector<TO> rh(res.size());
  for (size_t i = 0; i < res.size(); ++i) rh[i] = (TO)__bfloat162float(res[i]);
  bf16 *da = to_dev(a), *dw = to_dev(w), *db = to_dev(bias);
  TO *dr = to_dev(rh), *dc = nullptr;
  CK(cudaMalloc(&dc, rh.size() * sizeof(TO)));
  CK(cudaMemset(dc, 0xff, rh.size() * sizeof(TO))); /* poisoned: an unwritten element is NaN */
  nnc_cuda_skinny_args<bf16, TO> g = {};
  g.M = c.M, g.N = c.N, g.K = c.K, g.a = da, g.lda = c.K, g.w = dw, g.ldw = c.w_nk ? c.K : c.N, g.w_nk = c.w_nk;
  g.bias = c.bias ? db : nullptr, g.residual = c.residual ? dc : nullptr, g.c = dc, g.ldc = c.N, g.alpha = 1.0f;
  g.act = c.act;
  g.w_fixed = c.M % 2 == 0; /* both orders of the weight's copies and the wait for the kernel before */
  if (c.residual) CK(cudaMemcpy(dc, rh.data(), rh.size() * sizeof(TO), cudaMemcpyHostToDevice)); /* in place */
  nnc_cuda_error e;
  if (nnc_cuda_gemm_skinny(g, 0, &e)) {
    std::printf("FAIL %s: %s\n", c.what, e.msg);
    return 1e9;
  }
  std::vector<TO> out(rh.size());
  CK(cudaMemcpy(out.data(), dc, out.size() * sizeof(TO), cudaMemcpyDeviceToHost));
  double maxd = 0, maxr = 0;
  for (int m = 0; m < c.M; ++m)
    for (int n = 0; n < c.N; ++n) {
      double s = 0;
      for (int k = 0; k < c.K; ++k)
        s += (double)__bfloat162float(a[(size_t)m * c.K + k]) *
             __bfloat162float(c.w_nk ? w[(size_t)n * c.K + k] : w[(size_t)k * c.N + n]);
      if (c.bias) s += __bfloat162float(bias[n]);
      s = act_ref(c.act, s);
      if (c.residual) s += __bfloat162float(res[(size_t)m * c.N + n]);
      const double got = (double)(float)out[(size_t)m * c.N + n];
      maxd = std::max(maxd, std::isnan(got) ? INFINITY : std::fabs(got - s));
      maxr = std::max(maxr, std::fabs(s));
    }
  cudaFree(da), cudaFree(dw), cudaFree(db), cudaFree(dr), cudaFree(dc);
  return maxd / (maxr > 0 ? maxr : 1);
}


int main(int argc, char **argv) {
  const bool only_check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  std::mt19937_64 rng(20261127);
  const gcase checks[] = {
      {64, 2304, 768, false, true, false, false, NNC_CUDA_ACT_NONE, "c_attn 64x2304x768 [K,N] +bias"},
      {64, 3072, 768, false, true, false, false, NNC_CUDA_ACT_GELU_TANH, "c_fc 64x3072x768 [K,N] +bias gelu"},
      {64, 768, 3072, false, true, true, false, NNC_CUDA_ACT_NONE, "c_proj 64x768x3072 [K,N] +bias +res"},
      {64, 1000, 768, true, false, false, true, NNC_CUDA_ACT_NONE, "head 64x1000x768 [N,K] f32 out"},
      {1, 768, 768, false, true, true, false, NNC_CUDA_ACT_NONE, "1x768x768 [K,N] +bias +res"},
      {17, 101, 64, true, true, false, false, NNC_CUDA_ACT_RELU, "17x101x64 [N,K] relu"},
      {33, 40, 72, false, false, true, false, NNC_CUDA_ACT_NONE, "33x40x72 [K,N] +res (K not /32)"},
      {5, 8197, 48, true, false, false, true, NNC_CUDA_ACT_NONE, "5x8197x48 [N,K] f32 out"},
  };
  int fails = 0;
  for (const gcase &c : checks) {
    const double err = c.f32_out ? check<float>(c, rng) : check<bf16>(c, rng);
    const bool ok = err < 1e-2;
    fails += !ok;
    std::printf("%s %-40s relative error %.3g\n", ok ? "PASS" : "FAIL", c.what, err);
  }
  if (only_check || fails) return fails ? 1 : 0;

  /* the copy rate, for the floor */
  const size_t cb = 256u << 20;
  void *x, *y;
  CK(cudaMalloc(&x, cb));
  CK(cudaMalloc(&y, cb));
  const double copy_us = time_us([&](int) { CK(cudaMemcpyAsync(y, x, cb, cudaMemcpyDeviceToDevice)); });
  const double bw = 2.0 * cb / (copy_us * 1e-6); /* bytes/s, read + write */
  cudaFree(x), cudaFree(y);
  std::printf("\ndevice-to-device copy: %.0f GB/s\n", bw / 1e9);

  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 2;
  const gcase shapes[] = {
      {64, 2304, 768, false, true, false, false, NNC_CUDA_ACT_NONE, "64x2304x768 c_attn"},
      {64, 768, 768, false, true, true, false, NNC_CUDA_ACT_NONE, "64x768x768 attn c_proj"},
      {64, 3072, 768, false, true, false, false, NNC_CUDA_ACT_GELU_TANH, "64x3072x768 c_fc"},
      {64, 768, 3072, false, true, true, false, NNC_CUDA_ACT_NONE, "64x768x3072 mlp c_proj"},
      {64, 50257, 768, true, false, false, true, NNC_CUDA_ACT_NONE, "64x50257x768 head (f32)"},
      {1, 2304, 768, false, true, false, false, NNC_CUDA_ACT_NONE, "1x2304x768 c_attn"},
      {1, 50257, 768, true, false, false, true, NNC_CUDA_ACT_NONE, "1x50257x768 head (f32)"},
  };
  std::printf("\n| M x N x K | weight MB | floor us | skinny us | cuBLAS us | skinny %% of floor | cuBLAS / skinny |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const gcase &c : shapes) {
    const size_t wn = (size_t)c.N * c.K, copies = std::max<size_t>(2, (size_t)(200e6 / (wn * 2)) + 1);
    std::vector<bf16 *> ws(copies);
    auto w = random_host(wn, 0.05f, rng);
    for (auto &p : ws) p = to_dev(w);
    bf16 *a = to_dev(random_host((size_t)c.M * c.K, 1.0f, rng)), *bias = to_dev(random_host(c.N, 0.5f, rng));
    void *out;
    CK(cudaMalloc(&out, (size_t)c.M * c.N * 4));
    CK(cudaMemset(out, 0, (size_t)c.M * c.N * 4));
    nnc_cuda_skinny_args<bf16, float> gf = {};
    nnc_cuda_skinny_args<bf16, bf16> gb = {};
    auto fill = [&](auto &g) {
      g.M = c.M, g.N = c.N, g.K = c.K, g.a = a, g.lda = c.K, g.ldw = c.w_nk ? c.K : c.N, g.w_nk = c.w_nk;
      g.bias = c.bias ? bias : nullptr, g.ldc = c.N, g.alpha = 1.0f, g.act = c.act, g.w_fixed = true;
    };
    fill(gf), fill(gb);
    gf.c = (float *)out, gb.c = (bf16 *)out;
    gb.residual = c.residual ? (bf16 *)out : nullptr;
    nnc_cuda_error e;
    const double sk = time_us([&](int i) {
      nnc_cuda_status st;
      if (c.f32_out) gf.w = ws[i % copies], st = nnc_cuda_gemm_skinny(gf, 0, &e);
      else gb.w = ws[i % copies], st = nnc_cuda_gemm_skinny(gb, 0, &e);
      if (st) std::printf("skinny failed: %s\n", e.msg), std::exit(2);
    });
    const float one = 1.0f, zero = 0.0f;
    /* row-major C[M,N] = A W as column-major C^T = W^T A^T */
    const double cu = time_us([&](int i) {
      cublasStatus_t st = cublasGemmEx(h, c.w_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, c.N, c.M, c.K, &one,
                                       ws[i % copies], CUDA_R_16BF, c.w_nk ? c.K : c.N, a, CUDA_R_16BF, c.K, &zero,
                                       out, c.f32_out ? CUDA_R_32F : CUDA_R_16BF, c.N, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) std::printf("cublas failed %d\n", (int)st), std::exit(2);
    });
    const double floor_us = wn * 2.0 / bw * 1e6;
    std::printf("| %s | %.1f | %.2f | %.2f | %.2f | %.0f%% | %.2fx |\n", c.what, wn * 2 / 1e6, floor_us, sk, cu,
                100 * floor_us / sk, cu / sk);
    for (auto p : ws) cudaFree(p);
    cudaFree(a), cudaFree(bias), cudaFree(out);
  }
  return 0;
}
