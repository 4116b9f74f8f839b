/* templates/c_simd/gemm_w8a8.c — W8A8: B held as int8 with a scale per
 * column, A quantized to int8 per row (its absmax) as it is packed, and the
 * products summed in int32; C = (the int32 sums) x row scale x column scale,
 * then the f32 epilogue.
 *
 * Why 6-bit weights. AVX2's int8 product, vpmaddubsw, multiplies unsigned
 * bytes by signed ones and adds adjacent pairs into int16 with saturation.
 * A is stored as u = q + 128 in [1, 255] (its q in [-127, 127]); the +128
 * is removed with the columns' sums: sum_k u_k w_k = sum_k q_k w_k + 128
 * sum_k w_k, sum_k w_k stored with the weights. vpmaddwd with ones then
 * adds pairs of int16 into int32, four k per int32 lane. On this machine's
 * Zen 1 both multiplies issue on one pipe at half a 256-bit op a cycle,
 * while f32 FMAs use two: vpmaddubsw + vpmaddwd per 32 products only ties
 * the f32 kernel. So two groups of 4 k are multiplied, their int16 pairs
 * added, and widened by one vpmaddwd: 3 multiplies per 64 products (measured
 * ~1.15x the f32 GEMM's rate; 7-bit weights and one vpmaddwd per group
 * measured as f32). Nothing may saturate: 2 x 2 x 255 x |w| <= 32767 needs
 * |w| <= 32, so the weights are 6-bit, in [-31, 31] (scale = max|w| / 31).
 * Per-token activations carry the outliers; a weight channel is well
 * spread, so the bits are taken from the weights. vpdpbusd (exact int32
 * sums) is used when the compiler targets it: AVX512-VNNI's on 512-bit
 * vectors, a tile of 8 rows x 32 columns (one vector is a group of 4 k of a
 * 16-column panel; on an AVX-512 Zen 5 BERT's GEMMs run 3.3-3.9x the f32
 * GEMM, whose FMAs do 16 products an instruction to vpdpbusd's 64), else
 * AVX-VNNI's on 256-bit ones; on Arm the dot-product extension's sdot
 * (-march=armv8.2-a+dotprod or later).
 *
 * Layout (nnc_simd_w8a8_pack): K padded to Kp, a multiple of 8 (zeros);
 * NR-column panels of all of Kp (panel p at p*NR*Kp bytes), in groups of 4
 * k: group g at g*4*NR, byte [j*4 + t] = q[4g + t, column j]; then at a
 * 64-byte boundary the NR-padded f32 scales and int32 column sums, then
 * (64-byte aligned) SmoothQuant's factors: a 64-byte header whose first
 * int32 says whether they are on, and K f32 s_k (written by every function
 * that writes a held form: off, or the factors of the _smooth ones). Packed A
 * is the same with MR rows (8 with AVX512-VNNI, else 4; A is packed each
 * call, so MR is no part of a checkpoint): group g of a panel at g*4*MR,
 * byte [i*4 + t].
 *
 * The int32 sums do not need the f32 GEMM's KC passes: each micro-kernel
 * call covers all of K (a panel of B, 16 x Kp bytes, stays in L1/L2 while
 * the task's rows go by). */
#include "gemm_internal.h"

#include <math.h>

#if defined(NNC_ISA_AVX2) || defined(NNC_ISA_AVX512)
#define W8_X86 1
#elif defined(NNC_ISA_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define W8_SDOT 1
#endif
#if defined(NNC_ISA_AVX512) && defined(__AVX512VNNI__)
/* 512-bit vpdpbusd: one vector is a group of 4 k of a whole NR panel, and
 * a tile is 8 rows x 2 panels (16 accumulators, one vpdpbusd each a group) */
#define W8_ZMM 1
#endif

#if defined(W8_ZMM)
#define MR 8
#define TILE_NP 2   /* weight panels a tile */
#else
#define MR 4
#define TILE_NP 1
#endif
#define NR 16
#define KG 4   /* k per int32 lane */
#define ROWS_PER_PACK 32
#define QW 31.0f  /* the weights' largest magnitude */

static const char *const KERNEL = "nnc_simd_gemm (w8a8)";

static int ceil_div(int a, int b) { return (a + b - 1) / b; }
static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static size_t kpad(int K) { return K > 0 ? nnc_simd_round_up((size_t)K, 2 * KG) : 0; }
static size_t panels(int N) { return N > 0 ? ((size_t)N + NR - 1) / NR : 0; }
static size_t values_bytes(int N, int K) { return nnc_simd_round_up(panels(N) * NR * kpad(K), 64); }

