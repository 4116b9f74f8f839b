/* compiler/passes/passes.h — the passes from a built graph to a planned schedule.
 *
 * Order (see pipeline.c): the front-end calls nnc_infer_node as it adds each
 * node, so a shape error stops the model at its Lua line; then nnc_pass_check
 * re-checks the whole graph, nnc_pass_layout cancels the NCHW/NHWC
 * transposes between image ops, nnc_pass_cse and nnc_pass_dce clean it up,
 * nnc_pass_fuse groups nodes into kernels by the pattern table in fuse.c, and
 * nnc_pass_memplan places every intermediate in one arena. */
#ifndef NNC_PASSES_H
#define NNC_PASSES_H

#include <stdio.h>

#include "../ir/ir.h"
#include "../ir/schedule.h"

/* Checks node `node`'s inputs (arity, dtypes, shapes, attributes) and fills
 * its output tensors' dtype, rank and shape. Messages name the node's Lua
 * file:line, the op, what was expected and what was found, e.g.
 *   "gpt2.lua:31: linear: input has 768 features, weight h.3.mlp.c_fc.weight expects 3072" */
nnc_status nnc_infer_node(nnc_graph *g, int node, nnc_error *err);

/* Runs nnc_infer_node over every live node again and checks the graph is
 * well formed (ids in range, every value produced once before use, at least
 * one output). */
nnc_status nnc_pass_check(nnc_graph *g, nnc_error *err);

/* Common-subexpression elimination: a live node with the same op, inputs and
 * attributes as an earlier one is marked dead and its outputs' uses (graph
 * outputs included) are redirected to the earlier node's outputs. */
nnc_status nnc_pass_cse(nnc_graph *g, int *merged, nnc_error *err);

/* Image layouts (layout.c): the transposes between NCHW and NHWC that the
 * front-end writes around each image op move down through the elementwise
 * ops between image ops until they cancel, so an NCHW model runs NHWC inside
 * with a transpose only where an NCHW tensor enters or leaves; a transpose
 * that moves only axes of size 1 becomes a reshape. With weights_at_load
 * (nnc_compile_opts.hoist_weights), nnc_pass_layout_flatten runs last.
 * *cancelled counts the pairs that cancelled. Target-independent; runs on
 * the checked graph, before nnc_pass_cse. */
nnc_status nnc_pass_layout(nnc_graph *g, bool weights_at_load, int *cancelled, nnc_error *err);

/* A linear that reads the flatten of an NHWC-to-NCHW transpose of
 * features, its weight made of parameters alone: the flatten reads the
 * features untransposed and the weight is permuted to match, a weight-only
 * computation that hoisting makes once at load (layout_flatten.c);
 * *permuted counts them. */
nnc_status nnc_pass_layout_flatten(nnc_graph *g, int *permuted, nnc_error *err);

/* Moves the nodes appended from index `from` on to the front of the node
 * array (casts of inputs, which must run before every reader). Node ids live
 * only in tensors' producer fields here (passes after build the rest). */
nnc_status nnc_pass_nodes_to_front(nnc_graph *g, int from, nnc_error *err);

/* A padding mask that is a graph input (or parameter) read by two or more
 * padding_masks of another dtype is cast to that dtype once, in front of the
 * graph, and they read the cast (mask_cast.c); *cast counts the casts.
 * Target-independent; runs before nnc_pass_cse. */
nnc_status nnc_pass_mask_cast(nnc_graph *g, int *cast, nnc_error *err);

/* Dead-code elimination: nodes none of whose outputs reach a graph output are
 * marked dead. */
nnc_status nnc_pass_dce(nnc_graph *g, int *removed, nnc_error *err);

/* --precision: with storage bf16 or f16, weights are stored narrow, f32
 * inputs are cast to it where they enter and float outputs cast back to f32
 * (unless storage_outputs: --outputs=storage leaves them narrow);
 * inference carries the narrow dtype through the graph. f32: no change.
 * Runs before nnc_compile_graph. */
