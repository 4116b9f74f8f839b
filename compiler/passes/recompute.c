/* compiler/passes/recompute.c — activation recomputation (--recompute,
 * gradient checkpointing) as a rewrite of the joint forward + backward graph.
 *
 * The forward is every node the loss (or another non-gradient output)
 * depends on; the backward is the rest. A forward tensor the backward reads
 * is a saved activation, alive from its forward producer to its last
 * backward reader. For each chosen producer of a saved activation, the pass
 * adds a copy of the node (marked `recompute`) reading the same inputs, or
 * their copies when those are chosen too, and points the backward's reads at
 * the copy. The copy goes into the node order just before its first reader,
 * so the original dies after its last forward use, the kernel order runs the
 * copy just before the backward needs it, and memory planning sees the
 * shorter lifetimes with nothing special. CSE keeps copies apart; fusion
 * never groups a copy with a node that is not one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct rc_state {
  nnc_graph *g;
  int n0;            /* nodes before the copies */
  bool *fwd;         /* per node (< n0): the forward */
  bool *chosen;      /* per node (< n0): recomputed when the backward reads it */
  int *copy;         /* per node (< n0): its copy, or -1 */
  nnc_error *err;
} rc_state;

nnc_status nnc_recompute_parse(const char *name, nnc_recompute *out, nnc_error *err) {
  static const char *const names[] = {"none", "gelu", "norm", "block"};
  for (int i = 0; i < 4; i++)
    if (!name || strcmp(name, names[i]) == 0) {
      *out = name ? (nnc_recompute)i : NNC_RECOMPUTE_NONE;
      return NNC_OK;
    }
  return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--recompute: expected none, gelu, norm or block, found \"%s\"",
                    name);
}

const char *nnc_recompute_name(nnc_recompute r) {
  static const char *const names[] = {"none", "gelu", "norm", "block"};
  return (unsigned)r < 4 ? names[r] : "?";
}

/* The forward: the nodes the non-gradient outputs depend on. */
static nnc_status mark_forward(rc_state *s) {
  const nnc_graph *g = s->g;
  bool *need = calloc((size_t)g->ntensors + 1, sizeof *need);
  if (!need) return nnc_errorf(s->err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while recomputing");
  for (int i = 0; i < g->noutputs; i++)
    if (strncmp(g->outputs[i].name, "grad.", 5) != 0) need[g->outputs[i].tensor] = true;
  for (int n = s->n0 - 1; n >= 0; n--) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead) continue;
    for (int i = 0; i < x->nout && !s->fwd[n]; i++) s->fwd[n] = need[x->out[i]];
    if (s->fwd[n])
      for (int i = 0; i < x->nin; i++) need[x->in[i]] = true;
  }
  free(need);
  return NNC_OK;
}

/* A residual add: two values of the output's shape (the stream between
 * blocks, which `block` keeps). */
static bool is_residual(const nnc_graph *g, const nnc_node *n) {
  if (n->op != NNC_OP_ADD) return false;
  const nnc_tensor *o = &g->tensors[n->out[0]];
  for (int i = 0; i < 2; i++) {
    const nnc_tensor *t = &g->tensors[n->in[i]];
    if (t->kind != NNC_TENSOR_VALUE || t->rank != o->rank) return false;
    for (int d = 0; d < t->rank; d++)
      if (!nnc_dim_eq(t->shape[d], o->shape[d])) return false;
  }
  return true;
}

/* gelu: the activations; norm: those and the norms; block: every forward
 * node with a residual add after it but the adds themselves (the head and
 * loss after the last block keep theirs: the backward reads them at once). */
static nnc_status choose(rc_state *s, nnc_recompute mode) {
  const nnc_graph *g = s->g;
  bool *before = NULL;
  if (mode == NNC_RECOMPUTE_BLOCK) {
    /* per tensor: a residual add of the forward reads it, directly or not */
    before = calloc((size_t)g->ntensors + 1, sizeof *before);
    if (!before) return nnc_errorf(s->err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while choosing what to recompute");
    for (int n = s->n0 - 1; n >= 0; n--) {
      const nnc_node *x = &g->nodes[n];
      if (x->dead || !s->fwd[n]) continue;
      bool feeds = is_residual(g, x);
      for (int i = 0; i < x->nout && !feeds; i++) feeds = before[x->out[i]];
      if (feeds)
        for (int i = 0; i < x->nin; i++) before[x->in[i]] = true;
    }
  }
  for (int n = 0; n < s->n0; n++) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead || !s->fwd[n]) continue;
    bool act = nnc_op_is_activation(x->op);
    bool norm = x->op == NNC_OP_LAYERNORM || x->op == NNC_OP_RMSNORM;
    if (mode == NNC_RECOMPUTE_GELU) s->chosen[n] = act;
    else if (mode == NNC_RECOMPUTE_NORM) s->chosen[n] = act || norm;
    else if (mode == NNC_RECOMPUTE_BLOCK) s->chosen[n] = before[x->out[0]] && !is_residual(g, x);
  }
  free(before);
  return NNC_OK;
}

