/* compiler/ir/op_table.c — name, class and arity of every op. */
#include "ir.h"

static const nnc_op_info ops[NNC_OP_COUNT] = {
  [NNC_OP_NONE] = {"none", NNC_CLASS_NONE, 0, 0, 0},
  [NNC_OP_RELU] = {"relu", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_GELU] = {"gelu", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_SILU] = {"silu", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_SIGMOID] = {"sigmoid", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_TANH] = {"tanh", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_EXP] = {"exp", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_LOG] = {"log", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_SQRT] = {"sqrt", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_NEG] = {"neg", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_CAST] = {"cast", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_ADD_S] = {"add_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_SUB_S] = {"sub_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_RSUB_S] = {"rsub_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_MUL_S] = {"mul_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_DIV_S] = {"div_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_RDIV_S] = {"rdiv_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_POW_S] = {"pow_scalar", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_ADD] = {"add", NNC_CLASS_BINARY, 2, 2, 1},
  [NNC_OP_SUB] = {"sub", NNC_CLASS_BINARY, 2, 2, 1},
  [NNC_OP_MUL] = {"mul", NNC_CLASS_BINARY, 2, 2, 1},
  [NNC_OP_DIV] = {"div", NNC_CLASS_BINARY, 2, 2, 1},
  [NNC_OP_CAUSAL_MASK] = {"causal_mask", NNC_CLASS_MASK, 1, 1, 1},
  [NNC_OP_PADDING_MASK] = {"padding_mask", NNC_CLASS_MASK, 2, 2, 1},
  [NNC_OP_LINEAR] = {"linear", NNC_CLASS_MATMUL, 2, 3, 1},
  [NNC_OP_MATMUL] = {"matmul", NNC_CLASS_MATMUL, 2, 2, 1},
  [NNC_OP_SOFTMAX] = {"softmax", NNC_CLASS_ROW, 1, 1, 1},
  [NNC_OP_LAYERNORM] = {"layernorm", NNC_CLASS_ROW, 3, 3, 1},
  [NNC_OP_RMSNORM] = {"rmsnorm", NNC_CLASS_ROW, 2, 2, 1},
  [NNC_OP_SUM] = {"sum", NNC_CLASS_REDUCE, 1, 1, 1},
  [NNC_OP_MEAN] = {"mean", NNC_CLASS_REDUCE, 1, 1, 1},
  [NNC_OP_MAX] = {"max", NNC_CLASS_REDUCE, 1, 1, 1},
  [NNC_OP_RESHAPE] = {"reshape", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_TRANSPOSE] = {"transpose", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_SLICE] = {"slice", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_CONCAT] = {"concat", NNC_CLASS_MOVE, 1, NNC_MAX_IO, 1},
  [NNC_OP_SPLIT] = {"split", NNC_CLASS_MOVE, 1, 1, 0},
  [NNC_OP_EMBEDDING] = {"embedding", NNC_CLASS_GATHER, 2, 2, 1},
  [NNC_OP_CROSS_ENTROPY] = {"cross_entropy", NNC_CLASS_LOSS, 2, 2, 1},
  [NNC_OP_ACT_GRAD] = {"act_grad", NNC_CLASS_BINARY, 2, 2, 1},
  [NNC_OP_EQUAL] = {"equal", NNC_CLASS_BINARY, 2, 2, 1},
  [NNC_OP_EXPAND] = {"expand", NNC_CLASS_UNARY, 1, 1, 1},
  [NNC_OP_PAD] = {"pad", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_EMBEDDING_GRAD] = {"embedding_grad", NNC_CLASS_GATHER, 2, 2, 1},
  [NNC_OP_CROSS_ENTROPY_GRAD] = {"cross_entropy_grad", NNC_CLASS_LOSS, 3, 3, 1},
  [NNC_OP_ATTENTION] = {"attention", NNC_CLASS_ATTENTION, 3, 4, 2},
  [NNC_OP_ATTENTION_GRAD] = {"attention_grad", NNC_CLASS_ATTENTION, 6, 7, 3},
  [NNC_OP_LAYERNORM_GRAD] = {"layernorm_grad", NNC_CLASS_ROW, 3, 4, 3},
  [NNC_OP_RMSNORM_GRAD] = {"rmsnorm_grad", NNC_CLASS_ROW, 3, 4, 2},
  [NNC_OP_IM2COL] = {"im2col", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_COL2IM] = {"col2im", NNC_CLASS_MOVE, 1, 1, 1},
  /* the scans run as a loop kernel of their own, the way the moves do (a MOVE kernel) */
  [NNC_OP_LSTM_SCAN] = {"lstm_scan", NNC_CLASS_MOVE, 3, 5, 3},
  [NNC_OP_GRU_SCAN] = {"gru_scan", NNC_CLASS_MOVE, 3, 4, 2},
  [NNC_OP_LSTM_SCAN_GRAD] = {"lstm_scan_grad", NNC_CLASS_MOVE, 9, 9, 5},
  [NNC_OP_GRU_SCAN_GRAD] = {"gru_scan_grad", NNC_CLASS_MOVE, 7, 7, 5},
  [NNC_OP_ROPE] = {"rope", NNC_CLASS_MOVE, 1, 2, 1},
  [NNC_OP_KV_APPEND] = {"kv_cache", NNC_CLASS_MOVE, 2, 2, 1},   /* named as the DSL writes it */
  /* a collective is a kernel of its own, a call to the runtime's communicator */
  [NNC_OP_ALL_REDUCE] = {"all_reduce", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_ALL_GATHER] = {"all_gather", NNC_CLASS_MOVE, 1, 1, 1},
  /* tensor-parallel training's ops that read their rank: each a loop kernel of its own, like the collectives */
  [NNC_OP_RANK_SLICE] = {"rank_slice", NNC_CLASS_MOVE, 1, 1, 1},
  [NNC_OP_CE_SHARD] = {"cross_entropy_shard", NNC_CLASS_MOVE, 3, 3, 1},
  [NNC_OP_CE_SHARD_GRAD] = {"cross_entropy_shard_grad", NNC_CLASS_MOVE, 4, 4, 1},
};

const nnc_op_info *nnc_op_info_of(nnc_op op) {
  return op < NNC_OP_COUNT ? &ops[op] : &ops[NNC_OP_NONE];
}

bool nnc_op_is_elementwise(nnc_op op) {
  nnc_op_class c = nnc_op_info_of(op)->cls;
  return c == NNC_CLASS_UNARY || c == NNC_CLASS_BINARY || c == NNC_CLASS_MASK;
}

bool nnc_op_is_activation(nnc_op op) {
  return op == NNC_OP_RELU || op == NNC_OP_GELU || op == NNC_OP_SILU ||
         op == NNC_OP_SIGMOID || op == NNC_OP_TANH;
}
