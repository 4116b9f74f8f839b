/* compiler/passes/hfuse.c — horizontal fusion: linear layers of one input as
 * one GEMM.
 *
 * BERT and LLaMA write q, k and v as three linears of the same input, where
 * GPT-2 writes one (c_attn) and splits it. At small batches each GEMM costs
 * a launch and a latency, and three skinny GEMMs read the same A three
 * times. Two or more linears that read the same tensor, whose weights are
 * parameters of one dtype and layout (biases all present or all absent),
 * become one linear over the weights concatenated along N, followed by the
 * split GPT-2's model writes by hand:
 *
 *   linear(x, Wq, bq), linear(x, Wk, bk), linear(x, Wv, bv)
 *     -> split(linear(x, concat(Wq, Wk, Wv), concat(bq, bk, bv)))
 *
 * The split's pieces are the tensors the three linears wrote, so every
 * reader sees what it saw; attention, rope and the kv caches then read
 * their heads out of the one buffer (passes/fold_heads.c), as GPT-2's do.
 * The concatenations read parameters alone: with weights made at load
 * (passes/hoist_weights.c) they run once after the weights are loaded or
 * set, and the weights file, its names and the manifest stay unchanged.
 *
 * A linear is left alone when its weight or bias is read by anything else
 * (a tied weight), is sliced by a parallel plan or quantized, when its
 * output is a graph output, or when an elementwise op reads its output:
 * that op would otherwise run in the GEMM's epilogue (LLaMA's silu(gate) *
 * up), and a split before it would cost a kernel instead of saving one.
 * The driver runs the pass on inference graphs only (see nnc_pass_hfuse in
 * passes.h for when). */
#include <stdio.h>
#include <string.h>

#include "passes.h"

typedef struct group {
  int n;
  int node[NNC_MAX_IO];   /* the linears, in node order */
} group;

/* t is a parameter read by one live node (the linear at hand) and is no
 * output. */
static bool own_param(const nnc_graph *g, const nnc_uses *u, int t) {
  const nnc_tensor *x = &g->tensors[t];
  return x->kind == NNC_TENSOR_PARAM && nnc_uses_count(u, t) == 1 && x->shard.parts == 0 &&
         x->quant.kind == NNC_QUANT_NONE && !nnc_graph_is_output(g, t);
}

/* Node id is a linear that may join a group: its weight and bias its own,
 * its output read, by no elementwise op, and no graph output. */
static bool candidate(const nnc_graph *g, const nnc_uses *u, int id) {
  const nnc_node *n = &g->nodes[id];
  if (n->dead || n->op != NNC_OP_LINEAR || n->nout != 1 || !own_param(g, u, n->in[1]) ||
      g->tensors[n->in[1]].rank != 2 || (n->nin > 2 && !own_param(g, u, n->in[2])))
    return false;
  int y = n->out[0];
  if (nnc_graph_is_output(g, y) || nnc_uses_count(u, y) == 0 || g->tensors[y].rank < 1) return false;
  for (int i = u->start[y]; i < u->start[y + 1]; i++)
    if (nnc_op_is_elementwise(g->nodes[u->node[i]].op)) return false;
  return true;
}

/* Linears a and b may share a GEMM: the same input, layout, K, dtypes and
 * bias presence. */
static bool compatible(const nnc_graph *g, const nnc_node *a, const nnc_node *b) {
  const nnc_tensor *wa = &g->tensors[a->in[1]], *wb = &g->tensors[b->in[1]];
  int k = a->attrs.weight_in_out ? 0 : 1;
  return a->in[0] == b->in[0] && a->attrs.weight_in_out == b->attrs.weight_in_out && a->nin == b->nin &&
         wa->dtype == wb->dtype && nnc_dim_eq(wa->shape[k], wb->shape[k]) &&
         (a->nin < 3 || g->tensors[a->in[2]].dtype == g->tensors[b->in[2]].dtype) &&
         g->tensors[a->out[0]].dtype == g->tensors[b->out[0]].dtype;
}

