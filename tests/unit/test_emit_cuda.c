/* tests/unit/test_emit_cuda.c — the CUDA emitter without a GPU: every model
 * of models/ and the op families of tests/ops/ are compiled for cuda-sm80
 * (f32 and bf16; bf16 and f16 with --outputs=storage too) and cuda-sm90
 * (bf16, with and without --outputs=storage), and each folder is built with
 * its own Makefile by nvcc with warnings as errors. The benchmark then runs on this
 * machine, where there is no GPU: creating the model must fail with the
 * device error code and a message that says so, not crash. What the
 * generated code computes is checked on a GPU by bench/gpu_check.sh. The
 * emitter's own checks (f16 inputs, the precision in the code) are checked
 * here too, and so is what CUDA graphs (--cuda-graphs) need of every folder:
 * nothing that forward() runs may synchronize or allocate, which would break
 * a stream capture. The training graphs (--train) of GPT-2, the MLP and the
 * embedding loss build too. With the argument "volta": cuda-sm70 (test_volta); "skinny": the
 * decode GEMMs' branch (test_skinny); "kv": the kv appends of --generate decoders in the attention
 * (test_kv_append); "vec": the loops on 16-byte vectors (test_vec_loops, text only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"
#include "test_sh.h"

static char work[256];

/* outputs: --outputs (NULL: f32); graphs: 1 --cuda-graphs=on, -1 =off, 0 (false) nnc's default. */
static nnc_status emit_graphs(const char *model, const char *target, const char *precision, const char *outputs,
                              const char *const *defs, int nd, int graphs, const char *out, nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = target, .defines = defs, .ndefines = nd, .precision = precision,
                      .outputs = outputs, .out_dir = out, .cuda_graphs = graphs};
  return nnc_build(&o, err);
}

static nnc_status emit(const char *model, const char *target, const char *precision, const char *const *defs, int nd,
                       const char *out, nnc_error *err) {
  return emit_graphs(model, target, precision, NULL, defs, nd, false, out, err);
}

/* The first of the calls that break a stream capture (they synchronize or
 * allocate) found in s, or NULL. */
static const char *capture_breaker(const char *s) {
  static const char *const calls[] = {"cudaMalloc", "cudaFree", "Synchronize(", "cudaMemcpy(", "cudaMemset(",
                                      "cudaMemcpy2D(", "cudaStreamQuery", "cudaEventQuery", "nnrt_cuda_malloc",
                                      "nnrt_cuda_free", "cudaHostAlloc", "cudaDeviceSetLimit"};
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    if (strstr(s, calls[i])) return calls[i];
  return NULL;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
    buf[fread(buf, 1, (size_t)n, f)] = 0;
  }
  fclose(f);
  return buf;
}

/* What forward() runs in folder out, model name: the kernel launchers and
 * forward in <name>.cu (from run_args to the graph code after forward) and
 * the templates under kernels/, whose host wrappers the launchers call.
 * None may synchronize or allocate: with options.cuda_graphs forward runs
 * inside a capture. */
static void check_capturable(const char *out, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.cu", out, name);
  char *cu = read_all(path);
  assert_non_null(cu);
  char *from = strstr(cu, "typedef struct run_args"), *to = strstr(cu, "static bool same_run");
  assert_non_null(from);
  assert_non_null(to);
  assert_true(from < to);
  *to = 0;
  const char *bad = capture_breaker(from);
  if (bad) fprintf(stderr, "%s: forward or a launcher calls %s\n", path, bad);
  assert_null(bad);
  free(cu);
  snprintf(path, sizeof path, "%s/kernels", out);
  DIR *d = opendir(path);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strstr(e->d_name, ".cuh")) continue;
    snprintf(path, sizeof path, "%s/kernels/%s", out, e->d_name);
    char *t = read_all(path);
    assert_non_null(t);
    bad = capture_breaker(t);
    if (bad) fprintf(stderr, "%s calls %s\n", path, bad);
    free(t);
    assert_null(bad);
    n++;
  }
  closedir(d);
  assert_true(n > 0);
}

/* Builds the emitted folder out of model name with nvcc for its target's
 * architecture and runs the benchmark with bench_args, which must report
 * that there is no GPU (exit 1, E_DEVICE). */
