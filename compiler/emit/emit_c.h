/* compiler/emit/emit_c.h — what the emitters that write a C API share: the
 * naming context (the model's prefix, C names of its dims, inputs and
 * outputs, where each tensor lives during a run) and helpers that write C
 * expressions and comments. The C SIMD and CUDA emitters build on it; each
 * sets the few fields that say how its generated code reaches memory. */
#ifndef NNC_EMIT_C_H
#define NNC_EMIT_C_H

#include "emit.h"
#include "emit_util.h"

/* Room for one C expression of sizes. */
#define EC_EXPR 512
/* Elements a work-item of a GPU elementwise kernel takes (device_loops.c;
 * NNC_UNROLL of the targets' kernel headers, which only the launch's size
 * follows). */
#define EC_UNROLL 4

typedef struct ec_ctx {
  const nnc_emit_request *r;
  const nnc_schedule *s;
  const nnc_graph *g;
  char p[64];              /* C prefix of every API name: the model's name */
  char P[64];              /* the same in capitals, for macros */
  char (*sym)[64];         /* C names of the symbols */
  char (*in_name)[64];     /* fields of <p>_inputs, per graph input */
  char (*out_name)[64];    /* fields of <p>_outputs, per graph output */
  int *param_of;           /* per tensor: index into g->params, or -1 */
  int *input_of;           /* per tensor: index into g->inputs, or -1 */
  int *output_of;          /* per tensor: first index into g->outputs, or -1 */
  const char *isa;         /* "avx2", ... for comments and flags */
  const char *gelu_erf;    /* a function of the target for the erf-form GELU of a 16-bit tensor (CUDA with 16-bit
                              storage: nnc_gelu_erf16), or NULL: the expression with erf; f32 tensors keep erf */
  int world;               /* the ranks of a parallel plan (tp:N's N times dp:M's M); 1: one process */
  int dp;                  /* --parallel=dp:M's M (each rank its own rows, gradients summed); 1 otherwise: under
                              tp:N the ranks share the rows and the loss, and each owns its weights' slices */
  const char *tpc, *dpc;   /* the model struct's communicators of tp:N's collectives (its tp group) and of
                              dp:M's (its dp group): "comm", the world, under one kind alone; "tp_comm" and
                              "dp_comm", split from it, under tp:N,dp:M; NULL when the plan has no such ranks */
  char plan[48];           /* the plan as --parallel spells it: "tp:2", "dp:4", "tp:2,dp:2" */
  bool zero1;              /* --parallel=dp:M,zero1: the optimizer state sharded over the ranks (c_simd_zero.c,
                              cuda_zero.c) */
  bool grads_summed_in_pass; /* dp training: the pass sums the gradients over the ranks (CUDA's buckets),
                                not _train_update */
  char cflags[256];        /* the target's flags for the Makefile */
  char tile_defs[256];     /* -DNNC_GEMM_MR=... from the tuner */
  /* A device target (CUDA) hands its kernels the run's buffers by value in
   * `c` (c.in.x, c.arena, c.weights) with every weight at a fixed offset
   * of one block; the C SIMD target reads them through pointers (c->in->x,
   * c->m->arena, c->m->w[i]). */
  bool device;
  int64_t *w_off;          /* device: per parameter, its byte offset in the weights block */
  int *packed_b;           /* C SIMD: per kernel, the slot of the weight B it reads packed at load
                              (c_simd_packed.c), or -1; NULL elsewhere */
  int npacked;             /* and how many weights are packed */
  const char *api_options; /* fields of <p>_options (NULL: threads) */
  const char *api_extra;   /* declarations the target adds to <p>.h, or NULL */
  bool train_main;         /* --train: train_<p>.c was written (emit_c_train_main.c) */
  bool gen_main;           /* --generate: generate_<p>.c was written (ec_write_gen_main) */
  /* How the loop kernels of device_loops.c reach an element where the
   * target's nnc_ld and nnc_st cannot take every type (OpenCL C has no
   * overloads): into buf, the text that reads element idx of tensor t
   * through pointer name as a float, the statement (no `;`) that stores the
   * float v there, and the one that copies element sidx of pointer src (of
   * t's dtype) there unchanged. NULL (CUDA): nnc_ld(name[idx]),
   * nnc_st(&name[idx], v) and name[idx] = src[sidx]. */
  void (*loop_load)(const struct ec_ctx *x, int t, const char *name, const char *idx, char *buf, size_t n);
  void (*loop_store)(const struct ec_ctx *x, int t, const char *name, const char *idx, const char *v, char *buf,
                     size_t n);
  void (*loop_copy)(const struct ec_ctx *x, int t, const char *name, const char *idx, const char *src,
                    const char *sidx, char *buf, size_t n);
} ec_ctx;

