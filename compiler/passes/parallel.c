/* compiler/passes/parallel.c — the tensor-parallel plan (--parallel=tp:N).
 *
 * Megatron's split, found on the checked graph rather than written per
 * model: every tensor gets a placement, whole on every rank (replicated),
 * split along one axis, or a partial sum. A linear layer reading a
 * replicated x splits its weight by output columns when everything its
 * output reaches can work on the slice (heads, gates, activations) up to
 * linear layers that take the slice as their input: those split their
 * weight by input rows, each rank computes a partial sum, and an all_reduce
 * makes it whole again (their bias added once, after it). What cannot take
 * a slice (a norm over the split axis, a graph output) keeps its layers
 * whole. The vocabulary (embedding tables and the LM head) splits by rows
 * on its own terms (parallel_vocab.c), its head's logits gathered.
 *
 * Along a split axis seen as groups x N x chunk, rank r holds [:, r, :]:
 * a fused q|k|v projection's output (split in 3 pieces) has groups 3, so
 * each rank holds its heads of each of q, k and v. Parameters keep this in
 * nnc_tensor.shard and their shapes become the slice's; the weights file
 * still holds the whole tensor, which each rank slices when it loads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_internal.h"

enum { REPL, SPLIT, PARTIAL };

typedef struct place {
  int kind;
  int axis, groups;   /* SPLIT */
  int origin;         /* SPLIT: the linear node whose column split made it */
} place;

typedef struct plan_ctx {
  nnc_graph *g;
  nnc_uses uses;
  int n;              /* ranks */
  place *pl;          /* per tensor of the graph as it came (ntensors) */
  int ntensors;
} plan_ctx;

static const place repl = {REPL, 0, 1, -1};

static bool same(place a, place b) { return a.kind == b.kind && (a.kind != SPLIT || (a.axis == b.axis && a.groups == b.groups)); }

static bool const_dim(const nnc_tensor *t, int axis, int64_t *v) {
  if (axis < 0 || axis >= t->rank || !nnc_dim_is_const(t->shape[axis])) return false;
  *v = t->shape[axis].k;
  return true;
}

/* A weight this plan may slice: a parameter no other node reads (a tied
 * embedding is left to the vocabulary split). */
static bool own_param(const plan_ctx *c, int t) {
  return c->g->tensors[t].kind == NNC_TENSOR_PARAM && nnc_uses_count(&c->uses, t) == 1;
}

/* The groups of a column-split linear's output: k when its one reader
 * splits it in k equal pieces along the last axis. */
static int groups_of(const plan_ctx *c, int t) {
  const nnc_tensor *x = &c->g->tensors[t];
  if (nnc_uses_count(&c->uses, t) != 1) return 1;
  const nnc_node *u = &c->g->nodes[c->uses.node[c->uses.start[t]]];
  if (u->op != NNC_OP_SPLIT || u->attrs.axis != x->rank - 1) return 1;
  for (int i = 1; i < u->nout; i++)
    if (!nnc_dim_eq(c->g->tensors[u->out[i]].shape[x->rank - 1], c->g->tensors[u->out[0]].shape[x->rank - 1])) return 1;
  return u->nout;
}

/* Linear node n's weight axes: its output (column) and input (row) axes. */
static void weight_axes(const nnc_node *n, int *col, int *row) {
  *col = n->attrs.weight_in_out ? 1 : 0;
  *row = 1 - *col;
}

/* Whether dims a[0..na) and b[0..nb) have equal products. */
static bool prefix_eq(const nnc_tensor *a, int na, const nnc_tensor *b, int nb) {
  nnc_dim pa = nnc_dim_const(1), pb = nnc_dim_const(1);
  for (int i = 0; i < na; i++)
    if (!nnc_dim_mul(pa, a->shape[i], &pa)) return false;
  for (int i = 0; i < nb; i++)
    if (!nnc_dim_mul(pb, b->shape[i], &pb)) return false;
  return nnc_dim_eq(pa, pb);
}

/* The split axis of a reshape's output, or -1 when the slice is not one. */
static int reshape_axis(const plan_ctx *c, const nnc_tensor *in, const nnc_tensor *out, place p) {
  int64_t din, dout;
  if (!const_dim(in, p.axis, &din)) return -1;
  for (int b = 0; b < out->rank; b++) {
    if (!const_dim(out, b, &dout) || !prefix_eq(in, p.axis, out, b)) continue;
    if (dout % ((int64_t)p.groups * c->n) != 0) return -1;
    if (din % dout == 0 || dout % din == 0) return b;
    return -1;
  }
  return -1;
}

