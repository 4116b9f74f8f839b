/* An experiment for issue 16's B=64 decode goal: does a decode step of 64
 * sequences run faster as two half-batches whose kernels overlap (one
 * half's attention streaming its cache while the other half's GEMMs wait
 * on latency) than as one batch? Two models of 32 sequences each (their
 * own weights and caches: the weights are read twice) captured into one
 * CUDA graph on two streams, beside one model of 64, same process.
 *
 * Built inside a --generate GPT-2 folder (bench/gpu_generate.sh's
 * gpt2_full_bf16, or `nnc models/gpt2.lua --generate -D batch=64 -D ctx=640
 * --target=cuda-sm90a --precision=bf16 -o F`) with the folder's own rules:
 *   make -C F -f Makefile -f $PWD/bench/gpu_decode_lanes.mk LANES_SRC=$PWD/bench/gpu_decode_lanes.c decode_lanes
 * Prints the median step (ms) of each arrangement over RUNS replays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "bench_gpt2.c"

#define S_LEN 544
#define RUNS 200

typedef struct lane {
  gpt2_model *m;
  gpt2_dims d;
  gpt2_inputs in;
  gpt2_outputs out;
} lane;

static int check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

static int make_lane(lane *l, int64_t b) {
  gpt2_options o;
  gpt2_options_default(&o);
  o.max_B = b;
  o.max_T = 1;
  o.max_S = S_LEN;
  if (gpt2_create(&o, &l->m)) return fprintf(stderr, "create: %s\n", gpt2_last_error(NULL)), 1;
  float **w = nnc_bench_weights(&gpt2_bench_model, l->m, NULL, 0);
  if (!w) return 1;
  for (int i = 0; i < gpt2_bench_model.nparams; i++) free(w[i]);
  free(w);
  l->d.B = b;
  l->d.T = 1;
  l->d.S = S_LEN;
  int32_t *ids = malloc(b * 4), *pos = malloc(b * 4), *mask = malloc(b * S_LEN * 4), *last = calloc(b, 4);
  for (int64_t i = 0; i < b; i++) ids[i] = (int32_t)((i * 7919) % 50000), pos[i] = S_LEN - 1;
  for (int64_t i = 0; i < b * S_LEN; i++) mask[i] = 1;
  void *p[5];
  size_t n[5] = {b * 4, b * 4, b * S_LEN * 4, b * 4, b * 50257 * 4};
  for (int i = 0; i < 5; i++)
    if (check(cudaMalloc(&p[i], n[i]), "cudaMalloc")) return 1;
  cudaMemcpy(p[0], ids, n[0], cudaMemcpyHostToDevice);
  cudaMemcpy(p[1], pos, n[1], cudaMemcpyHostToDevice);
  cudaMemcpy(p[2], mask, n[2], cudaMemcpyHostToDevice);
  cudaMemcpy(p[3], last, n[3], cudaMemcpyHostToDevice);
  free(ids), free(pos), free(mask), free(last);
  l->in.ids = p[0], l->in.pos = p[1], l->in.mask = p[2], l->in.last = p[3];
  l->out.logits = p[4];
  gpt2_cuda_graphs(l->m, 0);
  /* a first run outside any capture: the model's one-time work */
  if (gpt2_run_device(l->m, &l->d, &l->in, &l->out, NULL) || gpt2_sync(l->m))
    return fprintf(stderr, "run: %s\n", gpt2_last_error(l->m)), 1;
  return 0;
}

/* One graph: the lanes' steps, lane i on stream s[i], forked from and
 * joined into s[0]. */
static int capture(lane *l, int n, cudaStream_t *s, cudaGraphExec_t *exec) {
  cudaEvent_t fork, join[4];
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaGraph_t g;
  if (check(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal), "begin capture")) return 1;
  cudaEventRecord(fork, s[0]);
  for (int i = 1; i < n; i++) cudaStreamWaitEvent(s[i], fork, 0);
  for (int i = 0; i < n; i++)
    if (gpt2_run_device(l[i].m, &l[i].d, &l[i].in, &l[i].out, s[i]))
      return fprintf(stderr, "run: %s\n", gpt2_last_error(l[i].m)), 1;
  for (int i = 1; i < n; i++) {
    cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming);
    cudaEventRecord(join[i], s[i]);
    cudaStreamWaitEvent(s[0], join[i], 0);
  }
  if (check(cudaStreamEndCapture(s[0], &g), "end capture")) return 1;
  if (check(cudaGraphInstantiate(exec, g, 0), "instantiate")) return 1;
  cudaGraphDestroy(g);
  return 0;
}

static int cmp(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float time_graph(cudaGraphExec_t exec, cudaStream_t s) {
  static float t[RUNS];
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 20; i++) cudaGraphLaunch(exec, s);
  for (int i = 0; i < RUNS; i++) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&t[i], a, b);
  }
  qsort(t, RUNS, sizeof *t, cmp);
  return t[RUNS / 2];
}

int main(void) {
  lane one, half[2], quarter[4];
  if (make_lane(&one, 64)) return 1;
  for (int i = 0; i < 2; i++)
    if (make_lane(&half[i], 32)) return 1;
  for (int i = 0; i < 4; i++)
    if (make_lane(&quarter[i], 16)) return 1;
  int lo, hi;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  cudaStream_t s[4], sp[2];
  for (int i = 0; i < 4; i++) cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
  cudaStreamCreateWithPriority(&sp[0], cudaStreamNonBlocking, hi);
  cudaStreamCreateWithPriority(&sp[1], cudaStreamNonBlocking, lo);
  cudaGraphExec_t g_one, g_two, g_seq, g_prio, g_32, g_four;
  if (capture(&one, 1, s, &g_one) || capture(half, 2, s, &g_two) || capture(half, 1, s, &g_32) ||
      capture(half, 2, sp, &g_prio) || capture(quarter, 4, s, &g_four))
    return 1;
  /* the two halves one after the other on one stream */
  cudaStream_t same[2] = {s[0], s[0]};
  if (capture(half, 2, same, &g_seq)) return 1;
  for (int round = 0; round < 3; round++) {
    printf("round %d: B=64 one model %.4f ms | two B=32 overlapped %.4f | two B=32, priorities %.4f | "
           "two B=32 in sequence %.4f | one B=32 %.4f | four B=16 overlapped %.4f\n",
           round, time_graph(g_one, s[0]), time_graph(g_two, s[0]), time_graph(g_prio, sp[0]),
           time_graph(g_seq, s[0]), time_graph(g_32, s[0]), time_graph(g_four, s[0]));
  }
  return 0;
}
