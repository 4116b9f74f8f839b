/* compiler/emit/cuda.h — the CUDA emitter's parts.
 *
 * cuda.c checks the schedule fits the target, lays the weights out in one
 * device block and writes the folder; cuda_model.c writes <model>.cu (the
 * model handle, forward() and the API), cuda_kernels.c the launch of every
 * kernel (GEMMs through cuda_gemm.c, attention and norms through templates/cuda),
 * cuda_loops.c the CUDA kernels
 * nnc writes itself (elementwise chains, data movement, reductions), and
 * cuda_train.c the training API (--train), cuda_build.c the Makefile and
 * README. <model>.h, <model>_graph.c and
 * bench_<model>.c come from the shared C-API writers (emit_c.h). */
#ifndef NNC_CUDA_EMIT_H
#define NNC_CUDA_EMIT_H

#include "emit_c.h"
#include "emit_c_train.h"

/* The CUDA type of tensor t in memory ("float", "__nv_bfloat16", "int32_t"). */
const char *cu_stype(const ec_ctx *x, int t);

/* Appends every kernel's launcher `static int k<i>(<p>_model *m, const
 * run_args &c, cudaStream_t s)` (and the __global__ functions nnc writes)
 * and the cost function. */
nnc_status cu_emit_kernels(const ec_ctx *x, nnc_sb *b, nnc_error *err);
/* cuda_gemm.c: GEMM kernel ki's launcher (in the --tune=measure probe, every
 * implementation's and a switch over them); the names of GEMM k's
 * implementations, the rule's first; the statements raising `need` to its
 * workspace; which of nnc's GEMM templates it includes (or'ed into a
 * cu_gemm_templates); and the probe's run_kernel() and <p>_tune(). */
nnc_status cu_emit_gemm_kernel(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err);
void cu_gemm_variants(const ec_ctx *x, const nnc_kernel *k, nnc_kernel_variants *v);
void cu_gemm_workspace(const ec_ctx *x, int ki, nnc_sb *b);
typedef struct {
  bool own, wg, tma, ln, skinny;   /* gemm.cuh, gemm_wgmma.cuh, gemm_tma.cuh, gemm_tma_ln.cuh, gemm_skinny.cuh */
} cu_gemm_templates;
void cu_gemm_uses(const ec_ctx *x, int ki, cu_gemm_templates *t);
void cu_emit_probe(const ec_ctx *x, nnc_sb *b);
/* `int` of a size expression: a constant as it is, an expression of dims cast. */
char *cu_as_int(const char *e, char *buf, size_t n);
/* The body of a windowed GEMM kernel's launcher (cuda_conv.c): one call of
 * templates/cuda/conv_wgmma.cuh. */
void cu_conv_body(const ec_ctx *x, int ki, nnc_sb *body);
/* The rows up to which GEMM d of shape s branches at run time to
 * templates/cuda/gemm_skinny.cuh (cuda_skinny.c): not at all, up to
 * NNC_SKINNY_ROWS, or up to 16 as well (a vocabulary head on cuBLASLt);
 * on_wgmma: the GEMM's usual path is nnc's wgmma GEMM. cu_skinny_block
 * writes that branch (the launcher's M, N, K and s in scope; a: A's
 * pointer expression, NULL for d->a's). */
typedef enum { CU_SKINNY_NONE, CU_SKINNY_ROWS, CU_SKINNY_16 } cu_skinny_rule;
cu_skinny_rule cu_skinny_rule_of(const ec_ctx *x, const nnc_gemm_desc *d, const ec_gemm_shape *s, bool on_wgmma);
void cu_skinny_block(const ec_ctx *x, int ki, const ec_gemm_shape *s, cu_skinny_rule rule, const char *a, nnc_sb *body);
/* Whether tensor t is a weight no kernel can still be writing when run
 * kernel ki starts early (a parameter outside --train, or made from
 * parameters at load with a plain launch before ki), so that ki may copy it
 * before waiting for the kernel before it (templates/cuda/pdl.cuh). */
bool cu_fixed_weight(const ec_ctx *x, int ki, int t);
/* The templates' nnc_cuda_act of GEMM d's activation (cuda_conv.c). */
const char *cu_gemm_act(const nnc_gemm_desc *d);
/* The launcher's body of a pool read straight from the image
 * (ec_kernel_is_pool: an im2col and a max or mean over its taps,
 * nnc_compile_opts.reduce_windows): one call of templates/cuda/pool.cuh (cuda_conv.c). */