static size_t smooth_at(int N, int K) {
  return nnc_simd_round_up(values_bytes(N, K) + panels(N) * NR * (sizeof(float) + sizeof(int32_t)), 64);
}

size_t nnc_simd_w8a8_bytes(int N, int K) { return smooth_at(N, K) + 64 + (size_t)(K > 0 ? K : 0) * sizeof(float); }

const float *nnc_simd_w8a8_smooth(const void *w, int N, int K) {
  const unsigned char *t = (const unsigned char *)w + smooth_at(N, K);
  int32_t on;
  memcpy(&on, t, sizeof on);
  return on ? (const float *)(const void *)(t + 64) : NULL;
}

void nnc_simd_w8a8_set_smooth(void *w, int N, int K, const float *s) {
  unsigned char *t = (unsigned char *)w + smooth_at(N, K);
  int32_t on = s != NULL;
  /* s may be w's own factors (a held form packed again with them); off: all zero */
  if (s) memmove(t + 64, s, (size_t)(K > 0 ? K : 0) * sizeof *s);
  else memset(t + 64, 0, (size_t)(K > 0 ? K : 0) * sizeof *s);
  memset(t, 0, 64);
  memcpy(t, &on, sizeof on);
}

static const float *col_scales(const void *w, int N, int K) {
  return (const float *)(const void *)((const unsigned char *)w + values_bytes(N, K));
}

static const int32_t *col_sums(const void *w, int N, int K) {
  return (const int32_t *)(const void *)(col_scales(w, N, K) + panels(N) * NR);
}

/* q = nearbyint(x * inv) in [-lim, lim]: the rounding (to nearest, ties to
 * even) is the one every caller sees, packer and tests alike. */
static int8_t to_int(float x, float inv, float lim) {
  float r = nearbyintf(x * inv);
  r = r > lim ? lim : r < -lim ? -lim : r == r ? r : 0.0f;
  return (int8_t)r;
}

void nnc_simd_w8a8_pack(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst) {
  nnc_simd_w8a8_pack_smooth(B, ldb, b_trans, N, K, NULL, dst);
}

void nnc_simd_w8a8_pack_smooth(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, const float *sm, void *dst) {
  int8_t *q = dst;
  size_t kp = kpad(K), np = panels(N) * NR;
  float *scale = (float *)(void *)((unsigned char *)dst + values_bytes(N, K));
  int32_t *sum = (int32_t *)(void *)(scale + np);
  memset(q, 0, values_bytes(N, K));
  memset(scale, 0, np * sizeof *scale);
  memset(sum, 0, np * sizeof *sum);
  for (int n = 0; n < N; n++) {
    const float *col = b_trans ? B + (ptrdiff_t)n * ldb : B + n;
    ptrdiff_t step = b_trans ? 1 : ldb;
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
      float a = fabsf(sm ? col[k * step] * sm[k] : col[k * step]);
      if (a > amax) amax = a;
    }
    if (!(amax > 0.0f) || !isfinite(amax)) continue;   /* a column of zeros (or inf) stays zero */
    scale[n] = amax / QW;
    float inv = QW / amax;
    int8_t *panel = q + (size_t)(n / NR) * NR * kp + (size_t)(n % NR) * KG;
    for (int k = 0; k < K; k++) {
      int8_t v = to_int(sm ? col[k * step] * sm[k] : col[k * step], inv, QW);
      panel[(size_t)(k / KG) * KG * NR + k % KG] = v;
      sum[n] += v;
    }
  }
  nnc_simd_w8a8_set_smooth(dst, N, K, sm);
}

float nnc_simd_w8a8_value(const void *w, int N, int K, int k, int n) {
  const int8_t *q = w;
  int8_t v = q[(size_t)(n / NR) * NR * kpad(K) + (size_t)(k / KG) * KG * NR + (size_t)(n % NR) * KG + k % KG];
  return (float)v * col_scales(w, N, K)[n];
}

/* max |x[k]|, a NaN skipped (x86's max returns its second operand when the
 * first is NaN, as the scalar compare does). */
