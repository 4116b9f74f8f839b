/* compiler/passes/norm_residual.c — the residual stream's gradient joins the
 * norm's (--train).
 *
 * In a pre-norm block x feeds both the residual add and a layernorm, so its
 * gradient is the residual's (the gradient of the block's output) plus
 * layernorm_grad's dx: an add over [rows, C] after the norm's kernel, which
 * reads both and writes the sum. Here that add becomes the norm gradient's
 * fourth input, dres, which its kernel adds as it writes dx: one pass over
 * the rows fewer in each block (GPT-2 124M: 24 adds of [B*T, 768]). */
#include "passes.h"

static bool same_type(const nnc_tensor *a, const nnc_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (!nnc_dim_eq(a->shape[i], b->shape[i])) return false;
  return true;
}

/* add's operand `side` is the dx of a norm gradient read only there, and
 * the other operand, made before that norm gradient, can join it. */
static int joinable(const nnc_graph *g, const nnc_uses *u, const nnc_node *add, int side) {
  int t = add->in[side], other = add->in[1 - side], p = g->tensors[t].producer;
  if (p < 0) return -1;
  const nnc_node *n = &g->nodes[p];
  if (n->dead || (n->op != NNC_OP_LAYERNORM_GRAD && n->op != NNC_OP_RMSNORM_GRAD) || n->nin != 3 || n->out[0] != t)
    return -1;
  if (nnc_uses_count(u, t) != 1 || nnc_graph_is_output(g, t) || other == t) return -1;
  if (!same_type(&g->tensors[other], &g->tensors[t]) || g->tensors[other].producer >= p) return -1;
  return p;
}

nnc_status nnc_pass_norm_residual(nnc_graph *g, int *joined, nnc_error *err) {
  *joined = 0;
  nnc_uses u;
  nnc_status st = nnc_uses_build(g, &u, err);
  if (st) return st;
  for (int a = 0; a < g->nnodes && !st; a++) {
    nnc_node *add = &g->nodes[a];
    if (add->dead || add->op != NNC_OP_ADD) continue;
    int side = 0, p = joinable(g, &u, add, 0);
    if (p < 0) p = joinable(g, &u, add, side = 1);
    if (p < 0) continue;
    int dx = add->in[side], sum = add->out[0];
    g->nodes[p].in[3] = add->in[1 - side];
    g->nodes[p].nin = 4;
    add->dead = true;
    /* the add's readers (all after it) read dx, which is now the sum */
    for (int r = a + 1; r < g->nnodes; r++)
      for (int i = 0; i < g->nodes[r].nin; i++)
        if (g->nodes[r].in[i] == sum) g->nodes[r].in[i] = dx;
    for (int o = 0; o < g->noutputs; o++)
      if (g->outputs[o].tensor == sum) g->outputs[o].tensor = dx;
    st = nnc_infer_node(g, p, err);
    (*joined)++;
  }
  nnc_uses_free(&u);
  return st;
}
