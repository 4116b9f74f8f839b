/* templates/c_simd/attention.c — scaled dot-product attention with a
 * streaming (online) softmax, FlashAttention's loop on a CPU.
 *
 * A task is one block of NNC_ATTN_BQ queries of one (batch, head). It walks
 * the keys in blocks of NNC_ATTN_BK: scores for the block (masked ones
 * -inf), then for each query row the running maximum m, the running sum l
 * of e^(s - m), and the output accumulator O are rescaled by e^(m_old - m)
 * and the block's contribution added. At the end O / l is written. Memory
 * per thread is O(BK x (D + Dv) + BQ x (BK + Dv)) whatever T and S are.
 * Key blocks past the causal limit of the whole query block, past the last
 * unmasked key, or wholly masked are never touched. A row whose keys are
 * all masked keeps m = -inf and l = 0 and is written as zeros. When asked
 * for, the row's log-sum-exp m + log l (+inf for such a row) goes to lse
 * for the backward (attention_bwd.c); nothing else changes with it.
 *
 * Both products run on a register-blocked micro-kernel like the GEMM's
 * (NNC_ATTN_MR rows x NNC_GEMM_NR columns of accumulators): S = Q . K^T
 * with the key block packed transposed ([D][NR] panels, nnc_gemm_pack_b),
 * and O += P . V with the value block packed as [BK][NR] panels. The A
 * side (Q rows, then the probabilities P) is read in place with its row
 * stride, so only the key and value blocks are copied, once per block. The
 * score and output rows are padded to NR columns so that the kernel always
 * stores whole vectors. */
#include "gemm_internal.h"
#include "simd_math.h"

#ifndef NNC_ATTN_BQ
#define NNC_ATTN_BQ 16
#endif
#ifndef NNC_ATTN_BK
#define NNC_ATTN_BK 64
#endif
#if NNC_ATTN_BK % NNC_VW != 0 || NNC_ATTN_BQ < 1
#error "NNC_ATTN_BK must be a multiple of NNC_VW and NNC_ATTN_BQ positive"
#endif

/* Rows of the micro-kernel's tile. On AVX2 4 x 16 (8 accumulators) beat
 * the GEMM's 6 x 16 by 5-10% here: the A side is read in place from 4
 * rows rather than a packed panel, and BQ (16, 32, 64) splits into whole
 * tiles of 4. */
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
/* Score row length: the key block rounded up to whole panels. */
#define LDS ((NNC_ATTN_BK + NR - 1) / NR * NR)

static const char *const KERNEL = "nnc_simd_attention";

typedef struct attn_ws {
  size_t ldo;                                  /* O row length: Dv rounded up to NR */
  size_t kp_floats, vp_floats, s_floats, o_floats, ml_floats, mb_floats, per_thread;
} attn_ws;

static attn_ws ws_layout(const nnc_simd_attn_args *a) {
  attn_ws w;
  size_t d = a && a->D > 0 ? (size_t)a->D : 0, dv = a && a->Dv > 0 ? (size_t)a->Dv : 0;
  w.ldo = nnc_simd_round_up(dv, NR);
  w.kp_floats = nnc_simd_round_up((size_t)LDS * d, 16);
  w.vp_floats = nnc_simd_round_up(w.ldo * NNC_ATTN_BK, 16);
  w.s_floats = nnc_simd_round_up((size_t)NNC_ATTN_BQ * LDS, 16);
  w.o_floats = nnc_simd_round_up((size_t)NNC_ATTN_BQ * w.ldo, 16);
  w.ml_floats = nnc_simd_round_up(2 * (size_t)NNC_ATTN_BQ, 16);
  w.mb_floats = nnc_simd_round_up((size_t)LDS, 16);
  w.per_thread = w.kp_floats + w.vp_floats + w.s_floats + w.o_floats + w.ml_floats +
                 w.mb_floats;
  return w;
}

size_t nnc_simd_attention_workspace_bytes(const nnc_simd_attn_args *a, int nthreads) {
  if (!a) return 0;
  size_t t = (size_t)(nthreads > 0 ? nthreads : 1);
  return NNC_SIMD_ALIGN + t * ws_layout(a).per_thread * sizeof(float);
}

typedef struct attn_job {
  const nnc_simd_attn_args *a;
  attn_ws w;
  float *ws;
  int qblocks;
} attn_job;

/* C[0:mr, 0:NR] (ldc) = (first ? 0 : C) + A . B for A an mr x kc block read
 * in place (row stride lda) and B a packed kc x NR panel. Rows past mr
 * repeat row mr-1, so that the tile is always full and nothing past A is
 * read; only the first mr rows are stored, always NR columns wide. */
