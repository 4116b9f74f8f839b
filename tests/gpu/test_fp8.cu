/* tests/gpu/test_fp8.cu — templates/cuda/fp8.cuh on a GPU (--precision=fp8):
 *  - nnc_cuda_fp8_weight ([N, K] and [K, N] sources) bit for bit against
 *    runtime/half.c's nnrt_f32_to_e4m3 of the same f32 products (value *
 *    448 / max); nnc_cuda_fp8_rows (plain, layernorm, rmsnorm; the warp and
 *    the block kernel) within one e4m3 step of a float64 norm, and with a
 *    fixed scale (nnc calibrate's) bit for bit;
 *  - nnc_cuda_gemm_fp8, every way (cuBLASLt with its row/channel scale
 *    vectors and epilogue: path 1; the unscaled f32 fallback and the
 *    epilogue kernel: path 2; in sm_90a builds nnc's wgmma FP8 GEMM: path
 *    3, also what path 0 finds for rows of D not 16-byte aligned), against
 *    a float64 product of the dequantized operands: bias, residual, relu /
 *    tanh-GELU, act after the residual, bf16 and f32 outputs, odd M and N,
 *    outputs poisoned with NaN first. Tolerance: max |out - ref| <= 1e-2 *
 *    max |ref| (bf16 output, fast accumulation);
 *  - (sm_90a) gemm_wgmma_fp8.cuh called directly: M not a multiple of 128,
 *    N odd (50257 too), K a multiple of 16 only and K = 0, every epilogue,
 *    f32 / bf16 / e4m3 output, a scale per row or one; pad columns and a
 *    guard row that must keep their poison (check_own); e4m3 output for the
 *    next GEMM's A with a fixed scale (nnc_cuda_gemm_fp8_e4m3);
 *  - with --time: GPT-2 124M's GEMMs at B=8 T=1024 (the head 8192 x 50257 x
 *    768, c_attn, attn.c_proj, c_fc, mlp.c_proj): ours, cuBLASLt FP8 and
 *    bf16, nnc's bf16 wgmma GEMM for the head; c_fc's paths; median of 20
 *    (the row quantization apart).
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda -I. -Iruntime -Iruntime/cuda \
 *     (or -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A: our kernel's cases too) \
 *     -o test_fp8 tests/gpu/test_fp8.cu runtime/status.c runtime/half.c runtime/cuda/{status,device,alloc,host,stream,gemm,peaks}.c -lcublasLt
 *   ./test_fp8 [--small] [--time]
 * Exits 1 on any failure, 77 (skipped) without a GPU of compute capability 8.9 or more. */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "fp8.cuh"
#include "gpu_test.cuh"

static std::mt19937 rng(20261129);
static int failures = 0;

static float uni(float a) { return std::uniform_real_distribution<float>(-a, a)(rng); }

