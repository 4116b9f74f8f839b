/* support/nnc_train.c — the training program: options, the step loop with
 * its progress lines, evaluation, checkpoints, and --check (the gradients
 * through the benchmark's float64 check, then two optimizer updates against
 * AdamW or SGD computed here in double). */
#include "nnc_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc_train_data.h"
#include "../runtime/nnrt_comm.h"

typedef struct options {
  const char *data, *val, *weights, *save, *resume;
  int64_t steps, batch, seq, accumulate, eval_every, eval_batches, save_every;
  int threads, json, check, shuffle, no_peaks;
  int rank, world;         /* --parallel=dp:M: this process's rank of the M (its dp group's under tp:N,dp:M),
                              each training on its rows */
  float loss_scale;        /* --loss-scale; 0: the model's (or the checkpoint's) */
  uint64_t seed;
  nnc_train_opts t;
} options;

static void usage(const nnc_train_model *md, FILE *f) {
  const int lm = md->kind == NNC_TRAIN_TOKENS;
  fprintf(f,
    "usage: train_%s --data FILE [options]     train\n"
    "       train_%s --check [options]         gradients and two updates against float64\n"
    "  --data FILE       %s\n"
    "  --val FILE        the same format, for --eval-every (and at the end)\n"
    "  --steps N         optimizer updates (default 10)\n"
    "  --batch B         rows per micro-batch (default min(%s max, 4))\n",
    md->name, md->name,
    lm ? "tokens in llm.c's .bin format (256 int32: 20240520, 1, count; uint16 tokens)"
       : "safetensors with x (F32 [N, features]) and y (I32 or I64 [N])",
    md->sym_names[md->batch_sym]);
  if (lm) fprintf(f, "  --seq T           tokens per row (default min(%s max, 64))\n", md->sym_names[md->seq_sym]);
  fprintf(f,
    "  --accumulate K    micro-batches per update (default 1)\n"
    "  --lr X            peak learning rate (default 1e-3)\n"
    "  --warmup N        linear warm-up updates (default 0)\n"
    "  --decay-steps N   cosine decay over N updates after the warm-up (default 0: none)\n"
    "  --min-lr-ratio R  where the decay ends, as a fraction of lr (default 0)\n"
    "  --wd X            weight decay (default 0.01); --no-decay P: names without it\n"
    "                    (comma-separated, '*' wildcards; default: the weights of rank 1)\n"
    "  --beta1 X --beta2 X --eps X   AdamW (default 0.9, 0.999, 1e-8); --sgd: SGD, momentum beta1\n"
    "  --clip X          largest global gradient norm (default 0: none)\n"
    "  --loss-scale X    the first loss scale: the gradients are computed times X (default 32768\n"
    "                    under f16 storage, else 1; a checkpoint's own when resuming)\n"
    "  --dynamic-scale   skip an update whose gradient is not finite and halve the scale, double it\n"
    "                    after --scale-window N good updates (default 2000); the default under f16\n"
    "  --fixed-scale     a non-finite gradient stops training, the scale stays\n"
    "  --weights FILE    initial weights (default: random from --seed)\n"
    "  --resume FILE     a checkpoint of --save: weights, optimizer state, updates taken\n"
    "  --save FILE       checkpoint at the end (and every --save-every N updates)\n"
    "  --eval-every N    validation loss every N updates (--eval-batches M: at most M batches, default 8)\n"
    "  --shuffle         %s\n"
    "  --seed N          random weights and shuffles (default 1)\n"
    "  --threads N       threads (default: one per CPU)\n"
    "  --json            one JSON object per update and per evaluation\n"
    "  --no-peaks        do not measure the machine's peak (MFU stays 0)\n"
    "  --check           the float64 checks instead of training\n",
    lm ? "(no effect on token files: they are read in order)" : "a new order of the samples on every pass");
}

static int parse_i(const char *s, int64_t lo, int64_t *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || v < lo) return 1;
  *out = v;
  return 0;
}

static int parse_f(const char *s, float *out) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || !isfinite(v)) return 1;
  *out = (float)v;
  return 0;
}

