/* tests/unit/test_rt_comm_mpi.c — the MPI communicator, run under mpirun
 * (tests/meson.build: np 1, 2 and 4). Not cmocka: every rank runs the same
 * checks and the program's exit status is the test's.
 *
 *   test_rt_comm_mpi           every collective and dtype, counts 0, 1, 3,
 *                              1031 and 2^20 + 3, in and out of place,
 *                              against values each rank computes alone
 *   test_rt_comm_mpi timeout   rank 1 sleeps past NNC_COMM_TIMEOUT before an
 *                              all_reduce: rank 0 must fail in time, with a
 *                              message ("PASS timeout" on success)
 *   test_rt_comm_mpi exit      rank 1 exits before the all_reduce (mpirun
 *                              ends the job: rt_comm_mpi_fault.sh checks it
 *                              does so promptly)
 *   test_rt_comm_mpi world     NNC_RANK/NNC_WORLD_SIZE disagreeing with
 *                              mpirun: every rank gets a clear error */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnrt_comm.h"

static int failures;
static int my_rank;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      failures++;                                            \
      if (failures <= 20) {                                  \
        fprintf(stderr, "rank %d: FAIL %s:%d: ", my_rank, __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                        \
        fputc('\n', stderr);                                 \
      }                                                      \
    }                                                        \
  } while (0)

/* ------------------------------------------------ values and their types */

/* What rank r holds at element i: small integers, exact in every dtype and
 * in every sum of four of them, whatever order MPI adds them in. */
static double value(nnrt_dtype t, int r, size_t i) {
  if (t == NNRT_I32) return (double)((long)((i * 7919 + (size_t)r * 104729) % 1000003) - 500001);
  return (double)((long)((i * 7 + (size_t)r * 3) % 13) - 6);
}

static double get(nnrt_dtype t, const void *p, size_t i) {
  switch (t) {
  case NNRT_F32: return ((const float *)p)[i];
  case NNRT_I32: return ((const int32_t *)p)[i];
  case NNRT_F16: return nnrt_f16_to_f32(((const uint16_t *)p)[i]);
  default: return nnrt_bf16_to_f32(((const uint16_t *)p)[i]);
  }
}

static void put(nnrt_dtype t, void *p, size_t i, double v) {
  switch (t) {
  case NNRT_F32: ((float *)p)[i] = (float)v; break;
  case NNRT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case NNRT_F16: ((uint16_t *)p)[i] = nnrt_f32_to_f16((float)v); break;
  default: ((uint16_t *)p)[i] = nnrt_f32_to_bf16((float)v); break;
  }
}

static double reduce(nnrt_dtype t, nnrt_reduce op, int world, size_t i) {
  double acc = value(t, 0, i);
  for (int r = 1; r < world; r++) {
    double v = value(t, r, i);
    acc = op == NNRT_REDUCE_SUM ? acc + v : (v > acc ? v : acc);
  }
  return acc;
}

/* 0x7F bytes: a NaN or a huge value in every dtype, never an expected one */
static void poison(void *p, size_t bytes) { memset(p, 0x7F, bytes); }

/* First mismatch of buf[0..n) against want(i), reported once. */
#define EXPECT_ALL(what, buf, n, t, want)                                                   \
  do {                                                                                      \
    for (size_t i_ = 0; i_ < (n); i_++) {                                                   \
      size_t i = i_;                                                                        \
      double w_ = (want), g_ = get(t, buf, i_);                                             \
      if (g_ != w_) {                                                                       \
        CHECK(0, "%s: element %zu of %zu: expected %g, found %g", what, i_, (size_t)(n), w_, g_); \
        break;                                                                              \
      }                                                                                     \
    }                                                                                       \
  } while (0)

/* ------------------------------------------------------- the collectives */

static void check_status(nnrt_status s, const nnrt_error *e, const char *what) {
  CHECK(s == NNRT_OK, "%s: %s: %s", what, nnrt_status_name(s), e->msg);
}

