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
