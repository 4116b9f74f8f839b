/* compiler/passes/fold_append.c — the kv-cache append runs inside the
 * attention that reads the cache.
 *
 * Under generation each layer appends this call's key and value rows to its
 * caches (a kv_append kernel each: a copy) and its attention reads the
 * caches in place (fold_heads.c). On a GPU each copy is a launch of its own,
 * 2-5 us even under CUDA graphs: 24 of GPT-2's ~112 kernels a decode step.
 * On a target whose attention writes the new rows itself
 * (nnc_emitter.attention_append) the kv_append kernel joins its attention
 * kernel: the attention takes keys S - T .. S - 1 from where the kv_append
 * read them (the projection, through the folded head split, or rope's
 * output) and writes them into the cache (nnc_attention_desc.append).
 *
 * The write moves from the kv_append's place in the schedule to the
 * attention's, so nothing else may read the cache, and the kv_append's
 * output (the first S rows) must be read by that attention alone, through
 * its view of the cache. x is a value no kernel writes again, so reading it
 * later is the same. Runs after fold_heads and before memory planning, which
 * then keeps x alive up to the attention. */
#include <stdlib.h>

#include "passes.h"

/* The kv_append kernel whose cache operand i (k or v) of attention kernel
 * ki reads in place and whose append can move into ki; else -1. */
static int append_kernel(const nnc_schedule *s, const nnc_uses *u, int ki, int i) {
  const nnc_graph *g = s->g;
  const nnc_attention_desc *d = &s->k[ki].d.attn;
  const nnc_attn_view *v = &d->view[i];
  if (d->lse >= 0 || !v->on || g->tensors[v->base].kind != NNC_TENSOR_STATE || nnc_uses_count(u, v->base) != 1)
    return -1;
  int n = u->node[u->start[v->base]];
  const nnc_node *nd = &g->nodes[n];
  int ka = s->kernel_of_node[n];
  if (nd->op != NNC_OP_KV_APPEND || nd->in[0] != v->base || ka < 0 || ka >= ki) return -1;
  const nnc_kernel *k = &s->k[ka];
  if (k->kind != NNC_KERNEL_MOVE || k->nodes[k->nnodes - 1] != n) return -1;
  int y = nd->out[0];
  if (nnc_graph_is_output(g, y)) return -1;
  for (int j = u->start[y]; j < u->start[y + 1]; j++)
    if (s->kernel_of_node[u->node[j]] != ki) return -1;
  /* x [B, H, T, D] with the attention's T rows */
  const nnc_tensor *x = &g->tensors[nd->in[1]], *q = &g->tensors[d->q];
  if (x->rank != 4 || !nnc_dim_eq(x->shape[2], q->shape[q->rank - 2])) return -1;
  return ka;
}

/* Where the kv_append of kernel ka reads x: its folded head split's view,
 * else x itself, contiguous. */
static bool source_view(const nnc_schedule *s, int ka, int node, nnc_attn_view *out) {
  if (s->k[ka].d.src.on) {
    *out = s->k[ka].d.src;
    return true;
  }
  int x = s->g->nodes[node].in[1];
  const nnc_dim *sh = s->g->tensors[x].shape;
  nnc_attn_view v = {.on = true, .base = x, .offset = nnc_dim_const(0), .si = sh[3]};
  bool ok = nnc_dim_mul(sh[2], sh[3], &v.sh) && nnc_dim_mul(sh[1], v.sh, &v.sb);
  *out = v;
  return ok;
}

/* Adds t to kernel k's inputs unless listed; false when they are full. */
static bool add_input(nnc_kernel *k, int t) {
  for (int i = 0; i < k->nin; i++)
    if (k->in[i] == t) return true;
  if (k->nin == NNC_MAX_IO) return false;
  k->in[k->nin++] = t;
  return true;
}

/* Moves kernel ka's nodes (the kv_append, after the head split it read
 * through) into attention kernel ki, before its own. */
static nnc_status fold_one(nnc_schedule *s, int ki, int ka, int slot, bool *drop, nnc_error *err) {
  nnc_kernel *a = &s->k[ki], *k = &s->k[ka];
  int node = k->nodes[k->nnodes - 1];
  nnc_attn_view src;
  if (!source_view(s, ka, node, &src)) return NNC_OK;
  nnc_kernel grown = *a;
  for (int i = 0; i < k->nin; i++)
    if (!add_input(&grown, k->in[i])) return NNC_OK;   /* no room: the kv_append stays a kernel */
  int *nodes = malloc((size_t)(a->nnodes + k->nnodes) * sizeof *nodes);
  if (!nodes) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_append: out of memory");
  for (int i = 0; i < k->nnodes; i++) nodes[i] = k->nodes[i];
  for (int i = 0; i < a->nnodes; i++) nodes[k->nnodes + i] = a->nodes[i];
  free(a->nodes);
  grown.nodes = nodes;
  grown.nnodes = a->nnodes + k->nnodes;
  grown.d.attn.append[slot] = (nnc_attn_append){.on = true, .node = node, .src = src};
  *a = grown;
  for (int i = 0; i < k->nnodes; i++) s->kernel_of_node[k->nodes[i]] = ki;
  free(k->nodes);
  k->nodes = NULL;
  k->nnodes = 0;
  drop[ka] = true;
  return NNC_OK;
}

/* Attention kernel ki's k and v appends, each folded into it when only it reads the cache. */
static nnc_status fold_appends(nnc_schedule *s, const nnc_uses *u, int ki, const void *ctx, bool *drop, bool *folded,
                               nnc_error *err) {
  (void)ctx;
  nnc_status st = NNC_OK;
  if (s->k[ki].kind != NNC_KERNEL_ATTENTION) return NNC_OK;
  for (int i = NNC_ATTN_K; i <= NNC_ATTN_V && !st; i++) {
    int ka = append_kernel(s, u, ki, i);
    if (ka >= 0 && !drop[ka]) st = fold_one(s, ki, ka, i - NNC_ATTN_K, drop, err);
    *folded |= ka >= 0 && drop[ka];
  }
  return st;
}

nnc_status nnc_pass_fold_append(nnc_schedule *s, nnc_error *err) {
  return nnc_schedule_fold(s, "fold_append", fold_appends, NULL, err);
}
