/* compiler/passes/fuse.c — groups the live nodes into kernels.
 *
 * The patterns (fuse_patterns.c) decide which nodes go together; this file
 * runs them over the graph, orders the kernels by their last node and fills
 * each kernel's inputs, outputs, location and descriptor. */
#include <stdlib.h>
#include <string.h>

#include "fuse_match.h"

typedef struct fuse_state {
  fuse_ctx c;
  int *owner;           /* per node: group index or -1 */
  fuse_group *groups;   /* the matches, in the order they were found */
  int ngroups;
  int *pool;            /* node ids of all groups, back to back */
  int npool;
} fuse_state;

static void state_free(fuse_state *st) {
  nnc_uses_free(&st->c.uses);
  free(st->owner);
  free(st->groups);
  free(st->pool);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Runs every pattern over every free live node; each node ends in one group. */
static nnc_status find_groups(fuse_state *st, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  int *scratch = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *scratch);
  if (!scratch) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
  for (int p = 0; p < nnc_fuse_npatterns; p++) {
    for (int n = g->nnodes - 1; n >= 0; n--) {
      if (g->nodes[n].dead || st->owner[n] >= 0) continue;
      fuse_group gr;
      memset(&gr, 0, sizeof gr);
      gr.nodes = scratch;
      if (!nnc_fuse_patterns[p].match(&st->c, n, &gr)) continue;
      for (int i = 0; i < gr.nnodes; i++)
        if (st->owner[gr.nodes[i]] >= 0 || g->nodes[gr.nodes[i]].dead) {
          free(scratch);
          return nnc_errorf(err, NNC_E_INTERNAL, g->nodes[n].loc,
                            "fusion pattern %s took node %d, which is not free", nnc_fuse_patterns[p].name,
                            gr.nodes[i]);
        }
      qsort(gr.nodes, (size_t)gr.nnodes, sizeof *gr.nodes, cmp_int);
      memcpy(st->pool + st->npool, gr.nodes, (size_t)gr.nnodes * sizeof *gr.nodes);
      gr.nodes = st->pool + st->npool;
      st->npool += gr.nnodes;
      for (int i = 0; i < gr.nnodes; i++) st->owner[gr.nodes[i]] = st->ngroups;
      st->groups[st->ngroups++] = gr;
    }
  }
  free(scratch);
  for (int n = 0; n < g->nnodes; n++)
    if (!g->nodes[n].dead && st->owner[n] < 0)
      return nnc_errorf(err, NNC_E_INTERNAL, g->nodes[n].loc, "fusion: no pattern takes node %d (%s)", n,
                        nnc_op_info_of(g->nodes[n].op)->name);
  return NNC_OK;
}

/* Kernels run in the order of their last nodes: a valid order because only
 * a kernel's last node writes tensors that other kernels read (checked in
 * check_outputs). Groups never share a node, so the keys are distinct. */
typedef struct group_key { int last, group; } group_key;
static int cmp_key(const void *a, const void *b) {
  int x = ((const group_key *)a)->last, y = ((const group_key *)b)->last;
  return (x > y) - (x < y);
}

/* Every tensor written by a node other than the group's last is read only
 * inside the group and is not a graph output. */
static nnc_status check_outputs(const fuse_state *st, const fuse_group *gr, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  int gi = st->owner[gr->nodes[0]];
  for (int i = 0; i + 1 < gr->nnodes; i++) {
    const nnc_node *n = &g->nodes[gr->nodes[i]];
    for (int j = 0; j < n->nout; j++) {
      int t = n->out[j];
      bool escapes = nnc_graph_is_output(g, t);
      for (int u = st->c.uses.start[t]; u < st->c.uses.start[t + 1] && !escapes; u++)
        escapes = st->owner[st->c.uses.node[u]] != gi;
      if (escapes)
        return nnc_errorf(err, NNC_E_INTERNAL, n->loc,
                          "fusion: %s is read outside its %s kernel but is not the kernel's output",
                          g->tensors[t].name, nnc_kernel_kind_name(gr->kind));
    }
  }
  return NNC_OK;
}

