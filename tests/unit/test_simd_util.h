/* tests/unit/test_simd_util.h — what the test_simd_* programs share: a tiny
 * pthread parallel_for, random data, NaN poisoning and the error check. */
#ifndef TEST_SIMD_UTIL_H
#define TEST_SIMD_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc_simd.h"

/* ------------------------------------------------------- parallel_for */

/* Threads are started per call; each pulls task numbers from a shared
 * counter, so any task may run on any thread, in any order. Also counts
 * how often each task ran so tests can check "exactly once". */
typedef struct tpool {
  int nthreads;
  int calls;
} tpool;

typedef struct tjob {
  nnc_simd_task_fn task;
  void *ctx;
  int ntasks;
  atomic_int next;
  atomic_int busy[64];   /* per thread: 1 while a task runs on it */
  atomic_int clash;      /* two tasks ran on one thread index at once */
} tjob;

typedef struct targ {
  tjob *job;
  int id;
} targ;

static inline void *tpool_worker(void *p) {
  targ *a = p;
  tjob *j = a->job;
  for (int t; (t = atomic_fetch_add(&j->next, 1)) < j->ntasks;) {
    if (atomic_exchange(&j->busy[a->id], 1)) atomic_store(&j->clash, 1);
    j->task(j->ctx, t, a->id);
    atomic_store(&j->busy[a->id], 0);
  }
  return NULL;
}

static inline void tpool_parallel_for(void *pool, int ntasks, nnc_simd_task_fn task, void *ctx) {
  tpool *tp = pool;
  tjob j;
  memset(&j, 0, sizeof j);
  j.task = task;
  j.ctx = ctx;
  j.ntasks = ntasks;
  pthread_t th[64];
  targ args[64];
  int n = tp->nthreads < 64 ? tp->nthreads : 64;
  for (int i = 0; i < n; ++i) {
    args[i].job = &j;
    args[i].id = i;
  }
  for (int i = 1; i < n; ++i)
    if (pthread_create(&th[i], NULL, tpool_worker, &args[i]) != 0) n = i;
  tpool_worker(&args[0]);
  for (int i = 1; i < n; ++i) pthread_join(th[i], NULL);
  assert_false(atomic_load(&j.clash)); /* two tasks shared a thread index */
  tp->calls++;
}

/* ---------------------------------------------------------------- data */

static uint64_t trng_state = 0x9e3779b97f4a7c15ull;

static inline void trng_seed(uint64_t s) { trng_state = s * 0x9e3779b97f4a7c15ull + 1; }

/* Uniform in [lo, hi). */
static inline float trng(float lo, float hi) {
  trng_state ^= trng_state << 13;
  trng_state ^= trng_state >> 7;
  trng_state ^= trng_state << 17;
  return lo + (hi - lo) * (float)((trng_state >> 40) & 0xffffff) / 16777216.0f;
}

static inline float *talloc(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  assert_non_null(p);
  return p;
}

static inline float *trandom(size_t n, float lo, float hi) {
  float *p = talloc(n);
  for (size_t i = 0; i < n; ++i) p[i] = trng(lo, hi);
  return p;
}

static inline void tpoison(float *p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = NAN;
}

/* --------------------------------------------------------------- check */

/* Compares got[i*ldg + j] with ref[i*cols + j] (float64) for a rows x cols
 * block: each element must satisfy |got - ref| <= tol * (|ref| + rms(ref))
 * (relative error, with the tensor's own scale for elements near zero), and
 * NaN fails. Prints the worst element on failure; returns 1 when all pass. */
static inline int tcheck(const char *what, const float *got, ptrdiff_t ldg, const double *ref,
                  int rows, int cols, double tol) {
  double ss = 0;
  for (long i = 0; i < (long)rows * cols; ++i) ss += ref[i] * ref[i];
  double rms = rows * cols > 0 ? sqrt(ss / ((double)rows * cols)) : 0;
  double worst = 0;
  long wi = -1;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      double r = ref[(long)i * cols + j], g = got[(ptrdiff_t)i * ldg + j];
      double e = fabs(g - r) / (fabs(r) + rms + 1e-300);
      if (!(e <= tol)) {
        if (wi < 0 || !(e <= worst)) {
          worst = e;
          wi = (long)i * cols + j;
        }
      }
    }
  if (wi >= 0) {
    int i = (int)(wi / cols), j = (int)(wi % cols);
    fprintf(stderr, "%s: [%d,%d] got %.9g expected %.9g (rel err %.3g > %.3g, rms %.3g)\n",
            what, i, j, (double)got[(ptrdiff_t)i * ldg + j], ref[wi], worst, tol, rms);
    return 0;
  }
  return 1;
}

/* ---------------------------------------------- float64 activations */

static inline double tact(nnc_simd_act act, double x) {
  switch (act) {
  case NNC_SIMD_ACT_RELU: return x > 0 ? x : 0;
  case NNC_SIMD_ACT_GELU_ERF: return 0.5 * x * erfc(-x / sqrt(2.0));
  case NNC_SIMD_ACT_GELU_TANH: {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
  }
  case NNC_SIMD_ACT_SILU: return x / (1.0 + exp(-x));
  case NNC_SIMD_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case NNC_SIMD_ACT_TANH: return tanh(x);
  default: return x;
  }
}

/* act'(x) in float64, as the reference evaluator defines it (relu' 0 at 0). */
static inline double tdact(nnc_simd_act act, double x) {
  const double c = sqrt(2.0 / M_PI);
  switch (act) {
  case NNC_SIMD_ACT_RELU: return x > 0 ? 1.0 : 0.0;
  case NNC_SIMD_ACT_GELU_ERF: return 0.5 * (1.0 + erf(x / M_SQRT2)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
  case NNC_SIMD_ACT_GELU_TANH: {
    double t = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
  }
  case NNC_SIMD_ACT_SILU: {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
  }
  case NNC_SIMD_ACT_SIGMOID: {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 - s);
  }
  case NNC_SIMD_ACT_TANH: return 1.0 - tanh(x) * tanh(x);
  default: return 1.0;
  }
}

#endif
