/* compiler/ref/ref_lookup.c — ops indexed by integer data: embedding rows and
 * the cross-entropy of target classes. Indices come from the caller's data,
 * so an index out of range is an error naming the tensor, not a bad read. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref_internal.h"

/* Checks element e of index tensor t (value v) is an integer in [0, rows);
 * role and what say which tensor and which bound, for the message. */
static nnc_status want_index(const nnc_ref *r, const nnc_node *n, int t, int64_t e, double v, int64_t rows,
                             const char *role, const char *what, nnc_error *err) {
  if (v >= 0 && v < (double)rows && v == floor(v)) return NNC_OK;
  return nnc_ref_node_fail(r, n, NNC_E_USAGE, err, "%s %s holds %.17g at element %lld, expected an integer "
                           "in 0..%lld (%s)", role, r->g->tensors[t].name, v, (long long)e,
                           (long long)rows - 1, what);
}

/* want_index over the first count elements of t (values v). */
static nnc_status want_indices(const nnc_ref *r, const nnc_node *n, int t, const double *v, int64_t count,
                               int64_t rows, const char *role, const char *what, nnc_error *err) {
  for (int64_t e = 0; e < count; e++) {
    nnc_status st = want_index(r, n, t, e, v[e], rows, role, what, err);
    if (st) return st;
  }
  return NNC_OK;
}

nnc_status nnc_ref_embedding_check(const nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *table, *ids;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &table, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &ids, err);
  if (st) return st;
  nnc_ref_shape st_ = nnc_ref_shape_of(r, n->in[0]), si = nnc_ref_shape_of(r, n->in[1]);
  nnc_ref_shape sy = nnc_ref_shape_of(r, n->out[0]);
  bool ok = st_.rank == 2 && si.rank < NNC_MAX_RANK && sy.rank == si.rank + 1 && sy.d[si.rank] == st_.d[1];
  for (int i = 0; ok && i < si.rank; i++) ok = sy.d[i] == si.d[i];
  if (!ok)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected a table [V,C], ids [...] and output [...,C], "
                             "found %s, %s and %s", nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->in[1], d2), nnc_ref_desc(r, n->out[0], d3));
  int64_t V = st_.d[0], count = nnc_ref_shape_elems(&si);
  /* a vocabulary split: this rank's rows are ids rank * V .. rank * V + V - 1 of the vocabulary */
  int64_t bound = n->attrs.ranks > 1 ? n->attrs.vocab : V;
  char what[NNC_REF_DESC + 32];
  if (n->attrs.ranks > 1) snprintf(what, sizeof what, "the vocabulary split over %d ranks", n->attrs.ranks);
  else snprintf(what, sizeof what, "the rows of table %s", nnc_ref_desc(r, n->in[0], d1));
  return want_indices(r, n, n->in[1], ids, count, bound, "ids", what, err);
}

nnc_status nnc_ref_op_embedding(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  nnc_status st = nnc_ref_embedding_check(r, n, err);
  if (st) return st;
  const double *table = r->val[n->in[0]], *ids = r->val[n->in[1]];
  nnc_ref_shape st_ = nnc_ref_shape_of(r, n->in[0]), si = nnc_ref_shape_of(r, n->in[1]);
  int64_t V = st_.d[0], C = st_.d[1], count = nnc_ref_shape_elems(&si);
  int64_t first = n->attrs.ranks > 1 ? (int64_t)r->rank * V : 0;   /* a vocabulary split's first row here */
  double *y;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  for (int64_t e = 0; e < count; e++) {
    int64_t row = (int64_t)ids[e] - first;
    if (!C) continue;
    if (row >= 0 && row < V) memcpy(y + e * C, table + row * C, (size_t)C * sizeof *y);
    else memset(y + e * C, 0, (size_t)C * sizeof *y);
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_cross_entropy(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *logits, *targets;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &logits, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &targets, err);
  if (st) return st;
  nnc_ref_shape sl = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  int64_t V = sl.rank ? sl.d[sl.rank - 1] : 0;
  int64_t rows = V ? nnc_ref_shape_elems(&sl) / V : 0;
  if (V < 1 || nnc_ref_elems(r, n->in[1]) != rows || nnc_ref_shape_elems(&sy) != 1)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected logits [...,V] with V >= 1, one target per row "
                             "and a scalar output, found %s, %s and %s", nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->in[1], d2), nnc_ref_desc(r, n->out[0], d3));
  char what[NNC_REF_DESC + 32];
  snprintf(what, sizeof what, "the classes of logits %s", nnc_ref_desc(r, n->in[0], d1));
  if ((st = want_indices(r, n, n->in[1], targets, rows, V, "targets", what, err))) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  double total = 0;
  for (int64_t row = 0; row < rows; row++) {
    const double *x = logits + row * V;
    double max = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++)
      if (x[v] > max) max = x[v];
    for (int64_t v = 0; v < V; v++) sum += exp(x[v] - max);
    total += max + log(sum) - x[(int64_t)targets[row]];
  }
  y[0] = total / (double)rows;
  return NNC_OK;
}

