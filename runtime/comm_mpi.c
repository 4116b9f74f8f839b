/* runtime/comm_mpi.c — the communicator over MPI, between CPU processes
 * started by mpirun. Built with mpicc (or meson's nnrt_mpi_dep).
 *
 * Every collective is the non-blocking MPI call, tested until it completes
 * or the timeout passes: MPI's blocking collectives wait forever for a rank
 * that died or stopped calling, and a model should fail with a message
 * instead. f16 and bf16 have no MPI type: they travel as 16-bit words and
 * reduce through user operations that widen each pair to float. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnrt_comm.h"

typedef struct mpi_state {
  MPI_Comm comm;
  bool we_initialized;     /* MPI_Finalize at destroy */
  bool broken;             /* a collective failed: the engine's state is not trusted */
  MPI_Op half_ops[2][2];   /* [f16, bf16][sum, max] */
  char broken_msg[512];
} mpi_state;

/* ------------------------------------------------- the 16-bit reductions */

#define HALF_OP(name, to32, from32, combine)                                     \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {          \
    (void)dt;                                                                    \
    const uint16_t *a = in;                                                      \
    uint16_t *b = inout;                                                         \
    for (int i = 0; i < *len; i++) {                                             \
      float x = to32(a[i]), y = to32(b[i]);                                      \
      b[i] = from32(combine(x, y));                                              \
    }                                                                            \
  }
#define ADD(x, y) ((x) + (y))
/* a NaN on either side wins, as in fmaxf's opposite: a NaN must not vanish */
#define MAX(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) > (y) ? (x) : (y))
HALF_OP(f16_sum, nnrt_f16_to_f32, nnrt_f32_to_f16, ADD)
HALF_OP(f16_max, nnrt_f16_to_f32, nnrt_f32_to_f16, MAX)
HALF_OP(bf16_sum, nnrt_bf16_to_f32, nnrt_f32_to_bf16, ADD)
HALF_OP(bf16_max, nnrt_bf16_to_f32, nnrt_f32_to_bf16, MAX)

/* ------------------------------------------------------------- errors */

static nnrt_status mpi_fail(nnrt_comm *c, int code, const char *what, nnrt_error *err) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
  return nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: %s failed: %s", c->rank, c->world, what, text);
}

static nnrt_status check_alive(nnrt_comm *c, nnrt_error *err) {
  mpi_state *m = c->impl;
  if (!m->broken) return NNRT_OK;
  return nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: the communicator failed earlier (%s)", c->rank,
                     c->world, m->broken_msg);
}

static void sleep_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* Tests req until it completes, an error comes or timeout_s passes. what
 * says the collective ("all_reduce of 4096 f32"). A failure marks the
 * communicator broken: a collective left pending cannot be cancelled, and
 * the ranks no longer agree on which collective comes next. */
static nnrt_status wait_for(nnrt_comm *c, MPI_Request *req, const char *what, nnrt_error *err) {
  mpi_state *m = c->impl;
  uint64_t start = nnrt_now_ns();
  nnrt_status s = NNRT_OK;
  for (long polls = 0;; polls++) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      s = mpi_fail(c, rc, what, err);
      break;
    }
    double waited = (double)(nnrt_now_ns() - start) * 1e-9;
    if (done) {
      c->wait_s += waited;
      return NNRT_OK;
    }
    if (waited >= c->timeout_s) {
      s = nnrt_errorf(err, NNRT_E_COMM,
                      "rank %d of %d: %s did not complete in %g s: another rank died or stopped calling",
                      c->rank, c->world, what, c->timeout_s);
      break;
    }
    /* spin while a collective is quick, then leave the core to the other
     * ranks (they may share it) while still driving MPI's progress */
    if (polls > 2000) sleep_us(polls > 20000 ? 200 : 20);
  }
  m->broken = true;
  snprintf(m->broken_msg, sizeof m->broken_msg, "%s", err ? err->msg : what);
  return s;
}

/* ------------------------------------------------------- the collectives */

