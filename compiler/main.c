/* compiler/main.c — the nnc command line.
 *
 * Runs the model through the front-end and the passes, then prints the view
 * asked for with --emit. Exit codes are the nnc_status values (status.h), so a
 * script can tell a broken model (2, 3) from a bad command line (1). Output
 * files are written under a temporary name and renamed at the end, so a failed
 * compile leaves nothing behind. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "frontend/frontend.h"
#include "ir/print.h"
#include "nnc_config.h"
#include "passes/passes.h"
#include "random_weights.h"
#include "tune/target.h"
#include "calibrate.h"
#include "smooth.h"

typedef enum { EMIT_NONE, EMIT_IR, EMIT_DOT, EMIT_PLAN } emit_kind;

typedef struct cli {
  bool weights;          /* `nnc weights`: write random weights instead */
  bool calibrate;        /* `nnc calibrate`: fp8's static activation scales (calibrate.h) */
  const char *cal_weights, *cal_data, *cal_method;   /* its --weights, --data, --method */
  const char *cal_smooth;                           /* its --smooth=ALPHA (SmoothQuant's migration) */
  unsigned long long seed;
  const char *model;
  const char *target;
  const char *precision;
  const char *outputs;   /* --outputs=f32|storage; NULL: f32 */
  const char *out;
  emit_kind emit;
  bool explain;
  int cuda_graphs;   /* --cuda-graphs[=on|off]: 1 or -1; 0 not given */
  bool train;            /* --train */
  bool generate;         /* --generate */
  const char *loss;      /* --loss=NAME */
  const char *recompute; /* --recompute=none|gelu|norm|block; NULL: none */
  const char *parallel;  /* --parallel=tp:N; NULL: one process */
  const char *quantize;  /* --quantize=none|int8w|w8a8|int4w; NULL: none */
  int hfuse;             /* --hfuse[=on|off]: 1 or -1; 0 not given (on) */
  bool gelu_tanh;        /* --gelu=tanh */
  const char *tune;      /* --tune=analytic|measure; NULL: analytic */
  const char *tune_file;
  const char *defines[256];
  int ndefines;
} cli;