static void attn_micro(int kc, const float *a, ptrdiff_t lda, const float *restrict b,
                       float *c, ptrdiff_t ldc, int mr, int first) {
  const float *ar[MR];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) ar[i] = a + (ptrdiff_t)(i < mr ? i : mr - 1) * lda;
  nnc_vf acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vzero();
#pragma GCC unroll 4
  for (int k = 0; k < kc; ++k) {
    nnc_vf bv[NV];
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) bv[j] = nnc_vload(b + j * NNC_VW);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      nnc_vf av = nnc_vset1(ar[i][k]);
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vfma(av, bv[j], acc[i][j]);
    }
    b += NR;
  }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= mr) break;
    float *ci = c + (ptrdiff_t)i * ldc;
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) {
      nnc_vf v = acc[i][j];
      if (!first) v = nnc_vadd(nnc_vload(ci + j * NNC_VW), v);
      nnc_vstore(ci + j * NNC_VW, v);
    }
  }
}

/* Index past the last key of a mask row that is not masked (0 if none). */
static int mask_end(const float *mask, int S) {
  int e = S;
  while (e > 0 && mask[e - 1] == 0.0f) --e;
  return e;
}

static void attn_task(void *ctx, int task, int thread) {
  const attn_job *jb = ctx;
  const nnc_simd_attn_args *a = jb->a;
  int bh = task / jb->qblocks, qb = task % jb->qblocks;
  int b = bh / a->heads, h = bh % a->heads;
  int i0 = qb * NNC_ATTN_BQ, i1 = i0 + NNC_ATTN_BQ < a->T ? i0 + NNC_ATTN_BQ : a->T;
  int nq = i1 - i0, D = a->D, Dv = a->Dv, S = a->S, shift = a->S - a->T;
  const float *q = a->q + b * a->q_sb + h * a->q_sh + (ptrdiff_t)i0 * a->q_st;
  const int hk = a->kv_group > 1 ? h / a->kv_group : h;   /* grouped-query: the head's k and v */
  const float *k = a->k + b * a->k_sb + hk * a->k_sh;
  const float *v = a->v + b * a->v_sb + hk * a->v_sh;
  /* out is NULL only when Dv == 0 and just lse is wanted. */
  float *out = a->out ? a->out + b * a->o_sb + h * a->o_sh + (ptrdiff_t)i0 * a->o_st : NULL;
  const float *mask = a->mask ? a->mask + b * a->mask_sb : NULL;

  float *kp = jb->ws + (size_t)thread * jb->w.per_thread;      /* K^T panels [LDS/NR][D][NR] */
  float *vp = kp + jb->w.kp_floats;                            /* V panels [ldo/NR][nk][NR] */
  float *sc = vp + jb->w.vp_floats;                            /* [BQ][LDS] */
  float *o = sc + jb->w.s_floats;                              /* [BQ][ldo] */
  float *m = o + jb->w.o_floats, *l = m + NNC_ATTN_BQ;
  float *mb = m + jb->w.ml_floats;                             /* [LDS]: 0 or -inf */
  ptrdiff_t ldo = (ptrdiff_t)jb->w.ldo;
  for (int r = 0; r < nq; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (ptrdiff_t d = 0; d < ldo; ++d) o[r * ldo + d] = 0.0f;
  }
  /* Keys past this are masked for every query of the block. */
  int kend = S;
  if (a->causal) {
    long lim = (long)(i1 - 1) + shift + 1;
    kend = lim < 0 ? 0 : lim < S ? (int)lim : S;
  }
  if (mask) {
    int e = mask_end(mask, kend);
    kend = e < kend ? e : kend;
  }
  const nnc_vf ninf = nnc_vset1(-INFINITY), vscale = nnc_vset1(a->scale);
  for (int j0 = 0; j0 < kend; j0 += NNC_ATTN_BK) {
    int nk = kend - j0 < NNC_ATTN_BK ? kend - j0 : NNC_ATTN_BK;
    int nkv = (int)nnc_simd_round_up((size_t)nk, NNC_VW);
    /* The block's mask as 0 / -inf; a block with every key masked adds
     * nothing and is skipped. */
    int any = !mask;
    for (int jj = 0; jj < nkv; ++jj) {
      int keep = jj < nk && (!mask || mask[j0 + jj] != 0.0f);
      mb[jj] = keep ? 0.0f : -INFINITY;
      any |= keep;
    }
    if (!any) continue;
    /* Scores: S[0:nq, 0:nk] = Q . K^T, whole NR-wide panels. */
    nnc_gemm_pack_b(k + (ptrdiff_t)j0 * a->k_st, a->k_st, 1, 0, D, 0, nk, kp);
    for (int r = 0; r < nq; r += MR)
      for (int jr = 0; jr < nk; jr += NR)
        attn_micro(D, q + r * a->q_st, a->q_st, kp + (ptrdiff_t)jr * D, sc + r * LDS + jr, LDS,
                   nq - r < MR ? nq - r : MR, 1);
    /* Online softmax update, row by row; P overwrites the scores. */
    for (int r = 0; r < nq; ++r) {
      float *sr = sc + r * LDS;
      for (int jj = 0; jj < nkv; jj += NNC_VW) {
        nnc_vf sv = nnc_vmul(nnc_vload(sr + jj), vscale);
        nnc_vstore(sr + jj, nnc_vsel(nnc_vlt(nnc_vload(mb + jj), nnc_vzero()), ninf, sv));
      }
      if (a->causal) {
        long vis = (long)i0 + r + shift - j0 + 1; /* keys of the block this row sees */
        for (long jj = vis < 0 ? 0 : vis; jj < nk; ++jj) sr[jj] = -INFINITY;
      }
      nnc_vf vmx = ninf;
      for (int jj = 0; jj < nkv; jj += NNC_VW) vmx = nnc_vmax(vmx, nnc_vload(sr + jj));
      float bmax = nnc_vhmax(vmx);
      float mnew = bmax > m[r] ? bmax : m[r];
      if (mnew == -INFINITY) {
        /* Nothing unmasked yet: this row adds nothing to O. */
        for (int jj = 0; jj < nkv; ++jj) sr[jj] = 0.0f;
        continue;
      }
      nnc_vf vm = nnc_vset1(mnew), vs = nnc_vzero();
      for (int jj = 0; jj < nkv; jj += NNC_VW) {
        nnc_vf p = nnc_vexp(nnc_vsub(nnc_vload(sr + jj), vm));
        nnc_vstore(sr + jj, p);
        vs = nnc_vadd(vs, p);
      }
      if (m[r] != -INFINITY && m[r] != mnew) {
        float corr = expf(m[r] - mnew);
        nnc_vf vc = nnc_vset1(corr);
        float *orow = o + r * ldo;
        for (ptrdiff_t d = 0; d < ldo; d += NNC_VW)
          nnc_vstore(orow + d, nnc_vmul(nnc_vload(orow + d), vc));
        l[r] *= corr;
      }
      l[r] += nnc_vhsum(vs);
      m[r] = mnew;
    }
    /* O[0:nq, :] += P . V. */
    nnc_gemm_pack_b(v + (ptrdiff_t)j0 * a->v_st, a->v_st, 0, 0, nk, 0, Dv, vp);
    for (int r = 0; r < nq; r += MR)
      for (int jr = 0; jr < Dv; jr += NR)
        attn_micro(nk, sc + r * LDS, LDS, vp + (ptrdiff_t)jr * nk, o + r * ldo + jr, ldo,
                   nq - r < MR ? nq - r : MR, 0);
  }
  if (a->lse) {
    float *lse = a->lse + ((ptrdiff_t)b * a->heads + h) * a->T + i0;
    for (int r = 0; r < nq; ++r) lse[r] = l[r] > 0.0f ? m[r] + logf(l[r]) : INFINITY;
  }
  for (int r = 0; r < nq && Dv > 0; ++r) {
    float *dst = out + r * a->o_st;
    if (l[r] > 0.0f) {
      float inv = 1.0f / l[r];
      for (int d = 0; d < Dv; ++d) dst[d] = o[r * ldo + d] * inv;
    } else {
      for (int d = 0; d < Dv; ++d) dst[d] = 0.0f;
    }
  }
}

