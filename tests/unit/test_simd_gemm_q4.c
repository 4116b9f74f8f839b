/* tests/unit/test_simd_gemm_q4.c — the GEMM with an int4 B (weight-only
 * int4, a scale per group of 128 k of an output column): the quantizer on
 * a hand-computed case, then the GEMM against a float64 GEMM of the
 * dequantized weight (nnc_simd_q4_value) at odd sizes (K = 1, 127, 128,
 * 129, 300: groups cut at the K edge; N = 1; M = 0 and K = 0), both weight
 * layouts, few rows (the int4 micro-kernel) and many (the widened panels),
 * the epilogue, threads, a batch sharing the weight, and bad arguments. The
 * quantized weight is checked against the float one (each element within
 * half a step of its group's scale) and the file form's round trip
 * (export, import) against the held bytes. */
#include "test_simd_quant.h"

/* Weight [N=2, K=3] = {{0.7, -1.4, 0.2}, {0, 0, 0}}: one group per row,
 * scales 1.4/7 = 0.2 and 0; q = round(w / 0.2) = {3.5 -> 4 (ties to even),
 * -7, 1}. */
static void test_hand_quantized(void **state) {
  (void)state;
  const float w[6] = {0.7f, -1.4f, 0.2f, 0, 0, 0};
  void *q = malloc(nnc_simd_q4_bytes(2, 3));
  assert_non_null(q);
  nnc_simd_q4_pack(w, 3, 1, 2, 3, q);
  const float s = 1.4f / 7.0f;
  /* 0.7f / s rounds to 3.5 or just off it in f32: the value the packer
   * computes is the one to expect */
  const int q00 = (int)nearbyintf(0.7f / s);
  const int expect_q[2][3] = {{q00, -7, (int)nearbyintf(0.2f / s)}, {0, 0, 0}};
  for (int k = 0; k < 3; k++) {
    assert_true(nnc_simd_q4_value(q, 2, 3, k, 0) == (float)expect_q[0][k] * s);
    assert_true(nnc_simd_q4_value(q, 2, 3, k, 1) == 0.0f);
  }
  /* the file form: row 0's bytes {q0 | q1 << 4, q2}, two's complement */
  uint8_t values[4];
  float scales[2];
  nnc_simd_q4_export(q, 1, 2, 3, values, scales);
  assert_int_equal(values[0], (uint8_t)((expect_q[0][0] & 15) | ((expect_q[0][1] & 15) << 4)));
  assert_int_equal(values[1], (uint8_t)(expect_q[0][2] & 15));
  assert_int_equal(values[2], 0);
  assert_int_equal(values[3], 0);
  assert_true(scales[0] == s && scales[1] == 0.0f);
  /* C = A . W^T for A = [[1, 1, 1], [2, 0, -1]] */
  const float A[6] = {1, 1, 1, 2, 0, -1};
  float C[4];
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 2; g.N = 2; g.K = 3; g.batch = 1;
  g.A = A; g.lda = 3; g.b_trans = 1; g.b_q4 = q;
  g.C = C; g.ldc = 2; g.alpha = 1;
  size_t ws = nnc_simd_gemm_workspace_bytes(&g, 1);
  void *w_buf = malloc(ws);
  assert_int_equal(nnc_simd_gemm(&g, NULL, w_buf, ws, NULL), NNC_SIMD_OK);
  const double want[4] = {(expect_q[0][0] - 7 + expect_q[0][2]) * (double)s, 0,
                          (2 * expect_q[0][0] - expect_q[0][2]) * (double)s, 0};
  for (int i = 0; i < 4; i++) assert_true(fabs(C[i] - want[i]) <= 1e-6 * (1 + fabs(want[i])));
  free(w_buf);
  free(q);
}

static double wat(const float *W, const tq_case *c, int n, int k) { return W[tq_w_at(c, k, n)]; }