static nnrt_status mpi_type(nnrt_comm *c, nnrt_dtype t, const char *what, MPI_Datatype *out,
                            nnrt_error *err) {
  switch (t) {
  case NNRT_F32: *out = MPI_FLOAT; return NNRT_OK;
  case NNRT_F64: *out = MPI_DOUBLE; return NNRT_OK;   /* sums of squares (ZeRO-1's gradient norm) */
  case NNRT_I32: *out = MPI_INT32_T; return NNRT_OK;
  case NNRT_F16:
  case NNRT_BF16: *out = MPI_UINT16_T; return NNRT_OK;
  default:
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s: expected f32, f64, f16, bf16 or i32, found %s", c->rank, what,
                       nnrt_dtype_name(t));
  }
}

static MPI_Op mpi_op(const mpi_state *m, nnrt_dtype t, nnrt_reduce op) {
  if (t == NNRT_F16 || t == NNRT_BF16) return m->half_ops[t == NNRT_BF16][op == NNRT_REDUCE_MAX];
  return op == NNRT_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

/* The checks every call starts with, and its name with sizes for messages. */
static nnrt_status begin(nnrt_comm *c, const char *coll, const void *a, const void *b, size_t count,
                         size_t elems, nnrt_dtype t, MPI_Datatype *dt, char *what, size_t what_size,
                         nnrt_error *err) {
  nnrt_status s = nnrt_comm_check(c, coll, a, b, count, elems, t, err);
  if (s == NNRT_OK) s = check_alive(c, err);
  if (s == NNRT_OK) s = mpi_type(c, t, coll, dt, err);
  if (s != NNRT_OK) return s;
  snprintf(what, what_size, "%s of %zu %s", coll, count, nnrt_dtype_name(t));
  /* MPI counts are ints */
  if (count > (size_t)INT_MAX / (elems ? elems : 1))
    return nnrt_errorf(err, NNRT_E_SIZE, "rank %d: %s: MPI takes at most %d elements per call", c->rank, what,
                       INT_MAX);
  return NNRT_OK;
}

static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  const char *x = a, *y = b;
  return an && bn && x < y + bn && y < x + an;
}

static nnrt_status mpi_all_reduce(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                  nnrt_reduce op, void *stream, nnrt_error *err) {
  MPI_Datatype dt = MPI_DATATYPE_NULL;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "all_reduce", send, recv, count, 1, t, &dt, what, sizeof what, err);
  if (s == NNRT_OK) s = nnrt_comm_check_op(c, "all_reduce", op, err);
  if (s != NNRT_OK) return s;
  size_t bytes = count * nnrt_dtype_size(t);
  if (send != recv && overlap(send, bytes, recv, bytes))
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s: send and recv overlap without being equal", c->rank,
                       what);
  mpi_state *m = c->impl;
  MPI_Request req;
  int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, dt, mpi_op(m, t, op), m->comm,
                          &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, what, err);
  nnrt_comm_count(c, NNRT_ALL_REDUCE, bytes, true);
  return wait_for(c, &req, what, err);
}

static nnrt_status mpi_all_gather(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                  void *stream, nnrt_error *err) {
  MPI_Datatype dt = MPI_DATATYPE_NULL;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "all_gather", send, recv, count, (size_t)c->world, t, &dt, what, sizeof what, err);
  if (s != NNRT_OK) return s;
  size_t bytes = count * nnrt_dtype_size(t);
  char *mine = (char *)recv + (size_t)c->rank * bytes;
  const void *from = send == mine ? MPI_IN_PLACE : send;
  void *tmp = NULL;
  /* MPI forbids any other aliasing: a copy of send keeps it apart */
  if (from != MPI_IN_PLACE && overlap(send, bytes, recv, bytes * (size_t)c->world)) {
    if (!(tmp = malloc(bytes))) return nnrt_errorf(err, NNRT_E_NOMEM, "rank %d: %s: out of memory", c->rank, what);
    memcpy(tmp, send, bytes);
    from = tmp;
  }
  MPI_Request req;
  int rc = MPI_Iallgather(from, (int)count, dt, recv, (int)count, dt, ((mpi_state *)c->impl)->comm, &req);
  if (rc == MPI_SUCCESS) {
    nnrt_comm_count(c, NNRT_ALL_GATHER, bytes, true);
    s = wait_for(c, &req, what, err);
  } else {
    s = mpi_fail(c, rc, what, err);
  }
  /* a pending collective may still read tmp: leak it rather than free it */
  if (s == NNRT_OK || rc != MPI_SUCCESS) free(tmp);
  return s;
}

