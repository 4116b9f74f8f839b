/* runtime/nnrt_comm.h — the communicator: collectives between the ranks of a
 * parallel model, over an existing engine (MPI between CPU processes, NCCL
 * between GPUs), behind one interface.
 *
 * Launching is never ours: a rank learns its place from mpirun (MPI_Init) or
 * from a scheduler's environment (NNC_RANK, NNC_WORLD_SIZE, NNC_LOCAL_RANK,
 * NNC_RENDEZVOUS: a file path every rank can see, where rank 0 leaves what the
 * others need to join). Every collective either completes or returns a
 * status with a message within the communicator's timeout (NNC_COMM_TIMEOUT
 * seconds, default 300): a rank that died or never came makes the others
 * fail, not hang.
 *
 * The generated code calls the inline wrappers below; one backend file each
 * (comm.c: the world of one, comm_mpi.c, cuda/comm_nccl.c) fills
 * nnrt_comm_ops. comm.c and comm_rendezvous.c are plain C11 like the rest of
 * libnnrt; comm_mpi.c needs mpi.h (build it with mpicc and link -lmpi, or
 * meson's nnrt_mpi_dep); cuda/comm_nccl.c needs cuda_runtime.h and nccl.h
 * (link -lnccl -lcudart; add -DNNRT_COMM_WITH_MPI and mpicc to take the
 * unique id over MPI under mpirun).
 *
 * Bytes counted in nnrt_comm.bytes, per call: all_reduce and all_gather
 * count * size, reduce_scatter world * count * size, broadcast count * size
 * on the root and 0 elsewhere: the payload handed to the engine, whatever
 * algorithm it runs. nnrt_comm.bus_bytes counts what nccl-tests calls the
 * bus traffic, so that bus_bytes over a collective's time is its bus
 * bandwidth, comparable across world sizes: S the payload, n the world,
 * all_reduce S * 2(n-1)/n, all_gather and reduce_scatter (n * count * size)
 * * (n-1)/n, broadcast S on every rank. wait_s: seconds this rank spent
 * waiting in collectives that block (MPI's); NCCL's only enqueue, 0. */
#ifndef NNRT_COMM_H
#define NNRT_COMM_H

#include "nnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nnrt_reduce {
  NNRT_REDUCE_SUM,
  NNRT_REDUCE_MAX
} nnrt_reduce;

typedef struct nnrt_comm nnrt_comm;

/* stream: a cudaStream_t for NCCL (the collective is enqueued on it), NULL
 * for MPI (the call returns when the data is in place). Counts are elements;
 * send may equal recv (in place) for all_reduce. */
typedef struct nnrt_comm_ops {
  const char *name;   /* "self", "mpi", "nccl" */
  nnrt_status (*all_reduce)(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                            nnrt_reduce op, void *stream, nnrt_error *err);
  /* recv holds world * count elements: rank r's count at r * count */
  nnrt_status (*all_gather)(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                            void *stream, nnrt_error *err);
  /* send holds world * count elements; rank r receives the reduction of
   * every rank's block r */
  nnrt_status (*reduce_scatter)(nnrt_comm *c, const void *send, void *recv, size_t count, nnrt_dtype t,
                                nnrt_reduce op, void *stream, nnrt_error *err);
  nnrt_status (*broadcast)(nnrt_comm *c, void *buf, size_t count, nnrt_dtype t, int root, void *stream,
                           nnrt_error *err);
  nnrt_status (*barrier)(nnrt_comm *c, nnrt_error *err);
  /* every rank of c calls it: the ranks that give the same color form *out,
   * ranked by key (ties by their rank in c) */
  nnrt_status (*split)(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err);
  void (*destroy)(nnrt_comm *c);
} nnrt_comm_ops;

