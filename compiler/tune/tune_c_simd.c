/* compiler/tune/tune_c_simd.c — tile rules of the C SIMD target.
 *
 * GEMM follows the analytical BLIS model: the MR x NR register block is the
 * largest that leaves room for the B vectors and one broadcast of A; KC makes
 * an A micro-panel and a B micro-panel share L1; MC makes an MC x KC block of
 * A sit in L2; NC makes the KC x NC panels of B, one per thread, share half
 * of L3. On the 2-core AVX2 development machine (L1d 32 KiB, L2 512 KiB, L3
 * 12 MiB) these rules give 6x16, KC 256, MC 126, NC 3072 for GPT-2's MLP
 * GEMM; the template measured 82% of the FMA peak at 6x16/256/144, so MC
 * takes a quarter of L2 rather than BLIS's half. The task split and the row
 * blocks repeat what the templates compute at run time (gemm.c make_plan,
 * parallel.c nnc_simd_run_rows) at the symbols' maxima, so --explain shows
 * what will run. A convolution's GEMM that reads its windows from the
 * image (nnc_gemm_desc.windowed) packs no A micro-panel: KC gives L1 to
 * the B micro-panel alone (MNIST's conv2, K 288 on a 48 KiB L1: one pass
 * of 288 rather than 192 + 96, 3.42 -> 2.88 ms). */
#include <stdio.h>
#include <string.h>

#include "tune_rules.h"

#define CLAMP nnc_tune_clamp
#define CEIL_DIV nnc_tune_ceil_div
#define ROUND_UP nnc_tune_round_up
#define ROUND_DOWN nnc_tune_round_down

/* Register block per ISA: MR*NR/VW accumulators + NR/VW B vectors + 1
 * broadcast of A must fit in the vector registers, with one to spare.
 * short_mr: a block of fewer rows (same NR) for GEMMs of few rows a task,
 * where MR rows would pad them (an LSTM scan's step: B / threads rows); 0
 * where none was measured. */
static const struct { const char *isa; int mr, nr, short_mr; } blocks[] = {
  {"avx512", 12, 32, 8},  /* 24 + 2 + 1 = 27 of 32 zmm; 14x32 (31) leaves the compiler none */
  {"avx2", 6, 16, 0},     /* 12 + 2 + 1 = 15 of 16 ymm */
  {"neon", 8, 12, 0},     /* 24 + 3 + 1 = 28 of 32 q */
  {"generic", 4, 4, 0},   /* 16 scalar accumulators */
};

/* Bytes a task must touch before waking a thread for it pays: 32 KiB, or an
 * eighth of L2 where L2 is larger. */
static int64_t task_min_bytes(const nnc_target_desc *t) {
  int64_t b = t->l2 / 8;
  return CLAMP(b, 32 << 10, 4 << 20);
}

/* The GEMM's register block for the target's ISA; 0 x 0 when unknown.
 * short_mr (may be NULL): its block of fewer rows, 0 when none. */
static void register_block(const nnc_target_desc *t, int *mr, int *nr, int *short_mr) {
  *mr = *nr = 0;
  if (short_mr) *short_mr = 0;
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
    if (strcmp(blocks[i].isa, t->isa) == 0) {
      *mr = blocks[i].mr;
      *nr = blocks[i].nr;
      if (short_mr) *short_mr = blocks[i].short_mr;
    }
}

/* The tiles of a GEMM of size z on an mr x nr register block, its tasks
 * spread over threads; what names it in the reason. a_in_place: A is read
 * where it lies, no A micro-panel shares L1. */
