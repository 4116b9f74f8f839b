/* templates/c_simd/attention_bwd.c — the backward of attention.c, blocked
 * the same way (FlashAttention-2's backward on a CPU, made deterministic).
 *
 * The unit of work is a pair (block of NNC_ATTNB_BQ queries, block of
 * NNC_ATTNB_BK keys) of one (batch, head). From the forward's lse it
 * recomputes the probabilities and their gradient on the spot:
 *   S  = Q . K^T,  P = e^(scale S - lse) (0 where masked),
 *   dP = dO . V^T, dS = P (dP - delta),  delta_i = dO_i . O_i,
 * then adds P^T . dO to the key block's dV, dS^T . Q to its dK and dS . K
 * to the query block's dQ. Memory per thread is a few blocks whatever T
 * and S are (plus T rows of dQ in the fused order below).
 *
 * Two orders of the pairs, chosen from the thread count:
 *  - fused: a task is one (batch, head); key blocks outermost, query blocks
 *    inside; dK, dV of the key block are finished before the next one and
 *    dQ is accumulated for all T queries. Five products per pair. Used when
 *    there are enough (batch, head)s to keep every thread busy.
 *  - two passes: tasks (batch, head, key block) walk the query blocks for
 *    dK and dV, then tasks (batch, head, query block) walk the key blocks
 *    for dQ, recomputing S, P, dP and dS: seven products per pair, but
 *    T/BQ or S/BK times more tasks.
 * Both compute every element of P and dS the same way and add the pairs
 * into each gradient in the same order (dK, dV over query blocks in
 * order, dQ over key blocks in order, each pair's sum formed on its own
 * and then added), so the result is the same, bit for bit, whichever order
 * runs and on however many threads.
 *
 * Pairs that see no key (past the causal limit, or every key of the block
 * masked) are skipped, and within a pair the keys past the causal limit of
 * its last query are left out. The five products run on a micro-kernel
 * like the forward's (NNC_ATTN_MR x NNC_GEMM_NR accumulators, B packed by
 * nnc_gemm_pack_b): Q . K^T and dO . V^T read Q and dO in place against K
 * and V packed transposed (once per key block), dS . K reads dS in place
 * against K packed as it is, and P^T . dO, dS^T . Q read P and dS
 * transposed in place (the broadcast of A costs the same at any stride)
 * against dO and Q packed once per pair. */
#include "gemm_internal.h"
#include "simd_math.h"

#ifndef NNC_ATTNB_BQ
#define NNC_ATTNB_BQ 32
#endif
#ifndef NNC_ATTNB_BK
#define NNC_ATTNB_BK 64
#endif
#if NNC_ATTNB_BQ < 1 || NNC_ATTNB_BK < 1
#error "NNC_ATTNB_BQ and NNC_ATTNB_BK must be positive"
#endif

#ifndef NNC_ATTN_MR
#if defined(NNC_ISA_AVX2)
#define NNC_ATTN_MR 4
#else
#define NNC_ATTN_MR NNC_GEMM_MR
#endif
#endif
#if NNC_ATTN_MR < 1
#error "NNC_ATTN_MR must be positive"
#endif
#define MR NNC_ATTN_MR
#define NR NNC_GEMM_NR
#define NV (NR / NNC_VW)
#define BQ NNC_ATTNB_BQ
#define BK NNC_ATTNB_BK
/* Score row length: the key block rounded up to whole panels. */
#define LDK ((BK + NR - 1) / NR * NR)

static const char *const KERNEL = "nnc_simd_attention_bwd";

/* The fused order keeps T rows of dQ per thread: past this many floats the
 * two passes are used whatever the thread count. */
#ifndef NNC_ATTNB_FUSED_MAX
#define NNC_ATTNB_FUSED_MAX (1L << 22)
#endif

