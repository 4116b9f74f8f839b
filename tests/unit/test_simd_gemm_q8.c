/* tests/unit/test_simd_gemm_q8.c — the GEMM with an int8 B (weight-only
 * int8, a scale per output column): the quantizer on a hand-computed case,
 * then the GEMM against a float64 GEMM of the dequantized weight
 * (nnc_simd_q8_value) at odd sizes, both weight layouts, few rows (the int8
 * micro-kernel) and many (the widened panels), with the epilogue, threads,
 * a batch sharing the weight, K = 1, N = 1, M = 0, K = 0, and bad
 * arguments. The quantized weight is also checked against the float one:
 * each element within half a step of its column's scale. */
#include "test_simd_util.h"

/* Weight [N,K] = {{0.9, -2, 0.5}, {0, 0, 0}, {-0.25, 0.125, 3}}: scales
 * 2/127, 0, 3/127; q = round(w / s). */
static void test_hand_quantized(void **state) {
  (void)state;
  const float w[9] = {0.9f, -2, 0.5f, 0, 0, 0, -0.25f, 0.125f, 3};
  void *q = malloc(nnc_simd_q8_bytes(3, 3));
  assert_non_null(q);
  nnc_simd_q8_pack(w, 3, 1, 3, 3, q);
  const int expect_q[3][3] = {{57, -127, 32}, {0, 0, 0}, {-11, 5, 127}};   /* 57.15, 31.75, -10.58, 5.29 */
  const float s[3] = {2.0f / 127.0f, 0.0f, 3.0f / 127.0f};
  for (int n = 0; n < 3; n++)
    for (int k = 0; k < 3; k++) assert_true(nnc_simd_q8_value(q, 3, 3, k, n) == (float)expect_q[n][k] * s[n]);
  /* C = A . W^T for A = [[1, 1, 1], [2, 0, -1]], by hand from the q above */
  const float A[6] = {1, 1, 1, 2, 0, -1};
  float C[6];
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 2; g.N = 3; g.K = 3; g.batch = 1;
  g.A = A; g.lda = 3; g.b_trans = 1; g.b_q8 = q;
  g.C = C; g.ldc = 3; g.alpha = 1;
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  void *w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  const double want[6] = {(57 - 127 + 32) * 2.0 / 127, 0, (-11 + 5 + 127) * 3.0 / 127,
                          (114 - 32) * 2.0 / 127, 0, (-22 - 127) * 3.0 / 127};
  for (int i = 0; i < 6; i++) assert_true(fabs(C[i] - want[i]) <= 1e-6 * (1 + fabs(want[i])));
  free(w_buf);
  free(q);
}

typedef struct qcase {
  int M, N, K, batch;
  int trans;      /* the weight is [N,K] (nn.Linear), else [K,N] */
  int threads;
  int epilogue;   /* bias, gelu and a residual */
} qcase;

static int run_case(const qcase *c) {
  int M = c->M, N = c->N, K = c->K, nb = c->batch;
  float *W = trandom((size_t)N * K, -1, 1);
  /* a weight whose columns differ in scale, as trained ones do */
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) W[c->trans ? (size_t)n * K + k : (size_t)k * N + n] *= 0.01f + (float)(n % 7);
  void *q = malloc(nnc_simd_q8_bytes(N, K) + 1);
  assert_non_null(q);
  nnc_simd_q8_pack(W, c->trans ? K : N, c->trans, N, K, q);
  /* the quantized weight is the float one to half a step */
  for (int n = 0; n < N; n++) {
    double amax = 0;
    for (int k = 0; k < K; k++) amax = fmax(amax, fabs(W[c->trans ? (size_t)n * K + k : (size_t)k * N + n]));
    for (int k = 0; k < K; k++) {
      double w = W[c->trans ? (size_t)n * K + k : (size_t)k * N + n];
      if (!(fabs(nnc_simd_q8_value(q, N, K, k, n) - w) <= amax / 127 * 0.5 * (1 + 1e-5))) {
        fprintf(stderr, "q8 value [%d,%d]: %g for %g, step %g\n", k, n, nnc_simd_q8_value(q, N, K, k, n), w, amax / 127);
        return 0;
      }
    }
  }
  size_t na = (size_t)nb * M * K, nc = (size_t)nb * M * N;
  float *A = trandom(na, -1, 1), *C = talloc(nc), *bias = trandom((size_t)N, -1, 1), *R = trandom(nc, -1, 1);
  tpoison(C, nc);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = nb;
  g.A = A; g.lda = K; g.stride_a = (ptrdiff_t)M * K;
  g.b_trans = c->trans; g.b_q8 = q;   /* B itself is not given: stride_b 0 */
  g.C = C; g.ldc = N; g.stride_c = (ptrdiff_t)M * N;
  g.alpha = 1;
  if (c->epilogue) {
    g.bias = bias;
    g.act = NNC_SIMD_ACT_GELU_TANH;
    g.residual = R; g.ldr = N; g.stride_r = (ptrdiff_t)M * N;
  }
  tpool tp = {c->threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, c->threads};
  const nnc_simd_par *pp = c->threads ? &par : NULL;
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, c->threads ? c->threads : 1);
  void *w_buf = malloc(ws);
  nnc_simd_error e;
  int ok = nnc_simd_gemm(&g, pp, w_buf, ws, &e) == NNC_SIMD_OK;
  if (!ok) fprintf(stderr, "gemm: %s\n", e.msg);
  double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
  for (int b = 0; ok && b < nb; b++) {
    for (int i = 0; i < M; i++)
      for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)A[(size_t)b * M * K + (size_t)i * K + k] * nnc_simd_q8_value(q, N, K, k, n);
        if (c->epilogue) {
          s += bias[n];
          s = 0.5 * s * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (s + 0.044715 * s * s * s)));
          s += R[(size_t)b * M * N + (size_t)i * N + n];
        }
        ref[(size_t)i * N + n] = s;
      }
    char what[160];
    snprintf(what, sizeof what, "q8 M=%d N=%d K=%d batch %d item %d trans=%d threads=%d epilogue=%d", M, N, K, nb, b,
             c->trans, c->threads, c->epilogue);
    ok = tcheck(what, C + (size_t)b * M * N, N, ref, M, N, 1e-5);
  }
  free(ref);
  free(w_buf);
  free(A);
  free(C);
  free(bias);
  free(R);
  free(W);
  free(q);
  return ok;
}

