/* tests/unit/test_tune.c — target descriptions and tile choices.
 *
 * Descriptions: every fixed C SIMD target, the host, the CUDA table against
 * NVIDIA's published per-capability values, OpenCL class defaults, unknown
 * targets. Tiles: each expected value is worked out by hand in a
 * comment from the rules (tune_c_simd.c, tune_cuda.c, tune_opencl.c) for a
 * description whose caches and cores the test fixes, so the host does not
 * matter; GEMMs of several shapes per ISA, tiny and odd ones, row and
 * elementwise kernels, and every kernel of a small GPT-2 on every family. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "ir/schedule.h"
#include "passes/passes.h"
#include "tune/tune.h"

#ifndef NNC_SOURCE_ROOT
#define NNC_SOURCE_ROOT "."
#endif

#define KIB(x) ((int64_t)(x) << 10)
#define MIB(x) ((int64_t)(x) << 20)

/* ------------------------------------------------------------- helpers */

static nnc_target_desc describe(const char *name) {
  nnc_target_desc t;
  nnc_error err = {0};
  if (nnc_target_describe(name, &t, &err)) fail_msg("%s: %s", name, err.msg);
  return t;
}

/* A C SIMD target with caches and cores fixed by the test. */
static nnc_target_desc simd(const char *name, int64_t l1d, int64_t l2, int64_t l3, int cores) {
  nnc_target_desc t = describe(name);
  t.l1d = l1d;
  t.l2 = l2;
  t.l3 = l3;
  t.cores = cores;
  return t;
}

typedef struct built {
  nnc_graph g;
  nnc_schedule s;
  const char *file;
} built;

static void b_init(built *b) {
  nnc_graph_init(&b->g);
  b->file = nnc_graph_intern(&b->g, "t.lua");
  b->g.name = strdup("t");
}

static nnc_srcloc loc(built *b, int line) { return (nnc_srcloc){b->file, line}; }

