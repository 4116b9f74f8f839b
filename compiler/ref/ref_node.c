/* compiler/ref/ref_node.c — one graph node, dispatched to its op. */
#include "ref_internal.h"

nnc_status nnc_ref_eval_node(nnc_ref *r, int node, nnc_error *err) {
  const nnc_node *n = &r->g->nodes[node];
  const nnc_op_info *info = nnc_op_info_of(n->op);
  if (n->nin < info->min_in || n->nin > info->max_in || n->nout < 1 || n->nout > NNC_MAX_IO ||
      (info->nout > 0 && n->nout != info->nout))
    return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "expected %d to %d inputs and %d output%s (0: several), "
                             "found %d and %d", info->min_in, info->max_in, info->nout, info->nout == 1 ? "" : "s",
                             n->nin, n->nout);
  for (int i = 0; i < n->nout; i++)
    if (n->out[i] < 0 || n->out[i] >= r->g->ntensors)
      return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "output tensor id %d is out of range", n->out[i]);
  switch (info->cls) {
  case NNC_CLASS_UNARY: return nnc_ref_op_unary(r, n, err);
  case NNC_CLASS_BINARY: return nnc_ref_op_binary(r, n, err);
  case NNC_CLASS_MASK: return nnc_ref_op_mask(r, n, err);
  case NNC_CLASS_MATMUL:
    return n->op == NNC_OP_LINEAR ? nnc_ref_op_linear(r, n, err) : nnc_ref_op_matmul(r, n, err);
  case NNC_CLASS_ROW:
    if (n->op == NNC_OP_LAYERNORM_GRAD || n->op == NNC_OP_RMSNORM_GRAD) return nnc_ref_op_norm_grad(r, n, err);
    return n->op == NNC_OP_SOFTMAX ? nnc_ref_op_softmax(r, n, err) : nnc_ref_op_norm(r, n, err);
  case NNC_CLASS_REDUCE: return nnc_ref_op_reduce(r, n, err);
  case NNC_CLASS_MOVE:
    switch (n->op) {
    case NNC_OP_RESHAPE: return nnc_ref_op_reshape(r, n, err);
    case NNC_OP_TRANSPOSE: return nnc_ref_op_transpose(r, n, err);
    case NNC_OP_SLICE: return nnc_ref_op_slice(r, n, err);
    case NNC_OP_CONCAT: return nnc_ref_op_concat(r, n, err);
    case NNC_OP_PAD: return nnc_ref_op_pad(r, n, err);
    case NNC_OP_IM2COL: return nnc_ref_op_im2col(r, n, err);
    case NNC_OP_COL2IM: return nnc_ref_op_col2im(r, n, err);
    case NNC_OP_ROPE: return nnc_ref_op_rope(r, n, err);
    case NNC_OP_KV_APPEND: return nnc_ref_op_kv_append(r, n, err);
    case NNC_OP_LSTM_SCAN: case NNC_OP_GRU_SCAN: return nnc_ref_op_recurrent(r, n, err);
    case NNC_OP_LSTM_SCAN_GRAD: case NNC_OP_GRU_SCAN_GRAD: return nnc_ref_op_recurrent_grad(r, n, err);
    case NNC_OP_RANK_SLICE: return nnc_ref_op_rank_slice(r, n, err);
    case NNC_OP_CE_SHARD: case NNC_OP_CE_SHARD_GRAD: return nnc_ref_op_ce_shard(r, n, err);
    case NNC_OP_ALL_REDUCE: case NNC_OP_ALL_GATHER:
      return nnc_ref_node_fail(r, n, NNC_E_USAGE, err, "expected the ranks of the parallel plan (nnc_ref_run_ranks) "
                               "to evaluate an %s, found one evaluator", nnc_op_info_of(n->op)->name);
    default: return nnc_ref_op_split(r, n, err);
    }
  case NNC_CLASS_GATHER:
    return n->op == NNC_OP_EMBEDDING ? nnc_ref_op_embedding(r, n, err) : nnc_ref_op_embedding_grad(r, n, err);
  case NNC_CLASS_LOSS:
    return n->op == NNC_OP_CROSS_ENTROPY ? nnc_ref_op_cross_entropy(r, n, err)
                                         : nnc_ref_op_cross_entropy_grad(r, n, err);
  case NNC_CLASS_ATTENTION:
    return n->op == NNC_OP_ATTENTION ? nnc_ref_op_attention(r, n, err) : nnc_ref_op_attention_grad(r, n, err);
  case NNC_CLASS_NONE: break;
  }
  return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "the reference has no rule for op %d", (int)n->op);
}
