/* templates/c_simd/gemm_q4.c — B held as int4 with a scale per group of
 * NNC_SIMD_Q4_GROUP consecutive k of a column (weight-only int4, group
 * size 128): the quantizer and its layout, the micro-kernel that multiplies
 * by the packed nibbles straight from memory, the widening of a panel to
 * f32 for a task with many rows, and the conversions to and from a file's
 * form (a quantized checkpoint).
 *
 * Layout (nnc_simd_q4_pack): the micro-kernel's order, as gemm_q8.c's but
 * two columns a byte: NR-column panels of all of K (panel p at p*NR/2*K
 * bytes), k step k at k*NR/2, byte j holding column j in bits 0-3 and
 * column j + NR/2 in bits 4-7, two's complement (q in [-7, 7]); columns
 * past N are zero. Then at a 64-byte boundary the f32 scales: panel p's
 * group g at (p*G + g)*NR, G = ceil(K / 128) groups (the last one shorter
 * when K is not a multiple of 128), zeros past N.
 *
 * Splitting a byte between the two halves of the panel (rather than pairing
 * adjacent columns) makes AVX2's and AVX-512's NR = 2 vectors fall out of
 * one load: the low nibbles are the first vector's columns, the high ones
 * the second's. The direct micro-kernel multiplies each converted vector
 * by its group's scales before the FMAs (one multiply per NR/VW FMAs per
 * row), so its sums need no per-group accumulators: a KC pass walks the
 * groups it meets in turn, wherever it starts (KC = 256 and its last pass
 * of up to 320 start on groups; a tuned KC need not). */
#include "gemm_internal.h"

#include <math.h>

#define NV (NNC_GEMM_NR / NNC_VW)
#define HALF (NNC_GEMM_NR / 2)
#define GROUP NNC_SIMD_Q4_GROUP

#if NNC_GEMM_NR % 2 != 0
#error "int4 panels hold two columns a byte: NNC_GEMM_NR must be even"
#endif

static size_t panels(int N) { return N > 0 ? ((size_t)N + NNC_GEMM_NR - 1) / NNC_GEMM_NR : 0; }
static size_t groups(int K) { return K > 0 ? ((size_t)K + GROUP - 1) / GROUP : 0; }

/* Bytes of the packed nibbles: where the scales start. */
static size_t values_bytes(int N, int K) {
  return nnc_simd_round_up(panels(N) * HALF * (size_t)(K > 0 ? K : 0), 64);
}

size_t nnc_simd_q4_bytes(int N, int K) {
  return values_bytes(N, K) + panels(N) * groups(K) * NNC_GEMM_NR * sizeof(float);
}

static float *scales_of(void *q4, int N, int K) {
  return (float *)(void *)((unsigned char *)q4 + values_bytes(N, K));
}

static const float *scales_at(const void *q4, int N, int K) {
  return (const float *)(const void *)((const unsigned char *)q4 + values_bytes(N, K));
}

/* Byte of column n at step k, and its shift. */
static size_t byte_at(int n, int K, int k) {
  return (size_t)(n / NNC_GEMM_NR) * HALF * (size_t)K + (size_t)k * HALF + (size_t)(n % NNC_GEMM_NR % HALF);
}
static int shift_of(int n) { return n % NNC_GEMM_NR >= HALF ? 4 : 0; }

/* A nibble's two's complement value. */
static int nibble(unsigned v) { return (int)(v & 15u) - (int)((v & 8u) << 1); }

static size_t scale_at(int n, int K, int g) {
  return ((size_t)(n / NNC_GEMM_NR) * groups(K) + (size_t)g) * NNC_GEMM_NR + (size_t)(n % NNC_GEMM_NR);
}