struct nnrt_comm {
  const nnrt_comm_ops *ops;
  int rank, world;          /* this process's rank in 0..world-1 */
  int local_rank;           /* its rank among the processes of its machine: the GPU it uses */
  double timeout_s;         /* a collective that has not completed by then fails */
  uint64_t bytes;           /* bytes this rank sent through collectives so far (the harness's bus figures) */
  double bus_bytes;         /* their bus traffic (above) */
  double wait_s;            /* seconds spent in blocking collectives */
  void *impl;               /* the backend's state */
};

/* A communicator of one rank (world 1): collectives are copies. */
nnrt_status nnrt_comm_self_create(nnrt_comm **out, nnrt_error *err);
/* Over MPI_COMM_WORLD (MPI_Init'ed here when the program has not): rank and
 * world from mpirun. Errors return (MPI_ERRORS_RETURN); collectives are
 * non-blocking calls waited on with the timeout. Destroy finalizes MPI when
 * this call initialized it. Defined in comm_mpi.c (built with mpicc). */
nnrt_status nnrt_comm_mpi_create(nnrt_comm **out, nnrt_error *err);
/* Over NCCL, one GPU per rank (cudaSetDevice(local_rank)): ranks from MPI
 * when launched by mpirun (the unique id broadcast over MPI), else from
 * NNC_RANK / NNC_WORLD_SIZE / NNC_RENDEZVOUS. Defined in cuda/comm_nccl.c. */
nnrt_status nnrt_comm_nccl_create(nnrt_comm **out, nnrt_error *err);
/* Destroys any communicator; NULL is ignored. After a failed collective
 * (timeout, a dead rank) the engine's state is abandoned rather than freed:
 * the program should report the error and exit non-zero. */
void nnrt_comm_destroy(nnrt_comm *c);

/* NCCL only: waits until the work queued on stream (a cudaStream_t) is done,
 * watching NCCL's asynchronous errors against the communicator's timeout: use
 * it instead of cudaStreamSynchronize after collectives, so a dead rank fails
 * the call (the communicator is aborted) instead of hanging it. */
nnrt_status nnrt_comm_nccl_wait(nnrt_comm *c, void *stream, nnrt_error *err);

/* The launch as the environment describes it: from NNC_RANK/NNC_WORLD_SIZE
 * (and NNC_LOCAL_RANK, NNC_RENDEZVOUS), else from Open MPI's or MPICH's
 * variables (OMPI_COMM_WORLD_RANK, PMI_RANK, ...), else rank 0 of 1. */
typedef struct nnrt_comm_launch {
  int rank, world, local_rank;
  bool from_mpi;             /* mpirun's variables were found */
  char rendezvous[512];      /* NNC_RENDEZVOUS, "" when unset */
  double timeout_s;          /* NNC_COMM_TIMEOUT, default 300 */
} nnrt_comm_launch;
/* NNC_RANK and NNC_WORLD_SIZE go together (one without the other is an
 * error); NNC_LOCAL_RANK defaults to the rank (one machine). A value that is
 * not a number, a world below 1, a rank outside 0..world-1 or a timeout not
 * above 0 is NNRT_E_ARG naming the variable and its value. */
nnrt_status nnrt_comm_launch_read(nnrt_comm_launch *out, nnrt_error *err);

#define NNRT_COMM_DEFAULT_TIMEOUT_S 300.0

/* The rendezvous file (comm_rendezvous.c): how rank 0 hands the others the
 * bytes they need to join (NCCL's unique id) without MPI. Rank 0 writes
 * path.tmp and renames it to path, so a reader never sees half a file. The
 * others poll until it exists and read exactly `bytes` bytes; after
 * timeout_s seconds it is NNRT_E_COMM ("rank 3: no rendezvous file /x/y
 * after 300 s: did rank 0 start?"). Use a path of this job's own (a stale
 * file from an earlier job would be read as this one's); comm_nccl.c removes
 * it once every rank has joined. */
nnrt_status nnrt_comm_rendezvous_write(const char *path, const void *data, size_t bytes,
                                       nnrt_error *err);