template <typename T> static T *dev_copy(const std::vector<T> &h) {
  T *d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T) + 1));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T> static std::vector<T> host_copy(const T *d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

/* The host's e4m3 of a slice: the same f32 operations as the kernels. */
static void host_quant(const std::vector<float> &v, std::vector<uint8_t> &q, float &scale) {
  float amax = 0;
  for (float x : v) amax = std::fmax(amax, std::fabs(x));
  const float inv = amax > 0 ? 448.0f / amax : 0.0f;
  q.resize(v.size());
  for (size_t i = 0; i < v.size(); i++) q[i] = nnrt_f32_to_e4m3(v[i] * inv);
  scale = amax / 448.0f;
}

static void check_weight(int N, int K, bool in_out) {
  std::vector<float> w((size_t)N * K);
  for (auto &x : w) x = uni(0.05f);
  w[0] = 0.3f;   /* one large value per matrix */
  float *dw = dev_copy(w);
  unsigned char *dq;
  float *ds;
  CK(cudaMalloc(&dq, (size_t)N * K + 1));
  CK(cudaMalloc(&ds, (size_t)N * 4 + 4));
  nnc_cuda_error e;
  if (nnc_cuda_fp8_weight(dw, N, K, in_out, dq, ds, 0, &e)) { std::printf("FAIL weight: %s\n", e.msg); failures++; }
  auto q = host_copy(dq, (size_t)N * K);
  auto s = host_copy(ds, (size_t)N);
  int bad = 0;
  for (int n = 0; n < N; n++) {
    std::vector<float> ch(K);
    for (int k = 0; k < K; k++) ch[k] = in_out ? w[(size_t)k * N + n] : w[(size_t)n * K + k];
    std::vector<uint8_t> hq;
    float hs;
    host_quant(ch, hq, hs);
    bad += hs != s[n];
    for (int k = 0; k < K; k++) bad += hq[k] != q[(size_t)n * K + k];
  }
  if (bad) { std::printf("FAIL weight %dx%d in_out=%d: %d values differ from nnrt_f32_to_e4m3\n", N, K, in_out, bad); failures++; }
  cudaFree(dw);
  cudaFree(dq);
  cudaFree(ds);
}

static void check_rows(nnc_fp8_norm norm, int M, int K) {
  std::vector<__nv_bfloat16> x((size_t)M * K), g(K), b(K);
  for (auto &v : x) v = __float2bfloat16_rn(uni(2.0f));
  for (auto &v : g) v = __float2bfloat16_rn(1.0f + uni(0.2f));
  for (auto &v : b) v = __float2bfloat16_rn(uni(0.1f));
  auto dx = dev_copy(x), dg = dev_copy(g), db = dev_copy(b);
  unsigned char *dq;
  float *ds;
  CK(cudaMalloc(&dq, (size_t)M * K + 1));
  CK(cudaMalloc(&ds, (size_t)M * 4 + 4));
  nnc_cuda_error e;
  if (nnc_cuda_fp8_rows<__nv_bfloat16>(norm, M, K, dx, K, dg, db, 1e-5f, nullptr, dq, ds, 0, &e)) {
    std::printf("FAIL rows: %s\n", e.msg);
    failures++;
  }
  auto q = host_copy(dq, (size_t)M * K);
  auto s = host_copy(ds, (size_t)M);
  /* the norm's f32 statistics are summed in another order than on the
   * device: compare the dequantized rows, within one e4m3 step */
  double worst = 0;
  for (int m = 0; m < M; m++) {
    std::vector<double> y(K);
    double mean = 0, var = 0;
    for (int k = 0; k < K; k++) mean += __bfloat162float(x[(size_t)m * K + k]);
    mean /= K;
    for (int k = 0; k < K; k++) {
      double d = __bfloat162float(x[(size_t)m * K + k]) - (norm == NNC_FP8_LAYERNORM ? mean : 0);
      var += d * d;
    }
    double rstd = 1 / std::sqrt(var / K + 1e-5);
    double amax = 0;
    for (int k = 0; k < K; k++) {
      double v = __bfloat162float(x[(size_t)m * K + k]);
      if (norm == NNC_FP8_LAYERNORM) v = (v - mean) * rstd * __bfloat162float(g[k]) + __bfloat162float(b[k]);
      if (norm == NNC_FP8_RMSNORM) v = v * rstd * __bfloat162float(g[k]);
      y[k] = v;
      amax = std::fmax(amax, std::fabs(v));
    }
    for (int k = 0; k < K; k++)
      worst = std::fmax(worst, std::fabs(nnrt_e4m3_to_f32(q[(size_t)m * K + k]) * s[m] - y[k]) / amax);
  }
  /* half a step at the top of the range: 16/448 of the max */
  if (!(worst <= 0.04)) { std::printf("FAIL rows norm %d %dx%d: error %.3g of the row's max\n", (int)norm, M, K, worst); failures++; }
  cudaFree(dx); cudaFree(dg); cudaFree(db); cudaFree(dq); cudaFree(ds);
}

/* A fixed scale (nnc calibrate's) for plain rows: half the true max, so the
 * larger values saturate; bytes and scales as the host computes them. */
static void check_rows_fixed(int M, int K) {
  std::vector<__nv_bfloat16> x((size_t)M * K);
  for (auto &v : x) v = __float2bfloat16_rn(uni(2.0f));
  const float f = 1.0f / 448.0f, amax = f * 448.0f, inv = 448.0f / amax;
  auto dx = dev_copy(x);
  auto df = dev_copy(std::vector<float>{f});
  unsigned char *dq;
  float *ds;
  CK(cudaMalloc(&dq, (size_t)M * K + 1));
  CK(cudaMalloc(&ds, (size_t)M * 4 + 4));
  nnc_cuda_error e;
  if (nnc_cuda_fp8_rows<__nv_bfloat16>(NNC_FP8_PLAIN, M, K, dx, K, nullptr, nullptr, 0.0f, df, dq, ds, 0, &e)) {
    std::printf("FAIL rows fixed: %s\n", e.msg);
    failures++;
  }
  auto q = host_copy(dq, (size_t)M * K);
  auto s = host_copy(ds, (size_t)M);
  int bad = 0;
  for (int m = 0; m < M; m++) {
    bad += s[m] != amax / 448.0f;
    for (int k = 0; k < K; k++) bad += q[(size_t)m * K + k] != nnrt_f32_to_e4m3(__bfloat162float(x[(size_t)m * K + k]) * inv);
  }
  if (bad) { std::printf("FAIL rows fixed %dx%d: %d values differ\n", M, K, bad); failures++; }
  cudaFree(dx); cudaFree(df); cudaFree(dq); cudaFree(ds);
}

template <typename TO> static double out_of(TO v) { return h_to(v); }

template <typename TO>
static void check_gemm(nnrt_cuda_blas *h, int M, int N, int K, int act, bool bias, bool res, bool after, int path) {
  std::vector<uint8_t> a((size_t)M * K), w((size_t)N * K);
  std::vector<float> sa(M), sw(N);
  for (auto &v : a) v = nnrt_f32_to_e4m3(uni(448.0f));
  for (auto &v : w) v = nnrt_f32_to_e4m3(uni(448.0f));
  for (auto &v : sa) v = 1e-3f * (1 + uni(0.5f));
  for (auto &v : sw) v = 1e-4f * (1 + uni(0.5f));
  /* D has a row of guards after it: a value written past M x N shows there */
  std::vector<TO> bb(N), rr((size_t)M * N), dd((size_t)(M + 1) * N, h_from<TO>(NAN));
  for (auto &v : bb) v = h_from<TO>(uni(1.0f));
  for (auto &v : rr) v = h_from<TO>(uni(1.0f));
  auto da = dev_copy(a), dw = dev_copy(w);
  auto dsa = dev_copy(sa), dsw = dev_copy(sw);
  auto db = dev_copy(bb), dr = dev_copy(rr), dd_ = dev_copy(dd);
  float *tmp;
  CK(cudaMalloc(&tmp, nnc_cuda_fp8_tmp_bytes(M, N) + 4));
  nnc_cuda_fp8_gemm_args<TO> f = {};
  f.M = M; f.N = N; f.K = K;
  f.a = da; f.a_scale = dsa; f.w = dw; f.w_scale = dsw;
  f.bias = bias ? db : nullptr;
  f.residual = res ? dr : nullptr;
  f.act_after_residual = after;
  f.d = dd_;
  f.alpha = 0.5f;
  f.act = act;
  f.tmp = tmp;
  int p = path;
  nnc_cuda_error e;
  if (nnc_cuda_gemm_fp8(h, f, &p, 0, &e)) {
    std::printf("FAIL gemm %dx%dx%d path %d: %s\n", M, N, K, path, e.msg);
    failures++;
    return;
  }
  CK(cudaDeviceSynchronize());
  auto got = host_copy(dd_, (size_t)(M + 1) * N);
  int guards = 0;
  for (int n = 0; n < N; n++) guards += !std::isnan(out_of(got[(size_t)M * N + n]));
  if (guards) { std::printf("FAIL gemm %dx%dx%d: %d values written past D\n", M, N, K, guards); failures++; }
  double worst = 0, scale = 0;
  std::vector<double> ref((size_t)M * N);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++)
        acc += (double)nnrt_e4m3_to_f32(a[(size_t)m * K + k]) * nnrt_e4m3_to_f32(w[(size_t)n * K + k]);
      double v = 0.5 * acc * sa[m] * sw[n];
      if (bias) v += out_of(bb[n]);
      if (res && after) v += out_of(rr[(size_t)m * N + n]);
      if (act == NNRT_EPI_RELU) v = v > 0 ? v : 0;
      if (act == NNRT_EPI_GELU_TANH) v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      if (res && !after) v += out_of(rr[(size_t)m * N + n]);
      ref[(size_t)m * N + n] = v;
      scale = std::fmax(scale, std::fabs(v));
    }
  for (size_t i = 0; i < ref.size(); i++) {   /* got's guard row is past ref's end */
    double g = out_of(got[i]);
    worst = std::isnan(g) ? INFINITY : std::fmax(worst, std::fabs(g - ref[i]));
    if (std::isinf(worst)) break;
  }
  const bool ok = worst <= 1e-2 * scale;
  std::printf("%s gemm %s %dx%dx%d act %d bias %d res %d after %d: asked path %d, ran path %d, error %.3g of max %.3g\n",
              ok ? "ok  " : "FAIL", sizeof(TO) == 4 ? "f32" : "bf16", M, N, K, act, bias, res, after, path, p,
              worst / scale, scale);
  failures += !ok;
  cudaFree(da); cudaFree(dw); cudaFree(dsa); cudaFree(dsw); cudaFree(db); cudaFree(dr); cudaFree(dd_); cudaFree(tmp);
}

