/* compiler/passes/layout.c — an NCHW model runs NHWC inside.
 *
 * The front-end lowers every image op of an NCHW model as the NHWC one
 * between two transposes (frontend/dsl_conv.c): to NHWC before its windows,
 * back to NCHW after. Between two image ops the model's own ops (relu, the
 * residual add, a batch norm that is not folded) see NCHW, so a ResNet block
 * would move every activation twice. This pass moves the transposes down
 * through those elementwise ops until one meets its inverse and both go:
 *
 *   relu(T(y))        -> T(relu(y))        (the same for any elementwise op)
 *   T(a) + T(b)       -> T(a + b)
 *   T(a) * s          -> T(a * s')         s' a view of s: a per-channel [C, 1, 1]
 *                                          factor is [1, 1, 1, C] in NHWC
 *   T2(T1(x))         -> T(x), one transpose of the two perms composed; x
 *                                          itself when they are inverses
 *
 * An op moves only when its result is wanted in the inner layout, that is
 * when a transpose (the next image op's) reads it, directly or through
 * other ops that move: an op whose result only leaves (a graph output, a
 * flatten before a linear) keeps its transpose before it, so no rewrite adds
 * a transpose. Every rewrite is an identity, so the pass is correct for any
 * graph, the backward of --train included (an act_grad of two transposed
 * operands moves like a relu). What stays: one transpose where the NCHW
 * image enters, one where an NCHW tensor leaves to what needs NCHW. A
 * transpose that moves only axes of size 1 (an image of one channel to
 * NHWC; [N, 1, 1, C] pooled features to NCHW) is a reshape, a view. When
 * the weights are made at load, a transpose before a flatten before a
 * linear goes too: the linear's weight is permuted (layout_flatten.c). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct layout_ctx {
  nnc_graph *g;
  int cap;                     /* tensors the arrays below hold */
  int (*perm)[NNC_MAX_RANK];   /* per tensor: t == transpose(src[t], perm[t]) ... */
  int *src;                    /* ... when src[t] >= 0 */
  bool *lay;                   /* phase 1: t could be had as such a transpose (perm[t] its perm) */
  bool *want;                  /* phase 2: a transpose reads t, or an op that moves reads it */
  int *repl;                   /* phase 3: a tensor's replacement (itself unless cancelled) */
  nnc_error *err;
} layout_ctx;

/* NCHW to NHWC or back: the only transposes the pass moves. Others (an
 * attention's head split, a key's transpose) are patterns that fusion
 * looks for, left as the model wrote them. */
static bool is_layout_perm(const int *p, int rank) {
  static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
  return rank == 4 && (memcmp(p, to_nhwc, sizeof to_nhwc) == 0 || memcmp(p, to_nchw, sizeof to_nchw) == 0);
}

static bool is_identity(const int *p, int rank) {
  for (int i = 0; i < rank; i++)
    if (p[i] != i) return false;
  return true;
}

/* transpose(transpose(x, inner), outer) == transpose(x, r) */
/* r's entries past rank are 0: a perm is copied whole into the graph, and
 * stale values there made the generated sources differ between builds. */
static void compose(const int *inner, const int *outer, int rank, int *r) {
  for (int i = 0; i < NNC_MAX_RANK; i++) r[i] = i < rank ? inner[outer[i]] : 0;
}

static void invert(const int *p, int rank, int *inv) {
  for (int i = 0; i < rank; i++) inv[p[i]] = i;
}

/* Transposing `shape` (rank r) by p keeps the axes that are not 1 in their
 * order: the transpose moves no element, a reshape says the same. */
static bool moves_nothing(int rank, const nnc_dim *shape, const int *p) {
  int last = -1;
  for (int i = 0; i < rank; i++) {
    if (nnc_dim_eq_const(shape[p[i]], 1)) continue;
    if (p[i] < last) return false;
    last = p[i];
  }
  return true;
}

