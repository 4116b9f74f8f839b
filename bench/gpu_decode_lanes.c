/* An experiment for issue 16's B=64 decode goal: does a decode step of 64
 * sequences run faster as n lanes of 64/n sequences whose kernels overlap
 * (one lane's attention streaming its cache while the other lanes' GEMM
 * chains wait on latency) than as one batch?
 *
 * Sessions 23 and 36 measured lanes as separate models with their own
 * weights (read n times a step), free-running: their attentions ran at the
 * same time, so the chains did not hide under them. Here the lanes share
 * the first model's weights, and in the "staggered" arrangements every
 * attention waits for the previous one (lane i's layer L after lane i-1's
 * layer L, lane 0's after lane n-1's layer L-1: edges added to the
 * captured graph), so the attentions take turns at the memory while the
 * other lanes' chains run; "two at a time" lets two lanes' attentions run
 * together (lane i's after lane i-2's). "prio" puts every
 * kernel but the attentions at the device's greatest priority (graph node
 * priorities), so a chain's kernels take SMs as the attention's blocks
 * leave. "no head" skips the last three kernels (the last layer's view,
 * the last rows' gather and the LM head): the compiler would run one head
 * over all lanes' rows. "attn NW:BLOCKS" launches the decode attention with
 * blocks of NW warps, BLOCKS of them looping over the rows (0: a block a
 * row).
 *
 * Built inside a --generate GPT-2 folder whose gpt2.cu and
 * kernels/attention_decode.cuh bench/gpu_decode_lanes.sh has patched (a
 * hook around every kernel of forward, two helpers, $LANES_ATTN):
 *   bash bench/gpu_decode_lanes.sh generate   # here
 *   bash bench/gpu_decode_lanes.sh run        # on the GPU machine
 *   SKINNY=1 bash bench/gpu_decode_lanes.sh run   # every layer GEMM on the skinny GEMM
 * Checks each lanes arrangement's logits against the one batch's (caches
 * zeroed, so both see the same keys), then prints the median step (ms) of
 * each arrangement over RUNS replays, three rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime_api.h>

#include "bench_gpt2.c"

#define S_LEN 544
#define B_ALL 64
#define RUNS 200
#define VOCAB 50257
#define MAX_LANES 4
#define MAX_LAYERS 12
#define MAX_NODES 4096

/* the patched gpt2.cu's helpers */
extern int (*gpt2_lane_hook)(gpt2_model *m, cudaStream_t s, int k, int after);
void gpt2_share_weights(gpt2_model *dst, const gpt2_model *src);
void gpt2_zero_arena(gpt2_model *m);

typedef struct lane {
  gpt2_model *m;
  gpt2_dims d;
  gpt2_inputs in;
  gpt2_outputs out;
} lane;

/* What the hook does in the capture under way. */
static struct {
  int n;                 /* lanes */
  gpt2_model *m[MAX_LANES];
  int skip_head;
  cudaGraphNode_t node[MAX_LANES][MAX_LAYERS];   /* the attentions' nodes */
} H;

static int layer_of[256];   /* kernel -> its layer if an attention, else -1 */
static int head_first;      /* the first kernel after the last layer's */

static int check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

/* The graph node of the kernel just captured on s. */
static cudaGraphNode_t last_node(cudaStream_t s) {
  enum cudaStreamCaptureStatus st;
  const cudaGraphNode_t *deps = NULL;
  size_t nd = 0;
#if CUDART_VERSION >= 13000
  cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &nd);
#else
  cudaStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &nd);
#endif
  return nd == 1 ? deps[0] : NULL;
}

static int hook(gpt2_model *m, cudaStream_t s, int k, int after) {
  int lane = 0;
  while (lane < H.n && H.m[lane] != m) lane++;
  if (lane == H.n) return 0;
  if (!after && H.skip_head && k >= head_first) return 1;
  if (after && layer_of[k] >= 0) H.node[lane][layer_of[k]] = last_node(s);
  return 0;
}

static void *dev_alloc(size_t n) {
  void *p = NULL;
  return check(cudaMalloc(&p, n), "cudaMalloc") ? NULL : p;
}

/* The one batch's inputs, on the device: lanes read slices of them. */
static gpt2_inputs all_in;