/* GPT-2 124M's c_fc at B=8 T=1024: FP8 (both paths) against bf16 cuBLASLt. */
static void time_cfc(nnrt_cuda_blas *h) {
  const int M = 8192, N = 3072, K = 768;
  unsigned char *a, *w;
  float *sa, *sw, *tmp;
  __nv_bfloat16 *ab, *wb, *d, *bias;
  CK(cudaMalloc(&a, (size_t)M * K)); CK(cudaMalloc(&w, (size_t)N * K));
  CK(cudaMalloc(&sa, M * 4)); CK(cudaMalloc(&sw, N * 4));
  CK(cudaMalloc(&tmp, nnc_cuda_fp8_tmp_bytes(M, N)));
  CK(cudaMalloc(&ab, (size_t)M * K * 2)); CK(cudaMalloc(&wb, (size_t)N * K * 2));
  CK(cudaMalloc(&d, (size_t)M * N * 2)); CK(cudaMalloc(&bias, N * 2));
  CK(cudaMemset(a, 0x30, (size_t)M * K)); CK(cudaMemset(w, 0x30, (size_t)N * K));
  CK(cudaMemset(ab, 0, (size_t)M * K * 2)); CK(cudaMemset(wb, 0, (size_t)N * K * 2));
  CK(cudaMemset(bias, 0, N * 2));
  std::vector<float> ones(M, 1.0f);
  CK(cudaMemcpy(sa, ones.data(), M * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sw, ones.data(), N * 4, cudaMemcpyHostToDevice));
  const double flop = 2.0 * M * N * K;
  for (int path = 0; path <= 2; path += 2) {
    nnc_cuda_fp8_gemm_args<__nv_bfloat16> f = {};
    f.M = M; f.N = N; f.K = K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw; f.bias = bias; f.d = d;
    f.alpha = 1; f.act = NNRT_EPI_GELU_TANH; f.tmp = tmp;
    int p = path;
    double ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8(h, f, &p, 0, &e) == NNC_CUDA_OK; });
    std::printf("time c_fc 8192x3072x768 fp8 path %d: %.4f ms, %.0f TFLOP/s\n", p, ms, flop / ms / 1e9);
  }
  nnrt_cuda_gemm g = {};
  g.M = M; g.N = N; g.K = K; g.batch = 1; g.ab = g.out = NNRT_DT_BF16;
  g.A = ab; g.lda = K; g.B = wb; g.ldb = N; g.bias = bias; g.D = d; g.ldd = N; g.stride_d = (long long)M * N;
  g.alpha = 1; g.epilogue = NNRT_EPI_GELU_TANH;
  double ms = median_ms([&] { nnrt_error e = {}; return nnrt_cuda_gemm_run(h, &g, 0, &e) == NNRT_OK; });
  std::printf("time c_fc 8192x3072x768 bf16 cuBLASLt: %.4f ms, %.0f TFLOP/s\n", ms, flop / ms / 1e9);
  /* what the scale vectors cost: the same e4m3 product without them */
  nnrt_cuda_gemm g8 = g;
  g8.ab = NNRT_DT_E4M3;
  g8.A = a;
  g8.B = w;
  g8.ldb = K;
  g8.b_trans = true;
  ms = median_ms([&] { nnrt_error e = {}; return nnrt_cuda_gemm_run(h, &g8, 0, &e) == NNRT_OK; });
  std::printf("time c_fc 8192x3072x768 fp8 without scale vectors: %.4f ms, %.0f TFLOP/s\n", ms, flop / ms / 1e9);
  unsigned char *q;
  float *qs;
  CK(cudaMalloc(&q, (size_t)M * K)); CK(cudaMalloc(&qs, M * 4));
  ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_fp8_rows<__nv_bfloat16>(NNC_FP8_LAYERNORM, M, K, ab, K, wb, wb, 1e-5f, nullptr, q, qs, 0, &e) == NNC_CUDA_OK; });
  std::printf("time layernorm + e4m3 rows 8192x768: %.4f ms, %.0f GB/s\n", ms, (double)M * K * 3 / ms / 1e6);
  unsigned char *q4;
  float *qs4;
  CK(cudaMalloc(&q4, (size_t)M * 3072)); CK(cudaMalloc(&qs4, M * 4));
  ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_fp8_rows<__nv_bfloat16>(NNC_FP8_PLAIN, M, 3072, d, 3072, nullptr, nullptr, 0.0f, nullptr, q4, qs4, 0, &e) == NNC_CUDA_OK; });
  std::printf("time e4m3 rows 8192x3072: %.4f ms, %.0f GB/s\n", ms, (double)M * 3072 * 3 / ms / 1e6);
  /* c_fc writing mlp.c_proj's A as e4m3 itself (a fixed scale): against bf16 out + the rows pass above */
  float *dsc;
  CK(cudaMalloc(&dsc, 4));
  CK(cudaMemcpy(dsc, ones.data(), 4, cudaMemcpyHostToDevice));
  nnc_cuda_fp8_gemm_args<__nv_bfloat16> f = {};
  f.M = M; f.N = N; f.K = K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw; f.bias = bias;
  f.alpha = 1; f.act = NNRT_EPI_GELU_TANH;
  bool wrote = false;
  ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8_e4m3(f, q4, dsc, &wrote, 0, &e) == NNC_CUDA_OK; });
  if (wrote) std::printf("time c_fc 8192x3072x768 fp8 with e4m3 output (ours): %.4f ms, %.0f TFLOP/s\n", ms, flop / ms / 1e9);
  else std::printf("time c_fc 8192x3072x768 fp8 with e4m3 output: not built here (sm_90a only)\n");
  cudaFree(dsc);
}