static void gemm_tiles(const nnc_target_desc *t, nnc_gemm_size z, int mr, int nr, int threads, bool a_in_place,
                       const char *what, nnc_tile *o) {
  int vw = t->vector_width > 0 ? t->vector_width : 1;
  int64_t kc = ROUND_DOWN(t->l1d * 3 / 4 / (4 * ((a_in_place ? 0 : mr) + nr)), 32);
  kc = kc < 32 ? 32 : kc;
  int64_t mc = ROUND_DOWN(t->l2 / 4 / (4 * kc), mr);
  mc = mc < mr ? mr : mc;
  int64_t nc = ROUND_DOWN(t->l3 / 2 / t->cores / (4 * kc), nr);
  nc = CLAMP(nc, nr, 4096 / nr * nr);
  o->mr = mr;
  o->nr = nr;
  o->kc = (int)CLAMP(z.k, 1, kc);
  o->mc = (int)CLAMP(ROUND_UP(z.m, mr), mr, mc);
  o->nc = (int)CLAMP(ROUND_UP(z.n, nr), nr, nc);
  /* tasks: about four a thread, split along N first (B is packed once per
   * column block), M only when N gives too few */
  int64_t batch = z.batch > 0 ? z.batch : 1;
  int64_t target = threads > 1 ? 4 * (int64_t)threads : 1;
  int64_t per_item = CEIL_DIV(target, batch);
  per_item = per_item < 1 ? 1 : per_item;
  int64_t nblk = CEIL_DIV(z.n, nr), mblk = CEIL_DIV(z.m, mr);
  nblk = nblk < 1 ? 1 : nblk;
  mblk = mblk < 1 ? 1 : mblk;
  /* M of one MC block: N down to single panels, M only until each thread
   * has a task (every row block packs its B again) */
  bool one_block = z.m <= o->mc;
  int64_t tn = CLAMP(one_block ? nblk : nblk / 4, 1, per_item);
  int64_t nw = CEIL_DIV(nblk, tn) * nr;
  tn = z.n > 0 ? CEIL_DIV(z.n, nw) : 1;
  int64_t tm = CLAMP(one_block ? CEIL_DIV(target < threads ? target : threads, batch * tn) : CEIL_DIV(per_item, tn), 1,
                     mblk);
  int64_t mw = CEIL_DIV(mblk, tm) * mr;
  tm = z.m > 0 ? CEIL_DIV(z.m, mw) : 1;
  o->gemm_tn = (int)tn;
  o->gemm_tm = (int)tm;
  char note[32];
  snprintf(o->reason, sizeof o->reason,
           "%s M=%lld N=%lld K=%lld%s: %dx%d register block (%d of %d vector registers); kc=%d: A %dx%d%s "
           "+ B %dx%d micro-panels %lld KiB of L1d %lld KiB; mc=%d: A block %lld KiB of L2 %lld KiB; nc=%d: "
           "B panel %lld KiB x %d threads of L3 %lld KiB; tasks %dx%d (N x M) x %lld for %d threads",
           what, (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note),
           mr, nr, mr * nr / vw + nr / vw + 1,
           t->vector_regs, o->kc, mr, o->kc, a_in_place ? " (in place, not counted)" : "", o->kc, nr,
           (long long)((int64_t)((a_in_place ? 0 : mr) + nr) * o->kc * 4 >> 10),
           (long long)(t->l1d >> 10), o->mc, (long long)((int64_t)o->mc * o->kc * 4 >> 10),
           (long long)(t->l2 >> 10), o->nc, (long long)((int64_t)o->kc * o->nc * 4 >> 10), t->cores,
           (long long)(t->l3 >> 10), o->gemm_tn, o->gemm_tm, (long long)batch, threads);
}

static nnc_status tune_gemm(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k,
                            nnc_tile *o, nnc_error *err) {
  int mr, nr;
  register_block(t, &mr, &nr, NULL);
  if (!mr) return nnc_errorf(err, NNC_E_TARGET, k->loc, "tune: no GEMM register block for isa %s", t->isa);
  bool win = k->d.gemm.windowed;
  gemm_tiles(t, nnc_tune_gemm_size(s, k), mr, nr, t->cores, win, win ? "windowed gemm" : "gemm", o);
  return NNC_OK;
}

