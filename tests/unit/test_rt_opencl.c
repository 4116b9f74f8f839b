/* tests/unit/test_rt_opencl.c — the OpenCL runtime: the error mapping, FNV
 * keys, cache folder and device choice (pure), then on a real platform
 * (PoCL here): device listing, a bad NNC_OPENCL_DEVICE, a kernel checked
 * against the host, build logs, the binary cache (hits, corrupt entries,
 * unwritable and full folders, concurrent builders) and event timing.
 * Without any OpenCL platform the device tests skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nnrt_opencl.h"

extern char **environ;

/* LeakSanitizer's hook: PoCL and its LLVM keep compiler state until exit
 * that they never free. Only their own allocations are excused; ours are
 * still checked. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libpocl.so\nleak:libLLVM\nleak:libclang\n";
}

static bool g_have_cl;
static char g_tmp[256];
static char g_self[4096];

/* ------------------------------------------------------------- helpers */

#define N_ELEMS 1013 /* odd: not a multiple of any work-group size */

static const char *ADD_SRC =
    "__kernel void axpb(__global const float *a, __global const float *b,\n"
    "                   __global float *c, int n) {\n"
    "  int i = get_global_id(0);\n"
    "  if (i < n) c[i] = a[i] + SCALE * b[i];\n"
    "}\n";

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char p[4096];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat sb;
    if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
      rm_tree(p);
    else
      unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* A fresh folder name under the test's temp folder (not created). */
static void sub_dir(const char *name, char *buf, size_t size) {
  snprintf(buf, size, "%s/%s", g_tmp, name);
}

static int count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
        !strncmp(de->d_name, prefix, strlen(prefix)))
      n++;
  closedir(d);
  return n;
}

static nnrt_cl *make_cl(const char *cache_dir, bool no_cache) {
  nnrt_cl_options opt = {.device = NULL, .cache_dir = cache_dir, .no_cache = no_cache};
  nnrt_cl *cl = NULL;
  nnrt_error err = {0};
  nnrt_status st = nnrt_cl_create(&opt, &cl, &err);
  if (st != NNRT_OK) fprintf(stderr, "nnrt_cl_create: %s\n", err.msg);
  assert_int_equal(st, NNRT_OK);
  assert_non_null(cl);
  return cl;
}

static void entry_file(nnrt_cl *cl, const char *dir, const char *options, char *buf,
                       size_t size) {
  const nnrt_cl_device_info *d = nnrt_cl_device(cl);
  snprintf(buf, size, "%s/%016llx.clbin", dir,
           (unsigned long long)nnrt_cl_cache_key(d->name, d->driver, options, ADD_SRC));
}

/* Runs axpb (built with -D SCALE=scale) over N_ELEMS floats and checks
 * every element against the host's a + scale * b. Returns the kernel's
 * time in ns. */
