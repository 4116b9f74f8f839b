/* compiler/passes/infer.c — shape and dtype inference: the dispatcher and the
 * helpers every rule shares. The rules live in infer_<family>.c. */
#include <stdio.h>
#include <string.h>

#include "infer_util.h"

const char *nnc_infer_shape(const nnc_infer_ctx *c, int rank, const nnc_dim *shape, char *buf) {
  return nnc_shape_format(c->g, rank, shape, buf, NNC_DESC_LEN);
}

const char *nnc_infer_dim(const nnc_infer_ctx *c, nnc_dim d, char *buf) {
  return nnc_dim_format(c->g, d, buf, NNC_DESC_LEN);
}

const char *nnc_infer_desc(const nnc_infer_ctx *c, const nnc_tensor *t, char *buf) {
  char shape[NNC_DESC_LEN];
  snprintf(buf, NNC_DESC_LEN, "%.120s %s%s", t->name, nnc_dtype_name(t->dtype),
           nnc_infer_shape(c, t->rank, t->shape, shape));
  return buf;
}

const char *nnc_infer_named_shape(const nnc_infer_ctx *c, const nnc_tensor *t, char *buf) {
  char shape[NNC_DESC_LEN];
  snprintf(buf, NNC_DESC_LEN, "%.120s %s", t->name, nnc_infer_shape(c, t->rank, t->shape, shape));
  return buf;
}

int64_t nnc_infer_dim_max(const nnc_infer_ctx *c, nnc_dim d) {
  int64_t v = d.k;
  for (int i = 0; i < d.nsym; i++)
    if (__builtin_mul_overflow(v, c->g->syms[d.sym[i]].max, &v)) return INT64_MAX;
  return v;
}

nnc_status nnc_infer_fail(const nnc_infer_ctx *c, nnc_status code, const char *fmt, ...) {
  char text[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return nnc_errorf(c->err, code, c->n->loc, "%s: %s", c->op, text);
}

nnc_status nnc_infer_want_float(const nnc_infer_ctx *c, int i, const char *role) {
  const nnc_tensor *t = nnc_in(c, i);
  if (nnc_dtype_is_float(t->dtype)) return NNC_OK;
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected a float %s, found %s %s", role, t->name,
                        nnc_dtype_name(t->dtype));
}

nnc_status nnc_infer_want_rank_min(const nnc_infer_ctx *c, int i, int min, const char *role) {
  const nnc_tensor *t = nnc_in(c, i);
  if (t->rank >= min) return NNC_OK;
  char d[NNC_DESC_LEN];
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected %s of rank >= %d, found %s", role, min,
                        nnc_infer_desc(c, t, d));
}

nnc_status nnc_infer_want_axis(const nnc_infer_ctx *c, int i, int axis) {
  const nnc_tensor *t = nnc_in(c, i);
  if (axis >= 0 && axis < t->rank) return NNC_OK;
  char d[NNC_DESC_LEN];
  if (t->rank == 0)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a tensor with an axis %d, found %s of rank 0",
                          axis + 1, nnc_infer_desc(c, t, d));
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected an axis in 1..%d for %s, found %d", t->rank,
                        nnc_infer_desc(c, t, d), axis + 1);
}

nnc_status nnc_infer_want_same_dtype(const nnc_infer_ctx *c, int i, int j) {
  const nnc_tensor *a = nnc_in(c, i), *b = nnc_in(c, j);
  if (a->dtype == b->dtype) return NNC_OK;
  return nnc_infer_fail(c, NNC_E_SHAPE, "dtypes differ: %s is %s, %s is %s", a->name,
                        nnc_dtype_name(a->dtype), b->name, nnc_dtype_name(b->dtype));
}

void nnc_infer_set(const nnc_infer_ctx *c, int i, nnc_dtype dtype, int rank, const nnc_dim *shape) {
  nnc_tensor *t = nnc_out(c, i);
  nnc_dim copy[NNC_MAX_RANK] = {{0}};
  if (rank > 0) memcpy(copy, shape, (size_t)rank * sizeof *shape);   /* shape may alias t->shape */
  t->dtype = dtype;
  t->rank = rank;
  memcpy(t->shape, copy, sizeof copy);
}

