/* compiler/passes/hoist_weights.c — work on the weights alone, done once.
 *
 * An inference model may compute on its weights before they meet an
 * activation: batch norm folded into the convolution before it (the weight
 * scaled, the bias shifted), a weight padded to the channels the kernels
 * want, transposed, cast to the storage dtype. Those kernels give the same
 * result on every run, so they run once after the weights are loaded (the
 * emitters' prepare()), and the tensors they leave for the other kernels
 * stay in memory from then on (passes/memplan.c). A kernel qualifies when
 * everything it reads is a parameter or written by a kernel that
 * qualifies, it writes no graph output, and it is no kv_append (which
 * writes a state). Runs after fold_heads, before memory planning. */
#include <stdlib.h>

#include "passes.h"

nnc_status nnc_pass_hoist_weights(nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = s->g;
  bool *weight = calloc((size_t)g->ntensors + 1, sizeof *weight);   /* a weight, or made of weights alone */
  if (!weight) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "hoist_weights: out of memory");
  for (int i = 0; i < g->nparams; i++) weight[g->params[i]] = true;
  for (int k = 0; k < s->nk; k++) {
    nnc_kernel *kn = &s->k[k];
    bool ok = kn->nin > 0;
    for (int i = 0; ok && i < kn->nin; i++) ok = weight[kn->in[i]];
    for (int i = 0; ok && i < kn->nout; i++) ok = !nnc_graph_is_output(g, kn->out[i]);
    for (int i = 0; ok && i < kn->nnodes; i++) ok = g->nodes[kn->nodes[i]].op != NNC_OP_KV_APPEND;
    /* a view of a weight runs nothing: it passes the mark on but is no work at load */
    kn->at_load = ok && kn->kind != NNC_KERNEL_VIEW;
    for (int i = 0; ok && i < kn->nout; i++) weight[kn->out[i]] = true;
  }
  free(weight);
  return NNC_OK;
}
