/* compiler/passes/fold_heads.c — attention reads its heads where they are.
 *
 * A transformer splits heads by copying: the projection [B, T, H*D] (or one
 * third of a fused qkv [B, T, 3*H*D], cut by a split) is reshaped to
 * [B, T, H, D] and transposed to [B, H, T, D] before attention, and the
 * result is transposed and reshaped back after it. Attention kernels take
 * strides, so these copies fold into the kernel: its operand views
 * (nnc_attn_view in schedule.h) say where each head's rows are, and the
 * transpose, reshape and split kernels leave the schedule when nothing else
 * reads what they wrote. Runs after fusion and before memory planning, so
 * the plan sees the projection alive until the attention reads it. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct fold_ctx {
  nnc_schedule *s;
  nnc_uses u;
  bool *drop;          /* per kernel: leaves the schedule */
} fold_ctx;

static const nnc_graph *graph(const fold_ctx *c) { return c->s->g; }

/* The kernel that writes t, when it is a kernel of one node; else -1. */
static int single_producer(const fold_ctx *c, int t, nnc_kernel_kind kind, nnc_op op) {
  int p = graph(c)->tensors[t].producer;
  if (p < 0) return -1;
  int k = c->s->kernel_of_node[p];
  if (k < 0 || c->drop[k] || c->s->k[k].kind != kind || c->s->k[k].nnodes != 1) return -1;
  return graph(c)->nodes[p].op == op ? k : -1;
}

/* Whether t is read by exactly one live node and is no graph output. */
static bool read_once(const fold_ctx *c, int t) {
  return nnc_uses_count(&c->u, t) == 1 && !nnc_graph_is_output(graph(c), t);
}

static bool is_head_swap(const nnc_node *n) {
  return n->op == NNC_OP_TRANSPOSE && n->attrs.perm[0] == 0 && n->attrs.perm[1] == 2 && n->attrs.perm[2] == 1 &&
         n->attrs.perm[3] == 3;
}

static nnc_dim mul(nnc_dim a, nnc_dim b, bool *ok) {
  nnc_dim r;
  if (!nnc_dim_mul(a, b, &r)) *ok = false;
  return r;
}

/* q, k or v: x = transpose(reshape(src, [B,T,H,D]), {0,2,1,3}) with src
 * [B, T, H*D] either a split's piece of [B, T, W] along its last axis or a
 * tensor of its own. Fills the view and the kernels it makes unnecessary. */
static bool input_view(const fold_ctx *c, int x, nnc_attn_view *v, int *kt, int *kr, int *ksplit, int *piece) {
  const nnc_graph *g = graph(c);
  *kt = *kr = *ksplit = *piece = -1;
  if (g->tensors[x].rank != 4 || !read_once(c, x)) return false;
  *kt = single_producer(c, x, NNC_KERNEL_MOVE, NNC_OP_TRANSPOSE);
  if (*kt < 0) return false;
  const nnc_node *tr = &g->nodes[g->tensors[x].producer];
  int r4 = tr->in[0];
  if (!is_head_swap(tr) || !read_once(c, r4)) return false;
  *kr = single_producer(c, r4, NNC_KERNEL_VIEW, NNC_OP_RESHAPE);
  if (*kr < 0) return false;
  int src = g->nodes[g->tensors[r4].producer].in[0];
  const nnc_tensor *t4 = &g->tensors[r4], *ts = &g->tensors[src];
  if (ts->rank != 3 || !nnc_dim_eq(ts->shape[0], t4->shape[0]) || !nnc_dim_eq(ts->shape[1], t4->shape[1]))
    return false;
  bool ok = true;
  nnc_dim row = ts->shape[2], offset = nnc_dim_const(0);
  v->on = true;
  v->base = src;
  int ks = single_producer(c, src, NNC_KERNEL_MOVE, NNC_OP_SPLIT);
  if (ks >= 0 && read_once(c, src)) {
    const nnc_node *sp = &g->nodes[g->tensors[src].producer];
    const nnc_tensor *w = &g->tensors[sp->in[0]];
    if (sp->attrs.axis == 2 && w->rank == 3) {
      for (int i = 0; i < sp->nout && sp->out[i] != src; i++) {
        if (!nnc_dim_is_const(g->tensors[sp->out[i]].shape[2])) ok = false;
        offset = nnc_dim_const(offset.k + g->tensors[sp->out[i]].shape[2].k);
      }
      if (ok) {
        v->base = sp->in[0];
        row = w->shape[2];
        *ksplit = ks;
        *piece = src;
      } else {
        ok = true;
        offset = nnc_dim_const(0);
      }
    }
  }
  v->offset = offset;
  v->sb = mul(t4->shape[1], row, &ok);   /* T * row */
  v->sh = t4->shape[3];                  /* D */
  v->si = row;
  return ok;
}

/* out: y = reshape(transpose(out, {0,2,1,3}), [B, T, H*Dv]). */
static bool output_view(const fold_ctx *c, int out, nnc_attn_view *v, int *kt, int *kr, int *dst) {
  const nnc_graph *g = graph(c);
  *kt = *kr = -1;
  if (g->tensors[out].rank != 4 || !read_once(c, out)) return false;
  int n = c->u.node[c->u.start[out]];
  const nnc_node *tr = &g->nodes[n];
  *kt = c->s->kernel_of_node[n];
  if (!is_head_swap(tr) || c->s->k[*kt].kind != NNC_KERNEL_MOVE || c->s->k[*kt].nnodes != 1) return false;
  int m4 = tr->out[0];
  if (!read_once(c, m4)) return false;
  int n2 = c->u.node[c->u.start[m4]];
  *kr = c->s->kernel_of_node[n2];
  if (g->nodes[n2].op != NNC_OP_RESHAPE || c->s->k[*kr].kind != NNC_KERNEL_VIEW || c->s->k[*kr].nnodes != 1)
    return false;
  int y = g->nodes[n2].out[0];
  const nnc_tensor *ty = &g->tensors[y], *t4 = &g->tensors[m4];
  if (ty->rank != 3 || !nnc_dim_eq(ty->shape[0], t4->shape[0]) || !nnc_dim_eq(ty->shape[1], t4->shape[1]))
    return false;
  bool ok = true;
  v->on = true;
  v->base = y;
  v->offset = nnc_dim_const(0);
  v->sb = mul(ty->shape[1], ty->shape[2], &ok);
  v->sh = t4->shape[3];
  v->si = ty->shape[2];
  *dst = y;
  return ok;
}