static int add_input(built *b, const char *name, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_input(&b->g, name, NNC_F32, rank, shape, loc(b, 1), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static int add_param(built *b, const char *name, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_param(&b->g, name, NNC_F32, rank, shape, loc(b, 2), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static int add_node(built *b, nnc_op op, int nin, const int *in, const nnc_attrs *a, int line) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_node(&b->g, op, nin, in, a, 1, loc(b, line), NULL, &id, &err)) fail_msg("%s", err.msg);
  return b->g.nodes[id].out[0];
}

static void add_output(built *b, int t) {
  nnc_error err = {0};
  if (nnc_graph_add_output(&b->g, "y", t, loc(b, 9), &err)) fail_msg("%s", err.msg);
}

static void compile(built *b) {
  nnc_error err = {0};
  nnc_schedule_init(&b->s, &b->g);
  if (nnc_compile_graph(&b->g, &b->s, &err)) fail_msg("compile: %s", err.msg);
}

static void b_free(built *b) {
  nnc_schedule_free(&b->s);
  nnc_graph_free(&b->g);
}

/* y = x . W^T with x [M, K] (M symbolic with maximum m when sym), W [N, K]. */
static void build_linear(built *b, int64_t m, int64_t n, int64_t k, bool sym) {
  b_init(b);
  nnc_dim xs[2] = {nnc_dim_const(m), nnc_dim_const(k)};
  if (sym) {
    int id;
    nnc_error err = {0};
    if (nnc_graph_add_symbol(&b->g, "B", m, loc(b, 1), &id, &err)) fail_msg("%s", err.msg);
    xs[0] = nnc_dim_sym(id);
  }
  nnc_dim ws[2] = {nnc_dim_const(n), nnc_dim_const(k)};
  int in[2] = {add_input(b, "x", 2, xs), add_param(b, "w", 2, ws)};
  add_output(b, add_node(b, NNC_OP_LINEAR, 2, in, NULL, 5));
  compile(b);
}

/* y = a . b per batch item: a [batch, M, K], b [batch, K, N]. */
static void build_matmul(built *b, int64_t batch, int64_t m, int64_t n, int64_t k) {
  b_init(b);
  nnc_dim as[3] = {nnc_dim_const(batch), nnc_dim_const(m), nnc_dim_const(k)};
  nnc_dim bs[3] = {nnc_dim_const(batch), nnc_dim_const(k), nnc_dim_const(n)};
  int in[2] = {add_input(b, "a", 3, as), add_input(b, "b", 3, bs)};
  add_output(b, add_node(b, NNC_OP_MATMUL, 2, in, NULL, 5));
  compile(b);
}

/* One op on x [rows, cols]: softmax (a row kernel) or relu (elementwise). */
static void build_unary(built *b, nnc_op op, int64_t rows, int64_t cols) {
  b_init(b);
  nnc_dim xs[2] = {nnc_dim_const(rows), nnc_dim_const(cols)};
  int x = add_input(b, "x", 2, xs);
  nnc_attrs a = {0};
  a.axis = 1;
  add_output(b, add_node(b, op, 1, &x, &a, 5));
  compile(b);
}

static nnc_tile tune_only(const nnc_target_desc *t, built *b, nnc_kernel_kind kind) {
  assert_int_equal(b->s.nk, 1);
  assert_int_equal(b->s.k[0].kind, kind);
  nnc_tile tile;
  nnc_error err = {0};
  if (nnc_tune_kernel(t, &b->s, 0, &tile, &err)) fail_msg("tune: %s", err.msg);
  assert_true(tile.reason[0] != 0);
  return tile;
}

static void expect_gemm(const nnc_tile *t, int mr, int nr, int kc, int mc, int nc, int tn, int tm) {
  assert_int_equal(t->mr, mr);
  assert_int_equal(t->nr, nr);
  assert_int_equal(t->kc, kc);
  assert_int_equal(t->mc, mc);
  assert_int_equal(t->nc, nc);
  assert_int_equal(t->gemm_tn, tn);
  assert_int_equal(t->gemm_tm, tm);
}

/* -------------------------------------------------------- descriptions */

static void test_fixed_simd_targets(void **state) {
  (void)state;
  static const struct { const char *name, *isa; int vw, regs, fma; } want[] = {
    {"c-avx512", "avx512", 16, 32, 2},
    {"c-avx2", "avx2", 8, 16, 2},
    {"c-neon", "neon", 4, 32, 2},
    {"c-generic", "generic", 1, 16, 0},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    nnc_target_desc t;
    nnc_error err = {0};
    assert_int_equal(nnc_target_describe(want[i].name, &t, &err), NNC_OK);
    assert_string_equal(t.name, want[i].name);
    assert_int_equal(t.family, NNC_FAMILY_C_SIMD);
    assert_string_equal(t.isa, want[i].isa);
    assert_int_equal(t.vector_width, want[i].vw);
    assert_int_equal(t.vector_regs, want[i].regs);
    assert_int_equal(t.fma_units, want[i].fma);
    assert_int_equal(t.fma_per_cycle, want[i].fma * want[i].vw);
    /* the caches and cores are the host's, whatever the ISA */
    nnc_target_desc host = describe("c-simd");
    assert_int_equal(t.l1d, host.l1d);
    assert_int_equal(t.l2, host.l2);
    assert_int_equal(t.l3, host.l3);
    assert_int_equal(t.cores, host.cores);
    assert_ptr_equal(nnc_target_for_isa(want[i].isa)->name, t.name);
  }
  assert_null(nnc_target_for_isa("sse9"));
  assert_null(nnc_target_for_isa(NULL));
}

static void test_host_detection(void **state) {
  (void)state;
  nnc_target_desc t;
  nnc_error err = {0};
  assert_int_equal(nnc_target_describe("c-simd", &t, &err), NNC_OK);
  assert_string_equal(t.name, "c-simd");
  /* the detected ISA is one of the fixed targets', with its numbers */
  const nnc_target_info *fixed = nnc_target_for_isa(t.isa);
  assert_non_null(fixed);
  assert_int_equal(t.vector_width, fixed->vector_width);
  assert_int_equal(t.vector_regs, fixed->vector_regs);
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) assert_string_equal(t.isa, "avx512");
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) assert_string_equal(t.isa, "avx2");
  else assert_string_equal(t.isa, "generic");
#elif defined(__aarch64__)
  assert_string_equal(t.isa, "neon");
#endif
  assert_int_equal(t.cores, (int)sysconf(_SC_NPROCESSORS_ONLN));
  /* caches are real sizes or the fallbacks, never 0 or absurd */
  assert_true(t.l1d >= KIB(4) && t.l1d <= MIB(4));
  assert_true(t.l2 >= KIB(64) && t.l2 <= MIB(512));
  assert_true(t.l3 >= KIB(64) && t.l3 <= (int64_t)1 << 34);
  long sc = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  if (sc > 0) assert_int_equal(t.l1d, sc);
}

static void test_unknown_targets(void **state) {
  (void)state;
  nnc_target_desc t;
  nnc_error err = {0};
  assert_int_equal(nnc_target_describe("cuda-sm42", &t, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "unknown target \"cuda-sm42\"; known: c-simd, c-avx512"));
  assert_non_null(strstr(err.msg, "cuda-sm90a"));
  assert_non_null(strstr(err.msg, "opencl-cpu"));
  assert_int_equal(nnc_target_describe("", &t, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "unknown target \"\""));
  assert_int_equal(nnc_target_describe(NULL, &t, &err), NNC_E_TARGET);
  assert_int_equal(nnc_target_describe("cuda-sm70", &t, &err), NNC_OK);
  assert_int_equal(t.family, NNC_FAMILY_CUDA);
  assert_int_equal(t.cuda.last_cuda, 12);   /* CUDA 13 dropped Volta */
  assert_int_equal(nnc_target_describe("cuda-sm75", &t, &err), NNC_OK);
  assert_int_equal(t.cuda.last_cuda, 0);
  /* the list names every family */
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  nnc_targets_print(f);
  fclose(f);
  assert_non_null(strstr(buf, "c-avx2       C with AVX2 and FMA\n"));
  assert_non_null(strstr(buf, "cuda-sm90    CUDA, Hopper (H100, H200)\n"));
  assert_non_null(strstr(buf, "cuda-sm70    CUDA, Volta (V100): f32 and f16; builds with CUDA 12"));
  assert_non_null(strstr(buf, "opencl-gpu"));
  free(buf);
}

