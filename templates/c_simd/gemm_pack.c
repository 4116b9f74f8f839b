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
 * a kc x NR panel that fits in L1. */
static void pack_b_cols(const float *bt, ptrdiff_t ldb, int kc, int nr, float *dst) {
  for (int j = 0; j < NNC_GEMM_NR; ++j) {
    float *d = dst + j;
    if (j >= nr) {
      for (int k = 0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_NR] = 0.0f;
      continue;
    }
    const float *s = bt + (ptrdiff_t)j * ldb;
    for (int k = 0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_NR] = s[k];
  }
}

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