static uint64_t run_axpb(nnrt_cl *cl, cl_program prog, int scale) {
  static float a[N_ELEMS], b[N_ELEMS], c[N_ELEMS];
  for (int i = 0; i < N_ELEMS; i++) {
    a[i] = (float)i * 0.5f;
    b[i] = 1000.0f - 2.0f * (float)i;
    c[i] = -1.0f;
  }
  nnrt_error err = {0};
  cl_mem ma, mb, mc;
  size_t bytes = sizeof a;
  assert_int_equal(nnrt_cl_buffer_create(cl, bytes, &ma, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_buffer_create(cl, bytes, &mb, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_buffer_create(cl, bytes, &mc, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_write(cl, ma, 0, a, bytes, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_write(cl, mb, 0, b, bytes, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_write(cl, mc, 0, c, bytes, &err), NNRT_OK);
  cl_int e = CL_SUCCESS;
  cl_kernel k = clCreateKernel(prog, "axpb", &e);
  assert_int_equal(e, CL_SUCCESS);
  int n = N_ELEMS;
  assert_int_equal(clSetKernelArg(k, 0, sizeof ma, &ma), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 1, sizeof mb, &mb), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 2, sizeof mc, &mc), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 3, sizeof n, &n), CL_SUCCESS);
  size_t global = N_ELEMS;
  cl_event ev = NULL;
  assert_int_equal(nnrt_cl_run(cl, k, 1, &global, NULL, &ev, "axpb", &err), NNRT_OK);
  assert_non_null(ev);
  uint64_t ns = 0;
  assert_int_equal(nnrt_cl_event_elapsed_ns(ev, &ns, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_read(cl, mc, 0, c, bytes, &err), NNRT_OK);
  for (int i = 0; i < N_ELEMS; i++) {
    /* Both sides are exact in float: halves and integers below 2^24. */
    float want = (float)i * 0.5f + (float)scale * (1000.0f - 2.0f * (float)i);
    if (c[i] != want) fprintf(stderr, "c[%d] = %g, expected %g\n", i, c[i], want);
    assert_true(c[i] == want);
  }
  clReleaseEvent(ev);
  clReleaseKernel(k);
  nnrt_cl_buffer_release(ma);
  nnrt_cl_buffer_release(mb);
  nnrt_cl_buffer_release(mc);
  return ns;
}

static cl_program build_ok(nnrt_cl *cl, const char *options) {
  cl_program prog = NULL;
  nnrt_error err = {0};
  nnrt_status st = nnrt_cl_program_build(cl, ADD_SRC, options, "test.lua:7 kernel 0", &prog, &err);
  if (st != NNRT_OK) fprintf(stderr, "build: %s\n", err.msg);
  assert_int_equal(st, NNRT_OK);
  assert_non_null(prog);
  return prog;
}

#define NEED_CL() \
  do {            \
    if (!g_have_cl) skip(); \
  } while (0)

/* --------------------------------------------------- pure: no device */

static void test_status_mapping(void **state) {
  const struct { cl_int e; nnrt_status want; const char *name; } cases[] = {
      {CL_OUT_OF_HOST_MEMORY, NNRT_E_NOMEM, "CL_OUT_OF_HOST_MEMORY"},
      {CL_OUT_OF_RESOURCES, NNRT_E_NOMEM, "CL_OUT_OF_RESOURCES"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, NNRT_E_NOMEM, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {CL_INVALID_VALUE, NNRT_E_ARG, "CL_INVALID_VALUE"},
      {CL_INVALID_KERNEL_ARGS, NNRT_E_ARG, "CL_INVALID_KERNEL_ARGS"},
      {CL_INVALID_DEVICE_PARTITION_COUNT, NNRT_E_ARG, "CL_INVALID_DEVICE_PARTITION_COUNT"},
      {CL_INVALID_BUFFER_SIZE, NNRT_E_SIZE, "CL_INVALID_BUFFER_SIZE"},
      {CL_INVALID_WORK_GROUP_SIZE, NNRT_E_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
      {CL_INVALID_PROGRAM_EXECUTABLE, NNRT_E_STATE, "CL_INVALID_PROGRAM_EXECUTABLE"},
      {CL_PROFILING_INFO_NOT_AVAILABLE, NNRT_E_STATE, "CL_PROFILING_INFO_NOT_AVAILABLE"},
      {CL_INVALID_BINARY, NNRT_E_FORMAT, "CL_INVALID_BINARY"},
      {CL_BUILD_PROGRAM_FAILURE, NNRT_E_DEVICE, "CL_BUILD_PROGRAM_FAILURE"},
      {CL_DEVICE_NOT_FOUND, NNRT_E_DEVICE, "CL_DEVICE_NOT_FOUND"},
      {-1001, NNRT_E_DEVICE, "CL_PLATFORM_NOT_FOUND_KHR"},
      {-9999, NNRT_E_DEVICE, "CL_UNKNOWN_ERROR"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    nnrt_error err = {0};
    assert_int_equal(nnrt_cl_status_of(cases[i].e), cases[i].want);
    assert_string_equal(nnrt_cl_error_name(cases[i].e), cases[i].name);
    assert_int_equal(nnrt_cl_check(cases[i].e, "doing x", &err), cases[i].want);
    assert_int_equal(err.code, cases[i].want);
    char want[160];
    snprintf(want, sizeof want, "doing x: %s (%d)", cases[i].name, (int)cases[i].e);
    assert_memory_equal(err.msg, want, strlen(want));
  }
  nnrt_error err = {.code = NNRT_E_IO, .msg = "untouched"};
  assert_int_equal(nnrt_cl_check(CL_SUCCESS, "doing x", &err), NNRT_OK);
  assert_string_equal(err.msg, "untouched");
  assert_int_equal(nnrt_cl_status_of(CL_SUCCESS), NNRT_OK);
  assert_non_null(strstr((nnrt_cl_check(-1001, "x", &err), err.msg), "no OpenCL platform"));
}

static void test_fnv_and_key(void **state) {
  /* Published FNV-1a 64 test vectors. */
  assert_true(nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, "", 0) == 0xcbf29ce484222325ull);
  assert_true(nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, "a", 1) == 0xaf63dc4c8601ec8cull);
  assert_true(nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, "foobar", 6) == 0x85944171f73967e8ull);
  /* The key is the hash of the four strings with their terminators. */
  const char joined[] = "dev\0drv\0-D X=1\0src";
  assert_true(nnrt_cl_cache_key("dev", "drv", "-D X=1", "src") ==
              nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, joined, sizeof joined));
  assert_true(nnrt_cl_cache_key("dev", "drv", "ab", "c") !=
              nnrt_cl_cache_key("dev", "drv", "a", "bc"));
  assert_true(nnrt_cl_cache_key(NULL, NULL, NULL, NULL) ==
              nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, "\0\0\0\0", 4));
}

static void test_cache_dir(void **state) {
  char saved_home[1024] = "";
  const char *h = getenv("HOME");
  if (h) snprintf(saved_home, sizeof saved_home, "%s", h);
  char buf[256];
  nnrt_error err = {0};
  setenv("NNC_OPENCL_CACHE", "/c/env", 1);
  setenv("XDG_CACHE_HOME", "/c/xdg", 1);
  setenv("HOME", "/c/home", 1);
  assert_int_equal(nnrt_cl_cache_dir("/c/opt", buf, sizeof buf, &err), NNRT_OK);
  assert_string_equal(buf, "/c/opt");
  assert_int_equal(nnrt_cl_cache_dir("", buf, sizeof buf, &err), NNRT_OK);
  assert_string_equal(buf, "/c/env");
  setenv("NNC_OPENCL_CACHE", "", 1);
  assert_int_equal(nnrt_cl_cache_dir(NULL, buf, sizeof buf, &err), NNRT_OK);
  assert_string_equal(buf, "/c/xdg/nnc");
  unsetenv("XDG_CACHE_HOME");
  assert_int_equal(nnrt_cl_cache_dir(NULL, buf, sizeof buf, &err), NNRT_OK);
  assert_string_equal(buf, "/c/home/.cache/nnc");
  assert_int_equal(nnrt_cl_cache_dir(NULL, buf, 10, &err), NNRT_E_SIZE);
  assert_string_equal(buf, "");
  assert_non_null(strstr(err.msg, "HOME"));
  unsetenv("HOME");
  assert_int_equal(nnrt_cl_cache_dir(NULL, buf, sizeof buf, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "NNC_OPENCL_CACHE"));
  unsetenv("NNC_OPENCL_CACHE");
  if (saved_home[0]) setenv("HOME", saved_home, 1);
}

static void fake_dev(nnrt_cl_device_info *d, int p, int i, const char *name, cl_device_type t) {
  memset(d, 0, sizeof *d);
  d->platform = p;
  d->index = i;
  d->type = t;
  snprintf(d->name, sizeof d->name, "%s", name);
  snprintf(d->platform_name, sizeof d->platform_name, "Plat%d", p);
  snprintf(d->driver, sizeof d->driver, "1.%d", i);
}

static void test_device_match(void **state) {
  nnrt_cl_device_info devs[3], got;
  fake_dev(&devs[0], 0, 0, "pthread-haswell", CL_DEVICE_TYPE_CPU);
  fake_dev(&devs[1], 1, 0, "NVIDIA H100 80GB", CL_DEVICE_TYPE_GPU);
  fake_dev(&devs[2], 1, 1, "gfx90a:sramecc+:xnack-", CL_DEVICE_TYPE_GPU);
  nnrt_error err = {0};
  assert_int_equal(nnrt_cl_device_match(devs, 3, "1:1", "opt", &got, &err), NNRT_OK);
  assert_string_equal(got.name, "gfx90a:sramecc+:xnack-");
  assert_int_equal(nnrt_cl_device_match(devs, 3, "h100", "opt", &got, &err), NNRT_OK);
  assert_int_equal(got.platform, 1);
  assert_int_equal(got.index, 0);
  /* Not "P:D": a name with a colon is matched as a name. */
  assert_int_equal(nnrt_cl_device_match(devs, 3, "gfx90a:sram", "opt", &got, &err), NNRT_OK);
  assert_int_equal(got.index, 1);
  const char *bad[] = {"2:0", "0:1", "voodoo", "1:", ":1", "1:0x", "-1:0", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    assert_int_equal(nnrt_cl_device_match(devs, 3, bad[i], "NNC_OPENCL_DEVICE", &got, &err),
                     NNRT_E_ARG);
    assert_non_null(strstr(err.msg, "NNC_OPENCL_DEVICE"));
    assert_non_null(strstr(err.msg, "0:0 pthread-haswell (CPU"));
    assert_non_null(strstr(err.msg, "1:0 NVIDIA H100 80GB (GPU"));
    assert_non_null(strstr(err.msg, "1:1 gfx90a"));
  }
  char list[32];
  nnrt_cl_device_list_text(devs, 3, list, sizeof list);
  assert_int_equal(strlen(list), sizeof list - 1);
  nnrt_cl_device_list_text(devs, 0, list, sizeof list);
  assert_string_equal(list, "");
}

/* ----------------------------------------------------- on a real device */

static void test_devices_listed(void **state) {
  NEED_CL();
  nnrt_cl_device_info devs[NNRT_CL_MAX_DEVICES];
  int n = 0;
  nnrt_error err = {0};
  assert_int_equal(nnrt_cl_devices(devs, NNRT_CL_MAX_DEVICES, &n, &err), NNRT_OK);
  assert_true(n >= 1);
  for (int i = 0; i < n; i++) {
    assert_true(devs[i].name[0] != '\0');
    assert_non_null(devs[i].id);
    assert_true(devs[i].compute_units >= 1);
    assert_true(devs[i].global_mem > 0);
    /* what a model's create picks its GEMM tiles by, as the driver reports it */
    cl_ulong local = 0;
    cl_uint vec = 0;
    size_t group = 0;
    assert_int_equal(clGetDeviceInfo(devs[i].id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL), CL_SUCCESS);
    assert_int_equal(clGetDeviceInfo(devs[i].id, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof vec, &vec, NULL),
                     CL_SUCCESS);
    assert_int_equal(clGetDeviceInfo(devs[i].id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof group, &group, NULL),
                     CL_SUCCESS);
    assert_true(local >= 1024);   /* OpenCL 1.2 asks for 32 KiB at least; 1 KiB for custom devices */
    assert_true(devs[i].local_mem == local);
    assert_true(devs[i].preferred_vector == vec);
    assert_true(devs[i].max_work_group == group);
  }
  /* cap smaller than the count stores only cap. */
  nnrt_cl_device_info one;
  assert_int_equal(nnrt_cl_devices(&one, 1, &n, &err), NNRT_OK);
  assert_int_equal(n, 1);
  assert_string_equal(one.name, devs[0].name);
  assert_int_equal(nnrt_cl_devices(&one, 0, &n, &err), NNRT_E_ARG);
}

static void test_bad_env_device(void **state) {
  NEED_CL();
  nnrt_cl_device_info first, got;
  nnrt_error err = {0};
  int n = 0;
  assert_int_equal(nnrt_cl_devices(&first, 1, &n, &err), NNRT_OK);

  setenv("NNC_OPENCL_DEVICE", "no-such-device-xyz", 1);
  nnrt_cl *cl = (nnrt_cl *)&err; /* must be set to NULL on failure */
  assert_int_equal(nnrt_cl_create(NULL, &cl, &err), NNRT_E_ARG);
  assert_null(cl);
  assert_non_null(strstr(err.msg, "NNC_OPENCL_DEVICE"));
  assert_non_null(strstr(err.msg, "no-such-device-xyz"));
  assert_non_null(strstr(err.msg, first.name));
  assert_non_null(strstr(err.msg, "0:0 "));

  setenv("NNC_OPENCL_DEVICE", "0:99", 1);
  assert_int_equal(nnrt_cl_device_choose(NULL, &got, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "\"0:99\""));

  setenv("NNC_OPENCL_DEVICE", "0:0", 1);
  assert_int_equal(nnrt_cl_device_choose(NULL, &got, &err), NNRT_OK);
  assert_string_equal(got.name, first.name);
  /* An explicit option wins over the environment. */
  setenv("NNC_OPENCL_DEVICE", "no-such-device-xyz", 1);
  assert_int_equal(nnrt_cl_device_choose("0:0", &got, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_device_choose("nope-nope", &got, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "device option"));
  unsetenv("NNC_OPENCL_DEVICE");
}

static void test_add_kernel_and_timing(void **state) {
  NEED_CL();
  nnrt_cl *cl = make_cl(NULL, true);
  assert_string_equal(nnrt_cl_cache_folder(cl), "");
  cl_program p3 = build_ok(cl, "-D SCALE=3");
  uint64_t ns = run_axpb(cl, p3, 3);
  assert_true(ns > 0);
  /* The macro reaches the compiler: another value, another result. */
  cl_program p_neg = build_ok(cl, "-D SCALE=-2");
  run_axpb(cl, p_neg, -2);
  nnrt_cl_cache_stats s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.misses, 2);
  assert_int_equal(s.hits + s.stored + s.store_failures + s.rejected, 0);
  clReleaseProgram(p3);
  clReleaseProgram(p_neg);
  /* Empty copies and a zero-byte buffer are fine. */
  nnrt_error err = {0};
  cl_mem m = NULL;
  assert_int_equal(nnrt_cl_buffer_create(cl, 0, &m, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_write(cl, m, 0, NULL, 0, &err), NNRT_OK);
  assert_int_equal(nnrt_cl_read(cl, m, 0, NULL, 0, &err), NNRT_OK);
  /* A read past the end is the driver's CL_INVALID_VALUE, as a value. */
  float x[4];
  assert_int_equal(nnrt_cl_read(cl, m, 0, x, sizeof x, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "CL_INVALID_VALUE (-30)"));
  nnrt_cl_buffer_release(m);
  assert_int_equal(nnrt_cl_finish(cl, &err), NNRT_OK);
  nnrt_cl_destroy(cl);
}

static void test_build_error_log(void **state) {
  NEED_CL();
  char dir[512];
  sub_dir("errcache", dir, sizeof dir);
  nnrt_cl *cl = make_cl(dir, false);
  const char *src = "__kernel void broken(__global float *x) {\n"
                    "  x[0] = undefined_thing + ;\n"
                    "}\n";
  cl_program prog = (cl_program)&dir;
  nnrt_error err = {0};
  assert_int_equal(nnrt_cl_program_build(cl, src, "-D TILE=8", "gpt2.lua:24 kernel 3", &prog,
                                         &err),
                   NNRT_E_DEVICE);
  assert_null(prog);
  assert_int_equal(err.code, NNRT_E_DEVICE);
  assert_true(strncmp(err.msg, "gpt2.lua:24 kernel 3: ", 22) == 0);
  assert_non_null(strstr(err.msg, "CL_BUILD_PROGRAM_FAILURE (-11)"));
  assert_non_null(strstr(err.msg, "build log: "));
  /* The log is the compiler's: it names the undeclared identifier. */
  assert_non_null(strstr(err.msg, "undefined_thing"));
  nnrt_cl_cache_stats s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.stored, 0);
  assert_int_equal(count_files(dir, ""), 0);
  /* A bad option is refused too, as a value. */
  nnrt_status st = nnrt_cl_program_build(cl, ADD_SRC, "-D SCALE=1 --bogus-flag", NULL, &prog,
                                         &err);
  assert_int_not_equal(st, NNRT_OK);
  assert_int_equal(err.code, st);
  assert_true(strstr(err.msg, "CL_INVALID_BUILD_OPTIONS (-43)") ||
              strstr(err.msg, "CL_BUILD_PROGRAM_FAILURE (-11)"));
  assert_null(prog);
  assert_true(strncmp(err.msg, "OpenCL program: ", 16) == 0);
  nnrt_cl_destroy(cl);
}

static void test_cache_hit(void **state) {
  NEED_CL();
  char dir[512], entry[700];
  sub_dir("hits/nested/folder", dir, sizeof dir);
  nnrt_cl *cl = make_cl(dir, false);
  assert_string_equal(nnrt_cl_cache_folder(cl), dir);
  cl_program p = build_ok(cl, "-D SCALE=5");
  nnrt_cl_cache_stats s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.misses, 1);
  assert_int_equal(s.hits, 0);
  assert_int_equal(s.stored, 1);
  entry_file(cl, dir, "-D SCALE=5", entry, sizeof entry);
  struct stat sb;
  assert_int_equal(stat(entry, &sb), 0);
  assert_true(sb.st_size > NNRT_CL_CACHE_HEADER);
  assert_int_equal(count_files(dir, ".tmp-"), 0);
  clReleaseProgram(p);
  nnrt_cl_destroy(cl);

  /* A new handle, as a new process would: served from the entry. */
  cl = make_cl(dir, false);
  p = build_ok(cl, "-D SCALE=5");
  s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.hits, 1);
  assert_int_equal(s.misses, 0);
  assert_int_equal(s.stored, 0);
  run_axpb(cl, p, 5);
  clReleaseProgram(p);
  /* Other options are another key: a miss. */
  p = build_ok(cl, "-D SCALE=6");
  s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.hits, 1);
  assert_int_equal(s.misses, 1);
  assert_int_equal(count_files(dir, ""), 2);
  run_axpb(cl, p, 6);
  clReleaseProgram(p);
  nnrt_cl_destroy(cl);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  assert_true(len > 0);
  unsigned char *buf = malloc((size_t)len);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Damages the entry with damage(), then checks that the next build rejects
 * it, rebuilds, gives a working program and leaves a good entry behind. */
