/* tests/unit/test_measure.c — nnc --tune=measure without a GPU: the tuning
 * file (malformed lines skipped, the last line wins, other versions and GPUs
 * ignored, "unavailable" implementations, written into a new folder), the
 * refusals (a target without choices, no GPU and no NNC_GPU_NAME, a GPU the
 * file has no times for), and a whole compile from a tuning file: the MLP in
 * bf16 for cuda-sm90 with times that make nnc's own GEMM the fastest for one
 * kernel, cuBLASLt's third heuristic result (cublaslt-a2) for another and the
 * padded cuBLASLt call for the head, whose generated code must then use them
 * (and build with nvcc where it is installed). The probe's source is emitted
 * too; building and running it needs a GPU: bench/gpu_check.sh tune. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
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
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt-a1\tinf\n", NNC_VERSION_STRING);    /* not a time */
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt-a1\tnan\n", NNC_VERSION_STRING);
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt-a2\tunavailable\n", NNC_VERSION_STRING);
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt-a3\tunavailable\n", NNC_VERSION_STRING);
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt-a3\t4.5\n", NNC_VERSION_STRING);    /* measured after all */
  fprintf(f, "GPU A\t%s\tgemm k1\tcublaslt-a1\tunavailable x\n", NNC_VERSION_STRING);
  fputs(line, f);                                                              /* overlong */
  fclose(f);
  assert_int_equal(nnc_tuning_read(path, &t, &err), NNC_OK);
  assert_int_equal(t.n, 8);
  assert_int_equal(t.malformed, 9);
  assert_true(isinf(nnc_tuning_find(&t, "GPU A", "gemm k1", "cublaslt-a2")));
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k1", "cublaslt-a3") == 4.5);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k1", "cublaslt-a1") < 0);
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
  nnc_tuning_entry un = e;   /* an unavailable implementation: the word, read back as such */
  snprintf(un.impl, sizeof un.impl, "cublaslt-split-a3");
  un.us = INFINITY;
  assert_int_equal(nnc_tuning_add(&t, &un, deep, &err), NNC_OK);
  nnc_tuning_free(&t);
  assert_true(file_has(deep, "\tgemm k2\tcublaslt-split-a3\tunavailable\n"));
  assert_int_equal(nnc_tuning_read(deep, &t, &err), NNC_OK);
  assert_int_equal(t.n, 2);
  assert_int_equal(t.malformed, 0);
  assert_true(nnc_tuning_find(&t, "GPU A", "gemm k2", "cublaslt") == 7.5);
  assert_true(isinf(nnc_tuning_find(&t, "GPU A", "gemm k2", "cublaslt-split-a3")));
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

/* The MLP in bf16 for cuda-sm90, compiled and tuned by rule as the driver does. */
typedef struct mlp_case {
  char path[512];
  nnc_graph g;
  nnc_schedule s;
  nnc_target_desc t;
  nnc_precision prec;
  nnc_tile *tiles;
} mlp_case;

