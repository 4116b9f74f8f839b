/* tests/unit/test_rt_cuda.c — the CUDA runtime on a machine without a GPU:
 * the error mapping, the allocator's size classes, NNC_CUDA_DEVICE parsing,
 * which GEMMs are supported, the GEMM plan cache's key and the algo index
 * (--tune=measure's choice among cuBLASLt's heuristic results), and that
 * every entry point that needs a device says so instead of crashing. (tests/gpu/test_rt_cuda_gpu.c runs the rest
 * on a GPU.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "nnrt_cuda.h"
#include "nnrt_cuda_impl.h"

static const char *HINT = "(no usable CUDA device or driver)";

static void test_cuda_status_mapping(void **state) {
  const struct { cudaError_t e; nnrt_status want; bool hint; } cases[] = {
      {cudaErrorMemoryAllocation, NNRT_E_NOMEM, false},
      {cudaErrorInvalidValue, NNRT_E_ARG, false},
      {cudaErrorInvalidDevicePointer, NNRT_E_ARG, false},
      {cudaErrorInvalidResourceHandle, NNRT_E_ARG, false},
      {cudaErrorInvalidDevice, NNRT_E_ARG, false},
      {cudaErrorNotReady, NNRT_E_STATE, false},
      {cudaErrorStreamCaptureUnsupported, NNRT_E_STATE, false},
      {cudaErrorLaunchFailure, NNRT_E_DEVICE, false},
      {cudaErrorIllegalAddress, NNRT_E_DEVICE, false},
      {cudaErrorNoKernelImageForDevice, NNRT_E_DEVICE, false},
      {cudaErrorNoDevice, NNRT_E_DEVICE, true},
      {cudaErrorInsufficientDriver, NNRT_E_DEVICE, true},
      {cudaErrorStubLibrary, NNRT_E_DEVICE, true},
      {cudaErrorUnknown, NNRT_E_DEVICE, false},
      {(cudaError_t)12345, NNRT_E_DEVICE, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    nnrt_error err = {0};
    assert_int_equal(nnrt_cuda_status_of(cases[i].e), cases[i].want);
    assert_int_equal(nnrt_cuda_check(cases[i].e, "doing x", &err), cases[i].want);
    assert_int_equal(err.code, cases[i].want);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "doing x: %s: %s", cudaGetErrorName(cases[i].e),
             cudaGetErrorString(cases[i].e));
    assert_int_equal(strncmp(err.msg, prefix, strlen(prefix)), 0);
    assert_int_equal(strstr(err.msg, HINT) != NULL, cases[i].hint);
  }
  nnrt_error err = {0};
  assert_int_equal(nnrt_cuda_check(cudaErrorMemoryAllocation, "alloc x", &err), NNRT_E_NOMEM);
  assert_string_equal(err.msg, "alloc x: cudaErrorMemoryAllocation: out of memory");
  assert_int_equal(nnrt_cuda_check(cudaErrorMemoryAllocation, NULL, &err), NNRT_E_NOMEM);
  assert_string_equal(err.msg, "CUDA: cudaErrorMemoryAllocation: out of memory");
  /* Success leaves err alone; a NULL err is allowed. */
  strcpy(err.msg, "untouched");
  err.code = NNRT_E_IO;
  assert_int_equal(nnrt_cuda_check(cudaSuccess, "ok", &err), NNRT_OK);
  assert_string_equal(err.msg, "untouched");
  assert_int_equal(err.code, NNRT_E_IO);
  assert_int_equal(nnrt_cuda_status_of(cudaSuccess), NNRT_OK);
  assert_int_equal(nnrt_cuda_check(cudaErrorInvalidValue, "x", NULL), NNRT_E_ARG);
}

