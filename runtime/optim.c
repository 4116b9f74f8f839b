/* runtime/optim.c — the optimizer update of the training step: one fused
 * pass over a tensor's weights, gradient and state. */
#include <math.h>

#include "nnrt.h"

void nnrt_optim_update(const nnrt_optim *o, float *w, const float *g, float gscale, float *m, float *v, int64_t n,
                       int decay) {
  const float lr = o->lr, wd = decay ? o->weight_decay : 0.0f, b1 = o->beta1;
  if (o->sgd) {
    for (int64_t i = 0; i < n; i++) {
      m[i] = b1 * m[i] + g[i] * gscale;
      w[i] -= lr * (m[i] + wd * w[i]);
    }
    return;
  }
  const float b2 = o->beta2, eps = o->eps;
  /* bias corrections in double: 1 - b^t loses digits in float for large t */
  const double c1 = 1.0 - pow((double)b1, (double)o->step), c2 = 1.0 - pow((double)b2, (double)o->step);
  const float step = (float)(1.0 / c1), rc2 = (float)(1.0 / sqrt(c2));
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] * gscale;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] -= lr * (m[i] * step / (sqrtf(v[i]) * rc2 + eps) + wd * w[i]);
  }
}

double nnrt_sum_squares(const float *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}