static void all_reduce(nnrt_comm *c, nnrt_dtype t, nnrt_reduce op, size_t n, bool in_place) {
  size_t sz = nnrt_dtype_size(t);
  char what[128];
  snprintf(what, sizeof what, "all_reduce %s %s n=%zu%s", nnrt_reduce_name(op), nnrt_dtype_name(t), n,
           in_place ? " in place" : "");
  char *send = malloc(n * sz + 1), *recv = in_place ? send : malloc(n * sz + 1);
  for (size_t i = 0; i < n; i++) put(t, send, i, value(t, c->rank, i));
  if (!in_place) poison(recv, n * sz);
  nnrt_error e = {0};
  uint64_t before = c->bytes;
  double bus = c->bus_bytes, w = c->world;
  check_status(nnrt_comm_all_reduce(c, send, recv, n, t, op, NULL, &e), &e, what);
  CHECK(c->bytes - before == n * sz, "%s: bytes counted %llu, expected %zu", what,
        (unsigned long long)(c->bytes - before), n * sz);
  /* nccl-tests' bus traffic: 2 (n - 1) / n of the payload */
  CHECK(c->bus_bytes - bus == (double)(n * sz) * 2 * (w - 1) / w, "%s: bus bytes %g, expected %g", what,
        c->bus_bytes - bus, (double)(n * sz) * 2 * (w - 1) / w);
  EXPECT_ALL(what, recv, n, t, reduce(t, op, c->world, i));
  if (!in_place) EXPECT_ALL(what, send, n, t, value(t, c->rank, i));  /* send is left alone */
  free(send);
  if (!in_place) free(recv);
}

static void all_gather(nnrt_comm *c, nnrt_dtype t, size_t n, bool in_place) {
  size_t sz = nnrt_dtype_size(t), w = (size_t)c->world;
  char what[128];
  snprintf(what, sizeof what, "all_gather %s n=%zu%s", nnrt_dtype_name(t), n, in_place ? " in place" : "");
  char *recv = malloc(w * n * sz + 1), *send = in_place ? recv + (size_t)c->rank * n * sz : malloc(n * sz + 1);
  poison(recv, w * n * sz);
  for (size_t i = 0; i < n; i++) put(t, send, i, value(t, c->rank, i));
  nnrt_error e = {0};
  uint64_t before = c->bytes;
  double bus = c->bus_bytes;
  check_status(nnrt_comm_all_gather(c, send, recv, n, t, NULL, &e), &e, what);
  CHECK(c->bytes - before == n * sz, "%s: bytes counted wrong", what);
  CHECK(c->bus_bytes - bus == (double)(n * sz) * (double)(w - 1), "%s: bus bytes counted wrong", what);
  EXPECT_ALL(what, recv, w * n, t, value(t, (int)(i / n), i % n));
  free(recv);
  if (!in_place) free(send);
}

static void reduce_scatter(nnrt_comm *c, nnrt_dtype t, nnrt_reduce op, size_t n, bool in_place) {
  size_t sz = nnrt_dtype_size(t), w = (size_t)c->world, r = (size_t)c->rank;
  char what[128];
  snprintf(what, sizeof what, "reduce_scatter %s %s n=%zu%s", nnrt_reduce_name(op), nnrt_dtype_name(t), n,
           in_place ? " in place" : "");
  char *send = malloc(w * n * sz + 1), *recv = in_place ? send + r * n * sz : malloc(n * sz + 1);
  for (size_t i = 0; i < w * n; i++) put(t, send, i, value(t, c->rank, i));
  if (!in_place) poison(recv, n * sz);
  nnrt_error e = {0};
  uint64_t before = c->bytes;
  double bus = c->bus_bytes;
  check_status(nnrt_comm_reduce_scatter(c, send, recv, n, t, op, NULL, &e), &e, what);
  CHECK(c->bytes - before == w * n * sz, "%s: bytes counted wrong", what);
  CHECK(c->bus_bytes - bus == (double)(n * sz) * (double)(w - 1), "%s: bus bytes counted wrong", what);
  EXPECT_ALL(what, recv, n, t, reduce(t, op, c->world, r * n + i));
  free(send);
  if (!in_place) free(recv);
}

