/* templates/opencl/attention.cl — out = softmax(scale * q . k^T + masks) . v
 * for every (batch, head), with an online softmax over blocks of keys, so
 * memory does not grow with T*S.
 *
 * Macros (all optional):
 *   NNC_BQ      queries per work-group, one per work-item (16)
 *   NNC_BK      keys per block staged in local memory (16)
 *   NNC_D_MAX   largest D the kernel accepts (128): sizes private and local arrays
 *   NNC_DV_MAX  largest Dv (128)
 *   NNC_ATT_VEC 1: D == NNC_D_MAX and Dv == NNC_DV_MAX, both multiples of 8:
 *               rows move and multiply as float8 vectors, which a CPU driver
 *               turns into vector instructions (0)
 *   NNC_MASK_I32 1: mask is int (an i32 input), 0: the storage type (0)
 * Global size (ceil(T/BQ) * BQ, heads, batch), local size (BQ, 1, 1).
 * The host must keep D <= NNC_D_MAX and Dv <= NNC_DV_MAX (equal with
 * NNC_ATT_VEC): the kernel cannot report an error. */
#ifndef NNC_BQ
#define NNC_BQ 16
#endif
#ifndef NNC_BK
#define NNC_BK 16
#endif
#ifndef NNC_D_MAX
#define NNC_D_MAX 128
#endif
#ifndef NNC_DV_MAX
#define NNC_DV_MAX 128
#endif
#ifndef NNC_ATT_VEC
#define NNC_ATT_VEC 0
#endif
#if NNC_ATT_VEC && (NNC_D_MAX % 8 != 0 || NNC_DV_MAX % 8 != 0)
#error "NNC_ATT_VEC needs NNC_D_MAX and NNC_DV_MAX multiples of 8"
#endif
#ifndef NNC_MASK_I32
#define NNC_MASK_I32 0
#endif
#if NNC_MASK_I32
#define NNC_MASK_T int
#define NNC_MASK_KEEP(p, i) ((p)[i] != 0)
#else
#define NNC_MASK_T nnc_t
#define NNC_MASK_KEEP(p, i) (NNC_LOAD(p, i) != 0.0f)
#endif

/* Element (b, h, i, d) of q is at q[b*q_sb + h*q_sh + i*q_st + d], likewise
 * for k (i < S), v (i < S, d < Dv) and out (d < Dv). causal: key j is masked
 * for query i when j > i + (S - T). mask (may be NULL) is [batch, S] with row
 * stride mask_sb: key j of batch b is masked when mask[b*mask_sb + j] == 0.
 * A query whose keys are all masked gives a row of zeros. kv_group (>= 1):
 * query heads h read the k and v of head h / kv_group (grouped-query
 * attention). */