static nnrt_status mpi_reduce_scatter(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                      nnrt_reduce op, void *stream, nnrt_error *err) {
  MPI_Datatype dt = MPI_DATATYPE_NULL;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "reduce_scatter", send, recv, count, (size_t)c->world, t, &dt, what, sizeof what, err);
  if (s == NNRT_OK) s = nnrt_comm_check_op(c, "reduce_scatter", op, err);
  if (s != NNRT_OK) return s;
  size_t bytes = count * nnrt_dtype_size(t);
  mpi_state *m = c->impl;
  /* In place as NCCL has it (recv is this rank's block of send) or any
   * other overlap: MPI's IN_PLACE means something else here, so the result
   * goes through a buffer of its own. */
  void *tmp = NULL, *to = recv;
  if (overlap(send, bytes * (size_t)c->world, recv, bytes)) {
    if (!(tmp = malloc(bytes))) return nnrt_errorf(err, NNRT_E_NOMEM, "rank %d: %s: out of memory", c->rank, what);
    to = tmp;
  }
  MPI_Request req;
  int rc = MPI_Ireduce_scatter_block(send, to, (int)count, dt, mpi_op(m, t, op), m->comm, &req);
  if (rc == MPI_SUCCESS) {
    nnrt_comm_count(c, NNRT_REDUCE_SCATTER, bytes, true);
    s = wait_for(c, &req, what, err);
    if (s == NNRT_OK && tmp) memcpy(recv, tmp, bytes);
  } else {
    s = mpi_fail(c, rc, what, err);
  }
  if (s == NNRT_OK || rc != MPI_SUCCESS) free(tmp);
  return s;
}

static nnrt_status mpi_broadcast(nnrt_comm *c, void *buf, size_t count, nnrt_dtype t, int root, void *stream,
                                 nnrt_error *err) {
  MPI_Datatype dt = MPI_DATATYPE_NULL;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "broadcast", buf, buf, count, 1, t, &dt, what, sizeof what, err);
  if (s == NNRT_OK) s = nnrt_comm_check_root(c, what, root, err);
  if (s != NNRT_OK) return s;
  MPI_Request req;
  int rc = MPI_Ibcast(buf, (int)count, dt, root, ((mpi_state *)c->impl)->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, what, err);
  nnrt_comm_count(c, NNRT_BROADCAST, count * nnrt_dtype_size(t), c->rank == root);
  return wait_for(c, &req, what, err);
}

static nnrt_status mpi_barrier(nnrt_comm *c, nnrt_error *err) {
  if (!c) return nnrt_errorf(err, NNRT_E_ARG, "barrier: no communicator (NULL)");
  nnrt_status s = check_alive(c, err);
  if (s != NNRT_OK) return s;
  MPI_Request req;
  int rc = MPI_Ibarrier(((mpi_state *)c->impl)->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "barrier", err);
  return wait_for(c, &req, "barrier", err);
}

/* ------------------------------------------------------- create, destroy */

static void release(mpi_state *m, bool finalize_ok) {
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      if (m->half_ops[i][j] != MPI_OP_NULL) MPI_Op_free(&m->half_ops[i][j]);
  if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (m->we_initialized && finalize_ok && !finalized) MPI_Finalize();
}

static void mpi_destroy(nnrt_comm *c) {
  mpi_state *m = c->impl;
  if (m && !m->broken) release(m, true);
  /* broken: a pending collective still holds the communicator, and
   * MPI_Finalize would wait on the rank that failed us */
  free(m);
  free(c);
}

static nnrt_status mpi_split(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err);

static const nnrt_comm_ops mpi_ops = {
  "mpi", mpi_all_reduce, mpi_all_gather, mpi_reduce_scatter, mpi_broadcast, mpi_barrier, mpi_split, mpi_destroy,
};

/* A new communicator's state, empty: release() frees what was made of it. */
static nnrt_comm *new_comm(mpi_state **state) {
  nnrt_comm *c = calloc(1, sizeof *c);
  mpi_state *m = calloc(1, sizeof *m);
  if (!c || !m) {
    free(c);
    free(m);
    return NULL;
  }
  m->comm = MPI_COMM_NULL;
  for (int i = 0; i < 2; i++) m->half_ops[i][0] = m->half_ops[i][1] = MPI_OP_NULL;
  c->ops = &mpi_ops;
  c->impl = m;
  c->world = 1;
  *state = m;
  return c;
}

