/* tests/unit/test_simd_misc.c — elementwise activations (against libm in
 * float64: a dense sweep, odd lengths, in place, threads, NaN and +-inf)
 * and the embedding gather (odd widths, padded rows, bad ids; from a table
 * held as a GEMM's packed B). */
#include "test_simd_util.h"

#include "gemm_tiles.h"
#include "simd_math.h"

#include <float.h>

/* The activation contract: within 1e-6 relative of the float64 value, or
 * 1e-9 * |x| absolute where the result sinks toward 0 (gelu far left). */
static int act_close(nnc_simd_act act, float x, float got) {
  double r = tact(act, x);
  double tol = 1e-6 * fabs(r) + 1e-9 * fabs(x) + 1e-37;
  if (!(fabs(got - r) <= tol)) {
    fprintf(stderr, "act %d at x=%.9g: got %.9g expected %.9g\n", (int)act, (double)x,
            (double)got, r);
    return 0;
  }
  return 1;
}

static void test_act_sweep(void **state) {
  (void)state;
  const size_t n = 200003; /* odd: a tail after the vectors and after the tasks */
  float *x = talloc(n), *y = talloc(n);
  for (size_t i = 0; i < n; ++i) x[i] = -30.0f + 60.0f * (float)i / (float)n;
  int fails = 0;
  for (int act = 0; act < NNC_SIMD_ACT_COUNT; ++act)
    for (int threads = 0; threads < 4; threads += 3) {
      tpoison(y, n);
      tpool tp = {threads, 0};
      nnc_simd_par par = {tpool_parallel_for, &tp, threads};
      assert_int_equal(nnc_simd_activation((nnc_simd_act)act, n, x, y, threads ? &par : NULL,
                                           NULL), NNC_SIMD_OK);
      for (size_t i = 0; i < n && fails < 5; ++i) fails += !act_close((nnc_simd_act)act, x[i], y[i]);
      if (threads) assert_true(tp.calls == 1);
    }
  assert_int_equal(fails, 0);
  free(x);
  free(y);
}

static void test_act_lengths_inplace(void **state) {
  (void)state;
  static const size_t lens[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 129};
  int fails = 0;
  for (int act = 0; act < NNC_SIMD_ACT_COUNT; ++act)
    for (int l = 0; l < 10; ++l) {
      size_t n = lens[l];
      float *x = trandom(n + 1, -8, 8), *keep = talloc(n + 1);
      memcpy(keep, x, (n + 1) * sizeof(float));
      x[n] = NAN; /* one past the end: must stay NaN */
      assert_int_equal(nnc_simd_activation((nnc_simd_act)act, n, x, x, NULL, NULL), NNC_SIMD_OK);
      for (size_t i = 0; i < n; ++i) fails += !act_close((nnc_simd_act)act, keep[i], x[i]);
      assert_true(isnan(x[n]));
      free(x);
      free(keep);
    }
  assert_int_equal(fails, 0);
}

static void test_act_special(void **state) {
  (void)state;
  /* NaN stays NaN; +-inf give the limits. */
  float x[5] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX};
  static const double hi[NNC_SIMD_ACT_COUNT] = {INFINITY, INFINITY, INFINITY, INFINITY,
                                                INFINITY, 1, 1};
  static const double lo[NNC_SIMD_ACT_COUNT] = {-INFINITY, 0, 0, 0, 0, 0, -1};
  for (int act = 0; act < NNC_SIMD_ACT_COUNT; ++act) {
    float y[5];
    assert_int_equal(nnc_simd_activation((nnc_simd_act)act, 5, x, y, NULL, NULL), NNC_SIMD_OK);
    assert_true(isnan(y[0]));
    if (isinf(hi[act])) {
      assert_true(isinf(y[1]) && y[1] > 0);
      assert_true(y[3] >= FLT_MAX); /* large stays large */
    } else {
      assert_true(y[1] == (float)hi[act] && y[3] == (float)hi[act]);
    }
    if (isinf(lo[act])) {
      assert_true(isinf(y[2]) && y[2] < 0);
    } else {
      if (!(fabs(y[2] - lo[act]) <= 1e-30 && fabs(y[4] - lo[act]) <= 1e-30))
        fprintf(stderr, "act %d: -inf -> %g, -FLT_MAX -> %g\n", act, (double)y[2], (double)y[4]);
      assert_true(fabs(y[2] - lo[act]) <= 1e-30);
      assert_true(fabs(y[4] - lo[act]) <= 1e-30);
    }
  }
}

