/* tests/unit/test_measure.c — nnc --tune=measure without a GPU: the tuning
 * file (malformed lines skipped, the last line wins, other versions and GPUs
 * ignored, written into a new folder), the refusals (a target without
 * choices, no GPU and no NNC_GPU_NAME, a GPU the file has no times for), and
 * a whole compile from a tuning file: the MLP in bf16 for cuda-sm90 with
 * times that make nnc's own GEMM the fastest for one kernel and the padded
 * cuBLASLt call for another, whose generated code must then use them (and
 * build with nvcc where it is installed). The probe itself needs a GPU: it
 * runs in bench/gpu_check.sh tune. */
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
#include "emit/emit.h"
#include "frontend/frontend.h"
#include "measure.h"
#include "passes/passes.h"
#include "tune/tune.h"
#include "test_sh.h"

static char work[256];

static int setup(void **state) {
  (void)state;
  snprintf(work, sizeof work, "/tmp/nnc-test-measure-XXXXXX");
  return mkdtemp(work) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  if (getenv("NNC_TEST_KEEP")) return 0;
  return sh("rm -rf %s", work);
}

static void test_file(void **state) {
  (void)state;
  char path[512], line[2000];
  nnc_error err = {0};
  nnc_tuning t;
  snprintf(path, sizeof path, "%s/none.tsv", work);
  assert_int_equal(nnc_tuning_read(path, &t, &err), NNC_OK);   /* missing: empty */
  assert_int_equal(t.n, 0);
  nnc_tuning_free(&t);

  snprintf(path, sizeof path, "%s/t.tsv", work);
  memset(line, 'x', sizeof line - 2);
  line[sizeof line - 2] = '\n';
  line[sizeof line - 1] = 0;
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "# a comment\n\n");
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt\t12.5\n", NNC_VERSION_STRING);
  fprintf(f, "GPU A\t%s\tgemm k1\tnnc-64x64x32\t20\n", NNC_VERSION_STRING);
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt\t11.25\r\n", NNC_VERSION_STRING);   /* a later time wins */
  fprintf(f, "GPU B\t%s\tgemm k1\tcublaslt\t99\n", NNC_VERSION_STRING);
  fprintf(f, "GPU A\t0.0.0-older\tgemm k1\tnnc-64x64x32\t1\n");
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt\n", NNC_VERSION_STRING);            /* four fields */
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt\t1\textra\n", NNC_VERSION_STRING);  /* six */
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt\tfast\n", NNC_VERSION_STRING);      /* not a time */
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt\t-3\n", NNC_VERSION_STRING);        /* negative */
  fprintf(f, "\t%s\tgemm k1\tcublaslt\t3\n", NNC_VERSION_STRING);              /* no GPU */
  fputs(line, f);                                                              /* overlong */
  fclose(f);
  assert_int_equal(nnc_tuning_read(path, &t, &err), NNC_OK);
  assert_int_equal(t.n, 5);
  assert_int_equal(t.malformed, 6);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k1", "cublaslt") == 11.25);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k1", "nnc-64x64x32") == 20);   /* not the older version's 1 */
  assert_true(nnc_tuning_find(&t, "GPU B", "gemm k1", "cublaslt") == 99);
  assert_true(nnc_tuning_find(&t, "GPU C", "gemm k1", "cublaslt") < 0);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k2", "cublaslt") < 0);

  /* added lines go to a file in a folder that does not exist yet, and read back */
  nnc_tuning_entry e = {.gpu = "GPU A", .version = NNC_VERSION_STRING, .key = "gemm k2", .impl = "cublaslt", .us = 7.5};
  char deep[512];
  snprintf(deep, sizeof deep, "%s/a/b/tuning.tsv", work);
  assert_int_equal(nnc_tuning_add(&t, &e, deep, &err), NNC_OK);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k2", "cublaslt") == 7.5);
  nnc_tuning_free(&t);
  assert_int_equal(nnc_tuning_read(deep, &t, &err), NNC_OK);
  assert_int_equal(t.n, 1);
  assert_int_equal(t.malformed, 0);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k2", "cublaslt") == 7.5);
  nnc_tuning_free(&t);

  /* a file that cannot be written is an error that names it */
  nnc_tuning_entry e2 = e;
  assert_int_equal(nnc_tuning_add(&t, &e2, "/proc/nnc-cannot/tuning.tsv", &err), NNC_E_IO);
  assert_non_null(strstr(err.msg, "/proc/nnc-cannot"));
  nnc_tuning_free(&t);
}

static nnc_status build(const char *model, const char *target, const char *tune_file, const char *out, FILE *explain,
                        nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  static const char *defs[] = {"hidden1=128", "hidden2=64"};
  nnc_build_opts o = {.model = path, .target = target, .defines = defs, .ndefines = 2, .precision = "bf16",
                      .out_dir = out, .explain = explain, .measure = true, .tune_file = tune_file};
  if (strncmp(target, "c-", 2) == 0) o.precision = NULL;
  return nnc_build(&o, err);
}

static void test_refusals(void **state) {
  (void)state;
  nnc_error err = {0};
  char tf[512];
  snprintf(tf, sizeof tf, "%s/refusals.tsv", work);
  assert_int_equal(build("models/mlp.lua", "c-generic", tf, NULL, NULL, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "--tune=measure: expected a cuda-* target, found c-generic"));
  unsetenv("NNC_GPU_NAME");
  if (sh("nvidia-smi -L > /dev/null 2>&1") != 0) {
    assert_int_equal(build("models/mlp.lua", "cuda-sm90", tf, NULL, NULL, &err), NNC_E_TARGET);
    assert_non_null(strstr(err.msg, "expected an NVIDIA GPU on this machine"));
  }
  setenv("NNC_GPU_NAME", "Nobody's GPU", 1);
  assert_int_equal(build("models/mlp.lua", "cuda-sm90", tf, NULL, NULL, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "lacks times for Nobody's GPU"));
  unsetenv("NNC_GPU_NAME");
}

