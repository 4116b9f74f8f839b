/* templates/c_simd/gemm.c — the blocked GEMM driver (GotoBLAS/BLIS order).
 *
 * Two parallel phases:
 *  1. pack: every row block of A (per batch item) gets its prologue
 *     statistics and is packed, for all of K (or one KC pass a task, without
 *     a prologue), into MR-row micro-panels in the shared workspace. A is
 *     packed once, whatever the task split.
 *  2. compute: tasks are (batch item, column block, row block) rectangles of
 *     C; each packs its KC x NC panels of B into its thread's buffer and
 *     runs the loops  jc (NC) > pc (KC) > ic (MC) > jr (NR) > ir (MR)
 *     around the micro-kernel, applying the epilogue on the last pc.
 *  Tasks split N first (no B is packed twice), and M only when N alone
 *  gives too few tasks; about four tasks per thread balance the load. When
 *  M is a single MC block, N is split into as narrow blocks as that takes
 *  and M only until each thread has a task.
 *
 * When every task spans all of N within one NC panel (tall, narrow C: a
 * convolution's im2col rows, a scan's step) no row of A is used twice, and
 * phase 1 is skipped: each task packs its MC x KC blocks of A at the ic loop
 * into its thread's buffer, which stays in L2 instead of a packed copy of
 * all of A written to memory and read back. That needs no prologue (its
 * statistics span all of K).
 *
 * An int8 B (b_q8, gemm_q8.c) is already in panels: a task of few rows
 * reads it in place through the int8 micro-kernel, one of many rows widens
 * each KC x NC block into its B buffer where an f32 B would be packed.
 * An int4 B (b_q4, gemm_q4.c) is read the same way, two weights a byte.
 * A W8A8 B (b_w8a8) goes to its own driver (gemm_w8a8.c): its A is packed
 * as int8, its sums are int32, and it needs no KC passes.
 *
 * Workspace: [packed A: batch*Mp*K, or nothing when packed by tasks][per
 * thread: a B panel KC x min(NC, task width) (none with b_packed), then an
 * MC x KC block of A when packed by tasks], Mp = M rounded up to MR. */
#include "gemm_internal.h"

#include <math.h>
#include <string.h>

static const char *const KERNEL = "nnc_simd_gemm";

typedef struct plan {
  int mp;            /* M rounded up to MR */
  int kc;            /* the deepest pass (kc_at), at least 1 */
  int tn, tm;        /* column and row blocks per batch item */
  int nw, mw;        /* their widths: multiples of NR and of MR */
  int ntasks;
  int local_a;       /* tasks pack their own blocks of A (one column block of NC, no prologue) */
  size_t packa_floats, bbuf_floats, abuf_floats, cbuf_floats;  /* each rounded to 16 */
} plan;

static int ceil_div(int a, int b) { return (a + b - 1) / b; }
static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* The depth of the pass that starts at pc: KC, or all that is left when that
 * is at most a quarter more (K = 288, a 3 x 3 x 32 convolution's, in one
 * pass of 288 rather than 256 + 32: the second pass reloads and stores
 * every C tile for 32 steps, ~8% of that GEMM; a 288-deep B micro-panel,
 * 18 KiB, still fits L1). */
static int kc_at(int K, int pc) {
  int rest = K - pc;
  return rest <= NNC_GEMM_KC + NNC_GEMM_KC / 4 ? rest : NNC_GEMM_KC;
}

/* The fewest flops a task is given: waking the pool's threads costs 10-40
 * us on a 2-core VM (a Zen 5 one, session 38: the forecaster's 32 kflop
 * head took 45 us on two threads, 3.7 on one), a MFLOP's work. */
#define NNC_GEMM_MIN_TASK_FLOPS (1 << 20)

