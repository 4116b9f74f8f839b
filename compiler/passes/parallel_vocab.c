/* compiler/passes/parallel_vocab.c — the vocabulary split of a tensor-parallel
 * plan (Megatron's VocabParallelEmbedding and its parallel LM head).
 *
 * The vocabulary is the most rows of an embedding table held as a weight
 * (the token embedding; position and type tables are smaller and stay
 * whole). A weight [V, C] whose every reader is an embedding gathering from
 * it or a linear layer whose output columns are its V rows (the head, tied
 * to the embedding or not) is split by rows: V need not divide by the ranks
 * N, so each rank holds R = ceil(V / N) rows, rank r the file's rows
 * [r * R, min((r + 1) * R, V)) and zero rows after them (nnc_shard.whole).
 *
 * An embedding then gathers the ids in its rank's range and zeros for the
 * rest, and an all_reduce sums the ranks' rows: each id is some one rank's.
 * A head computes its rank's R logits, an all_gather stacks the ranks'
 * [..., R] into [N, ..., R] (the communicator's rank-major order), a
 * transpose brings the ranks' axis next to the last and a reshape joins them
 * into [..., N * R]; a slice drops the padded rows' logits when N * R > V.
 * A cross-entropy over those logits is computed on each rank's classes
 * instead (split_loss): the gather is then left for other readers, if any. */
#include <stdio.h>
#include <string.h>

#include "parallel_internal.h"

/* Whether every reader of weight w takes it as a vocabulary of V rows: an
 * embedding's table, or the weight of a linear layer with V output columns
 * whose input and output the plan left whole (whole[t]), its bias, if any,
 * a weight of V of its own. */
static bool vocab_weight(const nnc_graph *g, const nnc_uses *u, const bool *whole, int w, int64_t V) {
  const nnc_tensor *t = &g->tensors[w];
  if (t->rank != 2 || !nnc_dim_eq_const(t->shape[0], V) || !nnc_dim_is_const(t->shape[1]) || t->shard.parts)
    return false;
  if (u->start[w] == u->start[w + 1]) return false;
  for (int i = u->start[w]; i < u->start[w + 1]; i++) {
    const nnc_node *n = &g->nodes[u->node[i]];
    if (n->op == NNC_OP_EMBEDDING && n->in[0] == w && n->in[1] != w) continue;
    if (n->op != NNC_OP_LINEAR || n->in[1] != w || n->in[0] == w || n->attrs.weight_in_out) return false;
    if (!whole[n->in[0]] || !whole[n->out[0]]) return false;
    if (n->nin > 2) {
      const nnc_tensor *b = &g->tensors[n->in[2]];
      if (b->kind != NNC_TENSOR_PARAM || nnc_uses_count(u, n->in[2]) != 1 || b->rank != 1 ||
          !nnc_dim_eq_const(b->shape[0], V) || b->shard.parts)
        return false;
    }
  }
  return true;
}

static void shard_rows(nnc_tensor *t, int n, int64_t V) {
  t->shard = (nnc_shard){0, n, 1, V};
  t->shape[0] = nnc_dim_const((V + n - 1) / n);
}

/* Adds node op reading `in` right after node `after`, labelled
 * "<node base's label>.<what>"; *out its output. */
static nnc_status insert_after(nnc_graph *g, int base, int after, nnc_op op, int in, const nnc_attrs *a,
                               const char *what, int *out, nnc_error *err) {
  char label[256];
  snprintf(label, sizeof label, "%s.%s", g->nodes[base].label ? g->nodes[base].label : nnc_op_info_of(op)->name,
           what);
  int id;
  nnc_status st = nnc_graph_add_node(g, op, 1, &in, a, 1, g->nodes[base].loc, label, &id, err);
  if (!st) st = nnc_graph_move_node(g, id, after + 1, err);
  if (!st) *out = g->nodes[after + 1].out[0];
  return st;
}

/* Adds node op reading in[0..nin) right after node `after` (as insert_after). */
static nnc_status insert_n(nnc_graph *g, int base, int after, nnc_op op, int nin, const int *in, const nnc_attrs *a,
                           const char *what, int *out, nnc_error *err) {
  char label[256];
  snprintf(label, sizeof label, "%s.%s", g->nodes[base].label ? g->nodes[base].label : nnc_op_info_of(op)->name,
           what);
  int id;
  nnc_status st = nnc_graph_add_node(g, op, nin, in, a, 1, g->nodes[base].loc, label, &id, err);
  if (!st) st = nnc_graph_move_node(g, id, after + 1, err);
  if (!st) *out = g->nodes[after + 1].out[0];
  return st;
}