static void check_rebuild(const char *name, void (*damage)(const char *path)) {
  char dir[512], entry[700];
  sub_dir(name, dir, sizeof dir);
  nnrt_cl *cl = make_cl(dir, false);
  clReleaseProgram(build_ok(cl, "-D SCALE=7"));
  entry_file(cl, dir, "-D SCALE=7", entry, sizeof entry);
  nnrt_cl_destroy(cl);
  damage(entry);

  cl = make_cl(dir, false);
  cl_program p = build_ok(cl, "-D SCALE=7");
  nnrt_cl_cache_stats s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.rejected, 1);
  assert_int_equal(s.hits, 0);
  assert_int_equal(s.misses, 1);
  assert_int_equal(s.stored, 1);
  run_axpb(cl, p, 7);
  clReleaseProgram(p);
  /* The rewritten entry is good again. */
  p = build_ok(cl, "-D SCALE=7");
  assert_int_equal(nnrt_cl_get_cache_stats(cl).hits, 1);
  clReleaseProgram(p);
  nnrt_cl_destroy(cl);
}

static void flip_payload_byte(const char *path) {
  size_t n = 0;
  unsigned char *b = read_file(path, &n);
  b[NNRT_CL_CACHE_HEADER + (n - NNRT_CL_CACHE_HEADER) / 2] ^= 0x5a;
  write_file(path, b, n);
  free(b);
}

