/* templates/c_simd/gemm_micro.c — the register micro-kernel and the
 * epilogue.
 *
 * The MR x NR accumulator tile is an array of vectors with compile-time
 * bounds; the loops are fully unrolled so that the compiler keeps every
 * accumulator in a register (checked in the generated code for the AVX2
 * 6 x 16 default: no spills in the k loop). Each k step loads NR/NNC_VW
 * vectors of B and broadcasts MR values of A. */
#include "gemm_internal.h"
#include "simd_math.h"

#define NV (NNC_GEMM_NR / NNC_VW)

/* C rows are far apart (ldc) and usually out of L1 and L2: fetching them
 * while the k loop runs hides the misses of the final load/store. */
#if defined(__GNUC__)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH_W(p) ((void)(p))
#endif

static inline __attribute__((always_inline)) void prefetch_c(float *c, ptrdiff_t ldc, int mr, int nr) {
  for (int i = 0; i < mr; ++i) {
    PREFETCH_W(c + (ptrdiff_t)i * ldc);
    PREFETCH_W(c + (ptrdiff_t)i * ldc + nr - 1);
  }
}

/* acc += kc steps of A times b: A's element (i, k) at a[i * rs + k * cs],
 * a packed micro-panel (rs 1, cs MR) or rows in place (rs their distance,
 * cs 1); inlined into each caller with its strides, so the packed one's
 * addressing stays constant. Returns b past the steps. */
static inline __attribute__((always_inline)) const float *steps(nnc_vf acc[NNC_GEMM_MR][NV], int kc,
                                                                const float *restrict a, ptrdiff_t rs,
                                                                ptrdiff_t cs, const float *restrict b) {
  /* Unrolled by 4: the loop overhead otherwise costs about a tenth. */
#pragma GCC unroll 4
  for (int k = 0; k < kc; ++k) {
    nnc_vf bv[NV];
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) bv[j] = nnc_vload(b + j * NNC_VW);
#pragma GCC unroll 32
    for (int i = 0; i < NNC_GEMM_MR; ++i) {
      nnc_vf av = nnc_vset1(a[i * rs]);
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vfma(av, bv[j], acc[i][j]);
    }
    a += cs;
    b += NNC_GEMM_NR;
  }
  return b;
}

static inline __attribute__((always_inline)) void zero(nnc_vf acc[NNC_GEMM_MR][NV]) {
#pragma GCC unroll 32
  for (int i = 0; i < NNC_GEMM_MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vzero();
}

/* C[0:mr, 0:nr] = (first ? 0 : C) + acc. */
static inline __attribute__((always_inline)) void store(nnc_vf acc[NNC_GEMM_MR][NV], float *c, ptrdiff_t ldc,
                                                        int mr, int nr, int first) {
  if (mr == NNC_GEMM_MR && nr == NNC_GEMM_NR) {
#pragma GCC unroll 32
    for (int i = 0; i < NNC_GEMM_MR; ++i) {
      float *ci = c + (ptrdiff_t)i * ldc;
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) {
        nnc_vf v = acc[i][j];
        if (!first) v = nnc_vadd(nnc_vload(ci + j * NNC_VW), v);
        nnc_vstore(ci + j * NNC_VW, v);
      }
    }
    return;
  }
  /* An edge tile: spill the accumulators, copy the part inside C. */
  _Alignas(NNC_SIMD_ALIGN) float tile[NNC_GEMM_MR * NNC_GEMM_NR];
  for (int i = 0; i < NNC_GEMM_MR; ++i)
    for (int j = 0; j < NV; ++j) nnc_vstore(tile + i * NNC_GEMM_NR + j * NNC_VW, acc[i][j]);
  for (int i = 0; i < mr; ++i) {
    float *ci = c + (ptrdiff_t)i * ldc;
    const float *ti = tile + i * NNC_GEMM_NR;
    for (int j = 0; j < nr; ++j) ci[j] = first ? ti[j] : ci[j] + ti[j];
  }
}