typedef struct nnc_precision {
  const char *name;     /* "f32", "tf32", "bf16" or "f16" */
  nnc_dtype storage;    /* of floats in memory: f32, bf16 or f16 */
  bool tf32;            /* f32 matmuls on tf32 tensor cores */
  bool storage_outputs; /* --outputs=storage: float outputs keep the storage dtype */
  bool f32_weight_math; /* arithmetic on weights alone stays f32 (precision_weights.c): for a target
                           whose weights may be of mixed dtypes (nnc_emitter.f32_weights) */
  bool fp8;             /* --precision=fp8: bf16 storage, and the linear layers' weights held as e4m3
                           (nnc_pass_quantize with NNC_QUANTIZE_FP8) with their GEMMs' A quantized too */
} nnc_precision;

/* A --precision name (NULL: f32, also tf32, bf16, f16 and fp8); storage_outputs and f32_weight_math come
 * out false. */
nnc_status nnc_precision_parse(const char *name, nnc_precision *out, nnc_error *err);

/* An --outputs name, "f32" or "storage" (NULL: f32), into p->storage_outputs. */
nnc_status nnc_outputs_parse(const char *name, nnc_precision *p, nnc_error *err);

nnc_status nnc_pass_precision(nnc_graph *g, const nnc_precision *p, nnc_error *err);

/* --quantize (quantize.c): none, or int8w, the linear layers' weights held
 * as int8 with an f32 scale per output channel (nnc_tensor.quant), quantized
 * when the folder loads the f32 weights; or w8a8, those weights (6-bit on
 * C SIMD, 8-bit on a GPU) and
 * the GEMMs' activations too, per row when they run (nnc_quant.a8); or
 * int4w, those weights as int4 with a scale per group of 128 k. */
typedef enum nnc_quantize {
  NNC_QUANTIZE_NONE,
  NNC_QUANTIZE_INT8W,
  NNC_QUANTIZE_W8A8,
  NNC_QUANTIZE_INT4W,
  NNC_QUANTIZE_FP8      /* --precision=fp8 (not a --quantize name): bf16 weights of linear layers held as
                           e4m3 with a scale per output channel, when K and N are multiples of 16 */
} nnc_quantize;
/* The group of int4w's scales: k per scale along a channel. */
#define NNC_QUANTIZE_INT4_GROUP 128
/* A --quantize name (NULL: none), and back. */
nnc_status nnc_quantize_parse(const char *name, nnc_quantize *out, nnc_error *err);
const char *nnc_quantize_name(nnc_quantize q);
/* Marks every f32 parameter of rank 2 that only linear layers read, as
 * their weight, for mode q; *count (may be NULL) counts them. Runs on the
 * inference graph after nnc_compile_graph, so that the readers it looks at
 * are the ones the kernels have (a weight that layout_flatten permutes stays
 * f32). device: a GPU's int8 GEMM reads w8a8's weights (cuda_w8a8.c): they
 * are those of the storage dtype (bf16, f16 or f32) whose K is a multiple
 * of 16 (rows of 16 bytes), on the full 8-bit grid. */
nnc_status nnc_pass_quantize(nnc_graph *g, nnc_quantize q, bool device, int *count, nnc_error *err);

/* --train: appends the backward graph (reverse-mode autodiff, one rule per
 * op in autodiff_rules.c) and makes the outputs the loss and a gradient per
 * float parameter, "grad.<name>" (see autodiff.c), each scaled by the input
 * loss_scale it adds. Runs on the checked
 * graph, before nnc_pass_precision and nnc_compile_graph. */
typedef struct nnc_autodiff_opts {
  const char *loss;     /* the loss output's name; NULL: "loss" */
  bool input_grads;     /* gradients of the float inputs too, "grad.<input>" (tests) */
  bool primitive_attention; /* attention as its primitive ops, not one op with attention_grad as its
                               gradient (a target without them; tests compare the two) */
  bool primitive_norms; /* the norms' gradients as primitive ops, not layernorm_grad / rmsnorm_grad */
  bool no_loss_scale;   /* no input NNC_LOSS_SCALE_INPUT: the seed is 1 (tests) */
} nnc_autodiff_opts;

/* The input --train adds (f32 [1]): the backward's seed is d loss / d loss
 * times it, so every gradient output is multiplied by it. */
#define NNC_LOSS_SCALE_INPUT "loss_scale"

nnc_status nnc_pass_autodiff(nnc_graph *g, const nnc_autodiff_opts *o, nnc_error *err);

