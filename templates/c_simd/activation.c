/* templates/c_simd/activation.c — an activation over a flat array, with
 * the vector forms of simd_math.h; the tail goes through a padded vector so
 * every element gets the same arithmetic. */
#include "internal.h"
#include "simd_math.h"

static const char *const KERNEL = "nnc_simd_activation";

typedef struct act_job {
  nnc_simd_act act;
  size_t n, per_task;
  const float *x;
  float *y;
} act_job;

static void act_span(nnc_simd_act act, const float *x, float *y, size_t n) {
  size_t i = 0;
  switch (act) {
  /* One loop per activation so the switch is not inside it. */
#define NNC_ACT_LOOP(fn)                                                   \
  for (; i + NNC_VW <= n; i += NNC_VW) nnc_vstore(y + i, fn(nnc_vload(x + i))); \
  break;
  case NNC_SIMD_ACT_RELU: NNC_ACT_LOOP(nnc_vrelu)
  case NNC_SIMD_ACT_GELU_ERF: NNC_ACT_LOOP(nnc_vgelu_erf)
  case NNC_SIMD_ACT_GELU_TANH: NNC_ACT_LOOP(nnc_vgelu_tanh)
  case NNC_SIMD_ACT_SILU: NNC_ACT_LOOP(nnc_vsilu)
  case NNC_SIMD_ACT_SIGMOID: NNC_ACT_LOOP(nnc_vsigmoid)
  case NNC_SIMD_ACT_TANH: NNC_ACT_LOOP(nnc_vtanh)
#undef NNC_ACT_LOOP
  default:
    if (y != x) memmove(y, x, n * sizeof(float));
    return;
  }
  if (i < n) {
    float buf[NNC_VW] = {0};
    memcpy(buf, x + i, (n - i) * sizeof(float));
    nnc_vstore(buf, nnc_vact(act, nnc_vload(buf)));
    memcpy(y + i, buf, (n - i) * sizeof(float));
  }
}

static void act_task(void *ctx, int task, int thread) {
  const act_job *jb = ctx;
  size_t i0 = (size_t)task * jb->per_task;
  size_t n = jb->n - i0 < jb->per_task ? jb->n - i0 : jb->per_task;
  act_span(jb->act, jb->x + i0, jb->y + i0, n);
}

nnc_simd_status nnc_simd_activation(nnc_simd_act act, size_t n, const float *x, float *y,
                                    const nnc_simd_par *par, nnc_simd_error *err) {
  if ((unsigned)act >= NNC_SIMD_ACT_COUNT)
    return nnc_simd_fail(err, KERNEL, "unknown activation %d", (int)act);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (n == 0) return NNC_SIMD_OK;
  if (!x || !y)
    return nnc_simd_fail(err, KERNEL, "expected input and output, found x=%p y=%p",
                         (const void *)x, (void *)y);
  if (y != x && nnc_simd_overlaps(x, n * sizeof(float), y, n * sizeof(float)))
    return nnc_simd_fail(err, KERNEL, "expected y equal to x or apart from it, found them "
                         "overlapping at an offset of %td elements", y - x);
  int threads = nnc_simd_threads(par);
  /* Tasks of at least 32K elements, a multiple of the vector width. */
  size_t per = nnc_simd_round_up((n + 4 * (size_t)threads - 1) / (4 * (size_t)threads), NNC_VW);
  if (per < 32768) per = 32768;
  act_job jb = {act, n, per, x, y};
  size_t ntasks = (n + per - 1) / per;
  if (ntasks > 1 << 30) ntasks = 1 << 30;
  nnc_simd_run(par, (int)ntasks, act_task, &jb);
  return NNC_SIMD_OK;
}