/* What every communicator sets up on its MPI_Comm m->comm: errors that
 * return, its rank and size, the 16-bit reductions. */
static int setup_comm(nnrt_comm *c, mpi_state *m) {
  int rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &c->world);
  MPI_User_function *fns[2][2] = {{f16_sum, f16_max}, {bf16_sum, bf16_max}};
  for (int i = 0; i < 2 && rc == MPI_SUCCESS; i++)
    for (int j = 0; j < 2 && rc == MPI_SUCCESS; j++) rc = MPI_Op_create(fns[i][j], 1, &m->half_ops[i][j]);
  return rc;
}

/* MPI_Comm_split blocks until every rank of c calls it: a barrier waited on
 * against the timeout first, so a rank that died or never came fails the
 * others here instead of hanging them in the split. */
static nnrt_status mpi_split(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err) {
  nnrt_status s = mpi_barrier(c, err);
  if (s != NNRT_OK) return s;
  mpi_state *n = NULL;
  nnrt_comm *d = new_comm(&n);
  if (!d) return nnrt_errorf(err, NNRT_E_NOMEM, "rank %d of %d: split: out of memory", c->rank, c->world);
  d->local_rank = c->local_rank;
  d->timeout_s = c->timeout_s;
  int rc = MPI_Comm_split(((mpi_state *)c->impl)->comm, color, key, &n->comm);
  if (rc == MPI_SUCCESS) rc = setup_comm(d, n);
  if (rc != MPI_SUCCESS) {
    char what[64];
    snprintf(what, sizeof what, "splitting the communicator (color %d, key %d)", color, key);
    s = mpi_fail(c, rc, what, err);
    release(n, false);
    free(n);
    free(d);
    return s;
  }
  *out = d;
  return NNRT_OK;
}

/* Local rank: the rank among the processes that share this machine's memory. */
static int local_rank_of(MPI_Comm comm, int rank, int *out) {
  MPI_Comm node;
  int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return rc;
  rc = MPI_Comm_rank(node, out);
  MPI_Comm_free(&node);
  return rc;
}

static nnrt_status setup(nnrt_comm *c, mpi_state *m, nnrt_error *err) {
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  if (rc == MPI_SUCCESS) rc = setup_comm(c, m);
  if (rc == MPI_SUCCESS) rc = local_rank_of(m->comm, c->rank, &c->local_rank);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "setting up the MPI communicator", err);

  /* nnc's variables, when a script sets them beside mpirun, must agree */
  nnrt_comm_launch l;
  nnrt_status s = nnrt_comm_launch_read(&l, err);
  if (s != NNRT_OK) return s;
  c->timeout_s = l.timeout_s;
  if (getenv("NNC_WORLD_SIZE") && (l.world != c->world || l.rank != c->rank))
    return nnrt_errorf(err, NNRT_E_COMM,
                       "MPI says rank %d of %d but NNC_RANK/NNC_WORLD_SIZE say rank %d of %d: a mismatched launch",
                       c->rank, c->world, l.rank, l.world);
  return NNRT_OK;
}

nnrt_status nnrt_comm_mpi_create(nnrt_comm **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_comm_mpi_create: out is NULL");
  *out = NULL;
  mpi_state *m = NULL;
  nnrt_comm *c = new_comm(&m);
  if (!c) return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_comm_mpi_create: out of memory");

  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  nnrt_status s = NNRT_OK;
  if (finalized) {
    s = nnrt_errorf(err, NNRT_E_STATE, "nnrt_comm_mpi_create: MPI was finalized already");
  } else if (!inited) {
    /* only the thread that created the communicator calls MPI */
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) s = mpi_fail(c, rc, "MPI_Init_thread", err);
    else m->we_initialized = true;
  }
  if (s == NNRT_OK) s = setup(c, m, err);
  if (s != NNRT_OK) {
    release(m, true);
    free(m);
    free(c);
    return s;
  }
  *out = c;
  return NNRT_OK;
}