typedef struct bwd_ws {
  size_t ldd, ldv;                         /* D and Dv rounded up to NR */
  size_t kt, vt, kn, qn, dn, p, ds, mb, dk, dv, dq, per_thread; /* floats */
} bwd_ws;

static int fused_order(const nnc_simd_attn_bwd_args *a, int nthreads) {
  long bh = (long)a->batch * a->heads;
  size_t ldd = nnc_simd_round_up(a->D > 0 ? (size_t)a->D : 0, NR);
  if ((double)(a->T > 0 ? a->T : 0) * (double)ldd > (double)NNC_ATTNB_FUSED_MAX) return 0;
  return nthreads <= 1 || bh >= 2L * nthreads;
}

static bwd_ws ws_layout(const nnc_simd_attn_bwd_args *a, int fused) {
  bwd_ws w;
  size_t d = a->D > 0 ? (size_t)a->D : 0, dv = a->Dv > 0 ? (size_t)a->Dv : 0;
  size_t t = a->T > 0 ? (size_t)a->T : 0;
  w.ldd = nnc_simd_round_up(d, NR);
  w.ldv = nnc_simd_round_up(dv, NR);
  w.kt = nnc_simd_round_up((size_t)LDK * d, 16);          /* K^T panels [LDK/NR][D][NR] */
  w.vt = nnc_simd_round_up((size_t)LDK * dv, 16);         /* V^T panels [LDK/NR][Dv][NR] */
  w.kn = nnc_simd_round_up((size_t)BK * w.ldd, 16);       /* K panels [ldd/NR][nk][NR] */
  w.qn = nnc_simd_round_up((size_t)BQ * w.ldd, 16);       /* Q panels [ldd/NR][nq][NR] */
  w.dn = nnc_simd_round_up((size_t)BQ * w.ldv, 16);       /* dO panels [ldv/NR][nq][NR] */
  w.p = nnc_simd_round_up((size_t)BQ * LDK, 16);          /* S, then P [BQ][LDK] */
  w.ds = w.p;                                             /* dP, then dS [BQ][LDK] */
  w.mb = nnc_simd_round_up((size_t)LDK + (size_t)BQ, 16); /* key mask, delta */
  w.dk = nnc_simd_round_up((size_t)BK * w.ldd, 16);       /* dK of the key block */
  w.dv = nnc_simd_round_up((size_t)BK * w.ldv, 16);       /* dV of the key block */
  w.dq = nnc_simd_round_up((fused ? t : (size_t)BQ) * w.ldd, 16);
  w.per_thread = w.kt + w.vt + w.kn + w.qn + w.dn + w.p + w.ds + w.mb + w.dk + w.dv + w.dq;
  return w;
}

size_t nnc_simd_attention_bwd_workspace_bytes(const nnc_simd_attn_bwd_args *a, int nthreads) {
  if (!a) return 0;
  int nt = nthreads > 0 ? nthreads : 1;
  return NNC_SIMD_ALIGN + (size_t)nt * ws_layout(a, fused_order(a, nt)).per_thread * sizeof(float);
}

/* C[0:mr, 0:NR] (ldc) += A . B for A an mr x kc block read in place, element
 * (i, k) at a[i*lda + k*ldk], and B a packed kc x NR panel. Rows past mr
 * repeat row mr-1, so that nothing outside A is read; only the first mr
 * rows are stored, always NR columns wide. The sum over k is formed in the
 * accumulators and added to C once, so C gets each call's sum as one
 * addition whatever the tiling. */
static inline __attribute__((always_inline)) void micro_body(int kc, const float *a,
                                                             ptrdiff_t lda, ptrdiff_t ldk,
                                                             const float *restrict b, float *c,
                                                             ptrdiff_t ldc, int mr) {
  const float *ar[MR];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) ar[i] = a + (ptrdiff_t)(i < mr ? i : mr - 1) * lda;
  nnc_vf acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vzero();
  ptrdiff_t off = 0;