static int make_inputs(void) {
  int32_t *ids = malloc(B_ALL * 4), *pos = malloc(B_ALL * 4), *mask = malloc(B_ALL * S_LEN * 4),
          *last = calloc(B_ALL, 4);
  for (int i = 0; i < B_ALL; i++) ids[i] = (int32_t)((i * 7919) % 50000), pos[i] = S_LEN - 1;
  for (int i = 0; i < B_ALL * S_LEN; i++) mask[i] = 1;
  int32_t *d[4];
  size_t n[4] = {B_ALL * 4, B_ALL * 4, (size_t)B_ALL * S_LEN * 4, B_ALL * 4};
  const int32_t *h[4] = {ids, pos, mask, last};
  for (int i = 0; i < 4; i++) {
    if (!(d[i] = dev_alloc(n[i]))) return 1;
    cudaMemcpy(d[i], h[i], n[i], cudaMemcpyHostToDevice);
  }
  free(ids), free(pos), free(mask), free(last);
  all_in.ids = d[0], all_in.pos = d[1], all_in.mask = d[2], all_in.last = d[3];
  return 0;
}

/* A model of b sequences reading rows b0.. of the inputs and writing rows
 * b0.. of logits; weights from src when given (else random ones of its own). */
static int make_lane(lane *l, int64_t b, int64_t b0, float *logits, gpt2_model *src) {
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
  if (src) gpt2_share_weights(l->m, src);
  gpt2_zero_arena(l->m);
  l->d.B = b;
  l->d.T = 1;
  l->d.S = S_LEN;
  l->in.ids = all_in.ids + b0, l->in.pos = all_in.pos + b0;
  l->in.mask = all_in.mask + b0 * S_LEN, l->in.last = all_in.last + b0;
  l->out.logits = logits + b0 * VOCAB;
  gpt2_cuda_graphs(l->m, 0);
  /* a first run outside any capture: the model's one-time work */
  if (gpt2_run_device(l->m, &l->d, &l->in, &l->out, NULL) || gpt2_sync(l->m))
    return fprintf(stderr, "run: %s\n", gpt2_last_error(l->m)), 1;
  gpt2_zero_arena(l->m);
  return 0;
}

/* Lane i's attention of layer L after lane i - g's (lane n + i - g's of
 * layer L - 1 for the first g lanes). */
static int stagger(cudaGraph_t g, int n, int gap) {
  for (int i = 0; i < n; i++)
    for (int L = 0; L < MAX_LAYERS; L++) {
      cudaGraphNode_t from = i >= gap ? H.node[i - gap][L] : L > 0 ? H.node[n + i - gap][L - 1] : NULL, to = H.node[i][L];
      if (!to || (i >= gap || L > 0 ? !from : 0)) return fprintf(stderr, "stagger: an attention's node is missing\n"), 1;
      if (!from) continue;
#if CUDART_VERSION >= 13000
      if (check(cudaGraphAddDependencies(g, &from, &to, NULL, 1), "cudaGraphAddDependencies")) return 1;
#else
      if (check(cudaGraphAddDependencies(g, &from, &to, 1), "cudaGraphAddDependencies")) return 1;
#endif
    }
  return 0;
}

/* Every kernel node but the attentions at the greatest priority. */
static int prioritize(cudaGraph_t g, int lanes) {
  static cudaGraphNode_t nodes[MAX_NODES];
  size_t n = MAX_NODES;
  if (check(cudaGraphGetNodes(g, nodes, &n), "cudaGraphGetNodes")) return 1;
  int lo, hi, attn = 0;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType t;
    cudaGraphNodeGetType(nodes[i], &t);
    if (t != cudaGraphNodeTypeKernel) continue;
    int is_attn = 0;
    for (int j = 0; j < lanes; j++)
      for (int L = 0; L < MAX_LAYERS; L++) is_attn |= H.node[j][L] == nodes[i];
    union cudaLaunchAttributeValue v;
    memset(&v, 0, sizeof v);
    v.priority = is_attn ? lo : hi;
    attn += is_attn;
    if (check(cudaGraphKernelNodeSetAttribute(nodes[i], cudaLaunchAttributePriority, &v), "node priority")) return 1;
  }
  if (attn != lanes * MAX_LAYERS)
    return fprintf(stderr, "prioritize: %d attention nodes, expected %d\n", attn, lanes * MAX_LAYERS), 1;
  return 0;
}

/* One graph: the lanes' steps, lane i on stream s[i], forked from and
 * joined into s[0]. */
