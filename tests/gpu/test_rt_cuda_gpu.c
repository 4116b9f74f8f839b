/* tests/gpu/test_rt_cuda_gpu.c — the CUDA runtime on a GPU: device
 * selection and properties, the caching allocator's reuse and stats, pinned
 * copies and events, and every supported GEMM combination against a float64
 * CPU reference on fresh random inputs with NaN-poisoned outputs, also with
 * cuBLASLt's 2nd to 4th heuristic results (algo 1..3, which --tune=measure
 * times): an index the heuristic does not reach for a problem is a skip,
 * printed, not a failure.
 *
 * A plain C program: exits 0 when every check passes, 1 otherwise, printing
 * the max relative error (to max |ref| of the matrix) per case to stdout
 * with -v, and per type combination always. --quick tests one shape (for
 * sanitizers). --head runs GPT-2's phased LM head alone (for a profiler).
 * --bench instead times a few model-sized GEMMs (CUDA events,
 * median of 30 after warm-up; tests/gpu/bench_gemm_torch.py is the peer).
 *
 * Built and run on a GPU machine by tests/gpu/run_rt_cuda.sh (gcc, linked
 * with runtime/status.c, runtime/half.c, the files of runtime/cuda, -lcudart
 * -lcublasLt -lm). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_cuda.h"
#include "nnrt_cuda_impl.h" /* nnrt_cuda_gemm_phases: the head's calls, counted */

static int failures;
static bool verbose;
static nnrt_error err;

#define FAIL(...)                                    \
  do {                                               \
    failures++;                                      \
    printf("FAIL %s:%d: ", __FILE__, __LINE__);      \
    printf(__VA_ARGS__);                             \
    printf("\n");                                    \
  } while (0)

/* A call that must succeed; on failure reports and leaves the function. */
#define OK(call)                                                      \
  do {                                                                \
    nnrt_status st_ = (call);                                         \
    if (st_ != NNRT_OK) {                                             \
      FAIL("%s -> %s: %s", #call, nnrt_status_name(st_), err.msg);    \
      return;                                                         \
    }                                                                 \
  } while (0)

#define EXPECT(cond, ...)           \
  do {                              \
    if (!(cond)) FAIL(__VA_ARGS__); \
  } while (0)

/* ------------------------------------------------------------ random */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) { /* [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* ------------------------------------------------------------ device */

static void test_device(void) {
  int n = 0, chosen = -1;
  OK(nnrt_cuda_device_count(&n, &err));
  EXPECT(n >= 1, "device count %d", n);
  unsetenv("NNC_CUDA_DEVICE");
  OK(nnrt_cuda_device_select(-1, &chosen, &err));
  EXPECT(chosen == 0, "default device %d, expected 0", chosen);
  char last[16];
  snprintf(last, sizeof last, "%d", n - 1);
  setenv("NNC_CUDA_DEVICE", last, 1);
  OK(nnrt_cuda_device_select(-1, &chosen, &err));
  EXPECT(chosen == n - 1, "NNC_CUDA_DEVICE=%s chose %d", last, chosen);
  setenv("NNC_CUDA_DEVICE", "99", 1);
  EXPECT(nnrt_cuda_device_select(-1, &chosen, &err) == NNRT_E_ARG && chosen == -1 &&
             strstr(err.msg, "NNC_CUDA_DEVICE"),
         "NNC_CUDA_DEVICE=99: %s", err.msg);
  EXPECT(nnrt_cuda_device_select(n, &chosen, &err) == NNRT_E_ARG, "device %d accepted", n);
  unsetenv("NNC_CUDA_DEVICE");
  OK(nnrt_cuda_device_select(0, &chosen, &err));
  nnrt_cuda_device_info info;
  OK(nnrt_cuda_device_info_get(0, &info, &err));
  printf("device 0: %s, cc %d.%d, %d SMs, %.1f GiB, L2 %d KiB, SM clock %d MHz, memory %d MHz x "
         "%d bits, smem opt-in %zu KiB\n",
         info.name, info.cc_major, info.cc_minor, info.sm_count,
         (double)info.total_mem / (1 << 30), info.l2_bytes >> 10, info.clock_khz / 1000,
         info.mem_clock_khz / 1000, info.mem_bus_bits, info.smem_optin_bytes >> 10);
  EXPECT(info.index == 0 && info.name[0] && info.cc_major >= 7 && info.sm_count > 0 &&
             info.total_mem > ((size_t)1 << 30) && info.l2_bytes > 0 && info.clock_khz > 0 &&
             info.mem_clock_khz > 0 && info.mem_bus_bits > 0 && info.smem_optin_bytes > 0,
         "implausible device properties");
  EXPECT(nnrt_cuda_device_info_get(n, &info, &err) == NNRT_E_ARG, "info of device %d", n);
}

/* --------------------------------------------------------- allocator */

static bool device_roundtrip(void *d, size_t bytes, unsigned char v) {
  unsigned char *h = malloc(bytes);
  bool ok = h && cudaMemset(d, v, bytes) == cudaSuccess &&
            cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  for (size_t i = 0; ok && i < bytes; i++) ok = h[i] == v;
  free(h);
  return ok;
}

static void test_allocator(void) {
  nnrt_cuda_alloc *a = NULL;
  OK(nnrt_cuda_alloc_create(&a, &err));
  void *p1 = NULL, *p2 = NULL, *p3 = NULL, *p0 = NULL, *q0 = NULL;
  OK(nnrt_cuda_malloc(a, 1000, &p1, &err));
  EXPECT((uintptr_t)p1 % 256 == 0, "unaligned block %p", p1);
  EXPECT(device_roundtrip(p1, 1000, 0x5a), "block of 1000 bytes not usable");
  nnrt_cuda_alloc_stats s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.in_use == 1024 && s.cached == 0 && s.peak == 1024 && s.device_allocs == 1,
         "after malloc(1000): in_use %zu cached %zu peak %zu allocs %zu", s.in_use, s.cached,
         s.peak, s.device_allocs);
  OK(nnrt_cuda_free(a, p1, &err));
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.in_use == 0 && s.cached == 1024, "after free: in_use %zu cached %zu", s.in_use,
         s.cached);
  OK(nnrt_cuda_malloc(a, 900, &p2, &err)); /* same class: the same block again */
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(p2 == p1 && s.reuses == 1 && s.device_allocs == 1 && s.cached == 0,
         "malloc(900) after free(1000-byte block): %p vs %p, reuses %zu", p2, p1, s.reuses);
  OK(nnrt_cuda_malloc(a, 5000, &p3, &err)); /* another class: a new block */
  OK(nnrt_cuda_malloc(a, 0, &p0, &err));
  OK(nnrt_cuda_malloc(a, 0, &q0, &err));
  EXPECT(p3 != p1 && p0 && q0 && p0 != q0 && p0 != p1 && p0 != p3,
         "distinct live blocks share pointers");
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.in_use == 1024 + 5120 + 512 + 512 && s.peak == s.in_use && s.device_allocs == 4,
         "in_use %zu peak %zu allocs %zu", s.in_use, s.peak, s.device_allocs);
  OK(nnrt_cuda_free(a, p3, &err));
  EXPECT(nnrt_cuda_free(a, p3, &err) == NNRT_E_ARG && strstr(err.msg, "twice"),
         "double free: %s", err.msg);
  EXPECT(nnrt_cuda_free(a, (char *)p2 + 256, &err) == NNRT_E_ARG && strstr(err.msg, "foreign"),
         "foreign pointer: %s", err.msg);
  OK(nnrt_cuda_free(a, NULL, &err));

  /* Many blocks of many sizes (the pointer table grows), all freed, then
   * the same sizes again: every one comes off a free list. */
  enum { MANY = 300 };
  void *blocks[MANY];
  size_t sizes[MANY];
  for (int i = 0; i < MANY; i++) {
    sizes[i] = (size_t)((uniform() * 0.5 + 0.5) * 300000) + (size_t)i;
    OK(nnrt_cuda_malloc(a, sizes[i], &blocks[i], &err));
  }
  s = nnrt_cuda_alloc_get_stats(a);
  size_t allocs = s.device_allocs, peak = s.peak;
  for (int i = MANY - 1; i >= 0; i--) OK(nnrt_cuda_free(a, blocks[i], &err));
  for (int i = 0; i < MANY; i++) OK(nnrt_cuda_malloc(a, sizes[i], &blocks[i], &err));
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.device_allocs == allocs && s.peak == peak, "re-allocation called cudaMalloc: %zu -> %zu",
         allocs, s.device_allocs);
  EXPECT(device_roundtrip(blocks[MANY - 1], sizes[MANY - 1], 0xa5), "reused block not usable");
  for (int i = 0; i < MANY; i++) OK(nnrt_cuda_free(a, blocks[i], &err));

  /* Out of device memory: the cache is trimmed first, then NNRT_E_NOMEM. */
  void *huge = &err;
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.cached > 0, "nothing cached before the huge request");
  nnrt_status st = nnrt_cuda_malloc(a, (size_t)1 << 50, &huge, &err);
  EXPECT(st == NNRT_E_NOMEM && huge == NULL && strstr(err.msg, "cudaErrorMemoryAllocation"),
         "1 PiB: %s: %s", nnrt_status_name(st), err.msg);
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.cached == 0 && s.in_use == 2 * 512 + 1024, "after the failed request: cached %zu in_use %zu",
         s.cached, s.in_use);
  EXPECT(cudaGetLastError() == cudaSuccess, "the failed cudaMalloc left a last error");
  void *p4 = NULL;
  OK(nnrt_cuda_malloc(a, 100, &p4, &err)); /* still works after the failure */
  EXPECT(device_roundtrip(p4, 100, 7), "block after OOM not usable");
  OK(nnrt_cuda_free(a, p4, &err));
  OK(nnrt_cuda_alloc_trim(a, &err));
  s = nnrt_cuda_alloc_get_stats(a);
  EXPECT(s.cached == 0 && s.in_use == 2048, "after trim: cached %zu in_use %zu", s.cached,
         s.in_use);
  OK(nnrt_cuda_free(a, p2, &err)); /* blocks in use survive a trim */
  nnrt_cuda_alloc_destroy(a);       /* frees p0, q0 and the cache */
}

