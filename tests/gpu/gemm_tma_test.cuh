/* tests/gpu/gemm_tma_test.cuh — what test_gemm_tma and test_gemm_tma8
 * share (the bf16 and 8-bit launchers of one pipeline, tested alike): the
 * case table's row, the float64 reference, one output checked on both
 * tiles against it (NaN poison past N and after C, PASS/FAIL lines, where
 * it went wrong), the argument refusals' lines and main (--small, --time,
 * 77 on a device that is not compute capability 9.0). */
#ifndef NNC_GEMM_TMA_TEST_CUH
#define NNC_GEMM_TMA_TEST_CUH

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test.cuh"
#include "nnc_cuda.cuh"

/* gpu_test.cuh's h_to on s8 operands (e4m3's: test_gemm_tma8.cu, found
 * by its argument's namespace) */
inline double h_to(signed char x) { return x; }

namespace gemm_tma_test {

static std::mt19937 rng(20261129);
static int failures = 0;

struct tcase {
  const char *name;
  int M, N, K, pad_c; /* ldc = N + pad_c */
  bool bias, small;
  float alpha;
  nnc_cuda_act act;
  bool residual, act_last, inplace; /* inplace: the residual is C itself */
  int max_blocks;
  int a_step = 1; /* gemm_tma8's a_scale_step (the bf16 kernel has no scales) */
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

/* Row i of A times row j of B (both K-major) in float64. */
template <typename T>
static double dot(const std::vector<T> &a, long long lda, const std::vector<T> &b, long long ldb, int i, int j, int K) {
  double s = 0;
  for (int k = 0; k < K; ++k) s += h_to(a[(size_t)i * lda + k]) * h_to(b[(size_t)j * ldb + k]);
  return s;
}

/* ref ([M][N]) = act(product(i, j) + bias[j]) + residual (act(... +
 * residual) when act_last); product: the scaled product, alpha included.
 * Returns max |ref|. */
template <typename B, typename TO, typename Product>
static double reference(const tcase &c, Product product, const std::vector<B> &bias, const std::vector<TO> &res,
                        long long ldc, std::vector<double> &ref) {
  const int M = c.M, N = c.N;
  ref.assign((size_t)M * N, 0.0);
  double maxref = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const double v = product(i, j) + (c.bias ? h_to(bias[j]) : 0.0);
      const double r = c.residual ? h_to(res[(size_t)i * ldc + j]) : 0.0;
      ref[(size_t)i * N + j] = c.act_last ? act_of(c.act, v + r) : act_of(c.act, v) + r;
      maxref = std::fmax(maxref, std::fabs(ref[(size_t)i * N + j]));
    }
  return maxref;
}

/* A device copy of h. */
template <typename X> static X *device_copy(const std::vector<X> &h) {
  X *d;
  CK(cudaMalloc(&d, h.size() * sizeof(X)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(X), cudaMemcpyHostToDevice));
  return d;
}

/* C (dc, [M][ldc] and a guard element) on each tile: poisoned with NaN (in
 * place, the residual's values inside each row), launch(tile_n, &err)
 * into it, then every element within tol * max |ref| and the poison past
 * N and after C intact. C's first bytes and late (operands: A's, from a
 * copy) are written by the kernel just before the launch (late_copy), so
 * a kernel that touches them before waiting for it fails. One line a
 * tile; width: the name column's. */
template <typename TO, typename Launch>
static void check_tiles(const tcase &c, const char *tn, int width, TO *dc, const std::vector<TO> &res, long long ldc,
                        const std::vector<double> &ref, double maxref, double tol, std::vector<late_write> late,
                        Launch launch) {
  const int M = c.M, N = c.N;
  for (int tile_n : {128, 256}) {
    std::vector<TO> hc((size_t)M * ldc + 1, h_from<TO>(NAN));
    if (c.inplace)
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) hc[(size_t)i * ldc + j] = res[(size_t)i * ldc + j];
    TO *start = device_copy(hc);
    std::vector<late_write> writes = late;
    writes.push_back({dc, start, hc.size() * sizeof(TO)});
    late_copy(writes);
    nnc_cuda_error err;
    const nnc_cuda_status st = launch(tile_n, &err);
    if (st != NNC_CUDA_OK) {
      std::printf("FAIL %s %s tile %d: %s\n", c.name, tn, tile_n, err.msg);
      ++failures;
      CK(cudaDeviceSynchronize());
      CK(cudaFree(start));
      continue;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaFree(start));
    CK(cudaMemcpy(hc.data(), dc, hc.size() * sizeof(TO), cudaMemcpyDeviceToHost));
    double maxerr = 0;
    bool pad_ok = true;
    long long bad = 0, first = -1; /* elements over the tolerance (or NaN), the first of them */
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        const double d = std::fabs(h_to(hc[(size_t)i * ldc + j]) - ref[(size_t)i * N + j]);
        maxerr = std::isnan(d) ? INFINITY : std::fmax(maxerr, d);
        if (!(d <= tol * (maxref > 0 ? maxref : 1))) {
          if (first < 0) first = (long long)i * N + j;
          ++bad;
        }
      }
      for (long long j = N; j < ldc; ++j) pad_ok &= std::isnan(h_to(hc[(size_t)i * ldc + j]));
    }
    pad_ok &= std::isnan(h_to(hc[(size_t)M * ldc])); /* the guard element after C */
    const double rel = maxref > 0 ? maxerr / maxref : maxerr;
    const bool ok = rel <= tol && pad_ok;
    std::printf("%s %-*s %-9s tile %d max rel error %.3g (tol %g)%s\n", ok ? "PASS" : "FAIL", width, c.name, tn, tile_n,
                rel, tol, pad_ok ? "" : ", wrote past N");
    /* where it went wrong: a pattern of rows and columns points at the stage, swizzle or tile walk */
    if (bad > 0) {
      const int i = (int)(first / N), j = (int)(first % N);
      std::printf("     %lld of %lld elements off; first at row %d col %d: %g, want %g\n", bad, (long long)M * N, i, j,
                  h_to(hc[(size_t)i * ldc + j]), ref[(size_t)first]);
    }
    failures += !ok;
  }
}

/* An argument check: launch(x, epi, &err) (the epilogue instance when
 * epi) returns want; refusals launch nothing and print their message. */
template <typename A>
static void expect(const char *what, const A &x, nnc_cuda_status want, bool epi,
                   nnc_cuda_status (*launch)(const A &, bool, nnc_cuda_error *)) {
  nnc_cuda_error err;
  const nnc_cuda_status st = launch(x, epi, &err);
  const bool ok = st == want;
  std::printf("%s args: %s -> %d%s%s\n", ok ? "PASS" : "FAIL", what, (int)st, st ? ": " : "", st ? err.msg : "");
  failures += !ok;
}

/* main: [--small | --time]. 77 (skipped) on a device that is not compute
 * capability 9.0; --time: time(); else arg_checks() and cases(small), which
 * returns how many it ran. Exits 1 on any failure. */
static int run_main(int argc, char **argv, bool (*time)(), void (*arg_checks)(), int (*cases)(bool small)) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  if (!sm90a_device()) return 77;
  if (timing) return time() ? 0 : 1;
  arg_checks();
  const int n = cases(small);
  std::printf("%s: %d cases, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}

}  // namespace gemm_tma_test

#endif
