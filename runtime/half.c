/* runtime/half.c — binary16 and bfloat16 to and from binary32, on the bits so
 * that the result does not depend on the FPU's rounding mode or flush-to-zero. */
#include <string.h>

#include "nnrt.h"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float nnrt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
  if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_f32(sign);
  /* A subnormal: shift the mantissa up to a normal f32 one. */
  uint32_t e = 113;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    e--;
  }
  return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t nnrt_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  uint32_t e = ax >> 23;
  uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  if (e >= 113) {
    /* Normal in f16: drop 13 bits; a carry into the exponent is right. */
    uint32_t h = ((e - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  /* Subnormal in f16 (units of 2^-24): value = mant * 2^(e - 150). Below
   * 2^-25 (shift > 24) it is under half a unit and rounds to zero. */
  if (e < 102) return sign;
  uint32_t shift = 126u - e;
  uint32_t q = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

float nnrt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t nnrt_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
  uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)((x + bias) >> 16);
}

/* e4m3 (OCP FP8, "e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits;
 * no infinities, S.1111.111 is NaN, so the largest finite is S.1111.110 =
 * 448. Subnormals (exponent field 0) are multiples of 2^-9. */
float nnrt_e4m3_to_f32(uint8_t b) {
  uint32_t sign = (uint32_t)(b & 0x80u) << 24;
  uint32_t exp = (b >> 3) & 0xfu, mant = b & 7u;
  if (exp == 0xf && mant == 7) return bits_f32(sign | 0x7fc00000u);
  if (exp != 0) return bits_f32(sign | ((exp + 120u) << 23) | (mant << 20));
  /* mant * 2^-9, exact in f32 */
  float v = (float)mant * (1.0f / 512.0f);
  return sign ? -v : v;
}

uint8_t nnrt_f32_to_e4m3(float f) {
  uint32_t x = f32_bits(f);
  uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  /* 448 and above (infinity too) saturate, as cvt's .satfinite does */
  if (ax >= 0x43e00000u) return (uint8_t)(sign | 0x7eu);
  int e = (int)(ax >> 23) - 127;
  uint32_t mant = ax & 0x7fffffu;
  if (e >= -6) {
    /* normal in e4m3: drop 20 bits; a carry into the exponent is right */
    uint32_t q = ((uint32_t)(e + 7) << 3) | (mant >> 20);
    uint32_t rem = mant & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) q++;
    return (uint8_t)(sign | (q > 0x7eu ? 0x7eu : q));
  }
  /* subnormal (units of 2^-9): value = (mant | 2^23) * 2^(e - 23); below
   * 2^-10 (half a unit) it rounds to zero */
  if (e < -10) return sign;
  uint32_t full = mant | 0x800000u, shift = (uint32_t)(14 - e);
  uint32_t q = full >> shift, rem = full & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint8_t)(sign | q);
}
