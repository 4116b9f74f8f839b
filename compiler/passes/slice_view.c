/* compiler/passes/slice_view.c — a slice that keeps the first rows of its
 * input is a view, not a copy.
 *
 * Tensors are contiguous, so the first `stop` entries along axis a, with
 * every axis before a of size 1, are the first bytes of the input: BERT's
 * and GPT-2's position rows, wpe[0:T], are the table's first T rows. Such a
 * slice's kernel (a move of its own) becomes a view that aliases its input
 * (memplan.c), and its readers read the table where it is. A slice written
 * to the caller's buffer (a graph output) stays a copy. Runs after fusion,
 * before memory planning. */
#include "passes.h"

/* Node n keeps a prefix of its input's memory. */
static bool prefix_slice(const nnc_graph *g, const nnc_node *n) {
  if (n->op != NNC_OP_SLICE || n->nin != 1 || n->nout != 1 || !nnc_dim_eq_const(n->attrs.start, 0)) return false;
  const nnc_tensor *x = &g->tensors[n->in[0]];
  if (n->attrs.axis < 0 || n->attrs.axis >= x->rank || x->dtype != g->tensors[n->out[0]].dtype) return false;
  for (int i = 0; i < n->attrs.axis; i++)
    if (!nnc_dim_eq_const(x->shape[i], 1)) return false;
  return true;
}

nnc_status nnc_pass_slice_view(nnc_schedule *s, int *viewed, nnc_error *err) {
  (void)err;
  const nnc_graph *g = s->g;
  int count = 0;
  for (int k = 0; k < s->nk; k++) {
    nnc_kernel *kn = &s->k[k];
    if (kn->kind != NNC_KERNEL_MOVE || kn->nnodes != 1 || kn->nin != 1 || kn->nout != 1 ||
        nnc_graph_is_output(g, kn->out[0]) || !prefix_slice(g, &g->nodes[kn->nodes[0]]))
      continue;
    kn->kind = NNC_KERNEL_VIEW;
    kn->at_load = false;   /* nothing left to run */
    count++;
  }
  if (viewed) *viewed = count;
  return NNC_OK;
}