bool nnc_infer_broadcast(int ra, const nnc_dim *a, int rb, const nnc_dim *b,
                         int *rank, nnc_dim *out, int *bad_dim) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {    /* i counts from the right */
    int o = r - 1 - i;
    bool ha = i < ra, hb = i < rb;
    nnc_dim da = ha ? a[ra - 1 - i] : nnc_dim_const(1);
    nnc_dim db = hb ? b[rb - 1 - i] : nnc_dim_const(1);
    if (nnc_dim_eq(da, db) || nnc_dim_eq_const(db, 1)) out[o] = da;
    else if (nnc_dim_eq_const(da, 1)) out[o] = db;
    else {
      *bad_dim = o + 1;
      return false;
    }
  }
  *rank = r;
  return true;
}

/* Arity, ids and ranks that every rule relies on. */
static nnc_status check_node(const nnc_infer_ctx *c) {
  const nnc_node *n = c->n;
  const nnc_op_info *info = nnc_op_info_of(n->op);
  if (n->nin < info->min_in || n->nin > info->max_in) {
    if (info->min_in == info->max_in)
      return nnc_infer_fail(c, NNC_E_MODEL, "expected %d input%s, found %d", info->min_in,
                            info->min_in == 1 ? "" : "s", n->nin);
    return nnc_infer_fail(c, NNC_E_MODEL, "expected %d to %d inputs, found %d", info->min_in,
                          info->max_in, n->nin);
  }
  if (info->nout == 0 && (n->nout < 1 || n->nout > NNC_MAX_IO))
    return nnc_infer_fail(c, NNC_E_MODEL, "expected 1 to %d outputs, found %d", NNC_MAX_IO, n->nout);
  if (info->nout > 0 && n->nout != info->nout)
    return nnc_infer_fail(c, NNC_E_MODEL, "expected %d output%s, found %d", info->nout, info->nout == 1 ? "" : "s",
                          n->nout);
  for (int i = 0; i < n->nin; i++) {
    if (n->in[i] < 0 || n->in[i] >= c->g->ntensors)
      return nnc_infer_fail(c, NNC_E_INTERNAL, "input %d is not a tensor id (%d)", i + 1, n->in[i]);
    if (nnc_in(c, i)->rank < 0 || nnc_in(c, i)->rank > NNC_MAX_RANK)
      return nnc_infer_fail(c, NNC_E_INTERNAL, "input %s has rank %d", nnc_in(c, i)->name,
                            nnc_in(c, i)->rank);
  }
  for (int i = 0; i < n->nout; i++)
    if (n->out[i] < 0 || n->out[i] >= c->g->ntensors)
      return nnc_infer_fail(c, NNC_E_INTERNAL, "output %d is not a tensor id (%d)", i + 1, n->out[i]);
  return NNC_OK;
}

/* Every dim of every output is a valid size. */
static nnc_status check_outputs(const nnc_infer_ctx *c) {
  for (int i = 0; i < c->n->nout; i++) {
    const nnc_tensor *t = nnc_out(c, i);
    for (int d = 0; d < t->rank; d++) {
      bool ok = t->shape[d].k >= 0 && t->shape[d].nsym >= 0 && t->shape[d].nsym <= NNC_DIM_SYMS;
      for (int s = 0; ok && s < t->shape[d].nsym; s++)
        ok = t->shape[d].sym[s] >= 0 && t->shape[d].sym[s] < c->g->nsyms;
      if (!ok) {
        char desc[NNC_DESC_LEN];
        return nnc_infer_fail(c, NNC_E_SHAPE, "expected dims >= 0, found %s (dim %d)",
                              nnc_infer_desc(c, t, desc), d + 1);
      }
    }
  }
  return NNC_OK;
}