static void test_blas_status_mapping(void **state) {
  const struct { cublasStatus_t s; nnrt_status want; } cases[] = {
      {CUBLAS_STATUS_SUCCESS, NNRT_OK},
      {CUBLAS_STATUS_NOT_INITIALIZED, NNRT_E_STATE},
      {CUBLAS_STATUS_ALLOC_FAILED, NNRT_E_NOMEM},
      {CUBLAS_STATUS_INVALID_VALUE, NNRT_E_ARG},
      {CUBLAS_STATUS_NOT_SUPPORTED, NNRT_E_ARG},
      {CUBLAS_STATUS_ARCH_MISMATCH, NNRT_E_DEVICE},
      {CUBLAS_STATUS_MAPPING_ERROR, NNRT_E_DEVICE},
      {CUBLAS_STATUS_EXECUTION_FAILED, NNRT_E_DEVICE},
      {CUBLAS_STATUS_INTERNAL_ERROR, NNRT_E_INTERNAL},
      {CUBLAS_STATUS_LICENSE_ERROR, NNRT_E_DEVICE},
      {(cublasStatus_t)999, NNRT_E_DEVICE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    nnrt_error err = {NNRT_OK, "untouched"};
    assert_int_equal(nnrt_cuda_blas_status_of(cases[i].s), cases[i].want);
    assert_int_equal(nnrt_cuda_blas_check(cases[i].s, "planning y", &err), cases[i].want);
    if (cases[i].want == NNRT_OK) {
      assert_string_equal(err.msg, "untouched");
      continue;
    }
    char want[256];
    snprintf(want, sizeof want, "planning y: %s: %s", cublasLtGetStatusName(cases[i].s),
             cublasLtGetStatusString(cases[i].s));
    assert_string_equal(err.msg, want);
  }
  nnrt_error err = {0};
  nnrt_cuda_blas_check(CUBLAS_STATUS_ALLOC_FAILED, "ws", &err);
  assert_string_equal(err.msg, "ws: CUBLAS_STATUS_ALLOC_FAILED: the resource allocation failed");
}

static void test_size_class_by_hand(void **state) {
  const size_t cases[][2] = {
      {0, 512},       {1, 512},       {511, 512},     {512, 512},     {513, 640},
      {640, 640},     {641, 768},     {768, 768},     {769, 896},     {896, 896},
      {897, 1024},    {1024, 1024},   {1025, 1280},   {1537, 1792},   {2047, 2048},
      {3000, 3072},   {100000, 114688}, {1048576, 1048576}, {1048577, 1310720},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_int_equal(nnrt_cuda_size_class(cases[i][0]), cases[i][1]);
  /* The top: 7 * 2^(w-3) is the largest class; anything above has none. */
  size_t top = (size_t)7 << (sizeof(size_t) * 8 - 3);
  assert_int_equal(nnrt_cuda_size_class(top), top);
  assert_int_equal(nnrt_cuda_size_class(top - 1), top);
  assert_int_equal(nnrt_cuda_size_class(top + 1), 0);
  assert_int_equal(nnrt_cuda_size_class(SIZE_MAX), 0);
}

static bool is_class(size_t c) {
  /* m * 2^e with m in 4..7 and c >= 512 */
  if (c < 512) return false;
  while (c >= 8) {
    if (c & 1) return false;
    c >>= 1;
  }
  return c >= 4 && c <= 7;
}

static void test_size_class_properties(void **state) {
  size_t prev = 0;
  for (size_t b = 0; b < 70000; b++) {
    size_t c = nnrt_cuda_size_class(b);
    assert_true(c >= b);
    assert_true(is_class(c));
    assert_true(c >= prev); /* monotone */
    if (b > 512) assert_true(c * 4 <= b * 5); /* at most 25% over */
    assert_int_equal(nnrt_cuda_size_class(c), c); /* a class is its own class */
    prev = c;
  }
  uint64_t x = 88172645463325252ull; /* xorshift: sizes across the whole range */
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t b = (size_t)(x >> (x % 64));
    size_t c = nnrt_cuda_size_class(b);
    if (c == 0) {
      assert_true(b > ((size_t)7 << (sizeof(size_t) * 8 - 3)));
      continue;
    }
    assert_true(c >= b && is_class(c));
    if (b > 512) assert_true((double)c <= (double)b * 1.25);
  }
}

static void test_device_parse(void **state) {
  nnrt_error err = {0};
  int d = 99;
  assert_int_equal(nnrt_cuda_device_parse("0", 1, &d, &err), NNRT_OK);
  assert_int_equal(d, 0);
  assert_int_equal(nnrt_cuda_device_parse("3", 4, &d, &err), NNRT_OK);
  assert_int_equal(d, 3);
  assert_int_equal(nnrt_cuda_device_parse("007", 8, &d, &err), NNRT_OK);
  assert_int_equal(d, 7);
  assert_int_equal(nnrt_cuda_device_parse("4", 4, &d, &err), NNRT_E_ARG);
  assert_int_equal(d, -1);
  assert_non_null(strstr(err.msg, "NNC_CUDA_DEVICE"));
  assert_non_null(strstr(err.msg, "device 4"));
  assert_non_null(strstr(err.msg, "4 device(s)"));
  const char *bad[] = {"", "-1", "+1", " 1", "1 ", "1x", "x", "0x1", "1.0",
                       "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d = 5;
    assert_int_equal(nnrt_cuda_device_parse(bad[i], 2, &d, &err), NNRT_E_ARG);
    assert_int_equal(d, -1);
    assert_non_null(strstr(err.msg, "NNC_CUDA_DEVICE"));
  }
  assert_non_null(strstr(err.msg, "99999999999999999999"));
  assert_int_equal(nnrt_cuda_device_parse(NULL, 2, &d, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_device_parse("1", 2, NULL, &err), NNRT_E_ARG);
}

static nnrt_cuda_gemm base_gemm(void) {
  nnrt_cuda_gemm g = {0};
  g.M = 17;
  g.N = 129;
  g.K = 33;
  g.batch = 3;
  g.ab = g.out = NNRT_DT_F32;
  g.alpha = 1;
  return g;
}

static void test_gemm_supported(void **state) {
  char why[160];
  /* Every type pair: supported exactly when listed in the header. */
  const nnrt_cuda_dtype T[] = {NNRT_DT_F32, NNRT_DT_BF16, NNRT_DT_F16};
  for (int a = 0; a < 3; a++)
    for (int o = 0; o < 3; o++)
      for (int tf = 0; tf < 2; tf++) {
        nnrt_cuda_gemm g = base_gemm();
        g.ab = T[a];
        g.out = T[o];
        g.tf32 = tf;
        bool want = (T[a] == NNRT_DT_F32) ? T[o] == NNRT_DT_F32
                                          : !tf && (T[o] == T[a] || T[o] == NNRT_DT_F32);
        assert_int_equal(nnrt_cuda_gemm_supported(&g, why, sizeof why), want);
        assert_int_equal(why[0] == '\0', want);
      }
  /* Epilogues, with and without bias and residual. */
  int dummy;
  for (int e = NNRT_EPI_NONE; e <= NNRT_EPI_GELU_ERF; e++)
    for (int bias = 0; bias < 2; bias++)
      for (int res = 0; res < 2; res++) {
        nnrt_cuda_gemm g = base_gemm();
        g.ab = NNRT_DT_BF16;
        g.epilogue = e;
        g.bias = bias ? &dummy : NULL;
        g.residual = res ? &dummy : NULL;
        bool want = e != NNRT_EPI_GELU_ERF && (!res || e == NNRT_EPI_NONE);
        assert_int_equal(nnrt_cuda_gemm_supported(&g, why, sizeof why), want);
        if (e == NNRT_EPI_GELU_ERF) assert_non_null(strstr(why, "erf"));
        else if (!want) assert_non_null(strstr(why, "residual"));
        /* the activation of the sum, when asked for */
        g.act_after_residual = true;
        assert_int_equal(nnrt_cuda_gemm_supported(&g, why, sizeof why), e != NNRT_EPI_GELU_ERF);
      }
  /* The GELU aux epilogues: aux required (and refused elsewhere), rows of
   * 8s, the output in the A/B type, DGELU without a bias. */
  for (int e = NNRT_EPI_GELU_TANH_AUX; e <= NNRT_EPI_DGELU_TANH; e++) {
    nnrt_cuda_gemm g = base_gemm();
    g.ab = g.out = NNRT_DT_BF16;
    g.epilogue = e;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    assert_non_null(strstr(why, "needs aux"));
    g.aux = &dummy;
    g.ldaux = 129;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    assert_non_null(strstr(why, "multiple of 8"));
    g.ldaux = 136;
    assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    g.bias = &dummy;
    assert_int_equal(nnrt_cuda_gemm_supported(&g, why, sizeof why), e == NNRT_EPI_GELU_TANH_AUX);
    g.bias = NULL;
    g.out = NNRT_DT_F32;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    assert_non_null(strstr(why, "output type"));
  }
  nnrt_cuda_gemm g = base_gemm();
  g.aux = &dummy;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "does not use it"));
  /* BGRAD_A/B: bgrad required and refused elsewhere; no bias, one batch
   * item; a residual (an accumulated weight gradient) is fine. */
  for (int e = NNRT_EPI_BGRAD_A; e <= NNRT_EPI_BGRAD_B; e++) {
    g = base_gemm();
    g.batch = 1;
    g.epilogue = e;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    assert_non_null(strstr(why, "need bgrad"));
    g.bgrad = &dummy;
    g.residual = &dummy;
    /* the summed operand must have k along its stored rows */
    g.a_trans = e == NNRT_EPI_BGRAD_B;
    g.b_trans = e == NNRT_EPI_BGRAD_B;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    assert_non_null(strstr(why, e == NNRT_EPI_BGRAD_A ? "A transposed" : "not transposed"));
    g.a_trans = e == NNRT_EPI_BGRAD_A;
    g.b_trans = e == NNRT_EPI_BGRAD_A;
    assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    g.bias = &dummy;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
    assert_non_null(strstr(why, "no bias"));
    g.bias = NULL;
    g.batch = 2;
    assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  }
  g = base_gemm();
  g.bgrad = &dummy;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "not BGRAD"));
  /* row_phases: one batch item, A [M,K], B [N,K]; no aux, bgrad or scale vectors */
  g = base_gemm();
  g.row_phases = true;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));   /* batch 3 */
  assert_non_null(strstr(why, "row_phases needs batch 1"));
  g.batch = 1;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));   /* B [K,N] */
  assert_non_null(strstr(why, "B [N,K] (b_trans)"));
  g.b_trans = true;
  g.bias = g.residual = &dummy;
  assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  g.a_trans = true;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "A [M,K]"));
  g.a_trans = false;
  g.ab = g.out = NNRT_DT_BF16;
  g.residual = NULL;
  g.epilogue = NNRT_EPI_GELU_TANH_AUX;
  g.aux = &dummy;
  g.ldaux = 136;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "no aux, bgrad or scale vectors"));
  g.epilogue = NNRT_EPI_NONE;
  g.aux = NULL;
  g.ab = NNRT_DT_E4M3;
  g.K = 32;
  g.a_scale = g.b_scale = (const float *)&dummy;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "scale vectors"));
  g.a_scale = g.b_scale = NULL;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));   /* e4m3 */
  assert_non_null(strstr(why, "no e4m3 inputs"));
  g.row_phases = false;
  assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  g = base_gemm();
  g.K = 0;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "K = 0"));
  g.M = 0; /* nothing to do: fine */
  assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  g = base_gemm();
  g.N = -1;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_non_null(strstr(why, "negative"));
  g = base_gemm();
  g.epilogue = 8;
  assert_false(nnrt_cuda_gemm_supported(&g, NULL, 0));
  g = base_gemm();
  g.ab = (nnrt_cuda_dtype)5;
  assert_false(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  assert_false(nnrt_cuda_gemm_supported(NULL, why, sizeof why));
  /* A reason longer than the buffer is cut, not overrun. */
  char tiny[8];
  g = base_gemm();
  g.epilogue = NNRT_EPI_GELU_ERF;
  assert_false(nnrt_cuda_gemm_supported(&g, tiny, sizeof tiny));
  assert_int_equal(strlen(tiny), 7);
}