/* A recurrent cell's sigmoid and tanh (simd_math.h, nnc_vsigmoid_gate):
 * within an absolute 3e-7 of float64 over a dense sweep of [-120, 120]
 * (past the clamps at -104 and 89 too), the limits at +-inf and FLT_MAX,
 * NaN kept. */
static void test_gate_math(void **state) {
  (void)state;
  double worst_s = 0, worst_t = 0;
  float xs[NNC_VW], s[NNC_VW], t[NNC_VW];
  for (int i = 0; i <= 240000; i += NNC_VW) {
    for (int l = 0; l < NNC_VW; l++) xs[l] = -120.0f + (float)(i + l) * 0.001f;
    nnc_vstore(s, nnc_vsigmoid_gate(nnc_vload(xs)));
    nnc_vstore(t, nnc_vtanh_gate(nnc_vload(xs)));
    for (int l = 0; l < NNC_VW; l++) {
      double es = fabs(s[l] - 1.0 / (1.0 + exp(-(double)xs[l]))), et = fabs(t[l] - tanh((double)xs[l]));
      worst_s = es > worst_s ? es : worst_s;
      worst_t = et > worst_t ? et : worst_t;
    }
  }
  print_message("gate math: sigmoid within %.2g, tanh within %.2g\n", worst_s, worst_t);
  assert_true(worst_s <= 3e-7 && worst_t <= 3e-7);
  const float special[5] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX};
  const float sig[5] = {NAN, 1, 0, 1, 0}, th[5] = {NAN, 1, -1, 1, -1};
  for (int k = 0; k < 5; k++) {
    for (int l = 0; l < NNC_VW; l++) xs[l] = special[k];
    nnc_vstore(s, nnc_vsigmoid_gate(nnc_vload(xs)));
    nnc_vstore(t, nnc_vtanh_gate(nnc_vload(xs)));
    if (isnan(sig[k])) {
      assert_true(isnan(s[0]) && isnan(t[0]));
    } else {
      assert_true(fabs(s[0] - sig[k]) <= 1e-30 && fabs(t[0] - th[k]) <= 1e-7);
    }
  }
}

static void test_act_errors(void **state) {
  (void)state;
  float x[8] = {0}, y[8];
  nnc_simd_error err;
  assert_int_equal(nnc_simd_activation(NNC_SIMD_ACT_COUNT, 8, x, y, NULL, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "unknown activation"));
  assert_int_equal(nnc_simd_activation(NNC_SIMD_ACT_RELU, 8, NULL, y, NULL, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "expected input and output"));
  assert_int_equal(nnc_simd_activation(NNC_SIMD_ACT_RELU, 7, x, x + 1, NULL, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "overlapping"));
  assert_int_equal(nnc_simd_activation(NNC_SIMD_ACT_RELU, 0, NULL, NULL, NULL, NULL), NNC_SIMD_OK);
}

/* dx = dy act'(x) over a sweep with odd length, threads and in place, within
 * 2e-6 of max(|dx|, |dy|) in float64 (act' crosses 0, where a relative bound
 * would ask the impossible). */
