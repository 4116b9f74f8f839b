/* templates/c_simd/simd_math.h — vector exp and the activations built on it.
 *
 * Accuracy (float inputs, against float64): exp and sigmoid within a few
 * ulp; tanh within a few ulp (a polynomial near 0 where 1 - 2/(e^2x + 1)
 * would cancel); gelu(tanh) is rewritten as x * sigmoid(2u), which is exact
 * algebra and has no cancellation for negative x; gelu(erf) uses the
 * erfc(z) = t exp(-z^2 + P(t)) fit of Numerical Recipes (relative error
 * < 1.2e-7 for every z >= 0) and 1 + erf(-z) = erfc(z), so neither side
 * cancels. All keep NaN and give the limits at +-inf (where the true value
 * is below ~1e-37 they may return that tiny value instead of 0). */
#ifndef NNC_SIMD_MATH_H
#define NNC_SIMD_MATH_H

#include "nnc_simd.h"
#include "simd.h"

/* e^r for |r| <= ln2/2: Cephes expf's degree-7 polynomial. */
static inline nnc_vf nnc_vexp_poly(nnc_vf r) {
  nnc_vf p = nnc_vset1(1.9875691500e-4f);
  p = nnc_vfma(p, r, nnc_vset1(1.3981999507e-3f));
  p = nnc_vfma(p, r, nnc_vset1(8.3334519073e-3f));
  p = nnc_vfma(p, r, nnc_vset1(4.1665795894e-2f));
  p = nnc_vfma(p, r, nnc_vset1(1.6666665459e-1f));
  p = nnc_vfma(p, r, nnc_vset1(5.0000001201e-1f));
  return nnc_vfma(p, nnc_vmul(r, r), nnc_vadd(r, nnc_vset1(1.0f)));
}

/* e^(n ln2 + r) for |r| <= ln2/2 and n an integer in [-126, 127], 2^n
 * through the exponent field. */
static inline nnc_vf nnc_vexp_reduced(nnc_vf n, nnc_vf r) { return nnc_vmul(nnc_vexp_poly(r), nnc_vpow2i(n)); }

#define NNC_EXP_LO (-87.33654f)         /* below: 2^n leaves the normal range */
#define NNC_EXP_HI 88.3762626647949f    /* above: past the largest float */

/* e^x: x = n ln2 + r with ln2 split in two so that n*ln2 is exact. Below
 * NNC_EXP_LO gives 0; above NNC_EXP_HI the largest finite value. */
static inline nnc_vf nnc_vexp(nnc_vf x) {
  const nnc_vf lo = nnc_vset1(NNC_EXP_LO);
  nnc_vm under = nnc_vlt(x, lo);
  x = nnc_vmin(nnc_vset1(NNC_EXP_HI), x); /* NaN in x stays NaN */
  x = nnc_vmax(lo, x);
  nnc_vf n = nnc_vround(nnc_vmul(x, nnc_vset1(1.44269504088896341f)));
  nnc_vf r = nnc_vfma(n, nnc_vset1(-0.693359375f), x);
  r = nnc_vfma(n, nnc_vset1(2.12194440e-4f), r);
  return nnc_vsel(under, nnc_vzero(), nnc_vexp_reduced(n, r));
}

/* e^(a + b) for a + b <= 0, |b| much smaller than |a|: the reduction is
 * done on a (exactly) before b is added, so the rounding of a + b, which
 * for a near -80 is 4e-6 absolute, never reaches the result. */
static inline nnc_vf nnc_vexp_sum_neg(nnc_vf a, nnc_vf b) {
  nnc_vf s = nnc_vadd(a, b);
  nnc_vm under = nnc_vlt(s, nnc_vset1(NNC_EXP_LO));
  nnc_vf n = nnc_vround(nnc_vmul(nnc_vmax(nnc_vset1(NNC_EXP_LO), s),
                                 nnc_vset1(1.44269504088896341f)));
  nnc_vf r = nnc_vfma(n, nnc_vset1(-0.693359375f), a);
  r = nnc_vfma(n, nnc_vset1(2.12194440e-4f), r);
  r = nnc_vadd(r, b);
  return nnc_vsel(under, nnc_vzero(), nnc_vexp_reduced(n, r));
}