static void usage(FILE *f) {
  fprintf(f,
    "usage: nnc MODEL.lua [--target=T] [--precision=P] [--outputs=f32|storage] [-o PATH]\n"
    "                     [--emit=ir|dot|plan] [--explain]\n"
    "                     [--tune=analytic|measure] [--tune-file=PATH] [--cuda-graphs] [-D name=value]...\n"
    "                     [--train [--loss=NAME] [--recompute=none|gelu|norm|block]] [--generate]\n"
    "                     [--parallel=tp:N] [--quantize=none|int8w|w8a8|int4w] [--hfuse=on|off]\n"
    "                     [--gelu=erf|tanh]\n"
    "       nnc weights MODEL.lua -o FILE.safetensors [--seed=N] [--quantize=int8w|w8a8|int4w] [-D name=value]...\n"
    "       nnc calibrate MODEL.lua --weights W.safetensors --data INPUTS.safetensors -o OUT.safetensors\n"
    "                     [--method=absmax|percentile:P | --smooth=ALPHA] [-D name=value]...\n"
    "       nnc --help | --version | --list-targets\n"
    "\n"
    "Compiles a model written in the nnc Lua language (compiler/frontend/dsl.md).\n"
    "\n"
    "  --target=T        the target to compile for (see --list-targets)\n"
    "  --precision=P     f32 (default), tf32 (f32 storage, tf32 tensor-core matmuls),\n"
    "                    bf16 or f16 (narrow storage, f32 accumulation; GPU targets),\n"
    "                    fp8 (cuda-sm89 and up: bf16 storage, the linear layers'\n"
    "                    weights e4m3 with a scale per output channel, their GEMMs'\n"
    "                    rows of A e4m3 with a scale per row, computed as they run)\n"
    );
  fprintf(f,
    "  --quantize=int8w  c-simd: hold the linear layers' weights as int8 with an f32\n"
    "                    scale per output channel (weight-only, symmetric), quantized\n"
    "                    when the f32 weights load; embeddings, norms and biases stay\n"
    "                    f32. bench --check compares with the float model; cuda-sm80+:\n"
    "                    int8 [N, K] (K a multiple of 16, quantized on the GPU at load),\n"
    "                    a decode step's few rows read straight from them. none: default\n"
    "  --quantize=w8a8   c-simd: those weights int8 (6-bit grid) and each of their GEMMs'\n"
    "                    rows of A quantized to int8 as it runs (a scale per row, its\n"
    "                    absmax): int8 x int8 products summed in int32; cuda-sm80 and\n"
    "                    up: the same on int8 tensor cores (8-bit weights [N, K], K a\n"
    "                    multiple of 16, quantized on the GPU at load)\n"
    "  --quantize=int4w  c-simd: those weights int4, an f32 scale per group of 128\n"
    "                    consecutive k of an output channel (max|w| / 7), two a byte\n"
    "  --outputs=f32     the model's float outputs as f32 (default): with bf16 or f16\n"
    "                    storage they are cast to f32 where they leave\n"
    "  --outputs=storage float outputs keep the storage dtype of --precision (bf16 or\n"
    "                    f16: their bits as uint16_t in <model>_outputs, half the bytes\n"
    "                    and no widening copy); with f32 or tf32 (so on c-simd) it\n"
    "                    changes nothing. Inputs stay f32 (ids i32). Not for opencl\n"
    "  -o PATH           output: a folder for a target, a file for --emit\n"
    "  --emit=ir         print the checked, fused graph: one line per node\n"
    "  --emit=dot        write Graphviz of the fused graph\n"
    "  --emit=plan       print the memory plan: arena offsets, peak and unplanned bytes\n"
    "  --explain         print each kernel's tile choice for the target and why\n"
    "  --tune=analytic   choose each kernel's implementation and tiles by rule (default)\n"
    "  --tune=measure    CUDA: time every implementation of each GEMM on this machine's\n"
    "                    GPU (builds a probe with nvcc) and keep the fastest; the times\n"
    "                    are stored in the tuning file and reused on the next compile\n"
    "  --tune-file=PATH  the tuning file (default $XDG_CACHE_HOME/nnc/tuning.tsv,\n"
    "                    else ~/.cache/nnc/tuning.tsv)\n"
    "  --cuda-graphs=on|off  CUDA: replay each run from a CUDA graph captured on the\n"
    "                    first run of each set of sizes and buffers (options.cuda_graphs;\n"
    "                    on by default; --cuda-graphs alone is on)\n"
    "  -D name=value     override a key of the model's config{} table\n"
    "  --train           compile the training step: the model runs with `training` true\n"
    "                    and must declare a scalar output \"loss\"; the outputs become\n"
    "                    the loss and grad.<param> for every float parameter\n"
    "  --loss=NAME       the loss output's name under --train (default loss)\n"
    "  --generate        compile a decoder for generation: the model runs with\n"
    "                    `generating` true and keeps its keys and values in kv_cache\n"
    "                    states; the folder gains generate_<model> (prompt in, tokens out)\n"
    "  --recompute=R     under --train, activations the backward makes again instead of\n"
    "                    keeping them from the forward (gradient checkpointing): none\n"
    "                    (default); gelu, the activations' outputs; norm, those and the\n"
    "                    layernorm/rmsnorm outputs; block, everything inside the blocks,\n"
    "                    from the residual stream. --emit=plan shows each one's peak\n"
    );
  fprintf(f,
    "  --parallel=tp:N   tensor parallelism over N processes (c-simd: launched by\n"
    "                    mpirun -np N): linear layers split by columns then rows, one\n"
    "                    all_reduce after each pair; each rank loads its slices of the\n"
    "                    one weights file. --emit=ir shows the plan\n"
    "  --parallel=dp:M[,zero1]  with --train: data parallelism over M processes, the\n"
    "                    gradients summed over the ranks; zero1: each rank keeps\n"
    "                    and updates 1/M of the optimizer state (ZeRO stage 1)\n"
    "  --parallel=tp:N,dp:M  with --train: both, over N * M processes (rank = dp\n"
    "                    index * N + tp index: a tp group's ranks are consecutive)\n"
    "  --hfuse=on|off    linear layers that read the same input (BERT's and LLaMA's q,\n"
    "                    k and v) as one GEMM over their weights concatenated at load,\n"
    "                    split after it (on by default; not under --train, tp:N or\n"
    "                    --quantize). The weights file and its names are unchanged\n"
    "  --gelu=erf|tanh   tanh: GELUs in the erf form (nn.GELU(), BERT's) computed in\n"
    "                    the tanh form, which cuBLASLt fuses into the GEMM before them\n"
    "                    (at most 4.7e-4 apart; bench --check compares with erf). Off\n"
    "                    by default; --precision=bf16, f16 or fp8 only, not with --train;\n"
    "                    the other targets compute the tanh form too but gain nothing\n"
    "  --help            this text\n"
    "  --version         the nnc version\n"
    "  --list-targets    the targets and whether this build can emit them\n"
    "\n"
    "With -o DIR and no --emit, nnc writes DIR: the model's C API, sources, kernels,\n"
    "runtime, Makefile and benchmark harness (target c-simd unless --target says).\n"
    "Without -o or --emit, nnc checks the model and prints a one-line summary.\n"
    "`nnc weights` writes random f32 weights that match the model (for demos and tests);\n"
    "with --quantize=int8w the linear weights lie on their channels' int8 grid, so an\n"
    "int8w folder holds them exactly (its --check then measures the int8 kernels);\n"
    "likewise w8a8's 6-bit grid and int4w's grids of 128-k groups.\n"
    "`nnc calibrate` runs the model on the float64 reference with the weights and the\n"
    "inputs of --data (named as the model names them; B, T, ... from their shapes) and\n"
    "writes OUT: the weights' tensors plus \"<weight>.input_scale\" for each weight a\n"
    "--precision=fp8 folder holds as e4m3, the largest |value| its linears read (or\n"
    "--method=percentile:P of them) / 448. Such a folder loading OUT quantizes those\n"
    "GEMMs' rows with that fixed scale instead of each row's own. With --smooth=ALPHA\n"
    "(0 < ALPHA < 1; SmoothQuant's 0.5) it writes the weights migrated for\n"
    "--quantize=w8a8 instead: each input channel k of a linear behind a layernorm or\n"
    "rmsnorm that only linears read is divided by s_k = max|A_k|^ALPHA / max|W_k|^(1-ALPHA)\n"
    "in the norm's gamma and beta and multiplied by s_k in the weights: the same\n"
    "function, with its large activation channels moved into the weights' scales.\n"
    "Where other ops read the norm too (BERT's residuals), the weights stay and each\n"
    "gets \"<weight>.smooth\" (s): a w8a8 folder applies it as it quantizes.\n"
    "\n"
    "exit codes:\n"
    "  0 success            1 bad command line     2 model error (Lua, DSL, sandbox)\n"
    "  3 shape/dtype error  4 budget exceeded      5 file could not be read/written\n"
    "  6 target unknown or unfit (precision)        7 out of memory   8 internal error\n");
}