/* x's placement as seen from an output of rank `rank` (broadcasting from
 * the right): false when x is replicated but not broadcast along the split
 * axis of the other operand. */
static bool binary_fits(const nnc_tensor *x, place px, int out_rank, place split) {
  if (px.kind == SPLIT) return px.axis + (out_rank - x->rank) == split.axis && px.groups == split.groups;
  if (px.kind != REPL) return false;
  int a = split.axis - (out_rank - x->rank);
  return a < 0 || nnc_dim_eq_const(x->shape[a], 1);
}

/* The rule of every op that can work on slices: the placements of node n's
 * outputs from those of its inputs (pl), or false when n needs whole
 * inputs. *row: n is a linear layer that takes a slice as its input (a
 * row-split weight, a partial output). */
static bool propagate(const plan_ctx *c, const nnc_node *n, const place *pl, place *out, bool *row) {
  const nnc_graph *g = c->g;
  *row = false;
  place s = repl;
  int nsplit = 0, first = 0;
  for (int i = 0; i < n->nin; i++)
    if (pl[n->in[i]].kind != REPL) {
      if (pl[n->in[i]].kind == PARTIAL) return false;
      if (!nsplit++) {
        s = pl[n->in[i]];
        first = n->in[i];
      }
    }
  for (int i = 0; i < n->nout; i++) out[i] = repl;
  if (!nsplit) return true;
  const nnc_tensor *x = &g->tensors[n->in[0]], *y = &g->tensors[n->out[0]];
  const nnc_op_info *info = nnc_op_info_of(n->op);
  switch (info->cls) {
  case NNC_CLASS_UNARY:
    if (n->op == NNC_OP_EXPAND) return false;
    out[0] = s;
    return true;
  case NNC_CLASS_BINARY: case NNC_CLASS_MASK: {
    place o = s;
    o.axis = s.axis + (y->rank - g->tensors[first].rank);
    if (n->op == NNC_OP_CAUSAL_MASK && o.axis >= y->rank - 2) return false;
    for (int i = 0; i < n->nin; i++)
      if (!binary_fits(&g->tensors[n->in[i]], pl[n->in[i]], y->rank, o)) return false;
    out[0] = o;
    return true;
  }
  case NNC_CLASS_ROW:
    if (n->op != NNC_OP_SOFTMAX && n->op != NNC_OP_LAYERNORM && n->op != NNC_OP_RMSNORM) return false;
    if (pl[n->in[0]].kind != SPLIT || nsplit != 1) return false;
    if (s.axis == x->rank - 1 || (n->op == NNC_OP_SOFTMAX && s.axis == n->attrs.axis)) return false;
    out[0] = s;
    return true;
  case NNC_CLASS_MATMUL:
    if (n->op == NNC_OP_LINEAR) {
      /* a slice of the input features: a row-split weight */
      if (pl[n->in[0]].kind != SPLIT || nsplit != 1 || s.axis != x->rank - 1 || s.groups != 1 || !own_param(c, n->in[1]))
        return false;
      *row = true;
      out[0] = repl;   /* whole again after the all_reduce */
      return true;
    }
    /* matmul over split batch axes */
    if (s.axis >= x->rank - 2) return false;
    for (int i = 0; i < 2; i++)
      if (!binary_fits(&g->tensors[n->in[i]], pl[n->in[i]], y->rank, s) ||
          (pl[n->in[i]].kind == SPLIT && s.axis >= g->tensors[n->in[i]].rank - 2))
        return false;
    out[0] = s;
    return true;
  case NNC_CLASS_ATTENTION:
    if (n->op != NNC_OP_ATTENTION) return false;
    for (int i = 0; i < 3; i++)
      if (!same(pl[n->in[i]], s)) return false;
    if (s.axis >= x->rank - 2 || s.groups != 1 || (n->nin > 3 && pl[n->in[3]].kind != REPL)) return false;
    for (int i = 0; i < n->nout; i++) out[i] = s;
    return true;
  case NNC_CLASS_MOVE:
    if (nsplit != 1 || pl[n->in[0]].kind != SPLIT) return false;
    /* rope turns each head's last axis by its position: heads split where they are */
    if (n->op == NNC_OP_ROPE) {
      if (s.axis >= x->rank - 1) return false;
      out[0] = s;
      return true;
    }
    if (n->op == NNC_OP_TRANSPOSE) {
      for (int i = 0; i < y->rank; i++)
        if (n->attrs.perm[i] == s.axis) out[0] = (place){SPLIT, i, s.groups, s.origin};
      return true;
    }
    if (n->op == NNC_OP_RESHAPE) {
      int b = reshape_axis(c, x, y, s);
      if (b < 0) return false;
      out[0] = (place){SPLIT, b, s.groups, s.origin};
      return true;
    }
    if (n->op == NNC_OP_SPLIT) {
      if (n->attrs.axis != s.axis) {
        for (int i = 0; i < n->nout; i++) out[i] = s;
        return true;
      }
      if (s.groups % n->nout != 0) return false;
      for (int i = 0; i < n->nout; i++) {
        if (!nnc_dim_eq(g->tensors[n->out[i]].shape[s.axis], g->tensors[n->out[0]].shape[s.axis])) return false;
        out[i] = (place){SPLIT, s.axis, s.groups / n->nout, s.origin};
      }
      return true;
    }
    return false;
  default:
    return false;
  }
}