/* ---------------------------------------------- pinned copies, events */

static void test_copies_and_events(void) {
  const size_t bytes = ((size_t)3 << 20) + 13;
  unsigned char *src = NULL, *dst = NULL;
  void *dev = NULL;
  cudaStream_t s = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  nnrt_cuda_alloc *a = NULL;
  OK(nnrt_cuda_alloc_create(&a, &err));
  OK(nnrt_cuda_host_alloc(bytes, (void **)&src, &err));
  OK(nnrt_cuda_host_alloc(bytes, (void **)&dst, &err));
  OK(nnrt_cuda_malloc(a, bytes, &dev, &err));
  OK(nnrt_cuda_stream_create(&s, &err));
  OK(nnrt_cuda_event_create(&e0, &err));
  OK(nnrt_cuda_event_create(&e1, &err));
  for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(uniform() * 127 + 128);
  memset(dst, 0, bytes);
  OK(nnrt_cuda_event_record(e0, s, &err));
  OK(nnrt_cuda_copy_async(dev, src, bytes, s, &err));
  OK(nnrt_cuda_copy_async(dst, dev, bytes, s, &err));
  OK(nnrt_cuda_event_record(e1, s, &err));
  float ms = -1;
  OK(nnrt_cuda_event_elapsed_ms(e0, e1, &ms, &err));
  OK(nnrt_cuda_stream_sync(s, &err));
  EXPECT(memcmp(src, dst, bytes) == 0, "pinned round trip of %zu bytes differs", bytes);
  EXPECT(ms >= 0 && isfinite(ms), "elapsed %f ms", ms);
  printf("pinned round trip of %zu bytes: %.3f ms\n", bytes, ms);
  void *z = NULL;
  OK(nnrt_cuda_host_alloc(0, &z, &err));
  EXPECT(z != NULL, "pinned alloc of 0 bytes gave NULL");
  nnrt_cuda_host_free(z);
  /* Stopped event never recorded: a clean error, not a hang or a crash. */
  cudaEvent_t e2 = NULL;
  OK(nnrt_cuda_event_create(&e2, &err));
  nnrt_status st = nnrt_cuda_event_elapsed_ms(e0, e2, &ms, &err);
  EXPECT(st != NNRT_OK, "elapsed time to an unrecorded event succeeded");
  nnrt_cuda_event_destroy(e2);
  nnrt_cuda_event_destroy(e0);
  nnrt_cuda_event_destroy(e1);
  nnrt_cuda_stream_destroy(s);
  nnrt_cuda_host_free(src);
  nnrt_cuda_host_free(dst);
  nnrt_cuda_alloc_destroy(a);
}

/* -------------------------------------------------------------- GEMM */

static size_t esize(nnrt_cuda_dtype t) { return t == NNRT_DT_F32 ? 4 : 2; }

/* Stores v as type t at raw[i] and returns the value stored. */
static double put(nnrt_cuda_dtype t, void *raw, size_t i, double v) {
  if (t == NNRT_DT_F32) {
    ((float *)raw)[i] = (float)v;
    return ((float *)raw)[i];
  }
  uint16_t h = t == NNRT_DT_BF16 ? nnrt_f32_to_bf16((float)v) : nnrt_f32_to_f16((float)v);
  ((uint16_t *)raw)[i] = h;
  return t == NNRT_DT_BF16 ? nnrt_bf16_to_f32(h) : nnrt_f16_to_f32(h);
}

static double get(nnrt_cuda_dtype t, const void *raw, size_t i) {
  if (t == NNRT_DT_F32) return ((const float *)raw)[i];
  uint16_t h = ((const uint16_t *)raw)[i];
  return t == NNRT_DT_BF16 ? nnrt_bf16_to_f32(h) : nnrt_f16_to_f32(h);
}

static void put_nan(nnrt_cuda_dtype t, void *raw, size_t i) {
  if (t == NNRT_DT_F32) ((float *)raw)[i] = NAN;
  else ((uint16_t *)raw)[i] = t == NNRT_DT_BF16 ? 0x7fc0 : 0x7e00;
}