static void test_cuda_table(void **state) {
  (void)state;
  nnc_target_desc a = describe("cuda-sm80");
  assert_string_equal(a.isa, "sm_80");
  assert_int_equal(a.cuda.sm, 80);
  assert_int_equal(a.cuda.smem_per_sm, KIB(164));
  assert_int_equal(a.cuda.smem_per_block_optin, KIB(163));
  assert_int_equal(a.cuda.smem_per_block, KIB(48));
  assert_int_equal(a.cuda.regs_per_sm, 65536);
  assert_int_equal(a.cuda.regs_per_thread, 255);
  assert_int_equal(a.cuda.max_warps_per_sm, 64);
  assert_int_equal(a.cuda.max_blocks_per_sm, 32);
  assert_int_equal(a.cores, 108);
  assert_int_equal(a.l2, MIB(40));
  assert_int_equal(a.fma_per_cycle, 64);
  assert_true(a.cuda.ldmatrix && a.cuda.cp_async && !a.cuda.tma && !a.cuda.wgmma_ok);
  assert_int_equal(a.cuda.nwgmma, 0);
  assert_string_equal(a.cuda.mma[0].ab, "f16");
  assert_int_equal(a.cuda.mma[0].m, 16);
  assert_int_equal(a.cuda.mma[0].n, 8);
  assert_int_equal(a.cuda.mma[0].k, 16);
  assert_string_equal(a.cuda.mma[2].ab, "tf32");
  assert_int_equal(a.cuda.mma[2].k, 8);

  nnc_target_desc h = describe("cuda-sm90");
  assert_int_equal(h.cuda.smem_per_sm, KIB(228));
  assert_int_equal(h.cuda.smem_per_block_optin, KIB(227));
  assert_int_equal(h.cuda.max_warps_per_sm, 64);
  assert_int_equal(h.cores, 132);
  assert_int_equal(h.l2, MIB(50));
  assert_int_equal(h.fma_per_cycle, 128);
  assert_true(h.cuda.tma && h.cuda.cp_async && !h.cuda.wgmma_ok);
  assert_int_equal(h.cuda.nwgmma, 0);
  nnc_target_desc ha = describe("cuda-sm90a");
  assert_true(ha.cuda.wgmma_ok);
  assert_int_equal(ha.cuda.nwgmma, 5);
  assert_int_equal(ha.cuda.wgmma[0].m, 64);
  assert_int_equal(ha.cuda.wgmma[0].n, 256);
  assert_int_equal(ha.cuda.wgmma[0].k, 16);

  nnc_target_desc v = describe("cuda-sm70"), tu = describe("cuda-sm75");
  nnc_target_desc g = describe("cuda-sm86"), ad = describe("cuda-sm89");
  assert_int_equal(v.cuda.smem_per_sm, KIB(96));
  assert_true(!v.cuda.ldmatrix && !v.cuda.cp_async);
  assert_int_equal(v.cuda.mma[0].m * 100 + v.cuda.mma[0].n * 10 + v.cuda.mma[0].k, 884);
  assert_int_equal(tu.cuda.smem_per_sm, KIB(64));
  assert_int_equal(tu.cuda.max_warps_per_sm, 32);
  assert_int_equal(tu.cuda.max_blocks_per_sm, 16);
  assert_true(tu.cuda.ldmatrix && !tu.cuda.cp_async);
  assert_int_equal(g.cuda.smem_per_sm, KIB(100));
  assert_int_equal(g.cuda.smem_per_block_optin, KIB(99));
  assert_int_equal(g.cuda.max_warps_per_sm, 48);
  assert_int_equal(g.fma_per_cycle, 128);
  assert_int_equal(ad.cuda.max_blocks_per_sm, 24);
  assert_string_equal(ad.cuda.mma[ad.cuda.nmma - 1].ab, "e4m3");
}

