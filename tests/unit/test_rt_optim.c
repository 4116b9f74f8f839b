/* tests/unit/test_rt_optim.c — the optimizer update (runtime/optim.c) against
 * the formulas computed here in double, over two steps (bias correction). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "nnrt.h"

#define N 5

static void test_adamw(void **state) {
  (void)state;
  float w[N] = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f}, m[N] = {0}, v[N] = {0};
  const float g[N] = {0.1f, -0.2f, 0.0f, 1.0f, -3.0f};
  double rw[N], rm[N] = {0}, rv[N] = {0};
  for (int i = 0; i < N; i++) rw[i] = w[i];
  nnrt_optim o = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  for (int t = 1; t <= 2; t++) {
    o.step = t;
    nnrt_optim_update(&o, w, g, 0.5f, m, v, N, 1);
    for (int i = 0; i < N; i++) {
      double gi = 0.5 * g[i];
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      double mh = rm[i] / (1 - pow(0.9, t)), vh = rv[i] / (1 - pow(0.95, t));
      rw[i] -= 0.01 * (mh / (sqrt(vh) + 1e-8) + 0.1 * rw[i]);
    }
  }
  for (int i = 0; i < N; i++) assert_true(fabs(w[i] - rw[i]) < 1e-6);
}

static void test_sgd_no_decay(void **state) {
  (void)state;
  float w[N] = {1, 2, 3, 4, 5}, m[N] = {0};
  const float g[N] = {1, -1, 0.5f, 0, 2};
  nnrt_optim o = {.sgd = 1, .lr = 0.1f, .beta1 = 0.5f, .weight_decay = 0.3f, .step = 1};
  nnrt_optim_update(&o, w, g, 1.0f, m, NULL, N, 0);
  nnrt_optim_update(&o, w, g, 1.0f, m, NULL, N, 0);
  /* m after two steps: g + 0.5 g = 1.5 g; w = w0 - 0.1 (g + 1.5 g) */
  const float w0[N] = {1, 2, 3, 4, 5};
  for (int i = 0; i < N; i++) assert_true(fabsf(w[i] - (w0[i] - 0.1f * 2.5f * g[i])) < 1e-6f);
  assert_true(fabs(nnrt_sum_squares(g, N) - (1 + 1 + 0.25 + 0 + 4)) < 1e-12);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_adamw), cmocka_unit_test(test_sgd_no_decay)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