/* e4m3 (--precision=fp8): A [M,K] and B [N,K] only, K a multiple of 16, a
 * bf16, f32 or (with d_scale, no residual) e4m3 output, no batch, the plain
 * epilogues, both scales or none;
 * the scales change the plan key (another scale mode). */
static void test_gemm_e4m3(void **state) {
  (void)state;
  char why[200];
  float sa[32], sb[32];
  nnrt_cuda_gemm g = base_gemm();
  g.batch = 1;
  g.K = 48;
  g.ab = NNRT_DT_E4M3;
  g.out = NNRT_DT_BF16;
  g.b_trans = true;
  assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  g.a_scale = sa;
  g.b_scale = sb;
  assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  long long k0[NNRT_CUDA_GEMM_KEY_LEN], k1[NNRT_CUDA_GEMM_KEY_LEN];
  nnrt_cuda_gemm_key(&g, k0);
  nnrt_cuda_gemm plain = g;
  plain.a_scale = plain.b_scale = NULL;
  nnrt_cuda_gemm_key(&plain, k1);
  assert_memory_not_equal(k0, k1, sizeof k0);
  g.out = NNRT_DT_F32;
  assert_true(nnrt_cuda_gemm_supported(&g, why, sizeof why));
  nnrt_cuda_gemm b = g;
  b.out = NNRT_DT_F16;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "bf16, f32 or e4m3"));
  /* an e4m3 output (the next GEMM's A): with d_scale, no residual; a bf16 input cannot give one */
  b = g;
  b.out = NNRT_DT_E4M3;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "needs d_scale"));
  b.d_scale = sa;
  b.epilogue = NNRT_EPI_GELU_TANH;
  assert_true(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  b.epilogue = NNRT_EPI_NONE;
  b.residual = sb;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "takes no residual"));
  b = g;
  b.d_scale = sa;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "d_scale is for an e4m3 output only"));
  b = base_gemm();
  b.ab = NNRT_DT_BF16;
  b.out = NNRT_DT_E4M3;
  b.d_scale = sa;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "needs e4m3 inputs"));
  b = g;
  b.b_trans = false;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "K-major"));
  b = g;
  b.a_trans = true;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "K-major"));
  b = g;
  b.K = 40;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "multiple of 16"));
  b = g;
  b.batch = 2;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "one batch item"));
  b = g;
  b.epilogue = NNRT_EPI_GELU_TANH;
  assert_true(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  b.epilogue = NNRT_EPI_GELU_TANH_AUX;
  b.aux = sa;
  b.ldaux = 136;
  b.out = NNRT_DT_BF16;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  b = g;
  b.b_scale = NULL;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "neither"));
  b = base_gemm();
  b.ab = NNRT_DT_BF16;
  b.a_scale = sa;
  assert_false(nnrt_cuda_gemm_supported(&b, why, sizeof why));
  assert_non_null(strstr(why, "e4m3 inputs only"));
}