/* Inputs (read from outside, first use first, once each) and outputs (the
 * last node's) of kernel k. */
static nnc_status fill_io(const fuse_state *st, nnc_kernel *k, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  int gi = st->owner[k->nodes[0]];
  k->nin = 0;
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &g->nodes[k->nodes[i]];
    for (int j = 0; j < n->nin; j++) {
      int t = n->in[j], p = g->tensors[t].producer;
      if (p >= 0 && st->owner[p] == gi) continue;
      bool dup = false;
      for (int q = 0; q < k->nin && !dup; q++) dup = k->in[q] == t;
      if (dup) continue;
      if (k->nin == NNC_MAX_IO)
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "fusion: a %s kernel reads more than %d tensors",
                          nnc_kernel_kind_name(k->kind), NNC_MAX_IO);
      k->in[k->nin++] = t;
    }
  }
  const nnc_node *last = &g->nodes[k->nodes[k->nnodes - 1]];
  k->nout = last->nout;
  memcpy(k->out, last->out, (size_t)last->nout * sizeof *last->out);
  return NNC_OK;
}

static nnc_status build_schedule(fuse_state *st, nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  group_key *order = malloc((size_t)(st->ngroups ? st->ngroups : 1) * sizeof *order);
  s->kernel_of_node = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *s->kernel_of_node);
  if (!order || !s->kernel_of_node) {
    free(order);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
  }
  for (int n = 0; n < g->nnodes; n++) s->kernel_of_node[n] = -1;
  for (int i = 0; i < st->ngroups; i++)
    order[i] = (group_key){st->groups[i].nodes[st->groups[i].nnodes - 1], i};
  qsort(order, (size_t)st->ngroups, sizeof *order, cmp_key);
  nnc_status rc = NNC_OK;
  for (int i = 0; i < st->ngroups && !rc; i++) {
    const fuse_group *gr = &st->groups[order[i].group];
    int idx;
    rc = check_outputs(st, gr, err);
    if (!rc) rc = nnc_schedule_add(s, gr->kind, gr->nnodes, gr->nodes, &idx, err);
    if (rc) break;
    nnc_kernel *k = &s->k[idx];
    k->loc = g->nodes[gr->main].loc;
    if (gr->kind == NNC_KERNEL_GEMM) k->d.gemm = gr->gemm;
    if (gr->kind == NNC_KERNEL_ATTENTION) k->d.attn = gr->attn;
    if (gr->kind == NNC_KERNEL_ATTENTION_GRAD) k->d.attn_grad = gr->attn_grad;
    for (int j = 0; j < gr->nnodes; j++) s->kernel_of_node[gr->nodes[j]] = idx;
    rc = fill_io(st, k, err);
  }
  free(order);
  return rc;
}

nnc_status nnc_pass_fuse(const nnc_graph *g, nnc_schedule *s, nnc_error *err) {
  if (s->g != g || s->nk != 0 || s->kernel_of_node)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC,
                      "fuse: expected an empty schedule initialised for this graph");
  fuse_state st;
  memset(&st, 0, sizeof st);
  st.c.g = g;
  nnc_status rc = nnc_uses_build(g, &st.c.uses, err);
  if (rc) return rc;
  size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
  st.owner = malloc(n * sizeof *st.owner);
  st.groups = malloc(n * sizeof *st.groups);
  st.pool = malloc(n * sizeof *st.pool);
  if (!st.owner || !st.groups || !st.pool) {
    state_free(&st);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
  }
  for (int i = 0; i < g->nnodes; i++) st.owner[i] = -1;
  st.c.owner = st.owner;
  rc = find_groups(&st, err);
  if (!rc) rc = build_schedule(&st, s, err);
  state_free(&st);
  return rc;
}