/* Adds the nodes of kernel from to kernel to (before or after its own). */
static nnc_status absorb(nnc_schedule *s, int to, int from, bool before, nnc_error *err) {
  nnc_kernel *a = &s->k[to], *b = &s->k[from];
  int *nodes = malloc((size_t)(a->nnodes + b->nnodes) * sizeof *nodes);
  if (!nodes) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_heads: out of memory");
  const nnc_kernel *first = before ? b : a, *second = before ? a : b;
  memcpy(nodes, first->nodes, (size_t)first->nnodes * sizeof *nodes);
  memcpy(nodes + first->nnodes, second->nodes, (size_t)second->nnodes * sizeof *nodes);
  free(a->nodes);
  a->nodes = nodes;
  a->nnodes += b->nnodes;
  for (int i = 0; i < b->nnodes; i++) s->kernel_of_node[b->nodes[i]] = to;
  return NNC_OK;
}

static void replace_in(nnc_kernel *k, int old, int now) {
  int n = 0;
  bool have = false;
  for (int i = 0; i < k->nin; i++) have |= k->in[i] == now;
  for (int i = 0; i < k->nin; i++) {
    if (k->in[i] == old) {
      if (have) continue;
      have = true;
      k->in[n++] = now;
    } else {
      k->in[n++] = k->in[i];
    }
  }
  k->nin = n;
}

static nnc_status fold_one(fold_ctx *c, int ki, nnc_error *err) {
  nnc_schedule *s = c->s;
  nnc_attention_desc *d = &s->k[ki].d.attn;
  const int ops[3] = {d->q, d->k, d->v};
  nnc_attn_view v[4];
  int kt[4], kr[4], ks[3], piece[3], dst = -1;
  for (int i = 0; i < 3; i++)
    if (!input_view(c, ops[i], &v[i], &kt[i], &kr[i], &ks[i], &piece[i])) return NNC_OK;
  /* q, k and v from three different projections or pieces */
  if (kt[0] == kt[1] || kt[1] == kt[2] || kt[0] == kt[2]) return NNC_OK;
  if (!output_view(c, d->out, &v[3], &kt[3], &kr[3], &dst)) return NNC_OK;
  nnc_status st = NNC_OK;
  for (int i = 0; i < 3 && !st; i++) {
    st = absorb(s, ki, kt[i], true, err);
    if (!st) st = absorb(s, ki, kr[i], true, err);
    c->drop[kt[i]] = c->drop[kr[i]] = true;
    replace_in(&s->k[ki], ops[i], v[i].base);
  }
  /* a split whose every piece is now read by attention leaves too; one
   * with other readers stays, and attention reads the split's input */
  for (int i = 0; i < 3 && !st; i++) {
    if (ks[i] < 0 || c->drop[ks[i]]) continue;
    const nnc_node *sp = &s->g->nodes[s->k[ks[i]].nodes[0]];
    bool all = true;
    for (int j = 0; j < sp->nout; j++)
      all &= sp->out[j] == piece[0] || sp->out[j] == piece[1] || sp->out[j] == piece[2];
    if (!all) continue;
    st = absorb(s, ki, ks[i], true, err);
    c->drop[ks[i]] = true;
  }
  if (!st) st = absorb(s, ki, kt[3], false, err);
  if (!st) st = absorb(s, ki, kr[3], false, err);
  if (st) return st;
  c->drop[kt[3]] = c->drop[kr[3]] = true;
  nnc_kernel *k = &s->k[ki];
  for (int j = 0; j < k->nout; j++)
    if (k->out[j] == d->out) k->out[j] = dst;
  for (int i = 0; i < 4; i++) d->view[i] = v[i];
  return NNC_OK;
}

nnc_status nnc_pass_fold_heads(nnc_schedule *s, nnc_error *err) {
  fold_ctx c = {.s = s};
  nnc_status st = nnc_uses_build(s->g, &c.u, err);
  if (st) return st;
  c.drop = calloc((size_t)s->nk + 1, sizeof *c.drop);
  if (!c.drop) {
    nnc_uses_free(&c.u);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_heads: out of memory");
  }
  for (int k = 0; k < s->nk && !st; k++)
    if (s->k[k].kind == NNC_KERNEL_ATTENTION) st = fold_one(&c, k, err);
  /* the schedule without the dropped kernels, in the same order */
  int n = 0;
  int *map = malloc((size_t)(s->nk + 1) * sizeof *map);
  if (!st && !map) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_heads: out of memory");
  for (int k = 0; !st && k < s->nk; k++) {
    if (c.drop[k]) {
      free(s->k[k].nodes);
      map[k] = -1;
      continue;
    }
    map[k] = n;
    s->k[n++] = s->k[k];
  }
  if (!st) {
    s->nk = n;
    for (int i = 0; i < s->g->nnodes; i++)
      if (s->kernel_of_node[i] >= 0) s->kernel_of_node[i] = map[s->kernel_of_node[i]];
  }
  free(map);
  free(c.drop);
  nnc_uses_free(&c.u);
  return st;
}
