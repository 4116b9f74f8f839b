/* compiler/emit/emit.h — the one interface every target's emitter implements.
 *
 * An emitter turns a planned schedule into an output folder that builds with
 * the target's own toolchain and without nnc: the model's C API header, its
 * sources, the kernels and runtime copied from templates/ and runtime/, a
 * build file, the benchmark harness, a weights manifest and a README.
 * nnc_emit picks the emitter of the target's family from one table and makes
 * the folder appear whole or not at all. */
#ifndef NNC_EMIT_H
#define NNC_EMIT_H

#include "../ir/schedule.h"
#include "../passes/passes.h"
#include "../tune/tune.h"

typedef struct nnc_emit_request {
  const nnc_schedule *s;          /* planned: s->plan is filled */
  const nnc_target_desc *target;  /* the chip the code is for */
  const nnc_tile *tiles;          /* s->nk tile choices, from nnc_tune_kernel */
  const char *model_path;         /* the model file as the user named it */
  const char *out_dir;            /* the folder to write */
  nnc_precision precision;        /* storage dtype (already applied to the graph), tf32 */
  bool cuda_graphs;               /* CUDA: options.cuda_graphs defaults to on */
  bool probe;                     /* nnc --tune=measure's probe: every implementation of the
                                     kernels that have several, and the harness's --tune */
  bool train;                     /* --train: the graph is the training step (C SIMD adds train_step) */
  const nnc_graph *whole;         /* the graph before a parallel plan (every weight whole), horizontal
                                     fusion (the linears as written) or --gelu=tanh (GELU's erf form): the
                                     graph bench --check evaluates; NULL: the schedule's graph */
  int dp;                         /* --parallel=dp:M's M (training: the gradients summed over M ranks); 0 or 1: none */
  bool zero1;                     /* --parallel=dp:M,zero1: each rank keeps 1/M of the optimizer state, the
                                     gradients reduce-scattered and the updated weights all-gathered */
} nnc_emit_request;

/* The implementations a target has for one kernel, for --tune=measure. */
#define NNC_MAX_VARIANTS 12
typedef struct nnc_kernel_variants {
  int n;                                /* 0 or 1: nothing to choose */
  char name[NNC_MAX_VARIANTS][24];      /* name[0]: the analytic rule's choice */
  char key[256];                        /* what its time depends on: kind, shape, dtypes, fusions */
} nnc_kernel_variants;

typedef struct nnc_emitter {
  nnc_target_family family;
  /* Writes every file of the output into dir (which exists and is empty). */
  nnc_status (*emit)(const nnc_emit_request *r, const char *dir, nnc_error *err);
  /* Fills out[k] for each of r->s->nk kernels; NULL: one implementation each. */
  nnc_status (*variants)(const nnc_emit_request *r, nnc_kernel_variants *out, nnc_error *err);
  /* Whether it writes the attention op and its flash backward, and the
   * norms' fused backward (--train); without, they train as primitive ops. */
  bool attention_grad, norm_grad;
  /* Whether its GEMMs save an activation's input and multiply by an
   * activation's derivative (nnc_gemm_desc.aux_kind); without, an activation
   * with a gradient and the gradient stay elementwise kernels. */
  bool gemm_aux;
  /* Whether its GEMMs write a weight gradient's bias gradient
   * (nnc_gemm_desc.bgrad_from); without, it stays a reduction kernel. */
  bool gemm_bgrad;
  /* Whether its GEMMs apply an activation after the residual
   * (nnc_gemm_desc.act_last); without, it is an elementwise kernel. */
  bool gemm_act_last;
  /* Whether its weights may be of mixed dtypes under narrow storage: f32
   * ones for arithmetic on weights alone (nnc_precision.f32_weight_math);
   * without, every weight has the storage dtype. */
  bool f32_weights;
  /* Whether it runs the kernels of weights alone once the weights are
   * loaded (nnc_kernel.at_load, its prepare()); without, they run every run. */
  bool hoist_weights;
  /* Whether it writes collectives (all_reduce) as calls to the runtime's
   * communicator, so a parallel plan (--parallel) can run on it. */
  bool collectives;
  /* The most outputs (N) of a GEMM on target t that gathers A from an
   * im2col's image (nnc_gemm_desc.windowed, an implicit convolution); 0 or
   * NULL: never. */
  int (*gemm_windows)(const nnc_target_desc *t);
  /* Whether it writes a reduce kernel of an im2col and a max or mean over
   * its taps (pooling) as one kernel reading the image. */
  bool reduce_windows;
  /* Whether its attention takes a kv_append's new rows and writes them into
   * the cache it reads (nnc_attention_desc.append, passes/fold_append.c), so
   * that the append is no kernel of its own. */
  bool attention_append;
  /* Whether its attention also rotates q's rows and the new key rows of a
   * rope that only it reads (nnc_attention_desc.rope, passes/fold_rope.c),
   * so that the ropes of a decode step are no kernels of their own. */
  bool attention_rope;
  /* Whether its GEMMs read --quantize=w8a8's int8 weights and quantize
   * their A to int8 (c_simd_quant.c, cuda_w8a8.c); without, the mode is
   * refused. */
  bool w8a8;
  /* The most columns (N) of a GEMM on target t whose rows a layernorm that
   * alone reads them normalizes in its epilogue (nnc_gemm_desc.post_norm,
   * passes/fold_post_norm.c); 0 or NULL: never. */
  int (*gemm_post_norm)(const nnc_target_desc *t);
  /* Whether its elementwise loops read an embedding's table through the ids
   * (nnc_compile_opts.gather_loops), an id outside the table giving NaN as
   * its lookup kernel does; without, the lookup is a kernel of its own
   * (C SIMD's stops the run with a message naming the id). */
  bool gather_loops;
  /* Whether it writes a layernorm or rmsnorm whose input is an elementwise
   * chain as one kernel that computes each row and normalizes it
   * (nnc_compile_opts.row_loops), and a sum, mean or max with the chain
   * that alone feeds it and the elementwise ops that alone read it
   * (nnc_compile_opts.reduce_loops); without, the chain is a kernel of its
   * own and writes its result. */
  bool row_loops;
  /* Whether its GEMMs read --quantize=int8w's int8 weights with A as it is
   * (c_simd_quant.c, cuda_weight_only.c); without, the mode is refused. */
  bool int8w;
  /* Whether its GEMMs read --quantize=int4w's int4 weights (groups of 128
   * k) with A as it is; without, the mode is refused. */
  bool int4w;
  /* Whether its lstm_scan takes the linear computing its xw into each
   * step's GEMM (nnc_compile_opts.scan_input); without, xw is one GEMM over
   * every step first (the better choice where that GEMM fills a GPU). */
  bool scan_input;
  /* The image dtypes of the GEMMs that gemm_windows allows, bit 1u <<
   * nnc_dtype each. */
  unsigned gemm_windows_types;
  /* The multiple its windows' kernels want an NHWC image's channels (and a
   * windowed GEMM's outputs) to be: the front-end pads an image's channels
   * up to it before tap-major windows (frontend/dsl_conv.c). CUDA's move 16
   * bytes at once (8 bf16); C SIMD's read any run (an MNIST image's one
   * channel stays one, not eight: 8x the flops of its first convolution). */
  int channel_run;
  /* Whether its GEMMs max-pool their result before storing it
   * (nnc_gemm_desc.pooled); without, the pool is a kernel of its own. */
  bool gemm_pool;
} nnc_emitter;