/* Odd sizes around the tiles, K = 1, N = 1, one row (decoding) and many. */
static void test_sizes(void **state) {
  (void)state;
  trng_seed(17);
  const int Ms[] = {1, 2, 7, 25, 130}, Ns[] = {1, 3, 17, 33, 100}, Ks[] = {1, 5, 31, 300};
  for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
    for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
      for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (int trans = 0; trans < 2; trans++) {
          qcase c = {Ms[mi], Ns[ni], Ks[ki], 1, trans, 0, (int)(mi + ni + ki) % 2};
          assert_true(run_case(&c));
        }
}

/* Threads split N and M; a batch of items shares the weight. */
static void test_threads_and_batch(void **state) {
  (void)state;
  trng_seed(18);
  const qcase cases[] = {
    {3, 200, 70, 1, 1, 2, 1}, {150, 70, 260, 1, 1, 3, 0}, {40, 129, 33, 3, 0, 2, 1},
    {1, 3100, 17, 1, 1, 2, 0},   /* more than one NC panel */
    {5, 48, 600, 2, 1, 4, 1},    /* K in three passes */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) assert_true(run_case(&cases[i]));
}

/* M = 0 writes nothing; K = 0 gives the epilogue of a zero product. */
static void test_empty(void **state) {
  (void)state;
  float C[4] = {7, 7, 7, 7}, bias[2] = {1, -1};
  void *q = malloc(nnc_simd_q8_bytes(2, 0) + 1);
  nnc_simd_q8_pack(NULL, 0, 1, 2, 0, q);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 0; g.N = 2; g.K = 0; g.batch = 1; g.b_trans = 1; g.b_q8 = q; g.C = C; g.ldc = 2; g.alpha = 1;
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

/* An int8 B with b_packed, or with a batch that does not share it. */
static void test_errors(void **state) {
  (void)state;
  float A[4] = {0}, C[4], Bp[64] = {0};
  void *q = malloc(nnc_simd_q8_bytes(2, 2));
  nnc_simd_q8_pack(A, 2, 1, 2, 2, q);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 2; g.N = 2; g.K = 2; g.batch = 2; g.A = A; g.lda = 2; g.stride_a = 0; g.b_trans = 1; g.b_q8 = q;
  g.stride_b = 4; g.C = C; g.ldc = 2; g.stride_c = 4; g.alpha = 1;
  char ws[1 << 16];
  nnc_simd_error e;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "int8 B"));
  g.batch = 1;
  g.b_packed = Bp;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "b_packed"));
  free(q);
}

/* A quantized checkpoint's form: export then import gives the held bytes
 * back (w8a8: the column sums too), and each exported value times its
 * column's scale is the value the GEMM multiplies by; odd sizes, both
 * layouts. */
static void test_file_form(void **state) {
  (void)state;
  trng_seed(61);
  const int Ns[] = {1, 3, 17, 33}, Ks[] = {1, 5, 31, 300};
  for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
      for (int trans = 0; trans < 2; trans++) {
        int N = Ns[ni], K = Ks[ki];
        float *W = trandom((size_t)N * K, -1, 1);
        size_t bytes = nnc_simd_q8_bytes(N, K);
        unsigned char *q = malloc(bytes), *back = malloc(bytes);
        int8_t *values = malloc((size_t)N * K);
        float *scales = malloc(sizeof(float) * (size_t)N);
        nnc_simd_q8_pack(W, trans ? K : N, trans, N, K, q);
        nnc_simd_q8_export(q, trans, N, K, values, scales);
        memset(back, 0x5a, bytes);
        nnc_simd_q8_import(values, scales, trans, N, K, back);
        assert_memory_equal(back, q, bytes);
        for (int n = 0; n < N; n++)
          for (int k = 0; k < K; k++)
            assert_true((float)values[trans ? (size_t)n * K + k : (size_t)k * N + n] * scales[n] ==
                        nnc_simd_q8_value(q, N, K, k, n));
        free(W);
        free(q);
        free(back);
        free(values);
        free(scales);
      }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_quantized), cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_threads_and_batch), cmocka_unit_test(test_empty), cmocka_unit_test(test_errors), cmocka_unit_test(test_file_form),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
