/* support/nnc_train_data.c — reading and batching the training data. */
#include "nnc_train_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR 512
#define MAGIC 20240520
#define HEADER_INTS 256

void nnc_train_data_free(nnc_train_data *d) {
  free(d->tokens);
  free(d->x);
  free(d->y);
  free(d->perm);
  memset(d, 0, sizeof *d);
}

int nnc_train_read_tokens(const char *path, int64_t vocab, int64_t need, nnc_train_data *d, char *err) {
  memset(d, 0, sizeof *d);
  d->path = path;
  d->kind = NNC_TRAIN_TOKENS;
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, ERR, "%s: cannot open the token file", path);
    return 1;
  }
  int32_t h[HEADER_INTS];
  int rc = 0;
  if (fread(h, sizeof h, 1, f) != 1) {
    snprintf(err, ERR, "%s: expected a header of %d int32 (llm.c's token file), found a shorter file", path,
             HEADER_INTS);
    rc = 1;
  } else if (h[0] != MAGIC || h[1] != 1) {
    snprintf(err, ERR, "%s: expected magic %d and version 1 at byte 0 (llm.c's token file), found %d and %d", path,
             MAGIC, h[0], h[1]);
    rc = 1;
  } else if (h[2] < need) {
    snprintf(err, ERR, "%s: the header counts %d tokens; a batch needs at least %lld", path, h[2], (long long)need);
    rc = 1;
  }
  if (!rc) {
    d->n = h[2];
    d->tokens = malloc((size_t)d->n * sizeof *d->tokens);
    if (!d->tokens) {
      snprintf(err, ERR, "%s: out of memory for %lld tokens", path, (long long)d->n);
      rc = 1;
    }
  }
  if (!rc) {
    size_t got = fread(d->tokens, sizeof *d->tokens, (size_t)d->n, f);
    if (got != (size_t)d->n) {
      snprintf(err, ERR, "%s: the header counts %lld tokens, the file holds %zu (truncated at byte %lld)", path,
               (long long)d->n, got, (long long)(sizeof h + got * sizeof *d->tokens));
      rc = 1;
    }
  }
  for (int64_t i = 0; !rc && i < d->n; i++)
    if (d->tokens[i] >= vocab) {
      snprintf(err, ERR, "%s: token %lld (byte %lld) is %u; the model's vocabulary has %lld", path, (long long)i,
               (long long)(sizeof h + (size_t)i * sizeof *d->tokens), d->tokens[i], (long long)vocab);
      rc = 1;
    }
  fclose(f);
  if (rc) nnc_train_data_free(d);
  return rc;
}

