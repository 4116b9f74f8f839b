/* tests/gpu/test_gemm_tma8.cu — templates/cuda/gemm_tma8.cuh (sm_90a)
 * against a float64 product of the quantized operands on fresh random
 * inputs: e4m3 and s8 operands, f32, bf16 and f16 outputs, both tiles
 * (128 x 128 with streaming stores, 128 x 256 without), odd M and N
 * (partial tiles both ways), K = 16, 48, 144, 784 and others not a
 * multiple of the stage's 128 (the copy engine's zero fill), lda > K, rows
 * of C longer than N whose extra elements must keep their NaN poison (and
 * a guard element after C), a scale per row of A or one for all rows,
 * alpha, bias, K = 0, a GPT-2 LM head row (N = 50257), every activation,
 * the residual (before and after the activation, and in place), grids of
 * a few blocks that take many tiles each (max_blocks), rows of C 16-byte
 * aligned or not, and the argument checks. Tolerance: max |out - ref| <=
 * tol * max |ref|: s8 sums are exact, so 1e-5 for f32 out (1e-3 with the
 * tanh GELU's tanh.approx); e4m3 5e-3 for f32 out (Hopper's FP8 wgmma
 * adds in fewer bits than f32: the largest error is printed); 1e-2 for
 * bf16/f16 out.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A -Itemplates/cuda -Itests/gpu -I. \
 *     -Iruntime -Iruntime/cuda [-DNNC_GEMM_TMA_WATCHDOG] -o test_gemm_tma8 tests/gpu/test_gemm_tma8.cu \
 *     runtime/status.c runtime/half.c runtime/cuda/{status,device,alloc,host,stream,gemm,peaks}.c -lcuda -lcublasLt
 *   ./test_gemm_tma8 [--small | --time]
 * --small: the cases compute-sanitizer runs; --time: gemm_tma8_time.cuh's
 * table against cuBLASLt FP8 and bf16, gemm_wgmma_fp8.cuh, gemm_w8a8.cuh
 * and gemm_tma.cuh on GPT-2 and BERT shapes. Exits 1 on any failure, 77
 * (skipped) on a GPU that is not compute capability 9.0. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "gemm_tma8.cuh"
#include "gemm_tma8_time.cuh"
#include "gpu_test.cuh"

static std::mt19937 rng(20261129);
static int failures = 0;

template <typename T> static T to(float x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else if constexpr (std::is_same<T, __half>::value) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}
template <typename T> static double from(T x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else if constexpr (std::is_same<T, __half>::value) return __half2float(x);
  else if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(x);
  else if constexpr (std::is_same<T, signed char>::value) return x;
  else return (float)x; /* e4m3 */
}

/* A random operand value: e4m3 of a uniform value in [-1, 1) (never NaN),
 * or an int8 in [-127, 127]. */