static float absmax(const float *x, int n) {
  float amax = 0.0f;
  int k = 0;
#if defined(NNC_ISA_AVX512)
  __m512 vm = _mm512_setzero_ps();
  for (; k + 16 <= n; k += 16) vm = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + k)), vm);
  amax = _mm512_reduce_max_ps(vm);
#elif defined(NNC_ISA_AVX2)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vm = _mm256_setzero_ps();
  for (; k + 8 <= n; k += 8) vm = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), vm);
  float lanes[8];
  _mm256_storeu_ps(lanes, vm);
  for (int i = 0; i < 8; i++) amax = lanes[i] > amax ? lanes[i] : amax;
#endif
  for (; k < n; k++) {
    float a = fabsf(x[k]);
    if (a > amax) amax = a;
  }
  return amax;
}

float nnc_simd_a8_quantize(const float *x, int n, int8_t *q) {
  float amax = absmax(x, n);
  if (!(amax > 0.0f) || !isfinite(amax)) {
    memset(q, 0, (size_t)(n > 0 ? n : 0));
    return 0.0f;
  }
  float inv = 127.0f / amax;
  int k = 0;
  /* The vector paths give to_int's values: the conversion rounds to nearest
   * even (the default mode, as nearbyintf), |x * inv| stays within 127 plus
   * a rounding, and a NaN lane is zeroed. */
#if defined(NNC_ISA_AVX512)
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (; k + 16 <= n; k += 16) {
    __m512 v = _mm512_loadu_ps(x + k);
    __m512i r = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), _mm512_mul_ps(v, vinv));
    _mm_storeu_si128((__m128i *)(void *)(q + k), _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(r, lo), hi)));
  }
#elif defined(NNC_ISA_AVX2)
  const __m256 vinv = _mm256_set1_ps(inv);
  for (; k + 8 <= n; k += 8) {
    __m256 v = _mm256_loadu_ps(x + k);
    __m256i r = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v, vinv)),
                                 _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)));
    /* the signed saturating packs clamp to [-128, 127]; -128 cannot occur */
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storel_epi64((__m128i *)(void *)(q + k), _mm_packs_epi16(w, w));
  }
#endif
  for (; k < n; k++) q[k] = to_int(x[k], inv, 127.0f);
  return amax / 127.0f;
}

/* ------------------------------------------------------------- the GEMM */

typedef struct plan {
  int mp;              /* M rounded up to MR */
  int tn, tm, nw, mw;  /* column and row blocks per batch item, their widths */
  int ntasks;
  size_t kp;
  size_t a_bytes;      /* packed A of all batch items, 64-rounded */
  size_t thread_bytes; /* a row of A in f32 and in int8, per thread */
} plan;

static plan make_plan(const nnc_simd_gemm_args *g, int nthreads) {
  plan p;
  int batch = g->batch > 0 ? g->batch : 1;
  int M = imax(g->M, 0), N = imax(g->N, 0);
  p.kp = kpad(g->K);
  p.mp = ceil_div(M, MR) * MR;
  /* about four tasks a thread; N first (every task reads its own panels) */
  int per_item = imax(1, ceil_div(nthreads > 1 ? 4 * nthreads : 1, batch));
  int nblk = imax(1, ceil_div(N, TILE_NP * NR)), mblk = imax(1, ceil_div(M, MR));
  p.tn = imax(1, imin(per_item, nblk / 4));
  p.nw = ceil_div(nblk, p.tn) * TILE_NP * NR;
  p.tn = imax(1, ceil_div(N, p.nw));
  p.tm = imin(imax(1, ceil_div(per_item, p.tn)), mblk);
  p.mw = ceil_div(mblk, p.tm) * MR;
  p.tm = imax(1, ceil_div(M, p.mw));
  p.ntasks = batch * p.tn * p.tm;
  p.a_bytes = nnc_simd_round_up((size_t)batch * (size_t)p.mp * (p.kp + sizeof(float)), 64);
  p.thread_bytes = nnc_simd_round_up(p.kp * (sizeof(float) + 1), 64);
  return p;
}

size_t nnc_gemm_w8a8_workspace_bytes(const nnc_simd_gemm_args *g, int nthreads) {
  plan p = make_plan(g, nthreads);
  return NNC_SIMD_ALIGN + p.a_bytes + (size_t)nthreads * p.thread_bytes;
}

typedef struct job {
  const nnc_simd_gemm_args *g;
  plan p;
  const float *smooth; /* B's SmoothQuant s (nnc_simd_w8a8_smooth) or NULL */
  uint8_t *packa;     /* batch x mp/MR panels of MR x kp */
  float *rscale;      /* batch x mp */
  unsigned char *tbuf;
} job;