/* Cross-entropy node ce over a split head's logits `part` [..., R] (Megatron's
 * vocab-parallel cross-entropy): instead of the gathered [..., V], each rank
 * reduces its own classes to numbers a row, and all_reduces of [rows] join
 * them:
 *   M = the max over the ranks of each rank's max logit (a shift: the padded
 *       classes' logits, 0, may raise it, which keeps exp() below 1 all the
 *       same),
 *   [S, D] = the sums over the ranks of cross_entropy_shard's pair: exp(logit
 *       - M) over the rank's classes, and the target's logit - M on the rank
 *       that holds it (0 on the others), one all_reduce of [rows, 2],
 *   loss = the mean over the rows of log(S) - D.
 * The backward is then softmax - onehot on each rank's classes
 * (cross_entropy_shard_grad) and nothing through M. */
static nnc_status split_loss(nnc_graph *g, int ce, int part, int n, int64_t V, nnc_error *err) {
  int targets = g->nodes[ce].in[1], loss = g->nodes[ce].out[0], last = ce, lr = g->tensors[part].rank, t, m, st2;
  nnc_attrs mx = {.axis = lr - 1};
  nnc_status st = insert_n(g, ce, last++, NNC_OP_MAX, 1, &part, &mx, "rank_max", &m, err);
  nnc_attrs amax = {.ranks = n, .scalar = 1.0, .reduce_max = true};
  if (!st) st = insert_n(g, ce, last++, NNC_OP_ALL_REDUCE, 1, &m, &amax, "max", &m, err);
  nnc_attrs sh = {.ranks = n, .vocab = V};
  int in[3] = {part, targets, m};
  if (!st) st = insert_n(g, ce, last++, NNC_OP_CE_SHARD, 3, in, &sh, "rank_sums", &st2, err);
  nnc_attrs sum = {.ranks = n, .scalar = 1.0};
  if (!st) st = insert_n(g, ce, last++, NNC_OP_ALL_REDUCE, 1, &st2, &sum, "sums", &st2, err);
  /* [..., 2] -> [rows, 2]: the two columns apart */
  if (!st) st = insert_n(g, ce, last++, NNC_OP_RESHAPE, 1, &st2, NULL, "rows", &st2, err);
  if (st) return st;
  nnc_dim rows = nnc_dim_const(1);
  const nnc_tensor *tt = &g->tensors[targets];
  for (int i = 0; i < tt->rank; i++)
    if (!nnc_dim_mul(rows, tt->shape[i], &rows))
      return nnc_errorf(err, NNC_E_LIMIT, g->nodes[ce].loc, "--parallel: the rows of %s have more than %d symbolic "
                        "factors", tt->name, NNC_DIM_SYMS);
  g->tensors[st2].rank = 2;
  g->tensors[st2].shape[0] = rows;
  g->tensors[st2].shape[1] = nnc_dim_const(2);
  nnc_attrs s0 = {.axis = 1, .start = nnc_dim_const(0), .stop = nnc_dim_const(1)};
  nnc_attrs s1 = {.axis = 1, .start = nnc_dim_const(1), .stop = nnc_dim_const(2)};
  int sexp, dlog;
  st = insert_n(g, ce, last++, NNC_OP_SLICE, 1, &st2, &s0, "sum_exp", &sexp, err);
  if (!st) st = insert_n(g, ce, last++, NNC_OP_SLICE, 1, &st2, &s1, "target_logit", &dlog, err);
  if (!st) st = insert_n(g, ce, last++, NNC_OP_LOG, 1, &sexp, NULL, "log_sum_exp", &sexp, err);
  int d[2] = {sexp, dlog};
  if (!st) st = insert_n(g, ce, last++, NNC_OP_SUB, 2, d, NULL, "row_loss", &t, err);
  if (!st) st = insert_n(g, ce, last++, NNC_OP_RESHAPE, 1, &t, NULL, "row_losses", &t, err);
  if (st) return st;
  g->tensors[t].rank = 1;
  g->tensors[t].shape[0] = rows;
  nnc_attrs mean = {.axis = 0};
  st = insert_n(g, ce, last++, NNC_OP_MEAN, 1, &t, &mean, "mean", &t, err);
  if (st) return st;
  nnc_parallel_reroute(g, last, loss, t);
  g->nodes[ce].dead = true;
  return NNC_OK;
}

