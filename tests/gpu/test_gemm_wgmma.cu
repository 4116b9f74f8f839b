/* tests/gpu/test_gemm_wgmma.cu — templates/cuda/gemm_wgmma.cuh (sm_90a)
 * against a float64 CPU reference on fresh random inputs: bf16 and f16
 * operands, f32 and narrow outputs, odd M and N (partial tiles both ways),
 * K not a multiple of 64, rows of C longer than N whose extra elements must
 * keep their poison, bias, alpha, K = 0, M = 0, GPT-2's LM head row
 * (N = 50257) at 3 and 64 rows, M of 1 and 64 (the 64 x 128 tiles up to 64
 * rows, the 128 x 256 ones past), the epilogue's activations (ReLU, SiLU, both GELUs) and
 * residual, before and after each other, and the argument checks. Outputs are poisoned with NaN first.
 * Tolerance: max |out - ref| <= tol * max |ref| per case, tol 1e-5 for f32
 * output (f32 accumulation of exact products; 1e-3 with the tanh GELU's
 * tanh.approx), 1e-2 for bf16/f16 output.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda \
 *     -o test_gemm_wgmma tests/gpu/test_gemm_wgmma.cu
 *   ./test_gemm_wgmma [--small]     (--small: the cases compute-sanitizer runs)
 * Exits 1 on any failure, 77 (skipped) on a GPU that is not compute capability 9.0. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "gemm_wgmma.cuh"
#include "gpu_test.cuh"

static std::mt19937 rng(20261123);
static int failures = 0;

template <typename T> static T to(float x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else if constexpr (std::is_same<T, __half>::value) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}
template <typename T> static double from(T x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else if constexpr (std::is_same<T, __half>::value) return __half2float(x);
  else return __bfloat162float(x);
}
template <typename T> static T nan_of() {
  if constexpr (std::is_same<T, float>::value) return NAN;
  else return to<T>(NAN);
}

struct tcase {
  const char *name;
  int M, N, K, pad_c; /* ldc = N + pad_c */
  bool bias, small;
  float alpha;
  nnc_cuda_act act;
  bool residual, act_last;
};

static const tcase CASES[] = {
    {"m17_n129_k64", 17, 129, 64, 0, false, true, 1.0f, NNC_CUDA_ACT_NONE, false, false},
    {"m130_n257_k72_bias_padc", 130, 257, 72, 3, true, true, 0.5f, NNC_CUDA_ACT_NONE, false, false},
    {"m300_n1003_k768_bias", 300, 1003, 768, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false},
    {"m3_n50257_k768_lm_head", 3, 50257, 768, 0, false, false, 1.0f, NNC_CUDA_ACT_NONE, false, false},
    {"m257_n300_k8", 257, 300, 8, 1, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false},
    {"m260_n300_k0_bias", 260, 300, 0, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false},
    {"m130_n1537_k384_gelu_erf", 130, 1537, 384, 0, true, true, 1.0f, NNC_CUDA_ACT_GELU_ERF, false, false},
    {"m67_n300_k72_gelu_tanh_res", 67, 300, 72, 2, true, false, 1.0f, NNC_CUDA_ACT_GELU_TANH, true, false},
    {"m129_n258_k64_silu", 129, 258, 64, 0, false, false, 1.0f, NNC_CUDA_ACT_SILU, false, false},
    {"m33_n129_k40_res_relu_last", 33, 129, 40, 1, true, true, 0.5f, NNC_CUDA_ACT_RELU, true, true},
    {"m200_n384_k384_residual", 200, 384, 384, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, true, false},
    /* up to 64 rows: the 64 x 128 tiles (two warpgroups side by side) */
    /* K 264: five steps, so the three stages are each refilled while the products of the step before run */
    {"m64_n1000_k264_bias_padc", 64, 1000, 264, 2, true, true, 0.5f, NNC_CUDA_ACT_NONE, false, false},
    {"m1_n129_k64_silu", 1, 129, 64, 0, false, true, 1.0f, NNC_CUDA_ACT_SILU, false, false},
    {"m64_n200_k64_gelu_erf_res", 64, 200, 64, 1, true, true, 1.0f, NNC_CUDA_ACT_GELU_ERF, true, false},
    {"m64_n50257_k768_lm_head", 64, 50257, 768, 0, false, false, 1.0f, NNC_CUDA_ACT_NONE, false, false},
};