static inline nnc_vf nnc_vsigmoid(nnc_vf x) {
  const nnc_vf one = nnc_vset1(1.0f);
  return nnc_vdiv(one, nnc_vadd(one, nnc_vexp(nnc_vneg(x))));
}

/* The gates of a recurrent cell (the LSTM's, c_simd_scan.c), whose values
 * are added to and multiplied by values of order one, so an absolute error
 * within ~2e-7 will do where the activations above keep a relative one:
 * e^x with the range clamped to [-104, 89] (NaN kept) and 2^n by
 * nnc_vscale2n, which on AVX-512 saturates by itself (no compare and select
 * as in nnc_vexp); tanh as 2 sigmoid(2x) - 1, one exp and one division
 * (exact algebra; near 0 its error is absolute, not relative). On a Zen 5
 * VM the LSTM forecaster took ~9% less time with them. */
static inline nnc_vf nnc_vexp_gate(nnc_vf x) {
  x = nnc_vmax(nnc_vset1(-104.0f), nnc_vmin(nnc_vset1(89.0f), x));
  nnc_vf n = nnc_vround(nnc_vmul(x, nnc_vset1(1.44269504088896341f)));
  nnc_vf r = nnc_vfma(n, nnc_vset1(-0.693359375f), x);
  r = nnc_vfma(n, nnc_vset1(2.12194440e-4f), r);
  return nnc_vscale2n(nnc_vexp_poly(r), n);
}

static inline nnc_vf nnc_vsigmoid_gate(nnc_vf x) {
  const nnc_vf one = nnc_vset1(1.0f);
  return nnc_vdiv(one, nnc_vadd(one, nnc_vexp_gate(nnc_vneg(x))));
}

static inline nnc_vf nnc_vtanh_gate(nnc_vf x) {
  return nnc_vfma(nnc_vset1(2.0f), nnc_vsigmoid_gate(nnc_vadd(x, x)), nnc_vset1(-1.0f));
}

static inline nnc_vf nnc_vsilu(nnc_vf x) {
  /* Below -88 silu is under 1e-36: the clamp keeps -inf from giving
   * -inf / (1 + e^88). */
  x = nnc_vmax(nnc_vset1(-88.0f), x);
  return nnc_vdiv(x, nnc_vadd(nnc_vset1(1.0f), nnc_vexp(nnc_vneg(x))));
}

/* tanh: Cephes tanhf's odd polynomial for |x| < 0.625, else
 * 1 - 2 / (e^{2|x|} + 1) with the sign put back. */
static inline nnc_vf nnc_vtanh(nnc_vf x) {
  const nnc_vf one = nnc_vset1(1.0f);
  nnc_vf ax = nnc_vabs(x);
  nnc_vf z = nnc_vmul(x, x);
  nnc_vf p = nnc_vset1(-5.70498872745e-3f);
  p = nnc_vfma(p, z, nnc_vset1(2.06390887954e-2f));
  p = nnc_vfma(p, z, nnc_vset1(-5.37397155531e-2f));
  p = nnc_vfma(p, z, nnc_vset1(1.33314422036e-1f));
  p = nnc_vfma(p, z, nnc_vset1(-3.33332819422e-1f));
  nnc_vf small = nnc_vfma(nnc_vmul(p, z), x, x);
  nnc_vf e = nnc_vexp(nnc_vadd(ax, ax));
  nnc_vf big = nnc_vsub(one, nnc_vdiv(nnc_vset1(2.0f), nnc_vadd(e, one)));
  big = nnc_vsel(nnc_vlt(x, nnc_vzero()), nnc_vneg(big), big);
  return nnc_vsel(nnc_vlt(ax, nnc_vset1(0.625f)), small, big);
}

