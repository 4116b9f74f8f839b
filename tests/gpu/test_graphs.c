/* tests/gpu/test_graphs.c — CUDA graphs (options.cuda_graphs) of the GPT-2
 * that bench/gpu_check.sh generate writes to build/gpu/gpt2_bf16_graphs
 * (models/gpt2.lua, bf16, --cuda-graphs), in one process. Every run replayed
 * from a graph must give what the same run launched kernel by kernel gives
 * (bench --check compares that one with the float64 reference), within the
 * model's bf16 tolerance, with the outputs poisoned with NaN before each run:
 *   - at ten sizes, more than the model keeps graphs for, so that the second
 *     pass replaces graphs (cudaGraphExecUpdate or a new instantiation);
 *   - with new inputs at each run (a graph reads its buffers, not their values
 *     at capture);
 *   - on a second set of buffers and on a stream of the caller's, on the
 *     legacy default stream, and inside a capture of the caller's own;
 *   - while profiling (kernel by kernel: each kernel gets a time).
 * Built and run by graphs_check.sh: test_graphs DIR (the model's folder, for
 * weights_manifest.json). Exits 0 when every check holds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpt2.h"

#define TOL 1e-2   /* bf16 storage: the tolerance of bench --check */
#define MAX_B 4
#define MAX_T 40
#define NSIZES 10

static const int sizes[NSIZES][2] = {{3, 17}, {2, 33}, {1, 1}, {4, 5}, {3, 9}, {2, 2}, {1, 40}, {4, 11}, {3, 3}, {2, 21}};

static int failures;

#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAILED line %d: ", __LINE__);       \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Sets every weight of the manifest (one tensor a line) to random values. */
static int set_weights(gpt2_model *m, const char *dir, int64_t *vocab) {
  char path[1024], line[1024];
  snprintf(path, sizeof path, "%s/weights_manifest.json", dir);
  FILE *f = fopen(path, "r");
  if (!f) return fprintf(stderr, "cannot open %s\n", path), 1;
  uint64_t seed = 42;
  int n = 0, rc = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    char name[512];
    const char *p = strstr(line, "\"name\": \""), *sh = strstr(line, "\"shape\": [");
    if (!p || !sh || sscanf(p, "\"name\": \"%511[^\"]\"", name) != 1) continue;
    int64_t count = 1, first = 0;
    for (const char *q = sh + 10; *q && *q != ']';) {
      char *end;
      long long d = strtoll(q, &end, 10);
      if (end == q) break;
      if (!first) first = d;
      count *= d;
      q = end + (*end == ',');
    }
    if (strcmp(name, "wte.weight") == 0) *vocab = first;
    float *w = malloc((size_t)count * sizeof *w);
    if (!w) return fclose(f), fprintf(stderr, "out of memory\n"), 1;
    for (int64_t i = 0; i < count; i++) w[i] = (float)((double)(splitmix64(&seed) >> 11) * 0x1.0p-53 * 0.2 - 0.1);
    if (gpt2_set_weight(m, name, w, (size_t)count)) {
      fprintf(stderr, "gpt2_set_weight %s: %s\n", name, gpt2_last_error(m));
      rc = 1;
    }
    free(w);
    n++;
  }
  fclose(f);
  if (!rc && (!n || *vocab <= 0)) {
    fprintf(stderr, "%s: no weights (or no wte.weight) found\n", path);
    rc = 1;
  }
  return rc;
}

typedef struct bufs {
  int32_t *ids;
  float *logits;
} bufs;

typedef struct run_case {
  gpt2_dims d;
  int32_t *ids;      /* host, B*T */
  float *ref;        /* host, kernel by kernel */
  size_t nout;
} run_case;

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "FAILED: %s: %s\n", what, cudaGetErrorString(e));
  failures++;
  return 0;
}

/* Copies the case's ids into b and fills b's logits with NaN (all bits set),
 * then waits: the model's stream does not wait for the legacy one. */
static int prepare(const run_case *c, const bufs *b) {
  size_t nid = (size_t)(c->d.B * c->d.T);
  return cuda_ok(cudaMemcpy(b->ids, c->ids, nid * sizeof *c->ids, cudaMemcpyHostToDevice), "copying ids") &&
         cuda_ok(cudaMemset(b->logits, 0xff, c->nout * sizeof(float)), "poisoning the logits") &&
         cuda_ok(cudaDeviceSynchronize(), "waiting for the copies");
}

/* Copies b's logits back; their max |got - ref| over max |ref| (inf when a
 * value is not finite). */
