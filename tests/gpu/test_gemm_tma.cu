/* tests/gpu/test_gemm_tma.cu — templates/cuda/gemm_tma.cuh (sm_90a) against
 * a float64 CPU reference on fresh random inputs: bf16 and f16 operands,
 * f32 and narrow outputs, both tiles (128 x 128 with streaming stores,
 * 128 x 256 without), odd M and N (partial tiles both ways), K = 8, 72,
 * 768 and others not a multiple of 64, lda > K (the copy engine must not
 * read the row's tail), rows of C longer than N whose extra elements must
 * keep their NaN poison, bias, alpha, K = 0, GPT-2's LM head row
 * (N = 50257), the epilogue's activations and residual (before and after
 * the activation, and in place: residual == c), grids of a few blocks that
 * take many tiles each (the stage ring's phases running on across tiles),
 * rows of C (and of the residual) 16-byte aligned or not (the 16-byte and
 * the element-wise stores; ldc = N + pad), A and C written late by the
 * kernel just before (the early start of pdl.cuh must wait for them; B
 * copied before that wait on one tile or the other), and the argument checks.
 * Tolerance: max |out - ref| <= tol * max |ref|,
 * tol 1e-5 for f32 out (1e-3 with the tanh GELU's tanh.approx), 1e-2 for
 * bf16/f16 out.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -Itests/gpu -I. \
 *     [-DNNC_GEMM_TMA_WATCHDOG] -o test_gemm_tma tests/gpu/test_gemm_tma.cu -lcublasLt
 * (the watchdog turns a deadlocked pipeline into a message and a trap, but
 * serializes the wgmmas: bench/gpu_gemm_tma.sh's smoke run only)
 *   ./test_gemm_tma [--small | --time]
 * --small: the cases compute-sanitizer runs; --time: gemm_tma_time.cuh's
 * table against cuBLASLt and gemm_wgmma.cuh on GPT-2 and BERT shapes.
 * Exits 1 on any failure, 77 (skipped) on a GPU that is not compute
 * capability 9.0. */
#include "gemm_tma.cuh"
#include "gemm_tma_test.cuh"
#include "gemm_tma_time.cuh"

using namespace gemm_tma_test;

