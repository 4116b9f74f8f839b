/* tests/gpu/test_gemm_tma_ln.cu — templates/cuda/gemm_tma_ln.cuh (sm_90a):
 * C = LayerNorm(A B^T + bias + residual) * gamma + beta against a float64
 * CPU reference (the sum, its mean, then the centered variance) on fresh
 * random inputs whose rows have a mean far from 0 (the statistics must not
 * cancel): bf16 and f16, both forms (split 1: two warpgroups a block;
 * split 2: a cluster of two blocks) on every case, BERT's rows (N = 384
 * after K = 384 and 1536), N = 512, 320, 250, 200, 130 and 97 (halves
 * that the wgmma's N does not fill; an odd N), N = 64 (one warpgroup),
 * odd M (70, 4097: a partial last tile), K = 0, 40, 72 (k steps cut short),
 * the residual in place (residual == c, as nnc runs it), the sum before
 * the norm (pre), no bias/gamma/beta, rows of C not 4-byte aligned (odd
 * ldc: element stores), rows of C longer than N whose extra elements must
 * keep their NaN poison, grids of 2 or 3 blocks that take many tiles each
 * (the stage ring and the exchange buffers running on across tiles), and
 * the argument checks. Rows of whole 16-byte vectors (N a multiple of 8,
 * ldc a multiple of 8) take the VEC instances (rows staged through shared
 * memory), the others (odd ldc, ldc = N + 2 or + 4, N = 97, 130, 250) the
 * pair or element stores. N > 384 runs the cluster form whatever the
 * split. A, C and pre get their first bytes late, from the kernel just
 * before (gpu_test.cuh's late_copy), with B copied before the wait for it
 * (b_fixed) in each form for half the cases: the launch that starts early must wait for
 * them (pdl.cuh). Tolerance: max |out - ref| <= 1e-2 max |ref|.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -Itests/gpu -I. \
 *     [-DNNC_GEMM_TMA_WATCHDOG] -o test_gemm_tma_ln tests/gpu/test_gemm_tma_ln.cu -lcuda -lcublasLt
 *   ./test_gemm_tma_ln [[NAME...] --small | --time | --args | --trace]
 * --small: the cases compute-sanitizer runs (NAME... --small: those of them
 * named, so that a sanitizer's run may be split); --args: the argument checks
 * only (a binary built elsewhere runs here); --trace (built with
 * -DNNC_GEMM_TMA_LN_TRACE): where a run's time goes, phase by phase;
 * --time: gemm_tma_ln_time.cuh's
 * table (BERT's two shapes, fused against gemm_tma or cuBLASLt plus the row
 * kernel). Exits 1 on any failure, 77 (skipped) on a GPU that is not
 * compute capability 9.0. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "gemm_tma_ln.cuh"
#include "gemm_tma_ln_time.cuh"
#include "gpu_test.cuh"

static std::mt19937 rng(20261129);
static int failures = 0;

struct tcase {
  const char *name;
  int M, N, K, pad_c; /* ldc = N + pad_c (also the residual's and pre's) */
  bool bias, affine, residual, inplace, pre, small;
  float eps;
  int max_blocks;
};

static const tcase CASES[] = {
    {"m70_n384_k384_bert_attn", 70, 384, 384, 0, true, true, true, true, false, true, 1e-12f, 0},
    {"m4097_n384_k1536_bert_ffn", 4097, 384, 1536, 0, true, true, true, true, false, false, 1e-12f, 0},
    {"m70_n320_k40_pre", 70, 320, 40, 0, true, true, true, false, true, true, 1e-12f, 0},
    {"m130_n200_k384_odd_ldc", 130, 200, 384, 3, true, true, true, false, true, true, 1e-12f, 0},
    {"m70_n64_k40_one_warpgroup", 70, 64, 40, 8, true, true, true, true, false, true, 1e-12f, 0},
    {"m33_n97_k64_odd_n", 33, 97, 64, 0, true, false, true, false, true, true, 1e-12f, 0},
    {"m200_n512_k136_inplace_pre_ldc516", 200, 512, 136, 4, true, true, true, true, true, false, 1e-12f, 0},
    {"m70_n384_k64_ldc386", 70, 384, 64, 2, true, true, true, true, false, true, 1e-12f, 0},
    {"m40_n56_k40_odd_ldc", 40, 56, 40, 1, true, true, true, false, true, true, 1e-12f, 0},
    {"m1000_n384_k72_2blocks", 1000, 384, 72, 0, true, true, true, true, false, false, 1e-12f, 2},
    {"m200_n384_k72_2blocks", 200, 384, 72, 0, true, true, true, true, false, true, 1e-12f, 2},
    {"m260_n130_k64_3blocks", 260, 130, 64, 2, true, true, true, false, true, true, 1e-12f, 3},
    {"m100_n384_k0", 100, 384, 0, 0, true, true, true, false, true, true, 1e-12f, 0},
    {"m64_n448_k1536_no_bias_res", 64, 448, 1536, 0, false, true, false, false, false, false, 1e-12f, 0},
    {"m129_n250_k384_eps1e-5_noaffine", 129, 250, 384, 2, true, false, true, false, false, false, 1e-5f, 0},
};