static void truncate_entry(const char *path) {
  size_t n = 0;
  unsigned char *b = read_file(path, &n);
  write_file(path, b, n - 3);
  free(b);
}

/* A well-formed entry (right magic, key, size and checksum) whose binary is
 * garbage: only the driver can refuse it. */
static void garbage_binary(const char *path) {
  size_t n = 0;
  unsigned char *b = read_file(path, &n);
  for (size_t i = NNRT_CL_CACHE_HEADER; i < n; i++) b[i] = (unsigned char)(i * 37 + 11);
  put_u64(b + 24, nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, b + NNRT_CL_CACHE_HEADER,
                                   n - NNRT_CL_CACHE_HEADER));
  write_file(path, b, n);
  free(b);
}

static void test_corrupt_entry_flipped(void **state) {
  NEED_CL();
  check_rebuild("corrupt-flip", flip_payload_byte);
}

static void test_corrupt_entry_truncated(void **state) {
  NEED_CL();
  check_rebuild("corrupt-trunc", truncate_entry);
}

static void test_corrupt_entry_refused_by_driver(void **state) {
  NEED_CL();
  check_rebuild("corrupt-garbage", garbage_binary);
}

static void test_unwritable_cache_folder(void **state) {
  NEED_CL();
  /* A folder under a regular file can never be made, even by root (for
   * whom permission bits would not stop anything). */
  char file[512], dir[600];
  sub_dir("plainfile", file, sizeof file);
  write_file(file, "x", 1);
  snprintf(dir, sizeof dir, "%s/cache", file);
  nnrt_cl *cl = make_cl(dir, false);
  cl_program p = build_ok(cl, "-D SCALE=9");
  nnrt_cl_cache_stats s = nnrt_cl_get_cache_stats(cl);
  assert_int_equal(s.store_failures, 1);
  assert_int_equal(s.stored, 0);
  assert_int_equal(s.misses, 1);
  run_axpb(cl, p, 9);
  clReleaseProgram(p);
  nnrt_cl_destroy(cl);
}