/* The product written as e4m3 (mlp.c_proj's A by c_fc's epilogue, with a
 * fixed scale): on sm_90a (our kernel) each byte within e4m3's rounding
 * (2^-4 relative, a subnormal's 2^-9 absolute) of (the float64 product +
 * bias, GELU) / the scale, saturated to 448; elsewhere said not written
 * (the folder keeps its bf16 output and row pass). */
static void check_gemm_e4m3_out(int M, int N, int K) {
  std::vector<uint8_t> a((size_t)M * K), w((size_t)N * K), d8((size_t)M * N, 0x7f);
  std::vector<float> sa(M), sw(N);
  for (auto &v : a) v = nnrt_f32_to_e4m3(uni(448.0f));
  for (auto &v : w) v = nnrt_f32_to_e4m3(uni(448.0f));
  for (auto &v : sa) v = 1e-3f * (1 + uni(0.5f));
  for (auto &v : sw) v = 1e-4f * (1 + uni(0.5f));
  std::vector<__nv_bfloat16> bb(N);
  for (auto &v : bb) v = h_from<__nv_bfloat16>(uni(1.0f));
  const float fixed = 3.0f / 448.0f;   /* the reader's fixed scale: values up to 3 */
  const double inv = 448.0 / (double)(fixed * 448.0f);
  std::vector<float> dsv(1, fixed);
  auto da = dev_copy(a), dw = dev_copy(w), dd = dev_copy(d8);
  auto dsa = dev_copy(sa), dsw = dev_copy(sw), ds = dev_copy(dsv);
  auto db = dev_copy(bb);
  nnc_cuda_fp8_gemm_args<__nv_bfloat16> f = {};
  f.M = M; f.N = N; f.K = K;
  f.a = da; f.a_scale = dsa; f.w = dw; f.w_scale = dsw; f.bias = db;
  f.alpha = 0.5f;
  f.act = NNRT_EPI_GELU_TANH;
  bool wrote = false;
  nnc_cuda_error e;
  if (nnc_cuda_gemm_fp8_e4m3(f, dd, ds, &wrote, 0, &e)) {
    std::printf("FAIL gemm e4m3 out %dx%dx%d: %s\n", M, N, K, e.msg);
    failures++;
    return;
  }
  if (!wrote) {
    std::printf("note gemm e4m3 out %dx%dx%d: not written (no sm_90a build)\n", M, N, K);
    return;
  }
  CK(cudaDeviceSynchronize());
  auto got = host_copy(dd, (size_t)M * N);
  int bad = 0;
  double worst = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++)
        acc += (double)nnrt_e4m3_to_f32(a[(size_t)m * K + k]) * nnrt_e4m3_to_f32(w[(size_t)n * K + k]);
      double v = 0.5 * acc * sa[m] * sw[n] + out_of(bb[n]);
      v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      double want = std::fmax(-448.0, std::fmin(448.0, v * inv));
      double g = nnrt_e4m3_to_f32(got[(size_t)m * N + n]);
      double err = std::fabs(g - want);
      worst = std::fmax(worst, err / (std::fabs(want) + 1e-9));
      bad += !(err <= 0.07 * std::fabs(want) + 0.01);
    }
  std::printf("%s gemm e4m3 out %dx%dx%d GELU + bias, fixed scale: worst relative %.3g, %d bytes off\n",
              bad ? "FAIL" : "ok  ", M, N, K, worst, bad);
  failures += bad != 0;
  cudaFree(da); cudaFree(dw); cudaFree(dd); cudaFree(dsa); cudaFree(dsw); cudaFree(ds); cudaFree(db);
}

/* Which e4m3 -> e4m3 combinations cuBLASLt plans here (D_SCALE always):
 * with and without the scale vectors, with and without GELU + bias. The
 * H200 run of session 24 refused the first (vectors, GELU + bias) with
 * CUBLAS_STATUS_INVALID_VALUE; this says which part it is. */
static void probe_e4m3_out(nnrt_cuda_blas *h) {
  const int M = 128, N = 128, K = 128;
  unsigned char *a, *w, *d;
  float *s;
  __nv_bfloat16 *bias;
  CK(cudaMalloc(&a, M * K)); CK(cudaMalloc(&w, N * K)); CK(cudaMalloc(&d, M * N));
  CK(cudaMalloc(&s, 4 * (M + N + 1))); CK(cudaMalloc(&bias, N * 2));
  CK(cudaMemset(a, 0, M * K)); CK(cudaMemset(w, 0, N * K)); CK(cudaMemset(s, 0, 4 * (M + N + 1)));
  CK(cudaMemset(bias, 0, N * 2));
  for (int vec = 1; vec >= 0; vec--)
    for (int epi = 1; epi >= 0; epi--) {
      nnrt_cuda_gemm g = {};
      g.M = M; g.N = N; g.K = K; g.batch = 1; g.ab = g.out = NNRT_DT_E4M3;
      g.A = a; g.lda = K; g.B = w; g.ldb = K; g.b_trans = true; g.D = d; g.ldd = N; g.stride_d = (long long)M * N;
      g.alpha = 1; g.d_scale = s + M + N;
      if (vec) g.a_scale = s, g.b_scale = s + M;
      if (epi) g.epilogue = NNRT_EPI_GELU_TANH, g.bias = bias;
      nnrt_error e = {};
      const bool ok = nnrt_cuda_gemm_run(h, &g, 0, &e) == NNRT_OK && cudaDeviceSynchronize() == cudaSuccess;
      std::printf("probe e4m3 out: scale vectors %d, GELU + bias %d: %s%s\n", vec, epi, ok ? "planned and ran" : "refused: ",
                  ok ? "" : e.msg);
    }
  cudaFree(a); cudaFree(w); cudaFree(d); cudaFree(s); cudaFree(bias);
}

