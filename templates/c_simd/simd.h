/* templates/c_simd/simd.h — the ISA layer every kernel is written against.
 *
 * One float vector type, nnc_vf, of NNC_VW lanes, and the handful of
 * operations the kernels need, as static inline functions. The ISA is picked
 * from the compiler's predefined macros (AVX-512F, AVX2 with FMA, NEON) or
 * forced to plain C with -DNNC_ISA_GENERIC; the generic path has one lane,
 * so every kernel's vector loop is also its scalar reference.
 *
 * Masks (nnc_vm) come from comparisons and are only consumed by nnc_vsel. */
#ifndef NNC_SIMD_H
#define NNC_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(NNC_ISA_GENERIC)
#define NNC_ISA_C 1
#elif defined(__AVX512F__)
#define NNC_ISA_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define NNC_ISA_AVX2 1
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define NNC_ISA_NEON 1
#else
#define NNC_ISA_C 1
#endif

/* ---------------------------------------------------------------- AVX-512 */
#if defined(NNC_ISA_AVX512)
#include <immintrin.h>
#define NNC_VW 16
#define NNC_ISA_NAME "avx512"
typedef __m512 nnc_vf;
typedef __mmask16 nnc_vm;
static inline nnc_vf nnc_vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void nnc_vstore(float *p, nnc_vf v) { _mm512_storeu_ps(p, v); }
static inline nnc_vf nnc_vset1(float x) { return _mm512_set1_ps(x); }
static inline nnc_vf nnc_vzero(void) { return _mm512_setzero_ps(); }
static inline nnc_vf nnc_vadd(nnc_vf a, nnc_vf b) { return _mm512_add_ps(a, b); }
static inline nnc_vf nnc_vsub(nnc_vf a, nnc_vf b) { return _mm512_sub_ps(a, b); }
static inline nnc_vf nnc_vmul(nnc_vf a, nnc_vf b) { return _mm512_mul_ps(a, b); }
static inline nnc_vf nnc_vdiv(nnc_vf a, nnc_vf b) { return _mm512_div_ps(a, b); }
static inline nnc_vf nnc_vfma(nnc_vf a, nnc_vf b, nnc_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline nnc_vf nnc_vmax(nnc_vf a, nnc_vf b) { return _mm512_max_ps(a, b); }
static inline nnc_vf nnc_vmin(nnc_vf a, nnc_vf b) { return _mm512_min_ps(a, b); }
static inline nnc_vf nnc_vabs(nnc_vf a) { return _mm512_abs_ps(a); }
static inline nnc_vf nnc_vround(nnc_vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n for n a float holding an integer in [-126, 127]. */
static inline nnc_vf nnc_vpow2i(nnc_vf n) {
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
/* p 2^n for n a float holding an integer: vscalefps underflows to 0 (through
 * subnormals) and overflows to inf itself. */
#define NNC_VSCALE2N_NATIVE 1
static inline nnc_vf nnc_vscale2n(nnc_vf p, nnc_vf n) { return _mm512_scalef_ps(p, n); }
static inline nnc_vm nnc_vlt(nnc_vf a, nnc_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline nnc_vf nnc_vsel(nnc_vm m, nnc_vf if_true, nnc_vf if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
/* Pooling's max: v where v > m or v is NaN, else m (a NaN in m stays; the last NaN wins). */
static inline nnc_vf nnc_vmax_nan(nnc_vf m, nnc_vf v) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), m, v);
}
static inline float nnc_vhsum(nnc_vf a) { return _mm512_reduce_add_ps(a); }
static inline float nnc_vhmax(nnc_vf a) { return _mm512_reduce_max_ps(a); }

/* ------------------------------------------------------------- AVX2 + FMA */
#elif defined(NNC_ISA_AVX2)
#include <immintrin.h>
#define NNC_VW 8
#define NNC_ISA_NAME "avx2"
typedef __m256 nnc_vf;
typedef __m256 nnc_vm;
static inline nnc_vf nnc_vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void nnc_vstore(float *p, nnc_vf v) { _mm256_storeu_ps(p, v); }
static inline nnc_vf nnc_vset1(float x) { return _mm256_set1_ps(x); }
static inline nnc_vf nnc_vzero(void) { return _mm256_setzero_ps(); }
static inline nnc_vf nnc_vadd(nnc_vf a, nnc_vf b) { return _mm256_add_ps(a, b); }
static inline nnc_vf nnc_vsub(nnc_vf a, nnc_vf b) { return _mm256_sub_ps(a, b); }
static inline nnc_vf nnc_vmul(nnc_vf a, nnc_vf b) { return _mm256_mul_ps(a, b); }
static inline nnc_vf nnc_vdiv(nnc_vf a, nnc_vf b) { return _mm256_div_ps(a, b); }
static inline nnc_vf nnc_vfma(nnc_vf a, nnc_vf b, nnc_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline nnc_vf nnc_vmax(nnc_vf a, nnc_vf b) { return _mm256_max_ps(a, b); }
static inline nnc_vf nnc_vmin(nnc_vf a, nnc_vf b) { return _mm256_min_ps(a, b); }
static inline nnc_vf nnc_vabs(nnc_vf a) {
  return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
static inline nnc_vf nnc_vround(nnc_vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline nnc_vf nnc_vpow2i(nnc_vf n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline nnc_vm nnc_vlt(nnc_vf a, nnc_vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline nnc_vf nnc_vsel(nnc_vm m, nnc_vf if_true, nnc_vf if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
static inline nnc_vf nnc_vmax_nan(nnc_vf m, nnc_vf v) {
  return _mm256_blendv_ps(m, v, _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
static inline float nnc_vhsum(nnc_vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline float nnc_vhmax(nnc_vf a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* ---------------------------------------------------------- NEON (AArch64) */
#elif defined(NNC_ISA_NEON)
#include <arm_neon.h>
#define NNC_VW 4
#define NNC_ISA_NAME "neon"
typedef float32x4_t nnc_vf;
typedef uint32x4_t nnc_vm;
static inline nnc_vf nnc_vload(const float *p) { return vld1q_f32(p); }
static inline void nnc_vstore(float *p, nnc_vf v) { vst1q_f32(p, v); }
static inline nnc_vf nnc_vset1(float x) { return vdupq_n_f32(x); }
static inline nnc_vf nnc_vzero(void) { return vdupq_n_f32(0.0f); }
static inline nnc_vf nnc_vadd(nnc_vf a, nnc_vf b) { return vaddq_f32(a, b); }
static inline nnc_vf nnc_vsub(nnc_vf a, nnc_vf b) { return vsubq_f32(a, b); }
static inline nnc_vf nnc_vmul(nnc_vf a, nnc_vf b) { return vmulq_f32(a, b); }
static inline nnc_vf nnc_vdiv(nnc_vf a, nnc_vf b) { return vdivq_f32(a, b); }
static inline nnc_vf nnc_vfma(nnc_vf a, nnc_vf b, nnc_vf c) { return vfmaq_f32(c, a, b); }
static inline nnc_vf nnc_vmax(nnc_vf a, nnc_vf b) { return vmaxq_f32(a, b); }
static inline nnc_vf nnc_vmin(nnc_vf a, nnc_vf b) { return vminq_f32(a, b); }
static inline nnc_vf nnc_vabs(nnc_vf a) { return vabsq_f32(a); }
static inline nnc_vf nnc_vround(nnc_vf a) { return vrndnq_f32(a); }
static inline nnc_vf nnc_vpow2i(nnc_vf n) {
  int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
  return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
static inline nnc_vm nnc_vlt(nnc_vf a, nnc_vf b) { return vcltq_f32(a, b); }
static inline nnc_vf nnc_vsel(nnc_vm m, nnc_vf if_true, nnc_vf if_false) { return vbslq_f32(m, if_true, if_false); }
static inline nnc_vf nnc_vmax_nan(nnc_vf m, nnc_vf v) {
  return vbslq_f32(vorrq_u32(vcgtq_f32(v, m), vmvnq_u32(vceqq_f32(v, v))), v, m);
}
static inline float nnc_vhsum(nnc_vf a) { return vaddvq_f32(a); }
static inline float nnc_vhmax(nnc_vf a) { return vmaxvq_f32(a); }

/* -------------------------------------------------------------- generic C */
#else
#define NNC_VW 1
#define NNC_ISA_NAME "generic"
typedef float nnc_vf;
typedef int nnc_vm;
static inline nnc_vf nnc_vload(const float *p) { return *p; }
static inline void nnc_vstore(float *p, nnc_vf v) { *p = v; }
static inline nnc_vf nnc_vset1(float x) { return x; }
static inline nnc_vf nnc_vzero(void) { return 0.0f; }
static inline nnc_vf nnc_vadd(nnc_vf a, nnc_vf b) { return a + b; }
static inline nnc_vf nnc_vsub(nnc_vf a, nnc_vf b) { return a - b; }
static inline nnc_vf nnc_vmul(nnc_vf a, nnc_vf b) { return a * b; }
static inline nnc_vf nnc_vdiv(nnc_vf a, nnc_vf b) { return a / b; }
static inline nnc_vf nnc_vfma(nnc_vf a, nnc_vf b, nnc_vf c) { return fmaf(a, b, c); }
/* Like the x86 max/min: the second operand when either is NaN. */
static inline nnc_vf nnc_vmax(nnc_vf a, nnc_vf b) { return a > b ? a : b; }
static inline nnc_vf nnc_vmin(nnc_vf a, nnc_vf b) { return a < b ? a : b; }
static inline nnc_vf nnc_vabs(nnc_vf a) { return fabsf(a); }
static inline nnc_vf nnc_vround(nnc_vf a) { return nearbyintf(a); }
static inline nnc_vf nnc_vpow2i(nnc_vf n) {
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float r;
  memcpy(&r, &bits, sizeof r);
  return r;
}
static inline nnc_vm nnc_vlt(nnc_vf a, nnc_vf b) { return a < b; }
static inline nnc_vf nnc_vsel(nnc_vm m, nnc_vf if_true, nnc_vf if_false) { return m ? if_true : if_false; }
static inline nnc_vf nnc_vmax_nan(nnc_vf m, nnc_vf v) { return v > m || v != v ? v : m; }
static inline float nnc_vhsum(nnc_vf a) { return a; }
static inline float nnc_vhmax(nnc_vf a) { return a; }
#endif

static inline nnc_vf nnc_vneg(nnc_vf a) { return nnc_vsub(nnc_vzero(), a); }

#ifndef NNC_VSCALE2N_NATIVE
/* p 2^n for n a float holding an integer, n clamped to the normal range
 * [-126, 127]: past it the result stays finite and tiny or huge. */
static inline nnc_vf nnc_vscale2n(nnc_vf p, nnc_vf n) {
  return nnc_vmul(p, nnc_vpow2i(nnc_vmax(nnc_vset1(-126.0f), nnc_vmin(nnc_vset1(127.0f), n))));
}
#endif

/* Alignment of packed buffers: a cache line, enough for every ISA above. */
#define NNC_SIMD_ALIGN 64

#endif