/* Row r of A, transposed or with its prologue applied, into x[0..K) (a
 * plain row is quantized where it lies). */
static void load_row(const nnc_simd_gemm_args *g, const float *a, int r, float *x) {
  if (g->a_trans) {
    for (int k = 0; k < g->K; k++) x[k] = a[(ptrdiff_t)k * g->lda + r];
    return;
  }
  const float *row = a + (ptrdiff_t)r * g->lda;
  float mean = 0.0f, rstd;
  if (g->prologue == NNC_SIMD_PRO_LAYERNORM) nnc_simd_row_moments(row, g->K, g->eps, &mean, &rstd);
  else rstd = nnc_simd_row_rms_inv(row, g->K, g->eps);
  const float *beta = g->prologue == NNC_SIMD_PRO_LAYERNORM ? g->beta : NULL;
  for (int k = 0; k < g->K; k++) x[k] = (row[k] - mean) * rstd * g->gamma[k] + (beta ? beta[k] : 0.0f);
}

/* Phase 1: rows [r0, r0 + ROWS_PER_PACK) of one batch item quantized into
 * their panels; rows past M are zeros (128) with scale 0. */
static void pack_task(void *ctx, int task, int thread) {
  const job *jb = ctx;
  const nnc_simd_gemm_args *g = jb->g;
  const plan *p = &jb->p;
  int groups = ceil_div(g->M, ROWS_PER_PACK);
  int bi = task / groups, r0 = (task % groups) * ROWS_PER_PACK;
  int r1 = imin(p->mp, r0 + ROWS_PER_PACK);
  const float *a = g->A + (ptrdiff_t)bi * g->stride_a;
  uint8_t *pa = jb->packa + (size_t)bi * (size_t)p->mp * p->kp;
  float *rs = jb->rscale + (size_t)bi * (size_t)p->mp;
  float *x = (float *)(void *)(jb->tbuf + (size_t)thread * p->thread_bytes);
  int8_t *q = (int8_t *)(x + p->kp);
  if (r1 > g->M) memset(pa + (size_t)r0 * p->kp, 0x80, (size_t)(r1 - r0) * p->kp);
  memset(q + g->K, 0, p->kp - (size_t)g->K);
  for (int r = r0; r < r1; r++) {
    rs[r] = 0.0f;
    if (r >= g->M) continue;
    const float *src = x;
    if (g->a_trans || g->prologue != NNC_SIMD_PRO_NONE) load_row(g, a, r, x);
    else src = a + (ptrdiff_t)r * g->lda;   /* quantized where it lies */
    if (jb->smooth) {
      /* SmoothQuant: A's column k over s_k, B's times s_k (the packer's) */
      for (int k = 0; k < g->K; k++) x[k] = src[k] / jb->smooth[k];
      src = x;
    }
    rs[r] = nnc_simd_a8_quantize(src, g->K, q);
    /* a group of 4 k is one 32-bit word; u = q + 128 is q ^ 0x80 a byte */
    uint8_t *dst = pa + (size_t)(r / MR) * MR * p->kp + (size_t)(r % MR) * KG;
    for (size_t gi = 0; gi < p->kp / KG; gi++) {
      uint32_t word;
      memcpy(&word, q + gi * KG, sizeof word);
      word ^= 0x80808080u;
      memcpy(dst + gi * KG * MR, &word, sizeof word);
    }
  }
}

#if defined(W8_ZMM)
/* Row i's sums of one panel (acc) dequantized into c: (sum - 128 colsum[j])
 * x rs x cs[j]. */
static inline void store_row(__m512i acc, __m512i corr, __m512 cv, float rs, float *c) {
  _mm512_storeu_ps(c, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc, corr)), _mm512_mul_ps(_mm512_set1_ps(rs), cv)));
}

static inline __m512i bcast_a(const uint8_t *a) {
  int32_t f;
  memcpy(&f, a, sizeof f);
  return _mm512_set1_epi32(f);
}

/* The int32 sums of MR (8) rows x 2 panels over ng groups of 4 k, the second
 * panel `panel` bytes after the first, dequantized into c (row stride ldc).
 * The 16 accumulators are named, and the function is not inlined: held in
 * an array, or inlined into compute_task's loops, GCC copied and spilled
 * them each step. */
