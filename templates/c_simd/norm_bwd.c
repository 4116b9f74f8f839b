/* templates/c_simd/norm_bwd.c — the backward of layernorm and rmsnorm over
 * the rows of a matrix, for training: dx, dgamma and dbeta in one kernel.
 *
 * Per row (statistics recomputed from x with the forward's own row_stats.c,
 * so that xhat matches the forward's): xhat = (x - mean) * rstd (mean 0 for
 * rmsnorm), g = dy * gamma,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (no mean(g) for rmsnorm)
 * and over the rows dgamma = sum dy * xhat, dbeta = sum dy.
 *
 * The column sums are what makes a backward nondeterministic when threads
 * add into one buffer. Here the rows are cut into chunks of NB_CHUNK rows,
 * a number fixed at compile time: a task takes whole chunks, and each chunk
 * adds its rows, in order, into its own row of partial sums in the
 * workspace. A second pass adds the chunks' partials in chunk order (in
 * double), a task per block of columns. The chunks, their order and every
 * sum's order are the same whatever the threads: the same bits for any
 * thread count. */
#include "internal.h"

#include <limits.h>

static const char *const KERNEL = "nnc_simd_norm_bwd";

/* Rows per chunk: 32 rows keep the partials at 1/16 of x's size (two rows
 * of partials per 32 rows) and still give 10 chunks to a batch of 300. */
#define NB_CHUNK 32
/* Columns a task of the second pass sums: its accumulators (doubles) stay
 * on the stack and in L1. */
#define NB_COLS 256

typedef struct nb_job {
  int rows, cols, rms;
  float eps;
  const float *x;
  ptrdiff_t ldx;
  const float *dy;
  ptrdiff_t lddy;
  const float *dres;     /* the residual stream's gradient, added to dx; NULL: none */
  ptrdiff_t lddres;
  const float *gamma;
  float *dx;
  ptrdiff_t lddx;
  float *dgamma, *dbeta; /* NULL when not written */
  float *pg, *pb;        /* partials of dgamma, dbeta: [chunks][ldp] */
  ptrdiff_t ldp;
  int chunks;
} nb_job;

/* Rows of partials are padded to a cache line so that two tasks never
 * write one line. */
static ptrdiff_t partial_ld(int cols) {
  return (ptrdiff_t)nnc_simd_round_up((size_t)cols, NNC_SIMD_ALIGN / sizeof(float));
}

size_t nnc_simd_norm_bwd_workspace_bytes(int rows, int cols, int nthreads) {
  (void)nthreads; /* partials are per chunk, not per thread */
  if (rows <= 0 || cols <= 0) return 0;
  size_t chunks = ((size_t)rows + NB_CHUNK - 1) / NB_CHUNK;
  return NNC_SIMD_ALIGN + 2 * chunks * (size_t)partial_ld(cols) * sizeof(float);
}

/* *sg = sum g and *sgd = sum g * (x - c) over the row, g = dy * gamma. */
static void row_sums(const float *x, const float *dy, const float *gamma, int n, float c,
                     float *sg, float *sgd) {
  nnc_vf vc = nnc_vset1(c);
  nnc_vf s0 = nnc_vzero(), s1 = nnc_vzero(), t0 = nnc_vzero(), t1 = nnc_vzero();
  int j = 0;
  for (; j + 2 * NNC_VW <= n; j += 2 * NNC_VW) {
    nnc_vf g0 = nnc_vload(dy + j), g1 = nnc_vload(dy + j + NNC_VW);
    if (gamma) {
      g0 = nnc_vmul(g0, nnc_vload(gamma + j));
      g1 = nnc_vmul(g1, nnc_vload(gamma + j + NNC_VW));
    }
    s0 = nnc_vadd(s0, g0);
    s1 = nnc_vadd(s1, g1);
    t0 = nnc_vfma(g0, nnc_vsub(nnc_vload(x + j), vc), t0);
    t1 = nnc_vfma(g1, nnc_vsub(nnc_vload(x + j + NNC_VW), vc), t1);
  }
  for (; j + NNC_VW <= n; j += NNC_VW) {
    nnc_vf g = nnc_vload(dy + j);
    if (gamma) g = nnc_vmul(g, nnc_vload(gamma + j));
    s0 = nnc_vadd(s0, g);
    t0 = nnc_vfma(g, nnc_vsub(nnc_vload(x + j), vc), t0);
  }
  float s = nnc_vhsum(nnc_vadd(s0, s1)), t = nnc_vhsum(nnc_vadd(t0, t1));
  for (; j < n; ++j) {
    float g = gamma ? dy[j] * gamma[j] : dy[j];
    s += g;
    t += g * (x[j] - c);
  }
  *sg = s;
  *sgd = t;
}

