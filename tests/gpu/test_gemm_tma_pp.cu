/* tests/gpu/test_gemm_tma_pp.cu — templates/cuda/gemm_tma_pp.cuh (sm_90a,
 * the ping-pong schedule of gemm_tma.cuh) against a float64 CPU reference:
 * test_gemm_tma.cu's cases and checks (gemm_tma_test.cuh: NaN poison past
 * N and after C, A and C written late by the kernel just before, the
 * argument refusals), plus cases for the ping-pong's own bookkeeping: k
 * steps more than the ring's six stages and not a multiple of them, an odd
 * number of tiles a block (warpgroup 0 takes one more).
 * The kernel has one tile (128 x 128 a warpgroup), so check_tiles' two
 * passes are two launches of it, the line's "tile" naming the pass:
 * - "tile 128": tile_n 128, the case's grid (a block an SM unless the case
 *   sets max_blocks: most small cases then give a block one tile, which
 *   only warpgroup 0 takes), streaming stores, B copied before the PDL
 *   wait (b_fixed);
 * - "tile 256": tile_n 0 (the launcher's choice), two blocks unless the
 *   case sets max_blocks (so both warpgroups take turns on every case,
 *   their ring positions running on across tiles), plain stores, no
 *   b_fixed.
 * Tolerance: max |out - ref| <= tol * max |ref|, tol 1e-5 for f32 out (1e-3
 * with the tanh GELU's tanh.approx), 1e-2 for bf16/f16 out.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -Itests/gpu -I. \
 *     [-DNNC_GEMM_TMA_WATCHDOG] -o test_gemm_tma_pp tests/gpu/test_gemm_tma_pp.cu -lcuda -lcublasLt
 * (the watchdog turns a deadlocked pipeline into a message and a trap, but
 * serializes the wgmmas: a build to find a hang in, not to time)
 *   ./test_gemm_tma_pp [--small | --time]
 * --small: the cases compute-sanitizer runs. --time: BERT's (M = 4096) and
 * GPT-2's (M = 8192) layer GEMMs with their epilogues, bf16 operands and
 * out, ping-pong against gemm_tma.cuh (its own tile choice) and cuBLASLt
 * (gemm_tma_time.cuh's lt_gemm: its heuristic's first algorithm; no erf
 * GELU there, so BERT's ffn.in runs its tanh GELU, marked). Each time is
 * the median over 30 rounds of the CUDA-event time of 10 back-to-back
 * launches over 10 (after 10 untimed launches), so the early start of
 * pdl.cuh overlaps a launch with the one before as in a model; the single
 * launch median (gpu_test.cuh's median_ms) is shown beside it for ours.
 * "check": max |pp - tma| / max |tma| over all of C, under 1e-2.
 * Exits 1 on any failure, 77 (skipped) on a GPU that is not compute
 * capability 9.0. */
#include "gemm_tma_pp.cuh"
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
    /* the ping-pong's: 7 k steps (more than the six stages), 25 tiles on 2 blocks (13 and 12: warpgroup 0 one
       more), then 5 steps on 3 blocks (a tile's ring start moving by 5 of 6), rows cut inside acc[1]'s half */
    {"m640_n640_k448_erf_2blocks", 640, 640, 448, 0, true, true, 1.0f, NNC_CUDA_ACT_GELU_ERF, false, false, false, 2},
    {"m450_n390_k320_res_3blocks", 450, 390, 320, 0, true, true, 1.0f, NNC_CUDA_ACT_NONE, true, false, false, 3},
};

/* The launcher; epi: the epilogue instance. */
template <typename T, typename TO>
static nnc_cuda_status gemm(const nnc_cuda_gemm_tma_args<T, TO> &g, bool epi, nnc_cuda_error *err) {
  return epi ? nnc_cuda_gemm_tma_pp<T, TO, true>(g, (cudaStream_t)0, err)
             : nnc_cuda_gemm_tma_pp(g, (cudaStream_t)0, err);
}