__attribute__((noinline)) static void micro_zmm2(int ng, const uint8_t *restrict a, const int8_t *restrict b, size_t panel,
                       const int32_t *colsum, const float *cs, const float *rs, float *c, ptrdiff_t ldc) {
  _Static_assert(MR == 8, "8 rows a tile");
  __m512i s00 = _mm512_setzero_si512(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,
          s31 = s00, s40 = s00, s41 = s00, s50 = s00, s51 = s00, s60 = s00, s61 = s00, s70 = s00, s71 = s00;
  for (int gi = 0; gi < ng; gi++) {
    __m512i b0 = _mm512_loadu_si512((const void *)b), b1 = _mm512_loadu_si512((const void *)(b + panel));
    __m512i av = bcast_a(a);
    s00 = _mm512_dpbusd_epi32(s00, av, b0);
    s01 = _mm512_dpbusd_epi32(s01, av, b1);
    av = bcast_a(a + KG);
    s10 = _mm512_dpbusd_epi32(s10, av, b0);
    s11 = _mm512_dpbusd_epi32(s11, av, b1);
    av = bcast_a(a + 2 * KG);
    s20 = _mm512_dpbusd_epi32(s20, av, b0);
    s21 = _mm512_dpbusd_epi32(s21, av, b1);
    av = bcast_a(a + 3 * KG);
    s30 = _mm512_dpbusd_epi32(s30, av, b0);
    s31 = _mm512_dpbusd_epi32(s31, av, b1);
    av = bcast_a(a + 4 * KG);
    s40 = _mm512_dpbusd_epi32(s40, av, b0);
    s41 = _mm512_dpbusd_epi32(s41, av, b1);
    av = bcast_a(a + 5 * KG);
    s50 = _mm512_dpbusd_epi32(s50, av, b0);
    s51 = _mm512_dpbusd_epi32(s51, av, b1);
    av = bcast_a(a + 6 * KG);
    s60 = _mm512_dpbusd_epi32(s60, av, b0);
    s61 = _mm512_dpbusd_epi32(s61, av, b1);
    av = bcast_a(a + 7 * KG);
    s70 = _mm512_dpbusd_epi32(s70, av, b0);
    s71 = _mm512_dpbusd_epi32(s71, av, b1);
    a += KG * MR;
    b += KG * NR;
  }
  const __m512i acc[MR][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31},
                              {s40, s41}, {s50, s51}, {s60, s61}, {s70, s71}};
  for (int h = 0; h < 2; h++) {
    __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(colsum + NR * h)), 7);
    __m512 cv = _mm512_loadu_ps(cs + NR * h);
    for (int i = 0; i < MR; i++) store_row(acc[i][h], corr, cv, rs[i], c + (ptrdiff_t)i * ldc + NR * h);
  }
}

/* The same for one panel (the last one of an odd count). */
__attribute__((noinline)) static void micro_zmm1(int ng, const uint8_t *restrict a, const int8_t *restrict b, const int32_t *colsum,
                       const float *cs, const float *rs, float *c, ptrdiff_t ldc) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  for (int gi = 0; gi < ng; gi++) {
    __m512i b0 = _mm512_loadu_si512((const void *)b);
    s0 = _mm512_dpbusd_epi32(s0, bcast_a(a), b0);
    s1 = _mm512_dpbusd_epi32(s1, bcast_a(a + KG), b0);
    s2 = _mm512_dpbusd_epi32(s2, bcast_a(a + 2 * KG), b0);
    s3 = _mm512_dpbusd_epi32(s3, bcast_a(a + 3 * KG), b0);
    s4 = _mm512_dpbusd_epi32(s4, bcast_a(a + 4 * KG), b0);
    s5 = _mm512_dpbusd_epi32(s5, bcast_a(a + 5 * KG), b0);
    s6 = _mm512_dpbusd_epi32(s6, bcast_a(a + 6 * KG), b0);
    s7 = _mm512_dpbusd_epi32(s7, bcast_a(a + 7 * KG), b0);
    a += KG * MR;
    b += KG * NR;
  }
  const __m512i acc[MR] = {s0, s1, s2, s3, s4, s5, s6, s7};
  __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512((const void *)colsum), 7);
  __m512 cv = _mm512_loadu_ps(cs);
  for (int i = 0; i < MR; i++) store_row(acc[i], corr, cv, rs[i], c + (ptrdiff_t)i * ldc);
}
#else
#if defined(W8_X86) && !defined(__AVXVNNI__)
/* acc plus one row's products with two groups of 4 k of 8 columns (b0, b1;
 * the row's second group KG * MR bytes after its first). AVX2: the two
 * groups' int16 pair sums are added before one vpmaddwd widens them (2 x 2
 * x 255 x 31 = 31620 fits int16). */