static plan make_plan(const nnc_simd_gemm_args *g, int nthreads) {
  plan p;
  int batch = g->batch > 0 ? g->batch : 1;
  int M = imax(g->M, 0), N = imax(g->N, 0), K = imax(g->K, 0);
  p.mp = ceil_div(M, NNC_GEMM_MR) * NNC_GEMM_MR;
  p.kc = imax(1, imin(NNC_GEMM_KC + NNC_GEMM_KC / 4, K));   /* the deepest kc_at */
  const double flops = 2.0 * batch * (double)M * N * K;
  int target = nthreads > 1 ? 4 * nthreads : 1;
  if (flops < (double)target * NNC_GEMM_MIN_TASK_FLOPS)
    target = imax(1, (int)(flops / NNC_GEMM_MIN_TASK_FLOPS));
  int per_item = imax(1, ceil_div(target, batch));
  int nblk = imax(1, ceil_div(N, NNC_GEMM_NR));
  int mblk = imax(1, ceil_div(M, NNC_GEMM_MR));
  if (M <= NNC_GEMM_MC) {
    /* All of M is one row block, whose packed A every task reads from the
     * caches: N is split down to single panels if need be (a task packs its
     * columns of B only), and M only so that each thread gets a task, as
     * every row block packs all of its columns of B again (the MNIST CNN's
     * fc1, M 64, N 128, K 9216, packed its 4.7 MB B six times: 2.4 ms). */
    p.tn = imax(1, imin(per_item, nblk));
    p.nw = ceil_div(nblk, p.tn) * NNC_GEMM_NR;
    p.tn = imax(1, ceil_div(N, p.nw));
    p.tm = imin(imax(1, ceil_div(imin(target, nthreads), batch * p.tn)), mblk);
  } else {
    /* Keep column blocks at least 4 micro-panels wide where N allows. */
    p.tn = imax(1, imin(per_item, nblk / 4));
    p.nw = ceil_div(nblk, p.tn) * NNC_GEMM_NR;
    p.tn = imax(1, ceil_div(N, p.nw));
    p.tm = imin(imax(1, ceil_div(per_item, p.tn)), mblk);
  }
  p.mw = ceil_div(mblk, p.tm) * NNC_GEMM_MR;
  if (g->pool.KH > 0) {
    /* pooled: a task's rows are whole rows of pool windows (and MR panels),
     * few enough that its result stays in L2 (256 KiB) until it is pooled */
    int unit = g->pool.KH * g->pool.W, step = unit;
    while (step % NNC_GEMM_MR) step += unit;
    int most = imax(step, (65536 / imax(1, imin(p.nw, N))) / step * step);
    p.mw = imin(most, ceil_div(p.mw, step) * step);
  }
  p.tm = imax(1, ceil_div(M, p.mw));
  p.ntasks = batch * p.tn * p.tm;
  p.local_a = p.tn == 1 && p.nw <= NNC_GEMM_NC && g->prologue == NNC_SIMD_PRO_NONE;
  p.packa_floats = p.local_a ? 0 : nnc_simd_round_up((size_t)batch * (size_t)p.mp * (size_t)K, 16);
  p.bbuf_floats = g->b_packed ? 0 : nnc_simd_round_up((size_t)p.kc * (size_t)imin(NNC_GEMM_NC, p.nw), 16);
  p.abuf_floats = p.local_a ? nnc_simd_round_up((size_t)imin(NNC_GEMM_MC, p.mp) * (size_t)p.kc, 16) : 0;
  p.cbuf_floats = g->pool.KH > 0 ? nnc_simd_round_up((size_t)p.mw * (size_t)imin(p.nw, N), 16) : 0;
  return p;
}

size_t nnc_simd_gemm_workspace_bytes(const nnc_simd_gemm_args *g, int nthreads) {
  if (!g) return 0;
  if (g->b_w8a8) return nnc_gemm_w8a8_workspace_bytes(g, nthreads > 0 ? nthreads : 1);
  plan p = make_plan(g, nthreads > 0 ? nthreads : 1);
  size_t threads = (size_t)(nthreads > 0 ? nthreads : 1);
  return NNC_SIMD_ALIGN + sizeof(float) *
         (p.packa_floats + threads * (p.bbuf_floats + p.abuf_floats + p.cbuf_floats));
}

size_t nnc_simd_gemm_packed_b_floats(const nnc_simd_gemm_args *g) {
  return (size_t)ceil_div(imax(g->N, 0), NNC_GEMM_NR) * NNC_GEMM_NR * (size_t)imax(g->K, 0);
}

typedef struct pack_b_job {
  const nnc_simd_gemm_args *g;
  float *dst;
  int panels_a_task;
} pack_b_job;

static void pack_b_task(void *ctx, int task, int thread) {
  (void)thread;
  const pack_b_job *jb = ctx;
  const int j0 = task * jb->panels_a_task * NNC_GEMM_NR, j1 = imin(jb->g->N, j0 + jb->panels_a_task * NNC_GEMM_NR);
  nnc_gemm_pack_b(jb->g->B, jb->g->ldb, jb->g->b_trans, 0, jb->g->K, j0, j1 - j0,
                  jb->dst + nnc_gemm_packed_b_at(jb->g->K, j0, 0));
}