/* One case in one pair of types: the reference once, then check_tiles' two passes. */
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
  const double tol = !std::is_same<TO, float>::value ? 1e-2 : c.act == NNC_CUDA_ACT_GELU_TANH ? 1e-3 : 1e-5;
  const std::vector<late_write> late = {{da, sa, ha.size() * sizeof(T)}};
  check_tiles(c, tn, 36, dc, hr, ldc, ref, maxref, tol, late, [&](int pass, nnc_cuda_error *err) {
    const bool first = pass == 128;
    nnc_cuda_gemm_tma_args<T, TO> g = {};
    g.M = M, g.N = N, g.K = K;
    g.a = da, g.lda = lda, g.b = db, g.ldb = ldb;
    g.bias = c.bias ? dbias : nullptr;
    g.alpha = c.alpha;
    g.act = c.act, g.act_last = c.act_last;
    if (c.residual) g.residual = c.inplace ? dc : dr, g.ldr = ldc;
    g.c = dc, g.ldc = ldc;
    g.tile_n = first ? 128 : 0;
    g.stream_c = first;
    g.max_blocks = c.max_blocks ? c.max_blocks : first ? 0 : 2;
    g.b_fixed = first;
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
  x = g, x.tile_n = 256;
  expect("tile_n 256 (not this kernel's tile)", x, NNC_CUDA_E_ARG);
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

namespace pp_time {

using gemm_tma_time::shape;

static const shape SHAPES[] = {
    {"bert qkv 1152x384 +bias", 4096, 1152, 384, NNC_CUDA_ACT_NONE, false, false},
    {"bert attn.out 384x384 +bias+res", 4096, 384, 384, NNC_CUDA_ACT_NONE, true, false},
    {"bert ffn.in 1536x384 +bias+erf-gelu", 4096, 1536, 384, NNC_CUDA_ACT_GELU_ERF, false, false},
    {"bert ffn.out 384x1536 +bias+res", 4096, 384, 1536, NNC_CUDA_ACT_NONE, true, false},
    {"gpt2 c_attn 2304x768 +bias", 8192, 2304, 768, NNC_CUDA_ACT_NONE, false, false},
    {"gpt2 attn.c_proj 768x768 +bias+res", 8192, 768, 768, NNC_CUDA_ACT_NONE, true, false},
    {"gpt2 c_fc 3072x768 +bias+gelu", 8192, 3072, 768, NNC_CUDA_ACT_GELU_TANH, false, false},
    {"gpt2 mlp.c_proj 768x3072 +bias+res", 8192, 768, 3072, NNC_CUDA_ACT_NONE, true, false},
};

/* The median over ROUNDS of the CUDA-event time of BACK launches in a row,
 * divided by BACK (ms), after WARM untimed launches; -1 when a launch
 * returns false. */
template <class F> static double back_to_back_ms(F launch) {
  constexpr int WARM = 10, ROUNDS = 30, BACK = 10;
  for (int i = 0; i < WARM; ++i)
    if (!launch()) return -1;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  bool ok = true;
  for (int r = 0; r < ROUNDS && ok; ++r) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < BACK && ok; ++i) ok = launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / BACK);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  if (!ok) return -1;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/* One shape: ours (back to back and single), gemm_tma, cuBLASLt, then the
 * check; one table row. */
static bool one(const shape &s, char *row, size_t rown) {
  using T = __nv_bfloat16;
  const size_t na = (size_t)s.M * s.K, nb = (size_t)s.N * s.K, nc = (size_t)s.M * s.N;
  T *a, *b, *bias, *res = nullptr, *c, *c2, *c3;
  CK(cudaMalloc(&a, na * sizeof(T)));
  CK(cudaMalloc(&b, nb * sizeof(T)));
  CK(cudaMalloc(&bias, s.N * sizeof(T)));
  CK(cudaMalloc(&c, nc * sizeof(T)));
  CK(cudaMalloc(&c2, nc * sizeof(T)));
  CK(cudaMalloc(&c3, nc * sizeof(T)));
  gemm_tma_time::fill_dev(a, na, 1u, 1.0f);
  gemm_tma_time::fill_dev(b, nb, 2u, 0.05f);
  gemm_tma_time::fill_dev(bias, (size_t)s.N, 3u, 0.5f);
  if (s.residual) {
    CK(cudaMalloc(&res, nc * sizeof(T)));
    gemm_tma_time::fill_dev(res, nc, 4u, 1.0f);
  }
  const bool epi = s.act != NNC_CUDA_ACT_NONE || s.residual;
  nnc_cuda_gemm_tma_args<T, T> g = {};
  g.M = s.M, g.N = s.N, g.K = s.K, g.a = a, g.lda = s.K, g.b = b, g.ldb = s.K;
  g.bias = bias, g.residual = res, g.ldr = s.N, g.act = s.act, g.alpha = 1.0f;
  g.c = c, g.ldc = s.N;
  g.b_fixed = true; /* a weight, as the compiler passes it */
  nnc_cuda_error err;
  auto pp = [&] {
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma_pp<T, T, true>(g, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_tma_pp<T, T, false>(g, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  pp: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  };
  nnc_cuda_gemm_tma_args<T, T> gt = g;
  gt.c = c2;
  auto tma = [&] {
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma<T, T, true>(gt, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_tma<T, T, false>(gt, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  tma: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  };
  const double t_pp = back_to_back_ms(pp), t_pp1 = median_ms(pp), t_tma = back_to_back_ms(tma);
  double t_lt = -1;
  {
    gemm_tma_time::lt_gemm lt(s, bias);
    if (lt.ok)
      t_lt = back_to_back_ms([&] { return lt.run(a, b, res, c3); });
    else
      std::printf("  cuBLASLt: no algorithm for %s\n", s.name);
    CK(cudaDeviceSynchronize());
  }
  /* the check: both once more (the residual is read, not written, so repeated launches agree) */
  const bool ran = pp() && tma();
  CK(cudaDeviceSynchronize());
  const double rel = ran ? gemm_tma_time::rel_diff(c, c2, nc) : INFINITY;
  const bool ok = ran && rel <= 1e-2 && t_pp > 0 && t_tma > 0;
  char cp[48], cp1[48], ct[48], cl[48];
  gemm_tma_time::cell(cp, sizeof cp, s, t_pp);
  gemm_tma_time::cell(cp1, sizeof cp1, s, t_pp1);
  gemm_tma_time::cell(ct, sizeof ct, s, t_tma);
  gemm_tma_time::cell(cl, sizeof cl, s, t_lt);
  snprintf(row, rown, "| %s%s | %s | %s | %s | %s | %.2f | %.2f | %.1e%s |", s.name,
           s.act == NNC_CUDA_ACT_GELU_ERF ? " (cuBLASLt: tanh gelu)" : "", cp, cp1, ct, cl,
           t_pp > 0 && t_tma > 0 ? t_tma / t_pp : 0.0, t_pp > 0 && t_lt > 0 ? t_lt / t_pp : 0.0, rel,
           ok ? "" : " FAIL");
  std::printf("%s\n", row);
  for (void *p : {(void *)a, (void *)b, (void *)bias, (void *)c, (void *)c2, (void *)c3, (void *)res})
    if (p) CK(cudaFree(p));
  return ok;
}

static bool run() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  constexpr int n = (int)(sizeof SHAPES / sizeof SHAPES[0]);
  static char rows[n][512];
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= one(SHAPES[i], rows[i], sizeof rows[i]);
  std::printf("\n## gemm_tma_pp on %s (%d SMs): ms (TFLOP/s), bf16 in and out; back to back: median of 30 "
              "rounds of 10 launches\n\n",
              prop.name, sms);
  std::printf("| GEMM (N x K, epilogue) | pp, back to back | pp, one launch | tma auto, back to back | "
              "cuBLASLt, back to back | tma / pp | cuBLASLt / pp | check |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < n; ++i) std::printf("%s\n", rows[i]);
  std::printf("\n%s\n", ok ? "timing: every check passed" : "timing: FAILED (a launch failed or a check over 1e-2)");
  return ok;
}

}  // namespace pp_time

int main(int argc, char **argv) { return run_main(argc, argv, pp_time::run, arg_checks, cases); }
