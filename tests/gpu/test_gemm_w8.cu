/* tests/gpu/test_gemm_w8.cu — templates/cuda/gemm_w8.cuh (the weight-only
 * int8 GEMM) on a GPU, against a float64 product of the same operands: A
 * rounded to T, the int8 weight times its f32 scale per column.
 *  - the rows kernels (M = 1, 2, 3, 5, 8, 9, 13, 16: every MR of f32's,
 *    rows 8-15 of bf16/f16's MMAs loaded or not, two row blocks) and the
 *    cuBLASLt path
 *    (M = 33, 70; 17 and 32 on the rows kernels), odd N (1, 7, 129, 769, 3001), K = 16, 48,
 *    768, 1008, 3072 (a lane's chunk past K, several warp steps, 1 to 16
 *    K slices of the MMA kernel), K = 0 (act(bias) + residual);
 *  - bias or none, alpha, every activation, the residual before and after
 *    it and in place (d == residual); the cuBLASLt path's fallbacks to the
 *    rows kernel (no handle, SiLU, the erf GELU, an activation before the
 *    residual);
 *  - T = bf16, f16, f32 with TO = T or f32; D poisoned with NaN and a guard
 *    row after it that must stay NaN;
 *  - which path ran: the workspace is NaN-poisoned, the cuBLASLt path
 *    writes the dequantized weight there (printed per case; the run fails
 *    if no case expected to take cuBLASLt did);
 *  - the refusals (K not a multiple of 16, a NULL or misaligned operand, an
 *    unknown activation, a negative size, a missing workspace).
 * Tolerance: max |out - ref| <= tol x max |ref|, tol 1e-5 for f32 T and
 * out (1e-3 with the tanh GELU: tanh.approx, cuBLASLt's own GELU), 1e-2
 * where T or TO is bf16/f16.
 * --time: the rows kernels at M = 1, 2, 4, 8 and 16 against cuBLASLt bf16 (bf16
 * weights) on GPT-2's decode GEMMs, bias in both, weights cycled through
 * copies spanning twice the L2 (each launch reads its weight from memory,
 * as a decode step does), a launch a copy in a CUDA graph (the GPU's time,
 * not the host's launch rate), the median of 50 runs of it after a
 * warm-up, per launch, as a Markdown table of us and GB/s of weight bytes.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda -I. -Iruntime -Iruntime/cuda -Itests/gpu \
 *     -o test_gemm_w8 tests/gpu/test_gemm_w8.cu runtime/status.c runtime/half.c \
 *     runtime/cuda/{status,device,alloc,host,stream,gemm,peaks}.c -lcublasLt
 *   ./test_gemm_w8 [--small] [--time]
 * Exits 1 on any failure, 77 (skipped) without a GPU of compute capability
 * 8.0 or more. */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "gemm_w8.cuh"
#include "gpu_test.cuh"
#include "runtime/cuda/nnrt_cuda.h"

static std::mt19937 rng(20260412);
static int failures = 0, blas_expected = 0, blas_taken = 0;

static float uni(float a) { return std::uniform_real_distribution<float>(-a, a)(rng); }

template <typename X> static X *dev_copy(const std::vector<X> &h) {
  X *d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(X) + 16));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(X), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize()); /* a copy from pageable memory may return before it lands (fill_now) */
  return d;
}
template <typename X> static std::vector<X> host_copy(const X *d, size_t n) {
  std::vector<X> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(X), cudaMemcpyDeviceToHost));
  return h;
}

static double act_ref(nnc_cuda_act act, double v) {
  switch (act) {
  case NNC_CUDA_ACT_RELU: return v > 0 ? v : 0;
  case NNC_CUDA_ACT_GELU_ERF: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  case NNC_CUDA_ACT_GELU_TANH: return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  case NNC_CUDA_ACT_SILU: return v / (1 + std::exp(-v));
  default: return v;
  }
}

struct tcase {
  int M, N, K;
  nnc_cuda_act act;
  bool bias, res, after, in_place;
  float alpha;
  bool no_handle; /* h = NULL: the rows kernel at any M */
};

/* Whether gemm_w8.cuh should give c to cuBLASLt (given a handle that has an
 * algorithm for it): more rows than NNC_W8_ROWS, an epilogue cuBLASLt has,
 * a type pair it takes. */