/* --recompute (gradient checkpointing): which saved activations the
 * backward makes again instead of keeping them from the forward. Levels, each
 * holding the one before: gelu, the activations' outputs (llm.c's
 * recompute 1); norm, the layernorm and rmsnorm outputs too (llm.c's 2);
 * block, everything inside the blocks, from the residual stream (the final
 * norm and the head after the last block keep their outputs). */
typedef enum nnc_recompute {
  NNC_RECOMPUTE_NONE,
  NNC_RECOMPUTE_GELU,
  NNC_RECOMPUTE_NORM,
  NNC_RECOMPUTE_BLOCK
} nnc_recompute;

/* A --recompute name (NULL: none), and back. */
nnc_status nnc_recompute_parse(const char *name, nnc_recompute *out, nnc_error *err);
const char *nnc_recompute_name(nnc_recompute r);

/* Copies the chosen forward nodes whose outputs the backward reads into the
 * backward (recompute.c); *ncopies counts the copies. Runs on the joint
 * graph after nnc_pass_autodiff and nnc_pass_precision. */
nnc_status nnc_pass_recompute(nnc_graph *g, nnc_recompute mode, int *ncopies, nnc_error *err);

/* The residual add of a norm gradient's dx (the gradient of a pre-norm
 * block's input) as the norm gradient's fourth input, dres, added in its
 * kernel (norm_residual.c); *joined counts them. Run by nnc_pass_autodiff
 * last. */
nnc_status nnc_pass_norm_residual(nnc_graph *g, int *joined, nnc_error *err);

/* The sdpa pattern (the fusion's) as one attention node with the rows'
 * log-sum-exp as a second output; *replaced counts them. Run by
 * nnc_pass_autodiff first, so that attention's gradient is one
 * attention_grad node. */
nnc_status nnc_pass_attention_op(nnc_graph *g, int *replaced, nnc_error *err);

/* What the target's kernels can do, where the passes choose between ways
 * (zeroed: everything). */
/* --parallel=tp:N,dp:M: the ranks of each kind of parallelism (1: none);
 * zero1 (dp:M,zero1): each rank keeps and updates 1/M of the optimizer state. */
typedef struct nnc_parallel {
  int tp, dp;
  bool zero1;
} nnc_parallel;
nnc_status nnc_parallel_parse(const char *s, nnc_parallel *out, nnc_error *err);
/* Refuses what no plan does yet, naming the option: dp:M without --train
 * (tp:N with dp:M trains on N * M ranks), tp:N with --generate, zero1 beside
 * tp:N, a target whose emitter writes no collectives. */
nnc_status nnc_parallel_supported(const nnc_parallel *p, bool train, bool generate, const char *target,
                                  bool collectives, nnc_error *err);

/* The tensor-parallel plan (parallel.c): linear layers split by columns,
 * then by rows, an all_reduce after each pair; parameters sliced
 * (nnc_tensor.shard), g->ranks set. Runs on the checked graph, before
 * nnc_pass_precision. */
nnc_status nnc_pass_parallel(nnc_graph *g, const nnc_parallel *p, nnc_error *err);

/* Horizontal fusion (hfuse.c): two or more linears reading the same input,
 * their weights (and biases, all or none) parameters of their own of one
 * dtype and layout, become one linear over the weights concatenated along
 * N and a split into the tensors they wrote (BERT's and LLaMA's q, k, v as
 * GPT-2's c_attn); *fused (may be NULL) counts the groups. The
 * concatenations read weights alone, so the pass pays only where they run
 * at load (nnc_compile_opts.hoist_weights): the driver runs it on
 * inference graphs, not under --train (the separate weights' gradients),
 * a tensor-parallel plan (sliced weights) or --quantize (which marks the
 * weights a linear reads), nor with --hfuse=off. Runs after
 * nnc_pass_precision, before nnc_compile_graph. */
nnc_status nnc_pass_hfuse(nnc_graph *g, int *fused, nnc_error *err);
/* Whether the pass runs: not turned off (--hfuse=off), no --train, no
 * tensor-parallel plan, no --quantize, and weight-only kernels run at load. */
bool nnc_hfuse_wanted(bool off, bool train, const nnc_parallel *par, nnc_quantize q, bool weights_at_load);
/* --gelu=tanh: every erf-form GELU computed in the tanh form, which
 * cuBLASLt fuses into a GEMM (the two differ by at most 4.7e-4); *changed
 * counts them. Inference only (the driver refuses it with --train); runs
 * after nnc_pass_precision, and the driver keeps the model as written for
 * bench --check. */
