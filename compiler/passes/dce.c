/* compiler/passes/dce.c — dead-code elimination: a node lives when one of its
 * outputs is a graph output or is read by a live node. Walking the nodes
 * backwards decides each one after all its readers. */
#include <stdlib.h>

#include "passes.h"

nnc_status nnc_pass_dce(nnc_graph *g, int *removed, nnc_error *err) {
  *removed = 0;
  bool *needed = calloc((size_t)g->ntensors + 1, sizeof *needed);
  if (!needed) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "dce: out of memory");
  for (int i = 0; i < g->noutputs; i++) {
    int t = g->outputs[i].tensor;
    if (t < 0 || t >= g->ntensors) {
      free(needed);
      return nnc_errorf(err, NNC_E_INTERNAL, g->outputs[i].loc, "dce: output %s is not a tensor id (%d)",
                        g->outputs[i].name, t);
    }
    needed[t] = true;
  }
  for (int id = g->nnodes - 1; id >= 0; id--) {
    nnc_node *n = &g->nodes[id];
    if (n->dead) continue;
    bool live = false;
    for (int i = 0; i < n->nout && !live; i++)
      live = n->out[i] >= 0 && n->out[i] < g->ntensors && needed[n->out[i]];
    if (!live) {
      n->dead = true;
      (*removed)++;
      continue;
    }
    for (int i = 0; i < n->nin; i++) {
      if (n->in[i] < 0 || n->in[i] >= g->ntensors) {
        free(needed);
        return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "dce: input %d of %s is not a tensor id (%d)", i + 1,
                          nnc_op_info_of(n->op)->name, n->in[i]);
      }
      needed[n->in[i]] = true;
    }
  }
  free(needed);
  return NNC_OK;
}