/* GPT-2 124M's tied LM head at B=8 T=1024, f32 and bf16 logits: FP8 with a
 * vocabulary padded in the model to 50304 (llm.c's; 50257 has no cuBLASLt
 * FP8 algorithm writing its unaligned rows, and the fallback took 3.75 ms),
 * the way the model takes it (path 0), against bf16 cuBLASLt at 50257. */
static void time_head(nnrt_cuda_blas *h) {
  const int M = 8192, N = 50257, NP = 50304, K = 768;
  unsigned char *a, *w;
  float *sa, *sw, *tmp;
  void *d;
  __nv_bfloat16 *ab, *wb;
  CK(cudaMalloc(&a, (size_t)M * K)); CK(cudaMalloc(&w, (size_t)NP * K));
  CK(cudaMalloc(&sa, M * 4)); CK(cudaMalloc(&sw, NP * 4));
  CK(cudaMalloc(&tmp, nnc_cuda_fp8_tmp_bytes(M, NP)));
  CK(cudaMalloc(&d, (size_t)M * NP * 4));
  CK(cudaMalloc(&ab, (size_t)M * K * 2)); CK(cudaMalloc(&wb, (size_t)N * K * 2));
  CK(cudaMemset(a, 0x30, (size_t)M * K)); CK(cudaMemset(w, 0x30, (size_t)NP * K));
  CK(cudaMemset(ab, 0, (size_t)M * K * 2)); CK(cudaMemset(wb, 0, (size_t)N * K * 2));
  std::vector<float> ones(NP, 1.0f);
  CK(cudaMemcpy(sa, ones.data(), M * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sw, ones.data(), NP * 4, cudaMemcpyHostToDevice));
  const double flop = 2.0 * M * N * K;
  for (int f32 = 1; f32 >= 0; f32--) {
    int p = 0;
    double ms;
    if (f32) {
      nnc_cuda_fp8_gemm_args<float> f = {};
      f.M = M; f.N = NP; f.K = K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw;
      f.d = (float *)d; f.alpha = 1; f.act = NNRT_EPI_NONE; f.tmp = tmp;
      ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8(h, f, &p, 0, &e) == NNC_CUDA_OK; });
    } else {
      nnc_cuda_fp8_gemm_args<__nv_bfloat16> f = {};
      f.M = M; f.N = NP; f.K = K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw;
      f.d = (__nv_bfloat16 *)d; f.alpha = 1; f.act = NNRT_EPI_NONE; f.tmp = tmp;
      ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8(h, f, &p, 0, &e) == NNC_CUDA_OK; });
    }
    std::printf("time head 8192x50304x768 fp8 %s logits, ran path %d: %.4f ms, %.0f TFLOP/s (of 50257's flops)\n",
                f32 ? "f32" : "bf16", p, ms, flop / ms / 1e9);
  }
  for (int f32 = 1; f32 >= 0; f32--) {
    nnrt_cuda_gemm g = {};
    g.M = M; g.N = N; g.K = K; g.batch = 1; g.ab = NNRT_DT_BF16; g.out = f32 ? NNRT_DT_F32 : NNRT_DT_BF16;
    g.A = ab; g.lda = K; g.B = wb; g.ldb = K; g.b_trans = true; g.D = d; g.ldd = N; g.stride_d = (long long)M * N;
    g.alpha = 1; g.epilogue = NNRT_EPI_NONE;
    double ms = median_ms([&] { nnrt_error e = {}; return nnrt_cuda_gemm_run(h, &g, 0, &e) == NNRT_OK; });
    std::printf("time head 8192x50257x768 bf16 cuBLASLt %s logits: %.4f ms, %.0f TFLOP/s\n", f32 ? "f32" : "bf16", ms,
                flop / ms / 1e9);
  }
  cudaFree(a); cudaFree(w); cudaFree(sa); cudaFree(sw); cudaFree(tmp); cudaFree(d); cudaFree(ab); cudaFree(wb);
}

#if defined(NNC_CUDA_SM90A)
/* nnc's wgmma FP8 GEMM (gemm_wgmma_fp8.cuh) called directly, against a
 * float64 product of the e4m3 operands: TO f32, bf16 or e4m3 (then divided
 * by a fixed scale of 0.8 max|ref| / 448, so the top fifth saturates),
 * every epilogue, a scale per row or one for all (step 0). C has 5 pad
 * columns past N in each row and a guard row after M, all poisoned: they
 * must keep their bytes; every element inside must be written (poison
 * NaN, or e4m3's 0x7f, which satfinite never writes). Tolerance: floats
 * 1e-2 of max|ref| (FP8 wgmma's accumulation is not full f32); e4m3 one
 * rounding (2^-4 relative, 2^-9 absolute) plus 2e-3 of max|ref|. */
template <typename T> static T poison_of() {
  if constexpr (sizeof(T) == 1) { T v; v.__x = 0x7f; return v; }
  else return h_from<T>(NAN);
}
static double val_of(float v) { return v; }
static double val_of(__nv_bfloat16 v) { return h_to(v); }
static double val_of(__nv_fp8_e4m3 v) { return nnrt_e4m3_to_f32(v.__x); }