nnc_status nnc_pass_gelu_tanh(nnc_graph *g, int *changed, nnc_error *err);
/* Whether --gelu=tanh may run: 16-bit activations (storage bf16 or f16,
 * fp8 included) and no --train; else NNC_E_USAGE saying which. */
nnc_status nnc_gelu_tanh_allowed(const nnc_precision *p, bool train, nnc_error *err);
/* --explain: a line per GEMM the pass made (the Lua lines of its members,
 * N of each, K). */
void nnc_hfuse_explain(FILE *f, const nnc_graph *g);

typedef struct nnc_compile_opts {
  bool no_gemm_aux;   /* GEMMs neither save an activation's input nor multiply by its
                         derivative (nnc_gemm_desc.aux_kind): both stay elementwise kernels */
  bool no_gemm_bgrad; /* GEMMs write no bias gradient (nnc_gemm_desc.bgrad_from): it stays a reduction */
  bool no_gemm_act_last; /* GEMMs apply no activation after their residual (nnc_gemm_desc.act_last) */
  bool hoist_weights;    /* kernels of weights alone run once the weights are loaded (nnc_kernel.at_load):
                            inference on a target that runs them apart from the forward */
  int gemm_windows;      /* > 0: a linear of at most this many outputs (N) that alone reads an im2col's
                            windows gathers them from the image itself (nnc_gemm_desc.windowed) when the
                            image's dtype is in gemm_windows_types and its channels a multiple of 8: the
                            windows are never stored */
  unsigned gemm_windows_types;   /* the image dtypes of such GEMMs, bit 1u << nnc_dtype each */
  bool gemm_pool;        /* a max pool (NHWC windows, stride = kernel, no padding, dilation 1) that alone reads
                            an f32 GEMM's result joins its kernel (nnc_gemm_desc.pooled) */
  int channel_run;       /* the multiple of 8 in those rules and reduce_windows' is this where it is > 0
                            (nnc_emitter.channel_run) */
  bool reduce_windows;   /* a max or mean over an NHWC im2col's taps (pooling) that alone reads the windows
                            is one reduce kernel reading the image, when the channels are a multiple of 8 */
  bool attention_append; /* a kv_append whose cache only its attention reads runs inside that attention
                            kernel (nnc_attention_desc.append, fold_append.c): the target's attention writes
                            the new rows itself */
  bool attention_rope;   /* the ropes of an appending attention's q and new key rows run inside it
                            (nnc_attention_desc.rope, fold_rope.c): the target's attention rotates them */
  int gemm_post_norm;    /* > 0: a layernorm that alone reads a GEMM's output of at most this many columns
                            runs in that GEMM's epilogue (nnc_gemm_desc.post_norm, fold_post_norm.c) */
  bool gather_loops;     /* an embedding lookup that alone feeds an elementwise chain of its shape runs in
                            that chain's loop, which reads the table through the ids (no lookup kernel) */
  bool row_loops;        /* a layernorm or rmsnorm of the last axis (of at most NNC_ROW_LOOP_COLS columns)
                            whose input an elementwise chain computes runs with that chain as one kernel
                            (a warp a row): the chain's result is never read back (stored from the
                            registers, as a side output, when others read it too) */
  bool gemm_norm_rows;   /* with row_loops: a GEMM's layernorm or rmsnorm prologue whose input an
                            elementwise chain computes runs in that chain's row kernel instead, which
                            writes the normalized rows the GEMM then reads (a target whose GEMMs normalize
                            A in a kernel of their own anyway; not where that kernel also quantizes A) */
  bool reduce_loops;     /* a sum, mean or max takes the elementwise chain that computes its input and
                            the elementwise ops that alone read its result into its kernel: neither the
                            reduced tensor nor the reduction is stored (inference: the kernel does not
                            split long reductions over blocks as the backward's need); values of the
                            reduced tensor's shape that others read (the chain's, or ops on what the loop
                            reads) are side outputs the loop stores as it visits each element */
  bool scan_input;       /* an lstm_scan takes the linear that alone reads its input and computes its xw
                            (x W_ih^T + b_ih) into its kernel: each step's GEMM multiplies [h | x_t] by
                            [W_hh | W_ih]^T, and xw [B, T, 4H] is never stored */
} nnc_compile_opts;