static double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* d gelu_tanh / dx: 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 a x^2), u = c (x + a x^3) */
static double dgelu_tanh(double x) {
  const double c = 0.7978845608028654, a = 0.044715, t = tanh(c * (x + a * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * a * x * x);
}

typedef struct shape { int M, N, K, batch, pad; bool shared_b; } shape;

typedef struct combo { nnrt_cuda_dtype ab, out; bool tf32; const char *name; double tol; } combo;

/* f32: cuBLASLt's GELU epilogue is an approximation: 1.002e-5 of a 3x1x1
 * product on its transposed-A kernels, 2.52e-5 with a residual added before
 * it (H100 and H200, CUDA 12) */
static const combo COMBOS[] = {
    {NNRT_DT_F32, NNRT_DT_F32, false, "f32->f32", 5e-5},
    {NNRT_DT_F32, NNRT_DT_F32, true, "f32->f32 tf32", 5e-3},
    {NNRT_DT_BF16, NNRT_DT_BF16, false, "bf16->bf16", 1e-2},
    {NNRT_DT_BF16, NNRT_DT_F32, false, "bf16->f32", 1e-2},
    {NNRT_DT_F16, NNRT_DT_F16, false, "f16->f16", 1e-2},
    {NNRT_DT_F16, NNRT_DT_F32, false, "f16->f32", 1e-2},
};
#define NCOMBOS (int)(sizeof COMBOS / sizeof COMBOS[0])
static double combo_max_err[NCOMBOS];
static int combo_cases[NCOMBOS];
/* algo 1..3: cases checked, skipped (no such heuristic result), max error */
enum { ALGOS_TESTED = 4 };
static int algo_ran[ALGOS_TESTED], algo_skipped[ALGOS_TESTED];
static double algo_max_err[ALGOS_TESTED];

enum { RES_NONE, RES_SEPARATE, RES_IN_PLACE };
static const char *RES_NAME[] = {"none", "separate", "in-place"};

/* Device and host copies of one operand: the host copy holds the exact
 * values stored (already rounded to the type). */
typedef struct buf { void *h; void *d; size_t n; nnrt_cuda_dtype t; } buf;

static nnrt_status buf_make(nnrt_cuda_alloc *a, buf *b, nnrt_cuda_dtype t, size_t n, bool random) {
  b->t = t;
  b->n = n;
  b->h = malloc(n * esize(t) + 1);
  if (!b->h) return nnrt_errorf(&err, NNRT_E_NOMEM, "host buffer");
  for (size_t i = 0; i < n; i++) {
    if (random) put(t, b->h, i, uniform());
    else put_nan(t, b->h, i);
  }
  nnrt_status st = nnrt_cuda_malloc(a, n * esize(t), &b->d, &err);
  if (st != NNRT_OK) return st;
  return nnrt_cuda_check(cudaMemcpy(b->d, b->h, n * esize(t), cudaMemcpyHostToDevice), "upload",
                         &err);
}

static void buf_free(nnrt_cuda_alloc *a, buf *b) {
  free(b->h);
  if (b->d) nnrt_cuda_free(a, b->d, NULL);
  memset(b, 0, sizeof *b);
}

/* One case, run with the heuristic's algo-th result; its max relative error
 * goes to the tables. tr: bit 0 B^T ([N,K]), bit 1 A^T ([K,M]). */
static bool phases;        /* gemm_case sets row_phases (test_gemm_row_phases) */
static size_t band_bytes;  /* and phase_band_bytes */

static void gemm_case(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, shape sh, int ci, int tr,
                      bool bias, int res, int epi, int algo) {
  const combo *c = &COMBOS[ci];
  const bool b_trans = tr & 1, a_trans = (tr & 2) != 0;
  int M = sh.M, N = sh.N, K = sh.K, B = sh.batch;
  nnrt_cuda_gemm g = {0};
  g.M = M;
  g.N = N;
  g.K = K;
  g.batch = B;
  g.ab = c->ab;
  g.out = c->out;
  g.tf32 = c->tf32;
  g.b_trans = b_trans;
  g.a_trans = a_trans;
  g.lda = (a_trans ? M : K) + sh.pad;
  g.ldb = (b_trans ? K : N) + sh.pad;
  g.ldd = N + sh.pad;
  long long b_rows = b_trans ? N : K;
  long long a_rows = a_trans ? K : M;
  g.stride_a = a_rows * g.lda + (sh.pad ? 5 : 0);
  g.stride_b = sh.shared_b ? 0 : b_rows * g.ldb + (sh.pad ? 7 : 0);
  g.stride_d = (long long)M * g.ldd + (sh.pad ? 1 : 0);
  g.stride_r = res == RES_SEPARATE ? (long long)M * g.ldd + (sh.pad ? 2 : 0) : g.stride_d;
  g.alpha = 0.75f;
  g.epilogue = epi;
  g.algo = algo;
  g.row_phases = phases;
  g.phase_band_bytes = band_bytes;
  /* ReLU and GELU with a residual: of the sum (cuBLASLt's order), what ResNet's relu(conv + shortcut) uses */
  g.act_after_residual = res != RES_NONE && (epi == NNRT_EPI_RELU || epi == NNRT_EPI_GELU_TANH);
  /* the GELU's input, D-shaped: written by GELU_TANH_AUX, read by DGELU_TANH */
  const bool aux = epi == NNRT_EPI_GELU_TANH_AUX || epi == NNRT_EPI_DGELU_TANH;
  g.ldaux = (N + 7) / 8 * 8 + (sh.pad ? 8 : 0);
  g.stride_aux = (long long)M * g.ldaux + (sh.pad ? 8 : 0);
  char label[200], band[40] = "";
  if (phases && band_bytes) snprintf(band, sizeof band, " bands of %zu bytes", band_bytes);
  snprintf(label, sizeof label, "%dx%dx%d b%d pad%d%s %s %s%s bias=%d res=%s epi=%d algo=%d%s%s", M, N,
           K, B, sh.pad, sh.shared_b ? " sharedB" : "", c->name, a_trans ? "A^T " : "", b_trans ? "B^T" : "B", bias,
           RES_NAME[res], epi, algo, phases ? " row_phases" : "", band);

  buf A = {0}, Bm = {0}, bi = {0}, R = {0}, D = {0}, X = {0};
  size_t nX = (size_t)((B - 1) * g.stride_aux + (long long)M * g.ldaux);
  size_t nA = (size_t)((B - 1) * g.stride_a + a_rows * g.lda);
  size_t nB = (size_t)((B - 1) * g.stride_b + b_rows * g.ldb);
  size_t nD = (size_t)((B - 1) * g.stride_d + (long long)M * g.ldd);
  size_t nR = (size_t)((B - 1) * g.stride_r + (long long)M * g.ldd);
  nnrt_status st = NNRT_OK;
  if ((st = buf_make(a, &A, c->ab, nA, true)) != NNRT_OK ||
      (st = buf_make(a, &Bm, c->ab, nB, true)) != NNRT_OK ||
      (bias && (st = buf_make(a, &bi, c->out, (size_t)N, true)) != NNRT_OK) ||
      (res == RES_SEPARATE && (st = buf_make(a, &R, c->out, nR, true)) != NNRT_OK) ||
      (aux && (st = buf_make(a, &X, c->out, nX, epi == NNRT_EPI_DGELU_TANH)) != NNRT_OK)) {
    FAIL("%s: buffers: %s", label, err.msg);
    goto done;
  }
  /* D poisoned with NaN; in place, the residual's elements sit in it. */
  D.t = c->out;
  D.n = nD;
  D.h = malloc(nD * esize(c->out));
  for (size_t i = 0; i < nD; i++) put_nan(c->out, D.h, i);
  if (res == RES_IN_PLACE) {
    R.t = c->out;
    R.n = nD;
    R.h = malloc(nD * esize(c->out));
    memcpy(R.h, D.h, nD * esize(c->out));
    for (int b = 0; b < B; b++)
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          size_t i = (size_t)(b * g.stride_d + (long long)m * g.ldd + n);
          put(c->out, R.h, i, uniform());
          memcpy((char *)D.h + i * esize(c->out), (char *)R.h + i * esize(c->out), esize(c->out));
        }
  }
  if ((st = nnrt_cuda_malloc(a, nD * esize(c->out), &D.d, &err)) != NNRT_OK ||
      (st = nnrt_cuda_check(cudaMemcpy(D.d, D.h, nD * esize(c->out), cudaMemcpyHostToDevice),
                            "upload D", &err)) != NNRT_OK) {
    FAIL("%s: D: %s", label, err.msg);
    goto done;
  }
  g.A = A.d;
  g.B = Bm.d;
  g.bias = bias ? bi.d : NULL;
  g.residual = res == RES_NONE ? NULL : res == RES_SEPARATE ? R.d : D.d;
  g.D = D.d;
  g.aux = aux ? X.d : NULL;

  bool want = epi != NNRT_EPI_GELU_ERF && (res == RES_NONE || epi == NNRT_EPI_NONE || g.act_after_residual) &&
              (!aux || c->out == c->ab) && !(epi == NNRT_EPI_DGELU_TANH && bias) &&
              (!phases || (B == 1 && !a_trans && b_trans && !aux));
  char why[160];
  bool sup = nnrt_cuda_gemm_supported(&g, why, sizeof why);
  EXPECT(sup == want, "%s: supported() says %d (%s)", label, sup, why);
  st = nnrt_cuda_gemm_run(h, &g, NULL, &err);
  if (!want) {
    EXPECT(st == NNRT_E_ARG && strstr(err.msg, "unsupported"), "%s: ran: %s", label, err.msg);
    goto done;
  }
  if (algo > 0 && st == NNRT_E_ARG && strstr(err.msg, "unsupported") &&
      strstr(err.msg, "expected algorithm index <")) {
    algo_skipped[algo]++;
    if (verbose) printf("  %-70s skipped: %s\n", label, err.msg);
    goto done;
  }
  if (st != NNRT_OK) {
    FAIL("%s: %s", label, err.msg);
    goto done;
  }
  void *out = malloc(nD * esize(c->out));
  if (nnrt_cuda_check(cudaMemcpy(out, D.d, nD * esize(c->out), cudaMemcpyDeviceToHost),
                      "download D", &err) != NNRT_OK) {
    FAIL("%s: %s", label, err.msg);
    free(out);
    goto done;
  }
  void *xout = aux ? malloc(nX * esize(c->out)) : NULL;
  if (aux && nnrt_cuda_check(cudaMemcpy(xout, X.d, nX * esize(c->out), cudaMemcpyDeviceToHost), "download aux",
                             &err) != NNRT_OK) {
    FAIL("%s: %s", label, err.msg);
    free(out);
    free(xout);
    goto done;
  }
  double max_ref = 0, max_diff = 0;
  long bad = 0, written_pad = 0;
  char *touched = calloc(nD, 1);
  for (int b = 0; b < B; b++)
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int k = 0; k < K; k++) {
          double av = get(c->ab, A.h, a_trans ? (size_t)(b * g.stride_a + (long long)k * g.lda + m)
                                              : (size_t)(b * g.stride_a + (long long)m * g.lda + k));
          size_t bi_ = b_trans ? (size_t)(b * g.stride_b + (long long)n * g.ldb + k)
                               : (size_t)(b * g.stride_b + (long long)k * g.ldb + n);
          acc += av * get(c->ab, Bm.h, bi_);
        }
        double v = g.alpha * acc + (bias ? get(c->out, bi.h, (size_t)n) : 0.0);
        size_t xi = (size_t)(b * g.stride_aux + (long long)m * g.ldaux + n);
        if (epi == NNRT_EPI_GELU_TANH_AUX) {
          /* the saved input: alpha A.B + bias, which counts in the scale too
           * (gelu shrinks negative inputs towards 0) */
          double o = get(c->out, xout, xi);
          if (!isfinite(o)) bad++;
          else if (fabs(o - v) > max_diff) max_diff = fabs(o - v);
          if (fabs(v) > max_ref) max_ref = fabs(v);
        }
        size_t di = (size_t)(b * g.stride_d + (long long)m * g.ldd + n);
        double r = res == RES_SEPARATE ? get(c->out, R.h, (size_t)(b * g.stride_r + (long long)m * g.ldd + n))
                   : res == RES_IN_PLACE ? get(c->out, R.h, di)
                                         : 0.0;
        if (g.act_after_residual) v += r;
        /* the activation's input counts in the scale too: gelu takes a
         * negative input near 0, where cuBLASLt's approximation of tanh is
         * off by more than a bf16 ulp of the output (a 1x1 product failed so) */
        if ((epi == NNRT_EPI_GELU_TANH || epi == NNRT_EPI_GELU_TANH_AUX) && fabs(v) > max_ref) max_ref = fabs(v);
        if (epi == NNRT_EPI_RELU) v = v > 0 ? v : 0;
        if (epi == NNRT_EPI_GELU_TANH || epi == NNRT_EPI_GELU_TANH_AUX) v = gelu_tanh(v);
        if (epi == NNRT_EPI_DGELU_TANH) v *= dgelu_tanh(get(c->out, X.h, xi));
        if (!g.act_after_residual) v += r;
        double o = get(c->out, out, di);
        touched[di] = 1;
        if (!isfinite(o)) bad++;
        else if (fabs(o - v) > max_diff) max_diff = fabs(o - v);
        if (fabs(v) > max_ref) max_ref = fabs(v);
      }
  /* Everything outside the matrices (row padding, batch gaps) stays NaN. */
  for (size_t i = 0; i < nD; i++)
    if (!touched[i] && !isnan(get(c->out, out, i))) written_pad++;
  double rel = max_diff / (max_ref > 0 ? max_ref : 1);
  if (verbose) printf("  %-70s max rel err %.2e\n", label, rel);
  EXPECT(bad == 0 && written_pad == 0 && rel <= c->tol,
         "%s: max rel err %.3e (tol %.0e), %ld non-finite, %ld padding elements written", label,
         rel, c->tol, bad, written_pad);
  if (algo > 0) {
    if (rel > algo_max_err[algo]) algo_max_err[algo] = rel;
    algo_ran[algo]++;
  } else {
    if (rel > combo_max_err[ci]) combo_max_err[ci] = rel;
    combo_cases[ci]++;
  }
  free(touched);
  free(out);
  free(xout);