static void test_opencl_classes(void **state) {
  (void)state;
  nnc_target_desc gpu = describe("opencl-gpu"), any = describe("opencl"), cpu = describe("opencl-cpu");
  nnc_target_desc host = describe("c-simd");
  assert_int_equal(gpu.family, NNC_FAMILY_OPENCL);
  assert_int_equal(gpu.opencl.device, NNC_DEVICE_GPU);
  assert_int_equal(gpu.opencl.local_mem, KIB(32));
  assert_int_equal(gpu.opencl.max_work_group, 256);
  assert_int_equal(gpu.opencl.preferred_vector_width, 1);
  assert_int_equal(any.opencl.device, NNC_DEVICE_GPU);
  assert_int_equal(cpu.opencl.device, NNC_DEVICE_CPU);
  assert_int_equal(cpu.opencl.compute_units, host.cores);
  assert_int_equal(cpu.opencl.local_mem, host.l2);
  assert_int_equal(cpu.opencl.preferred_vector_width, host.vector_width);
}

/* ------------------------------------------------------------ C SIMD GEMM */

/* AVX2, L1d 32 KiB, L2 512 KiB, L3 12 MiB, 2 cores:
 *   kc = 32768*3/4 / (4*(6+16)) = 24576/88 = 279 -> multiple of 32: 256
 *   mc = 524288/4 / (4*256) = 128 -> multiple of 6: 126
 *   nc = 12 MiB/2/2 cores / (4*256) = 3072 (a multiple of 16, under 4096) */
static void test_gemm_avx2(void **state) {
  (void)state;
  nnc_target_desc t = simd("c-avx2", KIB(32), KIB(512), MIB(12), 2);
  built b;
  /* GPT-2's MLP at 1024 rows: K 768 > kc, M and N above mc and nc.
   * tasks: 8 wanted; N blocks 192, tn = min(192/4, 8) = 8, width
   * ceil(192/8)*16 = 384, tn = 3072/384 = 8; tm = ceil(8/8) = 1 */
  build_linear(&b, 1024, 3072, 768, false);
  nnc_tile g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 6, 16, 256, 126, 3072, 8, 1);
  assert_int_equal(g.threads, 2);
  assert_non_null(strstr(g.reason, "kc=256"));
  assert_non_null(strstr(g.reason, "6x16 register block (15 of 16 vector registers)"));
  b_free(&b);
  /* odd sizes under the blocks: M=37 -> mc 42 (round up to 6), N=53 -> nc 64,
   * K=100 -> kc 100; tasks: M is one MC block, so N splits to single panels:
   * N blocks 4, tn = min(4, 8) = 4, width 16; tm = ceil(min(8, 2 threads) / 4)
   * = 1 (a second row block would pack B again) */
  build_linear(&b, 37, 53, 100, false);
  g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 6, 16, 100, 42, 64, 4, 1);
  b_free(&b);
  /* M symbolic: sized at its maximum 301 -> mc = min(round_up(301, 6) = 306, 126) */
  build_linear(&b, 301, 17, 33, true);
  g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  assert_int_equal(g.mc, 126);
  assert_int_equal(g.nc, 32);
  assert_int_equal(g.kc, 33);
  assert_non_null(strstr(g.reason, "M=301 N=17 K=33"));
  b_free(&b);
}

/* Tiny GEMM M=3, N=5, K=7: every block is clamped to the problem, one task. */
static void test_gemm_tiny(void **state) {
  (void)state;
  built b;
  build_linear(&b, 3, 5, 7, false);
  nnc_target_desc avx2 = simd("c-avx2", KIB(32), KIB(512), MIB(12), 2);
  nnc_tile g = tune_only(&avx2, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 6, 16, 7, 6, 16, 1, 1);
  nnc_target_desc gen = simd("c-generic", KIB(32), KIB(256), MIB(4), 1);
  g = tune_only(&gen, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 4, 4, 7, 4, 8, 1, 1);
  nnc_target_desc avx512 = simd("c-avx512", KIB(48), MIB(2), MIB(32), 8);
  g = tune_only(&avx512, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 12, 32, 7, 12, 32, 1, 1);
  b_free(&b);
}

/* AVX-512, L1d 48 KiB, L2 2 MiB, L3 32 MiB, 8 cores:
 *   kc = 36864 / (4*(12+32)) = 209 -> 192
 *   mc = 524288 / (4*192) = 682 -> multiple of 12: 672
 *   nc = 32 MiB/2/8 / (4*192) = 2730 -> multiple of 32: 2720
 * M=512, N=768, K=768: kc 192, mc = round_up(512, 12) = 516, nc 768.
 * tasks: 32 wanted; M is one MC block: N blocks 24, tn = min(24, 32) = 24,
 * width 32; tm = ceil(min(32, 8 threads) / 24) = 1 */