/* A really full disk: a 16 KiB tmpfs mounted in a private mount namespace
 * of a child process (so the mount is seen by nobody else and vanishes with
 * the child), smaller than any program binary. Exit 0: all held; 77: the
 * child may not make a mount namespace here (then the test skips). */
static int full_disk_child(const char *dir) {
  if (unshare(CLONE_NEWNS) != 0) {
    /* Not root: a user namespace gives the right to mount in it. */
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 77;
    char map[64];
    FILE *f;
    if ((f = fopen("/proc/self/setgroups", "w"))) fputs("deny", f), fclose(f);
    snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
    if (!(f = fopen("/proc/self/uid_map", "w"))) return 77;
    fputs(map, f);
    fclose(f);
    snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
    if ((f = fopen("/proc/self/gid_map", "w"))) fputs(map, f), fclose(f);
  }
  /* Private first: the tmpfs must not propagate to the parent's view. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 77;
  if (mount("nnc-full", dir, "tmpfs", 0, "size=16k") != 0) return 77;
  nnrt_cl_options opt = {.cache_dir = dir};
  nnrt_cl *cl = NULL;
  nnrt_error err = {0};
  cl_program p = NULL;
  int bad = 0;
  if (nnrt_cl_create(&opt, &cl, &err) != NNRT_OK ||
      nnrt_cl_program_build(cl, ADD_SRC, "-D SCALE=11", "full", &p, &err) != NNRT_OK) {
    fprintf(stderr, "full-disk child: %s\n", err.msg);
    bad = 1;
  } else {
    nnrt_cl_cache_stats s = nnrt_cl_get_cache_stats(cl);
    /* Nothing stored, and no partial entry or temporary left. */
    bad |= s.store_failures != 1 || s.stored != 0 || count_files(dir, "") != 0;
    cl_int e = CL_SUCCESS;
    cl_kernel k = clCreateKernel(p, "axpb", &e);
    bad |= e != CL_SUCCESS;
    if (k) clReleaseKernel(k);
    if (bad) fprintf(stderr, "full-disk child: failures %ld, stored %ld, files %d\n",
                     s.store_failures, s.stored, count_files(dir, ""));
  }
  if (p) clReleaseProgram(p);
  nnrt_cl_destroy(cl);
  umount(dir);
  return bad;
}