/* models/NAME.lua with the config overrides defs, at precision, for target. */
static void model_load(mlp_case *c, const char *name, const char *const *defs, int ndefs, const char *target,
                       const char *precision) {
  snprintf(c->path, sizeof c->path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts fo = {.path = c->path, .defines = defs, .ndefines = ndefs};
  nnc_graph_init(&c->g);
  nnc_schedule_init(&c->s, &c->g);
  nnc_error err = {0};
  assert_int_equal(nnc_target_describe(target, &c->t, &err), NNC_OK);
  assert_int_equal(nnc_precision_parse(precision, &c->prec, &err), NNC_OK);
  assert_int_equal(nnc_frontend_load(&fo, &c->g, &err), NNC_OK);
  assert_int_equal(nnc_pass_precision(&c->g, &c->prec, &err), NNC_OK);
  assert_int_equal(nnc_compile_graph(&c->g, &c->s, &err), NNC_OK);
  c->tiles = calloc((size_t)c->s.nk + 1, sizeof *c->tiles);
  assert_non_null(c->tiles);
  for (int k = 0; k < c->s.nk; k++) assert_int_equal(nnc_tune_kernel(&c->t, &c->s, k, &c->tiles[k], &err), NNC_OK);
}

static void mlp_load(mlp_case *c) {
  static const char *defs[] = {"hidden1=128", "hidden2=64"};
  model_load(c, "mlp", defs, 2, "cuda-sm90", "bf16");
}

static void mlp_free(mlp_case *c) {
  free(c->tiles);
  nnc_schedule_free(&c->s);
  nnc_graph_free(&c->g);
}

/* The MLP's GEMMs' variants, as the driver computes them, on cuda-sm90 at
 * bf16 (target NULL) or on target at f16. */
static void mlp_variants_on(const char *target, nnc_kernel_variants **v, int *nk) {
  mlp_case *c = calloc(1, sizeof *c);
  assert_non_null(c);
  if (target) {
    static const char *defs[] = {"hidden1=128", "hidden2=64"};
    model_load(c, "mlp", defs, 2, target, "f16");
  } else {
    mlp_load(c);
  }
  nnc_emit_request r = {&c->s, &c->t, c->tiles, c->path, NULL, c->prec, false, false, false, NULL, 0, false};
  nnc_error err = {0};
  *nk = c->s.nk;
  *v = calloc((size_t)c->s.nk, sizeof **v);
  assert_non_null(*v);
  assert_int_equal(nnc_emit_variants(&r, *v, &err), NNC_OK);
  mlp_free(c);
  free(c);
}

static void mlp_variants(nnc_kernel_variants **v, int *nk) { mlp_variants_on(NULL, v, nk); }

/* Volta and Turing lack what nnc's tensor-core GEMM is built of (cp.async,
 * ldmatrix on Volta, m16n8k16): their GEMMs list cuBLASLt's ways only. */
static void test_variants_pre_ampere(void **state) {
  (void)state;
  static const char *const targets[] = {"cuda-sm70", "cuda-sm75"};
  for (int t = 0; t < 2; t++) {
    nnc_kernel_variants *v;
    int nk, gemms = 0;
    mlp_variants_on(targets[t], &v, &nk);
    for (int k = 0; k < nk; k++) {
      if (v[k].n < 2) continue;
      gemms++;
      assert_string_equal(v[k].name[0], "cublaslt");
      for (int i = 0; i < v[k].n; i++) assert_null(strstr(v[k].name[i], "nnc-"));
    }
    assert_int_equal(gemms, 3);
    free(v);
  }
}

/* The probe nnc --tune=measure builds and runs on the GPU: every GEMM lists
 * cuBLASLt's first to fourth heuristic result, each a function that sets
 * g.algo. (Not built here: nvcc takes minutes on its four tile
 * configurations of nnc's GEMM, and test_compile_from_file already builds
 * a g.algo line.) */
static void test_probe_source(void **state) {
  (void)state;
  mlp_case *c = calloc(1, sizeof *c);
  assert_non_null(c);
  mlp_load(c);
  char out[512], cu[600];
  snprintf(out, sizeof out, "%s/mlp_probe", work);
  nnc_emit_request r = {&c->s, &c->t, c->tiles, c->path, out, c->prec, false, true, false, NULL, 0, false};
  nnc_error err = {0};
  nnc_status st = nnc_emit(&r, &err);
  if (st) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  mlp_free(c);
  free(c);
  snprintf(cu, sizeof cu, "%s/mlp.cu", out);
  /* fc1 and fc2, then the head */
  assert_int_equal(sh("test $(grep -c '8, {\"cublaslt\", \"cublaslt-a1\", \"cublaslt-a2\", \"cublaslt-a3\", "
                      "\"nnc-128x256x32\", \"nnc-128x128x32\", \"nnc-128x128x64\", \"nnc-64x64x32\"}}' %s) -eq 2", cu), 0);
  assert_true(file_has(cu, "6, {\"cublaslt\", \"cublaslt-a1\", \"cublaslt-a2\", \"cublaslt-a3\", \"cublaslt-padded\", "
                          "\"cublaslt-phased\"}}"));
  assert_true(file_has(cu, "g.row_phases = true;"));
  assert_true(file_has(cu, "/* implementation 3: cublaslt-a3 */"));
  /* three GEMMs, each with algo 1, 2 and 3 */
  for (int a = 1; a <= 3; a++) assert_int_equal(sh("test $(grep -c '  g.algo = %d;' %s) -eq 3", a, cu), 0);
  assert_true(file_has(cu, "#include \"kernels/gemm.cuh\""));
}

/* BERT's probe on sm_90a: its erf-GELU GEMMs run an epilogue kernel after
 * each cuBLASLt implementation, one per launcher (each defined once: the
 * probe did not build when they shared a name), and nnc's wgmma GEMMs
 * (gemm_wgmma.cuh, gemm_tma.cuh) are among the implementations of the GEMMs
 * they fit. */
static void test_probe_bert(void **state) {
  (void)state;
  mlp_case *c = calloc(1, sizeof *c);
  assert_non_null(c);
  static const char *defs[] = {"layers=1", "vocab=1001"};
  model_load(c, "bert", defs, 2, "cuda-sm90a", "bf16");
  char out[512], cu[600];
  snprintf(out, sizeof out, "%s/bert_probe", work);
  nnc_emit_request r = {&c->s, &c->t, c->tiles, c->path, out, c->prec, false, true, false, NULL, 0, false};
  nnc_error err = {0};
  nnc_status st = nnc_emit(&r, &err);
  if (st) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  mlp_free(c);
  free(c);
  snprintf(cu, sizeof cu, "%s/bert.cu", out);
  assert_int_equal(sh("test $(grep -c '^__global__ void k[0-9]*_v[0-9]*_post(' %s) -ge 4", cu), 0);
  assert_int_equal(sh("test -z \"$(grep '^__global__ void k[0-9_v]*_post(' %s | sort | uniq -d)\"", cu), 0);
  assert_int_equal(sh("grep -q 'nnc_pdl::launch(k[0-9]*_v1_post, nnc_map_blocks<__nv_bfloat16>(n), NNC_LOOP_THREADS, 0, s, ' %s", cu), 0);
  assert_true(file_has(cu, "\"wgmma\""));
  assert_true(file_has(cu, "#include \"kernels/gemm_wgmma.cuh\""));
  assert_true(file_has(cu, "\"tma\""));
  assert_true(file_has(cu, "#include \"kernels/gemm_tma.cuh\""));
  assert_true(file_has(cu, "nnc_cuda_gemm_tma_args<__nv_bfloat16, __nv_bfloat16> g = {};"));
}

static void test_compile_from_file(void **state) {
  (void)state;
  nnc_kernel_variants *v;
  int nk;
  mlp_variants(&v, &nk);
  /* fc1 and fc2 (N 128, 64, K 784, 128: multiples of 8) have cuBLASLt with
   * its heuristic's first to fourth result and the four tile configurations
   * of nnc's GEMM; the 10-wide head the same four cuBLASLt, the padded
   * rows and the phases of rows; the other kernels one implementation */
  int gemms = 0, head = -1, own = -1, alt = -1;
  for (int k = 0; k < nk; k++) {
    if (v[k].n == 8) {
      gemms++;
      assert_string_equal(v[k].name[0], "cublaslt");
      assert_string_equal(v[k].name[1], "cublaslt-a1");
      assert_string_equal(v[k].name[2], "cublaslt-a2");
      assert_string_equal(v[k].name[3], "cublaslt-a3");
      assert_string_equal(v[k].name[4], "nnc-128x256x32");
      assert_string_equal(v[k].name[7], "nnc-64x64x32");
      if (own < 0) own = k;
      else alt = k;
    } else if (v[k].n == 6) {
      head = k;
      assert_string_equal(v[k].name[0], "cublaslt");   /* 10 columns: not worth padding by rule */
      assert_string_equal(v[k].name[1], "cublaslt-a1");
      assert_string_equal(v[k].name[3], "cublaslt-a3");
      assert_string_equal(v[k].name[4], "cublaslt-padded");   /* no -aN: only plain and split have them */
      assert_string_equal(v[k].name[5], "cublaslt-phased");
      assert_non_null(strstr(v[k].key, "N=10 "));
      assert_non_null(strstr(v[k].key, "out=bf16 b_trans bias"));   /* a bias: the logits' cast stays apart */
    } else {
      assert_true(v[k].n <= 1);
    }
  }
  assert_int_equal(gemms, 2);
  assert_true(head >= 0 && alt >= 0);
  char tf[512], out[512], exp[512];
  snprintf(tf, sizeof tf, "%s/mlp.tsv", work);
  FILE *f = fopen(tf, "w");
  assert_non_null(f);
  for (int k = 0; k < nk; k++)
    for (int i = 0; i < v[k].n && v[k].n > 1; i++) {
      /* own GEMM fastest on the first, cuBLASLt's third heuristic result on the
       * second (whose second is unavailable), padded rows on the head */
      const char *n = v[k].name[i];
      double us = k == own   ? (strcmp(n, "nnc-64x64x32") == 0 ? 3.0 : 9.0)
                : k == head  ? (strcmp(n, "cublaslt-padded") == 0 ? 2.0 : 4.0)
                : !strcmp(n, "cublaslt-a2") ? 0.5 : !strcmp(n, "cublaslt") ? 1.0 : 6.0;
      if (k == alt && !strcmp(n, "cublaslt-a1"))
        fprintf(f, "Test GPU\t%s\t%s\t%s\tunavailable\n", NNC_VERSION_STRING, v[k].key, n);
      else
        fprintf(f, "Test GPU\t%s\t%s\t%s\t%.1f\n", NNC_VERSION_STRING, v[k].key, n, us);
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
  assert_true(file_has(exp, "measured on Test GPU: cublaslt 9.0 us, cublaslt-a1 9.0 us, cublaslt-a2 9.0 us, "
                            "cublaslt-a3 9.0 us, nnc-128x256x32 9.0 us"));
  assert_true(file_has(exp, "nnc-64x64x32 3.0 us -> nnc-64x64x32"));
  assert_true(file_has(exp, "cublaslt-a3 4.0 us, cublaslt-padded 2.0 us, cublaslt-phased 4.0 us -> cublaslt-padded"));
  assert_true(file_has(exp, "measured on Test GPU: cublaslt 1.0 us, cublaslt-a1 unavailable, cublaslt-a2 0.5 us, "
                            "cublaslt-a3 6.0 us, nnc-128x256x32 6.0 us"));
  assert_true(file_has(exp, "nnc-64x64x32 6.0 us -> cublaslt-a2"));
  char cu[600];
  snprintf(cu, sizeof cu, "%s/mlp.cu", out);
  assert_true(file_has(cu, "#include \"kernels/gemm.cuh\""));
  assert_true(file_has(cu, "/* nnc's tensor-core GEMM, tiles 64x64x32 (measured) */"));
  assert_true(file_has(cu, "nnc_cuda_gemm_ex(g, NNC_CUDA_GEMM_64x64x32, m->ws, m->ws_size, s, &e)"));
  /* on sm_90 the comment goes on about the skinny GEMM's branch */
  assert_true(file_has(cu, "/* cuBLASLt into rows padded to 16 bytes, copied (measured)"));
  /* cublaslt-a2: the same call with the heuristic's third result, once */
  assert_true(file_has(cu, "/* cuBLASLt, the heuristic's algorithm 2 (measured)"));
  assert_true(file_has(cu, "  g.algo = 2;   /* cuBLASLt's heuristic result 2, not its first: --tune=measure timed it faster */\n"));
  assert_int_equal(sh("test $(grep -c 'g.algo = ' %s) -eq 1", cu), 0);
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
    cmocka_unit_test(test_probe_source),
    cmocka_unit_test(test_probe_bert),
    cmocka_unit_test(test_variants_pre_ampere),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