template <typename T, typename TO> static bool takes_blas(const tcase &c) {
  const bool act_ok = c.act == NNC_CUDA_ACT_NONE || c.act == NNC_CUDA_ACT_RELU || c.act == NNC_CUDA_ACT_GELU_TANH;
  return !c.no_handle && c.M > NNC_W8_ROWS && c.K > 0 && act_ok && !(c.res && c.act != NNC_CUDA_ACT_NONE && !c.after) &&
         (std::is_same<T, TO>::value || std::is_same<TO, float>::value);
}

template <typename T, typename TO> static void check(const tcase &c, nnrt_cuda_blas *h) {
  const int M = c.M, N = c.N, K = c.K;
  std::vector<T> a((size_t)M * K);
  std::vector<int8_t> w((size_t)N * K);
  std::vector<float> sw(N);
  for (auto &v : a) v = h_from<T>(uni(1.0f));
  for (auto &v : w) v = (int8_t)std::uniform_int_distribution<int>(-127, 127)(rng);
  /* products of about unit size: |sum| ~ 127 sqrt(K / 3) / 2 */
  for (auto &v : sw) v = 2.0f / 127 * (1 + uni(0.5f)) / std::sqrt((float)(K > 0 ? K : 1));
  /* D has a row of guards after it: a value written past M x N shows there */
  std::vector<TO> bb(N), rr((size_t)M * N), dd((size_t)(M + 1) * N, h_from<TO>(NAN));
  for (auto &v : bb) v = h_from<TO>(uni(1.0f));
  for (auto &v : rr) v = h_from<TO>(uni(1.0f));
  if (c.in_place) std::copy(rr.begin(), rr.end(), dd.begin());
  T *da = dev_copy(a);
  int8_t *dw = dev_copy(w);
  float *dsw = dev_copy(sw);
  TO *db = dev_copy(bb), *dr = dev_copy(rr), *dd_ = dev_copy(dd);
  const size_t ws_bytes = nnc_cuda_w8_ws_bytes<T>(M, N, K);
  void *ws = nullptr;
  if (ws_bytes) {
    CK(cudaMalloc(&ws, ws_bytes));
    fill_now(ws, 0xff, ws_bytes); /* NaN in every T */
  }
  nnc_cuda_w8_gemm_args<T, TO> f = {};
  f.M = M, f.N = N, f.K = K;
  f.a = da, f.w = reinterpret_cast<const signed char *>(dw), f.w_scale = dsw;
  f.bias = c.bias ? db : nullptr;
  f.residual = c.res ? (c.in_place ? dd_ : dr) : nullptr;
  f.act_last = c.after;
  f.d = dd_;
  f.alpha = c.alpha;
  f.act = c.act;
  nnc_cuda_error e = {};
  const char *tn = nnc_dtype<T>::name, *on = nnc_dtype<TO>::name;
  if (nnc_cuda_w8_gemm(c.no_handle ? nullptr : h, f, ws, test_stream(), &e)) {
    std::printf("FAIL w8 %s>%s %dx%dx%d: %s\n", tn, on, M, N, K, e.msg);
    failures++;
  }
  CK(cudaStreamSynchronize(test_stream()));
  auto got = host_copy(dd_, (size_t)(M + 1) * N);
  bool dequantized = false;
  if (ws_bytes) dequantized = !std::isnan(h_to(host_copy(static_cast<T *>(ws), 1)[0]));
  const bool want_blas = takes_blas<T, TO>(c);
  blas_expected += want_blas;
  blas_taken += want_blas && dequantized;
  int guards = 0;
  for (int n = 0; n < N; n++) guards += !std::isnan(h_to(got[(size_t)M * N + n]));
  double worst = 0, scale = 0;
  std::vector<double> ad(a.size()), wn(K);
  for (size_t i = 0; i < a.size(); i++) ad[i] = h_to(a[i]);
  for (int n = 0; n < N; n++) {
    for (int k = 0; k < K; k++) wn[k] = (double)w[(size_t)n * K + k] * sw[n];
    for (int m = 0; m < M; m++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += ad[(size_t)m * K + k] * wn[k];
      double v = c.alpha * acc + (c.bias ? h_to(bb[n]) : 0.0);
      const double r = c.res ? h_to(rr[(size_t)m * N + n]) : 0.0;
      v = c.after ? act_ref(c.act, v + r) : act_ref(c.act, v) + r;
      scale = std::fmax(scale, std::fabs(v));
      const double g = h_to(got[(size_t)m * N + n]);
      worst = std::isnan(g) ? INFINITY : std::fmax(worst, std::fabs(g - v));
    }
  }
  const bool narrow = !std::is_same<T, float>::value || !std::is_same<TO, float>::value;
  const double tol = narrow ? 1e-2 : c.act == NNC_CUDA_ACT_GELU_TANH ? 1e-3 : 1e-5;
  const bool ok = worst <= tol * scale && !guards;
  std::printf("%s w8 %s>%s %dx%dx%d act %d bias %d res %d%s after %d alpha %g%s: %s, error %.3g of max %.3g, "
              "%d past D\n", ok ? "ok  " : "FAIL", tn, on, M, N, K, (int)c.act, c.bias, c.res,
              c.in_place ? " (in place)" : "", c.after, c.alpha, c.no_handle ? " no handle" : "",
              dequantized ? "cuBLASLt" : want_blas ? "rows (expected cuBLASLt)" : "rows", worst / scale, scale, guards);
  failures += !ok;
  for (void *p : {(void *)da, (void *)dw, (void *)dsw, (void *)db, (void *)dr, (void *)dd_, ws}) CK(cudaFree(p));
}

