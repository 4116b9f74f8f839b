/* compiler/passes/fold_rope.c — rope runs inside the attention that reads
 * its rows.
 *
 * LLaMA's decode step turns this call's query rows and new key rows by
 * their positions (rope) before attending: two kernels a layer that read
 * the projection and write rows the attention reads once, a launch each on
 * a GPU (2-5 us even under CUDA graphs). On a target whose attention
 * rotates as it reads (nnc_emitter.attention_rope) a rope kernel whose
 * output only an appending attention reads joins that attention kernel:
 * - q: the attention's q is the rope's output, directly or through view
 *   kernels of reshapes (grouped-query attention's [B, KVH, G, T, D]);
 *   those views join too, and the attention reads q where the rope read x;
 * - k: its folded kv append (fold_append.c) takes its new rows from the
 *   rope's output; the append now takes them where the rope read x.
 * nnc_attention_desc.rope says which rope and where its x is.
 *
 * Paths of the attention other than its decode kernels turn q's rows in
 * place where the rope read them (there is no workspace in the attention's
 * call; templates/cuda/attention_rope.cuh), so q's rope folds only where no
 * other node reads those values: x's tensor is an intermediate, not a
 * graph output, read only by the rope kernel, or through a split of which
 * the rope kernel alone reads its piece (the q|k|v projection's q columns).
 * The new key rows are only read (the cache gets the rotated rows), so k's
 * rope needs no such guarantee. Both ropes share one set of arguments in
 * the attention: positions, base and rotated width must match where both
 * fold. Runs after fold_append, before memory planning. */
#include <stdlib.h>

#include "passes.h"

/* A rope kernel that can fold: its kernel, its node and where it reads x. */
typedef struct rope_src {
  int kr, node;
  nnc_attn_view src;
} rope_src;

/* Whether tensor y is the output of a rope kernel (before kernel ki) that
 * an attention can run: a move kernel ending in a forward rope over the
 * time axis of x [B, H, T, D], y no graph output. */
static bool rope_of(const nnc_schedule *s, int y, int ki, rope_src *out) {
  const nnc_graph *g = s->g;
  int p = g->tensors[y].producer;
  if (p < 0 || g->nodes[p].op != NNC_OP_ROPE || nnc_graph_is_output(g, y)) return false;
  const nnc_node *n = &g->nodes[p];
  int kr = s->kernel_of_node[p];
  if (kr < 0 || kr >= ki) return false;
  const nnc_kernel *k = &s->k[kr];
  if (k->kind != NNC_KERNEL_MOVE || k->nodes[k->nnodes - 1] != p || k->nout != 1 || k->out[0] != y) return false;
  int x = n->in[0];
  const nnc_tensor *xt = &g->tensors[x];
  if (n->attrs.reverse || n->attrs.axis != 2 || xt->rank != 4) return false;
  *out = (rope_src){.kr = kr, .node = p};
  if (k->d.src.on) {
    out->src = k->d.src;
    return true;
  }
  if (k->nnodes != 1) return false;
  /* x itself, contiguous */
  nnc_attn_view v = {.on = true, .base = x, .offset = nnc_dim_const(0), .si = xt->shape[3]};
  out->src = v;
  return nnc_dim_mul(xt->shape[2], xt->shape[3], &out->src.sh) && nnc_dim_mul(xt->shape[1], out->src.sh, &out->src.sb);
}

/* Whether every reader of t is a node of kernel k. */
static bool read_only_in(const nnc_schedule *s, const nnc_uses *u, int t, int k) {
  for (int j = u->start[t]; j < u->start[t + 1]; j++)
    if (s->kernel_of_node[u->node[j]] != k) return false;
  return true;
}

/* Whether the values rope kernel kr reads through its source may be turned
 * in place: an intermediate no other node reads, but for a split's pieces
 * that kr does not read. */
