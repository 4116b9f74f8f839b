/* bench/bench_pool.h — what the C SIMD benches (bench_gemm.c,
 * bench_attention.c) share: a minimal persistent pthread pool running
 * nnc_simd_task_fn tasks, so that thread creation is not timed.
 * Header-only (static functions): each bench is one translation unit. */
#ifndef NNC_BENCH_POOL_H
#define NNC_BENCH_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "nnc_simd.h"

typedef struct pool {
  int nthreads;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t start, done;
  unsigned long generation;
  int running;            /* workers still inside the current job */
  int quit;
  nnc_simd_task_fn task;
  void *ctx;
  int ntasks;
  atomic_int next;
} pool;

typedef struct worker_arg {
  pool *p;
  int id;
} worker_arg;

static void drain(pool *p, int id) {
  for (int t; (t = atomic_fetch_add(&p->next, 1)) < p->ntasks;) p->task(p->ctx, t, id);
}

static void *worker(void *arg) {
  worker_arg *w = arg;
  pool *p = w->p;
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (p->generation == seen && !p->quit) pthread_cond_wait(&p->start, &p->mu);
    if (p->quit) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    drain(p, w->id);
    pthread_mutex_lock(&p->mu);
    if (--p->running == 0) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

static void pool_parallel_for(void *pp, int ntasks, nnc_simd_task_fn task, void *ctx) {
  pool *p = pp;
  pthread_mutex_lock(&p->mu);
  p->task = task;
  p->ctx = ctx;
  p->ntasks = ntasks;
  atomic_store(&p->next, 0);
  p->running = p->nthreads - 1;
  p->generation++;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  drain(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->running > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

static int pool_start(pool *p, int nthreads, worker_arg *args) {
  memset(p, 0, sizeof *p);
  p->nthreads = nthreads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->start, NULL);
  pthread_cond_init(&p->done, NULL);
  p->threads = calloc((size_t)nthreads, sizeof *p->threads);
  if (!p->threads) return -1;
  for (int i = 1; i < nthreads; ++i) {
    args[i].p = p;
    args[i].id = i;
    if (pthread_create(&p->threads[i], NULL, worker, &args[i]) != 0) return -1;
  }
  return 0;
}

static void pool_stop(pool *p) {
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->nthreads; ++i) pthread_join(p->threads[i], NULL);
  free(p->threads);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->start);
  pthread_cond_destroy(&p->done);
}

#endif
