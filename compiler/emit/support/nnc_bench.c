/* support/nnc_bench.c — the benchmark harness of generated models. */
#include "nnc_bench.h"
#include "nnc_weights_quant.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../check/ref/ref.h"
#include "../runtime/nnrt_comm.h"
#ifndef NNC_BENCH_DEVICE
#include "../kernels/simd.h"
#endif

#define TOLERANCE 1e-5   /* f32 math against the float64 reference */
/* Below these --check prints a warning (the exit code is the tolerance's):
 * an output within tolerance can still have drifted as a whole (cosine), or
 * its logits can pick other classes (top-1), as a quantized model's may. */
#define COSINE_WARN 0.999
#define TOP1_WARN 0.99
/* A model storing its values in bf16 or f16 also passes within this many
 * times the error of the float64 reference rounded to that type at every
 * op (nnc_ref.store): that reference rounds each op's result where nnc's
 * fused kernels keep theirs in f32, and nnc's own approximations (exp2,
 * erf, attention weights in 16 bits, summation orders) come on top; a
 * wrong kernel lands far above both. */
#define ROUNDED_FACTOR 2.0

static double tolerance(const nnc_bench_model *md) { return md->tolerance > 0 ? md->tolerance : TOLERANCE; }

typedef struct options {
  const char *weights;
  const char *save_quantized;   /* --save-quantized FILE */
  int threads, runs, warmup, json, check, tune;
  int no_peaks;   /* --no-peaks: leave the roofline empty */
  int graphs;   /* --cuda-graphs: 1 on, 0 off, -1 the model's default */
  int64_t sym[NNC_DIM_SYMS * 16];
  int sym_set[NNC_DIM_SYMS * 16];
} options;

static void usage(const nnc_bench_model *md, FILE *f) {
  fprintf(f,
          "usage: bench_%s [--weights FILE] [--threads N] [--runs N] [--warmup N] [-d SYM=VALUE]... "
          "[--json] [--check] [--no-peaks]%s\n"
          "  --weights FILE  safetensors weights (default: random weights)\n"
          "  --threads N     threads (default: one per CPU)\n"
          "  --runs N        timed runs (default 20); --warmup N: untimed runs first (default 3)\n"
          "  -d SYM=VALUE    a symbolic dim's size (default: its maximum; with --check min(max, 17))\n"
          "  --json          print the results as one JSON object\n"
          "  --check         compare the outputs with the float64 reference: each output's max\n"
          "                  relative error (exit 1 above %g) and cosine similarity, and for an\n"
          "                  output named logits the top-1 agreement of its rows (positions) with\n"
          "                  the reference's argmax; a warning line, not a failure, below cosine\n"
          "                  %g or top-1 %g%%\n"
          "  --no-peaks      do not measure the device's rates; the roofline columns stay empty\n"
          "                  (for sanitizer runs: on a GPU the rate is a large cuBLASLt GEMM's)\n",
          md->name, md->cuda_graphs ? " [--cuda-graphs on|off]" : "", tolerance(md), COSINE_WARN, TOP1_WARN * 100);
  if (md->save_quantized)
    fprintf(f,
            "  --save-quantized FILE  write the weights as the model holds them (quantized, from\n"
            "                  --weights or random) to FILE, a quantized checkpoint that --weights\n"
            "                  loads as saved; then check and time as usual\n");
  if (md->cuda_graphs)
    fprintf(f,
            "  --cuda-graphs on|off  replay each run from a CUDA graph, captured on the first run of\n"
            "                  its sizes (default: the model's options.cuda_graphs); the per-kernel\n"
            "                  times always come from runs kernel by kernel\n");
  fprintf(f, "dims:");
  for (int i = 0; i < md->nsyms; i++) fprintf(f, " %s<=%lld", md->sym_names[i], (long long)md->sym_max[i]);
  fprintf(f, "\n");
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* 0 ok, 2 bad usage (message printed), -1 help printed. */
static int parse(const nnc_bench_model *md, int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->runs = 20;
  o->warmup = 3;
  o->graphs = -1;
  if (md->nsyms > (int)(sizeof o->sym / sizeof o->sym[0])) {
    fprintf(stderr, "bench_%s: too many dims\n", md->name);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    long long v;
    if (strcmp(a, "--json") == 0) o->json = 1;
    else if (strcmp(a, "--check") == 0) o->check = 1;
    else if (strcmp(a, "--no-peaks") == 0) o->no_peaks = 1;
    else if (md->tune && strcmp(a, "--tune") == 0) o->tune = 1;
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(md, stdout);
      return -1;
    } else if (md->cuda_graphs && strcmp(a, "--cuda-graphs") == 0) {
      if (!val || (strcmp(val, "on") != 0 && strcmp(val, "off") != 0)) {
        fprintf(stderr, "bench_%s: --cuda-graphs: expected on or off, found %s%s%s\n", md->name, val ? "\"" : "",
                val ? val : "nothing", val ? "\"" : "");
        return 2;
      }
      o->graphs = strcmp(val, "on") == 0;
      i++;
    } else if (strcmp(a, "--weights") == 0 && val) {
      o->weights = val;
      i++;
    } else if (md->save_quantized && strcmp(a, "--save-quantized") == 0 && val) {
      o->save_quantized = val;
      i++;
    } else if ((strcmp(a, "--threads") == 0 || strcmp(a, "--runs") == 0 || strcmp(a, "--warmup") == 0) && val) {
      int lo = strcmp(a, "--warmup") == 0 ? 0 : (strcmp(a, "--threads") == 0 ? 0 : 1);
      if (!parse_int(val, lo, 1000000, &v)) {
        fprintf(stderr, "bench_%s: %s: expected an integer >= %d, found \"%s\"\n", md->name, a, lo, val);
        return 2;
      }
      if (a[2] == 't') o->threads = (int)v;
      else if (a[2] == 'r') o->runs = (int)v;
      else o->warmup = (int)v;
      i++;
    } else if (strncmp(a, "-d", 2) == 0) {
      const char *d = a[2] ? a + 2 : val;
      if (!a[2]) i++;
      const char *eq = d ? strchr(d, '=') : NULL;
      int s = -1;
      for (int k = 0; eq && k < md->nsyms; k++)
        if (strlen(md->sym_names[k]) == (size_t)(eq - d) && strncmp(md->sym_names[k], d, (size_t)(eq - d)) == 0)
          s = k;
      if (s < 0) {
        fprintf(stderr, "bench_%s: -d: expected SYM=VALUE with SYM one of the model's dims, found \"%s\"\n",
                md->name, d ? d : "");
        usage(md, stderr);
        return 2;
      }
      if (!parse_int(eq + 1, 1, md->sym_max[s], &v)) {
        fprintf(stderr, "bench_%s: -d %s: expected a size of 1 to %lld, found \"%s\"\n", md->name,
                md->sym_names[s], (long long)md->sym_max[s], eq + 1);
        return 2;
      }
      o->sym[s] = v;
      o->sym_set[s] = 1;
    } else {
      fprintf(stderr, "bench_%s: unknown option \"%s\"\n", md->name, a);
      usage(md, stderr);
      return 2;
    }
  }
  for (int k = 0; k < md->nsyms; k++)
    if (!o->sym_set[k]) o->sym[k] = o->check ? (md->sym_max[k] < 17 ? md->sym_max[k] : 17) : md->sym_max[k];
  return 0;
}