static bool rotatable_in_place(const nnc_schedule *s, const nnc_uses *u, const rope_src *r) {
  const nnc_graph *g = s->g;
  int x = r->src.base;
  if (g->tensors[x].kind != NNC_TENSOR_VALUE || nnc_graph_is_output(g, x)) return false;
  for (int j = u->start[x]; j < u->start[x + 1]; j++) {
    int n = u->node[j];
    if (s->kernel_of_node[n] == r->kr) continue;
    const nnc_node *nd = &g->nodes[n];
    if (nd->op != NNC_OP_SPLIT) return false;
    for (int o = 0; o < nd->nout; o++) {
      int t = nd->out[o];
      bool in_kr = false, elsewhere = nnc_graph_is_output(g, t);
      for (int i = u->start[t]; i < u->start[t + 1]; i++) {
        if (s->kernel_of_node[u->node[i]] == r->kr) in_kr = true;
        else elsewhere = true;
      }
      if (in_kr && elsewhere) return false;
    }
  }
  return true;
}

#define MAX_CHAIN 4

/* q's rope: the attention's q (no view of its own) is the output of rope
 * kernel r, or a reshape of it in view kernels chain[0..n) (the last
 * nearest the attention), each value read by the next alone. */
static bool q_rope(const nnc_schedule *s, const nnc_uses *u, int ki, rope_src *r, int *chain, int *n) {
  const nnc_graph *g = s->g;
  const nnc_attention_desc *d = &s->k[ki].d.attn;
  if (d->view[NNC_ATTN_Q].on || !read_only_in(s, u, d->q, ki)) return false;
  int t = d->q;
  *n = 0;
  for (;;) {
    if (rope_of(s, t, ki, r)) break;
    int p = g->tensors[t].producer;
    if (p < 0 || *n == MAX_CHAIN || g->nodes[p].op != NNC_OP_RESHAPE || nnc_graph_is_output(g, t)) return false;
    int kv = s->kernel_of_node[p];
    if (kv < 0 || kv >= ki || s->k[kv].kind != NNC_KERNEL_VIEW || s->k[kv].nnodes != 1) return false;
    t = g->nodes[p].in[0];
    if (nnc_uses_count(u, t) != 1) return false;
    for (int i = *n; i > 0; i--) chain[i] = chain[i - 1];
    chain[0] = kv;
    (*n)++;
  }
  if (nnc_uses_count(u, t) != 1) return false;
  /* q [B, ..., T, D] with x's batch, T and D (its heads x's, grouped or not) */
  const nnc_tensor *q = &g->tensors[d->q], *x = &g->tensors[t];
  if (q->rank < 4 || !nnc_dim_eq(q->shape[0], x->shape[0]) || !nnc_dim_eq(q->shape[q->rank - 2], x->shape[2]) ||
      !nnc_dim_eq(q->shape[q->rank - 1], x->shape[3]))
    return false;
  return rotatable_in_place(s, u, r);
}

/* k's rope: the new rows of the attention's folded k append are the output
 * of rope kernel r, which that append alone reads. */
static bool k_rope(const nnc_schedule *s, const nnc_uses *u, int ki, rope_src *r) {
  const nnc_graph *g = s->g;
  const nnc_attn_append *ap = &s->k[ki].d.attn.append[0];
  if (!ap->on) return false;
  int x = g->nodes[ap->node].in[1];
  if (ap->src.base != x || nnc_uses_count(u, x) != 1) return false;
  return rope_of(s, x, ki, r);
}

/* Whether the two ropes turn alike: the attention has one set of rope arguments. */
static bool same_turn(const nnc_graph *g, const rope_src *a, const rope_src *b) {
  const nnc_node *x = &g->nodes[a->node], *y = &g->nodes[b->node];
  return x->nin == y->nin && (x->nin < 2 || x->in[1] == y->in[1]) && x->attrs.scalar == y->attrs.scalar &&
         x->attrs.rot_dims == y->attrs.rot_dims;
}

static bool lists(const int *ids, int n, int t) {
  for (int i = 0; i < n; i++)
    if (ids[i] == t) return true;
  return false;
}

/* Adds t to kernel k's inputs unless listed; false when they are full. */
static bool add_input(nnc_kernel *k, int t) {
  if (lists(k->in, k->nin, t)) return true;
  if (k->nin == NNC_MAX_IO) return false;
  k->in[k->nin++] = t;
  return true;
}