void nnc_gemm_micro(int kc, const float *restrict a, const float *restrict b, float *c,
                    ptrdiff_t ldc, int mr, int nr, int first) {
  prefetch_c(c, ldc, mr, nr);
  nnc_vf acc[NNC_GEMM_MR][NV];
  zero(acc);
  steps(acc, kc, a, 1, NNC_GEMM_MR, b);
  store(acc, c, ldc, mr, nr, first);
}

void nnc_gemm_micro_rows(int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, float *c,
                         ptrdiff_t ldc, int mr, int nr, int first) {
  prefetch_c(c, ldc, mr, nr);
  nnc_vf acc[NNC_GEMM_MR][NV];
  zero(acc);
  steps(acc, kc, a, lda, 1, b);
  store(acc, c, ldc, mr, nr, first);
}

void nnc_gemm_micro_windows(const nnc_gemm_runs *r, const float *a, ptrdiff_t rs, const float *b, float *c,
                            ptrdiff_t ldc, int nr, int first) {
  prefetch_c(c, ldc, NNC_GEMM_MR, nr);
  nnc_vf acc[NNC_GEMM_MR][NV];
  zero(acc);
  for (int i = 0; i < r->n; ++i) b = steps(acc, r->len[i], a + r->off[i], rs, 1, b);
  store(acc, c, ldc, NNC_GEMM_MR, nr, first);
}

/* One vector of the epilogue; x is the vector of aux (read or written). */
static inline nnc_vf epi(nnc_vf v, nnc_vf alpha, const float *bias, nnc_simd_act act,
                         const float *res, int res_mul, nnc_simd_aux mode, float *x) {
  v = nnc_vmul(v, alpha);
  if (bias) v = nnc_vadd(v, nnc_vload(bias));
  if (mode == NNC_SIMD_AUX_ACT_GRAD) return nnc_vmul(v, nnc_vact_grad(act, nnc_vload(x)));
  if (mode == NNC_SIMD_AUX_SAVE) nnc_vstore(x, v);
  v = nnc_vact(act, v);
  if (res) v = res_mul ? nnc_vmul(v, nnc_vload(res)) : nnc_vadd(v, nnc_vload(res));
  return v;
}

void nnc_gemm_epilogue(float *c, ptrdiff_t ldc, int mr, int nr, float alpha,
                       const float *bias, nnc_simd_act act, const float *res,
                       ptrdiff_t ldr, int res_mul, nnc_simd_aux aux_mode, float *aux, ptrdiff_t ldx) {
  nnc_vf va = nnc_vset1(alpha);
  for (int i = 0; i < mr; ++i) {
    float *ci = c + (ptrdiff_t)i * ldc;
    const float *ri = res ? res + (ptrdiff_t)i * ldr : NULL;
    float *xi = aux_mode != NNC_SIMD_AUX_NONE ? aux + (ptrdiff_t)i * ldx : NULL;
    int j = 0;
    for (; j + NNC_VW <= nr; j += NNC_VW)
      nnc_vstore(ci + j, epi(nnc_vload(ci + j), va, bias ? bias + j : NULL, act,
                             ri ? ri + j : NULL, res_mul, aux_mode, xi ? xi + j : NULL));
    if (j < nr) {
      /* The last partial vector goes through a full-width buffer so that it
       * gets the same arithmetic as the rest of the row. */
      int n = nr - j;
      float cb[NNC_VW] = {0}, bb[NNC_VW] = {0}, rb[NNC_VW] = {0}, xb[NNC_VW] = {0};
      memcpy(cb, ci + j, (size_t)n * sizeof(float));
      if (bias) memcpy(bb, bias + j, (size_t)n * sizeof(float));
      if (ri) memcpy(rb, ri + j, (size_t)n * sizeof(float));
      if (aux_mode == NNC_SIMD_AUX_ACT_GRAD) memcpy(xb, xi + j, (size_t)n * sizeof(float));
      nnc_vstore(cb, epi(nnc_vload(cb), va, bias ? bb : NULL, act, ri ? rb : NULL, res_mul, aux_mode, xb));
      memcpy(ci + j, cb, (size_t)n * sizeof(float));
      if (aux_mode == NNC_SIMD_AUX_SAVE) memcpy(xi + j, xb, (size_t)n * sizeof(float));
    }
  }
}
