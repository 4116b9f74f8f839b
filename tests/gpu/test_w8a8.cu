/* tests/gpu/test_w8a8.cu — templates/cuda/w8a8.cuh on a GPU (--quantize=w8a8):
 *  - nnc_cuda_w8a8_weight ([N, K] and [K, N] sources) bit for bit against
 *    C SIMD's rule (round(value / (max / 127)), ties to even, the scale
 *    max / 127); a zero channel and one holding an inf stay zero with
 *    scale 0, a NaN becomes 0;
 *  - nnc_cuda_w8a8_rows: plain rows bit for bit; layernorm and rmsnorm
 *    within half an int8 step (plus the statistics' summation order) of a
 *    float64 norm; the warp kernel (rows of 16-byte vectors) and the block
 *    one (100 columns); the bytes and scales poisoned first (-128 never
 *    appears, a NaN scale shows);
 *  - nnc_cuda_gemm_w8a8 against a float64 product of the int8 operands
 *    (exact in int32, so only the epilogue's rounding differs): both tile
 *    sizes, odd M and N (N = 101: single-element stores), K a multiple of
 *    16 but not of the tile's 64 (96, 16), every epilogue (none, relu,
 *    erf-GELU, tanh-GELU, SiLU; bias; residual, also in place; act after
 *    the residual; alpha), bf16, f16 and f32 outputs; D poisoned with NaN
 *    and a guard row after it that must stay NaN. Tolerance: max |out -
 *    ref| <= tol x max |ref|, tol 1e-2 for bf16/f16 outputs, 1e-5 for f32
 *    (2e-3 with tanh-GELU: tanh.approx); a big case checks sampled rows;
 *  - SmoothQuant's tail (quant_rows.cuh's nnc_quant_smooth): on, the
 *    weight's channel k times s_k and A's column k over s_k, bit for bit
 *    against the host's f32 operations (plain rows) or within the norms'
 *    half step; off (its header 0, garbage factors), as without one;
 *  - the refusals: K not a multiple of 16, a misaligned operand, an
 *    unknown activation;
 *  - with --time: BERT MiniLM's GEMMs at B=32 T=128 (M = 4096; q/k/v 384 x
 *    384, intermediate 1536 x 384 with erf-GELU, output 384 x 1536 with the
 *    residual), int8 against cuBLASLt bf16 with the same epilogue where it
 *    has one, and the row quantization; median of 20.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_80 (or -gencode arch=compute_90a,code=sm_90a) \
 *     -Itemplates/cuda -I. -Iruntime -Iruntime/cuda \
 *     -o test_w8a8 tests/gpu/test_w8a8.cu runtime/status.c runtime/half.c \
 *     runtime/cuda/{status,device,alloc,host,stream,gemm,peaks}.c -lcublasLt
 *   ./test_w8a8 [--small] [--time]
 * Exits 1 on any failure, 77 (skipped) without a GPU of compute capability 8.0 or more. */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "gpu_test.cuh"
#include "runtime/cuda/nnrt_cuda.h"
#include "w8a8.cuh"

static std::mt19937 rng(20261129);
static int failures = 0;

static float uni(float a) { return std::uniform_real_distribution<float>(-a, a)(rng); }
static int8_t rand_q() { return (int8_t)std::uniform_int_distribution<int>(-127, 127)(rng); }

template <typename T> static T *dev_copy(const std::vector<T> &h) {
  T *d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T) + 16));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T> static std::vector<T> host_copy(const T *d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

/* The host's int8 of a slice: the kernels' f32 operations. */
static void host_quant(const std::vector<float> &v, std::vector<int8_t> &q, float &scale) {
  float amax = 0;
  for (float x : v) amax = std::fmax(amax, std::fabs(x));
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  q.resize(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    const float r = std::nearbyint(v[i] * inv);
    q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
  }
  scale = amax / 127.0f;
}

/* A weight channel's int8 as C SIMD makes it (nnc_simd_q8_pack). */
static void host_quant_weight(const std::vector<float> &v, std::vector<int8_t> &q, float &scale) {
  float amax = 0;
  for (float x : v) amax = std::fmax(amax, std::fabs(x));
  scale = amax > 0 && std::isfinite(amax) ? amax / 127.0f : 0.0f;
  q.assign(v.size(), 0);
  for (size_t i = 0; i < v.size() && scale > 0; i++) {
    const float r = std::nearbyint(v[i] / scale);
    q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r == r ? r : 0);
  }
}

