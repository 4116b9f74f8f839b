/* runtime/threadpool.c — a fixed pool of pthreads running parallel loops.
 *
 * A loop is published under the mutex with a new generation number; workers
 * wake, take tasks from a shared atomic counter (so uneven tasks balance
 * themselves), and check out. parallel_for returns only after every worker
 * has checked out of the generation, so none can touch the loop's fn/ctx
 * afterwards. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnrt.h"

typedef struct worker {
  nnrt_pool *pool;
  int index;
  pthread_t thread;
} worker;

struct nnrt_pool {
  int nthreads;
  worker *workers;  /* nthreads - 1 of them */
  int started;      /* workers whose thread runs */
  pthread_mutex_t mu;
  pthread_cond_t wake;  /* a new generation or stop */
  pthread_cond_t done;  /* pending reached 0 */
  uint64_t generation;
  int pending;          /* workers not yet checked out of this generation */
  bool stop;
  bool busy;            /* a loop is running */
  nnrt_task_fn fn;
  void *ctx;
  int64_t ntasks;
  atomic_int_fast64_t next;
};

static void run_tasks(nnrt_pool *p, nnrt_task_fn fn, void *ctx, int64_t ntasks, int thread) {
  for (;;) {
    int64_t t = (int64_t)atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (t >= ntasks) return;
    fn(ctx, t, thread);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  nnrt_pool *p = w->pool;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    nnrt_task_fn fn = p->fn;
    void *ctx = p->ctx;
    int64_t ntasks = p->ntasks;
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, fn, ctx, ntasks, w->index);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void stop_workers(nnrt_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
  p->started = 0;
}

static void free_pool(nnrt_pool *p) {
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p->workers);
  free(p);
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  return n > NNRT_POOL_MAX_THREADS ? NNRT_POOL_MAX_THREADS : (int)n;
}

nnrt_status nnrt_pool_create(int nthreads, nnrt_pool **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_pool_create: out is NULL");
  *out = NULL;
  if (nthreads < 0)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "thread count must be 0 (one per CPU) or positive, found %d", nthreads);
  if (nthreads > NNRT_POOL_MAX_THREADS)
    return nnrt_errorf(err, NNRT_E_SIZE, "thread count %d is above the maximum %d", nthreads,
                       NNRT_POOL_MAX_THREADS);
  if (nthreads == 0) nthreads = online_cpus();
  nnrt_pool *p = calloc(1, sizeof *p);
  if (!p) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory creating a thread pool");
  p->nthreads = nthreads;
  atomic_init(&p->next, 0);
  if (nthreads > 1) {
    p->workers = calloc((size_t)nthreads - 1, sizeof *p->workers);
    if (!p->workers) {
      free(p);
      return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory creating a pool of %d threads",
                         nthreads);
    }
  }
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p->workers);
    free(p);
    return nnrt_errorf(err, NNRT_E_NOMEM, "pthread_mutex_init failed for a thread pool");
  }
  if (pthread_cond_init(&p->wake, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
    return nnrt_errorf(err, NNRT_E_NOMEM, "pthread_cond_init failed for a thread pool");
  }
  if (pthread_cond_init(&p->done, NULL) != 0) {
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
    return nnrt_errorf(err, NNRT_E_NOMEM, "pthread_cond_init failed for a thread pool");
  }
  for (int i = 0; i < nthreads - 1; i++) {
    worker *w = &p->workers[i];
    w->pool = p;
    w->index = i + 1;
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
      stop_workers(p);
      free_pool(p);
      return nnrt_errorf(err, NNRT_E_NOMEM, "could not start thread %d of %d: %s", i + 2,
                         nthreads, strerror(rc));
    }
    p->started++;
  }
  *out = p;
  return NNRT_OK;
}

void nnrt_pool_destroy(nnrt_pool *pool) {
  if (!pool) return;
  stop_workers(pool);
  free_pool(pool);
}

int nnrt_pool_threads(const nnrt_pool *pool) { return pool ? pool->nthreads : 0; }

nnrt_status nnrt_pool_parallel_for(nnrt_pool *pool, int64_t ntasks, nnrt_task_fn fn, void *ctx,
                                   nnrt_error *err) {
  if (!pool || !fn)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_pool_parallel_for: pool or fn is NULL");
  if (ntasks < 0)
    return nnrt_errorf(err, NNRT_E_ARG, "task count must not be negative, found %lld",
                       (long long)ntasks);
  /* Each thread overshoots the shared counter once when the tasks run out;
   * keep that from wrapping. */
  if (ntasks > INT64_MAX - 2 * NNRT_POOL_MAX_THREADS)
    return nnrt_errorf(err, NNRT_E_SIZE, "task count %lld is above the maximum %lld",
                       (long long)ntasks, (long long)(INT64_MAX - 2 * NNRT_POOL_MAX_THREADS));
  if (pool->nthreads == 1 || ntasks <= 1) {
    /* Inline: no handoff is worth one task, and a 1-thread pool has no
     * workers. busy still guards against a task re-entering the pool. */
    pthread_mutex_lock(&pool->mu);
    bool busy = pool->busy;
    pool->busy = true;
    pthread_mutex_unlock(&pool->mu);
    if (busy)
      return nnrt_errorf(err, NNRT_E_STATE,
                         "parallel_for called while the pool runs another loop");
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
    pthread_mutex_lock(&pool->mu);
    pool->busy = false;
    pthread_mutex_unlock(&pool->mu);
    return NNRT_OK;
  }
  pthread_mutex_lock(&pool->mu);
  if (pool->busy) {
    pthread_mutex_unlock(&pool->mu);
    return nnrt_errorf(err, NNRT_E_STATE, "parallel_for called while the pool runs another loop");
  }
  pool->busy = true;
  pool->fn = fn;
  pool->ctx = ctx;
  pool->ntasks = ntasks;
  atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
  pool->pending = pool->started;
  pool->generation++;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);

  run_tasks(pool, fn, ctx, ntasks, 0);

  pthread_mutex_lock(&pool->mu);
  while (pool->pending > 0) pthread_cond_wait(&pool->done, &pool->mu);
  pool->busy = false;
  pthread_mutex_unlock(&pool->mu);
  return NNRT_OK;
}