static void test_gemm_avx512(void **state) {
  (void)state;
  nnc_target_desc t = simd("c-avx512", KIB(48), MIB(2), MIB(32), 8);
  built b;
  build_linear(&b, 512, 768, 768, false);
  nnc_tile g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 12, 32, 192, 516, 768, 24, 1);
  b_free(&b);
  /* M=4000, N=5000, K=3000: every block at the cache bound. tasks: N blocks
   * 157, tn = min(157/4, 32) = 32, width ceil(157/32)*32 = 160, tn =
   * ceil(5000/160) = 32; tm = ceil(32/32) = 1 */
  build_linear(&b, 4000, 5000, 3000, false);
  g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 12, 32, 192, 672, 2720, 32, 1);
  b_free(&b);
  /* MNIST's conv2 at B=64 (M=36864, N=64, K=288) reading its windows in
   * place: kc = 49152*3/4 / (4*32) = 288 (B's micro-panel alone in L1), mc
   * = 524288 / (4*288) = 455 -> 444, nc = round_up(64, 32) = 64; tasks: 2
   * N blocks, tn 1; tm = 32 of 3072 row blocks, width 96*12 = 1152, tm 32.
   * As a plain GEMM: kc 192, mc 672. */
  build_linear(&b, 36864, 64, 288, false);
  b.s.k[0].d.gemm.windowed = true;
  g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 12, 32, 288, 444, 64, 1, 32);
  assert_non_null(strstr(g.reason, "windowed gemm"));
  b.s.k[0].d.gemm.windowed = false;
  g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 12, 32, 192, 672, 64, 1, 32);
  b_free(&b);
}

/* NEON, L1d 64 KiB, L2 1 MiB, L3 32 MiB, 4 cores:
 *   kc = 49152 / (4*(8+12)) = 614 -> 608
 *   mc = 262144 / (4*608) = 107 -> multiple of 8: 104
 *   nc = 32 MiB/2/4 / (4*608) = 1724 -> multiple of 12: 1716
 * batched matmul, 4 items of M=100, N=200, K=300: kc 300, mc = round_up(100, 8) = 104,
 * nc = round_up(200, 12) = 204; tasks: 16 wanted, 4 an item; N blocks 17,
 * tn = 17/4 = 4, width 5*12 = 60, tn = ceil(200/60) = 4; tm = 1 */
static void test_gemm_neon_batched(void **state) {
  (void)state;
  nnc_target_desc t = simd("c-neon", KIB(64), MIB(1), MIB(32), 4);
  built b;
  build_matmul(&b, 4, 100, 200, 300);
  nnc_tile g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 8, 12, 300, 104, 204, 4, 1);
  assert_non_null(strstr(g.reason, "K=300 batch=4:"));
  b_free(&b);
}

/* generic, L1d 32 KiB, L2 256 KiB, L3 4 MiB, 1 core:
 *   kc = 24576 / (4*8) = 768; mc = 65536 / (4*768) = 21 -> 20;
 *   nc = 4 MiB/2 / (4*768) = 682 -> 680.  M=37, N=53, K=1001: kc 768, mc 20, nc 56. */
static void test_gemm_generic(void **state) {
  (void)state;
  nnc_target_desc t = simd("c-generic", KIB(32), KIB(256), MIB(4), 1);
  built b;
  build_linear(&b, 37, 53, 1001, false);
  nnc_tile g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 4, 4, 768, 20, 56, 1, 1);
  b_free(&b);
}

/* Caches too small for the rules' floors: kc stays 32, mc MR, nc NR. */
static void test_gemm_tiny_caches(void **state) {
  (void)state;
  nnc_target_desc t = simd("c-avx2", KIB(1), KIB(1), 0, 1);
  built b;
  build_linear(&b, 64, 64, 64, false);
  nnc_tile g = tune_only(&t, &b, NNC_KERNEL_GEMM);
  expect_gemm(&g, 6, 16, 32, 6, 16, 1, 1);
  b_free(&b);
}

/* ------------------------------------------------ rows and elementwise */

static void test_rows(void **state) {
  (void)state;
  built b;
  /* L2 512 KiB: a task's floor is 64 KiB = 16384 elements. softmax [300, 1001]:
   * by size ceil(16384/1001) = 17 rows, by threads ceil(300/(4*2)) = 38: 38 */
  nnc_target_desc t = simd("c-avx2", KIB(32), KIB(512), MIB(12), 2);
  build_unary(&b, NNC_OP_SOFTMAX, 300, 1001);
  nnc_tile r = tune_only(&t, &b, NNC_KERNEL_ROW);
  assert_int_equal(r.row_min_elems, 16384);
  assert_int_equal(r.row_block, 38);
  /* L2 128 KiB: an eighth is 16 KiB, under the 32 KiB floor: 8192 elements;
   * 8 cores: by size ceil(8192/1001) = 9, by threads ceil(300/32) = 10 */
  nnc_target_desc small = simd("c-avx2", KIB(32), KIB(128), MIB(8), 8);
  r = tune_only(&small, &b, NNC_KERNEL_ROW);
  assert_int_equal(r.row_min_elems, 8192);
  assert_int_equal(r.row_block, 10);
  /* one core: all rows in one task */
  nnc_target_desc one = simd("c-avx2", KIB(32), KIB(512), MIB(12), 1);
  r = tune_only(&one, &b, NNC_KERNEL_ROW);
  assert_int_equal(r.row_block, 300);
  b_free(&b);
  /* 5 rows of 1001: fewer than the floor's 17, so one task of 5 */
  build_unary(&b, NNC_OP_SOFTMAX, 5, 1001);
  r = tune_only(&t, &b, NNC_KERNEL_ROW);
  assert_int_equal(r.row_block, 5);
  b_free(&b);
  /* a single empty-ish row: 1 x 1 */
  build_unary(&b, NNC_OP_SOFTMAX, 1, 1);
  r = tune_only(&t, &b, NNC_KERNEL_ROW);
  assert_int_equal(r.row_block, 1);
  b_free(&b);
}