/* SmoothQuant's tail on the device: the header (on or off) and K factors in
 * [0.25, 4) (garbage when off); f gets them as the kernels must use them
 * (all 1 when off). nullptr for mode NONE. */
enum smooth_mode { SMOOTH_NONE, SMOOTH_ON, SMOOTH_OFF };
static void *smooth_tail(smooth_mode mode, int K, std::vector<float> &f) {
  f.assign(K, 1.0f);
  if (mode == SMOOTH_NONE) return nullptr;
  std::vector<unsigned char> t(16 + (size_t)K * 4, 0);
  const int32_t on = mode == SMOOTH_ON;
  std::memcpy(t.data(), &on, 4);
  for (int k = 0; k < K; k++) {
    const float v = mode == SMOOTH_ON ? std::exp2(uni(2.0f)) : -7.0f;
    std::memcpy(t.data() + 16 + 4 * k, &v, 4);
    if (mode == SMOOTH_ON) f[k] = v;
  }
  void *d = nullptr;
  CK(cudaMalloc(&d, t.size()));
  CK(cudaMemcpy(d, t.data(), t.size(), cudaMemcpyHostToDevice));
  return d;
}

static void check_weight(int N, int K, bool in_out, smooth_mode sm = SMOOTH_NONE) {
  std::vector<float> w((size_t)N * K);
  for (auto &x : w) x = uni(0.05f);
  w[0] = 0.3f;   /* one large value a matrix */
  const int zero = N - 1;   /* a channel of zeros */
  for (int k = 0; k < K; k++) (in_out ? w[(size_t)k * N + zero] : w[(size_t)zero * K + k]) = 0.0f;
  /* channel 1 holds a NaN (its int8 0), channel 2 an inf (all 0, scale 0) */
  (in_out ? w[(size_t)3 * N + 1] : w[(size_t)1 * K + 3]) = std::nanf("");
  (in_out ? w[(size_t)5 * N + 2] : w[(size_t)2 * K + 5]) = INFINITY;
  float *dw = dev_copy(w);
  std::vector<float> f;
  void *tail = smooth_tail(sm, K, f);
  signed char *dq;
  float *ds;
  CK(cudaMalloc(&dq, (size_t)N * K + 16));
  CK(cudaMalloc(&ds, (size_t)N * 4 + 4));
  CK(cudaMemset(dq, 0x80, (size_t)N * K));
  nnc_cuda_error e;
  if (nnc_cuda_w8a8_weight(dw, N, K, in_out, tail, dq, ds, 0, &e)) { std::printf("FAIL weight: %s\n", e.msg); failures++; }
  auto q = host_copy(dq, (size_t)N * K);
  auto s = host_copy(ds, (size_t)N);
  int bad = 0;
  for (int n = 0; n < N; n++) {
    std::vector<float> ch(K);
    for (int k = 0; k < K; k++) ch[k] = (in_out ? w[(size_t)k * N + n] : w[(size_t)n * K + k]) * f[k];
    std::vector<int8_t> hq;
    float hs;
    host_quant_weight(ch, hq, hs);
    bad += hs != s[n];
    for (int k = 0; k < K; k++) bad += hq[k] != q[(size_t)n * K + k];
  }
  std::printf("%s weight %dx%d in_out=%d smooth=%d: %d values differ from the host's\n", bad ? "FAIL" : "ok  ", N, K,
              in_out, (int)sm, bad);
  failures += bad != 0;
  cudaFree(tail);
  cudaFree(dw);
  cudaFree(dq);
  cudaFree(ds);
}

