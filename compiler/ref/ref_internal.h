/* compiler/ref/ref_internal.h — helpers shared by the reference evaluator's files.
 *
 * Shapes here are concrete (every symbol at r->sym). Each op checks the shapes
 * it reads before touching memory, so a wrong shape from a pass or a test is
 * an error value, never an out-of-bounds read. */
#ifndef NNC_REF_INTERNAL_H
#define NNC_REF_INTERNAL_H

#include "ref.h"

/* Room for a tensor description in a message. */
#define NNC_REF_DESC 192

typedef struct nnc_ref_shape {
  int rank;
  int64_t d[NNC_MAX_RANK];
} nnc_ref_shape;

/* Tensor t's shape at r's sizes. */
nnc_ref_shape nnc_ref_shape_of(const nnc_ref *r, int t);
int64_t nnc_ref_shape_elems(const nnc_ref_shape *s);
bool nnc_ref_shape_eq(const nnc_ref_shape *a, const nnc_ref_shape *b);
/* Numpy broadcasting from the right; false when a dim pair is neither equal nor 1. */
bool nnc_ref_broadcast(const nnc_ref_shape *a, const nnc_ref_shape *b, nnc_ref_shape *out);
/* Strides (in elements) that read a tensor of shape `in` at an index of shape
 * `out`: 0 for dims `in` lacks or has as 1. False when `in` does not
 * broadcast to `out`. */
bool nnc_ref_bcast_strides(const nnc_ref_shape *in, const nnc_ref_shape *out, int64_t *strides);
/* Splits a flat row-major index of shape s into its coordinates. */
void nnc_ref_unravel(const nnc_ref_shape *s, int64_t flat, int64_t *idx);
/* "x[2,17,768]" (concrete sizes) into buf, NNC_REF_DESC bytes. */
const char *nnc_ref_desc(const nnc_ref *r, int t, char *buf);

/* "<file:line>: <op> (<label>): " + the formatted text, for errors of node n. */
nnc_status nnc_ref_node_fail(const nnc_ref *r, const nnc_node *n, nnc_status code, nnc_error *err,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The array of tensor t for node n to read; an error naming t when it has none. */
nnc_status nnc_ref_need(const nnc_ref *r, const nnc_node *n, int t, const double **out, nnc_error *err);
/* Allocates output i of node n (zeroed). */
nnc_status nnc_ref_out(nnc_ref *r, const nnc_node *n, int i, double **out, nnc_error *err);

/* Elementwise arithmetic, one element at a time (the graph ops and the fused
 * elementwise kernels share it, so a chain means the same in both). */
double nnc_ref_unary(const nnc_node *n, double x);          /* unary, scalar and cast ops */
double nnc_ref_binary(const nnc_node *n, double a, double b);   /* binary ops, act_grad and equal */
/* d act(x) / dx */
double nnc_ref_activation_grad(nnc_op act, bool gelu_tanh, double x);
double nnc_ref_gelu(double x, bool tanh_form);
double nnc_ref_activation(nnc_op act, bool gelu_tanh, double x);
/* x rounded to what a tensor of dtype t stores (i32: toward 0). */
double nnc_ref_round_to(nnc_dtype t, double x);
/* What an elementwise op writes into its output of dtype t: i32 results are
 * truncated toward 0, as C integer arithmetic does; floats stay float64. */
double nnc_ref_store(nnc_dtype t, double x);

/* Graph ops: each evaluates one node from its inputs' arrays. */
nnc_status nnc_ref_op_unary(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_binary(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_mask(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_linear(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_matmul(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_softmax(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_norm(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_norm_grad(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_reduce(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_reshape(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_transpose(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_slice(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_concat(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_split(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_embedding(nnc_ref *r, const nnc_node *n, nnc_error *err);
/* The embedding's inputs are there, their shapes agree and every id is a row of the table (else the
 * error names the id): what nnc_ref_op_embedding checks first, for a lookup inside a fused loop. */
nnc_status nnc_ref_embedding_check(const nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_cross_entropy(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_pad(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_im2col(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_col2im(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_rope(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_kv_append(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_recurrent(nnc_ref *r, const nnc_node *n, nnc_error *err);   /* lstm_scan, gru_scan */
nnc_status nnc_ref_op_recurrent_grad(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_embedding_grad(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_rank_slice(nnc_ref *r, const nnc_node *n, nnc_error *err);   /* ref_shard.c */
nnc_status nnc_ref_op_ce_shard(nnc_ref *r, const nnc_node *n, nnc_error *err);     /* and its gradient */
nnc_status nnc_ref_op_cross_entropy_grad(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_attention(nnc_ref *r, const nnc_node *n, nnc_error *err);
nnc_status nnc_ref_op_attention_grad(nnc_ref *r, const nnc_node *n, nnc_error *err);

/* Evaluates node `node` of r->g with the graph ops. */
nnc_status nnc_ref_eval_node(nnc_ref *r, int node, nnc_error *err);

/* The fused kernels that compute from their descriptors (k is s->k[ki]). */
nnc_status nnc_ref_kernel_gemm(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err);
nnc_status nnc_ref_kernel_attention(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err);
nnc_status nnc_ref_kernel_attention_grad(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err);
nnc_status nnc_ref_kernel_elementwise(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err);

/* "kernel 3 (gemm)" context for kernel errors. */
nnc_status nnc_ref_kernel_fail(const nnc_ref *r, const nnc_kernel *k, int ki, nnc_status code,
                               nnc_error *err, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Operand t of kernel k: must be listed in k->in and hold a value. */
nnc_status nnc_ref_kernel_operand(const nnc_ref *r, const nnc_kernel *k, int ki, int t,
                                  const char *role, const double **out, nnc_error *err);
bool nnc_ref_kernel_lists(const int *ids, int n, int t);

#endif
