/* templates/opencl/gemm.cl — C = act(alpha * P(A) . B + bias) + residual,
 * batched; and the row statistics kernel that the LayerNorm/RMSNorm
 * prologue P needs.
 *
 * Two ways of computing the same product, one per kind of device:
 *   NNC_GEMM_CPU 0 (GPUs): a TM x TN tile of C a work-group, A and B tiles
 *     of TK steps staged in local memory, WM x WN outputs a work-item;
 *     neighbouring items touch neighbouring addresses.
 *   NNC_GEMM_CPU 1 (CPUs, PoCL): each work-item keeps an MR x NR block of C
 *     in NNC_VW-wide vector registers (MR*NR/VW accumulators, the C SIMD
 *     micro-kernel's shape); the group packs KC steps of its A rows and B
 *     columns into local memory once (A row-major with the prologue applied,
 *     B as one KC x NR panel per item column, so every item streams its
 *     panel with unit stride). A CPU driver runs a group as a loop over its
 *     items, so the packed panels stay in cache while the items reuse them.
 * Both add the products in blocks (NNC_KB steps on a GPU, KC on a CPU) and
 * the blocks' sums together, which keeps long K within 1e-5 of float64.
 *
 * Macros (all optional):
 *   NNC_GEMM_CPU            which way (0)
 *   NNC_A_TRANS             1: A is [K,M] (lda >= M; a folded transpose, with no
 *                           prologue); 0: [M,K] (0)
 *   NNC_B_TRANS             1: B is [N,K] (nn.Linear weights); 0: [K,N] (0)
 *   NNC_ACT                 an NNC_ACT_* code of common.cl (NNC_ACT_NONE)
 *   NNC_PROLOGUE            0 none, 1 layernorm, 2 rmsnorm (0)
 *   NNC_WG                  work-group size of nnc_gemm_row_stats (256, a power of two)
 *   NNC_C_F32               1: C is f32 whatever the storage of the other
 *                           operands (the widening cast of a narrow result
 *                           before a model output, fused in) (0)
 * GPU way:
 *   NNC_TM, NNC_TN, NNC_TK  tile of C rows, C columns and K per step (32, 32, 8)
 *   NNC_WM, NNC_WN          C elements per work-item along M and N (4, 4);
 *                           local size (NNC_TN/NNC_WN, NNC_TM/NNC_WM, 1)
 *   NNC_KB                  K steps summed before their sum joins the total (256)
 * CPU way:
 *   NNC_VW                  floats a vector: 4, 8 or 16 (8)
 *   NNC_MR, NNC_NR          C rows and columns a work-item (6, 2*NNC_VW)
 *   NNC_KC                  K steps packed at once, a multiple of NNC_VW (256)
 *   NNC_LM, NNC_LN          work-items along M and N: local size (NNC_LM, NNC_LN, 1) (8, 8)
 */
#ifndef NNC_GEMM_CPU
#define NNC_GEMM_CPU 0
#endif
#ifndef NNC_A_TRANS
#define NNC_A_TRANS 0
#endif
#ifndef NNC_B_TRANS
#define NNC_B_TRANS 0
#endif
#if NNC_A_TRANS && NNC_PROLOGUE != 0
#error "NNC_A_TRANS: the prologue normalises rows of A [M,K]"
#endif
#ifndef NNC_ACT
#define NNC_ACT NNC_ACT_NONE
#endif
#ifndef NNC_PROLOGUE
#define NNC_PROLOGUE 0
#endif
#ifndef NNC_WG
#define NNC_WG 256
#endif
#ifndef NNC_C_F32
#define NNC_C_F32 0
#endif
#if NNC_C_F32
#define NNC_C_T float
#define NNC_STORE_C NNC_STORE_F32
#define NNC_VSTORE_C NNC_VSTORE_F32
#else
#define NNC_C_T nnc_t
#define NNC_STORE_C NNC_STORE
#define NNC_VSTORE_C NNC_VSTORE
#endif

/* stats[2*(b*M + m)] = mean (0 for rmsnorm) and stats[2*(b*M + m) + 1] =
 * 1/sqrt(var + eps) (of mean(a^2) + eps for rmsnorm) of row m of batch item
 * b of A [M,K] (at A + a_off). Global size exactly (M * NNC_WG, batch), local
 * size (NNC_WG, 1): no group may return before the barriers of the
 * reduction. */