/* All of B as one K x N block: NR-wide micro-panels of all of K
 * (nnc_gemm_packed_b_at), so the KC-deep part of one starting at pc is
 * contiguous, as compute_task reads it. Panels are independent: the threads
 * take runs of them (a model's weights, hundreds of MB, pack at load). */
void nnc_simd_gemm_pack_b(const nnc_simd_gemm_args *g, const nnc_simd_par *par, float *dst) {
  if (g->N <= 0 || g->K <= 0) return;
  const int panels = ceil_div(g->N, NNC_GEMM_NR), tasks = imin(panels, 4 * nnc_simd_threads(par));
  pack_b_job jb = {g, dst, ceil_div(panels, tasks)};
  nnc_simd_run(par, ceil_div(panels, jb.panels_a_task), pack_b_task, &jb);
}

/* Rows k0.. of each panel are contiguous (nnc_gemm_packed_b_at), so each
 * panel's rows of the part are packed in place. */
void nnc_simd_gemm_pack_b_part(const nnc_simd_gemm_args *g, const float *part, ptrdiff_t ldp, int k0, int kc,
                               float *dst) {
  if (kc <= 0) return;
  for (int j = 0; j < g->N; j += NNC_GEMM_NR)
    nnc_gemm_pack_b(part, ldp, g->b_trans, 0, kc, j, imin(NNC_GEMM_NR, g->N - j),
                    dst + nnc_gemm_packed_b_at(g->K, j, k0));
}

/* Last byte past the end of a batched [M, n] matrix, from its start. */
static size_t span_bytes(int batch, ptrdiff_t stride, int M, ptrdiff_t ld, int n) {
  if (batch <= 0 || M <= 0 || n <= 0) return 0;
  return sizeof(float) * ((size_t)(batch - 1) * (size_t)stride + (size_t)(M - 1) * (size_t)ld +
                          (size_t)n);
}