/* Whether linear node n can split its weight by output columns in
 * `groups`: its weight and bias are its own and the columns divide. */
static bool columns_divide(const plan_ctx *c, const nnc_node *n, int groups) {
  int64_t cols;
  int col, row;
  weight_axes(n, &col, &row);
  return own_param(c, n->in[1]) && (n->nin < 3 || own_param(c, n->in[2])) &&
         const_dim(&c->g->tensors[n->in[1]], col, &cols) && cols % ((int64_t)groups * c->n) == 0;
}

/* One pass of the placements over the graph with the candidate column
 * splits `cand`: returns how many candidates it had to drop (a split that
 * reached an op that needs whole inputs, or a graph output). */
static int place_all(plan_ctx *c, bool *cand, const int *groups) {
  nnc_graph *g = c->g;
  int dropped = 0;
  for (int t = 0; t < g->ntensors; t++) c->pl[t] = repl;
  for (int ni = 0; ni < g->nnodes; ni++) {
    const nnc_node *n = &g->nodes[ni];
    if (n->dead) continue;
    place out[NNC_MAX_IO];
    bool row = false, whole_in = true;
    for (int i = 0; i < n->nin; i++) whole_in = whole_in && c->pl[n->in[i]].kind == REPL;
    if (cand[ni] && whole_in) {
      out[0] = (place){SPLIT, g->tensors[n->out[0]].rank - 1, groups[ni], ni};
    } else if (!propagate(c, n, c->pl, out, &row)) {
      for (int i = 0; i < n->nin; i++)
        if (c->pl[n->in[i]].kind == SPLIT && cand[c->pl[n->in[i]].origin]) {
          cand[c->pl[n->in[i]].origin] = false;
          dropped++;
        }
      for (int i = 0; i < n->nout; i++) out[i] = repl;
    }
    for (int i = 0; i < n->nout; i++) c->pl[n->out[i]] = out[i];
  }
  for (int i = 0; i < g->noutputs; i++) {
    place q = c->pl[g->outputs[i].tensor];
    if (q.kind == SPLIT && cand[q.origin]) {
      cand[q.origin] = false;
      dropped++;
    }
  }
  return dropped;
}

void nnc_parallel_reroute(nnc_graph *g, int after, int from, int to) {
  for (int ni = after + 1; ni < g->nnodes; ni++)
    for (int i = 0; i < g->nodes[ni].nin; i++)
      if (g->nodes[ni].in[i] == from) g->nodes[ni].in[i] = to;
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].tensor == from) g->outputs[i].tensor = to;
}

static nnc_status shard_param(plan_ctx *c, int t, int axis, int groups, nnc_error *err) {
  nnc_tensor *p = &c->g->tensors[t];
  int64_t v;
  if (!const_dim(p, axis, &v) || v % ((int64_t)groups * c->n) != 0)
    return nnc_errorf(err, NNC_E_INTERNAL, p->loc, "--parallel: %s cannot be split %d ways along dim %d", p->name,
                      c->n, axis + 1);
  p->shard = (nnc_shard){axis, c->n, groups, 0};
  p->shape[axis] = nnc_dim_const(v / c->n);
  return NNC_OK;
}

/* Row-split linear node ln: its weight by input rows, its bias (if any)
 * added once after the all_reduce that follows it. */
