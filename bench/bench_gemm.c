/* bench/bench_gemm.c — the C SIMD GEMM against the machine's FMA peak.
 *
 * Build (from the repository root; the sources are every .c file of
 * templates/c_simd):
 *   gcc -std=c11 -D_GNU_SOURCE -O3 -march=native -Itemplates/c_simd
 *       bench/bench_gemm.c templates/c_simd/[a-z]*.c -o bench_gemm -lpthread -lm
 * Run:
 *   ./bench_gemm [-t threads] [-r runs] [-m M] [-n N] [-k K] [-T (B is [N,K])]
 *                [-P (B packed once before the runs, as a weight at load)]
 *
 * The peak is measured, not taken from a data sheet: every thread runs a
 * loop of independent register-only FMAs (enough chains to cover the FMA
 * latency on every pipe) and the peak is the total flops over the wall
 * time. The GEMM (default M=512, K=768, N=3072) is run once to warm up,
 * then `runs` times; the median time gives GFLOP/s and the fraction of the
 * peak. The pool here is a minimal persistent pthread pool so that thread
 * creation is not timed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_pool.h"
#include "nnc_simd.h"
#include "gemm_tiles.h"
#include "simd.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* ------------------------------------------------------------ the peak */

#define PEAK_CHAINS 12
#define PEAK_ITERS 20000000L

typedef struct peak_ctx {
  float sink[64];
} peak_ctx;

/* 12 independent FMA chains: with a 4-cycle latency and 2 pipes, 8 would
 * do; 12 leaves slack. The multiplier is 1 and the addend tiny so that the
 * values stay finite and normal. */
static void peak_task(void *ctx, int task, int thread) {
  peak_ctx *pc = ctx;
  nnc_vf acc[PEAK_CHAINS];
  for (int i = 0; i < PEAK_CHAINS; ++i) acc[i] = nnc_vset1((float)(i + task));
  nnc_vf m = nnc_vset1(1.0f), a = nnc_vset1(1e-7f);
  for (long it = 0; it < PEAK_ITERS; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < PEAK_CHAINS; ++i) acc[i] = nnc_vfma(acc[i], m, a);
  }
  nnc_vf s = acc[0];
  for (int i = 1; i < PEAK_CHAINS; ++i) s = nnc_vadd(s, acc[i]);
  pc->sink[task % 64] = nnc_vhsum(s);
}

static double measure_peak(pool *p, int nthreads) {
  peak_ctx pc;
  memset(&pc, 0, sizeof pc);
  pool_parallel_for(p, nthreads, peak_task, &pc); /* warm-up: clocks ramp */
  double t0 = now_s();
  pool_parallel_for(p, nthreads, peak_task, &pc);
  double dt = now_s() - t0;
  double flops = (double)nthreads * PEAK_ITERS * PEAK_CHAINS * NNC_VW * 2.0;
  if (pc.sink[0] == 12345.0f) printf("(unlikely)\n");
  return flops / dt;
}

/* ------------------------------------------------------------ the GEMM */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int nthreads = 2, runs = 15, M = 512, N = 3072, K = 768, trans = 0, packed = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) nthreads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-m") && i + 1 < argc) M = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-k") && i + 1 < argc) K = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-T")) trans = 1;
    else if (!strcmp(argv[i], "-P")) packed = 1;
    else {
      fprintf(stderr, "usage: %s [-t threads] [-r runs] [-m M] [-n N] [-k K] [-T] [-P]\n", argv[0]);
      return 2;
    }
  }
  if (nthreads < 1 || runs < 1 || M < 1 || N < 1 || K < 1) {
    fprintf(stderr, "bench_gemm: expected positive -t, -r, -m, -n, -k\n");
    return 2;
  }
  pool p;
  worker_arg *args = calloc((size_t)nthreads, sizeof *args);
  if (!args || pool_start(&p, nthreads, args) != 0) {
    fprintf(stderr, "bench_gemm: could not start %d threads\n", nthreads);
    return 1;
  }
  double peak = measure_peak(&p, nthreads);

  float *a = malloc(sizeof(float) * (size_t)M * (size_t)K);
  float *b = malloc(sizeof(float) * (size_t)K * (size_t)N);
  float *c = malloc(sizeof(float) * (size_t)M * (size_t)N);
  double *times = malloc(sizeof(double) * (size_t)runs);
  float *bp = NULL;
  nnc_simd_gemm_args g = {0};
  g.M = M; g.N = N; g.K = K; g.batch = 1;
  g.A = a; g.lda = K;
  g.B = b; g.ldb = trans ? K : N; g.b_trans = trans;
  g.C = c; g.ldc = N;
  g.alpha = 1.0f;
  nnc_simd_par par = {pool_parallel_for, &p, nthreads};
  size_t wsb = nnc_simd_gemm_workspace_bytes(&g, nthreads);
  void *ws = malloc(wsb);
  int rc = 1;
  if (!a || !b || !c || !times || !ws) {
    fprintf(stderr, "bench_gemm: out of memory\n");
    goto out;
  }
  for (size_t i = 0; i < (size_t)M * K; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < (size_t)K * N; ++i) b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  if (packed) {
    /* B packed once, as a folder's prepare() packs a weight: the calls read it as it is */
    bp = malloc(sizeof(float) * nnc_simd_gemm_packed_b_floats(&g));
    if (!bp) {
      fprintf(stderr, "bench_gemm: out of memory\n");
      goto out;
    }
    nnc_simd_gemm_pack_b(&g, &par, bp);
    g.b_packed = bp;
  }
  nnc_simd_error err;
  if (nnc_simd_gemm(&g, &par, ws, wsb, &err) != NNC_SIMD_OK) {
    fprintf(stderr, "bench_gemm: %s\n", err.msg);
    goto out;
  }
  for (int r = 0; r < runs; ++r) {
    double t0 = now_s();
    nnc_simd_gemm(&g, &par, ws, wsb, NULL);
    times[r] = now_s() - t0;
  }
  qsort(times, (size_t)runs, sizeof *times, cmp_double);
  double med = times[runs / 2];
  double gflops = 2.0 * M * N * K / med / 1e9;
  printf("isa %s, %d thread%s, tiles MR=%d NR=%d KC=%d MC=%d NC=%d\n", nnc_simd_isa(), nthreads,
         nthreads > 1 ? "s" : "", NNC_GEMM_MR, NNC_GEMM_NR, NNC_GEMM_KC,
         NNC_GEMM_MC, NNC_GEMM_NC);
  printf("peak (register FMA loop)   %8.1f GFLOP/s\n", peak / 1e9);
  printf("gemm %dx%dx%d%s%s  %8.3f ms median of %d (min %.3f)  %8.1f GFLOP/s  %5.1f%% of peak\n",
         M, K, N, trans ? " B^T" : "", packed ? " B packed once" : "", med * 1e3, runs, times[0] * 1e3, gflops,
         100.0 * gflops * 1e9 / peak);
  rc = 0;
out:
  pool_stop(&p);
  free(args);
  free(a);
  free(b);
  free(c);
  free(times);
  free(ws);
  free(bp);
  return rc;
}