static nnc_status parse_args(int argc, char **argv, cli *c, nnc_error *err) {
  memset(c, 0, sizeof *c);
  int first = 1;
  if (argc > 1 && strcmp(argv[1], "weights") == 0) {
    c->weights = true;
    first = 2;
  }
  if (argc > 1 && strcmp(argv[1], "calibrate") == 0) {
    c->calibrate = true;
    first = 2;
  }
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--target=", 9) == 0) c->target = a + 9;
    else if (strncmp(a, "--precision=", 12) == 0) c->precision = a + 12;
    else if (strncmp(a, "--outputs=", 10) == 0) c->outputs = a + 10;
    else if (c->weights && strncmp(a, "--seed=", 7) == 0) {
      char *end;
      c->seed = strtoull(a + 7, &end, 10);
      if (!a[7] || *end) return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--seed: expected a number, found \"%s\"", a + 7);
    }
    else if (c->calibrate && strcmp(a, "--weights") == 0 && i + 1 < argc) c->cal_weights = argv[++i];
    else if (c->calibrate && strncmp(a, "--weights=", 10) == 0) c->cal_weights = a + 10;
    else if (c->calibrate && strcmp(a, "--data") == 0 && i + 1 < argc) c->cal_data = argv[++i];
    else if (c->calibrate && strncmp(a, "--data=", 7) == 0) c->cal_data = a + 7;
    else if (c->calibrate && strncmp(a, "--method=", 9) == 0) c->cal_method = a + 9;
    else if (c->calibrate && strncmp(a, "--smooth=", 9) == 0) c->cal_smooth = a + 9;
    else if (strcmp(a, "--target") == 0 && i + 1 < argc) c->target = argv[++i];
    else if (strcmp(a, "-o") == 0 && i + 1 < argc) c->out = argv[++i];
    else if (strcmp(a, "--explain") == 0) c->explain = true;
    else if (strcmp(a, "--cuda-graphs") == 0 || strcmp(a, "--cuda-graphs=on") == 0) c->cuda_graphs = 1;
    else if (strcmp(a, "--cuda-graphs=off") == 0) c->cuda_graphs = -1;
    else if (strncmp(a, "--cuda-graphs=", 14) == 0)
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--cuda-graphs: expected on or off, found \"%s\"", a + 14);
    else if (strcmp(a, "--hfuse") == 0 || strcmp(a, "--hfuse=on") == 0) c->hfuse = 1;
    else if (strcmp(a, "--hfuse=off") == 0) c->hfuse = -1;
    else if (strcmp(a, "--gelu=erf") == 0 || strcmp(a, "--gelu=tanh") == 0) c->gelu_tanh = a[7] == 't';
    else if (strncmp(a, "--gelu", 6) == 0)
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--gelu: expected --gelu=erf or --gelu=tanh, found \"%s\"", a);
    else if (strncmp(a, "--hfuse=", 8) == 0)
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--hfuse: expected on or off, found \"%s\"", a + 8);
    else if (strcmp(a, "--train") == 0) c->train = true;
    else if (strcmp(a, "--generate") == 0) c->generate = true;
    else if (strncmp(a, "--recompute=", 12) == 0) c->recompute = a + 12;
    else if (strncmp(a, "--parallel=", 11) == 0) c->parallel = a + 11;
    else if (strncmp(a, "--quantize=", 11) == 0) c->quantize = a + 11;
    else if (strncmp(a, "--loss=", 7) == 0) {
      c->loss = a + 7;
      if (!c->loss[0]) return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--loss: expected an output name, found \"\"");
    }
    else if (strncmp(a, "--tune=", 7) == 0) {
      c->tune = a + 7;
      if (strcmp(c->tune, "analytic") != 0 && strcmp(c->tune, "measure") != 0)
        return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--tune: expected analytic or measure, found \"%s\"", c->tune);
    } else if (strncmp(a, "--tune-file=", 12) == 0) {
      c->tune_file = a + 12;
      if (!c->tune_file[0]) return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--tune-file: expected a path, found \"\"");
    }
    else if (strncmp(a, "--emit=", 7) == 0) {
      const char *e = a + 7;
      if (strcmp(e, "ir") == 0) c->emit = EMIT_IR;
      else if (strcmp(e, "dot") == 0) c->emit = EMIT_DOT;
      else if (strcmp(e, "plan") == 0) c->emit = EMIT_PLAN;
      else return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--emit: expected ir, dot or plan, found \"%s\"", e);
    } else if (strncmp(a, "-D", 2) == 0) {
      const char *d = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
      if (!d || !strchr(d, '=') || d[0] == '=')
        return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "-D: expected name=value, found \"%s\"", d ? d : "");
      if (c->ndefines == (int)(sizeof c->defines / sizeof c->defines[0]))
        return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "-D: at most %zu overrides",
                          sizeof c->defines / sizeof c->defines[0]);
      c->defines[c->ndefines++] = d;
    } else if (a[0] == '-') {
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "unknown option \"%s\" (see nnc --help)", a);
    } else if (c->model) {
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "expected one model file, found \"%s\" and \"%s\"", c->model, a);
    } else {
      c->model = a;
    }
  }
  if (!c->model) return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "expected a model file (see nnc --help)");
  if (c->generate && c->train)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--generate: expected no --train (generation runs a forward)");
  if (c->recompute && !c->train)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--recompute=%s: expected --train (only a training step "
                      "keeps activations for a backward)", c->recompute);
  if (c->calibrate && (!c->out || !c->cal_weights || !c->cal_data || c->emit != EMIT_NONE || c->target || c->train ||
                       c->generate || c->parallel || c->quantize || c->precision || c->gelu_tanh))
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "nnc calibrate: expected MODEL.lua --weights W.safetensors --data "
                      "INPUTS.safetensors -o OUT.safetensors [--method=absmax|percentile:P | --smooth=ALPHA] [-D name=value]");
  if (c->weights && (!c->out || c->emit != EMIT_NONE || c->target))
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "nnc weights: expected MODEL.lua -o FILE.safetensors");
  return NNC_OK;
}

