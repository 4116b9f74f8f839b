/* tests/unit/test_simd_gemm_w8a8.c — the W8A8 GEMM (int8 weights with a
 * scale per column, A quantized per row as it is packed, int32 sums): the
 * quantizers and a GEMM on a hand-computed case, then the GEMM against a
 * float64 GEMM of the dequantized operands (A's rows through
 * nnc_simd_a8_quantize, B through nnc_simd_w8a8_value: the int32 sums are
 * exact, so only the f32 scaling differs) at odd sizes, both weight
 * layouts, A transposed, with the epilogue, threads, a batch sharing the
 * weight, K = 1, N = 1, M = 0, K = 0; a layernorm prologue against the f32
 * GEMM (to int8's precision); SmoothQuant's factors (A with outlier
 * columns: the same product, closer to f32's; the factors kept by
 * _import_smooth, dropped by _pack); bad arguments. */
#include "test_simd_quant.h"

/* Weight [N,K] = {{0.9, -2, 0.5}, {0, 0, 0}, {-0.25, 0.125, 3}}: scales
 * 2/31, 0, 3/31; A = [[1, 1, 1], [2, 0, -1]]: row scales 1/127, 2/127. */
static void test_hand(void **state) {
  (void)state;
  const float w[9] = {0.9f, -2, 0.5f, 0, 0, 0, -0.25f, 0.125f, 3};
  void *q = malloc(nnc_simd_w8a8_bytes(3, 3));
  assert_non_null(q);
  nnc_simd_w8a8_pack(w, 3, 1, 3, 3, q);
  const int qw[3][3] = {{14, -31, 8}, {0, 0, 0}, {-3, 1, 31}};   /* 13.95, 7.75, -2.58, 1.29 */
  const float s[3] = {2.0f / 31.0f, 0.0f, 3.0f / 31.0f};
  for (int n = 0; n < 3; n++)
    for (int k = 0; k < 3; k++) assert_true(nnc_simd_w8a8_value(q, 3, 3, k, n) == (float)qw[n][k] * s[n]);
  const float A[6] = {1, 1, 1, 2, 0, -1};
  int8_t qa[3];
  assert_true(nnc_simd_a8_quantize(A + 3, 3, qa) == 2.0f / 127.0f);
  assert_true(qa[0] == 127 && qa[1] == 0 && qa[2] == -64);   /* -63.5: ties to even */
  float C[6];
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 2; g.N = 3; g.K = 3; g.batch = 1;
  g.A = A; g.lda = 3; g.b_trans = 1; g.b_w8a8 = q;
  g.C = C; g.ldc = 3; g.alpha = 1;
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  void *w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  /* row 0 is q = 127 each (scale 1/127), row 1 is {127, 0, -64} (2/127) */
  const double a0 = 1.0 / 127, a1 = 2.0 / 127, s0 = 2.0 / 31, s2 = 3.0 / 31;
  const double want[6] = {127 * (14 - 31 + 8) * a0 * s0, 0, 127 * (-3 + 1 + 31) * a0 * s2,
                          (127 * 14 - 64 * 8) * a1 * s0, 0, (127 * -3 - 64 * 31) * a1 * s2};
  for (int i = 0; i < 6; i++) assert_true(fabs(C[i] - want[i]) <= 1e-6 * (1 + fabs(want[i])));
  free(w_buf);
  free(q);
}

static void use_w8a8(nnc_simd_gemm_args *g, const void *q) { g->b_w8a8 = q; }
static const tq_form w8a8 = {"w8a8", nnc_simd_w8a8_bytes, nnc_simd_w8a8_pack, nnc_simd_w8a8_value, use_w8a8, 1,
                             nnc_simd_w8a8_export, nnc_simd_w8a8_import};

static int run_case(const tq_case *c) {
  float *W = trandom((size_t)c->N * c->K, -1, 1);
  for (int n = 0; n < c->N; n++)
    for (int k = 0; k < c->K; k++) W[tq_w_at(c, k, n)] *= 0.01f + (float)(n % 7);
  void *q = malloc(nnc_simd_w8a8_bytes(c->N, c->K) + 1);
  assert_non_null(q);
  nnc_simd_w8a8_pack(W, c->trans ? c->K : c->N, c->trans, c->N, c->K, q);
  /* the 6-bit weight is the float one to half a step */
  int ok = tq_within_half_step(&w8a8, W, q, c, 31) && tq_gemm_case(&w8a8, q, c);
  free(W);
  free(q);
  return ok;
}

/* Sizes around the tiles (MR 4 rows, or 8 with AVX512-VNNI; NR 16 columns a
 * panel, a tile of 1 or 2 panels; 8 k a step): odd ones, whole tiles (M 8,
 * N 32 and 48), K = 1, N = 1. */