/* Removes t from kernel k's inputs (a value now made inside it). */
static void drop_input(nnc_kernel *k, int t) {
  int n = 0;
  for (int i = 0; i < k->nin; i++)
    if (k->in[i] != t) k->in[n++] = k->in[i];
  k->nin = n;
}

/* Moves kernels moved[0..n) (in this order) to the front of attention
 * kernel ki's nodes; drops them. `made` lists the values the attention read
 * that are now made inside it. False (nothing changed) when its inputs
 * would overflow. */
static nnc_status fold(nnc_schedule *s, int ki, const int *moved, int n, const int *made, int nmade, bool *drop,
                       bool *done, nnc_error *err) {
  nnc_kernel *a = &s->k[ki];
  nnc_kernel grown = *a;
  *done = false;
  for (int i = 0; i < nmade; i++) drop_input(&grown, made[i]);
  int total = a->nnodes;
  for (int m = 0; m < n; m++) {
    const nnc_kernel *k = &s->k[moved[m]];
    total += k->nnodes;
    for (int i = 0; i < k->nin; i++) {
      bool inside = false;
      for (int j = 0; j < m && !inside; j++) inside = lists(s->k[moved[j]].out, s->k[moved[j]].nout, k->in[i]);
      if (!inside && !add_input(&grown, k->in[i])) return NNC_OK;
    }
  }
  int *nodes = malloc((size_t)total * sizeof *nodes);
  if (!nodes) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_rope: out of memory");
  int at = 0;
  for (int m = 0; m < n; m++) {
    nnc_kernel *k = &s->k[moved[m]];
    for (int i = 0; i < k->nnodes; i++) {
      nodes[at++] = k->nodes[i];
      s->kernel_of_node[k->nodes[i]] = ki;
    }
    free(k->nodes);
    k->nodes = NULL;
    k->nnodes = 0;
    drop[moved[m]] = true;
  }
  for (int i = 0; i < a->nnodes; i++) nodes[at++] = a->nodes[i];
  free(a->nodes);
  grown.nodes = nodes;
  grown.nnodes = total;
  *a = grown;
  *done = true;
  return NNC_OK;
}

/* The ropes of attention kernel ki that can fold, folded. */
static nnc_status fold_attention(nnc_schedule *s, const nnc_uses *u, int ki, const void *ctx, bool *drop, bool *folded,
                                 nnc_error *err) {
  (void)ctx;
  const nnc_attention_desc *d = &s->k[ki].d.attn;
  if (s->k[ki].kind != NNC_KERNEL_ATTENTION || d->lse >= 0 || !d->append[0].on) return NNC_OK;
  rope_src q, k;
  int chain[MAX_CHAIN], nchain = 0;
  bool fq = q_rope(s, u, ki, &q, chain, &nchain) && !drop[q.kr];
  bool fk = k_rope(s, u, ki, &k) && !drop[k.kr];
  for (int i = 0; fq && i < nchain; i++) fq = !drop[chain[i]];
  if (fq && fk && !same_turn(s->g, &q, &k)) fk = false;
  if (!fq && !fk) return NNC_OK;
  int moved[MAX_CHAIN + 2], n = 0, made[3], nmade = 0;
  if (fq) {
    moved[n++] = q.kr;
    for (int i = 0; i < nchain; i++) moved[n++] = chain[i];
    made[nmade++] = d->q;
  }
  if (fk) {
    moved[n++] = k.kr;
    made[nmade++] = d->append[0].src.base;
  }
  bool done;
  nnc_status st = fold(s, ki, moved, n, made, nmade, drop, &done, err);
  if (st || !done) return st;
  nnc_attention_desc *w = &s->k[ki].d.attn;
  if (fq) w->rope[0] = (nnc_attn_rope){.on = true, .node = q.node, .src = q.src};
  if (fk) {
    w->rope[1] = (nnc_attn_rope){.on = true, .node = k.node, .src = k.src};
    w->append[0].src = k.src;
  }
  *folded = true;
  return NNC_OK;
}

nnc_status nnc_pass_fold_rope(nnc_schedule *s, nnc_error *err) {
  return nnc_schedule_fold(s, "fold_rope", fold_attention, NULL, err);
}
