/* templates/c_simd/activation_grad.c — the backward of an activation over a
 * flat array: dx = dy * act'(x), with the vector derivatives of simd_math.h
 * (one exp per element for the sigmoid-based ones); the tail goes through a
 * padded vector so every element gets the same arithmetic. */
#include "internal.h"
#include "simd_math.h"

static const char *const KERNEL = "nnc_simd_activation_grad";

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
  case NNC_SIMD_ACT_RELU: NNC_GRAD_LOOP(nnc_vd_relu)
  case NNC_SIMD_ACT_GELU_ERF: NNC_GRAD_LOOP(nnc_vd_gelu_erf)
  case NNC_SIMD_ACT_GELU_TANH: NNC_GRAD_LOOP(nnc_vd_gelu_tanh)
  case NNC_SIMD_ACT_SILU: NNC_GRAD_LOOP(nnc_vd_silu)
  case NNC_SIMD_ACT_SIGMOID: NNC_GRAD_LOOP(nnc_vd_sigmoid)
  case NNC_SIMD_ACT_TANH: NNC_GRAD_LOOP(nnc_vd_tanh)
#undef NNC_GRAD_LOOP
  default:
    if (dx != dy) memmove(dx, dy, n * sizeof(float));
    return;
  }
  if (i < n) {
    float bx[NNC_VW] = {0}, bdy[NNC_VW] = {0};
    memcpy(bx, x + i, (n - i) * sizeof(float));
    memcpy(bdy, dy + i, (n - i) * sizeof(float));
    nnc_vstore(bdy, nnc_vmul(nnc_vload(bdy), nnc_vact_grad(act, nnc_vload(bx))));
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