/* 0.5 x (1 + tanh(u)) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline nnc_vf nnc_vgelu_tanh(nnc_vf x) {
  x = nnc_vmax(nnc_vset1(-20.0f), x); /* gelu(-20) ~ -1e-37: -inf gives ~0 */
  nnc_vf x2 = nnc_vmul(x, x);
  nnc_vf u = nnc_vmul(x, nnc_vfma(x2, nnc_vset1(0.044715f * 0.7978845608028654f),
                                  nnc_vset1(0.7978845608028654f)));
  return nnc_vdiv(x, nnc_vadd(nnc_vset1(1.0f), nnc_vexp(nnc_vmul(u, nnc_vset1(-2.0f)))));
}

/* erfc(z) for z >= 0 (Numerical Recipes' erfcc, relative error < 1.2e-7). */
static inline nnc_vf nnc_verfc_pos(nnc_vf z) {
  const nnc_vf one = nnc_vset1(1.0f);
  nnc_vf t = nnc_vdiv(one, nnc_vfma(z, nnc_vset1(0.5f), one));
  nnc_vf p = nnc_vset1(0.17087277f);
  p = nnc_vfma(p, t, nnc_vset1(-0.82215223f));
  p = nnc_vfma(p, t, nnc_vset1(1.48851587f));
  p = nnc_vfma(p, t, nnc_vset1(-1.13520398f));
  p = nnc_vfma(p, t, nnc_vset1(0.27886807f));
  p = nnc_vfma(p, t, nnc_vset1(-0.18628806f));
  p = nnc_vfma(p, t, nnc_vset1(0.09678418f));
  p = nnc_vfma(p, t, nnc_vset1(0.37409196f));
  p = nnc_vfma(p, t, nnc_vset1(1.00002368f));
  p = nnc_vfma(p, t, nnc_vset1(-1.26551223f));
  /* -z^2 = -hi - lo exactly; lo joins the small part. */
  nnc_vf hi = nnc_vmul(z, z);
  nnc_vf lo = nnc_vfma(z, z, nnc_vneg(hi));
  return nnc_vmul(t, nnc_vexp_sum_neg(nnc_vneg(hi), nnc_vsub(p, lo)));
}

/* 0.5 x (1 + erf(x/sqrt2)): 0.5 x (2 - erfc(z)) for x >= 0 and
 * 0.5 x erfc(z) for x < 0, with z = |x| / sqrt 2. */
static inline nnc_vf nnc_vgelu_erf(nnc_vf x) {
  /* Past |z| = 10 erfc is 0 in float; the clamps keep inf out of z^2 and
   * -inf * 0 out of the product. */
  x = nnc_vmax(nnc_vset1(-20.0f), x);
  nnc_vf z = nnc_vmin(nnc_vset1(10.0f), nnc_vmul(nnc_vabs(x), nnc_vset1(0.7071067811865476f)));
  nnc_vf e = nnc_verfc_pos(z);
  nnc_vf f = nnc_vsel(nnc_vlt(x, nnc_vzero()), e, nnc_vsub(nnc_vset1(2.0f), e));
  return nnc_vmul(nnc_vmul(x, nnc_vset1(0.5f)), f);
}

static inline nnc_vf nnc_vrelu(nnc_vf x) {
  /* max(x, 0) with x second so that NaN stays NaN. */
  return nnc_vmax(nnc_vzero(), x);
}

static inline nnc_vf nnc_vact(nnc_simd_act act, nnc_vf x) {
  switch (act) {
  case NNC_SIMD_ACT_RELU: return nnc_vrelu(x);
  case NNC_SIMD_ACT_GELU_ERF: return nnc_vgelu_erf(x);
  case NNC_SIMD_ACT_GELU_TANH: return nnc_vgelu_tanh(x);
  case NNC_SIMD_ACT_SILU: return nnc_vsilu(x);
  case NNC_SIMD_ACT_SIGMOID: return nnc_vsigmoid(x);
  case NNC_SIMD_ACT_TANH: return nnc_vtanh(x);
  default: return x;
  }
}

