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
 * aligned or not, A, its scales and C written late by the kernel just
 * before (pdl.cuh's early start must wait for them; B copied before that
 * wait on one tile or the other), and the argument checks. Tolerance: max |out - ref| <=
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
#include "gemm_tma8.cuh"
#include "gemm_tma8_time.cuh"
#include "gemm_tma_test.cuh"

using namespace gemm_tma_test;

static double h_to(__nv_fp8_e4m3 x) { return (float)x; }

/* A random operand value: e4m3 of a uniform value in [-1, 1) (never NaN),
 * or an int8 in [-127, 127]. */
template <typename T8> static T8 random8() {
  if constexpr (std::is_same<T8, signed char>::value)
    return (signed char)std::uniform_int_distribution<int>(-127, 127)(rng);
  else
    return __nv_fp8_e4m3(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
}

/* a_step (last) 1 unless given: a scale per row of A */
static const tcase CASES[] = {
    {"m17_n129_k128", 17, 129, 128, 0, false, true, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m130_n257_k144_bias_padc", 130, 257, 144, 3, true, true, 0.5f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m300_n1003_k784_bias", 300, 1003, 784, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m3_n50257_k768_lm_head", 3, 50257, 768, 0, false, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m257_n300_k16_one_scale", 257, 300, 16, 1, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0, 0},
    {"m260_n300_k0_bias", 260, 300, 0, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m515_n777_k272_3blocks", 515, 777, 272, 2, true, true, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 3},
    {"m1029_n1100_k400_1block", 1029, 1100, 400, 0, false, false, 0.25f, NNC_CUDA_ACT_NONE, false, false, false, 1, 0},
    {"m130_n1537_k384_gelu_erf", 130, 1537, 384, 0, true, true, 1.0f, NNC_CUDA_ACT_GELU_ERF, false, false, false, 0},
    {"m67_n300_k48_gelu_tanh_res", 67, 300, 48, 2, true, false, 1.0f, NNC_CUDA_ACT_GELU_TANH, true, false, false, 0},
    {"m129_n258_k128_silu", 129, 258, 128, 0, false, false, 1.0f, NNC_CUDA_ACT_SILU, false, false, false, 0},
    {"m33_n129_k80_res_relu_last", 33, 129, 80, 1, true, true, 0.5f, NNC_CUDA_ACT_RELU, true, true, false, 0, 0},
    {"m200_n384_k384_residual", 200, 384, 384, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, true, false, false, 0},
    {"m300_n520_k208_res_inplace_2blocks", 300, 520, 208, 8, true, true, 1.0f, NNC_CUDA_ACT_GELU_TANH, true, false, true, 2},
    /* rows of C 16-byte aligned (ldc * sizeof(out) % 16 == 0): the 16-byte stores, whole and cut by N */
    {"m150_n264_k144_aligned_bias", 150, 264, 144, 0, true, true, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m70_n261_k48_aligned_tail", 70, 261, 48, 3, false, true, 2.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m129_n200_k128_aligned_erf_res_last", 129, 200, 128, 8, true, false, 1.0f, NNC_CUDA_ACT_GELU_ERF, true, true, false, 0},
};

/* The launcher; epi: the epilogue instance. */
template <typename T8, typename TO>
static nnc_cuda_status gemm(const nnc_cuda_gemm_tma8_args<T8, TO> &g, bool epi, nnc_cuda_error *err) {
  return epi ? nnc_cuda_gemm_tma8<T8, TO, true>(g, test_stream(), err) : nnc_cuda_gemm_tma8(g, test_stream(), err);
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
  for (auto &x : hbias) x = h_from<TO>(u(rng));
  for (auto &x : hr) x = h_from<TO>(u(rng));
  std::vector<double> ref;
  auto product = [&](int i, int j) {
    const double as = hsa[c.a_step ? i : 0];
    return c.alpha * as * hsb[j] * dot(ha, lda, hb, ldb, i, j, K);
  };
  const double maxref = reference(c, product, hbias, hr, ldc, ref);
  T8 *da = device_copy(ha), *sa = device_copy(ha), *db = device_copy(hb);
  float *dsa = device_copy(hsa), *ssa = device_copy(hsa), *dsb = device_copy(hsb);
  TO *dbias = device_copy(hbias), *dr = device_copy(hr), *dc;
  CK(cudaMalloc(&dc, ((size_t)M * ldc + 1) * sizeof(TO)));
  const bool epi = c.act != NNC_CUDA_ACT_NONE || c.residual;
  const double tol = !std::is_same<TO, float>::value      ? 1e-2
                     : !s8                                 ? 5e-3
                     : c.act == NNC_CUDA_ACT_GELU_TANH ? 1e-3
                                                           : 1e-5;
  /* A and its scales written late; B a weight (copied before the wait) on one tile or the other, by M's parity */
  const std::vector<late_write> late = {{da, sa, ha.size() * sizeof(T8)}, {dsa, ssa, hsa.size() * sizeof(float)}};
  check_tiles(c, tn, 36, dc, hr, ldc, ref, maxref, tol, late, [&](int tile_n, nnc_cuda_error *err) {
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
    g.b_fixed = (tile_n == 128) != (c.M % 2 == 1);
    return gemm(g, epi, err);
  });
  for (void *p : {(void *)da, (void *)sa, (void *)db, (void *)dsa, (void *)ssa, (void *)dsb, (void *)dbias, (void *)dc,
                  (void *)dr})
    CK(cudaFree(p));
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
  auto expect = [](const char *what, const args &x, nnc_cuda_status want, bool epi = false) {
    gemm_tma_test::expect(what, x, want, epi, gemm);
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

static int cases(bool small) {
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
  return n;
}

int main(int argc, char **argv) { return run_main(argc, argv, gemm_tma8_time::run, arg_checks, cases); }
