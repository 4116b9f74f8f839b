/* templates/c_simd/attention.c — scaled dot-product attention with a
 * streaming (online) softmax, FlashAttention's loop on a CPU.
 *
 * A task is one block of NNC_ATTN_BQ queries of one (batch, head). It walks
 * the keys in blocks of NNC_ATTN_BK: scores for the block (masked ones
 * -inf), then for each query row the running maximum m, the running sum l
 * of e^(s - m), and the output accumulator O are rescaled by e^(m_old - m)
 * and the block's contribution added. At the end O / l is written. Memory
 * per thread is BQ x (BK + Dv) floats whatever T and S are. Key blocks past
 * the causal limit of the whole query block are never touched. A row whose
 * keys are all masked keeps m = -inf and l = 0 and is written as zeros. */
#include "internal.h"
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

static const char *const KERNEL = "nnc_simd_attention";

typedef struct attn_ws {
  size_t s_floats, o_floats, ml_floats, per_thread;
} attn_ws;

static attn_ws ws_layout(const nnc_simd_attn_args *a) {
  attn_ws w;
  size_t dv = a && a->Dv > 0 ? (size_t)a->Dv : 0;
  w.s_floats = (size_t)NNC_ATTN_BQ * NNC_ATTN_BK;
  w.o_floats = nnc_simd_round_up((size_t)NNC_ATTN_BQ * nnc_simd_round_up(dv, NNC_VW), 16);
  w.ml_floats = nnc_simd_round_up(2 * (size_t)NNC_ATTN_BQ, 16);
  w.per_thread = w.s_floats + w.o_floats + w.ml_floats;
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

static float dot(const float *x, const float *y, int n) {
  nnc_vf s = nnc_vzero();
  int d = 0;
  for (; d + NNC_VW <= n; d += NNC_VW) s = nnc_vfma(nnc_vload(x + d), nnc_vload(y + d), s);
  float r = nnc_vhsum(s);
  for (; d < n; ++d) r += x[d] * y[d];
  return r;
}

/* Dot products of 4 query rows with one key row, sharing the key loads. */
static void dot4(const float *q0, const float *q1, const float *q2, const float *q3,
                 const float *k, int n, float *out) {
  nnc_vf s0 = nnc_vzero(), s1 = nnc_vzero(), s2 = nnc_vzero(), s3 = nnc_vzero();
  int d = 0;
  for (; d + NNC_VW <= n; d += NNC_VW) {
    nnc_vf kv = nnc_vload(k + d);
    s0 = nnc_vfma(nnc_vload(q0 + d), kv, s0);
    s1 = nnc_vfma(nnc_vload(q1 + d), kv, s1);
    s2 = nnc_vfma(nnc_vload(q2 + d), kv, s2);
    s3 = nnc_vfma(nnc_vload(q3 + d), kv, s3);
  }
  float r0 = nnc_vhsum(s0), r1 = nnc_vhsum(s1), r2 = nnc_vhsum(s2), r3 = nnc_vhsum(s3);
  for (; d < n; ++d) {
    r0 += q0[d] * k[d];
    r1 += q1[d] * k[d];
    r2 += q2[d] * k[d];
    r3 += q3[d] * k[d];
  }
  out[0] = r0;
  out[1] = r1;
  out[2] = r2;
  out[3] = r3;
}

/* y[0..n) = y * c + p * x, vectorised. */
static void scale_axpy(float *y, float c, float p, const float *x, int n) {
  nnc_vf vc = nnc_vset1(c), vp = nnc_vset1(p);
  int d = 0;
  for (; d + NNC_VW <= n; d += NNC_VW)
    nnc_vstore(y + d, nnc_vfma(vp, nnc_vload(x + d), nnc_vmul(nnc_vload(y + d), vc)));
  for (; d < n; ++d) y[d] = y[d] * c + p * x[d];
}

static void attn_task(void *ctx, int task, int thread) {
  const attn_job *jb = ctx;
  const nnc_simd_attn_args *a = jb->a;
  int bh = task / jb->qblocks, qb = task % jb->qblocks;
  int b = bh / a->heads, h = bh % a->heads;
  int i0 = qb * NNC_ATTN_BQ, i1 = i0 + NNC_ATTN_BQ < a->T ? i0 + NNC_ATTN_BQ : a->T;
  int nq = i1 - i0, D = a->D, Dv = a->Dv, S = a->S, shift = a->S - a->T;
  const float *q = a->q + b * a->q_sb + h * a->q_sh + (ptrdiff_t)i0 * a->q_st;
  const float *k = a->k + b * a->k_sb + h * a->k_sh;
  const float *v = a->v + b * a->v_sb + h * a->v_sh;
  float *out = a->out + b * a->o_sb + h * a->o_sh + (ptrdiff_t)i0 * a->o_st;
  const float *mask = a->mask ? a->mask + b * a->mask_sb : NULL;

  float *sc = jb->ws + (size_t)thread * jb->w.per_thread;      /* [BQ][BK] */
  float *o = sc + jb->w.s_floats;                              /* [BQ][ldo] */
  float *m = o + jb->w.o_floats, *l = m + NNC_ATTN_BQ;
  ptrdiff_t ldo = (ptrdiff_t)nnc_simd_round_up((size_t)Dv, NNC_VW);
  for (int r = 0; r < nq; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int d = 0; d < Dv; ++d) o[r * ldo + d] = 0.0f;
  }
  /* Keys past this are masked for every query of the block. */
  int kend = S;
  if (a->causal) {
    long lim = (long)(i1 - 1) + shift + 1;
    kend = lim < 0 ? 0 : lim < S ? (int)lim : S;
  }
  for (int j0 = 0; j0 < kend; j0 += NNC_ATTN_BK) {
    int nk = kend - j0 < NNC_ATTN_BK ? kend - j0 : NNC_ATTN_BK;
    /* Scores; every unused slot of the tile is -inf so whole vectors work. */
    for (int jj = 0; jj < nk; ++jj) {
      const float *kj = k + (ptrdiff_t)(j0 + jj) * a->k_st;
      int r = 0;
      for (; r + 4 <= nq; r += 4) {
        float s4[4];
        dot4(q + r * a->q_st, q + (r + 1) * a->q_st, q + (r + 2) * a->q_st,
             q + (r + 3) * a->q_st, kj, D, s4);
        for (int t = 0; t < 4; ++t) sc[(r + t) * NNC_ATTN_BK + jj] = s4[t] * a->scale;
      }
      for (; r < nq; ++r) sc[r * NNC_ATTN_BK + jj] = dot(q + r * a->q_st, kj, D) * a->scale;
    }
    for (int r = 0; r < nq; ++r) {
      float *sr = sc + r * NNC_ATTN_BK;
      for (int jj = nk; jj < NNC_ATTN_BK; ++jj) sr[jj] = -INFINITY;
      for (int jj = 0; jj < nk; ++jj) {
        int j = j0 + jj;
        if ((a->causal && j > i0 + r + shift) || (mask && mask[j] == 0.0f)) sr[jj] = -INFINITY;
      }
    }
    /* Online softmax update, row by row. */
    for (int r = 0; r < nq; ++r) {
      float *sr = sc + r * NNC_ATTN_BK;
      nnc_vf vmx = nnc_vset1(-INFINITY);
      for (int jj = 0; jj < NNC_ATTN_BK; jj += NNC_VW) vmx = nnc_vmax(vmx, nnc_vload(sr + jj));
      float bmax = nnc_vhmax(vmx);
      float mnew = bmax > m[r] ? bmax : m[r];
      if (mnew == -INFINITY) continue; /* nothing unmasked yet */
      float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - mnew);
      nnc_vf vm = nnc_vset1(mnew), vs = nnc_vzero();
      for (int jj = 0; jj < NNC_ATTN_BK; jj += NNC_VW) {
        nnc_vf p = nnc_vexp(nnc_vsub(nnc_vload(sr + jj), vm));
        nnc_vstore(sr + jj, p);
        vs = nnc_vadd(vs, p);
      }
      l[r] = l[r] * corr + nnc_vhsum(vs);
      m[r] = mnew;
      float *orow = o + r * ldo;
      float c = corr;
      for (int jj = 0; jj < nk; ++jj) {
        if (sr[jj] == 0.0f) continue;
        scale_axpy(orow, c, sr[jj], v + (ptrdiff_t)(j0 + jj) * a->v_st, Dv);
        c = 1.0f;
      }
      if (c != 1.0f)
        for (int d = 0; d < Dv; ++d) orow[d] *= c;
    }
  }
  for (int r = 0; r < nq; ++r) {
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
  if (a->batch == 0 || a->heads == 0 || a->T == 0 || a->Dv == 0) return NNC_SIMD_OK;
  if (!a->out || (a->S > 0 && (!a->v || (a->D > 0 && (!a->q || !a->k)))))
    return nnc_simd_fail(err, KERNEL, "expected q, k, v and out, found q=%p k=%p v=%p out=%p",
                         (const void *)a->q, (const void *)a->k, (const void *)a->v,
                         (void *)a->out);
  if (a->q_sb < 0 || a->q_sh < 0 || a->q_st < 0 || a->k_sb < 0 || a->k_sh < 0 || a->k_st < 0 ||
      a->v_sb < 0 || a->v_sh < 0 || a->v_st < 0 || a->o_sb < 0 || a->o_sh < 0 || a->o_st < 0 ||
      a->mask_sb < 0)
    return nnc_simd_fail(err, KERNEL, "expected strides >= 0, found a negative one");
  if ((a->T > 1 && a->q_st < a->D) || (a->S > 1 && (a->k_st < a->D || a->v_st < a->Dv)) ||
      (a->T > 1 && a->o_st < a->Dv))
    return nnc_simd_fail(err, KERNEL, "expected row strides >= the row length (q_st, k_st >= "
                         "D=%d, v_st, o_st >= Dv=%d), found q_st=%td k_st=%td v_st=%td o_st=%td",
                         a->D, a->Dv, a->q_st, a->k_st, a->v_st, a->o_st);
  size_t o_span = span4(a->batch, a->o_sb, a->heads, a->o_sh, a->T, a->o_st, a->Dv);
  if ((a->S > 0 && nnc_simd_overlaps(a->out, o_span, a->v,
                                     span4(a->batch, a->v_sb, a->heads, a->v_sh, a->S, a->v_st,
                                           a->Dv))) ||
      (a->S > 0 && nnc_simd_overlaps(a->out, o_span, a->k,
                                     span4(a->batch, a->k_sb, a->heads, a->k_sh, a->S, a->k_st,
                                           a->D))) ||
      nnc_simd_overlaps(a->out, o_span, a->q,
                        span4(a->batch, a->q_sb, a->heads, a->q_sh, a->T, a->q_st, a->D)))
    return nnc_simd_fail(err, KERNEL, "expected out apart from q, k and v, found them overlapping");
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
