/* tests/unit/test_rt_comm.c — the communicator's part that needs no engine:
 * the world of one, the launch variables, the rendezvous file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nnrt_comm.h"

/* ------------------------------------------------------------ world of 1 */

static void test_self_collectives(void **state) {
  nnrt_comm *c = NULL;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_self_create(&c, &e), NNRT_OK);
  assert_string_equal(c->ops->name, "self");
  assert_int_equal(c->rank, 0);
  assert_int_equal(c->world, 1);
  assert_int_equal(c->local_rank, 0);
  assert_true(c->timeout_s > 0);

  float a[5] = {1, -2, 3.5f, 4, 5}, b[5] = {0};
  assert_int_equal(nnrt_comm_all_reduce(c, a, b, 5, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e), NNRT_OK);
  assert_memory_equal(a, b, sizeof a);
  assert_int_equal(c->bytes, 20);
  assert_int_equal(nnrt_comm_all_reduce(c, a, a, 5, NNRT_F32, NNRT_REDUCE_MAX, NULL, &e), NNRT_OK);
  assert_true(a[2] == 3.5f);

  uint16_t h[3] = {nnrt_f32_to_bf16(1), nnrt_f32_to_bf16(2), nnrt_f32_to_bf16(3)}, g[3] = {0};
  assert_int_equal(nnrt_comm_all_gather(c, h, g, 3, NNRT_BF16, NULL, &e), NNRT_OK);
  assert_memory_equal(h, g, sizeof h);
  int32_t i[4] = {7, 8, 9, 10}, j[4] = {0};
  assert_int_equal(nnrt_comm_reduce_scatter(c, i, j, 4, NNRT_I32, NNRT_REDUCE_SUM, NULL, &e), NNRT_OK);
  assert_memory_equal(i, j, sizeof i);
  assert_int_equal(nnrt_comm_broadcast(c, i, 4, NNRT_I32, 0, NULL, &e), NNRT_OK);
  assert_int_equal(i[3], 10);
  assert_int_equal(nnrt_comm_barrier(c, &e), NNRT_OK);
  /* count 0 takes NULL buffers */
  assert_int_equal(nnrt_comm_all_reduce(c, NULL, NULL, 0, NNRT_F16, NNRT_REDUCE_SUM, NULL, &e), NNRT_OK);
  assert_int_equal(c->bytes, 20 + 20 + 6 + 16 + 16);
  nnrt_comm_destroy(c);
  nnrt_comm_destroy(NULL);
}

static void test_self_errors(void **state) {
  nnrt_comm *c = NULL;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_self_create(NULL, &e), NNRT_E_ARG);
  assert_int_equal(nnrt_comm_self_create(&c, &e), NNRT_OK);
  float a[2] = {0};
  assert_int_equal(nnrt_comm_broadcast(c, a, 2, NNRT_F32, 1, NULL, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "root"));
  assert_int_equal(nnrt_comm_all_reduce(c, a, a, 2, (nnrt_dtype)99, NNRT_REDUCE_SUM, NULL, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "dtype"));
  assert_int_equal(nnrt_comm_all_reduce(c, a, a, 2, NNRT_F32, (nnrt_reduce)5, NULL, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "sum or max"));
  assert_int_equal(nnrt_comm_all_gather(c, NULL, a, 2, NNRT_F32, NULL, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "NULL"));
  assert_int_equal(nnrt_comm_all_reduce(c, a, a, SIZE_MAX / 2, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e), NNRT_E_SIZE);
  assert_int_equal(c->bytes, 0);
  nnrt_comm_destroy(c);
}

/* -------------------------------------------------------------- launch */

static const char *const vars[] = {
  "NNC_RANK", "NNC_WORLD_SIZE", "NNC_LOCAL_RANK", "NNC_RENDEZVOUS", "NNC_COMM_TIMEOUT",
  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
  "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"};

static int clear_env(void **state) {
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  return 0;
}

