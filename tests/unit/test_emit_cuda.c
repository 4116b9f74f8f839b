/* tests/unit/test_emit_cuda.c — the CUDA emitter without a GPU: every model
 * of models/ and the op families of tests/ops/ are compiled for cuda-sm80
 * (f32 and bf16) and cuda-sm90 (bf16), and each folder is built with its own
 * Makefile by nvcc with warnings as errors. The benchmark then runs on this
 * machine, where there is no GPU: creating the model must fail with the
 * device error code and a message that says so, not crash. What the
 * generated code computes is checked on a GPU by bench/gpu_check.sh. The
 * emitter's own checks (f16 inputs, the precision in the code) are checked
 * here too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

static char work[256];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static bool file_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  static char buf[1 << 22];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strstr(buf, needle) != NULL;
}

static nnc_status emit(const char *model, const char *target, const char *precision, const char *const *defs, int nd,
                       const char *out, nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = target, .defines = defs, .ndefines = nd, .precision = precision,
                      .out_dir = out};
  return nnc_build(&o, err);
}

/* Emits, builds with nvcc for the target's architecture, and runs the
 * benchmark, which must report that there is no GPU (exit 1, E_DEVICE). */
static void build(const char *model, const char *name, const char *target, const char *precision,
                  const char *const *defs, int nd) {
  char out[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/%s_%s_%s", work, name, target, precision);
  nnc_status st = emit(model, target, precision, defs, nd, out, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
  if (sh("nvidia-smi -L > /dev/null 2>&1") == 0) return;   /* a GPU here: gpu_check.sh runs it */
  assert_int_equal(sh("cd %s && ./bench_%s --runs 1 > run.log 2>&1", out, name), 1);
  char log[600];
  snprintf(log, sizeof log, "%s/run.log", out);
  if (!file_has(log, "CUDA device")) sh("cat %s", log);
  assert_true(file_has(log, "CUDA device"));
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
  char p[512];
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm80_bf16/gpt2.cu", work);
  assert_true(file_has(p, "precision bf16"));
  assert_true(file_has(p, "nnrt_cuda_gemm_run(m->blas, &g, s, &err)"));
  assert_true(file_has(p, "/* cuBLASLt after a norm kernel */"));
  assert_true(file_has(p, "/* cuBLASLt after a norm kernel into rows padded to 16 bytes, copied */"));
  assert_true(file_has(p, "nnc_cuda_attention(a, s, &e)"));
  snprintf(p, sizeof p, "%s/gpt2_cuda-sm90_bf16/Makefile", work);
  assert_true(file_has(p, "ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"));
  snprintf(p, sizeof p, "%s/bert_cuda-sm80_tf32/bert.cu", work);
  assert_true(file_has(p, "g.tf32 = true;"));
  snprintf(p, sizeof p, "%s/mlp_cuda-sm80_f32/mlp.h", work);
  assert_true(file_has(p, "int mlp_run_device(mlp_model *m, const mlp_dims *d, const mlp_inputs *in, mlp_outputs *out, void *stream);"));
}

/* Every op family of tests/ops/ at odd sizes, in bf16 (the casts, masks,
 * moves, reductions and loss all go through the generated loops). */
static void test_ops(void **state) {
  (void)state;
  if (!have_nvcc()) {
    skip();
    return;
  }
  static const char *ops[] = {"elementwise", "masks", "softmax_axis", "reduce", "move", "embedding_loss",
                              "matmul", "norms", "attention"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    char model[128], path[512];
    snprintf(model, sizeof model, "tests/ops/%s.lua", ops[i]);
    snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
    assert_int_equal(access(path, R_OK), 0);
    build(model, ops[i], "cuda-sm80", "bf16", NULL, 0);
  }
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

static int setup(void **state) {
  (void)state;
  snprintf(work, sizeof work, "/tmp/nnc_emit_cuda_XXXXXX");
  return mkdtemp(work) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return sh("rm -rf %s", work);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_emitter_errors),
    cmocka_unit_test(test_models),
    cmocka_unit_test(test_ops),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
