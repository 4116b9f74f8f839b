/* tests/unit/test_ocl_kernels.c — the OpenCL kernels of templates/opencl,
 * built on the first device of the first platform and run at odd sizes
 * against float64 references computed here. Outputs (and the padding
 * between their rows) start as NaN, so an element left unwritten or written
 * out of bounds shows. Skips when there is no OpenCL platform.
 *
 * Error measure: |got - ref| / max(|ref|, floor), floor 1 for O(1)
 * outputs (GEMM, norms, attention) and 1e-30 (plain relative error) for
 * softmax and the gather. f32 must stay within 1e-5; f16 and bf16 storage
 * (every kernel again, with the host's inputs rounded as the device stores
 * them, so the reference sees what the device sees) within 1e-2. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <CL/cl.h>

#ifndef NNC_SOURCE_ROOT
#define NNC_SOURCE_ROOT "."
#endif

#define TOL_F32 1e-5
#define TOL_NARROW 1e-2

typedef struct ocl {
  int ok;
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q;
  int fp16;
} ocl;

static ocl g;

/* PoCL and its LLVM keep compiler state until exit, which LeakSanitizer
 * reports; leaks with a frame of the test itself still show. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libpocl.so\nleak:libLLVM\nleak:libclang\nleak:libOpenCL.so\n";
}

/* ------------------------------------------------------------ host helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static float *frand(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  assert_non_null(p);
  for (size_t i = 0; i < n; ++i) p[i] = urand();
  return p;
}
static float *fnan(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  assert_non_null(p);
  for (size_t i = 0; i < n; ++i) p[i] = NAN;
  return p;
}

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  fclose(f);
  if (s) {
    s[n] = 0;
    *len = (size_t)n;
  }
  return s;
}

/* common.cl followed by `file`, built with `opts`; fails the test with the
 * build log when the compiler rejects it. */
static cl_program build(const char *file, const char *opts) {
  char path[1024];
  size_t n0 = 0, n1 = 0;
  snprintf(path, sizeof path, "%s/templates/opencl/common.cl", NNC_SOURCE_ROOT);
  char *common = read_text(path, &n0);
  snprintf(path, sizeof path, "%s/templates/opencl/%s", NNC_SOURCE_ROOT, file);
  char *body = read_text(path, &n1);
  if (!common || !body) fail_msg("cannot read %s or common.cl", path);
  const char *src[2] = {common, body};
  const size_t len[2] = {n0, n1};
  cl_int e;
  cl_program p = clCreateProgramWithSource(g.ctx, 2, src, len, &e);
  assert_int_equal(e, CL_SUCCESS);
  char o[1024];
  snprintf(o, sizeof o, "-cl-std=CL1.2 %s", opts ? opts : "");
  e = clBuildProgram(p, 1, &g.dev, o, NULL, NULL);
  free(common);
  free(body);
  if (e != CL_SUCCESS) {
    size_t ln = 0;
    clGetProgramBuildInfo(p, g.dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
    char *log = malloc(ln + 1);
    clGetProgramBuildInfo(p, g.dev, CL_PROGRAM_BUILD_LOG, ln, log, NULL);
    log[ln] = 0;
    print_error("build of %s with '%s' failed:\n%s\n", file, o, log);
    free(log);
    clReleaseProgram(p);
    fail();
  }
  return p;
}

static cl_kernel kernel(cl_program p, const char *name) {
  cl_int e;
  cl_kernel k = clCreateKernel(p, name, &e);
  assert_int_equal(e, CL_SUCCESS);
  return k;
}

/* The storage format of the runs: its build option (common.cl) and how the
 * host converts to and from it. */
typedef enum fmt { F32, F16, BF16 } fmt;
static fmt storage = F32;
static const char *const fmt_name[] = {"f32", "f16", "bf16"};
static const char *fmt_option(void) { return storage == F16 ? "-DNNC_F16" : storage == BF16 ? "-DNNC_BF16" : ""; }

static uint16_t f2h(float f) { /* round to nearest even, normals and zero */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t s = (x >> 16) & 0x8000u;
  if (f != f) return (uint16_t)(s | 0x7e00u);
  int ex = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t m = x & 0x7fffffu;
  if (ex <= 0) return (uint16_t)s;
  if (ex >= 31) return (uint16_t)(s | 0x7c00u);
  uint32_t h = s | ((uint32_t)ex << 10) | (m >> 13);
  uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return (uint16_t)h;
}
static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
  if (ex == 0 && m == 0) x = s;
  else if (ex == 31) x = s | 0x7f800000u | (m << 13);
  else if (ex == 0) {
    float f = ldexpf((float)m, -24);
    return s ? -f : f;
  } else x = s | ((ex - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}
/* bfloat16: round to nearest even on the bits, NaN kept */
static uint16_t f2bf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if (f != f) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static float bf2f(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* A device buffer holding host floats in format f (narrow: the host copy is
 * rounded alike, so that the reference sees the same inputs). */
static cl_mem upload_as(float *h, size_t n, fmt f) {
  cl_int e;
  if (n == 0) n = 1;
  void *src = h;
  uint16_t *tmp = NULL;
  if (f != F32) {
    tmp = malloc(n * 2);
    for (size_t i = 0; i < n; ++i) {
      tmp[i] = f == F16 ? f2h(h[i]) : f2bf(h[i]);
      h[i] = f == F16 ? h2f(tmp[i]) : bf2f(tmp[i]);
    }
    src = tmp;
  }
  cl_mem m = clCreateBuffer(g.ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * (f == F32 ? 4 : 2), src, &e);
  free(tmp);
  assert_int_equal(e, CL_SUCCESS);
  return m;
}
static cl_mem upload(float *h, size_t n) { return upload_as(h, n, storage); }
static cl_mem upload_bytes(const void *h, size_t bytes) {
  cl_int e;
  cl_mem m = clCreateBuffer(g.ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)h, &e);
  assert_int_equal(e, CL_SUCCESS);
  return m;
}
static void download_as(cl_mem m, float *h, size_t n, fmt f) {
  if (f != F32) {
    uint16_t *tmp = malloc(n * 2 + 2);
    assert_int_equal(clEnqueueReadBuffer(g.q, m, CL_TRUE, 0, n * 2, tmp, 0, NULL, NULL), CL_SUCCESS);
    for (size_t i = 0; i < n; ++i) h[i] = f == F16 ? h2f(tmp[i]) : bf2f(tmp[i]);
    free(tmp);
  } else {
    assert_int_equal(clEnqueueReadBuffer(g.q, m, CL_TRUE, 0, n * 4, h, 0, NULL, NULL), CL_SUCCESS);
  }
}
static void download(cl_mem m, float *h, size_t n) { download_as(m, h, n, storage); }

static void arg_i(cl_kernel k, int i, int v) { assert_int_equal(clSetKernelArg(k, (cl_uint)i, sizeof(cl_int), &v), CL_SUCCESS); }
static void arg_l(cl_kernel k, int i, ptrdiff_t v) {
  cl_long x = v;
  assert_int_equal(clSetKernelArg(k, (cl_uint)i, sizeof x, &x), CL_SUCCESS);
}
static void arg_f(cl_kernel k, int i, float v) { assert_int_equal(clSetKernelArg(k, (cl_uint)i, sizeof(cl_float), &v), CL_SUCCESS); }
/* a NULL buffer reaches the kernel as a NULL pointer (OpenCL 1.2, 5.7.2) */
static void arg_m(cl_kernel k, int i, cl_mem m) {
  assert_int_equal(clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), m ? &m : NULL), CL_SUCCESS);
}