static void test_elementwise(void **state) {
  (void)state;
  built b;
  /* relu on 1001 x 33 = 33033 elements, 2 cores: ceil(33033/8) = 4130 is
   * under the 16384 floor, so 16384 (whole vectors of 8): 3 tasks */
  nnc_target_desc t = simd("c-avx2", KIB(32), KIB(512), MIB(12), 2);
  build_unary(&b, NNC_OP_RELU, 1001, 33);
  nnc_tile e = tune_only(&t, &b, NNC_KERNEL_ELEMENTWISE);
  assert_int_equal(e.ew_chunk, 16384);
  assert_non_null(strstr(e.reason, "(3 tasks for 2 threads)"));
  b_free(&b);
  /* 3000 x 1001 = 3003000 elements: ceil(3003000/8) = 375375 -> round up to 8: 375376 */
  build_unary(&b, NNC_OP_RELU, 3000, 1001);
  e = tune_only(&t, &b, NNC_KERNEL_ELEMENTWISE);
  assert_int_equal(e.ew_chunk, 375376);
  b_free(&b);
  /* 7 elements: one task of 7 */
  build_unary(&b, NNC_OP_RELU, 7, 1);
  e = tune_only(&t, &b, NNC_KERNEL_ELEMENTWISE);
  assert_int_equal(e.ew_chunk, 7);
  b_free(&b);
}

/* ------------------------------------------------------------ GPU rules */

static void test_cuda_gemm(void **state) {
  (void)state;
  built b;
  build_linear(&b, 1024, 3072, 768, false);
  /* sm80: 128x128 gives 8*24 = 192 blocks >= 108 SMs; a stage is
   * (128+128)*32*4 = 32 KiB; 163 KiB holds 5, capped at 4; 256 threads */
  nnc_target_desc a = describe("cuda-sm80");
  nnc_tile g = tune_only(&a, &b, NNC_KERNEL_GEMM);
  assert_int_equal(g.block_m, 128);
  assert_int_equal(g.block_n, 128);
  assert_int_equal(g.block_k, 32);
  assert_int_equal(g.stages, 4);
  assert_int_equal(g.warps, 8);
  /* sm86: 99 KiB holds 3 stages; sm75 has no cp.async: 2 */
  nnc_target_desc ga = describe("cuda-sm86"), tu = describe("cuda-sm75");
  assert_int_equal(tune_only(&ga, &b, NNC_KERNEL_GEMM).stages, 3);
  assert_int_equal(tune_only(&tu, &b, NNC_KERNEL_GEMM).stages, 2);
  b_free(&b);
  /* M=200, N=300 on sm90 (132 SMs): 128x128 2*3 = 6, 128x64 2*5 = 10,
   * 64x64 4*5 = 20, 32x32 7*10 = 70 blocks: none fills the SMs, the smallest;
   * 32*32/64 = 16 threads, raised to 64 (2 warps) */
  build_linear(&b, 200, 300, 64, false);
  nnc_target_desc h = describe("cuda-sm90");
  g = tune_only(&h, &b, NNC_KERNEL_GEMM);
  assert_int_equal(g.block_m, 32);
  assert_int_equal(g.block_n, 32);
  assert_int_equal(g.warps, 2);
  b_free(&b);
  /* 2048 x 1000 on sm90: 128x128 16*8 = 128 < 132; 128x64 16*16 = 256: 128x64, 128 threads */
  build_linear(&b, 2048, 1000, 64, false);
  g = tune_only(&h, &b, NNC_KERNEL_GEMM);
  assert_int_equal(g.block_m, 128);
  assert_int_equal(g.block_n, 64);
  assert_int_equal(g.group, 128);
  b_free(&b);
}

static void test_opencl_gemm(void **state) {
  (void)state;
  built b;
  /* GPU: 16x16 items x 4x4 = 64x64 of C (16*48 = 768 groups >= 16 units);
   * bk = 32 KiB/2 / ((64+64)*4) = 32 */
  build_linear(&b, 1024, 3072, 768, false);
  nnc_target_desc g = describe("opencl-gpu");
  nnc_tile t = tune_only(&g, &b, NNC_KERNEL_GEMM);
  assert_int_equal(t.block_m, 64);
  assert_int_equal(t.block_n, 64);
  assert_int_equal(t.block_k, 32);
  assert_int_equal(t.group, 256);
  b_free(&b);
  /* 3 x 5 x 7: 1 group < 16 units, so 2x2 an item (32x32); bk = 16384/256 = 64,
   * clamped to K rounded up to 8: 8 */
  build_linear(&b, 3, 5, 7, false);
  t = tune_only(&g, &b, NNC_KERNEL_GEMM);
  assert_int_equal(t.block_m, 32);
  assert_int_equal(t.block_k, 8);
  b_free(&b);
}