/* The quantized values against the float ones, and the file form's round trip. */
static int check_quantized(const float *W, const void *q, const tq_case *c) {
  int N = c->N, K = c->K, G = (K + NNC_SIMD_Q4_GROUP - 1) / NNC_SIMD_Q4_GROUP;
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      int k0 = g * NNC_SIMD_Q4_GROUP, k1 = k0 + NNC_SIMD_Q4_GROUP < K ? k0 + NNC_SIMD_Q4_GROUP : K;
      double amax = 0;
      for (int k = k0; k < k1; k++) amax = fmax(amax, fabs(wat(W, c, n, k)));
      for (int k = k0; k < k1; k++) {
        double v = nnc_simd_q4_value(q, N, K, k, n), w = wat(W, c, n, k);
        if (!(fabs(v - w) <= amax / 7 * 0.5 * (1 + 1e-5))) {
          fprintf(stderr, "q4 value [%d,%d]: %g for %g, step %g\n", k, n, v, w, amax / 7);
          return 0;
        }
      }
    }
  size_t kh = ((size_t)K + 1) / 2, bytes = nnc_simd_q4_bytes(N, K);
  uint8_t *values = malloc(kh * (size_t)N + 1);
  float *scales = malloc(sizeof(float) * ((size_t)N * (size_t)G + 1));
  unsigned char *back = malloc(bytes + 1);
  nnc_simd_q4_export(q, c->trans, N, K, values, scales);
  memset(back, 0xa5, bytes);
  nnc_simd_q4_import(values, scales, c->trans, N, K, back);
  int same = memcmp(back, q, bytes) == 0;
  if (!same) fprintf(stderr, "q4 N=%d K=%d trans=%d: the held bytes differ after export and import\n", N, K, c->trans);
  /* the file form's nibbles are the values: k even in bits 0-3 */
  for (int n = 0; same && n < N; n++)
    for (int k = 0; same && k < K; k++) {
      uint8_t b = values[c->trans ? (size_t)n * kh + (size_t)k / 2 : (size_t)k / 2 * (size_t)N + (size_t)n];
      int v = (b >> (k % 2 * 4)) & 15;
      v -= (v & 8) << 1;
      float s = scales[c->trans ? (size_t)n * G + (size_t)k / NNC_SIMD_Q4_GROUP
                                : (size_t)k / NNC_SIMD_Q4_GROUP * (size_t)N + (size_t)n];
      same = (float)v * s == nnc_simd_q4_value(q, N, K, k, n);
      if (!same) fprintf(stderr, "q4 file form [%d,%d]: %d x %g\n", k, n, v, s);
    }
  free(values);
  free(scales);
  free(back);
  return same;
}

static void use_q4(nnc_simd_gemm_args *g, const void *q) { g->b_q4 = q; }
static const tq_form q4 = {"q4", nnc_simd_q4_bytes, nnc_simd_q4_pack, nnc_simd_q4_value, use_q4, 0, NULL, NULL};

static int run_case(const tq_case *c) {
  float *W = trandom((size_t)c->N * c->K, -1, 1);
  /* groups that differ in scale, along k as along n, as trained weights do */
  for (int n = 0; n < c->N; n++)
    for (int k = 0; k < c->K; k++) W[tq_w_at(c, k, n)] *= 0.01f + (float)(n % 7) + (float)(k / NNC_SIMD_Q4_GROUP % 3);
  void *q = malloc(nnc_simd_q4_bytes(c->N, c->K) + 1);
  assert_non_null(q);
  nnc_simd_q4_pack(W, c->trans ? c->K : c->N, c->trans, c->N, c->K, q);
  int ok = check_quantized(W, q, c) && tq_gemm_case(&q4, q, c);
  free(W);
  free(q);
  return ok;
}

/* Odd sizes around the tiles and the groups, one row (decoding) and many. */
static void test_sizes(void **state) {
  (void)state;
  trng_seed(41);
  const int Ms[] = {1, 2, 7, 25, 130}, Ns[] = {1, 3, 17, 33}, Ks[] = {1, 127, 128, 129, 300};
  for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
    for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
      for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (int trans = 0; trans < 2; trans++) {
          tq_case c = {Ms[mi], Ns[ni], Ks[ki], 1, trans, 0, 0, (int)(mi + ni + ki) % 2};
          assert_true(run_case(&c));
        }
}

/* Threads split N and M; a batch of items shares the weight; K over
 * several passes (a pass of 320 holds two and a half groups). */
static void test_threads_and_batch(void **state) {
  (void)state;
  trng_seed(42);
  const tq_case cases[] = {
    {3, 200, 70, 1, 1, 0, 2, 1}, {150, 70, 260, 1, 1, 0, 3, 0}, {40, 129, 33, 3, 0, 0, 2, 1},
    {1, 3100, 17, 1, 1, 0, 2, 0},   /* more than one NC panel */
    {5, 48, 600, 2, 1, 0, 4, 1},    /* K in three passes */
    {1, 40, 577, 1, 0, 0, 2, 1}, {31, 40, 577, 1, 1, 0, 2, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) assert_true(run_case(&cases[i]));
}

/* M = 0 writes nothing; K = 0 gives the epilogue of a zero product. */
static void test_empty(void **state) {
  (void)state;
  tq_check_empty(&q4);
}

/* An int4 B with b_packed or b_q8, or with a batch that does not share it. */
static void test_errors(void **state) {
  (void)state;
  float A[4] = {0}, C[4], Bp[64] = {0};
  void *q = malloc(nnc_simd_q4_bytes(2, 2));
  nnc_simd_q4_pack(A, 2, 1, 2, 2, q);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 2; g.N = 2; g.K = 2; g.batch = 2; g.A = A; g.lda = 2; g.stride_a = 0; g.b_trans = 1; g.b_q4 = q;
  g.stride_b = 4; g.C = C; g.ldc = 2; g.stride_c = 4; g.alpha = 1;
  char ws[1 << 16];
  nnc_simd_error e;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "int4 B"));
  g.batch = 1;
  g.b_packed = Bp;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "b_packed"));
  g.b_packed = NULL;
  g.b_q8 = q;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &e), NNC_SIMD_E_ARG);
  assert_non_null(strstr(e.msg, "int4 B"));
  free(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_quantized), cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_threads_and_batch), cmocka_unit_test(test_empty), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