/* Label k of tensor t (I32 or I64) as int64. */
static int64_t label_at(const nnrt_st_tensor *t, int64_t k) {
  if (t->dtype == NNRT_I32) {
    int32_t v;
    memcpy(&v, (const char *)t->data + k * 4, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, (const char *)t->data + k * 8, 8);
  return v;
}

static int check_classes(const char *path, const nnrt_st_tensor *x, const nnrt_st_tensor *y, int64_t features,
                         int64_t need, char *err) {
  int64_t n = x->rank ? x->shape[0] : 0;
  if (x->dtype != NNRT_F32 || x->rank < 1 || x->numel != n * features) {
    snprintf(err, ERR, "%s: tensor x: expected F32 [N, %lld] (N samples of the model's %lld features), found %s "
             "of %lld values", path, (long long)features, (long long)features, nnrt_dtype_name(x->dtype),
             (long long)x->numel);
    return 1;
  }
  if ((y->dtype != NNRT_I32 && y->dtype != NNRT_I64) || y->rank != 1 || y->shape[0] != n) {
    snprintf(err, ERR, "%s: tensor y: expected I32 or I64 [%lld] (a label per sample of x), found %s with %lld "
             "values", path, (long long)n, nnrt_dtype_name(y->dtype), (long long)y->numel);
    return 1;
  }
  if (n < need) {
    snprintf(err, ERR, "%s: %lld samples; a batch needs at least %lld", path, (long long)n, (long long)need);
    return 1;
  }
  return 0;
}

int nnc_train_read_classes(const char *path, int64_t features, int64_t classes, int64_t need, nnc_train_data *d,
                           char *err) {
  memset(d, 0, sizeof *d);
  d->path = path;
  d->kind = NNC_TRAIN_CLASSES;
  d->features = features;
  nnrt_st *st = NULL;
  nnrt_error e = {0};
  const nnrt_st_tensor *x = NULL, *y = NULL;
  if (nnrt_st_open(path, &st, &e) || nnrt_st_find(st, "x", &x, &e) || nnrt_st_find(st, "y", &y, &e)) {
    snprintf(err, ERR, "%s", e.msg);
    nnrt_st_close(st);
    return 1;
  }
  int rc = check_classes(path, x, y, features, need, err);
  if (!rc) {
    d->n = x->shape[0];
    d->x = malloc((size_t)(d->n * features + 1) * sizeof *d->x);
    d->y = malloc((size_t)(d->n + 1) * sizeof *d->y);
    if (!d->x || !d->y) {
      snprintf(err, ERR, "%s: out of memory for %lld samples", path, (long long)d->n);
      rc = 1;
    }
  }
  if (!rc && nnrt_st_copy(st, x, d->x, (size_t)(d->n * features) * sizeof *d->x, &e)) {
    snprintf(err, ERR, "%s", e.msg);
    rc = 1;
  }
  for (int64_t k = 0; !rc && k < d->n; k++) {
    int64_t v = label_at(y, k);
    if (v < 0 || v >= classes) {
      snprintf(err, ERR, "%s: y[%lld] is %lld; the model has %lld classes", path, (long long)k, (long long)v,
               (long long)classes);
      rc = 1;
    }
    d->y[k] = (int32_t)v;
    for (int64_t f = 0; !rc && f < features; f++)
      if (!isfinite(d->x[k * features + f])) {
        snprintf(err, ERR, "%s: x[%lld][%lld] is %g; samples must be finite", path, (long long)k, (long long)f,
                 (double)d->x[k * features + f]);
        rc = 1;
      }
  }
  nnrt_st_close(st);
  if (rc) nnc_train_data_free(d);
  return rc;
}

uint64_t nnc_train_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Sample r of pass e over the data: r itself, or its place in a shuffle
 * (Fisher-Yates) drawn from seed and e. */
static int64_t sample_at(nnc_train_data *d, int64_t e, int64_t r, int shuffle, uint64_t seed) {
  if (!shuffle || !d->perm) return r;
  int64_t *perm = d->perm;
  if (d->perm_pass != e) {
    uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(e + 1));
    for (int64_t k = 0; k < d->n; k++) perm[k] = k;
    for (int64_t k = d->n - 1; k > 0; k--) {
      int64_t j = (int64_t)(nnc_train_splitmix64(&s) % (uint64_t)(k + 1));
      int64_t t = perm[k];
      perm[k] = perm[j];
      perm[j] = t;
    }
    d->perm_pass = e;
  }
  return perm[r];
}

void nnc_train_batch(nnc_train_data *d, int64_t i, int64_t B, int64_t T, int shuffle, uint64_t seed, int rank,
                     int world, void *a, int32_t *b) {
  if (d->kind == NNC_TRAIN_TOKENS) {
    /* the global batches (world x B rows) that fit before the wrap,
     * positions 0, span, ...: the last starts at most at n - 1 - span */
    const int64_t span = B * T, fit = (d->n - 1) / (span * world);
    const int64_t p = (i % fit) * span * world + rank * span;
    int32_t *ids = a;
    for (int64_t k = 0; k < span; k++) {
      ids[k] = d->tokens[p + k];
      b[k] = d->tokens[p + k + 1];
    }
    return;
  }
  const int64_t nb = d->n / (B * world), pass = i / nb, j = i % nb;
  float *x = a;
  for (int64_t r = 0; r < B; r++) {
    int64_t s = sample_at(d, pass, (j * world + rank) * B + r, shuffle, seed);
    memcpy(x + r * d->features, d->x + s * d->features, (size_t)d->features * sizeof *x);
    b[r] = d->y[s];
  }
}