/* Whether the emitter of family f writes the fused gradient op `op`
 * (attention_grad, layernorm_grad or rmsnorm_grad) under --train. */
bool nnc_emit_has_grad_op(nnc_target_family f, nnc_op op);
/* Whether the emitter of family f writes GEMMs with an aux (nnc_emitter.gemm_aux). */
bool nnc_emit_has_gemm_aux(nnc_target_family f);
/* Whether the emitter of family f runs weight-only kernels at load (nnc_emitter.hoist_weights). */
bool nnc_emit_has_hoist_weights(nnc_target_family f);
/* Whether the emitter of family f writes collectives (nnc_emitter.collectives). */
bool nnc_emit_has_collectives(nnc_target_family f);
/* Whether the emitter of family f writes GEMMs with a bias gradient (nnc_emitter.gemm_bgrad). */
bool nnc_emit_has_gemm_bgrad(nnc_target_family f);
/* Whether the emitter of family f applies a GEMM's activation after its residual (nnc_emitter.gemm_act_last). */
bool nnc_emit_has_gemm_act_last(nnc_target_family f);
/* The most outputs of a GEMM that the emitter of t's family gathers from windows on t (nnc_emitter.gemm_windows). */
int nnc_emit_gemm_windows(const nnc_target_desc *t);
/* Whether the GEMMs of family f pool their result (nnc_emitter.gemm_pool). */
bool nnc_emit_has_gemm_pool(nnc_target_family f);
/* The channel multiple of the windows on family f (nnc_emitter.channel_run; 8 for none). */
int nnc_emit_channel_run(nnc_target_family f);
/* The image dtypes of those GEMMs (nnc_emitter.gemm_windows_types). */
unsigned nnc_emit_gemm_windows_types(nnc_target_family f);
/* Whether the emitter of family f pools straight from images (nnc_emitter.reduce_windows). */
bool nnc_emit_has_reduce_windows(nnc_target_family f);
/* Whether the emitter of family f folds kv appends into the attention (nnc_emitter.attention_append). */
bool nnc_emit_has_attention_append(nnc_target_family f);
/* Whether the emitter of family f folds ropes into the attention (nnc_emitter.attention_rope). */
bool nnc_emit_has_attention_rope(nnc_target_family f);
/* Whether the emitter of family f writes --quantize=w8a8 (nnc_emitter.w8a8),
 * --quantize=int8w (nnc_emitter.int8w), --quantize=int4w (nnc_emitter.int4w). */
bool nnc_emit_has_w8a8(nnc_target_family f);
bool nnc_emit_has_int8w(nnc_target_family f);
bool nnc_emit_has_int4w(nnc_target_family f);
/* The most columns of a GEMM with a post-norm on t (nnc_emitter.gemm_post_norm). */
int nnc_emit_gemm_post_norm(const nnc_target_desc *t);
/* Whether the emitter of family f reads embeddings inside elementwise loops (nnc_emitter.gather_loops). */
bool nnc_emit_has_gather_loops(nnc_target_family f);
/* Whether the emitter of family f fuses chains into row and reduce kernels (nnc_emitter.row_loops). */
bool nnc_emit_has_row_loops(nnc_target_family f);
/* Whether the emitter of family f folds an LSTM's input projection into its scan (nnc_emitter.scan_input). */
bool nnc_emit_has_scan_input(nnc_target_family f);
/* Whether the emitter of family f takes weights of mixed dtypes (nnc_emitter.f32_weights). */
bool nnc_emit_has_f32_weights(nnc_target_family f);

/* The variants of every kernel of r (out holds r->s->nk entries; all n = 0
 * on a target without choices). */
nnc_status nnc_emit_variants(const nnc_emit_request *r, nnc_kernel_variants *out, nnc_error *err);

/* Writes r->out_dir through a temporary folder beside it, renamed into place
 * when the emitter succeeded; on failure nothing is left behind. */
nnc_status nnc_emit(const nnc_emit_request *r, nnc_error *err);

#endif