template <typename T8> static T8 random8() {
  if constexpr (std::is_same<T8, signed char>::value)
    return (signed char)std::uniform_int_distribution<int>(-127, 127)(rng);
  else
    return __nv_fp8_e4m3(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
}

struct tcase {
  const char *name;
  int M, N, K, pad_c; /* ldc = N + pad_c */
  bool bias, small;
  float alpha;
  int a_step; /* a_scale_step */
  nnc_cuda_act act;
  bool residual, act_last, inplace; /* inplace: the residual is C itself */
  int max_blocks;
};

static const tcase CASES[] = {
    {"m17_n129_k128", 17, 129, 128, 0, false, true, 1.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m130_n257_k144_bias_padc", 130, 257, 144, 3, true, true, 0.5f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m300_n1003_k784_bias", 300, 1003, 784, 0, true, false, 1.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m3_n50257_k768_lm_head", 3, 50257, 768, 0, false, false, 1.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m257_n300_k16_one_scale", 257, 300, 16, 1, true, false, 1.0f, 0, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m260_n300_k0_bias", 260, 300, 0, 0, true, false, 1.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m515_n777_k272_3blocks", 515, 777, 272, 2, true, true, 1.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 3},
    {"m1029_n1100_k400_1block", 1029, 1100, 400, 0, false, false, 0.25f, 0, NNC_CUDA_ACT_NONE, false, false, false, 1},
    {"m130_n1537_k384_gelu_erf", 130, 1537, 384, 0, true, true, 1.0f, 1, NNC_CUDA_ACT_GELU_ERF, false, false, false, 0},
    {"m67_n300_k48_gelu_tanh_res", 67, 300, 48, 2, true, false, 1.0f, 1, NNC_CUDA_ACT_GELU_TANH, true, false, false, 0},
    {"m129_n258_k128_silu", 129, 258, 128, 0, false, false, 1.0f, 1, NNC_CUDA_ACT_SILU, false, false, false, 0},
    {"m33_n129_k80_res_relu_last", 33, 129, 80, 1, true, true, 0.5f, 0, NNC_CUDA_ACT_RELU, true, true, false, 0},
    {"m200_n384_k384_residual", 200, 384, 384, 0, true, false, 1.0f, 1, NNC_CUDA_ACT_NONE, true, false, false, 0},
    {"m300_n520_k208_res_inplace_2blocks", 300, 520, 208, 8, true, true, 1.0f, 1, NNC_CUDA_ACT_GELU_TANH, true, false,
     true, 2},
    /* rows of C 16-byte aligned (ldc * sizeof(out) % 16 == 0): the 16-byte stores, whole and cut by N */
    {"m150_n264_k144_aligned_bias", 150, 264, 144, 0, true, true, 1.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m70_n261_k48_aligned_tail", 70, 261, 48, 3, false, true, 2.0f, 1, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m129_n200_k128_aligned_erf_res_last", 129, 200, 128, 8, true, false, 1.0f, 1, NNC_CUDA_ACT_GELU_ERF, true, true,
     false, 0},
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

/* One case in one pair of types: the reference once, then each tile. */
template <typename T8, typename TO> static void run_case(const tcase &c, const char *tn) {
  const int M = c.M, N = c.N, K = c.K;
  const long long lda = K + 16, ldb = K, ldc = (long long)N + c.pad_c;
  const bool s8 = std::is_same<T8, signed char>::value;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
  std::vector<T8> ha((size_t)M * lda + 16), hb((size_t)N * ldb + 16);
  std::vector<float> hsa(M + 1), hsb(N + 1);
  std::vector<TO> hbias(N), hr((size_t)M * ldc + 1);
  for (auto &x : ha) x = random8<T8>();
  for (auto &x : hb) x = random8<T8>();
  /* scales that keep |C| near 1 for either operand type */
  const float unit = (s8 ? 1.0f / (127.0f * 127.0f) : 1.0f) / std::sqrt((float)(K > 0 ? K : 1));
  for (auto &x : hsa) x = pos(rng) * std::sqrt(unit) * 2.0f;
  for (auto &x : hsb) x = pos(rng) * std::sqrt(unit) * 2.0f;
  for (auto &x : hbias) x = to<TO>(u(rng));
  for (auto &x : hr) x = to<TO>(u(rng));
  std::vector<double> ref((size_t)M * N);
  double maxref = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += from(ha[(size_t)i * lda + k]) * from(hb[(size_t)j * ldb + k]);
      const double as = hsa[c.a_step ? i : 0];
      const double v = c.alpha * as * hsb[j] * s + (c.bias ? from(hbias[j]) : 0.0);
      const double r = c.residual ? from(hr[(size_t)i * ldc + j]) : 0.0;
      ref[(size_t)i * N + j] = c.act_last ? act_of(c.act, v + r) : act_of(c.act, v) + r;
      maxref = std::fmax(maxref, std::fabs(ref[(size_t)i * N + j]));
    }
  T8 *da, *db;
  float *dsa, *dsb;
  TO *dbias, *dc, *dr;
  CK(cudaMalloc(&da, ha.size()));
  CK(cudaMalloc(&db, hb.size()));
  CK(cudaMalloc(&dsa, hsa.size() * sizeof(float)));
  CK(cudaMalloc(&dsb, hsb.size() * sizeof(float)));
  CK(cudaMalloc(&dbias, hbias.size() * sizeof(TO) + 1));
  CK(cudaMalloc(&dc, ((size_t)M * ldc + 1) * sizeof(TO)));
  CK(cudaMalloc(&dr, hr.size() * sizeof(TO)));
  CK(cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsa, hsa.data(), hsa.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsb, hsb.data(), hsb.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, hbias.data(), hbias.size() * sizeof(TO), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dr, hr.data(), hr.size() * sizeof(TO), cudaMemcpyHostToDevice));
  const bool epi = c.act != NNC_CUDA_ACT_NONE || c.residual;
  const double tol = !std::is_same<TO, float>::value      ? 1e-2
                     : !s8                                 ? 5e-3
                     : c.act == NNC_CUDA_ACT_GELU_TANH ? 1e-3
                                                           : 1e-5;
  for (int tile_n : {128, 256}) {
    /* poison; in place, the residual's values inside each row */
    std::vector<TO> hc((size_t)M * ldc + 1, to<TO>(NAN));
    if (c.inplace)
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) hc[(size_t)i * ldc + j] = hr[(size_t)i * ldc + j];
    CK(cudaMemcpy(dc, hc.data(), hc.size() * sizeof(TO), cudaMemcpyHostToDevice));
    nnc_cuda_gemm_tma8_args<T8, TO> g = {};
    g.M = M, g.N = N, g.K = K;
    g.a = da, g.lda = lda, g.a_scale = dsa, g.a_scale_step = c.a_step;
    g.b = db, g.ldb = ldb, g.b_scale = dsb;
    g.bias = c.bias ? dbias : nullptr;
    g.alpha = c.alpha;
    g.act = c.act, g.act_last = c.act_last;
    if (c.residual) g.residual = c.inplace ? dc : dr, g.ldr = ldc;
    g.c = dc, g.ldc = ldc;
    g.tile_n = tile_n;
    g.stream_c = tile_n == 128; /* both store flavours, each tile one */
    g.max_blocks = c.max_blocks;
    nnc_cuda_error err;
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma8<T8, TO, true>(g, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_tma8(g, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) {
      std::printf("FAIL %s %s tile %d: %s\n", c.name, tn, tile_n, err.msg);
      ++failures;
      continue;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(hc.data(), dc, hc.size() * sizeof(TO), cudaMemcpyDeviceToHost));
    double maxerr = 0;
    bool pad_ok = true;
    long long bad = 0, first = -1; /* elements over the tolerance (or NaN), the first of them */
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        const double d = std::fabs(from(hc[(size_t)i * ldc + j]) - ref[(size_t)i * N + j]);
        maxerr = std::isnan(d) ? INFINITY : std::fmax(maxerr, d);
        if (!(d <= tol * (maxref > 0 ? maxref : 1))) {
          if (first < 0) first = (long long)i * N + j;
          ++bad;
        }
      }
      for (long long j = N; j < ldc; ++j) pad_ok &= std::isnan(from(hc[(size_t)i * ldc + j]));
    }
    pad_ok &= std::isnan(from(hc[(size_t)M * ldc])); /* the guard element after C */
    const double rel = maxref > 0 ? maxerr / maxref : maxerr;
    const bool ok = rel <= tol && pad_ok;
    std::printf("%s %-36s %-9s tile %d max rel error %.3g (tol %g)%s\n", ok ? "PASS" : "FAIL", c.name, tn, tile_n, rel,
                tol, pad_ok ? "" : ", wrote past N");
    if (bad > 0) {
      const int i = (int)(first / N), j = (int)(first % N);
      std::printf("     %lld of %lld elements off; first at row %d col %d: %g, want %g\n", bad, (long long)M * N, i, j,
                  from(hc[(size_t)i * ldc + j]), ref[(size_t)first]);
    }
    failures += !ok;
  }
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dsa));
  CK(cudaFree(dsb));
  CK(cudaFree(dbias));
  CK(cudaFree(dc));
  CK(cudaFree(dr));
}