static void test_act_grad(void **state) {
  (void)state;
  const size_t n = 100003;
  float *x = talloc(n), *dy = trandom(n, -2, 2), *dx = talloc(n);
  for (size_t i = 0; i < n; ++i) x[i] = -25.0f + 50.0f * (float)i / (float)n;
  int fails = 0;
  for (int act = 0; act < NNC_SIMD_ACT_COUNT; ++act)
    for (int threads = 0; threads < 4; threads += 3) {
      tpoison(dx, n);
      tpool tp = {threads, 0};
      nnc_simd_par par = {tpool_parallel_for, &tp, threads};
      assert_int_equal(nnc_simd_activation_grad((nnc_simd_act)act, n, x, dy, dx, threads ? &par : NULL, NULL),
                       NNC_SIMD_OK);
      for (size_t i = 0; i < n && fails < 5; ++i) {
        double r = (double)dy[i] * tdact((nnc_simd_act)act, x[i]);
        if (!(fabs(dx[i] - r) <= 2e-6 * fmax(fabs(r), fabs(dy[i])) + 1e-30)) {
          fprintf(stderr, "act' %d at x=%.9g dy=%.9g: got %.9g expected %.9g\n", act, (double)x[i], (double)dy[i],
                  (double)dx[i], r);
          fails++;
        }
      }
    }
  /* in place over dy, and the errors */
  memcpy(dx, dy, n * sizeof(float));
  assert_int_equal(nnc_simd_activation_grad(NNC_SIMD_ACT_RELU, 7, x + 50001, dx, dx, NULL, NULL), NNC_SIMD_OK);
  for (int i = 0; i < 7; ++i) assert_true(dx[i] == (x[50001 + i] > 0 ? dy[i] : 0.0f));
  nnc_simd_error e;
  assert_int_equal(nnc_simd_activation_grad(NNC_SIMD_ACT_SILU, 9, x, dy, dx + 1, NULL, &e) == NNC_SIMD_OK, 1);
  assert_int_not_equal(nnc_simd_activation_grad(NNC_SIMD_ACT_SILU, 9, x, dx, dx + 1, NULL, &e), NNC_SIMD_OK);
  assert_non_null(strstr(e.msg, "overlapping"));
  assert_int_equal(fails, 0);
  free(x);
  free(dy);
  free(dx);
}

/* Cross-entropy rows and their gradient against float64, odd V, a row with
 * a huge logit, threads; a target out of range names its row. */
static void test_cross_entropy(void **state) {
  (void)state;
  enum { R = 37, V = 1003 };
  float *x = trandom(R * V, -6, 6), *dx = talloc(R * V), loss[R];
  int32_t t[R];
  for (int r = 0; r < R; ++r) t[r] = (r * 131) % V;
  x[5 * V + 17] = 80.0f;
  for (int threads = 0; threads < 4; threads += 3) {
    tpool tp = {threads, 0};
    nnc_simd_par par = {tpool_parallel_for, &tp, threads};
    tpoison(dx, R * V);
    assert_int_equal(nnc_simd_cross_entropy(R, V, x, t, loss, dx, 0.25f, threads ? &par : NULL, NULL), NNC_SIMD_OK);
    for (int r = 0; r < R; ++r) {
      const float *xr = x + r * V;
      double m = -INFINITY, s = 0;
      for (int v = 0; v < V; ++v) m = fmax(m, xr[v]);
      for (int v = 0; v < V; ++v) s += exp(xr[v] - m);
      double want = m + log(s) - xr[t[r]];
      assert_true(fabs(loss[r] - want) <= 1e-6 * fabs(want) + 1e-6);
      for (int v = 0; v < V; ++v) {
        double g = (exp(xr[v] - m) / s - (v == t[r])) * 0.25;
        assert_true(fabs(dx[r * V + v] - g) <= 1e-6 * 0.25);
      }
    }
  }
  nnc_simd_error e;
  t[9] = V;
  assert_int_not_equal(nnc_simd_cross_entropy(R, V, x, t, loss, NULL, 1.0f, NULL, &e), NNC_SIMD_OK);
  assert_non_null(strstr(e.msg, "row 9"));
  free(x);
  free(dx);
}

static void test_embedding(void **state) {
  (void)state;
  static const int widths[] = {1, 3, 17, 129};
  for (int w = 0; w < 4; ++w) {
    int rows = 11, cols = widths[w], n = 9;
    ptrdiff_t ldt = cols + 2, ldo = cols + 1;
    float *table = trandom((size_t)(rows * ldt), -1, 1), *out = talloc((size_t)(n * ldo));
    int32_t ids[9] = {0, 10, 3, 3, 7, 1, 10, 0, 5};
    tpoison(out, (size_t)(n * ldo));
    assert_int_equal(nnc_simd_embedding(n, ids, rows, cols, table, ldt, out, ldo, NULL),
                     NNC_SIMD_OK);
    for (int i = 0; i < n; ++i) {
      assert_memory_equal(out + i * ldo, table + ids[i] * ldt, (size_t)cols * sizeof(float));
      if (i + 1 < n) assert_true(isnan(out[i * ldo + cols]));
    }
    free(table);
    free(out);
  }
}

