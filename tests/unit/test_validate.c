/* tests/unit/test_validate.c — libclang's check of the sources nnc emits
 * (compiler/emit/validate.h): valid OpenCL C 1.2 and C11 pass; broken ones
 * fail with the generated file's line and column (counted by hand here) and
 * the comment line of the kernel the error is in; every model of models/ and
 * every op file of tests/ops/ emitted for c-simd and opencl passes, and a break
 * put into one of their kernels is caught and named. Built without libclang
 * the checks do nothing, which one test confirms while the rest skip. */
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
#include "emit/validate.h"

static char work[256];

static void write_text(const char *dir, const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  s[n] = 0;
  return s;
}

/* A path under the scratch folder, as the emitters name their sources. */
static const char *in_work(const char *rel) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", work, rel);
  return path;
}

static bool skip_without_clang(void) {
  if (nnc_validate_available()) return false;
  skip();
  return true;
}

/* The message of a failed check holds each of the needles. */
static void expect_error(nnc_status st, const nnc_error *err, const char *const *needles, int n) {
  if (st != NNC_E_INTERNAL) fprintf(stderr, "status %d: %s\n", (int)st, err->msg);
  assert_int_equal(st, NNC_E_INTERNAL);
  for (int i = 0; i < n; i++) {
    if (!strstr(err->msg, needles[i])) fprintf(stderr, "expected \"%s\" in: %s\n", needles[i], err->msg);
    assert_non_null(strstr(err->msg, needles[i]));
  }
}

/* ------------------------------------------------------------ OpenCL C */

/* Builtins of opencl-c.h (work-item functions, vector loads and stores,
 * native math, barriers), local memory, a double under cl_khr_fp64, and a
 * helper defined before the kernels. */
static const char cl_ok[] =
  "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
  "inline float twice(float x) { return 2.0f * x; }\n"
  "\n"
  "/* t.lua:7  fc1: linear + relu  (kernel 0, elementwise) */\n"
  "__kernel void k0(__global const float *x, __global float *y, long n) {\n"
  "  __local float tile[64];\n"
  "  const int i = (int)get_global_id(0), l = (int)get_local_id(0);\n"
  "  tile[l % 64] = x[i];\n"
  "  barrier(CLK_LOCAL_MEM_FENCE);\n"
  "  float4 v = vload4(i, x);\n"
  "  double acc = (double)native_exp(v.x) + (double)fmax(v.y, 0.0f);\n"
  "  vstore4(v * 2.0f, i, y);\n"
  "  if (i < n) y[i] = twice((float)acc) + tile[l % 64] + native_sqrt(fabs(v.z)) + mad(v.w, 2.0f, 1.0f);\n"
  "}\n";

static void test_opencl_valid(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  nnc_error err = {0};
  assert_int_equal(nnc_validate_source(in_work("ok.cl"), cl_ok, NNC_LANG_OPENCL12, NULL, 0, &err), NNC_OK);
  assert_string_equal(err.msg, "");
}

/* An undeclared identifier in the second kernel, after a helper kernel of
 * its own (k2_stats, as the pasted GEMM template names it): the comment of
 * kernel 2 is quoted, not that of kernel 1. */
static const char cl_undeclared[] =
  "inline float twice(float x) { return 2.0f * x; }\n"                      /* 1 */
  "\n"                                                                      /* 2 */
  "/* t.lua:5  add: add  (kernel 1, elementwise) */\n"                      /* 3 */
  "__kernel void k1(__global float *y) { y[get_global_id(0)] = 1.0f; }\n"   /* 4 */
  "\n"                                                                      /* 5 */
  "/* t.lua:7  fc1: linear + relu  (kernel 2, gemm) */\n"                   /* 6 */
  "__kernel void k2_stats(__global float *x) { x[0] = 1.0f; }\n"            /* 7 */
  "__kernel void k2(__global const float *x, __global float *y) {\n"        /* 8 */
  "  const int i = get_global_id(0);\n"                                     /* 9 */
  "  y[i] = twice(x[i]) + undeclared_thing;\n"                              /* 10 */
  "}\n";

