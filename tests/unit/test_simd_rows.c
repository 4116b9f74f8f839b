/* tests/unit/test_simd_rows.c — softmax, layernorm and rmsnorm over rows
 * against float64 versions written here: odd widths, padded rows, in
 * place, -inf rows, threads, bad arguments. */
#include "test_simd_util.h"

enum { SOFTMAX, LAYERNORM, RMSNORM };

static void ref_row(int kind, const float *x, int n, const float *g, const float *b, double eps,
                    double *out) {
  if (kind == SOFTMAX) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
    if (m == -INFINITY) {
      for (int j = 0; j < n; ++j) out[j] = 0;
      return;
    }
    for (int j = 0; j < n; ++j) s += exp((double)x[j] - m);
    for (int j = 0; j < n; ++j) out[j] = exp((double)x[j] - m) / s;
    return;
  }
  double mean = 0, var = 0, ms = 0;
  for (int j = 0; j < n; ++j) mean += x[j];
  mean /= n;
  for (int j = 0; j < n; ++j) var += (x[j] - mean) * (x[j] - mean);
  var /= n;
  for (int j = 0; j < n; ++j) ms += (double)x[j] * x[j];
  ms /= n;
  for (int j = 0; j < n; ++j) {
    double v = kind == LAYERNORM ? (x[j] - mean) / sqrt(var + eps) : x[j] / sqrt(ms + eps);
    if (g) v *= g[j];
    if (b && kind == LAYERNORM) v += b[j];
    out[j] = v;
  }
}

static nnc_simd_status call(int kind, int rows, int cols, const float *x, ptrdiff_t ldx,
                            const float *g, const float *b, float eps, float *y, ptrdiff_t ldy,
                            const nnc_simd_par *par, nnc_simd_error *err) {
  if (kind == SOFTMAX) return nnc_simd_softmax(rows, cols, x, ldx, y, ldy, par, err);
  if (kind == LAYERNORM) return nnc_simd_layernorm(rows, cols, x, ldx, g, b, eps, y, ldy, par, err);
  return nnc_simd_rmsnorm(rows, cols, x, ldx, g, eps, y, ldy, par, err);
}

/* One case; offset shifts the inputs (mean far from 0 tests the two-pass
 * variance), inplace writes y over x. */
static int run(int kind, int rows, int cols, int pad, int threads, int affine, float offset,
               int inplace) {
  ptrdiff_t ldx = cols + pad, ldy = inplace ? ldx : cols + 2 * pad + 1;
  float *x = trandom((size_t)(rows * ldx), -3, 3);
  for (long i = 0; i < (long)rows * ldx; ++i) x[i] += offset;
  float *g = affine ? trandom((size_t)cols, 0.5f, 1.5f) : NULL;
  float *b = affine ? trandom((size_t)cols, -1, 1) : NULL;
  double *ref = malloc(sizeof(double) * (size_t)(rows * cols + 1));
  assert_non_null(ref);
  for (int r = 0; r < rows; ++r) ref_row(kind, x + r * ldx, cols, g, b, 1e-5, ref + r * cols);
  float *y = inplace ? x : talloc((size_t)(rows * ldy));
  if (!inplace) tpoison(y, (size_t)(rows * ldy));
  tpool tp = {threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, threads};
  nnc_simd_error err;
  nnc_simd_status st = call(kind, rows, cols, x, ldx, g, b, 1e-5f, y, ldy, threads ? &par : NULL,
                            &err);
  assert_int_equal(st, NNC_SIMD_OK);
  char what[160];
  snprintf(what, sizeof what, "%s %dx%d pad=%d threads=%d affine=%d offset=%g inplace=%d",
           kind == SOFTMAX ? "softmax" : kind == LAYERNORM ? "layernorm" : "rmsnorm", rows, cols,
           pad, threads, affine, (double)offset, inplace);
  int ok = tcheck(what, y, ldy, ref, rows, cols, 1e-5);
  if (!inplace) {
    for (int r = 0; r + 1 < rows && ok; ++r)
      for (ptrdiff_t j = cols; j < ldy; ++j)
        if (!isnan(y[r * ldy + j])) {
          fprintf(stderr, "%s: padding written at [%d,%td]\n", what, r, j);
          ok = 0;
          break;
        }
    free(y);
  }
  free(x); free(g); free(b); free(ref);
  return ok;
}

static void test_sizes(void **state) {
  (void)state;
  static const int sz[] = {1, 3, 7, 8, 9, 17, 129, 768, 3073};
  int fails = 0, n = 0;
  for (int kind = 0; kind < 3; ++kind)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 9; ++c, ++n) {
        int rows = r == 0 ? 1 : r == 1 ? 5 : 130;
        fails += !run(kind, rows, sz[c], n % 3, n % 4, n % 2, 0.0f, 0);
      }
  assert_int_equal(fails, 0);
}