static nnc_status dispatch(const nnc_infer_ctx *c) {
  switch (c->n->op) {
  case NNC_OP_RELU: case NNC_OP_GELU: case NNC_OP_SILU: case NNC_OP_SIGMOID: case NNC_OP_TANH:
  case NNC_OP_EXP: case NNC_OP_LOG: case NNC_OP_SQRT: case NNC_OP_NEG: case NNC_OP_CAST:
  case NNC_OP_ADD_S: case NNC_OP_SUB_S: case NNC_OP_RSUB_S: case NNC_OP_MUL_S: case NNC_OP_DIV_S:
  case NNC_OP_RDIV_S: case NNC_OP_POW_S:
    return nnc_infer_unary(c);
  case NNC_OP_ADD: case NNC_OP_SUB: case NNC_OP_MUL: case NNC_OP_DIV: case NNC_OP_EQUAL:
    return nnc_infer_binary(c);
  case NNC_OP_ACT_GRAD:
    if (!nnc_op_is_activation(c->n->attrs.act))
      return nnc_infer_fail(c, NNC_E_INTERNAL, "expected an activation to differentiate, found op %d",
                            (int)c->n->attrs.act);
    return nnc_infer_binary(c);
  case NNC_OP_EXPAND: return nnc_infer_expand(c);
  case NNC_OP_PAD: return nnc_infer_pad(c);
  case NNC_OP_EMBEDDING_GRAD: return nnc_infer_embedding_grad(c);
  case NNC_OP_CROSS_ENTROPY_GRAD: return nnc_infer_cross_entropy_grad(c);
  case NNC_OP_CAUSAL_MASK: case NNC_OP_PADDING_MASK:
    return nnc_infer_mask(c);
  case NNC_OP_LINEAR: return nnc_infer_linear(c);
  case NNC_OP_MATMUL: return nnc_infer_matmul(c);
  case NNC_OP_SOFTMAX: case NNC_OP_LAYERNORM: case NNC_OP_RMSNORM: case NNC_OP_LAYERNORM_GRAD: case NNC_OP_RMSNORM_GRAD:
    return nnc_infer_row(c);
  case NNC_OP_SUM: case NNC_OP_MEAN: case NNC_OP_MAX:
    return nnc_infer_reduce(c);
  case NNC_OP_RESHAPE: return nnc_infer_reshape(c);
  case NNC_OP_TRANSPOSE: return nnc_infer_transpose(c);
  case NNC_OP_SLICE: return nnc_infer_slice(c);
  case NNC_OP_IM2COL: return nnc_infer_im2col(c);
  case NNC_OP_COL2IM: return nnc_infer_col2im(c);
  case NNC_OP_ROPE: return nnc_infer_rope(c);
  case NNC_OP_KV_APPEND: return nnc_infer_kv_append(c);
  case NNC_OP_ALL_REDUCE: return nnc_infer_all_reduce(c);
  case NNC_OP_ALL_GATHER: return nnc_infer_all_gather(c);
  case NNC_OP_RANK_SLICE: return nnc_infer_rank_slice(c);
  case NNC_OP_CE_SHARD: case NNC_OP_CE_SHARD_GRAD: return nnc_infer_ce_shard(c);
  case NNC_OP_LSTM_SCAN: case NNC_OP_GRU_SCAN: return nnc_infer_recurrent(c);
  case NNC_OP_LSTM_SCAN_GRAD: case NNC_OP_GRU_SCAN_GRAD: return nnc_infer_recurrent_grad(c);
  case NNC_OP_CONCAT: return nnc_infer_concat(c);
  case NNC_OP_SPLIT: return nnc_infer_split(c);
  case NNC_OP_EMBEDDING: return nnc_infer_embedding(c);
  case NNC_OP_CROSS_ENTROPY: return nnc_infer_cross_entropy(c);
  case NNC_OP_ATTENTION: return nnc_infer_attention(c);
  case NNC_OP_ATTENTION_GRAD: return nnc_infer_attention_grad(c);
  case NNC_OP_NONE: case NNC_OP_COUNT: break;
  }
  return nnc_infer_fail(c, NNC_E_INTERNAL, "no shape rule for op %d", (int)c->n->op);
}

nnc_status nnc_infer_node(nnc_graph *g, int node, nnc_error *err) {
  if (node < 0 || node >= g->nnodes)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "infer: node %d is not a node id (the graph has %d)",
                      node, g->nnodes);
  const nnc_node *n = &g->nodes[node];
  if (n->op <= NNC_OP_NONE || n->op >= NNC_OP_COUNT)
    return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "infer: node %d has no op (%d)", node, (int)n->op);
  /* im2col is written by conv2d, the pools, ...: its messages name that op (its label) */
  const char *name = n->op == NNC_OP_IM2COL && n->label ? n->label : nnc_op_info_of(n->op)->name;
  nnc_infer_ctx c = {g, n, name, err};
  nnc_status st = check_node(&c);
  if (!st) st = dispatch(&c);
  if (!st) st = check_outputs(&c);
  return st;
}
