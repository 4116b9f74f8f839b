/* tests/unit/test_emit_opencl.c — the OpenCL emitter on the first OpenCL
 * device (PoCL on a machine without a GPU): the models of models/ and the op
 * families of tests/ops/ are compiled for opencl-cpu, each folder is built by
 * its own Makefile with warnings as errors, and its benchmark's --check
 * compares one run at odd sizes with the float64 reference (exit 0: every
 * output within 1e-5). Without an OpenCL platform the runs are skipped; the
 * emitter's own checks (f32 only) and the GEMM tile rule run everywhere.
 * The rule's candidates are checked against the tuner's choice and against
 * devices that differ from the class defaults; a small program linked with
 * a model's library checks create's pick for the real device, and that
 * <model>_run_device on OpenCL buffers gives <model>_run's outputs. */
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
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tune/tune_opencl.h"
#include "test_sh.h"

static char work[256];

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
  assert_true(file_has(p, "#define NNC_GEMM_CPU 1"));   /* the CPU way for opencl-cpu */
  assert_true(file_has(p, "#define NNC_VW T0_VW"));      /* tiles picked at create */
  snprintf(p, sizeof p, "%s/gpt2/gpt2.c", work);
  assert_true(file_has(p, "static const gemm_tile tiles_0["));
  assert_true(file_has(p, "pick_tiles(m, &e)"));
  snprintf(p, sizeof p, "%s/gpt2/README.md", work);
  assert_true(file_has(p, "What is chosen where"));
  assert_true(file_has(p, "CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT"));
  snprintf(p, sizeof p, "%s/gpt2/bench_gpt2.c", work);
  assert_true(file_has(p, "b_stage, b_run_staged"));
  snprintf(p, sizeof p, "%s/gpt2/Makefile", work);
  assert_true(file_has(p, "-lOpenCL"));
}

/* The GPU way of the GEMM template on the same device: opencl-gpu, a model
 * and the batched matmuls. */
static void test_gpu_way(void **state) {
  (void)state;
  if (have_device == 0) {
    skip();
    return;
  }
  const char *mlp[] = {"hidden1=129", "hidden2=33"};
  const char *names[] = {"mlp", "matmul"}, *models[] = {"models/mlp.lua", "tests/ops/matmul.lua"};
  for (int i = 0; i < 2; i++) {
    char out[512], path[600], log[600];
    nnc_error err = {0};
    snprintf(out, sizeof out, "%s/%s_gpu", work, names[i]);
    snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, models[i]);
    nnc_build_opts o = {.model = path, .target = "opencl-gpu", .defines = i ? NULL : mlp, .ndefines = i ? 0 : 2,
                        .precision = "f32", .out_dir = out};
    if (nnc_build(&o, &err)) fail_msg("%s: %s", models[i], err.msg);
    snprintf(path, sizeof path, "%s/%s.cl", out, names[i]);
    assert_true(file_has(path, "#define NNC_GEMM_CPU 0"));
    assert_int_equal(sh("make -s -C %s -j4 > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
    int rc = sh("cd %s && NNC_OPENCL_CACHE=%s/cache ./bench_%s --check --runs 1 %s > run.log 2>&1", out, work,
                names[i], i ? "" : "-d B=3");
    snprintf(log, sizeof log, "%s/run.log", out);
    if (rc != 0) sh("tail -20 %s", log);
    assert_int_equal(rc, 0);
    assert_false(file_has(log, "FAILED"));
  }
}

/* ------------------------------------------------------- the tile rule */

typedef struct loaded {
  nnc_graph g;
  nnc_schedule s;
} loaded;

static void load(loaded *l, const char *model, const char *const *defs, int nd) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_frontend_opts fo = {.path = path, .defines = defs, .ndefines = nd};
  nnc_error err = {0};
  nnc_graph_init(&l->g);
  nnc_schedule_init(&l->s, &l->g);
  if (nnc_frontend_load(&fo, &l->g, &err) || nnc_compile_graph(&l->g, &l->s, &err)) fail_msg("%s: %s", model, err.msg);
}

static void unload(loaded *l) {
  nnc_schedule_free(&l->s);
  nnc_graph_free(&l->g);
}

static int first_gemm(const nnc_schedule *s) {
  for (int k = 0; k < s->nk; k++)
    if (s->k[k].kind == NNC_KERNEL_GEMM) return k;
  fail_msg("no GEMM kernel");
  return -1;
}

static nnc_target_desc describe(const char *name) {
  nnc_target_desc t;
  nnc_error err = {0};
  if (nnc_target_describe(name, &t, &err)) fail_msg("%s: %s", name, err.msg);
  return t;
}