/* Operand x of an elementwise op of rank `rank` whose transposed operands
 * have perm p, as the operand of the op moved inside: its shape, left-padded
 * with 1s to rank, transposed by p's inverse into out. True when that
 * transpose moves nothing (a scalar, a per-channel factor). */
static bool cheap_operand(const nnc_tensor *x, int rank, const int *p, nnc_dim *out) {
  if (x->rank > rank) return false;
  nnc_dim full[NNC_MAX_RANK];
  int lead = rank - x->rank, q[NNC_MAX_RANK];
  for (int i = 0; i < rank; i++) full[i] = i < lead ? nnc_dim_const(1) : x->shape[i - lead];
  invert(p, rank, q);
  for (int i = 0; i < rank; i++) out[i] = full[q[i]];
  return moves_nothing(rank, full, q);
}

/* The ops that commute with a transpose of their operands: each output
 * element reads only the operands' elements at its own index (broadcast). */
static bool movable(const nnc_node *n) {
  nnc_op_class c = nnc_op_info_of(n->op)->cls;
  return (c == NNC_CLASS_UNARY || c == NNC_CLASS_BINARY) && n->op != NNC_OP_EXPAND && n->nout == 1 &&
         !n->recompute;
}

/* Tensor x is a transpose of another: in phase 1 (lay), one that could be
 * had; in phase 3 (src), one that is. */
static bool had(const layout_ctx *c, int x, bool made) { return made ? c->src[x] >= 0 : c->lay[x]; }

/* The perm every transposed operand of elementwise node n shares, when the
 * other operands are cheap (see cheap_operand); false when n cannot move. */
static bool common_perm(const layout_ctx *c, const nnc_node *n, bool made, int *p) {
  const nnc_graph *g = c->g;
  int rank = g->tensors[n->out[0]].rank, found = 0;
  for (int i = 0; i < n->nin; i++) {
    int x = n->in[i];
    if (!had(c, x, made) || g->tensors[x].rank != rank) continue;
    if (found && memcmp(c->perm[x], p, (size_t)rank * sizeof *p) != 0) return false;
    memcpy(p, c->perm[x], (size_t)rank * sizeof *p);
    found = 1;
  }
  if (!found) return false;
  nnc_dim shape[NNC_MAX_RANK];
  for (int i = 0; i < n->nin; i++) {
    int x = n->in[i];
    bool moved = had(c, x, made) && g->tensors[x].rank == rank;
    if (!moved && !cheap_operand(&g->tensors[x], rank, p, shape)) return false;
  }
  return true;
}

/* Phase 1, forward: which tensors could be had as a transpose of another
 * (lay, perm): a transpose's output (its perm composed with its input's),
 * an elementwise op's of such operands. */
static void find_transposes(layout_ctx *c) {
  nnc_graph *g = c->g;
  for (int id = 0; id < g->nnodes; id++) {
    const nnc_node *n = &g->nodes[id];
    if (n->dead) continue;
    int p[NNC_MAX_RANK] = {0};
    if (n->op == NNC_OP_TRANSPOSE && is_layout_perm(n->attrs.perm, g->tensors[n->out[0]].rank)) {
      int x = n->in[0], t = n->out[0], rank = g->tensors[t].rank;
      if (c->lay[x]) compose(c->perm[x], n->attrs.perm, rank, p);
      else memcpy(p, n->attrs.perm, sizeof p);
      c->lay[t] = !is_identity(p, rank);
      memcpy(c->perm[t], p, sizeof p);
    } else if (movable(n) && common_perm(c, n, false, p)) {
      c->lay[n->out[0]] = true;
      memcpy(c->perm[n->out[0]], p, sizeof p);
    }
  }
}

/* Phase 2, backward: which of them are wanted as the transpose (a
 * transpose reads them, or an op that moves because its result is wanted). */
