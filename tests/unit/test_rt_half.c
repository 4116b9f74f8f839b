/* tests/unit/test_rt_half.c — f16/bf16/e4m3 <-> f32 against hand-computed bits,
 * every f16 value round-tripped, and (where the compiler has _Float16) the
 * compiler's own conversion as an independent reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "nnrt.h"

static float f(uint32_t bits) {
  float x;
  memcpy(&x, &bits, 4);
  return x;
}

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static void test_f16_from_f32_hand(void **state) {
  assert_int_equal(nnrt_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(nnrt_f32_to_f16(-2.5f), 0xc100);
  assert_int_equal(nnrt_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(nnrt_f32_to_f16(65519.0f), 0x7bff);    /* below the tie: largest finite */
  assert_int_equal(nnrt_f32_to_f16(65520.0f), 0x7c00);    /* tie, even is inf */
  assert_int_equal(nnrt_f32_to_f16(-1e6f), 0xfc00);
  assert_int_equal(nnrt_f32_to_f16(0.0f), 0x0000);
  assert_int_equal(nnrt_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(nnrt_f32_to_f16(0.333251953125f), 0x3555);
  /* ties in the normal range: 1 + 2^-11 is half an f16 ulp above 1 */
  assert_int_equal(nnrt_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  assert_int_equal(nnrt_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_int_equal(nnrt_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  assert_int_equal(nnrt_f32_to_f16(2049.0f), 0x6800);
  assert_int_equal(nnrt_f32_to_f16(2051.0f), 0x6802);
  /* subnormals, in units of 2^-24 */
  assert_int_equal(nnrt_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(nnrt_f32_to_f16(-0x1p-24f), 0x8001);
  assert_int_equal(nnrt_f32_to_f16(0x1p-25f), 0x0000);    /* tie, even is 0 */
  assert_int_equal(nnrt_f32_to_f16(0x1.000002p-25f), 0x0001);
  assert_int_equal(nnrt_f32_to_f16(0x1.8p-26f), 0x0000);  /* 0.375 unit */
  assert_int_equal(nnrt_f32_to_f16(2.5f * 0x1p-24f), 0x0002);
  assert_int_equal(nnrt_f32_to_f16(3.5f * 0x1p-24f), 0x0004);
  assert_int_equal(nnrt_f32_to_f16(1023.0f * 0x1p-24f), 0x03ff);
  assert_int_equal(nnrt_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);  /* carries into the exponent */
  assert_int_equal(nnrt_f32_to_f16(0x1p-14f), 0x0400);
  assert_int_equal(nnrt_f32_to_f16(f(0x00000001)), 0x0000);       /* f32 subnormal */
  assert_int_equal(nnrt_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(nnrt_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(nnrt_f32_to_f16(f(0x7fc00000)), 0x7e00);
  assert_int_equal(nnrt_f32_to_f16(f(0xffc00000)), 0xfe00);
  /* a signalling NaN whose payload is all below f16's mantissa stays NaN */
  uint16_t h = nnrt_f32_to_f16(f(0x7f800001));
  assert_int_equal(h & 0x7c00, 0x7c00);
  assert_int_not_equal(h & 0x03ff, 0);
}

static void test_f16_to_f32_hand(void **state) {
  assert_true(nnrt_f16_to_f32(0x3c00) == 1.0f);
  assert_true(nnrt_f16_to_f32(0xc100) == -2.5f);
  assert_true(nnrt_f16_to_f32(0x7bff) == 65504.0f);
  assert_true(nnrt_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(nnrt_f16_to_f32(0x0002) == 0x1p-23f);
  assert_true(nnrt_f16_to_f32(0x03ff) == 1023.0f * 0x1p-24f);
  assert_true(nnrt_f16_to_f32(0x8001) == -0x1p-24f);
  assert_true(nnrt_f16_to_f32(0x0400) == 0x1p-14f);
  assert_true(nnrt_f16_to_f32(0x3555) == 0.333251953125f);
  assert_int_equal(bits(nnrt_f16_to_f32(0x0000)), 0x00000000);
  assert_int_equal(bits(nnrt_f16_to_f32(0x8000)), 0x80000000);
  assert_true(isinf(nnrt_f16_to_f32(0x7c00)) && nnrt_f16_to_f32(0x7c00) > 0);
  assert_true(isinf(nnrt_f16_to_f32(0xfc00)) && nnrt_f16_to_f32(0xfc00) < 0);
  assert_true(isnan(nnrt_f16_to_f32(0x7e00)));
  assert_true(isnan(nnrt_f16_to_f32(0x7c01)));
  assert_true(signbit(nnrt_f16_to_f32(0xfe00)));
}

/* Every f16 value widens exactly and narrows back to itself. */
static void test_f16_round_trip_all(void **state) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float x = nnrt_f16_to_f32((uint16_t)h);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff)) {
      assert_true(isnan(x));
      assert_true(nnrt_f32_to_f16(x) == (h | 0x0200));  /* quieted, sign and payload kept */
      continue;
    }
    assert_int_equal(nnrt_f32_to_f16(x), h);
  }
}

/* Each f32 half-way between two adjacent f16 values rounds to the even one;
 * a hair above it rounds up, a hair below down. */
static void test_f16_all_ties(void **state) {
  for (uint32_t h = 0; h < 0x7bff; h++) {
    float lo = nnrt_f16_to_f32((uint16_t)h), hi = nnrt_f16_to_f32((uint16_t)(h + 1));
    double mid = ((double)lo + (double)hi) / 2;  /* exact in f32: one more mantissa bit */
    float m = (float)mid;
    assert_true((double)m == mid);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    assert_int_equal(nnrt_f32_to_f16(m), even);
    assert_int_equal(nnrt_f32_to_f16(nextafterf(m, INFINITY)), h + 1);
    assert_int_equal(nnrt_f32_to_f16(nextafterf(m, 0.0f)), h);
    assert_int_equal(nnrt_f32_to_f16(-m), 0x8000 | even);
  }
}

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
/* The compiler's own conversion (correctly rounded) as a reference, over a
 * deterministic spread of f32 bit patterns. */
static void test_f16_matches_compiler(void **state) {
  uint32_t x = 12345;
  for (int i = 0; i < 2000000; i++) {
    x = x * 1664525u + 1013904223u;
    float v = f(x);
    if (isnan(v)) continue;
    __extension__ _Float16 r = (_Float16)v;
    uint16_t rb;
    memcpy(&rb, &r, 2);
    assert_int_equal(nnrt_f32_to_f16(v), rb);
  }
}
#else
static void test_f16_matches_compiler(void **state) { skip(); }
#endif

static void test_bf16_hand(void **state) {
  assert_int_equal(nnrt_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(nnrt_f32_to_bf16(-2.5f), 0xc020);
  assert_int_equal(nnrt_f32_to_bf16(65504.0f), 0x4780);  /* rounds up to 65536 */
  assert_int_equal(nnrt_f32_to_bf16(f(0x3f808000)), 0x3f80);  /* tie, even */
  assert_int_equal(nnrt_f32_to_bf16(f(0x3f818000)), 0x3f82);  /* tie, even */
  assert_int_equal(nnrt_f32_to_bf16(f(0x3f808001)), 0x3f81);
  assert_int_equal(nnrt_f32_to_bf16(f(0x3f807fff)), 0x3f80);
  assert_int_equal(nnrt_f32_to_bf16(f(0x7f7fffff)), 0x7f80);  /* max f32 overflows to inf */
  assert_int_equal(nnrt_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(nnrt_f32_to_bf16(-INFINITY), 0xff80);
  assert_int_equal(nnrt_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(nnrt_f32_to_bf16(f(0x00000001)), 0x0000);
  assert_int_equal(nnrt_f32_to_bf16(f(0x00008000)), 0x0000);  /* subnormal tie, even */
  assert_int_equal(nnrt_f32_to_bf16(f(0x00018000)), 0x0002);
  assert_int_equal(nnrt_f32_to_bf16(f(0x7fc00000)), 0x7fc0);
  assert_int_equal(nnrt_f32_to_bf16(f(0x7f800001)), 0x7fc0);  /* sNaN must not become inf */
  assert_int_equal(nnrt_f32_to_bf16(f(0xff800001)), 0xffc0);
  assert_true(nnrt_bf16_to_f32(0x3f80) == 1.0f);
  assert_true(nnrt_bf16_to_f32(0xc020) == -2.5f);
  assert_true(nnrt_bf16_to_f32(0x0001) == f(0x00010000));
  assert_true(isinf(nnrt_bf16_to_f32(0xff80)) && nnrt_bf16_to_f32(0xff80) < 0);
  assert_true(isnan(nnrt_bf16_to_f32(0x7fc1)));
  for (uint32_t h = 0; h < 0x10000; h++) {
    float x = nnrt_bf16_to_f32((uint16_t)h);
    if (isnan(x)) assert_true(nnrt_f32_to_bf16(x) == (h | 0x0040));
    else assert_int_equal(nnrt_f32_to_bf16(x), h);
  }
}

/* e4m3 (--precision=fp8): values worked out by hand from the format
 * (bias 7, 3 mantissa bits, 448 the largest, subnormals of 2^-9). */
static void test_e4m3_hand(void **state) {
  (void)state;
  assert_int_equal(nnrt_f32_to_e4m3(1.0f), 0x38);
  assert_int_equal(nnrt_f32_to_e4m3(-2.5f), 0xc2);        /* -1.25 * 2^1 */
  assert_int_equal(nnrt_f32_to_e4m3(0.1f), 0x1d);         /* 1.6 * 2^-4 -> 1.625 * 2^-4 */
  assert_int_equal(nnrt_f32_to_e4m3(240.0f), 0x77);       /* 1.875 * 2^7 */
  assert_int_equal(nnrt_f32_to_e4m3(448.0f), 0x7e);
  assert_int_equal(nnrt_f32_to_e4m3(464.0f), 0x7e);       /* saturates: 480 does not exist */
  assert_int_equal(nnrt_f32_to_e4m3(1e6f), 0x7e);
  assert_int_equal(nnrt_f32_to_e4m3(-1e6f), 0xfe);
  assert_int_equal(nnrt_f32_to_e4m3(INFINITY), 0x7e);
  assert_int_equal(nnrt_f32_to_e4m3(-INFINITY), 0xfe);
  assert_int_equal(nnrt_f32_to_e4m3(NAN), 0x7f);
  assert_int_equal(nnrt_f32_to_e4m3(f(0xffc00000)), 0xff);
  assert_int_equal(nnrt_f32_to_e4m3(f(0x7f800001)), 0x7f); /* a signalling NaN stays a NaN */
  assert_int_equal(nnrt_f32_to_e4m3(-0.0f), 0x80);
  assert_int_equal(nnrt_f32_to_e4m3(1.0625f), 0x38);      /* tie between 1 and 1.125: even */
  assert_int_equal(nnrt_f32_to_e4m3(1.1875f), 0x3a);      /* tie between 1.125 and 1.25: even */
  assert_int_equal(nnrt_f32_to_e4m3(f(0x3f880001)), 0x39); /* just above the tie */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(1, -6)), 0x08); /* the smallest normal */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(1, -9)), 0x01); /* the smallest subnormal */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(1, -10)), 0x00); /* half of it: tie, even */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(3, -11)), 0x01); /* 0.75 of a unit */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(3, -10)), 0x02); /* 1.5 units: tie, even */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(5, -10)), 0x02); /* 2.5 units: tie, even */
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(15, -10)), 0x08); /* 7.5 units: up into the normals */
  assert_int_equal(nnrt_f32_to_e4m3(-ldexpf(7, -9)), 0x87);
  assert_int_equal(nnrt_f32_to_e4m3(ldexpf(1, -11)), 0x00);
  assert_int_equal(nnrt_f32_to_e4m3(f(0x00000001)), 0x00); /* an f32 subnormal */
  assert_int_equal(nnrt_f32_to_e4m3(-ldexpf(1, -12)), 0x80);
  assert_true(nnrt_e4m3_to_f32(0x38) == 1.0f);
  assert_true(nnrt_e4m3_to_f32(0xc2) == -2.5f);
  assert_true(nnrt_e4m3_to_f32(0x7e) == 448.0f);
  assert_true(nnrt_e4m3_to_f32(0xfe) == -448.0f);
  assert_true(nnrt_e4m3_to_f32(0x01) == ldexpf(1, -9));
  assert_true(nnrt_e4m3_to_f32(0x07) == ldexpf(7, -9));
  assert_true(nnrt_e4m3_to_f32(0x08) == ldexpf(1, -6));
  assert_true(nnrt_e4m3_to_f32(0x80) == 0.0f && signbit(nnrt_e4m3_to_f32(0x80)));
  assert_true(isnan(nnrt_e4m3_to_f32(0x7f)) && isnan(nnrt_e4m3_to_f32(0xff)));
  /* every byte round-trips; every f32 between two neighbours rounds to one of them */
  for (int b = 0; b < 256; b++) {
    float v = nnrt_e4m3_to_f32((uint8_t)b);
    if ((b & 0x7f) == 0x7f) continue;
    assert_int_equal(nnrt_f32_to_e4m3(v), b);
    if ((b & 0x7f) < 0x7e) {
      float w = nnrt_e4m3_to_f32((uint8_t)(b + 1)), mid = (v + w) / 2;
      uint8_t lo = nnrt_f32_to_e4m3(nextafterf(mid, v)), hi = nnrt_f32_to_e4m3(nextafterf(mid, w));
      assert_int_equal(lo, b);
      assert_int_equal(hi, b + 1);
      assert_int_equal(nnrt_f32_to_e4m3(mid), (b & 1) ? b + 1 : b);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_f16_from_f32_hand), cmocka_unit_test(test_f16_to_f32_hand),
    cmocka_unit_test(test_f16_round_trip_all), cmocka_unit_test(test_f16_all_ties),
    cmocka_unit_test(test_f16_matches_compiler), cmocka_unit_test(test_bf16_hand),
    cmocka_unit_test(test_e4m3_hand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