done:
  buf_free(a, &X);
  buf_free(a, &A);
  buf_free(a, &Bm);
  buf_free(a, &bi);
  if (res == RES_IN_PLACE) free(R.h);
  else buf_free(a, &R);
  buf_free(a, &D);
}

/* quick: the batched, padded shape alone (for the slow sanitizer runs). */
static void test_gemm_combinations(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, bool quick) {
  const shape shapes[] = {
      {17, 129, 33, 3, 3, false}, {17, 129, 33, 1, 0, false}, {3, 1, 1, 1, 0, false},
      {3, 1, 1, 3, 1, false},     {17, 129, 33, 3, 0, true},
  };
  size_t nshapes = quick ? 1 : sizeof shapes / sizeof shapes[0];
  for (size_t si = 0; si < nshapes; si++)
    for (int ci = 0; ci < NCOMBOS; ci++)
      for (int tr = 0; tr < 4; tr++)
        for (int bias = 0; bias < 2; bias++)
          for (int res = RES_NONE; res <= RES_IN_PLACE; res++)
            for (int epi = NNRT_EPI_NONE; epi <= NNRT_EPI_DGELU_TANH; epi++)
              gemm_case(h, a, shapes[si], ci, tr, bias, res, epi, 0);
  printf("%-16s %6s %14s %8s\n", "types", "cases", "max rel err", "tol");
  for (int ci = 0; ci < NCOMBOS; ci++)
    printf("%-16s %6d %14.2e %8.0e\n", COMBOS[ci].name, combo_cases[ci], combo_max_err[ci],
           COMBOS[ci].tol);
}

/* row_phases: rows of D at every alignment (odd and padded ldd, N below
 * the columns a phase skips, fewer rows than phases), every type pair,
 * bias, residual (separate and in place: each element must get it once)
 * and the epilogues; the layouts and epilogues it does not take must be
 * refused as unsupported. Same float64 check and NaN-poisoned padding as
 * every other case. Then two shapes in column bands, their budgets small
 * enough for several (a tile of 64 columns of B per band, or 20000 bytes:
 * 1 to 6 tiles). quick: the first shape, and the first banded one. */
