/* templates/c_simd/internal.h — helpers the kernels share, not part of the
 * public API: error formatting, running tasks, row statistics. */
#ifndef NNC_SIMD_INTERNAL_H
#define NNC_SIMD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nnc_simd.h"
#include "simd.h"

/* Fills err (when not NULL) with "kernel: " + the formatted text and returns
 * NNC_SIMD_E_ARG. */
nnc_simd_status nnc_simd_fail(nnc_simd_error *err, const char *kernel, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks a parallel description (NULL is serial): nthreads >= 1 when a
 * parallel_for is given. */
nnc_simd_status nnc_simd_check_par(const nnc_simd_par *par, const char *kernel,
                                   nnc_simd_error *err);

/* Windows of positive sizes, strides and dilations, padding >= 0, whose
 * OH x OW positions fit the padded image (gemm_windows.c): the GEMM's and
 * the pool's shared check. */
nnc_simd_status nnc_simd_check_windows(const nnc_simd_windows *w, const char *kernel, nnc_simd_error *err);

/* Threads the tasks may run on: 1 when serial. */
int nnc_simd_threads(const nnc_simd_par *par);

/* Runs task for t in [0, ntasks) through par, or in order when serial. */
void nnc_simd_run(const nnc_simd_par *par, int ntasks, nnc_simd_task_fn task, void *ctx);

/* Runs fn(ctx, r0, r1) over [0, rows) in blocks of rows, in parallel when
 * par allows; blocks are sized so that each holds at least min_elems
 * elements (cols per row) and there are a few per thread. */
typedef void (*nnc_simd_rows_fn)(void *ctx, int r0, int r1);
void nnc_simd_run_rows(const nnc_simd_par *par, int rows, int cols, nnc_simd_rows_fn fn,
                       void *ctx);

/* Mean and 1/sqrt(var + eps) of x[0..n) (two passes, float, many partial
 * sums so that rounding stays near one ulp for n in the thousands). */
void nnc_simd_row_moments(const float *x, int n, float eps, float *mean, float *rstd);
/* 1/sqrt(mean(x^2) + eps). */
float nnc_simd_row_rms_inv(const float *x, int n, float eps);

/* Rounds x up to a multiple of m. */
static inline size_t nnc_simd_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* The first address in p aligned to NNC_SIMD_ALIGN. */
void *nnc_simd_align_ptr(void *p);

/* Whether [a, a+an) and [b, b+bn) (bytes) share a byte. */
int nnc_simd_overlaps(const void *a, size_t an, const void *b, size_t bn);

#endif
