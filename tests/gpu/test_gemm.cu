/* tests/gpu/test_gemm.cu — templates/cuda/gemm.cuh against a float64 CPU
 * reference, on fresh random inputs (rows of A carry an offset, so the
 * layernorm mean matters), bf16 and f16, B as [N, K] and [K, N], every tile
 * configuration, every norm x activation x bias x residual; outputs are
 * poisoned with NaN first and padding past N must stay poisoned. Tolerance:
 * max |out - ref| <= 1e-2 * max |ref| per case. Also the argument checks.
 *
 *   test_gemm           all cases
 *   test_gemm --small   bf16, small sizes, two epilogues (for compute-sanitizer)
 *
 * Build: nvcc -std=c++17 -O3 -arch=sm_90 -I. -o test_gemm tests/gpu/test_gemm.cu
 * Exit status 0 only when every check passed and every CUDA call succeeded. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "templates/cuda/gemm.cuh"

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                    \
                   cudaGetErrorString(e_));                                                        \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

static std::mt19937_64 g_rng(20261124);
static int g_failures = 0, g_checks = 0;

static float uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((g_rng() >> 11) * (1.0 / 9007199254740992.0));
}
template <typename T> static T host_to(float v) {
  if constexpr (std::is_same<T, __half>::value) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}
template <typename T> static float host_from(T v) {
  if constexpr (std::is_same<T, __half>::value) return __half2float(v);
  else return __bfloat162float(v);
}
template <typename T> static const char *tname() { return std::is_same<T, __half>::value ? "f16" : "bf16"; }

/* n values of T, rounded on the host, with their float images. */
template <typename T> struct hvec {
  std::vector<T> t;
  std::vector<float> f;
  void fill(size_t n, float lo, float hi) {
    t.resize(n);
    f.resize(n);
    for (size_t i = 0; i < n; ++i) {
      t[i] = host_to<T>(uniform(lo, hi));
      f[i] = host_from(t[i]);
    }
  }
};