static void test_gemm_row_phases(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, bool quick) {
  const shape shapes[] = {
      {37, 101, 40, 1, 0, false}, {130, 517, 64, 1, 2, false}, {2, 5, 16, 1, 0, false},
      {9, 3, 8, 1, 1, false},     {1, 1, 8, 1, 0, false},      {3, 2051, 24, 1, 0, false},
  };
  size_t nshapes = quick ? 1 : sizeof shapes / sizeof shapes[0];
  int before = failures;
  phases = true;
  for (size_t si = 0; si < nshapes; si++)
    for (int ci = 0; ci < NCOMBOS; ci++)
      for (int tr = 0; tr < 4; tr++)
        for (int bias = 0; bias < 2; bias++)
          for (int res = RES_NONE; res <= RES_IN_PLACE; res++)
            for (int epi = NNRT_EPI_NONE; epi <= NNRT_EPI_GELU_TANH_AUX; epi++)
              gemm_case(h, a, shapes[si], ci, tr, bias, res, epi, 0);
  const shape banded[] = {{130, 517, 64, 1, 2, false}, {3, 2051, 24, 1, 1, false}};
  const size_t budgets[] = {1, 20000};
  size_t nbanded = quick ? 1 : sizeof banded / sizeof banded[0];
  for (size_t si = 0; si < nbanded; si++)
    for (size_t bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
      band_bytes = budgets[bi];
      for (int ci = 0; ci < NCOMBOS; ci++)
        for (int bias = 0; bias < 2; bias++)
          for (int res = RES_NONE; res <= RES_IN_PLACE; res++)
            for (int epi = NNRT_EPI_NONE; epi <= NNRT_EPI_GELU_TANH; epi++)
              gemm_case(h, a, banded[si], ci, 1, bias, res, epi, 0); /* the layout row_phases takes */
    }
  band_bytes = 0;
  phases = false;
  printf("row_phases: %zu shapes, %zu in bands, %d failure(s)\n", nshapes, nbanded, failures - before);
}

/* BGRAD_A / BGRAD_B: a weight gradient D = A.B and its bias gradient, the
 * sums over k of A (bgrad[m]: dW = dy^T x) or of B (bgrad[n]: dW = x^T dy),
 * both against float64 sums of the stored values, bgrad poisoned with NaN
 * first; with and without an in-place residual (an accumulated gradient);
 * every type pair and every layout. The summed operand stored with k along
 * its rows (A [K,M] for BGRAD_A, B [K,N] for BGRAD_B) must run; the other
 * layouts, for which cuBLASLt has no kernel, must be refused as unsupported. */
static void bgrad_case(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, shape sh, int ci, int epi, int tr, bool res) {
  const combo *c = &COMBOS[ci];
  const bool b_trans = tr & 1, a_trans = (tr & 2) != 0, of_a = epi == NNRT_EPI_BGRAD_A;
  const int M = sh.M, N = sh.N, K = sh.K, L = of_a ? M : N;
  char label[160];
  snprintf(label, sizeof label, "%s %dx%dx%d %s %s %s%s", of_a ? "bgrad_a" : "bgrad_b", M, N, K, c->name,
           a_trans ? "A^T" : "A", b_trans ? "B^T" : "B", res ? " +residual" : "");
  buf A = {0}, Bm = {0}, D = {0}, G = {0};
  void *R = NULL, *dout = NULL, *gout = NULL;
  size_t nA = (size_t)M * K, nB = (size_t)K * N, nD = (size_t)M * N;
  if (buf_make(a, &A, c->ab, nA, true) || buf_make(a, &Bm, c->ab, nB, true) ||
      buf_make(a, &D, c->out, nD, res) || buf_make(a, &G, c->out, (size_t)L, false)) {
    FAIL("%s: buffers: %s", label, err.msg);
    goto done;
  }
  if (res) {   /* D holds the residual before the call */
    R = malloc(nD * esize(c->out));
    memcpy(R, D.h, nD * esize(c->out));
  }
  nnrt_cuda_gemm g = {.M = M, .N = N, .K = K, .batch = 1, .ab = c->ab, .out = c->out, .tf32 = c->tf32,
                      .A = A.d, .lda = a_trans ? M : K, .a_trans = a_trans, .B = Bm.d, .ldb = b_trans ? K : N,
                      .b_trans = b_trans, .residual = res ? D.d : NULL, .D = D.d, .ldd = N, .alpha = 1,
                      .epilogue = epi, .bgrad = G.d};
  nnrt_status st = nnrt_cuda_gemm_run(h, &g, NULL, &err);
  if (of_a ? !a_trans : b_trans) {
    EXPECT(st == NNRT_E_ARG && strstr(err.msg, "unsupported"), "%s: ran: %s", label, err.msg);
    goto done;
  }
  if (st != NNRT_OK) {
    FAIL("%s: %s", label, err.msg);
    goto done;
  }
  dout = malloc(nD * esize(c->out));
  gout = malloc((size_t)L * esize(c->out));
  if (nnrt_cuda_check(cudaMemcpy(dout, D.d, nD * esize(c->out), cudaMemcpyDeviceToHost), "download D", &err) ||
      nnrt_cuda_check(cudaMemcpy(gout, G.d, (size_t)L * esize(c->out), cudaMemcpyDeviceToHost), "download bgrad",
                      &err)) {
    FAIL("%s: %s", label, err.msg);
    goto done;
  }
  double dmax = 0, ddiff = 0, gmax = 0, gdiff = 0;
  long bad = 0;
  for (int l = 0; l < L; l++) {
    double sum = 0;
    for (int k = 0; k < K; k++)
      sum += of_a ? get(c->ab, A.h, a_trans ? (size_t)k * M + l : (size_t)l * K + k)
                  : get(c->ab, Bm.h, b_trans ? (size_t)l * K + k : (size_t)k * N + l);
    double o = get(c->out, gout, (size_t)l);
    if (!isfinite(o)) bad++;
    else if (fabs(o - sum) > gdiff) gdiff = fabs(o - sum);
    if (fabs(sum) > gmax) gmax = fabs(sum);
  }
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = res ? get(c->out, R, (size_t)m * N + n) : 0;
      for (int k = 0; k < K; k++)
        acc += get(c->ab, A.h, a_trans ? (size_t)k * M + m : (size_t)m * K + k) *
               get(c->ab, Bm.h, b_trans ? (size_t)n * K + k : (size_t)k * N + n);
      double v = get(c->out, dout, (size_t)m * N + n);
      if (!isfinite(v)) bad++;
      else if (fabs(v - acc) > ddiff) ddiff = fabs(v - acc);
      if (fabs(acc) > dmax) dmax = fabs(acc);
    }
  double drel = ddiff / (dmax > 0 ? dmax : 1), grel = gdiff / (gmax > 0 ? gmax : 1);
  printf("  %-52s D max rel err %.2e, bgrad %.2e\n", label, drel, grel);
  EXPECT(bad == 0 && drel <= c->tol && grel <= c->tol, "%s: D %.3e, bgrad %.3e (tol %.0e), %ld non-finite",
         label, drel, grel, c->tol, bad);
done:
  free(R);
  free(dout);
  free(gout);
  buf_free(a, &A);
  buf_free(a, &Bm);
  buf_free(a, &D);
  buf_free(a, &G);
}