static double error_of(const run_case *c, const bufs *b, float *host) {
  if (!cuda_ok(cudaMemcpy(host, b->logits, c->nout * sizeof *host, cudaMemcpyDeviceToHost), "copying the logits"))
    return INFINITY;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < c->nout; i++) {
    if (!isfinite(host[i])) return INFINITY;
    double e = fabs((double)host[i] - (double)c->ref[i]);
    if (e > worst) worst = e;
    if (fabs((double)c->ref[i]) > scale) scale = fabs((double)c->ref[i]);
  }
  return worst / (scale > 0 ? scale : 1);
}

/* One run on b and stream (NULL: the model's), waited for, and compared. */
static void run_and_compare(gpt2_model *m, const run_case *c, const bufs *b, void *stream, float *host,
                            const char *what) {
  if (!prepare(c, b)) return;
  gpt2_inputs in = {b->ids};
  gpt2_outputs out = {b->logits};
  int rc = gpt2_run_device(m, &c->d, &in, &out, stream);
  if (!rc) rc = gpt2_sync(m);
  if (stream && !rc) cuda_ok(cudaStreamSynchronize((cudaStream_t)stream), "waiting for the caller's stream");
  EXPECT(rc == 0, "%s B=%lld T=%lld: rc %d: %s", what, (long long)c->d.B, (long long)c->d.T, rc, gpt2_last_error(m));
  if (rc) return;
  double e = error_of(c, b, host);
  printf("%-28s B=%lld T=%-3lld max rel error %.3g\n", what, (long long)c->d.B, (long long)c->d.T, e);
  EXPECT(e <= TOL, "%s B=%lld T=%lld: max rel error %.3g above %g", what, (long long)c->d.B, (long long)c->d.T, e, TOL);
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: test_graphs MODEL_DIR\n"), 2;
  gpt2_options o;
  gpt2_options_default(&o);
  EXPECT(o.cuda_graphs == 1, "options.cuda_graphs defaults to %d in a folder from nnc --cuda-graphs", o.cuda_graphs);
  EXPECT(gpt2_cuda_graphs(NULL, 1) == GPT2_E_ARG, "gpt2_cuda_graphs(NULL) is not E_ARG");
  o.max_B = MAX_B;
  o.max_T = MAX_T;
  gpt2_model *m = NULL;
  if (gpt2_create(&o, &m)) return fprintf(stderr, "gpt2_create: %s\n", gpt2_last_error(NULL)), 1;
  int64_t vocab = 0;
  bufs a = {0}, b = {0};
  run_case cases[NSIZES];
  memset(cases, 0, sizeof cases);
  float *host = NULL;   /* one run's logits */
  cudaStream_t user = NULL;
  int rc = set_weights(m, argv[1], &vocab);
  size_t max_out = (size_t)MAX_B * MAX_T * (size_t)vocab;
  if (!rc && !(host = malloc(max_out * sizeof *host))) {
    fprintf(stderr, "out of memory\n");
    rc = 1;
  }
  if (!rc && (!cuda_ok(cudaMalloc((void **)&a.ids, MAX_B * MAX_T * sizeof(int32_t)), "cudaMalloc") ||
              !cuda_ok(cudaMalloc((void **)&b.ids, MAX_B * MAX_T * sizeof(int32_t)), "cudaMalloc") ||
              !cuda_ok(cudaMalloc((void **)&a.logits, max_out * sizeof(float)), "cudaMalloc") ||
              !cuda_ok(cudaMalloc((void **)&b.logits, max_out * sizeof(float)), "cudaMalloc") ||
              !cuda_ok(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), "cudaStreamCreate")))
    rc = 1;

  /* the references: every size kernel by kernel, on a */
  uint64_t seed = 7;
  EXPECT(gpt2_cuda_graphs(m, 0) == 0, "gpt2_cuda_graphs(m, 0) failed");
  for (int i = 0; !rc && i < NSIZES; i++) {
    run_case *c = &cases[i];
    c->d.B = sizes[i][0];
    c->d.T = sizes[i][1];
    c->nout = (size_t)(c->d.B * c->d.T) * (size_t)vocab;
    c->ids = malloc((size_t)(c->d.B * c->d.T) * sizeof *c->ids);
    c->ref = malloc(c->nout * sizeof *c->ref);
    if (!c->ids || !c->ref) {
      fprintf(stderr, "out of memory\n");
      rc = 1;
      break;
    }
    for (int64_t k = 0; k < c->d.B * c->d.T; k++) c->ids[k] = (int32_t)(splitmix64(&seed) % (uint64_t)vocab);
    gpt2_inputs in = {a.ids};
    gpt2_outputs out = {a.logits};
    if (!prepare(c, &a) || gpt2_run_device(m, &c->d, &in, &out, NULL) || gpt2_sync(m) ||
        !cuda_ok(cudaMemcpy(c->ref, a.logits, c->nout * sizeof *c->ref, cudaMemcpyDeviceToHost), "copying")) {
      fprintf(stderr, "reference run B=%lld T=%lld: %s\n", (long long)c->d.B, (long long)c->d.T, gpt2_last_error(m));
      rc = 1;
      break;
    }
    for (size_t k = 0; k < c->nout; k++)
      if (!isfinite(c->ref[k])) {
        fprintf(stderr, "reference run B=%lld T=%lld: logit %zu is %g\n", (long long)c->d.B, (long long)c->d.T, k,
                (double)c->ref[k]);
        rc = 1;
        break;
      }
  }

  if (!rc) {
    EXPECT(gpt2_cuda_graphs(m, 1) == 0, "gpt2_cuda_graphs(m, 1) failed");
    /* two passes over more sizes than the model keeps graphs: the second
     * replaces graphs; each size twice in a row, captured then replayed */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < NSIZES; i++) {
        run_and_compare(m, &cases[i], &a, NULL, host, pass ? "graph, after eviction" : "graph, captured");
        run_and_compare(m, &cases[i], &a, NULL, host, "graph, replayed");
      }
    /* other buffers (a new graph), on the caller's stream, then the legacy
     * default stream (the graph is captured on the model's own) */
    run_and_compare(m, &cases[0], &b, user, host, "graph, other buffers");
    run_and_compare(m, &cases[0], &b, user, host, "graph, other buffers again");
    run_and_compare(m, &cases[1], &a, (void *)cudaStreamLegacy, host, "graph, legacy stream");
    run_and_compare(m, &cases[1], &a, NULL, host, "graph, back on the model's");

    /* inside the caller's capture: the kernels go into the caller's graph */
    const run_case *c = &cases[4];
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    gpt2_inputs in = {b.ids};
    gpt2_outputs out = {b.logits};
    if (prepare(c, &b) && cuda_ok(cudaStreamSynchronize(user), "cudaStreamSynchronize") &&
        cuda_ok(cudaStreamBeginCapture(user, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
      int r = gpt2_run_device(m, &c->d, &in, &out, user);
      EXPECT(r == 0, "a run inside the caller's capture: rc %d: %s", r, gpt2_last_error(m));
      if (cuda_ok(cudaStreamEndCapture(user, &g), "the caller's cudaStreamEndCapture") && !r &&
          cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiating the caller's graph") &&
          cuda_ok(cudaGraphLaunch(ge, user), "launching the caller's graph") &&
          cuda_ok(cudaStreamSynchronize(user), "waiting for the caller's graph")) {
        double e = error_of(c, &b, host);
        printf("%-28s B=%lld T=%-3lld max rel error %.3g\n", "the caller's graph", (long long)c->d.B,
               (long long)c->d.T, e);
        EXPECT(e <= TOL, "the caller's graph: max rel error %.3g above %g", e, TOL);
      }
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);

    /* profiling runs kernel by kernel even with graphs on: every kernel timed */
    EXPECT(gpt2_profile(m, 1) == 0, "gpt2_profile failed");
    run_and_compare(m, &cases[3], &a, NULL, host, "graphs on, profiling");
    uint64_t total = 0;
    for (int k = 0; k < gpt2_kernel_count(); k++) {
      gpt2_kernel_info ki;
      if (gpt2_kernel_info_at(m, k, &ki) == 0) total += ki.ns;
    }
    EXPECT(total > 0, "a profiled run with graphs on timed no kernel");
    gpt2_profile(m, 0);
    run_and_compare(m, &cases[3], &a, NULL, host, "graph, after profiling");
  }

  for (int i = 0; i < NSIZES; i++) {
    free(cases[i].ids);
    free(cases[i].ref);
  }
  free(host);
  cudaFree(a.ids);
  cudaFree(b.ids);
  cudaFree(a.logits);
  cudaFree(b.logits);
  if (user) cudaStreamDestroy(user);
  gpt2_destroy(m);
  if (rc) return 1;
  if (failures) {
    fprintf(stderr, "test_graphs: %d checks FAILED\n", failures);
    return 1;
  }
  printf("test_graphs: all checks hold\n");
  return 0;
}
