/* runtime/cuda/comm_nccl.c — the communicator over NCCL, one GPU per rank.
 *
 * The communicator is created non-blocking (config.blocking = 0): every
 * NCCL call returns at once and is then waited on by polling
 * ncclCommGetAsyncError against the timeout, so a rank that died makes the
 * others fail (the communicator is aborted) instead of hanging in NCCL.
 * nnrt_comm_nccl_wait does the same for the stream the collectives ran on.
 *
 * The unique id from rank 0 reaches the others over MPI under mpirun (when
 * built with -DNNRT_COMM_WITH_MPI and mpicc), else through the rendezvous
 * file NNC_RENDEZVOUS. Link with -lnccl -lcudart (and -lmpi). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef NNRT_COMM_WITH_MPI
#include <mpi.h>
#endif

#include "nnrt_comm.h"

typedef struct nccl_state {
  ncclComm_t comm;          /* NULL once aborted */
  ncclComm_t joined;        /* the non-blocking communicator every rank joined, which sub-communicators
                               split from (polled against the timeout); NULL in a sub-communicator */
  cudaStream_t own;         /* the barrier's stream */
  int *flag;                /* the barrier's one device int */
  int device;
  bool broken;              /* a call failed: the communicator was aborted */
  bool mpi_initialized;     /* we called MPI_Init: MPI_Finalize at destroy */
  char broken_msg[512];
} nccl_state;

static double since_s(uint64_t start) { return (double)(nnrt_now_ns() - start) * 1e-9; }

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* Between two polls of a wait that began at start: nothing for its first
 * millisecond (a collective's enqueue or a short stream takes microseconds,
 * and a sleep costs tens of them: a model's all_reduce is waited on
 * between kernels), then 20 us sleeps. */
static void poll_pause(uint64_t start) {
  if (since_s(start) >= 1e-3) pause_us(20);
}

/* Aborts the communicator (a collective may be stuck on a dead peer: only
 * abort frees it) and remembers why, for the calls that follow. */
static nnrt_status fail(nnrt_comm *c, nnrt_error *err, const char *fmt, ...) NNRT_PRINTF(3, 4);
static nnrt_status fail(nnrt_comm *c, nnrt_error *err, const char *fmt, ...) {
  nccl_state *m = c->impl;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->broken_msg, sizeof m->broken_msg, fmt, ap);
  va_end(ap);
  if (m->comm) ncclCommAbort(m->comm);
  if (m->joined) ncclCommAbort(m->joined);
  m->comm = m->joined = NULL;
  m->broken = true;
  return nnrt_errorf(err, NNRT_E_COMM, "%s", m->broken_msg);
}

static const char *last_error(const nccl_state *m) {
  const char *s = ncclGetLastError(m->comm);
  return s && *s ? s : "no further detail";
}

/* Waits until NCCL has taken call r (returned ncclInProgress or ncclSuccess)
 * or fails the communicator on an error or the timeout. */
static nnrt_status settle(nnrt_comm *c, ncclResult_t r, const char *what, nnrt_error *err) {
  nccl_state *m = c->impl;
  uint64_t start = nnrt_now_ns();
  while (r == ncclInProgress) {
    if (since_s(start) >= c->timeout_s)
      return fail(c, err, "rank %d of %d: %s did not complete in %g s: another rank died or stopped calling",
                  c->rank, c->world, what, c->timeout_s);
    /* not a busy poll: that starves the thread NCCL does the call on (measured: 0.58 ms a call, 85 us with sleeps) */
    pause_us(20);
    if (ncclCommGetAsyncError(m->comm, &r) != ncclSuccess) break;
  }
  if (r == ncclSuccess) return NNRT_OK;
  return fail(c, err, "rank %d of %d: %s failed: %s: %s", c->rank, c->world, what, ncclGetErrorString(r),
              last_error(m));
}

