/* compiler/passes/infer_util.h — helpers shared by the shape rules (infer_*.c).
 *
 * Each rule checks one node's inputs and fills its outputs; messages follow
 * "<op>: <expected>, found <what>" and name tensors by name, with their dtype
 * and shape as the user wrote them ("x f32[B,T,768]"). Axes in messages are
 * 1-based, as in the model language. */
#ifndef NNC_INFER_UTIL_H
#define NNC_INFER_UTIL_H

#include "passes.h"

/* Room for a tensor description or a shape in a message. */
#define NNC_DESC_LEN 256

/* The context of one rule: the graph, the node and its op name. */
typedef struct nnc_infer_ctx {
  nnc_graph *g;
  const nnc_node *n;
  const char *op;
  nnc_error *err;
} nnc_infer_ctx;

static inline nnc_tensor *nnc_in(const nnc_infer_ctx *c, int i) { return &c->g->tensors[c->n->in[i]]; }
static inline nnc_tensor *nnc_out(const nnc_infer_ctx *c, int i) { return &c->g->tensors[c->n->out[i]]; }

/* "x f32[B,T,768]" */
const char *nnc_infer_desc(const nnc_infer_ctx *c, const nnc_tensor *t, char *buf);
/* "x [B,T,768]" */
const char *nnc_infer_named_shape(const nnc_infer_ctx *c, const nnc_tensor *t, char *buf);
/* "[B,T,768]" */
const char *nnc_infer_shape(const nnc_infer_ctx *c, int rank, const nnc_dim *shape, char *buf);
/* "3*B" */
const char *nnc_infer_dim(const nnc_infer_ctx *c, nnc_dim d, char *buf);
/* The value of d with every symbol at its maximum. */
int64_t nnc_infer_dim_max(const nnc_infer_ctx *c, nnc_dim d);

/* A shape error at the node's line: "<op>: " + the formatted text. */
nnc_status nnc_infer_fail(const nnc_infer_ctx *c, nnc_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks input i is a float tensor (role names it in the message). */
nnc_status nnc_infer_want_float(const nnc_infer_ctx *c, int i, const char *role);
/* Checks input i has rank >= min (role: "an input", "inputs"). */
nnc_status nnc_infer_want_rank_min(const nnc_infer_ctx *c, int i, int min, const char *role);
/* Checks axis is within 0..rank-1 of input i. */
nnc_status nnc_infer_want_axis(const nnc_infer_ctx *c, int i, int axis);
/* Checks inputs i and j share a dtype. */
nnc_status nnc_infer_want_same_dtype(const nnc_infer_ctx *c, int i, int j);

/* Sets output i to dtype, rank and shape. */
void nnc_infer_set(const nnc_infer_ctx *c, int i, nnc_dtype dtype, int rank, const nnc_dim *shape);

/* Numpy broadcasting of two shapes from the right. On a mismatch returns
 * false with the 1-based output dim in *bad_dim. */
bool nnc_infer_broadcast(int ra, const nnc_dim *a, int rb, const nnc_dim *b,
                         int *rank, nnc_dim *out, int *bad_dim);

/* The rules, one per family of ops. */
nnc_status nnc_infer_unary(const nnc_infer_ctx *c);
nnc_status nnc_infer_binary(const nnc_infer_ctx *c);
nnc_status nnc_infer_mask(const nnc_infer_ctx *c);
nnc_status nnc_infer_linear(const nnc_infer_ctx *c);
nnc_status nnc_infer_matmul(const nnc_infer_ctx *c);
nnc_status nnc_infer_row(const nnc_infer_ctx *c);
nnc_status nnc_infer_reduce(const nnc_infer_ctx *c);
nnc_status nnc_infer_reshape(const nnc_infer_ctx *c);
nnc_status nnc_infer_transpose(const nnc_infer_ctx *c);
nnc_status nnc_infer_slice(const nnc_infer_ctx *c);
nnc_status nnc_infer_im2col(const nnc_infer_ctx *c);
nnc_status nnc_infer_col2im(const nnc_infer_ctx *c);
nnc_status nnc_infer_rope(const nnc_infer_ctx *c);
nnc_status nnc_infer_kv_append(const nnc_infer_ctx *c);
nnc_status nnc_infer_all_reduce(const nnc_infer_ctx *c);
nnc_status nnc_infer_all_gather(const nnc_infer_ctx *c);
nnc_status nnc_infer_rank_slice(const nnc_infer_ctx *c);
nnc_status nnc_infer_ce_shard(const nnc_infer_ctx *c);   /* cross_entropy_shard and its gradient */
nnc_status nnc_infer_recurrent(const nnc_infer_ctx *c);   /* lstm_scan, gru_scan */
nnc_status nnc_infer_recurrent_grad(const nnc_infer_ctx *c);
nnc_status nnc_infer_concat(const nnc_infer_ctx *c);
nnc_status nnc_infer_split(const nnc_infer_ctx *c);
nnc_status nnc_infer_embedding(const nnc_infer_ctx *c);
nnc_status nnc_infer_cross_entropy(const nnc_infer_ctx *c);
nnc_status nnc_infer_attention(const nnc_infer_ctx *c);
nnc_status nnc_infer_attention_grad(const nnc_infer_ctx *c);
nnc_status nnc_infer_expand(const nnc_infer_ctx *c);
nnc_status nnc_infer_pad(const nnc_infer_ctx *c);
nnc_status nnc_infer_embedding_grad(const nnc_infer_ctx *c);
nnc_status nnc_infer_cross_entropy_grad(const nnc_infer_ctx *c);

#endif
