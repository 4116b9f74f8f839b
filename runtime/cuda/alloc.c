/* runtime/cuda/alloc.c — a caching allocator of device memory.
 *
 * cudaMalloc and cudaFree are slow and cudaFree synchronizes the device, so
 * blocks are kept once made: a freed block goes on the free list of its size
 * class and serves the next request of that class. Every block lives in one
 * array; an open-addressing table maps a block's pointer to its slot, so a
 * free finds its block in O(1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nnrt_cuda_impl.h"

#define MIN_CLASS ((size_t)512)
/* Classes m * 2^e, m in 4..7, e from 7 (512 = 4 * 2^7) to the top of size_t. */
#define NCLASSES ((int)(sizeof(size_t) * 8 - 9) * 4)
#define NONE SIZE_MAX

typedef struct block {
  void *ptr;
  size_t size;      /* its size class */
  bool used;
  size_t next_free; /* next block on the same free list, or NONE */
} block;

struct nnrt_cuda_alloc {
  block *blocks;
  size_t n, cap;
  size_t *table; /* slot -> block index, or NONE; table_cap is a power of two */
  size_t table_cap;
  size_t free_head[NCLASSES];
  nnrt_cuda_alloc_stats stats;
};

static int high_bit(size_t x) {
  int b = 0;
  while (x >>= 1) b++;
  return b;
}

size_t nnrt_cuda_size_class(size_t bytes) {
  if (bytes <= MIN_CLASS) return MIN_CLASS;
  size_t x = bytes - 1;
  int e = high_bit(x) - 2; /* x >> e is 4..7 */
  size_t m = (x >> e) + 1; /* 5..8: the next step up */
  if (m > (SIZE_MAX >> e)) return 0;
  return m << e;
}

/* Free-list index of a size class (a value nnrt_cuda_size_class returns). */
static int class_index(size_t cls) {
  int e = high_bit(cls) - 2;
  return (e - 7) * 4 + (int)(cls >> e) - 4;
}

static size_t slot_of(const void *p, size_t cap) {
  /* Blocks are 256-aligned: drop the zero bits, then mix (Fibonacci). */
  uint64_t h = ((uint64_t)(uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 32) & (cap - 1);
}

static void table_put(nnrt_cuda_alloc *a, size_t idx) {
  size_t s = slot_of(a->blocks[idx].ptr, a->table_cap);
  while (a->table[s] != NONE) s = (s + 1) & (a->table_cap - 1);
  a->table[s] = idx;
}

static size_t table_find(const nnrt_cuda_alloc *a, const void *p) {
  if (!a->table_cap) return NONE;
  size_t s = slot_of(p, a->table_cap);
  while (a->table[s] != NONE) {
    if (a->blocks[a->table[s]].ptr == p) return a->table[s];
    s = (s + 1) & (a->table_cap - 1);
  }
  return NONE;
}

/* Rebuilds the table for cap slots from the block array. */
static bool table_rebuild(nnrt_cuda_alloc *a, size_t cap) {
  size_t *t = malloc(cap * sizeof *t);
  if (!t) return false;
  free(a->table);
  a->table = t;
  a->table_cap = cap;
  for (size_t i = 0; i < cap; i++) t[i] = NONE;
  for (size_t i = 0; i < a->n; i++) table_put(a, i);
  return true;
}

nnrt_status nnrt_cuda_alloc_create(nnrt_cuda_alloc **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_alloc_create: out is NULL");
  *out = NULL;
  nnrt_status st = nnrt_cuda_need_device("creating a CUDA allocator", err);
  if (st != NNRT_OK) return st;
  nnrt_cuda_alloc *a = calloc(1, sizeof *a);
  if (!a) return nnrt_errorf(err, NNRT_E_NOMEM, "out of host memory creating a CUDA allocator");
  for (int i = 0; i < NCLASSES; i++) a->free_head[i] = NONE;
  *out = a;
  return NNRT_OK;
}

void nnrt_cuda_alloc_destroy(nnrt_cuda_alloc *a) {
  if (!a) return;
  for (size_t i = 0; i < a->n; i++) cudaFree(a->blocks[i].ptr);
  free(a->blocks);
  free(a->table);
  free(a);
}

nnrt_status nnrt_cuda_alloc_trim(nnrt_cuda_alloc *a, nnrt_error *err) {
  if (!a) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_alloc_trim: allocator is NULL");
  nnrt_status first = NNRT_OK;
  size_t kept = 0;
  for (size_t i = 0; i < a->n; i++) {
    block b = a->blocks[i];
    if (b.used) {
      a->blocks[kept++] = b;
    } else {
      nnrt_status st = nnrt_cuda_check(cudaFree(b.ptr), "freeing cached device memory", err);
      if (first == NNRT_OK) first = st;
      a->stats.cached -= b.size;
    }
  }
  a->n = kept;
  for (int i = 0; i < NCLASSES; i++) a->free_head[i] = NONE;
  /* Fewer blocks than before: the table fits as it is, only the slots change. */
  for (size_t i = 0; i < a->table_cap; i++) a->table[i] = NONE;
  for (size_t i = 0; i < a->n; i++) table_put(a, i);
  return first;
}

/* Records a new block p of size cls, in use. */
static bool add_block(nnrt_cuda_alloc *a, void *p, size_t cls) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    block *b = realloc(a->blocks, cap * sizeof *b);
    if (!b) return false;
    a->blocks = b;
    a->cap = cap;
  }
  /* Keep the table at most half full so probes stay short. */
  if ((a->n + 1) * 2 > a->table_cap && !table_rebuild(a, a->table_cap ? a->table_cap * 2 : 32))
    return false;
  a->blocks[a->n] = (block){.ptr = p, .size = cls, .used = true, .next_free = NONE};
  table_put(a, a->n);
  a->n++;
  return true;
}