static nnrt_status check_alive(nnrt_comm *c, nnrt_error *err) {
  nccl_state *m = c->impl;
  if (!m->broken) return NNRT_OK;
  return nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: the communicator failed earlier (%s)", c->rank, c->world,
                     m->broken_msg);
}

nnrt_status nnrt_comm_nccl_wait(nnrt_comm *c, void *stream, nnrt_error *err) {
  if (!c || !c->ops || strcmp(c->ops->name, "nccl") != 0)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_comm_nccl_wait: expected an NCCL communicator, found %s",
                       c && c->ops ? c->ops->name : "NULL");
  nnrt_status s = check_alive(c, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  uint64_t start = nnrt_now_ns();
  for (;;) {
    cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
    ncclResult_t a = ncclSuccess;
    ncclCommGetAsyncError(m->comm, &a);
    if (a != ncclSuccess && a != ncclInProgress)
      return fail(c, err, "rank %d of %d: waiting for the stream: %s: %s", c->rank, c->world,
                  ncclGetErrorString(a), last_error(m));
    if (e == cudaSuccess) return NNRT_OK;
    if (e != cudaErrorNotReady)
      return fail(c, err, "rank %d of %d: waiting for the stream: %s: %s", c->rank, c->world, cudaGetErrorName(e),
                  cudaGetErrorString(e));
    if (since_s(start) >= c->timeout_s)
      return fail(c, err, "rank %d of %d: the collectives on the stream did not complete in %g s: another rank "
                  "died or stopped calling", c->rank, c->world, c->timeout_s);
    poll_pause(start);
  }
}

/* ------------------------------------------------------- the collectives */

static nnrt_status nccl_type(nnrt_comm *c, nnrt_dtype t, const char *what, ncclDataType_t *out, nnrt_error *err) {
  switch (t) {
  case NNRT_F32: *out = ncclFloat32; return NNRT_OK;
  case NNRT_F64: *out = ncclFloat64; return NNRT_OK;   /* sums of squares (ZeRO-1's gradient norm) */
  case NNRT_F16: *out = ncclFloat16; return NNRT_OK;
  case NNRT_BF16: *out = ncclBfloat16; return NNRT_OK;
  case NNRT_I32: *out = ncclInt32; return NNRT_OK;
  default:
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: %s: expected f32, f64, f16, bf16 or i32, found %s", c->rank, what,
                       nnrt_dtype_name(t));
  }
}

static nnrt_status begin(nnrt_comm *c, const char *coll, const void *a, const void *b, size_t count, size_t elems,
                         nnrt_dtype t, ncclDataType_t *dt, char *what, size_t what_size, nnrt_error *err) {
  nnrt_status s = nnrt_comm_check(c, coll, a, b, count, elems, t, err);
  if (s == NNRT_OK) s = check_alive(c, err);
  if (s == NNRT_OK) s = nccl_type(c, t, coll, dt, err);
  if (s == NNRT_OK) snprintf(what, what_size, "%s of %zu %s", coll, count, nnrt_dtype_name(t));
  return s;
}

static ncclRedOp_t nccl_op(nnrt_reduce op) { return op == NNRT_REDUCE_MAX ? ncclMax : ncclSum; }

static nnrt_status nccl_all_reduce(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                   nnrt_reduce op, void *stream, nnrt_error *err) {
  ncclDataType_t dt = ncclFloat32;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "all_reduce", send, recv, count, 1, t, &dt, what, sizeof what, err);
  if (s == NNRT_OK) s = nnrt_comm_check_op(c, "all_reduce", op, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  s = settle(c, ncclAllReduce(send, recv, count, dt, nccl_op(op), m->comm, (cudaStream_t)stream), what, err);
  if (s == NNRT_OK) nnrt_comm_count(c, NNRT_ALL_REDUCE, count * nnrt_dtype_size(t), true);
  return s;
}