/* The C type of a tensor's elements: "float" or "int32_t". */
const char *ec_ctype(const nnc_graph *g, int t);
/* The same at the API (<model>.h): "uint16_t" for a bf16 or f16 output. */
const char *ec_api_ctype(const nnc_graph *g, int t);
/* A C expression for the first element of tensor t during a run (inside a
 * kernel function, where `c` is the run context): "c->in->ids",
 * "(float *)(c->m->arena + 4096)", ... */
char *ec_ptr(const ec_ctx *x, int t, char *buf, size_t n);
/* What a reader needs to know of tensor t, for a comment: "h.0.ln_1.weight [96]". */
char *ec_note(const ec_ctx *x, int t, char *buf, size_t n);
/* Whether the C text s names the identifier id (not as part of a longer one). */
bool ec_names(const char *s, const char *id);
/* Appends `head {`, the lines pre (may be NULL), `const <p>_dims *d = <dims>;`
 * when body reads d->, then body and `}`; frees body. */
void ec_emit_function(const ec_ctx *x, nnc_sb *b, const char *head, const char *pre, const char *dims, nnc_sb *body);
/* `lhs = <tensor t>;` indented by ind, with the tensor's name and shape in a comment. */
void ec_assign(const ec_ctx *x, nnc_sb *b, int ind, const char *lhs, int t);
/* "(a) * (b)" without the factors that are 1 or the parentheses a single
 * product does not need. */
char *ec_mul(const char *a, const char *b, char *buf, size_t n);
/* Tensor t's element count as a C int64_t expression of d->SYM. */
char *ec_elems(const ec_ctx *x, int t, char *buf, size_t n);
/* Product of dims [from, to) of tensor t ("1" when empty). */
char *ec_dims_product(const ec_ctx *x, int t, int from, int to, char *buf, size_t n);
/* "gpt2.lua:31" for a location. */
char *ec_where(nnc_srcloc loc, char *buf, size_t n);
/* "layernorm + linear + gelu": the ops of kernel k. */
char *ec_kernel_ops(const ec_ctx *x, int k, char *buf, size_t n);
/* What kernel k computes: the label of its main node, else its output's name. */
const char *ec_kernel_name(const ec_ctx *x, int k);
/* A float literal for v ("0.5f", "INFINITY"); dbl: a double literal. */
char *ec_literal(double v, bool dbl, char *buf, size_t n);

/* The expression of elementwise node n on operands a (and bb), computed in
 * float (dbl false) or double; out is the kernel's output tensor (masks read
 * its row and column indices i<rank-2> and j). */
void ec_node_expr(const ec_ctx *x, const nnc_node *n, const char *a, const char *bb, bool dbl, int out, char *buf,
                  size_t len);

/* Every tensor's element count at the maxima fits the kernels' int sizes. */
nnc_status ec_check_sizes(const ec_ctx *x, nnc_error *err);

/* Whether kernel k fuses a node of op. */
bool ec_kernel_has_op(const ec_ctx *x, const nnc_kernel *k, nnc_op op);
/* Whether kernel ki pools (or convolves depthwise) straight from an image:
 * a reduce kernel whose first node is an im2col (fusion's match_pool). */
bool ec_kernel_is_pool(const ec_ctx *x, int ki);

/* How a GEMM's batch dims map to one template call and the loops around it. */
typedef struct ec_gemm_shape {
  bool linear;
  int nb;              /* batch dims of the output */
  int first_inner;     /* batch dims [first_inner, nb) collapse into the call's batch */
  bool a_full[NNC_MAX_RANK], b_full[NNC_MAX_RANK];
  char M[EC_EXPR], N[EC_EXPR], K[EC_EXPR];
} ec_gemm_shape;
void ec_gemm_shape_of(const ec_ctx *x, const nnc_kernel *k, ec_gemm_shape *s);

