/* support/nnc_generate.c — generate_<model>: prompts in, tokens out.
 *
 * Prompts of different lengths are padded on the left to the longest, so
 * every sequence of the batch writes the same cache rows: the mask input
 * hides the padding and pos gives each token its own position. Prefill
 * runs T = S = the prompt length; each decode step runs T = 1 with S one
 * more than the step before. --check compares every step's logits with the
 * float64 reference of a full forward over the sequence so far (its
 * unpadded tokens, an empty cache), which is what decoding must equal. */
#include "nnc_generate.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../check/ref/ref.h"
#include "../runtime/nnrt.h"

typedef struct gen {
  const nnc_bench_model *md;
  void *m;
  float **weights;
  int ids, pos, mask, last, logits;  /* input and output indices; last: -1 when the model has none */
  int sB, sT, sS;                    /* symbol indices */
  int64_t V, smax;
  /* options */
  const char *weights_path, *prompt, *prompt_file;
  int steps, threads, check, top_k;
  double temperature, top_p;
  uint64_t seed;
  /* the sequences: tok[b][0..len[b]) */
  int B, pad_len;
  int *len;
  int32_t **tok;
} gen;

static int find(const char *const *names, int n, const char *want) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], want) == 0) return i;
  return -1;
}

static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void usage(const char *name) {
  fprintf(stderr,
          "usage: generate_%s [--weights FILE] [--prompt IDS] [--prompt-file FILE] [--steps N]\n"
          "                   [--temperature T] [--top-k K] [--top-p P] [--seed N] [--threads N] [--check]\n"
          "  --prompt IDS       token ids, comma separated; prompts separated by ';' (default \"0\")\n"
          "  --prompt-file FILE token ids separated by spaces or commas, one prompt a line\n"
          "  --steps N          new tokens a sequence (default 16)\n"
          "  --temperature T    0: greedy (default); else sample from softmax(logits / T)\n"
          "  --top-k K          sample among the K likeliest tokens (0: all)\n"
          "  --top-p P          sample among the likeliest tokens whose probabilities add up to P (1: all)\n"
          "  --seed N           the sampler's seed (default 1)\n"
          "  --check            compare every step's logits with the float64 reference of a full forward\n",
          name);
}

/* Parses one prompt line ("1,2 3") into g's sequence b. */
static int add_prompt(gen *g, const char *line, size_t n) {
  int32_t *t = calloc((size_t)g->smax + 1, sizeof *t);
  int *len = realloc(g->len, (size_t)(g->B + 1) * sizeof *len);
  int32_t **tok = realloc(g->tok, (size_t)(g->B + 1) * sizeof *tok);
  if (len) g->len = len;
  if (tok) g->tok = tok;
  if (!t || !len || !tok) return free(t), fprintf(stderr, "generate_%s: out of memory\n", g->md->name), 1;
  int k = 0;
  for (size_t i = 0; i < n;) {
    if (line[i] == ',' || line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
      i++;
      continue;
    }
    char *end;
    long v = strtol(line + i, &end, 10);
    if (end == line + i || v < 0 || v >= g->V) {
      free(t);
      return fprintf(stderr, "generate_%s: prompt %d: expected token ids 0 to %lld, found \"%.*s\"\n", g->md->name,
                     g->B + 1, (long long)g->V - 1, (int)(n - i < 20 ? n - i : 20), line + i), 1;
    }
    if (k >= g->smax) {
      free(t);
      return fprintf(stderr, "generate_%s: prompt %d: more than the cache's %lld tokens\n", g->md->name, g->B + 1,
                     (long long)g->smax), 1;
    }
    t[k++] = (int32_t)v;
    i = (size_t)(end - line);
  }
  if (k == 0) return free(t), 0;   /* an empty line is no prompt */
  g->tok[g->B] = t;
  g->len[g->B++] = k;
  return 0;
}

static int read_prompts(gen *g) {
  if (g->prompt_file) {
    FILE *f = fopen(g->prompt_file, "r");
    if (!f) return fprintf(stderr, "generate_%s: cannot open %s\n", g->md->name, g->prompt_file), 1;
    char line[65536];
    while (fgets(line, sizeof line, f))
      if (add_prompt(g, line, strcspn(line, "\n"))) return fclose(f), 1;
    fclose(f);
  } else {
    const char *p = g->prompt ? g->prompt : "0";
    while (*p) {
      size_t n = strcspn(p, ";");
      if (add_prompt(g, p, n)) return 1;
      p += n + (p[n] == ';');
    }
  }
  if (g->B == 0) return fprintf(stderr, "generate_%s: expected at least one prompt\n", g->md->name), 1;
  return 0;
}