static void test_opencl_undeclared(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  nnc_error err = {0};
  nnc_status st = nnc_validate_source(in_work("bad.cl"), cl_undeclared, NNC_LANG_OPENCL12, NULL, 0, &err);
  const char *want[] = {"generated bad.cl:10:24: ", "undeclared identifier 'undeclared_thing'",
                        "; in /* t.lua:7  fc1: linear + relu  (kernel 2, gemm) */"};
  expect_error(st, &err, want, 3);
  assert_null(strstr(err.msg, "kernel 1,"));
  assert_null(strstr(err.msg, "more error"));
}

/* A type error: a float4 where a float is wanted, in the first kernel. */
static const char cl_type[] =
  "/* t.lua:3  relu: relu  (kernel 0, elementwise) */\n"                        /* 1 */
  "__kernel void k0(__global const float *x, __global float *y) {\n"            /* 2 */
  "  float4 v = vload4(0, x);\n"                                                /* 3 */
  "  float f = v;\n"                                                            /* 4 */
  "  y[0] = f;\n"                                                               /* 5 */
  "}\n";

static void test_opencl_type_error(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  nnc_error err = {0};
  nnc_status st = nnc_validate_source(in_work("type.cl"), cl_type, NNC_LANG_OPENCL12, NULL, 0, &err);
  const char *want[] = {"generated type.cl:4:9: ", "incompatible type", "float4",
                        "; in /* t.lua:3  relu: relu  (kernel 0, elementwise) */"};
  expect_error(st, &err, want, 4);
}

/* An error before any kernel comment quotes none; three errors count two more. */
static void test_opencl_outside_kernel(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  static const char text[] =
    "inline float twice(float x) { return 2.0f * nope; }\n"
    "/* t.lua:3  relu: relu  (kernel 0, elementwise) */\n"
    "__kernel void k0(__global float *y) { y[0] = nope2 + nope3; }\n";
  nnc_error err = {0};
  nnc_status st = nnc_validate_source(in_work("pre.cl"), text, NNC_LANG_OPENCL12, NULL, 0, &err);
  const char *want[] = {"generated pre.cl:1:45: ", "'nope'", "; and 2 more errors"};
  expect_error(st, &err, want, 3);
  assert_null(strstr(err.msg, "(kernel"));
}

/* ------------------------------------------------------------------- C */

/* A C file that includes a header beside it and one from an include folder. */
static void test_c_valid(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  char inc[600];
  snprintf(inc, sizeof inc, "%s/inc", work);
  assert_true(mkdir(inc, 0777) == 0 || access(inc, F_OK) == 0);
  write_text(work, "beside.h", "typedef struct beside { int n; } beside;\n");
  write_text(inc, "far.h", "#include <stdint.h>\nstatic inline int64_t far_twice(int64_t v) { return 2 * v; }\n");
  static const char text[] =
    "#include <math.h>\n#include <stdatomic.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
    "#include \"beside.h\"\n#include \"far.h\"\n"
    "static _Thread_local char last[64];\n"
    "/* t.lua:3  relu: relu  (kernel 0, elementwise) */\n"
    "static int k0(const beside *b, float *y) {\n"
    "  for (int i = 0; i < b->n; i++) y[i] = fmaxf(y[i], 0.0f) + (float)far_twice(i);\n"
    "  snprintf(last, sizeof last, \"%d\", b->n);\n"
    "  return 0;\n"
    "}\n"
    "int run(float *y, int n) { beside b = {n}; _Atomic int done = 0; atomic_store(&done, k0(&b, y)); return done; }\n";
  const char *dirs[] = {inc};
  nnc_error err = {0};
  assert_int_equal(nnc_validate_source(in_work("model.c"), text, NNC_LANG_C11, dirs, 1, &err), NNC_OK);
  assert_string_equal(err.msg, "");
  /* the same text without the include folder: far.h is not found, a fatal error */
  nnc_status st = nnc_validate_source(in_work("model.c"), text, NNC_LANG_C11, NULL, 0, &err);
  const char *want[] = {"generated model.c:6:10: ", "'far.h' file not found"};
  expect_error(st, &err, want, 2);
  assert_null(strstr(err.msg, "(kernel"));
}