/* The first group of two or more linears in node order; false when none. */
static bool find_group(const nnc_graph *g, const nnc_uses *u, group *out) {
  for (int id = 0; id < g->nnodes; id++) {
    if (!candidate(g, u, id)) continue;
    const nnc_node *first = &g->nodes[id];
    int x = first->in[0];
    out->n = 0;
    /* the readers of x are in node order, so the group's first is id */
    for (int i = u->start[x]; i < u->start[x + 1] && out->n < NNC_MAX_IO; i++) {
      int r = u->node[i];
      if (r < id || (out->n && r == out->node[out->n - 1])) continue;
      if (g->nodes[r].in[0] == x && candidate(g, u, r) && compatible(g, first, &g->nodes[r])) out->node[out->n++] = r;
    }
    if (out->n >= 2) return true;
  }
  return false;
}

static const char *label_of(const nnc_graph *g, int id) {
  return g->nodes[id].label ? g->nodes[id].label : "linear";
}

/* "a.b.q|k|v (lines 51, 52, 53)": the members' labels after their common
 * prefix (up to a dot), and their Lua lines (file:line where a member is
 * from another file than the first). */
static void group_label(const nnc_graph *g, const group *grp, char *buf, size_t len) {
  const char *l0 = label_of(g, grp->node[0]);
  size_t pre = strlen(l0);
  for (int i = 1; i < grp->n; i++) {
    const char *li = label_of(g, grp->node[i]);
    size_t j = 0;
    while (j < pre && li[j] == l0[j]) j++;
    pre = j;
  }
  while (pre > 0 && l0[pre - 1] != '.') pre--;
  size_t used = (size_t)snprintf(buf, len, "%.*s", (int)pre, l0);
  for (int i = 0; i < grp->n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "|" : "", label_of(g, grp->node[i]) + pre);
  nnc_srcloc first = g->nodes[grp->node[0]].loc;
  bool one_line = true;   /* LLaMA's three are written by one helper, proj() */
  for (int i = 1; i < grp->n; i++)
    one_line &= g->nodes[grp->node[i]].loc.file == first.file && g->nodes[grp->node[i]].loc.line == first.line;
  if (one_line) {
    if (used < len) snprintf(buf + used, len - used, " (line %d)", first.line);
    return;
  }
  for (int i = 0; i < grp->n && used < len; i++) {
    nnc_srcloc l = g->nodes[grp->node[i]].loc;
    bool other = l.file != first.file && l.file;
    used += (size_t)snprintf(buf + used, len - used, "%s%s%s%d", i ? ", " : " (lines ", other ? l.file : "",
                             other ? ":" : "", l.line);
  }
  if (used < len) snprintf(buf + used, len - used, ")");
}

/* Adds node op(in) labelled `label` just before node *at (which moves one
 * place on); *out gets its output. */
static nnc_status add_before(nnc_graph *g, int *at, nnc_op op, int nin, const int *in, const nnc_attrs *a,
                             nnc_srcloc loc, const char *label, int *out, nnc_error *err) {
  int id;
  nnc_status st = nnc_graph_add_node(g, op, nin, in, a, 1, loc, label, &id, err);
  if (!st) st = nnc_infer_node(g, id, err);
  if (!st) st = nnc_graph_move_node(g, id, *at, err);
  if (st) return st;
  *out = g->nodes[*at].out[0];
  ++*at;
  return NNC_OK;
}