nnrt_status nnrt_comm_rendezvous_read(const char *path, void *data, size_t bytes, int rank,
                                      double timeout_s, nnrt_error *err);

/* For the backend files (comm.c): NNRT_E_ARG unless c is set, t is a valid
 * dtype, a buffer of count > 0 elements is not NULL and count * elems
 * elements fit in a size_t; what names the collective in the message. */
nnrt_status nnrt_comm_check(const nnrt_comm *c, const char *what, const void *a, const void *b,
                            size_t count, size_t elems, nnrt_dtype t, nnrt_error *err);
/* For the backend files: counts one collective of `payload` bytes (count *
 * size; a broadcast's on every rank) in bytes and bus_bytes as above. */
typedef enum nnrt_collective { NNRT_ALL_REDUCE, NNRT_ALL_GATHER, NNRT_REDUCE_SCATTER, NNRT_BROADCAST } nnrt_collective;
void nnrt_comm_count(nnrt_comm *c, nnrt_collective kind, size_t payload, bool root);
/* NNRT_E_ARG unless op is SUM or MAX. */
nnrt_status nnrt_comm_check_op(const nnrt_comm *c, const char *what, nnrt_reduce op, nnrt_error *err);
/* NNRT_E_ARG unless root is a rank of c (a broadcast's). */
nnrt_status nnrt_comm_check_root(const nnrt_comm *c, const char *what, int root, nnrt_error *err);
const char *nnrt_reduce_name(nnrt_reduce op);  /* "sum", "max" */

static inline nnrt_status nnrt_comm_all_reduce(nnrt_comm *c, const void *send, void *recv, size_t count,
                                               nnrt_dtype t, nnrt_reduce op, void *stream, nnrt_error *err) {
  return c->ops->all_reduce(c, send, recv, count, t, op, stream, err);
}
static inline nnrt_status nnrt_comm_all_gather(nnrt_comm *c, const void *send, void *recv, size_t count,
                                               nnrt_dtype t, void *stream, nnrt_error *err) {
  return c->ops->all_gather(c, send, recv, count, t, stream, err);
}
static inline nnrt_status nnrt_comm_reduce_scatter(nnrt_comm *c, const void *send, void *recv, size_t count,
                                                   nnrt_dtype t, nnrt_reduce op, void *stream, nnrt_error *err) {
  return c->ops->reduce_scatter(c, send, recv, count, t, op, stream, err);
}
static inline nnrt_status nnrt_comm_broadcast(nnrt_comm *c, void *buf, size_t count, nnrt_dtype t, int root,
                                              void *stream, nnrt_error *err) {
  return c->ops->broadcast(c, buf, count, t, root, stream, err);
}
static inline nnrt_status nnrt_comm_barrier(nnrt_comm *c, nnrt_error *err) {
  return c->ops->barrier(c, err);
}
/* A sub-communicator (MPI_Comm_split; ncclCommSplit): every rank of c calls
 * it with its color (>= 0) and key; those with equal colors form *out, whose
 * ranks follow the keys. A model of --parallel=tp:N,dp:M splits the world
 * into its tp groups (color rank / N) and its dp groups (color rank % N).
 * Each rank first waits for all of c against the timeout (a rank that died
 * fails it, no hang). *out counts its own bytes; it keeps c's local rank,
 * GPU and timeout; destroy it before c. */
static inline nnrt_status nnrt_comm_split(nnrt_comm *c, int color, int key, nnrt_comm **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "split: out is NULL");
  *out = NULL;
  if (!c || !c->ops) return nnrt_errorf(err, NNRT_E_ARG, "split: no communicator (NULL)");
  if (color < 0)
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: split: expected a color >= 0, found %d", c->rank, color);
  return c->ops->split(c, color, key, out, err);
}

#ifdef __cplusplus
}
#endif

#endif
