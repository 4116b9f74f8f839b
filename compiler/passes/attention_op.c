/* compiler/passes/attention_op.c — --train: the sdpa pattern becomes one
 * attention node.
 *
 * Inference leaves attention as its primitive ops (matmul, scale, masks,
 * softmax, matmul) and fusion finds them. Differentiated one by one, those
 * ops would keep the T x S probabilities alive for the backward and compute
 * their gradient as T x S matrices too; as one op, attention's gradient is
 * the flash-attention backward (attention_grad), which recomputes the
 * probabilities from q, k and the rows' log-sum-exp that the forward saves.
 * The pattern is the fusion's (nnc_fuse_match_attention); the attention node
 * takes the place of the product with v, the group's last node, and the rest
 * of the group dies. */
#include <stdlib.h>

#include "fuse_match.h"

nnc_status nnc_pass_attention_op(nnc_graph *g, int *replaced, nnc_error *err) {
  *replaced = 0;
  int *owner = malloc((size_t)(g->nnodes + 1) * sizeof *owner);
  int *nodes = malloc((size_t)(g->nnodes + 1) * sizeof *nodes);
  if (!owner || !nodes) {
    free(owner);
    free(nodes);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "attention: out of memory");
  }
  for (int i = 0; i < g->nnodes; i++) owner[i] = -1;
  fuse_ctx c = {.g = g, .owner = owner};
  nnc_status st = nnc_uses_build(g, &c.uses, err);
  for (int n = g->nnodes - 1; !st && n >= 0; n--) {
    if (g->nodes[n].dead || g->nodes[n].op != NNC_OP_SOFTMAX || owner[n] >= 0) continue;
    fuse_group gr = {.nodes = nodes};
    if (!nnc_fuse_match_attention(&c, n, &gr)) continue;
    const nnc_attention_desc *d = &gr.attn;
    /* rank-2 scores with a padding mask: each query row has its own mask
     * row, which the op's [B, S] mask cannot say; it stays primitive */
    if (d->mask >= 0 && g->tensors[d->q].rank < 3) continue;
    /* grouped-query attention (k and v broadcast over a group of query
     * heads): the op's gradient would have to sum dk and dv over the group;
     * the primitive ops' gradients do */
    bool grouped = false;
    for (int i = 0; i < g->tensors[d->q].rank - 2; i++)
      grouped |= !nnc_dim_eq(g->tensors[d->q].shape[i], g->tensors[d->k].shape[i]) ||
                 !nnc_dim_eq(g->tensors[d->q].shape[i], g->tensors[d->v].shape[i]);
    if (grouped) continue;
    int pv = -1;
    for (int i = 0; i < gr.nnodes; i++) {
      owner[gr.nodes[i]] = n;
      if (g->nodes[gr.nodes[i]].out[0] == d->out) pv = gr.nodes[i];
    }
    const char *label = nnc_graph_intern(g, "attention");
    if (!label) {
      st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "attention: out of memory");
      break;
    }
    g->nodes[pv].label = label;
    nnc_attrs a = {.scalar = d->scale, .causal = d->causal};
    int in[4] = {d->q, d->k, d->v, d->mask};
    st = nnc_graph_rewrite_node(g, pv, NNC_OP_ATTENTION, d->mask >= 0 ? 4 : 3, in, &a, 1, err);
    if (!st) st = nnc_infer_node(g, pv, err);
    for (int i = 0; !st && i < gr.nnodes; i++)
      if (gr.nodes[i] != pv) g->nodes[gr.nodes[i]].dead = true;
    if (!st) ++*replaced;
  }
  nnc_uses_free(&c.uses);
  free(owner);
  free(nodes);
  return st;
}
