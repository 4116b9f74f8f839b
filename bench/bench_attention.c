/* bench/bench_attention.c — the C SIMD attention kernel at a model's shape.
 *
 * Build (from the repository root; the sources are every .c file of
 * templates/c_simd; the tuner's blocks go in as -D):
 *   gcc -std=c11 -D_GNU_SOURCE -O3 -march=native -Itemplates/c_simd
 *       [-DNNC_ATTN_BQ=16 -DNNC_ATTN_BK=40]
 *       bench/bench_attention.c templates/c_simd/[a-z]*.c -o bench_attention -lpthread -lm
 * Run:
 *   ./bench_attention [-t threads] [-r runs] [-b batch] [-H heads] [-q T] [-s S] [-d D]
 *                     [-c (causal)] [-p pad (mask: 0 none, 1 all ones, 2 padded)]
 *
 * Defaults: GPT-2's attention at batch 1, 12 heads, T = S = 128, D = Dv = 64.
 * BERT: -b 8 -p 2 (MiniLM's heads are -d 32). Layout [B,H,T,D], as the
 * emitter passes it. The padded mask gives batch item b a valid length of
 * S - (b % 4) * S / 8 (0 to 37.5% padding), like a batch of sentences.
 *
 * Two rates are printed: "dense" counts 2*T*S*(D+Dv) per (batch, head),
 * like the generated model's per-kernel table (so causal and padded runs
 * are credited with the masked pairs too); "visible" counts only the
 * unmasked (query, key) pairs. The median of `runs` timed calls (after one
 * warm-up) is reported, and the process CPU time per call: on a shared
 * machine the wall time swings with other load, the CPU time much less
 * (the pool sleeps rather than spins, so idle threads add nothing). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_pool.h"
#include "nnc_simd.h"

#ifndef NNC_ATTN_BQ
#define NNC_ATTN_BQ 16
#endif
#ifndef NNC_ATTN_BK
#define NNC_ATTN_BK 64
#endif

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }


static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static float lcg(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f;
}

int main(int argc, char **argv) {
  int nthreads = 2, runs = 50, B = 1, H = 12, T = 128, S = 128, D = 64, causal = 0, pad = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) nthreads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-b") && i + 1 < argc) B = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-H") && i + 1 < argc) H = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-q") && i + 1 < argc) T = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) S = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-d") && i + 1 < argc) D = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-p") && i + 1 < argc) pad = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-c")) causal = 1;
    else {
      fprintf(stderr, "usage: %s [-t threads] [-r runs] [-b batch] [-H heads] [-q T] [-s S] "
              "[-d D] [-c] [-p 0|1|2]\n", argv[0]);
      return 2;
    }
  }
  if (nthreads < 1 || runs < 1 || B < 1 || H < 1 || T < 1 || S < 1 || D < 1 || pad < 0 ||
      pad > 2) {
    fprintf(stderr, "bench_attention: expected positive -t -r -b -H -q -s -d and -p 0..2\n");
    return 2;
  }
  int Dv = D;
  pool p;
  worker_arg *args = calloc((size_t)nthreads, sizeof *args);
  if (!args || pool_start(&p, nthreads, args) != 0) {
    fprintf(stderr, "bench_attention: could not start %d threads\n", nthreads);
    return 1;
  }
  size_t nq = (size_t)B * H * T * D, nk = (size_t)B * H * S * D, nv = (size_t)B * H * S * Dv,
         no = (size_t)B * H * T * Dv;
  float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
  float *v = malloc(sizeof(float) * nv), *o = malloc(sizeof(float) * no);
  float *mask = malloc(sizeof(float) * (size_t)B * S);
  double *times = malloc(sizeof(double) * (size_t)runs);
  void *ws = NULL;
  int rc = 1;
  if (!q || !k || !v || !o || !mask || !times) {
    fprintf(stderr, "bench_attention: out of memory\n");
    goto out;
  }
  unsigned seed = 12345;
  for (size_t i = 0; i < nq; ++i) q[i] = lcg(&seed);
  for (size_t i = 0; i < nk; ++i) k[i] = lcg(&seed);
  for (size_t i = 0; i < nv; ++i) v[i] = lcg(&seed);
  double visible = 0;
  for (int b = 0; b < B; ++b) {
    int valid = pad == 2 ? S - (b % 4) * S / 8 : S;
    for (int j = 0; j < S; ++j) mask[(size_t)b * S + j] = j < valid ? 1.0f : 0.0f;
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < S; ++j)
        visible += j < valid && !(causal && j > i + (S - T));
  }
  visible *= H;
  nnc_simd_attn_args a;
  memset(&a, 0, sizeof a);
  a.batch = B; a.heads = H; a.T = T; a.S = S; a.D = D; a.Dv = Dv;
  a.q = q; a.q_st = D; a.q_sh = (ptrdiff_t)T * D; a.q_sb = (ptrdiff_t)H * T * D;
  a.k = k; a.k_st = D; a.k_sh = (ptrdiff_t)S * D; a.k_sb = (ptrdiff_t)H * S * D;
  a.v = v; a.v_st = Dv; a.v_sh = (ptrdiff_t)S * Dv; a.v_sb = (ptrdiff_t)H * S * Dv;
  a.out = o; a.o_st = Dv; a.o_sh = (ptrdiff_t)T * Dv; a.o_sb = (ptrdiff_t)H * T * Dv;
  a.scale = 1.0f / sqrtf((float)D);
  a.causal = causal;
  a.mask = pad ? mask : NULL;
  a.mask_sb = S;
  nnc_simd_par par = {pool_parallel_for, &p, nthreads};
  size_t wsb = nnc_simd_attention_workspace_bytes(&a, nthreads);
  ws = malloc(wsb);
  if (!ws) {
    fprintf(stderr, "bench_attention: out of memory\n");
    goto out;
  }
  nnc_simd_error err;
  if (nnc_simd_attention(&a, &par, ws, wsb, &err) != NNC_SIMD_OK) {
    fprintf(stderr, "bench_attention: %s\n", err.msg);
    goto out;
  }
  double cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  for (int r = 0; r < runs; ++r) {
    double t0 = now_s();
    nnc_simd_attention(&a, &par, ws, wsb, NULL);
    times[r] = now_s() - t0;
  }
  double cpu = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / runs;
  qsort(times, (size_t)runs, sizeof *times, cmp_double);
  double med = times[runs / 2];
  double dense = 2.0 * B * H * (double)T * S * (D + Dv), vis = 2.0 * visible * (D + Dv);
  double cks = 0;
  for (size_t i = 0; i < no; ++i) cks += o[i];
  printf("attention B=%d H=%d T=%d S=%d D=%d%s%s, %d thread%s, BQ=%d BK=%d: %.3f ms median of "
         "%d (min %.3f), cpu %.3f ms a call  dense %.1f GFLOP/s  visible %.1f GFLOP/s  (checksum %.6g)\n",
         B, H, T, S, D, causal ? " causal" : "", pad == 2 ? " padded" : pad ? " mask=1" : "",
         nthreads, nthreads > 1 ? "s" : "", NNC_ATTN_BQ, NNC_ATTN_BK, med * 1e3, runs,
         times[0] * 1e3, cpu * 1e3, dense / med / 1e9, vis / med / 1e9, cks);
  rc = 0;
out:
  pool_stop(&p);
  free(args);
  free(q);
  free(k);
  free(v);
  free(o);
  free(mask);
  free(times);
  free(ws);
  return rc;
}