/* The body of a function that launches the kernels in schedule order: per
 * kernel a comment (Lua line, name, fused ops, number, kind), then the
 * target's statement, which launch writes. With only (not NULL), just the
 * kernels k with only[k]; each run of the others becomes `SKIP(first,
 * last);`, a macro of the target's (emit_c_launches.c), commented with why. */
/* Element idx of tensor t through pointer name, as a float, in a device
 * loop (the target's ec_ctx.loop_load, or nnc_ld); and the statement
 * (without `;`) storing the float v there (loop_store, or nnc_st). */
char *ec_loop_ld(const ec_ctx *x, int t, const char *name, const char *idx, char *buf, size_t n);
char *ec_loop_st(const ec_ctx *x, int t, const char *name, const char *idx, const char *v, char *buf, size_t n);

void ec_emit_launches(const ec_ctx *x, nnc_sb *b, const bool *only, const char *why,
                      void (*launch)(const ec_ctx *x, nnc_sb *b, int k));
/* How many kernels run at load (nnc_kernel.at_load). */
int ec_load_kernels(const ec_ctx *x);
/* forward()'s launches: every kernel but those run at load (SKIP lines). */
void ec_emit_forward_launches(const ec_ctx *x, nnc_sb *b, void (*launch)(const ec_ctx *x, nnc_sb *b, int k));
/* prepare(): head, then the kernels run at load, and the SKIP macro forward()
 * uses for them (profiling: the condition to zero a skipped kernel's time,
 * skipped: the statement for kernel i_), then the target's own statements
 * more (C SIMD: its packed weights; NULL for none); nothing when there are
 * no kernels at load and no more. */
void ec_emit_prepare(const ec_ctx *x, nnc_sb *b, const char *profiling, const char *skipped, const char *head,
                     void (*launch)(const ec_ctx *x, nnc_sb *b, int k), const char *more);
/* A training build's forward_only() up to its launches: the comment,
 * NKERNELS_FORWARD, SKIP (when `profiling`, each skipped kernel i_ does
 * `skipped`), the function's first line `head`, then the launches of the
 * kernels the loss and the kept outputs need; the target closes it. false
 * (b->oom set) when out of memory. */
bool ec_emit_forward_only(const ec_ctx *x, nnc_sb *b, const char *profiling, const char *skipped, const char *head,
                          void (*launch)(const ec_ctx *x, nnc_sb *b, int k));

/* `static void kernel_cost(int k, const <p>_dims *d, double *flops, double
 * *bytes)`: each kernel's flops and the bytes it must move at the sizes d. */
/* What a view kernel's line in the forward says: a view, or weights joined
 * for one GEMM in place (passes/join_weights.c). */
const char *ec_view_note(const nnc_kernel *k);
/* --precision=fp8's layout of a weight held as e4m3 (NNC_QUANT_FP8_CHANNEL),
 * in bytes from its offset in the weights block: a tied weight's bf16
 * values first (what its other readers read), then the e4m3 [n, k] at q,
 * n f32 channel scales at scales (from the next 256 bytes), one f32 at
 * fixed (its GEMMs' A scale from nnc calibrate, 0: each row's own). A GPU's
 * int8 weight (w8a8, int8w; never tied) has the same layout, its fixed
 * unused; an int4 one (int4w) holds [n, k / 2] bytes at q (k even in bits
 * 0-3) and n x groups scales (a group of 128 k, row-major). A w8a8 one
 * ends with SmoothQuant's tail at smooth (16-byte aligned; 0: none): a
 * 16-byte header, its first int32 1 when on, then k f32 factors
 * (templates/cuda/quant_rows.cuh). */
typedef struct ec_fp8_held {
  int64_t n, k, groups, q, scales, fixed, smooth, bytes;
} ec_fp8_held;
ec_fp8_held ec_fp8_held_of(const nnc_tensor *t);
/* The bytes a value of weight t takes in x's folder (fp8's e4m3 and a GPU's
 * int8 1, a GPU's int4 0.5, else its dtype's): what its readers move. */
