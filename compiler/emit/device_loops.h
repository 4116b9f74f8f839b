/* compiler/emit/device_loops.h — what the loop writers of the GPU targets
 * share: device_loops.c (movement, gathers, reductions, softmax over an
 * axis, the losses; the conventions are in its header) and
 * device_loops_elementwise.c (elementwise chains). Not a public interface:
 * ec_emit_device_loop (emit_c.h) is. */
#ifndef NNC_EMIT_DEVICE_LOOPS_H
#define NNC_EMIT_DEVICE_LOOPS_H

#include "emit_c.h"

#define EXPR EC_EXPR
/* Room for the text of one element access. */
#define ACCESS (EXPR * 3)

/* Dim i of tensor t as an expression of the run's dims (d->...). */
char *dl_dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n);
/* A size of the run as an int expression (constants as they are). */
char *dl_as_index(const char *e, char *buf, size_t n);
/* Element idx of tensor t through pointer name, as a float. */
char *dl_ld(const ec_loop_target *lt, int t, const char *name, const char *idx, char *buf, size_t n);
/* The statement (without `;`) storing the float v into element idx. */
char *dl_st(const ec_loop_target *lt, int t, const char *name, const char *idx, const char *v, char *buf, size_t n);
/* Statements naming the coordinates i0 .. and j of flat index e in tensor t
 * that the text `uses` reads, indented by ind. */
void dl_unravel(const ec_ctx *x, int t, const char *e, const char *uses, nnc_sb *b, int ind);
/* Where t lives for a 16-byte vector loop: 1 aligned by the plan, 0 a
 * caller's buffer (the kernel tests it), -1 neither. */
int dl_placed16(const ec_ctx *x, int t);
/* The dtypes the vector loops take: f32, bf16, f16. */
bool dl_vec_dtype(nnc_dtype d);
/* The elementwise kernel ki (device_loops_elementwise.c). */
nnc_status dl_emit_elementwise(const ec_loop_target *lt, int ki, nnc_error *err);

/* The parts of an elementwise chain's loop that the row and reduce kernels
 * (device_loops_chains.c) share with it, k being the chain (a kernel, or a
 * part of one whose out[0] is the chain's result: its in[] the kernel's):
 * how each operand is read (plain, as a padding mask, as a lookup's table); */
void dl_operand_uses(const ec_ctx *x, const nnc_kernel *k, bool *plain, bool *as_mask, bool *table);
/* the elements a vector (0: one at a time), scalar[q] for operands broadcast along the last axis; */
int dl_chain_vec(const ec_loop_target *lt, const nnc_kernel *k, const bool *plain, const bool *as_mask,
                 const bool *table, bool *scalar);
/* the loads of step u (coordinates of element e of out[0]) and the arrays' declarations, `slots` steps each; */
bool dl_chain_loads(const ec_loop_target *lt, const nnc_kernel *k, const bool *plain, const bool *as_mask, int V,
                    const bool *scalar, const char *slots, nnc_sb *loads, char *arrays, size_t n);
/* the chain's values of step u (element l of a vector when V > 0), last naming the result; */
void dl_chain_ops(const ec_loop_target *lt, const nnc_kernel *k, int V, const bool *scalar, nnc_sb *ops, char last[32]);
/* whether text reads a coordinate of an element of tensor t. */
bool dl_reads_coords(const ec_ctx *x, int t, const char *text);

/* A row kernel with its chain and a reduce kernel with its chains
 * (nnc_compile_opts.row_loops, reduce_loops: device_loops_chains.c). */
nnc_status dl_emit_row_chain(const ec_loop_target *lt, int ki, nnc_error *err);
nnc_status dl_emit_reduce_chain(const ec_loop_target *lt, int ki, nnc_error *err);

#endif