static void test_gemm_bgrad(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, bool quick) {
  const shape shapes[] = {{13, 7, 17, 1, 0, false}, {1, 1, 1, 1, 0, false}, {200, 96, 1031, 1, 0, false},
                          {96, 200, 4099, 1, 0, false}};
  size_t nshapes = quick ? 1 : sizeof shapes / sizeof shapes[0];
  for (size_t si = 0; si < nshapes; si++)
    for (int ci = 0; ci < NCOMBOS; ci++)
      for (int epi = NNRT_EPI_BGRAD_A; epi <= NNRT_EPI_BGRAD_B; epi++)
        for (int tr = 0; tr < 4; tr++)
          for (int res = 0; res < 2; res++) bgrad_case(h, a, shapes[si], ci, epi, tr, res);
}

/* cuBLASLt's 2nd to 4th heuristic results on every type pair, both A and both B
 * layouts and the three ways the emitter fuses (nothing; bias + GELU; bias
 * + residual), at odd sizes and at one model-like size whose heuristic
 * list is long. The per-type tolerances of COMBOS apply. quick: the first
 * shape with algo 1. */
static void test_gemm_algos(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, bool quick) {
  const shape shapes[] = {
      {17, 129, 33, 3, 3, false}, {3, 1, 1, 1, 0, false}, {257, 384, 200, 1, 0, false},
  };
  const struct { bool bias; int res, epi; } fusions[] = {
      {false, RES_NONE, NNRT_EPI_NONE}, {true, RES_NONE, NNRT_EPI_GELU_TANH},
      {true, RES_SEPARATE, NNRT_EPI_NONE}};
  size_t nshapes = quick ? 1 : sizeof shapes / sizeof shapes[0];
  for (int algo = 1; algo < (quick ? 2 : ALGOS_TESTED); algo++)
    for (size_t si = 0; si < nshapes; si++)
      for (int ci = 0; ci < NCOMBOS; ci++)
        for (int tr = 0; tr < 4; tr++)
          for (size_t f = 0; f < sizeof fusions / sizeof fusions[0]; f++)
            gemm_case(h, a, shapes[si], ci, tr, fusions[f].bias, fusions[f].res, fusions[f].epi,
                      algo);
  printf("%-16s %6s %8s %14s\n", "heuristic algo", "cases", "skipped", "max rel err");
  for (int algo = 1; algo < ALGOS_TESTED; algo++)
    printf("%-16d %6d %8d %14.2e\n", algo, algo_ran[algo], algo_skipped[algo], algo_max_err[algo]);
  EXPECT(algo_ran[1] > 0, "algo 1 ran on no problem at all: the heuristic list is never read");
}

/* The plan cache: the same problem twice, or with other pointers of the
 * same alignment, makes no new heuristic query; another shape does. */
static void test_gemm_cache_and_args(nnrt_cuda_blas *h, nnrt_cuda_alloc *a) {
  const int M = 17, N = 129, K = 33;
  void *A = NULL, *B = NULL, *D = NULL, *D2 = NULL;
  OK(nnrt_cuda_malloc(a, (size_t)M * K * 2, &A, &err));
  OK(nnrt_cuda_malloc(a, (size_t)N * K * 2, &B, &err));
  OK(nnrt_cuda_malloc(a, (size_t)M * N * 4 * 2, &D, &err));
  OK(nnrt_cuda_malloc(a, (size_t)M * N * 4 * 2, &D2, &err));
  OK(nnrt_cuda_check(cudaMemset(A, 0x3c, (size_t)M * K * 2), "memset", &err));
  OK(nnrt_cuda_check(cudaMemset(B, 0x3c, (size_t)N * K * 2), "memset", &err));
  nnrt_cuda_gemm g = {.M = M, .N = N, .K = K, .batch = 1, .ab = NNRT_DT_BF16, .out = NNRT_DT_F32,
                      .A = A, .lda = K, .B = B, .ldb = K, .b_trans = true, .D = D, .ldd = N,
                      .alpha = 1, .epilogue = NNRT_EPI_NONE};
  long long q0 = nnrt_cuda_blas_heuristic_queries(h);
  OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
  long long q1 = nnrt_cuda_blas_heuristic_queries(h);
  OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
  g.D = D2;
  OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
  long long q2 = nnrt_cuda_blas_heuristic_queries(h);
  EXPECT(q1 == q0 + 1 && q2 == q1, "heuristic queries %lld, %lld, %lld: repeats were not cached",
         q0, q1, q2);
  g.M = M - 1;
  OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
  EXPECT(nnrt_cuda_blas_heuristic_queries(h) == q2 + 1, "a new shape made no query");
  g.M = M;
  /* Another heuristic result is another plan; then cached like the first. */
  long long q3 = nnrt_cuda_blas_heuristic_queries(h);
  g.algo = 1;
  g.D = D;
  OK(nnrt_cuda_check(cudaMemset(D, 0xff, (size_t)M * N * 4), "poison D", &err));   /* NaN */
  nnrt_status sa = nnrt_cuda_gemm_run(h, &g, NULL, &err);
  if (sa == NNRT_E_ARG && strstr(err.msg, "expected algorithm index <")) {
    printf("cache test: algo 1 skipped: %s\n", err.msg);
  } else {
    EXPECT(sa == NNRT_OK, "algo 1: %s", err.msg);
    OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
    EXPECT(nnrt_cuda_blas_heuristic_queries(h) == q3 + 1,
           "algo 1 made %lld queries, expected 1 (a plan of its own, then cached)",
           nnrt_cuda_blas_heuristic_queries(h) - q3);
  }
  long long q4 = nnrt_cuda_blas_heuristic_queries(h);
  g.algo = 0;
  g.D = D2;
  OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
  EXPECT(nnrt_cuda_blas_heuristic_queries(h) == q4, "algo 0 after algo 1 planned again");
  /* 0x3c3c as bf16 is 0.01147...: D = K * that^2 everywhere (D from algo 1 too). */
  float *hd = malloc((size_t)M * N * 4);
  OK(nnrt_cuda_check(cudaMemcpy(hd, D2, (size_t)M * N * 4, cudaMemcpyDeviceToHost), "d2h", &err));
  double v = nnrt_bf16_to_f32(0x3c3c);
  double want = K * v * v;
  for (int i = 0; i < M * N; i++)
    if (fabs(hd[i] - want) > 1e-5 * want) {
      FAIL("cached plan, other D: D[%d] = %g, expected %g", i, hd[i], want);
      break;
    }
  if (sa == NNRT_OK) {
    OK(nnrt_cuda_check(cudaMemcpy(hd, D, (size_t)M * N * 4, cudaMemcpyDeviceToHost), "d2h", &err));
    for (int i = 0; i < M * N; i++)
      if (fabs(hd[i] - want) > 1e-5 * want) {
        FAIL("algo 1: D[%d] = %g, expected %g", i, hd[i], want);
        break;
      }
  }
  free(hd);

  /* Argument checks: nothing runs, the field is named. */
  nnrt_cuda_gemm bad = g;
  bad.ldd = N - 1;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "ldd"),
         "ldd < N: %s", err.msg);
  bad = g;
  bad.lda = K - 1;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "lda"),
         "lda < K: %s", err.msg);
  bad = g;
  bad.A = (char *)A + 1;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "aligned"),
         "misaligned A: %s", err.msg);
  bad = g;
  bad.B = NULL;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "B is NULL"),
         "NULL B: %s", err.msg);
  bad = g;
  bad.batch = 2;
  bad.stride_d = (long long)M * N - 1;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "stride_d"),
         "overlapping D batches: %s", err.msg);
  bad = g;
  bad.batch = 2;
  bad.stride_d = (long long)M * N;
  bad.residual = bad.D;
  bad.stride_r = 0;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "stride_r"),
         "in-place residual with another stride: %s", err.msg);
  bad = g;
  bad.K = -1;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG, "K = -1 accepted");
  bad = g;
  bad.algo = NNRT_CUDA_GEMM_ALGOS;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "algo must be in"),
         "algo %d: %s", NNRT_CUDA_GEMM_ALGOS, err.msg);
  bad.algo = -1;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "found -1"),
         "algo -1: %s", err.msg);
  bad = g;
  bad.epilogue = NNRT_EPI_GELU_ERF;
  EXPECT(nnrt_cuda_gemm_run(h, &bad, NULL, &err) == NNRT_E_ARG && strstr(err.msg, "unsupported"),
         "GELU erf: %s", err.msg);
  bad = g;
  bad.M = 0;
  bad.A = NULL; /* nothing to do: not even looked at */
  OK(nnrt_cuda_gemm_run(h, &bad, NULL, &err));
  bad = g;
  bad.batch = 0;
  OK(nnrt_cuda_gemm_run(h, &bad, NULL, &err));
  OK(nnrt_cuda_check(cudaDeviceSynchronize(), "sync", &err));
  nnrt_cuda_free(a, A, NULL);
  nnrt_cuda_free(a, B, NULL);
  nnrt_cuda_free(a, D, NULL);
  nnrt_cuda_free(a, D2, NULL);
}