static void test_embedding_errors(void **state) {
  (void)state;
  float table[12] = {0}, out[12];
  tpoison(out, 12);
  nnc_simd_error err;
  int32_t bad_hi[3] = {0, 4, 1}, bad_lo[2] = {1, -1};
  assert_int_equal(nnc_simd_embedding(3, bad_hi, 4, 3, table, 3, out, 3, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "ids[1] = 4"));
  assert_non_null(strstr(err.msg, "[0, 4)"));
  assert_int_equal(nnc_simd_embedding(2, bad_lo, 4, 3, table, 3, out, 3, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "ids[1] = -1"));
  assert_int_equal(nnc_simd_embedding(2, bad_lo, 4, 3, table, 2, out, 3, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "ld_table"));
  assert_int_equal(nnc_simd_embedding(-1, bad_lo, 4, 3, table, 3, out, 3, &err), NNC_SIMD_E_ARG);
  assert_int_equal(nnc_simd_embedding(0, NULL, 4, 3, NULL, 3, NULL, 3, &err), NNC_SIMD_OK);
  /* Nothing was written by the failing calls (the bad id is checked first). */
  for (int i = 0; i < 12; ++i) assert_true(isnan(out[i]));
}

/* A vocabulary of 11 split over 3 ranks of 4 rows (the last rank's 3 and a
 * zero row): each rank copies its ids' rows and zeros the others, so the
 * three outputs sum to the whole table's gather. */
static void test_embedding_rows(void **state) {
  (void)state;
  const int vocab = 11, chunk = 4, cols = 5, n = 9;
  float *table = trandom((size_t)(vocab * cols), -1, 1), sum[9 * 5] = {0}, out[9 * 5];
  int32_t ids[9] = {0, 10, 3, 4, 7, 8, 10, 0, 5};
  for (int r = 0; r < 3; ++r) {
    float slice[4 * 5] = {0};
    int rows = r * chunk + chunk <= vocab ? chunk : vocab - r * chunk;
    memcpy(slice, table + r * chunk * cols, (size_t)(rows * cols) * sizeof(float));
    tpoison(out, (size_t)(n * cols));
    assert_int_equal(nnc_simd_embedding_rows(n, ids, vocab, r * chunk, chunk, cols, slice, cols, out, cols, NULL),
                     NNC_SIMD_OK);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < cols; ++j) {
        float want = ids[i] / chunk == r ? table[ids[i] * cols + j] : 0.0f;
        assert_true(out[i * cols + j] == want);
        sum[i * cols + j] += out[i * cols + j];
      }
  }
  for (int i = 0; i < n; ++i) assert_memory_equal(sum + i * cols, table + ids[i] * cols, (size_t)cols * sizeof(float));
  /* the bound is the vocabulary, not the rank's rows */
  nnc_simd_error err;
  int32_t bad[2] = {3, 11};
  assert_int_equal(nnc_simd_embedding_rows(2, bad, vocab, 8, chunk, cols, table, cols, out, cols, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "ids[1] = 11"));
  assert_non_null(strstr(err.msg, "[0, 11)"));
  free(table);
}

/* Rows gathered out of a table held as a GEMM's packed B (a tied
 * embedding) equal the plain gather's bit for bit: rows past a multiple of
 * NR and columns past twice KC (and the other way round), both layouts
 * (b_trans: the table is B [N,K]; else B [K,N]), the first and last row
 * (its panel padded), serial and on 3 threads; then the errors, which
 * write nothing. */