static void test_launch_default(void **state) {
  nnrt_comm_launch l;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_OK);
  assert_int_equal(l.rank, 0);
  assert_int_equal(l.world, 1);
  assert_int_equal(l.local_rank, 0);
  assert_false(l.from_mpi);
  assert_string_equal(l.rendezvous, "");
  assert_true(l.timeout_s == 300);
  assert_int_equal(nnrt_comm_launch_read(NULL, &e), NNRT_E_ARG);
}

static void test_launch_nnc(void **state) {
  setenv("NNC_RANK", "3", 1);
  setenv("NNC_WORLD_SIZE", "8", 1);
  setenv("NNC_RENDEZVOUS", "/shared/job42.id", 1);
  setenv("NNC_COMM_TIMEOUT", "2.5", 1);
  /* nnc's own variables win over mpirun's */
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  nnrt_comm_launch l;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_OK);
  assert_int_equal(l.rank, 3);
  assert_int_equal(l.world, 8);
  assert_int_equal(l.local_rank, 3);  /* one machine when unsaid */
  assert_false(l.from_mpi);
  assert_string_equal(l.rendezvous, "/shared/job42.id");
  assert_true(l.timeout_s == 2.5);
  setenv("NNC_LOCAL_RANK", "1", 1);
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_OK);
  assert_int_equal(l.local_rank, 1);
}

static void test_launch_mpi(void **state) {
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  nnrt_comm_launch l;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_OK);
  assert_int_equal(l.rank, 1);
  assert_int_equal(l.world, 4);
  assert_int_equal(l.local_rank, 0);
  assert_true(l.from_mpi);
  clear_env(state);
  setenv("PMI_RANK", "2", 1);
  setenv("PMI_SIZE", "3", 1);
  setenv("MPI_LOCALRANKID", "2", 1);
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_OK);
  assert_int_equal(l.rank, 2);
  assert_int_equal(l.world, 3);
  assert_int_equal(l.local_rank, 2);
  assert_true(l.from_mpi);
}

/* Sets name=value (and the rest of a valid launch), expects NNRT_E_ARG with
 * each of the words in the message. */
static void expect_bad(const char *name, const char *value, const char *word1, const char *word2) {
  clear_env(NULL);
  setenv("NNC_RANK", "0", 1);
  setenv("NNC_WORLD_SIZE", "2", 1);
  setenv(name, value, 1);
  nnrt_comm_launch l;
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_launch_read(&l, &e);
  if (s != NNRT_E_ARG) fail_msg("%s=%s: expected NNRT_E_ARG, found %d", name, value, (int)s);
  if (!strstr(e.msg, word1) || !strstr(e.msg, word2)) fail_msg("%s=%s: message \"%s\"", name, value, e.msg);
}

static void test_launch_bad(void **state) {
  expect_bad("NNC_RANK", "abc", "NNC_RANK", "\"abc\"");
  expect_bad("NNC_RANK", "1x", "NNC_RANK", "\"1x\"");
  expect_bad("NNC_RANK", "", "NNC_RANK", "integer");
  expect_bad("NNC_RANK", "99999999999", "NNC_RANK", "99999999999");
  expect_bad("NNC_RANK", "2", "NNC_RANK=2", "outside 0..1");     /* the mismatched world */
  expect_bad("NNC_RANK", "-1", "NNC_RANK=-1", "outside");
  expect_bad("NNC_WORLD_SIZE", "0", "NNC_WORLD_SIZE", "at least 1");
  expect_bad("NNC_WORLD_SIZE", "two", "NNC_WORLD_SIZE", "\"two\"");
  expect_bad("NNC_LOCAL_RANK", "-3", "NNC_LOCAL_RANK", "-3");
  expect_bad("NNC_COMM_TIMEOUT", "soon", "NNC_COMM_TIMEOUT", "\"soon\"");
  expect_bad("NNC_COMM_TIMEOUT", "0", "NNC_COMM_TIMEOUT", "above 0");
  expect_bad("NNC_COMM_TIMEOUT", "-5", "NNC_COMM_TIMEOUT", "\"-5\"");
  expect_bad("NNC_COMM_TIMEOUT", "inf", "NNC_COMM_TIMEOUT", "\"inf\"");
  char longpath[600];
  memset(longpath, 'a', sizeof longpath - 1);
  longpath[sizeof longpath - 1] = '\0';
  expect_bad("NNC_RENDEZVOUS", longpath, "NNC_RENDEZVOUS", "512");

  /* one of the pair without the other */
  clear_env(NULL);
  setenv("NNC_WORLD_SIZE", "2", 1);
  nnrt_comm_launch l;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "NNC_WORLD_SIZE is set but NNC_RANK is not"));
  clear_env(NULL);
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "OMPI_COMM_WORLD_SIZE"));
  setenv("OMPI_COMM_WORLD_SIZE", "x", 1);
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "OMPI_COMM_WORLD_SIZE: expected an integer, found \"x\""));
}

