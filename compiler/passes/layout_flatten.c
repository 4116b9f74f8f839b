/* compiler/passes/layout_flatten.c — the features a linear reads after a
 * flatten, left in NHWC: its weight's columns follow them instead.
 *
 * A flatten orders an NCHW tensor's features channel by channel, an NHWC
 * one's pixel by pixel, and the linear after it (fc1 of the MNIST CNN) was
 * trained on the NCHW order. After passes/layout.c the features are NHWC
 * and one transpose takes them back before the flatten, every call. When
 * the weights are made once at load (nnc_compile_opts.hoist_weights), the
 * linear's weight is permuted instead, the same way the transpose would
 * have moved the features: a weight-only computation, run once, and the
 * weights file keeps PyTorch's layout and names.
 *
 *   linear(reshape(transpose(y, p)), W)
 *     -> linear(reshape(y), reshape(transpose(reshape(W, [O, t dims]), p^-1)))
 *
 * (p NHWC to NCHW; t the transposed features). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* t is computed from parameters alone (memo: 0 unknown, 1 yes, 2 no). */
static bool weight_only(const nnc_graph *g, int t, char *memo) {
  if (memo[t]) return memo[t] == 1;
  const nnc_tensor *x = &g->tensors[t];
  bool ok = x->kind == NNC_TENSOR_PARAM;
  if (x->kind == NNC_TENSOR_VALUE) {
    const nnc_node *n = &g->nodes[x->producer];
    ok = n->nin > 0;
    for (int i = 0; ok && i < n->nin; i++) ok = weight_only(g, n->in[i], memo);
  }
  memo[t] = ok ? 1 : 2;
  return ok;
}

/* The NHWC-to-NCHW transpose node whose output the flatten of linear `lin`
 * reads, read by that flatten alone; else -1. */
static int flattened_transpose(const nnc_graph *g, const nnc_uses *u, const nnc_node *lin) {
  int r = lin->in[0], rp = g->tensors[r].producer;
  if (lin->attrs.weight_in_out || g->tensors[r].rank != 2 || rp < 0 || nnc_uses_count(u, r) != 1 ||
      nnc_graph_is_output(g, r))
    return -1;
  const nnc_node *flat = &g->nodes[rp];
  if (flat->op != NNC_OP_RESHAPE) return -1;
  int t = flat->in[0], tp = g->tensors[t].producer;
  static const int to_nchw[4] = {0, 3, 1, 2};
  if (tp < 0 || g->nodes[tp].op != NNC_OP_TRANSPOSE || g->tensors[t].rank != 4 ||
      memcmp(g->nodes[tp].attrs.perm, to_nchw, sizeof to_nchw) != 0 || nnc_uses_count(u, t) != 1 ||
      nnc_graph_is_output(g, t) || !nnc_dim_eq(g->tensors[t].shape[0], g->tensors[r].shape[0]))
    return -1;
  for (int i = 1; i < g->tensors[t].rank; i++)
    if (!nnc_dim_is_const(g->tensors[t].shape[i])) return -1;
  return tp;
}

/* Adds node op(x) before node `at` (a reshape's output shaped `shape`),
 * like `like`; *out gets its output. */
static nnc_status add_before(nnc_graph *g, int at, nnc_op op, int x, const nnc_attrs *a, const nnc_node *like, int rank,
                             const nnc_dim *shape, int *out, nnc_error *err) {
  int id;
  nnc_status st = nnc_graph_add_node(g, op, 1, &x, a, 1, like->loc, like->label, &id, err);
  if (st) return st;
  *out = g->nodes[id].out[0];
  if (shape) {
    g->tensors[*out].rank = rank;
    memcpy(g->tensors[*out].shape, shape, (size_t)rank * sizeof *shape);
  }
  st = nnc_infer_node(g, id, err);
  if (!st) st = nnc_graph_move_node(g, id, at, err);
  return st;
}

/* Linear `*lin` reading the flatten of transpose node tp: the flatten reads
 * the transpose's input, the weight is permuted before the linear. */
static nnc_status permute_weight(nnc_graph *g, int tp, int *lin, nnc_error *err) {
  const nnc_node tn = g->nodes[tp];
  nnc_node ln = g->nodes[*lin];
  const nnc_tensor *t = &g->tensors[tn.out[0]];
  int rank = t->rank, flat = g->tensors[ln.in[0]].producer, w = ln.in[1];
  nnc_dim wide[NNC_MAX_RANK];
  nnc_attrs a;
  memset(&a, 0, sizeof a);
  wide[0] = g->tensors[w].shape[0];
  for (int i = 1; i < rank; i++) wide[i] = t->shape[i];
  for (int i = 0; i < rank; i++) a.perm[tn.attrs.perm[i]] = i;
  int w1, w2, w3;
  nnc_status st = add_before(g, (*lin)++, NNC_OP_RESHAPE, w, NULL, &ln, rank, wide, &w1, err);
  if (!st) st = add_before(g, (*lin)++, NNC_OP_TRANSPOSE, w1, &a, &ln, 0, NULL, &w2, err);
  if (!st) st = add_before(g, (*lin)++, NNC_OP_RESHAPE, w2, NULL, &ln, 2, g->tensors[w].shape, &w3, err);
  if (st) return st;
  g->nodes[*lin].in[1] = w3;
  g->nodes[flat].in[0] = tn.in[0];
  g->nodes[tp].dead = true;
  st = nnc_infer_node(g, flat, err);
  if (!st) st = nnc_infer_node(g, *lin, err);
  return st;
}

nnc_status nnc_pass_layout_flatten(nnc_graph *g, int *permuted, nnc_error *err) {
  *permuted = 0;
  char *memo = calloc((size_t)g->ntensors + 1, 1);
  if (!memo) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "layout: out of memory");
  nnc_uses u;
  nnc_status st = nnc_uses_build(g, &u, err);
  if (st) {
    free(memo);
    return st;
  }
  /* tensors added here are never a weight the loop looks at */
  int ntensors = g->ntensors;
  for (int id = 0; !st && id < g->nnodes; id++) {
    const nnc_node *n = &g->nodes[id];
    if (n->dead || n->op != NNC_OP_LINEAR || n->in[1] >= ntensors || !weight_only(g, n->in[1], memo)) continue;
    int tp = flattened_transpose(g, &u, n);
    if (tp < 0) continue;
    st = permute_weight(g, tp, &id, err);
    ++*permuted;
  }
  nnc_uses_free(&u);
  free(memo);
  return st;
}