double ec_held_value_bytes(const ec_ctx *x, const nnc_tensor *t);
/* Whether the folder writes <model>_save_quantized (int8 or int4 weights,
 * one rank), and its declaration for the header (mode: "int8w", ...). */
bool ec_saves_quantized(const ec_ctx *x);
void ec_save_quantized_decl(const ec_ctx *x, const char *mode, int bits, nnc_sb *b);
/* Its definition's first lines, both targets': the signature, and the
 * checks of m, path and every weight loaded. */
void ec_save_quantized_head(const ec_ctx *x, nnc_sb *b);
/* The bytes weight t takes in a device target's weights block: its dtype's,
 * or its held form's when quantized (ec_fp8_held). */
int64_t ec_held_bytes(const nnc_graph *g, const nnc_tensor *t);
/* x->w_off: every weight of a device target in one block, each at a
 * multiple of 256 bytes (16-byte vector loads, cuBLASLt's preferred
 * alignment, OpenCL sub-buffers); w_off[nparams] is the block's size. */
nnc_status ec_layout_weights(ec_ctx *x, nnc_error *err);

void ec_emit_costs(const ec_ctx *x, nnc_sb *b);

/* libclang's check (validate.h) of the C files the shared writers put in dir:
 * <p>_graph.c, and bench_<p>.c where it needs no toolkit headers (bench). */
nnc_status ec_validate_c(const ec_ctx *x, const char *dir, bool bench, nnc_error *err);

/* Elements between consecutive indices of output dim od in operand t of an
 * elementwise chain (right-aligned to the output's rank), into buf; "" where
 * t broadcasts along it. The C SIMD and device loop writers share it. */
void ec_operand_stride(const ec_ctx *x, int t, int out, int od, char *buf, size_t n);

/* `  const <p>_dims dd = {.B = max[0], ...}, *d = &dd;`: the dims at the
 * maxima max, as d (a function sizing a buffer at the maxima opens so). */
void ec_emit_dims_at_max(const ec_ctx *x, nnc_sb *b);

/* `static size_t arena_need(const int64_t *max)`: each arena tensor at its
 * planned offset with its size at the maxima max; the arena ends where the
 * last one ends. */
void ec_emit_arena_need(const ec_ctx *x, nnc_sb *b);
/* `static size_t workspace_need(<params>)` after the comment `what`: the
 * largest of the kernels' workspaces at the maxima max, each kernel's line
 * from workspace(x, k, b) (a target's own: C SIMD's GEMMs and attentions,
 * CUDA's device calls); when no kernel writes one, `none` (the lines that
 * void the parameters) and 0. */
void ec_emit_workspace_need(const ec_ctx *x, nnc_sb *b, void (*workspace)(const ec_ctx *, int, nnc_sb *),
                            const char *what, const char *params, const char *none);

/* The tables at the top of every C-API target's <model>.c(u)
 * (emit_c_tables.c): `static const nnrt_st_desc manifest[]` (the caller
 * writes its comment first), sym_names and compiled_max (nothing when the
 * model has no symbolic dims), and kernel_table (name, where, kind, ops). */
void ec_emit_manifest(const ec_ctx *x, nnc_sb *b);
/* Dim d of parameter t as the weights file holds it: the whole tensor's,
 * for a parallel plan's slice too. */
int64_t ec_file_dim(const nnc_tensor *t, int d);
void ec_emit_sym_tables(const ec_ctx *x, nnc_sb *b);
void ec_emit_kernel_table(const ec_ctx *x, nnc_sb *b);

/* Pieces of <model>.c(u) every C-API target writes alike (they use the
 * model's fail(), load(), manifest, sym_names and m->loaded / m->max). */
void ec_emit_check_run(const ec_ctx *x, nnc_sb *b);
void ec_emit_load_files(const ec_ctx *x, nnc_sb *b);

/* An attention operand's view (schedule.h nnc_attn_view) as C: its base
 * tensor and the expressions of its offset and strides in elements. false
 * when operand i of kernel k (in ec_attn_operands' order: q, k, v, out, then
 * the backward's dout, dq, dk, dv) is its own contiguous tensor. */