/* One call of the model at T new tokens a sequence, S keys after it. */
static int call(gen *g, int64_t T, int64_t S, int32_t *ids, int32_t *pos, int32_t *mask, float *logits) {
  const nnc_bench_model *md = g->md;
  int64_t sym[64];
  for (int i = 0; i < md->nsyms && i < 64; i++) sym[i] = md->sym_max[i];
  sym[g->sB] = g->B;
  sym[g->sT] = T;
  sym[g->sS] = S;
  void *in[64] = {0}, *out[64] = {0};
  int32_t last[4096];
  /* every sequence's last token is row T - 1: the prompts are padded on the left */
  for (int b = 0; b < g->B; b++) last[b] = (int32_t)(b * T + T - 1);
  in[g->ids] = ids;
  in[g->pos] = pos;
  in[g->mask] = mask;
  if (g->last >= 0) in[g->last] = last;
  out[g->logits] = logits;
  if (md->run(g->m, sym, in, out)) {
    fprintf(stderr, "generate_%s: run: %s\n", md->name, md->last_error(g->m));
    return 1;
  }
  return 0;
}

typedef struct cand {
  float logit;
  int id;
} cand;

static int by_logit(const void *a, const void *b) {
  float x = ((const cand *)a)->logit, y = ((const cand *)b)->logit;
  return (x < y) - (x > y);
}

/* The next token from one row of logits. */
static int32_t sample(gen *g, const float *row, cand *c) {
  int64_t V = g->V, best = 0;
  for (int64_t i = 1; i < V; i++)
    if (row[i] > row[best]) best = i;
  if (g->temperature <= 0) return (int32_t)best;
  for (int64_t i = 0; i < V; i++) c[i] = (cand){row[i], (int)i};
  qsort(c, (size_t)V, sizeof *c, by_logit);
  int64_t n = g->top_k > 0 && g->top_k < V ? g->top_k : V;
  double total = 0;
  for (int64_t i = 0; i < n; i++) total += exp((c[i].logit - c[0].logit) / g->temperature);
  /* top-p: the shortest head of the sorted list holding p of the mass */
  double kept = 0;
  int64_t m = 0;
  while (m < n && (m == 0 || kept < g->top_p * total)) kept += exp((c[m++].logit - c[0].logit) / g->temperature);
  double u = (double)(next(&g->seed) >> 11) * 0x1.0p-53 * kept, acc = 0;
  for (int64_t i = 0; i < m; i++) {
    acc += exp((c[i].logit - c[0].logit) / g->temperature);
    if (u < acc) return (int32_t)c[i].id;
  }
  return (int32_t)c[m - 1].id;
}

/* The reference's logits for the last of sequence b's n tokens, from a full
 * forward over them; *rel receives the relative error of got against them. */
