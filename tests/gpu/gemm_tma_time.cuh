/* tests/gpu/gemm_tma_time.cuh — test_gemm_tma --time: gemm_tma.cuh against
 * cuBLASLt (bf16, its default heuristic's first algorithm, 32 MB of
 * workspace) and gemm_wgmma.cuh on the GEMMs of GPT-2 (M = B T = 8192) and
 * BERT (M = 4096), bf16 operands on random data, each with its model's
 * epilogue. Times are medians of 20 CUDA-event timings after 5 untimed
 * runs (gpu_test.cuh); TFLOP/s = 2 M N K / time. Ours runs with the
 * launcher's tile (auto) and each tile forced; the head also with streaming
 * stores. "check": max |ours - wgmma| / max |wgmma| over all of C (the same
 * epilogue, wgmma tested by test_gemm_wgmma), which must stay under 1e-2.
 * cuBLASLt has no erf GELU: BERT's row times its tanh GELU (marked). One
 * table, last, in Markdown. */
#ifndef NNC_GEMM_TMA_TIME_CUH
#define NNC_GEMM_TMA_TIME_CUH

#include <cublasLt.h>

#include <cstdint>
#include <cstdio>

#include "gemm_tma.cuh"
#include "gemm_wgmma.cuh"
#include "gpu_test.cuh"

namespace gemm_tma_time {

struct shape {
  const char *name;
  int M, N, K;
  nnc_cuda_act act;
  bool residual, f32_out;
};

static const shape SHAPES[] = {
    {"gpt2 c_attn 2304x768 +bias", 8192, 2304, 768, NNC_CUDA_ACT_NONE, false, false},
    {"gpt2 attn.c_proj 768x768 +bias+res", 8192, 768, 768, NNC_CUDA_ACT_NONE, true, false},
    {"gpt2 c_fc 3072x768 +bias+gelu", 8192, 3072, 768, NNC_CUDA_ACT_GELU_TANH, false, false},
    {"gpt2 mlp.c_proj 768x3072 +bias+res", 8192, 768, 3072, NNC_CUDA_ACT_NONE, true, false},
    {"gpt2 lm_head 50257x768 f32", 8192, 50257, 768, NNC_CUDA_ACT_NONE, false, true},
    {"bert qkv 1152x384 +bias", 4096, 1152, 384, NNC_CUDA_ACT_NONE, false, false},
    {"bert attn.out 384x384 +bias+res", 4096, 384, 384, NNC_CUDA_ACT_NONE, true, false},
    {"bert ffn.in 1536x384 +bias+erf-gelu", 4096, 1536, 384, NNC_CUDA_ACT_GELU_ERF, false, false},
    {"bert ffn.out 384x1536 +bias+res", 4096, 384, 1536, NNC_CUDA_ACT_NONE, true, false},
};

/* Uniform values in [-scale, scale) from a hash of the index. */
template <typename X> __global__ void fill(X *p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 0x9E3779B1u ^ seed;
    h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
    p[i] = nnc_dtype<X>::store(((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale);
  }
}

/* out[0] = max |a - b| (inf for a NaN), out[1] = max |b|, as float bits
 * (non-negative floats order as unsigned integers). */
template <typename X> __global__ void maxdiff(const X *a, const X *b, size_t n, unsigned *out) {
  float d = 0.0f, r = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float x = nnc_dtype<X>::load(a[i]), y = nnc_dtype<X>::load(b[i]);
    const float e = fabsf(x - y);
    d = e != e ? INFINITY : fmaxf(d, e);
    r = fmaxf(r, fabsf(y));
  }
  d = nnc_warp_reduce<nnc_max_op, 32>(d);
  r = nnc_warp_reduce<nnc_max_op, 32>(r);
  if (threadIdx.x % 32 == 0) atomicMax(&out[0], __float_as_uint(d)), atomicMax(&out[1], __float_as_uint(r));
}

template <typename X> static void fill_dev(X *p, size_t n, uint32_t seed, float scale) {
  fill<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
}

template <typename X> static double rel_diff(const X *a, const X *b, size_t n) {
  unsigned *d, h[2];
  CK(cudaMalloc(&d, sizeof h));
  CK(cudaMemset(d, 0, sizeof h));
  maxdiff<<<1024, 256>>>(a, b, n, d);
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  float e, r;
  memcpy(&e, &h[0], 4);
  memcpy(&r, &h[1], 4);
  return r > 0 ? e / r : e;
}

/* cuBLASLt's D = alpha B^T-major product + bias (+ residual as C with beta
 * 1) in column-major terms: D^T (N x M, ld ldc) = op_T(B) (N x K) op_N(A^T) (K x M). */
struct lt_gemm {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulHeuristicResult_t heur = {};
  void *ws = nullptr;
  size_t ws_size = 32u << 20;
  bool ok = false;