/* Row r: dx, and dy * xhat and dy added into the chunk's partials pg, pb
 * (either may be NULL). */
static void row_bwd(const nb_job *jb, int r, float *pg, float *pb) {
  const float *x = jb->x + (ptrdiff_t)r * jb->ldx, *dy = jb->dy + (ptrdiff_t)r * jb->lddy;
  const float *gamma = jb->gamma;
  float *dx = jb->dx + (ptrdiff_t)r * jb->lddx;
  const float *res = jb->dres ? jb->dres + (ptrdiff_t)r * jb->lddres : NULL;
  int n = jb->cols;
  float mean = 0.0f, rstd, sg, sgd;
  if (jb->rms) rstd = nnc_simd_row_rms_inv(x, n, jb->eps);
  else nnc_simd_row_moments(x, n, jb->eps, &mean, &rstd);
  row_sums(x, dy, gamma, n, mean, &sg, &sgd);
  /* dx = rstd * (g - (xhat * mgx + mg)) */
  float mg = jb->rms ? 0.0f : sg / (float)n, mgx = rstd * sgd / (float)n;
  nnc_vf vm = nnc_vset1(mean), vr = nnc_vset1(rstd), vmg = nnc_vset1(mg), vmgx = nnc_vset1(mgx);
  int j = 0;
  for (; j + NNC_VW <= n; j += NNC_VW) {
    nnc_vf d = nnc_vload(dy + j);
    nnc_vf xh = nnc_vmul(nnc_vsub(nnc_vload(x + j), vm), vr);
    nnc_vf g = gamma ? nnc_vmul(d, nnc_vload(gamma + j)) : d;
    nnc_vf v = nnc_vmul(vr, nnc_vsub(g, nnc_vfma(xh, vmgx, vmg)));
    nnc_vstore(dx + j, res ? nnc_vadd(v, nnc_vload(res + j)) : v);
    if (pg) nnc_vstore(pg + j, nnc_vfma(d, xh, nnc_vload(pg + j)));
    if (pb) nnc_vstore(pb + j, nnc_vadd(nnc_vload(pb + j), d));
  }
  for (; j < n; ++j) {
    float d = dy[j], xh = (x[j] - mean) * rstd, g = gamma ? d * gamma[j] : d;
    dx[j] = rstd * (g - fmaf(xh, mgx, mg)) + (res ? res[j] : 0.0f);
    if (pg) pg[j] = fmaf(d, xh, pg[j]);
    if (pb) pb[j] += d;
  }
}

/* a * b for the task sizing of nnc_simd_run_rows, capped at INT_MAX. */
static int elems(int a, int b) { return b > 0 && a > INT_MAX / b ? INT_MAX : a * b; }

/* Chunks [c0, c1): each zeroes its partials and adds its rows in order. */
static void chunk_task(void *ctx, int c0, int c1) {
  const nb_job *jb = ctx;
  for (int c = c0; c < c1; ++c) {
    float *pg = jb->pg ? jb->pg + (ptrdiff_t)c * jb->ldp : NULL;
    float *pb = jb->pb ? jb->pb + (ptrdiff_t)c * jb->ldp : NULL;
    if (pg) memset(pg, 0, sizeof(float) * (size_t)jb->cols);
    if (pb) memset(pb, 0, sizeof(float) * (size_t)jb->cols);
    int r1 = (c + 1) * NB_CHUNK < jb->rows ? (c + 1) * NB_CHUNK : jb->rows;
    for (int r = c * NB_CHUNK; r < r1; ++r) row_bwd(jb, r, pg, pb);
  }
}

/* out[j0..j1) = the sum over the chunks, in chunk order, of p[c][j]. */
static void sum_chunks(const float *p, ptrdiff_t ldp, int chunks, int j0, int j1, float *out) {
  double acc[NB_COLS] = {0};
  for (int c = 0; c < chunks; ++c) {
    const float *pc = p + (ptrdiff_t)c * ldp;
    for (int j = j0; j < j1; ++j) acc[j - j0] += pc[j];
  }
  for (int j = j0; j < j1; ++j) out[j] = (float)acc[j - j0];
}

