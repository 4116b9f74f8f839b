/* tests/unit/test_simd_gemm_q8.c — the GEMM with an int8 B (weight-only
 * int8, a scale per output column): the quantizer on a hand-computed case,
 * then the GEMM against a float64 GEMM of the dequantized weight
 * (nnc_simd_q8_value) at odd sizes, both weight layouts, few rows (the int8
 * micro-kernel) and many (the widened panels), with the epilogue, threads,
 * a batch sharing the weight, K = 1, N = 1, M = 0, K = 0, and bad
 * arguments. The quantized weight is also checked against the float one:
 * each element within half a step of its column's scale. */
#include "test_simd_quant.h"

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

static void use_q8(nnc_simd_gemm_args *g, const void *q) { g->b_q8 = q; }
static const tq_form q8 = {"q8", nnc_simd_q8_bytes, nnc_simd_q8_pack, nnc_simd_q8_value, use_q8, 0,
                           nnc_simd_q8_export, nnc_simd_q8_import};

static int run_case(const tq_case *c) {
  float *W = trandom((size_t)c->N * c->K, -1, 1);
  /* a weight whose columns differ in scale, as trained ones do */
  for (int n = 0; n < c->N; n++)
    for (int k = 0; k < c->K; k++) W[tq_w_at(c, k, n)] *= 0.01f + (float)(n % 7);
  void *q = malloc(nnc_simd_q8_bytes(c->N, c->K) + 1);
  assert_non_null(q);
  nnc_simd_q8_pack(W, c->trans ? c->K : c->N, c->trans, c->N, c->K, q);
  int ok = tq_within_half_step(&q8, W, q, c, 127) && tq_gemm_case(&q8, q, c);
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
          tq_case c = {Ms[mi], Ns[ni], Ks[ki], 1, trans, 0, 0, (int)(mi + ni + ki) % 2};
          assert_true(run_case(&c));
        }
}

/* Threads split N and M; a batch of items shares the weight. */
static void test_threads_and_batch(void **state) {
  (void)state;
  trng_seed(18);
  const tq_case cases[] = {
    {3, 200, 70, 1, 1, 0, 2, 1}, {150, 70, 260, 1, 1, 0, 3, 0}, {40, 129, 33, 3, 0, 0, 2, 1},
    {1, 3100, 17, 1, 1, 0, 2, 0},   /* more than one NC panel */
    {5, 48, 600, 2, 1, 0, 4, 1},    /* K in three passes */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) assert_true(run_case(&cases[i]));
}

/* M = 0 writes nothing; K = 0 gives the epilogue of a zero product. */
static void test_empty(void **state) {
  (void)state;
  tq_check_empty(&q8);
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

/* A quantized checkpoint's form: export, import, values (test_simd_quant.h). */
static void test_file_form(void **state) {
  (void)state;
  trng_seed(61);
  tq_check_file_form8(&q8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_quantized), cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_threads_and_batch), cmocka_unit_test(test_empty), cmocka_unit_test(test_errors), cmocka_unit_test(test_file_form),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
