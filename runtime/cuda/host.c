/* runtime/cuda/host.c — pinned host buffers and copies between host and
 * device. */
#include <stdio.h>

#include "nnrt_cuda_impl.h"

nnrt_status nnrt_cuda_host_alloc(size_t bytes, void **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_host_alloc: out is NULL");
  *out = NULL;
  nnrt_status st = nnrt_cuda_need_device("allocating pinned host memory", err);
  if (st != NNRT_OK) return st;
  void *p = NULL;
  /* cudaHostAlloc(0) gives NULL; one byte keeps the pointer valid and unique. */
  char what[96];
  snprintf(what, sizeof what, "allocating %zu bytes of pinned host memory", bytes);
  st = nnrt_cuda_check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault), what, err);
  if (st != NNRT_OK) return st;
  *out = p;
  return NNRT_OK;
}

void nnrt_cuda_host_free(void *p) {
  if (p) cudaFreeHost(p);
}

nnrt_status nnrt_cuda_copy_async(void *dst, const void *src, size_t bytes, cudaStream_t stream,
                                 nnrt_error *err) {
  if (bytes == 0) return NNRT_OK;
  if (!dst || !src)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_copy_async: %s is NULL (%zu bytes to copy)",
                       !dst ? "dst" : "src", bytes);
  char what[96];
  snprintf(what, sizeof what, "copying %zu bytes", bytes);
  return nnrt_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), what, err);
}
