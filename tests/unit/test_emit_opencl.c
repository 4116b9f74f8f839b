/* tests/unit/test_emit_opencl.c — the OpenCL emitter on the first OpenCL
 * device (PoCL on a machine without a GPU): the models of models/ and the op
 * families of tests/ops/ are compiled for opencl-cpu, each folder is built by
 * its own Makefile with warnings as errors, and its benchmark's --check
 * compares one run at odd sizes with the float64 reference on poisoned
 * outputs (exit 0: every output within 1e-5 for f32, 1e-2 for f16 and bf16
 * storage, whose reference gets the weights rounded as the device stores
 * them). Without an OpenCL platform the runs are skipped; the emitter's own
 * checks and the GEMM tile rule run everywhere. The rule's candidates are
 * checked against the tuner's choice and against devices that differ from
 * the class defaults; a small program linked with a model's library checks
 * create's pick for the real device, and that <model>_run_device on OpenCL
 * buffers gives <model>_run's outputs; the harness's device peaks are
 * positive and fill the roofline column. The training graphs (--train) of
 * the MLP, GPT-2 and the embedding loss are checked the same way.
 *
 * Two groups: the f32 one (no argument) and the f16/bf16 one (argument
 * "narrow"), which meson runs as tests of their own. */
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
#include "emit/validate.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tune/tune_opencl.h"
#include "test_sh.h"

static char work[256];

/* train: the training graph (nnc --train), whose outputs are the loss and every gradient. */
static nnc_status emit_as(const char *model, const char *precision, bool train, const char *const *defs, int nd,
                          const char *out, nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  nnc_build_opts o = {.model = path, .target = "opencl-cpu", .defines = defs, .ndefines = nd,
                      .precision = precision, .out_dir = out, .train = train};
  return nnc_build(&o, err);
}

static nnc_status emit(const char *model, const char *precision, const char *const *defs, int nd, const char *out,
                       nnc_error *err) {
  return emit_as(model, precision, false, defs, nd, out, err);
}

/* Whether an OpenCL device answers: the mlp's benchmark is built and run
 * once; a missing platform shows as the runtime's "no OpenCL platform". */
static int have_device = -1;

/* The largest "max relative error" of a harness log, or -1 without one. */
static double worst_error(const char *log) {
  FILE *f = fopen(log, "r");
  double worst = -1;
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "max relative error ");
    double e;
    if (at && sscanf(at + strlen("max relative error "), "%lf", &e) == 1 && !(e <= worst)) worst = e;
  }
  if (f) fclose(f);
  return worst;
}

/* Runs bench_<name> of the built folder dir with --check at dims (may be
 * ""), the environment env before it (may be ""); fails unless every
 * output is within the harness's tolerance for the model's precision
 * (below tol, which the harness's must not exceed). */
static void run_at(const char *dir, const char *name, const char *dims, const char *env, double tol) {
  char out[512], log[600];
  snprintf(out, sizeof out, "%s/%s", work, dir);
  int rc = sh("cd %s && %s NNC_OPENCL_CACHE=%s/cache ./bench_%s --check --runs 1 %s > run.log 2>&1", out, env, work,
              name, dims);
  snprintf(log, sizeof log, "%s/run.log", out);
  if (have_device < 0) have_device = !file_has(log, "no OpenCL platform or device");
  if (!have_device) return;
  if (rc != 0) sh("tail -20 %s", log);
  assert_int_equal(rc, 0);
  assert_true(file_has(log, "max relative error"));
  assert_false(file_has(log, "FAILED"));
  double e = worst_error(log);
  if (!(e >= 0 && e <= tol)) fail_msg("%s: worst output error %g, expected at most %g", dir, e, tol);
  print_message("%-24s worst output error %.3g\n", dir, e);
}

static void run_in(const char *dir, const char *name, const char *dims, const char *env) {
  run_at(dir, name, dims, env, 1e-5);
}

static void run_check(const char *name, const char *dims, const char *env) { run_in(name, name, dims, env); }

/* Emits model (whose C prefix is name) at precision into the folder dir
 * (train: its training graph), builds it, and runs --check with dims (may
 * be ""), within tol. */