/* Every type pair the folders use. */
static void check_types(const tcase &c, nnrt_cuda_blas *h, bool small) {
  check<__nv_bfloat16, __nv_bfloat16>(c, h);
  check<float, float>(c, h);
  if (small) return;
  check<__nv_bfloat16, float>(c, h);
  check<__half, __half>(c, h);
  check<__half, float>(c, h);
}

/* Each refusal with its message; nothing runs. */
static void check_refusals(nnrt_cuda_blas *h) {
  using args = nnc_cuda_w8_gemm_args<__nv_bfloat16, __nv_bfloat16>;
  signed char *q;
  float *sc;
  __nv_bfloat16 *x;
  CK(cudaMalloc(&q, 4096));
  CK(cudaMalloc(&sc, 256));
  CK(cudaMalloc(&x, 8192));
  args f = {};
  f.M = 4, f.N = 4, f.K = 32, f.a = x, f.w = q, f.w_scale = sc, f.d = x + 2048, f.alpha = 1;
  struct refusal {
    const char *what;
    args f;
    void *ws;
    nnc_cuda_status want;
  };
  std::vector<refusal> cases = {{"K = 24", f, nullptr, NNC_CUDA_E_ARG},     {"w NULL", f, nullptr, NNC_CUDA_E_ARG},
                                {"act 9", f, nullptr, NNC_CUDA_E_ARG},      {"a + 1", f, nullptr, NNC_CUDA_E_ARG},
                                {"M = -1", f, nullptr, NNC_CUDA_E_ARG},     {"M > NNC_W8_ROWS, no ws", f, nullptr, NNC_CUDA_E_ARG},
                                {"M > NNC_W8_ROWS, ws + 8", f, x + 4, NNC_CUDA_E_ARG}, {"M = 0, a NULL", f, nullptr, NNC_CUDA_OK}};
  cases[0].f.K = 24;
  cases[1].f.w = nullptr;
  cases[2].f.act = (nnc_cuda_act)9;
  cases[3].f.a = x + 1;
  cases[4].f.M = -1;
  cases[5].f.M = NNC_W8_ROWS + 1;
  cases[6].f.M = NNC_W8_ROWS + 1;
  cases[7].f.M = 0, cases[7].f.a = nullptr;
  for (const refusal &c : cases) {
    nnc_cuda_error e = {};
    const bool as_wanted = nnc_cuda_w8_gemm(h, c.f, c.ws, test_stream(), &e) == c.want;
    std::printf("%s refusal %s: %s\n", as_wanted ? "ok  " : "FAIL", c.what, c.want ? e.msg : "(nothing to do)");
    failures += !as_wanted;
  }
  CK(cudaStreamSynchronize(test_stream()));
  CK(cudaFree(q));
  CK(cudaFree(sc));
  CK(cudaFree(x));
}