/* Refusals: nothing launched, E_ARG with a message. */
static void arg_checks() {
  using args = nnc_cuda_gemm_tma8_args<__nv_fp8_e4m3, float>;
  __nv_fp8_e4m3 *d;
  float *c;
  CK(cudaMalloc(&d, 4096));
  CK(cudaMalloc(&c, 4096));
  args g = {};
  g.M = 4, g.N = 4, g.K = 16, g.a = d, g.lda = 16, g.b = d, g.ldb = 16, g.c = c, g.ldc = 4, g.alpha = 1;
  g.a_scale = c, g.a_scale_step = 1, g.b_scale = c;
  nnc_cuda_error err;
  auto expect = [&](const char *what, args x, nnc_cuda_status want, bool epi = false) {
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma8<__nv_fp8_e4m3, float, true>(x, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_tma8(x, (cudaStream_t)0, &err);
    const bool ok = st == want;
    std::printf("%s args: %s -> %d%s%s\n", ok ? "PASS" : "FAIL", what, (int)st, st ? ": " : "", st ? err.msg : "");
    failures += !ok;
  };
  auto x = g;
  x.K = 8, x.lda = 8, x.ldb = 8;
  expect("K = 8", x, NNC_CUDA_E_ARG);
  x = g, x.lda = 24;
  expect("lda 24", x, NNC_CUDA_E_ARG);
  x = g, x.ldc = 3;
  expect("ldc < N", x, NNC_CUDA_E_ARG);
  x = g, x.a = d + 8;
  expect("a misaligned", x, NNC_CUDA_E_ARG);
  x = g, x.a_scale = nullptr;
  expect("a_scale NULL", x, NNC_CUDA_E_ARG);
  x = g, x.b_scale = nullptr;
  expect("b_scale NULL", x, NNC_CUDA_E_ARG);
  x = g, x.a_scale_step = 2;
  expect("a_scale_step 2", x, NNC_CUDA_E_ARG);
  x = g, x.c = nullptr;
  expect("c NULL", x, NNC_CUDA_E_ARG);
  x = g, x.M = -1;
  expect("M < 0", x, NNC_CUDA_E_ARG);
  x = g, x.act = (nnc_cuda_act)99;
  expect("unknown activation", x, NNC_CUDA_E_ARG, true);
  x = g, x.residual = c, x.ldr = 3;
  expect("ldr < N", x, NNC_CUDA_E_ARG, true);
  x = g, x.act = NNC_CUDA_ACT_RELU;
  expect("an activation without the epilogue instance", x, NNC_CUDA_E_ARG);
  x = g, x.tile_n = 64;
  expect("tile_n 64", x, NNC_CUDA_E_ARG);
  x = g, x.lda = 1ll << 40;
  expect("lda of 2^40 bytes", x, NNC_CUDA_E_ARG);
  x = g, x.M = 0, x.a = nullptr;
  expect("M = 0 (nothing to do)", x, NNC_CUDA_OK);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(d));
  CK(cudaFree(c));
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  int dev = 0, major = 0, minor = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) {
    std::printf("SKIP: sm_90a code needs compute capability 9.0, found %d.%d\n", major, minor);
    return 77;
  }
  if (timing) return gemm_tma8_time::run() ? 0 : 1;
  arg_checks();
  int n = 0;
  for (const tcase &c : CASES) {
    if (small && !c.small) continue;
    run_case<__nv_fp8_e4m3, float>(c, "e4m3>f32");
    run_case<__nv_fp8_e4m3, __nv_bfloat16>(c, "e4m3>bf16");
    run_case<signed char, float>(c, "s8>f32");
    run_case<signed char, __nv_bfloat16>(c, "s8>bf16");
    run_case<signed char, __half>(c, "s8>f16");
    if (!small) run_case<__nv_fp8_e4m3, __half>(c, "e4m3>f16"), n += 2;
    n += 10;
  }
  std::printf("%s: %d cases, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}
