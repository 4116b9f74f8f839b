/* tests/unit/test_emit_opencl.c — the OpenCL emitter on the first OpenCL
 * device (PoCL on a machine without a GPU): the models of models/ and the op
 * families of tests/ops/ are compiled for opencl-cpu, each folder is built by
 * its own Makefile with warnings as errors, and its benchmark's --check
 * compares one run at odd sizes with the float64 reference (exit 0: every
 * output within 1e-5). Without an OpenCL platform the runs are skipped; the
 * emitter's own checks (f32 only) run everywhere. */
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

static nnc_status emit(const char *model, const char *precision, const char *const *defs, int nd, const char *out,
                       nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = "opencl-cpu", .defines = defs, .ndefines = nd,
                      .precision = precision, .out_dir = out};
  return nnc_build(&o, err);
}

/* Whether an OpenCL device answers: the mlp's benchmark is built and run
 * once; a missing platform shows as the runtime's "no OpenCL platform". */
static int have_device = -1;

/* Emits, builds, and runs --check with dims (may be ""). */
static void check(const char *model, const char *name, const char *const *defs, int nd, const char *dims) {
  char out[512], log[600];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/%s", work, name);
  nnc_status st = emit(model, "f32", defs, nd, out, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j4 > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
  int rc = sh("cd %s && NNC_OPENCL_CACHE=%s/cache ./bench_%s --check --runs 1 %s > run.log 2>&1", out, work, name, dims);
  snprintf(log, sizeof log, "%s/run.log", out);
  if (have_device < 0) have_device = !file_has(log, "no OpenCL platform or device");
  if (!have_device) return;
  if (rc != 0) sh("tail -20 %s", log);
  assert_int_equal(rc, 0);
  assert_true(file_has(log, "max relative error"));
  assert_false(file_has(log, "FAILED"));
}

static void test_models(void **state) {
  (void)state;
  const char *mlp[] = {"hidden1=129", "hidden2=33"};
  const char *gpt2[] = {"layers=2", "vocab=1001", "ctx=64"};
  const char *bert[] = {"layers=2", "vocab=1001"};
  check("models/mlp.lua", "mlp", mlp, 2, "-d B=3");
  if (!have_device) {
    skip();
    return;
  }
  check("models/bert.lua", "bert", bert, 2, "-d B=3 -d T=17");
  check("models/gpt2.lua", "gpt2", gpt2, 3, "-d B=3 -d T=17");
  char p[600];
  snprintf(p, sizeof p, "%s/gpt2/gpt2.cl", work);
  assert_true(file_has(p, "k3_gemm"));
  assert_true(file_has(p, "q_off + b * q_sb"));   /* the folded head split */
  assert_true(file_has(p, "double acc[NNC_WM][NNC_WN];"));   /* f64 sums on a CPU device */
  snprintf(p, sizeof p, "%s/gpt2/Makefile", work);
  assert_true(file_has(p, "-lOpenCL"));
}

/* Every op family of tests/ops/ at its odd sizes: broadcasting chains,
 * masks, axis softmax, reductions, moves, embedding and loss, batched
 * matmuls with broadcast batch dims, norms, attention. */
static void test_ops(void **state) {
  (void)state;
  if (have_device == 0) {
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
    check(model, ops[i], NULL, 0, "");
    if (!have_device) {
      skip();
      return;
    }
  }
}

static void test_emitter_errors(void **state) {
  (void)state;
  char out[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/bf16_out", work);
  assert_int_equal(emit("models/mlp.lua", "bf16", NULL, 0, out, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "opencl-cpu: --precision=bf16: expected f32"));
  assert_int_equal(access(out, F_OK), -1);
}

static int setup(void **state) {
  (void)state;
  snprintf(work, sizeof work, "/tmp/nnc_emit_opencl_XXXXXX");
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