static int capture(lane *l, int n, cudaStream_t *s, int gap, int prio, int skip_head, cudaGraphExec_t *exec) {
  static cudaEvent_t fork, join[MAX_LANES];
  if (!fork) {
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    for (int i = 0; i < MAX_LANES; i++) cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming);
  }
  H.n = n, H.skip_head = skip_head;
  for (int i = 0; i < n; i++) H.m[i] = l[i].m;
  memset(H.node, 0, sizeof H.node);
  cudaGraph_t g;
  if (check(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal), "begin capture")) return 1;
  cudaEventRecord(fork, s[0]);
  for (int i = 1; i < n; i++) cudaStreamWaitEvent(s[i], fork, 0);
  /* each lane's whole step in turn; the attentions' order is added after */
  for (int i = 0; i < n; i++)
    if (gpt2_run_device(l[i].m, &l[i].d, &l[i].in, &l[i].out, s[i]))
      return fprintf(stderr, "run: %s\n", gpt2_last_error(l[i].m)), 1;
  for (int i = 1; i < n; i++) {
    cudaEventRecord(join[i], s[i]);
    cudaStreamWaitEvent(s[0], join[i], 0);
  }
  if (check(cudaStreamEndCapture(s[0], &g), "end capture")) return 1;
  if (gap && stagger(g, n, gap)) return 1;
  if (prio && prioritize(g, n)) return 1;
  if (check(cudaGraphInstantiateWithFlags(exec, g, prio ? cudaGraphInstantiateFlagUseNodePriority : 0), "instantiate"))
    return 1;
  cudaGraphDestroy(g);
  return 0;
}

