/* templates/c_simd/gemm_q8.c — B held as int8 with a scale per column
 * (weight-only int8, per output channel): the quantizer and its layout, the
 * micro-kernel that multiplies by int8 panels straight from memory, and the
 * widening of a panel to f32 for a task with many rows.
 *
 * Layout (nnc_simd_q8_pack): the micro-kernel's own order, so that nothing
 * is packed per call: NR-column panels of all of K (panel p at p*NR*K bytes,
 * element [k*NR + j], columns past N zero), then at a 64-byte boundary one
 * f32 scale per column (NR-padded, zeros past N). A GEMM with few rows is
 * bound by reading B: the direct micro-kernel reads one byte a weight
 * instead of four, converts NR bytes to floats per k step and scales the
 * column sums once per pass. With many rows each panel is reused by every
 * MR of them, and widening it once to f32 in the thread's buffer (the same
 * place the f32 path packs B to) lets the f32 micro-kernel run at its rate. */
#include "gemm_internal.h"

#include <math.h>

#define NV (NNC_GEMM_NR / NNC_VW)

/* NNC_VW int8 values at p as floats. */
static inline nnc_vf load_i8(const int8_t *p) {
#if defined(NNC_ISA_AVX512)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
#elif defined(NNC_ISA_AVX2)
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
#elif defined(NNC_ISA_NEON)
  int32_t w;
  memcpy(&w, p, sizeof w);   /* exactly 4 bytes: the panel may end there */
  int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
#else
  return (float)p[0];
#endif
}

static size_t panels(int N) { return N > 0 ? ((size_t)N + NNC_GEMM_NR - 1) / NNC_GEMM_NR : 0; }

/* Bytes of the int8 panels: where the scales start. */
static size_t values_bytes(int N, int K) {
  return nnc_simd_round_up(panels(N) * NNC_GEMM_NR * (size_t)(K > 0 ? K : 0), 64);
}

size_t nnc_simd_q8_bytes(int N, int K) { return values_bytes(N, K) + panels(N) * NNC_GEMM_NR * sizeof(float); }

const float *nnc_gemm_q8_scales(const void *q8, int N, int K) {
  return (const float *)(const void *)((const unsigned char *)q8 + values_bytes(N, K));
}

void nnc_simd_q8_pack(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst) {
  int8_t *q = dst;
  float *scale = (float *)(void *)((unsigned char *)dst + values_bytes(N, K));
  size_t np = panels(N);
  memset(q, 0, values_bytes(N, K));
  memset(scale, 0, np * NNC_GEMM_NR * sizeof *scale);
  for (int n = 0; n < N; n++) {
    /* column n of B: element k at B[at(k)] */
    const float *col = b_trans ? B + (ptrdiff_t)n * ldb : B + n;
    ptrdiff_t step = b_trans ? 1 : ldb;
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
      float a = fabsf(col[k * step]);
      if (a > amax) amax = a;   /* NaN never is */
    }
    if (!(amax > 0.0f) || !isfinite(amax)) continue;   /* a column of zeros (or inf) stays zero */
    float s = amax / 127.0f;
    scale[n] = s;
    int8_t *panel = q + (size_t)(n / NNC_GEMM_NR) * NNC_GEMM_NR * (size_t)K + n % NNC_GEMM_NR;
    for (int k = 0; k < K; k++) {
      float r = nearbyintf(col[k * step] / s);   /* to nearest, ties to even */
      r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r == r ? r : 0.0f;
      panel[(size_t)k * NNC_GEMM_NR] = (int8_t)r;
    }
  }
}

float nnc_simd_q8_value(const void *q8, int N, int K, int k, int n) {
  const int8_t *q = q8;
  int8_t v = q[(size_t)(n / NNC_GEMM_NR) * NNC_GEMM_NR * (size_t)K + (size_t)k * NNC_GEMM_NR + n % NNC_GEMM_NR];
  return (float)v * nnc_gemm_q8_scales(q8, N, K)[n];
}

void nnc_gemm_widen_q8(const int8_t *b, int K, int pc, int kc, int j0, int nc, const float *scale, float *dst) {
  for (int jr = 0; jr < nc; jr += NNC_GEMM_NR) {
    const int8_t *src = b + (size_t)(j0 + jr) * (size_t)K + (size_t)pc * NNC_GEMM_NR;
    float *d = dst + (size_t)jr * (size_t)kc;
    nnc_vf sv[NV];
    for (int j = 0; j < NV; ++j) sv[j] = nnc_vload(scale + j0 + jr + j * NNC_VW);
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < NV; ++j)
        nnc_vstore(d + k * NNC_GEMM_NR + j * NNC_VW,
                   nnc_vmul(load_i8(src + k * NNC_GEMM_NR + j * NNC_VW), sv[j]));
  }
}