/* ---------------------------------------------------------- rendezvous */

typedef struct later {
  const char *path;
  unsigned char data[128];
} later;

static void *write_later(void *arg) {
  later *w = arg;
  struct timespec ts = {0, 150 * 1000000L};
  nanosleep(&ts, NULL);
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_rendezvous_write(w->path, w->data, sizeof w->data, &e);
  return s == NNRT_OK ? arg : NULL;
}

static void temp_path(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/nnc_rt_comm_%ld_%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid(), name);
  remove(out);
}

static void test_rendezvous(void **state) {
  char path[256];
  temp_path(path, sizeof path, "id");
  later w = {path, {0}};
  for (size_t i = 0; i < sizeof w.data; i++) w.data[i] = (unsigned char)(i * 37 + 1);
  /* the reader starts first and waits for the writer */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, write_later, &w), 0);
  unsigned char got[128] = {0};
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_rendezvous_read(path, got, sizeof got, 1, 10, &e);
  void *ok = NULL;
  pthread_join(th, &ok);
  assert_non_null(ok);
  if (s != NNRT_OK) fail_msg("%s", e.msg);
  assert_memory_equal(got, w.data, sizeof got);
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1);  /* renamed, not left behind */

  /* a file of the wrong size */
  unsigned char small[64] = {0};
  assert_int_equal(nnrt_comm_rendezvous_read(path, small, sizeof small, 2, 1, &e), NNRT_E_COMM);
  assert_non_null(strstr(e.msg, "expected 64 bytes"));
  remove(path);

  assert_int_equal(nnrt_comm_rendezvous_write("/nonexistent_dir_nnc/x", got, 8, &e), NNRT_E_IO);
  assert_non_null(strstr(e.msg, "/nonexistent_dir_nnc/x.tmp"));
  assert_int_equal(nnrt_comm_rendezvous_write(NULL, got, 8, &e), NNRT_E_ARG);
}

static void test_rendezvous_timeout(void **state) {
  char path[256];
  temp_path(path, sizeof path, "never");
  /* the timeout a launch would give, from NNC_COMM_TIMEOUT */
  setenv("NNC_COMM_TIMEOUT", "0.3", 1);
  nnrt_comm_launch l;
  nnrt_error e = {0};
  assert_int_equal(nnrt_comm_launch_read(&l, &e), NNRT_OK);
  unsigned char got[16];
  uint64_t t0 = nnrt_now_ns();
  assert_int_equal(nnrt_comm_rendezvous_read(path, got, sizeof got, 3, l.timeout_s, &e), NNRT_E_COMM);
  double took = (double)(nnrt_now_ns() - t0) * 1e-9;
  assert_true(took >= 0.29 && took < 5);
  char want[400];
  snprintf(want, sizeof want, "rank 3: no rendezvous file %s after 0.3 s: did rank 0 start?", path);
  assert_string_equal(e.msg, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_self_collectives),
    cmocka_unit_test(test_self_errors),
    cmocka_unit_test_setup_teardown(test_launch_default, clear_env, clear_env),
    cmocka_unit_test_setup_teardown(test_launch_nnc, clear_env, clear_env),
    cmocka_unit_test_setup_teardown(test_launch_mpi, clear_env, clear_env),
    cmocka_unit_test_setup_teardown(test_launch_bad, clear_env, clear_env),
    cmocka_unit_test(test_rendezvous),
    cmocka_unit_test_setup_teardown(test_rendezvous_timeout, clear_env, clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