__kernel __attribute__((reqd_work_group_size(NNC_BQ, 1, 1)))
void nnc_attention(int T, int S, int D, int Dv,
                   __global const nnc_t *q, long q_sb, long q_sh, long q_st,
                   __global const nnc_t *k, long k_sb, long k_sh, long k_st,
                   __global const nnc_t *v, long v_sb, long v_sh, long v_st,
                   __global nnc_t *out, long o_sb, long o_sh, long o_st,
                   float scale, int causal, __global const NNC_MASK_T *mask, long mask_sb, int kv_group) {
  __local float Ks[NNC_BK][NNC_D_MAX];
  __local float Vs[NNC_BK][NNC_DV_MAX];
  __local int Keep[NNC_BK];
  const int lid = (int)get_local_id(0);
  const int i = (int)get_global_id(0);
  const long h = (long)get_global_id(1), b = (long)get_global_id(2);
  const bool live = i < T;
  q += b * q_sb + h * q_sh;
  k += b * k_sb + h / kv_group * k_sh;
  v += b * v_sb + h / kv_group * v_sh;

#if NNC_ATT_VEC
  float8 qi[NNC_D_MAX / 8], acc[NNC_DV_MAX / 8];
  for (int d = 0; d < NNC_D_MAX / 8; ++d) qi[d] = live ? NNC_VLOAD(8, q + (long)i * q_st + 8 * d) * scale : (float8)(0.0f);
  for (int d = 0; d < NNC_DV_MAX / 8; ++d) acc[d] = (float8)(0.0f);
#else
  float qi[NNC_D_MAX], acc[NNC_DV_MAX];
  for (int d = 0; d < D; ++d) qi[d] = live ? NNC_LOAD(q, (long)i * q_st + d) * scale : 0.0f;
  for (int d = 0; d < Dv; ++d) acc[d] = 0.0f;
#endif
  float m = -INFINITY, l = 0.0f;

  /* keys past the group's last query (causal) are masked for all of it */
  int send = S;
  if (causal) {
    const int last = min((int)get_group_id(0) * NNC_BQ + NNC_BQ - 1, T - 1);
    send = clamp(last + 1 + (S - T), 0, S);
  }
  const int jlim = causal ? i + (S - T) : S - 1; /* the last key query i may see */

  for (int j0 = 0; j0 < send; j0 += NNC_BK) {
    const int nk = min(NNC_BK, send - j0);
#if NNC_ATT_VEC
    for (int e = lid; e < nk * (NNC_D_MAX / 8); e += NNC_BQ) {
      const int jj = e / (NNC_D_MAX / 8), d = e % (NNC_D_MAX / 8);
      vstore8(NNC_VLOAD(8, k + (long)(j0 + jj) * k_st + 8 * d), d, Ks[jj]);
    }
    for (int e = lid; e < nk * (NNC_DV_MAX / 8); e += NNC_BQ) {
      const int jj = e / (NNC_DV_MAX / 8), d = e % (NNC_DV_MAX / 8);
      vstore8(NNC_VLOAD(8, v + (long)(j0 + jj) * v_st + 8 * d), d, Vs[jj]);
    }
#else
    for (int e = lid; e < nk * D; e += NNC_BQ) {
      const int jj = e / D, d = e % D;
      Ks[jj][d] = NNC_LOAD(k, (long)(j0 + jj) * k_st + d);
    }
    for (int e = lid; e < nk * Dv; e += NNC_BQ) {
      const int jj = e / Dv, d = e % Dv;
      Vs[jj][d] = NNC_LOAD(v, (long)(j0 + jj) * v_st + d);
    }
#endif
    for (int jj = lid; jj < nk; jj += NNC_BQ)
      Keep[jj] = mask ? NNC_MASK_KEEP(mask, b * mask_sb + j0 + jj) : 1;
    barrier(CLK_LOCAL_MEM_FENCE);

    float s[NNC_BK];
    float bm = -INFINITY;
    for (int jj = 0; jj < nk; ++jj) {
      s[jj] = -INFINITY;
      if (live && Keep[jj] && j0 + jj <= jlim) {
#if NNC_ATT_VEC
        float8 d8 = (float8)(0.0f);
        for (int d = 0; d < NNC_D_MAX / 8; ++d) d8 = fma(qi[d], vload8(d, Ks[jj]), d8);
        const float4 d4 = d8.lo + d8.hi;
        const float2 d2 = d4.lo + d4.hi;
        const float dot = d2.x + d2.y;
#else
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot = fma(qi[d], Ks[jj][d], dot);
#endif
        s[jj] = dot;
        bm = fmax(bm, dot);
      }
    }
    if (bm != -INFINITY) {
      const float mn = fmax(m, bm);
      const float corr = exp(m - mn); /* 0 while m is still -inf */
      l *= corr;
#if NNC_ATT_VEC
      for (int d = 0; d < NNC_DV_MAX / 8; ++d) acc[d] *= corr;
      for (int jj = 0; jj < nk; ++jj) {
        if (s[jj] == -INFINITY) continue;
        const float p = exp(s[jj] - mn);
        l += p;
        for (int d = 0; d < NNC_DV_MAX / 8; ++d) acc[d] = fma((float8)(p), vload8(d, Vs[jj]), acc[d]);
      }
#else
      for (int d = 0; d < Dv; ++d) acc[d] *= corr;
      for (int jj = 0; jj < nk; ++jj) {
        if (s[jj] == -INFINITY) continue;
        const float p = exp(s[jj] - mn);
        l += p;
        for (int d = 0; d < Dv; ++d) acc[d] = fma(p, Vs[jj][d], acc[d]);
      }
#endif
      m = mn;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  if (!live) return;
  __global nnc_t *o = out + b * o_sb + h * o_sh + (long)i * o_st;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#if NNC_ATT_VEC
  for (int d = 0; d < NNC_DV_MAX / 8; ++d) NNC_VSTORE(8, acc[d] * inv, o + 8 * d);
#else
  for (int d = 0; d < Dv; ++d) NNC_STORE(o, d, acc[d] * inv);
#endif
}