static void test_full_disk(void **state) {
  NEED_CL();
  char dir[512];
  sub_dir("full", dir, sizeof dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  char *argv[] = {g_self, "--full-disk-child", dir, NULL};
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, g_self, NULL, NULL, argv, environ), 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) skip();
  assert_int_equal(WEXITSTATUS(status), 0);
  /* The mount went with the child: the folder here is the plain, empty one. */
  assert_int_equal(count_files(dir, ""), 0);
}

/* --------------------------------------------------- concurrent builders */

#define N_THREADS 5

typedef struct {
  const char *dir;
  nnrt_status st;
  char msg[512];
  pthread_barrier_t *go;
} builder;

static void *build_thread(void *arg) {
  builder *b = arg;
  nnrt_cl_options opt = {.cache_dir = b->dir};
  nnrt_cl *cl = NULL;
  nnrt_error err = {0};
  b->st = nnrt_cl_create(&opt, &cl, &err);
  pthread_barrier_wait(b->go);
  cl_program p = NULL;
  if (b->st == NNRT_OK)
    b->st = nnrt_cl_program_build(cl, ADD_SRC, "-D SCALE=13", "race", &p, &err);
  snprintf(b->msg, sizeof b->msg, "%s", err.msg);
  if (p) clReleaseProgram(p);
  nnrt_cl_destroy(cl);
  return NULL;
}