static void count_in_use(nnrt_cuda_alloc *a, size_t cls) {
  a->stats.in_use += cls;
  if (a->stats.in_use > a->stats.peak) a->stats.peak = a->stats.in_use;
}

nnrt_status nnrt_cuda_malloc(nnrt_cuda_alloc *a, size_t bytes, void **out, nnrt_error *err) {
  if (out) *out = NULL;
  if (!a || !out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_malloc: allocator or out is NULL");
  size_t cls = nnrt_cuda_size_class(bytes);
  if (cls == 0)
    return nnrt_errorf(err, NNRT_E_SIZE, "nnrt_cuda_malloc: %zu bytes is more than any device has",
                       bytes);
  int ci = class_index(cls);
  size_t idx = a->free_head[ci];
  if (idx != NONE) {
    block *b = &a->blocks[idx];
    a->free_head[ci] = b->next_free;
    b->next_free = NONE;
    b->used = true;
    a->stats.cached -= cls;
    a->stats.reuses++;
    count_in_use(a, cls);
    *out = b->ptr;
    return NNRT_OK;
  }
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, cls);
  if (e == cudaErrorMemoryAllocation && a->stats.cached > 0) {
    /* The cache may hold what this needs, in other classes. */
    (void)cudaGetLastError();
    nnrt_status st = nnrt_cuda_alloc_trim(a, err);
    if (st != NNRT_OK) return st;
    e = cudaMalloc(&p, cls);
  }
  if (e != cudaSuccess) {
    char what[160];
    snprintf(what, sizeof what, "allocating %zu bytes of device memory (%zu in use, %zu cached)",
             cls, a->stats.in_use, a->stats.cached);
    return nnrt_cuda_check(e, what, err);
  }
  if (!add_block(a, p, cls)) {
    cudaFree(p);
    return nnrt_errorf(err, NNRT_E_NOMEM, "out of host memory recording a device block");
  }
  a->stats.device_allocs++;
  count_in_use(a, cls);
  *out = p;
  return NNRT_OK;
}

nnrt_status nnrt_cuda_free(nnrt_cuda_alloc *a, void *p, nnrt_error *err) {
  if (!a) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_free: allocator is NULL");
  if (!p) return NNRT_OK;
  size_t idx = table_find(a, p);
  if (idx == NONE || !a->blocks[idx].used)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "nnrt_cuda_free: %p is not a block of this allocator in use (%s)", p,
                       idx == NONE ? "foreign pointer" : "freed twice");
  block *b = &a->blocks[idx];
  int ci = class_index(b->size);
  b->used = false;
  b->next_free = a->free_head[ci];
  a->free_head[ci] = idx;
  a->stats.in_use -= b->size;
  a->stats.cached += b->size;
  return NNRT_OK;
}

nnrt_cuda_alloc_stats nnrt_cuda_alloc_get_stats(const nnrt_cuda_alloc *a) {
  nnrt_cuda_alloc_stats z = {0};
  return a ? a->stats : z;
}
