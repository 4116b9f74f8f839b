/* compiler/ir/schedule.c — the list of kernels and its memory plan. */
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

static const char *kind_names[NNC_KERNEL_KIND_COUNT] = {
  [NNC_KERNEL_ELEMENTWISE] = "elementwise", [NNC_KERNEL_GEMM] = "gemm",
  [NNC_KERNEL_ATTENTION] = "attention",     [NNC_KERNEL_ROW] = "row",
  [NNC_KERNEL_REDUCE] = "reduce",           [NNC_KERNEL_GATHER] = "gather",
  [NNC_KERNEL_MOVE] = "move",               [NNC_KERNEL_VIEW] = "view",
  [NNC_KERNEL_LOSS] = "loss",               [NNC_KERNEL_ATTENTION_GRAD] = "attention_grad",
  [NNC_KERNEL_NORM_GRAD] = "norm_grad",
};

const char *nnc_kernel_kind_name(nnc_kernel_kind k) {
  return k < NNC_KERNEL_KIND_COUNT ? kind_names[k] : "?";
}

int nnc_kernel_input(const nnc_kernel *k, int t) {
  for (int q = 0; q < k->nin; q++)
    if (k->in[q] == t) return q;
  return -1;
}

bool nnc_kernel_looks_up(const nnc_graph *g, const nnc_kernel *k, int t) {
  for (int i = 0; i < k->nnodes; i++)
    if (g->nodes[k->nodes[i]].op == NNC_OP_EMBEDDING && g->nodes[k->nodes[i]].in[0] == t) return true;
  return false;
}

const nnc_node *nnc_kernel_scan(const nnc_graph *g, const nnc_kernel *k, const nnc_node **proj, int64_t *k_dim) {
  if (proj) *proj = NULL;
  if (k->kind != NNC_KERNEL_MOVE || k->nnodes < 1) return NULL;
  const nnc_node *n = &g->nodes[k->nodes[k->nnodes - 1]];
  if (n->op != NNC_OP_LSTM_SCAN && n->op != NNC_OP_GRU_SCAN) return NULL;
  const nnc_node *p = k->nnodes == 2 && g->nodes[k->nodes[0]].op == NNC_OP_LINEAR ? &g->nodes[k->nodes[0]] : NULL;
  if (proj) *proj = p;
  if (k_dim) *k_dim = g->tensors[n->in[1]].shape[1].k + (p ? g->tensors[p->in[1]].shape[1].k : 0);
  return n;
}

void nnc_schedule_init(nnc_schedule *s, const nnc_graph *g) {
  memset(s, 0, sizeof *s);
  s->g = g;
}

void nnc_schedule_free(nnc_schedule *s) {
  for (int i = 0; i < s->nk; i++) free(s->k[i].nodes);
  free(s->k);
  free(s->kernel_of_node);
  free(s->plan.buf);
  memset(s, 0, sizeof *s);
}

nnc_status nnc_schedule_drop(nnc_schedule *s, const bool *drop, nnc_error *err) {
  int *map = malloc((size_t)(s->nk + 1) * sizeof *map);
  if (!map) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while scheduling");
  int n = 0;
  for (int k = 0; k < s->nk; k++) {
    if (drop[k]) {
      free(s->k[k].nodes);
      map[k] = -1;
      continue;
    }
    map[k] = n;
    s->k[n++] = s->k[k];
  }
  s->nk = n;
  for (int i = 0; i < s->g->nnodes; i++)
    if (s->kernel_of_node[i] >= 0) s->kernel_of_node[i] = map[s->kernel_of_node[i]];
  free(map);
  return NNC_OK;
}

nnc_status nnc_schedule_add(nnc_schedule *s, nnc_kernel_kind kind, int nnodes,
                            const int *nodes, int *idx, nnc_error *err) {
  if (s->nk == s->cap_k) {
    int ncap = s->cap_k ? s->cap_k * 2 : 32;
    nnc_kernel *k = realloc(s->k, (size_t)ncap * sizeof *k);
    if (!k) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while scheduling");
    s->k = k;
    s->cap_k = ncap;
  }
  nnc_kernel *k = &s->k[s->nk];
  memset(k, 0, sizeof *k);
  k->kind = kind;
  k->nodes = malloc((size_t)(nnodes ? nnodes : 1) * sizeof *k->nodes);
  if (!k->nodes) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while scheduling");
  memcpy(k->nodes, nodes, (size_t)nnodes * sizeof *nodes);
  k->nnodes = nnodes;
  if (nnodes > 0 && s->g) k->loc = s->g->nodes[nodes[nnodes - 1]].loc;
  *idx = s->nk++;
  return NNC_OK;
}

nnc_status nnc_schedule_fold(nnc_schedule *s, const char *pass, nnc_fold_fn fold, const void *ctx, nnc_error *err) {
  bool *drop = calloc((size_t)s->nk + 1, sizeof *drop);
  if (!drop) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "%s: out of memory", pass);
  nnc_uses u;
  nnc_status st = nnc_uses_build(s->g, &u, err);
  if (st) {
    free(drop);
    return st;
  }
  bool folded = false;
  for (int ki = 0; ki < s->nk && !st; ki++) st = fold(s, &u, ki, ctx, drop, &folded, err);
  nnc_uses_free(&u);
  if (!st && folded) st = nnc_schedule_drop(s, drop, err);
  free(drop);
  return st;
}