static void test_sizes(void **state) {
  (void)state;
  trng_seed(27);
  const int Ms[] = {1, 3, 7, 8, 25, 130}, Ns[] = {1, 3, 17, 32, 33, 48, 100}, Ks[] = {1, 5, 31, 300};
  for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
    for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
      for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (int trans = 0; trans < 2; trans++) {
          int odd = (int)(mi + ni + ki) % 2;
          tq_case c = {Ms[mi], Ns[ni], Ks[ki], 1, trans, odd && trans, 0, odd};
          assert_true(run_case(&c));
        }
}

/* The row quantizer (vector lanes and their tail) against q = nearbyint(x *
 * 127 / max|x|) clamped, in double: lengths around 8 and 16 lanes, ties
 * rounded to even, a NaN read as 0 and left out of the max. */
static void test_quantize(void **state) {
  (void)state;
  trng_seed(26);
  for (int n = 1; n <= 70; n += 3) {
    float *x = trandom((size_t)n, -4, 4);
    int8_t q[70];
    double amax = 0;
    for (int k = 0; k < n; k++) amax = fmax(amax, fabs(x[k]));
    double s = nnc_simd_a8_quantize(x, n, q);
    assert_true(s == (float)amax / 127.0f);
    float inv = 127.0f / (float)amax;
    for (int k = 0; k < n; k++) {
      double want = fmin(127, fmax(-127, nearbyint((double)(x[k] * inv))));
      if (q[k] != want) fprintf(stderr, "quantize n=%d k=%d: %d, expected %g\n", n, k, q[k], want);
      assert_true(q[k] == want);
    }
    free(x);
  }
  float x[40];
  int8_t q[40];
  for (int k = 0; k < 40; k++) x[k] = (float)(k % 7) - 3.5f;   /* ties at scale 1 */
  x[5] = 127;
  x[22] = NAN;
  assert_true(nnc_simd_a8_quantize(x, 40, q) == 1.0f);
  for (int k = 0; k < 40; k++) {
    double want = k == 5 ? 127 : k == 22 ? 0 : nearbyint((double)x[k]);
    assert_true(q[k] == want);
  }
  assert_true(q[0] == -4 && q[1] == -2 && q[3] == 0);   /* -3.5, -2.5, -0.5 */
}

/* Threads split N and M; a batch of items shares the weight; a deep K
 * (int32 sums of 1536 products of 255 x 31). */