static void test_concurrent_builders(void **state) {
  NEED_CL();
  char dir[512];
  sub_dir("race", dir, sizeof dir);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, N_THREADS);
  pthread_t t[N_THREADS];
  builder b[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    b[i] = (builder){.dir = dir, .go = &go};
    assert_int_equal(pthread_create(&t[i], NULL, build_thread, &b[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&go);
  for (int i = 0; i < N_THREADS; i++) {
    if (b[i].st != NNRT_OK) fprintf(stderr, "builder %d: %s\n", i, b[i].msg);
    assert_int_equal(b[i].st, NNRT_OK);
  }
  /* One entry, no temporary left, and it is whole: a hit. */
  assert_int_equal(count_files(dir, ""), 1);
  assert_int_equal(count_files(dir, ".tmp-"), 0);
  nnrt_cl *cl = make_cl(dir, false);
  cl_program p = build_ok(cl, "-D SCALE=13");
  assert_int_equal(nnrt_cl_get_cache_stats(cl).hits, 1);
  run_axpb(cl, p, 13);
  clReleaseProgram(p);
  nnrt_cl_destroy(cl);
}

/* ------------------------------------------------------ no platform at all */

/* Run in a child whose ICD loader finds no vendor: every entry point must
 * say so, not crash. The child exits 0 when all held. */
static int no_platform_child(void) {
  nnrt_error err = {0};
  nnrt_cl *cl = NULL;
  nnrt_cl_device_info d;
  int n = 7;
  int bad = 0;
  bad |= nnrt_cl_devices(&d, 1, &n, &err) != NNRT_E_DEVICE || n != 0;
  bad |= strstr(err.msg, "(no OpenCL platform or device)") == NULL;
  bad |= nnrt_cl_create(NULL, &cl, &err) != NNRT_E_DEVICE || cl != NULL;
  bad |= strstr(err.msg, "(no OpenCL platform or device)") == NULL;
  bad |= nnrt_cl_device_choose("0:0", &d, &err) != NNRT_E_DEVICE;
  if (bad) fprintf(stderr, "no-platform child: %s\n", err.msg);
  return bad ? 1 : 0;
}

static void test_no_platform(void **state) {
  char empty[512];
  sub_dir("no-vendors", empty, sizeof empty);
  assert_int_equal(mkdir(empty, 0755), 0);
  char env_v[600];
  snprintf(env_v, sizeof env_v, "OCL_ICD_VENDORS=%s", empty);
  char *envp[] = {env_v, "OPENCL_VENDOR_PATH=/nonexistent", NULL};
  char *argv[] = {g_self, "--no-platform-child", NULL};
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, g_self, NULL, NULL, argv, envp), 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ------------------------------------------------------------------ main */

static int setup(void **state) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/nnc_test_rt_opencl-XXXXXX");
  if (!mkdtemp(g_tmp)) return -1;
  nnrt_cl_device_info d;
  int n = 0;
  g_have_cl = nnrt_cl_devices(&d, 1, &n, NULL) == NNRT_OK;
  if (!g_have_cl) fprintf(stderr, "no OpenCL platform: device tests skip\n");
  return 0;
}

static int teardown(void **state) {
  rm_tree(g_tmp);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--no-platform-child")) return no_platform_child();
  if (argc > 2 && !strcmp(argv[1], "--full-disk-child")) return full_disk_child(argv[2]);
  ssize_t w = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  g_self[w > 0 ? w : 0] = '\0';
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_mapping),
      cmocka_unit_test(test_fnv_and_key),
      cmocka_unit_test(test_cache_dir),
      cmocka_unit_test(test_device_match),
      cmocka_unit_test(test_no_platform),
      cmocka_unit_test(test_devices_listed),
      cmocka_unit_test(test_bad_env_device),
      cmocka_unit_test(test_add_kernel_and_timing),
      cmocka_unit_test(test_build_error_log),
      cmocka_unit_test(test_cache_hit),
      cmocka_unit_test(test_corrupt_entry_flipped),
      cmocka_unit_test(test_corrupt_entry_truncated),
      cmocka_unit_test(test_corrupt_entry_refused_by_driver),
      cmocka_unit_test(test_unwritable_cache_folder),
      cmocka_unit_test(test_full_disk),
      cmocka_unit_test(test_concurrent_builders),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
