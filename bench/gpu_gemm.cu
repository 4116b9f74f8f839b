/* bench/gpu_gemm.cu — times templates/cuda/gemm.cuh on the showcase shape
 * (bf16, x [8192, 768], nn.Linear weight [3072, 768] + bias) for every tile
 * configuration and AUTO:
 *   ln_gelu_tanh   gelu_tanh(linear(layernorm(x)))   row statistics + GEMM
 *   ln_gelu_erf    gelu(linear(layernorm(x)))
 *   linear         linear(x) + bias, no norm, no activation
 *   row_stats      the statistics kernel alone
 * bench/gpu_timing.cuh's median_us (20 back-to-back calls between CUDA
 * events, after 10 warm-up calls, median of 31 samples); A rotates over SETS copies (4 x 12.6 MB, so an iteration does not
 * find its x in L2 from the previous one; W, 4.7 MB, stays there as it would
 * in a model).
 *
 *   gpu_gemm FILE        writes one CSV line per row: op,config,M,N,K,us,tflops
 *   gpu_gemm --profile   one call of each op on the AUTO tile, untimed (for ncu)
 *
 * Build: nvcc -std=c++17 -O3 -arch=sm_90 -I. -o gpu_gemm bench/gpu_gemm.cu
 * Exit status 0 only when every CUDA call and every launch succeeded. */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "templates/cuda/gemm.cuh"
#include "gpu_timing.cuh"


typedef __nv_bfloat16 bf16;
static const int SETS = 4;

static bf16 *random_dev(size_t n, float lo, float hi, std::mt19937_64 &rng) {
  std::vector<bf16> h(n);
  std::uniform_real_distribution<float> d(lo, hi);
  for (size_t i = 0; i < n; ++i) h[i] = __float2bfloat16_rn(d(rng));
  bf16 *p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(bf16)));
  CK(cudaMemcpy(p, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
  return p;
}


int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_gemm OUT.csv | gpu_gemm --profile\n");
    return 2;
  }
  const bool profile = std::strcmp(argv[1], "--profile") == 0;
  FILE *csv = std::fopen(profile ? "/dev/null" : argv[1], "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 2;
  }
  const int M = 8192, N = 3072, K = 768;
  std::mt19937_64 rng(7);
  bf16 *x[SETS];
  for (int i = 0; i < SETS; ++i) x[i] = random_dev((size_t)M * K, -3.0f, 3.0f, rng);
  bf16 *w = random_dev((size_t)N * K, -0.036f, 0.036f, rng);
  bf16 *bias = random_dev(N, -0.5f, 0.5f, rng);
  bf16 *gamma = random_dev(K, 0.5f, 1.5f, rng);
  bf16 *beta = random_dev(K, -0.5f, 0.5f, rng);
  bf16 *out = nullptr;
  CK(cudaMalloc(&out, (size_t)M * N * sizeof(bf16)));
  void *ws = nullptr;
  CK(cudaMalloc(&ws, (size_t)M * sizeof(float2)));
  const double flop = 2.0 * M * N * K;
  int failures = 0;

  struct op {
    const char *name;
    nnc_cuda_norm norm;
    nnc_cuda_act act;
  };
  const op ops[] = {{"ln_gelu_tanh", NNC_CUDA_NORM_LAYER, NNC_CUDA_ACT_GELU_TANH},
                    {"ln_gelu_erf", NNC_CUDA_NORM_LAYER, NNC_CUDA_ACT_GELU_ERF},
                    {"linear", NNC_CUDA_NORM_NONE, NNC_CUDA_ACT_NONE}};
  const nnc_cuda_gemm_config cfgs[] = {NNC_CUDA_GEMM_AUTO, NNC_CUDA_GEMM_128x128x32, NNC_CUDA_GEMM_128x256x32,
                                       NNC_CUDA_GEMM_128x128x64};
  for (const op &o : ops)
    for (nnc_cuda_gemm_config cfg : cfgs) {
      nnc_cuda_gemm_args<bf16> g;
      std::memset(&g, 0, sizeof g);
      g.M = M; g.N = N; g.K = K; g.batch = 1;
      g.lda = K; g.b = w; g.ldb = K; g.b_trans = 1; g.bias = bias;
      g.out = out; g.ldc = N; g.alpha = 1.0f; g.act = o.act;
      g.norm = o.norm; g.gamma = gamma; g.beta = beta; g.eps = 1e-5f;
      nnc_cuda_status st = NNC_CUDA_OK;
      nnc_cuda_error err{};
      if (profile) { /* one call of each op on the AUTO tile, for ncu */
        if (cfg != NNC_CUDA_GEMM_AUTO) continue;
        g.a = x[0];
        if (nnc_cuda_gemm(g, ws, (size_t)M * sizeof(float2), 0, &err) != NNC_CUDA_OK) {
          std::fprintf(stderr, "%s: %s\n", o.name, err.msg);
          ++failures;
        }
        CK(cudaDeviceSynchronize());
        continue;
      }
      const double us = median_us([&](int i) {
        g.a = x[i % SETS];
        const nnc_cuda_status s = nnc_cuda_gemm_ex(g, cfg, ws, (size_t)M * sizeof(float2), 0, &err);
        if (s != NNC_CUDA_OK) st = s;
      });
      if (st != NNC_CUDA_OK) {
        std::fprintf(stderr, "%s %s: %s\n", o.name, nnc_cuda_gemm_config_name(cfg), err.msg);
        ++failures;
        continue;
      }
      std::printf("%-14s %-11s %dx%dx%d  %8.2f us  %6.1f TFLOP/s\n", o.name, nnc_cuda_gemm_config_name(cfg),
                  M, N, K, us, flop / us * 1e-6);
      std::fprintf(csv, "%s,%s,%d,%d,%d,%.3f,%.1f\n", o.name, nnc_cuda_gemm_config_name(cfg), M, N, K, us,
                   flop / us * 1e-6);
    }

  if (!profile) {
    nnc_cuda_status st = NNC_CUDA_OK;
    nnc_cuda_error err{};
    const double us = median_us([&](int i) {
      const nnc_cuda_status s = nnc_cuda_gemm_row_stats(x[i % SETS], K, 0, M, K, 1, false, 1e-5f,
                                                        static_cast<float2 *>(ws), 0, &err);
      if (s != NNC_CUDA_OK) st = s;
    });
    if (st != NNC_CUDA_OK) {
      std::fprintf(stderr, "row_stats: %s\n", err.msg);
      ++failures;
    }
    const double gbs = (double)M * K * sizeof(bf16) / us * 1e-3;
    std::printf("%-14s %-11s %dx%d      %8.2f us  %6.0f GB/s read\n", "row_stats", "-", M, K, us, gbs);
    std::fprintf(csv, "row_stats,-,%d,0,%d,%.3f,0\n", M, K, us);
  }
  std::fclose(csv);

  CK(cudaGetLastError());
  for (int i = 0; i < SETS; ++i) CK(cudaFree(x[i]));
  CK(cudaFree(w));
  CK(cudaFree(bias));
  CK(cudaFree(gamma));
  CK(cudaFree(beta));
  CK(cudaFree(out));
  CK(cudaFree(ws));
  return failures ? 1 : 0;
}
