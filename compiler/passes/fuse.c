/* compiler/passes/fuse.c — groups the live nodes into kernels.
 *
 * The patterns (fuse_patterns.c) decide which nodes go together; this file
 * runs them over the graph, moves a GEMM's norm prologue into the chain
 * kernel computing its input where the target wants (norms_into_chains),
 * orders the kernels (each as soon as its inputs are made, in the order of
 * their main nodes) and fills each kernel's inputs, outputs, location and
 * descriptor. */
#include <stdlib.h>
#include <string.h>

#include "fuse_match.h"

typedef struct fuse_state {
  fuse_ctx c;
  int *owner;           /* per node: group index or -1 */
  fuse_group *groups;   /* the matches, in the order they were found */
  int ngroups;
  int *pool;            /* node ids of all groups, back to back (room for twice the nodes: a group that
                           grows after matching takes a new run at the end) */
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

/* The nodes of reduce group gr (ascending) reordered so that the reduction
 * (gr->main) and the nodes that read its result (the epilogue) come last,
 * each part still ascending: a side node that comes after the reduction in
 * the graph's order (the cast of an output that --precision appends at the
 * end) runs with the prologue, which makes its operands, and the kernel's
 * last node writes its main result. Without side nodes the order is
 * already so. */
static nnc_status reduction_last(const nnc_graph *g, fuse_group *gr, nnc_error *err) {
  bool *dep = calloc((size_t)gr->nnodes, sizeof *dep);
  int *tmp = malloc((size_t)gr->nnodes * sizeof *tmp), n = 0;
  if (!dep || !tmp) {
    free(dep);
    free(tmp);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
  }
  for (int i = 0; i < gr->nnodes; i++) {
    const nnc_node *x = &g->nodes[gr->nodes[i]];
    dep[i] = gr->nodes[i] == gr->main;
    for (int j = 0; j < x->nin && !dep[i]; j++) {
      int p = g->tensors[x->in[j]].producer;
      const int *q = p >= 0 ? bsearch(&p, gr->nodes, (size_t)i, sizeof *gr->nodes, cmp_int) : NULL;
      dep[i] = q && dep[q - gr->nodes];
    }
  }
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < gr->nnodes; i++)
      if (dep[i] == (pass == 1)) tmp[n++] = gr->nodes[i];
  memcpy(gr->nodes, tmp, (size_t)n * sizeof *tmp);
  free(dep);
  free(tmp);
  return NNC_OK;
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
      /* a recomputed copy runs where the backward needs it: grouped with an
       * original it would drag the original there, or itself forward */
      bool copies = false, originals = false;
      for (int i = 0; i < gr.nnodes; i++) {
        copies |= g->nodes[gr.nodes[i]].recompute;
        originals |= !g->nodes[gr.nodes[i]].recompute;
      }
      if (copies && originals) continue;
      for (int i = 0; i < gr.nnodes; i++)
        if (st->owner[gr.nodes[i]] >= 0 || g->nodes[gr.nodes[i]].dead) {
          free(scratch);
          return nnc_errorf(err, NNC_E_INTERNAL, g->nodes[n].loc,
                            "fusion pattern %s took node %d, which is not free", nnc_fuse_patterns[p].name,
                            gr.nodes[i]);
        }
      qsort(gr.nodes, (size_t)gr.nnodes, sizeof *gr.nodes, cmp_int);
      nnc_status rc = gr.kind == NNC_KERNEL_REDUCE && gr.nside > 0 ? reduction_last(g, &gr, err) : NNC_OK;
      if (rc) {
        free(scratch);
        return rc;
      }
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

/* The order the kernels run in: a topological order of the groups (only a
 * group's last node writes tensors that other groups read, checked in
 * check_outputs, but for the declared outputs of GEMMs and the side outputs
 * of row and reduce chains, which the patterns give only readers after the
 * group's last node; so a reader's last node comes after its producers' and
 * the groups form no cycle) that takes, among the groups whose inputs are all
 * made, the one whose main node comes first. The last node alone would do,
 * but it runs a weight gradient's GEMM where the widening cast that
 * --precision appends to every gradient output sits, at the end of the
 * graph, keeping each layer's x and dy alive through the whole backward;
 * by its main node (the matmul) it runs as soon as dy is made. */
static nnc_status order_groups(const fuse_state *st, int *order, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  int n = st->ngroups, ne = 0;
  size_t sz = (size_t)(n ? n : 1);
  int *npred = calloc(sz, sizeof *npred), *mark = malloc(sz * sizeof *mark), *start = calloc(sz + 1, sizeof *start);
  int *ready = malloc(sz * sizeof *ready), *succ = NULL;
  nnc_status rc = NNC_OK;
  if (!npred || !mark || !start || !ready) goto oom;
  /* edges producer group -> reader group, each once: counted, then listed */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < n; i++) mark[i] = -1;
    for (int gi = 0; gi < n; gi++) {
      const fuse_group *gr = &st->groups[gi];
      for (int j = 0; j < gr->nnodes; j++) {
        const nnc_node *nd = &g->nodes[gr->nodes[j]];
        for (int q = 0; q < nd->nin; q++) {
          int p = g->tensors[nd->in[q]].producer, pg = p >= 0 ? st->owner[p] : -1;
          if (pg < 0 || pg == gi || mark[pg] == gi) continue;
          mark[pg] = gi;
          if (pass == 0) {
            start[pg + 1]++;
            npred[gi]++;
          } else {
            succ[start[pg]++] = gi;
          }
        }
      }
    }
    if (pass == 0) {
      for (int i = 0; i < n; i++) start[i + 1] += start[i];
      ne = start[n];
      succ = malloc((size_t)(ne ? ne : 1) * sizeof *succ);
      if (!succ) goto oom;
    } else {   /* the fill moved each start to the next group's */
      for (int i = n; i > 0; i--) start[i] = start[i - 1];
      start[0] = 0;
    }
  }
  int nready = 0, done = 0;
  for (int i = 0; i < n; i++)
    if (!npred[i]) ready[nready++] = i;
  while (nready) {
    int best = 0;
    for (int i = 1; i < nready; i++)
      if (st->groups[ready[i]].main < st->groups[ready[best]].main) best = i;
    int gi = ready[best];
    ready[best] = ready[--nready];
    order[done++] = gi;
    for (int e = start[gi]; e < start[gi + 1]; e++)
      if (--npred[succ[e]] == 0) ready[nready++] = succ[e];
  }
  if (done != n)
    rc = nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "fusion: the kernels' dependencies form a cycle (%d of %d ordered)",
                    done, n);
  goto out;