static nnc_simd_status validate(const nnc_simd_gemm_args *g, const nnc_simd_par *par,
                                void *ws, size_t ws_bytes, nnc_simd_error *err) {
  if (!g) return nnc_simd_fail(err, KERNEL, "expected arguments, found NULL");
  if (g->M < 0 || g->N < 0 || g->K < 0)
    return nnc_simd_fail(err, KERNEL, "expected M, N, K >= 0, found M=%d N=%d K=%d",
                         g->M, g->N, g->K);
  if (g->batch < 1) return nnc_simd_fail(err, KERNEL, "expected batch >= 1, found %d", g->batch);
  if ((unsigned)g->act >= NNC_SIMD_ACT_COUNT)
    return nnc_simd_fail(err, KERNEL, "unknown activation %d", (int)g->act);
  if ((unsigned)g->prologue >= NNC_SIMD_PRO_COUNT)
    return nnc_simd_fail(err, KERNEL, "unknown prologue %d", (int)g->prologue);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (g->M == 0 || g->N == 0) return NNC_SIMD_OK;
  if (!g->C) return nnc_simd_fail(err, KERNEL, "expected an output C, found NULL");
  if (g->K > 0 && (!g->A || !(g->B || g->b_packed || g->b_q8 || g->b_w8a8 || g->b_q4)))
    return nnc_simd_fail(err, KERNEL, "expected inputs A and B for K=%d, found A=%p B=%p",
                         g->K, (const void *)g->A, (const void *)g->B);
  if (g->b_packed && g->batch != 1)
    return nnc_simd_fail(err, KERNEL, "expected batch 1 with a packed B, found %d", g->batch);
  if (g->b_q8 && (g->b_packed || (g->batch != 1 && g->stride_b != 0)))
    return nnc_simd_fail(err, KERNEL, "expected an int8 B without b_packed, shared by the batch (stride_b 0), "
                         "found b_packed %p, batch %d, stride_b %td", (const void *)g->b_packed, g->batch, g->stride_b);
  if (g->b_w8a8 && (g->b_packed || g->b_q8 || (g->batch != 1 && g->stride_b != 0)))
    return nnc_simd_fail(err, KERNEL, "expected a w8a8 B without b_packed or b_q8, shared by the batch (stride_b 0), "
                         "found b_packed %p, b_q8 %p, batch %d, stride_b %td", (const void *)g->b_packed,
                         g->b_q8, g->batch, g->stride_b);
  if (g->b_q4 && (g->b_packed || g->b_q8 || g->b_w8a8 || (g->batch != 1 && g->stride_b != 0)))
    return nnc_simd_fail(err, KERNEL, "expected an int4 B without b_packed, b_q8 or b_w8a8, shared by the batch "
                         "(stride_b 0), found b_packed %p, b_q8 %p, b_w8a8 %p, batch %d, stride_b %td",
                         (const void *)g->b_packed, g->b_q8, g->b_w8a8, g->batch, g->stride_b);
  if (g->K > 0 && g->win.KH == 0 && g->lda < (g->a_trans ? g->M : g->K))
    return nnc_simd_fail(err, KERNEL, "expected lda >= %s=%d, found %td (A is %s)", g->a_trans ? "M" : "K",
                         g->a_trans ? g->M : g->K, g->lda, g->a_trans ? "[K,M]" : "[M,K]");
  if (g->a_trans && g->prologue != NNC_SIMD_PRO_NONE)
    return nnc_simd_fail(err, KERNEL, "expected no prologue with a_trans (it normalises rows of A [M,K]), "
                         "found prologue %d", (int)g->prologue);
  ptrdiff_t brow = g->b_trans ? g->K : g->N;
  if (g->K > 0 && !g->b_packed && !g->b_q8 && !g->b_w8a8 && !g->b_q4 && g->ldb < brow)
    return nnc_simd_fail(err, KERNEL, "expected ldb >= %s=%td (B is %s), found %td",
                         g->b_trans ? "K" : "N", brow, g->b_trans ? "[N,K]" : "[K,N]", g->ldb);
  if (g->ldc < g->N)
    return nnc_simd_fail(err, KERNEL, "expected ldc >= N=%d, found %td", g->N, g->ldc);
  if (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0 || g->stride_r < 0)
    return nnc_simd_fail(err, KERNEL, "expected batch strides >= 0, found a=%td b=%td c=%td r=%td",
                         g->stride_a, g->stride_b, g->stride_c, g->stride_r);
  if (g->batch > 1 && g->stride_c == 0)
    return nnc_simd_fail(err, KERNEL, "expected a nonzero stride_c for batch=%d (outputs "
                         "would overwrite each other)", g->batch);
  if (g->residual) {
    if (g->ldr < g->N)
      return nnc_simd_fail(err, KERNEL, "expected ldr >= N=%d, found %td", g->N, g->ldr);
    if (nnc_simd_overlaps(g->C, span_bytes(g->batch, g->stride_c, g->M, g->ldc, g->N),
                          g->residual, span_bytes(g->batch, g->stride_r, g->M, g->ldr, g->N)))
      return nnc_simd_fail(err, KERNEL, "expected a residual that does not overlap C "
                           "(C accumulates partial sums before the residual is read)");
  }
  if (g->residual_mul && !g->residual)
    return nnc_simd_fail(err, KERNEL, "expected a residual for residual_mul to multiply by, found NULL");
  if ((unsigned)g->aux_mode >= NNC_SIMD_AUX_COUNT)
    return nnc_simd_fail(err, KERNEL, "unknown aux mode %d", (int)g->aux_mode);
  if (g->aux_mode != NNC_SIMD_AUX_NONE) {
    const char *mode = g->aux_mode == NNC_SIMD_AUX_SAVE ? "SAVE" : "ACT_GRAD";
    if (!g->aux || g->ldx < g->N || g->stride_x < 0)
      return nnc_simd_fail(err, KERNEL, "expected aux [M,N] with ldx >= N=%d and stride_x >= 0 for aux mode %s, "
                           "found %p, ldx %td, stride_x %td", g->N, mode, (void *)g->aux, g->ldx, g->stride_x);
    if (g->residual || g->act == NNC_SIMD_ACT_NONE || (g->aux_mode == NNC_SIMD_AUX_ACT_GRAD && g->bias))
      return nnc_simd_fail(err, KERNEL, "expected an activation and no residual%s for aux mode %s, found act %d, "
                           "residual %p, bias %p", g->aux_mode == NNC_SIMD_AUX_ACT_GRAD ? " or bias" : "", mode,
                           (int)g->act, (const void *)g->residual, (const void *)g->bias);
    if (nnc_simd_overlaps(g->C, span_bytes(g->batch, g->stride_c, g->M, g->ldc, g->N),
                          g->aux, span_bytes(g->batch, g->stride_x, g->M, g->ldx, g->N)))
      return nnc_simd_fail(err, KERNEL, "expected aux not to overlap C (C accumulates partial sums first)");
  }
  if (g->win.KH != 0) {
    const nnc_simd_windows *w = &g->win;
    if (nnc_simd_check_windows(w, KERNEL, err)) return NNC_SIMD_E_ARG;
    if ((long long)w->KH * w->KW * w->C != g->K || g->M % (w->OH * w->OW) != 0)
      return nnc_simd_fail(err, KERNEL, "expected K = KH*KW*C = %lld and M a multiple of OH*OW = %d for windows, "
                           "found K=%d M=%d", (long long)w->KH * w->KW * w->C, w->OH * w->OW, g->K, g->M);
    if (g->batch != 1 || g->a_trans || g->a_inplace || g->prologue != NNC_SIMD_PRO_NONE || g->b_q8 || g->b_q4 ||
        g->b_w8a8)
      return nnc_simd_fail(err, KERNEL, "expected windows with batch 1 and without a_trans, a_inplace, a prologue or "
                           "a quantized B, found batch %d, a_trans %d, a_inplace %d, prologue %d, int8/int4/w8a8 B %d",
                           g->batch, g->a_trans, g->a_inplace, (int)g->prologue,
                           !!(g->b_q8 || g->b_q4 || g->b_w8a8));
  }
  if (g->pool.KH != 0) {
    const nnc_simd_windows *w = &g->pool;
    if (w->KH < 1 || w->KW < 1 || w->SH != w->KH || w->SW != w->KW || w->PH || w->PW || w->DH != 1 ||
        w->DW != 1 || w->C != g->N || w->H != w->OH * w->KH || w->W != w->OW * w->KW ||
        (long long)g->M % ((long long)w->H * w->W) != 0)
      return nnc_simd_fail(err, KERNEL, "expected pool windows of stride = kernel, no padding, dilation 1, that tile "
                           "an image of N=%d channels and M=%d pixels, found kernel %dx%d, stride %dx%d, padding "
                           "%dx%d, dilation %dx%d, image %dx%dx%d, positions %dx%d", g->N, g->M, w->KH, w->KW, w->SH,
                           w->SW, w->PH, w->PW, w->DH, w->DW, w->H, w->W, w->C, w->OH, w->OW);
    if (g->batch != 1 || g->residual || g->aux_mode != NNC_SIMD_AUX_NONE)
      return nnc_simd_fail(err, KERNEL, "expected a pooled GEMM of batch 1 without a residual or aux, found batch %d, "
                           "residual %p, aux mode %d", g->batch, (const void *)g->residual, (int)g->aux_mode);
  }
  if (g->prologue != NNC_SIMD_PRO_NONE) {
    if (!g->gamma && g->K > 0)
      return nnc_simd_fail(err, KERNEL, "expected gamma [K=%d] for the %s prologue, found NULL",
                           g->K, g->prologue == NNC_SIMD_PRO_LAYERNORM ? "layernorm" : "rmsnorm");
    if (!(g->eps >= 0.0f))
      return nnc_simd_fail(err, KERNEL, "expected eps >= 0, found %g", (double)g->eps);
  }
  int nthreads = nnc_simd_threads(par);
  size_t need = nnc_simd_gemm_workspace_bytes(g, nthreads);
  if (!ws || ws_bytes < need)
    return nnc_simd_fail(err, KERNEL, "expected a workspace of %zu bytes for %d threads, "
                         "found %zu at %p", need, nthreads, ws ? ws_bytes : 0, ws);
  return NNC_SIMD_OK;
}