template <typename TO, typename TI>
static void check_own(int M, int N, int K, int act, bool bias, bool res, bool after, int step) {
  const long long ldc = N + 5, ldr = N + 2;
  std::vector<uint8_t> a((size_t)M * K + 1), w((size_t)N * K + 1);
  std::vector<float> sa(M), sw(N);
  for (auto &v : a) v = nnrt_f32_to_e4m3(uni(448.0f));
  for (auto &v : w) v = nnrt_f32_to_e4m3(uni(448.0f));
  for (auto &v : sa) v = 1e-3f * (1 + uni(0.5f));
  for (auto &v : sw) v = 1e-4f * (1 + uni(0.5f));
  std::vector<TI> bb(N), rr((size_t)M * ldr);
  for (auto &v : bb) v = h_from<TI>(uni(1.0f));
  for (auto &v : rr) v = h_from<TI>(uni(1.0f));
  const double alpha = 0.5;
  std::vector<double> ref((size_t)M * N);
  double mx = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++)
        acc += (double)nnrt_e4m3_to_f32(a[(size_t)m * K + k]) * nnrt_e4m3_to_f32(w[(size_t)n * K + k]);
      double v = alpha * acc * sa[(size_t)m * step] * sw[n];
      if (bias) v += val_of(bb[n]);
      if (res && after) v += val_of(rr[(size_t)m * ldr + n]);
      if (act == NNC_GWF_RELU) v = v > 0 ? v : 0;
      if (act == NNC_GWF_GELU_TANH) v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      if (res && !after) v += val_of(rr[(size_t)m * ldr + n]);
      ref[(size_t)m * N + n] = v;
      mx = std::fmax(mx, std::fabs(v));
    }
  const float fixed = (float)(0.8 * mx / 448.0);
  std::vector<TO> cc((size_t)(M + 1) * ldc, poison_of<TO>());
  auto da = dev_copy(a), dw = dev_copy(w);
  auto dsa = dev_copy(sa), dsw = dev_copy(sw), dfx = dev_copy(std::vector<float>{fixed});
  auto db = dev_copy(bb), dr = dev_copy(rr);
  auto dc = dev_copy(cc);
  nnc_cuda_gemm_wgmma_fp8_args<TO, TI> g = {};
  g.M = M; g.N = N; g.K = K;
  g.a = reinterpret_cast<const __nv_fp8_e4m3 *>(da); g.lda = K;
  g.a_scale = dsa; g.a_scale_step = step;
  g.b = reinterpret_cast<const __nv_fp8_e4m3 *>(dw); g.ldb = K;
  g.b_scale = dsw;
  g.bias = bias ? db : nullptr;
  g.residual = res ? dr : nullptr; g.ldr = ldr;
  g.act = act; g.act_after_residual = after;
  g.alpha = (float)alpha;
  g.out_scale = dfx;
  g.c = dc; g.ldc = ldc;
  /* step 0 reads a_scale[0] for every row */
  const char *tn = sizeof(TO) == 4 ? "f32" : sizeof(TO) == 2 ? "bf16" : "e4m3";
  nnc_cuda_error e;
  if (nnc_cuda_gemm_wgmma_fp8(g, 0, &e)) {
    std::printf("FAIL own %s %dx%dx%d: %s\n", tn, M, N, K, e.msg);
    failures++;
    return;
  }
  CK(cudaDeviceSynchronize());
  auto got = host_copy(dc, (size_t)(M + 1) * ldc);
  const TO pz = poison_of<TO>();
  long long touched = 0, unwritten = 0, off = 0;
  double worst = 0;
  const double inv = 448.0 / (double)(fixed * 448.0f);
  for (int m = 0; m <= M; m++)
    for (long long n = 0; n < ldc; n++) {
      const TO v = got[(size_t)m * ldc + n];
      const bool poisoned = std::memcmp(&v, &pz, sizeof v) == 0 || (sizeof(TO) > 1 && std::isnan(val_of(v)));
      if (m == M || n >= N) { touched += !poisoned; continue; }
      if (poisoned) { unwritten++; continue; }
      const double r = ref[(size_t)m * N + n];
      if (sizeof(TO) == 1) {
        const double want = std::fmax(-448.0, std::fmin(448.0, r * inv)), err = std::fabs(val_of(v) - want);
        worst = std::fmax(worst, err / 448.0);
        off += !(err <= 0.0625 * std::fabs(want) + 1.0 / 512 + 2e-3 * mx * inv);
      } else {
        const double err = std::fabs(val_of(v) - r) / (mx > 0 ? mx : 1);
        worst = std::fmax(worst, err);
        off += !(err <= 1e-2);
      }
    }
  const bool ok = !touched && !unwritten && !off;
  std::printf("%s own %s %dx%dx%d act %d bias %d res %d after %d step %d: error %.3g of max %.3g, %lld off, "
              "%lld unwritten, %lld pad/guard values touched\n",
              ok ? "ok  " : "FAIL", tn, M, N, K, act, bias, res, after, step, worst, mx, off, unwritten, touched);
  failures += !ok;
  cudaFree(da); cudaFree(dw); cudaFree(dsa); cudaFree(dsw); cudaFree(db); cudaFree(dr); cudaFree(dc); cudaFree(dfx);
}

static void check_own_all(bool small) {
  /* M not a multiple of 128, N odd and past a 256 tile, K a multiple of 16
   * only (a partial 128-byte piece), several pieces, K = 0 (bias alone) */
  const int sizes[][3] = {{77, 300, 48}, {200, 515, 784}, {130, 257, 16}, {5, 40, 0}};
  for (int s = 0; s < (small ? 2 : 4); s++) {
    const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
    check_own<float, float>(M, N, K, NNC_GWF_NONE, false, false, false, 1);
    check_own<float, float>(M, N, K, NNC_GWF_GELU_TANH, true, false, false, 0);
    check_own<__nv_bfloat16, __nv_bfloat16>(M, N, K, NNC_GWF_RELU, true, true, false, 1);
    check_own<__nv_bfloat16, __nv_bfloat16>(M, N, K, NNC_GWF_GELU_TANH, true, true, true, 1);
    check_own<__nv_bfloat16, __nv_bfloat16>(M, N, K, NNC_GWF_NONE, true, true, false, 0);
    check_own<__nv_fp8_e4m3, __nv_bfloat16>(M, N, K, NNC_GWF_GELU_TANH, true, false, false, 1);
    check_own<__nv_fp8_e4m3, __nv_bfloat16>(M, N, K, NNC_GWF_NONE, false, true, false, 0);
    check_own<__nv_fp8_e4m3, float>(M, N, K, NNC_GWF_RELU, true, true, true, 1);
  }
  /* the tied head's N: rows of 50257 (not 16-byte aligned) */
  check_own<float, float>(small ? 33 : 150, 50257, 32, NNC_GWF_NONE, false, false, false, 1);
  if (!small) check_own<__nv_bfloat16, __nv_bfloat16>(131, 50257, 48, NNC_GWF_NONE, true, false, false, 1);
}