static void launch(cl_kernel k, int dims, const size_t *gsz, const size_t *lsz) {
  cl_int e = clEnqueueNDRangeKernel(g.q, k, (cl_uint)dims, NULL, gsz, lsz, 0, NULL, NULL);
  assert_int_equal(e, CL_SUCCESS);
  assert_int_equal(clFinish(g.q), CL_SUCCESS);
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Largest error of got against ref (both n), under the measure of the
 * header; a NaN anywhere is an infinite error. */
static double max_err(const float *got, const double *ref, size_t n, double floor) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = fabs((double)got[i] - ref[i]);
    double s = fabs(ref[i]) > floor ? fabs(ref[i]) : floor;
    double r = d / s;
    if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
  }
  return worst;
}

static double act64(int act, double x) {
  switch (act) {
  case 1: return x > 0 ? x : 0;
  case 2: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  case 3: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case 4: return x / (1 + exp(-x));
  case 5: return 1 / (1 + exp(-x));
  case 6: return tanh(x);
  default: return x;
  }
}

/* ------------------------------------------------------------------ GEMM */

typedef struct gemm_case {
  int M, N, K, batch;
  int b_trans, act, prologue; /* prologue: 0, 1 layernorm, 2 rmsnorm */
  int bias, residual, beta;
  int stride_b0;              /* B shared by the batch (stride 0) */
  float alpha;
  const char *tiles;          /* extra -D options, or "" */
} gemm_case;

/* The integer after "NAME=" in s, or def. */
static int macro(const char *s, const char *name, int def) {
  char key[64];
  snprintf(key, sizeof key, "%s=", name);
  const char *at = strstr(s, key);
  return at ? atoi(at + strlen(key)) : def;
}