static void broadcast(nnrt_comm *c, nnrt_dtype t, size_t n, int root) {
  size_t sz = nnrt_dtype_size(t);
  char what[128];
  snprintf(what, sizeof what, "broadcast %s n=%zu from %d", nnrt_dtype_name(t), n, root);
  char *buf = malloc(n * sz + 1);
  if (c->rank == root)
    for (size_t i = 0; i < n; i++) put(t, buf, i, value(t, root, i));
  else
    poison(buf, n * sz);
  nnrt_error e = {0};
  uint64_t before = c->bytes;
  double bus = c->bus_bytes;
  check_status(nnrt_comm_broadcast(c, buf, n, t, root, NULL, &e), &e, what);
  CHECK(c->bytes - before == (c->rank == root ? n * sz : 0), "%s: bytes counted wrong", what);
  CHECK(c->bus_bytes - bus == (double)(n * sz), "%s: bus bytes counted wrong", what);
  EXPECT_ALL(what, buf, n, t, value(t, root, i));
  free(buf);
}

/* f64 sums (ZeRO-1's sums of squares): rank r sends r + i / 2, so element
 * i is world (world - 1) / 2 + world i / 2, exact in doubles. */
static void f64_sum(nnrt_comm *c) {
  double x[5], y[5];
  for (int i = 0; i < 5; i++) x[i] = c->rank + 0.5 * i, y[i] = -1.0;
  nnrt_error e = {0};
  check_status(nnrt_comm_all_reduce(c, x, y, 5, NNRT_F64, NNRT_REDUCE_SUM, NULL, &e), &e, "all_reduce F64 n=5");
  for (int i = 0; i < 5; i++)
    CHECK(y[i] == c->world * (c->world - 1) / 2.0 + 0.5 * i * c->world, "all_reduce F64: element %d is %g", i, y[i]);
}

/* Arguments every rank rejects alike, before any message is sent. */
static void bad_arguments(nnrt_comm *c) {
  unsigned char x[4] = {0};
  float y[4] = {0};
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_all_reduce(c, x, x, 4, NNRT_U8, NNRT_REDUCE_SUM, NULL, &e);
  CHECK(s == NNRT_E_ARG && strstr(e.msg, "U8"), "all_reduce of U8: expected NNRT_E_ARG naming U8, found %d: %s",
        s, e.msg);
  s = nnrt_comm_broadcast(c, y, 4, NNRT_F32, c->world, NULL, &e);
  CHECK(s == NNRT_E_ARG && strstr(e.msg, "root"), "broadcast from rank %d: expected NNRT_E_ARG, found %d: %s",
        c->world, s, e.msg);
  s = nnrt_comm_all_reduce(c, y, y, 4, NNRT_F32, (nnrt_reduce)7, NULL, &e);
  CHECK(s == NNRT_E_ARG, "all_reduce with reduction 7: expected NNRT_E_ARG, found %d", s);
  s = nnrt_comm_all_reduce(c, NULL, y, 4, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e);
  CHECK(s == NNRT_E_ARG, "all_reduce from NULL: expected NNRT_E_ARG, found %d", s);
}

/* Sub-communicators as tp:2,dp:M lays them out (rank = dp * 2 + tp): the
 * tp groups {0, 1}, {2, 3}; the dp groups {0, 2}, {1, 3}, each ranked by
 * its key; a sum in one counts that group's ranks alone, and the world still
 * works after them. A world of 1 splits into a world of 1. */