/* Kernel 3 with a helper, then a non-kernel function that launches it. */
static const char c_model[] =
  "#include <stdint.h>\n"                                                         /* 1 */
  "/* t.lua:9  h.0.mlp.c_fc: layernorm + linear + gelu  (kernel 3, gemm) */\n"    /* 2 */
  "static void k3_rows(float *y, int64_t r0, int64_t r1) {\n"                     /* 3 */
  "  for (int64_t r = r0; r < r1; r++) y[r] = 0.0f;\n"                            /* 4 */
  "}\n"                                                                           /* 5 */
  "static int k3(float *y) {\n"                                                   /* 6 */
  "  k3_rows(y, 0, 7);\n"                                                         /* 7 */
  "  BODY3\n"                                                                     /* 8 */
  "  return 0;\n"                                                                 /* 9 */
  "}\n"                                                                           /* 10 */
  "/* The work of each kernel. */\n"                                              /* 11 */
  "static int forward(float *y) {\n"                                              /* 12 */
  "  FWD0\n"                                                                      /* 13 */
  "  /* t.lua:9  h.0.mlp.c_fc: layernorm + linear + gelu  (kernel 3, gemm) */\n"  /* 14 */
  "  FWD1\n"                                                                      /* 15 */
  "  return k3(y);\n"                                                             /* 16 */
  "}\n"                                                                           /* 17 */
  "int model_run(float *y) { return forward(y); }\n";

/* c_model with the lines BODY3, FWD0 and FWD1 replaced. */
static char *c_model_with(const char *body3, const char *fwd0, const char *fwd1) {
  const char *key[] = {"BODY3", "FWD0", "FWD1"}, *val[] = {body3, fwd0, fwd1};
  char *out = malloc(sizeof c_model + 512);
  assert_non_null(out);
  const char *s = c_model;
  size_t n = 0;
  for (int i = 0; i < 3; i++) {
    const char *at = strstr(s, key[i]);
    memcpy(out + n, s, (size_t)(at - s));
    n += (size_t)(at - s);
    n += (size_t)sprintf(out + n, "%s", val[i]);
    s = at + strlen(key[i]);
  }
  strcpy(out + n, s);
  return out;
}

static void test_c_broken(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  nnc_error err = {0};
  char *ok = c_model_with(";", ";", ";");
  assert_int_equal(nnc_validate_source(in_work("m.c"), ok, NNC_LANG_C11, NULL, 0, &err), NNC_OK);
  free(ok);
  /* in kernel 3's body, after its helper */
  char *t = c_model_with("y[0] = missing_weight;", ";", ";");
  nnc_status st = nnc_validate_source(in_work("m.c"), t, NNC_LANG_C11, NULL, 0, &err);
  const char *want[] = {"generated m.c:8:10: ", "undeclared identifier 'missing_weight'",
                        "; in /* t.lua:9  h.0.mlp.c_fc: layernorm + linear + gelu  (kernel 3, gemm) */"};
  expect_error(st, &err, want, 3);
  free(t);
  /* a type error in forward() before its first launch comment: not in a kernel */
  t = c_model_with(";", "int *p = 1.5f;", ";");
  st = nnc_validate_source(in_work("m.c"), t, NNC_LANG_C11, NULL, 0, &err);
  const char *want2[] = {"generated m.c:13:8: ", "float"};
  expect_error(st, &err, want2, 2);
  assert_null(strstr(err.msg, "(kernel"));
  free(t);
  /* after the launch comment of kernel 3 inside forward(): that comment */
  t = c_model_with(";", ";", "k3(y, y);");
  st = nnc_validate_source(in_work("m.c"), t, NNC_LANG_C11, NULL, 0, &err);
  const char *want3[] = {"generated m.c:15:9: ", "too many arguments", "(kernel 3, gemm) */"};
  expect_error(st, &err, want3, 3);
  free(t);
}

/* An error in a header the source includes is shown under the header's
 * name, relative to the source's folder, and quotes no kernel. */
static void test_error_in_header(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/hdr", work);
  assert_true(mkdir(dir, 0777) == 0 || access(dir, F_OK) == 0);
  write_text(dir, "m.h", "typedef struct m_dims { long B; } m_dims;\nint m_run(const m_dims *d) oops;\n");
  write_text(dir, "m.c", "#include \"m.h\"\n/* t.lua:1  x: relu  (kernel 0, elementwise) */\nint k0(void) { return 0; }\n");
  nnc_error err = {0};
  nnc_status st = nnc_validate_file(dir, "m.c", NNC_LANG_C11, &err);
  const char *want[] = {"generated m.h:2:28: "};
  expect_error(st, &err, want, 1);
  assert_null(strstr(err.msg, "(kernel"));
}

