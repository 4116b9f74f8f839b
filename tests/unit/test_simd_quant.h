/* tests/unit/test_simd_quant.h — what the tests of the GEMMs with a
 * quantized B share (test_simd_gemm_q8.c, _q4.c, _w8a8.c): a form's
 * functions in one struct, and the checks that are the same for every
 * form once its functions are given: the GEMM of a case against a float64
 * GEMM of the dequantized operands, each held weight within half a step of
 * the float one, M = 0 and K = 0, and the file form's round trip. */
#ifndef TEST_SIMD_QUANT_H
#define TEST_SIMD_QUANT_H

#include "test_simd_util.h"

/* One quantized form of B. */
typedef struct tq_form {
  const char *name;
  size_t (*bytes)(int N, int K);
  void (*pack)(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst);
  float (*value)(const void *q, int N, int K, int k, int n);
  void (*use)(nnc_simd_gemm_args *g, const void *q);   /* points the GEMM at the held weight */
  int quantizes_a;   /* A's rows go through nnc_simd_a8_quantize too (W8A8) */
  /* the int8 file form (NULL for a form of another file type) */
  void (*export8)(const void *q, int b_trans, int N, int K, int8_t *values, float *scales);
  void (*import8)(const int8_t *values, const float *scales, int b_trans, int N, int K, void *dst);
} tq_form;

typedef struct tq_case {
  int M, N, K, batch;
  int trans;      /* the weight is [N,K] (nn.Linear), else [K,N] */
  int a_trans;    /* A is stored [K,M] */
  int threads;
  int epilogue;   /* bias, gelu and a residual */
} tq_case;

/* Element (k, n) of a weight as the case stores it. */
static inline size_t tq_w_at(const tq_case *c, int k, int n) {
  return c->trans ? (size_t)n * c->K + k : (size_t)k * c->N + n;
}

/* Every held value within half a step (max|column| / levels) of the float
 * weight W: the per-column forms. */
static inline int tq_within_half_step(const tq_form *f, const float *W, const void *q, const tq_case *c, double levels) {
  for (int n = 0; n < c->N; n++) {
    double amax = 0;
    for (int k = 0; k < c->K; k++) amax = fmax(amax, fabs(W[tq_w_at(c, k, n)]));
    for (int k = 0; k < c->K; k++) {
      double w = W[tq_w_at(c, k, n)], v = f->value(q, c->N, c->K, k, n);
      if (!(fabs(v - w) <= amax / levels * 0.5 * (1 + 1e-5))) {
        fprintf(stderr, "%s value [%d,%d]: %g for %g, step %g\n", f->name, k, n, v, w, amax / levels);
        return 0;
      }
    }
  }
  return 1;
}

/* C = A W (+ bias, gelu, residual) with the held weight q, for batch
 * items sharing it, against float64 on the dequantized operands (A's rows
 * quantized first where the form does). Rows of A span different ranges. */
