/* compiler/passes/check.c — the whole graph is well formed: ids in range,
 * every value computed by a live node before it is read, shapes re-inferred,
 * at least one output. Runs after the front-end and after any pass that
 * rewrites the graph. */
#include "passes.h"

/* Tensor t may be read by node `reader` (or by the graph outputs when reader
 * is g->nnodes): an input, a parameter, a state, or computed by an earlier live node. */
static nnc_status check_readable(const nnc_graph *g, int t, int reader, const char *what,
                                 nnc_srcloc loc, nnc_error *err) {
  if (t < 0 || t >= g->ntensors)
    return nnc_errorf(err, NNC_E_INTERNAL, loc, "%s: tensor id %d is out of range (the graph has %d)", what, t,
                      g->ntensors);
  const nnc_tensor *x = &g->tensors[t];
  if (x->kind != NNC_TENSOR_VALUE) return NNC_OK;
  int p = x->producer;
  if (p < 0 || p >= reader)
    return nnc_errorf(err, NNC_E_INTERNAL, loc, "%s: reads %s before it is computed (producer %d)", what,
                      x->name, p);
  if (g->nodes[p].dead)
    return nnc_errorf(err, NNC_E_INTERNAL, loc, "%s: reads %s, computed by removed node %d", what, x->name, p);
  return NNC_OK;
}

static nnc_status check_node(const nnc_graph *g, int id, nnc_error *err) {
  const nnc_node *n = &g->nodes[id];
  const char *op = nnc_op_info_of(n->op)->name;
  if (n->op <= NNC_OP_NONE || n->op >= NNC_OP_COUNT)
    return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "node %d: unknown op %d", id, (int)n->op);
  if (n->nin < 0 || n->nin > NNC_MAX_IO || n->nout < 1 || n->nout > NNC_MAX_IO)
    return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "%s: node %d has %d inputs and %d outputs", op, id, n->nin,
                      n->nout);
  for (int i = 0; i < n->nin; i++) {
    nnc_status st = check_readable(g, n->in[i], id, op, n->loc, err);
    if (st) return st;
  }
  for (int i = 0; i < n->nout; i++) {
    int t = n->out[i];
    if (t < 0 || t >= g->ntensors)
      return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "%s: output %d is not a tensor id (%d)", op, i + 1, t);
    if (g->tensors[t].kind != NNC_TENSOR_VALUE || g->tensors[t].producer != id)
      return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "%s: output %s is not a value computed by node %d", op,
                        g->tensors[t].name, id);
  }
  return NNC_OK;
}

/* A transpose's perm is 0 past its rank (known once inferred): a perm is
 * written out whole (--emit=ir, the folders' reference graph), and a stale
 * entry there made layout.lua's sources differ between builds. */
static nnc_status check_perm(const nnc_graph *g, const nnc_node *n, nnc_error *err) {
  if (n->op != NNC_OP_TRANSPOSE) return NNC_OK;
  const nnc_tensor *t = &g->tensors[n->out[0]];
  for (int i = t->rank; i < NNC_MAX_RANK; i++)
    if (n->attrs.perm[i] != 0)
      return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "transpose %s: expected 0 in its perm past rank %d, found %d "
                        "at %d", t->name, t->rank, n->attrs.perm[i], i);
  return NNC_OK;
}

/* Graph inputs and parameters are tensors of their kind. */
static nnc_status check_leaves(const nnc_graph *g, const int *ids, int n, nnc_tensor_kind kind,
                               const char *what, nnc_error *err) {
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= g->ntensors || g->tensors[ids[i]].kind != kind)
      return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "graph %s %d: tensor id %d is not of that kind", what,
                        i + 1, ids[i]);
  return NNC_OK;
}

nnc_status nnc_pass_check(nnc_graph *g, nnc_error *err) {
  nnc_status st = check_leaves(g, g->inputs, g->ninputs, NNC_TENSOR_INPUT, "input", err);
  if (!st) st = check_leaves(g, g->params, g->nparams, NNC_TENSOR_PARAM, "parameter", err);
  if (!st) st = check_leaves(g, g->states, g->nstates, NNC_TENSOR_STATE, "state", err);
  for (int n = 0; !st && n < g->nnodes; n++)
    if (!g->nodes[n].dead) st = check_node(g, n, err);
  for (int i = 0; !st && i < g->noutputs; i++)
    st = check_readable(g, g->outputs[i].tensor, g->nnodes, g->outputs[i].name, g->outputs[i].loc, err);
  for (int n = 0; !st && n < g->nnodes; n++)
    if (!g->nodes[n].dead) st = nnc_infer_node(g, n, err);
  for (int n = 0; !st && n < g->nnodes; n++)
    if (!g->nodes[n].dead) st = check_perm(g, &g->nodes[n], err);
  if (st) return st;
  if (g->noutputs == 0)
    return nnc_errorf(err, NNC_E_MODEL, NNC_NOLOC, "%s: the model has no outputs: call output(name, x)",
                      g->name ? g->name : "model");
  return NNC_OK;
}