/* The epilogue's activations in float64. */
static double act_of(nnc_cuda_act a, double x) {
  switch (a) {
  case NNC_CUDA_ACT_RELU: return x > 0 ? x : 0;
  case NNC_CUDA_ACT_SILU: return x / (1 + std::exp(-x));
  case NNC_CUDA_ACT_GELU_ERF: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  case NNC_CUDA_ACT_GELU_TANH: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  default: return x;
  }
}

template <typename T, typename TO> static void run_case(const tcase &c, const char *tn) {
  const int M = c.M, N = c.N, K = c.K;
  const long long lda = K + 8, ldb = K, ldc = (long long)N + c.pad_c;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> ha((size_t)M * lda + 1), hb((size_t)N * ldb + 1), hbias(N);
  std::vector<TO> hr((size_t)M * ldc + 1);
  for (auto &x : ha) x = to<T>(u(rng));
  for (auto &x : hb) x = to<T>(u(rng) * 0.1f);
  for (auto &x : hbias) x = to<T>(u(rng));
  for (auto &x : hr) x = to<TO>(u(rng));
  T *da, *db, *dbias;
  TO *dc, *dr;
  CK(cudaMalloc(&da, ha.size() * sizeof(T)));
  CK(cudaMalloc(&db, hb.size() * sizeof(T)));
  CK(cudaMalloc(&dbias, hbias.size() * sizeof(T) + 1));
  CK(cudaMalloc(&dc, ((size_t)M * ldc + 1) * sizeof(TO)));
  CK(cudaMalloc(&dr, hr.size() * sizeof(TO)));
  CK(cudaMemcpy(dr, hr.data(), hr.size() * sizeof(TO), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(da, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, hbias.data(), hbias.size() * sizeof(T), cudaMemcpyHostToDevice));
  std::vector<TO> hc((size_t)M * ldc + 1, nan_of<TO>());
  CK(cudaMemcpy(dc, hc.data(), hc.size() * sizeof(TO), cudaMemcpyHostToDevice));

  nnc_cuda_gemm_wgmma_args<T, TO> g = {};
  g.M = M, g.N = N, g.K = K;
  g.a = da, g.lda = lda, g.b = db, g.ldb = ldb;
  g.bias = c.bias ? dbias : nullptr;
  g.alpha = c.alpha;
  g.act = c.act, g.act_last = c.act_last;
  if (c.residual) g.residual = dr, g.ldr = ldc;
  g.c = dc, g.ldc = ldc;
  nnc_cuda_error err;
  const bool epi = c.act != NNC_CUDA_ACT_NONE || c.residual;
  if ((epi ? nnc_cuda_gemm_wgmma<T, TO, true>(g, (cudaStream_t)0, &err) : nnc_cuda_gemm_wgmma(g, (cudaStream_t)0, &err)) !=
      NNC_CUDA_OK) {
    std::printf("FAIL %s %s: %s\n", c.name, tn, err.msg);
    ++failures;
    return;
  }
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hc.data(), dc, hc.size() * sizeof(TO), cudaMemcpyDeviceToHost));
  double maxref = 0, maxerr = 0;
  bool pad_ok = true;
  std::vector<double> ref(N);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += from(ha[(size_t)i * lda + k]) * from(hb[(size_t)j * ldb + k]);
      double v = c.alpha * s + (c.bias ? from(hbias[j]) : 0.0);
      const double r = c.residual ? from(hr[(size_t)i * ldc + j]) : 0.0;
      ref[j] = c.act_last ? act_of(c.act, v + r) : act_of(c.act, v) + r;
      maxref = std::fmax(maxref, std::fabs(ref[j]));
    }
    for (int j = 0; j < N; ++j) {
      const double d = std::fabs(from(hc[(size_t)i * ldc + j]) - ref[j]);
      maxerr = std::isnan(d) ? INFINITY : std::fmax(maxerr, d);
    }
    for (long long j = N; j < ldc; ++j) pad_ok &= std::isnan(from(hc[(size_t)i * ldc + j]));
  }
  /* the tanh GELU runs on tanh.approx (relative error about 2^-11) */
  const double tol = !std::is_same<TO, float>::value ? 1e-2 : c.act == NNC_CUDA_ACT_GELU_TANH ? 1e-3 : 1e-5;
  const double rel = maxref > 0 ? maxerr / maxref : maxerr;
  const bool ok = rel <= tol && pad_ok;
  std::printf("%s %-26s %-9s max rel error %.3g (tol %g)%s\n", ok ? "PASS" : "FAIL", c.name, tn, rel, tol,
              pad_ok ? "" : ", wrote past N");
  failures += !ok;
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dbias));
  CK(cudaFree(dc));
  CK(cudaFree(dr));
}