/* The plan cache key: a repeat of a problem has the same key, another algo
 * index another key (so each index plans, and runs, its own algorithm), and
 * the index is checked before the handle, so a bad one is refused here. */
static void test_gemm_algo(void **state) {
  long long k0[NNRT_CUDA_GEMM_KEY_LEN], k1[NNRT_CUDA_GEMM_KEY_LEN], k2[NNRT_CUDA_GEMM_KEY_LEN];
  float A[4], B[4], D[8];
  nnrt_cuda_gemm g = base_gemm();
  g.A = A;
  g.B = B;
  g.D = D;
  g.lda = g.K;
  g.ldb = g.N;
  g.ldd = g.N;
  nnrt_cuda_gemm_key(&g, k0);
  nnrt_cuda_gemm_key(&g, k1);
  assert_memory_equal(k0, k1, sizeof k0);
  for (int a = 1; a < NNRT_CUDA_GEMM_ALGOS; a++) {
    nnrt_cuda_gemm ga = g;
    ga.algo = a;
    nnrt_cuda_gemm_key(&ga, k2);
    int differ = 0;
    for (int i = 0; i < NNRT_CUDA_GEMM_KEY_LEN; i++) differ += k0[i] != k2[i];
    assert_int_equal(differ, 1);   /* the index and nothing else */
    ga.algo = a - 1;
    nnrt_cuda_gemm_key(&ga, k1);
    assert_memory_not_equal(k1, k2, sizeof k1);
  }
  /* The key still tells other problems apart: M and the pointers' alignment. */
  nnrt_cuda_gemm gm = g;
  gm.M++;
  nnrt_cuda_gemm_key(&gm, k1);
  assert_memory_not_equal(k0, k1, sizeof k0);
  gm = g;
  gm.D = (char *)D + 4;
  nnrt_cuda_gemm_key(&gm, k1);
  assert_memory_not_equal(k0, k1, sizeof k0);

  /* Whether a GEMM is supported does not depend on the index. */
  char why[160];
  nnrt_cuda_gemm gs = base_gemm();
  for (int a = -1; a <= NNRT_CUDA_GEMM_ALGOS; a++) {
    gs.algo = a;
    assert_true(nnrt_cuda_gemm_supported(&gs, why, sizeof why));
  }

  /* Out of range: refused with the field named, before the handle is looked at. */
  const int bad[] = {-1, -2147483647 - 1, NNRT_CUDA_GEMM_ALGOS, 1000};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    nnrt_error err = {0};
    nnrt_cuda_gemm gb = g;
    gb.algo = bad[i];
    assert_int_equal(nnrt_cuda_gemm_run(NULL, &gb, NULL, &err), NNRT_E_ARG);
    assert_int_equal(err.code, NNRT_E_ARG);
    char want[96];
    snprintf(want, sizeof want, "algo must be in [0, %d)", NNRT_CUDA_GEMM_ALGOS);
    if (!strstr(err.msg, want)) fail_msg("message: %s", err.msg);
    snprintf(want, sizeof want, "found %d", bad[i]);
    if (!strstr(err.msg, want)) fail_msg("message: %s", err.msg);
    assert_non_null(strstr(err.msg, "GEMM 17x129x33 (MxNxK)"));
  }
  /* Even with nothing to do. */
  nnrt_error err = {0};
  nnrt_cuda_gemm gz = g;
  gz.M = 0;
  gz.algo = -1;
  assert_int_equal(nnrt_cuda_gemm_run(NULL, &gz, NULL, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "found -1"));
  /* In range, the handle is what is missing. */
  for (int a = 0; a < NNRT_CUDA_GEMM_ALGOS; a++) {
    nnrt_cuda_gemm ga = g;
    ga.algo = a;
    assert_int_equal(nnrt_cuda_gemm_run(NULL, &ga, NULL, &err), NNRT_E_ARG);
    assert_non_null(strstr(err.msg, "handle is NULL"));
  }
  assert_int_equal(nnrt_cuda_gemm_run(NULL, NULL, NULL, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "gemm is NULL"));
}