static nnrt_status nccl_all_gather(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                   void *stream, nnrt_error *err) {
  ncclDataType_t dt = ncclFloat32;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "all_gather", send, recv, count, (size_t)c->world, t, &dt, what, sizeof what, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  s = settle(c, ncclAllGather(send, recv, count, dt, m->comm, (cudaStream_t)stream), what, err);
  if (s == NNRT_OK) nnrt_comm_count(c, NNRT_ALL_GATHER, count * nnrt_dtype_size(t), true);
  return s;
}

static nnrt_status nccl_reduce_scatter(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                       nnrt_reduce op, void *stream, nnrt_error *err) {
  ncclDataType_t dt = ncclFloat32;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "reduce_scatter", send, recv, count, (size_t)c->world, t, &dt, what, sizeof what, err);
  if (s == NNRT_OK) s = nnrt_comm_check_op(c, "reduce_scatter", op, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  s = settle(c, ncclReduceScatter(send, recv, count, dt, nccl_op(op), m->comm, (cudaStream_t)stream), what, err);
  if (s == NNRT_OK) nnrt_comm_count(c, NNRT_REDUCE_SCATTER, count * nnrt_dtype_size(t), true);
  return s;
}

static nnrt_status nccl_broadcast(nnrt_comm *c, void *buf, size_t count, nnrt_dtype t, int root, void *stream,
                                  nnrt_error *err) {
  ncclDataType_t dt = ncclFloat32;   /* set by begin() when it succeeds */
  char what[96];
  nnrt_status s = begin(c, "broadcast", buf, buf, count, 1, t, &dt, what, sizeof what, err);
  if (s == NNRT_OK) s = nnrt_comm_check_root(c, what, root, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  s = settle(c, ncclBroadcast(buf, buf, count, dt, root, m->comm, (cudaStream_t)stream), what, err);
  if (s == NNRT_OK) nnrt_comm_count(c, NNRT_BROADCAST, count * nnrt_dtype_size(t), c->rank == root);
  return s;
}

/* NCCL has no barrier: an all_reduce of one int, waited for on a stream of
 * our own. */
static nnrt_status nccl_barrier(nnrt_comm *c, nnrt_error *err) {
  if (!c) return nnrt_errorf(err, NNRT_E_ARG, "barrier: no communicator (NULL)");
  nnrt_status s = check_alive(c, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  s = settle(c, ncclAllReduce(m->flag, m->flag, 1, ncclInt32, ncclSum, m->comm, m->own), "barrier", err);
  return s == NNRT_OK ? nnrt_comm_nccl_wait(c, m->own, err) : s;
}

/* ------------------------------------------------------- create, destroy */

static void release(nnrt_comm *c) {
  nccl_state *m = c->impl;
  if (m->comm) {
    /* finalize flushes what is queued; if it does not finish in time a peer
     * is gone, and only abort returns */
    ncclResult_t r = ncclCommFinalize(m->comm);
    uint64_t start = nnrt_now_ns();
    while (r == ncclInProgress && since_s(start) < c->timeout_s) {
      pause_us(100);
      if (ncclCommGetAsyncError(m->comm, &r) != ncclSuccess) break;
    }
    if (r == ncclSuccess) ncclCommDestroy(m->comm);
    else ncclCommAbort(m->comm), m->broken = true;
    m->comm = NULL;
  }
  if (m->joined) {
    if (m->broken) ncclCommAbort(m->joined);
    else ncclCommDestroy(m->joined);
    m->joined = NULL;
  }
  if (m->flag) cudaFree(m->flag);
  if (m->own) cudaStreamDestroy(m->own);
#ifdef NNRT_COMM_WITH_MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* after a failure a peer may never reach MPI_Finalize: do not wait for it */
  if (m->mpi_initialized && !finalized && !m->broken) MPI_Finalize();
#endif
}

static void nccl_destroy(nnrt_comm *c) {
  if (c->impl) release(c);
  free(c->impl);
  free(c);
}

static nnrt_status nccl_split(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err);

static const nnrt_comm_ops nccl_ops = {
  "nccl", nccl_all_reduce, nccl_all_gather, nccl_reduce_scatter, nccl_broadcast, nccl_barrier, nccl_split,
  nccl_destroy,
};

static nnrt_status cuda_fail(nnrt_comm *c, cudaError_t e, const char *what, nnrt_error *err) {
  return nnrt_errorf(err, NNRT_E_DEVICE, "rank %d of %d: %s: %s: %s", c->rank, c->world, what, cudaGetErrorName(e),
                     cudaGetErrorString(e));
}

/* A blocking communicator of the ranks of c's joined one that give color,
 * ranked by key, into *out. The joined one is non-blocking, so the split
 * runs on NCCL's thread and is polled against the timeout: a rank that never
 * calls fails the others instead of hanging them. */
static nnrt_status split_blocking(nnrt_comm *c, int color, int key, ncclComm_t *out, nnrt_error *err) {
  nccl_state *m = c->impl;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t child = NULL;
  ncclResult_t r = ncclCommSplit(m->joined, color, key, &child, &config);
  /* the child appears, then leaves the in-progress state */
  uint64_t start = nnrt_now_ns();
  while ((r == ncclInProgress || (r == ncclSuccess && !child)) && since_s(start) < c->timeout_s) {
    pause_us(20);
    ncclResult_t a = ncclSuccess;
    ncclCommGetAsyncError(child ? child : m->joined, &a);
    r = a;
  }
  if (r != ncclSuccess || !child) {
    if (child) ncclCommAbort(child);
    return fail(c, err, "rank %d of %d: splitting a blocking NCCL communicator (color %d): %s: %s", c->rank, c->world,
                color, r == ncclSuccess ? "no communicator came back" : ncclGetErrorString(r), last_error(m));
  }
  *out = child;
  return NNRT_OK;
}

/* Once every rank has joined, the collectives go to a blocking communicator
 * split from the joined one: a call then only enqueues its kernel (a few
 * microseconds), where the non-blocking one hands it to NCCL's thread and
 * has to be polled (tens of microseconds between a model's kernels). The
 * stream's waits (nnrt_comm_nccl_wait) still watch the timeout. The joined
 * one stays for nccl_split; with NCCL_RUNTIME_CONNECT=0 (setup) it holds
 * its connections although it runs no collective (their memory and init
 * time beside the child's were not measured). */
static nnrt_status blocking_child(nnrt_comm *c, nnrt_error *err) {
  nccl_state *m = c->impl;
  m->joined = m->comm;
  m->comm = NULL;
  return split_blocking(c, 0, c->rank, &m->comm, err);
}

/* The stream and device flag of a communicator's barrier, on its GPU. */
static nnrt_status barrier_setup(nnrt_comm *c, nnrt_error *err);

/* A sub-communicator: a blocking one split from the joined one, on the
 * same GPU, with its own barrier. */
static nnrt_status nccl_split(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err) {
  nnrt_status s = check_alive(c, err);
  if (s != NNRT_OK) return s;
  nccl_state *m = c->impl;
  if (!m->joined)
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d of %d: split: expected a communicator from nnrt_comm_nccl_create, "
                       "found a sub-communicator (split the world instead)", c->rank, c->world);
  nnrt_comm *d = calloc(1, sizeof *d);
  nccl_state *n = calloc(1, sizeof *n);
  if (!d || !n) {
    free(d);
    free(n);
    return nnrt_errorf(err, NNRT_E_NOMEM, "rank %d of %d: split: out of memory", c->rank, c->world);
  }
  d->ops = &nccl_ops;
  d->impl = n;
  d->local_rank = c->local_rank;
  d->timeout_s = c->timeout_s;
  n->device = m->device;
  s = split_blocking(c, color, key, &n->comm, err);
  ncclResult_t r = ncclSuccess;
  if (s == NNRT_OK && ((r = ncclCommUserRank(n->comm, &d->rank)) != ncclSuccess ||
                       (r = ncclCommCount(n->comm, &d->world)) != ncclSuccess))
    s = nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: the split communicator's rank: %s", c->rank, c->world,
                    ncclGetErrorString(r));
  if (s == NNRT_OK) s = barrier_setup(d, err);
  if (s != NNRT_OK) {
    nccl_destroy(d);
    return s;
  }
  *out = d;
  return NNRT_OK;
}

