/* tests/unit/test_rt_train.c — runtime/train.c: the learning-rate schedule
 * against values computed by hand, the weight-decay name patterns, and a
 * checkpoint written, read back bit for bit, and refused when it lies. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nnrt.h"

static void test_schedule(void **state) {
  (void)state;
  nnrt_lr_schedule s = {.lr = 1.0f, .warmup = 4, .decay = 10, .min_ratio = 0.1f};
  assert_float_equal(nnrt_lr_at(&s, 1), 0.25f, 1e-7);
  assert_float_equal(nnrt_lr_at(&s, 4), 1.0f, 1e-7);
  /* halfway through the decay: 0.1 + 0.9 * 0.5 * (1 + cos(pi / 2)) = 0.55 */
  assert_float_equal(nnrt_lr_at(&s, 9), 0.55f, 1e-6);
  assert_float_equal(nnrt_lr_at(&s, 14), 0.1f, 1e-6);
  assert_float_equal(nnrt_lr_at(&s, 1000), 0.1f, 1e-6);
  nnrt_lr_schedule c = {.lr = 3e-4f};
  assert_float_equal(nnrt_lr_at(&c, 1), 3e-4f, 0);
  assert_float_equal(nnrt_lr_at(&c, 99), 3e-4f, 0);
}

static void test_patterns(void **state) {
  (void)state;
  assert_true(nnrt_name_matches("*.bias, ln_*", "h.0.attn.c_attn.bias"));
  assert_true(nnrt_name_matches("*.bias, ln_*", "ln_f.weight"));
  assert_false(nnrt_name_matches("*.bias, ln_*", "h.0.ln_1.weight"));
  assert_true(nnrt_name_matches("*ln_*", "h.0.ln_1.weight"));
  assert_true(nnrt_name_matches("wte", "wte"));
  assert_false(nnrt_name_matches("wte", "wtex"));
  assert_false(nnrt_name_matches("", "wte"));
  assert_false(nnrt_name_matches(NULL, "wte"));
  assert_true(nnrt_name_matches("a*b*c", "aXXbYYc"));
  assert_false(nnrt_name_matches("a*b*c", "aXXbYY"));
}

static void test_checkpoint(void **state) {
  (void)state;
  char path[] = "/tmp/nnc_ckpt_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  const nnrt_st_desc man[2] = {{"w", NNRT_F32, 2, {2, 3}}, {"b", NNRT_F32, 1, {3}}};
  float w0[6] = {1, 2, 3, 4, 5, 6}, w1[3] = {-1, 0.5f, 1e-30f};
  float m0[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, m1[3] = {7, 8, 9};
  float v0[6] = {1e-9f, 2, 3, 4, 5, 6}, v1[3] = {3, 2, 1};
  void *w[2] = {w0, w1};
  float *mom[2] = {m0, m1}, *vel[2] = {v0, v1};
  nnrt_ckpt c = {2, man, w, mom, vel, 41, {0, 0, 0}};
  nnrt_error err = {0};
  assert_int_equal(nnrt_ckpt_save(path, &c, &err), NNRT_OK);

  nnrt_st *st;
  assert_int_equal(nnrt_st_open(path, &st, &err), NNRT_OK);
  float rm0[6], rm1[3], rv0[6], rv1[3];
  float *rmom[2] = {rm0, rm1}, *rvel[2] = {rv0, rv1};
  nnrt_ckpt r = {2, man, w, rmom, rvel, 0, {0, 0, 0}};
  int64_t step = -1;
  assert_int_equal(nnrt_ckpt_load_state(st, path, &r, &step, &err), NNRT_OK);
  assert_int_equal(step, 41);
  assert_memory_equal(rm0, m0, sizeof m0);
  assert_memory_equal(rm1, m1, sizeof m1);
  assert_memory_equal(rv0, v0, sizeof v0);
  assert_memory_equal(rv1, v1, sizeof v1);
  /* the weights under their own names, as any weights file */
  const nnrt_st_tensor *t;
  assert_int_equal(nnrt_st_find(st, "b", &t, &err), NNRT_OK);
  assert_memory_equal(t->data, w1, sizeof w1);
  /* no loss scale saved: zeros */
  nnrt_scale_state sc = {5, 5, 5};
  assert_int_equal(nnrt_ckpt_load_scale(st, path, &sc, &err), NNRT_OK);
  assert_true(sc.scale == 0 && sc.good == 0 && sc.skipped == 0);
  nnrt_st_close(st);

  /* the loss scaling's state comes back as saved */
  c.scale = (nnrt_scale_state){1024, 7, 3};
  assert_int_equal(nnrt_ckpt_save(path, &c, &err), NNRT_OK);
  assert_int_equal(nnrt_st_open(path, &st, &err), NNRT_OK);
  assert_int_equal(nnrt_ckpt_load_state(st, path, &r, &step, &err), NNRT_OK);
  assert_int_equal(step, 41);
  assert_int_equal(nnrt_ckpt_load_scale(st, path, &sc, &err), NNRT_OK);
  assert_true(sc.scale == 1024 && sc.good == 7 && sc.skipped == 3);
  nnrt_st_close(st);
  c.scale = (nnrt_scale_state){0, 0, 0};

  /* weights alone: a fresh optimizer */
  const void *data[2] = {w0, w1};
  assert_int_equal(nnrt_st_write(path, 2, man, data, &err), NNRT_OK);
  assert_int_equal(nnrt_st_open(path, &st, &err), NNRT_OK);
  assert_int_equal(nnrt_ckpt_load_state(st, path, &r, &step, &err), NNRT_OK);
  assert_int_equal(step, 0);
  assert_float_equal(rm1[2], 0, 0);
  nnrt_st_close(st);

  /* a state tensor of the wrong size names itself */
  const nnrt_st_desc bad[5] = {{"w", NNRT_F32, 2, {2, 3}}, {"b", NNRT_F32, 1, {3}}, {"optim.step", NNRT_I64, 1, {1}},
                               {"optim.m.w", NNRT_F32, 1, {6}}, {"optim.v.w", NNRT_F32, 1, {5}}};
  int64_t one = 1;
  const void *bdata[5] = {w0, w1, &one, m0, v0};
  assert_int_equal(nnrt_st_write(path, 5, bad, bdata, &err), NNRT_OK);
  assert_int_equal(nnrt_st_open(path, &st, &err), NNRT_OK);
  assert_int_equal(nnrt_ckpt_load_state(st, path, &r, &step, &err), NNRT_E_FORMAT);
  assert_non_null(strstr(err.msg, "optim.v.w: expected F32 with 6 values"));
  nnrt_st_close(st);
  /* a loss scale without its counts, or not > 0 */
  float bad_scale = -1;
  const nnrt_st_desc lone[1] = {{"optim.loss_scale", NNRT_F32, 1, {1}}};
  const void *ldata[1] = {&bad_scale};
  assert_int_equal(nnrt_st_write(path, 1, lone, ldata, &err), NNRT_OK);
  assert_int_equal(nnrt_st_open(path, &st, &err), NNRT_OK);
  nnrt_scale_state sc2;
  assert_int_equal(nnrt_ckpt_load_scale(st, path, &sc2, &err), NNRT_E_FORMAT);
  assert_non_null(strstr(err.msg, "optim.scale_counts I64 [2]"));
  nnrt_st_close(st);
  /* a failed save (no such folder) leaves nothing behind */
  assert_int_not_equal(nnrt_ckpt_save("/nonexistent_dir/ckpt.safetensors", &c, &err), NNRT_OK);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_patterns),
      cmocka_unit_test(test_checkpoint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