static void test_inplace_offset(void **state) {
  (void)state;
  int fails = 0;
  for (int kind = 0; kind < 3; ++kind) {
    fails += !run(kind, 33, 1023, 1, 2, 1, 0.0f, 1);
    /* Softmax must not overflow on large values; the norms must keep the
     * variance of data whose mean is 100 times its spread. */
    fails += !run(kind, 9, 771, 0, 0, 1, 300.0f, 0);
  }
  assert_int_equal(fails, 0);
}

/* Masked entries: -inf in some places, a whole row of -inf gives zeros. */
static void test_softmax_inf(void **state) {
  (void)state;
  enum { R = 4, C = 19 };
  float x[R * C], y[R * C];
  for (int i = 0; i < R * C; ++i) x[i] = trng(-2, 2);
  for (int j = 0; j < C; ++j) x[1 * C + j] = -INFINITY;       /* all masked */
  for (int j = 3; j < C; j += 2) x[2 * C + j] = -INFINITY;    /* some masked */
  for (int j = 0; j < C; ++j) x[3 * C + j] = j == 17 ? 5.0f : -INFINITY; /* one left */
  double ref[R * C];
  for (int r = 0; r < R; ++r) ref_row(SOFTMAX, x + r * C, C, NULL, NULL, 0, ref + r * C);
  for (int threads = 0; threads < 3; ++threads) {
    tpoison(y, R * C);
    tpool tp = {threads, 0};
    nnc_simd_par par = {tpool_parallel_for, &tp, threads};
    assert_int_equal(nnc_simd_softmax(R, C, x, C, y, C, threads ? &par : NULL, NULL), NNC_SIMD_OK);
    assert_true(tcheck("softmax -inf", y, C, ref, R, C, 1e-5));
    for (int j = 0; j < C; ++j) assert_true(y[1 * C + j] == 0.0f);
    for (int j = 3; j < C; j += 2) assert_true(y[2 * C + j] == 0.0f);
    assert_true(fabsf(y[3 * C + 17] - 1.0f) <= 1e-6f);
  }
}

/* A constant row: variance 0, layernorm gives beta (eps keeps it finite). */
static void test_constant_row(void **state) {
  (void)state;
  float x[11], y[11], g[11], b[11];
  for (int j = 0; j < 11; ++j) {
    x[j] = 2.5f;
    g[j] = 1.0f + j;
    b[j] = 0.25f * j;
  }
  assert_int_equal(nnc_simd_layernorm(1, 11, x, 11, g, b, 1e-5f, y, 11, NULL, NULL), NNC_SIMD_OK);
  for (int j = 0; j < 11; ++j) assert_true(fabsf(y[j] - b[j]) <= 1e-6f);
  assert_int_equal(nnc_simd_softmax(1, 11, x, 11, y, 11, NULL, NULL), NNC_SIMD_OK);
  for (int j = 0; j < 11; ++j) assert_true(fabsf(y[j] - 1.0f / 11) <= 1e-7f);
}

static void test_empty_and_errors(void **state) {
  (void)state;
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
  tpoison(y, 6);
  for (int kind = 0; kind < 3; ++kind) {
    assert_int_equal(call(kind, 0, 5, NULL, 5, NULL, NULL, 1e-5f, NULL, 5, NULL, NULL), NNC_SIMD_OK);
    assert_int_equal(call(kind, 3, 0, NULL, 0, NULL, NULL, 1e-5f, NULL, 0, NULL, NULL), NNC_SIMD_OK);
    nnc_simd_error err;
    assert_int_equal(call(kind, -1, 3, x, 3, NULL, NULL, 1e-5f, y, 3, NULL, &err), NNC_SIMD_E_ARG);
    assert_non_null(strstr(err.msg, "rows=-1"));
    assert_int_equal(call(kind, 2, 3, x, 2, NULL, NULL, 1e-5f, y, 3, NULL, &err), NNC_SIMD_E_ARG);
    assert_non_null(strstr(err.msg, "ldx=2"));
    assert_int_equal(call(kind, 2, 3, NULL, 3, NULL, NULL, 1e-5f, y, 3, NULL, &err), NNC_SIMD_E_ARG);
    assert_non_null(strstr(err.msg, "expected input and output"));
    tpool tp = {0, 0};
    nnc_simd_par par = {tpool_parallel_for, &tp, 0};
    assert_int_equal(call(kind, 2, 3, x, 3, NULL, NULL, 1e-5f, y, 3, &par, &err), NNC_SIMD_E_ARG);
    assert_non_null(strstr(err.msg, "nthreads"));
  }
  nnc_simd_error err;
  assert_int_equal(nnc_simd_layernorm(2, 3, x, 3, NULL, NULL, -1.0f, y, 3, NULL, &err),
                   NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "eps >= 0, found -1"));
  for (int i = 0; i < 6; ++i) assert_true(isnan(y[i]));
}

int main(void) {
  trng_seed(2);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes),         cmocka_unit_test(test_inplace_offset),
      cmocka_unit_test(test_softmax_inf),   cmocka_unit_test(test_constant_row),
      cmocka_unit_test(test_empty_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