/* Writes the --emit view to stdout, or to c->out through a temporary file
 * renamed at the end so a failure leaves no partial file. */
static nnc_status write_view(const cli *c, const nnc_schedule *s, nnc_error *err) {
  char tmp[4096];
  FILE *f = stdout;
  if (c->out) {
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", c->out, (long)getpid()) >= (int)sizeof tmp)
      return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: path too long", c->out);
    f = fopen(tmp, "w");
    if (!f) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: cannot write: %s", c->out, strerror(errno));
  }
  nnc_status st = c->emit == EMIT_IR ? nnc_print_ir(f, s, err)
                : c->emit == EMIT_DOT ? nnc_print_dot(f, s, err)
                : nnc_print_plan(f, s, err);
  if (f == stdout) return st;
  if (fclose(f) != 0 && st == NNC_OK)
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: cannot write: %s", c->out, strerror(errno));
  if (st == NNC_OK && rename(tmp, c->out) != 0)
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: cannot write: %s", c->out, strerror(errno));
  if (st != NNC_OK) remove(tmp);
  return st;
}

static void print_summary(const nnc_schedule *s) {
  const nnc_graph *g = s->g;
  int64_t weights = 0;
  for (int i = 0; i < g->nparams; i++) weights += nnc_tensor_max_elems(g, &g->tensors[g->params[i]]);
  int live = 0;
  for (int i = 0; i < g->nnodes; i++) live += !g->nodes[i].dead;
  printf("%s: ok: %d inputs, %d outputs, %d parameters (%.2fM weights), %d nodes in %d kernels, arena %.2f MiB\n",
         g->name, g->ninputs, g->noutputs, g->nparams, (double)weights / 1e6, live, s->nk,
         (double)s->plan.peak / (1024.0 * 1024.0));
}