/* Column blocks [b0, b1) of NB_COLS columns. */
static void sum_task(void *ctx, int b0, int b1) {
  const nb_job *jb = ctx;
  for (int b = b0; b < b1; ++b) {
    int j0 = b * NB_COLS, j1 = j0 + NB_COLS < jb->cols ? j0 + NB_COLS : jb->cols;
    if (jb->dgamma) sum_chunks(jb->pg, jb->ldp, jb->chunks, j0, j1, jb->dgamma);
    if (jb->dbeta) sum_chunks(jb->pb, jb->ldp, jb->chunks, j0, j1, jb->dbeta);
  }
}

nnc_simd_status nnc_simd_norm_bwd(int rows, int cols, int rms, float eps, const float *x,
                                  ptrdiff_t ldx, const float *dy, ptrdiff_t lddy,
                                  const float *gamma, float *dx, ptrdiff_t lddx, float *dgamma,
                                  float *dbeta, const nnc_simd_par *par, void *workspace,
                                  size_t workspace_bytes, nnc_simd_error *err) {
  return nnc_simd_norm_bwd_res(rows, cols, rms, eps, x, ldx, dy, lddy, NULL, 0, gamma, dx, lddx, dgamma, dbeta,
                               par, workspace, workspace_bytes, err);
}

nnc_simd_status nnc_simd_norm_bwd_res(int rows, int cols, int rms, float eps, const float *x,
                                      ptrdiff_t ldx, const float *dy, ptrdiff_t lddy, const float *dres,
                                      ptrdiff_t lddres, const float *gamma, float *dx, ptrdiff_t lddx,
                                      float *dgamma, float *dbeta, const nnc_simd_par *par, void *workspace,
                                      size_t workspace_bytes, nnc_simd_error *err) {
  if (rows < 0 || cols < 0)
    return nnc_simd_fail(err, KERNEL, "expected rows, cols >= 0, found rows=%d cols=%d",
                         rows, cols);
  if (!(eps >= 0.0f)) return nnc_simd_fail(err, KERNEL, "expected eps >= 0, found %g", (double)eps);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  /* What is written: dgamma only with a gamma, dbeta only for layernorm. */
  if (!gamma) dgamma = NULL;
  if (rms) dbeta = NULL;
  if (cols == 0) return NNC_SIMD_OK;
  if (rows == 0) { /* the sums over no rows */
    if (dgamma) memset(dgamma, 0, sizeof(float) * (size_t)cols);
    if (dbeta) memset(dbeta, 0, sizeof(float) * (size_t)cols);
    return NNC_SIMD_OK;
  }
  if (!x || !dy || !dx)
    return nnc_simd_fail(err, KERNEL, "expected x, dy and dx, found x=%p dy=%p dx=%p",
                         (const void *)x, (const void *)dy, (void *)dx);
  if (ldx < cols || lddy < cols || lddx < cols || (dres && lddres < cols))
    return nnc_simd_fail(err, KERNEL, "expected ldx, lddy, lddx (and lddres) >= cols=%d, found ldx=%td "
                         "lddy=%td lddx=%td lddres=%td", cols, ldx, lddy, lddx, lddres);
  int nthreads = nnc_simd_threads(par);
  size_t need = nnc_simd_norm_bwd_workspace_bytes(rows, cols, nthreads);
  if ((dgamma || dbeta) && (!workspace || workspace_bytes < need))
    return nnc_simd_fail(err, KERNEL, "expected a workspace of %zu bytes, found %zu at %p", need,
                         workspace ? workspace_bytes : 0, workspace);
  nb_job jb = {rows, cols, rms, eps, x, ldx, dy, lddy, dres, lddres, gamma, dx, lddx, dgamma, dbeta,
               NULL, NULL, partial_ld(cols), (rows + NB_CHUNK - 1) / NB_CHUNK};
  if (dgamma || dbeta) {
    float *ws = nnc_simd_align_ptr(workspace);
    jb.pg = dgamma ? ws : NULL;
    jb.pb = dbeta ? ws + (ptrdiff_t)jb.chunks * jb.ldp : NULL;
  }
  /* A chunk is a "row" of NB_CHUNK * cols elements to the task sizing;
   * how chunks are grouped into tasks changes no result. */
  nnc_simd_run_rows(par, jb.chunks, elems(NB_CHUNK, cols), chunk_task, &jb);
  if (dgamma || dbeta)
    nnc_simd_run_rows(par, (cols + NB_COLS - 1) / NB_COLS, elems(jb.chunks, NB_COLS), sum_task, &jb);
  return NNC_SIMD_OK;
}
