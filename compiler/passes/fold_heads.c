/* compiler/passes/fold_heads.c — attention reads its heads where they are.
 *
 * A transformer splits heads by copying: the projection [B, T, H*D] (or one
 * third of a fused qkv [B, T, 3*H*D], cut by a split) is reshaped to
 * [B, T, H, D] and transposed to [B, H, T, D] before attention, and the
 * result is transposed and reshaped back after it. Attention kernels take
 * strides, so these copies fold into the kernel: its operand views
 * (nnc_attn_view in schedule.h) say where each head's rows are, and the
 * transpose, reshape and split kernels leave the schedule when nothing else
 * reads what they wrote. In a training step the backward reads the same q,
 * k, v and out: the forward and its attention_grad fold together or not at
 * all, and the backward's own copies fold as well (dout is the merge's
 * gradient, a transpose of [B, T, H*D]; dq, dk and dv go back through
 * transposes into the concat that is the split's gradient). Runs after
 * fusion and before memory planning, so the plan sees the projection alive
 * until the last attention kernel reads it. Under generation k and v are
 * the first S rows of kv caches (kv_append's outputs): attention reads the
 * caches in place, with their capacity as the head stride, and the
 * kv_append kernels only write the new rows, which they read from the
 * projection through the same kind of view (the head split folds into
 * them too), as rope does (LLaMA's q and k). Grouped-query attention's
 * rank-5 operands fold through the reshapes around them (fold_grouped). */
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

/* Whether t is no graph output and is read by one node outside kernel kb
 * (-1: none) and otherwise only by nodes of kb; returns that node or -1. */