static void find_wanted(layout_ctx *c) {
  nnc_graph *g = c->g;
  for (int id = g->nnodes - 1; id >= 0; id--) {
    const nnc_node *n = &g->nodes[id];
    if (n->dead) continue;
    if (n->op == NNC_OP_TRANSPOSE && is_layout_perm(n->attrs.perm, g->tensors[n->out[0]].rank)) {
      c->want[n->in[0]] |= c->lay[n->in[0]];
    } else if (movable(n) && c->lay[n->out[0]] && c->want[n->out[0]]) {
      for (int i = 0; i < n->nin; i++) c->want[n->in[i]] |= c->lay[n->in[i]];
    }
  }
}

/* Adds node op(in) with n's attributes, label and line, infers it and
 * moves it to index `at`; *out gets its output. A reshape's output shape
 * is `shape`. */
static nnc_status add_before(layout_ctx *c, int at, nnc_op op, int nin, const int *in, const nnc_attrs *a,
                             const nnc_node *like, int rank, const nnc_dim *shape, int *out) {
  nnc_graph *g = c->g;
  if (g->ntensors >= c->cap)
    return nnc_errorf(c->err, NNC_E_INTERNAL, like->loc, "layout: more new tensors than planned (%d)", c->cap);
  int id;
  nnc_srcloc loc = like->loc;
  const char *label = like->label;
  nnc_status st = nnc_graph_add_node(g, op, nin, in, a, 1, loc, label, &id, c->err);
  if (st) return st;
  *out = g->nodes[id].out[0];
  if (shape) {
    g->tensors[*out].rank = rank;
    memcpy(g->tensors[*out].shape, shape, (size_t)rank * sizeof *shape);
  }
  st = nnc_infer_node(g, id, c->err);
  if (!st) st = nnc_graph_move_node(g, id, at, c->err);
  return st;
}

/* Phase 3 for elementwise node *id whose result is wanted transposed: the
 * op on the operands' sources before it, the node itself now the transpose
 * of that. *id moves on to the node's new index. */
static nnc_status move_op(layout_ctx *c, int *id) {
  nnc_graph *g = c->g;
  nnc_node n = g->nodes[*id];
  int t = n.out[0], rank = g->tensors[t].rank, p[NNC_MAX_RANK] = {0}, in[NNC_MAX_IO];
  /* phases 1 and 2 said it moves, and phase 3 has made its operands' sources */
  if (!common_perm(c, &n, true, p))
    return nnc_errorf(c->err, NNC_E_INTERNAL, n.loc, "layout: %s no longer moves", nnc_op_info_of(n.op)->name);
  nnc_status st = NNC_OK;
  for (int i = 0; !st && i < n.nin; i++) {
    int x = n.in[i];
    nnc_dim shape[NNC_MAX_RANK];
    if (c->src[x] >= 0 && g->tensors[x].rank == rank) in[i] = c->src[x];
    else if (g->tensors[x].rank == 0) in[i] = x;
    else if (cheap_operand(&g->tensors[x], rank, p, shape))
      st = add_before(c, (*id)++, NNC_OP_RESHAPE, 1, &x, NULL, &n, rank, shape, &in[i]);
    else
      st = nnc_errorf(c->err, NNC_E_INTERNAL, n.loc, "layout: operand %d of %s is neither moved nor a view", i + 1,
                      nnc_op_info_of(n.op)->name);
  }
  int inner;
  if (!st) st = add_before(c, (*id)++, n.op, n.nin, in, &n.attrs, &n, 0, NULL, &inner);
  nnc_attrs a;
  memset(&a, 0, sizeof a);
  memcpy(a.perm, p, sizeof p);
  if (!st) st = nnc_graph_rewrite_node(g, *id, NNC_OP_TRANSPOSE, 1, &inner, &a, 0, c->err);
  if (!st) st = nnc_infer_node(g, *id, c->err);
  c->src[t] = inner;
  memcpy(c->perm[t], p, sizeof p);
  return st;
}

/* Phase 3 for transpose node id: composed with its input's transpose; gone
 * when the two cancel (its readers read the source). */