typedef struct ec_attn_strides {
  int base;
  char off[EC_EXPR], sb[EC_EXPR], sh[EC_EXPR], si[EC_EXPR];
} ec_attn_strides;
bool ec_attn_view(const ec_ctx *x, const nnc_kernel *k, int i, ec_attn_strides *out);
/* For each operand of kernel k with a view: `<arg>q = <base> + off;` and its
 * <arg>q_sb / _sh / _st strides, overriding the contiguous ones (arg is
 * "a." or "a->"); cast, when not NULL, prefixes the pointer. */
void ec_attn_emit_views(const ec_ctx *x, const nnc_kernel *k, const char *arg, const char *cast, nnc_sb *b);

/* One operand of an attention kernel or of its backward as the templates
 * name it: the prefix of its stride fields (q -> q_sb, q_sh, q_st), its
 * pointer field, its tensor, whether its rows are keys (S) rather than
 * queries (T) and whether they are v's width (Dv) rather than D. */
typedef struct ec_attn_operand {
  const char *strides, *ptr;
  int t;
  bool keys, wide;
} ec_attn_operand;
/* Kernel k's operands in the templates' order (q, k, v, out; then dout, dq,
 * dk, dv for the backward); returns how many (at most 8). */
int ec_attn_operands(const nnc_kernel *k, ec_attn_operand *o);
/* The forward's descriptor of an attention or attention_grad kernel. */
const nnc_attention_desc *ec_attn_desc(const nnc_kernel *k);
/* Grouped-query attention as sdpa writes it (dsl_attn.c): q [..., G, T, D] with k and v [..., 1, S, D]. The
 * kernels then take the dims before the group as their batch and the group as their heads, k and v with a
 * head stride of 0: the G query heads read the same k and v. */
bool ec_attn_grouped(const nnc_graph *g, const nnc_attention_desc *a);

/* <model>_profile, and <model>_kernel_count with <model>_kernel_info_at:
 * alike in every C-API target, whose model holds profile, ns[NKERNELS],
 * has_run and the last run's dims (last), beside kernel_table and
 * kernel_cost. */
void ec_emit_profile(const ec_ctx *x, nnc_sb *b);
void ec_emit_kernel_info(const ec_ctx *x, nnc_sb *b);

/* <model>_comm_stats (the header's comment), for a parallel plan's model
 * whose struct holds its nnrt_comm *comm; nothing when world is 1. */
void ec_emit_comm_stats(const ec_ctx *x, nnc_sb *b);
/* The communicators of a parallel model beside its world `comm`: under
 * tp:N,dp:M its struct's tp_comm and dp_comm, create()'s split of the world
 * into them (after the world's size is checked; rc and e are create's);
 * destroy()'s lines for all of them (nothing when world is 1). */
void ec_emit_comm_fields(const ec_ctx *x, nnc_sb *b, int width);   /* width: the declarations' column */
void ec_emit_comm_split(const ec_ctx *x, nnc_sb *b);
void ec_emit_comm_destroy(const ec_ctx *x, nnc_sb *b);
/* A device run's `c.rank = ...;` line (the rank in its tp group, where a
 * vocabulary split's rows start), "" without tp:N. */
const char *ec_tp_rank_line(const ec_ctx *x);

/* How a GPU target turns the loop kernels of device_loops.c into its own
 * code: pointer declares tensor t as `name` for the kernel (a line of body
 * on CUDA, a kernel parameter on OpenCL); finish wraps body as kernel ki over
 * n items (a C expression of d->; "1" for one item) and writes its launcher,
 * and frees body. The kernel text may use NNC_LOOP(e, n), NNC_ONE_ITEM(),
 * nnc_ld, nnc_st and nnc_to_i32, which the target defines. */