  lt_gemm(const shape &s, const void *bias) {
    const cudaDataType_t tc = s.f32_out ? CUDA_R_32F : CUDA_R_16BF, tb = CUDA_R_16BF;
    const cublasOperation_t ta = CUBLAS_OP_T, tn = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = s.act == NNC_CUDA_ACT_NONE ? CUBLASLT_EPILOGUE_DEFAULT : CUBLASLT_EPILOGUE_GELU;
    if (bias) epi = s.act == NNC_CUDA_ACT_NONE ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    CK(cudaMalloc(&ws, ws_size));
    cublasLtMatmulPreference_t pref = nullptr;
    int found = 0;
    ok = cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof tn) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS &&
         (!bias ||
          (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ==
               CUBLAS_STATUS_SUCCESS &&
           cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &tb, sizeof tb) ==
               CUBLAS_STATUS_SUCCESS)) &&
         cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.K, s.N, s.K) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.K, s.M, s.K) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&lc, tc, s.N, s.M, s.N) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                              sizeof ws_size) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &heur, &found) == CUBLAS_STATUS_SUCCESS &&
         found == 1;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
  bool run(const void *a, const void *b, const void *res, void *c) const {
    const float alpha = 1.0f, beta = res ? 1.0f : 0.0f;
    return cublasLtMatmul(h, op, &alpha, b, la, a, lb, &beta, res ? res : c, lc, c, lc, &heur.algo, ws, ws_size,
                          (cudaStream_t)0) == CUBLAS_STATUS_SUCCESS;
  }
  ~lt_gemm() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
    if (h) cublasLtDestroy(h);
    if (ws) CK(cudaFree(ws));
  }
};

static double tflops(const shape &s, double ms) { return ms > 0 ? 2.0 * s.M * s.N * s.K / (ms * 1e-3) / 1e12 : 0; }

static void cell(char *buf, size_t n, const shape &s, double ms) {
  if (ms > 0)
    snprintf(buf, n, "%.4f (%.0f)", ms, tflops(s, ms));
  else
    snprintf(buf, n, "failed");
}