#ifdef NNRT_COMM_WITH_MPI
static nnrt_status mpi_fail(nnrt_comm *c, int code, const char *what, nnrt_error *err) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
  return nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: %s failed: %s", c->rank, c->world, what, text);
}


/* Rank, world and local rank from MPI, and rank 0's id broadcast to all
 * (non-blocking, against the timeout like every collective). */
static nnrt_status share_id_mpi(nnrt_comm *c, ncclUniqueId *id, nnrt_error *err) {
  nccl_state *m = c->impl;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Init_thread", err);
    m->mpi_initialized = true;
  }
  MPI_Comm world, node;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Comm_dup", err);
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  rc = MPI_Comm_rank(world, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(world, &c->world);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_free(&node);
  }
  nnrt_status s = NNRT_OK;
  if (rc != MPI_SUCCESS) s = mpi_fail(c, rc, "reading the MPI world", err);
  if (s == NNRT_OK && c->rank == 0 && (rc = ncclGetUniqueId(id)) != ncclSuccess)
    s = nnrt_errorf(err, NNRT_E_COMM, "rank 0: ncclGetUniqueId failed: %s", ncclGetErrorString((ncclResult_t)rc));
  /* every rank enters the broadcast, so an error on rank 0 shows up as a
   * timeout elsewhere rather than a hang */
  MPI_Request req;
  if (s == NNRT_OK && (rc = MPI_Ibcast(id, (int)sizeof *id, MPI_BYTE, 0, world, &req)) != MPI_SUCCESS)
    s = mpi_fail(c, rc, "broadcasting the NCCL id", err);
  uint64_t start = nnrt_now_ns();
  for (int done = 0; s == NNRT_OK && !done;) {
    if ((rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
      s = mpi_fail(c, rc, "broadcasting the NCCL id", err);
    else if (!done && since_s(start) >= c->timeout_s)
      s = nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: the NCCL id from rank 0 did not come in %g s: did rank 0 "
                      "start?", c->rank, c->world, c->timeout_s);
    else if (!done)
      pause_us(100);
  }
  if (s == NNRT_OK) MPI_Comm_free(&world);
  return s;
}
#endif