template <typename T> struct dbuf {
  T *p = nullptr;
  size_t n = 0;
  explicit dbuf(size_t count) : n(std::max<size_t>(count, 1)) {
    CK(cudaMalloc(&p, n * sizeof(T)));
    CK(cudaMemset(p, 0xff, n * sizeof(T)));
  }
  void put(const std::vector<T> &h) { CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  ~dbuf() { cudaFree(p); }
  dbuf(const dbuf &) = delete;
  dbuf &operator=(const dbuf &) = delete;
};

static const char *act_name(int a) {
  static const char *n[] = {"none", "relu", "gelu_erf", "gelu_tanh", "silu"};
  return n[a];
}
static const char *norm_name(int a) {
  static const char *n[] = {"none", "layer", "rms"};
  return n[a];
}
static double ref_act(int act, double x) {
  switch (act) {
  case NNC_CUDA_ACT_RELU: return x > 0 ? x : 0;
  case NNC_CUDA_ACT_GELU_ERF: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  case NNC_CUDA_ACT_GELU_TANH:
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  case NNC_CUDA_ACT_SILU: return x / (1.0 + std::exp(-x));
  default: return x;
  }
}

struct shape {
  int M, N, K, batch;
  int lda_pad, ldc_pad; /* ld = K + pad, N + pad (multiples of 8 for A) */
  bool b_broadcast;     /* stride_b = 0 */
};

static const shape SHAPES[] = {
    {17, 136, 40, 1, 0, 0, false},   {1, 64, 32, 1, 0, 2, false},  {3, 24, 16, 2, 8, 0, true},
    {257, 264, 776, 1, 8, 6, false}, {5, 16, 0, 1, 0, 0, false},
};
static const shape SMALL_SHAPES[] = {
    {17, 136, 40, 1, 0, 0, false}, {1, 64, 32, 1, 0, 2, false}, {3, 24, 16, 2, 8, 0, true}};

template <typename T>
static void run_shape(const shape &s, bool b_trans, int norm, bool small) {
  const int M = s.M, N = s.N, K = s.K, Bt = s.batch;
  const long long lda = K + s.lda_pad, ldc = N + s.ldc_pad, ldr = N + 4;
  const long long stride_a = (long long)M * lda + 8, stride_c = (long long)M * ldc + 2,
                  stride_r = (long long)M * ldr;
  const long long ldb = b_trans ? K + 8 : N + 8;
  const long long b_elems = b_trans ? (long long)N * ldb : (long long)K * ldb;
  const long long stride_b = s.b_broadcast ? 0 : b_elems;
  const float eps = 1e-5f;

  hvec<T> A, B, gamma, beta, bias, res;
  A.fill((size_t)(stride_a * Bt), -2.0f, 2.0f);
  for (int z = 0; z < Bt; ++z) /* a per-row offset: the mean is not ~0 */
    for (int i = 0; i < M; ++i) {
      const float off = uniform(-3.0f, 3.0f);
      for (int k = 0; k < K; ++k) {
        const size_t at = (size_t)(z * stride_a + i * lda + k);
        A.t[at] = host_to<T>(A.f[at] + off);
        A.f[at] = host_from(A.t[at]);
      }
    }
  const float bscale = 1.0f / std::sqrt((float)std::max(K, 1));
  B.fill((size_t)(b_elems * (s.b_broadcast ? 1 : Bt)), -bscale * 1.7f, bscale * 1.7f);
  gamma.fill((size_t)std::max(K, 1), 0.5f, 1.5f);
  beta.fill((size_t)std::max(K, 1), -0.5f, 0.5f);
  bias.fill((size_t)N, -1.0f, 1.0f);
  res.fill((size_t)(stride_r * Bt), -1.0f, 1.0f);
  const float alpha = 0.75f;

  /* float64 reference of the product: P[z][i][n] */
  std::vector<double> P((size_t)Bt * M * N, 0.0), an((size_t)K);
  for (int z = 0; z < Bt; ++z)
    for (int i = 0; i < M; ++i) {
      const float *x = &A.f[(size_t)(z * stride_a + i * lda)];
      double mean = 0, var = 0;
      for (int k = 0; k < K; ++k) mean += x[k];
      mean = K ? mean / K : 0;
      for (int k = 0; k < K; ++k) {
        const double d = norm == NNC_CUDA_NORM_RMS ? x[k] : x[k] - mean;
        var += d * d;
      }
      var = K ? var / K : 0;
      const double rstd = 1.0 / std::sqrt(var + (double)eps);
      for (int k = 0; k < K; ++k) {
        if (norm == NNC_CUDA_NORM_LAYER) an[k] = (x[k] - mean) * rstd * gamma.f[k] + beta.f[k];
        else if (norm == NNC_CUDA_NORM_RMS) an[k] = x[k] * rstd * gamma.f[k];
        else an[k] = x[k];
      }
      const size_t boff = (size_t)(s.b_broadcast ? 0 : z * stride_b);
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k)
          acc += an[k] * (b_trans ? B.f[boff + (size_t)(n * ldb + k)] : B.f[boff + (size_t)(k * ldb + n)]);
        P[((size_t)z * M + i) * N + n] = acc;
      }
    }

  dbuf<T> dA(A.t.size()), dB(B.t.size()), dG(gamma.t.size()), dBe(beta.t.size()), dBias(N),
      dR(res.t.size()), dC((size_t)(stride_c * Bt));
  dA.put(A.t);
  dB.put(B.t);
  dG.put(gamma.t);
  dBe.put(beta.t);
  dBias.put(bias.t);
  dR.put(res.t);
  std::vector<T> out((size_t)(stride_c * Bt));

  const nnc_cuda_gemm_config cfgs[] = {NNC_CUDA_GEMM_AUTO, NNC_CUDA_GEMM_128x128x32, NNC_CUDA_GEMM_128x256x32,
                                       NNC_CUDA_GEMM_128x128x64, NNC_CUDA_GEMM_64x64x32};
  for (int act = 0; act <= NNC_CUDA_ACT_SILU; ++act)
    for (int use_bias = 0; use_bias < 2; ++use_bias)
      for (int use_res = 0; use_res < 2; ++use_res)
        for (nnc_cuda_gemm_config cfg : cfgs) {
          /* the small run (compute-sanitizer) takes the bare product and the
           * full epilogue, each on every forced configuration */
          if (small && !((act == NNC_CUDA_ACT_NONE && !use_bias && !use_res) ||
                         (act == NNC_CUDA_ACT_GELU_TANH && use_bias && use_res)))
            continue;
          if (small && cfg == NNC_CUDA_GEMM_AUTO) continue;
          nnc_cuda_gemm_args<T> g;
          std::memset(&g, 0, sizeof g);
          g.M = M; g.N = N; g.K = K; g.batch = Bt;
          g.a = dA.p; g.lda = lda; g.stride_a = stride_a;
          g.b = dB.p; g.ldb = ldb; g.stride_b = stride_b; g.b_trans = b_trans;
          g.bias = use_bias ? dBias.p : nullptr;
          g.residual = use_res ? dR.p : nullptr; g.ldr = ldr; g.stride_r = stride_r;
          g.out = dC.p; g.ldc = ldc; g.stride_c = stride_c;
          g.alpha = alpha; g.act = (nnc_cuda_act)act;
          g.norm = (nnc_cuda_norm)norm; g.gamma = dG.p; g.beta = dBe.p; g.eps = eps;
          const size_t wsb = nnc_cuda_gemm_workspace_bytes(g);
          void *ws = nullptr;
          if (wsb) CK(cudaMalloc(&ws, wsb));
          CK(cudaMemset(dC.p, 0xff, dC.n * sizeof(T)));
          nnc_cuda_error err{};
          const nnc_cuda_status st = nnc_cuda_gemm_ex(g, cfg, ws, wsb, 0, &err);
          CK(cudaDeviceSynchronize());
          if (ws) CK(cudaFree(ws));
          CK(cudaMemcpy(out.data(), dC.p, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
          ++g_checks;
          double maxref = 0, maxerr = 0;
          bool nan = false, pad_written = false;
          for (int z = 0; z < Bt; ++z)
            for (int i = 0; i < M; ++i) {
              for (int n = 0; n < N; ++n) {
                double r = ref_act(act, alpha * P[((size_t)z * M + i) * N + n] + (use_bias ? bias.f[n] : 0.0));
                if (use_res) r += res.f[(size_t)(z * stride_r + i * ldr + n)];
                const double o = host_from(out[(size_t)(z * stride_c + i * ldc + n)]);
                if (!std::isfinite(o)) nan = true;
                maxref = std::max(maxref, std::fabs(r));
                maxerr = std::max(maxerr, std::fabs(o - r));
              }
              for (long long n = N; n < ldc; ++n)
                if (!std::isnan(host_from(out[(size_t)(z * stride_c + i * ldc + n)]))) pad_written = true;
            }
          const double rel = maxerr / std::max(maxref, 1e-30);
          const bool ok = st == NNC_CUDA_OK && !nan && !pad_written && rel <= 1e-2;
          if (!ok) ++g_failures;
          std::printf("%s %s M=%d N=%d K=%d batch=%d b_trans=%d norm=%s act=%s bias=%d res=%d cfg=%s: "
                      "max rel err %.3g%s%s%s\n",
                      ok ? "PASS" : "FAIL", tname<T>(), M, N, K, Bt, (int)b_trans, norm_name(norm),
                      act_name(act), use_bias, use_res, nnc_cuda_gemm_config_name(cfg), rel,
                      nan ? " (unwritten or non-finite outputs)" : "",
                      pad_written ? " (wrote past N)" : "", st != NNC_CUDA_OK ? err.msg : "");
        }
}

/* residual == out: the in-place residual add of a transformer block. */
template <typename T> static void run_inplace() {
  const int M = 33, N = 40, K = 24;
  hvec<T> A, B, R;
  A.fill((size_t)M * K, -1.0f, 1.0f);
  B.fill((size_t)N * K, -0.5f, 0.5f);
  R.fill((size_t)M * N, -1.0f, 1.0f);
  dbuf<T> dA(A.t.size()), dB(B.t.size()), dC(R.t.size());
  dA.put(A.t);
  dB.put(B.t);
  dC.put(R.t);
  nnc_cuda_gemm_args<T> g;
  std::memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = 1;
  g.a = dA.p; g.lda = K; g.b = dB.p; g.ldb = K; g.b_trans = 1;
  g.residual = dC.p; g.ldr = N; g.out = dC.p; g.ldc = N; g.alpha = 1.0f;
  nnc_cuda_error err{};
  const nnc_cuda_status st = nnc_cuda_gemm(g, nullptr, 0, 0, &err);
  CK(cudaDeviceSynchronize());
  std::vector<T> out(R.t.size());
  CK(cudaMemcpy(out.data(), dC.p, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
  double maxref = 0, maxerr = 0;
  for (int i = 0; i < M; ++i)
    for (int n = 0; n < N; ++n) {
      double r = R.f[(size_t)i * N + n];
      for (int k = 0; k < K; ++k) r += (double)A.f[(size_t)i * K + k] * B.f[(size_t)n * K + k];
      maxref = std::max(maxref, std::fabs(r));
      const double o = host_from(out[(size_t)i * N + n]);
      maxerr = std::isfinite(o) ? std::max(maxerr, std::fabs(o - r)) : INFINITY;
    }
  const double rel = maxerr / maxref;
  ++g_checks;
  const bool ok = st == NNC_CUDA_OK && rel <= 1e-2;
  if (!ok) ++g_failures;
  std::printf("%s %s in-place residual M=%d N=%d K=%d: max rel err %.3g %s\n", ok ? "PASS" : "FAIL",
              tname<T>(), M, N, K, rel, st != NNC_CUDA_OK ? err.msg : "");
}

/* Arguments outside the kernel's reach: NNC_CUDA_E_ARG, a message, and
 * nothing written. */
template <typename T> static void run_arg_checks() {
  dbuf<T> dA(64 * 64), dB(64 * 64), dC(64 * 64);
  nnc_cuda_gemm_args<T> base;
  std::memset(&base, 0, sizeof base);
  base.M = 16; base.N = 16; base.K = 16; base.batch = 1;
  base.a = dA.p; base.lda = 16; base.b = dB.p; base.ldb = 16; base.b_trans = 1;
  base.out = dC.p; base.ldc = 16; base.alpha = 1.0f;
  struct bad {
    const char *what;
    nnc_cuda_gemm_args<T> g;
    nnc_cuda_status want;
  };
  std::vector<bad> cases;
  auto add = [&](const char *what, nnc_cuda_status want, auto edit) {
    bad b{what, base, want};
    edit(b.g);
    cases.push_back(b);
  };
  add("K % 8 != 0", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.K = 12; g.lda = 12; g.ldb = 12; });
  add("N % 8 != 0", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.N = 12; });
  add("a not 16-byte aligned", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.a = g.a + 1; });
  add("lda < K", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.lda = 8; });
  add("odd ldc", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.ldc = 17; });
  add("NULL out", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.out = nullptr; });
  add("negative M", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.M = -1; });
  add("norm without workspace", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.norm = NNC_CUDA_NORM_LAYER; });
  add("negative eps", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.norm = NNC_CUDA_NORM_RMS; g.eps = -1.0f; });
  add("unknown act", NNC_CUDA_E_ARG, [](nnc_cuda_gemm_args<T> &g) { g.act = (nnc_cuda_act)9; });
  add("M == 0", NNC_CUDA_OK, [](nnc_cuda_gemm_args<T> &g) { g.M = 0; });
  add("batch == 0", NNC_CUDA_OK, [](nnc_cuda_gemm_args<T> &g) { g.batch = 0; });
  for (const bad &b : cases) {
    CK(cudaMemset(dC.p, 0xff, dC.n * sizeof(T)));
    nnc_cuda_error err{};
    const nnc_cuda_status st = nnc_cuda_gemm(b.g, nullptr, 0, 0, &err);
    CK(cudaDeviceSynchronize());
    std::vector<T> out(dC.n);
    CK(cudaMemcpy(out.data(), dC.p, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    bool untouched = true;
    for (T v : out)
      if (!std::isnan(host_from(v))) untouched = false;
    const bool ok = st == b.want && untouched && (st == NNC_CUDA_OK || std::strlen(err.msg) > 0);
    ++g_checks;
    if (!ok) ++g_failures;
    std::printf("%s %s arguments, %s: status %d%s %s\n", ok ? "PASS" : "FAIL", tname<T>(), b.what, (int)st,
                untouched ? "" : " (wrote output)", st != NNC_CUDA_OK ? err.msg : "");
  }
}

template <typename T> static void run_all(bool small) {
  const shape *shapes = small ? SMALL_SHAPES : SHAPES;
  const int nshapes = small ? (int)(sizeof SMALL_SHAPES / sizeof *SMALL_SHAPES)
                            : (int)(sizeof SHAPES / sizeof *SHAPES);
  for (int si = 0; si < nshapes; ++si)
    for (int bt = 1; bt >= 0; --bt)
      for (int norm = 0; norm <= NNC_CUDA_NORM_RMS; ++norm) run_shape<T>(shapes[si], bt, norm, small);
  run_inplace<T>();
  run_arg_checks<T>();
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  run_all<__nv_bfloat16>(small);
  if (!small) run_all<__half>(small); /* f16 differs from bf16 only in conversions */
  CK(cudaGetLastError());
  std::printf("%d of %d checks failed\n", g_failures, g_checks);
  return g_failures ? 1 : 0;
}