void nnc_simd_q4_pack(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst) {
  uint8_t *q = dst;
  float *scale = scales_of(dst, N, K);
  memset(q, 0, values_bytes(N, K));
  memset(scale, 0, panels(N) * groups(K) * NNC_GEMM_NR * sizeof *scale);
  for (int n = 0; n < N; n++) {
    /* column n of B: element k at col[k * step] */
    const float *col = b_trans ? B + (ptrdiff_t)n * ldb : B + n;
    ptrdiff_t step = b_trans ? 1 : ldb;
    for (int k0 = 0; k0 < K; k0 += GROUP) {
      int k1 = K - k0 < GROUP ? K : k0 + GROUP;
      float amax = 0.0f;
      for (int k = k0; k < k1; k++) {
        float a = fabsf(col[k * step]);
        if (a > amax) amax = a;   /* NaN never is */
      }
      if (!(amax > 0.0f) || !isfinite(amax)) continue;   /* a group of zeros (or inf) stays zero */
      float s = amax / 7.0f;
      scale[scale_at(n, K, k0 / GROUP)] = s;
      for (int k = k0; k < k1; k++) {
        float r = nearbyintf(col[k * step] / s);   /* to nearest, ties to even */
        r = r > 7.0f ? 7.0f : r < -7.0f ? -7.0f : r == r ? r : 0.0f;
        q[byte_at(n, K, k)] |= (uint8_t)(((unsigned)(int)r & 15u) << shift_of(n));
      }
    }
  }
}

float nnc_simd_q4_value(const void *q4, int N, int K, int k, int n) {
  const uint8_t *q = q4;
  int v = nibble((unsigned)q[byte_at(n, K, k)] >> shift_of(n));
  return (float)v * scales_at(q4, N, K)[scale_at(n, K, k / GROUP)];
}

void nnc_simd_q4_export(const void *q4, int b_trans, int N, int K, uint8_t *values, float *scales) {
  const uint8_t *q = q4;
  size_t kh = ((size_t)K + 1) / 2, G = groups(K);
  memset(values, 0, kh * (size_t)N);
  for (int n = 0; n < N; n++) {
    for (int k = 0; k < K; k++) {
      unsigned v = ((unsigned)q[byte_at(n, K, k)] >> shift_of(n)) & 15u;
      values[b_trans ? (size_t)n * kh + (size_t)k / 2 : (size_t)k / 2 * (size_t)N + (size_t)n] |=
          (uint8_t)(v << (k % 2 * 4));
    }
    for (size_t g = 0; g < G; g++)
      scales[b_trans ? (size_t)n * G + g : g * (size_t)N + (size_t)n] = scales_at(q4, N, K)[scale_at(n, K, (int)g)];
  }
}

void nnc_simd_q4_import(const uint8_t *values, const float *scales, int b_trans, int N, int K, void *dst) {
  uint8_t *q = dst;
  float *scale = scales_of(dst, N, K);
  size_t kh = ((size_t)K + 1) / 2, G = groups(K);
  memset(q, 0, values_bytes(N, K));
  memset(scale, 0, panels(N) * G * NNC_GEMM_NR * sizeof *scale);
  for (int n = 0; n < N; n++) {
    for (int k = 0; k < K; k++) {
      uint8_t b = values[b_trans ? (size_t)n * kh + (size_t)k / 2 : (size_t)k / 2 * (size_t)N + (size_t)n];
      q[byte_at(n, K, k)] |= (uint8_t)((((unsigned)b >> (k % 2 * 4)) & 15u) << shift_of(n));
    }
    for (size_t g = 0; g < G; g++)
      scale[scale_at(n, K, (int)g)] = scales[b_trans ? (size_t)n * G + g : g * (size_t)N + (size_t)n];
  }
}

const float *nnc_gemm_q4_scales(const void *q4, int N, int K) { return scales_at(q4, N, K); }

/* The NR columns of one k step (HALF bytes at p) as NV vectors of floats. */
static inline void load_q4(const uint8_t *p, nnc_vf v[NV]) {
#if (defined(NNC_ISA_AVX2) || defined(NNC_ISA_AVX512)) && NV == 2 && HALF == NNC_VW
  /* the low nibbles are vector 0's columns, the high ones vector 1's;
   * pshufb maps each nibble to its signed byte */
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  const __m128i m = _mm_set1_epi8(15);
#if defined(NNC_ISA_AVX512)
  __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
  v[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, _mm_and_si128(x, m))));
  v[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(x, 4), m))));