oom:
  rc = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
out:
  free(npred);
  free(mark);
  free(start);
  free(ready);
  free(succ);
  return rc;
}

/* A GEMM's outputs: its product, then the saved aux and the bias gradient
 * when it writes them; the count. */
static int gemm_outputs(const nnc_gemm_desc *d, int *out) {
  int n = 0;
  out[n++] = d->out;
  if (d->aux_kind == NNC_AUX_SAVE) out[n++] = d->aux;
  if (d->bgrad_from != NNC_BGRAD_NONE) out[n++] = d->bgrad;
  return n;
}

/* Every tensor written by a node other than the group's last is read only
 * inside the group and is not a graph output (but a GEMM's outputs and a
 * chain's side outputs). */
static nnc_status check_outputs(const fuse_state *st, const fuse_group *gr, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  int gi = st->owner[gr->nodes[0]];
  int gout[NNC_MAX_IO], ngout = gr->kind == NNC_KERNEL_GEMM ? gemm_outputs(&gr->gemm, gout) : 0;
  for (int i = 0; i < gr->nside && ngout < NNC_MAX_IO; i++) gout[ngout++] = gr->side[i];
  for (int i = 0; i + 1 < gr->nnodes; i++) {
    const nnc_node *n = &g->nodes[gr->nodes[i]];
    for (int j = 0; j < n->nout; j++) {
      int t = n->out[j];
      bool declared = false;
      for (int q = 0; q < ngout; q++) declared |= gout[q] == t;
      if (declared) continue;
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
 * last node's, then the group's side outputs) of kernel k. */
static nnc_status fill_io(const fuse_state *st, const fuse_group *gr, nnc_kernel *k, nnc_error *err) {
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
  if (k->kind == NNC_KERNEL_GEMM) {
    k->nout = gemm_outputs(&k->d.gemm, k->out);
    return NNC_OK;
  }
  const nnc_node *last = &g->nodes[k->nodes[k->nnodes - 1]];
  k->nout = last->nout;
  memcpy(k->out, last->out, (size_t)last->nout * sizeof *last->out);
  if (k->nout + gr->nside > NNC_MAX_IO)
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "fusion: a %s kernel writes more than %d tensors",
                      nnc_kernel_kind_name(k->kind), NNC_MAX_IO);
  for (int i = 0; i < gr->nside; i++) k->out[k->nout++] = gr->side[i];
  return NNC_OK;
}

/* The node of GEMM group gr that is its norm prologue. */
static int prologue_norm(const nnc_graph *g, const fuse_group *gr) {
  for (int i = 0; i < gr->nnodes; i++) {
    const nnc_node *n = &g->nodes[gr->nodes[i]];
    if ((n->op == NNC_OP_LAYERNORM || n->op == NNC_OP_RMSNORM) && n->in[0] == gr->gemm.a)
      return gr->nodes[i];
  }
  return -1;
}

/* A GEMM's layernorm or rmsnorm prologue whose input an elementwise group
 * computes (GPT-2's first ln_1: the embeddings' sum, which the residual
 * reads too) joins that group as its row kernel when the target wants
 * (nnc_compile_opts.gemm_norm_rows: CUDA's GEMMs normalize A in a kernel of
 * their own before the product anyway): the row kernel writes the
 * normalized rows for the GEMM, and the chain's value where others read it
 * (a side output), so the value is not written by one kernel and read back
 * by the next. The GEMM then reads A as it is. */
static nnc_status norms_into_chains(fuse_state *st, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  if (!st->c.gemm_norm_rows) return NNC_OK;
  for (int gi = 0; gi < st->ngroups; gi++) {
    fuse_group *gm = &st->groups[gi];
    if (gm->kind != NNC_KERNEL_GEMM || gm->gemm.prologue == NNC_NORM_NONE) continue;
    int nm = prologue_norm(g, gm), side;
    int p = nm >= 0 ? g->tensors[g->nodes[nm].in[0]].producer : -1, ci = p >= 0 ? st->owner[p] : -1;
    if (ci < 0 || ci == gi || !nnc_fuse_norm_joins_chain(&st->c, &st->groups[ci], nm, &side)) continue;
    fuse_group *ch = &st->groups[ci];
    if (st->npool + ch->nnodes + 1 > 2 * g->nnodes)
      return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "fusion: no room to move a norm into its chain");
    /* the chain's nodes and the norm (after them in the graph) in a new run of the pool */
    int *run = st->pool + st->npool;
    memcpy(run, ch->nodes, (size_t)ch->nnodes * sizeof *run);
    run[ch->nnodes] = nm;
    st->npool += ch->nnodes + 1;
    ch->nodes = run;
    ch->nnodes++;
    ch->kind = NNC_KERNEL_ROW;
    ch->main = nm;
    ch->nside = 0;
    if (side >= 0) ch->side[ch->nside++] = side;
    st->owner[nm] = ci;
    int w = 0;
    for (int i = 0; i < gm->nnodes; i++)
      if (gm->nodes[i] != nm) gm->nodes[w++] = gm->nodes[i];
    gm->nnodes = w;
    gm->gemm.a = g->nodes[nm].out[0];
    gm->gemm.prologue = NNC_NORM_NONE;
    gm->gemm.norm_gamma = gm->gemm.norm_beta = -1;
    gm->gemm.norm_eps = 0;
  }
  return NNC_OK;
}

