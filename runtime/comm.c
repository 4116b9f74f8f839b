/* runtime/comm.c — the communicator of one rank (world 1), where every
 * collective is a copy, and what all backends share: argument checks and
 * nnrt_comm_destroy. */
#include <stdlib.h>
#include <string.h>

#include "nnrt_comm.h"

const char *nnrt_reduce_name(nnrt_reduce op) {
  switch (op) {
  case NNRT_REDUCE_SUM: return "sum";
  case NNRT_REDUCE_MAX: return "max";
  }
  return "unknown reduction";
}

nnrt_status nnrt_comm_check(const nnrt_comm *c, const char *what, const void *a, const void *b,
                            size_t count, size_t elems, nnrt_dtype t, nnrt_error *err) {
  if (!c || !c->ops) return nnrt_errorf(err, NNRT_E_ARG, "%s: no communicator (NULL)", what);
  size_t size = nnrt_dtype_size(t);
  if (size == 0)
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s: expected a dtype, found %d", c->rank, what, (int)t);
  if (elems != 0 && count > SIZE_MAX / size / elems)
    return nnrt_errorf(err, NNRT_E_SIZE, "rank %d: %s of %zu x %zu %s: more bytes than a size_t holds",
                       c->rank, what, elems, count, nnrt_dtype_name(t));
  if (count > 0 && (!a || !b))
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s of %zu %s: a buffer is NULL", c->rank, what, count,
                       nnrt_dtype_name(t));
  return NNRT_OK;
}

nnrt_status nnrt_comm_check_root(const nnrt_comm *c, const char *what, int root, nnrt_error *err) {
  if (root >= 0 && root < c->world) return NNRT_OK;
  return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s: expected a root in 0..%d, found %d", c->rank, what, c->world - 1,
                     root);
}

nnrt_status nnrt_comm_check_op(const nnrt_comm *c, const char *what, nnrt_reduce op, nnrt_error *err) {
  if (op == NNRT_REDUCE_SUM || op == NNRT_REDUCE_MAX) return NNRT_OK;
  return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s: expected the reduction sum or max, found %d",
                     c ? c->rank : -1, what, (int)op);
}

void nnrt_comm_destroy(nnrt_comm *c) {
  if (c && c->ops && c->ops->destroy) c->ops->destroy(c);
  else free(c);
}

/* ------------------------------------------------------------ world of 1 */

void nnrt_comm_count(nnrt_comm *c, nnrt_collective kind, size_t payload, bool root) {
  double n = c->world, s = (double)payload;
  switch (kind) {
  case NNRT_ALL_REDUCE:
    c->bytes += payload;
    c->bus_bytes += s * 2 * (n - 1) / n;
    break;
  case NNRT_ALL_GATHER:
    c->bytes += payload;
    c->bus_bytes += s * (n - 1);
    break;
  case NNRT_REDUCE_SCATTER:
    c->bytes += payload * (size_t)c->world;
    c->bus_bytes += s * (n - 1);
    break;
  case NNRT_BROADCAST:
    if (root) c->bytes += payload;
    c->bus_bytes += s;
    break;
  }
}

/* memmove, not memcpy: a caller may hand overlapping views of one buffer */
static void copy(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memmove(dst, src, bytes);
}

static nnrt_status self_all_reduce(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                   nnrt_reduce op, void *stream, nnrt_error *err) {
  nnrt_status s = nnrt_comm_check(c, "all_reduce", send, recv, count, 1, t, err);
  if (s == NNRT_OK) s = nnrt_comm_check_op(c, "all_reduce", op, err);
  if (s != NNRT_OK) return s;
  copy(recv, send, count * nnrt_dtype_size(t));
  nnrt_comm_count(c, NNRT_ALL_REDUCE, count * nnrt_dtype_size(t), true);
  return NNRT_OK;
}

static nnrt_status self_all_gather(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                   void *stream, nnrt_error *err) {
  nnrt_status s = nnrt_comm_check(c, "all_gather", send, recv, count, 1, t, err);
  if (s != NNRT_OK) return s;
  copy(recv, send, count * nnrt_dtype_size(t));
  nnrt_comm_count(c, NNRT_ALL_GATHER, count * nnrt_dtype_size(t), true);
  return NNRT_OK;
}

static nnrt_status self_reduce_scatter(nnrt_comm *c, const void *send, void *recv, size_t count,
                                       nnrt_dtype t, nnrt_reduce op, void *stream, nnrt_error *err) {
  nnrt_status s = nnrt_comm_check(c, "reduce_scatter", send, recv, count, 1, t, err);
  if (s == NNRT_OK) s = nnrt_comm_check_op(c, "reduce_scatter", op, err);
  if (s != NNRT_OK) return s;
  copy(recv, send, count * nnrt_dtype_size(t));
  nnrt_comm_count(c, NNRT_REDUCE_SCATTER, count * nnrt_dtype_size(t), true);
  return NNRT_OK;
}

static nnrt_status self_broadcast(nnrt_comm *c, void *buf, size_t count, nnrt_dtype t, int root,
                                  void *stream, nnrt_error *err) {
  nnrt_status s = nnrt_comm_check(c, "broadcast", buf, buf, count, 1, t, err);
  if (s != NNRT_OK) return s;
  if (root != 0)
    return nnrt_errorf(err, NNRT_E_ARG, "rank 0 of 1: broadcast: expected the root 0, found %d", root);
  nnrt_comm_count(c, NNRT_BROADCAST, count * nnrt_dtype_size(t), true);
  return NNRT_OK;
}

static nnrt_status self_barrier(nnrt_comm *c, nnrt_error *err) {
  return c ? NNRT_OK : nnrt_errorf(err, NNRT_E_ARG, "barrier: no communicator (NULL)");
}

static void self_destroy(nnrt_comm *c) { free(c); }

/* one rank, one color: another world of one, with its own counters */
static nnrt_status self_split(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err) {
  (void)color;
  (void)key;
  nnrt_status s = nnrt_comm_self_create(out, err);
  if (s == NNRT_OK) (*out)->timeout_s = c->timeout_s;
  return s;
}

static const nnrt_comm_ops self_ops = {
  "self", self_all_reduce, self_all_gather, self_reduce_scatter, self_broadcast, self_barrier, self_split,
  self_destroy,
};

nnrt_status nnrt_comm_self_create(nnrt_comm **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_comm_self_create: out is NULL");
  *out = NULL;
  nnrt_comm *c = calloc(1, sizeof *c);
  if (!c) return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_comm_self_create: out of memory");
  c->ops = &self_ops;
  c->rank = 0;
  c->world = 1;
  c->local_rank = 0;
  c->timeout_s = NNRT_COMM_DEFAULT_TIMEOUT_S;
  *out = c;
  return NNRT_OK;
}