/* An LSTM or GRU scan: a task per thread takes B / threads batch rows
 * through every step, each step one GEMM of those rows on its thread alone
 * (c_simd_scan.c), so the tiles are that GEMM's, M the rows a task. They
 * are few (32 at B = 64 on two threads), and the block of fewer rows is
 * taken where it pads fewer of them: on a Zen 5 VM 8 x 32 for 32 rows
 * instead of 12 x 32 (36 rows computed) made the LSTM forecaster 1.28 ->
 * 1.10 ms. */
static nnc_status tune_scan(const nnc_target_desc *t, const nnc_kernel *k, nnc_gemm_size z, int64_t steps,
                            nnc_tile *o, nnc_error *err) {
  int mr, nr, short_mr;
  register_block(t, &mr, &nr, &short_mr);
  if (!mr) return nnc_errorf(err, NNC_E_TARGET, k->loc, "tune: no GEMM register block for isa %s", t->isa);
  int64_t tasks = CLAMP(z.m, 1, t->cores > 1 ? t->cores : 1);
  z.m = CEIL_DIV(z.m, tasks);
  if (short_mr && ROUND_UP(z.m, short_mr) < ROUND_UP(z.m, mr)) mr = short_mr;
  char what[64];
  snprintf(what, sizeof what, "scan of %lld steps, a step's gemm a task", (long long)steps);
  gemm_tiles(t, z, mr, nr, 1, false, what, o);
  return NNC_OK;
}

/* The attention template runs Q.K^T and P.V on the GEMM's micro-kernel over
 * packed key and value blocks, which stream from L2 one NR-wide panel at a
 * time. Measured on the 2-core AVX2 machine (bench/bench_attention.c): one
 * key block covering all keys wins without a causal mask (no rescaling), 64
 * queries a task; with one, 32 queries and 64 keys waste the least on the
 * diagonal block. BK is a whole number of NR panels. */
static void tune_attention(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k,
                           nnc_tile *o) {
  nnc_attn_size z = nnc_tune_attn_size(s, k);
  int mr, nr;
  register_block(t, &mr, &nr, NULL);
  nr = nr > 0 ? nr : 1;
  bool causal = k->d.attn.causal;
  /* the packed K and V blocks, BK x (D + Dv) floats, in half of L2 */
  int64_t fit = ROUND_DOWN(t->l2 / 2 / (4 * (z.d + z.dv > 0 ? z.d + z.dv : 1)), nr);
  int64_t bk = CLAMP(ROUND_UP(z.s > 0 ? z.s : 1, nr), nr, causal ? 64 : 256);
  bk = CLAMP(bk, nr, fit > nr ? fit : nr);
  int bq = causal ? 32 : 64;
  while (bq > 1 && z.heads * CEIL_DIV(z.t, bq) < 4 * (int64_t)t->cores) bq /= 2;
  bq = (int)CLAMP(bq, 1, z.t > 0 ? z.t : 1);
  o->attn_bq = bq;
  o->attn_bk = (int)bk;
  snprintf(o->reason, sizeof o->reason,
           "attention T=%lld S=%lld D=%lld Dv=%lld x %lld heads%s: bq=%d queries a task (%lld tasks for %d threads); "
           "bk=%d keys a block (%s, whole %d-wide panels): packed K and V %lld KiB of L2 %lld KiB",
           (long long)z.t, (long long)z.s, (long long)z.d, (long long)z.dv, (long long)z.heads,
           causal ? ", causal" : "", bq, (long long)(z.heads * CEIL_DIV(z.t, bq)), t->cores, o->attn_bk,
           causal ? "at most 64 on the diagonal" : "all keys in one block up to 256", nr,
           (long long)(4 * bk * (z.d + z.dv) >> 10), (long long)(t->l2 >> 10));
}

