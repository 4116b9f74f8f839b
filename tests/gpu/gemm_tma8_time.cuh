/* tests/gpu/gemm_tma8_time.cuh — test_gemm_tma8 --time: gemm_tma8.cuh on
 * e4m3 and s8 operands against what nnc runs today on the GEMMs of GPT-2
 * (M = B T = 8192) and BERT (M = 4096) (gemm_tma_time.cuh's shapes, each
 * with its model's epilogue): cuBLASLt FP8 with its row/channel scale
 * vectors (fp8.cuh's path 1; the head, N = 50257, has no algorithm there,
 * so it runs on N = 50304, the padded vocabulary), gemm_wgmma_fp8.cuh
 * (called directly), gemm_w8a8.cuh, and the bf16 GEMMs (gemm_tma.cuh, cuBLASLt bf16,
 * gemm_tma_time.cuh's lt_gemm). Random operands, a scale per row of A.
 * Times are medians of 20 CUDA-event timings after 5 untimed runs;
 * TFLOP/s = 2 M N K / time. FP8's epilogues have no erf GELU: BERT's
 * ffn.in runs cuBLASLt FP8 and gemm_wgmma_fp8 with the tanh one (marked).
 * Checks, through the adapters a folder calls (fp8.cuh's path 3 and
 * w8a8.cuh's nnc_cuda_w8a8_gemm, both gemm_tma8 on sm_90a): max |ours -
 * gemm_wgmma_fp8| / max |gemm_wgmma_fp8| over all of C (e4m3, with the
 * tanh GELU where the row has erf) and max |ours - gemm_w8a8| / max
 * |gemm_w8a8| (s8), each under 1e-2. One Markdown table, last. */
#ifndef NNC_GEMM_TMA8_TIME_CUH
#define NNC_GEMM_TMA8_TIME_CUH

#include "fp8.cuh"
#include "gemm_tma8.cuh"
#include "gemm_tma_time.cuh"
#include "w8a8.cuh"

namespace gemm_tma8_time {

using gemm_tma_time::cell;
using gemm_tma_time::shape;

/* 8-bit operands from a hash of the index: e4m3 of a uniform value in
 * [-1, 1), or an int8 in [-127, 127]. */
template <typename T8> __global__ void fill8(T8 *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 0x9E3779B1u ^ seed;
    h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
    const float u = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
    if constexpr (std::is_same<T8, signed char>::value)
      p[i] = (signed char)__float2int_rn(u * 127.0f);
    else
      p[i] = __nv_fp8_e4m3(u);
  }
}

template <typename T8> static void fill8_dev(T8 *p, size_t n, uint32_t seed) {
  fill8<<<1024, 256>>>(p, n, seed);
  CK(cudaGetLastError());
}

