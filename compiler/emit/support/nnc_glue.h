/* support/nnc_glue.h — what a C SIMD model shares: the thread pool as the
 * kernels see it and a row-parallel runner for the generated loops. Built
 * into lib<model>. */
#ifndef NNC_GLUE_H
#define NNC_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/nnc_simd.h"
#include "../runtime/nnrt.h"
#include "nnc_weights.h"

/* A pool for the kernels: parallel_for through libnnrt, serial when the
 * pool has one thread. */
typedef struct nnc_glue_pool {
  nnrt_pool *pool;
  int nthreads;
} nnc_glue_pool;

nnrt_status nnc_glue_pool_create(int threads, nnc_glue_pool *out, nnrt_error *err);
void nnc_glue_pool_destroy(nnc_glue_pool *p);
/* The kernels' view of p (valid while p lives). */
nnc_simd_par nnc_glue_par(nnc_glue_pool *p);

/* Runs fn(ctx, r0, r1) over [0, rows) in blocks of rows of `cols` elements,
 * spread over the pool's threads when there is enough work. */
typedef void (*nnc_glue_rows_fn)(void *ctx, int64_t r0, int64_t r1);
void nnc_glue_rows(nnc_glue_pool *p, int64_t rows, int64_t cols, nnc_glue_rows_fn fn, void *ctx);

#endif
