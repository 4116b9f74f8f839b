/* tests/unit/test_emit_c_simd.c — the C SIMD emitter end to end: every model
 * of models/ (small configs) and every op family of tests/ops/ is compiled,
 * emitted, built with make (only a C compiler) and run with bench --check,
 * which compares each output with the float64 reference on the same random
 * inputs and weights and fails above 1e-5. Then the C API is misused from a
 * program built against one folder (tests/ops/api_misuse.c), and the
 * emitter's own errors: f16/bf16 tensors, an -o that nnc did not write, a
 * failed emit leaving nothing behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "test_sh.h"

static char work[256];   /* a fresh folder for this run's outputs */

/* Front-end, passes, tuner and emitter, as nnc -o does. */
static nnc_status emit_model(const char *model, const char *target, const char *const *defs, int nd,
                             const char *out, nnc_error *err) {
  nnc_build_opts o = {.model = model, .target = target, .defines = defs, .ndefines = nd, .out_dir = out};
  return nnc_build(&o, err);
}

/* Emits model (relative to the source root) into work/name, builds it and
 * runs bench --check with dims; asserts every step. */
static void build_and_check(const char *model, const char *name, const char *const *defs, int nd, const char *dims) {
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  snprintf(out, sizeof out, "%s/%s", work, name);
  nnc_status st = emit_model(path, "c-simd", defs, nd, out, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
  int rc = sh("cd %s && ./bench_%s --check %s --runs 2 --warmup 1 > check.log 2>&1; r=$?; cat check.log | grep -E 'relative|FAIL|bench'; exit $r",
              out, name, dims);
  assert_int_equal(rc, 0);
}

static void test_mlp(void **state) {
  const char *d[] = {"batch=37", "hidden1=129", "hidden2=33"};
  build_and_check("models/mlp.lua", "mlp", d, 3, "-d B=17");
  char p[512];
  snprintf(p, sizeof p, "%s/mlp/mlp.c", work);
  assert_true(file_has(p, "/* mlp.lua:17  fc1: linear + relu  (kernel 0, gemm) */"));
  snprintf(p, sizeof p, "%s/mlp/mlp.h", work);
  assert_true(file_has(p, "int mlp_run(mlp_model *m, const mlp_dims *d, const mlp_inputs *in, mlp_outputs *out);"));
  snprintf(p, sizeof p, "%s/mlp/weights_manifest.json", work);
  assert_true(file_has(p, "{\"name\": \"fc1.weight\", \"dtype\": \"F32\", \"shape\": [129, 784]}"));
}

static void test_gpt2(void **state) {
  const char *d[] = {"layers=2", "d=48", "heads=4", "vocab=101", "ctx=64"};
  build_and_check("models/gpt2.lua", "gpt2", d, 5, "-d B=3 -d T=17");
  char p[512];
  snprintf(p, sizeof p, "%s/gpt2/gpt2.c", work);
  assert_true(file_has(p, "h.0.mlp.c_fc: layernorm + linear + gelu  (kernel"));
  assert_true(file_has(p, "nnc_simd_attention("));
}

static void test_bert(void **state) {
  const char *d[] = {"layers=2", "hidden=48", "heads=4", "intermediate=129", "vocab=101", "positions=64",
                     "batch=4", "seq=32"};
  build_and_check("models/bert.lua", "bert", d, 8, "-d B=3 -d T=17");
}

#define OP_TEST(op, dims)                                                 \
  static void test_op_##op(void **state) {                               \
    build_and_check("tests/ops/" #op ".lua", #op, NULL, 0, dims);         \
  }
OP_TEST(elementwise, "-d B=3 -d T=17")
OP_TEST(masks, "-d B=3 -d T=17")
OP_TEST(softmax_axis, "-d B=3")
OP_TEST(reduce, "-d B=3 -d T=17")
OP_TEST(move, "-d B=3 -d T=17")
OP_TEST(embedding_loss, "-d B=3 -d T=17")
OP_TEST(matmul, "-d B=3 -d T=17")
OP_TEST(norms, "-d B=3 -d T=17")
OP_TEST(attention, "-d B=3 -d T=17")

/* The edge sizes: every dim at 1 and at its maximum. */
static void test_edge_sizes(void **state) {
  char out[512];
  snprintf(out, sizeof out, "%s/attention", work);
  assert_int_equal(sh("cd %s && ./bench_attention --check -d B=1 -d T=1 --runs 1 --warmup 0 > /dev/null", out), 0);
  assert_int_equal(sh("cd %s && ./bench_attention --check -d B=8 -d T=32 --runs 1 --warmup 0 > /dev/null", out), 0);
  snprintf(out, sizeof out, "%s/masks", work);
  assert_int_equal(sh("cd %s && ./bench_masks --check -d B=1 -d T=1 --runs 1 --warmup 0 > /dev/null", out), 0);
  /* a size above the maximum is refused by the harness */
  assert_int_equal(sh("cd %s && ./bench_masks --check -d B=9 > /dev/null 2>&1", out), 2);
}

static void test_api_misuse(void **state) {
  const char *d[] = {"batch=37", "pixels=23", "hidden1=129", "hidden2=33", "classes=10"};
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/models/mlp.lua", NNC_SOURCE_ROOT);
  snprintf(out, sizeof out, "%s/mlp_api", work);
  assert_int_equal(emit_model(path, "c-simd", d, 5, out, &err), NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' libmlp.a > /dev/null", out), 0);
  assert_int_equal(sh("cc -std=c11 -Wall -Wextra -Werror -I%s %s/tests/ops/api_misuse.c %s/libmlp.a -o %s/api_misuse -lm -lpthread",
                      out, NNC_SOURCE_ROOT, out, out), 0);
  assert_int_equal(sh("%s/api_misuse %s", out, out), 0);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static bool leftovers(const char *prefix) {
  DIR *dir = opendir(work);
  bool found = false;
  struct dirent *e;
  while (dir && (e = readdir(dir)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) found = true;
  if (dir) closedir(dir);
  return found;
}

static void test_half_is_target_error(void **state) {
  char model[512], out[512];
  nnc_error err = {0};
  snprintf(model, sizeof model, "%s/half.lua", work);
  snprintf(out, sizeof out, "%s/half_out", work);
  write_text(model, "local x = input(\"x\", bf16, { 3 })\noutput(\"y\", relu(x))\n");
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "c-simd computes in f32: input x is bf16"));
  assert_non_null(strstr(err.msg, "half.lua:1"));
  assert_false(leftovers("half_out"));   /* neither the folder nor its temporary */
}

static void test_output_folder(void **state) {
  char model[512], out[512], file[600];
  nnc_error err = {0};
  snprintf(model, sizeof model, "%s/tiny.lua", work);
  snprintf(out, sizeof out, "%s/users_folder", work);
  write_text(model, "local x = input(\"x\", f32, { 5 })\noutput(\"y\", relu(x) * 2)\n");
  assert_int_equal(mkdir(out, 0777), 0);
  snprintf(file, sizeof file, "%s/precious.txt", out);
  write_text(file, "keep me");
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_E_IO);
  assert_non_null(strstr(err.msg, "was not written by nnc"));
  assert_true(file_has(file, "keep me"));
  /* a folder nnc wrote is replaced whole */
  snprintf(out, sizeof out, "%s/tiny_out", work);
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_OK);
  snprintf(file, sizeof file, "%s/stale.txt", out);
  write_text(file, "old");
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_OK);
  assert_int_equal(access(file, F_OK), -1);
  snprintf(file, sizeof file, "%s/tiny.h", out);
  assert_int_equal(access(file, F_OK), 0);
  /* a model without symbolic dims builds and checks too */
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' > /dev/null 2>&1", out), 0);
  assert_int_equal(sh("cd %s && ./bench_tiny --check --runs 1 --json | grep -q '\"ok\": true'", out), 0);
}

int main(void) {
  snprintf(work, sizeof work, "/tmp/nnc_emit_test_XXXXXX");
  if (!mkdtemp(work)) return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_half_is_target_error),
    cmocka_unit_test(test_output_folder),
    cmocka_unit_test(test_mlp),
    cmocka_unit_test(test_gpt2),
    cmocka_unit_test(test_bert),
    cmocka_unit_test(test_op_elementwise),
    cmocka_unit_test(test_op_masks),
    cmocka_unit_test(test_op_softmax_axis),
    cmocka_unit_test(test_op_reduce),
    cmocka_unit_test(test_op_move),
    cmocka_unit_test(test_op_embedding_loss),
    cmocka_unit_test(test_op_matmul),
    cmocka_unit_test(test_op_norms),
    cmocka_unit_test(test_op_attention),
    cmocka_unit_test(test_edge_sizes),
    cmocka_unit_test(test_api_misuse),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (!failed) sh("rm -rf %s", work);
  return failed;
}