/* One shape: every variant timed, then the check; one table row. */
template <typename TO> static bool one(const shape &s, int sms, char *row, size_t rown) {
  using T = __nv_bfloat16;
  const size_t na = (size_t)s.M * s.K, nb = (size_t)s.N * s.K, nc = (size_t)s.M * s.N;
  T *a, *b, *bias;
  TO *res = nullptr, *c, *c2;
  CK(cudaMalloc(&a, na * sizeof(T)));
  CK(cudaMalloc(&b, nb * sizeof(T)));
  CK(cudaMalloc(&bias, s.N * sizeof(T)));
  CK(cudaMalloc(&c, nc * sizeof(TO)));
  CK(cudaMalloc(&c2, nc * sizeof(TO)));
  fill_dev(a, na, 1u, 1.0f);
  fill_dev(b, nb, 2u, 0.05f);
  fill_dev(bias, (size_t)s.N, 3u, 0.5f);
  if (s.residual) {
    CK(cudaMalloc(&res, nc * sizeof(TO)));
    fill_dev(res, nc, 4u, 1.0f);
  }
  const bool has_bias = !s.f32_out; /* the head has none */
  const bool epi = s.act != NNC_CUDA_ACT_NONE || s.residual;
  nnc_cuda_error err;
  bool ok = true;

  nnc_cuda_gemm_tma_args<T, TO> g = {};
  g.M = s.M, g.N = s.N, g.K = s.K, g.a = a, g.lda = s.K, g.b = b, g.ldb = s.K;
  g.bias = has_bias ? bias : nullptr, g.residual = res, g.ldr = s.N, g.act = s.act, g.alpha = 1.0f;
  g.c = c, g.ldc = s.N;
  auto ours = [&](int tile_n, bool stream_c) {
    nnc_cuda_gemm_tma_args<T, TO> x = g;
    x.tile_n = tile_n, x.stream_c = stream_c;
    return median_ms([&] {
      const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma<T, TO, true>(x, (cudaStream_t)0, &err)
                                     : nnc_cuda_gemm_tma<T, TO, false>(x, (cudaStream_t)0, &err);
      if (st != NNC_CUDA_OK) std::printf("  ours: %s\n", err.msg);
      return st == NNC_CUDA_OK;
    });
  };
  const double t_auto = ours(0, false), t128 = ours(128, false), t256 = ours(256, false);
  const double t_cs = s.f32_out ? ours(0, true) : -1;

  nnc_cuda_gemm_wgmma_args<T, TO> w = {};
  w.M = s.M, w.N = s.N, w.K = s.K, w.a = a, w.lda = s.K, w.b = b, w.ldb = s.K;
  w.bias = g.bias, w.residual = res, w.ldr = s.N, w.act = s.act, w.alpha = 1.0f, w.c = c2, w.ldc = s.N;
  const double t_wg = median_ms([&] {
    const nnc_cuda_status st = epi ? nnc_cuda_gemm_wgmma<T, TO, true>(w, (cudaStream_t)0, &err)
                                   : nnc_cuda_gemm_wgmma<T, TO, false>(w, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  wgmma: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  });

  double t_lt = -1;
  {
    TO *c3;
    CK(cudaMalloc(&c3, nc * sizeof(TO)));
    lt_gemm lt(s, has_bias ? bias : nullptr);
    if (lt.ok) t_lt = median_ms([&] { return lt.run(a, b, res, c3); });
    else std::printf("  cuBLASLt: no algorithm for %s\n", s.name);
    CK(cudaDeviceSynchronize());
    CK(cudaFree(c3));
  }

  /* the check: ours (auto tile) once more against wgmma's last output */
  const nnc_cuda_status st = epi ? nnc_cuda_gemm_tma<T, TO, true>(g, (cudaStream_t)0, &err)
                                 : nnc_cuda_gemm_tma<T, TO, false>(g, (cudaStream_t)0, &err);
  CK(cudaDeviceSynchronize());
  const double rel = st == NNC_CUDA_OK ? rel_diff(c, c2, nc) : INFINITY;
  ok = st == NNC_CUDA_OK && rel <= 1e-2 && t_auto > 0 && t128 > 0 && t256 > 0;

  char ca[48], c1[48], c2s[48], ccs[48], cw[48], cl[48];
  cell(ca, sizeof ca, s, t_auto);
  cell(c1, sizeof c1, s, t128);
  cell(c2s, sizeof c2s, s, t256);
  if (s.f32_out) cell(ccs, sizeof ccs, s, t_cs);
  else snprintf(ccs, sizeof ccs, "-");
  cell(cw, sizeof cw, s, t_wg);
  cell(cl, sizeof cl, s, t_lt);
  snprintf(row, rown, "| %s%s | %d | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.1e%s |", s.name,
           s.act == NNC_CUDA_ACT_GELU_ERF ? " (cuBLASLt: tanh gelu)" : "", nnc_gt::pick_bn(s.M, s.N, sms), ca, c1,
           c2s, ccs, cw, cl, t_auto > 0 && t_lt > 0 ? t_lt / t_auto : 0.0, t_auto > 0 && t_wg > 0 ? t_wg / t_auto : 0.0,
           rel, ok ? "" : " FAIL");
  std::printf("%s\n", row);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(bias));
  CK(cudaFree(c));
  CK(cudaFree(c2));
  if (res) CK(cudaFree(res));
  return ok;
}

/* The timing table of every shape: row(shape, sms, buf, size) writes a
 * shape's row and returns whether its checks passed; then the title (the
 * kernel's, the device's), head (the Markdown header and rule lines) and
 * the rows, last. ROW: the bytes of a row. */
template <size_t ROW, typename Row> static bool table(const char *kernel, const char *head, Row row) {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int n = (int)(sizeof SHAPES / sizeof SHAPES[0]);
  static char rows[sizeof SHAPES / sizeof SHAPES[0]][ROW];
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= row(SHAPES[i], sms, rows[i], sizeof rows[i]);
  std::printf("\n## %s on %s (%d SMs): ms (TFLOP/s), median of 20\n\n", kernel, prop.name, sms);
  std::printf("%s", head);
  for (int i = 0; i < n; ++i) std::printf("%s\n", rows[i]);
  std::printf("\n%s\n", ok ? "timing: every check passed" : "timing: FAILED (a launch failed or a check over 1e-2)");
  return ok;
}

inline bool run() {
  return table<512>("gemm_tma",
                    "| GEMM (N x K, epilogue) | auto tile | tma auto | tma 128 | tma 256 | tma auto, streaming C | "
                    "wgmma | cuBLASLt bf16 | cuBLASLt / tma | wgmma / tma | check |\n"
                    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
                    [](const shape &s, int sms, char *row, size_t n) {
                      return s.f32_out ? one<float>(s, sms, row, n) : one<__nv_bfloat16>(s, sms, row, n);
                    });
}

}  // namespace gemm_tma_time

#endif
