/* tests/unit/test_rt_arena.c — aligned memory, the activation arena, the
 * monotonic timer and status names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "nnrt.h"

static void test_aligned_alloc(void **state) {
  const size_t aligns[] = {1, 2, 8, 64, 4096};
  const size_t sizes[] = {0, 1, 7, 63, 1000};
  for (size_t i = 0; i < 5; i++)
    for (size_t j = 0; j < 5; j++) {
      void *p = NULL;
      assert_int_equal(nnrt_aligned_alloc(sizes[j], aligns[i], &p, NULL), NNRT_OK);
      assert_non_null(p);
      assert_int_equal((uintptr_t)p % aligns[i], 0);
      memset(p, 0xab, sizes[j]);
      nnrt_aligned_free(p);
    }
  nnrt_error err = {0};
  void *p = &err;
  assert_int_equal(nnrt_aligned_alloc(16, 48, &p, &err), NNRT_E_ARG);
  assert_null(p);
  assert_non_null(strstr(err.msg, "48"));
  assert_int_equal(nnrt_aligned_alloc(16, 0, &p, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_aligned_alloc(16, 64, NULL, &err), NNRT_E_ARG);
  nnrt_aligned_free(NULL);
}

static void test_arena_offsets(void **state) {
  nnrt_arena *a = NULL;
  nnrt_error err = {0};
  assert_int_equal(nnrt_arena_create(1000, 64, &a, &err), NNRT_OK);
  assert_int_equal(nnrt_arena_size(a), 1000);
  char *base = nnrt_arena_base(a);
  assert_int_equal((uintptr_t)base % 64, 0);
  memset(base, 0, 1000);
  void *p = NULL;
  assert_int_equal(nnrt_arena_at(a, 128, 872, &p, &err), NNRT_OK);
  assert_ptr_equal(p, base + 128);
  assert_int_equal(nnrt_arena_at(a, 0, 0, &p, &err), NNRT_OK);
  assert_int_equal(nnrt_arena_at(a, 128, 873, &p, &err), NNRT_E_SIZE);
  assert_null(p);
  assert_non_null(strstr(err.msg, "1000"));
  assert_int_equal(nnrt_arena_at(a, 1024, 0, &p, &err), NNRT_E_SIZE);
  assert_int_equal(nnrt_arena_at(a, 960, SIZE_MAX, &p, &err), NNRT_E_SIZE);
  assert_int_equal(nnrt_arena_at(a, 100, 4, &p, &err), NNRT_E_ARG);
  nnrt_arena_destroy(a);
}

static void test_arena_bump(void **state) {
  nnrt_arena *a = NULL;
  nnrt_error err = {0};
  assert_int_equal(nnrt_arena_create(200, 16, &a, &err), NNRT_OK);
  char *base = nnrt_arena_base(a);
  void *p1, *p2, *p3, *p4;
  assert_int_equal(nnrt_arena_alloc(a, 17, &p1, &err), NNRT_OK);
  assert_int_equal(nnrt_arena_alloc(a, 1, &p2, &err), NNRT_OK);
  assert_int_equal(nnrt_arena_alloc(a, 0, &p3, &err), NNRT_OK);
  assert_ptr_equal(p1, base);
  assert_ptr_equal(p2, base + 32);  /* 17 rounded to 32 */
  assert_ptr_equal(p3, base + 48);
  assert_int_equal(nnrt_arena_used(a), 48);
  assert_int_equal(nnrt_arena_alloc(a, 153, &p4, &err), NNRT_E_SIZE);
  assert_null(p4);
  assert_non_null(strstr(err.msg, "153"));
  assert_int_equal(nnrt_arena_alloc(a, 152, &p4, &err), NNRT_OK);  /* exactly the rest */
  assert_ptr_equal(p4, base + 48);
  assert_int_equal(nnrt_arena_used(a), 200);
  assert_int_equal(nnrt_arena_alloc(a, 1, &p4, &err), NNRT_E_SIZE);
  nnrt_arena_reset(a);
  assert_int_equal(nnrt_arena_used(a), 0);
  assert_int_equal(nnrt_arena_alloc(a, 200, &p4, &err), NNRT_OK);
  assert_ptr_equal(p4, base);
  nnrt_arena_destroy(a);

  /* an empty arena is valid; bad alignments are not */
  assert_int_equal(nnrt_arena_create(0, 64, &a, &err), NNRT_OK);
  assert_non_null(nnrt_arena_base(a));
  assert_int_equal(nnrt_arena_alloc(a, 1, &p1, &err), NNRT_E_SIZE);
  nnrt_arena_destroy(a);
  assert_int_equal(nnrt_arena_create(64, 3, &a, &err), NNRT_E_ARG);
  assert_null(a);
  assert_int_equal(nnrt_arena_alloc(NULL, 1, &p1, &err), NNRT_E_ARG);
  nnrt_arena_destroy(NULL);
}

static void test_timer_and_status(void **state) {
  uint64_t t0 = nnrt_now_ns(), t1 = t0;
  while (t1 == t0) t1 = nnrt_now_ns();
  assert_true(t1 > t0);
  assert_true(t0 > 0);
  assert_string_equal(nnrt_status_name(NNRT_OK), "ok");
  assert_string_equal(nnrt_status_name(NNRT_E_FORMAT), "bad weights file");
  assert_string_equal(nnrt_status_name((nnrt_status)99), "unknown status");
  nnrt_error err;
  assert_int_equal(nnrt_errorf(&err, NNRT_E_IO, "%s:%d", "f", 3), NNRT_E_IO);
  assert_int_equal(err.code, NNRT_E_IO);
  assert_string_equal(err.msg, "f:3");
  assert_int_equal(nnrt_errorf(NULL, NNRT_E_SIZE, "x"), NNRT_E_SIZE);
  char big[1000];
  memset(big, 'y', sizeof big - 1);
  big[sizeof big - 1] = 0;
  nnrt_errorf(&err, NNRT_E_ARG, "%s", big);
  assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
  for (int d = 0; d < NNRT_DTYPE_COUNT; d++) {
    nnrt_dtype back;
    assert_true(nnrt_dtype_parse(nnrt_dtype_name((nnrt_dtype)d), &back));
    assert_int_equal(back, d);
  }
  assert_int_equal(nnrt_dtype_size(NNRT_BF16), 2);
  assert_int_equal(nnrt_dtype_size(NNRT_I64), 8);
  assert_int_equal(nnrt_dtype_size((nnrt_dtype)99), 0);
  assert_false(nnrt_dtype_parse("f32", NULL));  /* header names are exact */
  assert_false(nnrt_dtype_parse(NULL, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_aligned_alloc),
    cmocka_unit_test(test_arena_offsets),
    cmocka_unit_test(test_arena_bump),
    cmocka_unit_test(test_timer_and_status),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