nnc_status nnc_ref_op_embedding_grad(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *dy, *ids;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &dy, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &ids, err);
  if (st) return st;
  nnc_ref_shape sd = nnc_ref_shape_of(r, n->in[0]), si = nnc_ref_shape_of(r, n->in[1]);
  nnc_ref_shape sy = nnc_ref_shape_of(r, n->out[0]);
  bool ok = sy.rank == 2 && sd.rank == si.rank + 1 && sd.d[si.rank] == sy.d[1];
  for (int i = 0; ok && i < si.rank; i++) ok = sd.d[i] == si.d[i];
  if (!ok)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected a gradient [...,C], ids [...] and output [V,C], "
                             "found %s, %s and %s", nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->in[1], d2), nnc_ref_desc(r, n->out[0], d3));
  int64_t V = sy.d[0], C = sy.d[1], count = nnc_ref_shape_elems(&si);
  /* a vocabulary split: this rank's rows are ids first .. first + V - 1; other ids are other ranks' */
  int64_t bound = n->attrs.ranks > 1 ? n->attrs.vocab : V, first = n->attrs.ranks > 1 ? (int64_t)r->rank * V : 0;
  char what[NNC_REF_DESC + 32];
  snprintf(what, sizeof what, "the rows of the table gradient %s", nnc_ref_desc(r, n->out[0], d1));
  if ((st = want_indices(r, n, n->in[1], ids, count, bound, "ids", what, err))) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  for (int64_t e = 0; e < count; e++) {
    int64_t row = (int64_t)ids[e] - first;
    if (row < 0 || row >= V) continue;
    for (int64_t c = 0; c < C; c++) y[row * C + c] += dy[e * C + c];
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_cross_entropy_grad(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *logits, *targets, *dloss;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &logits, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &targets, err);
  if (!st) st = nnc_ref_need(r, n, n->in[2], &dloss, err);
  if (st) return st;
  nnc_ref_shape sl = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  int64_t V = sl.rank ? sl.d[sl.rank - 1] : 0;
  int64_t rows = V ? nnc_ref_shape_elems(&sl) / V : 0;
  if (V < 1 || nnc_ref_elems(r, n->in[1]) != rows || !nnc_ref_shape_eq(&sl, &sy) || nnc_ref_elems(r, n->in[2]) != 1)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected logits [...,V] with V >= 1, one target per row "
                             "and a scalar loss gradient, found %s, %s and %s", nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->in[1], d2), nnc_ref_desc(r, n->in[2], d3));
  char what[NNC_REF_DESC + 32];
  snprintf(what, sizeof what, "the classes of logits %s", nnc_ref_desc(r, n->in[0], d1));
  if ((st = want_indices(r, n, n->in[1], targets, rows, V, "targets", what, err))) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  double scale = dloss[0] / (double)rows;
  for (int64_t row = 0; row < rows; row++) {
    const double *x = logits + row * V;
    double max = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++)
      if (x[v] > max) max = x[v];
    for (int64_t v = 0; v < V; v++) sum += exp(x[v] - max);
    for (int64_t v = 0; v < V; v++)
      y[row * V + v] = (exp(x[v] - max) / sum - (v == (int64_t)targets[row] ? 1.0 : 0.0)) * scale;
  }
  return NNC_OK;
}