template <typename T> static void put(std::vector<T> &v, std::uniform_real_distribution<float> &u, float scale,
                                      float shift) {
  for (auto &x : v) x = h_from<T>(u(rng) * scale + shift);
}

/* One case in one type: the reference once, then each form. */
template <typename T> static void run_case(const tcase &c, const char *tn) {
  const int M = c.M, N = c.N, K = c.K;
  const long long lda = K + 8, ldb = K, ldc = (long long)N + c.pad_c;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> ha((size_t)M * lda + 8), hb((size_t)N * ldb + 8), hbias(N), hg(N), hbeta(N), hr((size_t)M * ldc + 1);
  put(ha, u, 1.0f, 0.0f);
  put(hb, u, 0.1f, 0.0f);
  put(hbias, u, 1.0f, 3.0f); /* rows' means near 5: a cancelling variance would show */
  put(hg, u, 0.5f, 1.0f);
  put(hbeta, u, 0.5f, 0.0f);
  put(hr, u, 1.0f, 2.0f);
  std::vector<double> xref((size_t)M * N), yref((size_t)M * N), ad((size_t)M * K), bd((size_t)N * K);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) ad[(size_t)i * K + k] = h_to(ha[(size_t)i * lda + k]);
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) bd[(size_t)j * K + k] = h_to(hb[(size_t)j * ldb + k]);
  double maxx = 0, maxy = 0;
  for (int i = 0; i < M; ++i) {
    double *x = &xref[(size_t)i * N];
    for (int j = 0; j < N; ++j) {
      const double *pa = ad.data() + (size_t)i * K, *pb = bd.data() + (size_t)j * K; /* K = 0: empty vectors */
      double s = 0;
      for (int k = 0; k < K; ++k) s += pa[k] * pb[k];
      x[j] = s + (c.bias ? h_to(hbias[j]) : 0.0) + (c.residual ? h_to(hr[(size_t)i * ldc + j]) : 0.0);
      maxx = std::fmax(maxx, std::fabs(x[j]));
    }
    double mean = 0, var = 0;
    for (int j = 0; j < N; ++j) mean += x[j];
    mean /= N;
    for (int j = 0; j < N; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= N;
    const double rstd = 1.0 / std::sqrt(var + (double)c.eps);
    for (int j = 0; j < N; ++j) {
      const double y = (x[j] - mean) * rstd * (c.affine ? h_to(hg[j]) : 1.0) + (c.affine ? h_to(hbeta[j]) : 0.0);
      yref[(size_t)i * N + j] = y;
      maxy = std::fmax(maxy, std::fabs(y));
    }
  }
  T *da, *sa, *db, *dbias, *dg, *dbeta, *dc, *dr, *dp, *sc, *sp;
  CK(cudaMalloc(&da, ha.size() * sizeof(T)));
  CK(cudaMalloc(&sa, ha.size() * sizeof(T)));
  CK(cudaMalloc(&sc, hr.size() * sizeof(T)));
  CK(cudaMalloc(&sp, hr.size() * sizeof(T)));
  CK(cudaMalloc(&db, hb.size() * sizeof(T)));
  CK(cudaMalloc(&dbias, N * sizeof(T)));
  CK(cudaMalloc(&dg, N * sizeof(T)));
  CK(cudaMalloc(&dbeta, N * sizeof(T)));
  CK(cudaMalloc(&dc, hr.size() * sizeof(T)));
  CK(cudaMalloc(&dr, hr.size() * sizeof(T)));
  CK(cudaMalloc(&dp, hr.size() * sizeof(T)));
  CK(cudaMemcpy(sa, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, hbias.data(), N * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dg, hg.data(), N * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbeta, hbeta.data(), N * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dr, hr.data(), hr.size() * sizeof(T), cudaMemcpyHostToDevice));
  const double tol = 1e-2;
  for (int split : {1, 2}) {
    /* poison; in place, the residual's values inside each row */
    std::vector<T> hc(hr.size(), h_from<T>(NAN)), hp(hr.size(), h_from<T>(NAN));
    if (c.inplace)
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) hc[(size_t)i * ldc + j] = hr[(size_t)i * ldc + j];
    /* A, C and pre written late by the kernel before (gpu_test.cuh's late_copy) */
    CK(cudaMemcpy(sc, hc.data(), hc.size() * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sp, hp.data(), hp.size() * sizeof(T), cudaMemcpyHostToDevice));
    late_copy({{da, sa, ha.size() * sizeof(T)}, {dc, sc, hc.size() * sizeof(T)}, {dp, sp, hp.size() * sizeof(T)}});
    nnc_cuda_gemm_tma_ln_args<T> g = {};
    g.M = M, g.N = N, g.K = K;
    g.a = da, g.lda = lda, g.b = db, g.ldb = ldb;
    g.bias = c.bias ? dbias : nullptr;
    if (c.residual) g.residual = c.inplace ? dc : dr, g.ldr = ldc;
    g.gamma = c.affine ? dg : nullptr, g.beta = c.affine ? dbeta : nullptr;
    g.eps = c.eps;
    g.c = dc, g.ldc = ldc;
    if (c.pre) g.pre = dp, g.ldp = ldc;
    g.split = split;
    g.max_blocks = c.max_blocks;
    g.b_fixed = (split == 1) != (c.M % 2 == 1); /* B copied before the wait: each form with and without */
    nnc_cuda_error err;
    const nnc_cuda_status st = nnc_cuda_gemm_tma_ln(g, test_stream(), &err);
    if (st != NNC_CUDA_OK) {
      std::printf("FAIL %s %s split %d: %s\n", c.name, tn, split, err.msg);
      ++failures;
      CK(cudaDeviceSynchronize());
      continue;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(hc.data(), dc, hc.size() * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hp.data(), dp, hp.size() * sizeof(T), cudaMemcpyDeviceToHost));
    double ey = 0, ex = 0;
    bool pad_ok = true;
    long long bad = 0, first = -1; /* outputs over the tolerance (or NaN), the first of them */
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        const size_t o = (size_t)i * ldc + j, r = (size_t)i * N + j;
        const double d = std::fabs(h_to(hc[o]) - yref[r]);
        ey = std::isnan(d) ? INFINITY : std::fmax(ey, d);
        if (!(d <= tol * maxy)) {
          if (first < 0) first = (long long)r;
          ++bad;
        }
        if (c.pre) {
          const double dx = std::fabs(h_to(hp[o]) - xref[r]);
          ex = std::isnan(dx) ? INFINITY : std::fmax(ex, dx);
        }
      }
      for (long long j = N; j < ldc; ++j)
        pad_ok &= std::isnan(h_to(hc[(size_t)i * ldc + j])) && std::isnan(h_to(hp[(size_t)i * ldc + j]));
    }
    pad_ok &= std::isnan(h_to(hc[(size_t)M * ldc])) && std::isnan(h_to(hp[(size_t)M * ldc])); /* guards */
    if (!c.pre)
      for (size_t o = 0; o < hp.size(); ++o) pad_ok &= std::isnan(h_to(hp[o])); /* pre untouched */
    const double ry = ey / maxy, rx = c.pre ? ex / maxx : 0.0;
    const bool ok = ry <= tol && rx <= tol && pad_ok;
    std::printf("%s %-34s %-4s split %d max rel error %.3g", ok ? "PASS" : "FAIL", c.name, tn, split, ry);
    if (c.pre) std::printf(", pre %.3g", rx);
    std::printf(" (tol %g)%s\n", tol, pad_ok ? "" : ", wrote past N or into pre");
    /* where it went wrong: rows point at the tile walk or the exchange, columns at a half */
    if (bad > 0) {
      const int i = (int)(first / N), j = (int)(first % N);
      std::printf("     %lld of %lld outputs off; first at row %d col %d: %g, want %g\n", bad, (long long)M * N, i, j,
                  h_to(hc[(size_t)i * ldc + j]), yref[(size_t)first]);
    }
    failures += !ok;
  }
  for (T *q : {da, sa, sc, sp}) CK(cudaFree(q));
  CK(cudaFree(db));
  CK(cudaFree(dbias));
  CK(cudaFree(dg));
  CK(cudaFree(dbeta));
  CK(cudaFree(dc));
  CK(cudaFree(dr));
  CK(cudaFree(dp));
}