typedef struct job {
  const nnc_simd_gemm_args *g;
  plan p;
  float *packa;
  float *bbuf;    /* bbuf_floats + abuf_floats + cbuf_floats per thread */
} job;

/* Rows [r0, r1) of one batch item's A (a), columns [pc, pc + kc), into
 * MR-row micro-panels from dst on; pro's statistics start at row r0. */
static void pack_rows(const nnc_simd_gemm_args *g, const float *a, int r0, int r1, int pc, int kc,
                      const nnc_gemm_pro *pro0, float *dst) {
  nnc_gemm_pro pro = *pro0;
  for (int r = r0; r < r1; r += NNC_GEMM_MR) {
    if (pro.kind != NNC_SIMD_PRO_NONE) {
      pro.mean = pro0->mean + (r - r0);
      pro.rstd = pro0->rstd + (r - r0);
    }
    float *d = dst + (size_t)(r - r0) * (size_t)kc;
    if (g->win.KH) nnc_gemm_win_pack(g, a, r, imin(NNC_GEMM_MR, r1 - r), pc, kc, d);
    else if (g->a_trans) nnc_gemm_pack_at(a + r, g->lda, imin(NNC_GEMM_MR, r1 - r), pc, kc, d);
    else nnc_gemm_pack_a(a + (ptrdiff_t)r * g->lda, g->lda, imin(NNC_GEMM_MR, r1 - r), pc, kc, &pro, d);
  }
}

