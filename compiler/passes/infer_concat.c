/* compiler/passes/infer_concat.c — concat and split: the sizes along the axis
 * add up. Symbolic sizes add only when they are all the same dim (T + T is
 * 2*T); T + 3 has no exact dim and is an error. */
#include <stdio.h>
#include <string.h>

#include "infer_util.h"

/* "3+4+T" into buf. */
static const char *sizes_text(const nnc_infer_ctx *c, int n, const nnc_dim *sizes, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < n && used < len; i++) {
    char d[NNC_DESC_LEN];
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "+" : "", nnc_infer_dim(c, sizes[i], d));
  }
  return buf;
}

/* The sum of n sizes when it is one exact dim; false otherwise. */
static bool sum_sizes(int n, const nnc_dim *sizes, nnc_dim *out) {
  bool all_const = true, all_same = true;
  for (int i = 0; i < n; i++) {
    all_const = all_const && nnc_dim_is_const(sizes[i]);
    all_same = all_same && nnc_dim_eq(sizes[i], sizes[0]);
  }
  if (all_const) {
    int64_t s = 0;
    for (int i = 0; i < n; i++)
      if (__builtin_add_overflow(s, sizes[i].k, &s)) return false;
    *out = nnc_dim_const(s);
    return true;
  }
  return all_same && nnc_dim_mul(nnc_dim_const(n), sizes[0], out);
}

/* True when a and b have the same rank and dims except along axis. */
static bool same_but_axis(int ra, const nnc_dim *a, int rb, const nnc_dim *b, int axis) {
  if (ra != rb) return false;
  for (int i = 0; i < ra; i++)
    if (i != axis && !nnc_dim_eq(a[i], b[i])) return false;
  return true;
}

nnc_status nnc_infer_concat(const nnc_infer_ctx *c) {
  const nnc_tensor *a = nnc_in(c, 0);
  int axis = c->n->attrs.axis, n = c->n->nin;
  nnc_status st = nnc_infer_want_axis(c, 0, axis);
  if (st) return st;
  nnc_dim sizes[NNC_MAX_IO] = {{0}};
  for (int i = 0; i < n; i++) {
    const nnc_tensor *b = nnc_in(c, i);
    st = nnc_infer_want_same_dtype(c, 0, i);
    if (st) return st;
    if (!same_but_axis(a->rank, a->shape, b->rank, b->shape, axis)) {
      char s1[NNC_DESC_LEN], s2[NNC_DESC_LEN];
      int d = 0;
      while (a->rank == b->rank && (d == axis || nnc_dim_eq(a->shape[d], b->shape[d]))) d++;
      if (a->rank != b->rank)
        return nnc_infer_fail(c, NNC_E_SHAPE, "ranks differ: %s is %s, %s is %s", a->name,
                              nnc_infer_shape(c, a->rank, a->shape, s1), b->name,
                              nnc_infer_shape(c, b->rank, b->shape, s2));
      return nnc_infer_fail(c, NNC_E_SHAPE, "dim %d differs: %s is %s, %s is %s", d + 1, a->name,
                            nnc_infer_shape(c, a->rank, a->shape, s1), b->name,
                            nnc_infer_shape(c, b->rank, b->shape, s2));
    }
    sizes[i] = b->shape[axis];
  }
  nnc_dim out[NNC_MAX_RANK];
  memcpy(out, a->shape, sizeof out);
  if (!sum_sizes(n, sizes, &out[axis])) {
    char list[512];
    return nnc_infer_fail(c, NNC_E_SHAPE,
                          "expected sizes along axis %d that are all constants or all the same dim, found %s",
                          axis + 1, sizes_text(c, n, sizes, list, sizeof list));
  }
  nnc_infer_set(c, 0, a->dtype, a->rank, out);
  return NNC_OK;
}

nnc_status nnc_infer_split(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  int axis = c->n->attrs.axis, n = c->n->nout;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN], d3[NNC_DESC_LEN], list[512];
  nnc_status st = nnc_infer_want_axis(c, 0, axis);
  if (st) return st;
  nnc_dim sizes[NNC_MAX_IO] = {{0}};
  for (int i = 0; i < n; i++) {
    const nnc_tensor *o = nnc_out(c, i);
    if (o->rank < 0 || o->rank > NNC_MAX_RANK)
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected output %d of rank %d, found rank %d", i + 1, x->rank,
                            o->rank);
    if (!same_but_axis(x->rank, x->shape, o->rank, o->shape, axis) || o->shape[axis].k < 0)
      return nnc_infer_fail(c, NNC_E_SHAPE, "expected output %d shaped like %s except along axis %d, found %s",
                            i + 1, nnc_infer_desc(c, x, d1), axis + 1,
                            nnc_infer_shape(c, o->rank, o->shape, d2));
    sizes[i] = o->shape[axis];
  }
  nnc_dim total;
  if (!sum_sizes(n, sizes, &total))
    return nnc_infer_fail(c, NNC_E_SHAPE,
                          "expected sizes along axis %d that are all constants or all the same dim, found %s",
                          axis + 1, sizes_text(c, n, sizes, list, sizeof list));
  if (!nnc_dim_eq(total, x->shape[axis]))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected sizes that add up to %s (axis %d of %s), found %s = %s",
                          nnc_infer_dim(c, x->shape[axis], d1), axis + 1, nnc_infer_desc(c, x, d2),
                          sizes_text(c, n, sizes, list, sizeof list), nnc_infer_dim(c, total, d3));
  for (int i = 0; i < n; i++) nnc_out(c, i)->dtype = x->dtype;
  return NNC_OK;
}