static nnc_status row_split(plan_ctx *c, int *ln, nnc_error *err) {
  nnc_graph *g = c->g;
  int col, row;
  weight_axes(&g->nodes[*ln], &col, &row);
  nnc_status st = shard_param(c, g->nodes[*ln].in[1], row, 1, err);
  if (st) return st;
  int bias = g->nodes[*ln].nin > 2 ? g->nodes[*ln].in[2] : -1;
  g->nodes[*ln].nin = 2;
  int partial = g->nodes[*ln].out[0];
  nnc_srcloc loc = g->nodes[*ln].loc;
  char label[256];
  snprintf(label, sizeof label, "%s.all_reduce", g->nodes[*ln].label);
  nnc_attrs a = {.ranks = c->n, .scalar = 1.0};
  int id, sum;
  st = nnc_graph_add_node(g, NNC_OP_ALL_REDUCE, 1, &partial, &a, 1, loc, label, &id, err);
  if (!st) st = nnc_graph_move_node(g, id, *ln + 1, err);
  if (st) return st;
  sum = g->nodes[*ln + 1].out[0];
  int last = *ln + 1, whole = sum;
  if (bias >= 0) {
    snprintf(label, sizeof label, "%s.bias", g->nodes[*ln].label);
    int in[2] = {sum, bias};
    st = nnc_graph_add_node(g, NNC_OP_ADD, 2, in, NULL, 1, loc, label, &id, err);
    if (!st) st = nnc_graph_move_node(g, id, *ln + 2, err);
    if (st) return st;
    last = *ln + 2;
    whole = g->nodes[last].out[0];
  }
  nnc_parallel_reroute(g, last, partial, whole);
  *ln = last;
  return NNC_OK;
}

nnc_status nnc_pass_parallel(nnc_graph *g, const nnc_parallel *p, nnc_error *err) {
  if (p->tp <= 1) return NNC_OK;
  plan_ctx c = {.g = g, .n = p->tp, .ntensors = g->ntensors};
  nnc_status st = nnc_pass_check(g, err);
  if (!st) st = nnc_uses_build(g, &c.uses, err);
  bool *cand = calloc((size_t)g->nnodes + 1, sizeof *cand);
  int *groups = calloc((size_t)g->nnodes + 1, sizeof *groups);
  int *rows = calloc((size_t)g->nnodes + 1, sizeof *rows);
  c.pl = calloc((size_t)g->ntensors + 1, sizeof *c.pl);
  if (!st && (!cand || !groups || !rows || !c.pl)) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "--parallel: out of memory");
  /* every linear that could split by columns does, then those whose slices
   * reach what needs whole tensors are dropped until none is */
  for (int ni = 0; !st && ni < g->nnodes; ni++) {
    const nnc_node *n = &g->nodes[ni];
    if (n->dead || n->op != NNC_OP_LINEAR) continue;
    groups[ni] = groups_of(&c, n->out[0]);
    cand[ni] = columns_divide(&c, n, groups[ni]);
  }
  for (int round = 0; !st && round <= g->nnodes && place_all(&c, cand, groups); round++) {}
  /* the plan: column splits slice their weights, row splits are listed */
  int nrows = 0;
  for (int ni = 0; !st && ni < g->nnodes; ni++) {
    nnc_node *n = &g->nodes[ni];
    if (n->dead || n->op != NNC_OP_LINEAR) continue;
    int col, row;
    weight_axes(n, &col, &row);
    place x = c.pl[n->in[0]], y = c.pl[n->out[0]];
    if (y.kind == SPLIT && x.kind == REPL) {
      st = shard_param(&c, n->in[1], col, groups[ni], err);
      if (!st && n->nin > 2) st = shard_param(&c, n->in[2], 0, groups[ni], err);
    } else if (x.kind == SPLIT) {
      rows[nrows++] = ni;
    }
  }
  /* every split value's shape becomes its slice's */
  for (int t = 0; !st && t < g->ntensors; t++) {
    nnc_tensor *x = &g->tensors[t];
    if (c.pl[t].kind != SPLIT || x->kind != NNC_TENSOR_VALUE) continue;
    int64_t v;
    if (!const_dim(x, c.pl[t].axis, &v) || v % c.n)
      st = nnc_errorf(err, NNC_E_INTERNAL, x->loc, "--parallel: %s cannot be split %d ways along dim %d", x->name, c.n,
                      c.pl[t].axis + 1);
    else x->shape[c.pl[t].axis] = nnc_dim_const(v / c.n);
  }
  /* the all_reduces, from the last: inserting one moves only the nodes after it */
  for (int i = nrows - 1; !st && i >= 0; i--) {
    int ln = rows[i];
    st = row_split(&c, &ln, err);
  }
  int vocab = 0;
  bool *whole = calloc((size_t)g->ntensors + 1, sizeof *whole);
  if (!st && !whole) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "--parallel: out of memory");
  for (int t = 0; !st && t < g->ntensors; t++) whole[t] = t < c.ntensors && c.pl[t].kind == REPL;
  if (!st) st = nnc_parallel_vocab(g, c.n, whole, &vocab, err);
  free(whole);
  if (!st && !nrows && !vocab) {
    /* at the first linear layer: the one a user would look at to see why */
    int first = -1;
    for (int ni = 0; first < 0 && ni < g->nnodes; ni++)
      if (!g->nodes[ni].dead && g->nodes[ni].op == NNC_OP_LINEAR) first = ni;
    char what[300] = "";
    if (first >= 0) {
      const nnc_node *n = &g->nodes[first];
      int col, row;
      weight_axes(n, &col, &row);
      int64_t cols = 0;
      const_dim(&g->tensors[n->in[1]], col, &cols);
      snprintf(what, sizeof what, " (the first, %s, has %lld output columns)", g->tensors[n->in[1]].name,
               (long long)cols);
    }
    st = nnc_errorf(err, NNC_E_USAGE, first >= 0 ? g->nodes[first].loc : NNC_NOLOC, "--parallel=tp:%d: expected "
                    "linear layers to split (pairs whose first one's output columns, or heads, divide by %d)%s or a "
                    "vocabulary (an embedding table of at least %d rows), found none in %s", c.n, c.n, what, c.n,
                    g->name ? g->name : "the model");
  }
  if (!st) g->ranks = c.n;
  nnc_uses_free(&c.uses);
  free(c.pl);
  free(cand);
  free(groups);
  free(rows);
  if (!st) st = nnc_pass_check(g, err);
  return st;
}