/* Bad arguments and missing files are errors, never a crash; an empty
 * source is a valid (empty) translation unit. */
static void test_edges(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  nnc_error err = {0};
  assert_int_equal(nnc_validate_source(NULL, "", NNC_LANG_C11, NULL, 0, &err), NNC_E_INTERNAL);
  assert_int_equal(nnc_validate_source(in_work("x.c"), NULL, NNC_LANG_C11, NULL, 0, &err), NNC_E_INTERNAL);
  assert_int_equal(nnc_validate_source(in_work("x.c"), "", NNC_LANG_C11, NULL, 2, &err), NNC_E_INTERNAL);
  assert_int_equal(nnc_validate_source(in_work("x.c"), "", (nnc_source_lang)7, NULL, 0, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "found language 7"));
  assert_int_equal(nnc_validate_file(work, "no_such_file.c", NNC_LANG_C11, &err), NNC_E_IO);
  assert_non_null(strstr(err.msg, "no_such_file.c"));
  assert_int_equal(nnc_validate_source(in_work("empty.c"), "", NNC_LANG_C11, NULL, 0, &err), NNC_OK);
  assert_int_equal(nnc_validate_source(in_work("empty.cl"), "", NNC_LANG_OPENCL12, NULL, 0, &err), NNC_OK);
  /* a kernel comment with no number, and one not alone on its line, are no kernel comments */
  static const char odd[] =
    "/* t.lua:1  x: relu  (kernel 4, gemm) */ int k4_unused;\n"
    "/* t.lua:2  y: relu  (kernel , gemm) */\n"
    "int k4(void) { return nope; }\n";
  nnc_status st = nnc_validate_source(in_work("odd.c"), odd, NNC_LANG_C11, NULL, 0, &err);
  const char *want[] = {"generated odd.c:3:23: ", "'nope'"};
  expect_error(st, &err, want, 2);
  assert_null(strstr(err.msg, "; in "));
}

/* Without libclang the checks pass everything, as validate.h says. */
static void test_without_clang(void **state) {
  (void)state;
  if (nnc_validate_available()) {
    skip();
    return;
  }
  nnc_error err = {0};
  assert_int_equal(nnc_validate_source(in_work("bad.cl"), cl_undeclared, NNC_LANG_OPENCL12, NULL, 0, &err), NNC_OK);
  assert_int_equal(nnc_validate_file(work, "no_such_file.c", NNC_LANG_C11, &err), NNC_OK);
}

/* ------------------------------------------------------ emitted folders */

/* The model's prefix: the name of the one top-level .h of an output folder. */
static void prefix_of(const char *dir, char *p, size_t n) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  p[0] = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    if (l > 2 && strcmp(e->d_name + l - 2, ".h") == 0) {
      assert_string_equal(p, "");
      snprintf(p, n, "%.*s", (int)(l - 2), e->d_name);
    }
  }
  closedir(d);
  assert_string_not_equal(p, "");
}

/* c-simd, and OpenCL with GPU tiles (f32 sums) and CPU tiles (f64 sums). */
static const char *const targets[] = {"c-simd", "opencl", "opencl-cpu"};
#define NTARGETS 3

/* Emits model (relative to the source root) for target into work/<tag>;
 * fills the folder and the path of its source that the check covers. */
static void emit(const char *model, int target, const char *tag, char *out, size_t nout, char *src, size_t nsrc) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  snprintf(out, nout, "%s/%s_%s", work, tag, targets[target]);
  nnc_build_opts o = {.model = path, .target = targets[target], .out_dir = out};
  nnc_error err = {0};
  nnc_status st = nnc_build(&o, &err);
  if (st) fprintf(stderr, "%s for %s: %s\n", model, targets[target], err.msg);
  assert_int_equal(st, NNC_OK);
  char p[256];
  prefix_of(out, p, sizeof p);
  snprintf(src, nsrc, "%s%s", p, target ? ".cl" : ".c");
}