/* The candidate a device gets: it fits, and none before it does. */
static const nnc_ocl_gemm_tile *pick(const nnc_ocl_gemm_tile *c, int n, const nnc_opencl_desc *d) {
  int i = nnc_opencl_gemm_pick(c, n, d);
  assert_true(i >= 0 && i < n);
  assert_true(nnc_opencl_gemm_fits(&c[i], d));
  for (int j = 0; j < i; j++) assert_false(nnc_opencl_gemm_fits(&c[j], d));
  return &c[i];
}

static void test_tile_rule_cpu(void **state) {
  (void)state;
  /* GPT-2 at B=1, T=128: its first GEMM is 128 x 2304 x 768 (ln_1 + c_attn) */
  const char *defs[] = {"layers=1", "batch=1", "ctx=128"};
  loaded l;
  load(&l, "models/gpt2.lua", defs, 3);
  int k = first_gemm(&l.s);
  nnc_target_desc t = describe("opencl-cpu");
  /* a host as this one: 2 units, 512 KiB of L2, vectors of 8 */
  t.opencl.compute_units = 2;
  t.opencl.local_mem = 512 << 10;
  t.opencl.max_work_group = 4096;
  t.opencl.preferred_vector_width = 8;
  nnc_ocl_gemm_tile c[NNC_OCL_MAX_CANDIDATES];
  int n = nnc_opencl_gemm_candidates(&t, &l.s, k, c);
  assert_true(n >= 3 && n <= NNC_OCL_MAX_CANDIDATES);
  for (int i = 0; i < n; i++) {
    assert_int_equal(c[i].cpu, 1);
    assert_int_equal(c[i].wn, 2 * c[i].vw);
    assert_int_equal(c[i].need_local, 2 * (int64_t)c[i].kc * (c[i].lm * c[i].wm + c[i].ln * c[i].wn) * 4);
  }
  /* the last candidate asks for nothing a device lacks */
  assert_int_equal(c[n - 1].vw, 4);
  assert_int_equal(c[n - 1].need_group, 1);
  assert_int_equal(c[n - 1].need_vector, 0);
  assert_int_equal(c[n - 1].max_units, 0);
  /* 128 x 2304 in groups of 48 x 128: 3 x 18 groups, 27 a unit */
  const nnc_ocl_gemm_tile *p = pick(c, n, &t.opencl);
  assert_int_equal(p->vw, 8);
  assert_int_equal(p->lm, 8);
  assert_int_equal(p->ln, 8);
  assert_int_equal(p->kc, 256);
  /* the tuner says the same */
  nnc_tile tile;
  nnc_error err = {0};
  assert_int_equal(nnc_tune_kernel(&t, &l.s, k, &tile, &err), NNC_OK);
  assert_int_equal(tile.block_m, p->lm * p->wm);
  assert_int_equal(tile.block_n, p->ln * p->wn);
  assert_int_equal(tile.kc, p->kc);
  assert_int_equal(tile.group, p->lm * p->ln);
  /* AVX-512: vectors of 16 */
  nnc_opencl_desc d = t.opencl;
  d.preferred_vector_width = 16;
  assert_int_equal(pick(c, n, &d)->vw, 16);
  /* no wide vectors (a GPU running the CPU way): 4 */
  d = t.opencl;
  d.preferred_vector_width = 1;
  assert_int_equal(pick(c, n, &d)->vw, 4);
  /* a driver that allows work-groups of 16 */
  d = t.opencl;
  d.max_work_group = 16;
  p = pick(c, n, &d);
  assert_true(p->lm * p->ln <= 16);
  assert_int_equal(p->vw, 8);
  /* 64 KiB of local memory: smaller packed tiles */
  d = t.opencl;
  d.local_mem = 64 << 10;
  p = pick(c, n, &d);
  assert_true(p->need_local <= 64 << 10);
  assert_true(p->lm * p->ln < 64);
  /* 64 compute units: groups small enough to give each two */
  d = t.opencl;
  d.compute_units = 64;
  p = pick(c, n, &d);
  assert_true(p->lm * p->ln < 64);
  int64_t gm = p->lm * p->wm, gn = p->ln * p->wn, groups = (128 + gm - 1) / gm * ((2304 + gn - 1) / gn);
  assert_true(groups >= 2 * 64 || p->max_units == 0);
  /* a device that reports nothing: the last candidate */
  memset(&d, 0, sizeof d);
  assert_int_equal(nnc_opencl_gemm_pick(c, n, &d), n - 1);
  unload(&l);
}

