/* support/nnc_glue.c — weights loading and parallel loops for generated models. */
#include "nnc_glue.h"

#include <stdlib.h>
#include <string.h>

int64_t nnc_glue_numel(const nnrt_st_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->rank; i++) n *= d->shape[i];
  return n;
}

static int accepts(nnrt_dtype want, nnrt_dtype got) {
  return got == want || (want == NNRT_F32 && (got == NNRT_F16 || got == NNRT_BF16));
}

nnrt_status nnc_glue_load(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                          nnrt_error *err) {
  /* nnrt_st_check wants exact dtypes: check against a copy of the manifest
   * that takes the file's dtype wherever a conversion to f32 exists. */
  nnrt_st_desc *want = calloc((size_t)(n > 0 ? n : 1), sizeof *want);
  if (!want) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory checking the weights file");
  for (int i = 0; i < n; i++) {
    want[i] = manifest[i];
    const nnrt_st_tensor *t = NULL;
    if (nnrt_st_find(st, manifest[i].name, &t, NULL) == NNRT_OK && accepts(manifest[i].dtype, t->dtype))
      want[i].dtype = t->dtype;
  }
  nnrt_status rc = nnrt_st_check(st, want, n, NULL, 0, err);
  free(want);
  for (int i = 0; i < n && rc == NNRT_OK; i++) {
    const nnrt_st_tensor *t = NULL;
    rc = nnrt_st_find(st, manifest[i].name, &t, err);
    if (rc) break;
    size_t count = (size_t)nnc_glue_numel(&manifest[i]);
    if (manifest[i].dtype == NNRT_F32)
      rc = nnrt_st_copy_f32(st, t, dst[i], count, err);
    else
      rc = nnrt_st_copy(st, t, dst[i], count * nnrt_dtype_size(manifest[i].dtype), err);
  }
  return rc;
}

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