static float *dev_floats(size_t n, float v) {
  std::vector<float> h(n, v);
  float *d;
  CK(cudaMalloc(&d, n * sizeof(float)));
  CK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

/* fp8.cuh's epilogue codes (none, relu, tanh GELU): erf GELU as tanh. */
static int fp8_act(nnc_cuda_act a) {
  return a == NNC_CUDA_ACT_NONE ? NNRT_EPI_NONE : a == NNC_CUDA_ACT_RELU ? NNRT_EPI_RELU : NNRT_EPI_GELU_TANH;
}

/* One shape: every variant timed, then the checks; one table row. */
template <typename TO> static bool one(nnrt_cuda_blas *h, const shape &s, int sms, char *row, size_t rown) {
  using E4 = __nv_fp8_e4m3;
  using B16 = __nv_bfloat16;
  const int Np = (s.N + 15) / 16 * 16; /* cuBLASLt FP8's rows of C: 16-byte aligned */
  const size_t na = (size_t)s.M * s.K, nb = (size_t)Np * s.K, nc = (size_t)s.M * Np;
  E4 *a8, *b8;
  signed char *ai, *bi;
  B16 *a16, *b16, *bias16;
  TO *res = nullptr, *c, *c2, *c3;
  CK(cudaMalloc(&a8, na));
  CK(cudaMalloc(&b8, nb));
  CK(cudaMalloc(&ai, na));
  CK(cudaMalloc(&bi, nb));
  CK(cudaMalloc(&a16, na * sizeof(B16)));
  CK(cudaMalloc(&b16, nb * sizeof(B16)));
  CK(cudaMalloc(&bias16, Np * sizeof(B16)));
  CK(cudaMalloc(&c, nc * sizeof(TO)));
  CK(cudaMalloc(&c2, nc * sizeof(TO)));
  CK(cudaMalloc(&c3, nc * sizeof(TO)));
  fill8_dev(a8, na, 1u);
  fill8_dev(b8, nb, 2u);
  fill8_dev(ai, na, 3u);
  fill8_dev(bi, nb, 4u);
  gemm_tma_time::fill_dev(a16, na, 5u, 1.0f);
  gemm_tma_time::fill_dev(b16, nb, 6u, 0.05f);
  gemm_tma_time::fill_dev(bias16, (size_t)Np, 7u, 0.5f);
  if (s.residual) {
    CK(cudaMalloc(&res, nc * sizeof(TO)));
    gemm_tma_time::fill_dev(res, (size_t)s.M * s.N, 8u, 1.0f);
  }
  /* |C| about 1: e4m3 sums of sqrt(K) / 3, s8 ones 127^2 times that */
  float *sa8 = dev_floats(s.M, 1.0f / 16), *sb8 = dev_floats(Np, 1.0f / 16);
  float *sai = dev_floats(s.M, 1.0f / (16 * 127)), *sbi = dev_floats(Np, 1.0f / (16 * 127));
  float *tmp;
  CK(cudaMalloc(&tmp, nnc_cuda_fp8_tmp_bytes(s.M, Np)));
  const bool has_bias = !s.f32_out; /* the head has none; every other row's TO is bf16 */
  const TO *bias = has_bias ? reinterpret_cast<const TO *>(bias16) : nullptr;
  const bool epi = s.act != NNC_CUDA_ACT_NONE || s.residual;
  nnc_cuda_error err;

  auto tma8 = [&](auto *a, auto *b, const float *sa, const float *sb, nnc_cuda_act act, int tile_n, TO *out) {
    using T8 = std::remove_const_t<std::remove_pointer_t<decltype(a)>>;
    nnc_cuda_gemm_tma8_args<T8, TO> g = {};
    g.M = s.M, g.N = s.N, g.K = s.K, g.a = a, g.lda = s.K, g.a_scale = sa, g.a_scale_step = 1;
    g.b = b, g.ldb = s.K, g.b_scale = sb, g.bias = bias, g.residual = res, g.ldr = s.N, g.act = act;
    g.alpha = 1.0f, g.c = out, g.ldc = s.N, g.tile_n = tile_n;
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma8<T8, TO, true>(g, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_tma8<T8, TO, false>(g, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  tma8: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  };
  const double t8 = median_ms([&] { return tma8(a8, b8, sa8, sb8, s.act, 0, c); });
  const double t8_128 = median_ms([&] { return tma8(a8, b8, sa8, sb8, s.act, 128, c); });
  const double t8_256 = median_ms([&] { return tma8(a8, b8, sa8, sb8, s.act, 256, c); });
  const double ti = median_ms([&] { return tma8(ai, bi, sai, sbi, s.act, 0, c); });

  /* fp8.cuh's GEMM on path p (1: cuBLASLt FP8, on Np columns; 3: nnc's own, gemm_tma8 in this build) */
  auto fp8 = [&](int p, int n, TO *out) {
    nnc_cuda_fp8_gemm_args<TO> f = {};
    f.M = s.M, f.N = n, f.K = s.K, f.a = reinterpret_cast<const unsigned char *>(a8), f.a_scale = sa8;
    f.w = reinterpret_cast<const unsigned char *>(b8), f.w_scale = sb8, f.bias = bias;
    f.residual = n == s.N ? res : nullptr, f.d = out, f.alpha = 1.0f, f.act = fp8_act(s.act), f.tmp = tmp;
    const nnc_cuda_status st = nnc_cuda_gemm_fp8(h, f, &p, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  fp8 path %d: %s\n", p, err.msg);
    return st == NNC_CUDA_OK;
  };
  /* a residual needs rows of N: only rows that are not padded have one */
  const double tlt8 = s.residual && Np != s.N ? -1 : median_ms([&] { return fp8(1, Np, c3); });
  nnc_cuda_gemm_wgmma_fp8_args<TO, TO> wf = {};
  wf.M = s.M, wf.N = s.N, wf.K = s.K, wf.a = a8, wf.lda = s.K, wf.a_scale = sa8, wf.a_scale_step = 1;
  wf.b = b8, wf.ldb = s.K, wf.b_scale = sb8, wf.bias = bias, wf.residual = res, wf.ldr = s.N;
  wf.act = s.act == NNC_CUDA_ACT_NONE ? NNC_GWF_NONE : s.act == NNC_CUDA_ACT_RELU ? NNC_GWF_RELU : NNC_GWF_GELU_TANH;
  wf.alpha = 1.0f, wf.c = c2, wf.ldc = s.N;
  const double twf = median_ms([&] {
    const nnc_cuda_status st = nnc_cuda_gemm_wgmma_fp8(wf, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  wgmma_fp8: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  });

  /* the e4m3 check: fp8.cuh's path 3 (gemm_tma8 through its adapter) against gemm_wgmma_fp8 (c2) */
  const bool ok8 = fp8(3, s.N, c);
  CK(cudaDeviceSynchronize());
  const double rel8 = ok8 ? gemm_tma_time::rel_diff(c, c2, (size_t)s.M * s.N) : INFINITY;

  nnc_cuda_w8a8_gemm_args<TO> w = {};
  w.M = s.M, w.N = s.N, w.K = s.K, w.a = ai, w.a_scale = sai, w.w = bi, w.w_scale = sbi, w.bias = bias;
  w.residual = res, w.d = c2, w.alpha = 1.0f, w.act = s.act;
  const double tw = median_ms([&] {
    const nnc_cuda_status st = nnc_cuda_gemm_w8a8(w, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  w8a8: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  });
  /* the s8 check: w8a8.cuh's nnc_cuda_w8a8_gemm (gemm_tma8 through its adapter) against mma.sync (c2) */
  w.d = c;
  const bool oki = nnc_cuda_w8a8_gemm(w, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  CK(cudaDeviceSynchronize());
  const double reli = oki ? gemm_tma_time::rel_diff(c, c2, (size_t)s.M * s.N) : INFINITY;

  nnc_cuda_gemm_tma_args<B16, TO> g16 = {};
  g16.M = s.M, g16.N = s.N, g16.K = s.K, g16.a = a16, g16.lda = s.K, g16.b = b16, g16.ldb = s.K;
  g16.bias = has_bias ? bias16 : nullptr, g16.residual = res, g16.ldr = s.N, g16.act = s.act, g16.alpha = 1.0f;
  g16.c = c3, g16.ldc = s.N;
  const double t16 = median_ms([&] {
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma<B16, TO, true>(g16, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_tma<B16, TO, false>(g16, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  tma bf16: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  });
  double tlt = -1;
  {
    gemm_tma_time::lt_gemm lt(s, has_bias ? bias16 : nullptr);
    if (lt.ok) tlt = median_ms([&] { return lt.run(a16, b16, res, c3); });
    else std::printf("  cuBLASLt bf16: no algorithm for %s\n", s.name);
    CK(cudaDeviceSynchronize());
  }

  const bool ok = t8 > 0 && t8_128 > 0 && t8_256 > 0 && ti > 0 && rel8 <= 1e-2 && reli <= 1e-2;
  char x8[48], x8a[48], x8b[48], xi[48], xlt8[48], xwf[48], xw[48], x16[48], xlt[48];
  cell(x8, sizeof x8, s, t8);
  cell(x8a, sizeof x8a, s, t8_128);
  cell(x8b, sizeof x8b, s, t8_256);
  cell(xi, sizeof xi, s, ti);
  if (tlt8 > 0) snprintf(xlt8, sizeof xlt8, "%.4f%s", tlt8, Np != s.N ? " (N 50304)" : "");
  else snprintf(xlt8, sizeof xlt8, "none");
  cell(xwf, sizeof xwf, s, twf);
  cell(xw, sizeof xw, s, tw);
  cell(x16, sizeof x16, s, t16);
  cell(xlt, sizeof xlt, s, tlt);
  auto ratio = [](double num, double den) { return num > 0 && den > 0 ? num / den : 0.0; };
  snprintf(row, rown,
           "| %s%s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.1e / %.1e%s |",
           s.name, s.act == NNC_CUDA_ACT_GELU_ERF ? " (fp8 refs: tanh gelu)" : "", nnc_gt::pick_bn(s.M, s.N, sms), x8,
           x8a, x8b, xlt8, xwf, xi, xw, x16, xlt, ratio(tlt, t8), ratio(tlt8, t8), ratio(tlt, ti), ratio(tw, ti), rel8,
           reli, ok ? "" : " FAIL");
  std::printf("%s\n", row);
  for (void *p : {(void *)a8, (void *)b8, (void *)ai, (void *)bi, (void *)a16, (void *)b16, (void *)bias16, (void *)c,
                  (void *)c2, (void *)c3, (void *)res, (void *)sa8, (void *)sb8, (void *)sai, (void *)sbi, (void *)tmp})
    if (p) CK(cudaFree(p));
  return ok;
}

inline bool run() {
  nnrt_cuda_blas *h = nullptr;
  nnrt_error re = {};
  if (nnrt_cuda_blas_create(0, &h, &re)) return std::printf("FAIL blas: %s\n", re.msg), false;
  const bool ok = gemm_tma_time::table<768>(
      "gemm_tma8",
      "| GEMM (N x K, epilogue) | tile | tma8 e4m3 | tma8 e4m3 128 | tma8 e4m3 256 | cuBLASLt fp8 | wgmma_fp8 | "
      "tma8 s8 | w8a8 | tma bf16 | cuBLASLt bf16 | bf16 Lt / tma8 e4m3 | fp8 Lt / tma8 e4m3 | bf16 Lt / tma8 s8 | "
      "w8a8 / tma8 s8 | check e4m3 / s8 |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      [&](const shape &s, int sms, char *row, size_t n) {
        return s.f32_out ? one<float>(h, s, sms, row, n) : one<__nv_bfloat16>(h, s, sms, row, n);
      });
  nnrt_cuda_blas_destroy(h);
  return ok;
}

}  // namespace gemm_tma8_time

#endif
