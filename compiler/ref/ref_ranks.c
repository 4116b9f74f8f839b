/* compiler/ref/ref_ranks.c — a parallel plan's graph evaluated for all of
 * its ranks at once: every rank's evaluator runs each node in turn, and a
 * collective combines what the ranks computed, as the communicator would
 * (an all_reduce sums, or takes the max, an all_gather stacks in rank order).
 * The plan is right when these ranks' outputs equal one evaluator's over the
 * graph without the plan. */
#include <stdlib.h>
#include <string.h>

#include "ref_internal.h"

void nnc_ref_shard_slice(const double *full, int rank_dims, const int64_t *full_shape, const nnc_shard *sh, int rank,
                         double *dst) {
  int64_t outer = 1, inner = 1, len = full_shape[sh->axis];
  for (int i = 0; i < sh->axis; i++) outer *= full_shape[i];
  for (int i = sh->axis + 1; i < rank_dims; i++) inner *= full_shape[i];
  if (sh->whole > 0) {
    /* padded: rank's chunk of rows, zeros past the file's end */
    int64_t chunk = (len + sh->parts - 1) / sh->parts, lo = rank * chunk, hi = lo + chunk < len ? lo + chunk : len;
    for (int64_t o = 0; o < outer; o++) {
      double *d = dst + o * chunk * inner;
      memset(d, 0, (size_t)(chunk * inner) * sizeof *d);
      if (hi > lo) memcpy(d, full + (o * len + lo) * inner, (size_t)((hi - lo) * inner) * sizeof *d);
    }
    return;
  }
  int64_t chunk = len / ((int64_t)sh->groups * sh->parts);
  for (int64_t o = 0; o < outer; o++)
    for (int gi = 0; gi < sh->groups; gi++)
      memcpy(dst + ((o * sh->groups + gi) * chunk) * inner,
             full + (o * len + ((int64_t)gi * sh->parts + rank) * chunk) * inner, (size_t)(chunk * inner) * sizeof *dst);
}

static nnc_status all_reduce(nnc_ref *rs, int n, const nnc_node *nd, nnc_error *err) {
  int64_t count = nnc_ref_elems(&rs[0], nd->in[0]);
  double *sum = calloc((size_t)(count > 0 ? count : 1), sizeof *sum);
  if (!sum) return nnc_ref_node_fail(&rs[0], nd, NNC_E_NOMEM, err, "out of memory summing the ranks");
  nnc_status st = NNC_OK;
  for (int r = 0; !st && r < n; r++) {
    const double *x;
    st = nnc_ref_need(&rs[r], nd, nd->in[0], &x, err);
    for (int64_t i = 0; !st && i < count; i++) sum[i] = !nd->attrs.reduce_max ? sum[i] + x[i] : !r || x[i] > sum[i] ? x[i] : sum[i];
  }
  for (int r = 0; !st && r < n; r++) {
    double *y;
    st = nnc_ref_out(&rs[r], nd, 0, &y, err);
    for (int64_t i = 0; !st && i < count; i++) y[i] = nd->attrs.scalar * sum[i];
  }
  free(sum);
  return st;
}

/* Every rank's x stacked in rank order, into each rank's output. */
static nnc_status all_gather(nnc_ref *rs, int n, const nnc_node *nd, nnc_error *err) {
  int64_t count = nnc_ref_elems(&rs[0], nd->in[0]);
  nnc_status st = NNC_OK;
  for (int r = 0; !st && r < n; r++) {
    double *y;
    st = nnc_ref_out(&rs[r], nd, 0, &y, err);
    for (int q = 0; !st && q < n; q++) {
      const double *x;
      st = nnc_ref_need(&rs[q], nd, nd->in[0], &x, err);
      if (!st && count > 0) memcpy(y + q * count, x, (size_t)count * sizeof *y);
    }
  }
  return st;
}

nnc_status nnc_ref_run_ranks(nnc_ref *rs, int n, nnc_error *err) {
  const nnc_graph *g = rs[0].g;
  for (int r = 0; r < n; r++) rs[r].rank = r;
  for (int ni = 0; ni < g->nnodes; ni++) {
    const nnc_node *nd = &g->nodes[ni];
    if (nd->dead) continue;
    if (nd->op == NNC_OP_ALL_REDUCE || nd->op == NNC_OP_ALL_GATHER) {
      if (nd->attrs.ranks != n)
        return nnc_ref_node_fail(&rs[0], nd, NNC_E_USAGE, err, "expected %d ranks to evaluate, found %d",
                                 nd->attrs.ranks, n);
      nnc_status st = nd->op == NNC_OP_ALL_REDUCE ? all_reduce(rs, n, nd, err) : all_gather(rs, n, nd, err);
      if (st) return st;
      continue;
    }
    for (int r = 0; r < n; r++) {
      nnc_status st = nnc_ref_eval_node(&rs[r], ni, err);
      if (st) return st;
    }
  }
  return NNC_OK;
}
