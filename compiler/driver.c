/* compiler/driver.c — model file to output folder. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

#include "emit/emit.h"
#include "frontend/frontend.h"
#include "measure.h"
#include "passes/passes.h"
#include "tune/tune.h"

/* --explain: what the API's float outputs are, where --precision narrows the
 * storage (under f32 and tf32 nothing changes, and nothing is said). */
static void explain_outputs(FILE *f, const nnc_graph *g, const nnc_precision *p) {
  if (p->storage == NNC_F32) return;
  for (int i = 0; i < g->noutputs; i++) {
    const nnc_tensor *t = &g->tensors[g->outputs[i].tensor];
    if (!nnc_dtype_is_float(t->dtype)) continue;
    char sh[256];
    nnc_shape_format(g, t->rank, t->shape, sh, sizeof sh);
    if (t->dtype == p->storage && p->storage_outputs)
      fprintf(f, "output %s: %s%s, left in the storage dtype (--outputs=storage: no cast to f32)\n", g->outputs[i].name,
              nnc_dtype_name(t->dtype), sh);
    else if (t->producer >= 0 && g->nodes[t->producer].op == NNC_OP_CAST)
      fprintf(f, "output %s: %s%s, cast from %s where it leaves (--outputs=storage would keep %s)\n",
              g->outputs[i].name, nnc_dtype_name(t->dtype), sh, nnc_dtype_name(p->storage), nnc_dtype_name(p->storage));
  }
}

/* --explain under a parallel plan: the weights each rank slices and every
 * collective, with the bytes each rank sends at the maxima. */
static void explain_plan(FILE *f, const nnc_graph *g, int dp) {
  if (g->ranks <= 1) return;
  int sliced = 0, reduces = 0, gathers = 0;
  double bytes = 0;
  for (int i = 0; i < g->nparams; i++) sliced += g->tensors[g->params[i]].shard.parts > 0;
  fprintf(f, "parallel plan: tp:%d, %d of %d weights sliced (--emit=ir shows which)\n", g->ranks, sliced, g->nparams);
  if (dp > 1)
    fprintf(f, "parallel plan: dp:%d beside it, %d ranks: rank = dp index * %d + tp index; the collectives below run "
            "in each tp group, the gradients' sums in each dp group\n", dp, g->ranks * dp, g->ranks);
  for (int n = 0; n < g->nnodes; n++) {
    const nnc_node *nd = &g->nodes[n];
    if (nd->dead || (nd->op != NNC_OP_ALL_REDUCE && nd->op != NNC_OP_ALL_GATHER)) continue;
    /* what a rank hands the communicator, as its byte counters count it: the tensor an all_reduce sums,
     * the slice an all_gather contributes */
    const nnc_tensor *t = &g->tensors[nd->in[0]];
    char sh[128];
    double b = (double)nnc_tensor_max_elems(g, t) * nnc_dtype_size(t->dtype);
    fprintf(f, "collective: %s %s %s%s over %d ranks, %.3f MB a call at the maxima (%s:%d)\n",
            nnc_op_info_of(nd->op)->name, nd->label, nnc_dtype_name(t->dtype),
            nnc_shape_format(g, t->rank, t->shape, sh, sizeof sh), nd->attrs.ranks, b / 1e6,
            nd->loc.file ? nd->loc.file : "?", nd->loc.line);
    bytes += b;
    if (nd->op == NNC_OP_ALL_REDUCE) reduces++;
    else gathers++;
  }
  fprintf(f, "collectives: %d all_reduces, %d all_gathers, %.3f MB a run at the maxima\n", reduces, gathers,
          bytes / 1e6);
}

/* options.cuda_graphs's default in the folder: on, unless --cuda-graphs=off
 * or a --generate decoder (its decode steps have new dims each step, so
 * each would capture a graph instead of replaying one). */
static bool graphs_default(const nnc_build_opts *o) {
  return o->cuda_graphs > 0 || (o->cuda_graphs == 0 && !o->generate);
}

