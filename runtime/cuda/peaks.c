/* runtime/cuda/peaks.c — the GPU's rates as a benchmark's roofline sees them:
 * the bandwidth of a large device-to-device copy (bytes read + written) and
 * the GFLOP/s of a large GEMM through cuBLASLt at a given precision. Each is
 * the best of a few timed repetitions after a warm-up, on buffers much larger
 * than any L2. */
#include "nnrt_cuda.h"

#define COPY_BYTES ((size_t)512 << 20)
#define GEMM_N 8192
#define REPS 5

static nnrt_status time_copy(void *a, void *b, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, double *gbps,
                             nnrt_error *err) {
  double best = 0;
  for (int r = 0; r <= REPS; r++) {
    nnrt_status st = nnrt_cuda_check(cudaEventRecord(e0, s), "peaks: event", err);
    if (!st) st = nnrt_cuda_check(cudaMemcpyAsync(b, a, COPY_BYTES, cudaMemcpyDeviceToDevice, s), "peaks: copy", err);
    if (!st) st = nnrt_cuda_check(cudaEventRecord(e1, s), "peaks: event", err);
    float ms = 0;
    if (!st) st = nnrt_cuda_event_elapsed_ms(e0, e1, &ms, err);
    if (st) return st;
    double v = 2.0 * (double)COPY_BYTES / ((double)ms * 1e-3) / 1e9;
    if (r > 0 && v > best) best = v;   /* r == 0 warms up */
  }
  *gbps = best;
  return NNRT_OK;
}

static nnrt_status time_gemm(nnrt_cuda_blas *h, nnrt_cuda_dtype dt, bool tf32, void *a, void *b, void *c,
                             cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, double *gflops, nnrt_error *err) {
  nnrt_cuda_gemm g = {0};
  g.M = g.N = g.K = GEMM_N;
  g.batch = 1;
  g.ab = g.out = dt;
  g.tf32 = tf32;
  g.A = a;
  g.lda = GEMM_N;
  g.B = b;
  g.ldb = GEMM_N;
  g.b_trans = true;
  g.D = c;
  g.ldd = GEMM_N;
  g.alpha = 1.0f;
  g.epilogue = NNRT_EPI_NONE;
  double best = 0;
  for (int r = 0; r <= REPS; r++) {
    nnrt_status st = nnrt_cuda_check(cudaEventRecord(e0, s), "peaks: event", err);
    if (!st) st = nnrt_cuda_gemm_run(h, &g, s, err);
    if (!st) st = nnrt_cuda_check(cudaEventRecord(e1, s), "peaks: event", err);
    float ms = 0;
    if (!st) st = nnrt_cuda_event_elapsed_ms(e0, e1, &ms, err);
    if (st) return st;
    double v = 2.0 * GEMM_N * (double)GEMM_N * GEMM_N / ((double)ms * 1e-3) / 1e9;
    if (r > 0 && v > best) best = v;
  }
  *gflops = best;
  return NNRT_OK;
}

nnrt_status nnrt_cuda_measure_peaks(nnrt_cuda_blas *h, nnrt_cuda_alloc *alloc, nnrt_cuda_dtype dt, bool tf32,
                                    double *gflops, double *gbps, cudaStream_t s, nnrt_error *err) {
  if (!h || !alloc || !gflops || !gbps) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_measure_peaks: NULL argument");
  size_t esize = dt == NNRT_DT_F32 ? 4 : 2;
  size_t gemm_bytes = (size_t)GEMM_N * GEMM_N * esize;
  void *a = NULL, *b = NULL, *c = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  nnrt_status st = nnrt_cuda_malloc(alloc, COPY_BYTES, &a, err);
  if (!st) st = nnrt_cuda_malloc(alloc, COPY_BYTES, &b, err);
  if (!st) st = nnrt_cuda_malloc(alloc, gemm_bytes, &c, err);
  if (!st) st = nnrt_cuda_event_create(&e0, err);
  if (!st) st = nnrt_cuda_event_create(&e1, err);
  /* zeros would flatter the GEMM (less switching): fill with a byte pattern
   * that reads as small ordinary numbers in every format */
  if (!st) st = nnrt_cuda_check(cudaMemsetAsync(a, 0x3c, COPY_BYTES, s), "peaks: fill", err);
  if (!st) st = nnrt_cuda_check(cudaMemsetAsync(b, 0x3b, COPY_BYTES, s), "peaks: fill", err);
  if (!st) st = time_copy(a, b, s, e0, e1, gbps, err);
  if (!st) st = time_gemm(h, dt, tf32, a, b, c, s, e0, e1, gflops, err);
  nnrt_cuda_event_destroy(e0);
  nnrt_cuda_event_destroy(e1);
  nnrt_cuda_free(alloc, a, NULL);
  nnrt_cuda_free(alloc, b, NULL);
  nnrt_cuda_free(alloc, c, NULL);
  return st;
}