static void build_folder(const char *out, const char *name, const char *bench_args) {
  check_capturable(out, name);
  assert_int_equal(sh("make -s -C %s -j2 > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
  if (sh("nvidia-smi -L > /dev/null 2>&1") == 0) return;   /* a GPU here: gpu_check.sh runs it */
  assert_int_equal(sh("cd %s && ./bench_%s --runs 1 %s > run.log 2>&1", out, name, bench_args), 1);
  char log[600];
  snprintf(log, sizeof log, "%s/run.log", out);
  if (!file_has(log, "CUDA device")) sh("cat %s", log);
  assert_true(file_has(log, "CUDA device"));
}

/* Emits (with options.cuda_graphs on by default when graphs; --outputs=
 * outputs unless NULL) into work/NAME_TARGET_PRECISION[_OUTPUTS][_graphs]
 * and builds it (build_folder). */
static void build_all(const char *model, const char *name, const char *target, const char *precision,
                      const char *outputs, const char *const *defs, int nd, bool graphs, const char *bench_args) {
  char out[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/%s_%s_%s%s%s%s", work, name, target, precision, outputs ? "_" : "", outputs ? outputs : "",
           graphs ? "_graphs" : "");
  nnc_status st = emit_graphs(model, target, precision, outputs, defs, nd, graphs, out, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  build_folder(out, name, bench_args);
}

static void build_graphs(const char *model, const char *name, const char *target, const char *precision,
                         const char *const *defs, int nd, bool graphs, const char *bench_args) {
  build_all(model, name, target, precision, NULL, defs, nd, graphs, bench_args);
}

static void build(const char *model, const char *name, const char *target, const char *precision,
                  const char *const *defs, int nd) {
  build_all(model, name, target, precision, NULL, defs, nd, false, "");
}

static bool have_nvcc(void) { return sh("command -v nvcc > /dev/null 2>&1") == 0; }

static void test_models(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  const char *mlp[] = {"hidden1=129", "hidden2=33"};
  const char *gpt2[] = {"layers=2", "vocab=2001", "ctx=64"};   /* 2001: the LM head pads its rows */
  const char *bert[] = {"layers=2", "vocab=1001"};
  build("models/mlp.lua", "mlp", "cuda-sm80", "f32", mlp, 2);
  build("models/mlp.lua", "mlp", "cuda-sm80", "bf16", mlp, 2);
  build("models/gpt2.lua", "gpt2", "cuda-sm80", "f32", gpt2, 3);
  build("models/gpt2.lua", "gpt2", "cuda-sm80", "bf16", gpt2, 3);
  build("models/gpt2.lua", "gpt2", "cuda-sm90", "bf16", gpt2, 3);
  build("models/bert.lua", "bert", "cuda-sm80", "tf32", bert, 2);
  build("models/bert.lua", "bert", "cuda-sm90", "bf16", bert, 2);
  build("models/gpt2.lua", "gpt2", "cuda-sm90a", "bf16", gpt2, 3);
  build("models/bert.lua", "bert", "cuda-sm90a", "bf16", bert, 2);
  const char *cnn[] = {"size=13", "conv1=5", "conv2=7", "hidden=9"};
  build("models/mnist_cnn.lua", "mnist_cnn", "cuda-sm90a", "bf16", cnn, 4);
  const char *resnet[] = {"size=33", "width=4", "classes=7"};
  build("models/resnet18.lua", "resnet18", "cuda-sm80", "f32", resnet, 3);
  char p[512];
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm80_bf16/gpt2.cu", work);
  assert_true(file_has(p, "precision bf16"));
  assert_true(file_has(p, "nnrt_cuda_gemm_run(m->blas, &g, s, &err)"));
  assert_true(file_has(p, "/* cuBLASLt after a norm kernel (by rule) */"));
  /* the LM head: padded rows, widened to the f32 logits by the copy (the output cast folded) */
  assert_true(file_has(p, "/* cuBLASLt after a norm kernel in two calls (N a multiple of 64, then the rest) into rows "
                          "padded to 16 bytes, copied as f32 (by rule); from 1024 rows cuBLASLt, a call per phase of rows "
                          "(row_phases) */"));
  assert_true(file_has(p, "const int N0 = 1984;"));
  assert_true(file_has(p, "nnc_unpad_rows<<<M, NNC_UNPAD_THREADS, 0, s>>>(c.out.logits, P, N, ldp);"));
  /* from 1024 rows, cuBLASLt writes them in place by phases of rows */
  assert_true(file_has(p, "  if (M >= 1024) {\n    nnrt_cuda_gemm g = {};\n"));
  assert_true(file_has(p, "    g.D = c.out.logits;   /* logits [B,T,2001] */\n    g.ldd = N;\n"));
  assert_true(file_has(p, "    g.row_phases = true;\n"));
  assert_true(file_has(p, "nnc_cuda_attention(a, s, &e)"));
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm90_bf16/Makefile", work);
  assert_true(file_has(p, "ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"));
  /* sm_90a: the wgmma attention (NNC_CUDA_SM90A) and the LM head on nnc's
   * wgmma GEMM, which writes the f32 logits' unaligned rows in place, below
   * 1024 rows; from there cuBLASLt by phases of rows */
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm90a_bf16/Makefile", work);
  assert_true(file_has(p, "ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90a,code=compute_90a"));
  assert_true(file_has(p, ",,-DNNC_CUDA_SM90A)\n"));   /* defined when ARCH builds sm_90a code only */
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm90a_bf16/gpt2.cu", work);
  assert_true(file_has(p, "#include \"kernels/gemm_wgmma.cuh\""));
  /* (its comment goes on about the skinny GEMM's branch, test_skinny) */
  assert_true(file_has(p, "/* nnc's wgmma GEMM after a norm kernel, rows written in place, f32 out (by rule)"));
  assert_true(file_has(p, "nnc_cuda_gemm_wgmma_args<__nv_bfloat16, float> g = {};"));
  assert_true(file_has(p, "g.c = c.out.logits;"));
  assert_false(file_has(p, "nnc_unpad_rows"));
  assert_true(file_has(p, "  if (M >= 1024) {\n    nnrt_cuda_gemm g = {};\n"));
  assert_true(file_has(p, "    g.row_phases = true;\n"));
  assert_true(file_has(p, "nnrt_cuda_gemm_run(m->blas, &g, s, &err)"));   /* the block GEMMs stay on cuBLASLt */
  /* sm_90a: BERT's post-norm layernorms in the epilogues of the GEMMs
   * before them (passes/fold_post_norm.c), two a layer; the embeddings'
   * layernorm is a row kernel with the sum before it */
  snprintf(p, sizeof p, "%s/bert_cuda-sm90a_bf16/bert.cu", work);
  assert_true(file_has(p, "#include \"kernels/gemm_tma_ln.cuh\""));
  assert_int_equal(sh("test $(grep -c 'if (nnc_cuda_gemm_tma_ln(g, s, &e))' %s) -eq 4", p), 0);
  /* their weights are parameters: copied before the wait for the kernel before (pdl.cuh) */
  assert_int_equal(sh("test $(grep -c '  g.b_fixed = true;   /\\* a weight: its first copies start while the kernel "
                      "before ends \\*/' %s) -eq 4", p), 0);
  /* below 4096 rows each of them is cuBLASLt and the row kernel in place; the embeddings' layernorm is
   * their sum's row kernel (row_loops) */
  assert_int_equal(sh("test $(grep -c 'nnc_cuda_layernorm(' %s) -eq 4", p), 0);
  assert_int_equal(sh("test $(grep -c '  if (M < 4096) {   /\\* few rows: cuBLASLt (bias, residual), then the layernorm "
                      "row kernel in place' %s) -eq 4", p), 0);
  assert_true(file_has(p, "linear + add + layernorm"));
  snprintf(p, sizeof p, "%s/bert_cuda-sm80_tf32/bert.cu", work);
  assert_true(file_has(p, "g.tf32 = true;"));
  assert_true(file_has(p, "a.tf32 = 1;")); /* attention on tf32 tensor cores too */
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm80_f32/gpt2.cu", work);
  assert_false(file_has(p, "a.tf32")); /* f32 keeps f32 products */
  snprintf(p, sizeof p, "%s/mlp_cuda-sm80_f32/mlp.h", work);
  assert_true(file_has(p, "int mlp_run_device(mlp_model *m, const mlp_dims *d, const mlp_inputs *in, mlp_outputs *out, void *stream);"));
}

/* --outputs=storage: GPT-2's bf16 logits and the MLP's f16 ones are the
 * caller's uint16_t buffers. The LM head's cuBLASLt calls write padded bf16
 * rows and the unpad copy writes bf16 (no widening to f32); the harness
 * takes the outputs as bf16/f16. Built by nvcc for sm_80 and sm_90. */
static void test_storage_outputs(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  const char *mlp[] = {"hidden1=129", "hidden2=33"};
  const char *gpt2[] = {"layers=2", "vocab=2001", "ctx=64"};
  build_all("models/gpt2.lua", "gpt2", "cuda-sm80", "bf16", "storage", gpt2, 3, false, "");
  build_all("models/gpt2.lua", "gpt2", "cuda-sm90", "bf16", "storage", gpt2, 3, false, "");
  build_all("models/mlp.lua", "mlp", "cuda-sm80", "f16", "storage", mlp, 2, false, "");
  build_all("models/gpt2.lua", "gpt2", "cuda-sm90a", "bf16", "storage", gpt2, 3, false, "");
  char p[512];
  /* sm_90a: the wgmma GEMM writes the bf16 logits in place, no padded copy */
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm90a_bf16_storage/gpt2.cu", work);
  assert_true(file_has(p, "/* nnc's wgmma GEMM after a norm kernel, rows written in place (by rule)"));
  assert_true(file_has(p, "nnc_cuda_gemm_wgmma_args<__nv_bfloat16, __nv_bfloat16> g = {};"));
  assert_true(file_has(p, "g.c = ((__nv_bfloat16 *)c.out.logits);"));
  assert_false(file_has(p, "nnc_unpad_rows"));
  assert_true(file_has(p, "    g.D = ((__nv_bfloat16 *)c.out.logits);   /* linear [B,T,2001] */\n"));
  assert_true(file_has(p, "    g.row_phases = true;\n"));
  for (int arch = 80; arch <= 90; arch += 10) {
    snprintf(p, sizeof p, "%s/gpt2_cuda-sm%d_bf16_storage/gpt2.h", work, arch);
    assert_true(file_has(p, "  uint16_t *logits;   /* bf16[B,T,2001] */\n"));
    assert_true(file_has(p, " * bf16 outputs are left in the storage dtype (nnc --precision=bf16 --outputs=storage):\n"));
    snprintf(p, sizeof p, "%s/gpt2_cuda-sm%d_bf16_storage/gpt2.cu", work, arch);
    assert_true(file_has(p, " * precision bf16, outputs left in bf16 (--outputs=storage: no cast to f32).\n"));
    assert_true(file_has(p, "/* cuBLASLt after a norm kernel in two calls (N a multiple of 64, then the rest) into rows "
                            "padded to 16 bytes, copied (by rule)"));   /* sm_90: and the skinny branch */
    assert_true(file_has(p, "  __nv_bfloat16 *P = (__nv_bfloat16 *)((unsigned char *)m->ws + "));
    assert_true(file_has(p, "nnc_unpad_rows<<<M, NNC_UNPAD_THREADS, 0, s>>>(((__nv_bfloat16 *)c.out.logits), P, N, ldp);"));
    assert_true(file_has(p, "    g.row_phases = true;\n"));   /* from 1024 rows */
    assert_true(file_has(p, "  dout.logits = (uint16_t *)m->out_dev[0];\n"));
    assert_true(file_has(p, "  if (!is_input && i == 0) return (size_t)(d->B * d->T * 2001) * 2;\n"));
    assert_false(file_has(p, "float *logits"));
    snprintf(p, sizeof p, "%s/gpt2_cuda-sm%d_bf16_storage/bench_gpt2.c", work, arch);
    assert_true(file_has(p, "static const int output_dtype[1] = {NNRT_BF16};"));
    assert_true(file_has(p, "1e-2, b_stage, b_run_staged, b_peaks, NNRT_BF16,"));
    snprintf(p, sizeof p, "%s/gpt2_cuda-sm%d_bf16_storage/README.md", work, arch);
    assert_true(file_has(p, "the float outputs are left\nin the storage dtype, bf16"));
  }
  snprintf(p, sizeof p, "%s/mlp_cuda-sm80_f16_storage/mlp.h", work);
  assert_true(file_has(p, "  uint16_t *logits;   /* f16[B,10] */\n"));
  snprintf(p, sizeof p, "%s/mlp_cuda-sm80_f16_storage/mlp.cu", work);
  assert_true(file_has(p, "((__half *)c.out.logits)"));
  snprintf(p, sizeof p, "%s/mlp_cuda-sm80_f16_storage/bench_mlp.c", work);
  assert_true(file_has(p, "static const int output_dtype[1] = {NNRT_F16};"));
  /* the default folder of test_models keeps its f32 logits */
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm80_bf16/gpt2.h", work);
  assert_true(file_has(p, "  float *logits;   /* f32[B,T,2001] */\n"));
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm80_bf16/bench_gpt2.c", work);
  assert_true(file_has(p, "static const int output_dtype[1] = {NNRT_F32};"));
}

/* Every op family of tests/ops/ at odd sizes, in bf16 (the casts, masks,
 * moves, reductions and loss all go through the generated loops). */
static void test_ops(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  static const char *ops[] = {"elementwise", "masks", "softmax_axis", "reduce", "move", "embedding_loss", "lookup",
                              "matmul", "norms", "attention", "conv", "recurrent", "rope", "gqa", "chains"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    char model[128], path[512];
    snprintf(model, sizeof model, "tests/ops/%s.lua", ops[i]);
    snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
    assert_int_equal(access(path, R_OK), 0);
    build(model, ops[i], "cuda-sm80", "bf16", NULL, 0);
  }
}

/* Convolutions as implicit GEMMs (cuda-sm90a, bf16 NHWC images of 64 and
 * 128 channels): every convolution of tests/ops/conv_wide.lua calls
 * conv_wgmma.cuh, no im2col kernel is left, and the folder builds; they
 * run against float64 on a GPU in bench/gpu_conv.sh. */
static void test_conv_windows(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  build("tests/ops/conv_wide.lua", "conv_wide", "cuda-sm90a", "bf16", NULL, 0);
  char p[600];
  snprintf(p, sizeof p, "%s/conv_wide_cuda-sm90a_bf16/conv_wide.cu", work);
  assert_true(file_has(p, "  if (nnc_cuda_conv_wgmma(g, s, &e)) return kernel_failed(m, "));
  assert_false(file_has(p, ": im2col  (kernel "));
}

/* --cuda-graphs: GPT-2 with options.cuda_graphs on by default builds for
 * sm80 and sm90 and its benchmark takes --cuda-graphs on|off; the graph
 * cache is keyed on every dim and buffer; a folder without the flag
 * defaults to on, --cuda-graphs=off and a --generate decoder to off.
 * Replays are checked on a GPU (tests/gpu/test_graphs.c). */
static void test_graphs(void **state) {
  (void)state;
  const char *gpt2[] = {"layers=2", "vocab=2001", "ctx=64"};
  char out[512], p[600];
  nnc_error err = {0};
  /* nnc refuses the flag for a target without CUDA graphs */
  snprintf(out, sizeof out, "%s/graphs_c", work);
  assert_int_equal(emit_graphs("models/gpt2.lua", "c-generic", NULL, NULL, gpt2, 3, true, out, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "--cuda-graphs: expected a cuda-* target, found c-generic"));
  assert_int_equal(access(out, F_OK), -1);
  /* without the flag: on by default */
  snprintf(out, sizeof out, "%s/graphs_default", work);
  assert_int_equal(emit("models/gpt2.lua", "cuda-sm80", "bf16", gpt2, 3, out, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_true(file_has(p, "  o->cuda_graphs = 1;   /* nnc's default; --cuda-graphs=off compiles 0 */\n"));
  snprintf(p, sizeof p, "%s/README.md", out);
  assert_true(file_has(p, "With `options.cuda_graphs` (here 1 by default: nnc's default; --cuda-graphs=off compiles 0;"));
  /* --cuda-graphs=off */
  snprintf(out, sizeof out, "%s/graphs_off", work);
  assert_int_equal(emit_graphs("models/gpt2.lua", "cuda-sm80", "bf16", NULL, gpt2, 3, -1, out, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_true(file_has(p, "  o->cuda_graphs = 0;   /* nnc was given --cuda-graphs=off */\n"));
  /* a --generate decoder: off (every decode step has new dims) unless =on */
  char path[512];
  snprintf(path, sizeof path, "%s/models/gpt2.lua", NNC_SOURCE_ROOT);
  snprintf(out, sizeof out, "%s/graphs_generate", work);
  nnc_build_opts o = {.model = path, .target = "cuda-sm80", .defines = gpt2, .ndefines = 3, .precision = "bf16",
                      .out_dir = out, .generate = true};
  assert_int_equal(nnc_build(&o, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_true(file_has(p, "  o->cuda_graphs = 0;   /* a --generate decoder: new dims every decode step; "
                          "--cuda-graphs=on compiles 1 */\n"));
  if (!have_nvcc()) {
    skip();
    return;
  }
  build_graphs("models/gpt2.lua", "gpt2", "cuda-sm80", "bf16", gpt2, 3, true, "--cuda-graphs on");
  build_graphs("models/gpt2.lua", "gpt2", "cuda-sm90", "bf16", gpt2, 3, true, "--cuda-graphs off");
  snprintf(out, sizeof out, "%s/gpt2_cuda-sm90_bf16_graphs", work);
  snprintf(p, sizeof p, "%s/gpt2.h", out);
  assert_true(file_has(p, "  int cuda_graphs;   /* 1: each run replays a CUDA graph of the model"));
  assert_true(file_has(p, "int gpt2_cuda_graphs(gpt2_model *m, int on);"));
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_true(file_has(p, "  o->cuda_graphs = 1;   /* nnc's default; --cuda-graphs=off compiles 0 */\n"));
  assert_true(file_has(p, "  m->graphs = o->cuda_graphs != 0;\n"));
  assert_true(file_has(p, "  return gs->kernels == kernels &&\n         gs->d.B == c.d.B &&\n         gs->d.T == c.d.T &&\n"
                          "         gs->in.ids == c.in.ids &&\n         gs->out.logits == c.out.logits;\n"));
  assert_true(file_has(p, "cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal)"));
  assert_true(file_has(p, "  int rc = m->graphs && !m->profile && !caller_capturing(s) ? replay(m, c, kernels, s) : kernels(m, c, s);\n"));
  assert_true(file_has(p, "  return run_kernels(m, d, in, out, s, forward);\n"));
  assert_true(file_has(p, "    if (m->graph[i].exec) cudaGraphExecDestroy(m->graph[i].exec);\n"));
  snprintf(p, sizeof p, "%s/bench_gpt2.c", out);
  assert_true(file_has(p, "    NULL, b_cuda_graphs,\n"));
  snprintf(p, sizeof p, "%s/README.md", out);
  assert_true(file_has(p, "With `options.cuda_graphs` (here 1 by default: nnc's default; --cuda-graphs=off compiles 0;"));
  /* the harness's option: a bad value is a usage error (2) before any device */
  assert_int_equal(sh("cd %s && ./bench_gpt2 --cuda-graphs maybe > usage.log 2>&1", out), 2);
  snprintf(p, sizeof p, "%s/usage.log", out);
  assert_true(file_has(p, "bench_gpt2: --cuda-graphs: expected on or off, found \"maybe\""));
  assert_int_equal(sh("cd %s && ./bench_gpt2 --help > help.log 2>&1", out), 0);
  snprintf(p, sizeof p, "%s/help.log", out);
  assert_true(file_has(p, "[--cuda-graphs on|off]"));
}

/* Emits model's training graph (nnc --train) into work/NAME_train_TARGET_PRECISION and builds it. */
static void build_train(const char *model, const char *name, const char *target, const char *precision,
                        const char *const *defs, int nd) {
  char out[512], path[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/%s_train_%s_%s", work, name, target, precision);
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = target, .defines = defs, .ndefines = nd, .precision = precision,
                      .out_dir = out, .train = true};
  nnc_status st = nnc_build(&o, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  build_folder(out, name, "");
}

/* --train --parallel=tp:2: the weights a rank holds slices of are marked in
 * the update's table, and the gradient norm sums their squares over the
 * ranks (an f64 all_reduce) beside the whole weights' once; checkpoints
 * gather the slices whole (emit_tp_ckpt.c). The text only (building needs
 * NCCL's headers); a 2-GPU run checked it against one process
 * (bench/NOTES.md, session 21). */
static void test_train_tp(void **state) {
  (void)state;
  const char *gpt2[] = {"layers=2", "d=24", "heads=2", "vocab=37", "ctx=17"};
  char out[512], path[512], p[600];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/gpt2_train_tp2", work);
  snprintf(path, sizeof path, "%s/models/gpt2.lua", NNC_SOURCE_ROOT);
  nnc_build_opts o = {.model = path, .target = "cuda-sm90a", .defines = gpt2, .ndefines = 5, .precision = "bf16",
                      .out_dir = out, .train = true, .parallel = "tp:2"};
  nnc_status st = nnc_build(&o, &err);
  if (st) fprintf(stderr, "tp:2 train: %s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_true(file_has(p, ", 1},   /* wte.weight, this rank's slice */\n"));
  assert_true(file_has(p, ", 0},   /* ln_f.weight */\n"));
  assert_true(file_has(p, "  nnc_optim_sum_squares_parts<<<NNC_OPTIM_SUM_BLOCKS, NNC_OPTIM_SUM_THREADS, 0, m->stream>>>(m->grad, m->update_table, NPARAMS,\n"));
  assert_true(file_has(p, "  if (nnrt_comm_all_reduce(m->comm, m->partial, m->partial, 1, NNRT_F64, NNRT_REDUCE_SUM, m->stream, &e) ||\n"));
  assert_true(file_has(p, "  *ss = sliced + whole;\n"));
  /* whole checkpoints: the slices gathered for rank 0's file, read back sliced */
  assert_true(file_has(p, "static int state_to_host("));
  assert_true(file_has(p, "    const size_t n = (size_t)nnc_weights_shard_numel(&manifest[j], &shards[j]);\n"));
  assert_true(file_has(p, "      if (nnrt_comm_all_gather(m->comm, src[k], dev, (size_t)mine, NNRT_F32, m->stream, &e) ||\n"));
  assert_true(file_has(p, "        nnc_weights_unslice(all + r * mine, sizeof(float), &manifest[j], &shards[j], r, dst);\n"));
  assert_true(file_has(p, "  if (!rc && nnc_weights_load_state_shards(st, path, manifest, shards, m->comm->rank, NPARAMS, mom, vel, &step, &e))\n"));
  assert_false(file_has(p, "not built yet"));
  /* tp:2,dp:2: the world split into tp pairs of consecutive ranks and dp
   * pairs; the slices' collectives in the tp group, the sums in the dp group */
  snprintf(out, sizeof out, "%s/gpt2_train_tpdp", work);
  o.out_dir = out;
  o.parallel = "dp:2,tp:2";
  assert_int_equal(nnc_build(&o, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_true(file_has(p, "compiled for 4 ranks (--parallel=tp:2,dp:2), launched with %d"));
  assert_true(file_has(p, "  if (!rc) rc = nnrt_comm_split(m->comm, m->comm->rank / 2, m->comm->rank % 2, &m->tp_comm, &e);\n"));
  assert_true(file_has(p, "  if (!rc) rc = nnrt_comm_split(m->comm, m->comm->rank % 2, m->comm->rank / 2, &m->dp_comm, &e);\n"));
  assert_true(file_has(p, "  if (nnrt_comm_all_reduce(m->tp_comm, m->partial, m->partial, 1, NNRT_F64, NNRT_REDUCE_SUM, m->stream, &e) ||\n"));
  assert_true(file_has(p, "  if (nnrt_comm_all_reduce(m->dp_comm, g, g, n, NNRT_F32, NNRT_REDUCE_SUM, m->comm_stream, &e))\n"));
  assert_true(file_has(p, "  if (nnrt_comm_all_reduce(m->dp_comm, dl, dl, 1, NNRT_F32, NNRT_REDUCE_SUM, m->stream, &e) ||\n"));
  assert_true(file_has(p, "  if (m->dp_comm->rank != 0) return 0;\n"));
  assert_true(file_has(p, "  c.rank = m->tp_comm->rank;\n"));
  assert_false(file_has(p, "nnrt_comm_all_reduce(m->comm,"));
  /* one process keeps the plain norm and its checkpoints */
  snprintf(out, sizeof out, "%s/gpt2_train_tp1", work);
  o.out_dir = out;
  o.parallel = NULL;
  assert_int_equal(nnc_build(&o, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", out);
  assert_false(file_has(p, "nnc_optim_sum_squares_parts<<<"));
  assert_true(file_has(p, "static int state_to_host("));
}

/* --train: the training graphs of GPT-2 at small odd sizes, the MLP, the
 * attention op with masks (tests/ops/attention_loss.lua) and the
 * embedding with its loss, whose backward brings pad, the embedding's
 * scatter-add and masks filling zeros to the device loops
 * (device_loops.c), GELU and its gradient to cuBLASLt's aux epilogues
 * (relu's to a kernel after the GEMM) and the cross-entropy's gradient to
 * softmax.cuh, built by nvcc. What they compute is checked on a GPU by
 * bench/gpu_train_check.sh, and the loops' text on PoCL by
 * test_emit_opencl's test_train. */
static void test_train(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  const char *gpt2[] = {"layers=2", "d=24", "heads=2", "vocab=37", "ctx=17"};
  const char *mlp[] = {"hidden1=129", "hidden2=33"};
  build_train("models/gpt2.lua", "gpt2", "cuda-sm80", "f32", gpt2, 5);
  build_train("models/mlp.lua", "mlp", "cuda-sm90", "tf32", mlp, 2);
  build_train("tests/ops/embedding_loss.lua", "embedding_loss", "cuda-sm80", "f32", NULL, 0);
  build_train("models/gpt2.lua", "gpt2", "cuda-sm80", "bf16", gpt2, 5);
  build_train("tests/ops/attention_loss.lua", "attention_loss", "cuda-sm90a", "bf16", NULL, 0);
  const char *cnn[] = {"size=13", "conv1=5", "conv2=7", "hidden=9"};
  build_train("models/mnist_cnn.lua", "mnist_cnn", "cuda-sm90a", "bf16", cnn, 4);
  char p[512];
  /* attention trains as one op: the forward saves each row's log-sum-exp,
   * the backward is the flash-attention backward (and its padding mask,
   * i32 in the model, goes to the template in q's type) */
  snprintf(p, sizeof p, "%s/attention_loss_train_cuda-sm90a_bf16/attention_loss.cu", work);
  assert_true(file_has(p, "  if (nnc_cuda_attention_bwd(a, s, &e)) return kernel_failed(m, "));
  assert_true(file_has(p, "  a.delta = (float *)((unsigned char *)m->ws + pad_offset((size_t)mask_n * sizeof(*mask)));\n"));
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_f32/gpt2.cu", work);
  assert_true(file_has(p, "  a.lse = (float *)("));
  /* evaluation runs the forward alone: forward_only(), through the graph cache too */
  assert_true(file_has(p, "static int forward_only(gpt2_model *m, const run_args &c, cudaStream_t s) {\n"));
  assert_true(file_has(p, "  return rc ? rc : run_kernels(m, d, &din, dout, m->stream, forward_only);\n"));
  assert_true(file_has(p, ": not needed by the loss or the kept outputs */\n"));
  /* the training API on the device: one update launch over every weight,
   * f32 master weights where the storage is narrow, and train_<model> */
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_bf16/gpt2.cu", work);
  assert_true(file_has(p, "  nnc_optim_update<<<grid, 256, 0, m->stream>>>(m->update_table, s, m->weights, m->master, m->grad, m->mom, m->vel);\n"));
  assert_true(file_has(p, "  if (!rc) rc = nnrt_cuda_malloc(m->alloc, (size_t)TRAIN_NUMEL * 4, (void **)&m->master, &e);\n"));
  assert_true(file_has(p, "  if (ce == cudaSuccess) ce = cudaMemcpy(m->master + train_table[i].at, data, count * 4, cudaMemcpyHostToDevice);\n"));
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_f32/gpt2.cu", work);
  assert_false(file_has(p, "m->master + train_table[i].at, data"));
  /* loss scaling: the scale reaches the device as the input loss_scale;
   * dynamic from 2^15 under f16, a fixed 1 otherwise */
  build_train("models/gpt2.lua", "gpt2", "cuda-sm80", "f16", gpt2, 5);
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_f16/gpt2.cu", work);
  assert_true(file_has(p, "#define TRAIN_LOSS_SCALE 32768.0f\n#define TRAIN_SCALE_MAX 32768.0f\n#define TRAIN_DYNAMIC_DEFAULT 1\n"));
  assert_true(file_has(p, "  if (!rc) rc = stage_inputs(m, d, &sin, &din);\n"));
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_bf16/gpt2.cu", work);
  assert_true(file_has(p, "#define TRAIN_LOSS_SCALE 1.0f\n#define TRAIN_SCALE_MAX 16777216.0f\n#define TRAIN_DYNAMIC_DEFAULT 0\n"));
  if (sh("nvidia-smi -L > /dev/null 2>&1") != 0) {
    /* no GPU: train_gpt2 stops at create with the device's message */
    assert_int_equal(sh("cd %s/gpt2_train_cuda-sm80_bf16 && ./train_gpt2 --check > train.log 2>&1", work), 1);
    snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_bf16/train.log", work);
    if (!file_has(p, "CUDA device")) sh("cat %s", p);
    assert_true(file_has(p, "CUDA device"));
  }
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_f32/gpt2.cu", work);
  assert_true(file_has(p, "  grad.slice: pad  (kernel "));
  assert_true(file_has(p, "    if (l >= 0 && l < in_len) y[e] = x[(o * in_len + l) * inner + i];\n"
                          "    else nnc_st(&y[e], 0.0f);\n"));
  assert_true(file_has(p, "  grad.embedding: embedding_grad  (kernel "));
  assert_true(file_has(p, "  const int V = 37, C = 24, count = d->B * d->T, R = 1;\n"));
  assert_true(file_has(p, "        if (id >= v0 && id < v1) nnc_st(&y[id * C + j], nnc_ld(y[id * C + j]) + nnc_ld(dy[r * C + j]));\n"));
  /* the loss and its gradient: softmax.cuh's row kernels, the rows' losses in the workspace */
  assert_true(file_has(p, "  if (nnc_cuda_cross_entropy(rows, cols, (float *)(c.arena + "));
  assert_true(file_has(p, "  if (nnc_cuda_cross_entropy_grad(rows, cols, (float *)(c.arena + "));
  assert_true(file_has(p, ": each row's loss */"));
  /* GELU and its gradient ride cuBLASLt's aux epilogues (N = 96, a multiple of 8) */
  assert_true(file_has(p, "  g.epilogue = NNRT_EPI_GELU_TANH_AUX;\n"));
  assert_true(file_has(p, "  g.epilogue = NNRT_EPI_DGELU_TANH;\n"));
  assert_true(file_has(p, "  g.stride_aux = (long long)M * N;   /* read: the GELU's input, for gelu' */\n"));
  /* the swaps of the last two axes through transpose.cuh, the reductions through reduce.cuh */
  assert_true(file_has(p, "  if (nnc_cuda_transpose_last2(1, rows, cols, "));
  assert_true(file_has(p, "  if (nnc_cuda_reduce(NNC_REDUCE_SUM, outer, len, inner, "));
  snprintf(p, sizeof p, "%s/gpt2_train_cuda-sm80_f32/gpt2.h", work);
  assert_true(file_has(p, "  float *grad_wte_weight;   /* f32[37,24] */\n"));
  snprintf(p, sizeof p, "%s/mlp_train_cuda-sm90_tf32/mlp.cu", work);
  /* relu after cuBLASLt from the input it saved; relu's gradient, whose
   * product is reshaped first (the odd widths' transposed dy), a loop */
  assert_true(file_has(p, "  nnc_map<false>(y, x, n, [](float, float w) { return (w < 0.0f ? 0.0f : w); });\n"));
  assert_true(file_has(p, " = (a0[u] > 0.0f ? a1[u] : 0.0f);   /* mlp.lua:"));
  assert_true(file_has(p, "  g.tf32 = true;   /* --precision=tf32 */\n"));
}

/* A loop's index over a dim that is a product of symbols keeps it in
 * parentheses, as an int (a 64-bit division is several times slower):
 * rem % (int)(B * T), not rem % B * T. */
static void test_product_dims(void **state) {
  (void)state;
  char out[512], model[512], p[600];
  nnc_error err = {0};
  snprintf(model, sizeof model, "%s/prod.lua", work);
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs("local B = dim(\"B\", 4)\nlocal T = dim(\"T\", 8)\nlocal x = input(\"x\", f32, { B, T, 3 })\n"
        "output(\"y\", x:reshape { B * T, 3, 1 }:permute { 2, 1, 3 } + 0)\n", f);
  fclose(f);
  snprintf(out, sizeof out, "%s/prod_out", work);
  nnc_build_opts o = {.model = model, .target = "cuda-sm80", .out_dir = out};
  assert_int_equal(nnc_build(&o, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/prod.cu", out);
  assert_true(file_has(p, "    const int i1 = rem % (int)(d->B * d->T);\n"));
}

/* Emits model (a path under the source tree, or absolute) for cuda-sm90a bf16 into work/name and returns the
 * path of its name.cu in p. */
static void emit_text(const char *model, const char *name, char *p, size_t n) {
  char out[512], path[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/%s", work, name);
  if (model[0] == '/') snprintf(path, sizeof path, "%s", model);
  else snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = "cuda-sm90a", .precision = "bf16", .out_dir = out};
  nnc_status st = nnc_build(&o, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  snprintf(p, n, "%s/%s.cu", out, strrchr(path, '/') + 1);
  p[strlen(p) - strlen(".lua.cu")] = 0;
  strncat(p, ".cu", n - strlen(p) - 1);
}

/* The loops on 16-byte vectors (the text; their results are checked on a
 * GPU by bench/gpu_check.sh): GPT-2's and BERT's embedding lookups inside
 * the row kernels of their layernorms (the table row through the row's id,
 * NaN for an id outside it), their position rows read from the table in
 * place (a view), GPT-2's sum stored as a side output for the residual; the same sum in an elementwise kernel where a linear and an
 * output read it (a lookup inside the add's loop, the position slice
 * broadcast over the batch, and the cast into the caller's f32 output
 * behind its alignment test); LLaMA's lookup kernel (nnc_gather); BERT's
 * pooling product with the mask a value a row, its reduce kernel storing
 * last_hidden_state as it reads x (behind the same test); rows of 37
 * elements keep the element loops, for a lookup kernel (its output is
 * also an output) and for one inside the add. */
static void test_vec_loops(void **state) {
  (void)state;
  char p[600], model[512];
  emit_text("models/gpt2.lua", "gpt2_vec", p, sizeof p);
  assert_false(file_has(p, "nnc_gather<"));
  /* ln_1 leaves c_attn's prologue for the sum's kernel (gemm_norm_rows) */
  assert_true(file_has(p, "h.0.ln_1: embedding + add + layernorm  (kernel 1, row) */\n"));
  assert_true(file_has(p, "h.0.attn.c_attn: linear  (kernel 2, gemm) */\n"));
  assert_true(file_has(p, "    nnc_vld(x2 + i1 * 768 + j, a2[u]);\n    {\n"
                          "      const int id = x1[e / 768];   /* ids's row of wte.weight */\n"
                          "      if (id >= 0 && id < 50257) nnc_vld(x0 + id * 768 + j, g3[u]);\n"
                          "      else NNC_VEC_FOR(l, 8) g3[u][l] = NAN;\n    }\n  }\n"));
  assert_true(file_has(p, " = g3[u][l];   /* gpt2.lua:78 embedding */\n"));
  assert_true(file_has(p, " + a2[u][l]);   /* gpt2.lua:78 add */\n"));
  assert_true(file_has(p, "      o[u][l] = v5;\n      sum += v5;\n    }\n"
                          "    /* side output add [B,T,768]: gpt2.lua:78 add */\n"
                          "    nnc_vst(y1 + r * 768 + col, o[u]);\n  }\n"));
  assert_false(file_has(p, "    const int id = ids[e / C];\n"));
  /* wpe[0:T] is a view of the table (slice_view.c): the row kernel reads it in place */
  assert_true(file_has(p, "  const __nv_bfloat16 *x2 = (__nv_bfloat16 *)(c.weights + 77194752);   /* slice [T,768] */\n"));
  assert_true(file_has(p, "  RUN(0, 0);   /* a view: it aliases its input, nothing to run */\n"));
  snprintf(model, sizeof model, "%s/emb.lua", work);
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs("local B = dim(\"B\", 8)\nlocal T = dim(\"T\", 1024)\nlocal ids = input(\"ids\", i32, { B, T })\n"
        "local wte = param(\"wte.weight\", { 50257, 768 })\nlocal wpe = param(\"wpe.weight\", { 1024, 768 })\n"
        "local x = embedding(ids, wte) + slice(wpe, 1, 1, T)\noutput(\"x\", x)\n"
        "output(\"y\", linear(x, 16, param(\"fc\")))\n", f);
  fclose(f);
  emit_text(model, "emb_vec", p, sizeof p);
  assert_false(file_has(p, "nnc_gather<"));
  assert_true(file_has(p, "      nnc_vld(x2 + i1 * 768 + j, a2[u]);\n      {\n"
                          "        const int id = x1[e / 768];   /* ids's row of wte.weight */\n"
                          "        if (id >= 0 && id < 50257) nnc_vld(x0 + id * 768 + j, g3[u]);\n"
                          "        else NNC_VEC_FOR(l, 8) g3[u][l] = NAN;\n      }\n    }\n"));
  assert_true(file_has(p, " = g3[u][l];   /* emb.lua:6 embedding */\n"));
  assert_true(file_has(p, "  const int n = (int)nnc_vec_threads((d->B * d->T * 768) / 8);\n"));
  assert_true(file_has(p, "  const int n = (int)(d->B * d->T * 768) / 8;   /* vectors of 8 elements */\n"));
  assert_true(file_has(p, "    float a2[NNC_UNROLL][8], g3[NNC_UNROLL][8];\n"));
  assert_true(file_has(p, "      const int e = (int)(e0 + u * stride) * 8;   /* the vector's first element */\n"
                          "      int rem = e;\n      const int j = rem % 768;\n      rem /= 768;\n"
                          "      const int i1 = rem % (int)(d->T);\n"));
  assert_true(file_has(p, " + a2[u][l]);   /* emb.lua:6 add */\n"));
  assert_true(file_has(p, "      nnc_vst(y + e, o);\n"));
  /* x, the caller's f32 buffer: two vectors of f32 for each of bf16, where it is aligned */
  assert_true(file_has(p, "  float *y = c.out.x;   /* x [B,T,768] */\n"
                          "  if (nnc_aligned16(y)) {   /* the caller's buffer: vectors where it is 16-byte aligned */\n"
                          "    const int n = (int)(d->B * d->T * 768) / 8;   /* vectors of 8 elements */\n"));
  assert_true(file_has(p, "    return;\n  }\n  const int n = (int)(d->B * d->T * 768);\n  NNC_LOOP_UNROLLED(e0, stride, n) {\n"));
  emit_text("models/llama.lua", "llama_vec", p, sizeof p);
  assert_true(file_has(p, "  nnc_gather<8>(y, table, ids, (int)(d->B * d->T), 32000, 768);\n"));
  emit_text("models/bert.lua", "bert_vec", p, sizeof p);
  assert_false(file_has(p, "nnc_gather<"));
  /* the lookups, the position row and their sum in the layernorm's row kernel (row_loops): a warp a row */
  assert_true(file_has(p, "      if (id >= 0 && id < 30522) nnc_vld(x0 + id * 384 + j, g4[u]);\n"));
  assert_true(file_has(p, "      if (id >= 0 && id < 2) nnc_vld(x2 + id * 384 + j, g6[u]);\n"));
  assert_true(file_has(p, "embeddings.LayerNorm: embedding + embedding + add + add + layernorm  (kernel 2, row) */\n"));
  assert_true(file_has(p, "  NNC_ROW(r, lane, rows);   /* a warp a row: a lane holds its vectors of 8 lane, lane + 32, ... */\n"
                          "  float a4[2][8], g4[2][8], g6[2][8], o[2][8];\n"));
  assert_true(file_has(p, "      o[u][l] = v10;\n      sum += v10;\n"));
  assert_true(file_has(p, "    NNC_VEC_FOR(l, 8) o[u][l] = fmaf((o[u][l] - mean) * rstd, gamma[u][l], beta[u][l]);\n"
                          "    nnc_vst(y + r * 384 + col, o[u]);\n"));
  assert_false(file_has(p, "embeddings.LayerNorm: layernorm  (kernel"));
  /* the mean pooling: the product, its sum over T, the division and the f32 cast as one reduce kernel, which
   * also casts x into last_hidden_state (a side output: no cast kernel reading x again) */
  assert_true(file_has(p, "sentence_embedding: cast + mul + sum + div + cast  (kernel 47, reduce) */\n"));
  assert_false(file_has(p, "last_hidden_state: cast  (kernel"));
  assert_true(file_has(p, "  const int len = (int)(d->T), inner = 384, tiles = (inner / 8 + 7) / 8;\n"));
  assert_true(file_has(p, "    if (step < h) NNC_VEC_FOR(l, 8) part[l][NNC_THREAD] += part[l][NNC_THREAD + h * 8];\n"));
  assert_true(file_has(p, "    const float v265 = (v263 / a2[u]);   /* bert.lua:74 div */\n"));
  assert_false(file_has(p, "    const int id = ids[e / C];\n"));
  assert_true(file_has(p, "  const __nv_bfloat16 *x4 = (__nv_bfloat16 *)(c.weights + 23442432);   /* slice [T,384] */\n"));
  assert_true(file_has(p, " + a4[u][l]);   /* bert.lua:37 add */\n"));
  /* the mask's value of the row, once a vector */
  assert_true(file_has(p, "    float a0[NNC_UNROLL][8], a1[NNC_UNROLL];\n"));
  assert_true(file_has(p, "      a1[u] = nnc_ld(x1[i0 * (int)(d->T) + i1]);\n"));
  assert_true(file_has(p, " = (a0[u][l] * a1[u]);   /* bert.lua:74 mul */\n"));
  /* last_hidden_state, the caller's f32 buffer: two vectors of f32 for each of bf16, where it is aligned */
  assert_true(file_has(p, "  float *y1 = c.out.last_hidden_state;   /* last_hidden_state [B,T,384] */\n"
                          "  const bool y1_vec = nnc_aligned16(y1);   /* the caller's buffer: 16-byte stores where it is "
                          "aligned */\n"));
  assert_true(file_has(p, "          y1v[l] = v266;\n          acc[l] += v262;\n        }\n"
                          "        /* side output last_hidden_state [B,T,384]: bert.lua:29 cast */\n"
                          "        if (y1_vec) nnc_vst(y1 + e, y1v);\n"
                          "        else NNC_VEC_FOR(l, 8) nnc_st(&y1[e + l], y1v[l]);\n"));
  /* the attention mask's cast (i32) keeps the element loop */
  assert_true(file_has(p, "/* attention_mask [B,T] */\n  const int n = (int)(d->B * d->T);\n  NNC_LOOP_UNROLLED(e0, stride, n) {\n"));
  snprintf(model, sizeof model, "%s/odd.lua", work);
  f = fopen(model, "w");
  assert_non_null(f);
  fputs("local B = dim(\"B\", 4)\nlocal T = dim(\"T\", 8)\nlocal ids = input(\"ids\", i32, { B, T })\n"
        "local wpe = param(\"wpe\", { 16, 37 })\nlocal w = embedding(ids, param(\"wte\", { 50, 37 }))\n"
        "output(\"w\", w)\n"
        "output(\"y\", w + slice(wpe, 1, 1, T) + embedding(ids, param(\"wte2\", { 50, 37 })))\n", f);
  fclose(f);
  emit_text(model, "odd_vec", p, sizeof p);
  assert_true(file_has(p, "    const int id = ids[e / C];\n"));   /* w's lookup kernel: w is an output */
  assert_true(file_has(p, "        g7[u] = id >= 0 && id < 50 ? nnc_ld(x2[id * 37 + j]) : NAN;\n"));   /* wte2 in the add */
  assert_true(file_has(p, "  const __nv_bfloat16 *x1 = (__nv_bfloat16 *)(c.weights + 0);   /* slice [T,37] */\n"));
  assert_true(file_has(p, "      a1[u] = nnc_ld(x1[i1 * 37 + j]);\n"));
  assert_false(file_has(p, "nnc_gather<"));
  assert_false(file_has(p, "NNC_VEC_FOR"));
  assert_false(file_has(p, "uint4"));
}

static void test_emitter_errors(void **state) {
  (void)state;
  char out[512], model[512];
  nnc_error err = {0};
  /* an f16 input at the API: the emitter refuses it and names it */
  snprintf(model, sizeof model, "%s/half.lua", work);
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs("local x = input(\"x\", f16, { 4, 8 })\noutput(\"y\", relu(x))\n", f);
  fclose(f);
  snprintf(out, sizeof out, "%s/half_out", work);
  nnc_build_opts o = {.model = model, .target = "cuda-sm80", .out_dir = out};
  assert_int_equal(nnc_build(&o, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "cuda-sm80: input x is f16, expected f32 or i32 at the API"));
  assert_int_equal(access(out, F_OK), -1);
}

/* nvcc's CUDA major version, 0 without nvcc. */
static int nvcc_major(void) {
  FILE *f = popen("nvcc --version 2>/dev/null | sed -n 's/.*release \\([0-9]*\\)\\..*/\\1/p'", "r");
  if (!f) return 0;
  int v = 0;
  if (fscanf(f, "%d", &v) != 1) v = 0;
  pclose(f);
  return v;
}

/* cuda-sm70 (Volta), which CUDA 13's nvcc no longer builds. Every model is
 * emitted at f32 and f16 (bf16 and tf32 are refused: Volta has neither);
 * with CUDA 13's nvcc the Makefile stops with a message naming the nvcc it
 * needs instead of nvcc's own error. The device code of each folder is
 * compiled for sm_70 by clang 19 against CUDA 12's headers and assembled by
 * CUDA 12's ptxas (tests/volta_toolchain.sh puts them in build/cuda12);
 * ptxas rejects any instruction Volta lacks (cp.async, ldmatrix, bf16 or
 * m16n8k16 mma). The host code is Volta's too: one folder builds with nvcc
 * for sm_75 and its benchmark fails cleanly without a GPU. */
static void test_volta(void **state) {
  (void)state;
  static const struct {
    const char *model, *name, *precision;
    const char *defs[3];
    int nd;
  } cases[] = {
    {"models/mlp.lua", "mlp", "f16", {"hidden1=129", "hidden2=33"}, 2},
    {"models/gpt2.lua", "gpt2", "f32", {"layers=2", "vocab=2001", "ctx=64"}, 3},
    {"models/gpt2.lua", "gpt2", "f16", {"layers=2", "vocab=2001", "ctx=64"}, 3},
    {"models/bert.lua", "bert", "f32", {"layers=2", "vocab=1001"}, 2},
    {"models/bert.lua", "bert", "f16", {"layers=2", "vocab=1001"}, 2},
  };
  char out[512], p[700], tc[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/volta_bf16", work);
  assert_int_equal(emit("models/mlp.lua", "cuda-sm70", "bf16", NULL, 0, out, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "--precision=bf16: target cuda-sm70 has no bf16 tensor cores"));
  snprintf(tc, sizeof tc, "%s/build/cuda12", NNC_SOURCE_ROOT);
  bool clang = sh("command -v clang++-19 > /dev/null 2>&1 && test -x %s/bin/ptxas", tc) == 0;
  if (!clang) fprintf(stderr, "no clang++-19 or CUDA 12 in %s (tests/volta_toolchain.sh): device code not checked\n", tc);
  int major = nvcc_major();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(out, sizeof out, "%s/%s_sm70_%s", work, cases[i].name, cases[i].precision);
    nnc_status st = emit(cases[i].model, "cuda-sm70", cases[i].precision, cases[i].defs, cases[i].nd, out, &err);
    if (st) fprintf(stderr, "%s: %s\n", cases[i].model, err.msg);
    assert_int_equal(st, NNC_OK);
    snprintf(p, sizeof p, "%s/Makefile", out);
    assert_true(file_has(p, "ARCH ?= -gencode arch=compute_70,code=sm_70 -gencode arch=compute_70,code=compute_70"));
    assert_true(file_has(p, "# Needs nvcc (CUDA 12), "));
    if (major > 12) {
      assert_int_not_equal(sh("make -C %s > %s/make.log 2>&1", out, out), 0);
      snprintf(p, sizeof p, "%s/make.log", out);
      char want[160];
      snprintf(want, sizeof want, "ARCH builds sm_70 code, which needs the nvcc of CUDA 12 or older; found CUDA %d",
               major);
      if (!file_has(p, want)) sh("cat %s", p);
      assert_true(file_has(p, want));
    }
    if (!clang || !major) continue;
    /* CUDA 12's headers first; only cuBLASLt's come from the nvcc here */
    int rc = sh("cd %s && clang++-19 -x cuda --cuda-gpu-arch=sm_70 --cuda-device-only -S -std=c++17 -O2 "
                "--cuda-path=%s -Wno-unknown-cuda-version -I. -Iruntime -Iruntime/cuda "
                "-idirafter \"$(dirname \"$(dirname \"$(command -v nvcc)\")\")/include\" %s.cu -o volta.ptx "
                "> volta.log 2>&1 && %s/bin/ptxas -arch=sm_70 volta.ptx -o volta.cubin >> volta.log 2>&1 "
                "|| tail -20 volta.log",
                out, tc, cases[i].name, tc);
    assert_int_equal(rc, 0);
    snprintf(p, sizeof p, "%s/volta.ptx", out);
    assert_true(file_has(p, "\n.target sm_70\n"));
    assert_true(file_has(p, ".entry "));
  }
  if (!major) return;
  /* the host code: nvcc builds it for a GPU it still knows */
  snprintf(out, sizeof out, "%s/mlp_sm70_f16", work);
  assert_int_equal(sh("make -s -C %s -j2 ARCH='-gencode arch=compute_75,code=sm_75' > %s/make75.log 2>&1 || "
                      "tail -30 %s/make75.log", out, out, out), 0);
  if (sh("nvidia-smi -L > /dev/null 2>&1") == 0) return;
  assert_int_equal(sh("cd %s && ./bench_mlp --runs 1 > run.log 2>&1", out), 1);
  snprintf(p, sizeof p, "%s/run.log", out);
  assert_true(file_has(p, "CUDA device"));
}

/* A one-layer decode-shaped GPT-2 of the given vocabulary on cuda-sm90a: 0 when its gpt2.cu has the
 * layers' four skinny branches, `a` n_a times and `b` n_b times. */
static int head_branches(const char *vocab, const char *a, int n_a, const char *b, int n_b) {
  char v[32], dir[512], p[600], cmd[2400];
  snprintf(v, sizeof v, "vocab=%s", vocab);
  const char *defs[] = {"layers=1", v, "ctx=64", "batch=64"};
  nnc_error err = {0};
  snprintf(dir, sizeof dir, "%s/gpt2_skinny_head_%s", work, vocab);
  if (emit_graphs("models/gpt2.lua", "cuda-sm90a", "bf16", NULL, defs, 4, false, dir, &err) != NNC_OK) return -1;
  snprintf(p, sizeof p, "%s/gpt2.cu", dir);
  snprintf(cmd, sizeof cmd,
           "test $(grep -c 'if (M <= NNC_SKINNY_ROWS) {' %s) -eq 4 && test $(grep -cF '%s' %s) -eq %d && "
           "test $(grep -cF '%s' %s) -eq %d", p, a, p, n_a, b, p, n_b);
  return sh("%s", cmd);
}

/* A decode-shaped GPT-2 (B = 64 rows at T = 1) on cuda-sm90a: every linear
 * layer and the LM head get the skinny GEMM's branch for M <= NNC_SKINNY_ROWS
 * (16 unless the folder is built otherwise) at run time before their usual
 * path (cuBLASLt, the head's wgmma GEMM), with W as [K, N] (Conv1D) in the
 * layers and [N, K] (the tied embedding) in the head; the folder builds with
 * nvcc (build()), also with the branch up to 64 rows, and a setting above 64
 * is refused at compile time. The weights are marked fixed (their copies may start before
 * the kernel before ends); a vocabulary head of over 8M weights takes the
 * branch only up to 16 rows whatever NNC_SKINNY_ROWS says, and none on nnc's
 * wgmma GEMM (rows of an odd length). sm_80 (no
 * clusters) has no branch. What it computes is checked on a GPU (the GPU
 * suite's decode and --check runs at few rows, bench/gpu_skinny.cu). */
static void test_skinny(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  const char *gpt2[] = {"layers=2", "vocab=2001", "ctx=64", "batch=64"};
  build("models/gpt2.lua", "gpt2", "cuda-sm90a", "bf16", gpt2, 4);
  char p[600], sm80[512], cmd[2400];
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm90a_bf16/gpt2.cu", work);
  assert_true(file_has(p, "#include \"kernels/gemm_skinny.cuh\""));
  assert_true(file_has(p, "/* cuBLASLt after a norm kernel (by rule); nnc's skinny GEMM when M <= NNC_SKINNY_ROWS "
                          "(gemm_skinny.cuh: 16 unless built otherwise) */"));
  assert_true(file_has(p, "  if (M <= NNC_SKINNY_ROWS) {   /* a few rows (a decode step): the skinny GEMM streams the weight "
                          "once */\n"
                          "    nnc_cuda_skinny_args<__nv_bfloat16, __nv_bfloat16> sk = {};"));
  assert_false(file_has(p, "NNC_SKINNY_GEMM"));
  assert_true(file_has(p, "    sk.w_nk = false;   /* W is [K, N] */\n"));
  assert_true(file_has(p, "    sk.act = NNC_CUDA_ACT_GELU_TANH;\n"));   /* mlp.c_fc's gelu in its epilogue */
  /* the head: f32 logits, W the tied embedding */
  assert_true(file_has(p, "nnc_cuda_skinny_args<__nv_bfloat16, float> sk = {};"));
  assert_true(file_has(p, "    sk.w_nk = true;   /* W is [N, K] */\n"));
  snprintf(cmd, sizeof cmd, "test $(grep -c 'sk.w_fixed = true;   /\\* a weight' %s) -eq 9", p);
  assert_int_equal(sh("%s", cmd), 0);
  /* 4 GEMMs a layer and the head, each with its branch */
  snprintf(cmd, sizeof cmd, "test $(grep -c 'nnc_cuda_gemm_skinny(sk, s, &se)' %s) -eq 9", p);
  assert_int_equal(sh("%s", cmd), 0);
  /* the same folder with the branch for every decode batch, and refused above 64 rows */
  snprintf(cmd, sizeof cmd, "rm -rf %s/gpt2_skinny_on && cp -r %s/gpt2_cuda-sm90a_bf16 %s/gpt2_skinny_on && "
           "make -s -C %s/gpt2_skinny_on clean > /dev/null 2>&1; "
           "make -s -C %s/gpt2_skinny_on -j2 NVCCFLAGS='-O3 -DNNC_SKINNY_ROWS=64' > %s/make_skinny.log 2>&1 || "
           "tail -30 %s/make_skinny.log", work, work, work, work, work, work, work);
  assert_int_equal(sh("%s", cmd), 0);
  snprintf(cmd, sizeof cmd, "cd %s/gpt2_skinny_on && nvcc -std=c++17 -DNNC_SKINNY_ROWS=65 -arch=sm_90a -I. -Iruntime "
           "-c gpt2.cu -o /dev/null 2>&1 | grep -q 'takes at most 64 rows'", work);
  assert_int_equal(sh("%s", cmd), 0);
  /* sm_80: no thread block clusters, no skinny branch */
  nnc_error err = {0};
  snprintf(sm80, sizeof sm80, "%s/gpt2_skinny_sm80", work);
  assert_int_equal(emit_graphs("models/gpt2.lua", "cuda-sm80", "bf16", NULL, gpt2, 4, false, sm80, &err), NNC_OK);
  snprintf(p, sizeof p, "%s/gpt2.cu", sm80);
  assert_false(file_has(p, "gemm_skinny"));
  /* a head of 16384 x 768 weights (cuBLASLt): the branch up to 16 rows only; the same head with rows of
   * an odd length goes to nnc's wgmma GEMM, which streams it faster at every M (its 64 x 128 tiles): no
   * branch. The layers' four GEMMs keep theirs. */
  assert_int_equal(head_branches("16384", "if (M <= NNC_SKINNY_ROWS && M <= 16) {", 1, "nnc_cuda_gemm_wgmma(g, s, &e)", 0), 0);
  assert_int_equal(head_branches("16385", "if (M <= NNC_SKINNY_ROWS && M <= 16) {", 0, "nnc_cuda_gemm_wgmma(g, s, &e)", 1), 0);
}

/* nnc --generate of models/<model>.lua for target (--precision=precision unless NULL) into out. */
static nnc_status emit_generate(const char *model, const char *target, const char *precision, const char *const *defs,
                                int nd, const char *out, nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = target, .defines = defs, .ndefines = nd, .precision = precision,
                      .out_dir = out, .generate = true};
  return nnc_build(&o, err);
}

/* The kv appends of a --generate decoder run inside the attention on CUDA
 * (passes/fold_append.c; bench/NOTES.md "Decode at B=64": a copy kernel a
 * cache a layer cost 2-5 us each): GPT-2's and LLaMA's attention kernels
 * on cuda-sm90a take each layer's new k and v rows (a.k_new, a.v_new:
 * c_attn's output through the head split; rope's output and the q|k|v
 * projection's v; LLaMA's ropes fold in too, passes/fold_rope.c: q and k
 * read from the projection, no rope kernel left) and no kv_append kernel
 * is left; heads of 64, so the
 * decode kernels that write the rows themselves are the ones a decode step
 * runs; both folders build with nvcc. c-simd keeps its kv_append kernels.
 * What the kernels write and read is checked on a GPU
 * (tests/gpu/test_attention.cu's append_* cases, bench/gpu_generate.sh). */
static void test_kv_append(void **state) {
  (void)state;
  const char *gpt2[] = {"layers=2", "d=128", "heads=2", "vocab=101", "ctx=64", "batch=4"};
  const char *llama[] = {"layers=2", "d=128", "heads=2", "kv_heads=1", "ffn=64", "vocab=101", "ctx=64", "batch=4"};
  const struct {
    const char *model, *name, *const *defs;
    int nd;
  } cases[] = {{"models/gpt2.lua", "gpt2", gpt2, 6}, {"models/llama.lua", "llama", llama, 8}};
  for (int c = 0; c < 2; c++) {
    char out[512], p[600], cmd[2048];
    nnc_error err = {0};
    snprintf(out, sizeof out, "%s/kv_%s_sm90a", work, cases[c].name);
    assert_int_equal(emit_generate(cases[c].model, "cuda-sm90a", "bf16", cases[c].defs, cases[c].nd, out, &err), NNC_OK);
    snprintf(p, sizeof p, "%s/%s.cu", out, cases[c].name);
    assert_false(file_has(p, "kv_append: x's T rows"));
    assert_true(file_has(p, "  /* the kv appends run inside the attention (a copy kernel each would cost a launch a layer):\n"
                            "   * this call's T new rows become rows S - T .. S - 1 of the caches, attended to as they are written */\n"));
    /* each layer's attention takes both caches' new rows */
    snprintf(cmd, sizeof cmd, "test $(grep -c '  a.k_new = ' %s) -eq 2 && test $(grep -c '  a.v_new = ' %s) -eq 2 && "
             "test $(grep -c 'nnc_cuda_attention(a, s, &e)' %s) -eq 2", p, p, p);
    assert_int_equal(sh("%s", cmd), 0);
    if (c == 0) {
      assert_true(file_has(p, "  /* k_new read in place: h.0.attn.c_attn [B,T,384], into cache.0.k [B,2,64,64] */\n"
                              "  a.k_new = (__nv_bfloat16 *)c.arena + 128;\n  a.kn_sb = 384 * d->T;\n  a.kn_sh = 64;\n"
                              "  a.kn_st = 384;\n"));
    } else {
      /* LLaMA's ropes run inside the attention too (passes/fold_rope.c): k_new and q are the projection's */
      assert_true(file_has(p, "  /* k_new read in place: model.layers.0.self_attn.q_proj|k_proj|v_proj (line 48) [B,T,256], "
                              "into cache.0.k [B,1,64,64] */\n"));
      assert_false(file_has(p, "rope: entry i <"));
      snprintf(cmd, sizeof cmd, "test $(grep -c '  a.rope_q = 1;' %s) -eq 2 && test $(grep -c '  a.rope_k = 1; ' %s) -eq 2 && "
               "test $(grep -c '  a.rope_pos = c.in.position_ids;' %s) -eq 2", p, p, p);
      assert_int_equal(sh("%s", cmd), 0);
      assert_true(file_has(p, "  /* q read before its rope: model.layers.0.self_attn.q_proj|k_proj|v_proj (line 48) [B,T,256]"));
    }
    snprintf(out, sizeof out, "%s/kv_%s_c", work, cases[c].name);
    assert_int_equal(emit_generate(cases[c].model, "c-simd", NULL, cases[c].defs, cases[c].nd, out, &err), NNC_OK);
    snprintf(p, sizeof p, "%s/%s.c", out, cases[c].name);
    snprintf(cmd, sizeof cmd, "test $(grep -c 'kv_append: x.s T rows' %s) -eq 4", p);
    assert_int_equal(sh("%s", cmd), 0);
  }
  if (!have_nvcc()) {
    skip();
    return;
  }
  for (int c = 0; c < 2; c++) {
    char out[512];
    snprintf(out, sizeof out, "%s/kv_%s_sm90a", work, cases[c].name);
    build_folder(out, cases[c].name, "");
  }
}

static int setup(void **state) {
  (void)state;
  snprintf(work, sizeof work, "/tmp/nnc_emit_cuda_XXXXXX");
  return mkdtemp(work) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return sh("rm -rf %s", work);
}

int main(int argc, char **argv) {
  /* "volta": cuda-sm70 alone, a test of its own that meson runs beside the rest */
  const struct CMUnitTest volta[] = {cmocka_unit_test(test_volta)};
  if (argc > 1 && strcmp(argv[1], "volta") == 0) return cmocka_run_group_tests(volta, setup, teardown);
  /* "skinny": the decode GEMMs' branch (a test of its own, so that it can be run alone) */
  const struct CMUnitTest skinny[] = {cmocka_unit_test(test_skinny)};
  if (argc > 1 && strcmp(argv[1], "skinny") == 0) return cmocka_run_group_tests(skinny, setup, teardown);
  /* "kv": the kv appends folded into the attention of --generate decoders */
  const struct CMUnitTest kv[] = {cmocka_unit_test(test_kv_append)};
  if (argc > 1 && strcmp(argv[1], "kv") == 0) return cmocka_run_group_tests(kv, setup, teardown);
  /* "vec": the loops on 16-byte vectors alone (text only, no nvcc) */
  const struct CMUnitTest vec[] = {cmocka_unit_test(test_vec_loops)};
  if (argc > 1 && strcmp(argv[1], "vec") == 0) return cmocka_run_group_tests(vec, setup, teardown);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_emitter_errors),
    cmocka_unit_test(test_product_dims),
    cmocka_unit_test(test_vec_loops),
    cmocka_unit_test(test_models),
    cmocka_unit_test(test_storage_outputs),
    cmocka_unit_test(test_ops),
    cmocka_unit_test(test_conv_windows),
    cmocka_unit_test(test_graphs),
    cmocka_unit_test(test_train),
    cmocka_unit_test(test_train_tp),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