static void split(nnrt_comm *c) {
  const int n = c->world > 1 ? 2 : 1;
  nnrt_comm *tp = NULL, *dp = NULL;
  nnrt_error e = {0};
  check_status(nnrt_comm_split(c, c->rank / n, c->rank % n, &tp, &e), &e, "split into tp groups");
  if (tp) check_status(nnrt_comm_split(c, c->rank % n, c->rank / n, &dp, &e), &e, "split into dp groups");
  if (!tp || !dp) {
    nnrt_comm_destroy(tp);
    return;
  }
  const int tp_size = c->rank / n * n + n <= c->world ? n : c->world % n;
  const int dp_size = (c->world - c->rank % n + n - 1) / n;
  CHECK(tp->rank == c->rank % n && tp->world == tp_size, "tp group: expected rank %d of %d, found %d of %d",
        c->rank % n, tp_size, tp->rank, tp->world);
  CHECK(dp->rank == c->rank / n && dp->world == dp_size, "dp group: expected rank %d of %d, found %d of %d",
        c->rank / n, dp_size, dp->rank, dp->world);
  /* each rank sends its world rank: a group's sum is its members' */
  int32_t x = c->rank, y = -1;
  check_status(nnrt_comm_all_reduce(tp, &x, &y, 1, NNRT_I32, NNRT_REDUCE_SUM, NULL, &e), &e, "all_reduce in a tp group");
  int want = 0;
  for (int r = c->rank / n * n; r < c->rank / n * n + tp_size; r++) want += r;
  CHECK(y == want, "all_reduce in the tp group of rank %d: expected %d, found %d", c->rank, want, y);
  check_status(nnrt_comm_all_reduce(dp, &x, &y, 1, NNRT_I32, NNRT_REDUCE_SUM, NULL, &e), &e, "all_reduce in a dp group");
  want = 0;
  for (int r = c->rank % n; r < c->world; r += n) want += r;
  CHECK(y == want, "all_reduce in the dp group of rank %d: expected %d, found %d", c->rank, want, y);
  CHECK(tp->bytes == 4 && dp->bytes == 4, "each group counts its own bytes: found %llu and %llu",
        (unsigned long long)tp->bytes, (unsigned long long)dp->bytes);
  nnrt_comm_destroy(tp);
  nnrt_comm_destroy(dp);
  nnrt_comm *bad = c;
  nnrt_status s = nnrt_comm_split(c, -1, 0, &bad, &e);
  CHECK(s == NNRT_E_ARG && !bad && strstr(e.msg, "color"), "split with color -1: expected NNRT_E_ARG naming the color, "
        "found %d: %s", s, e.msg);
  check_status(nnrt_comm_all_reduce(c, &x, &y, 1, NNRT_I32, NNRT_REDUCE_SUM, NULL, &e), &e, "all_reduce after the split");
  CHECK(y == c->world * (c->world - 1) / 2, "all_reduce over the world after the split: found %d", y);
}

static int run_all(nnrt_comm *c) {
  const nnrt_dtype types[] = {NNRT_F32, NNRT_F16, NNRT_BF16, NNRT_I32};
  const size_t counts[] = {0, 1, 3, 1031, ((size_t)1 << 20) + 3};
  for (size_t ti = 0; ti < 4; ti++) {
    for (size_t ci = 0; ci < 5; ci++) {
      nnrt_dtype t = types[ti];
      size_t n = counts[ci];
      bool large = ci == 4;
      for (int op = 0; op < 2; op++) {
        if (large && op == NNRT_REDUCE_MAX && t != NNRT_BF16) continue;  /* time: one large max is enough */
        all_reduce(c, t, (nnrt_reduce)op, n, false);
        all_reduce(c, t, (nnrt_reduce)op, n, true);
        reduce_scatter(c, t, (nnrt_reduce)op, n, false);
        reduce_scatter(c, t, (nnrt_reduce)op, n, true);
      }
      all_gather(c, t, n, false);
      all_gather(c, t, n, true);
      broadcast(c, t, n, 0);
      broadcast(c, t, n, c->world - 1);
    }
  }
  f64_sum(c);
  split(c);
  bad_arguments(c);
  nnrt_error e = {0};
  check_status(nnrt_comm_barrier(c, &e), &e, "barrier");
  return failures;
}

/* ------------------------------------------------------------ the faults */