/* Refusals: nothing launched, E_ARG with a message. */
static void arg_checks() {
  nnc_cuda_gemm_wgmma_args<__nv_bfloat16, float> g = {};
  __nv_bfloat16 *d;
  float *c;
  CK(cudaMalloc(&d, 4096));
  CK(cudaMalloc(&c, 4096));
  g.M = 4, g.N = 4, g.K = 8, g.a = d, g.lda = 8, g.b = d, g.ldb = 8, g.c = c, g.ldc = 4, g.alpha = 1;
  nnc_cuda_error err;
  auto expect = [&](const char *what, nnc_cuda_gemm_wgmma_args<__nv_bfloat16, float> x, nnc_cuda_status want,
                    bool epi = false) {
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_wgmma<__nv_bfloat16, float, true>(x, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_wgmma(x, (cudaStream_t)0, &err);
    const bool ok = st == want;
    std::printf("%s args: %s -> %d%s%s\n", ok ? "PASS" : "FAIL", what, (int)st, st ? ": " : "", st ? err.msg : "");
    failures += !ok;
  };
  auto x = g;
  x.K = 7, x.lda = 7, x.ldb = 7;
  expect("K = 7", x, NNC_CUDA_E_ARG);
  x = g, x.a = d + 1;
  expect("a misaligned", x, NNC_CUDA_E_ARG);
  x = g, x.b = nullptr;
  expect("b NULL", x, NNC_CUDA_E_ARG);
  x = g, x.M = -1;
  expect("M < 0", x, NNC_CUDA_E_ARG);
  x = g, x.act = (nnc_cuda_act)99;
  expect("unknown activation", x, NNC_CUDA_E_ARG, true);
  x = g, x.residual = c, x.ldr = 3;
  expect("ldr < N", x, NNC_CUDA_E_ARG, true);
  x = g, x.act = NNC_CUDA_ACT_RELU;
  expect("an activation without the epilogue instance", x, NNC_CUDA_E_ARG);
  x = g, x.M = 0, x.a = nullptr;
  expect("M = 0 (nothing to do)", x, NNC_CUDA_OK);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(d));
  CK(cudaFree(c));
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  if (!sm90a_device()) return 77;
  arg_checks();
  int n = 0;
  for (const tcase &c : CASES) {
    if (small && !c.small) continue;
    run_case<__nv_bfloat16, float>(c, "bf16>f32");
    run_case<__nv_bfloat16, __nv_bfloat16>(c, "bf16>bf16");
    run_case<__half, float>(c, "f16>f32");
    run_case<__half, __half>(c, "f16>f16");
    n += 4;
  }
  std::printf("%s: %d cases, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}