/* ------------------------------------------------------------- the peak */

#ifdef NNC_BENCH_DEVICE
/* A GPU model's folder has no host SIMD kernels: the device measures itself
 * (nnc_bench_model.peaks). */
double nnc_bench_peak_gflops(int threads) {
  (void)threads;
  return 0;
}
double nnc_bench_peak_gbps(void) { return 0; }
#else
typedef struct fma_job {
  long iters;
  float sink[NNRT_POOL_MAX_THREADS];
} fma_job;

static void fma_task(void *ctx, int64_t task, int thread) {
  (void)thread;
  fma_job *j = ctx;
  /* ten independent chains hide the FMA latency */
  nnc_vf a0 = nnc_vset1(0.1f), a1 = nnc_vset1(0.2f), a2 = nnc_vset1(0.3f), a3 = nnc_vset1(0.4f);
  nnc_vf a4 = nnc_vset1(0.5f), a5 = nnc_vset1(0.6f), a6 = nnc_vset1(0.7f), a7 = nnc_vset1(0.8f);
  nnc_vf a8 = nnc_vset1(0.9f), a9 = nnc_vset1(1.0f);
  const nnc_vf m = nnc_vset1(0.999999f), c = nnc_vset1(1e-7f);
  for (long i = 0; i < j->iters; i++) {
    a0 = nnc_vfma(a0, m, c); a1 = nnc_vfma(a1, m, c); a2 = nnc_vfma(a2, m, c); a3 = nnc_vfma(a3, m, c);
    a4 = nnc_vfma(a4, m, c); a5 = nnc_vfma(a5, m, c); a6 = nnc_vfma(a6, m, c); a7 = nnc_vfma(a7, m, c);
    a8 = nnc_vfma(a8, m, c); a9 = nnc_vfma(a9, m, c);
  }
  nnc_vf s = nnc_vadd(nnc_vadd(nnc_vadd(a0, a1), nnc_vadd(a2, a3)), nnc_vadd(nnc_vadd(a4, a5), nnc_vadd(a6, a7)));
  s = nnc_vadd(s, nnc_vadd(a8, a9));
  j->sink[task % NNRT_POOL_MAX_THREADS] = nnc_vhsum(s);
}

double nnc_bench_peak_gflops(int threads) {
  nnrt_pool *pool = NULL;
  if (nnrt_pool_create(threads, &pool, NULL)) return 0;
  int n = nnrt_pool_threads(pool);
  fma_job *j = calloc(1, sizeof *j);
  double best = 0;
  if (j) {
    j->iters = 1000;
    for (int rep = 0; rep < 12; rep++) {
      uint64_t t0 = nnrt_now_ns();
      nnrt_pool_parallel_for(pool, n, fma_task, j, NULL);
      double s = (double)(nnrt_now_ns() - t0) * 1e-9;
      double gf = (double)n * (double)j->iters * 10.0 * 2.0 * NNC_VW / (s > 0 ? s : 1e-9) * 1e-9;
      if (gf > best) best = gf;
      if (s < 0.01) j->iters *= 2;   /* grow until a run takes ~10 ms */
    }
  }
  free(j);
  nnrt_pool_destroy(pool);
  return best;
}

double nnc_bench_peak_gbps(void) {
  size_t bytes = (size_t)64 << 20;
  char *a = malloc(bytes), *b = malloc(bytes);
  double best = 0;
  if (a && b) {
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    for (int rep = 0; rep < 4; rep++) {
      uint64_t t0 = nnrt_now_ns();
      memcpy(rep % 2 ? a : b, rep % 2 ? b : a, bytes);
      double s = (double)(nnrt_now_ns() - t0) * 1e-9;
      double gb = 2.0 * (double)bytes / (s > 0 ? s : 1e-9) * 1e-9;   /* read + write */
      if (gb > best) best = gb;
    }
  }
  free(a);
  free(b);
  return best;
}
#endif

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double nnc_bench_quantile(double *v, int n, double q) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  int i = (int)ceil(q * n) - 1;
  return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