/* The copy of node n (made once), reading the copies of its chosen inputs. */
static nnc_status copy_node(rc_state *s, int n, int *out) {
  if (s->copy[n] >= 0) {
    *out = s->copy[n];
    return NNC_OK;
  }
  nnc_graph *g = s->g;
  nnc_node src = g->nodes[n];   /* a copy: the arrays grow below */
  int in[NNC_MAX_IO];
  for (int i = 0; i < src.nin; i++) {
    int p = g->tensors[src.in[i]].producer;
    in[i] = src.in[i];
    if (p < 0 || p >= s->n0 || !s->fwd[p] || !s->chosen[p]) continue;
    int c;
    nnc_status st = copy_node(s, p, &c);
    if (st) return st;
    for (int j = 0; j < g->nodes[p].nout; j++)
      if (g->nodes[p].out[j] == src.in[i]) in[i] = g->nodes[c].out[j];
  }
  char label[300];
  snprintf(label, sizeof label, "recompute.%s", src.label ? src.label : nnc_op_info_of(src.op)->name);
  const char *lab = nnc_graph_intern(g, label);
  if (!lab) return nnc_errorf(s->err, NNC_E_NOMEM, src.loc, "out of memory while recomputing");
  int id;
  nnc_status st = nnc_graph_add_node(g, src.op, src.nin, in, &src.attrs, src.nout, src.loc, lab, &id, s->err);
  if (st) return st;
  /* output shapes some ops take from their output tensor (reshape, split) */
  for (int j = 0; j < src.nout; j++) {
    nnc_tensor *t = &g->tensors[g->nodes[id].out[j]];
    const nnc_tensor *o = &g->tensors[src.out[j]];
    t->dtype = o->dtype;
    t->rank = o->rank;
    memcpy(t->shape, o->shape, sizeof t->shape);
  }
  st = nnc_infer_node(g, id, s->err);
  if (st) return st;
  g->nodes[id].recompute = true;
  s->copy[n] = id;
  *out = id;
  return NNC_OK;
}

/* The backward reads the copies instead of the saved activations. */
static nnc_status redirect(rc_state *s, int *ncopies) {
  nnc_graph *g = s->g;
  for (int b = 0; b < s->n0; b++) {
    if (g->nodes[b].dead || s->fwd[b]) continue;
    for (int i = 0; i < g->nodes[b].nin; i++) {
      int t = g->nodes[b].in[i], p = g->tensors[t].producer;
      if (p < 0 || p >= s->n0 || !s->fwd[p] || !s->chosen[p]) continue;
      int c;
      nnc_status st = copy_node(s, p, &c);
      if (st) return st;
      for (int j = 0; j < g->nodes[p].nout; j++)
        if (g->nodes[p].out[j] == t) g->nodes[b].in[i] = g->nodes[c].out[j];
    }
  }
  *ncopies = g->nnodes - s->n0;
  return NNC_OK;
}

/* Places node n (a copy: after the copies it reads) at the end of order. */
static void place(const nnc_graph *g, int n0, int n, bool *placed, int *order, int *len) {
  if (placed[n]) return;
  if (n >= n0) {
    const nnc_node *x = &g->nodes[n];
    for (int i = 0; i < x->nin; i++) {
      int p = g->tensors[x->in[i]].producer;
      if (p >= n0) place(g, n0, p, placed, order, len);
    }
  }
  placed[n] = true;
  order[(*len)++] = n;
}

/* Every copy goes just before its first reader; the rest keep their order. */
static nnc_status reorder(rc_state *s) {
  nnc_graph *g = s->g;
  int nn = g->nnodes;
  int *order = malloc((size_t)nn * sizeof *order), *where = malloc((size_t)nn * sizeof *where);
  bool *placed = calloc((size_t)nn, sizeof *placed);
  nnc_node *nodes = malloc((size_t)nn * sizeof *nodes);
  if (!order || !where || !placed || !nodes) {
    free(order);
    free(where);
    free(placed);
    free(nodes);
    return nnc_errorf(s->err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while recomputing");
  }
  int len = 0;
  for (int n = 0; n < s->n0; n++) {
    const nnc_node *x = &g->nodes[n];
    for (int i = 0; i < x->nin; i++) {
      int p = g->tensors[x->in[i]].producer;
      if (p >= s->n0) place(g, s->n0, p, placed, order, &len);
    }
    place(g, s->n0, n, placed, order, &len);
  }
  for (int n = s->n0; n < nn; n++) place(g, s->n0, n, placed, order, &len);
  for (int i = 0; i < nn; i++) {
    where[order[i]] = i;
    nodes[i] = g->nodes[order[i]];
  }
  memcpy(g->nodes, nodes, (size_t)nn * sizeof *nodes);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].producer >= 0) g->tensors[t].producer = where[g->tensors[t].producer];
  free(order);
  free(where);
  free(placed);
  free(nodes);
  return NNC_OK;
}

nnc_status nnc_pass_recompute(nnc_graph *g, nnc_recompute mode, int *ncopies, nnc_error *err) {
  *ncopies = 0;
  if (mode == NNC_RECOMPUTE_NONE) return NNC_OK;
  rc_state s = {g, g->nnodes, NULL, NULL, NULL, err};
  size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
  s.fwd = calloc(n, sizeof *s.fwd);
  s.chosen = calloc(n, sizeof *s.chosen);
  s.copy = malloc(n * sizeof *s.copy);
  nnc_status st = NNC_OK;
  if (!s.fwd || !s.chosen || !s.copy) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while recomputing");
  for (int i = 0; !st && i < g->nnodes; i++) s.copy[i] = -1;
  if (!st) st = mark_forward(&s);
  if (!st) st = choose(&s, mode);
  if (!st) st = redirect(&s, ncopies);
  if (!st && *ncopies) st = reorder(&s);
  free(s.fwd);
  free(s.chosen);
  free(s.copy);
  return st;
}
