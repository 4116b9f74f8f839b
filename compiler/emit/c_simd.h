/* compiler/emit/c_simd.h — the C SIMD emitter's parts and what they share.
 *
 * c_simd.c checks the schedule fits the target and writes the folder; the
 * other files each write one kind of output: the API (c_simd_api.c), the
 * kernel calls (c_simd_kernels.c), the plain C loops (c_simd_loops.c), the
 * graph and bench files for --check (c_simd_bench.c) and the build files
 * (c_simd_build.c). */
#ifndef NNC_C_SIMD_H
#define NNC_C_SIMD_H


#include "emit_c.h"
#include "emit_c_train.h"

/* Kernel functions: appends `static int k<i>(const run_ctx *c)` for every
 * kernel to b (GEMM, attention, rows, gather through the templates; the
 * rest through c_simd_loops.c), and the cost function. */
nnc_status cs_emit_kernels(const ec_ctx *x, nnc_sb *b, nnc_error *err);
/* The plain C loop of an elementwise, reduce, move, loss or non-last-axis
 * softmax kernel. */
nnc_status cs_emit_loop_kernel(const ec_ctx *x, int k, nnc_sb *b, nnc_error *err);
/* The code of a kernel that pools (or convolves depthwise) straight from
 * an image, ec_kernel_is_pool (c_simd_pool.c). */
nnc_status cs_emit_pool(const ec_ctx *x, int k, nnc_sb *b);
/* `.field = {...}`, the nnc_simd_windows of im2col node im (its image
 * [images, H, W, C] and OH x OW window positions), as an initializer's
 * line of a GEMM's or a pool's arguments, after a comment that starts with
 * `what`. */
void cs_window_fields(const ec_ctx *x, const nnc_node *im, const char *field, const char *what, nnc_sb *body);
/* An lstm_scan_grad or gru_scan_grad kernel: a task takes whole batch rows (emit_recurrent.c). */
nnc_status cs_emit_recurrent(const ec_ctx *x, int k, nnc_sb *b);
/* An lstm_scan or gru_scan kernel as a GEMM a step over every batch row, then
 * the step's gate math, a block of rows a thread through every step
 * (c_simd_scan.c); its workspace_need statements (W_hh packed, the gates,
 * then a GEMM workspace per thread). */
nnc_status cs_emit_scan(const ec_ctx *x, int k, nnc_sb *b);
void cs_emit_scan_workspace(const ec_ctx *x, int k, nnc_sb *b);
/* What the scans' kernels share, written once before the kernels: nnc_rnn_split, and nnc_rnn_act
 * (the GRU's gate math) and nnc_lstm_cell (the LSTM's) where a scan calls them. */
void cs_emit_scan_helpers(nnc_sb *b, bool act, bool lstm_cell);
/* A rope kernel: a task takes whole rows (emit_rope.c). */
/* k<ki>_rows, whose body reads the run context c, then k<ki>, which runs it
 * over `rows` rows of `cols` elements on the model's threads; frees body. */
void cs_emit_rows_fns(const ec_ctx *x, int ki, const char *rows, const char *cols, nnc_sb *body, nnc_sb *b);
nnc_status cs_emit_rope(const ec_ctx *x, int k, nnc_sb *b);
nnc_status cs_emit_kv_append(const ec_ctx *x, int k, nnc_sb *b);
/* An all_reduce kernel: a call to the model's communicator (emit_collective.c). */
nnc_status cs_emit_all_reduce(const ec_ctx *x, int k, nnc_sb *b);
/* An all_gather kernel: the same, stacking the ranks' tensors in rank order. */
nnc_status cs_emit_all_gather(const ec_ctx *x, int k, nnc_sb *b);
/* emit_shard.c: rank_slice, cross_entropy_shard and its gradient */
nnc_status cs_emit_rank_slice(const ec_ctx *x, int k, nnc_sb *b);
nnc_status cs_emit_ce_shard(const ec_ctx *x, int k, nnc_sb *b);
/* The workspace bytes kernel k needs at the maxima, as statements that
 * raise `need` (GEMM, attention, the norms' gradients and the scans). */