void cu_pool_body(const ec_ctx *x, int ki, nnc_sb *body);
/* The CUDA kernel and launcher of an elementwise, move, reduce, gather or
 * non-last-axis softmax kernel. */
nnc_status cu_emit_loop_kernel(const ec_ctx *x, int k, nnc_sb *b, nnc_error *err);
/* An all_reduce kernel: the model's communicator (NCCL) on stream s (emit_collective.c). */
nnc_status cu_emit_all_reduce(const ec_ctx *x, int k, nnc_sb *b, nnc_error *err);
/* An all_gather kernel: the same, stacking the ranks' tensors in rank order. */
nnc_status cu_emit_all_gather(const ec_ctx *x, int k, nnc_sb *b, nnc_error *err);
/* emit_shard.c: rank_slice, cross_entropy_shard and its gradient */
nnc_status cu_emit_rank_slice(const ec_ctx *x, int k, nnc_sb *b, nnc_error *err);
nnc_status cu_emit_ce_shard(const ec_ctx *x, int k, nnc_sb *b, nnc_error *err);
/* --precision=fp8 (cuda_fp8.c): whether any weight is held as e4m3, whether
 * GEMM d reads one; the tables and upload_fp8() of <model>.cu; the body of
 * such a GEMM's launcher after `M, N, K` (A's rows quantized, with their
 * norm, then nnc_cuda_gemm_fp8 with the cuBLASLt epilogue epi, the residual
 * when lt_residual, added before the activation when act_after); and the
 * workspace it needs. */
bool cu_fp8_any(const ec_ctx *x);
bool cu_fp8_gemm(const ec_ctx *x, const nnc_gemm_desc *d);
void cu_fp8_tables(const ec_ctx *x, nnc_sb *b);
void cu_fp8_upload(const ec_ctx *x, nnc_sb *b);
void cu_fp8_gemm_body(const ec_ctx *x, int ki, const char *epi, bool lt_residual, bool act_after, nnc_sb *body);
void cu_fp8_workspace(const ec_ctx *x, int ki, const char *M, const char *N, const char *K, nnc_sb *b);
/* Weights held quantized (cuda_qweights.c; --quantize=w8a8, int8w and
 * int4w): whether any weight is; whether GEMM d reads an int8 one with its
 * A quantized too (w8a8), or reads one with A as it is (int8w, int4w: the
 * weight's bits, 8 or 4; 0 otherwise); the fields those GEMMs' `f` share
 * (the weight and its scales, bias, output, alpha, and the activation and
 * residual, or those the GEMM keeps when post: the residual before the
 * activation when residual); the tables of <model>.cu, and its
 * upload_qweight(), the quantized checkpoint's host forms and
 * <model>_save_quantized; and the latter's declaration for the header. */
bool cu_qweight_any(const ec_ctx *x);
bool cu_w8a8_gemm(const ec_ctx *x, const nnc_gemm_desc *d);
int cu_weight_only_bits(const ec_ctx *x, const nnc_gemm_desc *d);
void cu_qweight_gemm_fields(const ec_ctx *x, const nnc_gemm_desc *d, bool post, bool residual, nnc_sb *body);
void cu_qweight_tables(const ec_ctx *x, nnc_sb *b);
void cu_qweight_upload(const ec_ctx *x, nnc_sb *b);
void cu_qweight_decls(const ec_ctx *x, nnc_sb *b);
/* Whether a weight carries a SmoothQuant tail (w8a8; ec_fp8_held's
 * smooth): the folder's loader then reads `<weight>.smooth`. */
bool cu_smooth_any(const ec_ctx *x);
/* --quantize=w8a8 (cuda_w8a8.c): the body of a w8a8 GEMM's launcher after
 * `M, N, K` (A's rows quantized, with their norm, then nnc_cuda_w8a8_gemm
 * with the whole epilogue, or only the bias when post: the epilogue kernel
 * does the rest); and the workspace it needs. */