static inline __m256i dot2(__m256i acc, const uint8_t *a, __m256i b0, __m256i b1) {
  int32_t f0, f1;
  memcpy(&f0, a, sizeof f0);
  memcpy(&f1, a + KG * MR, sizeof f1);
  __m256i a0 = _mm256_set1_epi32(f0), a1 = _mm256_set1_epi32(f1);
  __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(a0, b0), _mm256_maddubs_epi16(a1, b1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
#endif

/* The int32 sums of one MR x NR tile over ng (even) groups of 4 k, dequantized:
 * tile[i*NR + j] = (sum - 128 colsum[j]) * rs[i] * cs[j]. */
static void micro(int ng, const uint8_t *restrict a, const int8_t *restrict b, const int32_t *colsum,
                  const float *cs, const float *rs, float *tile) {
#if defined(W8_X86) && defined(__AVXVNNI__)
  _Static_assert(MR == 4, "4 rows a tile");
  /* AVX-VNNI needs no vpmaddwd and no ones, so both halves' 8 accumulators
   * fit beside B and A: one vpdpbusd a row, half and group, 8 independent
   * chains (a half at a time chained two a step and waited on latency). */
  __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00;
  for (int gi = 0; gi < ng; gi++) {
    __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)b);
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(const void *)(b + 32));
    int32_t f[MR];
    memcpy(f, a, sizeof f);
    __m256i a0 = _mm256_set1_epi32(f[0]), a1 = _mm256_set1_epi32(f[1]);
    __m256i a2 = _mm256_set1_epi32(f[2]), a3 = _mm256_set1_epi32(f[3]);
    s00 = _mm256_dpbusd_avx_epi32(s00, a0, b0);
    s01 = _mm256_dpbusd_avx_epi32(s01, a0, b1);
    s10 = _mm256_dpbusd_avx_epi32(s10, a1, b0);
    s11 = _mm256_dpbusd_avx_epi32(s11, a1, b1);
    s20 = _mm256_dpbusd_avx_epi32(s20, a2, b0);
    s21 = _mm256_dpbusd_avx_epi32(s21, a2, b1);
    s30 = _mm256_dpbusd_avx_epi32(s30, a3, b0);
    s31 = _mm256_dpbusd_avx_epi32(s31, a3, b1);
    a += KG * MR;
    b += KG * NR;
  }
  const __m256i acc[MR][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
  for (int h = 0; h < 2; h++) {
    __m256i corr = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(colsum + 8 * h)), 7);
    __m256 cv = _mm256_loadu_ps(cs + 8 * h);
    for (int i = 0; i < MR; i++) {
      __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][h], corr));
      _mm256_storeu_ps(tile + i * NR + 8 * h, _mm256_mul_ps(v, _mm256_mul_ps(_mm256_set1_ps(rs[i]), cv)));
    }
  }
#elif defined(W8_X86)
  _Static_assert(MR == 4, "4 rows a tile");
  /* Each half of the panel's 16 columns over all of K in turn, with 4
   * named accumulators: AVX2's 16 registers then hold them, B and A (both
   * halves at once, or an array, spilled or copied them each step). */
  for (int h = 0; h < 2; h++) {
    const uint8_t *ap = a;
    const int8_t *bp = b + 32 * h;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (int gi = 0; gi < ng; gi += 2) {
      __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)bp);
      __m256i b1 = _mm256_loadu_si256((const __m256i *)(const void *)(bp + KG * NR));
      s0 = dot2(s0, ap, b0, b1);
      s1 = dot2(s1, ap + KG, b0, b1);
      s2 = dot2(s2, ap + 2 * KG, b0, b1);
      s3 = dot2(s3, ap + 3 * KG, b0, b1);
      ap += 2 * KG * MR;
      bp += 2 * KG * NR;
    }
    const __m256i acc[MR] = {s0, s1, s2, s3};
    __m256i corr = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(colsum + 8 * h)), 7);
    __m256 cv = _mm256_loadu_ps(cs + 8 * h);
    for (int i = 0; i < MR; i++) {
      __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i], corr));
      _mm256_storeu_ps(tile + i * NR + 8 * h, _mm256_mul_ps(v, _mm256_mul_ps(_mm256_set1_ps(rs[i]), cv)));
    }
  }
