/* compiler/tune/tune_c_simd.c — tile rules of the C SIMD target.
 *
 * GEMM follows the analytical BLIS model: the MR x NR register block is the
 * largest that leaves room for the B vectors and one broadcast of A; KC makes
 * an A micro-panel and a B micro-panel share L1; MC makes an MC x KC block of
 * A sit in L2; NC makes a KC x NC panel of B sit in L3. On the 2-core AVX2
 * development machine these rules give 6x16, KC 256, MC 126, NC 3072 for
 * GPT-2's MLP GEMM; the template measured 82% of the FMA peak at 6x16/256/144. */
#include <stdio.h>
#include <string.h>

#include "tune_rules.h"

/* Register block per ISA: MR*NR/VW accumulators + NR/VW B vectors + 1
 * broadcast of A must fit in the vector registers. */
static const struct { const char *isa; int mr, nr; } blocks[] = {
  {"avx512", 12, 32},  /* 24 + 2 + 1 = 27 of 32 zmm */
  {"avx2", 6, 16},     /* 12 + 2 + 1 = 15 of 16 ymm */
  {"neon", 8, 12},     /* 24 + 3 + 1 = 28 of 32 q */
  {"generic", 4, 4},   /* 16 scalar accumulators */
};

static int64_t max_dim(const nnc_graph *g, nnc_dim d) {
  int64_t v = d.k;
  for (int i = 0; i < d.nsym; i++) v *= g->syms[d.sym[i]].max;
  return v;
}

static int clampi(int64_t v, int64_t lo, int64_t hi) { return (int)(v < lo ? lo : v > hi ? hi : v); }
static int round_up(int64_t v, int m) { return (int)((v + m - 1) / m * m); }
static int round_down(int64_t v, int m) { return (int)(v / m * m); }

static nnc_status tune_gemm(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k,
                            nnc_tile *o, nnc_error *err) {
  const nnc_graph *g = s->g;
  const nnc_gemm_desc *d = &k->d.gemm;
  const nnc_tensor *out = &g->tensors[d->out], *a = &g->tensors[d->a];
  int mr = 0, nr = 0;
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
    if (strcmp(blocks[i].isa, t->isa) == 0) {
      mr = blocks[i].mr;
      nr = blocks[i].nr;
    }
  if (!mr) return nnc_errorf(err, NNC_E_TARGET, k->loc, "tune: no GEMM register block for isa %s", t->isa);
  int64_t N = max_dim(g, out->shape[out->rank - 1]);
  int64_t K = max_dim(g, a->shape[a->rank - 1]);
  bool batched = g->nodes[k->nodes[0]].op == NNC_OP_MATMUL && !d->b_trans && out->rank > 2;
  int64_t M = batched ? max_dim(g, out->shape[out->rank - 2])
                      : (N ? nnc_tensor_max_elems(g, out) / N : 0);
  int kc = round_down(t->l1d * 3 / 4 / (4 * (mr + nr)), 32);
  if (kc < 32) kc = 32;
  int mc = round_down(t->l2 / 4 / (4 * kc), mr);
  if (mc < mr) mc = mr;
  int nc = round_down(t->l3 / 4 / (4 * kc), nr);
  nc = clampi(nc, nr, 4096 / nr * nr);
  o->mr = mr;
  o->nr = nr;
  o->kc = clampi(K, 1, kc);
  o->mc = clampi(round_up(M, mr), mr, mc);
  o->nc = clampi(round_up(N, nr), nr, nc);
  snprintf(o->reason, sizeof o->reason,
           "gemm M=%lld N=%lld K=%lld: %dx%d register block (%d of %d vector registers); kc=%d: A and B "
           "micro-panels %d KiB of L1d %lld KiB; mc=%d: A block %d KiB of L2 %lld KiB; nc=%d: B panel %d KiB",
           (long long)M, (long long)N, (long long)K, mr, nr, mr * nr / t->vector_width + nr / t->vector_width + 1,
           t->vector_regs, o->kc, (mr + nr) * o->kc * 4 >> 10, (long long)(t->l1d >> 10), o->mc,
           o->mc * o->kc * 4 >> 10, (long long)(t->l2 >> 10), o->nc, (int)((int64_t)o->kc * o->nc * 4 >> 10));
  return NNC_OK;
}

static void tune_attention(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k,
                           nnc_tile *o) {
  const nnc_graph *g = s->g;
  const nnc_attention_desc *d = &k->d.attn;
  const nnc_tensor *q = &g->tensors[d->q], *v = &g->tensors[d->v], *kt = &g->tensors[d->k];
  int64_t D = max_dim(g, q->shape[q->rank - 1]), Dv = max_dim(g, v->shape[v->rank - 1]);
  int64_t T = max_dim(g, q->shape[q->rank - 2]), S = max_dim(g, kt->shape[kt->rank - 2]);
  int64_t rows = nnc_tensor_max_elems(g, q) / (D ? D : 1) / (T ? T : 1);   /* batch x heads */
  int vw = t->vector_width;
  /* enough queries per task to reuse each key block, but at least 4 tasks a core */
  int bq = 16;
  while (bq > 1 && rows * ((T + bq - 1) / bq) < 4 * t->cores) bq /= 2;
  bq = clampi(bq, 1, T > 0 ? T : 1);
  /* a key block and a value block (BK x D, BK x Dv) plus BQ x BK scores in
   * three quarters of L1d, like the GEMM's panels */
  int bk = round_down(t->l1d * 3 / 4 / (4 * (D + Dv + bq)), vw);
  bk = clampi(bk, vw, 256);
  bk = clampi(bk, vw, round_up(S, vw));
  o->attn_bq = bq;
  o->attn_bk = bk;
  snprintf(o->reason, sizeof o->reason,
           "attention T=%lld S=%lld D=%lld: bq=%d queries a task (%lld tasks for %d cores); bk=%d keys a "
           "block: K, V blocks and scores %lld KiB of L1d %lld KiB",
           (long long)T, (long long)S, (long long)D, bq, (long long)(rows * ((T + bq - 1) / bq)), t->cores,
           bk, (long long)(4 * bk * (D + Dv + bq) >> 10), (long long)(t->l1d >> 10));
}

nnc_status nnc_tune_c_simd(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err) {
  memset(out, 0, sizeof *out);
  const nnc_kernel *kn = &s->k[k];
  /* every kernel that splits rows over threads: a task reads at least an
   * eighth of L2, so waking a thread for it pays */
  out->row_min_elems = clampi(t->l2 / 8 / 4, 1024, 1 << 20);
  switch (kn->kind) {
  case NNC_KERNEL_GEMM:
    return tune_gemm(t, s, kn, out, err);
  case NNC_KERNEL_ATTENTION:
    tune_attention(t, s, kn, out);
    return NNC_OK;
  case NNC_KERNEL_VIEW:
    snprintf(out->reason, sizeof out->reason, "view: no work, aliases its input");
    return NNC_OK;
  default:
    snprintf(out->reason, sizeof out->reason,
             "%s: rows split over %d threads, at least %d elements (%d KiB, an eighth of L2) a task",
             nnc_kernel_kind_name(kn->kind), t->cores, out->row_min_elems, out->row_min_elems * 4 >> 10);
    return NNC_OK;
  }
}
