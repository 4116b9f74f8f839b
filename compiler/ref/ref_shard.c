/* compiler/ref/ref_shard.c — the ops of tensor-parallel training that read
 * the rank they run on (nnc_ref.rank, set by nnc_ref_run_ranks): the rank's
 * own entry of a gathered gradient, and the vocabulary-split cross-entropy's
 * per-rank sums and gradient (ir.h says what each computes). */
#include <math.h>

#include "ref_internal.h"

nnc_status nnc_ref_op_rank_slice(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st) st = nnc_ref_out(r, n, 0, &y, err);
  if (st) return st;
  int64_t count = nnc_ref_elems(r, n->out[0]);
  if (nnc_ref_elems(r, n->in[0]) != count * n->attrs.ranks || r->rank < 0 || r->rank >= n->attrs.ranks)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %d entries of %lld and a rank below %d, found %lld "
                             "elements at rank %d", n->attrs.ranks, (long long)count, n->attrs.ranks,
                             (long long)nnc_ref_elems(r, n->in[0]), r->rank);
  for (int64_t i = 0; i < count; i++) y[i] = x[(int64_t)r->rank * count + i];
  return NNC_OK;
}

/* cross_entropy_shard and its gradient: R classes a rank, the rank's first
 * class rank * R; classes at or past attrs.vocab are the padding. */
nnc_status nnc_ref_op_ce_shard(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const bool grad = n->op == NNC_OP_CE_SHARD_GRAD;
  const double *l, *t, *shift, *ds = NULL;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &l, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &t, err);
  if (!st) st = nnc_ref_need(r, n, n->in[2], &shift, err);
  if (!st && grad) st = nnc_ref_need(r, n, n->in[3], &ds, err);
  if (!st) st = nnc_ref_out(r, n, 0, &y, err);
  if (st) return st;
  nnc_ref_shape sl = nnc_ref_shape_of(r, n->in[0]);
  int64_t R = sl.rank ? sl.d[sl.rank - 1] : 0, rows = nnc_ref_elems(r, n->in[1]);
  int64_t first = (int64_t)r->rank * R, V = n->attrs.vocab;
  if (R < 1 || nnc_ref_shape_elems(&sl) != rows * R)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected logits [..., R] with one target a row");
  for (int64_t row = 0; row < rows; row++) {
    const double *x = l + row * R;
    double tv = t[row];
    if (!(tv >= 0 && tv < (double)V && tv == floor(tv)))
      return nnc_ref_node_fail(r, n, NNC_E_USAGE, err, "targets %s holds %.17g at element %lld, expected an integer "
                               "in 0..%lld (the vocabulary split over %d ranks)", r->g->tensors[n->in[1]].name, tv,
                               (long long)row, (long long)V - 1, n->attrs.ranks);
    int64_t local = (int64_t)tv - first;
    if (grad) {
      for (int64_t v = 0; v < R; v++)
        y[row * R + v] = first + v < V ? ds[2 * row] * exp(x[v] - shift[row]) + (v == local ? ds[2 * row + 1] : 0) : 0;
      continue;
    }
    double sum = 0;
    for (int64_t v = 0; v < R && first + v < V; v++) sum += exp(x[v] - shift[row]);
    y[2 * row] = sum;
    y[2 * row + 1] = local >= 0 && local < R ? x[local] - shift[row] : 0;
  }
  return NNC_OK;
}