static nnc_status compose_transpose(layout_ctx *c, int id, int *cancelled) {
  nnc_graph *g = c->g;
  nnc_node *n = &g->nodes[id];
  int x = n->in[0], t = n->out[0], rank = g->tensors[t].rank, p[NNC_MAX_RANK];
  if (c->src[x] < 0) {
    c->src[t] = x;
    memcpy(c->perm[t], n->attrs.perm, sizeof p);
    return NNC_OK;
  }
  compose(c->perm[x], n->attrs.perm, rank, p);
  int s = c->src[x];
  if (is_identity(p, rank)) {
    /* an output must stay a computed value: an input returned through two
     * transposes keeps them */
    if (nnc_graph_is_output(g, t) && g->tensors[s].kind != NNC_TENSOR_VALUE) return NNC_OK;
    c->repl[t] = s;
    n->dead = true;
    ++*cancelled;
    return NNC_OK;
  }
  n->in[0] = s;
  memcpy(n->attrs.perm, p, sizeof p);
  c->src[t] = s;
  memcpy(c->perm[t], p, sizeof p);
  return nnc_infer_node(g, id, c->err);
}

/* Phase 3, forward: the rewrites, then each transpose left that moves
 * nothing becomes a reshape. */
static nnc_status rewrite(layout_ctx *c, int *cancelled) {
  nnc_graph *g = c->g;
  nnc_status st = NNC_OK;
  for (int id = 0; !st && id < g->nnodes; id++) {
    nnc_node *n = &g->nodes[id];
    if (n->dead) continue;
    for (int i = 0; i < n->nin; i++) n->in[i] = c->repl[n->in[i]];
    if (n->op == NNC_OP_TRANSPOSE && is_layout_perm(n->attrs.perm, g->tensors[n->out[0]].rank))
      st = compose_transpose(c, id, cancelled);
    else if (movable(n) && c->lay[n->out[0]] && c->want[n->out[0]]) st = move_op(c, &id);
  }
  for (int i = 0; i < g->noutputs; i++) g->outputs[i].tensor = c->repl[g->outputs[i].tensor];
  for (int id = 0; !st && id < g->nnodes; id++) {
    nnc_node *n = &g->nodes[id];
    if (n->dead || n->op != NNC_OP_TRANSPOSE || !is_layout_perm(n->attrs.perm, g->tensors[n->out[0]].rank)) continue;
    const nnc_tensor *x = &g->tensors[n->in[0]];
    if (!moves_nothing(x->rank, x->shape, n->attrs.perm)) continue;
    int in = n->in[0];
    st = nnc_graph_rewrite_node(g, id, NNC_OP_RESHAPE, 1, &in, NULL, 0, c->err);
    if (!st) st = nnc_infer_node(g, id, c->err);
  }
  return st;
}

nnc_status nnc_pass_layout(nnc_graph *g, bool weights_at_load, int *cancelled, nnc_error *err) {
  *cancelled = 0;
  /* each node that moves adds its op and at most a reshape per operand */
  layout_ctx c = {.g = g, .cap = g->ntensors + g->nnodes * (NNC_MAX_IO + 1) + 1, .err = err};
  c.perm = calloc((size_t)c.cap, sizeof *c.perm);
  c.src = malloc((size_t)c.cap * sizeof *c.src);
  c.lay = calloc((size_t)c.cap, sizeof *c.lay);
  c.want = calloc((size_t)c.cap, sizeof *c.want);
  c.repl = malloc((size_t)c.cap * sizeof *c.repl);
  nnc_status st = NNC_OK;
  if (!c.perm || !c.src || !c.lay || !c.want || !c.repl) {
    st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "layout: out of memory");
  } else {
    for (int t = 0; t < c.cap; t++) c.src[t] = -1, c.repl[t] = t;
    find_transposes(&c);
    find_wanted(&c);
    st = rewrite(&c, cancelled);
  }
  int permuted = 0;
  if (!st && weights_at_load) st = nnc_pass_layout_flatten(g, &permuted, err);
  free(c.perm);
  free(c.src);
  free(c.lay);
  free(c.want);
  free(c.repl);
  return st;
}
