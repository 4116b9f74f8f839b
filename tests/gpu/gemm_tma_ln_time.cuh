/* tests/gpu/gemm_tma_ln_time.cuh — test_gemm_tma_ln --time: BERT's post-norm
 * GEMMs (M = B T = 4096, N = 384; K = 384 after attention, 1536 after the
 * FFN; and the latter at M = 8192, where the block form has one wave), bf16, hidden = LayerNorm(A B^T + bias + hidden) in place as nnc runs
 * them, three ways:
 * - fused: gemm_tma_ln.cuh (the launcher's form, and each form forced);
 * - gemm_tma.cuh (bias + residual epilogue, its own tile choice) into a
 *   scratch sum, then layernorm.cuh's row kernel into hidden;
 * - cuBLASLt (bias epilogue, the residual as C with beta 1; its heuristic's
 *   first algorithm) into the scratch sum, then the same row kernel.
 * Each pair's parts are timed alone too. L2 (50 MB on an H200) is kept
 * cold by rotating over enough copies of every operand (A, B, bias, gamma,
 * beta, hidden, scratch) to pass 120 MB; each launch (or pair of launches)
 * between two CUDA events queued behind a 100 us spin (so the host's
 * launch overhead is not counted), the median of 30 after 5 untimed. "check": max
 * |fused - (gemm_tma + row kernel)| / max |the latter| on the same inputs
 * (not in place), which must stay under 2e-2 (the unfused path rounds the
 * sum to bf16 before the norm). One table, last, in Markdown. */
#ifndef NNC_GEMM_TMA_LN_TIME_CUH
#define NNC_GEMM_TMA_LN_TIME_CUH

#include <algorithm>
#include <cstdio>
#include <vector>

#include "gemm_tma.cuh"
#include "gemm_tma_ln.cuh"
#include "gemm_tma_time.cuh"
#include "gpu_test.cuh"
#include "layernorm.cuh"

namespace gemm_tma_ln_time {

using T = __nv_bfloat16;

struct shape {
  const char *name;
  int M, N, K;
};

static const shape SHAPES[] = {
    {"bert attention.output 384x384 +bias+res, LN", 4096, 384, 384},
    {"bert output 384x1536 +bias+res, LN", 4096, 384, 1536},
    {"bert output, M = 8192 (128 row tiles)", 8192, 384, 1536},
};

/* One copy of a shape's operands. */
struct set {
  T *a, *b, *bias, *gamma, *beta, *hid, *sum;
};

/* Holds the GPU for ns nanoseconds: the host queues the timed launches
 * behind it, so the events measure the GPU's time alone (launches back to
 * back, as in a CUDA graph), not the host's launch overhead. */
__global__ void spin(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
}

/* The median of 30 event times (ms) of launch(i) for i = 0, 1, ... after 5
 * untimed; launch takes copy i % sets, so each run finds its operands
 * evicted from L2 by the others'. -1 when a launch returns false. */
template <class F> static double median_cold(int sets, F launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 35; i++) {
    spin<<<1, 1>>>(100000);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e0));
    if (!launch(i % sets)) return -1;
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 5) ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

static void cell(char *buf, size_t n, double ms) {
  if (ms > 0)
    snprintf(buf, n, "%.2f", ms * 1e3);
  else
    snprintf(buf, n, "failed");
}

