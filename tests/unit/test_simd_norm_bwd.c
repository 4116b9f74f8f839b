/* tests/unit/test_simd_norm_bwd.c — nnc_simd_norm_bwd (the backward of
 * layernorm and rmsnorm) against a float64 version written here: odd
 * widths, no rows, gamma NULL, with and without dbeta, padded rows, dx in
 * place of dy, and the same bits from 1 and 3 threads and serially. */
#include "test_simd_util.h"

/* dx [rows][cols], dgamma and dbeta [cols] of one backward, in float64. */
static void ref_bwd(int rms, int rows, int cols, const float *x, ptrdiff_t ldx, const float *dy,
                    ptrdiff_t lddy, const float *gamma, double eps, double *dx, double *dg,
                    double *db) {
  for (int j = 0; j < cols; ++j) dg[j] = db[j] = 0;
  double *xh = malloc(sizeof(double) * (size_t)cols);
  assert_non_null(xh);
  for (int r = 0; r < rows; ++r) {
    const float *xr = x + r * ldx, *dr = dy + r * lddy;
    double mean = 0, var = 0, mg = 0, mgx = 0;
    if (!rms) {
      for (int j = 0; j < cols; ++j) mean += xr[j];
      mean /= cols;
    }
    for (int j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    double rstd = 1 / sqrt(var / cols + eps);
    for (int j = 0; j < cols; ++j) {
      double g = (double)dr[j] * (gamma ? gamma[j] : 1);
      xh[j] = (xr[j] - mean) * rstd;
      mg += g / cols;
      mgx += g * xh[j] / cols;
    }
    for (int j = 0; j < cols; ++j) {
      double g = (double)dr[j] * (gamma ? gamma[j] : 1);
      dx[(long)r * cols + j] = rstd * (g - (rms ? 0 : mg) - xh[j] * mgx);
      dg[j] += dr[j] * xh[j];
      db[j] += dr[j];
    }
  }
  free(xh);
}

typedef struct tcase {
  int rms, rows, cols, affine, with_db, pad, inplace;
} tcase;

typedef struct outs {
  float *dx, *dg, *db;
} outs;

/* One backward with `threads` (0: serial) into fresh NaN-poisoned outputs;
 * inplace: dx starts as a copy of dy and is passed as dy too. dgamma is
 * passed even without gamma and dbeta even for rmsnorm: they must stay NaN. */
static outs run_once(const tcase *c, const float *x, ptrdiff_t ldx, const float *dy,
                     ptrdiff_t lddy, const float *g, ptrdiff_t lddx, int threads) {
  size_t ndx = (size_t)c->rows * (size_t)lddx + 1;
  outs o = {talloc(ndx), talloc((size_t)c->cols + 1), talloc((size_t)c->cols + 1)};
  tpoison(o.dx, ndx);
  tpoison(o.dg, (size_t)c->cols + 1);
  tpoison(o.db, (size_t)c->cols + 1);
  const float *d = dy;
  if (c->inplace) { /* lddx == lddy */
    memcpy(o.dx, dy, sizeof(float) * ndx);
    d = o.dx;
  }
  size_t wb = nnc_simd_norm_bwd_workspace_bytes(c->rows, c->cols, threads ? threads : 1);
  void *ws = malloc(wb ? wb : 1);
  assert_non_null(ws);
  tpool tp = {threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, threads};
  nnc_simd_error err = {0};
  nnc_simd_status st = nnc_simd_norm_bwd(c->rows, c->cols, c->rms, 1e-5f, x, ldx, d, lddy, g,
                                         o.dx, lddx, o.dg, c->with_db ? o.db : NULL,
                                         threads ? &par : NULL, ws, wb, &err);
  if (st != NNC_SIMD_OK) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(st, NNC_SIMD_OK);
  free(ws);
  return o;
}

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

/* One case: pad widens every ld; serially, then 1 and 3 threads, which must
 * give the same bits. */
static int run(tcase c) {
  const int rows = c.rows, cols = c.cols;
  ptrdiff_t ldx = cols + c.pad, lddy = cols + 2 * c.pad;
  ptrdiff_t lddx = c.inplace ? lddy : cols + c.pad + 1;
  float *x = trandom((size_t)rows * (size_t)ldx + 1, -2, 2);
  for (long i = 0; i < (long)rows * ldx; ++i) x[i] += 0.5f; /* a mean away from 0 */
  float *dy = trandom((size_t)rows * (size_t)lddy + 1, -1, 1);
  float *g = c.affine ? trandom((size_t)cols, 0.5f, 1.5f) : NULL;
  double *rdx = malloc(sizeof(double) * ((size_t)rows * (size_t)cols + 1));
  double *rdg = malloc(sizeof(double) * ((size_t)cols + 1));
  double *rdb = malloc(sizeof(double) * ((size_t)cols + 1));
  assert_true(rdx && rdg && rdb);
  ref_bwd(c.rms, rows, cols, x, ldx, dy, lddy, g, 1e-5, rdx, rdg, rdb);
  char what[160];
  snprintf(what, sizeof what, "%s %dx%d affine=%d dbeta=%d pad=%d inplace=%d",
           c.rms ? "rmsnorm" : "layernorm", rows, cols, c.affine, c.with_db, c.pad, c.inplace);
  static const int threads[3] = {0, 1, 3};
  outs o[3];
  for (int t = 0; t < 3; ++t) o[t] = run_once(&c, x, ldx, dy, lddy, g, lddx, threads[t]);
  int ok = tcheck(what, o[0].dx, lddx, rdx, rows, cols, 1e-5);
  /* dgamma and dbeta: checked where written, NaN where not */
  if (g) ok &= tcheck(what, o[0].dg, cols, rdg, 1, cols, 1e-5);
  else ok &= cols == 0 || isnan(o[0].dg[0]);
  if (c.with_db && !c.rms) ok &= tcheck(what, o[0].db, cols, rdb, 1, cols, 1e-5);
  else ok &= cols == 0 || isnan(o[0].db[0]);
  ok &= isnan(o[0].dg[cols]) && isnan(o[0].db[cols]);
  for (int r = 0; r + 1 < rows && !c.inplace; ++r) /* the padding of dx */
    for (ptrdiff_t j = cols; j < lddx; ++j) ok &= isnan(o[0].dx[r * lddx + j]) != 0;
  for (int t = 1; t < 3; ++t)
    if (!same_bits(o[0].dx, o[t].dx, (size_t)rows * (size_t)lddx) ||
        !same_bits(o[0].dg, o[t].dg, (size_t)cols) || !same_bits(o[0].db, o[t].db, (size_t)cols)) {
      fprintf(stderr, "%s: %d threads differ from serial\n", what, threads[t]);
      ok = 0;
    }
  if (!ok) fprintf(stderr, "FAILED: %s\n", what);
  for (int t = 0; t < 3; ++t) {
    free(o[t].dx);
    free(o[t].dg);
    free(o[t].db);
  }
  free(x); free(dy); free(g); free(rdx); free(rdg); free(rdb);
  return ok;
}

/* The shapes of the GPU test (tests/gpu/test_norm_bwd.cu), both norms, with
 * gamma or not, dbeta or not. */
static void test_shapes(void **state) {
  (void)state;
  static const int shapes[][2] = {{0, 13}, {1, 13}, {37, 13}, {300, 768}, {5, 3000}};
  int fails = 0;
  for (int s = 0; s < 5; ++s)
    for (int rms = 0; rms < 2; ++rms)
      for (int affine = 0; affine < 2; ++affine)
        for (int db = 0; db < 2; ++db)
          fails += !run((tcase){rms, shapes[s][0], shapes[s][1], affine, db, 0, 0});
  assert_int_equal(fails, 0);
}

/* Padded rows, dx over dy, widths around the vector length, more than one
 * chunk with a partial last one. */
static void test_layouts(void **state) {
  (void)state;
  int fails = 0;
  for (int rms = 0; rms < 2; ++rms) {
    fails += !run((tcase){rms, 70, 771, 1, 1, 3, 0});
    fails += !run((tcase){rms, 45, 129, 1, 1, 2, 1});
    fails += !run((tcase){rms, 33, 1, 1, 1, 0, 0});
    fails += !run((tcase){rms, 65, 17, 1, 1, 1, 1});
  }
  assert_int_equal(fails, 0);
}

static void test_errors(void **state) {
  (void)state;
  float x[6] = {1, 2, 3, 4, 5, 6}, dy[6] = {1, 1, 1, 1, 1, 1}, g[3] = {1, 1, 1}, dx[6], dg[3];
  tpoison(dx, 6);
  tpoison(dg, 3);
  nnc_simd_error err;
  assert_int_equal(nnc_simd_norm_bwd(-1, 3, 0, 1e-5f, x, 3, dy, 3, g, dx, 3, dg, NULL, NULL, NULL,
                                     0, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "rows=-1"));
  assert_int_equal(nnc_simd_norm_bwd(2, 3, 0, -1.0f, x, 3, dy, 3, g, dx, 3, dg, NULL, NULL, NULL,
                                     0, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "eps >= 0"));
  assert_int_equal(nnc_simd_norm_bwd(2, 3, 0, 1e-5f, NULL, 3, dy, 3, g, dx, 3, dg, NULL, NULL,
                                     NULL, 0, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "expected x, dy and dx"));
  assert_int_equal(nnc_simd_norm_bwd(2, 3, 0, 1e-5f, x, 3, dy, 2, g, dx, 3, dg, NULL, NULL, NULL,
                                     0, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "lddy=2"));
  size_t wb = nnc_simd_norm_bwd_workspace_bytes(2, 3, 1);
  void *ws = malloc(wb);
  assert_non_null(ws);
  assert_int_equal(nnc_simd_norm_bwd(2, 3, 0, 1e-5f, x, 3, dy, 3, g, dx, 3, dg, NULL, NULL, ws,
                                     wb - 1, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "workspace"));
  /* the failed calls wrote nothing */
  for (int i = 0; i < 6; ++i) assert_true(isnan(dx[i]));
  for (int i = 0; i < 3; ++i) assert_true(isnan(dg[i]));
  /* neither dgamma nor dbeta: no workspace needed */
  assert_int_equal(nnc_simd_norm_bwd(2, 3, 1, 1e-5f, x, 3, dy, 3, NULL, dx, 3, NULL, NULL, NULL,
                                     NULL, 0, &err), NNC_SIMD_OK);
  for (int i = 0; i < 6; ++i) assert_false(isnan(dx[i]));
  free(ws);
}

/* nnc_simd_norm_bwd_res: dx is nnc_simd_norm_bwd's plus dres, to the bit
 * (the same float expression, then one add), padded dres rows, dres == dx,
 * and an lddres below cols refused. */
static void test_residual(void **state) {
  (void)state;
  const int rows = 37, cols = 45;
  const ptrdiff_t ld = cols + 3;
  float *x = trandom((size_t)rows * (size_t)ld, -2, 2), *dy = trandom((size_t)rows * (size_t)ld, -1, 1);
  float *g = trandom((size_t)cols, 0.5f, 1.5f), *res = trandom((size_t)rows * (size_t)ld, -1, 1);
  float *dx = malloc(sizeof(float) * (size_t)rows * (size_t)ld), *dxr = malloc(sizeof(float) * (size_t)rows * (size_t)ld);
  float dg[45], db[45], dg2[45], db2[45];
  size_t wb = nnc_simd_norm_bwd_workspace_bytes(rows, cols, 1);
  void *ws = malloc(wb);
  assert_true(dx && dxr && ws);
  nnc_simd_error err = {0};
  for (int rms = 0; rms < 2; ++rms) {
    assert_int_equal(nnc_simd_norm_bwd(rows, cols, rms, 1e-5f, x, ld, dy, ld, g, dx, ld, dg, db, NULL, ws, wb, &err),
                     NNC_SIMD_OK);
    assert_int_equal(nnc_simd_norm_bwd_res(rows, cols, rms, 1e-5f, x, ld, dy, ld, res, ld, g, dxr, ld, dg2, db2, NULL,
                                           ws, wb, &err), NNC_SIMD_OK);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) {
        float want = dx[r * ld + j] + res[r * ld + j];
        assert_memory_equal(&dxr[r * ld + j], &want, sizeof want);
      }
    assert_memory_equal(dg, dg2, sizeof(float) * cols);
    /* in place over dres */
    memcpy(dxr, res, sizeof(float) * (size_t)rows * (size_t)ld);
    assert_int_equal(nnc_simd_norm_bwd_res(rows, cols, rms, 1e-5f, x, ld, dy, ld, dxr, ld, g, dxr, ld, dg2, db2, NULL,
                                           ws, wb, &err), NNC_SIMD_OK);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) {
        float want = dx[r * ld + j] + res[r * ld + j];
        assert_memory_equal(&dxr[r * ld + j], &want, sizeof want);
      }
  }
  assert_int_equal(nnc_simd_norm_bwd_res(rows, cols, 0, 1e-5f, x, ld, dy, ld, res, cols - 1, g, dxr, ld, dg2, db2,
                                         NULL, ws, wb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "lddres"));
  free(x);
  free(dy);
  free(g);
  free(res);
  free(dx);
  free(dxr);
  free(ws);
}

int main(void) {
  trng_seed(7);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_layouts),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_residual),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