static nnc_status run(const cli *c, nnc_error *err) {
  if (c->calibrate) {
    nnc_calibrate_opts co = {.model = c->model, .defines = c->defines, .ndefines = c->ndefines,
                             .weights = c->cal_weights, .data = c->cal_data, .out = c->out};
    nnc_status st = nnc_calibrate_method(c->cal_method, &co.percentile, err);
    if (!st && c->cal_smooth) st = nnc_smooth_alpha(c->cal_smooth, &co.smooth, err);
    if (!st && c->cal_smooth && c->cal_method)
      st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "nnc calibrate: expected --smooth or --method, found both "
                      "(--smooth writes migrated weights, no input scales)");
    return st ? st : nnc_calibrate(&co, stdout, err);
  }
  const nnc_target_info *target = NULL;
  if (c->target) {
    nnc_status st = nnc_target_find(c->target, &target, err);
    if (st) return st;
  }
  if (c->emit == EMIT_NONE && !c->weights && (c->out || c->explain)) {
    nnc_build_opts bo = {.model = c->model,
                         .target = c->target ? c->target : nnc_target_default()->name,
                         .defines = c->defines, .ndefines = c->ndefines,
                         .precision = c->precision, .outputs = c->outputs,
                         .out_dir = c->out, .explain = c->explain ? stdout : NULL,
                         .cuda_graphs = c->cuda_graphs, .train = c->train, .loss = c->loss,
                         .generate = c->generate, .recompute = c->recompute, .parallel = c->parallel,
                         .quantize = c->quantize, .no_hfuse = c->hfuse < 0, .gelu_tanh = c->gelu_tanh,
                         .measure = c->tune && strcmp(c->tune, "measure") == 0, .tune_file = c->tune_file};
    return nnc_build(&bo, err);
  }
  nnc_frontend_opts fo = {.path = c->model, .defines = c->defines, .ndefines = c->ndefines,
                          .training = c->train, .generating = c->generate};
  nnc_autodiff_opts ad = {.loss = c->loss};
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  nnc_precision prec;
  nnc_recompute rc = NNC_RECOMPUTE_NONE;
  nnc_parallel par;
  int copies = 0;
  nnc_quantize quant;
  nnc_status st = nnc_precision_parse(c->weights ? NULL : c->precision, &prec, err);
  /* nnc weights --quantize=int8w: f32 weights already on the int8 grid */
  if (!st) st = nnc_quantize_parse(c->quantize, &quant, err);
  /* --precision=fp8's e4m3 weights, as nnc_build marks them */
  if (!st && prec.fp8 && quant == NNC_QUANTIZE_NONE) quant = NNC_QUANTIZE_FP8;
  /* nnc weights writes the whole tensors, whatever the plan */
  if (!st) st = nnc_parallel_parse(c->weights ? NULL : c->parallel, &par, err);
  if (!st) st = nnc_parallel_supported(&par, c->train, c->generate, "(any)", true, err);
  if (!st) st = nnc_outputs_parse(c->weights ? NULL : c->outputs, &prec, err);
  prec.f32_weight_math = true;   /* the views show every capability, as nnc_compile_graph's fusion does */
  if (!st) st = nnc_recompute_parse(c->recompute, &rc, err);
  if (!st) st = nnc_frontend_load(&fo, &g, err);
  if (!st && c->train) st = nnc_pass_check(&g, err);
  /* a tensor-parallel plan splits the forward; the backward follows it */
  if (!st) st = nnc_pass_parallel(&g, &par, err);
  if (!st && c->train) st = nnc_pass_autodiff(&g, &ad, err);
  if (!st) st = nnc_pass_precision(&g, &prec, err);
  if (!st && c->train) st = nnc_pass_recompute(&g, rc, &copies, err);
  int approx = 0;
  if (!st && c->gelu_tanh && !c->weights) st = nnc_gelu_tanh_allowed(&prec, c->train, err);
  if (!st && c->gelu_tanh && !c->weights) st = nnc_pass_gelu_tanh(&g, &approx, err);
  /* the views show the GEMMs a folder would run (its weight-only kernels run at load) */
  if (!st && !c->weights && nnc_hfuse_wanted(c->hfuse < 0, c->train, &par, quant, true))
    st = nnc_pass_hfuse(&g, NULL, err);
  if (!st) st = nnc_compile_graph(&g, &s, err);
  /* a GPU target's views show its w8a8 weights (nnc weights writes C SIMD's grids) */
  if (!st) st = nnc_pass_quantize(&g, quant, target && target->family != NNC_FAMILY_C_SIMD,
                                  NULL, err);
  if (!st) {
    if (c->weights) st = nnc_write_random_weights(&g, c->out, c->seed, err);
    else if (c->emit == EMIT_NONE) print_summary(&s);
    else st = write_view(c, &s, err);
  }
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
  return st;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("nnc %s\n", NNC_VERSION);
      return 0;
    }
    if (strcmp(argv[i], "--list-targets") == 0) {
      nnc_targets_print(stdout);
      return 0;
    }
  }
  cli c;
  nnc_error err = {0};
  nnc_status st = parse_args(argc, argv, &c, &err);
  if (!st) st = run(&c, &err);
  if (st) {
    fprintf(stderr, "nnc: %s\n", err.msg);
    if (st == NNC_E_USAGE) fprintf(stderr, "(see nnc --help)\n");
  }
  return (int)st;
}
