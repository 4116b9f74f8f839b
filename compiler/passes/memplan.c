/* compiler/passes/memplan.c — one activation arena for every intermediate.
 *
 * Each tensor gets a storage class; every tensor a kernel writes for another
 * kernel to read lives in the arena from the kernel that writes it to the
 * last kernel that reads it (or reads a view of it). An elementwise kernel
 * writes its output over an input that dies there when both have the same
 * elements and element size, so element i is read before it is overwritten.
 * Such chains share one slot; the slots are then placed largest first at the
 * lowest aligned offset that no slot alive at the same time occupies.
 * Sizes are at every symbol's maximum and rounded up to the alignment, in the
 * placement as in `unplanned`, so peak <= unplanned always holds. A state
 * (a kv cache) has a slot alive through every kernel, so it keeps its
 * contents from one call to the next, and so does what a kernel run at load
 * leaves for the forward (nnc_kernel.at_load); a kv_append output that
 * nothing reads (its attention reads the cache in place) is never stored. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGNMENT 256

typedef struct slot {
  int tensor;          /* the chain's first tensor */
  int first, last;     /* kernels */
  int64_t size;        /* aligned bytes */
  int64_t offset;
} slot;

static int64_t align_up(int64_t v) { return (v + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

/* Bytes of t at the symbols' maxima; false on overflow. */
static bool tensor_bytes(const nnc_graph *g, const nnc_tensor *t, int64_t *out) {
  int64_t n = nnc_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->shape[i].k;
    for (int j = 0; j < t->shape[i].nsym; j++)
      if (__builtin_mul_overflow(d, g->syms[t->shape[i].sym[j]].max, &d)) return false;
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  if (n > INT64_MAX - ALIGNMENT) return false;
  *out = n;
  return true;
}

/* The tensor that owns t's storage: t itself unless t is a view. */
static int root_of(const nnc_buffer *buf, int t) {
  return buf[t].storage == NNC_STORE_ALIAS ? buf[t].alias_of : t;
}

/* Storage class, first writer and size of every kernel output. */
static nnc_status classify(const nnc_schedule *s, nnc_buffer *buf, nnc_error *err) {
  const nnc_graph *g = s->g;
  for (int t = 0; t < g->ntensors; t++)
    buf[t] = (nnc_buffer){.storage = NNC_STORE_NONE, .alias_of = -1, .first = -1, .last = -1};
  for (int i = 0; i < g->ninputs; i++) buf[g->inputs[i]].storage = NNC_STORE_USER;
  for (int i = 0; i < g->nparams; i++) buf[g->params[i]].storage = NNC_STORE_PARAM;
  for (int t = 0; t < g->ntensors; t++)
    if (!tensor_bytes(g, &g->tensors[t], &buf[t].size))
      return nnc_errorf(err, NNC_E_LIMIT, g->tensors[t].loc,
                        "memory plan: %s has more than 2^63 bytes at the dims' maxima", g->tensors[t].name);
  for (int i = 0; i < s->nk; i++) {
    const nnc_kernel *k = &s->k[i];
    for (int j = 0; j < k->nout; j++) {
      int t = k->out[j];
      nnc_buffer *b = &buf[t];
      if (nnc_graph_is_output(g, t)) {
        b->storage = NNC_STORE_USER;
      } else if (k->kind == NNC_KERNEL_VIEW) {
        if (k->nin != 1 && !nnc_kernel_is_joined_view(k))
          return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "memory plan: a view kernel reads %d tensors", k->nin);
        /* a joined view (join_weights.c) starts at its first member */
        b->storage = NNC_STORE_ALIAS;
        b->alias_of = root_of(buf, k->in[0]);
      } else {
        b->storage = NNC_STORE_ARENA;
      }
      b->first = b->last = i;
    }
  }
  for (int i = 0; i < g->nstates; i++) {
    nnc_buffer *b = &buf[g->states[i]];
    b->storage = NNC_STORE_ARENA;
    b->first = 0;
    b->last = s->nk;
  }
  return NNC_OK;
}

/* kv_append outputs that no kernel reads and no output names. */
static void drop_unread_caches(const nnc_schedule *s, nnc_buffer *buf) {
  const nnc_graph *g = s->g;
  for (int t = 0; t < g->ntensors; t++) {
    int p = g->tensors[t].producer;
    if (p >= 0 && g->nodes[p].op == NNC_OP_KV_APPEND && buf[t].storage == NNC_STORE_ARENA && buf[t].last == buf[t].first)
      buf[t].storage = NNC_STORE_NONE;
  }
}

/* Last reader of every tensor; a view's readers keep its root alive. */
static void lifetimes(const nnc_schedule *s, nnc_buffer *buf) {
  for (int i = 0; i < s->nk; i++) {
    const nnc_kernel *k = &s->k[i];
    for (int j = 0; j < k->nin; j++) {
      int t = k->in[j], r = root_of(buf, t);
      if (buf[t].last < i) buf[t].last = i;
      if (buf[r].last < i) buf[r].last = i;
      /* what a kernel run at load leaves for the forward lives through every run */
      int w = buf[r].first;
      if (!k->at_load && w >= 0 && s->k[w].at_load && buf[r].storage == NNC_STORE_ARENA)
        buf[t].last = buf[r].last = s->nk;
    }
  }
}

/* The input whose slot an elementwise kernel's output may take, or -1. */
static int in_place_source(const nnc_schedule *s, const nnc_buffer *buf, int ki) {
  const nnc_graph *g = s->g;
  const nnc_kernel *k = &s->k[ki];
  if (k->kind != NNC_KERNEL_ELEMENTWISE || k->nout != 1 || buf[k->out[0]].storage != NNC_STORE_ARENA)
    return -1;
  const nnc_tensor *o = &g->tensors[k->out[0]];
  for (int j = 0; j < k->nin; j++) {
    int t = k->in[j], r = root_of(buf, t);
    const nnc_tensor *x = &g->tensors[t];
    /* a lookup's table: every work-item reads rows of it that others would write */
    if (buf[r].storage != NNC_STORE_ARENA || buf[r].last != ki || nnc_kernel_looks_up(g, k, t)) continue;
    if (nnc_tensor_max_elems(g, x) != nnc_tensor_max_elems(g, o) ||
        nnc_dtype_size(x->dtype) != nnc_dtype_size(o->dtype) || buf[r].size != buf[k->out[0]].size)
      continue;
    return r;
  }
  return -1;
}

static int cmp_slot(const void *a, const void *b) {
  const slot *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

static int cmp_offset(const void *a, const void *b) {
  const slot *x = *(const slot *const *)a, *y = *(const slot *const *)b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Places slots[0..n) (sorted largest first); returns the arena size. */
static int64_t place(slot *slots, int n, const slot **live) {
  int64_t peak = 0;
  for (int i = 0; i < n; i++) {
    int nlive = 0;
    for (int j = 0; j < i; j++)
      if (slots[j].first <= slots[i].last && slots[i].first <= slots[j].last) live[nlive++] = &slots[j];
    qsort(live, (size_t)nlive, sizeof *live, cmp_offset);
    int64_t off = 0;
    for (int j = 0; j < nlive; j++) {
      if (off + slots[i].size <= live[j]->offset) break;
      if (live[j]->offset + live[j]->size > off) off = live[j]->offset + live[j]->size;
    }
    slots[i].offset = off;
    if (off + slots[i].size > peak) peak = off + slots[i].size;
  }
  return peak;
}

nnc_status nnc_pass_memplan(nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = s->g;
  free(s->plan.buf);
  memset(&s->plan, 0, sizeof s->plan);
  s->plan.alignment = ALIGNMENT;
  size_t nt = (size_t)(g->ntensors ? g->ntensors : 1);
  nnc_buffer *buf = calloc(nt, sizeof *buf);
  int *slot_of = malloc(nt * sizeof *slot_of);   /* per arena tensor */
  int *from = malloc(nt * sizeof *from);
  slot *slots = malloc(nt * sizeof *slots);
  const slot **live = malloc(nt * sizeof *live);
  if (!buf || !slot_of || !from || !slots || !live) {
    free(buf); free(slot_of); free(from); free(slots); free(live);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while planning memory");
  }
  nnc_status rc = classify(s, buf, err);
  if (rc) {
    free(buf); free(slot_of); free(from); free(slots); free(live);
    return rc;
  }
  lifetimes(s, buf);
  drop_unread_caches(s, buf);


  int nslots = 0;
  for (int i = 0; i < g->nstates; i++) {
    int t = g->states[i];
    s->plan.unplanned += align_up(buf[t].size);
    slots[nslots++] = (slot){.tensor = t, .first = 0, .last = s->nk, .size = align_up(buf[t].size), .offset = 0};
  }
  /* one slot per chain of in-place tensors, in kernel order; from[t] is
   * the tensor whose slot t took, or -1 */
  for (int i = 0; i < s->nk; i++) {
    int src = in_place_source(s, buf, i);
    for (int j = 0; j < s->k[i].nout; j++) {
      int t = s->k[i].out[j];
      if (buf[t].storage != NNC_STORE_ARENA) continue;
      s->plan.unplanned += align_up(buf[t].size);
      from[t] = src;
      if (src >= 0) {
        slot_of[t] = slot_of[src];
        buf[t].in_place = true;
      } else {
        slot_of[t] = nslots;
        slots[nslots++] = (slot){.tensor = t, .first = i, .last = i, .size = 0, .offset = 0};
      }
      slot *sl = &slots[slot_of[t]];
      if (buf[t].last > sl->last) sl->last = buf[t].last;
      /* a tensor made at load (alive to the end) is alive from the start too */
      if (buf[t].last == s->nk) sl->first = 0;
      if (align_up(buf[t].size) > sl->size) sl->size = align_up(buf[t].size);
    }
  }
  qsort(slots, (size_t)nslots, sizeof *slots, cmp_slot);
  s->plan.peak = place(slots, nslots, live);
  for (int i = 0; i < nslots; i++) buf[slots[i].tensor].offset = slots[i].offset;
  /* kernel order: a chain's earlier tensor has its offset before a later one */
  for (int i = 0; i < s->nk; i++)
    for (int j = 0; j < s->k[i].nout; j++) {
      int t = s->k[i].out[j];
      if (buf[t].storage == NNC_STORE_ARENA && buf[t].in_place) buf[t].offset = buf[from[t]].offset;
    }
  for (int t = 0; t < g->ntensors; t++)
    if (buf[t].storage == NNC_STORE_ALIAS) buf[t].offset = buf[buf[t].alias_of].offset;
  free(slot_of); free(from); free(slots); free(live);
  s->plan.buf = buf;
  return NNC_OK;
}