/* Median us of one launch on the GPU: launch(i) runs the i-th; 10 untimed,
 * then reps of them captured in a CUDA graph and the graph timed 50 times.
 * The graph, because launched one by one from the host each call took
 * about 5 us (ours) or 9 (cuBLASLt) whatever its size: the host's launch
 * rate, not the kernel. -1 when a launch returns false. */
template <class F> static double median_us(int reps, F launch) {
  constexpr int WARM = 10, SAMPLES = 50;
  cudaStream_t s = test_stream();
  for (int i = 0; i < WARM; i++)
    if (!launch(i)) return -1;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  bool ok = true;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; i++) ok = ok && launch(i);
  CK(cudaStreamEndCapture(s, &graph));
  if (!ok) {
    CK(cudaGraphDestroy(graph));
    return -1;
  }
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  std::vector<float> us;
  for (int k = 0; k < SAMPLES; k++) {
    CK(cudaEventRecord(t0, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(t1, s));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    us.push_back(ms * 1000 / reps);
  }
  CK(cudaEventDestroy(t0));
  CK(cudaEventDestroy(t1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

/* GPT-2's decode GEMMs: the rows kernel (int8 weight) against cuBLASLt bf16. */
static void time_decode(nnrt_cuda_blas *h) {
  const struct {
    const char *name;
    int N, K;
  } g[] = {{"attn.c_attn", 2304, 768}, {"attn.c_proj", 768, 768}, {"mlp.c_fc", 3072, 768}, {"mlp.c_proj", 768, 3072}};
  int dev = 0, l2 = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const size_t span = std::max((size_t)2 * l2, (size_t)64 << 20); /* bytes of weight copies cycled through */
  const size_t max_w = (size_t)3072 * 768 * 2;
  unsigned char *pool;
  __nv_bfloat16 *a, *d, *bias;
  float *sw;
  CK(cudaMalloc(&pool, span + max_w));
  fill_now(pool, 1, span + max_w);
  CK(cudaMalloc(&a, 16 * 3072 * 2));
  CK(cudaMalloc(&d, 16 * 3072 * 2));
  CK(cudaMalloc(&bias, 3072 * 2));
  CK(cudaMalloc(&sw, 3072 * 4));
  fill_now(a, 0, 16 * 3072 * 2);
  fill_now(bias, 0, 3072 * 2);
  fill_now(sw, 0, 3072 * 4);
  std::printf("\n| GEMM | N x K | M | int8 rows us | GB/s | cuBLASLt bf16 us | GB/s | speed-up |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto &c : g)
    for (int M : {1, 2, 4, 8, 16}) {
      const size_t w8 = (size_t)c.N * c.K, w16 = w8 * 2;
      const int n8 = (int)(span / w8), n16 = (int)(span / w16); /* copies in the pool, one a launch of the graph */
      nnc_cuda_w8_gemm_args<__nv_bfloat16, __nv_bfloat16> f = {};
      f.M = M, f.N = c.N, f.K = c.K, f.a = a, f.w_scale = sw, f.bias = bias, f.d = d, f.alpha = 1;
      const double us8 = median_us(n8, [&](int i) {
        f.w = reinterpret_cast<const signed char *>(pool + (size_t)(i % n8) * w8);
        nnc_cuda_error e;
        return nnc_cuda_w8_gemm(h, f, nullptr, test_stream(), &e) == NNC_CUDA_OK;
      });
      nnrt_cuda_gemm b = {};
      b.M = M, b.N = c.N, b.K = c.K, b.batch = 1, b.ab = b.out = NNRT_DT_BF16;
      b.A = a, b.lda = c.K, b.ldb = c.K, b.b_trans = true, b.bias = bias;
      b.D = d, b.ldd = c.N, b.stride_d = (long long)M * c.N, b.alpha = 1, b.epilogue = NNRT_EPI_NONE;
      const double us16 = median_us(n16, [&](int i) {
        b.B = pool + (size_t)(i % n16) * w16;
        nnrt_error e = {};
        return nnrt_cuda_gemm_run(h, &b, test_stream(), &e) == NNRT_OK;
      });
      if (us8 < 0 || us16 < 0) {
        std::printf("FAIL time %s M=%d: a launch failed\n", c.name, M);
        failures++;
        continue;
      }
      std::printf("| %s | %d x %d | %d | %.2f | %.0f | %.2f | %.0f | %.2f |\n", c.name, c.N, c.K, M, us8,
                  w8 / us8 / 1e3, us16, w16 / us16 / 1e3, us16 / us8);
    }
  std::printf("\n");
  for (void *p : {(void *)pool, (void *)a, (void *)d, (void *)bias, (void *)sw}) CK(cudaFree(p));
}

int main(int argc, char **argv) {
  bool small = false, timing = false;
  for (int i = 1; i < argc; i++) {
    small |= std::strcmp(argv[i], "--small") == 0;
    timing |= std::strcmp(argv[i], "--time") == 0;
  }
  int n = 0;
  cudaDeviceProp prop;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return std::printf("no GPU: skipped\n"), 77;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 8) return std::printf("compute capability below 8.0: skipped\n"), 77;
  nnrt_cuda_blas *h = nullptr;
  nnrt_error re = {};
  if (nnrt_cuda_blas_create(0, &h, &re)) return std::printf("FAIL blas: %s\n", re.msg), 1;

  const nnc_cuda_act N0 = NNC_CUDA_ACT_NONE;
  /* every size: bias, alpha 0.5, no activation; MR 1, 2, 4, 8, two row blocks, then cuBLASLt */
  const int sizes[][3] = {{1, 769, 768}, {2, 7, 768}, {3, 129, 48}, {5, 7, 3072}, {8, 1, 16},
                          {13, 129, 768}, {16, 769, 48}, {9, 2304, 768}, {6, 3001, 1008}, {17, 129, 768},
                          {32, 129, 768}, {33, 129, 768},
                          {70, 769, 3072}};
  const int small_sizes[][3] = {{3, 129, 48}, {13, 129, 768}, {6, 3001, 1008}, {17, 129, 768},
                               {32, 129, 768}, {33, 129, 768}};
  if (small) {
    for (const auto &s : small_sizes) check_types({s[0], s[1], s[2], N0, true, false, false, false, 0.5f, false}, h, true);
  } else {
    for (const auto &s : sizes) check_types({s[0], s[1], s[2], N0, true, false, false, false, 0.5f, false}, h, false);
  }
  /* the epilogues, on the rows kernel (M = 13) and the cuBLASLt path (M = 70) */
  const nnc_cuda_act acts[] = {NNC_CUDA_ACT_RELU, NNC_CUDA_ACT_GELU_ERF, NNC_CUDA_ACT_GELU_TANH, NNC_CUDA_ACT_SILU};
  for (int M : {13, 70}) {
    const int N = small ? 7 : 129, K = small ? 48 : 768;
    for (nnc_cuda_act act : acts) check_types({M, N, K, act, true, false, false, false, 1.0f, false}, h, small);
    check_types({M, N, K, N0, false, false, false, false, 1.0f, false}, h, small);                  /* no bias */
    check_types({M, N, K, N0, true, true, false, false, 2.0f, false}, h, small);                    /* residual */
    check_types({M, N, K, NNC_CUDA_ACT_GELU_TANH, true, true, false, false, 1.0f, false}, h, small); /* act, then + res */
    check_types({M, N, K, NNC_CUDA_ACT_RELU, true, true, true, false, 0.5f, false}, h, small);       /* act(... + res) */
    check_types({M, N, K, N0, true, true, false, true, 1.0f, false}, h, small);                     /* in place */
    check_types({M, N, K, NNC_CUDA_ACT_GELU_TANH, true, true, true, true, 1.0f, false}, h, small);  /* in place, after */
  }
  /* K = 0: act(bias) + residual, either path; no handle: the rows kernel at 70 rows */
  check_types({5, 7, 0, NNC_CUDA_ACT_GELU_ERF, true, true, false, false, 1.0f, false}, h, small);
  check_types({17, 7, 0, NNC_CUDA_ACT_RELU, true, true, true, false, 1.0f, false}, h, small);
  check_types({70, 129, 768, NNC_CUDA_ACT_RELU, true, true, true, false, 1.0f, true}, h, small);
  check_refusals(h);
  if (blas_expected && !blas_taken) {
    std::printf("FAIL none of %d cases expected to take cuBLASLt did\n", blas_expected);
    failures++;
  } else {
    std::printf("cuBLASLt path: %d of %d cases expected to take it did\n", blas_taken, blas_expected);
  }
  if (timing) time_decode(h);
  nnrt_cuda_blas_destroy(h);
  std::printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