static void check_rows(nnc_quant_norm norm, int M, int K, smooth_mode sm = SMOOTH_NONE) {
  std::vector<__nv_bfloat16> x((size_t)M * K), g(K), b(K);
  for (auto &v : x) v = __float2bfloat16_rn(uni(2.0f));
  for (auto &v : g) v = __float2bfloat16_rn(1.0f + uni(0.2f));
  for (auto &v : b) v = __float2bfloat16_rn(uni(0.1f));
  auto dx = dev_copy(x), dg = dev_copy(g), db = dev_copy(b);
  std::vector<float> f;
  void *tail = smooth_tail(sm, K, f);
  signed char *dq;
  float *ds;
  CK(cudaMalloc(&dq, (size_t)M * K + 16));
  CK(cudaMalloc(&ds, (size_t)M * 4 + 4));
  CK(cudaMemset(dq, 0x80, (size_t)M * K));   /* -128: never written */
  CK(cudaMemset(ds, 0xff, (size_t)M * 4));    /* NaN */
  nnc_cuda_error e;
  if (nnc_cuda_w8a8_rows<__nv_bfloat16>(norm, M, K, dx, K, dg, db, 1e-5f, tail, dq, ds, 0, &e)) {
    std::printf("FAIL rows: %s\n", e.msg);
    failures++;
  }
  auto q = host_copy(dq, (size_t)M * K);
  auto s = host_copy(ds, (size_t)M);
  double worst = 0;
  int unwritten = 0, differ = 0;
  for (int m = 0; m < M; m++) {
    std::vector<double> y(K);
    std::vector<float> yf(K);
    double mean = 0, var = 0;
    for (int k = 0; k < K; k++) mean += __bfloat162float(x[(size_t)m * K + k]);
    mean /= K;
    for (int k = 0; k < K; k++) {
      double d = __bfloat162float(x[(size_t)m * K + k]) - (norm == NNC_QUANT_LAYERNORM ? mean : 0);
      var += d * d;
    }
    double rstd = 1 / std::sqrt(var / K + 1e-5);
    double amax = 0;
    for (int k = 0; k < K; k++) {
      double v = __bfloat162float(x[(size_t)m * K + k]);
      yf[k] = (float)v / f[k];
      if (norm == NNC_QUANT_LAYERNORM) v = (v - mean) * rstd * __bfloat162float(g[k]) + __bfloat162float(b[k]);
      if (norm == NNC_QUANT_RMSNORM) v = v * rstd * __bfloat162float(g[k]);
      y[k] = v / f[k];
      amax = std::fmax(amax, std::fabs(y[k]));
    }
    unwritten += std::isnan(s[m]);
    for (int k = 0; k < K; k++) {
      unwritten += q[(size_t)m * K + k] == -128;
      worst = std::fmax(worst, std::fabs(q[(size_t)m * K + k] * (double)s[m] - y[k]) / amax);
    }
    if (norm == NNC_QUANT_PLAIN) {   /* the same f32 operations as the host's */
      std::vector<int8_t> hq;
      float hs;
      host_quant(yf, hq, hs);
      differ += hs != s[m];
      for (int k = 0; k < K; k++) differ += hq[k] != q[(size_t)m * K + k];
    }
  }
  /* half a step (0.5 / 127 of the max), and the norm's f32 statistics */
  const bool ok = worst <= 0.5 / 127 + 1e-3 && !unwritten && !differ;
  std::printf("%s rows norm %d %dx%d smooth=%d: error %.3g of the row's max, %d unwritten, %d differ from the host's\n",
              ok ? "ok  " : "FAIL", (int)norm, M, K, (int)sm, worst, unwritten, differ);
  failures += !ok;
  cudaFree(tail);
  cudaFree(dx); cudaFree(dg); cudaFree(db); cudaFree(dq); cudaFree(ds);
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

/* One case: out = act(alpha acc sa sw + bias) (+ residual, or inside the
 * act when after), residual in place when in_place; rows every `step`-th
 * checked (1: all). */
template <typename TO>
static void check_gemm(int M, int N, int K, nnc_w8a8_tiles tiles, nnc_cuda_act act, bool bias, bool res, bool after,
                       bool in_place, int step = 1) {
  std::vector<int8_t> a((size_t)M * K), w((size_t)N * K);
  std::vector<float> sa(M), sw(N);
  for (auto &v : a) v = rand_q();
  for (auto &v : w) v = rand_q();
  /* products of about unit size: |acc| ~ 127^2 sqrt(K / 9) */
  for (auto &v : sa) v = 2.0f / 127 * (1 + uni(0.5f)) / std::sqrt((float)(K > 0 ? K : 1));
  for (auto &v : sw) v = 1.0f / 127 * (1 + uni(0.5f));
  /* D has a row of guards after it: a value written past M x N shows there */
  std::vector<TO> bb(N), rr((size_t)M * N), dd((size_t)(M + 1) * N, h_from<TO>(NAN));
  for (auto &v : bb) v = h_from<TO>(uni(1.0f));
  for (auto &v : rr) v = h_from<TO>(uni(1.0f));
  if (in_place) std::copy(rr.begin(), rr.end(), dd.begin());
  auto da = dev_copy(a), dw = dev_copy(w);
  auto dsa = dev_copy(sa), dsw = dev_copy(sw);
  auto db = dev_copy(bb), dr = dev_copy(rr), dd_ = dev_copy(dd);
  nnc_cuda_w8a8_gemm_args<TO> f = {};
  f.M = M; f.N = N; f.K = K;
  f.a = reinterpret_cast<const signed char *>(da); f.a_scale = dsa;
  f.w = reinterpret_cast<const signed char *>(dw); f.w_scale = dsw;
  f.bias = bias ? db : nullptr;
  f.residual = res ? (in_place ? dd_ : dr) : nullptr;
  f.act_last = after;
  f.d = dd_;
  f.alpha = 0.5f;
  f.act = act;
  nnc_cuda_error e;
  if (nnc_cuda_gemm_w8a8_ex(f, tiles, 0, &e)) {
    std::printf("FAIL gemm %dx%dx%d: %s\n", M, N, K, e.msg);
    failures++;
    return;
  }
  CK(cudaDeviceSynchronize());
  auto got = host_copy(dd_, (size_t)(M + 1) * N);
  int guards = 0;
  for (int n = 0; n < N; n++) guards += !std::isnan(h_to(got[(size_t)M * N + n]));
  double worst = 0, scale = 0;
  for (int m = 0; m < M; m += step)
    for (int n = 0; n < N; n++) {
      long long acc = 0;
      for (int k = 0; k < K; k++) acc += (long long)a[(size_t)m * K + k] * w[(size_t)n * K + k];
      double v = 0.5 * (double)acc * sa[m] * sw[n];
      if (bias) v += h_to(bb[n]);
      const double r = res ? h_to(rr[(size_t)m * N + n]) : 0.0;
      v = after ? act_ref(act, v + r) : act_ref(act, v) + r;
      scale = std::fmax(scale, std::fabs(v));
      const double g = h_to(got[(size_t)m * N + n]);
      worst = std::isnan(g) ? INFINITY : std::fmax(worst, std::fabs(g - v));
    }
  const double tol = sizeof(TO) < 4 ? 1e-2 : act == NNC_CUDA_ACT_GELU_TANH ? 2e-3 : 1e-5;
  const bool ok = worst <= tol * scale && !guards;
  std::printf("%s gemm %s %dx%dx%d tiles %d act %d bias %d res %d%s after %d: error %.3g of max %.3g, %d past D\n",
              ok ? "ok  " : "FAIL", sizeof(TO) == 4 ? "f32" : std::is_same<TO, __half>::value ? "f16" : "bf16", M, N, K,
              (int)tiles, (int)act, bias, res, in_place ? " (in place)" : "", after, worst / scale, scale, guards);
  failures += !ok;
  cudaFree(da); cudaFree(dw); cudaFree(dsa); cudaFree(dsw); cudaFree(db); cudaFree(dr); cudaFree(dd_);
}

/* Each refusal with its message; nothing runs. */
static void check_refusals() {
  signed char *q;
  float *sc;
  __nv_bfloat16 *d;
  CK(cudaMalloc(&q, 4096));
  CK(cudaMalloc(&sc, 256));
  CK(cudaMalloc(&d, 4096));
  nnc_cuda_w8a8_gemm_args<__nv_bfloat16> f = {};
  f.M = 4; f.N = 4; f.K = 24; f.a = q; f.a_scale = sc; f.w = q; f.w_scale = sc; f.d = d; f.alpha = 1;
  struct {
    const char *what;
    nnc_cuda_w8a8_gemm_args<__nv_bfloat16> f;
  } cases[4] = {{"K = 24", f}, {"a + 8", f}, {"act 9", f}, {"no w", f}};
  cases[1].f.K = 32;
  cases[1].f.a = q + 8;
  cases[2].f.K = 32;
  cases[2].f.act = (nnc_cuda_act)9;
  cases[3].f.K = 32;
  cases[3].f.w = nullptr;
  for (auto &c : cases) {
    nnc_cuda_error e = {};
    const bool refused = nnc_cuda_gemm_w8a8(c.f, 0, &e) == NNC_CUDA_E_ARG;
    std::printf("%s refusal %s: %s\n", refused ? "ok  " : "FAIL", c.what, e.msg);
    failures += !refused;
  }
  cudaFree(q); cudaFree(sc); cudaFree(d);
}

/* BERT MiniLM's GEMMs at B=32 T=128: ours against cuBLASLt bf16. */
static void time_bert(nnrt_cuda_blas *h) {
  const int M = 4096;
  const struct { const char *name; int N, K; nnc_cuda_act act; bool res; } g[] = {
      {"q/k/v", 384, 384, NNC_CUDA_ACT_NONE, false},
      {"intermediate (erf-GELU)", 1536, 384, NNC_CUDA_ACT_GELU_ERF, false},
      {"output (+ residual)", 384, 1536, NNC_CUDA_ACT_NONE, true}};
  signed char *q, *w;
  float *sa, *sw;
  __nv_bfloat16 *ab, *wb, *d, *bias, *r;
  CK(cudaMalloc(&q, (size_t)M * 1536)); CK(cudaMalloc(&w, (size_t)1536 * 1536));
  CK(cudaMalloc(&sa, M * 4)); CK(cudaMalloc(&sw, 1536 * 4));
  CK(cudaMalloc(&ab, (size_t)M * 1536 * 2)); CK(cudaMalloc(&wb, (size_t)1536 * 1536 * 2));
  CK(cudaMalloc(&d, (size_t)M * 1536 * 2)); CK(cudaMalloc(&r, (size_t)M * 1536 * 2)); CK(cudaMalloc(&bias, 1536 * 2));
  CK(cudaMemset(q, 1, (size_t)M * 1536)); CK(cudaMemset(w, 1, (size_t)1536 * 1536));
  CK(cudaMemset(sa, 0, M * 4)); CK(cudaMemset(sw, 0, 1536 * 4));
  CK(cudaMemset(ab, 0, (size_t)M * 1536 * 2)); CK(cudaMemset(wb, 0, (size_t)1536 * 1536 * 2));
  CK(cudaMemset(r, 0, (size_t)M * 1536 * 2)); CK(cudaMemset(bias, 0, 1536 * 2));
  for (const auto &c : g) {
    const double flop = 2.0 * M * c.N * c.K;
    nnc_cuda_w8a8_gemm_args<__nv_bfloat16> f = {};
    f.M = M; f.N = c.N; f.K = c.K; f.a = q; f.a_scale = sa; f.w = w; f.w_scale = sw; f.bias = bias;
    f.residual = c.res ? r : nullptr; f.d = d; f.alpha = 1; f.act = c.act;
    for (int t = 0; t < 3; t++) {
      const nnc_w8a8_tiles tiles = (nnc_w8a8_tiles)t;
      double ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_w8a8_ex(f, tiles, 0, &e) == NNC_CUDA_OK; });
      std::printf("time %-24s %dx%dx%d int8 tiles %s: %.4f ms, %.0f TOP/s\n", c.name, M, c.N, c.K,
                  t == 0 ? "auto" : t == 1 ? "128" : "64", ms, flop / ms / 1e9);
    }
    nnrt_cuda_gemm b = {};
    b.M = M; b.N = c.N; b.K = c.K; b.batch = 1; b.ab = b.out = NNRT_DT_BF16;
    b.A = ab; b.lda = c.K; b.B = wb; b.ldb = c.K; b.b_trans = true; b.bias = bias;
    b.residual = c.res ? r : nullptr; b.stride_r = (long long)M * c.N;
    b.D = d; b.ldd = c.N; b.stride_d = (long long)M * c.N; b.alpha = 1;
    b.epilogue = NNRT_EPI_NONE;   /* cuBLASLt has no erf-GELU: the folder adds a kernel */
    double ms = median_ms([&] { nnrt_error e = {}; return nnrt_cuda_gemm_run(h, &b, 0, &e) == NNRT_OK; });
    std::printf("time %-24s %dx%dx%d bf16 cuBLASLt: %.4f ms, %.0f TFLOP/s\n", c.name, M, c.N, c.K, ms, flop / ms / 1e9);
  }
  float *qs;
  CK(cudaMalloc(&qs, M * 4));
  double ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_w8a8_rows<__nv_bfloat16>(NNC_QUANT_PLAIN, M, 384, ab, 384, nullptr, nullptr, 0.0f, nullptr, q, qs, 0, &e) == NNC_CUDA_OK; });
  std::printf("time int8 rows 4096x384: %.4f ms, %.0f GB/s\n", ms, (double)M * 384 * 3 / ms / 1e6);
  ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_w8a8_rows<__nv_bfloat16>(NNC_QUANT_PLAIN, M, 1536, ab, 1536, nullptr, nullptr, 0.0f, nullptr, q, qs, 0, &e) == NNC_CUDA_OK; });
  std::printf("time int8 rows 4096x1536: %.4f ms, %.0f GB/s\n", ms, (double)M * 1536 * 3 / ms / 1e6);
  cudaFree(q); cudaFree(w); cudaFree(sa); cudaFree(sw); cudaFree(ab); cudaFree(wb); cudaFree(d); cudaFree(r);
  cudaFree(bias); cudaFree(qs);
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
  check_weight(48, 80, false);
  check_weight(48, 80, true);
  check_weight(48, 80, false, SMOOTH_ON);
  check_weight(48, 80, true, SMOOTH_OFF);
  if (!small) check_weight(384, 1536, true);
  /* the warp kernel (rows of 16-byte vectors) and the block kernel (100: not whole vectors) */
  for (int norm = 0; norm < 3; norm++) {
    check_rows((nnc_quant_norm)norm, small ? 5 : 37, small ? 64 : 384);
    check_rows((nnc_quant_norm)norm, 5, 100);
    check_rows((nnc_quant_norm)norm, 5, 100, SMOOTH_ON);
    check_rows((nnc_quant_norm)norm, small ? 5 : 37, small ? 64 : 384, SMOOTH_ON);
    check_rows((nnc_quant_norm)norm, 5, 64, SMOOTH_OFF);
    if (!small) check_rows((nnc_quant_norm)norm, 9, 1536);
  }
  const int sizes[][3] = {{17, 48, 64}, {37, 101, 96}, {129, 80, 768}, {3, 8, 16}};
  const nnc_cuda_act acts[] = {NNC_CUDA_ACT_NONE, NNC_CUDA_ACT_RELU, NNC_CUDA_ACT_GELU_ERF, NNC_CUDA_ACT_GELU_TANH,
                               NNC_CUDA_ACT_SILU};
  for (int t = 1; t <= 2; t++)
    for (int s = 0; s < (small ? 2 : 4); s++) {
      const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
      const nnc_w8a8_tiles tiles = (nnc_w8a8_tiles)t;
      for (nnc_cuda_act act : acts) check_gemm<__nv_bfloat16>(M, N, K, tiles, act, true, false, false, false);
      check_gemm<__nv_bfloat16>(M, N, K, tiles, NNC_CUDA_ACT_NONE, false, false, false, false);
      check_gemm<__nv_bfloat16>(M, N, K, tiles, NNC_CUDA_ACT_NONE, true, true, false, false);
      check_gemm<__nv_bfloat16>(M, N, K, tiles, NNC_CUDA_ACT_NONE, true, true, false, true);
      check_gemm<__nv_bfloat16>(M, N, K, tiles, NNC_CUDA_ACT_GELU_ERF, true, true, true, false);
      check_gemm<__half>(M, N, K, tiles, NNC_CUDA_ACT_GELU_ERF, true, true, false, false);
      check_gemm<float>(M, N, K, tiles, NNC_CUDA_ACT_NONE, true, true, false, false);
      check_gemm<float>(M, N, K, tiles, NNC_CUDA_ACT_GELU_TANH, true, false, false, false);
      check_gemm<float>(M, N, K, tiles, NNC_CUDA_ACT_RELU, true, true, true, true);
    }
  /* K = 0 writes the epilogue of zero sums; the automatic choice at BERT MiniLM's size, sampled rows */
  check_gemm<__nv_bfloat16>(9, 24, 0, NNC_W8A8_TILES_AUTO, NNC_CUDA_ACT_NONE, true, true, false, false);
  if (!small) check_gemm<__nv_bfloat16>(4096, 1536, 384, NNC_W8A8_TILES_AUTO, NNC_CUDA_ACT_GELU_ERF, true, false, false,
                                        false, 61);
  check_refusals();
  if (timing) {
    nnrt_cuda_blas *h = nullptr;
    nnrt_error re = {};
    if (nnrt_cuda_blas_create(0, &h, &re)) return std::printf("FAIL blas: %s\n", re.msg), 1;
    time_bert(h);
    nnrt_cuda_blas_destroy(h);
  }
  std::printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
