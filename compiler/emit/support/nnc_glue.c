/* support/nnc_glue.c — the thread pool and parallel loops of C SIMD models. */
#include "nnc_glue.h"

#include <stdlib.h>
#include <string.h>


nnrt_status nnc_glue_pool_create(int threads, nnc_glue_pool *out, nnrt_error *err) {
  memset(out, 0, sizeof *out);
  nnrt_status rc = nnrt_pool_create(threads, &out->pool, err);
  if (rc) return rc;
  out->nthreads = nnrt_pool_threads(out->pool);
  return NNRT_OK;
}

void nnc_glue_pool_destroy(nnc_glue_pool *p) {
  nnrt_pool_destroy(p->pool);
  memset(p, 0, sizeof *p);
}

typedef struct task_wrap {
  nnc_simd_task_fn task;
  void *ctx;
} task_wrap;

static void run_wrapped(void *ctx, int64_t task, int thread) {
  const task_wrap *w = ctx;
  w->task(w->ctx, (int)task, thread);
}

/* The model runs one forward pass at a time, so the pool is idle here; if it
 * still refuses, the tasks run in order on this thread. */
static void glue_parallel_for(void *pool, int ntasks, nnc_simd_task_fn task, void *ctx) {
  task_wrap w = {task, ctx};
  if (nnrt_pool_parallel_for(pool, ntasks, run_wrapped, &w, NULL) != NNRT_OK)
    for (int t = 0; t < ntasks; t++) task(ctx, t, 0);
}

nnc_simd_par nnc_glue_par(nnc_glue_pool *p) {
  nnc_simd_par par = {NULL, NULL, 1};
  if (p->nthreads > 1) {
    par.parallel_for = glue_parallel_for;
    par.pool = p->pool;
    par.nthreads = p->nthreads;
  }
  return par;
}

typedef struct rows_job {
  nnc_glue_rows_fn fn;
  void *ctx;
  int64_t rows, per_task;
} rows_job;

static void rows_task(void *ctx, int64_t task, int thread) {
  (void)thread;
  const rows_job *j = ctx;
  int64_t r0 = task * j->per_task;
  int64_t r1 = r0 + j->per_task < j->rows ? r0 + j->per_task : j->rows;
  j->fn(j->ctx, r0, r1);
}

void nnc_glue_rows(nnc_glue_pool *p, int64_t rows, int64_t cols, nnc_glue_rows_fn fn, void *ctx) {
  if (rows <= 0) return;
  /* below ~16K elements per task a wake-up costs more than it saves */
  const int64_t min_elems = 16384;
  int64_t c = cols > 0 ? cols : 1;
  int64_t by_size = (min_elems + c - 1) / c;
  int64_t by_threads = (rows + 4 * (int64_t)p->nthreads - 1) / (4 * (int64_t)p->nthreads);
  int64_t per = by_size > by_threads ? by_size : by_threads;
  if (p->nthreads <= 1 || per >= rows) {
    fn(ctx, 0, rows);
    return;
  }
  rows_job j = {fn, ctx, rows, per};
  if (nnrt_pool_parallel_for(p->pool, (rows + per - 1) / per, rows_task, &j, NULL) != NNRT_OK)
    fn(ctx, 0, rows);
}
