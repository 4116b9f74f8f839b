/* templates/c_simd/gemm_pack.c — copying A and B into the micro-kernel's
 * order, so that its loads are contiguous and aligned; the A packer applies
 * the layernorm/rmsnorm prologue on the way, so the normalised A is never
 * written to memory. */
#include "gemm_internal.h"

void nnc_gemm_pack_a(const float *a, ptrdiff_t lda, int mr, int pc, int kc,
                     const nnc_gemm_pro *pro, float *dst) {
  for (int i = 0; i < NNC_GEMM_MR; ++i) {
    float *d = dst + i;
    if (i >= mr) {
      for (int k = 0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_MR] = 0.0f;
      continue;
    }
    const float *s = a + (ptrdiff_t)i * lda + pc;
    if (pro->kind == NNC_SIMD_PRO_NONE) {
      for (int k = 0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_MR] = s[k];
      continue;
    }
    const float *g = pro->gamma + pc;
    const float *bt = pro->beta ? pro->beta + pc : NULL;
    float mean = pro->mean[i], rstd = pro->rstd[i];
    for (int k = 0; k < kc; ++k) {
      float x = (s[k] - mean) * rstd * g[k];
      d[(ptrdiff_t)k * NNC_GEMM_MR] = bt ? x + bt[k] : x;
    }
  }
}

void nnc_gemm_pack_at(const float *a, ptrdiff_t lda, int mr, int pc, int kc, float *dst) {
  /* A's rows k are the panel's columns: each is read contiguously */
  for (int k = 0; k < kc; ++k) {
    const float *s = a + (ptrdiff_t)(pc + k) * lda;
    float *d = dst + (ptrdiff_t)k * NNC_GEMM_MR;
    for (int i = 0; i < NNC_GEMM_MR; ++i) d[i] = i < mr ? s[i] : 0.0f;
  }
}

/* One full-width micro-panel from row-major B: rows are already in order. */
static void pack_b_rows(const float *b, ptrdiff_t ldb, int kc, int nr, float *dst) {
  if (nr == NNC_GEMM_NR) {
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < NNC_GEMM_NR; j += NNC_VW)
        nnc_vstore(dst + (ptrdiff_t)k * NNC_GEMM_NR + j, nnc_vload(b + (ptrdiff_t)k * ldb + j));
    return;
  }
  for (int k = 0; k < kc; ++k)
    for (int j = 0; j < NNC_GEMM_NR; ++j)
      dst[(ptrdiff_t)k * NNC_GEMM_NR + j] = j < nr ? b[(ptrdiff_t)k * ldb + j] : 0.0f;
}

/* One micro-panel from B^T ([N,K]): a transpose. Reading each of the nr
 * rows contiguously keeps the reads streaming; the strided writes land in
 * a kc x NR panel that fits in L1. The portable path, and the edges of the
 * AVX2 one (which AVX-512 takes too: its 8-float transposes are AVX2's). */
static void pack_b_cols_scalar(const float *bt, ptrdiff_t ldb, int k0, int kc, int nr,
                               float *dst) {
  for (int j = 0; j < NNC_GEMM_NR; ++j) {
    float *d = dst + j;
    if (j >= nr) {
      for (int k = k0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_NR] = 0.0f;
      continue;
    }
    const float *s = bt + (ptrdiff_t)j * ldb;
    for (int k = k0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_NR] = s[k];
  }
}

#if defined(NNC_ISA_AVX2) || defined(NNC_ISA_AVX512)
/* The 8 x 8 block at rows s[0..7 * ldb], columns [k, k+8) of B^T, stored
 * transposed: dst row k+c (stride NR) gets the 8 values of column k+c.
 * Each 256-bit load takes 4 floats of row i and 4 of row i+4, so a 4 x 4
 * in-lane transpose (unpack, then shuffle) finishes it: 16 shuffles and no
 * lane crossing, instead of 64 scalar loads and stores. */
static inline void transpose8x8_store(const float *s, ptrdiff_t ldb, float *dst) {
  __m256 a[4], b[4];
  for (int i = 0; i < 4; ++i) {
    const float *lo = s + (ptrdiff_t)i * ldb, *hi = s + (ptrdiff_t)(i + 4) * ldb;
    a[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
    b[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo + 4)),
                                _mm_loadu_ps(hi + 4), 1);
  }
  __m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
  __m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);
  _mm256_storeu_ps(dst + 0 * NNC_GEMM_NR, _mm256_shuffle_ps(t0, t2, 0x44));
  _mm256_storeu_ps(dst + 1 * NNC_GEMM_NR, _mm256_shuffle_ps(t0, t2, 0xEE));
  _mm256_storeu_ps(dst + 2 * NNC_GEMM_NR, _mm256_shuffle_ps(t1, t3, 0x44));
  _mm256_storeu_ps(dst + 3 * NNC_GEMM_NR, _mm256_shuffle_ps(t1, t3, 0xEE));
  t0 = _mm256_unpacklo_ps(b[0], b[1]);
  t1 = _mm256_unpackhi_ps(b[0], b[1]);
  t2 = _mm256_unpacklo_ps(b[2], b[3]);
  t3 = _mm256_unpackhi_ps(b[2], b[3]);
  _mm256_storeu_ps(dst + 4 * NNC_GEMM_NR, _mm256_shuffle_ps(t0, t2, 0x44));
  _mm256_storeu_ps(dst + 5 * NNC_GEMM_NR, _mm256_shuffle_ps(t0, t2, 0xEE));
  _mm256_storeu_ps(dst + 6 * NNC_GEMM_NR, _mm256_shuffle_ps(t1, t3, 0x44));
  _mm256_storeu_ps(dst + 7 * NNC_GEMM_NR, _mm256_shuffle_ps(t1, t3, 0xEE));
}

/* Full panels go through 8 x 8 register transposes, k outermost so that
 * the NR source rows are read side by side and each destination line is
 * finished before the next; a kc tail and a partial panel are scalar. */
static void pack_b_cols(const float *bt, ptrdiff_t ldb, int kc, int nr, float *dst) {
  if (nr < NNC_GEMM_NR) {
    pack_b_cols_scalar(bt, ldb, 0, kc, nr, dst);
    return;
  }
  int k = 0;
  for (; k + 8 <= kc; k += 8)
    for (int j = 0; j < NNC_GEMM_NR; j += 8)
      transpose8x8_store(bt + (ptrdiff_t)j * ldb + k, ldb, dst + (ptrdiff_t)k * NNC_GEMM_NR + j);
  if (k < kc) pack_b_cols_scalar(bt, ldb, k, kc, nr, dst);
}
#else
static void pack_b_cols(const float *bt, ptrdiff_t ldb, int kc, int nr, float *dst) {
  pack_b_cols_scalar(bt, ldb, 0, kc, nr, dst);
}
#endif

void nnc_gemm_pack_b(const float *b, ptrdiff_t ldb, int trans, int pc, int kc,
                     int j0, int nc, float *dst) {
  for (int jr = 0; jr < nc; jr += NNC_GEMM_NR) {
    int nr = nc - jr < NNC_GEMM_NR ? nc - jr : NNC_GEMM_NR;
    float *d = dst + (ptrdiff_t)jr * kc;
    if (trans)
      pack_b_cols(b + (ptrdiff_t)(j0 + jr) * ldb + pc, ldb, kc, nr, d);
    else
      pack_b_rows(b + (ptrdiff_t)pc * ldb + j0 + jr, ldb, kc, nr, d);
  }
}
