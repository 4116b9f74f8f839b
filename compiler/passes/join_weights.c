/* compiler/passes/join_weights.c — weights that one GEMM reads as one block,
 * loaded where the block is.
 *
 * passes/hfuse.c makes q, k and v one GEMM over their weights concatenated
 * along N. Run at load (hoist_weights.c), the concatenation is a copy, and
 * the model then holds every member twice: its own parameter and its rows
 * of the joined weight. For nn.Linear's [N, K] weights and for biases the
 * concatenation along the first axis is the members one after the other
 * in memory; so when the weights block lays them out in that order with
 * nothing between them, the joined tensor is a view of the first member
 * and the copy disappears. The emitters lay out the weights in the order
 * nnc_weight_order gives, and every weight stays where the loader writes
 * it, so nothing changes for the file, the manifest or set_weight.
 *
 * A concatenation qualifies when it is a kernel of its own run at load,
 * along axis 0, of parameters of its dtype that nothing else reads, each
 * but the last a multiple of 256 bytes (the emitters round each weight to
 * at most 256 bytes, so no padding falls between them). Its kernel then
 * becomes a view of several inputs (memplan aliases its output to the first
 * member). Runs after hoist_weights, before memory planning. */
#include <stdlib.h>

#include "passes.h"

#define JOIN_ALIGN 256

/* The concatenation kernel k qualifies (above); reads[t]: kernels reading t. */
static bool joinable(const nnc_schedule *s, const nnc_kernel *k, const int *reads) {
  const nnc_graph *g = s->g;
  if (!k->at_load || k->kind != NNC_KERNEL_MOVE || k->nnodes != 1 || k->nin < 2 || k->nout != 1) return false;
  const nnc_node *n = &g->nodes[k->nodes[0]];
  if (n->op != NNC_OP_CONCAT || n->attrs.axis != 0 || n->nin != k->nin) return false;
  const nnc_tensor *y = &g->tensors[k->out[0]];
  for (int i = 0; i < k->nin; i++) {
    int t = k->in[i];
    const nnc_tensor *w = &g->tensors[t];
    if (t != n->in[i] || w->kind != NNC_TENSOR_PARAM || w->dtype != y->dtype || reads[t] != 1 ||
        nnc_graph_is_output(g, t))
      return false;
    for (int j = 0; j < i; j++)
      if (k->in[j] == t) return false;   /* the same weight twice */
    if (i + 1 < k->nin && nnc_tensor_max_elems(g, w) * nnc_dtype_size(w->dtype) % JOIN_ALIGN) return false;
  }
  return true;
}

nnc_status nnc_pass_join_weights(nnc_schedule *s, int *joined, nnc_error *err) {
  const nnc_graph *g = s->g;
  int count = 0;
  int *reads = calloc((size_t)g->ntensors + 1, sizeof *reads);
  if (!reads) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "join_weights: out of memory");
  for (int k = 0; k < s->nk; k++)
    for (int i = 0; i < s->k[k].nin; i++) reads[s->k[k].in[i]]++;
  for (int k = 0; k < s->nk; k++) {
    nnc_kernel *kn = &s->k[k];
    if (!joinable(s, kn, reads)) continue;
    kn->kind = NNC_KERNEL_VIEW;
    kn->at_load = false;   /* nothing left to run */
    count++;
  }
  free(reads);
  if (joined) *joined = count;
  return NNC_OK;
}

bool nnc_kernel_is_joined_view(const nnc_kernel *k) { return k->kind == NNC_KERNEL_VIEW && k->nin > 1; }

nnc_status nnc_weight_order(const nnc_schedule *s, int *order, nnc_error *err) {
  const nnc_graph *g = s->g;
  int *param_of = malloc(((size_t)g->ntensors + 1) * sizeof *param_of);
  bool *placed = calloc((size_t)g->nparams + 1, sizeof *placed);
  int *group_of = malloc(((size_t)g->nparams + 1) * sizeof *group_of);   /* the joined view a weight is in */
  if (!param_of || !placed || !group_of) {
    free(param_of), free(placed), free(group_of);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "weight order: out of memory");
  }
  for (int t = 0; t < g->ntensors; t++) param_of[t] = -1;
  for (int i = 0; i < g->nparams; i++) param_of[g->params[i]] = i, group_of[i] = -1;
  for (int k = 0; k < s->nk; k++)
    if (nnc_kernel_is_joined_view(&s->k[k]))
      for (int i = 0; i < s->k[k].nin; i++) group_of[param_of[s->k[k].in[i]]] = k;
  int n = 0;
  for (int i = 0; i < g->nparams; i++) {
    if (placed[i]) continue;
    if (group_of[i] < 0) {
      placed[i] = true;
      order[n++] = i;
      continue;
    }
    /* the whole group where its first declared member would be, in the concatenation's order */
    const nnc_kernel *k = &s->k[group_of[i]];
    for (int j = 0; j < k->nin; j++) {
      int p = param_of[k->in[j]];
      placed[p] = true;
      order[n++] = p;
    }
  }
  free(param_of), free(placed), free(group_of);
  return NNC_OK;
}