#pragma GCC unroll 4
  for (int k = 0; k < kc; ++k) {
    nnc_vf bv[NV];
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) bv[j] = nnc_vload(b + j * NNC_VW);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      nnc_vf av = nnc_vset1(ar[i][off]);
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vfma(av, bv[j], acc[i][j]);
    }
    b += NR;
    off += ldk;
  }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= mr) break;
    float *ci = c + (ptrdiff_t)i * ldc;
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j)
      nnc_vstore(ci + j * NNC_VW, nnc_vadd(nnc_vload(ci + j * NNC_VW), acc[i][j]));
  }
}

/* A with its rows in place (k contiguous). */
static void micro_rows(int kc, const float *a, ptrdiff_t lda, const float *restrict b, float *c,
                       ptrdiff_t ldc, int mr) {
  micro_body(kc, a, lda, 1, b, c, ldc, mr);
}

/* A transposed in place: row i is column i of a matrix with row stride ldk. */
static void micro_cols(int kc, const float *a, ptrdiff_t ldk, const float *restrict b, float *c,
                       ptrdiff_t ldc, int mr) {
  micro_body(kc, a, 1, ldk, b, c, ldc, mr);
}

/* C[0:m, 0:n] (rows ldc) += A . B, the B panels for columns [jr, jr+NR)
 * at b + jr*kc. C is zeroed by the caller before the first sum. */
static void prod_rows(int m, int n, int kc, const float *a, ptrdiff_t lda, const float *b,
                      ptrdiff_t bstride, float *c, ptrdiff_t ldc) {
  for (int r = 0; r < m; r += MR)
    for (int jr = 0; jr < n; jr += NR)
      micro_rows(kc, a + (ptrdiff_t)r * lda, lda, b + (ptrdiff_t)jr * bstride,
                 c + (ptrdiff_t)r * ldc + jr, ldc, m - r < MR ? m - r : MR);
}

/* C[0:m, 0:n] += A^T . B for A a kc x m matrix of row stride lda. */
static void prod_cols(int m, int n, int kc, const float *a, ptrdiff_t lda, const float *b,
                      ptrdiff_t bstride, float *c, ptrdiff_t ldc) {
  for (int r = 0; r < m; r += MR)
    for (int jr = 0; jr < n; jr += NR)
      micro_cols(kc, a + r, lda, b + (ptrdiff_t)jr * bstride, c + (ptrdiff_t)r * ldc + jr, ldc,
                 m - r < MR ? m - r : MR);
}

typedef struct bwd_job {
  const nnc_simd_attn_bwd_args *a;
  bwd_ws w;
  float *ws;
  int qblocks, kblocks;
} bwd_job;

/* One thread's slice of the workspace. */
typedef struct bwd_bufs {
  float *kt, *vt, *kn, *qn, *dn, *p, *ds, *mb, *delta, *dk, *dv, *dq;
} bwd_bufs;

static bwd_bufs bufs_of(const bwd_job *jb, int thread) {
  bwd_bufs u;
  const bwd_ws *w = &jb->w;
  u.kt = jb->ws + (size_t)thread * w->per_thread;
  u.vt = u.kt + w->kt;
  u.kn = u.vt + w->vt;
  u.qn = u.kn + w->kn;
  u.dn = u.qn + w->qn;
  u.p = u.dn + w->dn;
  u.ds = u.p + w->p;
  u.mb = u.ds + w->ds;
  u.delta = u.mb + LDK;
  u.dk = u.mb + w->mb;
  u.dv = u.dk + w->dk;
  u.dq = u.dv + w->dv;
  return u;
}

/* Keys of key block kb that query block qb of batch b may see: 0 when the
 * pair is skipped, else the count from the block's start (the causal limit
 * of the block's last query). Both orders decide through this. */
