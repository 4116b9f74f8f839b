/* compiler/passes/cse.c — common-subexpression elimination.
 *
 * One pass in node order (nodes are topologically ordered): each live node's
 * inputs are first rewritten through the merges made so far, then it is
 * looked up in a hash table of earlier live nodes keyed by op and inputs; a
 * node equal to one there (attributes and output shapes too) is marked dead
 * and its outputs are replaced by the earlier node's. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static bool same_double(double a, double b) {
  uint64_t x, y;   /* bitwise: -0.0 and 0.0 give different results, NaN equals itself */
  memcpy(&x, &a, sizeof x);
  memcpy(&y, &b, sizeof y);
  return x == y;
}

static bool same_window(const nnc_window *a, const nnc_window *b) {
  return a->kh == b->kh && a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->ph == b->ph && a->pw == b->pw &&
         a->dh == b->dh && a->dw == b->dw && a->nhwc == b->nhwc && a->tap_major == b->tap_major;
}

static bool same_attrs(const nnc_attrs *a, const nnc_attrs *b) {
  if (a->axis != b->axis || a->keepdim != b->keepdim || a->gelu_tanh != b->gelu_tanh ||
      a->weight_in_out != b->weight_in_out || a->to != b->to || a->act != b->act ||
      a->mask_zero != b->mask_zero || a->causal != b->causal || !same_window(&a->win, &b->win) ||
      a->reverse != b->reverse || a->rot_dims != b->rot_dims)
    return false;
  for (int i = 0; i < NNC_MAX_RANK; i++)
    if (a->perm[i] != b->perm[i]) return false;
  return nnc_dim_eq(a->start, b->start) && nnc_dim_eq(a->stop, b->stop) &&
         same_double(a->scalar, b->scalar) && same_double(a->eps, b->eps);
}

static bool same_tensor_type(const nnc_tensor *a, const nnc_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (!nnc_dim_eq(a->shape[i], b->shape[i])) return false;
  return true;
}

static bool same_node(const nnc_graph *g, const nnc_node *a, const nnc_node *b) {
  if (a->op != b->op || a->nin != b->nin || a->nout != b->nout) return false;
  for (int i = 0; i < a->nin; i++)
    if (a->in[i] != b->in[i]) return false;
  if (!same_attrs(&a->attrs, &b->attrs)) return false;
  for (int i = 0; i < a->nout; i++)
    if (!same_tensor_type(&g->tensors[a->out[i]], &g->tensors[b->out[i]])) return false;
  return true;
}

static uint64_t hash_node(const nnc_node *n) {
  uint64_t h = 1469598103934665603ull;   /* FNV-1a over op and input ids */
  h = (h ^ (uint64_t)n->op) * 1099511628211ull;
  for (int i = 0; i < n->nin; i++) h = (h ^ (uint64_t)(uint32_t)n->in[i]) * 1099511628211ull;
  return h;
}

static nnc_status check_ids(const nnc_graph *g, const nnc_node *n, nnc_error *err) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i] < 0 || n->in[i] >= g->ntensors)
      return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "cse: input %d of %s is not a tensor id (%d)", i + 1,
                        nnc_op_info_of(n->op)->name, n->in[i]);
  for (int i = 0; i < n->nout; i++)
    if (n->out[i] < 0 || n->out[i] >= g->ntensors)
      return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "cse: output %d of %s is not a tensor id (%d)", i + 1,
                        nnc_op_info_of(n->op)->name, n->out[i]);
  return NNC_OK;
}

nnc_status nnc_pass_cse(nnc_graph *g, int *merged, nnc_error *err) {
  *merged = 0;
  size_t cap = 16;
  while (cap < (size_t)g->nnodes * 2) cap *= 2;
  int *table = malloc(cap * sizeof *table);
  int *repl = malloc(((size_t)g->ntensors + 1) * sizeof *repl);   /* tensor -> its replacement */
  if (!table || !repl) {
    free(table);
    free(repl);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "cse: out of memory");
  }
  for (size_t i = 0; i < cap; i++) table[i] = -1;
  for (int t = 0; t < g->ntensors; t++) repl[t] = t;
  nnc_status st = NNC_OK;
  for (int id = 0; id < g->nnodes && !st; id++) {
    nnc_node *n = &g->nodes[id];
    if (n->dead) continue;
    st = check_ids(g, n, err);
    if (st) break;
    for (int i = 0; i < n->nin; i++) n->in[i] = repl[n->in[i]];
    /* a recomputed copy equals its original by construction: merging it is what it exists to avoid */
    if (n->recompute) continue;
    size_t slot = (size_t)hash_node(n) & (cap - 1);
    while (table[slot] >= 0 && !same_node(g, &g->nodes[table[slot]], n)) slot = (slot + 1) & (cap - 1);
    if (table[slot] < 0) {
      table[slot] = id;
      continue;
    }
    const nnc_node *orig = &g->nodes[table[slot]];
    for (int i = 0; i < n->nout; i++) repl[n->out[i]] = orig->out[i];
    n->dead = true;
    (*merged)++;
  }
  for (int i = 0; !st && i < g->noutputs; i++) {
    int t = g->outputs[i].tensor;
    if (t >= 0 && t < g->ntensors) g->outputs[i].tensor = repl[t];
  }
  free(table);
  free(repl);
  return st;
}