nnc_status nnc_parallel_parse(const char *s, nnc_parallel *out, nnc_error *err) {
  memset(out, 0, sizeof *out);
  out->tp = out->dp = 1;
  if (!s || !*s) return NNC_OK;
  const char *q = s;
  while (*q) {
    if (!strncmp(q, "zero1", 5) && (q[5] == ',' || !q[5])) {
      out->zero1 = true;
      q += q[5] ? 6 : 5;
      continue;
    }
    int *slot = !strncmp(q, "tp:", 3) ? &out->tp : !strncmp(q, "dp:", 3) ? &out->dp : NULL;
    char *end = NULL;
    long v = slot ? strtol(q + 3, &end, 10) : 0;
    if (!slot || end == q + 3 || v < 1 || v > 1024 || (*end && *end != ','))
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=%s: expected tp:N and/or dp:M (N, M from 1 to 1024, "
                        "comma-separated; zero1 after dp:M), found \"%s\"", s, q);
    *slot = (int)v;
    q = *end ? end + 1 : end;
  }
  return NNC_OK;
}

nnc_status nnc_parallel_supported(const nnc_parallel *p, bool train, bool generate, const char *target,
                                  bool collectives, nnc_error *err) {
  if (p->zero1 && p->tp > 1 && p->dp > 1)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=tp:%d,dp:%d,zero1: expected tp:N,dp:M or dp:M,zero1 "
                      "(ZeRO-1 beside tensor parallelism, each rank's slices' optimizer state sharded over its dp "
                      "group, is not built yet)", p->tp, p->dp);
  if (p->zero1 && (p->dp <= 1 || p->tp > 1))
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=...,zero1: expected dp:M with M >= 2 alone "
                      "(ZeRO-1 shards the optimizer state over data-parallel ranks), found tp:%d, dp:%d", p->tp, p->dp);
  if (p->zero1 && !train)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=dp:%d,zero1: expected --train (ZeRO-1 shards the "
                      "optimizer state of a training step)", p->dp);
  if (p->tp <= 1 && p->dp <= 1) return NNC_OK;
  if (p->dp > 1 && !train)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=dp:%d: expected --train (data parallelism sums the "
                      "gradients of a training step; an inference replica per process needs no plan)", p->dp);
  if (p->dp > 1 && !collectives)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--parallel=dp:%d: target %s does not run collectives yet; "
                      "expected target c-simd (its ranks talk over MPI) or a cuda-* target (NCCL)", p->dp, target);
  /* dp:M alone, or beside tp:N (the N * M ranks' tp groups checked below) */
  if (p->tp <= 1) return NNC_OK;
  if ((int64_t)p->tp * p->dp > 1024)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=tp:%d,dp:%d: expected at most 1024 ranks in all, "
                      "found %lld", p->tp, p->dp, (long long)p->tp * p->dp);
  if (generate)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--parallel=tp:%d: expected an inference or --train build; "
                      "--generate with a tensor-parallel plan is not built yet", p->tp);
  if (!collectives)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--parallel=tp:%d: target %s does not run collectives yet; "
                      "expected target c-simd (its ranks talk over MPI) or a cuda-* target (NCCL)", p->tp, target);
  return NNC_OK;
}
