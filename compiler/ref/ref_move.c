/* compiler/ref/ref_move.c — reshape, transpose, slice, concat and split:
 * copies that move or select elements. */
#include <string.h>

#include "ref_internal.h"

static void split_axis(const nnc_ref_shape *s, int axis, int64_t *outer, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) *inner *= s->d[i];
}

/* True when s has ref's rank and dims except along axis (which must exist). */
static bool same_but_axis(const nnc_ref_shape *ref, const nnc_ref_shape *s, int axis) {
  if (s->rank != ref->rank || axis < 0 || axis >= s->rank) return false;
  for (int i = 0; i < s->rank; i++)
    if (i != axis && s->d[i] != ref->d[i]) return false;
  return true;
}

nnc_status nnc_ref_op_reshape(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  int64_t count = nnc_ref_elems(r, n->in[0]);
  if (nnc_ref_elems(r, n->out[0]) != count)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected as many elements in %s as in %s",
                             nnc_ref_desc(r, n->out[0], d2), nnc_ref_desc(r, n->in[0], d1));
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  if (count) memcpy(y, x, (size_t)count * sizeof *y);
  return NNC_OK;
}

nnc_status nnc_ref_op_transpose(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  const int *perm = n->attrs.perm;
  bool seen[NNC_MAX_RANK] = {false}, ok = sx.rank == sy.rank;
  for (int i = 0; ok && i < sx.rank; i++) {
    ok = perm[i] >= 0 && perm[i] < sx.rank && !seen[perm[i]] && sy.d[i] == sx.d[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %s to be a permutation of %s by attrs.perm",
                             nnc_ref_desc(r, n->out[0], d2), nnc_ref_desc(r, n->in[0], d1));
  int64_t in_stride[NNC_MAX_RANK], idx[NNC_MAX_RANK], s = 1;
  for (int i = sx.rank - 1; i >= 0; i--) {
    in_stride[i] = s;
    s *= sx.d[i];
  }
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t count = nnc_ref_shape_elems(&sy);
  for (int64_t e = 0; e < count; e++) {
    nnc_ref_unravel(&sy, e, idx);
    int64_t off = 0;
    for (int i = 0; i < sy.rank; i++) off += idx[i] * in_stride[perm[i]];
    y[e] = x[off];
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_slice(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  int axis = n->attrs.axis;
  int64_t start = nnc_dim_eval(n->attrs.start, r->sym), stop = nnc_dim_eval(n->attrs.stop, r->sym);
  if (axis < 0 || axis >= sx.rank || start < 0 || stop < start || stop > sx.d[axis])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err,
                             "expected 0 <= start <= stop <= the size of axis %d of %s, found [%lld, %lld)",
                             axis + 1, nnc_ref_desc(r, n->in[0], d1), (long long)start, (long long)stop);
  nnc_ref_shape want = sx;
  want.d[axis] = stop - start;
  if (!nnc_ref_shape_eq(&want, &sy))
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %lld along axis %d of the output, found %s",
                             (long long)(stop - start), axis + 1, nnc_ref_desc(r, n->out[0], d2));
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t outer, inner, len = stop - start;
  split_axis(&sx, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    if (len * inner != 0)
      memcpy(y + o * len * inner, x + (o * sx.d[axis] + start) * inner, (size_t)(len * inner) * sizeof *y);
  return NNC_OK;
}

nnc_status nnc_ref_op_concat(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x[NNC_MAX_IO];
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_ref_shape sy = nnc_ref_shape_of(r, n->out[0]);
  int axis = n->attrs.axis;
  int64_t total = 0;
  for (int i = 0; i < n->nin; i++) {
    nnc_status st = nnc_ref_need(r, n, n->in[i], &x[i], err);
    if (st) return st;
    nnc_ref_shape si = nnc_ref_shape_of(r, n->in[i]);
    if (!same_but_axis(&sy, &si, axis))
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err,
                               "expected input %s to match output %s in every dim but axis %d",
                               nnc_ref_desc(r, n->in[i], d1), nnc_ref_desc(r, n->out[0], d2), axis + 1);
    total += si.d[axis];
  }
  if (total != sy.d[axis])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %lld along axis %d of the output, found %s",
                             (long long)total, axis + 1, nnc_ref_desc(r, n->out[0], d2));
  nnc_status st = nnc_ref_out(r, n, 0, &y, err);
  if (st) return st;
  int64_t outer, inner;
  split_axis(&sy, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++) {
    double *dst = y + o * sy.d[axis] * inner;
    for (int i = 0; i < n->nin; i++) {
      int64_t chunk = nnc_dim_eval(r->g->tensors[n->in[i]].shape[axis], r->sym) * inner;
      if (chunk) memcpy(dst, x[i] + o * chunk, (size_t)chunk * sizeof *dst);
      dst += chunk;
    }
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_split(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y[NNC_MAX_IO];
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]);
  int axis = n->attrs.axis;
  int64_t total = 0;
  for (int i = 0; i < n->nout; i++) {
    nnc_ref_shape si = nnc_ref_shape_of(r, n->out[i]);
    if (!same_but_axis(&sx, &si, axis))
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err,
                               "expected output %s to match input %s in every dim but axis %d",
                               nnc_ref_desc(r, n->out[i], d2), nnc_ref_desc(r, n->in[0], d1), axis + 1);
    total += si.d[axis];
  }
  if (total != sx.d[axis])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected the outputs to cover the %lld of axis %d of %s, found %lld",
                             (long long)sx.d[axis], axis + 1, nnc_ref_desc(r, n->in[0], d1), (long long)total);
  for (int i = 0; i < n->nout; i++)
    if ((st = nnc_ref_out(r, n, i, &y[i], err))) return st;
  int64_t outer, inner;
  split_axis(&sx, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++) {
    const double *src = x + o * sx.d[axis] * inner;
    for (int i = 0; i < n->nout; i++) {
      int64_t chunk = nnc_dim_eval(r->g->tensors[n->out[i]].shape[axis], r->sym) * inner;
      if (chunk) memcpy(y[i] + o * chunk, src, (size_t)chunk * sizeof *src);
      src += chunk;
    }
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_pad(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  int axis = n->attrs.axis;
  int64_t start = nnc_dim_eval(n->attrs.start, r->sym);
  if (!same_but_axis(&sy, &sx, axis) || start < 0 || start + sx.d[axis] > sy.d[axis])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %s to fit in %s from %lld along axis %d",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->out[0], d2), (long long)start,
                             axis + 1);
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;   /* zeroed */
  int64_t outer, inner, len = sx.d[axis];
  split_axis(&sx, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    if (len * inner != 0)
      memcpy(y + (o * sy.d[axis] + start) * inner, x + o * len * inner, (size_t)(len * inner) * sizeof *y);
  return NNC_OK;
}
