/* runtime/train.c — what a training step needs besides its kernels and the
 * optimizer update: the learning-rate schedule, the weight-decay name
 * patterns, and checkpoints (weights, optimizer state and step count in one
 * safetensors file that an inference build of the same model also loads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt.h"

float nnrt_lr_at(const nnrt_lr_schedule *s, int64_t step) {
  if (step < 1) step = 1;
  if (s->warmup > 0 && step <= s->warmup) return s->lr * (float)step / (float)s->warmup;
  if (s->decay <= 0) return s->lr;
  double t = (double)(step - (s->warmup > 0 ? s->warmup : 0)) / (double)s->decay;
  if (t > 1) t = 1;
  const double pi = 3.14159265358979323846;
  double f = s->min_ratio + (1.0 - s->min_ratio) * 0.5 * (1.0 + cos(pi * t));
  return (float)(s->lr * f);
}

/* Glob match of name against pattern [p, end): '*' matches any run. */
static bool glob(const char *p, const char *end, const char *name) {
  if (p == end) return *name == 0;
  if (*p == '*') {
    for (const char *n = name;; n++) {
      if (glob(p + 1, end, n)) return true;
      if (!*n) return false;
    }
  }
  return *name && *p == *name && glob(p + 1, end, name + 1);
}

bool nnrt_name_matches(const char *patterns, const char *name) {
  if (!patterns || !name) return false;
  for (const char *p = patterns;;) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    while (p < end && *p == ' ') p++;
    const char *e = end;
    while (e > p && e[-1] == ' ') e--;
    if (e > p && glob(p, e, name)) return true;
    if (!*end) return false;
    p = end + 1;
  }
}

/* ------------------------------------------------------------ checkpoints */

#define STEP_NAME NNRT_CKPT_STEP
#define SCALE_NAME "optim.loss_scale"
#define COUNTS_NAME "optim.scale_counts"

static int64_t numel_of(const nnrt_st_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->rank; i++) n *= d->shape[i];
  return n;
}

/* The name of weight i's state tensor: "optim.m.<name>" or "optim.v.<name>". */
static char *state_name(const char *which, const char *name) {
  size_t n = strlen(which) + strlen(name) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s%s", which, name);
  return s;
}

nnrt_status nnrt_ckpt_save(const char *path, const nnrt_ckpt *c, nnrt_error *err) {
  if (!path || !c || c->n < 0) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_ckpt_save: NULL path or checkpoint");
  const int scaled = c->scale.scale > 0;
  int total = 3 * c->n + 1 + 2 * scaled;
  nnrt_st_desc *d = calloc((size_t)total, sizeof *d);
  const void **data = calloc((size_t)total, sizeof *data);
  char **names = calloc((size_t)(2 * c->n + 1), sizeof *names);
  nnrt_status st = d && data && names ? NNRT_OK : nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory", path);
  for (int i = 0; !st && i < c->n; i++) {
    d[i] = c->manifest[i];
    data[i] = c->w[i];
    names[2 * i] = state_name(NNRT_CKPT_MOM, c->manifest[i].name);
    names[2 * i + 1] = state_name(NNRT_CKPT_VEL, c->manifest[i].name);
    if (!names[2 * i] || !names[2 * i + 1]) {
      st = nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory", path);
      break;
    }
    for (int k = 0; k < 2; k++) {
      nnrt_st_desc *s = &d[c->n + 2 * i + k];
      *s = c->manifest[i];
      s->name = names[2 * i + k];
      s->dtype = NNRT_F32;
      data[c->n + 2 * i + k] = k ? c->vel[i] : c->mom[i];
    }
  }
  int64_t step = c->step, counts[2] = {c->scale.good, c->scale.skipped};
  float scale = c->scale.scale;
  if (!st) {
    d[3 * c->n] = (nnrt_st_desc){STEP_NAME, NNRT_I64, 1, {1}};
    data[3 * c->n] = &step;
    if (scaled) {
      d[3 * c->n + 1] = (nnrt_st_desc){SCALE_NAME, NNRT_F32, 1, {1}};
      data[3 * c->n + 1] = &scale;
      d[3 * c->n + 2] = (nnrt_st_desc){COUNTS_NAME, NNRT_I64, 1, {2}};
      data[3 * c->n + 2] = counts;
    }
    st = nnrt_st_write(path, total, d, data, err);
  }
  for (int i = 0; names && i < 2 * c->n; i++) free(names[i]);
  free(names);
  free(d);
  free((void *)data);
  return st;
}