/* ------------------------------------------------------------- bench */

static int cmp_float(const void *x, const void *y) {
  float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

/* *med: the median ms of runs timed calls of g after warm untimed ones
 * (CUDA events around each; runs <= 32); unchanged when a call fails. */
static void median_ms(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1,
                      int warm, int runs, double *med) {
  float ms[32] = {0};
  for (int r = 0; r < warm; r++) OK(nnrt_cuda_gemm_run(h, g, s, &err));
  for (int r = 0; r < runs && r < 32; r++) {
    OK(nnrt_cuda_event_record(e0, s, &err));
    OK(nnrt_cuda_gemm_run(h, g, s, &err));
    OK(nnrt_cuda_event_record(e1, s, &err));
    OK(nnrt_cuda_event_elapsed_ms(e0, e1, &ms[r], &err));
  }
  if (runs > 32) runs = 32;
  qsort(ms, (size_t)runs, sizeof ms[0], cmp_float);
  *med = runs % 2 ? ms[runs / 2] : (ms[runs / 2 - 1] + ms[runs / 2]) / 2;
}

/* nnrt_cuda_gemm_phases' callback: counts a phased product's calls */
static nnrt_status count_call(void *ctx, const nnrt_cuda_gemm *part) {
  (void)part;
  ++*(int *)ctx;
  return NNRT_OK;
}

/* GPT-2's LM head: its sizes, and A, B (50304 rows) and D (f32, 8192 x
 * 50304) allocated, A and B filled with bytes of 0x38 (1.0 as e4m3, 4.4e-5
 * as bf16 (0x3838): finite products either way). */
enum { HEAD_M = 8192, HEAD_N = 50257, HEAD_K = 768, HEAD_LDP = 50304 };
static void head_buffers(nnrt_cuda_alloc *a, void **A, void **B, void **D) {
  OK(nnrt_cuda_malloc(a, (size_t)HEAD_M * HEAD_K * 2, A, &err));
  OK(nnrt_cuda_malloc(a, (size_t)HEAD_LDP * HEAD_K * 2, B, &err));
  OK(nnrt_cuda_malloc(a, (size_t)HEAD_M * HEAD_LDP * 4, D, &err));
  OK(nnrt_cuda_check(cudaMemset(*A, 0x38, (size_t)HEAD_M * HEAD_K * 2), "memset", &err));
  OK(nnrt_cuda_check(cudaMemset(*B, 0x38, (size_t)HEAD_LDP * HEAD_K * 2), "memset", &err));
}

/* GPT-2's LM head (8192 x 50257 x 768, rows of D 50257 long: not 16-byte
 * aligned): one call; the vocabulary padded to 50304 (what llm.c computes, a
 * model change: the ideal, which the last column compares with); row_phases
 * in one band (each phase reads all 77 MB of B) and in bands of B within 6
 * to 48 MiB (NNRT_CUDA_PHASE_BAND_BYTES the default), with its number of
 * cuBLASLt calls. B holds 50304 rows. e4m3, unscaled, runs only at 50304:
 * cuBLASLt has no FP8 algorithm for N 50257, and row_phases refuses e4m3. */
static void bench_head(nnrt_cuda_blas *h, nnrt_cuda_alloc *a, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
  const int M = HEAD_M, N = HEAD_N, K = HEAD_K, LDP = HEAD_LDP;
  void *A = NULL, *B = NULL, *D = NULL;
  head_buffers(a, &A, &B, &D);
  printf("\n%-44s %6s %10s %10s %9s\n", "LM head 8192x50257x768", "calls", "median ms", "TFLOP/s", "/ ideal");
  const struct { nnrt_cuda_dtype ab, out; const char *name; } types[] = {
      {NNRT_DT_BF16, NNRT_DT_F32, "bf16->f32"}, {NNRT_DT_BF16, NNRT_DT_BF16, "bf16->bf16"},
      {NNRT_DT_E4M3, NNRT_DT_F32, "e4m3->f32"}, {NNRT_DT_E4M3, NNRT_DT_BF16, "e4m3->bf16"}};
  const size_t MiB = (size_t)1 << 20;
  const struct { const char *name; bool padded, phases; size_t band; } ways[] = {
      {"N = ldd = 50304 (ideal)", true, false, 0},  {"one call", false, false, 0},
      {"row_phases, one band", false, true, SIZE_MAX}, {"row_phases, bands <= 6 MiB", false, true, 6 * MiB},
      {"row_phases, bands <= 12 MiB", false, true, 12 * MiB}, {"row_phases, bands <= 24 MiB", false, true, 24 * MiB},
      {"row_phases, bands <= 36 MiB", false, true, 36 * MiB}, {"row_phases, bands <= 48 MiB", false, true, 48 * MiB},
      {"row_phases, default bands", false, true, 0}};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    double ideal = 0;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
      if (types[t].ab == NNRT_DT_E4M3 && ways[w].phases) continue;
      int n = ways[w].padded ? LDP : N;
      nnrt_cuda_gemm g = {.M = M, .N = n, .K = K, .batch = 1, .ab = types[t].ab, .out = types[t].out, .A = A,
                          .lda = K, .B = B, .ldb = K, .b_trans = true, .D = D, .ldd = n, .alpha = 1,
                          .epilogue = NNRT_EPI_NONE, .row_phases = ways[w].phases,
                          .phase_band_bytes = ways[w].band};
      char label[64];
      snprintf(label, sizeof label, "%s, %s", types[t].name, ways[w].name);
      int calls = 1;
      if (g.row_phases) {
        calls = 0;
        OK(nnrt_cuda_gemm_phases(&g, count_call, &calls));
      }
      if (nnrt_cuda_gemm_run(h, &g, s, &err) != NNRT_OK) {
        printf("%-44s %s\n", label, err.msg);
        continue;
      }
      double med = 0;
      median_ms(h, &g, s, e0, e1, 3, 31, &med);
      if (ways[w].padded) ideal = med;
      printf("%-44s %6d %10.4f %10.1f %9.3f\n", label, calls, med, 2.0 * M * N * K / (med * 1e-3) / 1e12,
             ideal > 0 ? med / ideal : 0.0);
    }
  }
  nnrt_cuda_free(a, A, NULL);
  nnrt_cuda_free(a, B, NULL);
  nnrt_cuda_free(a, D, NULL);
}

/* --head: GPT-2's phased head (bf16 A and B, f32 then bf16 out) twice
 * each, then the padded ideal once each, nothing else: a run for a
 * profiler (ncu's per-kernel times of the phases' calls). */