/* Refusals: nothing launched, E_ARG with a message. */
static void arg_checks() {
  using args = nnc_cuda_gemm_tma_ln_args<__nv_bfloat16>;
  __nv_bfloat16 *d;
  CK(cudaMalloc(&d, 1 << 16));
  args g = {};
  g.M = 4, g.N = 16, g.K = 8, g.a = d, g.lda = 8, g.b = d, g.ldb = 8, g.c = d, g.ldc = 16, g.eps = 1e-12f;
  nnc_cuda_error err;
  auto expect = [&](const char *what, args x, nnc_cuda_status want) {
    const nnc_cuda_status st = nnc_cuda_gemm_tma_ln(x, test_stream(), &err);
    const bool ok = st == want;
    std::printf("%s args: %s -> %d%s%s\n", ok ? "PASS" : "FAIL", what, (int)st, st ? ": " : "", st ? err.msg : "");
    failures += !ok;
  };
  auto x = g;
  x.N = 513, x.ldc = 513;
  expect("N = 513", x, NNC_CUDA_E_ARG);
  x = g, x.K = 7, x.lda = 7, x.ldb = 7;
  expect("K = 7", x, NNC_CUDA_E_ARG);
  x = g, x.lda = 4;
  expect("lda < K", x, NNC_CUDA_E_ARG);
  x = g, x.ldc = 15;
  expect("ldc < N", x, NNC_CUDA_E_ARG);
  x = g, x.residual = d, x.ldr = 15;
  expect("ldr < N", x, NNC_CUDA_E_ARG);
  x = g, x.pre = d, x.ldp = 3;
  expect("ldp < N", x, NNC_CUDA_E_ARG);
  x = g, x.a = d + 1;
  expect("a misaligned", x, NNC_CUDA_E_ARG);
  x = g, x.c = reinterpret_cast<__nv_bfloat16 *>(reinterpret_cast<char *>(d) + 1);
  expect("c at an odd byte", x, NNC_CUDA_E_ARG);
  x = g, x.b = nullptr;
  expect("b NULL", x, NNC_CUDA_E_ARG);
  x = g, x.eps = -1.0f;
  expect("eps < 0", x, NNC_CUDA_E_ARG);
  x = g, x.eps = NAN;
  expect("eps NaN", x, NNC_CUDA_E_ARG);
  x = g, x.split = 3;
  expect("split 3", x, NNC_CUDA_E_ARG);
  x = g, x.max_blocks = -1;
  expect("max_blocks < 0", x, NNC_CUDA_E_ARG);
  x = g, x.split = 2, x.max_blocks = 1;
  expect("max_blocks 1 with split 2", x, NNC_CUDA_E_ARG);
  x = g, x.lda = 1ll << 40;
  expect("lda of 2^41 bytes", x, NNC_CUDA_E_ARG);
  x = g, x.M = 0, x.a = nullptr;
  expect("M = 0 (nothing to do)", x, NNC_CUDA_OK);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(d));
}