static inline int tq_gemm_case(const tq_form *f, const void *q, const tq_case *c) {
  int M = c->M, N = c->N, K = c->K, nb = c->batch;
  size_t na = (size_t)nb * M * K, nc = (size_t)nb * M * N;
  float *A = trandom(na, -1, 1), *C = talloc(nc), *bias = trandom((size_t)N, -1, 1), *R = trandom(nc, -1, 1);
  for (size_t i = 0; i < na; i++) A[i] *= 1.0f + (float)(i % 5);
  tpoison(C, nc);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = nb;
  g.A = A; g.lda = c->a_trans ? M : K; g.a_trans = c->a_trans; g.stride_a = (ptrdiff_t)M * K;
  g.b_trans = c->trans;
  f->use(&g, q);   /* B itself is not given: stride_b 0 */
  g.C = C; g.ldc = N; g.stride_c = (ptrdiff_t)M * N;
  g.alpha = 1;
  if (c->epilogue) {
    g.bias = bias;
    g.act = NNC_SIMD_ACT_GELU_TANH;
    g.residual = R; g.ldr = N; g.stride_r = (ptrdiff_t)M * N;
  }
  tpool tp = {c->threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, c->threads};
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, c->threads ? c->threads : 1);
  void *w_buf = malloc(ws);
  nnc_simd_error e;
  int ok = nnc_simd_gemm(&g, c->threads ? &par : NULL, w_buf, ws, &e) == NNC_SIMD_OK;
  if (!ok) fprintf(stderr, "%s gemm: %s\n", f->name, e.msg);
  double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
  float *row = malloc(sizeof(float) * (size_t)(K + 1));
  int8_t *qa = malloc((size_t)K + 1);
  for (int b = 0; ok && b < nb; b++) {
    const float *Ab = A + (size_t)b * M * K;
    for (int i = 0; i < M; i++) {
      for (int k = 0; k < K; k++) row[k] = c->a_trans ? Ab[(size_t)k * M + i] : Ab[(size_t)i * K + k];
      double sa = f->quantizes_a ? nnc_simd_a8_quantize(row, K, qa) : 1;
      for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (f->quantizes_a ? qa[k] * sa : (double)row[k]) * f->value(q, N, K, k, n);
        if (c->epilogue) {
          s += bias[n];
          s = 0.5 * s * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (s + 0.044715 * s * s * s)));
          s += R[(size_t)b * M * N + (size_t)i * N + n];
        }
        ref[(size_t)i * N + n] = s;
      }
    }
    char what[200];
    snprintf(what, sizeof what, "%s M=%d N=%d K=%d batch %d item %d trans=%d a_trans=%d threads=%d epilogue=%d",
             f->name, M, N, K, nb, b, c->trans, c->a_trans, c->threads, c->epilogue);
    ok = tcheck(what, C + (size_t)b * M * N, N, ref, M, N, 1e-5);
  }
  free(qa);
  free(row);
  free(ref);
  free(w_buf);
  free(A);
  free(C);
  free(bias);
  free(R);
  return ok;
}

/* M = 0 writes nothing; K = 0 gives the epilogue of a zero product. */
static inline void tq_check_empty(const tq_form *f) {
  float C[4] = {7, 7, 7, 7}, bias[2] = {1, -1};
  void *q = malloc(f->bytes(2, 0) + 1);
  assert_non_null(q);
  f->pack(NULL, 0, 1, 2, 0, q);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 0; g.N = 2; g.K = 0; g.batch = 1; g.b_trans = 1; g.C = C; g.ldc = 2; g.alpha = 1;
  f->use(&g, q);
  char ws[1024];
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, NULL), NNC_SIMD_OK);
  assert_true(C[0] == 7 && C[3] == 7);
  g.M = 2;
  g.bias = bias;
  float A[1] = {0};
  g.A = A; g.lda = 0;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, NULL), NNC_SIMD_OK);
  assert_true(C[0] == 1 && C[1] == -1 && C[2] == 1 && C[3] == -1);
  free(q);
}

/* A quantized checkpoint's int8 form: export then import gives the held
 * bytes back, and each exported value times its column's scale is the
 * value the GEMM multiplies by; odd sizes, both layouts. */
static inline void tq_check_file_form8(const tq_form *f) {
  const int Ns[] = {1, 3, 17, 33}, Ks[] = {1, 5, 31, 300};
  for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
      for (int trans = 0; trans < 2; trans++) {
        int N = Ns[ni], K = Ks[ki];
        float *W = trandom((size_t)N * K, -1, 1);
        size_t bytes = f->bytes(N, K);
        unsigned char *q = malloc(bytes), *back = malloc(bytes);
        int8_t *values = malloc((size_t)N * K);
        float *scales = malloc(sizeof(float) * (size_t)N);
        f->pack(W, trans ? K : N, trans, N, K, q);
        f->export8(q, trans, N, K, values, scales);
        memset(back, 0x5a, bytes);
        f->import8(values, scales, trans, N, K, back);
        assert_memory_equal(back, q, bytes);
        for (int n = 0; n < N; n++)
          for (int k = 0; k < K; k++)
            assert_true((float)values[trans ? (size_t)n * K + k : (size_t)k * N + n] * scales[n] ==
                        f->value(q, N, K, k, n));
        free(W);
        free(q);
        free(back);
        free(values);
        free(scales);
      }
}

#endif