void cu_w8a8_gemm_body(const ec_ctx *x, int ki, bool post, nnc_sb *body);
void cu_w8a8_workspace(const ec_ctx *x, int ki, const char *M, const char *K, nnc_sb *b);
/* Whether two w8a8 GEMMs quantize one A once (BERT's q, k and v), and
 * check_shared_smooth(), which load() calls then: such GEMMs' weights must
 * carry the same SmoothQuant factors, since A is divided by them once. */
bool cu_smooth_shared_any(const ec_ctx *x);
void cu_w8a8_smooth_check(const ec_ctx *x, nnc_sb *b);
/* --quantize=int8w and int4w (cuda_weight_only.c): the body of such a
 * GEMM's launcher after `M, N, K` and, where a norm comes first, A's rows
 * normalized into the workspace (`A`, and `e`): nnc_cuda_w8_gemm or
 * nnc_cuda_w4_gemm (few rows multiply straight from the quantized weight,
 * many dequantize it for cuBLASLt), with the whole epilogue, or only the
 * bias (and the residual when residual) when post: the epilogue kernel
 * does the rest; and its workspace. */
void cu_weight_only_gemm_body(const ec_ctx *x, int ki, bool post, bool residual, nnc_sb *body);
void cu_weight_only_workspace(const ec_ctx *x, int ki, const char *M, const char *N, const char *K, nnc_sb *b);
/* Statements raising `need` to the device workspace kernel k needs at the
 * sizes d (GEMMs with a prologue cuBLASLt cannot fuse, the cross-entropy's
 * rows). */
void cu_emit_workspace(const ec_ctx *x, int k, nnc_sb *b);

/* Why options.cuda_graphs defaults to what it does in this folder (cuda.c). */
const char *cu_graphs_why(const nnc_emit_request *r);
/* How many instantiated CUDA graphs a model keeps (options.cuda_graphs):
 * one per set of dims and input/output pointers, the least recently used
 * replaced. */
#define CU_GRAPH_CACHE 8

nnc_status cu_write_model(const ec_ctx *x, const char *dir, nnc_error *err);

/* --train (cuda_train.c): whether the weights have f32 master copies (bf16
 * or f16 storage); the model handle's training fields and what _destroy
 * frees of them; the training API, after the model's API. */
bool cu_train_master(const ec_ctx *x);
void cu_train_struct(const ec_ctx *x, nnc_sb *b);
/* The nnc_optim_step s of an update (opt, scale in scope) (cuda_train.c). */
void cu_optim_step(nnc_sb *b);
/* --train --parallel=dp (cuda_grad_buckets.c): whether the gradients are
 * summed over the ranks in buckets beside the backward, and the pieces of
 * <model>.cu that do it: the model's fields, their creation (in
 * train_state) and destruction, reduce_grads(), and after kernel k's launch
 * the sums of the buckets final there (k == nk: the end of forward(), with
 * the wait for the last sum). */
bool cu_grad_buckets_on(const ec_ctx *x);
void cu_grad_buckets_struct(const ec_ctx *x, nnc_sb *b);
void cu_grad_buckets_create(const ec_ctx *x, nnc_sb *b);
void cu_grad_buckets_destroy(const ec_ctx *x, nnc_sb *b);
void cu_grad_buckets_functions(const ec_ctx *x, nnc_sb *b);
void cu_grad_buckets_after(const ec_ctx *x, int k, nnc_sb *b);
void cu_train_destroy(const ec_ctx *x, nnc_sb *b);
/* --parallel=dp:M,zero1 (cuda_zero.c): the model's extra fields, the
 * update's hooks (reduce-scatter, the shard's norm, the shard's update and
 * the all-gather), and the checkpoints' moments gathered to the host or
 * sliced from it. */
void cu_zero_struct(const ec_ctx *x, nnc_sb *b);
void cu_zero_hooks(const ec_ctx *x, nnc_sb *b);
void cu_zero_moments_to_host(const ec_ctx *x, nnc_sb *b);
void cu_zero_moments_from_host(const ec_ctx *x, nnc_sb *b);
/* --parallel=tp:N (emit_tp_ckpt.c): _save gathering the sliced weights and moments whole on rank 0
 * (its _load: ec_tp_load_state, emit_c_train.h) */
void cu_tp_save(const ec_ctx *x, nnc_sb *b);
nnc_status cu_write_train(const ec_ctx *x, nnc_sb *b, nnc_error *err);
nnc_status cu_write_build(const ec_ctx *x, const char *dir, nnc_error *err);

#endif