/* One option with a value; 1 when it is not one, -1 on a bad value. */
static int parse_value(options *o, const char *k, const char *v) {
  static const struct {
    const char *name;
    size_t off;
    int64_t lo;
  } ints[] = {
    {"--steps", offsetof(options, steps), 0}, {"--batch", offsetof(options, batch), 1},
    {"--seq", offsetof(options, seq), 1}, {"--accumulate", offsetof(options, accumulate), 1},
    {"--eval-every", offsetof(options, eval_every), 0}, {"--eval-batches", offsetof(options, eval_batches), 1},
    {"--save-every", offsetof(options, save_every), 0}, {"--warmup", offsetof(options, t.warmup), 0},
    {"--decay-steps", offsetof(options, t.decay), 0}, {"--scale-window", offsetof(options, t.scale_window), 1},
  };
  static const struct {
    const char *name;
    size_t off;
  } floats[] = {
    {"--lr", offsetof(options, t.lr)}, {"--min-lr-ratio", offsetof(options, t.min_ratio)},
    {"--wd", offsetof(options, t.weight_decay)}, {"--beta1", offsetof(options, t.beta1)},
    {"--beta2", offsetof(options, t.beta2)}, {"--eps", offsetof(options, t.eps)},
    {"--clip", offsetof(options, t.clip)}, {"--loss-scale", offsetof(options, loss_scale)},
  };
  static const struct {
    const char *name;
    size_t off;
  } strs[] = {
    {"--data", offsetof(options, data)}, {"--val", offsetof(options, val)},
    {"--weights", offsetof(options, weights)}, {"--save", offsetof(options, save)},
    {"--resume", offsetof(options, resume)}, {"--no-decay", offsetof(options, t.no_decay)},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (strcmp(k, ints[i].name) == 0) return parse_i(v, ints[i].lo, (int64_t *)((char *)o + ints[i].off)) ? -1 : 0;
  for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
    if (strcmp(k, floats[i].name) == 0) return parse_f(v, (float *)((char *)o + floats[i].off)) ? -1 : 0;
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (strcmp(k, strs[i].name) == 0) {
      *(const char **)((char *)o + strs[i].off) = v;
      return 0;
    }
  int64_t n;
  if (strcmp(k, "--threads") == 0) {
    if (parse_i(v, 1, &n) || n > NNRT_POOL_MAX_THREADS) return -1;
    o->threads = (int)n;
    return 0;
  }
  if (strcmp(k, "--seed") == 0) {
    if (parse_i(v, 0, &n)) return -1;
    o->seed = (uint64_t)n;
    return 0;
  }
  return 1;
}

/* 0 ok, -1 --help, 2 a bad command line. */
static int parse(const nnc_train_model *md, int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  const int64_t bmax = md->sym_max[md->batch_sym];
  o->steps = 10;
  o->batch = bmax < 4 ? bmax : 4;
  o->seq = md->seq_sym < 0 ? 1 : md->sym_max[md->seq_sym] < 64 ? md->sym_max[md->seq_sym] : 64;
  o->accumulate = 1;
  o->eval_batches = 8;
  o->seed = 1;
  o->t = (nnc_train_opts){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i];
    if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
      usage(md, stdout);
      return -1;
    }
    if (strcmp(k, "--json") == 0) o->json = 1;
    else if (strcmp(k, "--check") == 0) o->check = 1;
    else if (strcmp(k, "--sgd") == 0) o->t.sgd = 1;
    else if (strcmp(k, "--shuffle") == 0) o->shuffle = 1;
    else if (strcmp(k, "--no-peaks") == 0) o->no_peaks = 1;
    else if (strcmp(k, "--dynamic-scale") == 0) o->t.dynamic_scale = 1;
    else if (strcmp(k, "--fixed-scale") == 0) o->t.dynamic_scale = -1;
    else {
      int rc = i + 1 < argc ? parse_value(o, k, argv[i + 1]) : 1;
      if (rc) {
        fprintf(stderr, "train_%s: %s %s: %s\n", md->name, k, i + 1 < argc ? argv[i + 1] : "",
                rc < 0 ? "bad value" : "unknown option or missing value");
        usage(md, stderr);
        return 2;
      }
      i++;
    }
  }
  if (o->batch > bmax || (md->seq_sym >= 0 && o->seq > md->sym_max[md->seq_sym])) {
    fprintf(stderr, "train_%s: --batch %lld and --seq %lld: expected at most the compiled maxima %lld and %lld\n",
            md->name, (long long)o->batch, (long long)o->seq, (long long)bmax,
            (long long)(md->seq_sym >= 0 ? md->sym_max[md->seq_sym] : 1));
    return 2;
  }
  if (!(o->t.lr > 0) || o->t.min_ratio > 1 || !(o->t.beta1 < 1) || !(o->t.beta2 < 1) || o->t.beta1 < 0 ||
      o->t.beta2 < 0 || o->t.eps < 0 || o->t.weight_decay < 0 || o->t.clip < 0 || o->t.min_ratio < 0) {
    fprintf(stderr, "train_%s: expected --lr > 0, --beta1 and --beta2 in [0, 1), --min-lr-ratio in [0, 1] and "
            "--eps, --wd, --clip >= 0; found lr %g, betas %g and %g, min-lr-ratio %g, eps %g, wd %g, clip %g\n",
            md->name, o->t.lr, o->t.beta1, o->t.beta2, o->t.min_ratio, o->t.eps, o->t.weight_decay, o->t.clip);
    return 2;
  }
  if (o->loss_scale < 0) {
    fprintf(stderr, "train_%s: expected --loss-scale > 0, found %g\n", md->name, o->loss_scale);
    return 2;
  }
  if (!o->check && !o->data) {
    fprintf(stderr, "train_%s: expected --data FILE (or --check)\n", md->name);
    usage(md, stderr);
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------ the model */

static double uniform(uint64_t *s) {
  return (double)(nnc_train_splitmix64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

static int64_t numel(const nnrt_st_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->rank; i++) n *= d->shape[i];
  return n;
}

static int fail(const nnc_train_model *md, void *m, const char *what) {
  fprintf(stderr, "train_%s: %s: %s\n", md->name, what, md->last_error(m));
  return 1;
}

/* Random weights: uniform in +-1/sqrt(last dim) for matrices (PyTorch's
 * default for linear layers), 0 for biases, 1 for the other vectors (norm
 * weights). */
static int random_weights(const nnc_train_model *md, void *m, uint64_t seed) {
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + 7;
  for (int i = 0; i < md->nparams; i++) {
    const nnrt_st_desc *d = &md->manifest[i];
    int64_t n = numel(d);
    float *w = malloc((size_t)(n + 1) * sizeof *w);
    if (!w) {
      fprintf(stderr, "train_%s: out of memory for %s\n", md->name, d->name);
      return 1;
    }
    size_t len = strlen(d->name);
    int bias = len >= 4 && strcmp(d->name + len - 4, "bias") == 0;
    double bound = d->rank >= 2 ? 1.0 / sqrt((double)d->shape[d->rank - 1]) : 0;
    for (int64_t k = 0; k < n; k++) w[k] = d->rank >= 2 ? (float)(bound * uniform(&s)) : bias ? 0.0f : 1.0f;
    int rc = md->set_weight(m, d->name, w, (size_t)n);
    free(w);
    if (rc) return fail(md, m, "set_weight");
  }
  return 0;
}

/* The buffers of one micro-batch at the largest sizes. */
typedef struct batch {
  int64_t sym[8];
  void *a;
  int32_t *b;
  int64_t rows, items;   /* rows, and tokens or samples */
} batch;

static int batch_init(const nnc_train_model *md, const options *o, batch *bt) {
  memset(bt, 0, sizeof *bt);
  for (int i = 0; i < md->nsyms && i < 8; i++) bt->sym[i] = md->sym_max[i];
  bt->sym[md->batch_sym] = o->batch;
  if (md->seq_sym >= 0) bt->sym[md->seq_sym] = o->seq;
  bt->rows = o->batch;
  bt->items = md->kind == NNC_TRAIN_TOKENS ? o->batch * o->seq : o->batch;
  size_t per = md->kind == NNC_TRAIN_TOKENS ? sizeof(int32_t) : (size_t)md->features * sizeof(float);
  bt->a = malloc((size_t)bt->items * per + 4);
  bt->b = malloc((size_t)bt->items * sizeof *bt->b + 4);
  if (bt->a && bt->b) return 0;
  fprintf(stderr, "train_%s: out of memory for a batch\n", md->name);
  return 1;
}

static void batch_free(batch *bt) {
  free(bt->a);
  free(bt->b);
}

/* A data file with at least one batch of `world` ranks' rows. */
static int read_data(const nnc_train_model *md, const options *o, const char *path, int world, nnc_train_data *d) {
  char err[512];
  int rc = md->kind == NNC_TRAIN_TOKENS
               ? nnc_train_read_tokens(path, md->classes, o->batch * o->seq * world + 1, d, err)
               : nnc_train_read_classes(path, md->features, md->classes, o->batch * world, d, err);
  if (rc) {
    fprintf(stderr, "train_%s: %s\n", md->name, err);
    return 1;
  }
  if (o->shuffle && md->kind == NNC_TRAIN_CLASSES) {
    d->perm = malloc((size_t)d->n * sizeof *d->perm);
    d->perm_pass = -1;
    if (!d->perm) {
      fprintf(stderr, "train_%s: out of memory for the shuffle of %s\n", md->name, path);
      return 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------ evaluation */

/* The mean loss over the validation data (at most --eval-batches batches
 * for a language model; every sample for a classifier, the last batch
 * short), and the classifier's accuracy (-1 without logits). */
static int evaluate(const nnc_train_model *md, void *m, const options *o, nnc_train_data *val, batch *bt,
                    double *loss, double *acc) {
  double sum = 0, count = 0, right = 0;
  int64_t nb = md->kind == NNC_TRAIN_TOKENS ? (val->n - 1) / bt->items : (val->n + o->batch - 1) / o->batch;
  if (md->kind == NNC_TRAIN_TOKENS && nb > o->eval_batches) nb = o->eval_batches;
  for (int64_t i = 0; i < nb; i++) {
    int64_t sym[8];
    memcpy(sym, bt->sym, sizeof sym);
    int64_t rows = o->batch;
    if (md->kind == NNC_TRAIN_CLASSES) {
      rows = val->n - i * o->batch < o->batch ? val->n - i * o->batch : o->batch;
      sym[md->batch_sym] = rows;
      memcpy(bt->a, val->x + i * o->batch * md->features, (size_t)(rows * md->features) * sizeof(float));
      memcpy(bt->b, val->y + i * o->batch, (size_t)rows * sizeof *bt->b);
    } else {
      nnc_train_batch(val, i, o->batch, o->seq, 0, 0, 0, 1, bt->a, bt->b);
    }
    float l = 0;
    if (md->eval(m, sym, bt->a, bt->b, &l)) return fail(md, m, "eval");
    double items = md->kind == NNC_TRAIN_TOKENS ? (double)bt->items : (double)rows;
    sum += (double)l * items;
    count += items;
    const float *logits = md->logits ? md->output(m, md->logits) : NULL;
    for (int64_t r = 0; logits && r < rows; r++) {
      int64_t best = 0;
      for (int64_t c = 1; c < md->classes; c++)
        if (logits[r * md->classes + c] > logits[r * md->classes + best]) best = c;
      right += best == bt->b[r];
    }
  }
  *loss = count > 0 ? sum / count : NAN;
  *acc = md->logits && count > 0 ? right / count : -1;
  return 0;
}

static void report_eval(const options *o, int64_t step, double loss, double acc) {
  if (o->json) {
    printf("{\"step\": %lld, \"val_loss\": %.9g", (long long)step, loss);
    if (acc >= 0) printf(", \"val_accuracy\": %.6f", acc);
    printf("}\n");
  } else {
    printf("step %6lld  val loss %.6f", (long long)step, loss);
    if (acc >= 0) printf("  accuracy %.2f%%", 100 * acc);
    printf("\n");
  }
  fflush(stdout);
}

/* -------------------------------------------------------------- training */

/* Floating-point work of one update, 6 flops per weight per token or
 * sample (forward 2, backward 4; attention's own work left out). */
static double flops_per_update(const nnc_train_model *md, const batch *bt, const options *o) {
  double w = 0;
  for (int i = 0; i < md->nparams; i++) w += (double)numel(&md->manifest[i]);
  return 6.0 * w * (double)bt->items * (double)o->accumulate;
}

static int train(const nnc_train_model *md, void *m, const options *o) {
  nnc_train_data data, val;
  memset(&val, 0, sizeof val);
  batch bt;
  if (read_data(md, o, o->data, o->world, &data)) return 1;
  int rc = o->val ? read_data(md, o, o->val, 1, &val) : 0;
  if (!rc) rc = batch_init(md, o, &bt);
  else memset(&bt, 0, sizeof bt);
  /* the MFU's peak: the device's measured GEMM rate, or the CPU's FMA rate */
  double peak = 0, gbps = 0;
  const bool measure = !rc && !o->no_peaks;
  if (measure && md->bench->peaks && md->bench->peaks(m, &peak, &gbps)) peak = 0;
  else if (measure && !md->bench->peaks) peak = nnc_bench_peak_gflops(o->threads);
  const double work = rc ? 0 : flops_per_update(md, &bt, o);
  const char *unit = md->kind == NNC_TRAIN_TOKENS ? "tokens" : "samples";
  int64_t step = rc ? 0 : md->steps(m);
  /* the scale is shown when it can change or was asked for */
  const int scaled = o->t.dynamic_scale > 0 || (o->t.dynamic_scale == 0 && md->dynamic_default) || md->scale(m) != 1;
  if (!rc && !o->json)
    printf("train_%s: %s, %lld %s; %lld updates of %lld x %lld %s%s from update %lld; peak %.0f GFLOP/s\n", md->name,
           o->data, (long long)data.n, unit, (long long)o->steps, (long long)o->accumulate, (long long)bt.items * o->world,
           unit, o->world > 1 ? " over the ranks" : "", (long long)step, peak);
  if (!rc && !o->json)
    printf("train_%s: optimizer state %lld bytes a rank%s\n", md->name, (long long)md->optim_bytes,
           md->zero1 ? " (ZeRO-1: a shard of the moments)" : "");
  /* --parallel=dp: what the gradient sums move a step, from the model's communicator */
  void (*comm)(const void *, uint64_t *, double *, double *) = md->bench ? md->bench->comm : NULL;
  while (!rc && step < o->steps) {
    uint64_t t0 = nnrt_now_ns(), c0 = 0, c1 = 0;
    double bus0 = 0, bus1 = 0, w0 = 0, w1 = 0;
    if (comm) comm(m, &c0, &bus0, &w0);
    /* the batches' position counts the skipped updates too, so that a resumed
     * run reads what an uninterrupted one does */
    const int64_t at = step + md->skipped(m);
    double loss = 0;
    for (int64_t k = 0; !rc && k < o->accumulate; k++) {
      nnc_train_batch(&data, at * o->accumulate + k, o->batch, o->seq, o->shuffle, o->seed, o->rank, o->world, bt.a,
                      bt.b);
      float l = 0;
      rc = md->accumulate(m, bt.sym, bt.a, bt.b, &l) ? fail(md, m, "accumulate") : 0;
      loss += l;
    }
    float lr = 0, norm = 0;
    loss /= (double)o->accumulate;
    if (!rc && !isfinite(loss)) {
      fprintf(stderr, "train_%s: update %lld: the loss is %g; stopping (the weights of update %lld are kept)\n",
              md->name, (long long)step + 1, loss, (long long)step);
      rc = 1;
    }
    const float scale = md->scale(m);
    const int64_t skipped = md->skipped(m);
    if (!rc && md->update(m, &o->t, &lr, &norm)) rc = fail(md, m, "update");
    if (rc) break;
    const int skip = md->skipped(m) > skipped;
    const double ms = (double)(nnrt_now_ns() - t0) * 1e-6;
    if (comm) comm(m, &c1, &bus1, &w1);
    /* every rank's rows: the ranks step together */
    const double per_s = (double)bt.items * (double)o->accumulate * o->world / (ms * 1e-3);
    const double mfu = peak > 0 ? work / (ms * 1e-3) / (peak * 1e9) : 0;
    if (o->json) {
      /* a skipped update's norm is not finite: null, as JSON has no inf or nan */
      char gn[32] = "null";
      if (isfinite(norm)) snprintf(gn, sizeof gn, "%.9g", (double)norm);
      printf("{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, \"ms\": %.3f, \"%s_per_s\": %.1f, "
             "\"mfu\": %.4f", (long long)step + 1, loss, (double)lr, gn, ms, unit, per_s, mfu);
      if (scaled)
        printf(", \"loss_scale\": %.9g, \"skipped\": %s, \"skipped_total\": %lld", (double)scale, skip ? "true" : "false",
               (long long)md->skipped(m));
      /* this rank's collectives in the step (every rank's are alike); bus bandwidth where they block (MPI) */
      if (comm)
        printf(", \"comm_bytes\": %llu, \"comm_bus_bytes\": %.6g, \"comm_wait_ms\": %.6g, \"comm_bus_gbps\": %.6g",
               (unsigned long long)(c1 - c0), bus1 - bus0, (w1 - w0) * 1e3,
               w1 > w0 ? (bus1 - bus0) / (w1 - w0) * 1e-9 : 0.0);
      printf("}\n");
    } else if (skip) {
      printf("step %6lld  loss %.6f  skipped: gradient norm %g at loss scale %g (now %g; %lld skipped)\n",
             (long long)step + 1, loss, (double)norm, (double)scale, (double)md->scale(m), (long long)md->skipped(m));
    } else {
      printf("step %6lld  loss %.6f  lr %.3e  grad norm %.4f  %8.2f ms  %10.0f %s/s  MFU %5.1f%%",
             (long long)step + 1, loss, (double)lr, (double)norm, ms, per_s, unit, 100 * mfu);
      if (scaled) printf("  scale %g", (double)scale);
      if (comm && c1 > c0) {
        printf("  comm %.2f MiB", (double)(c1 - c0) / 1048576.0);
        if (w1 > w0) printf(" (%.2f GB/s bus)", (bus1 - bus0) / (w1 - w0) * 1e-9);
      }
      printf("\n");
    }
    fflush(stdout);
    if (skip && !(scale > 1)) {
      fprintf(stderr, "train_%s: update %lld: the gradient is not finite at loss scale %g; stopping\n", md->name,
              (long long)step + 1, (double)scale);
      rc = 1;
    }
    if (skip || rc) continue;
    const int64_t done = ++step;
    if (o->val && o->eval_every > 0 && done % o->eval_every == 0 && done < o->steps) {
      double vl, acc;
      rc = evaluate(md, m, o, &val, &bt, &vl, &acc);
      if (!rc) report_eval(o, done, vl, acc);
    }
    /* the ranks hold the same weights: rank 0 writes them (under ZeRO-1
     * every rank takes part: each holds a shard of the optimizer state;
     * under tp:N every rank of the first dp group, o->rank 0: each holds
     * slices) */
    if (!rc && o->save && (!o->rank || md->zero1) && o->save_every > 0 && done % o->save_every == 0 && done < o->steps)
      rc = md->save(m, o->save) ? fail(md, m, "save") : 0;
  }
  if (!rc && o->val) {
    double vl, acc;
    rc = evaluate(md, m, o, &val, &bt, &vl, &acc);
    if (!rc) report_eval(o, step, vl, acc);
  }
  if (!rc && o->save && (!o->rank || md->zero1)) {
    rc = md->save(m, o->save) ? fail(md, m, "save") : 0;
    if (!rc && !o->json) printf("train_%s: saved %s (update %lld)\n", md->name, o->save, (long long)step);
  }
  batch_free(&bt);
  nnc_train_data_free(&data);
  nnc_train_data_free(&val);
  return rc;
}

/* ----------------------------------------------------------------- check */

/* The optimizer as the API documents it, in double, for one weight tensor. */
static void reference_update(const nnc_train_opts *o, int64_t t, double lr, double scale, int decay, const float *g,
                             double *w, double *mom, double *vel, int64_t n) {
  const double b1 = o->beta1, b2 = o->beta2, wd = decay ? o->weight_decay : 0;
  for (int64_t k = 0; k < n; k++) {
    const double gk = (double)g[k] * scale;
    if (o->sgd) {
      mom[k] = b1 * mom[k] + gk;
      w[k] -= lr * (mom[k] + wd * w[k]);
      continue;
    }
    mom[k] = b1 * mom[k] + (1 - b1) * gk;
    vel[k] = b2 * vel[k] + (1 - b2) * gk * gk;
    const double mh = mom[k] / (1 - pow(b1, (double)t)), vh = vel[k] / (1 - pow(b2, (double)t));
    w[k] -= lr * (mh / (sqrt(vh) + o->eps) + wd * w[k]);
  }
}

/* The schedule as the API documents it, in double. */
static double reference_lr(const nnc_train_opts *o, int64_t t) {
  if (o->warmup > 0 && t <= o->warmup) return (double)o->lr * (double)t / (double)o->warmup;
  if (o->decay <= 0) return o->lr;
  double p = fmin(1.0, (double)(t - o->warmup) / (double)o->decay);
  return o->lr * (o->min_ratio + (1 - o->min_ratio) * 0.5 * (1 + cos(3.14159265358979323846 * p)));
}

/* max |a - ref| / max |ref| of a float tensor against its double copy. */
static double tensor_error(const float *a, const double *ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t k = 0; k < n; k++) {
    diff = fmax(diff, fabs((double)a[k] - ref[k]));
    scale = fmax(scale, fabs(ref[k]));
  }
  if (diff != diff) return INFINITY;
  return scale > 0 ? diff / scale : diff;
}

typedef struct ref_state {
  double **w, **mom, **vel;
} ref_state;

static void ref_free(const nnc_train_model *md, ref_state *r) {
  for (int i = 0; i < md->nparams; i++) {
    if (r->w) free(r->w[i]);
    if (r->mom) free(r->mom[i]);
    if (r->vel) free(r->vel[i]);
  }
  free(r->w);
  free(r->mom);
  free(r->vel);
}

/* Weights and moments of the model, read back from a checkpoint, against r:
 * the largest error over the tensors into *err. */
static int compare_checkpoint(const nnc_train_model *md, void *m, const char *path, const ref_state *r,
                              double *err) {
  if (md->save(m, path)) return fail(md, m, "save");
  nnrt_st *st = NULL;
  nnrt_error e = {0};
  if (nnrt_st_open(path, &st, &e)) {
    fprintf(stderr, "train_%s: %s\n", md->name, e.msg);
    return 1;
  }
  int rc = 0;
  for (int i = 0; !rc && i < md->nparams; i++) {
    const char *pre[3] = {"", "optim.m.", "optim.v."};
    double *const ref[3] = {r->w[i], r->mom[i], r->vel[i]};
    for (int k = 0; !rc && k < 3; k++) {
      char name[600];
      snprintf(name, sizeof name, "%s%s", pre[k], md->manifest[i].name);
      const nnrt_st_tensor *t;
      int64_t n = numel(&md->manifest[i]);
      float *v = malloc((size_t)(n + 1) * sizeof *v);
      if (!v || nnrt_st_find(st, name, &t, &e) || nnrt_st_copy(st, t, v, (size_t)n * sizeof *v, &e)) {
        fprintf(stderr, "train_%s: %s\n", md->name, v ? e.msg : "out of memory");
        rc = 1;
      } else {
        *err = fmax(*err, tensor_error(v, ref[k], n));
      }
      free(v);
    }
  }
  nnrt_st_close(st);
  remove(path);
  return rc;
}

/* A copy of n floats (NULL stays NULL, or out of memory). */
static float *copy_of(const float *v, int64_t n) {
  float *c = v ? malloc((size_t)(n + 1) * sizeof *c) : NULL;
  if (c) memcpy(c, v, (size_t)n * sizeof *c);
  return c;
}

/* Right after an accumulate of loss on batch bt: the evaluation (the
 * forward alone) of the same batch gives the same loss and logits, and the
 * accumulated gradients stay as they were, bit for bit. */
static int check_eval(const nnc_train_model *md, void *m, const batch *bt, float loss) {
  const int64_t nl = bt->rows * md->classes;
  float *logits = md->logits ? copy_of(md->output(m, md->logits), nl) : NULL;
  float **g = calloc((size_t)md->nparams + 1, sizeof *g);
  int rc = !g || (md->logits && !logits);
  for (int i = 0; !rc && i < md->nparams; i++)
    if (!(g[i] = copy_of(md->gradient(m, md->manifest[i].name), numel(&md->manifest[i])))) rc = 1;
  if (rc) fprintf(stderr, "train_%s: out of memory (or no gradient) checking the evaluation\n", md->name);
  float el = 0;
  if (!rc && md->eval(m, bt->sym, bt->a, bt->b, &el)) rc = fail(md, m, "eval");
  int same_grads = 1;
  for (int i = 0; !rc && i < md->nparams; i++) {
    const float *now = md->gradient(m, md->manifest[i].name);
    same_grads = same_grads && now && memcmp(now, g[i], (size_t)numel(&md->manifest[i]) * sizeof *now) == 0;
  }
  const float *el_logits = !rc && md->logits ? md->output(m, md->logits) : NULL;
  const int same_logits = !md->logits || (el_logits && memcmp(el_logits, logits, (size_t)nl * sizeof *logits) == 0);
  const double lerr = fabs((double)el - loss) / fmax(fabs((double)loss), 1e-30);
  const char *grads = same_grads ? "untouched" : "CHANGED";
  if (!rc && el == loss)
    printf("  evaluation (the forward alone) of update 1's batch: loss %.6f, the same bits as the accumulate's; "
           "the gradients %s\n", el, grads);
  else if (!rc)
    printf("  evaluation (the forward alone) of update 1's batch: loss %.6f, off the accumulate's by %.3g "
           "(relative); the gradients %s\n", el, lerr, grads);
  if (!rc && md->logits) printf("  its %s: %s\n", md->logits, same_logits ? "the same bits" : "DIFFER");
  if (!rc && !(lerr <= 1e-5 && same_grads && same_logits)) {
    fprintf(stderr, "train_%s: --check FAILED: the evaluation %s\n", md->name,
            !same_grads ? "changed the accumulated gradients" : "differs from the accumulate's forward");
    rc = 1;
  }
  for (int i = 0; g && i < md->nparams; i++) free(g[i]);
  free(g);
  free(logits);
  return rc;
}

/* Two updates on random batches against the optimizer in double, from the
 * same random weights; the state is read back through _save. */
static int check_updates(const nnc_train_model *md, const options *o) {
  void *m = NULL;
  if (md->create(o->threads, &m)) return fail(md, NULL, "create");
  batch bt;
  ref_state r = {calloc((size_t)md->nparams + 1, sizeof(double *)), calloc((size_t)md->nparams + 1, sizeof(double *)),
                 calloc((size_t)md->nparams + 1, sizeof(double *))};
  int rc = random_weights(md, m, o->seed);
  if (!rc && o->loss_scale > 0 && md->set_scale(m, o->loss_scale)) rc = fail(md, m, "--loss-scale");
  if (!rc) rc = batch_init(md, o, &bt);
  else memset(&bt, 0, sizeof bt);
  if (!rc && !(r.w && r.mom && r.vel)) rc = 1;
  for (int i = 0; !rc && i < md->nparams; i++) {
    int64_t n = numel(&md->manifest[i]);
    r.w[i] = malloc((size_t)(n + 1) * sizeof(double));
    r.mom[i] = calloc((size_t)n + 1, sizeof(double));
    r.vel[i] = calloc((size_t)n + 1, sizeof(double));
    if (!r.w[i] || !r.mom[i] || !r.vel[i]) rc = 1;
  }
  /* the initial weights, as the first checkpoint holds them */
  char path[64];
  snprintf(path, sizeof path, "train_%s_check.safetensors", md->name);
  if (!rc && md->save(m, path)) rc = fail(md, m, "save");
  nnrt_st *st = NULL;
  nnrt_error e = {0};
  if (!rc && nnrt_st_open(path, &st, &e)) rc = 1;
  for (int i = 0; !rc && i < md->nparams; i++) {
    const nnrt_st_tensor *t;
    int64_t n = numel(&md->manifest[i]);
    if (nnrt_st_find(st, md->manifest[i].name, &t, &e)) rc = 1;
    for (int64_t k = 0; !rc && k < n; k++) {
      float v;
      memcpy(&v, (const char *)t->data + k * 4, 4);
      r.w[i][k] = v;
    }
  }
  nnrt_st_close(st);
  uint64_t s = o->seed + 99;
  double worst = 0;
  int retries = 0;
  for (int64_t t = 1; !rc && t <= 2; t++) {
    const uint64_t batch_seed = s;
    for (int64_t k = 0; k < bt.items; k++) {
      bt.b[k] = (int32_t)(nnc_train_splitmix64(&s) % (uint64_t)md->classes);
      if (md->kind == NNC_TRAIN_TOKENS)
        ((int32_t *)bt.a)[k] = (int32_t)(nnc_train_splitmix64(&s) % (uint64_t)md->classes);
    }
    for (int64_t k = 0; md->kind == NNC_TRAIN_CLASSES && k < bt.items * md->features; k++)
      ((float *)bt.a)[k] = (float)uniform(&s);
    float loss = 0, lr = 0, norm = 0;
    if (md->accumulate(m, bt.sym, bt.a, bt.b, &loss)) rc = fail(md, m, "accumulate");
    if (!rc && t == 1) rc = check_eval(md, m, &bt, loss);
    /* the gradients come times the loss scale; an update skipped for an
     * overflow (dynamic scaling) is tried again on the same batch at half
     * the scale */
    const double ls = md->scale(m);
    const int64_t skipped = md->skipped(m);
    if (!rc && md->update(m, &o->t, &lr, &norm)) rc = fail(md, m, "update");
    if (!rc && md->skipped(m) > skipped) {
      printf("  update %lld: skipped at loss scale %g (the gradient is not finite), again at %g\n", (long long)t, ls,
             (double)md->scale(m));
      if (++retries > 24) rc = fail(md, m, "--check: every update skipped");
      s = batch_seed;
      t--;
      continue;
    }
    /* the reference from the gradients the update used */
    double ss = 0;
    for (int i = 0; !rc && i < md->nparams; i++) {
      const float *g = md->gradient(m, md->manifest[i].name);
      for (int64_t k = 0; g && k < numel(&md->manifest[i]); k++) ss += (double)g[k] * g[k];
    }
    const double gnorm = sqrt(ss) / ls;
    const double scale = (o->t.clip > 0 && gnorm > o->t.clip ? o->t.clip / gnorm : 1) / ls;
    const double rlr = reference_lr(&o->t, t);
    for (int i = 0; !rc && i < md->nparams; i++) {
      const nnrt_st_desc *d = &md->manifest[i];
      int decay = o->t.no_decay ? !nnrt_name_matches(o->t.no_decay, d->name) : d->rank >= 2;
      reference_update(&o->t, t, rlr, scale, decay, md->gradient(m, d->name), r.w[i], r.mom[i], r.vel[i],
                       numel(d));
    }
    double err = fabs(lr - rlr) / rlr + fabs(norm - gnorm) / fmax(gnorm, 1e-30);
    if (!rc) rc = compare_checkpoint(md, m, path, &r, &err);
    if (!rc)
      printf("  update %lld: loss %.6f, lr %.4g, gradient norm %.6g, loss scale %g; weights and moments against "
             "float64: max relative error %.3g %s\n", (long long)t, loss, lr, norm, ls, err, err <= 1e-5 ? "ok" : "FAILED");
    worst = fmax(worst, err);
  }
  remove(path);
  if (!rc && !(worst <= 1e-5)) {
    fprintf(stderr, "train_%s: --check FAILED: an update is off the float64 optimizer by %g (tolerance 1e-5)\n",
            md->name, worst);
    rc = 1;
  }
  ref_free(md, &r);
  batch_free(&bt);
  md->destroy(m);
  return rc;
}

static int check(const nnc_train_model *md, const options *o) {
  char threads[32];
  snprintf(threads, sizeof threads, "%d", o->threads > 0 ? o->threads : 0);
  char *argv[] = {(char *)md->name, "--check", "--runs", "1", "--warmup", "0", "--no-peaks", "--threads", threads,
                  NULL};
  printf("train_%s --check: the loss and every gradient against the float64 reference (bench_%s --check)\n",
         md->name, md->name);
  fflush(stdout);
  int rc = nnc_bench_main(md->bench, o->threads > 0 ? 9 : 7, argv);
  if (rc) return rc;
  printf("train_%s --check: two %s updates against the optimizer in float64\n", md->name, o->t.sgd ? "SGD" : "AdamW");
  return check_updates(md, o);
}

int nnc_train_main(const nnc_train_model *md, int argc, char **argv) {
  options o;
  int rc = parse(md, argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  o.world = md->world > 1 ? md->world : 1;
  if (o.world > 1) {
    /* the ranks of --parallel=dp:M, from the launch (mpirun); the model's
     * communicator checks the same world when it is created */
    nnrt_comm_launch l;
    nnrt_error e = {0};
    if (nnrt_comm_launch_read(&l, &e)) {
      fprintf(stderr, "train_%s: %s\n", md->name, e.msg);
      return 1;
    }
    /* under tp:N,dp:M the world's rank is dp index * N + tp index: the rows
     * are the dp group's (every rank of a tp group reads the same) */
    const int tp = md->tp > 1 ? md->tp : 1;
    o.rank = l.rank / tp;
    if (o.check) {
      fprintf(stderr, "train_%s: --check runs in one process; a dp:%d build trains under mpirun -np %d\n", md->name,
              o.world, o.world * tp);
      return 2;
    }
    /* rank 0 reports for all: the others print only their errors */
    if (o.rank && !freopen("/dev/null", "w", stdout)) return 1;
  }
  if (md->tp > 1) {
    /* the ranks of --parallel=tp:N read the same rows and each holds its
     * slices of the weights: every rank calls _save (it gathers the slices
     * for rank 0's whole file) and _load (each reads its slices) */
    nnrt_comm_launch l;
    nnrt_error e = {0};
    if (nnrt_comm_launch_read(&l, &e)) {
      fprintf(stderr, "train_%s: %s\n", md->name, e.msg);
      return 1;
    }
    /* o.rank stays the dp index: it picks a dp rank's rows, and these ranks share them */
    if (o.check) {
      /* --check compares whole gradients and moments with float64 in one
       * process; a rank's are slices (parallel_mpi checks tp:N against one
       * process instead) */
      fprintf(stderr, "train_%s: --check runs in one process on the whole model; build without --parallel to "
              "check it (a tp:%d rank holds slices of the gradients)\n", md->name, md->tp);
      return 2;
    }
    if (l.rank && !freopen("/dev/null", "w", stdout)) return 1;
  }
  if (o.check) return check(md, &o);
  void *m = NULL;
  if (md->create(o.threads, &m)) return fail(md, NULL, "create");
  if (o.resume) rc = md->load(m, o.resume) ? fail(md, m, o.resume) : 0;
  else if (o.weights) rc = md->load(m, o.weights) ? fail(md, m, o.weights) : 0;
  else rc = random_weights(md, m, o.seed);
  /* the first scale: a resumed run goes on with its checkpoint's */
  if (!rc && o.loss_scale > 0 && !o.resume) rc = md->set_scale(m, o.loss_scale) ? fail(md, m, "--loss-scale") : 0;
  if (!rc) rc = train(md, m, &o);
  /* a rank that failed leaves without the model's goodbye to the others
   * (MPI_Finalize would wait for ranks still waiting for it): mpirun then
   * ends the whole job at once */
  if (rc && (o.world > 1 || md->tp > 1)) return rc;
  md->destroy(m);
  return rc;
}