static void test_tile_rule_gpu(void **state) {
  (void)state;
  const char *defs[] = {"layers=1", "batch=8", "ctx=128"};
  loaded l;
  load(&l, "models/gpt2.lua", defs, 3);
  int k = first_gemm(&l.s);   /* 1024 x 2304 x 768 */
  nnc_target_desc t = describe("opencl-gpu");
  nnc_ocl_gemm_tile c[NNC_OCL_MAX_CANDIDATES];
  int n = nnc_opencl_gemm_candidates(&t, &l.s, k, c);
  for (int i = 0; i < n; i++) {
    assert_int_equal(c[i].cpu, 0);
    assert_int_equal(c[i].need_group, c[i].lm * c[i].ln);
    assert_int_equal(c[i].need_local, 2 * (int64_t)(c[i].lm * c[i].wm + c[i].ln * c[i].wn) * c[i].kc * 4);
  }
  /* class defaults, 32 KiB: 16x16 items x 4x4, K steps of 32 (16 KiB of tiles) */
  const nnc_ocl_gemm_tile *p = pick(c, n, &t.opencl);
  assert_int_equal(p->lm, 16);
  assert_int_equal(p->wm, 4);
  assert_int_equal(p->kc, 32);
  nnc_tile tile;
  nnc_error err = {0};
  assert_int_equal(nnc_tune_kernel(&t, &l.s, k, &tile, &err), NNC_OK);
  assert_int_equal(tile.block_m, 64);
  assert_int_equal(tile.block_k, 32);
  assert_int_equal(tile.group, 256);
  /* 16 KiB of local memory (less than assumed): K steps of 16 */
  nnc_opencl_desc d = t.opencl;
  d.local_mem = 16 << 10;
  p = pick(c, n, &d);
  assert_int_equal(p->lm, 16);
  assert_int_equal(p->kc, 16);
  /* 64 KiB (AMD, Intel): 64 */
  d.local_mem = 64 << 10;
  assert_int_equal(pick(c, n, &d)->kc, 64);
  /* work-groups of 128: 8x8 items */
  d = t.opencl;
  d.max_work_group = 128;
  p = pick(c, n, &d);
  assert_int_equal(p->lm, 8);
  assert_int_equal(p->ln, 8);
  /* more compute units than 64x64 tiles: 2x2 an item */
  d = t.opencl;
  d.compute_units = 100000;
  assert_int_equal(pick(c, n, &d)->wm, 2);
  unload(&l);
}

/* ------------------------------------------- create's pick, run_device */

/* Linked with libmlp.a (hidden 129 and 33): the build options name the tile
 * the rule gives for the device's preferred vector width; run_device on
 * OpenCL buffers gives the bits of run on host buffers; bad buffers are
 * refused with the right codes. Exits 0 when all holds, else prints the
 * failing check. */