#else
  __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)p);
  __m128i both = _mm_shuffle_epi8(lut, _mm_unpacklo_epi64(_mm_and_si128(x, m), _mm_and_si128(_mm_srli_epi16(x, 4), m)));
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(both));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(both, both)));
#endif
#else
  /* portable: the columns one at a time through a float tile */
  _Alignas(NNC_SIMD_ALIGN) float f[NNC_GEMM_NR];
  for (int j = 0; j < HALF; j++) {
    f[j] = (float)nibble(p[j]);
    f[j + HALF] = (float)nibble((unsigned)p[j] >> 4);
  }
  for (int j = 0; j < NV; j++) v[j] = nnc_vload(f + j * NNC_VW);
#endif
}

void nnc_gemm_widen_q4(const uint8_t *b, int K, int pc, int kc, int j0, int nc, const float *scale, float *dst) {
  size_t G = groups(K);
  for (int jr = 0; jr < nc; jr += NNC_GEMM_NR) {
    const uint8_t *src = b + (size_t)(j0 + jr) / 2 * (size_t)K + (size_t)pc * HALF;
    const float *sc = scale + (size_t)(j0 + jr) * G;   /* this panel's groups */
    float *d = dst + (size_t)jr * (size_t)kc;
    for (int k = 0; k < kc;) {
      int g = (pc + k) / GROUP, end = (g + 1) * GROUP - pc < kc ? (g + 1) * GROUP - pc : kc;
      nnc_vf sv[NV];
      for (int j = 0; j < NV; ++j) sv[j] = nnc_vload(sc + (size_t)g * NNC_GEMM_NR + j * NNC_VW);
      for (; k < end; ++k) {
        nnc_vf bv[NV];
        load_q4(src + (size_t)k * HALF, bv);
        for (int j = 0; j < NV; ++j) nnc_vstore(d + k * NNC_GEMM_NR + j * NNC_VW, nnc_vmul(bv[j], sv[j]));
      }
    }
  }
}

/* As nnc_gemm_micro, with b a packed int4 panel from step pc on and scale
 * the panel's groups: each k step's NR values are converted and scaled by
 * their group before the FMAs. */
void nnc_gemm_micro_q4(int kc, int pc, const float *restrict a, const uint8_t *restrict b, const float *scale,
                       float *c, ptrdiff_t ldc, int mr, int nr, int first) {
  nnc_vf acc[NNC_GEMM_MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < NNC_GEMM_MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vzero();

  for (int k = 0; k < kc;) {
    int g = (pc + k) / GROUP, end = (g + 1) * GROUP - pc < kc ? (g + 1) * GROUP - pc : kc;
    nnc_vf sv[NV];
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) sv[j] = nnc_vload(scale + (size_t)g * NNC_GEMM_NR + j * NNC_VW);
#pragma GCC unroll 2
    for (; k < end; ++k) {
      nnc_vf bv[NV];
      load_q4(b + (size_t)k * HALF, bv);
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) bv[j] = nnc_vmul(bv[j], sv[j]);
#pragma GCC unroll 32
      for (int i = 0; i < NNC_GEMM_MR; ++i) {
        nnc_vf av = nnc_vset1(a[(size_t)k * NNC_GEMM_MR + i]);
#pragma GCC unroll 32
        for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vfma(av, bv[j], acc[i][j]);
      }
    }
  }

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
  /* an edge tile: the sums spilled, the part inside C copied */
  _Alignas(NNC_SIMD_ALIGN) float tile[NNC_GEMM_MR * NNC_GEMM_NR];
  for (int i = 0; i < NNC_GEMM_MR; ++i)
    for (int j = 0; j < NV; ++j) nnc_vstore(tile + i * NNC_GEMM_NR + j * NNC_VW, acc[i][j]);
  for (int i = 0; i < mr; ++i) {
    float *ci = c + (ptrdiff_t)i * ldc;
    const float *ti = tile + i * NNC_GEMM_NR;
    for (int j = 0; j < nr; ++j) ci[j] = first ? ti[j] : ci[j] + ti[j];
  }
}