typedef struct ec_loop_target {
  const ec_ctx *x;
  void *self;
  void (*pointer)(void *self, nnc_sb *body, const char *cnst, const char *name, int t);
  void (*finish)(void *self, int ki, const char *n, nnc_sb *body);
  /* A 16-byte type the kernels may copy through and the function making one
   * of four 32-bit words (CUDA's uint4, make_uint4), or NULL: element by element */
  const char *vec16, *vec16_make;
  /* This process's rank in the plan as kernel text (CUDA's run_args c.rank),
   * or NULL where the target runs no parallel plan */
  const char *rank;
  /* Whether rope's products are written as round-to-nearest intrinsics
   * (CUDA's __fmul_rn, __fadd_rn, __fsub_rn): each product and the sum
   * rounded on its own, so that nvcc does not fuse a * c - b * s into an
   * FMA and the attention's folded rope (attention_rope.cuh) writes the same
   * bits; false: plain operators */
  bool rn_products;
  /* Whether the target's loop header has nnc_vld, nnc_vst, nnc_aligned16,
   * nnc_vec_threads and nnc_gather (CUDA's loops.cuh): elementwise chains and
   * gathers whose rows are whole 16-byte vectors take them a vector a step */
  bool vec_loops;
  /* As finish, for a kernel whose text chooses its own work (the row and
   * reduce kernels of chains: NNC_ROW, NNC_SLOT_FOR, nnc_row_sum,
   * NNC_SHARED, NNC_SYNC, which the target defines): launched as `blocks`
   * blocks (an expression) of `threads` threads; NULL where the target
   * fuses no chains into them (nnc_emitter.row_loops) */
  void (*finish_grid)(void *self, int ki, const char *blocks, const char *threads, nnc_sb *body);
} ec_loop_target;

/* How the recurrent steps (emit_recurrent.c) reach an element of tensor t
 * through pointer name: into buf, the text reading element idx as a float,
 * and the statement (no `;`) storing the float v there. */
typedef struct ec_access {
  const ec_ctx *x;
  char *(*ld)(const struct ec_access *a, int t, const char *name, const char *idx, char *buf, size_t n);
  char *(*st)(const struct ec_access *a, int t, const char *name, const char *idx, const char *v, char *buf,
              size_t n);
  /* A function dot(const float *a, const float *b, n) of the generated file
   * for the recurrent products on raw f32 pointers (C SIMD), or NULL: loops
   * through ld. */
  const char *dot;
} ec_access;
/* The steps of batch row b of lstm_scan or gru_scan node n, each line
 * indented by ind, with indices of C type I; the text around declares b, T
 * and H and the pointers xw, w, bias, [h0, c0], y, hn, [cn]. */
void ec_emit_recurrent_row(const ec_ctx *x, const nnc_node *n, const ec_access *a, const char *I, const char *ind,
                           nnc_sb *b);
/* The same for lstm_scan_grad or gru_scan_grad (emit_recurrent_grad.c), the
 * pointers named as ir.h names their operands (dxw, da, dh0, dc0, hprev, saved). */
void ec_emit_recurrent_grad_row(const ec_ctx *x, const nnc_node *n, const ec_access *a, const char *I,
                                const char *ind, nnc_sb *b);
/* A scan's (or its gradient's) kernel on a device target: a work-item a batch row. */
nnc_status ec_emit_device_recurrent(const ec_loop_target *lt, int ki, nnc_error *err);

/* A rope kernel on a device target: a work-item a rotated pair or a passed entry (emit_rope.c). */
nnc_status ec_emit_device_rope(const ec_loop_target *lt, int ki, nnc_error *err);
nnc_status ec_emit_device_kv_append(const ec_loop_target *lt, int ki, nnc_error *err);

/* The kernel of an elementwise, move, gather, reduce, loss or non-last-axis
 * softmax kernel ki. */
nnc_status ec_emit_device_loop(const ec_loop_target *lt, int ki, nnc_error *err);

/* Fills the names of x for request r (ec_ctx_free releases them). */
nnc_status ec_ctx_init(ec_ctx *x, const nnc_emit_request *r, nnc_error *err);
void ec_ctx_free(ec_ctx *x);

/* The nnrt_dtype a weight of dtype t is loaded as: "NNRT_F32" or "NNRT_I32". */
const char *ec_nnrt_dtype(nnc_dtype t);

/* The generic API pieces: <model>.h, <model>_graph.c and bench_<model>.c. */
nnc_status ec_write_header(const ec_ctx *x, const char *dir, nnc_error *err);
nnc_status ec_write_graph(const ec_ctx *x, const char *dir, nnc_error *err);
/* weights_manifest.json: name, dtype and shape of every weight. */
nnc_status ec_write_manifest(const ec_ctx *x, const char *dir, nnc_error *err);
nnc_status ec_write_bench(const ec_ctx *x, const char *dir, nnc_error *err);

#endif