/* Embedding node ni over a split table: this rank's rows, then the sum. */
static nnc_status split_embedding(nnc_graph *g, int ni, int n, int64_t V, nnc_error *err) {
  g->nodes[ni].attrs.ranks = n;
  g->nodes[ni].attrs.vocab = V;
  int rows = g->nodes[ni].out[0], sum;
  nnc_attrs a = {.ranks = n, .scalar = 1.0};
  nnc_status st = insert_after(g, ni, ni, NNC_OP_ALL_REDUCE, rows, &a, "all_reduce", &sum, err);
  if (!st) nnc_parallel_reroute(g, ni + 1, rows, sum);
  return st;
}

/* Head node ni over a split weight: its rank's logits [..., R], gathered
 * into [..., V]. */
static nnc_status split_head(nnc_graph *g, int ni, int n, int64_t V, nnc_error *err) {
  int part = g->nodes[ni].out[0], rank = g->tensors[part].rank, t, last = ni;
  int64_t R = (V + n - 1) / n;
  nnc_dim lead[NNC_MAX_RANK];
  memcpy(lead, g->tensors[part].shape, sizeof lead);
  nnc_attrs a = {.ranks = n};
  nnc_status st = insert_after(g, ni, last++, NNC_OP_ALL_GATHER, part, &a, "all_gather", &t, err);
  /* [N, ..., R] -> [..., N, R]: the ranks' axis moves next to the last */
  nnc_attrs tr = {0};
  for (int i = 0; i < rank - 1; i++) tr.perm[i] = i + 1;
  tr.perm[rank - 1] = 0;
  tr.perm[rank] = rank;
  if (!st) st = insert_after(g, ni, last++, NNC_OP_TRANSPOSE, t, &tr, "ranks_inner", &t, err);
  if (!st) st = insert_after(g, ni, last++, NNC_OP_RESHAPE, t, NULL, "joined", &t, err);
  if (st) return st;
  nnc_tensor *joined = &g->tensors[t];
  joined->rank = rank;
  memcpy(joined->shape, lead, sizeof lead);
  joined->shape[rank - 1] = nnc_dim_const(R * n);
  if (R * n != V) {
    nnc_attrs sl = {.axis = rank - 1, .start = nnc_dim_const(0), .stop = nnc_dim_const(V)};
    st = insert_after(g, ni, last++, NNC_OP_SLICE, t, &sl, "vocab", &t, err);
    if (st) return st;
  }
  nnc_parallel_reroute(g, last, part, t);
  /* a loss over the gathered logits: on each rank's classes instead */
  for (int ni2 = g->nnodes - 1; ni2 > last; ni2--) {
    const nnc_node *c = &g->nodes[ni2];
    if (!c->dead && c->op == NNC_OP_CROSS_ENTROPY && c->in[0] == t) {
      st = split_loss(g, ni2, part, n, V, err);
      if (st) return st;
    }
  }
  return NNC_OK;
}

nnc_status nnc_parallel_vocab(nnc_graph *g, int n, const bool *whole, int *splits, nnc_error *err) {
  *splits = 0;
  int64_t V = 0;
  for (int ni = 0; ni < g->nnodes; ni++) {
    const nnc_node *nd = &g->nodes[ni];
    if (nd->dead || nd->op != NNC_OP_EMBEDDING) continue;
    const nnc_tensor *t = &g->tensors[nd->in[0]];
    if (t->kind == NNC_TENSOR_PARAM && t->rank == 2 && nnc_dim_is_const(t->shape[0]) && t->shape[0].k > V)
      V = t->shape[0].k;
  }
  if (V < n) return NNC_OK;
  nnc_uses u;
  nnc_status st = nnc_uses_build(g, &u, err);
  if (st) return st;
  for (int i = 0; i < g->nparams; i++) {
    int w = g->params[i];
    if (!vocab_weight(g, &u, whole, w, V)) continue;
    for (int k = u.start[w]; k < u.start[w + 1]; k++) {
      const nnc_node *nd = &g->nodes[u.node[k]];
      if (nd->op == NNC_OP_LINEAR && nd->nin > 2) shard_rows(&g->tensors[nd->in[2]], n, V);
    }
    shard_rows(&g->tensors[w], n, V);
    (*splits)++;
  }
  nnc_uses_free(&u);
  /* from the last node: inserting after one moves only the nodes after it */
  for (int ni = g->nnodes - 1; !st && ni >= 0; ni--) {
    const nnc_node *nd = &g->nodes[ni];
    if (nd->dead) continue;
    if (nd->op == NNC_OP_EMBEDDING && g->tensors[nd->in[0]].shard.whole)
      st = split_embedding(g, ni, n, V, err);
    else if (nd->op == NNC_OP_LINEAR && g->tensors[nd->in[1]].shard.whole)
      st = split_head(g, ni, n, V, err);
  }
  return st;
}
