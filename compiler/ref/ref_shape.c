/* compiler/ref/ref_shape.c — concrete shapes, broadcasting and the messages
 * that name tensors and nodes. */
#include <stdio.h>
#include <string.h>

#include "ref_internal.h"

nnc_ref_shape nnc_ref_shape_of(const nnc_ref *r, int t) {
  const nnc_tensor *x = &r->g->tensors[t];
  nnc_ref_shape s = {.rank = x->rank};
  for (int i = 0; i < x->rank; i++) s.d[i] = nnc_dim_eval(x->shape[i], r->sym);
  return s;
}

int64_t nnc_ref_shape_elems(const nnc_ref_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->d[i];
  return n;
}

bool nnc_ref_shape_eq(const nnc_ref_shape *a, const nnc_ref_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i]) return false;
  return true;
}

bool nnc_ref_broadcast(const nnc_ref_shape *a, const nnc_ref_shape *b, nnc_ref_shape *out) {
  nnc_ref_shape o = {.rank = a->rank > b->rank ? a->rank : b->rank};
  for (int i = 0; i < o.rank; i++) {
    int ia = a->rank - o.rank + i, ib = b->rank - o.rank + i;
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    o.d[i] = da == 1 ? db : da;
  }
  *out = o;
  return true;
}

bool nnc_ref_bcast_strides(const nnc_ref_shape *in, const nnc_ref_shape *out, int64_t *strides) {
  if (in->rank > out->rank) return false;
  int64_t stride = 1;
  for (int i = out->rank - 1; i >= 0; i--) {
    int j = in->rank - out->rank + i;
    if (j < 0) {
      strides[i] = 0;
      continue;
    }
    if (in->d[j] != out->d[i] && in->d[j] != 1) return false;
    strides[i] = in->d[j] == 1 ? 0 : stride;
    stride *= in->d[j];
  }
  return true;
}

void nnc_ref_unravel(const nnc_ref_shape *s, int64_t flat, int64_t *idx) {
  for (int i = s->rank - 1; i >= 0; i--) {
    idx[i] = s->d[i] ? flat % s->d[i] : 0;
    flat = s->d[i] ? flat / s->d[i] : 0;
  }
}

const char *nnc_ref_desc(const nnc_ref *r, int t, char *buf) {
  const nnc_tensor *x = &r->g->tensors[t];
  nnc_ref_shape s = nnc_ref_shape_of(r, t);
  int used = snprintf(buf, NNC_REF_DESC, "%s %s[", x->name, nnc_dtype_name(x->dtype));
  for (int i = 0; i < s.rank && used > 0 && used < NNC_REF_DESC; i++)
    used += snprintf(buf + used, (size_t)(NNC_REF_DESC - used), "%s%lld", i ? "," : "", (long long)s.d[i]);
  if (used > 0 && used < NNC_REF_DESC) snprintf(buf + used, (size_t)(NNC_REF_DESC - used), "]");
  return buf;
}

nnc_status nnc_ref_node_fail(const nnc_ref *r, const nnc_node *n, nnc_status code, nnc_error *err,
                             const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *op = nnc_op_info_of(n->op)->name;
  if (n->label && strcmp(n->label, op) != 0)
    return nnc_errorf(err, code, n->loc, "%s (%s): %s", op, n->label, msg);
  return nnc_errorf(err, code, n->loc, "%s: %s", op, msg);
}

nnc_status nnc_ref_need(const nnc_ref *r, const nnc_node *n, int t, const double **out, nnc_error *err) {
  if (t < 0 || t >= r->g->ntensors)
    return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "input tensor id %d is out of range", t);
  if (!r->val[t]) {
    const nnc_tensor *x = &r->g->tensors[t];
    if (x->kind == NNC_TENSOR_VALUE)
      return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err,
                               "expected value %s to be computed before it is read, found no value", x->name);
    return nnc_ref_node_fail(r, n, NNC_E_USAGE, err,
                             "expected %s %s to be set before the reference runs, found no value",
                             x->kind == NNC_TENSOR_INPUT ? "input" : "parameter", x->name);
  }
  *out = r->val[t];
  return NNC_OK;
}

nnc_status nnc_ref_out(nnc_ref *r, const nnc_node *n, int i, double **out, nnc_error *err) {
  *out = nnc_ref_alloc(r, n->out[i]);
  if (!*out)
    return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory for %lld values of %s",
                             (long long)nnc_ref_elems(r, n->out[i]), r->g->tensors[n->out[i]].name);
  /* zeroed on a second run too: scatter-adds and pads write only part of it */
  int64_t count = nnc_ref_elems(r, n->out[i]);
  if (count > 0) memset(*out, 0, (size_t)count * sizeof **out);
  return NNC_OK;
}