static nnc_status build_schedule(fuse_state *st, nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = st->c.g;
  int *order = malloc((size_t)(st->ngroups ? st->ngroups : 1) * sizeof *order);
  s->kernel_of_node = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *s->kernel_of_node);
  if (!order || !s->kernel_of_node) {
    free(order);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
  }
  for (int n = 0; n < g->nnodes; n++) s->kernel_of_node[n] = -1;
  nnc_status rc = order_groups(st, order, err);
  for (int i = 0; i < st->ngroups && !rc; i++) {
    const fuse_group *gr = &st->groups[order[i]];
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
    rc = fill_io(st, gr, k, err);
  }
  free(order);
  return rc;
}

nnc_status nnc_pass_fuse(const nnc_graph *g, const nnc_compile_opts *o, nnc_schedule *s, nnc_error *err) {
  if (s->g != g || s->nk != 0 || s->kernel_of_node)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC,
                      "fuse: expected an empty schedule initialised for this graph");
  fuse_state st;
  memset(&st, 0, sizeof st);
  st.c.g = g;
  st.c.gemm_aux = !o || !o->no_gemm_aux;
  st.c.gemm_bgrad = !o || !o->no_gemm_bgrad;
  st.c.gemm_act_last = !o || !o->no_gemm_act_last;
  st.c.gemm_windows = o ? o->gemm_windows : 0;
  st.c.gemm_windows_types = o ? o->gemm_windows_types : 0;
  st.c.channel_run = o && o->channel_run > 0 ? o->channel_run : 8;
  st.c.gemm_pool = o && o->gemm_pool;
  st.c.reduce_windows = o && o->reduce_windows;
  st.c.gather_loops = o && o->gather_loops;
  st.c.row_loops = o && o->row_loops;
  st.c.reduce_loops = o && o->reduce_loops;
  st.c.gemm_norm_rows = o && o->gemm_norm_rows;
  st.c.scan_input = o && o->scan_input;
  nnc_status rc = nnc_uses_build(g, &st.c.uses, err);
  if (rc) return rc;
  size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
  st.owner = malloc(n * sizeof *st.owner);
  st.groups = malloc(n * sizeof *st.groups);
  st.pool = malloc(2 * n * sizeof *st.pool);
  if (!st.owner || !st.groups || !st.pool) {
    state_free(&st);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while fusing");
  }
  for (int i = 0; i < g->nnodes; i++) st.owner[i] = -1;
  st.c.owner = st.owner;
  rc = find_groups(&st, err);
  if (!rc) rc = norms_into_chains(&st, err);
  if (!rc) rc = build_schedule(&st, s, err);
  state_free(&st);
  return rc;
}