static double run_gemm(const gemm_case *c) {
  const int M = c->M, N = c->N, K = c->K, nb = c->batch;
  const int at = macro(c->tiles, "NNC_A_TRANS", 0);   /* A stored [K,M] */
  const ptrdiff_t lda = (at ? M : K) + 3, ldb = (c->b_trans ? K : N) + 2, ldc = N + 1, ldr = N + 4;
  const ptrdiff_t sa = (ptrdiff_t)(at ? K : M) * lda + 5;
  const ptrdiff_t sb = c->stride_b0 ? 0 : (ptrdiff_t)(c->b_trans ? N : K) * ldb + 1;
  const ptrdiff_t sc = (ptrdiff_t)M * ldc + 2, sr = (ptrdiff_t)M * ldr;
  /* every operand starts a few elements into its buffer (the kernels' *_off) */
  const ptrdiff_t oa = 3, ob = 5, oc = 7, orr = 2;
  const size_t na = (size_t)(oa + sa * nb), nbb = (size_t)(ob + (c->stride_b0 ? (c->b_trans ? N : K) * ldb : sb * nb));
  const size_t nc = (size_t)(oc + sc * nb), nr = (size_t)(orr + sr * nb);
  float *A = frand(na), *B = frand(nbb), *C = fnan(nc), *bias = frand((size_t)N);
  float *R = frand(nr), *gam = frand((size_t)K), *bet = frand((size_t)K);
  /* C is f32 whatever the storage with NNC_C_F32 (a widening cast fused in) */
  const fmt cf = macro(c->tiles, "NNC_C_F32", 0) ? F32 : storage;
  cl_mem dA = upload(A, na), dB = upload(B, nbb), dC = upload_as(C, nc, cf), dbias = upload(bias, (size_t)N);
  cl_mem dR = upload(R, nr), dg = upload(gam, (size_t)K), dbe = upload(bet, (size_t)K);
  cl_mem dstats = NULL;

  char opts[512];
  snprintf(opts, sizeof opts, "%s -DNNC_B_TRANS=%d -DNNC_ACT=%d -DNNC_PROLOGUE=%d %s",
           fmt_option(), c->b_trans, c->act, c->prologue, c->tiles);
  cl_program p = build("gemm.cl", opts);
  const float eps = 1e-5f;
  if (c->prologue) {
    cl_int e;
    dstats = clCreateBuffer(g.ctx, CL_MEM_READ_WRITE, (size_t)(2 * M * nb) * sizeof(float) + 4, NULL, &e);
    assert_int_equal(e, CL_SUCCESS);
    cl_kernel ks = kernel(p, "nnc_gemm_row_stats");
    arg_i(ks, 0, M); arg_i(ks, 1, K); arg_m(ks, 2, dA); arg_l(ks, 3, oa); arg_l(ks, 4, lda); arg_l(ks, 5, sa);
    arg_f(ks, 6, eps); arg_m(ks, 7, dstats);
    size_t gs[2] = {(size_t)M * 256, (size_t)nb}, ls[2] = {256, 1};
    launch(ks, 2, gs, ls);
    clReleaseKernel(ks);
  }
  cl_kernel k = kernel(p, "nnc_gemm");
  size_t wg[3];
  assert_int_equal(clGetKernelWorkGroupInfo(k, g.dev, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof wg, wg, NULL), CL_SUCCESS);
  /* the tile is the compiled local size times the work per item; the GPU
   * way's dimension 0 walks N, the CPU way's M */
  const int cpu = macro(c->tiles, "NNC_GEMM_CPU", 0);
  const int vw = macro(c->tiles, "NNC_VW", 8);
  const int wm = macro(c->tiles, cpu ? "NNC_MR" : "NNC_WM", cpu ? 6 : 4);
  const int wn = macro(c->tiles, cpu ? "NNC_NR" : "NNC_WN", cpu ? 2 * vw : 4);
  int a = 0;
  arg_i(k, a++, M); arg_i(k, a++, N); arg_i(k, a++, K);
  arg_m(k, a++, dA); arg_l(k, a++, oa); arg_l(k, a++, lda); arg_l(k, a++, sa);
  arg_m(k, a++, dB); arg_l(k, a++, ob); arg_l(k, a++, ldb); arg_l(k, a++, sb);
  arg_m(k, a++, dC); arg_l(k, a++, oc); arg_l(k, a++, ldc); arg_l(k, a++, sc);
  arg_f(k, a++, c->alpha); arg_m(k, a++, c->bias ? dbias : NULL);
  arg_m(k, a++, c->residual ? dR : NULL); arg_l(k, a++, orr); arg_l(k, a++, ldr); arg_l(k, a++, sr);
  arg_m(k, a++, dstats); arg_m(k, a++, c->prologue ? dg : NULL);
  arg_m(k, a++, c->prologue && c->beta ? dbe : NULL);
  size_t gs[3];
  if (cpu) {
    const size_t TM = wg[0] * (size_t)wm, TN = wg[1] * (size_t)wn;
    gs[0] = round_up((size_t)M, TM) / TM * wg[0];
    gs[1] = round_up((size_t)N, TN) / TN * wg[1];
  } else {
    const size_t TM = wg[1] * (size_t)wm, TN = wg[0] * (size_t)wn;
    gs[0] = round_up((size_t)N, TN) / TN * wg[0];
    gs[1] = round_up((size_t)M, TM) / TM * wg[1];
  }
  gs[2] = (size_t)nb;
  launch(k, 3, gs, wg);
  download_as(dC, C, nc, cf);

  /* reference, and the padding must still be NaN */
  double worst = 0;
  double *ref = malloc(sizeof(double) * (size_t)N + 8);
  double *row = malloc(sizeof(double) * (size_t)K + 8);
  float *arow = malloc(sizeof(float) * (size_t)K + 8);
  for (int b = 0; b < nb; ++b)
    for (int m = 0; m < M; ++m) {
      for (int kk = 0; kk < K; ++kk) arow[kk] = at ? A[oa + b * sa + kk * lda + m] : A[oa + b * sa + m * lda + kk];
      const float *ar = arow;
      double mean = 0, var = 0;
      if (c->prologue == 1) {
        for (int kk = 0; kk < K; ++kk) mean += ar[kk];
        mean /= K;
      }
      for (int kk = 0; kk < K; ++kk) var += (ar[kk] - mean) * (ar[kk] - mean);
      const double rstd = 1 / sqrt(var / K + (double)eps);
      for (int kk = 0; kk < K; ++kk) {
        row[kk] = ar[kk];
        if (c->prologue) row[kk] = (ar[kk] - mean) * rstd * gam[kk] + (c->prologue == 1 && c->beta ? bet[kk] : 0);
      }
      const float *bb = B + ob + (c->stride_b0 ? 0 : b * sb);
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int kk = 0; kk < K; ++kk)
          acc += row[kk] * (c->b_trans ? bb[n * ldb + kk] : bb[kk * ldb + n]);
        double v = (double)c->alpha * acc + (c->bias ? bias[n] : 0);
        v = act64(c->act, v);
        if (c->residual) v += R[orr + b * sr + m * ldr + n];
        ref[n] = v;
      }
      const float *cr = C + oc + b * sc + m * ldc;
      double e = max_err(cr, ref, (size_t)N, 1.0);
      if (e > worst) worst = e;
      for (ptrdiff_t x = N; x < ldc && (oc + b * sc + m * ldc + x) < (ptrdiff_t)nc; ++x)
        if (!isnan(cr[x])) fail_msg("gemm wrote padding at batch %d row %d col %td", b, m, x);
    }
  for (ptrdiff_t x = 0; x < oc; ++x)
    if (!isnan(C[x])) fail_msg("gemm wrote before its c_off, at %td", x);
  free(ref);
  free(row);
  free(arow);
  clReleaseKernel(k);
  clReleaseProgram(p);
  cl_mem ms[] = {dA, dB, dC, dbias, dR, dg, dbe, dstats};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; ++i)
    if (ms[i]) clReleaseMemObject(ms[i]);
  free(A); free(B); free(C); free(bias); free(R); free(gam); free(bet);
  return worst;
}

static void test_gemm(void **state) {
  (void)state;
  if (!g.ok) skip();
  const gemm_case cases[] = {
    {17, 129, 33, 1, 0, 0, 0, 0, 0, 0, 0, 1.0f, ""},
    {17, 129, 33, 3, 1, 2, 0, 1, 1, 0, 1, 0.5f, ""},
    {17, 129, 33, 2, 1, 1, 1, 1, 0, 1, 0, 1.0f, ""},
    {17, 129, 33, 2, 0, 4, 2, 0, 1, 0, 0, 1.0f, ""},
    {17, 129, 33, 1, 0, 3, 0, 1, 0, 0, 0, 1.0f, ""},
    {17, 129, 33, 1, 1, 5, 0, 1, 0, 0, 0, 2.0f, ""},
    {17, 129, 33, 1, 0, 6, 1, 1, 1, 0, 0, 1.0f, ""},
    {17, 129, 33, 2, 1, 0, 0, 1, 1, 0, 0, 1.0f, "-DNNC_TM=16 -DNNC_TN=8 -DNNC_TK=5 -DNNC_WM=2 -DNNC_WN=1"},
    {17, 129, 33, 1, 0, 2, 1, 1, 1, 1, 0, 1.0f, "-DNNC_TM=8 -DNNC_TN=64 -DNNC_TK=16 -DNNC_WM=1 -DNNC_WN=8"},
    {1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1.0f, ""},
    {17, 129, 0, 2, 0, 1, 0, 1, 1, 0, 0, 1.0f, ""},
    /* a long K: blocks of 256 steps summed apart */
    {5, 7, 520, 1, 0, 0, 0, 1, 0, 0, 0, 1.0f, "-DNNC_TK=64"},
    /* A stored [K,M] (a weight gradient's x^T) */
    {17, 129, 33, 2, 0, 2, 0, 1, 1, 0, 0, 1.0f, "-DNNC_A_TRANS=1"},
    {31, 9, 300, 1, 1, 0, 0, 0, 0, 0, 0, -0.5f, "-DNNC_A_TRANS=1 -DNNC_TK=64"},
  };
  double worst = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    double e = run_gemm(&cases[i]);
    if (!(e <= TOL_F32)) fail_msg("gemm case %zu: max error %g", i, e);
    if (e > worst) worst = e;
  }
  print_message("gemm f32: max error %.3g over %zu cases\n", worst, sizeof cases / sizeof cases[0]);
}

