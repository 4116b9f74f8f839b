/* runtime/arena.c — the activation arena of one model instance.
 *
 * The memory planner places every intermediate at a fixed offset of one
 * block, so the generated code asks for base + offset (nnrt_arena_at, which
 * checks the bounds once at setup); scratch space that is not planned comes
 * from a bump pointer on top. */
#include <stdlib.h>

#include "nnrt.h"

struct nnrt_arena {
  unsigned char *base;
  size_t size;
  size_t align;
  size_t used;
};

nnrt_status nnrt_arena_create(size_t bytes, size_t align, nnrt_arena **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_arena_create: out is NULL");
  *out = NULL;
  if (align == 0 || (align & (align - 1)) != 0)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "nnrt_arena_create: alignment must be a power of two, found %zu", align);
  nnrt_arena *a = calloc(1, sizeof *a);
  if (!a) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory allocating an arena");
  void *base = NULL;
  nnrt_status st = nnrt_aligned_alloc(bytes, align, &base, err);
  if (st != NNRT_OK) {
    free(a);
    return nnrt_errorf(err, st, "out of memory allocating an activation arena of %zu bytes",
                       bytes);
  }
  a->base = base;
  a->size = bytes;
  a->align = align;
  *out = a;
  return NNRT_OK;
}

void nnrt_arena_destroy(nnrt_arena *a) {
  if (!a) return;
  nnrt_aligned_free(a->base);
  free(a);
}

void *nnrt_arena_base(const nnrt_arena *a) { return a ? a->base : NULL; }
size_t nnrt_arena_size(const nnrt_arena *a) { return a ? a->size : 0; }
size_t nnrt_arena_used(const nnrt_arena *a) { return a ? a->used : 0; }

nnrt_status nnrt_arena_at(const nnrt_arena *a, size_t offset, size_t bytes, void **out,
                          nnrt_error *err) {
  if (!a || !out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_arena_at: arena or out is NULL");
  *out = NULL;
  if (offset % a->align != 0)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "arena offset %zu is not a multiple of the arena's alignment %zu",
                       offset, a->align);
  if (offset > a->size || bytes > a->size - offset)
    return nnrt_errorf(err, NNRT_E_SIZE,
                       "arena slice [%zu, %zu + %zu) runs past the arena's %zu bytes", offset,
                       offset, bytes, a->size);
  *out = a->base + offset;
  return NNRT_OK;
}

nnrt_status nnrt_arena_alloc(nnrt_arena *a, size_t bytes, void **out, nnrt_error *err) {
  if (!a || !out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_arena_alloc: arena or out is NULL");
  *out = NULL;
  /* used is kept aligned, so the next block starts aligned. */
  size_t left = a->size - a->used;
  if (bytes > left)
    return nnrt_errorf(err, NNRT_E_SIZE,
                       "arena allocation of %zu bytes does not fit: %zu of %zu bytes used",
                       bytes, a->used, a->size);
  *out = a->base + a->used;
  size_t rounded = bytes + (a->align - bytes % a->align) % a->align;
  a->used = rounded > left ? a->size : a->used + rounded;
  return NNRT_OK;
}

void nnrt_arena_reset(nnrt_arena *a) {
  if (a) a->used = 0;
}