static void test_null_arguments(void **state) {
  nnrt_error err = {0};
  void *p = &err;
  assert_int_equal(nnrt_cuda_malloc(NULL, 16, &p, &err), NNRT_E_ARG);
  assert_null(p);
  assert_int_equal(nnrt_cuda_free(NULL, &err, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_alloc_trim(NULL, &err), NNRT_E_ARG);
  nnrt_cuda_alloc_stats s = nnrt_cuda_alloc_get_stats(NULL);
  assert_int_equal(s.in_use + s.cached + s.peak + s.device_allocs + s.reuses, 0);
  assert_int_equal(nnrt_cuda_alloc_create(NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_blas_create(0, NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_host_alloc(8, NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_stream_create(NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_event_create(NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_event_record(NULL, NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_event_sync(NULL, &err), NNRT_E_ARG);
  float ms = 1;
  assert_int_equal(nnrt_cuda_event_elapsed_ms(NULL, NULL, &ms, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "start"));
  assert_int_equal(nnrt_cuda_device_count(NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_cuda_device_info_get(0, NULL, &err), NNRT_E_ARG);
  /* Zero bytes copies nothing, whatever the pointers; otherwise NULL is named. */
  assert_int_equal(nnrt_cuda_copy_async(NULL, NULL, 0, NULL, &err), NNRT_OK);
  assert_int_equal(nnrt_cuda_copy_async(NULL, &ms, 4, NULL, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "dst"));
  nnrt_cuda_gemm g = base_gemm();
  assert_int_equal(nnrt_cuda_gemm_run(NULL, &g, NULL, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "handle"));
  assert_int_equal(nnrt_cuda_blas_heuristic_queries(NULL), 0);
  /* Destroying nothing is fine. */
  nnrt_cuda_alloc_destroy(NULL);
  nnrt_cuda_blas_destroy(NULL);
  nnrt_cuda_host_free(NULL);
  nnrt_cuda_stream_destroy(NULL);
  nnrt_cuda_event_destroy(NULL);
}

/* row_phases' calls (nnrt_cuda_gemm_phases), on pointers never dereferenced:
 * each call's rows of A and B, bias and residual must be those of its
 * elements of D, which lie inside the matrix (not its row padding), each
 * written once with a residual (added once) and at least once without;
 * every call is either aligned rows of whole 64-column tiles within the
 * band budget or a narrow edge; the wide calls go band by band (a later
 * call starts no more than a phase's lead before an earlier one); and a
 * product's distinct plans stay within gemm.c's bound (CACHE_PLANS' comment:
 * the cache holds 128). */
typedef struct phase_check {
  const nnrt_cuda_gemm *g;
  size_t budget;
  unsigned char *count; /* per element of D, M x ldd */
  long long bad, wide, last_from;
  int nkeys;
  long long keys[64][NNRT_CUDA_GEMM_KEY_LEN];
} phase_check;

static size_t out_size(nnrt_cuda_dtype t) { return t == NNRT_DT_F32 ? 4 : 2; }

/* q's byte offset from p (fake pointers: integer arithmetic) */
static long long off_of(const void *q, const void *p) { return (long long)((uintptr_t)q - (uintptr_t)p); }

static nnrt_status check_part(void *ctx, const nnrt_cuda_gemm *p) {
  phase_check *x = ctx;
  const nnrt_cuda_gemm *g = x->g;
  long long ea = (long long)out_size(g->ab), eo = (long long)out_size(g->out);
  long long key[NNRT_CUDA_GEMM_KEY_LEN];
  nnrt_cuda_gemm_key(p, key);
  int k = 0;
  while (k < x->nkeys && memcmp(x->keys[k], key, sizeof key) != 0) k++;
  if (k == x->nkeys && x->nkeys < 64) memcpy(x->keys[x->nkeys++], key, sizeof key);
  if (p->row_phases || p->M < 1 || p->N < 1 || p->K != g->K || p->batch != 1 || p->ab != g->ab ||
      p->out != g->out || !p->b_trans || p->a_trans || p->ldb != g->ldb || p->lda < g->K || p->ldd < p->N ||
      p->alpha != g->alpha || p->phase_band_bytes != g->phase_band_bytes ||
      (p->bias != NULL) != (g->bias != NULL) || (p->residual != NULL) != (g->residual != NULL) ||
      (g->residual == g->D) != (p->residual == p->D)) {
    x->bad++;
    return NNRT_OK;
  }
  long long from = off_of(p->D, g->D) % (g->ldd * eo) / eo;
  bool aligned = (uintptr_t)p->D % 16 == 0 && p->ldd * eo % 16 == 0 && p->N % 64 == 0;
  if (aligned) {
    if (p->N > 64 && (size_t)(p->N * g->K * ea) > x->budget) x->bad++;
    if (from < x->last_from - 16 / eo) x->bad++; /* phase-major, not band-major */
    x->last_from = from;
    x->wide++;
  } else if (p->N >= 64 + 16 / eo) {
    x->bad++; /* a slow call: neither aligned whole tiles nor a narrow edge */
  }
  for (long long i = 0; i < p->M; i++)
    for (long long j = 0; j < p->N; j++) {
      long long d = off_of(p->D, g->D) + (i * p->ldd + j) * eo, e = d / eo, m = e / g->ldd, n = e % g->ldd;
      if (d < 0 || d % eo || m >= g->M || n >= g->N || off_of(p->A, g->A) + i * p->lda * ea != m * g->lda * ea ||
          off_of(p->B, g->B) + j * p->ldb * ea != n * g->ldb * ea ||
          (p->bias && off_of(p->bias, g->bias) + j * eo != n * eo) ||
          (p->residual && off_of(p->residual, g->residual) + (i * p->ldd + j) * eo != d)) {
        x->bad++;
        continue;
      }
      if (x->count[e] < 255) x->count[e]++;
    }
  return NNRT_OK;
}

static void test_gemm_phase_partition(void **state) {
  (void)state;
  const struct { nnrt_cuda_dtype ab, out; const char *name; } types[] = {
      {NNRT_DT_F32, NNRT_DT_F32, "f32->f32"},    {NNRT_DT_BF16, NNRT_DT_F32, "bf16->f32"},
      {NNRT_DT_BF16, NNRT_DT_BF16, "bf16->bf16"}, {NNRT_DT_F16, NNRT_DT_F16, "f16->f16"},
      {NNRT_DT_F16, NNRT_DT_F32, "f16->f32"}};
  const int Ms[] = {1, 3, 9, 17}, Ns[] = {1, 5, 8, 63, 64, 65, 71, 72, 128, 135, 200, 517, 1031};
  const int offs[] = {0, 1, 5};
  /* K 8: a tile of B is 1 or 2 KiB: 5000 bytes is bands of 2 or 4 tiles */
  const size_t budgets[] = {0, 1, 5000, SIZE_MAX};
  enum { NONE, SEPARATE, IN_PLACE };
  static unsigned char count[17 * (1031 + 8)];
  static phase_check x;
  long long cases = 0, banded = 0;
  int most_keys = 0;
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
      for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
        for (int pad = 0; pad <= 8; pad++)
          for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
            for (int res = NONE; res <= IN_PLACE; res++)
              for (size_t bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
                size_t eo = out_size(types[t].out);
                nnrt_cuda_gemm g = {.M = Ms[mi], .N = Ns[ni], .K = 8, .batch = 1, .ab = types[t].ab,
                                    .out = types[t].out, .A = (void *)(uintptr_t)0x10000000, .lda = 8 + pad % 3,
                                    .B = (void *)(uintptr_t)0x20000000, .ldb = 8, .b_trans = true,
                                    .D = (void *)(uintptr_t)(0x30000000 + offs[oi] * eo), .ldd = Ns[ni] + pad,
                                    .alpha = 1, .row_phases = true, .phase_band_bytes = budgets[bi]};
                if (res == SEPARATE) g.residual = (void *)(uintptr_t)(0x40000000 + 3 * eo);
                if (res == IN_PLACE) g.residual = g.D;
                if ((Ns[ni] + pad) % 2) g.bias = (void *)(uintptr_t)(0x50000000 + eo);
                assert_true(nnrt_cuda_gemm_supported(&g, NULL, 0));
                size_t n = (size_t)g.M * (size_t)g.ldd;
                memset(count, 0, n);
                memset(&x, 0, sizeof x);
                x.g = &g;
                x.budget = budgets[bi] ? budgets[bi] : NNRT_CUDA_PHASE_BAND_BYTES;
                x.count = count;
                assert_int_equal(nnrt_cuda_gemm_phases(&g, check_part, &x), NNRT_OK);
                long long missed = 0, twice = 0;
                for (size_t e = 0; e < n; e++) {
                  if ((long long)(e % (size_t)g.ldd) >= g.N) continue; /* padding: bad if written */
                  missed += count[e] == 0;
                  twice += count[e] > 1;
                }
                int P = 1; /* phases: rows of D alike mod 16 bytes */
                while ((long long)P * g.ldd * (long long)eo % 16) P *= 2;
                if (x.bad || missed || (res != NONE && twice) || x.nkeys > (res != NONE ? 8 * P : 6 * P + 2))
                  fail_msg("%dx%dx8 ldd %lld D +%d, %s, residual %d, budget %zu: %lld bad element(s) or call(s), "
                           "%lld missed, %lld twice, %d plans",
                           g.M, g.N, g.ldd, offs[oi], types[t].name, res, budgets[bi], x.bad, missed, twice,
                           x.nkeys);
                most_keys = x.nkeys > most_keys ? x.nkeys : most_keys;
                cases++;
                banded += x.wide > (g.M < P ? g.M : P);
              }
  printf("row_phases partition: %lld cases (%lld with several bands), at most %d plans\n", cases, banded,
         most_keys);
  assert_true(banded > cases / 8);
}

/* GPT-2's LM head (8192 x 50257 x 768, B bf16, 77 MB): the default budget
 * gives 4 bands of 196 or 197 tiles, so 4 phases x 4 bands + 2 edge calls
 * (f32 logits), 8 x 4 + 2 (bf16); SIZE_MAX the P calls of one band. */
static nnrt_status count_part(void *ctx, const nnrt_cuda_gemm *p) {
  int *n = ctx;
  n[0]++;
  if (p->N % 64 == 0 && p->N > n[1]) n[1] = p->N;
  return NNRT_OK;
}

static void test_gemm_phase_head(void **state) {
  (void)state;
  /* the default (one band), any budget over B's 77 MB (one band), 24 MiB (four bands) */
  const size_t budgets[] = {0, SIZE_MAX, (size_t)24 << 20};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int w = 0; w < 3; w++) {
      nnrt_cuda_gemm g = {.M = 8192, .N = 50257, .K = 768, .batch = 1, .ab = NNRT_DT_BF16,
                          .out = bf16 ? NNRT_DT_BF16 : NNRT_DT_F32, .A = (void *)(uintptr_t)0x10000000, .lda = 768,
                          .B = (void *)(uintptr_t)0x20000000, .ldb = 768, .b_trans = true,
                          .D = (void *)(uintptr_t)0x30000000, .ldd = 50257, .alpha = 1, .row_phases = true,
                          .phase_band_bytes = budgets[w]};
      int n[2] = {0, 0}, P = bf16 ? 8 : 4, bands = w == 2 ? 4 : 1;
      assert_int_equal(nnrt_cuda_gemm_phases(&g, count_part, n), NNRT_OK);
      assert_int_equal(n[0], P * bands + 2);
      assert_int_equal(n[1], bands == 1 ? 785 * 64 : 197 * 64);
    }
}

static bool have_gpu(void) {
  int n = 0;
  return nnrt_cuda_device_count(&n, NULL) == NNRT_OK && n > 0;
}

static void expect_no_device(nnrt_status st, const nnrt_error *err) {
  assert_int_equal(st, NNRT_E_DEVICE);
  assert_int_equal(err->code, NNRT_E_DEVICE);
  if (!strstr(err->msg, HINT) && !strstr(err->msg, "found none")) fail_msg("message: %s", err->msg);
}

static void test_without_device(void **state) {
  if (have_gpu()) skip();
  nnrt_error err = {0};
  int n = 7;
  expect_no_device(nnrt_cuda_device_count(&n, &err), &err);
  assert_int_equal(n, 0);
  assert_non_null(strstr(err.msg, "counting CUDA devices"));
  int chosen = 7;
  expect_no_device(nnrt_cuda_device_select(-1, &chosen, &err), &err);
  assert_int_equal(chosen, -1);
  expect_no_device(nnrt_cuda_device_select(0, NULL, &err), &err);
  nnrt_cuda_device_info info;
  expect_no_device(nnrt_cuda_device_info_get(0, &info, &err), &err);
  assert_int_equal(info.index, -1);

  nnrt_cuda_alloc *a = (nnrt_cuda_alloc *)&err;
  expect_no_device(nnrt_cuda_alloc_create(&a, &err), &err);
  assert_null(a);
  assert_non_null(strstr(err.msg, "creating a CUDA allocator: no CUDA device"));
  nnrt_cuda_blas *h = (nnrt_cuda_blas *)&err;
  expect_no_device(nnrt_cuda_blas_create(0, &h, &err), &err);
  assert_null(h);
  assert_non_null(strstr(err.msg, "cuBLASLt"));
  void *p = &err;
  expect_no_device(nnrt_cuda_host_alloc(100, &p, &err), &err);
  assert_null(p);
  cudaStream_t s = (cudaStream_t)&err;
  expect_no_device(nnrt_cuda_stream_create(&s, &err), &err);
  assert_null(s);
  cudaEvent_t e = (cudaEvent_t)&err;
  expect_no_device(nnrt_cuda_event_create(&e, &err), &err);
  assert_null(e);
  /* The default stream exists in name only: waiting on it fails cleanly. */
  expect_no_device(nnrt_cuda_stream_sync(NULL, &err), &err);
  float x = 1, y = 0;
  expect_no_device(nnrt_cuda_copy_async(&y, &x, sizeof x, NULL, &err), &err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_status_mapping), cmocka_unit_test(test_blas_status_mapping),
      cmocka_unit_test(test_size_class_by_hand),  cmocka_unit_test(test_size_class_properties),
      cmocka_unit_test(test_device_parse),        cmocka_unit_test(test_gemm_supported), cmocka_unit_test(test_gemm_e4m3),
      cmocka_unit_test(test_gemm_algo),           cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_without_device),      cmocka_unit_test(test_gemm_phase_partition),
      cmocka_unit_test(test_gemm_phase_head),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