/* KC passes over K (kc_at): each KC deep but the last. */
static int passes_of(int K) {
  int n = 0;
  for (int pc = 0; pc < K; pc += kc_at(K, pc)) n++;
  return n;
}

/* The phase-1 tasks of one batch item: a task per MC block of rows, and
 * per KC pass too without a prologue (whose statistics span all of K), so
 * that an A of few rows and a long K (the MNIST CNN's fc1: 64 x 9216) is
 * not packed by one thread. */
static int pack_parts(const nnc_simd_gemm_args *g) {
  return g->prologue == NNC_SIMD_PRO_NONE ? passes_of(g->K) : 1;
}

/* Phase 1: rows [r0, r0 + MC) of one batch item, all of K or one pass. */
static void pack_task(void *ctx, int task, int thread) {
  const job *jb = ctx;
  const nnc_simd_gemm_args *g = jb->g;
  int groups = ceil_div(g->M, NNC_GEMM_MC), parts = pack_parts(g);
  int part = task % parts;
  task /= parts;
  int bi = task / groups, r0 = (task % groups) * NNC_GEMM_MC;
  int r1 = imin(g->M, r0 + NNC_GEMM_MC);
  const float *a = g->A + (ptrdiff_t)bi * g->stride_a;
  float *packa = jb->packa + (size_t)bi * (size_t)jb->p.mp * (size_t)g->K;
  float mean[NNC_GEMM_MC], rstd[NNC_GEMM_MC];
  nnc_gemm_pro pro = {g->prologue, mean, rstd, g->gamma,
                      g->prologue == NNC_SIMD_PRO_LAYERNORM ? g->beta : NULL};
  if (g->prologue != NNC_SIMD_PRO_NONE) {
    for (int r = r0; r < r1; ++r) {
      const float *row = a + (ptrdiff_t)r * g->lda;
      if (g->prologue == NNC_SIMD_PRO_LAYERNORM) {
        nnc_simd_row_moments(row, g->K, g->eps, &mean[r - r0], &rstd[r - r0]);
      } else {
        mean[r - r0] = 0.0f;
        rstd[r - r0] = nnc_simd_row_rms_inv(row, g->K, g->eps);
      }
    }
  }
  for (int pc = 0, kc, i = 0; pc < g->K; pc += kc, i++) {
    kc = kc_at(g->K, pc);
    if (parts == 1 || i == part)
      pack_rows(g, a, r0, r1, pc, kc, &pro, packa + (size_t)pc * (size_t)jb->p.mp + (size_t)r0 * (size_t)kc);
  }
}

/* A pooled task's result (rows [m0, m1), whole rows of pool windows, and
 * columns [n0, n1) of the GEMM's image, in buf) max-pooled into C: each
 * window's taps in order, so that the last NaN wins. */
static void pool_task(const nnc_simd_gemm_args *g, const float *buf, int m0, int m1, int n0, int n1) {
  const nnc_simd_windows *w = &g->pool;
  const int unit = w->KH * w->W, n = n1 - n0;
  for (int wr = 0; wr < (m1 - m0) / unit; ++wr)
    for (int ow = 0; ow < w->OW; ++ow) {
      float *y = g->C + ((ptrdiff_t)(m0 / unit + wr) * w->OW + ow) * g->ldc + n0;
      for (int t = 0; t < w->KH * w->KW; ++t) {
        const float *x = buf + ((ptrdiff_t)(wr * w->KH + t / w->KW) * w->W + ow * w->KW + t % w->KW) * n;
        if (t == 0) {
          memcpy(y, x, (size_t)n * sizeof *y);
          continue;
        }
        int j = 0;
        for (; j + NNC_VW <= n; j += NNC_VW) nnc_vstore(y + j, nnc_vmax_nan(nnc_vload(y + j), nnc_vload(x + j)));
        for (; j < n; ++j) y[j] = x[j] > y[j] || x[j] != x[j] ? x[j] : y[j];
      }
    }
}