#elif defined(W8_SDOT)
  /* Armv8.2's sdot multiplies signed by signed: u ^ 0x80 is q (u - 128) as a
   * signed byte, so no column-sum correction. One group of 4 k is one
   * vector of A (MR rows x 4 k) and four of B (4 columns x 4 k each); lane i
   * of A is row i. */
  _Static_assert(MR == 4 && NR % 4 == 0, "one lane of A a row");
  int32x4_t acc[MR][NR / 4];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR / 4; j++) acc[i][j] = vdupq_n_s32(0);
  const uint8x16_t flip = vdupq_n_u8(0x80);
  for (int gi = 0; gi < ng; gi++) {
    int8x16_t av = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(a), flip));
#pragma GCC unroll 4
    for (int j = 0; j < NR / 4; j++) {
      int8x16_t bv = vld1q_s8(b + 16 * j);
      acc[0][j] = vdotq_laneq_s32(acc[0][j], bv, av, 0);
      acc[1][j] = vdotq_laneq_s32(acc[1][j], bv, av, 1);
      acc[2][j] = vdotq_laneq_s32(acc[2][j], bv, av, 2);
      acc[3][j] = vdotq_laneq_s32(acc[3][j], bv, av, 3);
    }
    a += KG * MR;
    b += KG * NR;
  }
  (void)colsum;
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR / 4; j++)
      vst1q_f32(tile + i * NR + 4 * j,
                vmulq_f32(vcvtq_f32_s32(acc[i][j]), vmulq_n_f32(vld1q_f32(cs + 4 * j), rs[i])));
#else
  int32_t acc[MR][NR] = {{0}};
  for (int gi = 0; gi < ng; gi++) {
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++)
        for (int t = 0; t < KG; t++) acc[i][j] += (int32_t)a[i * KG + t] * (int32_t)b[j * KG + t];
    a += KG * MR;
    b += KG * NR;
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) tile[i * NR + j] = (float)(acc[i][j] - 128 * colsum[j]) * (rs[i] * cs[j]);
#endif
}
#endif

/* Phase 2: one rectangle of C. */
static void compute_task(void *ctx, int task, int thread) {
  (void)thread;
  const job *jb = ctx;
  const nnc_simd_gemm_args *g = jb->g;
  const plan *p = &jb->p;
  int bi = task / (p->tn * p->tm), rest = task % (p->tn * p->tm);
  int n0 = (rest / p->tm) * p->nw, m0 = (rest % p->tm) * p->mw;
  int n1 = imin(g->N, n0 + p->nw), m1 = imin(g->M, m0 + p->mw);
  float *c = g->C + (ptrdiff_t)bi * g->stride_c;
  const float *res = g->residual ? g->residual + (ptrdiff_t)bi * g->stride_r : NULL;
  float *aux = g->aux_mode != NNC_SIMD_AUX_NONE ? g->aux + (ptrdiff_t)bi * g->stride_x : NULL;
  const uint8_t *pa = jb->packa + (size_t)bi * (size_t)p->mp * p->kp;
  const float *rs = jb->rscale + (size_t)bi * (size_t)p->mp;
  const int8_t *w = g->b_w8a8;
  const float *cs = col_scales(w, g->N, g->K);
  const int32_t *sum = col_sums(w, g->N, g->K);
  int ng = (int)(p->kp / KG);
  _Alignas(NNC_SIMD_ALIGN) float tile[MR * TILE_NP * NR];
  for (int col = n0; col < n1; col += TILE_NP * NR) {
    int nr = imin(TILE_NP * NR, n1 - col);
    const int8_t *pb = w + (size_t)col * p->kp;
    for (int row = m0; row < m1; row += MR) {
      int mr = imin(MR, m1 - row);
      float *ct = c + (ptrdiff_t)row * g->ldc + col;
#if defined(W8_ZMM)
      /* a whole tile is written straight into C; an edge one through tile */
      int full = mr == MR && nr % NR == 0;
      float *dst = full ? ct : tile;
      ptrdiff_t ldd = full ? g->ldc : TILE_NP * NR;
      const uint8_t *ap = pa + (size_t)row * p->kp;
      size_t panel = (size_t)NR * p->kp;   /* the next panel's offset */
      if (nr > NR) micro_zmm2(ng, ap, pb, panel, sum + col, cs + col, rs + row, dst, ldd);
      else micro_zmm1(ng, ap, pb, sum + col, cs + col, rs + row, dst, ldd);
      if (!full)
        for (int i = 0; i < mr; i++)
          memcpy(ct + (ptrdiff_t)i * g->ldc, tile + i * ldd, (size_t)nr * sizeof *tile);
#else
      micro(ng, pa + (size_t)row * p->kp, pb, sum + col, cs + col, rs + row, tile);
      for (int i = 0; i < mr; i++) memcpy(ct + (ptrdiff_t)i * g->ldc, tile + i * NR, (size_t)nr * sizeof *tile);
#endif
      nnc_gemm_epilogue(ct, g->ldc, mr, nr, g->alpha, g->bias ? g->bias + col : NULL, g->act,
                        res ? res + (ptrdiff_t)row * g->ldr + col : NULL, g->ldr, g->residual_mul, g->aux_mode,
                        aux ? aux + (ptrdiff_t)row * g->ldx + col : NULL, g->ldx);
    }
  }
}