/* ----------------------------------------------------------- the values */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { return (float)((double)(splitmix64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

typedef struct state {
  const nnc_bench_model *md;
  options o;
  void *m;
  float **weights;     /* the values given to the model (random or from the file) */
  int graphs_on;       /* CUDA graphs: 1 on, 0 off, -1 the model has none */
  void **in, **out;
  int64_t *in_n, *out_n;
} state;

static void state_free(state *s) {
  const nnc_bench_model *md = s->md;
  if (s->m) md->destroy(s->m);
  for (int i = 0; s->weights && i < md->nparams; i++) free(s->weights[i]);
  for (int i = 0; s->in && i < md->ninputs; i++) free(s->in[i]);
  for (int i = 0; s->out && i < md->noutputs; i++) free(s->out[i]);
  free(s->weights); free(s->in); free(s->out); free(s->in_n); free(s->out_n);
}

static int64_t numel(const nnrt_st_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->rank; i++) n *= d->shape[i];
  return n;
}

static int fail(const state *s, const char *what) {
  fprintf(stderr, "bench_%s: %s: %s\n", s->md->name, what, s->m ? s->md->last_error(s->m) : "no model");
  return 1;
}

/* Random weights, or the file's; kept in s->weights for the reference. */
static int fill_weights(state *s) {
  const nnc_bench_model *md = s->md;
  s->weights = calloc((size_t)md->nparams + 1, sizeof *s->weights);
  if (!s->weights) return fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  if (s->o.weights) {
    if (md->load_file(s->m, s->o.weights)) return fail(s, "loading weights");
    if (!s->o.check) return 0;
    nnrt_st *st = NULL;
    nnrt_error e = {0};
    if (nnrt_st_open(s->o.weights, &st, &e)) return fprintf(stderr, "bench_%s: %s\n", md->name, e.msg), 1;
    for (int i = 0; i < md->nparams; i++) {
      const nnrt_st_tensor *t;
      int64_t n = numel(&md->manifest[i]);
      s->weights[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
      if (!s->weights[i] || nnrt_st_find(st, md->manifest[i].name, &t, &e) ||
          (md->manifest[i].dtype == NNRT_F32 ? nnc_weights_read_f32(st, &md->manifest[i], s->weights[i], &e)
                                             : nnrt_st_copy(st, t, s->weights[i], (size_t)n * 4, &e))) {
        nnrt_st_close(st);
        return fprintf(stderr, "bench_%s: %s\n", md->name, e.msg[0] ? e.msg : "out of memory"), 1;
      }
      if (md->manifest[i].dtype == NNRT_I32)   /* the reference and set_weight take values as floats */
        for (int64_t k = 0; k < n; k++) {
          int32_t v;
          memcpy(&v, &s->weights[i][k], 4);
          s->weights[i][k] = (float)v;
        }
    }
    nnrt_st_close(st);
    return 0;
  }
  for (int i = 0; i < md->nparams; i++) {
    int64_t n = numel(&md->manifest[i]);
    uint64_t seed = 0x5eed0000ull + (uint64_t)i;
    s->weights[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!s->weights[i]) return fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
    /* matrices scaled like PyTorch's default init, U(+-1/sqrt(fan_in)) with the
     * smaller of the last two dims as fan_in (layouts [out,in] and [in,out]
     * both occur): U(-1,1) everywhere makes attention scores so large that
     * softmax saturates, and the model then amplifies any rounding by 100x */
    const nnrt_st_desc *w = &md->manifest[i];
    double scale = 1.0;
    if (w->rank >= 2) {
      int64_t a = w->shape[w->rank - 1], b = w->shape[w->rank - 2];
      scale = 1.0 / sqrt((double)(a < b ? a : b) > 1 ? (double)(a < b ? a : b) : 1.0);
    }
    /* batch norm's running variances are square-rooted: from [0.5, 1.5) */
    size_t len = strlen(w->name);
    int var = len >= 11 && strcmp(w->name + len - 11, "running_var") == 0;
    for (int64_t k = 0; k < n; k++)
      s->weights[i][k] = w->dtype == NNRT_I32 ? (float)(splitmix64(&seed) >> 62)
                       : var ? (float)(1.0 + 0.5 * uniform(&seed)) : (float)(scale * uniform(&seed));
    if (md->set_weight(s->m, md->manifest[i].name, s->weights[i], (size_t)n)) return fail(s, "setting a weight");
  }
  return 0;
}

/* A quantized model's weights as it holds them (q * scale), in place of
 * s->weights' float values: its quantized checkpoint written to a
 * temporary file and read back. */
static int held_values(state *s) {
  const nnc_bench_model *md = s->md;
  char path[] = "/tmp/nnc_held_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return fprintf(stderr, "bench_%s: a temporary file for the held weights: %s\n", md->name, strerror(errno)), 1;
  close(fd);
  int rc = md->save_quantized(s->m, path) ? fail(s, "saving the held weights") : 0;
  nnrt_st *st = NULL;
  nnrt_error e = {0};
  if (!rc) rc = nnrt_st_open(path, &st, &e) != NNRT_OK;
  for (int i = 0; !rc && i < md->nparams; i++)
    rc = md->manifest[i].dtype == NNRT_F32 && nnc_weights_read_f32(st, &md->manifest[i], s->weights[i], &e);
  if (rc && e.msg[0]) fprintf(stderr, "bench_%s: %s\n", md->name, e.msg);
  nnrt_st_close(st);
  remove(path);
  return rc;
}

float **nnc_bench_weights(const nnc_bench_model *md, void *m, const char *path, int check) {
  state s;
  memset(&s, 0, sizeof s);
  s.md = md;
  s.m = m;
  s.o.weights = path;
  s.o.check = 1;
  /* a quantized folder's reference holds its values: the check then measures the kernels (decode against
   * the full forward), not the quantization, which bench --check reports */
  if (!fill_weights(&s) && (!check || !md->save_quantized || !held_values(&s))) return s.weights;
  for (int i = 0; s.weights && i < md->nparams; i++) free(s.weights[i]);
  free(s.weights);
  return NULL;
}

static int fill_inputs(state *s) {
  const nnc_bench_model *md = s->md;
  int n = md->ninputs, k = md->noutputs;
  s->in = calloc((size_t)n + 1, sizeof *s->in);
  s->out = calloc((size_t)k + 1, sizeof *s->out);
  s->in_n = calloc((size_t)n + 1, sizeof *s->in_n);
  s->out_n = calloc((size_t)k + 1, sizeof *s->out_n);
  int64_t *bound = calloc((size_t)n + 1, sizeof *bound);
  int *mask = calloc((size_t)n + 1, sizeof *mask);
  if (!s->in || !s->out || !s->in_n || !s->out_n || !bound || !mask) {
    free(bound); free(mask);
    return fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  }
  md->elems(s->o.sym, s->in_n, s->out_n);
  md->input_rules(s->o.sym, bound, mask);
  for (int i = 0; i < n; i++) {
    int64_t cnt = s->in_n[i];
    s->in[i] = malloc((size_t)(cnt ? cnt : 1) * 4);
    if (!s->in[i]) break;
    uint64_t seed = 0x1234ull + (uint64_t)i * 7919u;
    for (int64_t e = 0; e < cnt; e++) {
      double v;
      /* a mask's rows are bound[i] long; the first entry of each stays 1 */
      if (mask[i]) v = bound[i] <= 0 || e % bound[i] == 0 ? 1.0 : (double)(splitmix64(&seed) >> 63);
      else if (!md->input_i32[i]) v = uniform(&seed);
      else if (bound[i] > 0) v = (double)(splitmix64(&seed) % (uint64_t)bound[i]);
      else v = (double)(splitmix64(&seed) >> 61);
      if (md->input_i32[i]) ((int32_t *)s->in[i])[e] = (int32_t)v;
      else ((float *)s->in[i])[e] = (float)v;
    }
  }
  for (int i = 0; i < k; i++)
    s->out[i] = malloc((size_t)(s->out_n[i] ? s->out_n[i] : 1) * nnrt_dtype_size((nnrt_dtype)md->output_dtype[i]));
  free(bound);
  free(mask);
  for (int i = 0; i < n; i++)
    if (!s->in[i]) return fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  for (int i = 0; i < k; i++)
    if (!s->out[i]) return fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  return 0;
}

/* ------------------------------------------------------------ the check */

static double as_double(const void *p, int i32, int64_t e) {
  return i32 ? (double)((const int32_t *)p)[e] : (double)((const float *)p)[e];
}

/* Element e of output i, whatever its dtype, widened exactly. */
static double output_value(const nnc_bench_model *md, const void *p, int i, int64_t e) {
  switch (md->output_dtype[i]) {
  case NNRT_BF16: return nnrt_bf16_to_f32(((const uint16_t *)p)[e]);
  case NNRT_F16: return nnrt_f16_to_f32(((const uint16_t *)p)[e]);
  default: return as_double(p, md->output_dtype[i] == NNRT_I32, e);
  }
}

/* Fills output i with a value no correct run writes: NaN (a quiet NaN's
 * bits in bf16 and f16), or INT32_MIN. */
static void poison(const nnc_bench_model *md, void *p, int i, int64_t n) {
  for (int64_t e = 0; e < n; e++) {
    switch (md->output_dtype[i]) {
    case NNRT_BF16: ((uint16_t *)p)[e] = 0x7fc0; break;
    case NNRT_F16: ((uint16_t *)p)[e] = 0x7e00; break;
    case NNRT_I32: ((int32_t *)p)[e] = INT32_MIN; break;
    default: ((float *)p)[e] = NAN; break;
    }
  }
}

/* "f32", "i32", "bf16" or "f16": how the report names an output's dtype. */
static const char *output_dtype_name(const nnc_bench_model *md, int i) {
  switch (md->output_dtype[i]) {
  case NNRT_BF16: return "bf16";
  case NNRT_F16: return "f16";
  case NNRT_I32: return "i32";
  default: return "f32";
  }
}

/* A float weight as the device holds it. */
static double stored(const nnc_bench_model *md, float w) {
  return md->weight_storage == NNRT_BF16 ? nnrt_bf16_to_f32(nnrt_f32_to_bf16(w)) : nnrt_f16_to_f32(nnrt_f32_to_f16(w));
}

double nnc_bench_weight_value(const nnc_bench_model *md, int i, float w) {
  bool round = md->manifest[i].dtype != NNRT_I32 && (md->weight_storage == NNRT_BF16 || md->weight_storage == NNRT_F16);
  return round ? stored(md, w) : w;
}

/* --check's measures of one output against the reference. */
typedef struct accuracy {
  double rel_error, cosine;
  double rounded;      /* the rounded reference's max relative error (ROUNDED_FACTOR); -1 without one */
  int64_t positions;   /* a logits output's rows, -1 for other outputs */
  int64_t agree;       /* of them, those whose argmax is the reference's */
  int64_t rounded_agree; /* those where the rounded reference's is, -1 without one: near-ties of the
                            reference that 16-bit storage alone flips */
} accuracy;

/* Which outputs get a top-1 agreement: those named logits (every classifier
 * and language model in models/ names its own so) with more than one class
 * on the last axis; each row along it is a position. */
static int64_t logits_classes(const nnc_output *o, const nnc_tensor *t, const int64_t *sym) {
  if (strcmp(o->name, "logits") != 0 || t->rank < 1) return -1;
  int64_t c = nnc_dim_eval(t->shape[t->rank - 1], sym);
  return c > 1 ? c : -1;
}

/* Output i's measures: got against want, n elements each. */
static accuracy measure(const nnc_graph *g, int i, const int64_t *sym, const double *got, const double *want, int64_t n) {
  accuracy a = {nnc_ref_rel_error(got, want, n), nnc_ref_cosine(got, want, n), -1, -1, 0, -1};
  int64_t classes = logits_classes(&g->outputs[i], &g->tensors[g->outputs[i].tensor], sym);
  if (classes > 0) {
    a.positions = n / classes;
    a.agree = nnc_ref_top1_agree(got, want, a.positions, classes);
  }
  return a;
}

/* Within the tolerance, or within ROUNDED_FACTOR times the rounded
 * reference's error (a finite one: a rounded reference that overflowed or
 * gave NaN excuses nothing). */
static bool accurate(const accuracy *a, double tol) {
  return a->rel_error <= tol || (a->rounded >= 0 && isfinite(a->rounded) && a->rel_error <= ROUNDED_FACTOR * a->rounded);
}

/* The 16-bit type the model stores its values in (the reference's
 * rounding, nnc_ref.store), or NNC_F32. */
static nnc_dtype storage_type(const nnc_bench_model *md) {
  return md->weight_storage == NNRT_BF16 ? NNC_BF16 : md->weight_storage == NNRT_F16 ? NNC_F16 : NNC_F32;
}

static double top1_fraction(const accuracy *a) { return a->positions > 0 ? (double)a->agree / (double)a->positions : 1; }

/* agree of positions as a printed percentage: 99.96% would round to 100.0%,
 * and a single disagreement must not read as none. */
static double top1_percent(int64_t agree, int64_t positions) {
  double pct = positions > 0 ? 100.0 * (double)agree / (double)positions : 100.0;
  return agree < positions ? fmin(pct, 99.9) : pct;
}

static bool cosine_low(const accuracy *a) { return !(a->cosine >= COSINE_WARN); }   /* NaN too */
static bool top1_low(const accuracy *a) { return a->positions >= 0 && top1_fraction(a) < TOP1_WARN; }

/* Runs the model once on poisoned outputs and the reference on the same
 * values; acc[i] receives output i's measures. */
static int check(state *s, accuracy *acc) {
  const nnc_bench_model *md = s->md;
  for (int i = 0; i < md->noutputs; i++) poison(md, s->out[i], i, s->out_n[i]);
  if (md->run(s->m, s->o.sym, s->in, s->out)) return fail(s, "run");
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_error err = {0};
  nnc_ref r;
  memset(&r, 0, sizeof r);
  nnc_status st = md->build_graph(&g, &err);
  if (!st && (g.ninputs != md->ninputs || g.nparams != md->nparams || g.noutputs != md->noutputs))
    st = nnc_errorf(&err, NNC_E_INTERNAL, NNC_NOLOC, "the rebuilt graph does not match the model");
  if (!st) st = nnc_ref_init(&r, &g, s->o.sym, &err);
  for (int i = 0; !st && i < md->ninputs; i++) {
    double *v = nnc_ref_alloc(&r, g.inputs[i]);
    if (!v) st = nnc_errorf(&err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
    for (int64_t e = 0; v && e < s->in_n[i]; e++) v[e] = as_double(s->in[i], md->input_i32[i], e);
  }
  for (int i = 0; !st && i < md->nparams; i++) {
    double *v = nnc_ref_alloc(&r, g.params[i]);
    if (!v) st = nnc_errorf(&err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
    bool round = md->manifest[i].dtype != NNRT_I32 && (md->weight_storage == NNRT_BF16 || md->weight_storage == NNRT_F16);
    for (int64_t e = 0, n = numel(&md->manifest[i]); v && e < n; e++) v[e] = round ? stored(md, s->weights[i][e]) : s->weights[i][e];
  }
  if (!st) st = nnc_ref_run_graph(&r, &err);
  /* the same reference rounded to the model's 16-bit storage at every op:
   * it reads the exact one's inputs and parameters, borrowed (never
   * written: only values the nodes compute are rounded) */
  const nnc_dtype store = storage_type(md);
  nnc_ref rr;
  memset(&rr, 0, sizeof rr);
  if (!st && store != NNC_F32) {
    st = nnc_ref_init(&rr, &g, s->o.sym, &err);
    rr.store = store;
    for (int i = 0; !st && i < g.ninputs; i++) rr.val[g.inputs[i]] = r.val[g.inputs[i]];
    for (int i = 0; !st && i < g.nparams; i++) rr.val[g.params[i]] = r.val[g.params[i]];
    if (!st) st = nnc_ref_run_graph(&rr, &err);
    for (int i = 0; rr.val && i < g.ninputs; i++) rr.val[g.inputs[i]] = NULL;
    for (int i = 0; rr.val && i < g.nparams; i++) rr.val[g.params[i]] = NULL;
  }
  for (int i = 0; !st && i < md->noutputs; i++) {
    const double *want = r.val[g.outputs[i].tensor];
    double *got = malloc((size_t)(s->out_n[i] ? s->out_n[i] : 1) * sizeof *got);
    if (!got || !want) {
      free(got);
      st = nnc_errorf(&err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
      break;
    }
    for (int64_t e = 0; e < s->out_n[i]; e++) got[e] = output_value(md, s->out[i], i, e);
    acc[i] = measure(&g, i, s->o.sym, got, want, s->out_n[i]);
    if (store != NNC_F32) {
      const double *rounded = rr.val[g.outputs[i].tensor];
      acc[i].rounded = nnc_ref_rel_error(rounded, want, s->out_n[i]);
      if (acc[i].positions > 0)
        acc[i].rounded_agree = nnc_ref_top1_agree(rounded, want, acc[i].positions, s->out_n[i] / acc[i].positions);
    }
    free(got);
  }
  nnc_ref_free(&rr);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
  if (st) {
    fprintf(stderr, "bench_%s: reference: %s\n", md->name, err.msg);
    return 1;
  }
  return 0;
}

/* --------------------------------------------------------------- timing */

typedef struct timing {
  double median_ms, p90_ms, flops, bytes;
  double comm_bytes, comm_bus, comm_wait_s;   /* a timed run's collectives, this rank's (a parallel plan) */
  double host_us;                             /* a device run: the median host time its launches took */
  nnc_bench_kernel *k;
  double *k_ms;
} timing;

/* One run: on the staged device buffers where the model has them (*host_ns,
 * when not NULL: the time the host took to launch it). */
static int run_once(state *s, uint64_t *host_ns) {
  const nnc_bench_model *md = s->md;
  if (md->run_staged) return md->run_staged(s->m, s->o.sym, host_ns);
  return md->run(s->m, s->o.sym, s->in, s->out);
}

static int time_runs(state *s, timing *t) {
  const nnc_bench_model *md = s->md;
  const options *o = &s->o;
  double *ms = malloc((size_t)o->runs * sizeof *ms);
  t->k = calloc((size_t)md->nkernels + 1, sizeof *t->k);
  t->k_ms = calloc((size_t)md->nkernels + 1, sizeof *t->k_ms);
  if (!ms || !t->k || !t->k_ms) {
    free(ms);
    return fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  }
  if (md->stage && md->stage(s->m, o->sym, s->in)) return free(ms), fail(s, "stage");
  for (int i = 0; i < o->warmup; i++)
    if (run_once(s, NULL)) return free(ms), fail(s, "run");
  uint64_t b0 = 0, b1 = 0;
  double bus0 = 0, bus1 = 0, w0 = 0, w1 = 0;
  if (md->comm) md->comm(s->m, &b0, &bus0, &w0);
  double *host = malloc((size_t)o->runs * sizeof *host);
  if (!host) return free(ms), fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  for (int i = 0; i < o->runs; i++) {
    uint64_t t0 = nnrt_now_ns(), h = 0;
    if (run_once(s, &h)) return free(ms), free(host), fail(s, "run");
    ms[i] = (double)(nnrt_now_ns() - t0) * 1e-6;
    host[i] = (double)h * 1e-3;
  }
  t->host_us = md->run_staged ? nnc_bench_quantile(host, o->runs, 0.5) : 0;
  free(host);
  if (md->comm) {
    md->comm(s->m, &b1, &bus1, &w1);
    t->comm_bytes = (double)(b1 - b0) / o->runs;
    t->comm_bus = (bus1 - bus0) / o->runs;
    t->comm_wait_s = (w1 - w0) / o->runs;
  }
  t->median_ms = nnc_bench_quantile(ms, o->runs, 0.5);
  t->p90_ms = nnc_bench_quantile(ms, o->runs, 0.9);
  /* per kernel: the median of profiled runs, separate from the timed ones */
  double *kt = malloc((size_t)o->runs * (size_t)(md->nkernels + 1) * sizeof *kt);
  if (!kt) return free(ms), fprintf(stderr, "bench_%s: out of memory\n", md->name), 1;
  md->profile(s->m, 1);
  for (int i = 0; i < o->runs; i++) {
    if (run_once(s, NULL)) {
      free(ms);
      free(kt);
      return fail(s, "run");
    }
    for (int k = 0; k < md->nkernels; k++) {
      md->kernel(s->m, k, &t->k[k]);
      kt[(size_t)k * (size_t)o->runs + (size_t)i] = (double)t->k[k].ns * 1e-6;
    }
  }
  md->profile(s->m, 0);
  for (int k = 0; k < md->nkernels; k++) {
    t->k_ms[k] = nnc_bench_quantile(kt + (size_t)k * (size_t)o->runs, o->runs, 0.5);
    t->flops += t->k[k].flops;
    t->bytes += t->k[k].bytes;
  }
  free(kt);
  free(ms);
  return 0;
}

static double items_per_run(const nnc_bench_model *md, const int64_t *sym) {
  double n = 1;
  for (int i = 0; i < md->nsyms; i++) n *= (double)sym[i];
  return n;
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') printf("\\%c", *s);
    else if ((unsigned char)*s < 32) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

/* The JSON of the check's measures (after "max_rel_error"): cosine per
 * output (null for NaN), top-1 per logits output, and the warnings. */
/* `, "key": {output: error, ...}`: each output's max relative error, or
 * the rounded reference's (rounded); infinity as 1e308. */
static void json_errors(const nnc_bench_model *md, const accuracy *acc, const char *key, bool rounded) {
  printf(", \"%s\": {", key);
  for (int i = 0; i < md->noutputs; i++) {
    const double e = rounded ? acc[i].rounded : acc[i].rel_error;
    printf("%s", i ? ", " : "");
    json_string(md->output_names[i]);
    printf(": %.6g", isinf(e) ? 1e308 : e);
  }
  printf("}");
}

static void json_accuracy(const nnc_bench_model *md, const accuracy *acc) {
  printf(", \"cosine\": {");
  for (int i = 0; i < md->noutputs; i++) {
    printf("%s", i ? ", " : "");
    json_string(md->output_names[i]);
    if (isnan(acc[i].cosine)) printf(": null");
    else printf(": %.10g", acc[i].cosine);
  }
  printf("}, \"top1_agreement\": {");
  for (int i = 0, first = 1; i < md->noutputs; i++) {
    if (acc[i].positions < 0) continue;
    printf("%s", first ? "" : ", ");
    first = 0;
    json_string(md->output_names[i]);
    printf(": {\"fraction\": %.6g, \"agree\": %lld, \"positions\": %lld", top1_fraction(&acc[i]),
           (long long)acc[i].agree, (long long)acc[i].positions);
    if (acc[i].rounded_agree >= 0) printf(", \"rounded_agree\": %lld", (long long)acc[i].rounded_agree);
    printf("}");
  }
  printf("}, \"warnings\": [");
  const char *sep = "";
  for (int i = 0; i < md->noutputs; i++) {
    char text[2][160];
    int n = 0;
    if (cosine_low(&acc[i])) snprintf(text[n++], sizeof text[0], "%.100s: cosine below %g", md->output_names[i], COSINE_WARN);
    if (top1_low(&acc[i]))
      snprintf(text[n++], sizeof text[0], "%.100s: top-1 agreement below %g%%", md->output_names[i], TOP1_WARN * 100);
    for (int k = 0; k < n; k++) {
      printf("%s", sep);
      json_string(text[k]);
      sep = ", ";
    }
  }
  printf("]");
}

/* The text report's check lines for output i: its max relative error and
 * cosine on the line scripts grep ("max relative error X, ... ok|FAILED"),
 * then its top-1 agreement and any warning on lines of their own. */
static void print_accuracy(const nnc_bench_model *md, int i, const accuracy *a, double tol) {
  const char *name = md->output_names[i], *dt = output_dtype_name(md, i);
  char rounded[64] = "";
  if (a->rounded >= 0)
    snprintf(rounded, sizeof rounded, " (%s-rounded reference %.3g)", nnc_dtype_name(storage_type(md)), a->rounded);
  printf("    %-24s %-4s max relative error %.3g%s, cosine %.6f %s\n", name, dt, a->rel_error, rounded, a->cosine,
         accurate(a, tol) ? "ok" : "FAILED");
  if (a->positions >= 0) {
    char rounded_top1[80] = "";
    if (a->rounded_agree >= 0)
      snprintf(rounded_top1, sizeof rounded_top1, "; the %s-rounded reference's %.1f%%",
               nnc_dtype_name(storage_type(md)), top1_percent(a->rounded_agree, a->positions));
    printf("    %-24s %-4s top-1 agreement %.1f%% (%lld of %lld positions%s)\n", name, dt,
           top1_percent(a->agree, a->positions), (long long)a->agree, (long long)a->positions, rounded_top1);
  }
  if (cosine_low(a)) printf("    %-24s %-4s warning: cosine %.6f is below %g\n", name, dt, a->cosine, COSINE_WARN);
  if (top1_low(a))
    printf("    %-24s %-4s warning: top-1 agreement is below %g%%\n", name, dt, TOP1_WARN * 100);
}

static void report(const state *s, const timing *t, double peak_gf, double peak_gb, const accuracy *acc, int ok) {
  const nnc_bench_model *md = s->md;
  const options *o = &s->o;
  double sec = t->median_ms * 1e-3;
  double gf = sec > 0 ? t->flops / sec * 1e-9 : 0, gb = sec > 0 ? t->bytes / sec * 1e-9 : 0;
  double items = items_per_run(md, o->sym) / (sec > 0 ? sec : 1e-9);
  const char *unit = md->nsyms >= 2 ? "tokens/s" : "items/s";
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss_mb = (double)ru.ru_maxrss / 1024.0;
  if (o->json) {
    printf("{\"model\": ");
    json_string(md->name);
    printf(", \"dims\": {");
    for (int i = 0; i < md->nsyms; i++) {
      printf("%s", i ? ", " : "");
      json_string(md->sym_names[i]);
      printf(": %lld", (long long)o->sym[i]);
    }
    printf("}, \"runs\": %d, \"median_ms\": %.6g, \"p90_ms\": %.6g, \"%s\": %.6g, \"gflops\": %.6g, "
           "\"gbps\": %.6g, \"peak_gflops\": %.6g, \"peak_gbps\": %.6g, \"arena_bytes\": %zu, \"peak_rss_mb\": %.1f",
           o->runs, t->median_ms, t->p90_ms, md->nsyms >= 2 ? "tokens_per_s" : "items_per_s", items, gf, gb,
           peak_gf, peak_gb, md->arena_bytes(s->m), rss_mb);
    if (s->graphs_on >= 0) printf(", \"cuda_graphs\": %s", s->graphs_on ? "true" : "false");
    if (t->host_us > 0)
      printf(", \"host_us\": %.6g, \"host_us_per_kernel\": %.6g", t->host_us, md->nkernels ? t->host_us / md->nkernels : 0);
    if (md->comm)
      printf(", \"comm\": {\"bytes_per_run\": %.6g, \"bus_bytes_per_run\": %.6g, \"wait_ms_per_run\": %.6g, "
             "\"bus_gbps\": %.6g}", t->comm_bytes, t->comm_bus, t->comm_wait_s * 1e3,
             t->comm_wait_s > 0 ? t->comm_bus / t->comm_wait_s * 1e-9 : 0.0);
    printf(", \"outputs\": {");
    for (int i = 0; i < md->noutputs; i++) {
      printf("%s", i ? ", " : "");
      json_string(md->output_names[i]);
      printf(": \"%s\"", output_dtype_name(md, i));
    }
    printf("}");
    if (o->check) {
      printf(", \"check\": {\"ok\": %s, \"tolerance\": %g", ok ? "true" : "false", tolerance(s->md));
      json_errors(md, acc, "max_rel_error", false);
      if (storage_type(md) != NNC_F32) json_errors(md, acc, "rounded_rel_error", true);
      json_accuracy(md, acc);
      printf("}");
    }
    printf(", \"kernels\": [");
    for (int k = 0; k < md->nkernels; k++) {
      const nnc_bench_kernel *x = &t->k[k];
      double ks = t->k_ms[k] * 1e-3;
      double roof = fmax(peak_gf > 0 ? x->flops / (peak_gf * 1e9) : 0, peak_gb > 0 ? x->bytes / (peak_gb * 1e9) : 0);
      printf("%s{\"name\": ", k ? ", " : "");
      json_string(x->name);
      printf(", \"where\": ");
      json_string(x->where);
      printf(", \"kind\": ");
      json_string(x->kind);
      printf(", \"ops\": ");
      json_string(x->ops);
      printf(", \"ms\": %.6g, \"gflops\": %.6g, \"gbps\": %.6g, \"roofline\": %.6g}", t->k_ms[k],
             ks > 0 ? x->flops / ks * 1e-9 : 0, ks > 0 ? x->bytes / ks * 1e-9 : 0, ks > 0 ? roof / ks : 0);
    }
    printf("]}\n");
    return;
  }
  printf("%s:", md->name);
  for (int i = 0; i < md->nsyms; i++) printf(" %s=%lld", md->sym_names[i], (long long)o->sym[i]);
  printf(", %d runs%s\n", o->runs, s->graphs_on < 0 ? "" : s->graphs_on ? ", CUDA graphs on" : ", CUDA graphs off");
  printf("  latency  median %.3f ms, p90 %.3f ms\n", t->median_ms, t->p90_ms);
  if (t->host_us > 0)   /* without graphs, the launches' host cost; with them, one graph launch's */
    printf("  host     %.1f us to launch a run (median), %.2f us a kernel of %d\n", t->host_us,
           md->nkernels ? t->host_us / md->nkernels : 0, md->nkernels);
  printf("  throughput %.1f %s, %.2f GFLOP/s (%.1f%% of peak FMA %.1f), %.2f GB/s (%.1f%% of peak bandwidth %.1f)\n",
         items, unit, gf, peak_gf > 0 ? 100 * gf / peak_gf : 0, peak_gf, gb, peak_gb > 0 ? 100 * gb / peak_gb : 0,
         peak_gb);
  printf("  memory   arena %.2f MiB, peak RSS %.1f MiB\n", (double)md->arena_bytes(s->m) / 1048576.0, rss_mb);
  if (t->comm_bytes > 0) {
    /* every rank runs the same collectives: rank 0's figures are each one's */
    printf("  collectives %.1f KiB a run from this rank (bus traffic %.1f KiB)", t->comm_bytes / 1024.0,
           t->comm_bus / 1024.0);
    if (t->comm_wait_s > 0)
      printf(", %.3f ms waiting in them, bus bandwidth %.2f GB/s", t->comm_wait_s * 1e3,
             t->comm_bus / t->comm_wait_s * 1e-9);
    printf("\n");
  }
  printf("  outputs ");
  for (int i = 0; i < md->noutputs; i++) printf("%s %s %s", i ? "," : "", md->output_names[i], output_dtype_name(md, i));
  printf("\n");
  printf("\n  %-4s %-28s %-18s %-11s %9s %9s %8s %6s\n", "#", "kernel", "where", "kind", "ms", "GFLOP/s", "GB/s",
         "%roof");
  for (int k = 0; k < md->nkernels; k++) {
    const nnc_bench_kernel *x = &t->k[k];
    double ks = t->k_ms[k] * 1e-3;
    double roof = fmax(peak_gf > 0 ? x->flops / (peak_gf * 1e9) : 0, peak_gb > 0 ? x->bytes / (peak_gb * 1e9) : 0);
    printf("  %-4d %-28.28s %-18.18s %-11s %9.4f %9.2f %8.2f %6.1f\n", k, x->name, x->where, x->kind, t->k_ms[k],
           ks > 0 ? x->flops / ks * 1e-9 : 0, ks > 0 ? x->bytes / ks * 1e-9 : 0, ks > 0 ? 100 * roof / ks : 0);
  }
  if (o->check) {
    printf("\n  check against the float64 reference (tolerance %g", tolerance(s->md));
    if (storage_type(md) != NNC_F32)
      printf(", or %g times the error of the reference rounded to %s at every op", ROUNDED_FACTOR,
             nnc_dtype_name(storage_type(md)));
    printf("; a warning below cosine %g or top-1 %g%%):\n", COSINE_WARN, TOP1_WARN * 100);
    for (int i = 0; i < md->noutputs; i++) print_accuracy(md, i, &acc[i], tolerance(s->md));
  }
}

static int adapter_create(const nnc_bench_model *md, state *s) {
  if (md->create(s->o.threads, &s->m)) {
    fprintf(stderr, "bench_%s: create failed: %s\n", md->name, md->last_error(NULL));
    return 1;
  }
  return 0;
}

int nnc_bench_main(const nnc_bench_model *md, int argc, char **argv) {
  state s;
  memset(&s, 0, sizeof s);
  s.md = md;
  s.graphs_on = -1;
  int rc = parse(md, argc, argv, &s.o);
  if (rc) return rc < 0 ? 0 : rc;
  /* under mpirun (a parallel plan's ranks) rank 0 reports for all: the
   * others print only their errors and a check that fails */
  nnrt_comm_launch launch;
  if (nnrt_comm_launch_read(&launch, NULL) != NNRT_OK) launch.world = 1;
  else if (launch.rank > 0 && !freopen("/dev/null", "w", stdout)) return 1;
  accuracy *acc = calloc((size_t)md->noutputs + 1, sizeof *acc);
  timing t;
  memset(&t, 0, sizeof t);
  int ok = 1;
  rc = acc ? 0 : 1;
  if (!rc) rc = adapter_create(md, &s);
  if (!rc && md->cuda_graphs) {
    s.graphs_on = md->cuda_graphs(s.m, s.o.graphs);
    if (s.graphs_on < 0) rc = fail(&s, "--cuda-graphs");
  }
  if (!rc) rc = fill_weights(&s);
  if (!rc && s.o.save_quantized) {
    if (md->save_quantized(s.m, s.o.save_quantized)) rc = fail(&s, "--save-quantized");
    else printf("saved the quantized weights to %s\n", s.o.save_quantized);
  }
  if (!rc) rc = fill_inputs(&s);
  if (!rc && s.o.tune) {
    /* the probe of nnc --tune=measure: real inputs and one forward, then the variants */
    if (md->stage(s.m, s.o.sym, s.in) || md->run_staged(s.m, s.o.sym, NULL) || md->tune(s.m, s.o.sym, stdout))
      rc = fail(&s, "tune");
    free(acc);
    state_free(&s);
    return rc;
  }
  if (!rc && s.o.check) {
    rc = check(&s, acc);
    for (int i = 0; !rc && i < md->noutputs; i++) ok &= accurate(&acc[i], tolerance(md));
  }
  double peak_gf = 0, peak_gb = 0;
  if (!rc && !s.o.no_peaks) {
    if (md->peaks) {
      if (md->peaks(s.m, &peak_gf, &peak_gb)) rc = fail(&s, "measure the device");
    } else {
      peak_gf = nnc_bench_peak_gflops(s.o.threads);
      peak_gb = nnc_bench_peak_gbps();
    }
  }
  if (!rc) {
    rc = time_runs(&s, &t);
  }
  if (!rc) report(&s, &t, peak_gf, peak_gb, acc, ok);
  if (!rc && !ok) {
    char rounded[96] = "";
    if (storage_type(md) != NNC_F32)
      snprintf(rounded, sizeof rounded, " and by more than %g times the error of the reference rounded to %s",
               ROUNDED_FACTOR, nnc_dtype_name(storage_type(md)));
    fprintf(stderr, "bench_%s: --check FAILED: an output is off the float64 reference by more than %g%s\n", md->name,
            tolerance(md), rounded);
    rc = 1;
  }
  free(t.k);
  free(t.k_ms);
  free(acc);
  /* a rank that failed leaves without the model's goodbye to the others
   * (MPI_Finalize would wait for ranks still waiting for it): mpirun then
   * ends the whole job at once */
  if (rc && launch.world > 1) return rc;
  state_free(&s);
  return rc;
}