/* ------------------------------------------- every kernel of a model */

static void load_gpt2(nnc_graph *g, nnc_schedule *s) {
  static const char *const defs[] = {"layers=1", "heads=4", "d=60", "vocab=101", "ctx=37", "batch=3"};
  nnc_frontend_opts o = {.path = NNC_SOURCE_ROOT "/models/gpt2.lua", .defines = defs, .ndefines = 6};
  nnc_error err = {0};
  nnc_graph_init(g);
  nnc_schedule_init(s, g);
  if (nnc_frontend_load(&o, g, &err)) fail_msg("gpt2: %s", err.msg);
  if (nnc_compile_graph(g, s, &err)) fail_msg("gpt2: %s", err.msg);
}

static void test_every_kernel_gets_a_tile(void **state) {
  (void)state;
  nnc_graph g;
  nnc_schedule s;
  load_gpt2(&g, &s);
  assert_true(s.nk > 3);
  static const char *const names[] = {"c-simd", "c-avx2", "c-avx512", "c-neon", "c-generic", "cuda-sm70",
                                      "cuda-sm75", "cuda-sm80", "cuda-sm86", "cuda-sm89", "cuda-sm90",
                                      "cuda-sm90a", "opencl", "opencl-gpu", "opencl-cpu"};
  int gemms = 0, attns = 0;
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    nnc_target_desc t = describe(names[n]);
    for (int k = 0; k < s.nk; k++) {
      nnc_tile tile;
      nnc_error err = {0};
      if (nnc_tune_kernel(&t, &s, k, &tile, &err)) fail_msg("%s #%d: %s", names[n], k, err.msg);
      assert_true(strlen(tile.reason) > 10);
      const nnc_kernel *kn = &s.k[k];
      if (kn->kind == NNC_KERNEL_GEMM && t.family == NNC_FAMILY_C_SIMD) {
        gemms++;
        assert_true(tile.mr > 0 && tile.nr % t.vector_width == 0);
        assert_int_equal(tile.mc % tile.mr, 0);
        assert_int_equal(tile.nc % tile.nr, 0);
        assert_true(tile.kc >= 1 && tile.gemm_tn >= 1 && tile.gemm_tm >= 1);
      }
      if (kn->kind == NNC_KERNEL_GEMM && t.family != NNC_FAMILY_C_SIMD)
        assert_true(tile.block_m > 0 && tile.block_n > 0 && tile.block_k > 0 && tile.group > 0);
      if (kn->kind == NNC_KERNEL_ATTENTION) {
        attns++;
        assert_true(tile.attn_bq > 0 && tile.attn_bk > 0);
      }
      if (kn->kind == NNC_KERNEL_ROW && t.family == NNC_FAMILY_C_SIMD) assert_true(tile.row_block >= 1);
    }
  }
  assert_true(gemms > 0);
  assert_true(attns > 0);
  nnc_tile tile;
  nnc_error err = {0};
  nnc_target_desc t = describe("c-avx2");
  assert_int_equal(nnc_tune_kernel(&t, &s, s.nk, &tile, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "expected a kernel index"));
  assert_int_equal(nnc_tune_kernel(&t, &s, -1, &tile, &err), NNC_E_INTERNAL);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

/* The LSTM forecaster (B 64, T 48, 8 features, hidden 64, 2 layers), its
 * scans with their input projections taken (scan_input) or not. AVX-512, L1d
 * 48 KiB, L2 1 MiB, L3 32 MiB, 2 cores: a task's rows ceil(64/2) = 32, which
 * 8 x 32 blocks cover exactly (12 would compute 36): mr 8;
 *   kc = 36864 / (4*(8+32)) = 230 -> 224, so K = 8 + 64 = 72 (layer 0) and
 *   64 + 64 = 128 (layer 1) in one pass; 64 without the projections;
 *   mc = round_up(32, 8) = 32 (under 262144 / (4*224) = 292 -> 288);
 *   nc = round_up(256, 32) = 256; one task (the step GEMM runs on its thread).
 * 3 cores: ceil(64/3) = 22 rows, 24 either way: the longer block, 12; mc 24. */
