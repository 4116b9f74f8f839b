/* tests/gpu/gemm_tma_ln_time.cuh — test_gemm_tma_ln --time: BERT's post-norm
 * GEMMs (M = B T = 4096, N = 384; K = 384 after attention, 1536 after the
 * FFN; and the latter at M = 8192, where the block form has one wave),
 * bf16, hidden = LayerNorm(A B^T + bias + hidden) in place as nnc runs
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
 * launch overhead is not counted), the median of 30 after 5 untimed; then
 * all again on one copy (warm L2: what is left is latency and work, not
 * DRAM), in a second table. "check": max
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
__device__ long long spin_end; /* when the last spin ended (%globaltimer, ns): --trace's launch gap */
__global__ void spin(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
  spin_end = t;
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

/* Enough copies of a shape's operands to pass 120 MB (at most 32), filled. */
static std::vector<set> make_sets(const shape &s) {
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
  return v;
}

static void free_sets(std::vector<set> &v) {
  for (set &x : v) {
    CK(cudaFree(x.a));
    CK(cudaFree(x.b));
    CK(cudaFree(x.bias));
    CK(cudaFree(x.gamma));
    CK(cudaFree(x.beta));
    CK(cudaFree(x.hid));
    CK(cudaFree(x.sum));
  }
  v.clear();
}

constexpr float EPS = 1e-12f;

/* out = LN(A B^T + bias + hidden) of copy x, fused; false (and a message) when refused. */
static bool run_fused(const shape &s, const set &x, T *out, int split) {
  nnc_cuda_gemm_tma_ln_args<T> g = {};
  g.M = s.M, g.N = s.N, g.K = s.K, g.a = x.a, g.lda = s.K, g.b = x.b, g.ldb = s.K, g.bias = x.bias;
  g.residual = x.hid, g.ldr = s.N, g.gamma = x.gamma, g.beta = x.beta, g.eps = EPS, g.c = out, g.ldc = s.N;
  g.split = split;
  nnc_cuda_error err;
  const nnc_cuda_status st = nnc_cuda_gemm_tma_ln(g, (cudaStream_t)0, &err);
  if (st != NNC_CUDA_OK) std::printf("  fused: %s\n", err.msg);
  return st == NNC_CUDA_OK;
}

/* One shape: every variant timed, cold and warm, then the check; a table row (us) for each. */
static bool one(const shape &s, int sms, char (*row)[512], size_t rown) {
  const size_t nc = (size_t)s.M * s.N;
  std::vector<set> v = make_sets(s);
  const int sets = (int)v.size();
  nnc_cuda_error err;
  const float eps = EPS;
  auto fused = [&](const set &x, T *out, int split) { return run_fused(s, x, out, split); };
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

  /* every variant over n copies (cold L2), then over copy 0 alone (warm: its operands stay in L2) */
  auto measure = [&](int n, double (&t)[8]) {
    t[0] = median_cold(n, [&](int i) { return fused(v[i], v[i].hid, 0); });
    t[1] = median_cold(n, [&](int i) { return fused(v[i], v[i].hid, 1); });
    t[2] = median_cold(n, [&](int i) { return fused(v[i], v[i].hid, 2); });
    t[3] = median_cold(n, [&](int i) { return tma(v[i]); });
    t[4] = median_cold(n, [&](int i) { return rows(v[i], v[i].hid); });
    t[5] = median_cold(n, [&](int i) { return tma(v[i]) && rows(v[i], v[i].hid); });
    t[6] = lt.ok ? median_cold(n, [&](int i) { return blas(v[i]); }) : -1;
    t[7] = lt.ok ? median_cold(n, [&](int i) { return blas(v[i]) && rows(v[i], v[i].hid); }) : -1;
  };
  if (!lt.ok) std::printf("  cuBLASLt: no algorithm for %s\n", s.name);
  double cold[8], warm[8];
  measure(sets, cold);
  measure(1, warm);

  /* the check, not in place: both into fresh buffers from the same hidden state */
  T *y1, *y2;
  CK(cudaMalloc(&y1, nc * sizeof(T)));
  CK(cudaMalloc(&y2, nc * sizeof(T)));
  bool ok = fused(v[0], y1, 0) && tma(v[0]) && rows(v[0], y2);
  CK(cudaDeviceSynchronize());
  const double rel = ok ? gemm_tma_time::rel_diff(y1, y2, nc) : INFINITY;
  for (int i = 0; i < 6; ++i) ok = ok && cold[i] > 0 && warm[i] > 0;
  ok = ok && rel <= 2e-2;
  CK(cudaFree(y1));
  CK(cudaFree(y2));

  const int split = nnc_gtl::pick_split((s.M + 63) / 64, sms, nnc_gtl::clusters_of<T, 192>());
  for (int w = 0; w < 2; ++w) {
    const double *t = w ? warm : cold;
    char c[8][32];
    for (int i = 0; i < 8; ++i) cell(c[i], sizeof c[i], t[i]);
    snprintf(row[w], rown, "| %s | %d | %s | %s | %s | %s (%s + %s) | %s (%s + %s) | %.2f | %.2f | %.1e%s |", s.name,
             split, c[0], c[1], c[2], c[5], c[3], c[4], c[7], c[6], c[4], t[0] > 0 && t[5] > 0 ? t[5] / t[0] : 0.0,
             t[0] > 0 && t[7] > 0 ? t[7] / t[0] : 0.0, rel, ok ? "" : " FAIL");
    std::printf("%s\n", row[w]);
  }
  free_sets(v);
  return ok;
}

inline bool run() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int n = (int)(sizeof SHAPES / sizeof SHAPES[0]);
  static char rows[sizeof SHAPES / sizeof SHAPES[0]][2][512];
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= one(SHAPES[i], sms, rows[i], sizeof rows[i][0]);
  const int clusters = nnc_gtl::clusters_of<T, 192>();
  for (int w = 0; w < 2; ++w) {
    std::printf("\n## gemm_tma_ln on %s (%d SMs, %d clusters of 2 at once): us, median of 30, %s\n\n", prop.name,
                sms, clusters, w ? "warm L2 (one copy of the operands)" : "cold L2");
    std::printf("| GEMM (N x K, epilogue) | auto split | fused auto | fused split 1 (2 warpgroups) | fused split 2 "
                "(cluster) | gemm_tma + row LN | cuBLASLt + row LN | tma+LN / fused | cuBLASLt+LN / fused | check |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < n; ++i) std::printf("%s\n", rows[i][w]);
  }
  std::printf("\n%s\n", ok ? "timing: every check passed" : "timing: FAILED (a launch failed or a check over 2e-2)");
  return ok;
}

#ifdef NNC_GEMM_TMA_LN_TRACE
static double median_of(std::vector<double> x) {
  if (x.empty()) return -1;
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

/* test_gemm_tma_ln --trace (a build with NNC_GEMM_TMA_LN_TRACE): BERT's two
 * shapes in each form, cold L2 as in --time, 30 runs after 5; for each run
 * the phases of every block (gemm_tma_ln.cuh's marks) from the first
 * block's start, their median over the blocks, and the median of that over
 * the runs. One table, in Markdown. */
inline bool trace() {
  using namespace nnc_gtl;
  unsigned long long *dtr;
  CK(cudaGetSymbolAddress(reinterpret_cast<void **>(&dtr), nnc_gtl_trace));
  const size_t tbytes = sizeof(unsigned long long) * TRACE_BLOCKS * TR_N;
  std::vector<unsigned long long> h(TRACE_BLOCKS * TR_N);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  static char rows[8][512];
  int nrows = 0;
  bool ok = true;
  for (int si = 0; si < 2; ++si)
    for (int split = 1; split <= 2; ++split) {
      const shape &s = SHAPES[si];
      std::vector<set> v = make_sets(s);
      /* per run: event us, blocks, launch gap, last start, the phases' medians, last exit */
      std::vector<double> col[4 + TR_N + 1];
      for (int r = 0; r < 35 && ok; ++r) {
        const set &x = v[r % v.size()];
        CK(cudaMemset(dtr, 0, tbytes));
        spin<<<1, 1>>>(100000);
        CK(cudaGetLastError());
        CK(cudaEventRecord(e0));
        ok = run_fused(s, x, x.hid, split);
        CK(cudaEventRecord(e1));
        CK(cudaDeviceSynchronize());
        if (r < 5 || !ok) continue;
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        long long se = 0;
        CK(cudaMemcpy(h.data(), dtr, tbytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpyFromSymbol(&se, spin_end, sizeof se));
        unsigned long long t0 = ~0ull, tl = 0, te = 0;
        int blocks = 0;
        for (int b = 0; b < TRACE_BLOCKS; ++b) {
          const unsigned long long *q = &h[(size_t)b * TR_N];
          if (!q[TR_START]) continue;
          ++blocks;
          t0 = std::min(t0, q[TR_START]);
          tl = std::max(tl, q[TR_START]);
          te = std::max(te, q[TR_EXIT]);
        }
        col[0].push_back(ms * 1e3);
        col[1].push_back(blocks);
        col[2].push_back(((double)t0 - (double)se) * 1e-3);
        col[3].push_back((double)(tl - t0) * 1e-3);
        for (int p = 0; p < TR_N; ++p) {
          std::vector<double> d;
          for (int b = 0; b < TRACE_BLOCKS; ++b) {
            const unsigned long long *q = &h[(size_t)b * TR_N];
            if (q[TR_START] && q[p]) d.push_back((double)(q[p] - t0) * 1e-3);
          }
          col[4 + p].push_back(median_of(d));
        }
        col[4 + TR_N].push_back((double)(te - t0) * 1e-3);
      }
      char c[4 + TR_N + 1][24];
      for (int i = 0; i < 4 + TR_N + 1; ++i) snprintf(c[i], sizeof c[i], "%.2f", median_of(col[i]));
      snprintf(rows[nrows++], sizeof rows[0],
               "| %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", s.name, split, c[0], median_of(col[1]), c[2], c[3], c[4 + TR_ISSUED], c[4 + TR_LANDED],
               c[4 + TR_PRODUCTS], c[4 + TR_STATS], c[4 + TR_STORED], c[4 + TR_EXIT], c[4 + TR_N],
               c[4 + TR_START]);
      free_sets(v);
    }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::printf("\n## gemm_tma_ln phases (us from the first block's start; medians over blocks, then over 30 runs; "
              "cold L2)\n\n");
  std::printf("| GEMM | split | event us | blocks | launch gap (spin end to first start) | last block start | first "
              "copies issued | first stage landed | products done | row stats | rows stored | exit | last exit | "
              "start |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < nrows; ++i) std::printf("%s\n", rows[i]);
  return ok;
}
#endif

}  // namespace gemm_tma_ln_time

#endif
