/* templates/c_simd/parallel.c — running a kernel's tasks on the caller's
 * pool, or in order on the calling thread when there is none. */
#include "internal.h"

int nnc_simd_threads(const nnc_simd_par *par) {
  return par && par->parallel_for ? par->nthreads : 1;
}

void nnc_simd_run(const nnc_simd_par *par, int ntasks, nnc_simd_task_fn task, void *ctx) {
  if (ntasks <= 0) return;
  /* One task needs no pool: skipping it saves a wake-up of every thread. */
  if (par && par->parallel_for && ntasks > 1) {
    par->parallel_for(par->pool, ntasks, task, ctx);
    return;
  }
  for (int t = 0; t < ntasks; ++t) task(ctx, t, 0);
}

void *nnc_simd_align_ptr(void *p) {
  uintptr_t u = (uintptr_t)p;
  u = (u + NNC_SIMD_ALIGN - 1) & ~(uintptr_t)(NNC_SIMD_ALIGN - 1);
  return (void *)u;
}

int nnc_simd_overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t ua = (uintptr_t)a, ub = (uintptr_t)b;
  if (an == 0 || bn == 0) return 0;
  return ua < ub + bn && ub < ua + an;
}

typedef struct rows_job {
  nnc_simd_rows_fn fn;
  void *ctx;
  int rows, per_task;
} rows_job;

static void rows_task(void *ctx, int task, int thread) {
  const rows_job *j = ctx;
  int r0 = task * j->per_task;
  int r1 = r0 + j->per_task < j->rows ? r0 + j->per_task : j->rows;
  j->fn(j->ctx, r0, r1);
}

#ifndef NNC_ROW_MIN_ELEMS
#define NNC_ROW_MIN_ELEMS 16384
#endif

void nnc_simd_run_rows(const nnc_simd_par *par, int rows, int cols, nnc_simd_rows_fn fn,
                       void *ctx) {
  if (rows <= 0) return;
  /* A task smaller than NNC_ROW_MIN_ELEMS is not worth a wake-up; the tuner
   * sets it from the target's caches. */
  const long min_elems = NNC_ROW_MIN_ELEMS;
  int threads = nnc_simd_threads(par);
  long c = cols > 0 ? cols : 1;
  int by_size = (int)((min_elems + c - 1) / c);
  int by_threads = (rows + 4 * threads - 1) / (4 * threads);
  int per = by_size > by_threads ? by_size : by_threads;
  if (threads == 1 || per >= rows) {
    fn(ctx, 0, rows);
    return;
  }
  rows_job j = {fn, ctx, rows, per};
  nnc_simd_run(par, (rows + per - 1) / per, rows_task, &j);
}