/* The MLP's schedule and its GEMMs' variants, as the driver computes them. */
static void mlp_variants(nnc_kernel_variants **v, int *nk) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/mlp.lua", NNC_SOURCE_ROOT);
  static const char *defs[] = {"hidden1=128", "hidden2=64"};
  nnc_frontend_opts fo = {.path = path, .defines = defs, .ndefines = 2};
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  nnc_target_desc t;
  nnc_precision prec;
  nnc_error err = {0};
  assert_int_equal(nnc_target_describe("cuda-sm90", &t, &err), NNC_OK);
  assert_int_equal(nnc_precision_parse("bf16", &prec, &err), NNC_OK);
  assert_int_equal(nnc_frontend_load(&fo, &g, &err), NNC_OK);
  assert_int_equal(nnc_pass_precision(&g, prec.storage, &err), NNC_OK);
  assert_int_equal(nnc_compile_graph(&g, &s, &err), NNC_OK);
  nnc_emit_request r = {&s, &t, NULL, path, NULL, prec, false, false};
  *nk = s.nk;
  *v = calloc((size_t)s.nk, sizeof **v);
  assert_non_null(*v);
  assert_int_equal(nnc_emit_variants(&r, *v, &err), NNC_OK);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

static void test_compile_from_file(void **state) {
  (void)state;
  nnc_kernel_variants *v;
  int nk;
  mlp_variants(&v, &nk);
  /* fc1 and fc2 (N 128, 64, K 784, 128: multiples of 8) have cuBLASLt and the
   * four tile configurations of nnc's GEMM; the 10-wide head cuBLASLt with
   * and without padded rows; the other kernels one implementation */
  int gemms = 0, head = -1, own = -1;
  for (int k = 0; k < nk; k++) {
    if (v[k].n == 5) {
      gemms++;
      assert_string_equal(v[k].name[0], "cublaslt");
      assert_string_equal(v[k].name[4], "nnc-64x64x32");
      if (own < 0) own = k;
    } else if (v[k].n == 2) {
      head = k;
      assert_string_equal(v[k].name[0], "cublaslt");   /* 10 columns: not worth padding by rule */
      assert_string_equal(v[k].name[1], "cublaslt-padded");
      assert_non_null(strstr(v[k].key, "N=10 "));
      assert_non_null(strstr(v[k].key, "out=bf16 b_trans bias"));   /* a bias: the logits' cast stays apart */
    } else {
      assert_true(v[k].n <= 1);
    }
  }
  assert_int_equal(gemms, 2);
  assert_true(head >= 0);
  char tf[512], out[512], exp[512];
  snprintf(tf, sizeof tf, "%s/mlp.tsv", work);
  FILE *f = fopen(tf, "w");
  assert_non_null(f);
  for (int k = 0; k < nk; k++)
    for (int i = 0; i < v[k].n && v[k].n > 1; i++) {
      /* own GEMM fastest on the first, cuBLASLt elsewhere; padded rows on the head */
      double us = k == own ? (strcmp(v[k].name[i], "nnc-64x64x32") == 0 ? 3.0 : 9.0)
                : k == head ? (i == 1 ? 2.0 : 4.0) : (i == 0 ? 1.0 : 6.0);
      fprintf(f, "Test GPU\t%s\t%s\t%s\t%.1f\n", NNC_VERSION_STRING, v[k].key, v[k].name[i], us);
    }
  fclose(f);
  free(v);
  setenv("NNC_GPU_NAME", "Test GPU", 1);
  snprintf(out, sizeof out, "%s/mlp_tuned", work);
  snprintf(exp, sizeof exp, "%s/explain.txt", work);
  FILE *ex = fopen(exp, "w");
  assert_non_null(ex);
  nnc_error err = {0};
  nnc_status st = build("models/mlp.lua", "cuda-sm90", tf, out, ex, &err);
  fclose(ex);
  unsetenv("NNC_GPU_NAME");
  if (st) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  assert_true(file_has(exp, "measured on Test GPU: cublaslt 9.0 us, nnc-128x256x32 9.0 us"));
  assert_true(file_has(exp, "nnc-64x64x32 3.0 us -> nnc-64x64x32"));
  assert_true(file_has(exp, "cublaslt 4.0 us, cublaslt-padded 2.0 us -> cublaslt-padded"));
  char cu[600];
  snprintf(cu, sizeof cu, "%s/mlp.cu", out);
  assert_true(file_has(cu, "#include \"kernels/gemm.cuh\""));
  assert_true(file_has(cu, "/* nnc's tensor-core GEMM, tiles 64x64x32 (measured) */"));
  assert_true(file_has(cu, "nnc_cuda_gemm_ex(g, NNC_CUDA_GEMM_64x64x32, m->ws, m->ws_size, s, &e)"));
  assert_true(file_has(cu, "/* cuBLASLt into rows padded to 16 bytes, copied (measured) */"));
  assert_true(file_has(cu, "/* cuBLASLt (measured) */"));
  assert_false(file_has(cu, "probe_variant"));   /* the probe's machinery stays in the probe */
  if (sh("command -v nvcc > /dev/null 2>&1") == 0) {
    assert_int_equal(sh("make -s -C %s -j2 > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_file),
    cmocka_unit_test(test_refusals),
    cmocka_unit_test(test_compile_from_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