static void test_threads_and_batch(void **state) {
  (void)state;
  trng_seed(28);
  const tq_case cases[] = {
    {3, 200, 70, 1, 1, 0, 2, 1}, {150, 70, 260, 1, 1, 0, 3, 0}, {40, 129, 33, 3, 0, 0, 2, 1},
    {1, 3100, 17, 1, 1, 0, 2, 0}, {37, 48, 1536, 2, 1, 0, 4, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) assert_true(run_case(&cases[i]));
}

/* A layernorm prologue: the rows are normalized before they are quantized;
 * against the f32 GEMM with the same prologue, to int8's precision. */
static void test_prologue(void **state) {
  (void)state;
  trng_seed(29);
  int M = 19, N = 45, K = 77;
  float *A = trandom((size_t)M * K, -3, 5), *W = trandom((size_t)N * K, -1, 1);
  float *gamma = trandom((size_t)K, 0.5f, 1.5f), *beta = trandom((size_t)K, -1, 1);
  float *C = talloc((size_t)M * N), *F = talloc((size_t)M * N);
  void *q = malloc(nnc_simd_w8a8_bytes(N, K));
  nnc_simd_w8a8_pack(W, K, 1, N, K, q);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = 1; g.A = A; g.lda = K; g.b_trans = 1; g.B = W; g.ldb = K;
  g.C = F; g.ldc = N; g.alpha = 1;
  g.prologue = NNC_SIMD_PRO_LAYERNORM; g.gamma = gamma; g.beta = beta; g.eps = 1e-5f;
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  void *w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  g.B = NULL; g.b_w8a8 = q; g.C = C;
  free(w_buf);
  ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  double amax = 0, emax = 0;
  for (int i = 0; i < M * N; i++) {
    amax = fmax(amax, fabs(F[i]));
    emax = fmax(emax, fabs(C[i] - F[i]));
  }
  assert_true(emax <= 2e-2 * amax);
  free(w_buf);
  free(q);
  free(A); free(W); free(gamma); free(beta); free(C); free(F);
}

/* The largest |C - F| of the w8a8 GEMM of A and W [N,K] packed with
 * factors s (NULL: none), F the f32 GEMM; *amax: max |F|. */
static double smooth_error(const float *A, const float *W, const float *s, int M, int N, int K, double *amax) {
  float *C = talloc((size_t)M * N), *F = talloc((size_t)M * N);
  void *q = malloc(nnc_simd_w8a8_bytes(N, K));
  assert_non_null(q);
  nnc_simd_w8a8_pack_smooth(W, K, 1, N, K, s, q);
  assert_true(s ? nnc_simd_w8a8_smooth(q, N, K) != NULL : nnc_simd_w8a8_smooth(q, N, K) == NULL);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = 1; g.A = A; g.lda = K; g.b_trans = 1; g.B = W; g.ldb = K;
  g.C = F; g.ldc = N; g.alpha = 1;
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  void *w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  free(w_buf);
  g.B = NULL; g.b_w8a8 = q; g.C = C;
  ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  double emax = 0;
  *amax = 0;
  for (int i = 0; i < M * N; i++) {
    *amax = fmax(*amax, fabs(F[i]));
    emax = fmax(emax, fabs(C[i] - F[i]));
  }
  free(w_buf);
  free(q);
  free(C);
  free(F);
  return emax;
}

/* A's columns 3 and 40 are 50x the others: without factors the rest of
 * each row keeps a few int8 steps; with s_k = sqrt(max|A_k| / max|W_k|)
 * the GEMM divides them out of A and into W: the same product, closer to
 * the f32 one. */
static void test_smooth(void **state) {
  (void)state;
  trng_seed(41);
  int M = 23, N = 37, K = 67;
  float *A = trandom((size_t)M * K, -1, 1), *W = trandom((size_t)N * K, -1, 1), *s = talloc((size_t)K);
  for (int m = 0; m < M; m++) A[m * K + 3] *= 50.0f, A[m * K + 40] *= 50.0f;
  for (int k = 0; k < K; k++) {
    double a = 0, w = 0;
    for (int m = 0; m < M; m++) a = fmax(a, fabs(A[m * K + k]));
    for (int n = 0; n < N; n++) w = fmax(w, fabs(W[n * K + k]));
    s[k] = (float)sqrt(a / w);
  }
  double amax = 0, plain = smooth_error(A, W, NULL, M, N, K, &amax), smoothed = smooth_error(A, W, s, M, N, K, &amax);
  assert_true(smoothed <= 2e-2 * amax);
  assert_true(smoothed < 0.75 * plain);   /* 2.11 -> 1.28 of 83.7 (6-bit weights take part of the gain) */
  /* _import_smooth keeps the factors; _pack drops them */
  void *q = malloc(nnc_simd_w8a8_bytes(N, K)), *r = malloc(nnc_simd_w8a8_bytes(N, K));
  int8_t *values = malloc((size_t)N * K);
  float *scales = talloc((size_t)N);
  nnc_simd_w8a8_pack_smooth(W, K, 1, N, K, s, q);
  nnc_simd_w8a8_export(q, 1, N, K, values, scales);
  nnc_simd_w8a8_import_smooth(values, scales, 1, N, K, nnc_simd_w8a8_smooth(q, N, K), r);
  assert_memory_equal(q, r, nnc_simd_w8a8_bytes(N, K));
  assert_memory_equal(nnc_simd_w8a8_smooth(r, N, K), s, (size_t)K * sizeof *s);
  nnc_simd_w8a8_pack(W, K, 1, N, K, r);
  assert_null(nnc_simd_w8a8_smooth(r, N, K));
  free(q); free(r); free(values); free(scales);
  free(A); free(W); free(s);
}

/* M = 0 writes nothing; K = 0 gives the epilogue of a zero product. */
static void test_empty(void **state) {
  (void)state;
  tq_check_empty(&w8a8);
}

/* A w8a8 B with b_q8, or with a batch that does not share it. */
static void test_errors(void **state) {
  (void)state;
  float A[4] = {0}, C[4];
  void *q = malloc(nnc_simd_w8a8_bytes(2, 2));
  nnc_simd_w8a8_pack(A, 2, 1, 2, 2, q);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 2; g.N = 2; g.K = 2; g.batch = 2; g.A = A; g.lda = 2; g.stride_a = 0; g.b_trans = 1; g.b_w8a8 = q;
  g.stride_b = 4; g.C = C; g.ldc = 2; g.stride_c = 4; g.alpha = 1;
  char ws[1 << 16];
  nnc_simd_error e;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "w8a8 B"));
  g.batch = 1;
  g.b_q8 = q;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "b_q8"));
  free(q);
}

/* A quantized checkpoint's form (the column sums too): export, import,
 * values (test_simd_quant.h). */
static void test_file_form(void **state) {
  (void)state;
  trng_seed(61);
  tq_check_file_form8(&w8a8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand), cmocka_unit_test(test_quantize), cmocka_unit_test(test_sizes), cmocka_unit_test(test_threads_and_batch),
      cmocka_unit_test(test_prologue), cmocka_unit_test(test_smooth), cmocka_unit_test(test_empty), cmocka_unit_test(test_errors), cmocka_unit_test(test_file_form),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