static void check_at(const char *model, const char *dir, const char *name, const char *precision, bool train,
                     const char *const *defs, int nd, const char *dims, double tol) {
  char out[512];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/%s", work, dir);
  nnc_status st = emit_as(model, precision, train, defs, nd, out, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j4 > %s/make.log 2>&1 || tail -30 %s/make.log", out, out, out), 0);
  run_at(dir, name, dims, "", tol);
}

/* f32, in the folder name. */
static void check(const char *model, const char *name, const char *const *defs, int nd, const char *dims) {
  check_at(model, name, name, "f32", false, defs, nd, dims, 1e-5);
}

/* A device with work-groups of at most 4 items, 32 KiB of local memory,
 * one compute unit and vectors of 4 floats, as create sees it: every list
 * takes a small candidate (or its last). */
#define SMALL_DEVICE "NNC_OPENCL_LIMITS=group=4,local=32768,units=1,vector=4"

/* What create of the folder name picked, with env: its build options, by a
 * program linked with the model's library (built here). */
static void build_options(const char *name, const char *env, char *buf, size_t n) {
  char out[512], src[600], path[600];
  snprintf(out, sizeof out, "%s/%s", work, name);
  snprintf(src, sizeof src, "%s/options.c", out);
  FILE *f = fopen(src, "w");
  assert_non_null(f);
  fprintf(f, "#include <stdio.h>\n#include \"%s.h\"\n"
             "int main(void) {\n  %s_model *m = NULL;\n"
             "  if (%s_create(NULL, &m)) {\n    printf(\"create: %%s\\n\", %s_last_error(NULL));\n    return 1;\n  }\n"
             "  printf(\"%%s\\n\", %s_build_options(m));\n  %s_destroy(m);\n  return 0;\n}\n",
          name, name, name, name, name, name);
  fclose(f);
  assert_int_equal(sh("make -s -C %s lib%s.a > /dev/null 2>&1 && cc -std=c11 -Wall -Werror -I%s %s %s/lib%s.a "
                      "-lOpenCL -lm -lpthread -o %s/options", out, name, out, src, out, name, out), 0);
  int rc = sh("cd %s && %s NNC_OPENCL_CACHE=%s/cache ./options > options.log 2>&1", out, env, work);
  snprintf(path, sizeof path, "%s/options.log", out);
  f = fopen(path, "r");
  assert_non_null(f);
  if (!fgets(buf, (int)n, f)) buf[0] = 0;
  fclose(f);
  if (rc != 0) fail_msg("%s: %s", name, buf);
}

/* The value of -D<name>=<v> in options, or -1. */
static int option(const char *options, const char *name) {
  char key[64];
  snprintf(key, sizeof key, "-D%s=", name);
  const char *at = strstr(options, key);
  return at ? atoi(at + strlen(key)) : -1;
}

/* Every work-group the options of a small device's create name (row and loop
 * groups, attention's queries, a GEMM's items) is at most 4 items, and the
 * CPU way's vectors are 4 floats; returns how many lists it saw. */
static int small_picks(const char *options) {
  char key[32];
  int lists = 0;
  for (int l = 0; l < 64; l++) {
    snprintf(key, sizeof key, "T%d_WG", l);
    int wg = option(options, key);
    snprintf(key, sizeof key, "T%d_BQ", l);
    int bq = option(options, key);
    snprintf(key, sizeof key, "T%d_LM", l);
    int lm = option(options, key);
    snprintf(key, sizeof key, "T%d_LN", l);
    int ln = option(options, key);
    snprintf(key, sizeof key, "T%d_VW", l);
    int vw = option(options, key);
    if (wg < 0 && bq < 0 && lm < 0) continue;
    lists++;
    if (wg >= 0) assert_in_range(wg, 1, 4);
    if (bq >= 0) assert_in_range(bq, 1, 4);
    if (lm >= 0) {
      assert_in_range(lm * ln, 1, 16);   /* the GPU way's last candidate is 4x4 items */
      assert_true(vw == 1 || vw == 4);
    }
  }
  return lists;
}

/* From a harness log: the device's peaks it printed (GFLOP/s, GB/s; 0
 * when missing) and the largest %roof of its kernel table (-1 without
 * one). */
static void peaks_of(const char *log, double *gf, double *gb, double *roof) {
  FILE *f = fopen(log, "r");
  assert_non_null(f);
  char line[512];
  bool table = false;
  *gf = *gb = 0;
  *roof = -1;
  while (fgets(line, sizeof line, f)) {
    const char *a = strstr(line, "of peak FMA "), *b = strstr(line, "of peak bandwidth ");
    if (a) sscanf(a + strlen("of peak FMA "), "%lf", gf);
    if (b) sscanf(b + strlen("of peak bandwidth "), "%lf", gb);
    if (strstr(line, "%roof")) {
      table = true;
      continue;
    }
    const char *last = strrchr(line, ' ');
    double r;
    if (table && last && sscanf(last, "%lf", &r) == 1) *roof = fmax(*roof, r);
    else if (table && line[0] == '\n') table = false;
  }
  fclose(f);
}

static const char *const mlp_defs[] = {"hidden1=129", "hidden2=33"};
static const char *const gpt2_defs[] = {"layers=2", "vocab=1001", "ctx=64"};
static const char *const bert_defs[] = {"layers=2", "vocab=1001"};

static void test_models(void **state) {
  (void)state;
  const char *const *mlp = mlp_defs, *const *gpt2 = gpt2_defs, *const *bert = bert_defs;
  check("models/mlp.lua", "mlp", mlp, 2, "-d B=3");
  if (!have_device) {
    skip();
    return;
  }
  /* the device's rates, measured once by the harness, fill the roofline column */
  char log[600];
  double gf, gb, roof;
  snprintf(log, sizeof log, "%s/mlp/run.log", work);
  peaks_of(log, &gf, &gb, &roof);
  print_message("device peaks: %.1f GFLOP/s, %.1f GB/s; largest %%roof of mlp's kernels %.1f\n", gf, gb, roof);
  assert_true(gf > 0 && isfinite(gf));
  assert_true(gb > 0 && isfinite(gb));
  assert_true(roof > 0 && isfinite(roof));
  check("models/bert.lua", "bert", bert, 2, "-d B=3 -d T=17");
  check("models/gpt2.lua", "gpt2", gpt2, 3, "-d B=3 -d T=17");
  const char *cnn[] = {"size=13", "conv1=5", "conv2=7", "hidden=9"};
  check("models/mnist_cnn.lua", "mnist_cnn", cnn, 4, "-d B=3");
  const char *resnet[] = {"size=33", "width=4", "classes=7", "batch=4"};
  check("models/resnet18.lua", "resnet18", resnet, 4, "-d B=3");
  const char *lstm[] = {"batch=4", "window=11", "features=5", "hidden=13", "horizon=3"};
  check("models/lstm_forecast.lua", "lstm_forecast", lstm, 5, "-d B=3 -d T=7");
  const char *gru[] = {"batch=4", "seq=11", "vocab=37", "embed=9", "hidden=7", "classes=3"};
  check("models/gru.lua", "gru", gru, 6, "-d B=3 -d T=7");
  const char *llama[] = {"layers=2", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=64", "batch=4"};
  check("models/llama.lua", "llama", llama, 8, "-d B=3 -d T=17");
  /* the same binaries on a device seen as small: every list takes small sizes */
  run_check("mlp", "-d B=3", SMALL_DEVICE);
  run_check("bert", "-d B=3 -d T=17", SMALL_DEVICE);
  run_check("gpt2", "-d B=3 -d T=17", SMALL_DEVICE);
  char opts[4096];
  build_options("gpt2", SMALL_DEVICE, opts, sizeof opts);
  assert_true(small_picks(opts) >= 5);
  assert_int_equal(option(opts, "T3_BQ"), 4);   /* attention: 4 queries, 64 keys (4 * 64 * 129 * 2 > 32 KiB: 16) */
  assert_int_equal(option(opts, "T3_BK"), 16);
  build_options("gpt2", "", opts, sizeof opts);
  assert_true(option(opts, "T3_BQ") > 4);   /* PoCL's own values: 16 queries */
  assert_int_equal(sh("cd %s/gpt2 && NNC_OPENCL_LIMITS=group=x ./options | grep -q 'expected key=number'", work), 0);
  char p[600];
  snprintf(p, sizeof p, "%s/gpt2/gpt2.cl", work);
  assert_true(file_has(p, "k2_gemm"));   /* c_attn: after the slice and the add (its lookup inside) */
  assert_true(file_has(p, "q_off + b * q_sb"));   /* the folded head split */
  assert_true(file_has(p, "#define NNC_GEMM_CPU 1"));   /* the CPU way for opencl-cpu */
  assert_true(file_has(p, "#define NNC_VW T1_VW"));      /* tiles picked at create */
  assert_true(file_has(p, "#define NNC_BQ T3_BQ"));      /* attention's sizes too */
  assert_true(file_has(p, "#define NNC_WG T2_WG"));      /* and the prologue statistics' group */
  snprintf(p, sizeof p, "%s/gpt2/gpt2.c", work);
  assert_true(file_has(p, "static const choice list_0["));
  assert_true(file_has(p, "/* attention, kernels"));
  assert_true(file_has(p, "pick_lists(m, &e)"));
  assert_true(file_has(p, "picked(m, 0)[LOOP_WG]"));
  /* destroy releases the kernels before the sub-buffers they hold as
   * arguments (NVIDIA's driver crashed the other way round; PoCL does not) */
  assert_int_equal(sh("awk '/_destroy\\(gpt2_model \\*m\\) \\{/ {f = 1} f && /clReleaseKernel/ {k = NR} "
                      "f && /m->slot\\[i\\]\\)/ {s = NR} f && /^}/ {exit !(k && s && k < s)}' %s/gpt2/gpt2.c",
                      work),
                   0);
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
    run_in(strrchr(out, '/') + 1, names[i], i ? "" : "-d B=3", SMALL_DEVICE);
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
static const int *pick(const nnc_ocl_list *l, const nnc_opencl_desc *d) {
  int i = nnc_opencl_pick(l, d);
  assert_true(i >= 0 && i < l->n);
  assert_true(nnc_opencl_fits(&l->c[i].need, d));
  for (int j = 0; j < i; j++) assert_false(nnc_opencl_fits(&l->c[j].need, d));
  return l->c[i].v;
}

/* The fields of a GEMM candidate's values, by name. */
#define VW(v) (v)[NNC_OCL_VW]
#define WM(v) (v)[NNC_OCL_WM]
#define WN(v) (v)[NNC_OCL_WN]
#define LM(v) (v)[NNC_OCL_LM]
#define LN(v) (v)[NNC_OCL_LN]
#define KC(v) (v)[NNC_OCL_KC]

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
  nnc_ocl_list c;
  nnc_opencl_candidates(&t, &l.s, k, &c);
  int n = c.n;
  assert_true(n >= 3 && n <= NNC_OCL_MAX_CANDIDATES);
  assert_int_equal(c.family, NNC_OCL_GEMM);
  assert_int_equal(c.cpu, 1);
  for (int i = 0; i < n; i++) {
    const int *v = c.c[i].v;
    assert_int_equal(WN(v), 2 * VW(v));
    assert_int_equal(c.c[i].need.local, 2 * (int64_t)KC(v) * (LM(v) * WM(v) + LN(v) * WN(v)) * 4);
  }
  /* the last candidate asks for nothing a device lacks */
  assert_int_equal(VW(c.c[n - 1].v), 4);
  assert_int_equal(c.c[n - 1].need.group, 1);
  assert_int_equal(c.c[n - 1].need.vector, 0);
  assert_int_equal(c.c[n - 1].need.max_units, 0);
  /* 128 x 2304 in groups of 48 x 128: 3 x 18 groups, 27 a unit */
  const int *p = pick(&c, &t.opencl);
  assert_int_equal(VW(p), 8);
  assert_int_equal(LM(p), 8);
  assert_int_equal(LN(p), 8);
  assert_int_equal(KC(p), 256);
  /* the tuner says the same */
  nnc_tile tile;
  nnc_error err = {0};
  assert_int_equal(nnc_tune_kernel(&t, &l.s, k, &tile, &err), NNC_OK);
  assert_int_equal(tile.block_m, LM(p) * WM(p));
  assert_int_equal(tile.block_n, LN(p) * WN(p));
  assert_int_equal(tile.kc, KC(p));
  assert_int_equal(tile.group, LM(p) * LN(p));
  /* AVX-512: vectors of 16 */
  nnc_opencl_desc d = t.opencl;
  d.preferred_vector_width = 16;
  assert_int_equal(pick(&c, &d)[NNC_OCL_VW], 16);
  /* no wide vectors (a GPU running the CPU way): 4 */
  d = t.opencl;
  d.preferred_vector_width = 1;
  assert_int_equal(pick(&c, &d)[NNC_OCL_VW], 4);
  /* a driver that allows work-groups of 16 */
  d = t.opencl;
  d.max_work_group = 16;
  p = pick(&c, &d);
  assert_true(LM(p) * LN(p) <= 16);
  assert_int_equal(VW(p), 8);
  /* 64 KiB of local memory: smaller packed tiles */
  d = t.opencl;
  d.local_mem = 64 << 10;
  p = pick(&c, &d);
  assert_true(c.c[nnc_opencl_pick(&c, &d)].need.local <= 64 << 10);
  assert_true(LM(p) * LN(p) < 64);
  /* 64 compute units: groups small enough to give each two */
  d = t.opencl;
  d.compute_units = 64;
  p = pick(&c, &d);
  assert_true(LM(p) * LN(p) < 64);
  int64_t gm = LM(p) * WM(p), gn = LN(p) * WN(p), groups = (128 + gm - 1) / gm * ((2304 + gn - 1) / gn);
  assert_true(groups >= 2 * 64 || c.c[nnc_opencl_pick(&c, &d)].need.max_units == 0);
  /* a device that reports nothing: the last candidate */
  memset(&d, 0, sizeof d);
  assert_int_equal(nnc_opencl_pick(&c, &d), n - 1);
  unload(&l);
}

static void test_tile_rule_gpu(void **state) {
  (void)state;
  const char *defs[] = {"layers=1", "batch=8", "ctx=128"};
  loaded l;
  load(&l, "models/gpt2.lua", defs, 3);
  int k = first_gemm(&l.s);   /* 1024 x 2304 x 768 */
  nnc_target_desc t = describe("opencl-gpu");
  nnc_ocl_list c;
  nnc_opencl_candidates(&t, &l.s, k, &c);
  int n = c.n;
  assert_int_equal(c.cpu, 0);
  for (int i = 0; i < n; i++) {
    const int *v = c.c[i].v;
    assert_int_equal(c.c[i].need.group, LM(v) * LN(v));
    assert_int_equal(c.c[i].need.local, 2 * (int64_t)(LM(v) * WM(v) + LN(v) * WN(v)) * KC(v) * 4);
  }
  /* class defaults, 32 KiB: 16x16 items x 4x4, K steps of 32 (16 KiB of tiles) */
  const int *p = pick(&c, &t.opencl);
  assert_int_equal(LM(p), 16);
  assert_int_equal(WM(p), 4);
  assert_int_equal(KC(p), 32);
  nnc_tile tile;
  nnc_error err = {0};
  assert_int_equal(nnc_tune_kernel(&t, &l.s, k, &tile, &err), NNC_OK);
  assert_int_equal(tile.block_m, 64);
  assert_int_equal(tile.block_k, 32);
  assert_int_equal(tile.group, 256);
  /* 16 KiB of local memory (less than assumed): K steps of 16 */
  nnc_opencl_desc d = t.opencl;
  d.local_mem = 16 << 10;
  p = pick(&c, &d);
  assert_int_equal(LM(p), 16);
  assert_int_equal(KC(p), 16);
  /* 64 KiB (AMD, Intel): 64 */
  d.local_mem = 64 << 10;
  assert_int_equal(pick(&c, &d)[NNC_OCL_KC], 64);
  /* work-groups of 128: 8x8 items */
  d = t.opencl;
  d.max_work_group = 128;
  p = pick(&c, &d);
  assert_int_equal(LM(p), 8);
  assert_int_equal(LN(p), 8);
  /* more compute units than 64x64 tiles: 2x2 an item */
  d = t.opencl;
  d.compute_units = 100000;
  assert_int_equal(pick(&c, &d)[NNC_OCL_WM], 2);
  unload(&l);
}

static int kernel_of(const nnc_schedule *s, nnc_kernel_kind kind) {
  for (int k = 0; k < s->nk; k++)
    if (s->k[k].kind == kind) return k;
  fail_msg("no kernel of kind %s", nnc_kernel_kind_name(kind));
  return -1;
}

/* The lists of the other kernels: attention's queries a group and keys a
 * step, the group of a row kernel, of a GEMM prologue's statistics and of a
 * loop kernel; the picks for the class defaults (hand-computed from the
 * rule) and for devices with tiny local memory, work-groups of at most 64 or
 * 32, one compute unit, and one that reports nothing. */
static void test_tile_rule_other_kernels(void **state) {
  (void)state;
  const char *defs[] = {"layers=1", "batch=8", "ctx=128"};   /* 12 heads of 64, T = S = 128 */
  loaded l;
  load(&l, "models/gpt2.lua", defs, 3);
  int ka = kernel_of(&l.s, NNC_KERNEL_ATTENTION), kg = first_gemm(&l.s), ke = kernel_of(&l.s, NNC_KERNEL_GATHER);
  nnc_target_desc gpu = describe("opencl-gpu"), cpu = describe("opencl-cpu");
  cpu.opencl.compute_units = 2;
  cpu.opencl.local_mem = 512 << 10;
  cpu.opencl.max_work_group = 4096;
  nnc_ocl_list a, st, lp;
  nnc_opencl_candidates(&gpu, &l.s, ka, &a);
  assert_int_equal(a.family, NNC_OCL_ATTENTION);
  assert_int_equal(a.n, 7 * 3);
  for (int i = 0; i < a.n; i++) {
    assert_int_equal(a.c[i].need.group, a.c[i].v[NNC_OCL_BQ]);
    /* K and V tiles of 64 floats a key and the keep flags, twice */
    assert_int_equal(a.c[i].need.local, 2 * 4 * a.c[i].v[NNC_OCL_BK] * (64 + 64 + 1));
  }
  /* class defaults (32 KiB): 32 keys need 33024 bytes, so 64 queries and 16 keys */
  const int *p = pick(&a, &gpu.opencl);
  assert_int_equal(p[NNC_OCL_BQ], 64);
  assert_int_equal(p[NNC_OCL_BK], 16);
  nnc_tile tile;
  nnc_error err = {0};
  assert_int_equal(nnc_tune_kernel(&gpu, &l.s, ka, &tile, &err), NNC_OK);
  assert_int_equal(tile.attn_bq, 64);
  assert_int_equal(tile.attn_bk, 16);
  assert_int_equal(tile.group, 64);
  nnc_opencl_desc d = gpu.opencl;
  d.local_mem = 48 << 10;   /* NVIDIA */
  assert_int_equal(pick(&a, &d)[NNC_OCL_BK], 32);
  d = gpu.opencl;
  d.max_work_group = 32;
  p = pick(&a, &d);
  assert_int_equal(p[NNC_OCL_BQ], 32);
  assert_int_equal(p[NNC_OCL_BK], 16);
  d = gpu.opencl;
  d.local_mem = 10000;   /* 8 keys: 8256 bytes */
  p = pick(&a, &d);
  assert_int_equal(p[NNC_OCL_BQ], 64);
  assert_int_equal(p[NNC_OCL_BK], 8);
  d = gpu.opencl;
  d.compute_units = 1;
  assert_int_equal(pick(&a, &d)[NNC_OCL_BQ], 64);
  d.local_mem = 4096;   /* nothing fits: the last, one query and 8 keys */
  assert_int_equal(nnc_opencl_pick(&a, &d), a.n - 1);
  assert_int_equal(a.c[a.n - 1].v[NNC_OCL_BQ], 1);
  assert_int_equal(a.c[a.n - 1].v[NNC_OCL_BK], 8);
  /* CPU: 16 queries, 64 keys a step; 32 KiB of local memory: 16 keys; groups of 4: 4 queries */
  nnc_opencl_candidates(&cpu, &l.s, ka, &a);
  assert_int_equal(a.n, 5 * 4);
  p = pick(&a, &cpu.opencl);
  assert_int_equal(p[NNC_OCL_BQ], 16);
  assert_int_equal(p[NNC_OCL_BK], 64);
  d = cpu.opencl;
  d.local_mem = 32 << 10;
  p = pick(&a, &d);
  assert_int_equal(p[NNC_OCL_BQ], 16);
  assert_int_equal(p[NNC_OCL_BK], 16);
  d = cpu.opencl;
  d.max_work_group = 4;
  p = pick(&a, &d);
  assert_int_equal(p[NNC_OCL_BQ], 4);
  assert_int_equal(p[NNC_OCL_BK], 64);

  /* the statistics of the first GEMM's LayerNorm prologue, rows of K = 768:
   * GPU 128 items (768 / 8 rounded up to a power of two), then halves */
  nnc_opencl_stats_candidates(&gpu, &l.s, kg, &st);
  assert_int_equal(st.family, NNC_OCL_ROWS);
  assert_int_equal(st.n, 8);
  for (int i = 0; i < st.n; i++) {
    assert_int_equal(st.c[i].v[NNC_OCL_WG], 128 >> i);
    assert_int_equal(st.c[i].need.group, 128 >> i);
    assert_int_equal(st.c[i].need.local, 4 * (128 >> i));
  }
  assert_int_equal(pick(&st, &gpu.opencl)[NNC_OCL_WG], 128);
  d = gpu.opencl;
  d.max_work_group = 64;
  assert_int_equal(pick(&st, &d)[NNC_OCL_WG], 64);
  d.local_mem = 100;   /* 25 floats of scratch */
  assert_int_equal(pick(&st, &d)[NNC_OCL_WG], 16);
  d = gpu.opencl;
  d.compute_units = 1;
  assert_int_equal(pick(&st, &d)[NNC_OCL_WG], 128);
  memset(&d, 0, sizeof d);
  assert_int_equal(nnc_opencl_pick(&st, &d), st.n - 1);
  assert_int_equal(st.c[st.n - 1].v[NNC_OCL_WG], 1);
  /* CPU: 64 at most */
  nnc_opencl_stats_candidates(&cpu, &l.s, kg, &st);
  assert_int_equal(pick(&st, &cpu.opencl)[NNC_OCL_WG], 64);
  /* no statistics without a prologue: the attention kernel is no GEMM */
  nnc_opencl_stats_candidates(&gpu, &l.s, ka, &st);
  assert_int_equal(st.n, 0);

  /* a loop kernel (the embedding gather): 256 items on a GPU, 64 on a CPU */
  nnc_opencl_candidates(&gpu, &l.s, ke, &lp);
  assert_int_equal(lp.family, NNC_OCL_LOOP);
  assert_int_equal(pick(&lp, &gpu.opencl)[NNC_OCL_WG], 256);
  assert_int_equal(nnc_tune_kernel(&gpu, &l.s, ke, &tile, &err), NNC_OK);
  assert_int_equal(tile.group, 256);
  d = gpu.opencl;
  d.max_work_group = 64;
  assert_int_equal(pick(&lp, &d)[NNC_OCL_WG], 64);
  nnc_opencl_candidates(&cpu, &l.s, ke, &lp);
  assert_int_equal(pick(&lp, &cpu.opencl)[NNC_OCL_WG], 64);
  unload(&l);

  /* a row kernel on its own: LayerNorm of rows of 129, GPU 32 items (a warp), CPU 64 */
  load(&l, "tests/ops/norms.lua", NULL, 0);
  int kr = kernel_of(&l.s, NNC_KERNEL_ROW);
  nnc_opencl_candidates(&gpu, &l.s, kr, &st);
  assert_int_equal(st.family, NNC_OCL_ROWS);
  assert_int_equal(pick(&st, &gpu.opencl)[NNC_OCL_WG], 32);
  assert_int_equal(nnc_tune_kernel(&gpu, &l.s, kr, &tile, &err), NNC_OK);
  assert_int_equal(tile.group, 32);
  nnc_opencl_candidates(&cpu, &l.s, kr, &st);
  assert_int_equal(pick(&st, &cpu.opencl)[NNC_OCL_WG], 64);
  d = cpu.opencl;
  d.max_work_group = 20;
  assert_int_equal(pick(&st, &d)[NNC_OCL_WG], 16);
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
 * matmuls with broadcast batch dims, norms, attention, convolutions and
 * the recurrent layers. */
static void test_ops(void **state) {
  (void)state;
  if (have_device == 0) {
    skip();
    return;
  }
  static const char *ops[] = {"elementwise", "masks", "softmax_axis", "reduce", "move", "embedding_loss", "lookup",
                              "matmul", "norms", "attention", "conv", "layout", "recurrent", "rope", "gqa", "chains"};
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
    run_check(ops[i], "", SMALL_DEVICE);
  }
}

/* --train on PoCL: the loss and every gradient of the MLP, GPT-2 at small
 * odd sizes (at two sequence lengths) and the embedding with its loss
 * against the float64 reference, in f32. The backward's pad, scatter-add,
 * cross-entropy gradient, act_grad and zero-filling masks are the device
 * loops that the CUDA target runs too (device_loops.c), and so are the
 * recurrent models' backward through time. */
static void test_train(void **state) {
  (void)state;
  if (have_device == 0) {
    skip();
    return;
  }
  static const char *const gpt2[] = {"layers=2", "d=24", "heads=2", "vocab=37", "ctx=17"};
  check_at("models/mlp.lua", "mlp_train", "mlp", "f32", true, mlp_defs, 2, "-d B=3", 1e-5);
  if (!have_device) {
    skip();
    return;
  }
  check_at("models/gpt2.lua", "gpt2_train", "gpt2", "f32", true, gpt2, 5, "-d B=3 -d T=17", 1e-5);
  run_in("gpt2_train", "gpt2", "-d B=3 -d T=5", "");
  check_at("tests/ops/embedding_loss.lua", "embedding_loss_train", "embedding_loss", "f32", true, NULL, 0,
           "-d B=3 -d T=17", 1e-5);
  static const char *const lstm[] = {"batch=4", "window=11", "features=5", "hidden=13", "horizon=3"};
  check_at("models/lstm_forecast.lua", "lstm_forecast_train", "lstm_forecast", "f32", true, lstm, 5, "-d B=3 -d T=7",
           1e-5);
  static const char *const gru[] = {"batch=4", "seq=11", "vocab=37", "embed=9", "hidden=7", "classes=3"};
  check_at("models/gru.lua", "gru_train", "gru", "f32", true, gru, 6, "-d B=3 -d T=7", 1e-5);
  static const char *const llama[] = {"layers=2", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101",
                                      "ctx=64", "batch=4"};
  check_at("models/llama.lua", "llama_train", "llama", "f32", true, llama, 8, "-d B=3 -d T=17", 1e-5);
  char p[600];
  snprintf(p, sizeof p, "%s/gpt2_train/gpt2.cl", work);
  assert_true(file_has(p, "if (id >= v0 && id < v1)"));   /* the scatter-add of the embedding's gradient */
}

/* nnc --generate: a call over older cached keys against the reference, and
 * generate_gpt2 --check (every decode step against a full forward) with
 * prompts of three lengths, in f32 and bf16 storage; generate_llama --check. */
static void test_generate(void **state) {
  (void)state;
  if (!have_device) {
    skip();
    return;
  }
  static const char *const gpt2[] = {"layers=2", "d=64", "heads=4", "vocab=101", "ctx=24", "batch=4"};
  const char *prec[2] = {"f32", "bf16"};
  for (int i = 0; i < 2; i++) {
    char path[512], out[512];
    nnc_error err = {0};
    snprintf(path, sizeof path, "%s/models/gpt2.lua", NNC_SOURCE_ROOT);
    snprintf(out, sizeof out, "%s/gpt2_gen_%s", work, prec[i]);
    nnc_build_opts o = {.model = path, .target = "opencl-cpu", .defines = gpt2, .ndefines = 6,
                        .precision = prec[i], .out_dir = out, .generate = true};
    nnc_status st = nnc_build(&o, &err);
    if (st) fprintf(stderr, "gpt2 --generate: %s\n", err.msg);
    assert_int_equal(st, NNC_OK);
    assert_int_equal(sh("make -s -C %s -j2 > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
    assert_int_equal(sh("cd %s && ./bench_gpt2 --check -d B=3 -d T=5 -d S=11 --runs 1 --warmup 0 | grep -q 'relative error.* ok'",
                        out), 0);
    assert_int_equal(sh("cd %s && ./generate_gpt2 --check --prompt '1,2,3;4,5,6,7,8,9,10;11' --steps 6 > gen.log 2>&1; "
                        "r=$?; cat gen.log; exit $r", out), 0);
  }
  /* LLaMA: grouped-query attention reading the caches in place (k and v heads as h / G), rope, SwiGLU */
  static const char *const llama[] = {"layers=2", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=24",
                                      "batch=4"};
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/models/llama.lua", NNC_SOURCE_ROOT);
  snprintf(out, sizeof out, "%s/llama_gen", work);
  nnc_build_opts o = {.model = path, .target = "opencl-cpu", .defines = llama, .ndefines = 8, .out_dir = out,
                      .generate = true};
  nnc_status st = nnc_build(&o, &err);
  if (st) fprintf(stderr, "llama --generate: %s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
  assert_int_equal(sh("cd %s && ./generate_llama --check --prompt '3,1,4,1,5;9,2' --steps 7 > gen.log 2>&1; "
                      "r=$?; cat gen.log; exit $r", out), 0);
}

/* tf32 (no tensor-core products in OpenCL C) and a narrow input at the API
 * are refused, naming the target and what it takes, and leave no folder. */
static void test_emitter_errors(void **state) {
  (void)state;
  char out[512], lua[600];
  nnc_error err = {0};
  snprintf(out, sizeof out, "%s/tf32_out", work);
  assert_int_equal(emit("models/mlp.lua", "tf32", NULL, 0, out, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "opencl-cpu: --precision=tf32: expected f32, f16 or bf16"));
  assert_int_equal(access(out, F_OK), -1);
  snprintf(lua, sizeof lua, "%s/half_input.lua", work);
  FILE *f = fopen(lua, "w");
  assert_non_null(f);
  fputs("local x = input(\"x\", f16, { 3, 5 })\noutput(\"y\", relu(x))\n", f);
  fclose(f);
  snprintf(out, sizeof out, "%s/half_input", work);
  nnc_build_opts o = {.model = lua, .target = "opencl-cpu", .precision = "f16", .out_dir = out};
  memset(&err, 0, sizeof err);
  assert_int_equal(nnc_build(&o, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "opencl-cpu: input x is f16, expected f32 or i32 at the API"));
  assert_int_equal(access(out, F_OK), -1);
}

/* ------------------------------------------------- f16 and bf16 storage */

/* The three models at odd sizes (B=3, T=17) with storage precision, and
 * the MLP's training graph; the check also reports the reference rounded
 * to that storage at every op (nnc_ref.store). */
static void narrow_models(const char *precision) {
  char dir[64];
  snprintf(dir, sizeof dir, "mlp_%s", precision);
  check_at("models/mlp.lua", dir, "mlp", precision, false, mlp_defs, 2, "-d B=3", 1e-2);
  if (!have_device) {
    skip();
    return;
  }
  char log[600], line[64];
  snprintf(log, sizeof log, "%s/%s/run.log", work, dir);
  snprintf(line, sizeof line, "(%s-rounded reference ", precision);
  assert_true(file_has(log, line));
  assert_true(file_has(log, "times the error of the reference rounded to"));
  /* its training graph: the loss and every gradient in 16-bit storage */
  snprintf(dir, sizeof dir, "mlp_train_%s", precision);
  check_at("models/mlp.lua", dir, "mlp", precision, true, mlp_defs, 2, "-d B=3", 1e-2);
  snprintf(dir, sizeof dir, "bert_%s", precision);
  check_at("models/bert.lua", dir, "bert", precision, false, bert_defs, 2, "-d B=3 -d T=17", 1e-2);
  snprintf(dir, sizeof dir, "gpt2_%s", precision);
  check_at("models/gpt2.lua", dir, "gpt2", precision, false, gpt2_defs, 3, "-d B=3 -d T=17", 1e-2);
}

/* Every op family of tests/ops/ with storage precision. */
static void narrow_ops(const char *precision) {
  static const char *ops[] = {"elementwise", "masks", "softmax_axis", "reduce", "move", "embedding_loss", "lookup",
                              "matmul", "norms", "attention", "conv", "recurrent", "rope", "gqa", "chains"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    char model[128], dir[128];
    snprintf(model, sizeof model, "tests/ops/%s.lua", ops[i]);
    snprintf(dir, sizeof dir, "%s_%s", ops[i], precision);
    check_at(model, dir, ops[i], precision, false, NULL, 0, "", 1e-2);
    if (!have_device) {
      skip();
      return;
    }
  }
}

static void test_models_f16(void **state) {
  (void)state;
  narrow_models("f16");
}

static void test_models_bf16(void **state) {
  (void)state;
  narrow_models("bf16");
}

static void test_ops_f16(void **state) {
  (void)state;
  narrow_ops("f16");
}

static void test_ops_bf16(void **state) {
  (void)state;
  narrow_ops("bf16");
}

/* What the folders of a narrow GPT-2 say and hold (no device needed): the
 * program picks its storage with one macro and reaches narrow elements only
 * through common.cl's macros (no cl_khr_fp16), the LM head writes its f32
 * logits itself, weights are rounded on upload, and the harness checks at
 * 1e-2 with the weights rounded alike. Emitting also ran libclang's OpenCL
 * C 1.2 check of the program, where nnc has libclang, and that check rejects
 * a direct load of a half as PoCL does. */
static void test_narrow_code(void **state) {
  (void)state;
  static const char *const precision[] = {"f16", "bf16"};
  for (int i = 0; i < 2; i++) {
    const char *pr = precision[i];
    char out[512], p[600], want[64];
    nnc_error err = {0};
    snprintf(out, sizeof out, "%s/gpt2_%s_code", work, pr);
    assert_int_equal(emit("models/gpt2.lua", pr, gpt2_defs, 3, out, &err), NNC_OK);
    snprintf(p, sizeof p, "%s/gpt2.cl", out);
    snprintf(want, sizeof want, "\n#define NNC_%s\n", i ? "BF16" : "F16");
    assert_true(file_has(p, want));
    assert_false(file_has(p, "cl_khr_fp16 : enable"));
    assert_true(file_has(p, "NNC_LOAD(x0, "));             /* a loop kernel's narrow operand */
    assert_true(file_has(p, "__global nnc_t *y"));
    assert_true(file_has(p, "#define NNC_C_F32 1"));       /* the LM head's f32 logits */
    assert_true(file_has(p, "#define NNC_MASK_I32 0"));
    snprintf(p, sizeof p, "%s/gpt2.c", out);
    snprintf(want, sizeof want, "precision %s.", pr);
    assert_true(file_has(p, want));
    snprintf(want, sizeof want, "nnrt_f32_to_%s(", pr);
    assert_true(file_has(p, want));
    assert_true(file_has(p, "int gpt2_device_peaks(gpt2_model *m"));
    snprintf(p, sizeof p, "%s/bench_gpt2.c", out);
    snprintf(want, sizeof want, "1e-2, b_stage, b_run_staged, b_peaks, NNRT_%s,", i ? "BF16" : "F16");
    assert_true(file_has(p, want));
    snprintf(p, sizeof p, "%s/README.md", out);
    snprintf(want, sizeof want, "(precision %s)", pr);
    assert_true(file_has(p, want));
    assert_true(file_has(p, i ? "ushort" : "vload_half"));
    snprintf(p, sizeof p, "%s/Makefile", out);
    snprintf(want, sizeof want, "precision %s).", pr);
    assert_true(file_has(p, want));
  }
  if (nnc_validate_available()) {
    static const char direct[] = "typedef half nnc_t;\n"
                                 "__kernel void k(__global const nnc_t *p, __global float *o) { o[0] = p[0]; }\n";
    char name[600];
    nnc_error err = {0};
    snprintf(name, sizeof name, "%s/direct_half.cl", work);
    assert_int_equal(nnc_validate_source(name, direct, NNC_LANG_OPENCL12, NULL, 0, &err), NNC_E_INTERNAL);
    assert_non_null(strstr(err.msg, "cl_khr_fp16"));
  }
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

int main(int argc, char **argv) {
  const struct CMUnitTest narrow[] = {
    cmocka_unit_test(test_narrow_code),
    cmocka_unit_test(test_models_f16),
    cmocka_unit_test(test_ops_f16),
    cmocka_unit_test(test_models_bf16),
    cmocka_unit_test(test_ops_bf16),
  };
  if (argc > 1 && strcmp(argv[1], "narrow") == 0) return cmocka_run_group_tests(narrow, setup, teardown);
  /* the GPU-shaped tiles, a device-only run, training and generation: a
   * process of their own, beside the models and ops (each near half an
   * hour under the sanitizers on a busy 2-core machine) */
  const struct CMUnitTest device[] = {
    cmocka_unit_test(test_gpu_way),
    cmocka_unit_test(test_create_and_run_device),
    cmocka_unit_test(test_train),
    cmocka_unit_test(test_generate),
  };
  if (argc > 1 && strcmp(argv[1], "device") == 0) return cmocka_run_group_tests(device, setup, teardown);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_emitter_errors),
    cmocka_unit_test(test_tile_rule_cpu),
    cmocka_unit_test(test_tile_rule_gpu),
    cmocka_unit_test(test_tile_rule_other_kernels),
    cmocka_unit_test(test_models),
    cmocka_unit_test(test_ops),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
