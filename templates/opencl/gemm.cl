/* templates/opencl/gemm.cl — C = act(alpha * P(A) . B + bias) + residual,
 * batched, tiled through local memory; and the row statistics kernel that
 * the LayerNorm/RMSNorm prologue P needs.
 *
 * Macros (all optional):
 *   NNC_TM, NNC_TN, NNC_TK  tile of C rows, C columns and K per step (32, 32, 8)
 *   NNC_WM, NNC_WN          C elements per work-item along M and N (4, 4);
 *                           local size is (NNC_TN/NNC_WN, NNC_TM/NNC_WM, 1)
 *   NNC_B_TRANS             1: B is [N,K] (nn.Linear weights); 0: [K,N] (0)
 *   NNC_ACT                 an NNC_ACT_* code of common.cl (NNC_ACT_NONE)
 *   NNC_PROLOGUE            0 none, 1 layernorm, 2 rmsnorm (0)
 *   NNC_WG                  work-group size of nnc_gemm_row_stats (256, a power of two)
 * Each work-item owns the C elements (ly + i*TM/WM, lx + j*TN/WN) of its
 * group's tile, so neighbouring items touch neighbouring addresses. */
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
#ifndef NNC_B_TRANS
#define NNC_B_TRANS 0
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

#define NNC_LX (NNC_TN / NNC_WN)
#define NNC_LY (NNC_TM / NNC_WM)
#define NNC_NT (NNC_LX * NNC_LY)

#if NNC_TM % NNC_WM != 0 || NNC_TN % NNC_WN != 0
#error "NNC_TM must be a multiple of NNC_WM and NNC_TN of NNC_WN"
#endif

/* stats[2*(b*M + m)] = mean (0 for rmsnorm) and stats[2*(b*M + m) + 1] =
 * 1/sqrt(var + eps) (of mean(a^2) + eps for rmsnorm) of row m of batch item
 * b of A [M,K]. Global size exactly (M * NNC_WG, batch), local size
 * (NNC_WG, 1): no group may return before the barriers of the reduction. */
__kernel __attribute__((reqd_work_group_size(NNC_WG, 1, 1)))
void nnc_gemm_row_stats(int M, int K, __global const nnc_t *A, long lda, long stride_a,
                        float eps, __global float *stats) {
  __local float scratch[NNC_WG];
  const int m = (int)get_group_id(0), lid = (int)get_local_id(0);
  const long b = (long)get_global_id(1);
  __global const nnc_t *a = A + b * stride_a + (long)m * lda;
  float mean = 0.0f;
#if NNC_PROLOGUE == 1
  float s = 0.0f;
  for (int k = lid; k < K; k += NNC_WG) s += NNC_LD(a[k]);
  mean = nnc_wg_sum(s, scratch, NNC_WG) / (float)K;
#endif
  float q = 0.0f;
  for (int k = lid; k < K; k += NNC_WG) {
    const float d = NNC_LD(a[k]) - mean;
    q += d * d;
  }
  q = nnc_wg_sum(q, scratch, NNC_WG);
  if (lid == 0) {
    stats[2 * (b * M + m)] = mean;
    stats[2 * (b * M + m) + 1] = rsqrt(q / (float)K + eps);
  }
}

/* Batch item b = get_global_id(2) uses A + b*stride_a, B + b*stride_b,
 * C + b*stride_c, residual + b*stride_r (a stride of 0 broadcasts); bias [N]
 * is shared. bias and residual may be NULL. With a prologue, stats comes
 * from nnc_gemm_row_stats over the same A, gamma [K] is required and beta
 * [K] may be NULL; without one, stats, gamma and beta are unused (NULL).
 * Global size (ceil(N/TN) * LX, ceil(M/TM) * LY, batch), local (LX, LY, 1).
 * K == 0 gives a zero product. */
__kernel __attribute__((reqd_work_group_size(NNC_LX, NNC_LY, 1)))
void nnc_gemm(int M, int N, int K,
              __global const nnc_t *A, long lda, long stride_a,
              __global const nnc_t *B, long ldb, long stride_b,
              __global nnc_t *C, long ldc, long stride_c,
              float alpha, __global const nnc_t *bias,
              __global const nnc_t *residual, long ldr, long stride_r,
              __global const float *stats, __global const nnc_t *gamma,
              __global const nnc_t *beta) {
  __local float As[NNC_TK][NNC_TM];
  __local float Bs[NNC_TK][NNC_TN];
  const int lx = (int)get_local_id(0), ly = (int)get_local_id(1);
  const int lid = ly * NNC_LX + lx;
  const int m0 = (int)get_group_id(1) * NNC_TM, n0 = (int)get_group_id(0) * NNC_TN;
  const long b = (long)get_global_id(2);
  A += b * stride_a;
  B += b * stride_b;
  C += b * stride_c;
#if NNC_PROLOGUE != 0
  stats += 2 * b * M;
#endif
  float acc[NNC_WM][NNC_WN];
  for (int i = 0; i < NNC_WM; ++i)
    for (int j = 0; j < NNC_WN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += NNC_TK) {
    /* consecutive items read consecutive k of a row of A */
    for (int e = lid; e < NNC_TM * NNC_TK; e += NNC_NT) {
      const int mm = e / NNC_TK, kk = e % NNC_TK, m = m0 + mm, k = k0 + kk;
      float v = 0.0f;
      if (m < M && k < K) {
        v = NNC_LD(A[(long)m * lda + k]);
#if NNC_PROLOGUE != 0
        v = (v - stats[2 * m]) * stats[2 * m + 1] * NNC_LD(gamma[k]);
        if (beta) v += NNC_LD(beta[k]);
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
      if (n < N && k < K) v = NNC_LD(B[(long)n * ldb + k]);
#else
      if (n < N && k < K) v = NNC_LD(B[(long)k * ldb + n]);
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
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (int i = 0; i < NNC_WM; ++i) {
    const int m = m0 + ly + i * NNC_LY;
    if (m >= M) continue;
    for (int j = 0; j < NNC_WN; ++j) {
      const int n = n0 + lx + j * NNC_LX;
      if (n >= N) continue;
      float v = alpha * acc[i][j];
      if (bias) v += NNC_LD(bias[n]);
      v = nnc_act(NNC_ACT, v);
      if (residual) v += NNC_LD(residual[b * stride_r + (long)m * ldr + n]);
      C[(long)m * ldc + n] = NNC_ST(v);
    }
  }
}