/* Random e4m3 bytes (no NaN) and bf16 values on the device, for timings. */
__global__ void fill_e4m3(unsigned char *p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    unsigned char b = (unsigned char)(h & 0xef);   /* exponent below the top: |v| < 256, never NaN */
    p[i] = b;
  }
}
__global__ void fill_bf16(__nv_bfloat16 *p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16_rn(((float)(h & 0xffff) / 65536.0f - 0.5f));
  }
}

/* GPT-2 124M's GEMMs at B=8 T=1024 (M = 8192), random operands: ours,
 * cuBLASLt FP8 with its scale vectors (path 1; "ran path 3" where it has
 * no algorithm), cuBLASLt bf16 with the same epilogue, and for the head
 * nnc's bf16 wgmma GEMM (what the bf16 model runs). Median of 20. */
static void time_own(nnrt_cuda_blas *h) {
  const int M = 8192;
  struct shape { const char *name; int N, K; bool bias, res; int act; };
  const shape shapes[] = {{"head", 50257, 768, false, false, NNRT_EPI_NONE},
                          {"c_attn", 2304, 768, true, false, NNRT_EPI_NONE},
                          {"attn.c_proj", 768, 768, true, true, NNRT_EPI_NONE},
                          {"c_fc", 3072, 768, true, false, NNRT_EPI_GELU_TANH},
                          {"mlp.c_proj", 768, 3072, true, true, NNRT_EPI_NONE}};
  unsigned char *a, *w, *q;
  float *sa, *sw, *tmp, *fx;
  __nv_bfloat16 *ab, *wb, *bias, *res;
  void *d;
  CK(cudaMalloc(&a, (size_t)M * 3072)); CK(cudaMalloc(&w, (size_t)50257 * 768));
  CK(cudaMalloc(&q, (size_t)M * 3072));
  CK(cudaMalloc(&sa, M * 4)); CK(cudaMalloc(&sw, 50257 * 4)); CK(cudaMalloc(&fx, 4));
  CK(cudaMalloc(&tmp, nnc_cuda_fp8_tmp_bytes(M, 50257)));
  CK(cudaMalloc(&ab, (size_t)M * 3072 * 2)); CK(cudaMalloc(&wb, (size_t)50257 * 768 * 2));
  CK(cudaMalloc(&bias, 50257 * 2)); CK(cudaMalloc(&res, (size_t)M * 3072 * 2));
  CK(cudaMalloc(&d, (size_t)M * 50257 * 4));
  fill_e4m3<<<1024, 256>>>(a, (long long)M * 3072, 1);
  fill_e4m3<<<1024, 256>>>(w, (long long)50257 * 768, 2);
  fill_bf16<<<1024, 256>>>(ab, (long long)M * 3072, 3);
  fill_bf16<<<1024, 256>>>(wb, (long long)50257 * 768, 4);
  fill_bf16<<<1024, 256>>>(bias, 50257, 5);
  fill_bf16<<<1024, 256>>>(res, (long long)M * 3072, 6);
  CK(cudaGetLastError());
  std::vector<float> sc(50257, 1.0f / 4096);
  CK(cudaMemcpy(sa, sc.data(), M * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sw, sc.data(), 50257 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(fx, sc.data(), 4, cudaMemcpyHostToDevice));
  for (const shape &x : shapes) {
    const double flop = 2.0 * M * x.N * x.K;
    for (int f32 = (x.res ? 0 : 1); f32 >= 0; f32--) {
      if (f32 && std::strcmp(x.name, "head") != 0) continue;   /* f32 out: the logits only */
      const char *on = f32 ? "f32" : "bf16";
      for (int path = 3; path >= 1; path -= 2) {
        if (path == 1 && x.N % 16) {   /* rows of D not 16-byte aligned */
          std::printf("time %s 8192x%dx%d %s out: fp8 cuBLASLt: no algorithm (N %% 16 != 0)\n", x.name, x.N, x.K, on);
          continue;
        }
        double ms;
        int p = path;
        if (f32) {
          nnc_cuda_fp8_gemm_args<float> f = {};
          f.M = M; f.N = x.N; f.K = x.K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw;
          f.d = (float *)d; f.alpha = 1; f.act = x.act; f.tmp = tmp;
          ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8(h, f, &p, 0, &e) == NNC_CUDA_OK; });
        } else {
          nnc_cuda_fp8_gemm_args<__nv_bfloat16> f = {};
          f.M = M; f.N = x.N; f.K = x.K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw;
          f.bias = x.bias ? bias : nullptr; f.residual = x.res ? res : nullptr; f.act_after_residual = false;
          f.d = (__nv_bfloat16 *)d; f.alpha = 1; f.act = x.act; f.tmp = tmp;
          ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8(h, f, &p, 0, &e) == NNC_CUDA_OK; });
        }
        std::printf("time %s 8192x%dx%d %s out: fp8 %s: %.4f ms, %.0f TFLOP/s\n", x.name, x.N, x.K, on,
                    path == 3 ? "ours (path 3)" : "cuBLASLt (path 1)", ms,
                    flop / ms / 1e9);
      }
      nnrt_cuda_gemm g = {};
      g.M = M; g.N = x.N; g.K = x.K; g.batch = 1; g.ab = NNRT_DT_BF16; g.out = f32 ? NNRT_DT_F32 : NNRT_DT_BF16;
      g.A = ab; g.lda = x.K; g.B = wb; g.ldb = x.K; g.b_trans = true; g.D = d; g.ldd = x.N;
      g.stride_d = (long long)M * x.N; g.alpha = 1; g.epilogue = x.act;
      g.bias = x.bias ? bias : nullptr;
      g.residual = x.res ? res : nullptr; g.stride_r = (long long)M * x.N;
      double ms = median_ms([&] { nnrt_error e = {}; return nnrt_cuda_gemm_run(h, &g, 0, &e) == NNRT_OK; });
      std::printf("time %s 8192x%dx%d %s out: bf16 cuBLASLt: %.4f ms, %.0f TFLOP/s\n", x.name, x.N, x.K, on, ms,
                  ms > 0 ? flop / ms / 1e9 : 0.0);
      if (std::strcmp(x.name, "head") == 0) {
        auto own16 = [&](auto *out) {
          nnc_cuda_gemm_wgmma_args<__nv_bfloat16, std::remove_pointer_t<decltype(out)>> b = {};
          b.M = M; b.N = x.N; b.K = x.K; b.a = ab; b.lda = x.K; b.b = wb; b.ldb = x.K; b.alpha = 1;
          b.c = out; b.ldc = x.N;
          return median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_wgmma(b, 0, &e) == NNC_CUDA_OK; });
        };
        ms = f32 ? own16((float *)d) : own16((__nv_bfloat16 *)d);
        std::printf("time %s 8192x%dx%d %s out: bf16 nnc wgmma: %.4f ms, %.0f TFLOP/s\n", x.name, x.N, x.K, on, ms,
                    flop / ms / 1e9);
      }
    }
    if (std::strcmp(x.name, "c_fc") == 0) {
      nnc_cuda_fp8_gemm_args<__nv_bfloat16> f = {};
      f.M = M; f.N = x.N; f.K = x.K; f.a = a; f.a_scale = sa; f.w = w; f.w_scale = sw; f.bias = bias;
      f.alpha = 1; f.act = x.act;
      bool wrote = false;
      double ms = median_ms([&] { nnc_cuda_error e; return nnc_cuda_gemm_fp8_e4m3(f, q, fx, &wrote, 0, &e) == NNC_CUDA_OK; });
      std::printf("time c_fc 8192x3072x768 e4m3 out: fp8 ours: %.4f ms, %.0f TFLOP/s\n", ms, flop / ms / 1e9);
    }
  }
  cudaFree(a); cudaFree(w); cudaFree(q); cudaFree(sa); cudaFree(sw); cudaFree(fx); cudaFree(tmp);
  cudaFree(ab); cudaFree(wb); cudaFree(bias); cudaFree(res); cudaFree(d);
}
#endif