static int pair_keys(const nnc_simd_attn_bwd_args *a, int b, int qb, int kb) {
  int i1 = qb * BQ + BQ < a->T ? qb * BQ + BQ : a->T;
  int j0 = kb * BK, nk = a->S - j0 < BK ? a->S - j0 : BK;
  if (a->causal) {
    long lim = (long)(i1 - 1) + (a->S - a->T) + 1 - j0; /* keys of the block seen */
    if (lim <= 0) return 0;
    if (lim < nk) nk = (int)lim;
  }
  if (a->mask) {
    const float *m = a->mask + b * a->mask_sb + j0;
    int any = 0;
    for (int j = 0; j < nk && !any; ++j) any = m[j] != 0.0f;
    if (!any) return 0;
  }
  return nk;
}

/* Packs key block kb of (b, h): K^T and V^T panels, and K itself when dQ
 * is wanted. */
static void pack_keys(const bwd_job *jb, const bwd_bufs *u, int b, int h, int kb, int for_dq) {
  const nnc_simd_attn_bwd_args *a = jb->a;
  int j0 = kb * BK, nk = a->S - j0 < BK ? a->S - j0 : BK;
  const float *k = a->k + b * a->k_sb + h * a->k_sh + (ptrdiff_t)j0 * a->k_st;
  const float *v = a->v + b * a->v_sb + h * a->v_sh + (ptrdiff_t)j0 * a->v_st;
  nnc_gemm_pack_b(k, a->k_st, 1, 0, a->D, 0, nk, u->kt);
  nnc_gemm_pack_b(v, a->v_st, 1, 0, a->Dv, 0, nk, u->vt);
  if (for_dq) nnc_gemm_pack_b(k, a->k_st, 0, 0, nk, 0, a->D, u->kn);
}

/* One pair (qb, kb) of (b, h) seeing nk keys (pair_keys), the key block
 * packed (pack_keys): adds its part to u->dk, u->dv (rows of the key block,
 * when kv) and to dq (rows of the query block, when dq is not NULL). Never
 * inlined: both orders run this one body, so that a compiler contracting
 * a * b + c differently in two places cannot make their P or dS differ. */