/* As nnc_gemm_micro, with b an int8 panel: the sums of a . q are taken in
 * f32 (q converted exactly) and scaled per column before they join C. */
void nnc_gemm_micro_q8(int kc, const float *restrict a, const int8_t *restrict b, const float *scale, float *c,
                       ptrdiff_t ldc, int mr, int nr, int first) {
  nnc_vf acc[NNC_GEMM_MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < NNC_GEMM_MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vzero();

#pragma GCC unroll 4
  for (int k = 0; k < kc; ++k) {
    nnc_vf bv[NV];
#pragma GCC unroll 32
    for (int j = 0; j < NV; ++j) bv[j] = load_i8(b + j * NNC_VW);
#pragma GCC unroll 32
    for (int i = 0; i < NNC_GEMM_MR; ++i) {
      nnc_vf av = nnc_vset1(a[i]);
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) acc[i][j] = nnc_vfma(av, bv[j], acc[i][j]);
    }
    a += NNC_GEMM_MR;
    b += NNC_GEMM_NR;
  }

  /* the scales are NR-padded: a whole vector is always there */
  nnc_vf sv[NV];
#pragma GCC unroll 32
  for (int j = 0; j < NV; ++j) sv[j] = nnc_vload(scale + j * NNC_VW);
  if (mr == NNC_GEMM_MR && nr == NNC_GEMM_NR) {
#pragma GCC unroll 32
    for (int i = 0; i < NNC_GEMM_MR; ++i) {
      float *ci = c + (ptrdiff_t)i * ldc;
#pragma GCC unroll 32
      for (int j = 0; j < NV; ++j) {
        nnc_vf v = nnc_vmul(acc[i][j], sv[j]);
        if (!first) v = nnc_vadd(nnc_vload(ci + j * NNC_VW), v);
        nnc_vstore(ci + j * NNC_VW, v);
      }
    }
    return;
  }
  /* an edge tile: the scaled sums spilled, the part inside C copied */
  _Alignas(NNC_SIMD_ALIGN) float tile[NNC_GEMM_MR * NNC_GEMM_NR];
  for (int i = 0; i < NNC_GEMM_MR; ++i)
    for (int j = 0; j < NV; ++j) nnc_vstore(tile + i * NNC_GEMM_NR + j * NNC_VW, nnc_vmul(acc[i][j], sv[j]));
  for (int i = 0; i < mr; ++i) {
    float *ci = c + (ptrdiff_t)i * ldc;
    const float *ti = tile + i * NNC_GEMM_NR;
    for (int j = 0; j < nr; ++j) ci[j] = first ? ti[j] : ci[j] + ti[j];
  }
}

void nnc_simd_q8_export(const void *q8, int b_trans, int N, int K, int8_t *values, float *scales) {
  const int8_t *q = q8;
  for (int n = 0; n < N; n++) {
    const int8_t *panel = q + (size_t)(n / NNC_GEMM_NR) * NNC_GEMM_NR * (size_t)K + n % NNC_GEMM_NR;
    for (int k = 0; k < K; k++)
      values[b_trans ? (size_t)n * (size_t)K + (size_t)k : (size_t)k * (size_t)N + (size_t)n] =
          panel[(size_t)k * NNC_GEMM_NR];
    scales[n] = nnc_gemm_q8_scales(q8, N, K)[n];
  }
}

void nnc_simd_q8_import(const int8_t *values, const float *scales, int b_trans, int N, int K, void *dst) {
  int8_t *q = dst;
  float *scale = (float *)(void *)((unsigned char *)dst + values_bytes(N, K));
  memset(q, 0, values_bytes(N, K));
  memset(scale, 0, panels(N) * NNC_GEMM_NR * sizeof *scale);
  for (int n = 0; n < N; n++) {
    int8_t *panel = q + (size_t)(n / NNC_GEMM_NR) * NNC_GEMM_NR * (size_t)K + n % NNC_GEMM_NR;
    for (int k = 0; k < K; k++)
      panel[(size_t)k * NNC_GEMM_NR] =
          values[b_trans ? (size_t)n * (size_t)K + (size_t)k : (size_t)k * (size_t)N + (size_t)n];
    scale[n] = scales[n];
  }
}