/* One shape: every variant timed, then the check; one table row (us). */
static bool one(const shape &s, int sms, char *row, size_t rown) {
  const size_t na = (size_t)s.M * s.K, nb = (size_t)s.N * s.K, nc = (size_t)s.M * s.N;
  const size_t bytes = (na + nb + 2 * nc) * sizeof(T);
  const int sets = (int)std::min<size_t>(32, (120u << 20) / bytes + 1);
  std::vector<set> v(sets);
  for (int i = 0; i < sets; ++i) {
    set &x = v[i];
    CK(cudaMalloc(&x.a, na * sizeof(T)));
    CK(cudaMalloc(&x.b, nb * sizeof(T)));
    CK(cudaMalloc(&x.bias, s.N * sizeof(T)));
    CK(cudaMalloc(&x.gamma, s.N * sizeof(T)));
    CK(cudaMalloc(&x.beta, s.N * sizeof(T)));
    CK(cudaMalloc(&x.hid, nc * sizeof(T)));
    CK(cudaMalloc(&x.sum, nc * sizeof(T)));
    const uint32_t k = 16u * (uint32_t)i;
    gemm_tma_time::fill_dev(x.a, na, k + 1, 1.0f);
    gemm_tma_time::fill_dev(x.b, nb, k + 2, 0.05f);
    gemm_tma_time::fill_dev(x.bias, (size_t)s.N, k + 3, 0.5f);
    gemm_tma_time::fill_dev(x.gamma, (size_t)s.N, k + 4, 1.0f);
    gemm_tma_time::fill_dev(x.beta, (size_t)s.N, k + 5, 0.5f);
    gemm_tma_time::fill_dev(x.hid, nc, k + 6, 1.0f);
  }
  nnc_cuda_error err;
  const float eps = 1e-12f;
  auto fused = [&](const set &x, T *out, int split) {
    nnc_cuda_gemm_tma_ln_args<T> g = {};
    g.M = s.M, g.N = s.N, g.K = s.K, g.a = x.a, g.lda = s.K, g.b = x.b, g.ldb = s.K, g.bias = x.bias;
    g.residual = x.hid, g.ldr = s.N, g.gamma = x.gamma, g.beta = x.beta, g.eps = eps, g.c = out, g.ldc = s.N;
    g.split = split;
    const nnc_cuda_status st = nnc_cuda_gemm_tma_ln(g, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  fused: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  };
  auto tma = [&](const set &x) {
    nnc_cuda_gemm_tma_args<T, T> g = {};
    g.M = s.M, g.N = s.N, g.K = s.K, g.a = x.a, g.lda = s.K, g.b = x.b, g.ldb = s.K, g.bias = x.bias;
    g.residual = x.hid, g.ldr = s.N, g.alpha = 1.0f, g.c = x.sum, g.ldc = s.N;
    const nnc_cuda_status st = nnc_cuda_gemm_tma<T, T, true>(g, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  gemm_tma: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  };
  auto rows = [&](const set &x, T *out) {
    const nnc_cuda_status st =
        nnc_cuda_layernorm<T>(s.M, s.N, x.sum, s.N, x.gamma, x.beta, eps, out, s.N, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) std::printf("  layernorm: %s\n", err.msg);
    return st == NNC_CUDA_OK;
  };
  const gemm_tma_time::shape ls = {s.name, s.M, s.N, s.K, NNC_CUDA_ACT_NONE, true, false};
  gemm_tma_time::lt_gemm lt(ls, v[0].bias); /* the bias pointer is set per call below */
  auto blas = [&](const set &x) {
    if (cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias, sizeof x.bias) !=
        CUBLAS_STATUS_SUCCESS)
      return false;
    return lt.run(x.a, x.b, x.hid, x.sum);
  };

  const double t_auto = median_cold(sets, [&](int i) { return fused(v[i], v[i].hid, 0); });
  const double t_s1 = median_cold(sets, [&](int i) { return fused(v[i], v[i].hid, 1); });
  const double t_s2 = median_cold(sets, [&](int i) { return fused(v[i], v[i].hid, 2); });
  const double t_tma = median_cold(sets, [&](int i) { return tma(v[i]); });
  const double t_ln = median_cold(sets, [&](int i) { return rows(v[i], v[i].hid); });
  const double t_tma_ln = median_cold(sets, [&](int i) { return tma(v[i]) && rows(v[i], v[i].hid); });
  double t_lt = -1, t_lt_ln = -1;
  if (lt.ok) {
    t_lt = median_cold(sets, [&](int i) { return blas(v[i]); });
    t_lt_ln = median_cold(sets, [&](int i) { return blas(v[i]) && rows(v[i], v[i].hid); });
  } else {
    std::printf("  cuBLASLt: no algorithm for %s\n", s.name);
  }

  /* the check, not in place: both into fresh buffers from the same hidden state */
  T *y1, *y2;
  CK(cudaMalloc(&y1, nc * sizeof(T)));
  CK(cudaMalloc(&y2, nc * sizeof(T)));
  bool ok = fused(v[0], y1, 0) && tma(v[0]) && rows(v[0], y2);
  CK(cudaDeviceSynchronize());
  const double rel = ok ? gemm_tma_time::rel_diff(y1, y2, nc) : INFINITY;
  ok = ok && rel <= 2e-2 && t_auto > 0 && t_s1 > 0 && t_s2 > 0 && t_tma_ln > 0;
  CK(cudaFree(y1));
  CK(cudaFree(y2));

  const int split = nnc_gtl::pick_split((s.M + 63) / 64, sms, nnc_gtl::clusters_of<T, 192>());
  char ca[32], c1[32], c2[32], ct[32], cl[32], ctl[32], cb[32], cbl[32];
  cell(ca, sizeof ca, t_auto);
  cell(c1, sizeof c1, t_s1);
  cell(c2, sizeof c2, t_s2);
  cell(ct, sizeof ct, t_tma);
  cell(cl, sizeof cl, t_ln);
  cell(ctl, sizeof ctl, t_tma_ln);
  cell(cb, sizeof cb, t_lt);
  cell(cbl, sizeof cbl, t_lt_ln);
  snprintf(row, rown, "| %s | %d | %s | %s | %s | %s (%s + %s) | %s (%s + %s) | %.2f | %.2f | %.1e%s |", s.name, split,
           ca, c1, c2, ctl, ct, cl, cbl, cb, cl, t_auto > 0 && t_tma_ln > 0 ? t_tma_ln / t_auto : 0.0,
           t_auto > 0 && t_lt_ln > 0 ? t_lt_ln / t_auto : 0.0, rel, ok ? "" : " FAIL");
  std::printf("%s\n", row);
  for (set &x : v) {
    CK(cudaFree(x.a));
    CK(cudaFree(x.b));
    CK(cudaFree(x.bias));
    CK(cudaFree(x.gamma));
    CK(cudaFree(x.beta));
    CK(cudaFree(x.hid));
    CK(cudaFree(x.sum));
  }
  return ok;
}

inline bool run() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int n = (int)(sizeof SHAPES / sizeof SHAPES[0]);
  static char rows[sizeof SHAPES / sizeof SHAPES[0]][512];
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= one(SHAPES[i], sms, rows[i], sizeof rows[i]);
  const int clusters = nnc_gtl::clusters_of<T, 192>();
  std::printf("\n## gemm_tma_ln on %s (%d SMs, %d clusters of 2 at once): us, median of 30, cold L2\n\n", prop.name,
              sms, clusters);
  std::printf("| GEMM (N x K, epilogue) | auto split | fused auto | fused split 1 (2 warpgroups) | fused split 2 "
              "(cluster) | gemm_tma + row LN | cuBLASLt + row LN | tma+LN / fused | cuBLASLt+LN / fused | check |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < n; ++i) std::printf("%s\n", rows[i]);
  std::printf("\n%s\n", ok ? "timing: every check passed" : "timing: FAILED (a launch failed or a check over 2e-2)");
  return ok;
}

}  // namespace gemm_tma_ln_time

#endif