static void head_once(nnrt_cuda_blas *h, nnrt_cuda_alloc *a) {
  const int M = HEAD_M, N = HEAD_N, K = HEAD_K, LDP = HEAD_LDP;
  void *A = NULL, *B = NULL, *D = NULL;
  head_buffers(a, &A, &B, &D);
  for (int padded = 0; padded < 2; padded++)
    for (int bf16 = 0; bf16 < 2; bf16++) {
      int n = padded ? LDP : N;
      nnrt_cuda_gemm g = {.M = M, .N = n, .K = K, .batch = 1, .ab = NNRT_DT_BF16,
                          .out = bf16 ? NNRT_DT_BF16 : NNRT_DT_F32, .A = A, .lda = K, .B = B, .ldb = K,
                          .b_trans = true, .D = D, .ldd = n, .alpha = 1, .row_phases = !padded};
      for (int r = 0; r < (padded ? 1 : 2); r++) OK(nnrt_cuda_gemm_run(h, &g, NULL, &err));
    }
  OK(nnrt_cuda_check(cudaDeviceSynchronize(), "synchronize", &err));
  nnrt_cuda_free(a, A, NULL);
  nnrt_cuda_free(a, B, NULL);
  nnrt_cuda_free(a, D, NULL);
}

/* Model-sized bf16 GEMMs (nn.Linear: B transposed, bias, optional GELU),
 * median of 30 timed runs after 5 warm-ups; inputs random. */
static void bench(nnrt_cuda_blas *h, nnrt_cuda_alloc *a) {
  /* the layers' GEMMs of GPT-2 (B=8 T=1024) and BERT MiniLM (B=32 T=128) with
   * their epilogues, each also as the bare product (no bias, epilogue or
   * residual: what torch.compile hands cuBLAS before its Triton epilogue),
   * with cuBLASLt's first heuristic result and the best of its first four */
  const struct { int M, N, K, epi; bool res; nnrt_cuda_dtype out; const char *name; } cases[] = {
      {8192, 2304, 768, NNRT_EPI_NONE, false, NNRT_DT_BF16, "gpt2 qkv"},
      {8192, 768, 768, NNRT_EPI_NONE, true, NNRT_DT_BF16, "gpt2 proj+res"},
      {8192, 3072, 768, NNRT_EPI_GELU_TANH, false, NNRT_DT_BF16, "gpt2 fc1+gelu"},
      {8192, 768, 3072, NNRT_EPI_NONE, true, NNRT_DT_BF16, "gpt2 fc2+res"},
      {4096, 1152, 384, NNRT_EPI_NONE, false, NNRT_DT_BF16, "bert qkv"},
      {4096, 384, 384, NNRT_EPI_NONE, true, NNRT_DT_BF16, "bert ao+res"},
      {4096, 1536, 384, NNRT_EPI_NONE, false, NNRT_DT_BF16, "bert inter"},
      {4096, 384, 1536, NNRT_EPI_NONE, true, NNRT_DT_BF16, "bert out+res"},
      {8192, 8192, 8192, NNRT_EPI_NONE, false, NNRT_DT_BF16, "8k cube"},
      {8192, 3072, 768, NNRT_EPI_NONE, false, NNRT_DT_F32, "fc1 ->f32"},
  };
  printf("\n%-16s %6s %6s %6s | %9s %9s %4s %8s | %9s %9s %4s %8s\n", "bench (bf16), ms", "M", "N", "K", "algo 0",
         "best", "algo", "TFLOP/s", "bare 0", "bare best", "algo", "TFLOP/s");
  cudaStream_t s = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  OK(nnrt_cuda_stream_create(&s, &err));
  OK(nnrt_cuda_event_create(&e0, &err));
  OK(nnrt_cuda_event_create(&e1, &err));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int M = cases[i].M, N = cases[i].N, K = cases[i].K;
    buf A = {0}, B = {0}, bi = {0}, D = {0}, R = {0};
    if (buf_make(a, &A, NNRT_DT_BF16, (size_t)M * K, true) != NNRT_OK ||
        buf_make(a, &B, NNRT_DT_BF16, (size_t)N * K, true) != NNRT_OK ||
        buf_make(a, &bi, cases[i].out, (size_t)N, true) != NNRT_OK ||
        buf_make(a, &D, cases[i].out, (size_t)M * N, true) != NNRT_OK ||
        buf_make(a, &R, cases[i].out, (size_t)M * N, true) != NNRT_OK) {
      FAIL("bench buffers: %s", err.msg);
      return;
    }
    double t0[2] = {0, 0}, t[2] = {0, 0};   /* algo 0, best; [1]: bare */
    int best[2] = {0, 0};
    for (int bare = 0; bare < 2; bare++)
      for (int algo = 0; algo < 4; algo++) {
        nnrt_cuda_gemm g = {.M = M, .N = N, .K = K, .batch = 1, .ab = NNRT_DT_BF16, .out = cases[i].out, .A = A.d,
                            .lda = K, .B = B.d, .ldb = K, .b_trans = true, .bias = bare ? NULL : bi.d,
                            .residual = bare || !cases[i].res ? NULL : R.d, .D = D.d, .ldd = N, .alpha = 1,
                            .epilogue = bare ? NNRT_EPI_NONE : cases[i].epi, .algo = algo};
        if (nnrt_cuda_gemm_run(h, &g, s, &err) != NNRT_OK) continue;   /* no such heuristic result */
        double med = 0;
        median_ms(h, &g, s, e0, e1, 5, 30, &med);
        if (algo == 0) t0[bare] = med;
        if (algo == 0 || med < t[bare]) t[bare] = med, best[bare] = algo;
      }
    const double flop = 2.0 * M * N * K;
    printf("%-16s %6d %6d %6d | %9.4f %9.4f %4d %8.1f | %9.4f %9.4f %4d %8.1f\n", cases[i].name, M, N, K, t0[0], t[0],
           best[0], flop / (t[0] * 1e-3) / 1e12, t0[1], t[1], best[1], flop / (t[1] * 1e-3) / 1e12);
    buf_free(a, &A);
    buf_free(a, &B);
    buf_free(a, &bi);
    buf_free(a, &D);
    buf_free(a, &R);
  }
  bench_head(h, a, s, e0, e1);
  nnrt_cuda_event_destroy(e0);
  nnrt_cuda_event_destroy(e1);
  nnrt_cuda_stream_destroy(s);
}

int main(int argc, char **argv) {
  bool do_bench = false, quick = false, head = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = true;
    else if (!strcmp(argv[i], "--bench")) do_bench = true;
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--head")) head = true;
    else {
      printf("usage: %s [-v] [--quick] [--bench] [--head]\n", argv[0]);
      return 2;
    }
  }
  test_device();
  if (failures) {
    printf("no usable device: stopping\n");
    return 1;
  }
  if (!do_bench && !head) {
    test_allocator();
    test_copies_and_events();
  }
  nnrt_cuda_alloc *a = NULL;
  nnrt_cuda_blas *h = NULL;
  if (nnrt_cuda_alloc_create(&a, &err) != NNRT_OK ||
      nnrt_cuda_blas_create(0, &h, &err) != NNRT_OK) {
    FAIL("setup: %s", err.msg);
  } else if (head) {
    head_once(h, a);
  } else if (do_bench) {
    bench(h, a);
  } else {
    test_gemm_cache_and_args(h, a);
    test_gemm_combinations(h, a, quick);
    test_gemm_algos(h, a, quick);
    test_gemm_bgrad(h, a, quick);
    test_gemm_row_phases(h, a, quick);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) FAIL("device faulted");
  nnrt_cuda_blas_destroy(h);
  nnrt_cuda_alloc_destroy(a);
  printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