/* Phase 2: one rectangle of C. */
static void compute_task(void *ctx, int task, int thread) {
  const job *jb = ctx;
  const nnc_simd_gemm_args *g = jb->g;
  const plan *p = &jb->p;
  int bi = task / (p->tn * p->tm), rest = task % (p->tn * p->tm);
  int n0 = (rest / p->tm) * p->nw, m0 = (rest % p->tm) * p->mw;
  int n1 = imin(g->N, n0 + p->nw), m1 = imin(g->M, m0 + p->mw);
  const float *b = g->B ? g->B + (ptrdiff_t)bi * g->stride_b : NULL;
  float *c = g->C + (ptrdiff_t)bi * g->stride_c;
  const float *res = g->residual ? g->residual + (ptrdiff_t)bi * g->stride_r : NULL;
  float *aux = g->aux_mode != NNC_SIMD_AUX_NONE ? g->aux + (ptrdiff_t)bi * g->stride_x : NULL;
  const float *a = g->A ? g->A + (ptrdiff_t)bi * g->stride_a : NULL;
  const float *packa = jb->packa + (size_t)bi * (size_t)p->mp * (size_t)g->K;
  float *bbuf = jb->bbuf + (size_t)thread * (p->bbuf_floats + p->abuf_floats + p->cbuf_floats);
  float *abuf = bbuf + p->bbuf_floats;
  /* pooled: the task's [m1 - m0, n1 - n0] result goes to its buffer first (row m0, column n0 at 0) */
  const int pooled = g->pool.KH > 0, r0 = pooled ? m0 : 0, c0 = pooled ? n0 : 0;
  float *const cbuf = abuf + p->abuf_floats;
  const ptrdiff_t ldc = pooled ? n1 - n0 : g->ldc;
  if (pooled) c = cbuf;
  const nnc_gemm_pro none = {NNC_SIMD_PRO_NONE, NULL, NULL, NULL, NULL};
  /* an int8 or int4 B: read in place by a task of few rows, else widened per panel */
  const int8_t *q8 = g->b_q8;
  const uint8_t *q4 = g->b_q4;
  const float *q8_scale = q8 ? nnc_gemm_q8_scales(q8, g->N, g->K) : q4 ? nnc_gemm_q4_scales(q4, g->N, g->K) : NULL;
  int direct = (q8 || q4) && m1 - m0 <= NNC_GEMM_Q8_DIRECT_ROWS;
  /* A read in place (a_inplace): whole MR-row panels from A, only a last short one packed */
  const int inplace = p->local_a && g->a_inplace && !g->a_trans && !q8 && !q4;
  /* windows of an image: the panels that can be read in place, and their runs of k */
  const int windows = p->local_a && g->win.KH;
  const float *in_place[NNC_GEMM_MC / NNC_GEMM_MR] = {0};
  nnc_gemm_runs runs;
  /* an epilogue that would change nothing (alpha 1: v * 1 is v) is not a pass over C */
  const int plain = g->alpha == 1.0f && !g->bias && g->act == NNC_SIMD_ACT_NONE && !res && g->aux_mode == NNC_SIMD_AUX_NONE;

  for (int jc = n0; jc < n1; jc += NNC_GEMM_NC) {
    int nc = imin(NNC_GEMM_NC, n1 - jc);
    /* K == 0 still takes one pass (kc = 0) so that the epilogue runs. */
    int pc = 0;
    do {
      int kc = kc_at(g->K, pc);
      int first = pc == 0, last = pc + kc >= g->K;
      if (kc > 0 && q8 && !direct) nnc_gemm_widen_q8(q8, g->K, pc, kc, jc, nc, q8_scale, bbuf);
      else if (kc > 0 && q4 && !direct) nnc_gemm_widen_q4(q4, g->K, pc, kc, jc, nc, q8_scale, bbuf);
      else if (kc > 0 && !q8 && !q4 && !g->b_packed) nnc_gemm_pack_b(b, g->ldb, g->b_trans, pc, kc, jc, nc, bbuf);
      if (windows) nnc_gemm_win_runs(&g->win, pc, kc, &runs);
      for (int ic = m0; ic < m1; ic += NNC_GEMM_MC) {
        int mc = imin(NNC_GEMM_MC, m1 - ic);
        /* the block's packed rows: pa + (ir - whole) * kc is the panel of row ic + ir */
        const float *pa = abuf;
        const int whole = inplace ? mc / NNC_GEMM_MR * NNC_GEMM_MR : 0;   /* rows read in place */
        if (!p->local_a) pa = packa + (size_t)pc * (size_t)p->mp + (size_t)ic * (size_t)kc;
        else if (windows)
          for (int ir = 0; kc > 0 && ir < mc; ir += NNC_GEMM_MR) {
            in_place[ir / NNC_GEMM_MR] = nnc_gemm_win_direct(g, a, ic + ir);
            if (!in_place[ir / NNC_GEMM_MR])
              nnc_gemm_win_pack(g, a, ic + ir, imin(NNC_GEMM_MR, mc - ir), pc, kc, abuf + (size_t)ir * (size_t)kc);
          }
        else if (kc > 0 && whole < mc) pack_rows(g, a, ic + whole, ic + mc, pc, kc, &none, abuf);
        for (int jr = 0; jr < nc; jr += NNC_GEMM_NR) {
          int nr = imin(NNC_GEMM_NR, nc - jr);
          const float *pb = g->b_packed ? g->b_packed + nnc_gemm_packed_b_at(g->K, jc + jr, pc)
                                        : bbuf + (size_t)jr * (size_t)kc;
          for (int ir = 0; ir < mc; ir += NNC_GEMM_MR) {
            int mr = imin(NNC_GEMM_MR, mc - ir);
            int row = ic + ir, col = jc + jr;
            float *ct = c + (ptrdiff_t)(row - r0) * ldc + (col - c0);
            if (direct && q4)
              nnc_gemm_micro_q4(kc, pc, pa + (size_t)ir * (size_t)kc, q4 + (size_t)col / 2 * (size_t)g->K + (size_t)pc * (NNC_GEMM_NR / 2),
                                q8_scale + (size_t)col * (size_t)((g->K + NNC_SIMD_Q4_GROUP - 1) / NNC_SIMD_Q4_GROUP),
                                ct, ldc, mr, nr, first);
            else if (direct)
              nnc_gemm_micro_q8(kc, pa + (size_t)ir * (size_t)kc, q8 + (size_t)col * (size_t)g->K + (size_t)pc * NNC_GEMM_NR,
                                q8_scale + col, ct, ldc, mr, nr, first);
            else if (windows && kc > 0 && in_place[ir / NNC_GEMM_MR])
              nnc_gemm_micro_windows(&runs, in_place[ir / NNC_GEMM_MR], (ptrdiff_t)g->win.SW * g->win.C, pb, ct,
                                     ldc, nr, first);
            else if (ir < whole)
              nnc_gemm_micro_rows(kc, a + (ptrdiff_t)row * g->lda + pc, g->lda, pb, ct, ldc, mr, nr, first);
            else
              nnc_gemm_micro(kc, pa + (size_t)(ir - whole) * (size_t)kc, pb, ct, ldc, mr, nr, first);
            if (last && !plain)
              nnc_gemm_epilogue(ct, ldc, mr, nr, g->alpha, g->bias ? g->bias + col : NULL,
                                g->act, res ? res + (ptrdiff_t)row * g->ldr + col : NULL,
                                g->ldr, g->residual_mul, g->aux_mode, aux ? aux + (ptrdiff_t)row * g->ldx + col : NULL,
                                g->ldx);
          }
        }
      }
      pc += kc;
    } while (pc < g->K);
  }
  if (pooled) pool_task(g, cbuf, m0, m1, n0, n1);
}

nnc_simd_status nnc_simd_gemm(const nnc_simd_gemm_args *g, const nnc_simd_par *par,
                              void *workspace, size_t workspace_bytes, nnc_simd_error *err) {
  if (validate(g, par, workspace, workspace_bytes, err)) return NNC_SIMD_E_ARG;
  if (g->M == 0 || g->N == 0) return NNC_SIMD_OK;
  if (g->b_w8a8) return nnc_gemm_w8a8(g, par, workspace, err);
  job jb;
  jb.g = g;
  jb.p = make_plan(g, nnc_simd_threads(par));
  jb.packa = nnc_simd_align_ptr(workspace);
  jb.bbuf = jb.packa + jb.p.packa_floats;
  if (g->K > 0 && !jb.p.local_a)
    nnc_simd_run(par, g->batch * ceil_div(g->M, NNC_GEMM_MC) * pack_parts(g), pack_task, &jb);
  nnc_simd_run(par, jb.p.ntasks, compute_task, &jb);
  return NNC_SIMD_OK;
}