__kernel __attribute__((reqd_work_group_size(NNC_WG, 1, 1)))
void nnc_gemm_row_stats(int M, int K, __global const nnc_t *A, long a_off, long lda, long stride_a,
                        float eps, __global float *stats) {
  __local float scratch[NNC_WG];
  const int m = (int)get_group_id(0), lid = (int)get_local_id(0);
  const long b = (long)get_global_id(1);
  __global const nnc_t *a = A + a_off + b * stride_a + (long)m * lda;
  float mean = 0.0f;
#if NNC_PROLOGUE == 1
  float s = 0.0f;
  for (int k = lid; k < K; k += NNC_WG) s += NNC_LOAD(a, k);
  mean = nnc_wg_sum(s, scratch, NNC_WG) / (float)K;
#endif
  float q = 0.0f;
  for (int k = lid; k < K; k += NNC_WG) {
    const float d = NNC_LOAD(a, k) - mean;
    q += d * d;
  }
  q = nnc_wg_sum(q, scratch, NNC_WG);
  if (lid == 0) {
    stats[2 * (b * M + m)] = mean;
    stats[2 * (b * M + m) + 1] = rsqrt(q / (float)K + eps);
  }
}

/* nnc_gemm: batch item b = get_global_id(2) uses A + a_off + b*stride_a,
 * B + b_off + b*stride_b, C + c_off + b*stride_c and residual + r_off +
 * b*stride_r (a stride of 0 broadcasts); bias [N] is shared. bias and
 * residual may be NULL. With a prologue, stats comes from
 * nnc_gemm_row_stats over the same A, gamma [K] is required and beta [K] may
 * be NULL; without one, stats, gamma and beta are unused (NULL). K == 0
 * gives a zero product. No work-item returns early: every one reaches every
 * barrier. */
#define NNC_GEMM_ARGS                                                                              \
  int M, int N, int K, __global const nnc_t *A, long a_off, long lda, long stride_a,             \
      __global const nnc_t *B, long b_off, long ldb, long stride_b, __global NNC_C_T *C, long c_off, \
      long ldc, long stride_c, float alpha, __global const nnc_t *bias,                            \
      __global const nnc_t *residual, long r_off, long ldr, long stride_r,                         \
      __global const float *stats, __global const nnc_t *gamma, __global const nnc_t *beta

/* NNC_RES_MUL 1: the residual multiplies instead of adding (SwiGLU's up
 * projection times silu(gate)) */
#ifndef NNC_RES_MUL
#define NNC_RES_MUL 0
#endif
#if NNC_RES_MUL
#define NNC_RES(o, r) ((o) * (r))
#else
#define NNC_RES(o, r) ((o) + (r))
#endif

/* The epilogue of one element: v is the K sum. */
#define NNC_GEMM_STORE(m, n, v)                                                      \
  do {                                                                               \
    float o_ = alpha * (v);                                                          \
    if (bias) o_ += NNC_LOAD(bias, n);                                               \
    o_ = nnc_act(NNC_ACT, o_);                                                       \
    if (residual) o_ = NNC_RES(o_, NNC_LOAD(residual, r_off + b * stride_r + (long)(m) * ldr + (n))); \
    NNC_STORE_C(C, (long)(m) * ldc + (n), o_);                                       \
  } while (0)

#if NNC_GEMM_CPU == 0
/* ------------------------------------------------------------ the GPU way */
#ifndef NNC_TM
#define NNC_TM 32
#endif
#ifndef NNC_TN
#define NNC_TN 32
#endif
#ifndef NNC_TK
#define NNC_TK 8
#endif
#ifndef NNC_WM
#define NNC_WM 4
#endif
#ifndef NNC_WN
#define NNC_WN 4
#endif
#ifndef NNC_KB
#define NNC_KB 256
#endif

#define NNC_LX (NNC_TN / NNC_WN)
#define NNC_LY (NNC_TM / NNC_WM)
#define NNC_NT (NNC_LX * NNC_LY)

#if NNC_TM % NNC_WM != 0 || NNC_TN % NNC_WN != 0
#error "NNC_TM must be a multiple of NNC_WM and NNC_TN of NNC_WN"
#endif

/* Global size (ceil(N/TN) * LX, ceil(M/TM) * LY, batch), local (LX, LY, 1).
 * Each work-item owns the C elements (ly + i*TM/WM, lx + j*TN/WN) of its
 * group's tile. */