void cs_emit_workspace(const ec_ctx *x, int k, nnc_sb *b);

nnc_status cs_write_model(const ec_ctx *x, const char *dir, nnc_error *err);

/* --quantize=int8w (c_simd_quant.c): whether any weight is held as int8;
 * whether GEMM kernel k's B is; a check that only GEMMs read them, as B; and
 * the tables (quantized[], q8_shape[]) with held_bytes() and
 * quantize_weight(), written after the manifest when any is. */
bool cs_quantized(const ec_ctx *x);
bool cs_quantized_b(const ec_ctx *x, const nnc_kernel *k);
/* The nnc_simd_gemm_args field that reads kernel k's quantized B (b_q8,
 * b_w8a8 or b_q4), and in *held how it is held, for a comment. */
const char *cs_quant_b_field(const ec_ctx *x, const nnc_kernel *k, const char **held);
nnc_status cs_quant_check(const ec_ctx *x, nnc_error *err);
void cs_emit_quant_tables(const ec_ctx *x, nnc_sb *b);
/* A quantized folder's checkpoint API: <model>_save_quantized's
 * declaration (for <model>.h) and its definition (after the API). */
void cs_quant_decls(const ec_ctx *x, nnc_sb *b);
void cs_emit_quant_api(const ec_ctx *x, nnc_sb *b);
/* The held form's SmoothQuant callback a w8a8 folder's loader (back: its
 * saver) passes: "smooth_weight", "smooth_of", or "NULL" for other modes. */
const char *cs_quant_smooth_fn(const ec_ctx *x, bool back);

/* Weights packed once at load (c_simd_packed.c): cs_plan_packed fills
 * x->packed_b and x->npacked; the parameter slot j's weight is held packed
 * as (only packed GEMMs and embedding gathers read it, in a plain folder),
 * or -1 (packed by prepare() into a copy); whether any is held so; whether
 * the folder has a prepare() (kernels at load or copies to pack); the table
 * of packed weights with packed_alloc() and pack_b() (and weight_bytes(),
 * pack_weight() for held ones), written after run_ctx; and prepare()'s
 * calls of pack_b. */
nnc_status cs_plan_packed(ec_ctx *x, nnc_error *err);
int cs_packed_param(const ec_ctx *x, int j);
/* The slot whose held weight is tensor t (a parameter held packed, whose
 * values the weights block no longer has), or -1. */
int cs_held_slot(const ec_ctx *x, int t);
bool cs_packed_in_place(const ec_ctx *x);
bool cs_prepares(const ec_ctx *x);
void cs_emit_packed_table(const ec_ctx *x, nnc_sb *b);
void cs_emit_pack_calls(const ec_ctx *x, nnc_sb *b);

/* --train (c_simd_train.c): the model struct's fields and frees for the
 * training state, and the training API's definitions. */
void cs_train_struct(const ec_ctx *x, nnc_sb *b);
void cs_train_destroy(const ec_ctx *x, nnc_sb *b);
nnc_status cs_write_train(const ec_ctx *x, nnc_sb *b, nnc_error *err);
/* --parallel=dp:M,zero1 (c_simd_zero.c): the hooks of the update (sum over the ranks, sum of squares, apply), _save,
 * and _load's taking of its shard of the moments. */
void cs_zero_hooks(const ec_ctx *x, nnc_sb *b);
void cs_zero_save(const ec_ctx *x, nnc_sb *b);
void cs_zero_take_moments(const ec_ctx *x, nnc_sb *b);
/* --parallel=tp:N (emit_tp_ckpt.c): _save gathering the sliced weights and moments whole on rank 0
 * (its _load: ec_tp_load_state, emit_c_train.h) */
void cs_tp_save(const ec_ctx *x, nnc_sb *b);
nnc_status cs_write_build(const ec_ctx *x, const char *dir, nnc_error *err);

#endif