static void test_scan(void **state) {
  (void)state;
  for (int fold = 0; fold < 2; fold++) {
    nnc_graph g;
    nnc_schedule s;
    nnc_frontend_opts o = {.path = NNC_SOURCE_ROOT "/models/lstm_forecast.lua"};
    nnc_compile_opts co = {.scan_input = fold == 1};
    nnc_error err = {0};
    nnc_graph_init(&g);
    nnc_schedule_init(&s, &g);
    if (nnc_frontend_load(&o, &g, &err)) fail_msg("lstm_forecast: %s", err.msg);
    if (nnc_compile_graph_for(&g, &co, &s, &err)) fail_msg("lstm_forecast: %s", err.msg);
    nnc_target_desc two = simd("c-avx512", KIB(48), MIB(1), MIB(32), 2), three = two;
    three.cores = 3;
    int scans = 0;
    for (int k = 0; k < s.nk; k++) {
      const nnc_kernel *kn = &s.k[k];
      if (g.nodes[kn->nodes[kn->nnodes - 1]].op != NNC_OP_LSTM_SCAN) continue;
      assert_int_equal(kn->nnodes, fold ? 2 : 1);
      nnc_tile t;
      if (nnc_tune_kernel(&two, &s, k, &t, &err)) fail_msg("tune: %s", err.msg);
      expect_gemm(&t, 8, 32, fold ? (scans ? 128 : 72) : 64, 32, 256, 1, 1);
      assert_non_null(strstr(t.reason, "scan of 48 steps"));
      if (nnc_tune_kernel(&three, &s, k, &t, &err)) fail_msg("tune: %s", err.msg);
      expect_gemm(&t, 12, 32, fold ? (scans ? 128 : 72) : 64, 24, 256, 1, 1);
      scans++;
    }
    assert_int_equal(scans, 2);
    nnc_schedule_free(&s);
    nnc_graph_free(&g);
  }
}

/* The attention of the small GPT-2: T = S = 37, D = Dv = 15, 3*4 = 12 heads,
 * causal. AVX2 (NR 16), L2 512 KiB, 2 cores: bq 32 (12*2 = 24 tasks >= 8);
 * bk = S rounded up to 16 = 48, under the causal cap 64 and the L2 fit
 * 262144 / (4*30) = 2184 -> 2176. sm80: D <= 64: bq 128, halved while 12*ceil(37/bq)
 * < 108 down to 16 (36 blocks), bk 64. */
static void test_attention(void **state) {
  (void)state;
  nnc_graph g;
  nnc_schedule s;
  load_gpt2(&g, &s);
  int a = -1;
  for (int k = 0; k < s.nk; k++)
    if (s.k[k].kind == NNC_KERNEL_ATTENTION) a = k;
  assert_true(a >= 0);
  nnc_error err = {0};
  nnc_tile tile;
  nnc_target_desc t = simd("c-avx2", KIB(32), KIB(512), MIB(12), 2);
  assert_int_equal(nnc_tune_kernel(&t, &s, a, &tile, &err), NNC_OK);
  assert_int_equal(tile.attn_bq, 32);
  assert_int_equal(tile.attn_bk, 48);
  nnc_target_desc c = describe("cuda-sm80");
  assert_int_equal(nnc_tune_kernel(&c, &s, a, &tile, &err), NNC_OK);
  assert_int_equal(tile.attn_bq, 16);
  assert_int_equal(tile.attn_bk, 64);
  assert_int_equal(tile.warps, 1);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

static void test_explain(void **state) {
  (void)state;
  nnc_graph g;
  nnc_schedule s;
  load_gpt2(&g, &s);
  static const char *const names[] = {"c-avx2", "cuda-sm90a", "opencl-cpu"};
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    nnc_target_desc t = describe(names[n]);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nnc_error err = {0};
    assert_int_equal(nnc_tune_explain_all(f, &t, &s, &err), NNC_OK);
    fclose(f);
    /* the target line, then one line per kernel naming its Lua line */
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, s.nk + 1);
    char want[64];
    snprintf(want, sizeof want, "target %s: ", names[n]);
    assert_true(strncmp(buf, want, strlen(want)) == 0);
    assert_non_null(strstr(buf, "gpt2.lua:"));
    if (n == 1) assert_non_null(strstr(buf, "wgmma"));
    free(buf);
  }
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fixed_simd_targets),
    cmocka_unit_test(test_host_detection),
    cmocka_unit_test(test_unknown_targets),
    cmocka_unit_test(test_cuda_table),
    cmocka_unit_test(test_opencl_classes),
    cmocka_unit_test(test_gemm_avx2),
    cmocka_unit_test(test_gemm_tiny),
    cmocka_unit_test(test_gemm_avx512),
    cmocka_unit_test(test_scan),
    cmocka_unit_test(test_gemm_neon_batched),
    cmocka_unit_test(test_gemm_generic),
    cmocka_unit_test(test_gemm_tiny_caches),
    cmocka_unit_test(test_rows),
    cmocka_unit_test(test_elementwise),
    cmocka_unit_test(test_cuda_gemm),
    cmocka_unit_test(test_opencl_gemm),
    cmocka_unit_test(test_every_kernel_gets_a_tile),
    cmocka_unit_test(test_attention),
    cmocka_unit_test(test_explain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
