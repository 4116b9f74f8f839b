/* tests/gpu/test_comm_nccl.c — the NCCL communicator on GPUs, one process per
 * rank (tests/gpu/run_comm_nccl.sh starts them: alone, through
 * NNC_RENDEZVOUS, or under mpirun). Every rank checks all_reduce (sum and
 * max, in and out of place), all_gather, reduce_scatter and broadcast in f32
 * and bf16 at odd counts on device buffers, against values each rank
 * computes alone; then rank 0 prints all_reduce's bus bandwidth at 1, 16,
 * 64 and 256 MB (the median of 20 after warm-up, CUDA events).
 *
 *   test_comm_nccl           the checks and the figures
 *   test_comm_nccl timeout   rank 1 joins, then sleeps past NNC_COMM_TIMEOUT:
 *                            rank 0's all_reduce must fail in time
 *                            ("PASS timeout") instead of hanging */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnrt_comm.h"

static int failures, my_rank;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      if (++failures <= 20) {                                              \
        fprintf(stderr, "rank %d: FAIL line %d: ", my_rank, __LINE__);     \
        fprintf(stderr, __VA_ARGS__);                                      \
        fputc('\n', stderr);                                               \
      }                                                                    \
    }                                                                      \
  } while (0)

#define CUDA(x)                                                                         \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s: %s\n", my_rank, #x, cudaGetErrorString(e_));        \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

static double value(int r, size_t i) { return (double)((long)((i * 7 + (size_t)r * 3) % 13) - 6); }

static double get(nnrt_dtype t, const void *p, size_t i) {
  return t == NNRT_F32 ? ((const float *)p)[i] : nnrt_bf16_to_f32(((const uint16_t *)p)[i]);
}
static void put(nnrt_dtype t, void *p, size_t i, double v) {
  if (t == NNRT_F32) ((float *)p)[i] = (float)v;
  else ((uint16_t *)p)[i] = nnrt_f32_to_bf16((float)v);
}
static double reduce(nnrt_reduce op, int world, size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < world; r++) acc = op == NNRT_REDUCE_SUM ? acc + value(r, i) : (value(r, i) > acc ? value(r, i) : acc);
  return acc;
}

typedef struct bufs {
  char *host, *dev_a, *dev_b;  /* each big enough for world * count elements */
} bufs;

static void upload(nnrt_comm *c, nnrt_dtype t, bufs *b, void *dev, size_t n, int rank) {
  for (size_t i = 0; i < n; i++) put(t, b->host, i, value(rank, i));
  CUDA(cudaMemcpy(dev, b->host, n * nnrt_dtype_size(t), cudaMemcpyHostToDevice));
  (void)c;
}

/* Waits for the stream, downloads n elements and compares them with want(i). */
#define EXPECT(what, dev, n, want)                                                              \
  do {                                                                                          \
    nnrt_error e_ = {0};                                                                        \
    nnrt_status s_ = nnrt_comm_nccl_wait(c, stream, &e_);                                       \
    CHECK(s_ == NNRT_OK, "%s: wait: %s", what, e_.msg);                                        \
    CUDA(cudaMemcpy(b->host, dev, (n) * nnrt_dtype_size(t), cudaMemcpyDeviceToHost));           \
    for (size_t i = 0; i < (n); i++) {                                                          \
      double w_ = (want), g_ = get(t, b->host, i);                                              \
      if (w_ != g_) {                                                                           \
        CHECK(0, "%s: element %zu of %zu: expected %g, found %g", what, i, (size_t)(n), w_, g_); \
        break;                                                                                  \
      }                                                                                         \
    }                                                                                           \
  } while (0)

/* The uploads and the poison go through the legacy default stream, which a
 * non-blocking stream does not wait for: finish them before a collective. */
static void ready(void) { CUDA(cudaDeviceSynchronize()); }

static void call_ok(nnrt_status s, const nnrt_error *e, const char *what) {
  CHECK(s == NNRT_OK, "%s: %s: %s", what, nnrt_status_name(s), e->msg);
}