static __attribute__((noinline)) void pair(const bwd_job *jb, const bwd_bufs *u, int b, int h, int qb, int kb, int nk,
                 int kv, float *dq) {
  const nnc_simd_attn_bwd_args *a = jb->a;
  int i0 = qb * BQ, nq = a->T - i0 < BQ ? a->T - i0 : BQ;
  int j0 = kb * BK, nkb = a->S - j0 < BK ? a->S - j0 : BK; /* keys packed */
  int D = a->D, Dv = a->Dv, shift = a->S - a->T;
  int nkv = (int)nnc_simd_round_up((size_t)nk, NNC_VW);
  ptrdiff_t ldd = (ptrdiff_t)jb->w.ldd, ldv = (ptrdiff_t)jb->w.ldv;
  const float *q = a->q + b * a->q_sb + h * a->q_sh + (ptrdiff_t)i0 * a->q_st;
  const float *o = a->out + b * a->o_sb + h * a->o_sh + (ptrdiff_t)i0 * a->o_st;
  const float *dout = a->dout + b * a->do_sb + h * a->do_sh + (ptrdiff_t)i0 * a->do_st;
  const float *lse = a->lse + ((ptrdiff_t)b * a->heads + h) * a->T + i0;
  const float *mask = a->mask ? a->mask + b * a->mask_sb + j0 : NULL;
  float *p = u->p, *ds = u->ds, *mb = u->mb;

  for (int jj = 0; jj < nkv; ++jj)
    mb[jj] = jj < nk && (!mask || mask[jj] != 0.0f) ? 0.0f : -INFINITY;
  /* S = Q . K^T and dP = dO . V^T over the nk keys, whole panels. */
  for (int r = 0; r < nq; ++r)
    for (int jj = 0; jj < nk; jj += NR)
      for (int c = 0; c < NR; c += NNC_VW) {
        nnc_vstore(p + (ptrdiff_t)r * LDK + jj + c, nnc_vzero());
        nnc_vstore(ds + (ptrdiff_t)r * LDK + jj + c, nnc_vzero());
      }
  prod_rows(nq, nk, D, q, a->q_st, u->kt, D, p, LDK);
  prod_rows(nq, nk, Dv, dout, a->do_st, u->vt, Dv, ds, LDK);
  /* delta_i = dO_i . O_i. */
  for (int r = 0; r < nq; ++r) {
    const float *orow = o + (ptrdiff_t)r * a->o_st, *drow = dout + (ptrdiff_t)r * a->do_st;
    nnc_vf acc = nnc_vzero();
    int c = 0;
    for (; c + NNC_VW <= Dv; c += NNC_VW)
      acc = nnc_vfma(nnc_vload(orow + c), nnc_vload(drow + c), acc);
    float s = nnc_vhsum(acc);
    for (; c < Dv; ++c) s = fmaf(orow[c], drow[c], s);
    u->delta[r] = s;
  }
  /* P = e^(scale S - lse), 0 where masked; dS = P (dP - delta). */
  const nnc_vf vscale = nnc_vset1(a->scale);
  for (int r = 0; r < nq; ++r) {
    float *pr = p + (ptrdiff_t)r * LDK, *dr = ds + (ptrdiff_t)r * LDK;
    nnc_vf nl = nnc_vset1(-lse[r]), vd = nnc_vset1(u->delta[r]);
    for (int jj = 0; jj < nkv; jj += NNC_VW)
      nnc_vstore(pr + jj, nnc_vadd(nnc_vfma(nnc_vload(pr + jj), vscale, nl), nnc_vload(mb + jj)));
    if (a->causal) {
      long vis = (long)i0 + r + shift - j0 + 1; /* keys of the block this row sees */
      for (long jj = vis < 0 ? 0 : vis; jj < nk; ++jj) pr[jj] = -INFINITY;
    }
    for (int jj = 0; jj < nkv; jj += NNC_VW) {
      nnc_vf pv = nnc_vexp(nnc_vload(pr + jj));
      nnc_vstore(pr + jj, pv);
      nnc_vstore(dr + jj, nnc_vmul(pv, nnc_vsub(nnc_vload(dr + jj), vd)));
    }
  }
  if (kv) {
    /* dV += P^T . dO, dK += dS^T . Q (Q's scale is applied at the end). */
    nnc_gemm_pack_b(dout, a->do_st, 0, 0, nq, 0, Dv, u->dn);
    nnc_gemm_pack_b(q, a->q_st, 0, 0, nq, 0, D, u->qn);
    prod_cols(nk, Dv, nq, p, LDK, u->dn, nq, u->dv, ldv);
    prod_cols(nk, D, nq, ds, LDK, u->qn, nq, u->dk, ldd);
  }
  /* dQ += dS . K (the K panels were packed nkb deep). */
  if (dq) prod_rows(nq, D, nk, ds, LDK, u->kn, nkb, dq, ldd);
}

static void zero(float *p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = 0.0f;
}

/* Writes rows [0, n) of acc (ld) times scale to dst (row stride ld_dst). */
static void store_rows(float *dst, ptrdiff_t ld_dst, const float *acc, ptrdiff_t ld, int n,
                       int cols, float scale) {
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < cols; ++c) dst[(ptrdiff_t)r * ld_dst + c] = acc[(ptrdiff_t)r * ld + c] * scale;
}

/* dK and dV of key block kb of (b, h), over the query blocks in order;
 * dQ of every pair is added to dq (T rows) when it is not NULL. */
