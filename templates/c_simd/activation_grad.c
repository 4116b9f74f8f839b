/* templates/c_simd/activation_grad.c — the backward of an activation over a
 * flat array: dx = dy * act'(x), with the vector forms of simd_math.h (one
 * exp per element for the sigmoid-based ones); the tail goes through a
 * padded vector so every element gets the same arithmetic. */
#include "internal.h"
#include "simd_math.h"

static const char *const KERNEL = "nnc_simd_activation_grad";

/* gelu(tanh)' = s + 2 x s (1 - s) c (1 + 3 a x^2) with s = sigmoid(2u),
 * u = c (x + a x^3): 0.5 (1 + tanh u) is s and 1 - tanh^2 u is 4 s (1 - s). */
static inline nnc_vf d_gelu_tanh(nnc_vf x) {
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
static inline nnc_vf d_gelu_erf(nnc_vf x) {
  x = nnc_vmin(nnc_vset1(20.0f), nnc_vmax(nnc_vset1(-20.0f), x));
  nnc_vf z = nnc_vmin(nnc_vset1(10.0f), nnc_vmul(nnc_vabs(x), nnc_vset1(0.7071067811865476f)));
  nnc_vf e = nnc_vmul(nnc_verfc_pos(z), nnc_vset1(0.5f));
  nnc_vf phi_cdf = nnc_vsel(nnc_vlt(x, nnc_vzero()), e, nnc_vsub(nnc_vset1(1.0f), e));
  nnc_vf pdf = nnc_vmul(nnc_vexp(nnc_vmul(nnc_vmul(x, x), nnc_vset1(-0.5f))), nnc_vset1(0.3989422804014327f));
  return nnc_vfma(x, pdf, phi_cdf);
}

static inline nnc_vf d_silu(nnc_vf x) {
  nnc_vf s = nnc_vsigmoid(nnc_vmax(nnc_vset1(-88.0f), x));
  return nnc_vmul(s, nnc_vfma(x, nnc_vsub(nnc_vset1(1.0f), s), nnc_vset1(1.0f)));
}

static inline nnc_vf d_sigmoid(nnc_vf x) {
  nnc_vf s = nnc_vsigmoid(x);
  return nnc_vmul(s, nnc_vsub(nnc_vset1(1.0f), s));
}

static inline nnc_vf d_tanh(nnc_vf x) {
  nnc_vf t = nnc_vtanh(x);
  return nnc_vsub(nnc_vset1(1.0f), nnc_vmul(t, t));
}

/* relu' is 1 above 0 and 0 elsewhere (0 at 0, as PyTorch). */
static inline nnc_vf d_relu(nnc_vf x) {
  return nnc_vsel(nnc_vlt(nnc_vzero(), x), nnc_vset1(1.0f), nnc_vzero());
}

static inline nnc_vf d_act(nnc_simd_act act, nnc_vf x) {
  switch (act) {
  case NNC_SIMD_ACT_RELU: return d_relu(x);
  case NNC_SIMD_ACT_GELU_ERF: return d_gelu_erf(x);
  case NNC_SIMD_ACT_GELU_TANH: return d_gelu_tanh(x);
  case NNC_SIMD_ACT_SILU: return d_silu(x);
  case NNC_SIMD_ACT_SIGMOID: return d_sigmoid(x);
  case NNC_SIMD_ACT_TANH: return d_tanh(x);
  default: return nnc_vset1(1.0f);
  }
}

typedef struct grad_job {
  nnc_simd_act act;
  size_t n, per_task;
  const float *x, *dy;
  float *dx;
} grad_job;

static void grad_span(nnc_simd_act act, const float *x, const float *dy, float *dx, size_t n) {
  size_t i = 0;
  switch (act) {
  /* One loop per activation so the switch is not inside it. */
#define NNC_GRAD_LOOP(fn)                                                                      \
  for (; i + NNC_VW <= n; i += NNC_VW) nnc_vstore(dx + i, nnc_vmul(nnc_vload(dy + i), fn(nnc_vload(x + i)))); \
  break;
  case NNC_SIMD_ACT_RELU: NNC_GRAD_LOOP(d_relu)
  case NNC_SIMD_ACT_GELU_ERF: NNC_GRAD_LOOP(d_gelu_erf)
  case NNC_SIMD_ACT_GELU_TANH: NNC_GRAD_LOOP(d_gelu_tanh)
  case NNC_SIMD_ACT_SILU: NNC_GRAD_LOOP(d_silu)
  case NNC_SIMD_ACT_SIGMOID: NNC_GRAD_LOOP(d_sigmoid)
  case NNC_SIMD_ACT_TANH: NNC_GRAD_LOOP(d_tanh)
#undef NNC_GRAD_LOOP
  default:
    if (dx != dy) memmove(dx, dy, n * sizeof(float));
    return;
  }
  if (i < n) {
    float bx[NNC_VW] = {0}, bdy[NNC_VW] = {0};
    memcpy(bx, x + i, (n - i) * sizeof(float));
    memcpy(bdy, dy + i, (n - i) * sizeof(float));
    nnc_vstore(bdy, nnc_vmul(nnc_vload(bdy), d_act(act, nnc_vload(bx))));
    memcpy(dx + i, bdy, (n - i) * sizeof(float));
  }
}

static void grad_task(void *ctx, int task, int thread) {
  const grad_job *jb = ctx;
  size_t i0 = (size_t)task * jb->per_task;
  size_t n = jb->n - i0 < jb->per_task ? jb->n - i0 : jb->per_task;
  grad_span(jb->act, jb->x + i0, jb->dy + i0, jb->dx + i0, n);
}

nnc_simd_status nnc_simd_activation_grad(nnc_simd_act act, size_t n, const float *x, const float *dy, float *dx,
                                         const nnc_simd_par *par, nnc_simd_error *err) {
  if ((unsigned)act >= NNC_SIMD_ACT_COUNT)
    return nnc_simd_fail(err, KERNEL, "unknown activation %d", (int)act);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (n == 0) return NNC_SIMD_OK;
  if (!x || !dy || !dx)
    return nnc_simd_fail(err, KERNEL, "expected x, dy and dx, found x=%p dy=%p dx=%p", (const void *)x,
                         (const void *)dy, (void *)dx);
  for (int k = 0; k < 2; k++) {
    const float *in = k ? dy : x;
    if (dx != in && nnc_simd_overlaps(in, n * sizeof(float), dx, n * sizeof(float)))
      return nnc_simd_fail(err, KERNEL, "expected dx equal to %s or apart from it, found them overlapping at an "
                           "offset of %td elements", k ? "dy" : "x", dx - in);
  }
  int threads = nnc_simd_threads(par);
  /* Tasks of at least 16K elements, a multiple of the vector width. */
  size_t per = nnc_simd_round_up((n + 4 * (size_t)threads - 1) / (4 * (size_t)threads), NNC_VW);
  if (per < 16384) per = 16384;
  grad_job jb = {act, n, per, x, dy, dx};
  size_t ntasks = (n + per - 1) / per;
  if (ntasks > 1 << 30) ntasks = 1 << 30;
  nnc_simd_run(par, (int)ntasks, grad_task, &jb);
  return NNC_SIMD_OK;
}
