/* runtime/st_copy.c — copying tensors out of a mapped file.
 *
 * safetensors data sits at any byte offset, so it is never read through a
 * typed pointer: bytes are copied, and halves are assembled from their two
 * little-endian bytes (the format's byte order, whatever the host's). */
#include <stdint.h>
#include <string.h>

#include "nnrt_st_impl.h"

static bool host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static nnrt_status check_args(const nnrt_st *st, const nnrt_st_tensor *t, const void *dst,
                              const char *fn, nnrt_error *err) {
  if (!st || !t || !dst) return nnrt_errorf(err, NNRT_E_ARG, "%s: st, t or dst is NULL", fn);
  /* Compared as addresses: t must be one of st's tensors, not a copy. */
  uintptr_t a = (uintptr_t)t, lo = (uintptr_t)st->tensors, hi = (uintptr_t)(st->tensors + st->n);
  if (a < lo || a >= hi)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: the tensor is not one of %s", fn, st->label);
  return NNRT_OK;
}

nnrt_status nnrt_st_copy(const nnrt_st *st, const nnrt_st_tensor *t, void *dst, size_t dst_size,
                         nnrt_error *err) {
  nnrt_status rc = check_args(st, t, dst, "nnrt_st_copy", err);
  if (rc != NNRT_OK) return rc;
  if (dst_size < t->nbytes) {
    char show[NNRT_SHOW_MAX];
    return nnrt_errorf(err, NNRT_E_SIZE, "%s: tensor \"%s\" has %zu bytes, the buffer only %zu",
                       st->label, nnrt_st_show(t->name, show), t->nbytes, dst_size);
  }
  if (t->nbytes) memcpy(dst, t->data, t->nbytes);
  return NNRT_OK;
}

nnrt_status nnrt_st_copy_f32(const nnrt_st *st, const nnrt_st_tensor *t, float *dst,
                             size_t dst_count, nnrt_error *err) {
  nnrt_status rc = check_args(st, t, dst, "nnrt_st_copy_f32", err);
  if (rc != NNRT_OK) return rc;
  char show[NNRT_SHOW_MAX];
  if (t->dtype != NNRT_F32 && t->dtype != NNRT_F16 && t->dtype != NNRT_BF16)
    return nnrt_errorf(err, NNRT_E_FORMAT,
                       "%s: tensor \"%s\": expected F32, F16 or BF16 to read as f32, found %s",
                       st->label, nnrt_st_show(t->name, show), nnrt_dtype_name(t->dtype));
  size_t n = (size_t)t->numel;
  if (dst_count < n)
    return nnrt_errorf(err, NNRT_E_SIZE,
                       "%s: tensor \"%s\" has %zu elements, the buffer only room for %zu",
                       st->label, nnrt_st_show(t->name, show), n, dst_count);
  const unsigned char *p = t->data;
  if (t->dtype == NNRT_F32) {
    if (host_little_endian()) {
      if (n) memcpy(dst, p, n * 4);
      return NNRT_OK;
    }
    for (size_t i = 0; i < n; i++, p += 4) {
      uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24;
      memcpy(&dst[i], &u, 4);
    }
    return NNRT_OK;
  }
  bool bf = t->dtype == NNRT_BF16;
  for (size_t i = 0; i < n; i++, p += 2) {
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    dst[i] = bf ? nnrt_bf16_to_f32(h) : nnrt_f16_to_f32(h);
  }
  return NNRT_OK;
}