static int check_row(gen *g, const nnc_graph *gr, int b, int n, const float *got, double *rel) {
  const nnc_bench_model *md = g->md;
  int64_t sym[64];
  for (int i = 0; i < md->nsyms && i < 64; i++) sym[i] = 1;
  sym[g->sT] = sym[g->sS] = n;
  nnc_ref r;
  memset(&r, 0, sizeof r);
  nnc_error err = {0};
  nnc_status st = nnc_ref_init(&r, gr, sym, &err);
  for (int i = 0; !st && i < gr->ninputs; i++) {
    double *v = nnc_ref_alloc(&r, gr->inputs[i]);
    if (!v) {
      st = nnc_errorf(&err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
      break;
    }
    if (i == g->last) v[0] = n - 1;
    else
      for (int k = 0; k < n; k++) v[k] = i == g->ids ? g->tok[b][k] : i == g->pos ? k : 1;
  }
  for (int i = 0; !st && i < md->nparams; i++) {
    double *v = nnc_ref_alloc(&r, gr->params[i]);
    if (!v) {
      st = nnc_errorf(&err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
      break;
    }
    int64_t cnt = 1;
    for (int k = 0; k < md->manifest[i].rank; k++) cnt *= md->manifest[i].shape[k];
    for (int64_t e = 0; e < cnt; e++) v[e] = nnc_bench_weight_value(md, i, g->weights[i][e]);
  }
  if (!st) st = nnc_ref_run_graph(&r, &err);
  if (!st) {
    const double *want = r.val[gr->outputs[g->logits].tensor] + (g->last >= 0 ? 0 : (int64_t)(n - 1) * g->V);
    double *have = malloc((size_t)g->V * sizeof *have);
    if (!have) st = nnc_errorf(&err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
    for (int64_t v = 0; have && v < g->V; v++) have[v] = got[v];
    if (have) *rel = nnc_ref_rel_error(have, want, g->V);
    free(have);
  }
  nnc_ref_free(&r);
  if (st) fprintf(stderr, "generate_%s: reference: %s\n", md->name, err.msg);
  return st ? 1 : 0;
}

static int parse(gen *g, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool takes = strcmp(a, "--check") != 0;
    if (takes && !v) return usage(g->md->name), 1;
    if (strcmp(a, "--check") == 0) g->check = 1;
    else if (strcmp(a, "--weights") == 0) g->weights_path = v;
    else if (strcmp(a, "--prompt") == 0) g->prompt = v;
    else if (strcmp(a, "--prompt-file") == 0) g->prompt_file = v;
    else if (strcmp(a, "--steps") == 0) g->steps = atoi(v);
    else if (strcmp(a, "--threads") == 0) g->threads = atoi(v);
    else if (strcmp(a, "--temperature") == 0) g->temperature = atof(v);
    else if (strcmp(a, "--top-k") == 0) g->top_k = atoi(v);
    else if (strcmp(a, "--top-p") == 0) g->top_p = atof(v);
    else if (strcmp(a, "--seed") == 0) g->seed = strtoull(v, NULL, 10);
    else return usage(g->md->name), 1;
    i += takes;
  }
  if (g->steps < 1 || g->temperature < 0 || g->top_p <= 0 || g->top_p > 1 || g->top_k < 0)
    return fprintf(stderr, "generate_%s: expected --steps >= 1, --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0\n",
                   g->md->name), 1;
  return 0;
}

/* The model's inputs, outputs and dims by name; the vocabulary from the
 * logits' size at one token. */
static int bind(gen *g) {
  const nnc_bench_model *md = g->md;
  /* nnc's names, or Hugging Face's */
  g->ids = find(md->input_names, md->ninputs, "ids");
  g->pos = find(md->input_names, md->ninputs, "pos");
  g->mask = find(md->input_names, md->ninputs, "mask");
  if (g->ids < 0) g->ids = find(md->input_names, md->ninputs, "input_ids");
  if (g->pos < 0) g->pos = find(md->input_names, md->ninputs, "position_ids");
  if (g->mask < 0) g->mask = find(md->input_names, md->ninputs, "attention_mask");
  g->last = find(md->input_names, md->ninputs, "last");
  g->logits = find(md->output_names, md->noutputs, "logits");
  g->sB = find(md->sym_names, md->nsyms, "B");
  g->sT = find(md->sym_names, md->nsyms, "T");
  g->sS = find(md->sym_names, md->nsyms, "S");
  if (g->ids < 0 || g->pos < 0 || g->mask < 0 || g->logits < 0 || g->sB < 0 || g->sT < 0 || g->sS < 0 ||
      md->ninputs != 3 + (g->last >= 0) || md->nsyms > 64 || md->output_dtype[g->logits] != NNRT_F32)
    return fprintf(stderr, "generate_%s: expected a model with inputs ids, pos [B, T], mask [B, S] (and last [B]) and "
                   "an f32 output logits [B, T, V] (or [B, V] with last) (nnc --generate)\n", md->name), 1;
  int64_t sym[64], in_n[64], out_n[64];
  for (int i = 0; i < md->nsyms; i++) sym[i] = 1;
  md->elems(sym, in_n, out_n);
  g->V = out_n[g->logits];
  g->smax = md->sym_max[g->sS];
  return 0;
}

static void free_gen(gen *g) {
  if (g->m) g->md->destroy(g->m);
  for (int i = 0; g->weights && i < g->md->nparams; i++) free(g->weights[i]);
  for (int b = 0; b < g->B; b++) free(g->tok[b]);
  free(g->weights);
  free(g->tok);
  free(g->len);
}

static int generate(gen *g) {
  const nnc_bench_model *md = g->md;
  int B = g->B, L = 0;
  for (int b = 0; b < B; b++) L = g->len[b] > L ? g->len[b] : L;
  if (B > md->sym_max[g->sB] || B > 4096)
    return fprintf(stderr, "generate_%s: %d prompts: the model takes at most %lld sequences a call\n", md->name, B,
                   (long long)md->sym_max[g->sB]), 1;
  if (L + g->steps - 1 > g->smax)
    return fprintf(stderr, "generate_%s: a prompt of %d tokens and %d new ones: more than the cache's %lld\n",
                   md->name, L, g->steps, (long long)g->smax), 1;
  size_t tv = (size_t)B * (size_t)L;
  int32_t *ids = calloc(tv, sizeof *ids), *pos = calloc(tv, sizeof *pos);
  int32_t *mask = calloc((size_t)B * (size_t)(L + g->steps), sizeof *mask);
  float *logits = malloc((g->last >= 0 ? (size_t)B : tv) * (size_t)g->V * sizeof *logits);
  cand *c = malloc((size_t)g->V * sizeof *c);
  double *decode_ms = calloc((size_t)g->steps + 1, sizeof *decode_ms), prefill_ms = 0, first_ms = 0, worst = 0;
  nnc_graph gr;
  nnc_graph_init(&gr);
  int rc = !ids || !pos || !mask || !logits || !c || !decode_ms;
  if (rc) fprintf(stderr, "generate_%s: out of memory\n", md->name);
  if (!rc && g->check) {
    nnc_error err = {0};
    if (md->build_graph(&gr, &err)) {
      fprintf(stderr, "generate_%s: reference: %s\n", md->name, err.msg);
      rc = 1;
    }
  }
  for (int step = 0; !rc && step < g->steps; step++) {
    /* prefill: the padded prompts; then one new token a sequence */
    int64_t T = step == 0 ? L : 1, S = L + step;
    for (int b = 0; b < B; b++) {
      int64_t pad = S - g->len[b];   /* the left padding: the same at every step */
      for (int64_t j = 0; j < S; j++) mask[b * S + j] = j >= pad;
      for (int64_t t = 0; t < T; t++) {
        int64_t at = S - T + t;   /* the token's row in the cache */
        ids[b * T + t] = at >= pad ? g->tok[b][at - pad] : 0;
        pos[b * T + t] = at >= pad ? (int32_t)(at - pad) : 0;
      }
    }
    /* The first call also pays one-time work (weights packed or converted
     * at load, first launches): it runs untimed and the prefill, which
     * rewrites the same cache rows, runs again for its time. */
    if (step == 0) {
      uint64_t t0 = nnrt_now_ns();
      rc = call(g, T, S, ids, pos, mask, logits);
      first_ms = (double)(nnrt_now_ns() - t0) / 1e6;
      if (rc) break;
    }
    uint64_t t0 = nnrt_now_ns();
    rc = call(g, T, S, ids, pos, mask, logits);
    double ms = (double)(nnrt_now_ns() - t0) / 1e6;
    if (step == 0) prefill_ms = ms;
    else decode_ms[step - 1] = ms;
    for (int b = 0; !rc && b < B; b++) {
      /* the logits of its last token: [B, V] (an input last), or row T - 1 of [B, T, V] */
      const float *row = logits + (g->last >= 0 ? (size_t)b : (size_t)b * (size_t)T + (size_t)T - 1) * (size_t)g->V;
      int n = g->len[b];
      if (g->check) {
        double rel = 0;
        rc = check_row(g, &gr, b, n, row, &rel);
        if (!rc && rel > worst) worst = rel;
      }
      g->tok[b][g->len[b]++] = sample(g, row, c);
      (void)n;
    }
  }
  if (!rc) {
    for (int b = 0; b < B; b++) {
      printf("sequence %d:", b);
      for (int k = 0; k < g->len[b]; k++) printf("%s%d", k == g->len[b] - g->steps ? " |" : " ", g->tok[b][k]);
      printf("\n");
    }
    int nd = g->steps - 1;
    double med = nd > 0 ? nnc_bench_quantile(decode_ms, nd, 0.5) : 0, total = 0;
    for (int i = 0; i < nd; i++) total += decode_ms[i];
    printf("prefill %.3f ms (B=%d, T=%d); decode %.3f ms a step (median of %d); %.1f tokens/s\n", prefill_ms, B, L,
           med, nd, nd > 0 ? (double)B * nd / (total / 1e3) : 0.0);
    printf("first call %.3f ms (the prefill and the one-time work after load)\n", first_ms);
    if (g->check) {
      double tol = md->tolerance > 0 ? md->tolerance : 1e-5;
      printf("check: every step's logits against a full forward: max relative error %.3g %s\n", worst,
             worst <= tol ? "ok" : "FAIL");
      rc = worst <= tol ? 0 : 1;
    }
  }
  nnc_graph_free(&gr);
  free(ids); free(pos); free(mask); free(logits); free(c); free(decode_ms);
  return rc;
}

int nnc_generate_main(const nnc_bench_model *md, int argc, char **argv) {
  gen g = {.md = md, .steps = 16, .top_p = 1.0, .seed = 1};
  int rc = parse(&g, argc, argv);
  if (!rc) rc = bind(&g);
  if (!rc) rc = read_prompts(&g);
  if (!rc && md->create(g.threads, &g.m)) {
    fprintf(stderr, "generate_%s: create failed\n", md->name);
    rc = 1;
  }
  if (!rc && !(g.weights = nnc_bench_weights(md, g.m, g.weights_path, g.check))) rc = 1;
  if (!rc) rc = generate(&g);
  free_gen(&g);
  return rc;
}