static void key_block(const bwd_job *jb, const bwd_bufs *u, int b, int h, int kb, float *dq) {
  const nnc_simd_attn_bwd_args *a = jb->a;
  int j0 = kb * BK, nk = a->S - j0 < BK ? a->S - j0 : BK;
  ptrdiff_t ldd = (ptrdiff_t)jb->w.ldd, ldv = (ptrdiff_t)jb->w.ldv;
  zero(u->dk, (size_t)nk * jb->w.ldd);
  zero(u->dv, (size_t)nk * jb->w.ldv);
  int packed = 0;
  for (int qb = 0; qb < jb->qblocks; ++qb) {
    int n = pair_keys(a, b, qb, kb);
    if (n == 0) continue;
    if (!packed) pack_keys(jb, u, b, h, kb, dq != NULL);
    packed = 1;
    pair(jb, u, b, h, qb, kb, n, 1, dq ? dq + (ptrdiff_t)qb * BQ * ldd : NULL);
  }
  if (a->D > 0)
    store_rows(a->dk + b * a->dk_sb + h * a->dk_sh + (ptrdiff_t)j0 * a->dk_st, a->dk_st, u->dk,
               ldd, nk, a->D, a->scale);
  if (a->Dv > 0)
    store_rows(a->dv + b * a->dv_sb + h * a->dv_sh + (ptrdiff_t)j0 * a->dv_st, a->dv_st, u->dv,
               ldv, nk, a->Dv, 1.0f);
}

/* Fused order: a task is one (batch, head). */
static void task_fused(void *ctx, int task, int thread) {
  const bwd_job *jb = ctx;
  const nnc_simd_attn_bwd_args *a = jb->a;
  bwd_bufs u = bufs_of(jb, thread);
  int b = task / a->heads, h = task % a->heads;
  zero(u.dq, (size_t)a->T * jb->w.ldd);
  for (int kb = 0; kb < jb->kblocks; ++kb) key_block(jb, &u, b, h, kb, u.dq);
  if (a->D > 0)
    store_rows(a->dq + b * a->dq_sb + h * a->dq_sh, a->dq_st, u.dq, (ptrdiff_t)jb->w.ldd, a->T,
               a->D, a->scale);
}

/* First pass: a task is one key block of one (batch, head). */
static void task_keys(void *ctx, int task, int thread) {
  const bwd_job *jb = ctx;
  bwd_bufs u = bufs_of(jb, thread);
  int bh = task / jb->kblocks, kb = task % jb->kblocks;
  key_block(jb, &u, bh / jb->a->heads, bh % jb->a->heads, kb, NULL);
}

/* Second pass: a task is one query block of one (batch, head); dQ over the
 * key blocks in order. */
static void task_queries(void *ctx, int task, int thread) {
  const bwd_job *jb = ctx;
  const nnc_simd_attn_bwd_args *a = jb->a;
  bwd_bufs u = bufs_of(jb, thread);
  int bh = task / jb->qblocks, qb = task % jb->qblocks;
  int b = bh / a->heads, h = bh % a->heads;
  int i0 = qb * BQ, nq = a->T - i0 < BQ ? a->T - i0 : BQ;
  zero(u.dq, (size_t)nq * jb->w.ldd);
  for (int kb = 0; kb < jb->kblocks; ++kb) {
    int n = pair_keys(a, b, qb, kb);
    if (n == 0) continue;
    pack_keys(jb, &u, b, h, kb, 1);
    pair(jb, &u, b, h, qb, kb, n, 0, u.dq);
  }
  if (a->D > 0)
    store_rows(a->dq + b * a->dq_sb + h * a->dq_sh + (ptrdiff_t)i0 * a->dq_st, a->dq_st, u.dq,
               (ptrdiff_t)jb->w.ldd, nq, a->D, a->scale);
}

/* Bytes from the start of a [batch, heads, rows, n] strided tensor to one
 * past its last element. */
static size_t span4(int batch, ptrdiff_t sb, int heads, ptrdiff_t sh, int rows, ptrdiff_t sr,
                    int n) {
  if (batch <= 0 || heads <= 0 || rows <= 0 || n <= 0) return 0;
  return sizeof(float) * ((size_t)(batch - 1) * (size_t)sb + (size_t)(heads - 1) * (size_t)sh +
                          (size_t)(rows - 1) * (size_t)sr + (size_t)n);
}