/* Copies the F32 tensor name of shape like to dst, checking it. */
static nnrt_status load_state(const nnrt_st *st, const char *path, const char *which, const nnrt_st_desc *like,
                              float *dst, nnrt_error *err) {
  char *name = state_name(which, like->name);
  if (!name) return nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory", path);
  const nnrt_st_tensor *t;
  nnrt_status rc = nnrt_st_find(st, name, &t, err);
  if (!rc && (t->dtype != NNRT_F32 || t->numel != numel_of(like)))
    rc = nnrt_errorf(err, NNRT_E_FORMAT, "%s: tensor %s: expected F32 with %lld values (the optimizer state of %s), "
                   "found %s with %lld", path, name, (long long)numel_of(like), like->name, nnrt_dtype_name(t->dtype),
                   (long long)t->numel);
  if (!rc) rc = nnrt_st_copy(st, t, dst, (size_t)numel_of(like) * sizeof *dst, err);
  free(name);
  return rc;
}

nnrt_status nnrt_ckpt_load_state(const nnrt_st *st, const char *path, const nnrt_ckpt *c, int64_t *step,
                                 nnrt_error *err) {
  if (!st || !c || !step) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_ckpt_load_state: NULL argument");
  const nnrt_st_tensor *t = NULL;
  for (int i = 0; i < nnrt_st_count(st) && !t; i++)
    if (strcmp(nnrt_st_at(st, i)->name, STEP_NAME) == 0) t = nnrt_st_at(st, i);
  if (!t) {   /* weights only: a fresh optimizer */
    *step = 0;
    for (int i = 0; i < c->n; i++) {
      size_t n = (size_t)numel_of(&c->manifest[i]);
      if (n) memset(c->mom[i], 0, n * sizeof(float));
      if (n) memset(c->vel[i], 0, n * sizeof(float));
    }
    return NNRT_OK;
  }
  int64_t s = -1;
  if (t->dtype != NNRT_I64 || t->numel != 1)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: tensor " STEP_NAME ": expected I64 [1] (the steps taken), found %s "
                     "with %lld values", path ? path : "<checkpoint>", nnrt_dtype_name(t->dtype), (long long)t->numel);
  memcpy(&s, t->data, sizeof s);
  if (s < 0)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: tensor " STEP_NAME ": expected a count >= 0, found %lld",
                     path ? path : "<checkpoint>", (long long)s);
  for (int i = 0; i < c->n; i++) {
    nnrt_status rc = load_state(st, path ? path : "<checkpoint>", NNRT_CKPT_MOM, &c->manifest[i], c->mom[i], err);
    if (!rc) rc = load_state(st, path ? path : "<checkpoint>", NNRT_CKPT_VEL, &c->manifest[i], c->vel[i], err);
    if (rc) return rc;
  }
  *step = s;
  return NNRT_OK;
}

/* The tensor name of an open file, or NULL. */
static const nnrt_st_tensor *named(const nnrt_st *st, const char *name) {
  for (int i = 0; i < nnrt_st_count(st); i++)
    if (strcmp(nnrt_st_at(st, i)->name, name) == 0) return nnrt_st_at(st, i);
  return NULL;
}

nnrt_status nnrt_ckpt_load_scale(const nnrt_st *st, const char *path, nnrt_scale_state *out, nnrt_error *err) {
  if (!st || !out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_ckpt_load_scale: NULL argument");
  const char *where = path ? path : "<checkpoint>";
  memset(out, 0, sizeof *out);
  const nnrt_st_tensor *s = named(st, SCALE_NAME), *n = named(st, COUNTS_NAME);
  if (!s) return NNRT_OK;
  if (s->dtype != NNRT_F32 || s->numel != 1 || !n || n->dtype != NNRT_I64 || n->numel != 2)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: expected " SCALE_NAME " F32 [1] and " COUNTS_NAME " I64 [2] (the "
                       "loss scale, the good and the skipped updates), found %s with %lld values and %s", where,
                       nnrt_dtype_name(s->dtype), (long long)s->numel, n ? nnrt_dtype_name(n->dtype) : "none");
  nnrt_scale_state r;
  int64_t counts[2];
  memcpy(&r.scale, s->data, sizeof r.scale);
  memcpy(counts, n->data, sizeof counts);
  r.good = counts[0];
  r.skipped = counts[1];
  if (!(r.scale > 0) || !isfinite(r.scale) || r.good < 0 || r.skipped < 0)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: expected a finite loss scale > 0 and counts >= 0, found %g, %lld "
                       "and %lld", where, (double)r.scale, (long long)r.good, (long long)r.skipped);
  *out = r;
  return NNRT_OK;
}