/* Bytes from the start of a [batch, heads, rows, n] strided tensor to one
 * past its last element. */
static size_t span4(int batch, ptrdiff_t sb, int heads, ptrdiff_t sh, int rows, ptrdiff_t sr,
                    int n) {
  if (batch <= 0 || heads <= 0 || rows <= 0 || n <= 0) return 0;
  return sizeof(float) * ((size_t)(batch - 1) * (size_t)sb + (size_t)(heads - 1) * (size_t)sh +
                          (size_t)(rows - 1) * (size_t)sr + (size_t)n);
}

nnc_simd_status nnc_simd_attention(const nnc_simd_attn_args *a, const nnc_simd_par *par,
                                   void *workspace, size_t workspace_bytes,
                                   nnc_simd_error *err) {
  if (!a) return nnc_simd_fail(err, KERNEL, "expected arguments, found NULL");
  if (a->batch < 0 || a->heads < 0 || a->T < 0 || a->S < 0 || a->D < 0 || a->Dv < 0)
    return nnc_simd_fail(err, KERNEL, "expected sizes >= 0, found batch=%d heads=%d T=%d S=%d "
                         "D=%d Dv=%d", a->batch, a->heads, a->T, a->S, a->D, a->Dv);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  /* With Dv == 0 there is no output, but lse is still wanted. */
  if (a->batch == 0 || a->heads == 0 || a->T == 0 || (a->Dv == 0 && !a->lse))
    return NNC_SIMD_OK;
  if ((a->Dv > 0 && !a->out) || (a->S > 0 && (!a->v || (a->D > 0 && (!a->q || !a->k)))))
    return nnc_simd_fail(err, KERNEL, "expected q, k, v and out, found q=%p k=%p v=%p out=%p",
                         (const void *)a->q, (const void *)a->k, (const void *)a->v,
                         (void *)a->out);
  if (a->q_sb < 0 || a->q_sh < 0 || a->q_st < 0 || a->k_sb < 0 || a->k_sh < 0 || a->k_st < 0 ||
      a->v_sb < 0 || a->v_sh < 0 || a->v_st < 0 || a->o_sb < 0 || a->o_sh < 0 || a->o_st < 0 ||
      a->mask_sb < 0)
    return nnc_simd_fail(err, KERNEL, "expected strides >= 0, found a negative one");
  if (a->kv_group < 0 || (a->kv_group > 1 && a->heads % a->kv_group != 0))
    return nnc_simd_fail(err, KERNEL, "expected kv_group >= 0 dividing heads=%d, found %d", a->heads,
                         a->kv_group);
  /* the k and v heads that exist */
  const int kvh = a->kv_group > 1 ? a->heads / a->kv_group : a->heads;
  if ((a->T > 1 && a->q_st < a->D) || (a->S > 1 && (a->k_st < a->D || a->v_st < a->Dv)) ||
      (a->T > 1 && a->o_st < a->Dv))
    return nnc_simd_fail(err, KERNEL, "expected row strides >= the row length (q_st, k_st >= "
                         "D=%d, v_st, o_st >= Dv=%d), found q_st=%td k_st=%td v_st=%td o_st=%td",
                         a->D, a->Dv, a->q_st, a->k_st, a->v_st, a->o_st);
  size_t o_span = span4(a->batch, a->o_sb, a->heads, a->o_sh, a->T, a->o_st, a->Dv);
  if ((a->S > 0 && nnc_simd_overlaps(a->out, o_span, a->v,
                                     span4(a->batch, a->v_sb, kvh, a->v_sh, a->S, a->v_st,
                                           a->Dv))) ||
      (a->S > 0 && nnc_simd_overlaps(a->out, o_span, a->k,
                                     span4(a->batch, a->k_sb, kvh, a->k_sh, a->S, a->k_st,
                                           a->D))) ||
      nnc_simd_overlaps(a->out, o_span, a->q,
                        span4(a->batch, a->q_sb, a->heads, a->q_sh, a->T, a->q_st, a->D)))
    return nnc_simd_fail(err, KERNEL, "expected out apart from q, k and v, found them overlapping");
  size_t l_span = sizeof(float) * (size_t)a->batch * (size_t)a->heads * (size_t)a->T;
  if (a->lse &&
      ((a->S > 0 && nnc_simd_overlaps(a->lse, l_span, a->v,
                                      span4(a->batch, a->v_sb, kvh, a->v_sh, a->S, a->v_st,
                                            a->Dv))) ||
       (a->S > 0 && nnc_simd_overlaps(a->lse, l_span, a->k,
                                      span4(a->batch, a->k_sb, kvh, a->k_sh, a->S, a->k_st,
                                            a->D))) ||
       nnc_simd_overlaps(a->lse, l_span, a->q,
                         span4(a->batch, a->q_sb, a->heads, a->q_sh, a->T, a->q_st, a->D)) ||
       nnc_simd_overlaps(a->lse, l_span, a->out, o_span)))
    return nnc_simd_fail(err, KERNEL, "expected lse apart from q, k, v and out, found them "
                         "overlapping");
  int nthreads = nnc_simd_threads(par);
  size_t need = nnc_simd_attention_workspace_bytes(a, nthreads);
  if (!workspace || workspace_bytes < need)
    return nnc_simd_fail(err, KERNEL, "expected a workspace of %zu bytes for %d threads, "
                         "found %zu at %p", need, nthreads, workspace ? workspace_bytes : 0,
                         workspace);
  attn_job jb;
  jb.a = a;
  jb.w = ws_layout(a);
  jb.ws = nnc_simd_align_ptr(workspace);
  jb.qblocks = (a->T + NNC_ATTN_BQ - 1) / NNC_ATTN_BQ;
  long ntasks = (long)a->batch * a->heads * jb.qblocks;
  if (ntasks > (1L << 30))
    return nnc_simd_fail(err, KERNEL, "expected at most 2^30 query blocks, found %ld", ntasks);
  nnc_simd_run(par, (int)ntasks, attn_task, &jb);
  return NNC_SIMD_OK;
}