nnc_simd_status nnc_simd_attention_bwd(const nnc_simd_attn_bwd_args *a, const nnc_simd_par *par,
                                       void *workspace, size_t workspace_bytes,
                                       nnc_simd_error *err) {
  if (!a) return nnc_simd_fail(err, KERNEL, "expected arguments, found NULL");
  if (a->batch < 0 || a->heads < 0 || a->T < 0 || a->S < 0 || a->D < 0 || a->Dv < 0)
    return nnc_simd_fail(err, KERNEL, "expected sizes >= 0, found batch=%d heads=%d T=%d S=%d "
                         "D=%d Dv=%d", a->batch, a->heads, a->T, a->S, a->D, a->Dv);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  int B = a->batch, H = a->heads, T = a->T, S = a->S, D = a->D, Dv = a->Dv;
  if (B == 0 || H == 0) return NNC_SIMD_OK;
  /* What exists: dq when T, D > 0, dk when S, D > 0, dv when S, Dv > 0;
   * the inputs are read only when there are both queries and keys. */
  int has_dq = T > 0 && D > 0, has_dk = S > 0 && D > 0, has_dv = S > 0 && Dv > 0;
  if (!has_dq && !has_dk && !has_dv) return NNC_SIMD_OK;
  int reads = T > 0 && S > 0;
  if (reads && (!a->q || !a->k || !a->v || !a->out || !a->dout || !a->lse))
    return nnc_simd_fail(err, KERNEL, "expected q, k, v, out, dout and lse, found q=%p k=%p v=%p "
                         "out=%p dout=%p lse=%p", (const void *)a->q, (const void *)a->k,
                         (const void *)a->v, (const void *)a->out, (const void *)a->dout,
                         (const void *)a->lse);
  if ((has_dq && !a->dq) || (has_dk && !a->dk) || (has_dv && !a->dv))
    return nnc_simd_fail(err, KERNEL, "expected dq, dk and dv, found dq=%p dk=%p dv=%p",
                         (void *)a->dq, (void *)a->dk, (void *)a->dv);
  if (a->q_sb < 0 || a->q_sh < 0 || a->q_st < 0 || a->k_sb < 0 || a->k_sh < 0 || a->k_st < 0 ||
      a->v_sb < 0 || a->v_sh < 0 || a->v_st < 0 || a->o_sb < 0 || a->o_sh < 0 || a->o_st < 0 ||
      a->do_sb < 0 || a->do_sh < 0 || a->do_st < 0 || a->dq_sb < 0 || a->dq_sh < 0 ||
      a->dq_st < 0 || a->dk_sb < 0 || a->dk_sh < 0 || a->dk_st < 0 || a->dv_sb < 0 ||
      a->dv_sh < 0 || a->dv_st < 0 || a->mask_sb < 0)
    return nnc_simd_fail(err, KERNEL, "expected strides >= 0, found a negative one");
  if ((T > 1 && (a->q_st < D || a->dq_st < D || a->o_st < Dv || a->do_st < Dv)) ||
      (S > 1 && (a->k_st < D || a->dk_st < D || a->v_st < Dv || a->dv_st < Dv)))
    return nnc_simd_fail(err, KERNEL, "expected row strides >= the row length (q_st, dq_st, "
                         "k_st, dk_st >= D=%d, v_st, dv_st, o_st, do_st >= Dv=%d), found q_st=%td "
                         "dq_st=%td k_st=%td dk_st=%td v_st=%td dv_st=%td o_st=%td do_st=%td", D,
                         Dv, a->q_st, a->dq_st, a->k_st, a->dk_st, a->v_st, a->dv_st, a->o_st,
                         a->do_st);
  /* Each gradient element is written by one task: no batch or head of an
   * output may share another's place. dq, dk and dv may interleave (one
   * [B, T, 3, H, D] buffer for a fused qkv projection) as long as they
   * share no element, which is not checked. */
  if ((B > 1 && ((has_dq && a->dq_sb == 0) || (has_dk && a->dk_sb == 0) ||
                 (has_dv && a->dv_sb == 0))) ||
      (H > 1 && ((has_dq && a->dq_sh == 0) || (has_dk && a->dk_sh == 0) ||
                 (has_dv && a->dv_sh == 0))))
    return nnc_simd_fail(err, KERNEL, "expected dq, dk and dv strides > 0 over batch=%d and "
                         "heads=%d, found dq_sb=%td dq_sh=%td dk_sb=%td dk_sh=%td dv_sb=%td "
                         "dv_sh=%td", B, H, a->dq_sb, a->dq_sh, a->dk_sb, a->dk_sh, a->dv_sb,
                         a->dv_sh);
  const void *outs[3] = {a->dq, a->dk, a->dv};
  size_t out_span[3] = {has_dq ? span4(B, a->dq_sb, H, a->dq_sh, T, a->dq_st, D) : 0,
                        has_dk ? span4(B, a->dk_sb, H, a->dk_sh, S, a->dk_st, D) : 0,
                        has_dv ? span4(B, a->dv_sb, H, a->dv_sh, S, a->dv_st, Dv) : 0};
  const void *ins[7] = {a->q, a->k, a->v, a->out, a->dout, a->lse, a->mask};
  size_t in_span[7] = {0};
  if (reads) {
    in_span[0] = span4(B, a->q_sb, H, a->q_sh, T, a->q_st, D);
    in_span[1] = span4(B, a->k_sb, H, a->k_sh, S, a->k_st, D);
    in_span[2] = span4(B, a->v_sb, H, a->v_sh, S, a->v_st, Dv);
    in_span[3] = span4(B, a->o_sb, H, a->o_sh, T, a->o_st, Dv);
    in_span[4] = span4(B, a->do_sb, H, a->do_sh, T, a->do_st, Dv);
    in_span[5] = sizeof(float) * (size_t)B * (size_t)H * (size_t)T;
    in_span[6] = a->mask ? span4(B, a->mask_sb, 1, 0, 1, 0, S) : 0;
  }
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 7; ++j)
      if (nnc_simd_overlaps(outs[i], out_span[i], ins[j], in_span[j]))
        return nnc_simd_fail(err, KERNEL, "expected dq, dk and dv apart from q, k, v, out, dout, "
                             "lse and mask, found them overlapping");
  }
  int nthreads = nnc_simd_threads(par);
  size_t need = nnc_simd_attention_bwd_workspace_bytes(a, nthreads);
  if (!workspace || workspace_bytes < need)
    return nnc_simd_fail(err, KERNEL, "expected a workspace of %zu bytes for %d threads, "
                         "found %zu at %p", need, nthreads, workspace ? workspace_bytes : 0,
                         workspace);
  bwd_job jb;
  jb.a = a;
  int fused = fused_order(a, nthreads);
  jb.w = ws_layout(a, fused);
  jb.ws = nnc_simd_align_ptr(workspace);
  jb.qblocks = (T + BQ - 1) / BQ;
  jb.kblocks = (S + BK - 1) / BK;
  long bh = (long)B * H;
  if (bh * (jb.qblocks > jb.kblocks ? jb.qblocks : jb.kblocks) > (1L << 30))
    return nnc_simd_fail(err, KERNEL, "expected at most 2^30 blocks, found %ld x %d",
                         bh, jb.qblocks > jb.kblocks ? jb.qblocks : jb.kblocks);
  if (fused) {
    nnc_simd_run(par, (int)bh, task_fused, &jb);
  } else {
    nnc_simd_run(par, (int)(bh * jb.kblocks), task_keys, &jb);
    nnc_simd_run(par, (int)(bh * jb.qblocks), task_queries, &jb);
  }
  return NNC_SIMD_OK;
}