nnc_status nnc_build(const nnc_build_opts *o, nnc_error *err) {
  nnc_frontend_opts fo = {.path = o->model, .defines = o->defines, .ndefines = o->ndefines, .training = o->train,
                          .generating = o->generate};
  nnc_autodiff_opts ad = {.loss = o->loss};
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  nnc_target_desc t;
  nnc_tile *tiles = NULL;
  /* the target first: an impossible target fails before the model runs */
  nnc_precision prec;
  nnc_recompute rc = NNC_RECOMPUTE_NONE;
  int copies = 0;
  nnc_parallel par;
  nnc_quantize quant = NNC_QUANTIZE_NONE;
  int quantized = 0, fused = 0;
  nnc_graph whole;   /* under a parallel plan, horizontal fusion or --gelu=tanh: the model as written, for bench --check */
  nnc_graph_init(&whole);
  nnc_status st = nnc_target_describe(o->target, &t, err);
  if (!st) st = nnc_parallel_parse(o->parallel, &par, err);
  if (!st) st = nnc_parallel_supported(&par, o->train, o->generate, t.name, nnc_emit_has_collectives(t.family), err);
  if (!st) st = nnc_precision_parse(o->precision, &prec, err);
  if (!st) st = nnc_recompute_parse(o->recompute, &rc, err);
  if (!st && rc != NNC_RECOMPUTE_NONE && !o->train)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--recompute=%s: expected --train (only a training step keeps "
                    "activations for a backward)", nnc_recompute_name(rc));
  if (!st) st = nnc_outputs_parse(o->outputs, &prec, err);
  if (!st) st = nnc_quantize_parse(o->quantize, &quant, err);
  /* e4m3 GEMMs: cuBLASLt's FP8 kernels need Ada's or Hopper's tensor cores */
  if (!st && prec.fp8 && (t.family != NNC_FAMILY_CUDA || t.cuda.sm < 89))
    st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--precision=fp8: target %s has no FP8 tensor cores; expected "
                    "cuda-sm89, cuda-sm90 or cuda-sm90a (or --precision=bf16)", t.name);
  if (!st && prec.fp8 && quant != NNC_QUANTIZE_NONE)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--precision=fp8: expected no --quantize (fp8 already holds the "
                    "linear weights as e4m3), found --quantize=%s", nnc_quantize_name(quant));
  if (!st && prec.fp8 && o->train)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--precision=fp8: expected no --train (FP8 training is not built; "
                    "train in bf16 and compile the checkpoint with fp8)");
  if (!st && prec.fp8 && (par.tp > 1 || par.dp > 1))
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--precision=fp8: expected no --parallel (a rank's slices of an "
                    "e4m3 weight are not built yet)");
  if (!st && prec.fp8) quant = NNC_QUANTIZE_FP8;
  /* int8 and int4 weights: the C SIMD GEMMs read every mode, CUDA's w8a8's
   * (mma.sync's int8 m16n8k32: sm_80 and up), int8w's and int4w's, OpenCL
   * none yet; training updates float weights, and a plan slices the file's
   * tensors */
  bool here = (quant == NNC_QUANTIZE_W8A8 && nnc_emit_has_w8a8(t.family)) ||
              (quant == NNC_QUANTIZE_INT8W && nnc_emit_has_int8w(t.family)) ||
              (quant == NNC_QUANTIZE_INT4W && nnc_emit_has_int4w(t.family));
  if (!st && quant != NNC_QUANTIZE_NONE && quant != NNC_QUANTIZE_FP8 && !here)
    st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--quantize=%s: target %s has no %s GEMM yet; expected a c-simd "
                    "target (c-simd, c-avx2, ...)%s or --quantize=none", nnc_quantize_name(quant), t.name,
                    quant == NNC_QUANTIZE_INT4W ? "int4" : "int8",
                    t.family == NNC_FAMILY_CUDA ? ", cuda-sm80 and up" : "");
  /* the quantized folders carry w8a8's kernels (one header), built and run from sm_80 on only */
  if (!st && here && quant != NNC_QUANTIZE_FP8 && t.family == NNC_FAMILY_CUDA && t.cuda.sm < 80)
    st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--quantize=%s: target %s is not built for (its %s kernels are "
                    "sm_80 and up%s); expected cuda-sm80 or newer", nnc_quantize_name(quant), t.name,
                    quant == NNC_QUANTIZE_INT4W ? "int4" : "int8",
                    quant == NNC_QUANTIZE_W8A8 ? ": int8 mma.sync m16n8k32" : "");
  if (!st && quant != NNC_QUANTIZE_NONE && o->train)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--quantize=%s: expected no --train (training updates float "
                    "weights; quantize the trained checkpoint)", nnc_quantize_name(quant));
  if (!st && quant != NNC_QUANTIZE_NONE && (par.tp > 1 || par.dp > 1))
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--quantize=%s: expected no --parallel (a rank's slices of a "
                    "quantized weight are not built yet)", nnc_quantize_name(quant));
  prec.f32_weight_math = nnc_emit_has_f32_weights(t.family);
  /* the OpenCL emitter writes f32 outputs only: refused here, the one place
   * that knows both the option and the target */
  if (!st && prec.storage_outputs && t.family == NNC_FAMILY_OPENCL)
    st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--outputs=storage: target %s returns f32 outputs only; expected "
                    "--outputs=f32 (the cuda-* targets write narrow outputs)", t.name);
  if (!st && t.family == NNC_FAMILY_C_SIMD && strcmp(prec.name, "f32") != 0)
    st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--precision=%s: target %s computes and stores f32; expected "
                    "--precision=f32 (narrow storage and tf32 are for GPU targets)", prec.name, t.name);
  /* Turing's tensor cores take f16 only: bf16 and tf32 arrived with sm_80 */
  if (!st && t.family == NNC_FAMILY_CUDA && t.cuda.sm < 80 && (prec.storage == NNC_BF16 || prec.tf32))
    st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--precision=%s: target %s has no %s tensor cores; expected "
                    "--precision=f32 or f16 (or a cuda-sm80 target or newer)", prec.name, t.name, prec.name);
  if (!st && o->gelu_tanh) st = nnc_gelu_tanh_allowed(&prec, o->train, err);
  if (!st && o->cuda_graphs != 0 && t.family != NNC_FAMILY_CUDA)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--cuda-graphs: expected a cuda-* target, found %s", t.name);
  fo.channel_run = nnc_emit_channel_run(t.family);
  if (!st) st = nnc_frontend_load(&fo, &g, err);
  if (!st && o->train) st = nnc_pass_check(&g, err);
  if (!st) {
    ad.primitive_attention = !nnc_emit_has_grad_op(t.family, NNC_OP_ATTENTION_GRAD);
    ad.primitive_norms = !nnc_emit_has_grad_op(t.family, NNC_OP_LAYERNORM_GRAD);
  }
  /* a tensor-parallel plan splits the forward, whose backward autodiff then
   * writes with the plan's collectives (their gradients, the partial sums
   * of column-split layers' inputs all_reduced) */
  if (!st && par.tp > 1) {
    st = nnc_frontend_load(&fo, &whole, err);
    if (!st && o->train) st = nnc_pass_check(&whole, err);
    if (!st && o->train) st = nnc_pass_autodiff(&whole, &ad, err);
    if (!st) st = nnc_pass_check(&whole, err);
    if (!st) st = nnc_pass_precision(&whole, &prec, err);
    if (!st) st = nnc_pass_parallel(&g, &par, err);
  }
  if (!st && o->train) st = nnc_pass_autodiff(&g, &ad, err);
  if (!st) st = nnc_pass_precision(&g, &prec, err);
  if (!st && o->train) st = nnc_pass_recompute(&g, rc, &copies, err);
  bool at_load = !o->train && nnc_emit_has_hoist_weights(t.family);
  if (!st && nnc_hfuse_wanted(o->no_hfuse, o->train, &par, quant, at_load)) st = nnc_pass_hfuse(&g, &fused, err);
  int approx = 0;
  if (!st && o->gelu_tanh) st = nnc_pass_gelu_tanh(&g, &approx, err);
  /* bench --check then compares with the model as written: a fusion that
   * cut the wrong columns fails it, and --gelu=tanh shows what it costs */
  bool as_written = (fused || approx) && par.tp <= 1;
  if (!st && as_written) st = nnc_frontend_load(&fo, &whole, err);
  if (!st && as_written) st = nnc_pass_precision(&whole, &prec, err);
  nnc_compile_opts co = {.no_gemm_aux = !nnc_emit_has_gemm_aux(t.family),
                         .no_gemm_bgrad = !nnc_emit_has_gemm_bgrad(t.family),
                         .no_gemm_act_last = !nnc_emit_has_gemm_act_last(t.family),
                         .hoist_weights = at_load,
                         .gemm_windows = nnc_emit_gemm_windows(&t),
                         .gemm_windows_types = nnc_emit_gemm_windows_types(t.family),
                         .channel_run = nnc_emit_channel_run(t.family),
                         .gemm_pool = nnc_emit_has_gemm_pool(t.family),
                         .reduce_windows = nnc_emit_has_reduce_windows(t.family),
                         .attention_append = nnc_emit_has_attention_append(t.family),
                         .attention_rope = nnc_emit_has_attention_rope(t.family),
                         .gather_loops = nnc_emit_has_gather_loops(t.family),
                         .row_loops = nnc_emit_has_row_loops(t.family),
                         /* not where the GEMM's norm kernel quantizes A (fp8, w8a8) */
                         .gemm_norm_rows = nnc_emit_has_row_loops(t.family) && quant == NNC_QUANTIZE_NONE,
                         .reduce_loops = !o->train && nnc_emit_has_row_loops(t.family),
                         /* not under quantization, which gives W_ih to the GEMM it would leave */
                         .scan_input = quant == NNC_QUANTIZE_NONE && nnc_emit_has_scan_input(t.family),
                         /* not under quantization, whose GEMMs read other weights, nor training,
                          * whose backward reads the sum */
                         .gemm_post_norm = quant == NNC_QUANTIZE_NONE && !o->train ? nnc_emit_gemm_post_norm(&t) : 0};
  if (!st) st = nnc_compile_graph_for(&g, &co, &s, err);
  if (!st) st = nnc_pass_quantize(&g, quant, t.family != NNC_FAMILY_C_SIMD, &quantized, err);
  if (!st) {
    tiles = calloc((size_t)s.nk + 1, sizeof *tiles);
    if (!tiles) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while tuning");
    for (int k = 0; !st && k < s.nk; k++) st = nnc_tune_kernel(&t, &s, k, &tiles[k], err);
  }
  if (!st && o->measure && t.family != NNC_FAMILY_CUDA)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--tune=measure: expected a cuda-* target, found %s "
                    "(the other targets have one implementation per kernel)", t.name);
  if (!st && o->measure) {
    nnc_emit_request r = {&s, &t, tiles, o->model, o->out_dir, prec, graphs_default(o), false, false, NULL, 0, false};
    st = nnc_measure(&r, tiles, o->tune_file, stderr, err);
  }
  if (!st && o->explain && copies)
    fprintf(o->explain, "--recompute=%s: the backward makes %d forward nodes again instead of keeping their outputs\n",
            nnc_recompute_name(rc), copies);
  if (!st && o->explain && quant == NNC_QUANTIZE_FP8)
    fprintf(o->explain, "--precision=fp8: %d linear weights held as e4m3 [N, K] with a scale per output channel, "
            "quantized on the GPU when the float weights load (--emit=ir marks them); their GEMMs quantize each row "
            "of A to e4m3 as they run\n", quantized);
  else if (!st && o->explain && quant != NNC_QUANTIZE_NONE)
    fprintf(o->explain, "--quantize=%s: %d linear weights held as %s, quantized "
            "when the f32 weights load%s (--emit=ir marks them)%s\n", nnc_quantize_name(quant), quantized,
            quant == NNC_QUANTIZE_INT4W && t.family == NNC_FAMILY_CUDA
              ? "int4 [N, K / 2] with a scale per group of 128 k of an output channel (K a multiple of 32)"
            : quant == NNC_QUANTIZE_INT4W ? "int4 with a scale per group of 128 k of an output channel"
            : t.family == NNC_FAMILY_CUDA ? "int8 [N, K] with a scale per output channel (K a multiple of 16)"
                                          : "int8 with a scale per output channel",
            t.family == NNC_FAMILY_CUDA ? ", on the GPU" : "",
            quant == NNC_QUANTIZE_W8A8 ? "; their GEMMs quantize each row of A to int8 as they run" : "");
  if (!st && o->explain && o->gelu_tanh)
    fprintf(o->explain, "--gelu=tanh: %d erf-form GELUs computed in the tanh form (at most 4.7e-4 apart); "
            "bench --check compares with the erf form\n", approx);
  if (!st && o->explain) {
    nnc_hfuse_explain(o->explain, &g);
    nnc_tune_explain(o->explain, &t, &s, tiles);
    explain_outputs(o->explain, &g, &prec);
    explain_plan(o->explain, &g, par.dp);
  }
  if (!st && o->out_dir) {
    nnc_emit_request r = {&s, &t, tiles, o->model, o->out_dir, prec, graphs_default(o), false, o->train,
                          par.tp > 1 || fused || approx ? &whole : NULL, par.dp, par.zero1};
    st = nnc_emit(&r, err);
  }
  free(tiles);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
  nnc_graph_free(&whole);
  return st;
}