static void check_all(nnrt_comm *c, cudaStream_t stream, bufs *b, nnrt_dtype t, size_t n) {
  size_t sz = nnrt_dtype_size(t), w = (size_t)c->world, r = (size_t)c->rank;
  nnrt_error e = {0};
  char what[96];
  for (int op = 0; op < 2; op++) {
    snprintf(what, sizeof what, "all_reduce %s %s n=%zu", nnrt_reduce_name((nnrt_reduce)op), nnrt_dtype_name(t), n);
    upload(c, t, b, b->dev_a, n, c->rank);
    CUDA(cudaMemset(b->dev_b, 0x7F, n * sz));
    ready();
    call_ok(nnrt_comm_all_reduce(c, b->dev_a, b->dev_b, n, t, (nnrt_reduce)op, stream, &e), &e, what);
    EXPECT(what, b->dev_b, n, reduce((nnrt_reduce)op, c->world, i));
    /* in place */
    ready();
    call_ok(nnrt_comm_all_reduce(c, b->dev_a, b->dev_a, n, t, (nnrt_reduce)op, stream, &e), &e, what);
    EXPECT(what, b->dev_a, n, reduce((nnrt_reduce)op, c->world, i));

    snprintf(what, sizeof what, "reduce_scatter %s %s n=%zu", nnrt_reduce_name((nnrt_reduce)op), nnrt_dtype_name(t), n);
    upload(c, t, b, b->dev_a, w * n, c->rank);
    CUDA(cudaMemset(b->dev_b, 0x7F, n * sz));
    ready();
    call_ok(nnrt_comm_reduce_scatter(c, b->dev_a, b->dev_b, n, t, (nnrt_reduce)op, stream, &e), &e, what);
    EXPECT(what, b->dev_b, n, reduce((nnrt_reduce)op, c->world, r * n + i));
  }
  snprintf(what, sizeof what, "all_gather %s n=%zu", nnrt_dtype_name(t), n);
  upload(c, t, b, b->dev_a, n, c->rank);
  CUDA(cudaMemset(b->dev_b, 0x7F, w * n * sz));
  ready();
  call_ok(nnrt_comm_all_gather(c, b->dev_a, b->dev_b, n, t, stream, &e), &e, what);
  EXPECT(what, b->dev_b, w * n, value((int)(i / n), i % n));

  int root = c->world - 1;
  snprintf(what, sizeof what, "broadcast %s n=%zu from %d", nnrt_dtype_name(t), n, root);
  if (c->rank == root) upload(c, t, b, b->dev_a, n, root);
  else CUDA(cudaMemset(b->dev_a, 0x7F, n * sz));
  ready();
  call_ok(nnrt_comm_broadcast(c, b->dev_a, n, t, root, stream, &e), &e, what);
  EXPECT(what, b->dev_a, n, value(root, i));
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static void bandwidth(nnrt_comm *c, cudaStream_t stream) {
  const size_t mbs[] = {1, 16, 64, 256};
  void *buf = NULL;
  CUDA(cudaMalloc(&buf, 256u << 20));
  CUDA(cudaMemset(buf, 0, 256u << 20));
  cudaEvent_t ev[2];
  CUDA(cudaEventCreate(&ev[0]));
  CUDA(cudaEventCreate(&ev[1]));
  nnrt_error e = {0};
  if (c->rank == 0) printf("all_reduce f32 sum, %d rank(s): size, median time, algbw, busbw\n", c->world);
  for (size_t k = 0; k < 4; k++) {
    size_t bytes = mbs[k] << 20, n = bytes / 4;
    float ms[20];
    for (int it = -5; it < 20; it++) {
      CUDA(cudaEventRecord(ev[0], stream));
      nnrt_status s = nnrt_comm_all_reduce(c, buf, buf, n, NNRT_F32, NNRT_REDUCE_SUM, stream, &e);
      CUDA(cudaEventRecord(ev[1], stream));
      if (s == NNRT_OK) s = nnrt_comm_nccl_wait(c, stream, &e);
      if (s != NNRT_OK) {
        CHECK(0, "bandwidth at %zu MB: %s", mbs[k], e.msg);
        return;
      }
      if (it >= 0) CUDA(cudaEventElapsedTime(&ms[it], ev[0], ev[1]));
    }
    qsort(ms, 20, sizeof *ms, cmp_float);
    double t = (ms[9] + ms[10]) / 2 * 1e-3;
    double alg = (double)bytes / t / 1e9, bus = alg * 2.0 * (c->world - 1) / c->world;
    if (c->rank == 0)
      printf("  %4zu MB  %9.1f us  algbw %7.1f GB/s  busbw %7.1f GB/s\n", mbs[k], t * 1e6, alg, bus);
  }
  fflush(stdout);
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  cudaFree(buf);
}

static int run_timeout(nnrt_comm *c, cudaStream_t stream) {
  if (c->world < 2) return 0;
  if (c->rank == 1) {
    struct timespec ts = {(time_t)c->timeout_s + 3, 0};
    nanosleep(&ts, NULL);
    return 0;  /* leaves without destroy: a rank that vanished */
  }
  if (c->rank != 0) return 0;
  void *buf = NULL;
  CUDA(cudaMalloc(&buf, 4096 * 4));
  nnrt_error e = {0};
  uint64_t t0 = nnrt_now_ns();
  nnrt_status s = nnrt_comm_all_reduce(c, buf, buf, 4096, NNRT_F32, NNRT_REDUCE_SUM, stream, &e);
  if (s == NNRT_OK) s = nnrt_comm_nccl_wait(c, stream, &e);
  double took = (double)(nnrt_now_ns() - t0) * 1e-9;
  printf("rank 0: after %.2f s: %s: %s\n", took, nnrt_status_name(s), e.msg);
  CHECK(s == NNRT_E_COMM, "expected NNRT_E_COMM, found %s", nnrt_status_name(s));
  CHECK(took < c->timeout_s + 5, "took %.2f s for a timeout of %g s", took, c->timeout_s);
  s = nnrt_comm_barrier(c, &e);
  CHECK(s == NNRT_E_COMM && strstr(e.msg, "failed earlier"), "after the failure: %s", e.msg);
  if (!failures) printf("PASS timeout\n");
  fflush(stdout);
  return failures;
}

/* Sub-communicators (tp and dp groups): the world split by rank parity,
 * each group's collectives checked with its own ranks, a barrier on it, a
 * split of a split refused, then the group destroyed before the world. */
static void check_split(nnrt_comm *c, cudaStream_t stream, bufs *b) {
  nnrt_comm *sub = NULL;
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_split(c, c->rank % 2, c->rank, &sub, &e);
  call_ok(s, &e, "split");
  if (s != NNRT_OK) return;
  int want_world = (c->world + 1 - c->rank % 2) / 2;
  CHECK(sub->world == want_world && sub->rank == c->rank / 2, "split: rank %d of %d, expected %d of %d", sub->rank,
        sub->world, c->rank / 2, want_world);
  int before = failures;
  check_all(sub, stream, b, NNRT_F32, 1031);
  check_all(sub, stream, b, NNRT_BF16, 3);
  s = nnrt_comm_barrier(sub, &e);
  call_ok(s, &e, "split barrier");
  nnrt_comm *again = NULL;
  s = nnrt_comm_split(sub, 0, 0, &again, &e);
  CHECK(s == NNRT_E_ARG && !again, "a split of a split: %s (%s), expected NNRT_E_ARG", nnrt_status_name(s), e.msg);
  nnrt_comm_destroy(sub);
  printf("rank %d: split into %d group(s): %s\n", c->rank, c->world > 1 ? 2 : 1, failures == before ? "ok" : "FAILED");
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "all";
  nnrt_comm *c = NULL;
  nnrt_error e = {0};
  nnrt_status s = nnrt_comm_nccl_create(&c, &e);
  if (s != NNRT_OK) {
    fprintf(stderr, "nnrt_comm_nccl_create: %s: %s\n", nnrt_status_name(s), e.msg);
    return 1;
  }
  my_rank = c->rank;
  int dev = -1;
  cudaGetDevice(&dev);
  printf("rank %d of %d (local %d): GPU %d, timeout %g s, mode %s\n", c->rank, c->world, c->local_rank, dev,
         c->timeout_s, mode);
  fflush(stdout);
  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (!strcmp(mode, "timeout")) {
    int f = run_timeout(c, stream);
    if (c->rank != 1) nnrt_comm_destroy(c);
    return f ? 1 : 0;
  }
  const size_t counts[] = {1, 3, 1031, ((size_t)1 << 20) + 3};
  bufs b;
  size_t most = (size_t)c->world * counts[3] * 4;
  b.host = malloc(most);
  CUDA(cudaMalloc((void **)&b.dev_a, most));
  CUDA(cudaMalloc((void **)&b.dev_b, most));
  const nnrt_dtype types[] = {NNRT_F32, NNRT_BF16};
  for (int ti = 0; ti < 2; ti++)
    for (int ci = 0; ci < 4; ci++) check_all(c, stream, &b, types[ti], counts[ci]);
  check_split(c, stream, &b);
  s = nnrt_comm_barrier(c, &e);
  call_ok(s, &e, "barrier");
  printf("rank %d: checks: %d failure(s), %llu bytes sent\n", c->rank, failures, (unsigned long long)c->bytes);
  fflush(stdout);
  if (!failures) bandwidth(c, stream);
  cudaFree(b.dev_a);
  cudaFree(b.dev_b);
  free(b.host);
  cudaStreamDestroy(stream);
  nnrt_comm_destroy(c);
  printf("rank %d: %s\n", my_rank, failures ? "FAILED" : "PASS");
  return failures ? 1 : 0;
}