/* Whether a case runs: no NAME among the arguments, or its name is one
 * (gpu_gate.sh puts --small after the names). */
static bool named(const char *name, int argc, char **argv) {
  bool any = false;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    if (std::strcmp(name, argv[i]) == 0) return true;
    any = true;
  }
  return !any;
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[argc - 1], "--small") == 0;
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  const bool args_only = argc > 1 && std::strcmp(argv[1], "--args") == 0;
  const bool tracing = argc > 1 && std::strcmp(argv[1], "--trace") == 0;
  if (!sm90a_device()) return 77;
  if (timing) return gemm_tma_ln_time::run() ? 0 : 1;
  if (tracing) {
#ifdef NNC_GEMM_TMA_LN_TRACE
    return gemm_tma_ln_time::trace() ? 0 : 1;
#else
    std::printf("SKIP: --trace needs a build with -DNNC_GEMM_TMA_LN_TRACE\n");
    return 77;
#endif
  }
  arg_checks();
  if (args_only) return failures ? 1 : 0;
  int n = 0;
  for (const tcase &c : CASES) {
    if (small && !c.small) continue;
    if (small && !named(c.name, argc, argv)) continue;
    run_case<__nv_bfloat16>(c, "bf16");
    run_case<__half>(c, "f16");
    n += 4;
  }
  std::printf("%s: %d runs, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}