int main(int argc, char **argv) {
  bool small = false, timing = false;
  for (int i = 1; i < argc; i++) {
    small |= std::strcmp(argv[i], "--small") == 0;
    timing |= std::strcmp(argv[i], "--time") == 0;
  }
  int dev = 0, n = 0;
  cudaDeviceProp prop;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return std::printf("no GPU: skipped\n"), 77;
  CK(cudaGetDeviceProperties(&prop, dev));
  if (prop.major * 10 + prop.minor < 89) return std::printf("compute capability below 8.9: skipped\n"), 77;
  check_weight(48, 80, false);
  check_weight(48, 80, true);
  if (!small) check_weight(768, 2304, true);
  /* the warp kernel (rows of 16-byte vectors, up to 16 a lane) and the block kernel (100: not whole vectors) */
  for (int norm = 0; norm < 3; norm++) {
    check_rows((nnc_fp8_norm)norm, small ? 5 : 37, small ? 64 : 768);
    check_rows((nnc_fp8_norm)norm, 5, 100);
    if (!small) check_rows((nnc_fp8_norm)norm, 9, 3072);
  }
  check_rows_fixed(7, 64);    /* the warp kernel */
  check_rows_fixed(7, 100);   /* the block kernel */
  nnrt_cuda_blas *h = nullptr;
  nnrt_error re = {};
  if (nnrt_cuda_blas_create(0, &h, &re)) return std::printf("FAIL blas: %s\n", re.msg), 1;
  const int sizes[][3] = {{17, 48, 64}, {64, 128, 128}, {129, 80, 768}};
  /* path 3 (our kernel) only in sm_90a builds */
  for (int path = 0; path <= (nnc_fp8_has_own() ? 3 : 2); path += path == 0 ? 2 : 1)
    for (int s = 0; s < (small ? 1 : 3); s++) {
      const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
      check_gemm<__nv_bfloat16>(h, M, N, K, NNRT_EPI_NONE, false, false, false, path);
      check_gemm<__nv_bfloat16>(h, M, N, K, NNRT_EPI_NONE, true, true, false, path);
      check_gemm<__nv_bfloat16>(h, M, N, K, NNRT_EPI_GELU_TANH, true, false, false, path);
      check_gemm<__nv_bfloat16>(h, M, N, K, NNRT_EPI_RELU, true, true, true, path);
      check_gemm<float>(h, M, N, K, NNRT_EPI_NONE, false, false, false, path);
    }
  /* the fallback in two slices of columns: 4096 x 1040 f32 is more than NNC_FP8_TMP_BYTES */
  if (!small) check_gemm<float>(h, 4096, 1040, 64, NNRT_EPI_NONE, false, false, false, 2);
  /* rows of D not 16-byte aligned: cuBLASLt has no algorithm; path 0 finds
   * our kernel on sm_90a (ran path 3). Other builds refuse it (the
   * fallback's cuBLASLt slices need aligned rows too), and never meet it:
   * passes/quantize.c gives e4m3 weights only to N a multiple of 16 */
  if (nnc_fp8_has_own()) {
    check_gemm<float>(h, 19, 101, 64, NNRT_EPI_NONE, true, false, false, 0);
    check_gemm<__nv_bfloat16>(h, 19, 101, 64, NNRT_EPI_GELU_TANH, true, false, false, 0);
  }
#if defined(NNC_CUDA_SM90A)
  check_own_all(small);
  if (timing) time_own(h);
#endif
  check_gemm_e4m3_out(33, 48, 64);
  if (!small) check_gemm_e4m3_out(129, 80, 768);
  probe_e4m3_out(h);
  if (timing) time_cfc(h);
  if (timing) time_head(h);
  nnrt_cuda_blas_destroy(h);
  std::printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