static const char driver_src[] =
  "#define CL_TARGET_OPENCL_VERSION 120\n"
  "#include <CL/cl.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
  "#include \"mlp.h\"\n"
  "#define CHECK(c) do { if (!(c)) { printf(\"failed at line %d: %s (%s)\\n\", __LINE__, #c, mlp_last_error(m)); return 1; } } while (0)\n"
  "static float frand(unsigned *s) { *s = *s * 1103515245u + 12345u; return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f; }\n"
  "int main(void) {\n"
  "  mlp_model *m = NULL;\n"
  "  if (mlp_create(NULL, &m)) { printf(\"create: %s\\n\", mlp_last_error(NULL)); return 1; }\n"
  "  static const struct { const char *name; size_t n; } w[] = {{\"fc1.weight\", 129 * 784}, {\"fc1.bias\", 129},\n"
  "    {\"fc2.weight\", 33 * 129}, {\"fc2.bias\", 33}, {\"out.weight\", 10 * 33}, {\"out.bias\", 10}};\n"
  "  unsigned seed = 7;\n"
  "  for (int i = 0; i < 6; i++) {\n"
  "    float *v = malloc(w[i].n * 4);\n"
  "    for (size_t j = 0; j < w[i].n; j++) v[j] = frand(&seed) * 0.1f;\n"
  "    CHECK(mlp_set_weight(m, w[i].name, v, w[i].n) == 0);\n    free(v);\n  }\n"
  "  /* the pick for this device: the widest of 16, 8, 4 the device prefers */\n"
  "  cl_context ctx = (cl_context)mlp_cl_context(m);\n  cl_command_queue q = (cl_command_queue)mlp_cl_queue(m);\n"
  "  CHECK(ctx && q);\n  cl_device_id dev;\n"
  "  CHECK(clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof dev, &dev, NULL) == CL_SUCCESS);\n"
  "  cl_uint pref = 0;\n"
  "  CHECK(clGetDeviceInfo(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof pref, &pref, NULL) == CL_SUCCESS);\n"
  "  char want[32];\n  snprintf(want, sizeof want, \"-DT0_VW=%d \", pref >= 16 ? 16 : pref >= 8 ? 8 : 4);\n"
  "  printf(\"options: %s\\n\", mlp_build_options(m));\n"
  "  CHECK(strstr(mlp_build_options(m), want) != NULL);\n"
  "  /* run on host buffers, then on device buffers */\n"
  "  enum { B = 5 };\n  static float x[B * 784], y1[B * 10], y2[B * 10];\n"
  "  for (int i = 0; i < B * 784; i++) x[i] = frand(&seed);\n"
  "  mlp_dims d = {B};\n  mlp_inputs in = {x};\n  mlp_outputs out = {y1};\n"
  "  CHECK(mlp_run(m, &d, &in, &out) == 0);\n"
  "  cl_int e;\n"
  "  cl_mem bx = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof x, NULL, &e);\n"
  "  cl_mem by = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof y2, NULL, &e);\n"
  "  cl_mem small = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4 * 10, NULL, &e);\n"
  "  CHECK(bx && by && small);\n"
  "  CHECK(clEnqueueWriteBuffer(q, bx, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL) == CL_SUCCESS);\n"
  "  void *di[1] = {bx}, *dout[1] = {by}, *dsmall[1] = {small}, *dnull[1] = {NULL};\n"
  "  CHECK(mlp_run_device(m, &d, di, dout) == 0);\n  CHECK(mlp_sync(m) == 0);\n"
  "  CHECK(clEnqueueReadBuffer(q, by, CL_TRUE, 0, sizeof y2, y2, 0, NULL, NULL) == CL_SUCCESS);\n"
  "  CHECK(memcmp(y1, y2, sizeof y1) == 0);\n"
  "  /* refused: an output too small, a NULL buffer, a buffer of another context */\n"
  "  CHECK(mlp_run_device(m, &d, di, dsmall) == MLP_E_SIZE);\n"
  "  CHECK(strstr(mlp_last_error(m), \"output logits holds 40 bytes, expected at least 200\") != NULL);\n"
  "  CHECK(mlp_run_device(m, &d, dnull, dout) == MLP_E_ARG);\n"
  "  cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);\n"
  "  cl_mem foreign = clCreateBuffer(other, CL_MEM_READ_WRITE, sizeof x, NULL, &e);\n"
  "  void *dforeign[1] = {foreign};\n"
  "  CHECK(mlp_run_device(m, &d, dforeign, dout) == MLP_E_ARG);\n"
  "  CHECK(strstr(mlp_last_error(m), \"another OpenCL context\") != NULL);\n"
  "  clReleaseMemObject(foreign);\n  clReleaseContext(other);\n"
  "  clReleaseMemObject(bx);\n  clReleaseMemObject(by);\n  clReleaseMemObject(small);\n"
  "  mlp_destroy(m);\n  return 0;\n}\n";

static void test_create_and_run_device(void **state) {
  (void)state;
  if (have_device == 0) {
    skip();
    return;
  }
  const char *mlp[] = {"hidden1=129", "hidden2=33"};
  char out[512], src[600];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/mlp_driver", work);
  assert_int_equal(emit("models/mlp.lua", "f32", mlp, 2, out, &err), NNC_OK);
  assert_int_equal(sh("make -s -C %s -j4 libmlp.a > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
  snprintf(src, sizeof src, "%s/driver.c", out);
  FILE *f = fopen(src, "w");
  assert_non_null(f);
  fputs(driver_src, f);
  fclose(f);
  assert_int_equal(sh("cc -std=c11 -Wall -Werror -I%s %s %s/libmlp.a -lOpenCL -lm -lpthread -o %s/driver", out, src,
                      out, out), 0);
  int rc = sh("cd %s && NNC_OPENCL_CACHE=%s/cache ./driver > driver.log 2>&1", out, work);
  if (rc != 0) sh("cat %s/driver.log", out);
  assert_int_equal(rc, 0);
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
    cmocka_unit_test(test_tile_rule_cpu),
    cmocka_unit_test(test_tile_rule_gpu),
    cmocka_unit_test(test_models),
    cmocka_unit_test(test_ops),
    cmocka_unit_test(test_gpu_way),
    cmocka_unit_test(test_create_and_run_device),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
