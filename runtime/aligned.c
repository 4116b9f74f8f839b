/* runtime/aligned.c — aligned host memory (SIMD loads, cache lines). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <stdlib.h>

#include "nnrt.h"

nnrt_status nnrt_aligned_alloc(size_t size, size_t align, void **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_aligned_alloc: out is NULL");
  *out = NULL;
  if (align == 0 || (align & (align - 1)) != 0)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "nnrt_aligned_alloc: alignment must be a power of two, found %zu", align);
  if (align < sizeof(void *)) align = sizeof(void *);
  /* posix_memalign may return NULL for size 0; callers want a real pointer. */
  int rc = posix_memalign(out, align, size ? size : 1);
  if (rc != 0) {
    *out = NULL;
    return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory allocating %zu bytes aligned to %zu",
                       size, align);
  }
  return NNRT_OK;
}

void nnrt_aligned_free(void *p) { free(p); }