/* Every .lua of folder (relative to the source root), emitted for each
 * target, passes the check of the emitted source; returns the count. */
static int check_folder(const char *folder) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", NNC_SOURCE_ROOT, folder);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".lua") != 0) continue;
    char model[512], tag[256];
    snprintf(model, sizeof model, "%s/%s", folder, e->d_name);
    snprintf(tag, sizeof tag, "%.*s", (int)(l - 4), e->d_name);
    for (int t = 0; t < NTARGETS; t++) {
      char out[1024], src[300];
      emit(model, t, tag, out, sizeof out, src, sizeof src);
      nnc_error err = {0};
      nnc_status st = nnc_validate_file(out, src, t ? NNC_LANG_OPENCL12 : NNC_LANG_C11, &err);
      if (st) fprintf(stderr, "%s for %s: %s\n", model, targets[t], err.msg);
      assert_int_equal(st, NNC_OK);
      n++;
    }
  }
  closedir(d);
  return n;
}

static void test_emitted_models(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  assert_true(check_folder("models") >= 3 * NTARGETS);   /* mlp, gpt2, bert */
}

static void test_emitted_ops(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  assert_true(check_folder("tests/ops") >= 9 * NTARGETS);
}

/* A break put into the body of an emitted kernel is caught, on the line it
 * was put, with that kernel's comment (its Lua line) quoted. */
static void break_kernel(int target) {
  char out[1024], src[300], path[1400];
  emit("models/mlp.lua", target, "broken", out, sizeof out, src, sizeof src);
  snprintf(path, sizeof path, "%s/%s", out, src);
  char *text = read_text(path);
  /* the comment of kernel 1 and the first line after it that opens a body */
  const char *c = strstr(text, "  (kernel 1, ");
  assert_non_null(c);
  while (c > text && c[-1] != '\n') c--;
  const char *ce = strchr(c, '\n');
  const char *open = ce;
  while (open && open[-1] != '{') open = strchr(open + 1, '\n');
  assert_non_null(open);
  unsigned line = 1;
  for (const char *p = text; p < open; p++) line += *p == '\n';
  static const char brk[] = "  nnc_broken_identifier += 1;\n";
  size_t n = strlen(text), at = (size_t)(open + 1 - text);
  char *broken = malloc(n + sizeof brk);
  assert_non_null(broken);
  memcpy(broken, text, at);
  memcpy(broken + at, brk, sizeof brk - 1);
  memcpy(broken + at + sizeof brk - 1, text + at, n - at + 1);
  nnc_error err = {0};
  const char *dirs[] = {out};
  nnc_status st = nnc_validate_source(path, broken, target ? NNC_LANG_OPENCL12 : NNC_LANG_C11, dirs, 1, &err);
  char where[400], comment[1024];
  snprintf(where, sizeof where, "generated %s:%u:3: ", src, line + 1);
  snprintf(comment, sizeof comment, "; in %.*s", (int)(ce - c) - (c[0] == ' ' ? 2 : 0), c + (c[0] == ' ' ? 2 : 0));
  const char *want[] = {where, "'nnc_broken_identifier'", comment, "mlp.lua:"};
  expect_error(st, &err, want, 4);
  free(broken);
  free(text);
}

static void test_broken_emitted_c(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  break_kernel(0);
}

static void test_broken_emitted_cl(void **state) {
  (void)state;
  if (skip_without_clang()) return;
  break_kernel(1);
  break_kernel(2);
}

int main(void) {
  snprintf(work, sizeof work, "/tmp/nnc_validate_test_XXXXXX");
  if (!mkdtemp(work)) return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_opencl_valid),
    cmocka_unit_test(test_opencl_undeclared),
    cmocka_unit_test(test_opencl_type_error),
    cmocka_unit_test(test_opencl_outside_kernel),
    cmocka_unit_test(test_c_valid),
    cmocka_unit_test(test_c_broken),
    cmocka_unit_test(test_error_in_header),
    cmocka_unit_test(test_edges),
    cmocka_unit_test(test_without_clang),
    cmocka_unit_test(test_emitted_models),
    cmocka_unit_test(test_emitted_ops),
    cmocka_unit_test(test_broken_emitted_c),
    cmocka_unit_test(test_broken_emitted_cl),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (!failed) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work);
  }
  return failed;
}