/* Rows a task: each touches at least row_min_elems, and there are about four
 * tasks a thread when the rows allow (parallel.c nnc_simd_run_rows). */
static void tune_rows(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  nnc_rows_size z = nnc_tune_rows_size(s, k);
  int64_t cols = z.cols > 0 ? z.cols : 1, rows = z.rows > 0 ? z.rows : 1;
  int64_t by_size = CEIL_DIV(o->row_min_elems, cols);
  int64_t by_threads = CEIL_DIV(rows, 4 * (int64_t)t->cores);
  int64_t per = by_size > by_threads ? by_size : by_threads;
  if (t->cores == 1 || per > rows) per = rows;
  o->row_block = (int)per;
  snprintf(o->reason, sizeof o->reason,
           "%s %lld rows x %lld: %d rows a task (%lld tasks for %d threads): a task touches at least %d elements "
           "(%d KiB) and there are up to 4 tasks a thread",
           nnc_kernel_kind_name(k->kind), (long long)z.rows, (long long)z.cols, o->row_block,
           (long long)CEIL_DIV(rows, per), t->cores, o->row_min_elems, o->row_min_elems * 4 >> 10);
}

/* Elements a task for flat loops (elementwise, copies): the same floor as
 * rows, a whole number of vectors. */
static void tune_flat(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  nnc_rows_size z = nnc_tune_rows_size(s, k);
  int64_t n = z.rows * z.cols, vw = t->vector_width > 0 ? t->vector_width : 1;
  int64_t chunk = CEIL_DIV(n, 4 * (int64_t)t->cores);
  chunk = chunk > o->row_min_elems ? chunk : o->row_min_elems;
  chunk = ROUND_UP(chunk, vw);
  if (t->cores == 1 || chunk > n) chunk = n > 0 ? n : 1;
  o->ew_chunk = chunk;
  snprintf(o->reason, sizeof o->reason,
           "%s %lld elements: %lld a task (%lld tasks for %d threads): at least %d elements (%d KiB), up to 4 "
           "tasks a thread, whole vectors of %lld",
           nnc_kernel_kind_name(k->kind), (long long)n, (long long)chunk, (long long)CEIL_DIV(n, chunk), t->cores,
           o->row_min_elems, o->row_min_elems * 4 >> 10, (long long)vw);
}

nnc_status nnc_tune_c_simd(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err) {
  memset(out, 0, sizeof *out);
  const nnc_kernel *kn = &s->k[k];
  out->threads = t->cores;
  out->row_min_elems = (int)(task_min_bytes(t) / 4);
  switch (kn->kind) {
  case NNC_KERNEL_GEMM:
    return tune_gemm(t, s, kn, out, err);
  case NNC_KERNEL_ATTENTION:
    tune_attention(t, s, kn, out);
    return NNC_OK;
  case NNC_KERNEL_VIEW:
    snprintf(out->reason, sizeof out->reason, "view: no work, aliases its input");
    return NNC_OK;
  case NNC_KERNEL_ELEMENTWISE:
  case NNC_KERNEL_MOVE: {
    nnc_gemm_size z;
    int64_t steps;
    if (nnc_tune_scan_size(s, kn, &z, &steps)) return tune_scan(t, kn, z, steps, out, err);
    tune_flat(t, s, kn, out);
    return NNC_OK;
  }
  default:
    tune_rows(t, s, kn, out);
    return NNC_OK;
  }
}

void nnc_explain_c_simd(FILE *f, const nnc_target_desc *t) {
  fprintf(f, "target %s: isa %s, %d f32 lanes x %d vector registers, %d FMA pipes, L1d %lld KiB, L2 %lld KiB, "
             "L3 %lld KiB, %d cores\n",
          t->name, t->isa, t->vector_width, t->vector_regs, t->fma_units, (long long)(t->l1d >> 10),
          (long long)(t->l2 >> 10), (long long)(t->l3 >> 10), t->cores);
}
