/* tests/unit/test_rt_threadpool.c — every task runs exactly once, on a valid
 * thread index, for many task and thread counts; repeated loops; misuse is an
 * error value; destroy while idle. Run it under -fsanitize=thread as well. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt.h"

typedef struct counts {
  atomic_int *hits;   /* per task */
  atomic_int bad_thread;
  int nthreads;
  int64_t ntasks;
} counts;

static void count_task(void *ctx, int64_t task, int thread) {
  counts *c = ctx;
  if (task < 0 || task >= c->ntasks || thread < 0 || thread >= c->nthreads)
    atomic_fetch_add(&c->bad_thread, 1);
  else
    atomic_fetch_add(&c->hits[task], 1);
}

static void run_counts(nnrt_pool *pool, int nthreads, int64_t ntasks) {
  counts c = {.nthreads = nthreads, .ntasks = ntasks};
  c.hits = calloc(ntasks ? (size_t)ntasks : 1, sizeof *c.hits);
  assert_non_null(c.hits);
  atomic_init(&c.bad_thread, 0);
  for (int64_t i = 0; i < ntasks; i++) atomic_init(&c.hits[i], 0);
  nnrt_error err = {0};
  assert_int_equal(nnrt_pool_parallel_for(pool, ntasks, count_task, &c, &err), NNRT_OK);
  assert_int_equal(atomic_load(&c.bad_thread), 0);
  for (int64_t i = 0; i < ntasks; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
  free(c.hits);
}

static void test_every_task_once(void **state) {
  const int threads[] = {1, 2, 5};
  const int64_t tasks[] = {0, 1, 2, 7, 1000, 4099};
  for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
    nnrt_pool *pool = NULL;
    nnrt_error err = {0};
    assert_int_equal(nnrt_pool_create(threads[i], &pool, &err), NNRT_OK);
    assert_int_equal(nnrt_pool_threads(pool), threads[i]);
    for (int rep = 0; rep < 3; rep++)
      for (size_t j = 0; j < sizeof tasks / sizeof *tasks; j++)
        run_counts(pool, threads[i], tasks[j]);
    nnrt_pool_destroy(pool);
  }
}

/* Many short loops in a row: a worker late from one loop must never run a
 * task of the next one twice or miss it. */
static void test_many_repeated_loops(void **state) {
  nnrt_pool *pool = NULL;
  assert_int_equal(nnrt_pool_create(5, &pool, NULL), NNRT_OK);
  for (int rep = 0; rep < 2000; rep++) run_counts(pool, 5, 1 + rep % 13);
  nnrt_pool_destroy(pool);
}

/* A sum computed in parallel into per-task slots matches the serial one. */
static void square_task(void *ctx, int64_t task, int thread) {
  int64_t *out = ctx;
  out[task] = task * task;
}

static void test_results_visible_after_return(void **state) {
  enum { N = 777 };
  int64_t *out = calloc(N, sizeof *out);
  assert_non_null(out);
  nnrt_pool *pool = NULL;
  assert_int_equal(nnrt_pool_create(5, &pool, NULL), NNRT_OK);
  assert_int_equal(nnrt_pool_parallel_for(pool, N, square_task, out, NULL), NNRT_OK);
  int64_t sum = 0;
  for (int i = 0; i < N; i++) sum += out[i];
  assert_int_equal(sum, (int64_t)(N - 1) * N * (2 * N - 1) / 6);  /* sum of squares 0..N-1 */
  nnrt_pool_destroy(pool);
  free(out);
}

/* All workers take part when tasks block until everyone has arrived. */
typedef struct barrier_ctx {
  atomic_int arrived;
  int need;
  atomic_int seen[8];
} barrier_ctx;

static void barrier_task(void *ctx, int64_t task, int thread) {
  barrier_ctx *b = ctx;
  atomic_fetch_add(&b->seen[thread], 1);
  atomic_fetch_add(&b->arrived, 1);
  while (atomic_load(&b->arrived) < b->need) sched_yield();
}