static nnc_status fuse_group(nnc_graph *g, const group *grp, nnc_error *err) {
  char text[512];
  group_label(g, grp, text, sizeof text);
  /* the concatenations, the GEMM and the split all carry the group's name */
  const char *label = nnc_graph_intern(g, text);
  if (!label) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "hfuse: out of memory");
  const nnc_node first = g->nodes[grp->node[0]];
  int at = grp->node[0], ws[NNC_MAX_IO], bs[NNC_MAX_IO], ys[NNC_MAX_IO];
  for (int i = 0; i < grp->n; i++) {
    const nnc_node *m = &g->nodes[grp->node[i]];
    ws[i] = m->in[1];
    bs[i] = m->nin > 2 ? m->in[2] : -1;
    ys[i] = m->out[0];
  }
  /* the weights along N: rows of nn.Linear's [N, K], columns of [K, N] */
  nnc_attrs cat;
  memset(&cat, 0, sizeof cat);
  cat.axis = first.attrs.weight_in_out ? 1 : 0;
  int in[3] = {first.in[0], -1, -1};
  nnc_status st = add_before(g, &at, NNC_OP_CONCAT, grp->n, ws, &cat, first.loc, label, &in[1], err);
  cat.axis = 0;
  if (!st && bs[0] >= 0) st = add_before(g, &at, NNC_OP_CONCAT, grp->n, bs, &cat, first.loc, label, &in[2], err);
  int y;
  if (!st) st = add_before(g, &at, NNC_OP_LINEAR, first.nin, in, &first.attrs, first.loc, label, &y, err);
  if (st) return st;
  /* the first linear becomes the split, producing every member's output;
   * the others' readers all come after it */
  nnc_attrs sp;
  memset(&sp, 0, sizeof sp);
  sp.axis = g->tensors[y].rank - 1;
  st = nnc_graph_rewrite_node(g, at, NNC_OP_SPLIT, 1, &y, &sp, 0, err);
  if (st) return st;
  nnc_node *split = &g->nodes[at];
  split->label = label;
  split->nout = grp->n;
  for (int i = 0; i < grp->n; i++) {
    split->out[i] = ys[i];
    g->tensors[ys[i]].producer = at;
  }
  /* the other members, each now (at - first id) places on: the added nodes sit before them */
  for (int i = 1; i < grp->n; i++) {
    nnc_node *m = &g->nodes[grp->node[i] + (at - grp->node[0])];
    m->dead = true;
    m->nout = 0;
  }
  return nnc_infer_node(g, at, err);
}

bool nnc_hfuse_wanted(bool off, bool train, const nnc_parallel *par, nnc_quantize q, bool weights_at_load) {
  /* training would concatenate every step and split dW back; a plan's
   * column slices and the int8 weights are the separate parameters' */
  return !off && !train && (!par || par->tp <= 1) && q == NNC_QUANTIZE_NONE && weights_at_load;
}

nnc_status nnc_pass_hfuse(nnc_graph *g, int *fused, nnc_error *err) {
  int count = 0;
  nnc_status st = NNC_OK;
  for (;;) {
    nnc_uses u;
    st = nnc_uses_build(g, &u, err);
    if (st) break;
    group grp;
    bool found = find_group(g, &u, &grp);
    nnc_uses_free(&u);
    if (!found) break;
    st = fuse_group(g, &grp, err);
    if (st) break;
    count++;
  }
  if (fused) *fused = count;
  return st;
}

/* The GEMMs the pass made: a linear whose weight is a concatenation of
 * parameters and whose output a split reads. */
void nnc_hfuse_explain(FILE *f, const nnc_graph *g) {
  for (int id = 0; id < g->nnodes; id++) {
    const nnc_node *n = &g->nodes[id];
    if (n->dead || n->op != NNC_OP_LINEAR) continue;
    int wp = g->tensors[n->in[1]].producer;
    if (wp < 0 || g->nodes[wp].op != NNC_OP_CONCAT || g->nodes[wp].label != n->label) continue;
    const nnc_tensor *y = &g->tensors[n->out[0]], *w = &g->tensors[n->in[1]];
    char ns[256] = "";
    size_t used = 0;
    const nnc_node *cat = &g->nodes[wp];
    for (int i = 0; i < cat->nin && used < sizeof ns; i++) {
      const nnc_tensor *wi = &g->tensors[cat->in[i]];
      used += (size_t)snprintf(ns + used, sizeof ns - used, "%s%lld", i ? "+" : "",
                               (long long)wi->shape[cat->attrs.axis].k);
    }
    fprintf(f, "hfuse: %s:%d: %s: one GEMM, N = %s = %lld, K = %lld, its weights joined when they load "
            "(--hfuse=off: one GEMM each)\n", n->loc.file ? n->loc.file : "?", n->loc.line, n->label, ns,
            (long long)y->shape[y->rank - 1].k, (long long)w->shape[n->attrs.weight_in_out ? 0 : 1].k);
  }
}