static int cmp(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float time_graph(cudaGraphExec_t exec, cudaStream_t s) {
  static float t[RUNS];
  static cudaEvent_t a, b;
  if (!a) cudaEventCreate(&a), cudaEventCreate(&b);
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

/* max |a - b| / max |b| over the batch's logits */
static double rel_err(const float *a, const float *b) {
  static float ha[B_ALL * VOCAB], hb[B_ALL * VOCAB];
  cudaMemcpy(ha, a, sizeof ha, cudaMemcpyDeviceToHost);
  cudaMemcpy(hb, b, sizeof hb, cudaMemcpyDeviceToHost);
  double e = 0, r = 0;
  for (size_t i = 0; i < B_ALL * VOCAB; i++) {
    if (isnan(ha[i]) || isnan(hb[i])) return INFINITY;
    e = fmax(e, fabs((double)ha[i] - hb[i]));
    r = fmax(r, fabs((double)hb[i]));
  }
  return e / r;
}

typedef struct arrangement {
  const char *name;
  int lanes, gap, prio, skip_head;   /* gap g: lane i's attention after lane i - g's (0: no order) */
  const char *attn;                  /* $LANES_ATTN at its capture: "NW:BLOCKS", persistent */
  cudaGraphExec_t exec;
} arrangement;

int main(void) {
  gpt2_lane_hook = hook;
  if (make_inputs()) return 1;
  float *out_one = dev_alloc((size_t)B_ALL * VOCAB * 4), *out_lanes = dev_alloc((size_t)B_ALL * VOCAB * 4);
  if (!out_one || !out_lanes) return 1;
  lane one, half[2], quarter[4];
  if (make_lane(&one, B_ALL, 0, out_one, NULL)) return 1;
  const int nk = gpt2_kernel_count();
  int layers = 0;
  for (int k = 0; k < nk; k++) {
    gpt2_kernel_info ki;
    layer_of[k] = -1;
    if (gpt2_kernel_info_at(one.m, k, &ki) == 0 && strcmp(ki.kind, "attention") == 0) {
      layer_of[k] = layers++;
      head_first = k + 4;   /* c_proj, c_fc, mlp c_proj after the attention */
    }
  }
  if (layers != MAX_LAYERS) return fprintf(stderr, "expected %d attention kernels, found %d\n", MAX_LAYERS, layers), 1;
  if (head_first + 3 != nk) return fprintf(stderr, "expected the head's three kernels after the last layer's\n"), 1;
  for (int i = 0; i < 2; i++)
    if (make_lane(&half[i], B_ALL / 2, i * (B_ALL / 2), out_lanes, one.m)) return 1;
  for (int i = 0; i < 4; i++)
    if (make_lane(&quarter[i], B_ALL / 4, i * (B_ALL / 4), out_lanes, one.m)) return 1;
  cudaStream_t s[MAX_LANES];
  for (int i = 0; i < MAX_LANES; i++) cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
  arrangement a[] = {
      {"one B=64", 1, 0, 0, 0, "", NULL},
      {"one B=64, no head", 1, 0, 0, 1, "", NULL},
      {"one B=64, no head, attn 16:132", 1, 0, 0, 1, "16:132", NULL},
      {"one B=64, no head, attn 16:264", 1, 0, 0, 1, "16:264", NULL},
      {"one B=64, no head, attn 8:264", 1, 0, 0, 1, "8:264", NULL},
      {"one B=64, no head, attn 16:100", 1, 0, 0, 1, "16:100", NULL},
      {"2 x B=32 staggered, prio, no head", 2, 1, 1, 1, "", NULL},
      {"2 x B=32 staggered, prio, no head, attn 16:100", 2, 1, 1, 1, "16:100", NULL},
      {"2 x B=32 staggered, prio, no head, attn 16:116", 2, 1, 1, 1, "16:116", NULL},
      {"2 x B=32 staggered, prio, no head, attn 16:80", 2, 1, 1, 1, "16:80", NULL},
      {"2 x B=32 staggered, prio, no head, attn 8:200", 2, 1, 1, 1, "8:200", NULL},
      {"2 x B=32 staggered, prio, attn 16:100", 2, 1, 1, 0, "16:100", NULL},
      {"4 x B=16 staggered, prio, no head, attn 16:100", 4, 1, 1, 1, "16:100", NULL},
      {"4 x B=16 two at a time, prio, no head, attn 16:100", 4, 2, 1, 1, "16:100", NULL},
      {"4 x B=16 two at a time, prio, no head, attn 16:66", 4, 2, 1, 1, "16:66", NULL},
      {"4 x B=16 free, prio, no head, attn 16:100", 4, 0, 1, 1, "16:100", NULL},
      /* blocks of 4 warps, one a row: at 32 and 16 rows a batch they leave most of an SM's registers
       * to the other lanes' GEMMs (with SKINNY=1, the skinny GEMM's blocks of 4 warps fit beside them) */
      {"one B=64, no head, attn 4:0", 1, 0, 0, 1, "4:0", NULL},
      {"2 x B=32 staggered, prio, no head, attn 4:0", 2, 1, 1, 1, "4:0", NULL},
      {"2 x B=32 free, prio, no head, attn 4:0", 2, 0, 1, 1, "4:0", NULL},
      {"4 x B=16 two at a time, prio, no head, attn 4:0", 4, 2, 1, 1, "4:0", NULL},
      {"4 x B=16 free, prio, no head, attn 4:0", 4, 0, 1, 1, "4:0", NULL},
  };
  const int na = (int)(sizeof a / sizeof a[0]);
  for (int i = 0; i < na; i++) {
    lane *l = a[i].lanes == 1 ? &one : a[i].lanes == 2 ? half : quarter;
    setenv("LANES_ATTN", a[i].attn, 1);
    if (capture(l, a[i].lanes, s, a[i].gap, a[i].prio, a[i].skip_head, &a[i].exec)) return 1;
  }
  /* the check: caches zeroed, one step each, logits against the one batch's */
  if (check(cudaGraphLaunch(a[0].exec, s[0]), "launch") || check(cudaStreamSynchronize(s[0]), "step")) return 1;
  for (int i = 1; i < na; i++) {
    if (a[i].skip_head || a[i].lanes == 1) continue;
    lane *l = a[i].lanes == 2 ? half : quarter;
    for (int j = 0; j < a[i].lanes; j++) gpt2_zero_arena(l[j].m);
    cudaMemsetAsync(out_lanes, 0xff, (size_t)B_ALL * VOCAB * 4, s[0]);   /* poisoned: NaN, before the graph */
    if (check(cudaGraphLaunch(a[i].exec, s[0]), "launch") || check(cudaStreamSynchronize(s[0]), "step")) return 1;
    printf("check %-50s max err / max |logit| %.2e\n", a[i].name, rel_err(out_lanes, out_one));
  }
  static float t[3][sizeof a / sizeof a[0]];
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < na; i++) t[round][i] = time_graph(a[i].exec, s[0]);
  printf("%-52s  round 0 / 1 / 2 (ms, median of %d replays)\n", "arrangement", RUNS);
  for (int i = 0; i < na; i++) printf("%-52s  %.4f / %.4f / %.4f\n", a[i].name, t[0][i], t[1][i], t[2][i]);
  return 0;
}