static int reader_besides(const fold_ctx *c, int t, int kb) {
  if (nnc_graph_is_output(graph(c), t)) return -1;
  int found = -1;
  for (int i = c->u.start[t]; i < c->u.start[t + 1]; i++) {
    int n = c->u.node[i];
    if (kb >= 0 && c->s->kernel_of_node[n] == kb) continue;
    if (found >= 0) return -1;
    found = n;
  }
  return found;
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

/* q, k, v or dout: x = transpose(reshape(src, [B,T,H,D]), {0,2,1,3}) with
 * src [B, T, H*D] either a split's piece of [B, T, W] along its last axis or
 * a tensor of its own; x read by one attention node and otherwise only by
 * kernel kb (the backward, or -1). Fills the view and the kernels it makes
 * unnecessary. */
static bool input_view(const fold_ctx *c, int x, int kb, nnc_attn_view *v, int *kt, int *kr, int *ksplit,
                       int *piece) {
  const nnc_graph *g = graph(c);
  *kt = *kr = *ksplit = *piece = -1;
  if (g->tensors[x].rank != 4 || reader_besides(c, x, kb) < 0) return false;
  int p = g->tensors[x].producer;
  if (kb < 0 && p >= 0 && g->nodes[p].op == NNC_OP_KV_APPEND && c->s->kernel_of_node[p] >= 0) {
    const nnc_tensor *cache = &g->tensors[g->nodes[g->tensors[x].producer].in[0]];
    bool ok = true;
    *v = (nnc_attn_view){.on = true, .base = g->nodes[g->tensors[x].producer].in[0], .offset = nnc_dim_const(0),
                         .si = cache->shape[3]};
    v->sh = mul(cache->shape[2], cache->shape[3], &ok);
    v->sb = mul(cache->shape[1], v->sh, &ok);
    return ok;
  }
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

/* out, dq, dk or dv: y = reshape(transpose(out, {0,2,1,3}), [B, T, H*Dv]),
 * out read by that transpose and otherwise only by kernel kb (the
 * backward, or -1). */
static bool output_view(const fold_ctx *c, int out, int kb, nnc_attn_view *v, int *kt, int *kr, int *dst) {
  const nnc_graph *g = graph(c);
  *kt = *kr = -1;
  int n = g->tensors[out].rank == 4 ? reader_besides(c, out, kb) : -1;
  if (n < 0) return false;
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

/* In a list of tensor ids: old becomes now, once (now may be listed already). */
static void replace_id(int *ids, int *n, int old, int now) {
  int m = 0;
  bool have = false;
  for (int i = 0; i < *n; i++) have |= ids[i] == now;
  for (int i = 0; i < *n; i++) {
    if (ids[i] == old) {
      if (have) continue;
      have = true;
      ids[m++] = now;
    } else {
      ids[m++] = ids[i];
    }
  }
  *n = m;
}

/* What one attention and its backward fold: the views, and the kernels
 * that leave the schedule. */
typedef struct fold_plan {
  int kg;                                   /* the attention_grad kernel, or -1 */
  nnc_attn_view v[4];                       /* q, k, v, out */
  int kt[4], kr[4], ks[3], piece[3], dst;   /* their transposes, reshapes, splits */
  nnc_attn_view gv[4];                      /* dout, dq, dk, dv */
  int gkt[4], gkr[4], gdst[3], kcat;        /* theirs; the concat of dq, dk, dv or -1 */
} fold_plan;

/* The backward of the attention whose log-sum-exp is lse, or -1. */
static int grad_of(const fold_ctx *c, int lse) {
  if (lse < 0) return -1;
  for (int k = 0; k < c->s->nk; k++)
    if (!c->drop[k] && c->s->k[k].kind == NNC_KERNEL_ATTENTION_GRAD && c->s->k[k].d.attn_grad.fwd.lse == lse)
      return k;
  return -1;
}

/* dq, dk and dv, each y [B, T, C] after its merge, concatenated along the
 * last axis by a kernel of its own (the split's gradient, [B, T, W]): they
 * are written straight into the concat's output, each at its offset, and
 * the concat leaves. Returns its kernel, or -1 (the views stay on y). */
static int concat_view(const fold_ctx *c, const int y[3], nnc_attn_view gv[4]) {
  const nnc_graph *g = graph(c);
  if (!read_once(c, y[0])) return -1;
  int n = c->u.node[c->u.start[y[0]]], kc = c->s->kernel_of_node[n];
  const nnc_node *cat = &g->nodes[n];
  if (cat->op != NNC_OP_CONCAT || cat->nin != 3 || cat->attrs.axis != 2 || c->s->k[kc].kind != NNC_KERNEL_MOVE ||
      c->s->k[kc].nnodes != 1)
    return -1;
  const nnc_tensor *w = &g->tensors[cat->out[0]];
  nnc_dim off[3];
  bool seen[3] = {false, false, false}, ok = w->rank == 3;
  int64_t at = 0;
  for (int j = 0; j < 3 && ok; j++) {
    int t = cat->in[j], i = t == y[0] ? 0 : t == y[1] ? 1 : t == y[2] ? 2 : -1;
    if (i < 0 || seen[i] || !read_once(c, t) || !nnc_dim_is_const(g->tensors[t].shape[2])) return -1;
    seen[i] = true;
    off[i] = nnc_dim_const(at);
    at += g->tensors[t].shape[2].k;
  }
  nnc_dim sb = ok ? mul(w->shape[1], w->shape[2], &ok) : nnc_dim_const(0);
  if (!ok) return -1;
  for (int i = 0; i < 3; i++) {
    nnc_attn_view *v = &gv[NNC_ATTN_DQ + i];
    v->base = cat->out[0];
    v->offset = off[i];
    v->sb = sb;
    v->si = w->shape[2];
  }
  return kc;
}

/* The backward's own copies: dout read from the merge's gradient, dq, dk
 * and dv written before their transposes back (and the concat). */
static bool grad_views(const fold_ctx *c, fold_plan *p) {
  const nnc_attention_grad_desc *gd = &c->s->k[p->kg].d.attn_grad;
  int ks, piece;
  if (!input_view(c, gd->dout, -1, &p->gv[NNC_ATTN_DOUT], &p->gkt[0], &p->gkr[0], &ks, &piece) || ks >= 0)
    return false;
  const int outs[3] = {gd->dq, gd->dk, gd->dv};
  for (int i = 0; i < 3; i++)
    if (!output_view(c, outs[i], -1, &p->gv[NNC_ATTN_DQ + i], &p->gkt[1 + i], &p->gkr[1 + i], &p->gdst[i]))
      return false;
  if (p->gkt[1] == p->gkt[2] || p->gkt[2] == p->gkt[3] || p->gkt[1] == p->gkt[3]) return false;
  p->kcat = concat_view(c, p->gdst, p->gv);
  return true;
}

static nnc_status fold_grad(fold_ctx *c, const fold_plan *p, nnc_error *err) {
  nnc_schedule *s = c->s;
  int kg = p->kg;
  nnc_status st = absorb(s, kg, p->gkt[0], true, err);
  if (!st) st = absorb(s, kg, p->gkr[0], true, err);
  for (int i = 1; i < 4 && !st; i++) {
    st = absorb(s, kg, p->gkt[i], false, err);
    if (!st) st = absorb(s, kg, p->gkr[i], false, err);
  }
  if (!st && p->kcat >= 0) st = absorb(s, kg, p->kcat, false, err);
  if (st) return st;
  for (int i = 0; i < 4; i++) c->drop[p->gkt[i]] = c->drop[p->gkr[i]] = true;
  if (p->kcat >= 0) c->drop[p->kcat] = true;
  nnc_kernel *k = &s->k[kg];
  nnc_attention_grad_desc *gd = &k->d.attn_grad;
  const int fwd[4] = {gd->fwd.q, gd->fwd.k, gd->fwd.v, gd->fwd.out}, outs[3] = {gd->dq, gd->dk, gd->dv};
  for (int i = 0; i < 4; i++) replace_id(k->in, &k->nin, fwd[i], p->v[i].base);
  replace_id(k->in, &k->nin, gd->dout, p->gv[NNC_ATTN_DOUT].base);
  for (int i = 0; i < 3; i++) replace_id(k->out, &k->nout, outs[i], p->gv[NNC_ATTN_DQ + i].base);
  for (int i = 0; i < 4; i++) {
    gd->fwd.view[i] = p->v[i];
    gd->view[i] = p->gv[i];
  }
  return NNC_OK;
}

static nnc_status fold_one(fold_ctx *c, int ki, bool *folded_piece, nnc_error *err) {
  nnc_schedule *s = c->s;
  nnc_attention_desc *d = &s->k[ki].d.attn;
  const int ops[3] = {d->q, d->k, d->v};
  fold_plan p = {.kg = grad_of(c, d->lse), .dst = -1, .kcat = -1};
  for (int i = 0; i < 3; i++)
    if (!input_view(c, ops[i], p.kg, &p.v[i], &p.kt[i], &p.kr[i], &p.ks[i], &p.piece[i])) return NNC_OK;
  /* q, k and v from three different projections or pieces (a cache has none) */
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (p.kt[i] >= 0 && p.kt[i] == p.kt[j]) return NNC_OK;
  if (!output_view(c, d->out, p.kg, &p.v[3], &p.kt[3], &p.kr[3], &p.dst)) return NNC_OK;
  /* the backward reads q, k, v and out: both fold, or neither */
  if (p.kg >= 0 && !grad_views(c, &p)) return NNC_OK;
  nnc_status st = NNC_OK;
  for (int i = 0; i < 3 && !st; i++) {
    if (p.kt[i] >= 0) {
      st = absorb(s, ki, p.kt[i], true, err);
      if (!st) st = absorb(s, ki, p.kr[i], true, err);
      c->drop[p.kt[i]] = c->drop[p.kr[i]] = true;
    }
    replace_id(s->k[ki].in, &s->k[ki].nin, ops[i], p.v[i].base);
  }
  /* a split whose every piece is now read by attention leaves too; one
   * with other readers stays, and attention reads the split's input */
  for (int i = 0; i < 3 && !st; i++) {
    if (p.ks[i] < 0 || c->drop[p.ks[i]]) continue;
    const nnc_node *sp = &s->g->nodes[s->k[p.ks[i]].nodes[0]];
    bool all = true;
    for (int j = 0; j < sp->nout; j++)
      all &= sp->out[j] == p.piece[0] || sp->out[j] == p.piece[1] || sp->out[j] == p.piece[2];
    if (!all) continue;
    st = absorb(s, ki, p.ks[i], true, err);
    c->drop[p.ks[i]] = true;
  }
  for (int i = 0; i < 3; i++)
    if (p.piece[i] >= 0) folded_piece[p.piece[i]] = true;
  if (!st) st = absorb(s, ki, p.kt[3], false, err);
  if (!st) st = absorb(s, ki, p.kr[3], false, err);
  if (st) return st;
  c->drop[p.kt[3]] = c->drop[p.kr[3]] = true;
  nnc_kernel *k = &s->k[ki];
  replace_id(k->out, &k->nout, d->out, p.dst);
  for (int i = 0; i < 4; i++) d->view[i] = p.v[i];
  return p.kg >= 0 ? fold_grad(c, &p, err) : NNC_OK;
}

/* Grouped-query attention as sdpa writes it (dsl_attn.c): q [B, KV, G, T, D],
 * k and v [B, KV, 1, S, D] and out [B, KV, G, T, Dv], each a reshape (a view
 * kernel) of a rank-4 tensor with the heads in one dim. The kernels index
 * those heads as they are (k and v's as h / G, emit's kv_group), so each
 * operand folds like a rank-4 one through its reshape: k and v from the kv
 * caches in place, q from its projection's head split, out into the merge.
 * Each folds on its own; one that does not is read or written where it is
 * (after rope, q is rope's output). Returns the rank-4 tensor and its
 * reshape's kernel, or -1. */
static int grouped_heads(const fold_ctx *c, int x, bool output, int *kview) {
  const nnc_graph *g = graph(c);
  const nnc_tensor *t5 = &g->tensors[x];
  int y;
  *kview = -1;
  if (output) {
    int n = reader_besides(c, x, -1);
    if (n < 0 || g->nodes[n].op != NNC_OP_RESHAPE) return -1;
    *kview = c->s->kernel_of_node[n];
    y = g->nodes[n].out[0];
  } else {
    *kview = single_producer(c, x, NNC_KERNEL_VIEW, NNC_OP_RESHAPE);
    if (*kview < 0) return -1;
    y = g->nodes[g->tensors[x].producer].in[0];
  }
  const nnc_kernel *kv = &c->s->k[*kview];
  const nnc_tensor *t4 = &g->tensors[y];
  nnc_dim heads;
  if (kv->kind != NNC_KERNEL_VIEW || kv->nnodes != 1 || c->drop[*kview] || t4->rank != 4 || t5->rank != 5 ||
      !nnc_dim_mul(t5->shape[1], t5->shape[2], &heads) || !nnc_dim_eq(heads, t4->shape[1]) ||
      !nnc_dim_eq(t5->shape[0], t4->shape[0]) || !nnc_dim_eq(t5->shape[3], t4->shape[2]) ||
      !nnc_dim_eq(t5->shape[4], t4->shape[3]))
    return -1;
  return y;
}

static nnc_status fold_grouped(fold_ctx *c, int ki, bool *folded_piece, nnc_error *err) {
  nnc_schedule *s = c->s;
  nnc_attention_desc *d = &s->k[ki].d.attn;
  if (d->lse >= 0 || s->g->tensors[d->q].rank != 5) return NNC_OK;
  const int ops[3] = {d->q, d->k, d->v};
  nnc_status st = NNC_OK;
  for (int i = 0; i < 3 && !st; i++) {
    int kview, kt, kr, ks, piece, y = grouped_heads(c, ops[i], false, &kview);
    nnc_attn_view v;
    if (y < 0 || !input_view(c, y, -1, &v, &kt, &kr, &ks, &piece)) continue;
    /* the split, if any, leaves with its last piece (drop_split) */
    st = absorb(s, ki, kview, true, err);
    if (!st && kt >= 0) st = absorb(s, ki, kt, true, err);
    if (!st && kr >= 0) st = absorb(s, ki, kr, true, err);
    if (st) break;
    c->drop[kview] = true;
    if (kt >= 0) c->drop[kt] = c->drop[kr] = true;
    if (piece >= 0) folded_piece[piece] = true;
    replace_id(s->k[ki].in, &s->k[ki].nin, ops[i], v.base);
    s->k[ki].d.attn.view[i] = v;
  }
  int kview, kt, kr, dst, y = st ? -1 : grouped_heads(c, d->out, true, &kview);
  nnc_attn_view v;
  if (y < 0 || !output_view(c, y, -1, &v, &kt, &kr, &dst)) return st;
  st = absorb(s, ki, kview, false, err);
  if (!st) st = absorb(s, ki, kt, false, err);
  if (!st) st = absorb(s, ki, kr, false, err);
  if (st) return st;
  c->drop[kview] = c->drop[kt] = c->drop[kr] = true;
  nnc_kernel *k = &s->k[ki];
  replace_id(k->out, &k->nout, k->d.attn.out, dst);
  k->d.attn.view[NNC_ATTN_OUT] = v;
  return NNC_OK;
}

/* The copy kernels that read a head split through a view (d.src) instead
 * of its copy: a kv_append reading x = transpose(reshape(piece of the qkv
 * projection)), its input 1, and a rope over the time axis (LLaMA's q and
 * k), its input 0. The transpose and reshape leave; a split leaves later,
 * when all its pieces are folded (drop_split). */
static nnc_status fold_move(fold_ctx *c, int ki, bool *folded_piece, nnc_error *err) {
  nnc_schedule *s = c->s;
  nnc_kernel *k = &s->k[ki];
  if (k->nnodes != 1) return NNC_OK;
  const nnc_node *n = &s->g->nodes[k->nodes[0]];
  int xi = n->op == NNC_OP_KV_APPEND ? 1 : n->op == NNC_OP_ROPE && n->attrs.axis == 2 ? 0 : -1;
  nnc_attn_view v;
  int kt, kr, ks, piece;
  if (xi < 0 || !input_view(c, n->in[xi], -1, &v, &kt, &kr, &ks, &piece) || kt < 0) return NNC_OK;
  nnc_status st = absorb(s, ki, kt, true, err);
  if (!st) st = absorb(s, ki, kr, true, err);
  if (st) return st;
  c->drop[kt] = c->drop[kr] = true;
  k = &s->k[ki];
  replace_id(k->in, &k->nin, n->in[xi], v.base);
  k->d.src = v;
  if (piece >= 0) folded_piece[piece] = true;
  return NNC_OK;
}

/* A split whose every piece some kernel reads through a view leaves the
 * schedule (its node goes with the last kernel that read a piece). */
static nnc_status drop_split(fold_ctx *c, int ks, const bool *folded_piece, nnc_error *err) {
  nnc_schedule *s = c->s;
  if (c->drop[ks] || s->k[ks].kind != NNC_KERNEL_MOVE || s->k[ks].nnodes != 1) return NNC_OK;
  const nnc_node *sp = &s->g->nodes[s->k[ks].nodes[0]];
  if (sp->op != NNC_OP_SPLIT) return NNC_OK;
  int last = -1;
  for (int j = 0; j < sp->nout; j++) {
    int t = sp->out[j];
    if (!folded_piece[t] || nnc_graph_is_output(s->g, t)) return NNC_OK;
    for (int i = c->u.start[t]; i < c->u.start[t + 1]; i++) {
      int kn = s->kernel_of_node[c->u.node[i]];
      if (kn > last) last = kn;
    }
  }
  if (last < 0) return NNC_OK;
  nnc_status st = absorb(s, last, ks, true, err);
  if (!st) c->drop[ks] = true;
  return st;
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
  bool *folded_piece = calloc((size_t)s->g->ntensors + 1, sizeof *folded_piece);
  if (!folded_piece) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_heads: out of memory");
  for (int k = 0; k < s->nk && !st; k++)
    if (s->k[k].kind == NNC_KERNEL_MOVE) st = fold_move(&c, k, folded_piece, err);
  for (int k = 0; k < s->nk && !st; k++)
    if (s->k[k].kind == NNC_KERNEL_ATTENTION)
      st = s->g->tensors[s->k[k].d.attn.q].rank == 5 ? fold_grouped(&c, k, folded_piece, err)
                                                    : fold_one(&c, k, folded_piece, err);
  for (int k = 0; k < s->nk && !st; k++) st = drop_split(&c, k, folded_piece, err);
  free(folded_piece);
  if (!st) st = nnc_schedule_drop(s, c.drop, err);
  free(c.drop);
  nnc_uses_free(&c.u);
  return st;
}