static nnrt_status share_id(nnrt_comm *c, const nnrt_comm_launch *l, ncclUniqueId *id, nnrt_error *err) {
#ifdef NNRT_COMM_WITH_MPI
  if (l->from_mpi) return share_id_mpi(c, id, err);
#endif
  c->rank = l->rank;
  c->world = l->world;
  c->local_rank = l->local_rank;
  ncclResult_t r = ncclSuccess;
  if (c->rank == 0 && (r = ncclGetUniqueId(id)) != ncclSuccess)
    return nnrt_errorf(err, NNRT_E_COMM, "rank 0: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
  if (c->world == 1) return NNRT_OK;
  if (!l->rendezvous[0])
    return nnrt_errorf(err, NNRT_E_ARG,
                       "rank %d of %d: NCCL needs NNC_RENDEZVOUS (a file path all ranks see) to pass rank 0's id%s",
                       c->rank, c->world,
                       l->from_mpi ? ", or a build with -DNNRT_COMM_WITH_MPI to pass it over mpirun's MPI" : "");
  if (c->rank == 0) return nnrt_comm_rendezvous_write(l->rendezvous, id, sizeof *id, err);
  return nnrt_comm_rendezvous_read(l->rendezvous, id, sizeof *id, c->rank, c->timeout_s, err);
}

static nnrt_status barrier_setup(nnrt_comm *c, nnrt_error *err) {
  nccl_state *m = c->impl;
  cudaError_t e = cudaSetDevice(m->device);
  if (e != cudaSuccess) return cuda_fail(c, e, "cudaSetDevice", err);
  if ((e = cudaStreamCreateWithFlags(&m->own, cudaStreamNonBlocking)) != cudaSuccess)
    return cuda_fail(c, e, "cudaStreamCreate", err);
  if ((e = cudaMalloc((void **)&m->flag, sizeof(int))) != cudaSuccess) return cuda_fail(c, e, "cudaMalloc", err);
  if ((e = cudaMemset(m->flag, 0, sizeof(int))) != cudaSuccess) return cuda_fail(c, e, "cudaMemset", err);
  return NNRT_OK;
}

static nnrt_status setup(nnrt_comm *c, nnrt_error *err) {
  nccl_state *m = c->impl;
  nnrt_comm_launch l;
  nnrt_status s = nnrt_comm_launch_read(&l, err);
  if (s != NNRT_OK) return s;
  c->timeout_s = l.timeout_s;
  /* NCCL 2.22+ connects peers at a communicator's first collective; on the
   * blocking child that call would then wait, unpolled, for a peer that
   * died (measured: 300 s on 2 H200s for a 5 s timeout). Connecting at init
   * and split keeps every wait on a peer inside a polled call. Set before
   * any NCCL call (rank 0's ncclGetUniqueId reads NCCL's settings, which
   * NCCL then keeps for the process), so every rank reads the same value:
   * the environment's NCCL_RUNTIME_CONNECT wins over this one, and this one
   * over an nccl.conf file's. A process that made an NCCL communicator
   * before this one keeps the value it read then. */
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  s = share_id(c, &l, &id, err);
  if (s != NNRT_OK) return s;

  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return cuda_fail(c, e, "cudaGetDeviceCount", err);
  if (n < 1) return nnrt_errorf(err, NNRT_E_DEVICE, "rank %d of %d: no CUDA device", c->rank, c->world);
  m->device = c->local_rank % n;
  s = barrier_setup(c, err);
  if (s != NNRT_OK) return s;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&m->comm, c->world, id, c->rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    m->comm = NULL;  /* nothing to abort */
    return nnrt_errorf(err, NNRT_E_COMM, "rank %d of %d: ncclCommInitRankConfig failed: %s: %s", c->rank, c->world,
                       ncclGetErrorString(r), ncclGetLastError(NULL));
  }
  char what[64];
  snprintf(what, sizeof what, "joining the NCCL communicator (GPU %d)", m->device);
  s = settle(c, r, what, err);
  if (s != NNRT_OK) return s;
  return blocking_child(c, err);
}