/* The most columns of a row a row_loops kernel normalizes: a warp holds the
 * row in registers. */
#define NNC_ROW_LOOP_COLS 1024

/* Groups the live nodes into kernels (s must be initialised for g); o may
 * be NULL. */
nnc_status nnc_pass_fuse(const nnc_graph *g, const nnc_compile_opts *o, nnc_schedule *s, nnc_error *err);

/* Folds the head split (reshape + transpose copies, and the split of a fused
 * qkv projection) before each attention kernel, and the head merge after it,
 * into the attention's operand views; the folded kernels leave the schedule.
 * Runs between fusion and memory planning. */
nnc_status nnc_pass_fold_heads(nnc_schedule *s, nnc_error *err);

/* Folds each kv_append kernel whose cache an attention kernel reads in
 * place (after nnc_pass_fold_heads) into that attention: its nodes join the
 * attention kernel, the attention's append[] says where the new rows are,
 * and the kv_append kernel leaves the schedule. Only for a target whose
 * attention writes the new rows (nnc_compile_opts.attention_append). Runs
 * before memory planning. */
nnc_status nnc_pass_fold_append(nnc_schedule *s, nnc_error *err);

/* Folds the rope kernels whose outputs only an appending attention reads
 * (its q, through reshapes, and its folded kv append's new key rows; after
 * nnc_pass_fold_append) into that attention: their nodes join it, its
 * rope[] says where the unrotated rows are and how to turn them, and the
 * rope kernels leave the schedule. Only for a target whose attention
 * rotates (nnc_compile_opts.attention_rope). Runs before memory planning. */
nnc_status nnc_pass_fold_rope(nnc_schedule *s, nnc_error *err);

/* Folds each layernorm row kernel that alone reads a GEMM kernel's output
 * (N <= max_n, the GEMM one the target's fused kernel runs) into that
 * GEMM's epilogue (nnc_gemm_desc.post_norm); the row kernels leave the
 * schedule. Only where nnc_compile_opts.gemm_post_norm > 0. Runs before
 * memory planning. */
nnc_status nnc_pass_fold_post_norm(nnc_schedule *s, int max_n, nnc_error *err);

/* Marks the kernels that read weights alone, directly or through other
 * such kernels, and write no graph output (nnc_kernel.at_load). */
nnc_status nnc_pass_hoist_weights(nnc_schedule *s, nnc_error *err);

/* Concatenations of weights run at load whose members can sit one after
 * the other in the weights block (join_weights.c: along axis 0, read by
 * nothing else, each but the last a multiple of 256 bytes) become views of
 * several inputs: the joined tensor is the members' memory, not a copy;
 * *joined (may be NULL) counts them. Runs after nnc_pass_hoist_weights. */
nnc_status nnc_pass_join_weights(nnc_schedule *s, int *joined, nnc_error *err);
/* k is such a view: its output is its inputs, laid out in order. */
bool nnc_kernel_is_joined_view(const nnc_kernel *k);

/* Slices that keep the first rows of their input (slice_view.c: start 0,
 * every axis before the sliced one of size 1, not a graph output) become
 * views of it: the position table's first T rows read in place. *viewed
 * (may be NULL) counts them. Runs after fusion, before memory planning. */
nnc_status nnc_pass_slice_view(nnc_schedule *s, int *viewed, nnc_error *err);
/* The order the emitters lay out the weights in (order[j]: the index in
 * g->params of the j-th): declaration order, except that the members of a
 * joined view follow each other, in its order, where the first declared of
 * them would be. order holds g->nparams entries. */
nnc_status nnc_weight_order(const nnc_schedule *s, int *order, nnc_error *err);

/* Liveness over the kernel order gives every intermediate an arena offset,
 * reusing memory of dead tensors (in place where an elementwise kernel's input
 * dies at it). Sizes are taken at every symbol's maximum. */
nnc_status nnc_pass_memplan(nnc_schedule *s, nnc_error *err);

/* Everything after the front-end, in order; for a target, with its opts. */
nnc_status nnc_compile_graph(nnc_graph *g, nnc_schedule *s, nnc_error *err);
nnc_status nnc_compile_graph_for(nnc_graph *g, const nnc_compile_opts *o, nnc_schedule *s, nnc_error *err);

#endif