static void test_threads_all_take_part(void **state) {
  nnrt_pool *pool = NULL;
  assert_int_equal(nnrt_pool_create(5, &pool, NULL), NNRT_OK);
  barrier_ctx b = {.need = 5};
  atomic_init(&b.arrived, 0);
  for (int i = 0; i < 8; i++) atomic_init(&b.seen[i], 0);
  /* 5 tasks that each wait for 5 arrivals can only finish on 5 threads. */
  assert_int_equal(nnrt_pool_parallel_for(pool, 5, barrier_task, &b, NULL), NNRT_OK);
  for (int t = 0; t < 5; t++) assert_int_equal(atomic_load(&b.seen[t]), 1);
  nnrt_pool_destroy(pool);
}

typedef struct reenter_ctx {
  nnrt_pool *pool;
  atomic_int state_errors;
} reenter_ctx;

static void noop_task(void *ctx, int64_t task, int thread) {}

static void reenter_task(void *ctx, int64_t task, int thread) {
  reenter_ctx *r = ctx;
  nnrt_error err = {0};
  if (nnrt_pool_parallel_for(r->pool, 3, noop_task, NULL, &err) == NNRT_E_STATE &&
      err.code == NNRT_E_STATE)
    atomic_fetch_add(&r->state_errors, 1);
}

static void test_reentry_is_state_error(void **state) {
  const int threads[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    reenter_ctx r;
    atomic_init(&r.state_errors, 0);
    assert_int_equal(nnrt_pool_create(threads[i], &r.pool, NULL), NNRT_OK);
    assert_int_equal(nnrt_pool_parallel_for(r.pool, 4, reenter_task, &r, NULL), NNRT_OK);
    assert_int_equal(atomic_load(&r.state_errors), 4);
    run_counts(r.pool, threads[i], 10);  /* still usable afterwards */
    nnrt_pool_destroy(r.pool);
  }
}

static void test_bad_arguments(void **state) {
  nnrt_error err = {0};
  nnrt_pool *pool = (nnrt_pool *)&err;
  assert_int_equal(nnrt_pool_create(-1, &pool, &err), NNRT_E_ARG);
  assert_null(pool);
  assert_non_null(strstr(err.msg, "-1"));
  assert_int_equal(nnrt_pool_create(NNRT_POOL_MAX_THREADS + 1, &pool, &err), NNRT_E_SIZE);
  assert_int_equal(nnrt_pool_create(2, NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_pool_create(2, &pool, &err), NNRT_OK);
  assert_int_equal(nnrt_pool_parallel_for(pool, 5, NULL, NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_pool_parallel_for(pool, -1, noop_task, NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_pool_parallel_for(pool, INT64_MAX, noop_task, NULL, &err), NNRT_E_SIZE);
  assert_int_equal(nnrt_pool_parallel_for(NULL, 5, noop_task, NULL, &err), NNRT_E_ARG);
  nnrt_pool_destroy(pool);
  nnrt_pool_destroy(NULL);
}

/* 0 threads means one per CPU: at least one, and it works. */
static void test_auto_thread_count(void **state) {
  nnrt_pool *pool = NULL;
  assert_int_equal(nnrt_pool_create(0, &pool, NULL), NNRT_OK);
  int n = nnrt_pool_threads(pool);
  assert_true(n >= 1 && n <= NNRT_POOL_MAX_THREADS);
  run_counts(pool, n, 101);
  nnrt_pool_destroy(pool);
}

/* Create and destroy with no loop ever run, many times: no hang, no leak. */
static void test_destroy_idle(void **state) {
  for (int i = 0; i < 50; i++) {
    nnrt_pool *pool = NULL;
    assert_int_equal(nnrt_pool_create(1 + i % 6, &pool, NULL), NNRT_OK);
    nnrt_pool_destroy(pool);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_task_once),
    cmocka_unit_test(test_many_repeated_loops),
    cmocka_unit_test(test_results_visible_after_return),
    cmocka_unit_test(test_threads_all_take_part),
    cmocka_unit_test(test_reentry_is_state_error),
    cmocka_unit_test(test_bad_arguments),
    cmocka_unit_test(test_auto_thread_count),
    cmocka_unit_test(test_destroy_idle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