nnc_simd_status nnc_gemm_w8a8(const nnc_simd_gemm_args *g, const nnc_simd_par *par, void *workspace,
                              nnc_simd_error *err) {
  /* |sum of u w| <= K x 255 x 31 must fit int32 */
  if (g->K > 270000) return nnc_simd_fail(err, KERNEL, "expected K <= 270000 (int32 sums), found %d", g->K);
  job jb;
  jb.g = g;
  jb.p = make_plan(g, nnc_simd_threads(par));
  jb.smooth = nnc_simd_w8a8_smooth(g->b_w8a8, g->N, g->K);
  jb.packa = nnc_simd_align_ptr(workspace);
  jb.rscale = (float *)(void *)(jb.packa + (size_t)(g->batch) * (size_t)jb.p.mp * jb.p.kp);
  jb.tbuf = jb.packa + jb.p.a_bytes;
  nnc_simd_run(par, g->batch * ceil_div(g->M, ROWS_PER_PACK), pack_task, &jb);
  nnc_simd_run(par, jb.p.ntasks, compute_task, &jb);
  return NNC_SIMD_OK;
}

void nnc_simd_w8a8_export(const void *w, int b_trans, int N, int K, int8_t *values, float *scales) {
  const int8_t *q = w;
  size_t kp = kpad(K);
  for (int n = 0; n < N; n++) {
    const int8_t *panel = q + (size_t)(n / NR) * NR * kp + (size_t)(n % NR) * KG;
    for (int k = 0; k < K; k++)
      values[b_trans ? (size_t)n * (size_t)K + (size_t)k : (size_t)k * (size_t)N + (size_t)n] =
          panel[(size_t)(k / KG) * KG * NR + k % KG];
    scales[n] = col_scales(w, N, K)[n];
  }
}

void nnc_simd_w8a8_import(const int8_t *values, const float *scales, int b_trans, int N, int K, void *dst) {
  nnc_simd_w8a8_import_smooth(values, scales, b_trans, N, K, NULL, dst);
}

void nnc_simd_w8a8_import_smooth(const int8_t *values, const float *scales, int b_trans, int N, int K,
                                 const float *smooth, void *dst) {
  int8_t *q = dst;
  size_t kp = kpad(K), np = panels(N) * NR;
  float *scale = (float *)(void *)((unsigned char *)dst + values_bytes(N, K));
  int32_t *sum = (int32_t *)(void *)(scale + np);
  memset(q, 0, values_bytes(N, K));
  memset(scale, 0, np * sizeof *scale);
  memset(sum, 0, np * sizeof *sum);
  for (int n = 0; n < N; n++) {
    int8_t *panel = q + (size_t)(n / NR) * NR * kp + (size_t)(n % NR) * KG;
    for (int k = 0; k < K; k++) {
      int8_t v = values[b_trans ? (size_t)n * (size_t)K + (size_t)k : (size_t)k * (size_t)N + (size_t)n];
      panel[(size_t)(k / KG) * KG * NR + k % KG] = v;
      sum[n] += v;   /* the column sums, as the packer makes them */
    }
    scale[n] = scales[n];
  }
  nnc_simd_w8a8_set_smooth(dst, N, K, smooth);
}