/* gelu(tanh)' = s + 2 x s (1 - s) c (1 + 3 a x^2) with s = sigmoid(2u),
 * u = c (x + a x^3): 0.5 (1 + tanh u) is s and 1 - tanh^2 u is 4 s (1 - s). */
static inline nnc_vf nnc_vd_gelu_tanh(nnc_vf x) {
  const float c = 0.7978845608028654f, a = 0.044715f;
  x = nnc_vmax(nnc_vset1(-20.0f), x);
  nnc_vf x2 = nnc_vmul(x, x);
  nnc_vf u = nnc_vmul(x, nnc_vfma(x2, nnc_vset1(a * c), nnc_vset1(c)));
  nnc_vf s = nnc_vsigmoid(nnc_vadd(u, u));
  nnc_vf du = nnc_vfma(x2, nnc_vset1(3.0f * a * c), nnc_vset1(c));
  nnc_vf t = nnc_vmul(nnc_vmul(s, nnc_vsub(nnc_vset1(1.0f), s)), nnc_vmul(x, du));
  return nnc_vadd(s, nnc_vadd(t, t));
}

/* gelu(erf)' = Phi(x) + x phi(x): Phi from erfc as in nnc_vgelu_erf. */
static inline nnc_vf nnc_vd_gelu_erf(nnc_vf x) {
  x = nnc_vmin(nnc_vset1(20.0f), nnc_vmax(nnc_vset1(-20.0f), x));
  nnc_vf z = nnc_vmin(nnc_vset1(10.0f), nnc_vmul(nnc_vabs(x), nnc_vset1(0.7071067811865476f)));
  nnc_vf e = nnc_vmul(nnc_verfc_pos(z), nnc_vset1(0.5f));
  nnc_vf phi_cdf = nnc_vsel(nnc_vlt(x, nnc_vzero()), e, nnc_vsub(nnc_vset1(1.0f), e));
  nnc_vf pdf = nnc_vmul(nnc_vexp(nnc_vmul(nnc_vmul(x, x), nnc_vset1(-0.5f))), nnc_vset1(0.3989422804014327f));
  return nnc_vfma(x, pdf, phi_cdf);
}

static inline nnc_vf nnc_vd_silu(nnc_vf x) {
  nnc_vf s = nnc_vsigmoid(nnc_vmax(nnc_vset1(-88.0f), x));
  return nnc_vmul(s, nnc_vfma(x, nnc_vsub(nnc_vset1(1.0f), s), nnc_vset1(1.0f)));
}

static inline nnc_vf nnc_vd_sigmoid(nnc_vf x) {
  nnc_vf s = nnc_vsigmoid(x);
  return nnc_vmul(s, nnc_vsub(nnc_vset1(1.0f), s));
}

static inline nnc_vf nnc_vd_tanh(nnc_vf x) {
  nnc_vf t = nnc_vtanh(x);
  return nnc_vsub(nnc_vset1(1.0f), nnc_vmul(t, t));
}

/* relu' is 1 above 0 and 0 elsewhere (0 at 0, as PyTorch). */
static inline nnc_vf nnc_vd_relu(nnc_vf x) {
  return nnc_vsel(nnc_vlt(nnc_vzero(), x), nnc_vset1(1.0f), nnc_vzero());
}

/* act'(x), the derivative an activation's gradient multiplies by (the
 * backward's act_grad, and the GEMM epilogue that folds it) */
static inline nnc_vf nnc_vact_grad(nnc_simd_act act, nnc_vf x) {
  switch (act) {
  case NNC_SIMD_ACT_RELU: return nnc_vd_relu(x);
  case NNC_SIMD_ACT_GELU_ERF: return nnc_vd_gelu_erf(x);
  case NNC_SIMD_ACT_GELU_TANH: return nnc_vd_gelu_tanh(x);
  case NNC_SIMD_ACT_SILU: return nnc_vd_silu(x);
  case NNC_SIMD_ACT_SIGMOID: return nnc_vd_sigmoid(x);
  case NNC_SIMD_ACT_TANH: return nnc_vd_tanh(x);
  default: return nnc_vset1(1.0f);
  }
}

#endif