static void test_embedding_packed(void **state) {
  (void)state;
  const int sizes[2][2] = {{3 * NNC_GEMM_NR + 5, 2 * NNC_GEMM_KC + 37}, {2 * NNC_GEMM_KC + 37, 3 * NNC_GEMM_NR + 5}};
  for (int s = 0; s < 2; ++s)
    for (int t = 0; t < 2; ++t)
      for (int threads = 0; threads < 4; threads += 3) {
        const int rows = sizes[s][0], cols = sizes[s][1], n = 41;
        const ptrdiff_t ldo = cols + 3;
        float *table = trandom((size_t)rows * cols, -1, 1), *out = talloc((size_t)n * ldo),
              *plain = talloc((size_t)n * ldo);
        nnc_simd_gemm_args g = {.N = t ? rows : cols, .K = t ? cols : rows, .B = table, .ldb = cols, .b_trans = t};
        float *packed = talloc(nnc_simd_gemm_packed_b_floats(&g));
        nnc_simd_gemm_pack_b(&g, NULL, packed);
        int32_t ids[41];
        for (int i = 0; i < n; ++i) ids[i] = i == 0 ? 0 : i == 1 ? rows - 1 : (int32_t)(trng(0, 1) * rows) % rows;
        tpoison(out, (size_t)n * ldo);
        tpoison(plain, (size_t)n * ldo);
        tpool tp = {threads, 0};
        nnc_simd_par par = {tpool_parallel_for, &tp, threads};
        assert_int_equal(nnc_simd_embedding(n, ids, rows, cols, table, cols, plain, ldo, NULL), NNC_SIMD_OK);
        assert_int_equal(nnc_simd_embedding_packed(n, ids, rows, cols, t, packed, out, ldo, threads ? &par : NULL, NULL),
                         NNC_SIMD_OK);
        for (int i = 0; i < n; ++i) {
          assert_memory_equal(out + i * ldo, plain + i * ldo, (size_t)cols * sizeof(float));
          assert_true(isnan(out[i * ldo + cols]));
        }
        free(table), free(out), free(plain), free(packed);
      }
  float packed[4 * NNC_GEMM_NR] = {0}, out[12];
  tpoison(out, 12);
  nnc_simd_error err;
  int32_t bad[3] = {0, 4, 1};
  assert_int_equal(nnc_simd_embedding_packed(3, bad, 4, 3, 1, packed, out, 3, NULL, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "ids[1] = 4"));
  assert_int_equal(nnc_simd_embedding_packed(2, bad, 4, 3, 1, packed, out, 2, NULL, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "ld_out"));
  assert_int_equal(nnc_simd_embedding_packed(2, bad, 4, 3, 1, NULL, out, 3, NULL, &err), NNC_SIMD_E_ARG);
  assert_int_equal(nnc_simd_embedding_packed(-1, bad, 4, 3, 1, packed, out, 3, NULL, &err), NNC_SIMD_E_ARG);
  tpool tp = {0, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, 0};
  assert_int_equal(nnc_simd_embedding_packed(2, bad, 4, 3, 1, packed, out, 3, &par, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "nthreads"));
  assert_int_equal(nnc_simd_embedding_packed(0, NULL, 4, 3, 1, NULL, NULL, 3, NULL, &err), NNC_SIMD_OK);
  for (int i = 0; i < 12; ++i) assert_true(isnan(out[i]));
}

static void test_isa(void **state) {
  (void)state;
  const char *isa = nnc_simd_isa();
#if defined(NNC_ISA_GENERIC)
  assert_string_equal(isa, "generic");
#else
  assert_true(!strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "neon") ||
              !strcmp(isa, "generic"));
#endif
}

int main(void) {
  trng_seed(4);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_act_sweep),      cmocka_unit_test(test_act_lengths_inplace),
      cmocka_unit_test(test_act_special),    cmocka_unit_test(test_act_errors),
      cmocka_unit_test(test_gate_math),
      cmocka_unit_test(test_embedding),      cmocka_unit_test(test_embedding_errors),
      cmocka_unit_test(test_embedding_packed),
      cmocka_unit_test(test_isa),            cmocka_unit_test(test_act_grad),
      cmocka_unit_test(test_cross_entropy),  cmocka_unit_test(test_embedding_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