static double now_s(void) { return (double)nnrt_now_ns() * 1e-9; }

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static int run_timeout(nnrt_comm *c) {
  float x[4096] = {0};
  nnrt_error e = {0};
  if (c->rank == 1) {
    /* never calls: rank 0 must give up on its own */
    sleep_s(c->timeout_s + 3);
    return 0;
  }
  if (c->rank != 0) return 0;
  double t0 = now_s();
  nnrt_status s = nnrt_comm_all_reduce(c, x, x, 4096, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e);
  double took = now_s() - t0;
  printf("rank 0: after %.2f s: %s: %s\n", took, nnrt_status_name(s), e.msg);
  CHECK(s == NNRT_E_COMM, "expected NNRT_E_COMM, found %s", nnrt_status_name(s));
  CHECK(strstr(e.msg, "all_reduce of 4096 F32") && strstr(e.msg, "rank 0 of") && strstr(e.msg, "did not complete"),
        "the message does not name the collective, the rank and the timeout: %s", e.msg);
  CHECK(took >= c->timeout_s - 0.05 && took < c->timeout_s + 2, "took %.2f s for a timeout of %g s", took,
        c->timeout_s);
  /* the communicator stays failed */
  s = nnrt_comm_barrier(c, &e);
  CHECK(s == NNRT_E_COMM && strstr(e.msg, "failed earlier"), "a barrier after the failure: %s: %s",
        nnrt_status_name(s), e.msg);
  if (!failures) printf("PASS timeout\n");
  fflush(stdout);
  return failures;
}

static int run_exit(nnrt_comm *c) {
  float x[16] = {0};
  nnrt_error e = {0};
  if (c->rank == 1) {
    fprintf(stderr, "rank 1: exiting before the all_reduce, as asked\n");
    exit(3);
  }
  nnrt_status s = nnrt_comm_all_reduce(c, x, x, 16, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e);
  printf("rank %d: %s: %s\n", c->rank, nnrt_status_name(s), e.msg);
  return s == NNRT_E_COMM ? 0 : 1;
}

static int run_world(void) {
  /* this rank as mpirun says, in a world one larger */
  const char *r = getenv("OMPI_COMM_WORLD_RANK"), *w = getenv("OMPI_COMM_WORLD_SIZE");
  if (!r || !w) {
    fprintf(stderr, "world: run me under Open MPI's mpirun\n");
    return 1;
  }
  char wider[32];
  snprintf(wider, sizeof wider, "%d", atoi(w) + 1);
  setenv("NNC_RANK", r, 1);
  setenv("NNC_WORLD_SIZE", wider, 1);
  nnrt_comm *c = NULL;
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_mpi_create(&c, &e);
  printf("rank %s: %s: %s\n", r, nnrt_status_name(s), e.msg);
  CHECK(s == NNRT_E_COMM && strstr(e.msg, "mismatched") && strstr(e.msg, wider),
        "expected NNRT_E_COMM for a mismatched world, found %s: %s", nnrt_status_name(s), e.msg);
  CHECK(c == NULL, "a communicator came back from a failed create");
  nnrt_comm_destroy(c);
  return failures;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "all";
  if (!strcmp(mode, "world")) return run_world() ? 1 : 0;
  nnrt_comm *c = NULL;
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_mpi_create(&c, &e);
  if (s != NNRT_OK) {
    fprintf(stderr, "nnrt_comm_mpi_create: %s: %s\n", nnrt_status_name(s), e.msg);
    return 1;
  }
  my_rank = c->rank;
  if (c->rank == 0)
    printf("%s: %d ranks, timeout %g s, mode %s\n", c->ops->name, c->world, c->timeout_s, mode);
  int fails;
  if (!strcmp(mode, "all")) fails = run_all(c);
  else if (!strcmp(mode, "timeout")) fails = c->world < 2 ? 0 : run_timeout(c);
  else if (!strcmp(mode, "exit")) fails = c->world < 2 ? 0 : run_exit(c);
  else {
    fprintf(stderr, "unknown mode %s: expected all, timeout, exit or world\n", mode);
    fails = 1;
  }
  printf("rank %d of %d: %s: %d failure(s), %llu bytes sent\n", c->rank, c->world, mode, fails,
         (unsigned long long)c->bytes);
  fflush(stdout);
  nnrt_comm_destroy(c);
  return fails ? 1 : 0;
}