/* The CPU way: packed panels, vectors in registers. Groups and item blocks
 * that do not divide M or N, K that is not a multiple of the vector or of
 * KC, every vector width, work-group shapes that are not powers of two. */
static void test_gemm_cpu(void **state) {
  (void)state;
  if (!g.ok) skip();
  const gemm_case cases[] = {
    {17, 129, 33, 1, 0, 0, 0, 0, 0, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1"},
    {17, 129, 33, 3, 1, 2, 0, 1, 1, 0, 1, 0.5f, "-DNNC_GEMM_CPU=1"},
    {17, 129, 33, 2, 1, 1, 1, 1, 0, 1, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_LM=2 -DNNC_LN=4"},
    {17, 129, 33, 2, 0, 4, 2, 0, 1, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_LM=3 -DNNC_LN=5"},
    {37, 45, 300, 2, 0, 3, 1, 1, 1, 1, 1, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_KC=64 -DNNC_LM=2 -DNNC_LN=2"},
    {37, 45, 300, 1, 1, 5, 2, 1, 1, 0, 0, 2.0f, "-DNNC_GEMM_CPU=1 -DNNC_KC=64 -DNNC_LM=1 -DNNC_LN=3"},
    {23, 51, 67, 2, 1, 6, 1, 1, 1, 1, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_VW=4 -DNNC_MR=3 -DNNC_NR=4 -DNNC_KC=8"},
    {23, 51, 67, 1, 0, 0, 0, 1, 0, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_VW=16 -DNNC_LM=2 -DNNC_LN=2 -DNNC_KC=32"},
    {1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1"},
    {17, 129, 0, 2, 0, 1, 0, 1, 1, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1"},
    {5, 7, 520, 1, 1, 0, 0, 1, 0, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_LM=1 -DNNC_LN=1"},
    {37, 45, 300, 2, 0, 3, 0, 1, 1, 0, 1, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_A_TRANS=1 -DNNC_KC=64 -DNNC_LM=2 -DNNC_LN=2"},
    {23, 51, 67, 1, 1, 0, 0, 0, 0, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_A_TRANS=1 -DNNC_VW=4 -DNNC_MR=3 -DNNC_NR=4 -DNNC_KC=8"},
  };
  double worst = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    double e = run_gemm(&cases[i]);
    if (!(e <= TOL_F32)) fail_msg("gemm (CPU way) case %zu: max error %g", i, e);
    if (e > worst) worst = e;
  }
  print_message("gemm f32, CPU way: max error %.3g over %zu cases\n", worst, sizeof cases / sizeof cases[0]);
}

/* ------------------------------------------------------------ row kernels */

/* which: 0 softmax, 1 layernorm, 2 rmsnorm; affine: pass gamma (and beta);
 * wg work-items a row (NNC_WG: the sizes create picks, 1 to 256) */
static double run_rows(int which, int rows, int cols, int affine, int in_place, int wg) {
  const ptrdiff_t ldx = cols + 3, ldy = in_place ? ldx : cols + 1;
  const size_t nx = (size_t)(rows * ldx), ny = (size_t)(rows * ldy);
  float *x = frand(nx), *y = fnan(ny), *gam = frand((size_t)cols), *bet = frand((size_t)cols);
  for (size_t i = 0; i < nx; ++i) x[i] *= 4;
  if (which == 0 && rows >= 3) {
    for (int c = 0; c < cols; ++c) x[1 * ldx + c] = -INFINITY;  /* all masked */
    for (int c = 0; c < cols; c += 3) x[2 * ldx + c] = -INFINITY; /* partly */
  }
  cl_mem dx = upload(x, nx), dy = in_place ? dx : upload(y, ny);
  cl_mem dg = upload(gam, (size_t)cols), db = upload(bet, (size_t)cols);
  char opts[64];
  snprintf(opts, sizeof opts, "-DNNC_WG=%d %s", wg, fmt_option());
  cl_program p = build("rows.cl", opts);
  static const char *names[] = {"nnc_softmax", "nnc_layernorm", "nnc_rmsnorm"};
  cl_kernel k = kernel(p, names[which]);
  const float eps = 1e-5f;
  int a = 0;
  arg_i(k, a++, cols); arg_m(k, a++, dx); arg_l(k, a++, ldx);
  if (which >= 1) arg_m(k, a++, affine ? dg : NULL);
  if (which == 1) arg_m(k, a++, affine ? db : NULL);
  if (which >= 1) arg_f(k, a++, eps);
  arg_m(k, a++, dy); arg_l(k, a++, ldy);
  size_t gs = (size_t)rows * (size_t)wg, ls = (size_t)wg;
  launch(k, 1, &gs, &ls);
  download(dy, y, ny);

  double worst = 0;
  double *ref = malloc(sizeof(double) * (size_t)cols);
  for (int r = 0; r < rows; ++r) {
    const float *xr = x + r * ldx;
    if (which == 0) {
      double m = -INFINITY, s = 0;
      for (int c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
      for (int c = 0; c < cols; ++c) s += m == -INFINITY ? 0 : exp(xr[c] - m);
      for (int c = 0; c < cols; ++c) ref[c] = m == -INFINITY ? 0 : exp(xr[c] - m) / s;
    } else {
      double mean = 0, var = 0;
      if (which == 1) {
        for (int c = 0; c < cols; ++c) mean += xr[c];
        mean /= cols;
      }
      for (int c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
      const double rstd = 1 / sqrt(var / cols + (double)eps);
      for (int c = 0; c < cols; ++c) {
        ref[c] = (xr[c] - mean) * rstd;
        if (affine) ref[c] = ref[c] * gam[c] + (which == 1 ? bet[c] : 0);
      }
    }
    const float *yr = y + r * ldy;
    /* softmax: relative error, but an f16 value below its smallest normal
     * (2^-14) keeps only absolute precision */
    double e = max_err(yr, ref, (size_t)cols, which != 0 ? 1.0 : storage == F16 ? 0x1p-14 : 1e-30);
    if (e > worst) worst = e;
    if (!in_place)
      for (ptrdiff_t c = cols; c < ldy; ++c)
        if (!isnan(yr[c])) fail_msg("%s wrote padding at row %d col %td", names[which], r, c);
  }
  free(ref);
  clReleaseKernel(k);
  clReleaseProgram(p);
  clReleaseMemObject(dx);
  if (!in_place) clReleaseMemObject(dy);
  clReleaseMemObject(dg);
  clReleaseMemObject(db);
  free(x); free(y); free(gam); free(bet);
  return worst;
}

static void test_rows(void **state) {
  (void)state;
  if (!g.ok) skip();
  static const char *names[] = {"softmax", "layernorm", "rmsnorm"};
  /* groups of 256 down to one item: every size the tile lists hold */
  const struct { int which, rows, cols, affine, in_place, wg; } cases[] = {
    {0, 3, 1023, 0, 0, 256}, {0, 3, 1023, 0, 1, 64}, {0, 1, 1, 0, 0, 256}, {0, 5, 255, 0, 0, 16},
    {0, 3, 77, 0, 0, 1}, {0, 3, 3, 0, 0, 4}, {0, 4, 129, 0, 1, 32},
    {1, 3, 1023, 1, 0, 256}, {1, 3, 1023, 0, 1, 128}, {1, 2, 1, 1, 0, 2}, {1, 4, 300, 1, 1, 4},
    {1, 3, 769, 1, 0, 1}, {1, 2, 5, 1, 0, 64},
    {2, 3, 1023, 1, 0, 256}, {2, 3, 1023, 0, 1, 8}, {2, 2, 1, 0, 0, 1}, {2, 4, 257, 1, 0, 32},
  };
  double worst[3] = {0, 0, 0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    double e = run_rows(cases[i].which, cases[i].rows, cases[i].cols, cases[i].affine, cases[i].in_place, cases[i].wg);
    if (!(e <= TOL_F32)) fail_msg("%s case %zu (groups of %d): max error %g", names[cases[i].which], i, cases[i].wg, e);
    if (e > worst[cases[i].which]) worst[cases[i].which] = e;
  }
  print_message("softmax f32: %.3g, layernorm f32: %.3g, rmsnorm f32: %.3g\n", worst[0], worst[1], worst[2]);
}

/* --------------------------------------------------------------- attention */

typedef struct attn_case {
  int B, H, T, S, D, Dv, causal, masked;
  const char *opts;
  int G;   /* grouped-query: query heads a k/v head serves (0: 1) */
} attn_case;

static double run_attention(const attn_case *c) {
  const int B = c->B, H = c->H, T = c->T, S = c->S, D = c->D, Dv = c->Dv, G = c->G > 1 ? c->G : 1;
  /* q and out as [B, T, H, D] (heads interleaved), k and v as [B, H, S, D] (their first H / G heads read) */
  const ptrdiff_t q_st = (ptrdiff_t)H * D + 1, q_sh = D, q_sb = T * q_st;
  const ptrdiff_t k_st = D + 2, k_sh = S * k_st, k_sb = H * k_sh;
  const ptrdiff_t v_st = Dv, v_sh = S * v_st + 3, v_sb = H * v_sh;
  const ptrdiff_t o_st = (ptrdiff_t)H * Dv + 2, o_sh = Dv, o_sb = T * o_st;
  const ptrdiff_t mask_sb = S + 1;
  const size_t nq = (size_t)(B * q_sb), nk = (size_t)(B * k_sb), nv = (size_t)(B * v_sb);
  const size_t no = (size_t)(B * o_sb), nm = (size_t)(B * mask_sb);
  float *q = frand(nq), *k = frand(nk), *v = frand(nv), *o = fnan(no), *mask = frand(nm);
  for (size_t i = 0; i < nq; ++i) q[i] *= 3;
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < S; ++j) {
      float *mj = mask + b * mask_sb + j;
      *mj = b == 1 ? 0.0f : (*mj > -0.4f ? 1.0f : 0.0f); /* batch 1 fully masked */
      if (b == 0 && j == S - 1) *mj = 0;
    }
  cl_mem dq = upload(q, nq), dk = upload(k, nk), dv = upload(v, nv), dout = upload(o, no), dm;
  if (strstr(c->opts, "NNC_MASK_I32=1")) {   /* an i32 mask input */
    int32_t *mi = malloc(nm * sizeof *mi);
    assert_non_null(mi);
    for (size_t i = 0; i < nm; ++i) mi[i] = (int32_t)mask[i];
    dm = upload_bytes(mi, nm * sizeof *mi);
    free(mi);
  } else {
    dm = upload(mask, nm);
  }
  char opts[256];
  snprintf(opts, sizeof opts, "%s %s", fmt_option(), c->opts);
  cl_program p = build("attention.cl", opts);
  cl_kernel kk = kernel(p, "nnc_attention");
  size_t wg[3];
  assert_int_equal(clGetKernelWorkGroupInfo(kk, g.dev, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof wg, wg, NULL), CL_SUCCESS);
  const float scale = 1.0f / sqrtf((float)D);
  int a = 0;
  arg_i(kk, a++, T); arg_i(kk, a++, S); arg_i(kk, a++, D); arg_i(kk, a++, Dv);
  arg_m(kk, a++, dq); arg_l(kk, a++, q_sb); arg_l(kk, a++, q_sh); arg_l(kk, a++, q_st);
  arg_m(kk, a++, dk); arg_l(kk, a++, k_sb); arg_l(kk, a++, k_sh); arg_l(kk, a++, k_st);
  arg_m(kk, a++, dv); arg_l(kk, a++, v_sb); arg_l(kk, a++, v_sh); arg_l(kk, a++, v_st);
  arg_m(kk, a++, dout); arg_l(kk, a++, o_sb); arg_l(kk, a++, o_sh); arg_l(kk, a++, o_st);
  arg_f(kk, a++, scale); arg_i(kk, a++, c->causal);
  arg_m(kk, a++, c->masked ? dm : NULL); arg_l(kk, a++, mask_sb); arg_i(kk, a++, G);
  size_t gs[3] = {round_up((size_t)T, wg[0]), (size_t)H, (size_t)B};
  launch(kk, 3, gs, wg);
  download(dout, o, no);

  double worst = 0;
  double *s = malloc(sizeof(double) * (size_t)S), *ref = malloc(sizeof(double) * (size_t)Dv);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        double m = -INFINITY, l = 0;
        for (int j = 0; j < S; ++j) {
          s[j] = -INFINITY;
          if (c->causal && j > i + (S - T)) continue;
          if (c->masked && mask[b * mask_sb + j] == 0) continue;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += (double)q[b * q_sb + h * q_sh + i * q_st + d] * k[b * k_sb + h / G * k_sh + j * k_st + d];
          s[j] = dot * scale;
          if (s[j] > m) m = s[j];
        }
        for (int d = 0; d < Dv; ++d) ref[d] = 0;
        if (m != -INFINITY) {
          for (int j = 0; j < S; ++j) {
            if (s[j] == -INFINITY) continue;
            double p = exp(s[j] - m);
            l += p;
            for (int d = 0; d < Dv; ++d) ref[d] += p * v[b * v_sb + h / G * v_sh + j * v_st + d];
          }
          for (int d = 0; d < Dv; ++d) ref[d] /= l;
        }
        const float *orow = o + b * o_sb + h * o_sh + i * o_st;
        double e = max_err(orow, ref, (size_t)Dv, 1.0);
        if (e > worst) worst = e;
        if (c->masked && b == 1)
          for (int d = 0; d < Dv; ++d)
            if (orow[d] != 0.0f) fail_msg("fully masked row b=1 h=%d i=%d gives %g", h, i, orow[d]);
      }
  /* the gaps between rows of out stay NaN */
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < T; ++i)
      for (ptrdiff_t x = (ptrdiff_t)H * Dv; x < o_st; ++x)
        if (!isnan(o[b * o_sb + i * o_st + x])) fail_msg("attention wrote padding at b=%d i=%d", b, i);
  free(s); free(ref);
  clReleaseKernel(kk);
  clReleaseProgram(p);
  cl_mem ms[] = {dq, dk, dv, dout, dm};
  for (size_t i = 0; i < 5; ++i) clReleaseMemObject(ms[i]);
  free(q); free(k); free(v); free(o); free(mask);
  return worst;
}

static void test_attention(void **state) {
  (void)state;
  if (!g.ok) skip();
  const attn_case cases[] = {
    {3, 5, 17, 17, 7, 7, 0, 0, "", 0},
    {3, 5, 17, 17, 7, 7, 1, 0, "", 0},
    {3, 5, 17, 17, 7, 7, 0, 1, "", 0},
    {3, 5, 17, 17, 7, 7, 1, 1, "", 0},
    {3, 5, 5, 17, 7, 3, 1, 1, "-DNNC_BQ=4 -DNNC_BK=5 -DNNC_D_MAX=7 -DNNC_DV_MAX=3", 0},
    {2, 3, 17, 5, 9, 11, 1, 0, "-DNNC_BQ=8 -DNNC_BK=3", 0},
    {1, 1, 1, 1, 1, 1, 0, 0, "", 0},
    {2, 3, 33, 70, 13, 5, 1, 1, "-DNNC_BK=32", 0},
    /* rows as float8 vectors */
    {3, 5, 17, 17, 32, 16, 0, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=32 -DNNC_DV_MAX=16", 0},
    {2, 3, 33, 70, 8, 24, 1, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=8 -DNNC_DV_MAX=24 -DNNC_BK=32", 0},
    {2, 2, 5, 9, 64, 64, 1, 0, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=64 -DNNC_DV_MAX=64 -DNNC_BQ=4 -DNNC_BK=7", 0},
    /* the ends of the tile lists: one query a group, 64 queries and 32 keys (a GPU's first), 16 and 64 (a CPU's) */
    {2, 3, 19, 23, 64, 64, 1, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=64 -DNNC_DV_MAX=64 -DNNC_BQ=1 -DNNC_BK=8", 0},
    {2, 3, 67, 67, 64, 64, 1, 0, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=64 -DNNC_DV_MAX=64 -DNNC_BQ=64 -DNNC_BK=32", 0},
    {1, 2, 131, 131, 64, 64, 0, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=64 -DNNC_DV_MAX=64 -DNNC_BQ=16 -DNNC_BK=64", 0},
    {2, 2, 9, 13, 5, 3, 0, 1, "-DNNC_BQ=2 -DNNC_BK=8", 0},
    /* grouped-query: 6 query heads over 2 and over 3 k/v heads, with the padding mask */
    {3, 6, 17, 17, 7, 7, 1, 1, "", 3},
    {2, 6, 1, 23, 64, 64, 0, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=64 -DNNC_DV_MAX=64 -DNNC_BQ=1 -DNNC_BK=8", 2},
  };
  double worst = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    double e = run_attention(&cases[i]);
    if (!(e <= TOL_F32)) fail_msg("attention case %zu: max error %g", i, e);
    if (e > worst) worst = e;
  }
  print_message("attention f32: max error %.3g over %zu cases\n", worst, sizeof cases / sizeof cases[0]);
}

/* -------------------------------------------------------------- elementwise */

static double run_elementwise(void) {
  /* y[M,N] = gelu_erf(x0 + bias[N]) * scale[M] - s, with s a scalar */
  const int M = 17, N = 129;
  const size_t n = (size_t)M * N;
  float *x0 = frand(n), *x1 = frand((size_t)N), *x2 = frand((size_t)M), *x3 = frand(1), *y = fnan(n + 7);
  cl_mem d0 = upload(x0, n), d1 = upload(x1, (size_t)N), d2 = upload(x2, (size_t)M), d3 = upload(x3, 1);
  cl_mem dy = upload(y, n + 7);
  char opts[160];
  snprintf(opts, sizeof opts, "%s -DNNC_EW_NIN=4 -DNNC_EW_EXPR=\"nnc_gelu_erf(x0 + x1) * x2 - x3\"", fmt_option());
  cl_program p = build("elementwise.cl", opts);
  cl_kernel k = kernel(p, "nnc_elementwise");
  int a = 0;
  arg_l(k, a++, (ptrdiff_t)n); arg_m(k, a++, dy);
  arg_m(k, a++, d0); arg_l(k, a++, 1); arg_l(k, a++, (ptrdiff_t)n);
  arg_m(k, a++, d1); arg_l(k, a++, 1); arg_l(k, a++, N);
  arg_m(k, a++, d2); arg_l(k, a++, N); arg_l(k, a++, M);
  arg_m(k, a++, d3); arg_l(k, a++, 1); arg_l(k, a++, 1);
  size_t gs = 333; /* fewer items than elements: they stride */
  launch(k, 1, &gs, NULL);
  download(dy, y, n + 7);
  double *ref = malloc(sizeof(double) * n);
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < N; ++c)
      ref[m * N + c] = act64(2, (double)x0[m * N + c] + x1[c]) * x2[m] - x3[0];
  double e = max_err(y, ref, n, 1.0);
  for (size_t i = n; i < n + 7; ++i) assert_true(isnan(y[i]));
  clReleaseKernel(k);
  clReleaseProgram(p);

  /* the default expression: one input through an activation, in place */
  snprintf(opts, sizeof opts, "%s -DNNC_ACT=4", fmt_option());
  p = build("elementwise.cl", opts);
  k = kernel(p, "nnc_elementwise");
  a = 0;
  arg_l(k, a++, (ptrdiff_t)n); arg_m(k, a++, d0);
  arg_m(k, a++, d0); arg_l(k, a++, 1); arg_l(k, a++, (ptrdiff_t)n);
  for (int i = 0; i < 3; ++i) {
    arg_m(k, a++, NULL); arg_l(k, a++, 1); arg_l(k, a++, 1);
  }
  gs = n;
  launch(k, 1, &gs, NULL);
  download(d0, y, n);
  for (size_t i = 0; i < n; ++i) ref[i] = act64(4, x0[i]);
  double e2 = max_err(y, ref, n, 1.0);
  if (e2 > e) e = e2;
  clReleaseKernel(k);
  clReleaseProgram(p);
  cl_mem ms[] = {d0, d1, d2, d3, dy};
  for (size_t i = 0; i < 5; ++i) clReleaseMemObject(ms[i]);
  free(ref); free(x0); free(x1); free(x2); free(x3); free(y);
  return e;
}

static void test_elementwise(void **state) {
  (void)state;
  if (!g.ok) skip();
  double e = run_elementwise();
  if (!(e <= TOL_F32)) fail_msg("elementwise: max error %g", e);
  print_message("elementwise f32: max error %.3g\n", e);
}

/* ---------------------------------------------------------------- embedding */

/* Exact copies (the host's table rounded as the device stores it) and the
 * first bad position; fails the test otherwise. */
static void run_embedding(void) {
  const int rows = 37, cols = 129, n = 19;
  const ptrdiff_t ldt = cols + 2, ldo = cols + 1;
  float *table = frand((size_t)(rows * ldt)), *out = fnan((size_t)(n * ldo));
  int32_t ids[19];
  for (int i = 0; i < n; ++i) ids[i] = (i * 7 + 3) % rows;
  ids[0] = rows - 1;
  ids[1] = 0;
  cl_mem dt = upload(table, (size_t)(rows * ldt)), dout = upload(out, (size_t)(n * ldo));
  cl_mem dids = upload_bytes(ids, sizeof ids);
  cl_int bad = n;
  cl_mem dbad = upload_bytes(&bad, sizeof bad);
  cl_program p = build("embedding.cl", fmt_option());
  cl_kernel k = kernel(p, "nnc_embedding");
  int a = 0;
  arg_i(k, a++, n); arg_m(k, a++, dids); arg_i(k, a++, rows); arg_i(k, a++, cols);
  arg_m(k, a++, dt); arg_l(k, a++, ldt); arg_m(k, a++, dout); arg_l(k, a++, ldo); arg_m(k, a++, dbad);
  size_t gs[2] = {round_up((size_t)cols, 16), (size_t)n}, ls[2] = {16, 1};
  launch(k, 2, gs, ls);
  download(dout, out, (size_t)(n * ldo));
  assert_int_equal(clEnqueueReadBuffer(g.q, dbad, CL_TRUE, 0, sizeof bad, &bad, 0, NULL, NULL), CL_SUCCESS);
  assert_int_equal(bad, n);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < cols; ++c)
      if (out[i * ldo + c] != table[ids[i] * ldt + c]) fail_msg("embedding row %d col %d", i, c);
    if (i * ldo + cols < n * ldo) assert_true(isnan(out[i * ldo + cols]));
  }

  /* out-of-range ids: the first bad position comes back */
  ids[5] = rows;
  ids[11] = -1;
  cl_mem dids2 = upload_bytes(ids, sizeof ids);
  bad = n;
  assert_int_equal(clEnqueueWriteBuffer(g.q, dbad, CL_TRUE, 0, sizeof bad, &bad, 0, NULL, NULL), CL_SUCCESS);
  arg_m(k, 1, dids2);
  launch(k, 2, gs, ls);
  assert_int_equal(clEnqueueReadBuffer(g.q, dbad, CL_TRUE, 0, sizeof bad, &bad, 0, NULL, NULL), CL_SUCCESS);
  assert_int_equal(bad, 5);
  clReleaseKernel(k);
  clReleaseProgram(p);
  cl_mem ms[] = {dt, dout, dids, dids2, dbad};
  for (size_t i = 0; i < 5; ++i) clReleaseMemObject(ms[i]);
  free(table); free(out);
}

static void test_embedding(void **state) {
  (void)state;
  if (!g.ok) skip();
  run_embedding();
  print_message("embedding f32: exact\n");
}

/* ------------------------------------------------------- f16, bf16 storage */

/* Every kernel family with storage f: both GEMM ways (with a prologue, an
 * epilogue, a residual, and C widened to f32), the three row kernels,
 * attention (scalar and float8 rows, a float and an i32 mask), the
 * elementwise chain and the embedding gather, at the odd sizes of the f32
 * cases. OpenCL 1.2's core vload_half/vstore_half carry f16 without
 * cl_khr_fp16 (PoCL has none), and bf16 is ushort bits. */
static void narrow(fmt f) {
  storage = f;
  const gemm_case gc[] = {
    {17, 129, 33, 2, 1, 2, 1, 1, 1, 1, 0, 1.0f, ""},
    {17, 129, 33, 1, 0, 0, 2, 0, 0, 0, 0, 1.0f, ""},
    {17, 129, 33, 1, 1, 3, 1, 1, 0, 1, 0, 1.0f, "-DNNC_C_F32=1"},
    {5, 7, 520, 1, 0, 0, 0, 1, 0, 0, 0, 1.0f, "-DNNC_TK=64"},
    {17, 129, 33, 2, 1, 2, 1, 1, 1, 1, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_LM=2 -DNNC_LN=3"},
    {17, 129, 33, 1, 0, 0, 2, 0, 0, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_VW=4"},
    {37, 45, 300, 2, 0, 4, 1, 1, 1, 1, 1, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_KC=64 -DNNC_LM=2 -DNNC_LN=2"},
    {23, 51, 67, 1, 1, 1, 0, 1, 0, 0, 0, 1.0f, "-DNNC_GEMM_CPU=1 -DNNC_VW=16 -DNNC_LM=2 -DNNC_LN=2 -DNNC_KC=32 -DNNC_C_F32=1"},
  };
  double eg = 0, er = 0, ea = 0;
  for (size_t i = 0; i < sizeof gc / sizeof gc[0]; ++i) {
    double e = run_gemm(&gc[i]);
    if (!(e <= TOL_NARROW)) fail_msg("gemm %s case %zu: max error %g", fmt_name[f], i, e);
    if (e > eg) eg = e;
  }
  const struct { int which, rows, cols, affine, in_place, wg; } rc[] = {
    {0, 3, 1023, 0, 0, 256}, {0, 4, 129, 0, 1, 32}, {1, 3, 1023, 1, 0, 256}, {1, 4, 300, 1, 1, 4},
    {2, 3, 1023, 1, 0, 64}, {2, 4, 257, 0, 0, 1},
  };
  for (size_t i = 0; i < sizeof rc / sizeof rc[0]; ++i) {
    double e = run_rows(rc[i].which, rc[i].rows, rc[i].cols, rc[i].affine, rc[i].in_place, rc[i].wg);
    if (!(e <= TOL_NARROW)) fail_msg("rows %s case %zu: max error %g", fmt_name[f], i, e);
    if (e > er) er = e;
  }
  const attn_case ac[] = {
    {3, 5, 17, 17, 7, 7, 1, 1, "", 0},
    {2, 3, 33, 70, 13, 5, 1, 1, "-DNNC_BK=32 -DNNC_MASK_I32=1", 0},
    {3, 5, 17, 17, 16, 8, 1, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=16 -DNNC_DV_MAX=8", 0},
    {2, 3, 67, 67, 64, 64, 1, 1, "-DNNC_ATT_VEC=1 -DNNC_D_MAX=64 -DNNC_DV_MAX=64 -DNNC_BQ=16 -DNNC_BK=32 -DNNC_MASK_I32=1", 0},
  };
  for (size_t i = 0; i < sizeof ac / sizeof ac[0]; ++i) {
    double e = run_attention(&ac[i]);
    if (!(e <= TOL_NARROW)) fail_msg("attention %s case %zu: max error %g", fmt_name[f], i, e);
    if (e > ea) ea = e;
  }
  double ee = run_elementwise();
  if (!(ee <= TOL_NARROW)) fail_msg("elementwise %s: max error %g", fmt_name[f], ee);
  run_embedding();
  storage = F32;
  print_message("%s storage: gemm %.3g, rows %.3g, attention %.3g, elementwise %.3g, embedding exact\n", fmt_name[f],
                eg, er, ea, ee);
}

static void test_f16(void **state) {
  (void)state;
  if (!g.ok) skip();
  narrow(F16);
}

static void test_bf16(void **state) {
  (void)state;
  if (!g.ok) skip();
  narrow(BF16);
}

/* An i32 mask in f32 too (the mask's type is its own, whatever the storage). */
static void test_attention_i32_mask(void **state) {
  (void)state;
  if (!g.ok) skip();
  const attn_case c = {3, 5, 17, 17, 7, 7, 1, 1, "-DNNC_MASK_I32=1", 0};
  double e = run_attention(&c);
  if (!(e <= TOL_F32)) fail_msg("attention with an i32 mask: max error %g", e);
}

/* ------------------------------------------------------------------ setup */

static int setup(void **state) {
  (void)state;
  cl_platform_id plat;
  cl_uint np = 0;
  if (clGetPlatformIDs(1, &plat, &np) != CL_SUCCESS || np == 0) return 0;
  cl_uint nd = 0;
  if (clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &g.dev, &nd) != CL_SUCCESS || nd == 0) return 0;
  cl_int e;
  g.ctx = clCreateContext(NULL, 1, &g.dev, NULL, NULL, &e);
  if (e != CL_SUCCESS) return 0;
  g.q = clCreateCommandQueue(g.ctx, g.dev, 0, &e);
  if (e != CL_SUCCESS) {
    clReleaseContext(g.ctx);
    return 0;
  }
  size_t n = 0;
  clGetDeviceInfo(g.dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n);
  char *ext = malloc(n + 1);
  clGetDeviceInfo(g.dev, CL_DEVICE_EXTENSIONS, n, ext, NULL);
  ext[n] = 0;
  g.fp16 = strstr(ext, "cl_khr_fp16") != NULL;
  free(ext);
  char name[256] = "";
  clGetDeviceInfo(g.dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  print_message("OpenCL device: %s (cl_khr_fp16: %s)\n", name, g.fp16 ? "yes" : "no");
  g.ok = 1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (g.ok) {
    clReleaseCommandQueue(g.q);
    clReleaseContext(g.ctx);
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gemm),
    cmocka_unit_test(test_gemm_cpu),
    cmocka_unit_test(test_rows),
    cmocka_unit_test(test_attention),
    cmocka_unit_test(test_elementwise),
    cmocka_unit_test(test_embedding),
    cmocka_unit_test(test_attention_i32_mask),
    cmocka_unit_test(test_f16),
    cmocka_unit_test(test_bf16),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