static const tcase CASES[] = {
    {"m17_n129_k64", 17, 129, 64, 0, false, true, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m130_n257_k72_bias_padc", 130, 257, 72, 3, true, true, 0.5f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m300_n1003_k768_bias", 300, 1003, 768, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m3_n50257_k768_lm_head", 3, 50257, 768, 0, false, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m257_n300_k8", 257, 300, 8, 1, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m260_n300_k0_bias", 260, 300, 0, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m515_n777_k136_3blocks", 515, 777, 136, 2, true, true, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 3},
    {"m1029_n1100_k200_1block", 1029, 1100, 200, 0, false, false, 0.25f, NNC_CUDA_ACT_NONE, false, false, false, 1},
    {"m130_n1537_k384_gelu_erf", 130, 1537, 384, 0, true, true, 1.0f, NNC_CUDA_ACT_GELU_ERF, false, false, false, 0},
    {"m67_n300_k72_gelu_tanh_res", 67, 300, 72, 2, true, false, 1.0f, NNC_CUDA_ACT_GELU_TANH, true, false, false, 0},
    {"m129_n258_k64_silu", 129, 258, 64, 0, false, false, 1.0f, NNC_CUDA_ACT_SILU, false, false, false, 0},
    {"m33_n129_k40_res_relu_last", 33, 129, 40, 1, true, true, 0.5f, NNC_CUDA_ACT_RELU, true, true, false, 0},
    {"m200_n384_k384_residual", 200, 384, 384, 0, true, false, 1.0f, NNC_CUDA_ACT_NONE, true, false, false, 0},
    {"m300_n520_k200_res_inplace_2blocks", 300, 520, 200, 8, true, true, 1.0f, NNC_CUDA_ACT_GELU_TANH, true, false, true, 2},
    /* rows of C 16-byte aligned (ldc * sizeof(out) % 16 == 0): the 16-byte stores, whole and cut by N */
    {"m150_n264_k72_aligned_bias", 150, 264, 72, 0, true, true, 1.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m70_n261_k40_aligned_tail", 70, 261, 40, 3, false, true, 2.0f, NNC_CUDA_ACT_NONE, false, false, false, 0},
    {"m129_n200_k64_aligned_erf_res_last", 129, 200, 64, 8, true, false, 1.0f, NNC_CUDA_ACT_GELU_ERF, true, true, false, 0},
};

/* The launcher; epi: the epilogue instance. */
template <typename T, typename TO>
static nnc_cuda_status gemm(const nnc_cuda_gemm_tma_args<T, TO> &g, bool epi, nnc_cuda_error *err) {
  return epi ? nnc_cuda_gemm_tma<T, TO, true>(g, test_stream(), err) : nnc_cuda_gemm_tma(g, test_stream(), err);
}

/* One case in one pair of types: the reference once, then each tile. */
template <typename T, typename TO> static void run_case(const tcase &c, const char *tn) {
  const int M = c.M, N = c.N, K = c.K;
  const long long lda = K + 8, ldb = K, ldc = (long long)N + c.pad_c;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> ha((size_t)M * lda + 1), hb((size_t)N * ldb + 1), hbias(N);
  std::vector<TO> hr((size_t)M * ldc + 1);
  for (auto &x : ha) x = h_from<T>(u(rng));
  for (auto &x : hb) x = h_from<T>(u(rng) * 0.1f);
  for (auto &x : hbias) x = h_from<T>(u(rng));
  for (auto &x : hr) x = h_from<TO>(u(rng));
  std::vector<double> ref;
  auto product = [&](int i, int j) { return c.alpha * dot(ha, lda, hb, ldb, i, j, K); };
  const double maxref = reference(c, product, hbias, hr, ldc, ref);
  T *da = device_copy(ha), *sa = device_copy(ha), *db = device_copy(hb), *dbias = device_copy(hbias);
  TO *dr = device_copy(hr), *dc;
  CK(cudaMalloc(&dc, ((size_t)M * ldc + 1) * sizeof(TO)));
  const bool epi = c.act != NNC_CUDA_ACT_NONE || c.residual;
  /* the tanh GELU runs on tanh.approx (relative error about 2^-11) */
  const double tol = !std::is_same<TO, float>::value ? 1e-2 : c.act == NNC_CUDA_ACT_GELU_TANH ? 1e-3 : 1e-5;
  /* A written late; B a weight (copied before the wait) on one tile or the other, by M's parity */
  const std::vector<late_write> late = {{da, sa, ha.size() * sizeof(T)}};
  check_tiles(c, tn, 34, dc, hr, ldc, ref, maxref, tol, late, [&](int tile_n, nnc_cuda_error *err) {
    nnc_cuda_gemm_tma_args<T, TO> g = {};
    g.M = M, g.N = N, g.K = K;
    g.a = da, g.lda = lda, g.b = db, g.ldb = ldb;
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
  for (void *p : {(void *)da, (void *)sa, (void *)db, (void *)dbias, (void *)dc, (void *)dr}) CK(cudaFree(p));
}

/* Refusals: nothing launched, E_ARG with a message. */
static void arg_checks() {
  using args = nnc_cuda_gemm_tma_args<__nv_bfloat16, float>;
  args g = {};
  __nv_bfloat16 *d;
  float *c;
  CK(cudaMalloc(&d, 4096));
  CK(cudaMalloc(&c, 4096));
  g.M = 4, g.N = 4, g.K = 8, g.a = d, g.lda = 8, g.b = d, g.ldb = 8, g.c = c, g.ldc = 4, g.alpha = 1;
  auto expect = [](const char *what, const args &x, nnc_cuda_status want, bool epi = false) {
    gemm_tma_test::expect(what, x, want, epi, gemm);
  };
  auto x = g;
  x.K = 7, x.lda = 7, x.ldb = 7;
  expect("K = 7", x, NNC_CUDA_E_ARG);
  x = g, x.lda = 4;
  expect("lda < K", x, NNC_CUDA_E_ARG);
  x = g, x.ldc = 3;
  expect("ldc < N", x, NNC_CUDA_E_ARG);
  x = g, x.a = d + 1;
  expect("a misaligned", x, NNC_CUDA_E_ARG);
  x = g, x.b = nullptr;
  expect("b NULL", x, NNC_CUDA_E_ARG);
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
  x = g, x.residual = c, x.ldr = 4;
  expect("a residual without the epilogue instance", x, NNC_CUDA_E_ARG);
  x = g, x.tile_n = 64;
  expect("tile_n 64", x, NNC_CUDA_E_ARG);
  x = g, x.max_blocks = -1;
  expect("max_blocks < 0", x, NNC_CUDA_E_ARG);
  x = g, x.lda = 1ll << 40;
  expect("lda of 2^41 bytes", x, NNC_CUDA_E_ARG);
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
    run_case<__nv_bfloat16, float>(c, "bf16>f32");
    run_case<__nv_bfloat16, __nv_bfloat16>(c, "bf16>bf16");
    run_case<__half, float>(c, "f16>f32");
    run_case<__half, __half>(c, "f16>f16");
    n += 8;
  }
  return n;
}

int main(int argc, char **argv) { return run_main(argc, argv, gemm_tma_time::run, arg_checks, cases); }
