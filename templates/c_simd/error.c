/* templates/c_simd/error.c — errors are values: the status and a message. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

nnc_simd_status nnc_simd_fail(nnc_simd_error *err, const char *kernel, const char *fmt, ...) {
  if (err) {
    int n = snprintf(err->msg, sizeof err->msg, "%s: ", kernel);
    if (n < 0 || (size_t)n >= sizeof err->msg) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
    err->code = NNC_SIMD_E_ARG;
  }
  return NNC_SIMD_E_ARG;
}

nnc_simd_status nnc_simd_check_par(const nnc_simd_par *par, const char *kernel,
                                   nnc_simd_error *err) {
  if (par && par->parallel_for && par->nthreads < 1)
    return nnc_simd_fail(err, kernel, "expected nthreads >= 1 with a parallel_for, found %d",
                         par->nthreads);
  return NNC_SIMD_OK;
}