/* setup, then rank 0 removes the rendezvous file it wrote: once all joined
 * every rank has read it, and after a failure a stale file would only
 * mislead the next job. */
static nnrt_status setup_and_tidy(nnrt_comm *c, nnrt_error *err) {
  nnrt_status s = setup(c, err);
  const char *path = getenv("NNC_RENDEZVOUS");
  bool used_file = c->rank == 0 && c->world > 1 && path && *path;
#ifdef NNRT_COMM_WITH_MPI
  nnrt_comm_launch l;
  nnrt_error ignored;
  if (nnrt_comm_launch_read(&l, &ignored) == NNRT_OK && l.from_mpi) used_file = false;
#endif
  if (used_file) remove(path);
  return s;
}

nnrt_status nnrt_comm_nccl_create(nnrt_comm **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_comm_nccl_create: out is NULL");
  *out = NULL;
  nnrt_comm *c = calloc(1, sizeof *c);
  nccl_state *m = calloc(1, sizeof *m);
  if (!c || !m) {
    free(c);
    free(m);
    return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_comm_nccl_create: out of memory");
  }
  c->ops = &nccl_ops;
  c->impl = m;
  c->world = 1;
  nnrt_status s = setup_and_tidy(c, err);
  if (s != NNRT_OK) {
    /* a peer that failed us may never reach MPI_Finalize: do not wait */
    if (s == NNRT_E_COMM) m->broken = true;
    nccl_destroy(c);
    return s;
  }
  *out = c;
  return NNRT_OK;
}