__kernel __attribute__((reqd_work_group_size(NNC_LX, NNC_LY, 1)))
void nnc_gemm(NNC_GEMM_ARGS) {
  __local float As[NNC_TK][NNC_TM];
  __local float Bs[NNC_TK][NNC_TN];
  const int lx = (int)get_local_id(0), ly = (int)get_local_id(1);
  const int lid = ly * NNC_LX + lx;
  const int m0 = (int)get_group_id(1) * NNC_TM, n0 = (int)get_group_id(0) * NNC_TN;
  const long b = (long)get_global_id(2);
  A += a_off + b * stride_a;
  B += b_off + b * stride_b;
  C += c_off + b * stride_c;
#if NNC_PROLOGUE != 0
  stats += 2 * b * M;
#endif
  float acc[NNC_WM][NNC_WN], tot[NNC_WM][NNC_WN];
  for (int i = 0; i < NNC_WM; ++i)
    for (int j = 0; j < NNC_WN; ++j) acc[i][j] = tot[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += NNC_TK) {
    /* consecutive items read consecutive k of a row of A */
    for (int e = lid; e < NNC_TM * NNC_TK; e += NNC_NT) {
      const int mm = e / NNC_TK, kk = e % NNC_TK, m = m0 + mm, k = k0 + kk;
      float v = 0.0f;
      if (m < M && k < K) {
#if NNC_A_TRANS
        v = NNC_LOAD(A, (long)k * lda + m);
#else
        v = NNC_LOAD(A, (long)m * lda + k);
#endif
#if NNC_PROLOGUE != 0
        v = (v - stats[2 * m]) * stats[2 * m + 1] * NNC_LOAD(gamma, k);
        if (beta) v += NNC_LOAD(beta, k);
#endif
      }
      As[kk][mm] = v;
    }
    for (int e = lid; e < NNC_TN * NNC_TK; e += NNC_NT) {
#if NNC_B_TRANS
      const int nn = e / NNC_TK, kk = e % NNC_TK;
#else
      const int kk = e / NNC_TN, nn = e % NNC_TN;
#endif
      const int n = n0 + nn, k = k0 + kk;
      float v = 0.0f;
#if NNC_B_TRANS
      if (n < N && k < K) v = NNC_LOAD(B, (long)n * ldb + k);
#else
      if (n < N && k < K) v = NNC_LOAD(B, (long)k * ldb + n);
#endif
      Bs[kk][nn] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < NNC_TK; ++kk) {
      float a[NNC_WM], bv[NNC_WN];
      for (int i = 0; i < NNC_WM; ++i) a[i] = As[kk][ly + i * NNC_LY];
      for (int j = 0; j < NNC_WN; ++j) bv[j] = Bs[kk][lx + j * NNC_LX];
      for (int i = 0; i < NNC_WM; ++i)
        for (int j = 0; j < NNC_WN; ++j) acc[i][j] = fma(a[i], bv[j], acc[i][j]);
    }
    /* a block of NNC_KB steps (or the last) joins the total */
    if ((k0 + NNC_TK) % NNC_KB < NNC_TK || k0 + NNC_TK >= K)
      for (int i = 0; i < NNC_WM; ++i)
        for (int j = 0; j < NNC_WN; ++j) {
          tot[i][j] += acc[i][j];
          acc[i][j] = 0.0f;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (int i = 0; i < NNC_WM; ++i) {
    const int m = m0 + ly + i * NNC_LY;
    if (m >= M) continue;
    for (int j = 0; j < NNC_WN; ++j) {
      const int n = n0 + lx + j * NNC_LX;
      if (n >= N) continue;
      NNC_GEMM_STORE(m, n, tot[i][j]);
    }
  }
}

#else
/* ------------------------------------------------------------ the CPU way */
#ifndef NNC_VW
#define NNC_VW 8
#endif
#ifndef NNC_MR
#define NNC_MR 6
#endif
#ifndef NNC_NR
#define NNC_NR (2 * NNC_VW)
#endif
#ifndef NNC_KC
#define NNC_KC 256
#endif
#ifndef NNC_LM
#define NNC_LM 8
#endif
#ifndef NNC_LN
#define NNC_LN 8
#endif

#if NNC_VW != 4 && NNC_VW != 8 && NNC_VW != 16
#error "NNC_VW must be 4, 8 or 16"
#endif
#if NNC_NR % NNC_VW != 0 || NNC_KC % NNC_VW != 0 || NNC_KC < NNC_VW
#error "NNC_NR and NNC_KC must be multiples of NNC_VW"
#endif

#define NNC_CAT_(a, b) a##b
#define NNC_CAT(a, b) NNC_CAT_(a, b)
#define NNC_VF NNC_CAT(float, NNC_VW)
/* vectors of floats from private or local memory, of the storage from
 * global memory, and into C */
#define NNC_VLDF(p) NNC_CAT(vload, NNC_VW)(0, p)
#define NNC_VSTF(v, p) NNC_CAT(vstore, NNC_VW)(v, 0, p)
#define NNC_VLDG(p) NNC_VLOAD(NNC_VW, p)
#define NNC_VSTC(v, p) NNC_VSTORE_C(NNC_VW, v, p)
#define NNC_NV (NNC_NR / NNC_VW)
#define NNC_GM (NNC_LM * NNC_MR)        /* C rows a group */
#define NNC_GN (NNC_LN * NNC_NR)        /* C columns a group */
#define NNC_NT (NNC_LM * NNC_LN)

/* v = p[0 .. VW) where elements at and past `left` are 0 (left may be <= 0). */
#define NNC_VLD_PART(v, p, left)                                                   \
  do {                                                                             \
    if ((left) >= NNC_VW) {                                                        \
      v = NNC_VLDG(p);                                                             \
    } else {                                                                       \
      float t_[NNC_VW];                                                            \
      for (int l_ = 0; l_ < NNC_VW; ++l_) t_[l_] = l_ < (left) ? NNC_LOAD(p, l_) : 0.0f; \
      v = NNC_VLDF(t_);                                                            \
    }                                                                              \
  } while (0)

/* The packing jobs e of this work-item out of n: each item takes a run of
 * consecutive jobs (rows or columns), so that it reads memory in order (a
 * CPU driver runs the items one after the other). */
#define NNC_JOBS(e, n)                                                            \
  for (int e = lid * (((n) + NNC_NT - 1) / NNC_NT), e##_end = min((n), (lid + 1) * (((n) + NNC_NT - 1) / NNC_NT)); \
       e < e##_end; ++e)

/* Global size (ceil(M/GM) * LM, ceil(N/GN) * LN, batch), local (LM, LN, 1):
 * dimension 0 walks M, so the items a driver runs one after the other share
 * their B panel. Item (lm, ln) owns rows mW + lm*MR .. +MR and columns
 * nW + ln*NR .. +NR of its group's tile. */
__kernel __attribute__((reqd_work_group_size(NNC_LM, NNC_LN, 1)))
void nnc_gemm(NNC_GEMM_ARGS) {
  __local float As[NNC_GM * NNC_KC];   /* row r of the tile at r*KC */
  __local float Bs[NNC_GN * NNC_KC];   /* item column p's panel at p*KC*NR, step kk at kk*NR */
  const int lm = (int)get_local_id(0), ln = (int)get_local_id(1), lid = ln * NNC_LM + lm;
  const int mW = (int)get_group_id(0) * NNC_GM, nW = (int)get_group_id(1) * NNC_GN;
  const long b = (long)get_global_id(2);
  A += a_off + b * stride_a;
  B += b_off + b * stride_b;
  C += c_off + b * stride_c;
#if NNC_PROLOGUE != 0
  stats += 2 * b * M;
#endif
  NNC_VF tot[NNC_MR][NNC_NV];
#pragma unroll
  for (int i = 0; i < NNC_MR; ++i)
#pragma unroll
    for (int j = 0; j < NNC_NV; ++j) tot[i][j] = (NNC_VF)(0.0f);

  for (int k0 = 0; k0 < K; k0 += NNC_KC) {
    /* A: KC steps of each row of the tile, zero past M and K; a row a job */
    NNC_JOBS(r, NNC_GM) {
      const int m = mW + r;
      __local float *dst = As + r * NNC_KC;
#if NNC_A_TRANS
      /* A [K,M]: the row's steps lie lda apart, read one at a time */
      for (int q = 0; q < NNC_KC; ++q)
        dst[q] = m < M && k0 + q < K ? NNC_LOAD(A, (long)(k0 + q) * lda + m) : 0.0f;
#else
      __global const nnc_t *src = A + (long)m * lda;
#if NNC_PROLOGUE != 0
      const float mean = m < M ? stats[2 * m] : 0.0f, rstd = m < M ? stats[2 * m + 1] : 0.0f;
#endif
      for (int q = 0; q < NNC_KC; q += NNC_VW) {
        const int k = k0 + q;
        NNC_VF v = (NNC_VF)(0.0f);
        if (m < M) {
          NNC_VLD_PART(v, src + k, K - k);
#if NNC_PROLOGUE != 0
          NNC_VF g, bt = (NNC_VF)(0.0f);
          NNC_VLD_PART(g, gamma + k, K - k);
          if (beta) NNC_VLD_PART(bt, beta + k, K - k);
          v = (v - mean) * rstd * g + bt;
#endif
        }
        NNC_VSTF(v, dst + q);
      }
#endif
    }
#if NNC_B_TRANS
    /* B [N,K]: column c of the tile is row nW + c of B, read along k and
     * spread over its panel; a column a job */
    NNC_JOBS(c, NNC_GN) {
      const int n = nW + c;
      __global const nnc_t *src = B + (long)n * ldb;
      __local float *dst = Bs + (c / NNC_NR) * (NNC_KC * NNC_NR) + c % NNC_NR;
      for (int q = 0; q < NNC_KC; q += NNC_VW) {
        const int k = k0 + q;
        NNC_VF v = (NNC_VF)(0.0f);
        if (n < N) NNC_VLD_PART(v, src + k, K - k);
        float t[NNC_VW];
        NNC_VSTF(v, t);
#pragma unroll
        for (int l = 0; l < NNC_VW; ++l) dst[(q + l) * NNC_NR] = t[l];
      }
    }
#else
    /* B [K,N]: step kk of the tile is row k0 + kk of B from column nW, a
     * whole row a job */
    NNC_JOBS(kk, NNC_KC) {
      const int k = k0 + kk;
      __global const nnc_t *src = B + (long)k * ldb + nW;
      __local float *dst = Bs + kk * NNC_NR;
      if (k < K && nW + NNC_GN <= N) {
#pragma unroll
        for (int c = 0; c < NNC_GN; c += NNC_VW)
          NNC_VSTF(NNC_VLDG(src + c), dst + (c / NNC_NR) * (NNC_KC * NNC_NR) + c % NNC_NR);
      } else {
        for (int c = 0; c < NNC_GN; c += NNC_VW) {
          NNC_VF v = (NNC_VF)(0.0f);
          if (k < K) NNC_VLD_PART(v, src + c, N - nW - c);
          NNC_VSTF(v, dst + (c / NNC_NR) * (NNC_KC * NNC_NR) + c % NNC_NR);
        }
      }
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    {
      const int kc = min(NNC_KC, K - k0);
      NNC_VF acc[NNC_MR][NNC_NV];
#pragma unroll
      for (int i = 0; i < NNC_MR; ++i)
#pragma unroll
        for (int j = 0; j < NNC_NV; ++j) acc[i][j] = (NNC_VF)(0.0f);
      __local const float *ap = As + lm * NNC_MR * NNC_KC;
      __local const float *bp = Bs + ln * (NNC_KC * NNC_NR);
      for (int kk = 0; kk < kc; ++kk, bp += NNC_NR) {
        NNC_VF bv[NNC_NV];
#pragma unroll
        for (int j = 0; j < NNC_NV; ++j) bv[j] = NNC_VLDF(bp + j * NNC_VW);
#pragma unroll
        for (int i = 0; i < NNC_MR; ++i) {
          const NNC_VF av = (NNC_VF)(ap[i * NNC_KC + kk]);
#pragma unroll
          for (int j = 0; j < NNC_NV; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
        }
      }
#pragma unroll
      for (int i = 0; i < NNC_MR; ++i)
#pragma unroll
        for (int j = 0; j < NNC_NV; ++j) tot[i][j] += acc[i][j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  /* the epilogue a vector at a time where the item's columns are all in C */
  const int m0 = mW + lm * NNC_MR, n0 = nW + ln * NNC_NR;
  for (int i = 0; i < NNC_MR; ++i) {
    const int m = m0 + i;
    if (m >= M) break;
    if (n0 + NNC_NR <= N) {
#pragma unroll
      for (int j = 0; j < NNC_NV; ++j) {
        const int n = n0 + j * NNC_VW;
        NNC_VF v = alpha * tot[i][j];
        if (bias) v += NNC_VLDG(bias + n);
        v = NNC_ACT_V(NNC_ACT, v);
        if (residual) v = NNC_RES(v, NNC_VLDG(residual + r_off + b * stride_r + (long)m * ldr + n));
        NNC_VSTC(v, C + (long)m * ldc + n);
      }
      continue;
    }
    float t[NNC_NR];
#pragma unroll
    for (int j = 0; j < NNC_NV; ++j) NNC_VSTF(tot[i][j], t + j * NNC_VW);
    for (int j = 0; j < NNC_NR && n0 + j < N; ++j) NNC_GEMM_STORE(m, n0 + j, t[j]);
  }
}
#endif
