/* support/nnc_weights_quant.c — quantized checkpoints (nnc_weights_quant.h):
 * the file's form checked against the model's, loaded without
 * requantizing, written from the held form, and read back as f32. */
#include "nnc_weights_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCALE_SUFFIX ".scale"
#define SMOOTH_SUFFIX ".smooth"

/* The shapes of a quantized weight's two tensors in the file: N channels
 * of depth K, [N, K] when n_k. */
typedef struct qshapes {
  nnrt_st_desc values, scale;
} qshapes;

static qshapes shapes_of(const char *name, int N, int K, int n_k, int bits, int group) {
  qshapes s;
  memset(&s, 0, sizeof s);
  int64_t kv = bits == 4 ? ((int64_t)K + 1) / 2 : K, g = group ? ((int64_t)K + group - 1) / group : 1;
  s.values.name = name;
  s.values.dtype = bits == 4 ? NNRT_U8 : NNRT_I8;
  s.values.rank = s.scale.rank = 2;
  s.values.shape[0] = n_k ? N : kv;
  s.values.shape[1] = n_k ? kv : N;
  s.scale.dtype = NNRT_F32;
  s.scale.shape[0] = n_k ? N : g;
  s.scale.shape[1] = n_k ? g : N;
  return s;
}

static bool same_shape(const nnrt_st_desc *d, const nnrt_st_tensor *t) {
  if (d->rank != t->rank) return false;
  for (int i = 0; i < d->rank; i++)
    if (d->shape[i] != t->shape[i]) return false;
  return true;
}

static const char *shape_str(int rank, const int64_t *shape, char *buf, size_t size) {
  size_t len = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < rank && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (len < size) snprintf(buf + len, size - len, "]");
  return buf;
}

static char *suffixed(const char *name, const char *suffix) {
  size_t len = strlen(name) + strlen(suffix) + 1;
  char *s = malloc(len);
  if (s) snprintf(s, len, "%s%s", name, suffix);
  return s;
}

static char *scale_name(const char *name) { return suffixed(name, SCALE_SUFFIX); }

/* The weight's SmoothQuant factors, "<name>.smooth" ([K], each finite and
 * > 0), into a new buffer *out; *out NULL when the file has none. */
static nnrt_status read_smooth(const nnrt_st *st, const char *name, int K, float **out, nnrt_error *err) {
  *out = NULL;
  char *sname = suffixed(name, SMOOTH_SUFFIX);
  if (!sname) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory loading %s", name);
  const nnrt_st_tensor *t = NULL;
  nnrt_status rc = NNRT_OK;
  if (nnrt_st_find(st, sname, &t, NULL) != NNRT_OK) {
    free(sname);
    return NNRT_OK;
  }
  char a[96];
  if ((t->dtype != NNRT_F32 && t->dtype != NNRT_F16 && t->dtype != NNRT_BF16) || t->rank != 1 || t->shape[0] != K)
    rc = nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: expected F32 [%d] (SmoothQuant's factors of %s's %d input channels), "
                     "found %s %s", nnrt_st_label(st), sname, K, name, K, nnrt_dtype_name(t->dtype),
                     shape_str(t->rank, t->shape, a, sizeof a));
  float *v = !rc ? malloc((size_t)K * sizeof *v + 1) : NULL;
  if (!rc && !v) rc = nnrt_errorf(err, NNRT_E_NOMEM, "out of memory loading %s", sname);
  if (!rc) rc = nnrt_st_copy_f32(st, t, v, (size_t)K, err);
  for (int k = 0; !rc && k < K; k++)
    if (!(v[k] > 0.0f) || !isfinite(v[k]))
      rc = nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: factor %d is %g, expected a finite value > 0", nnrt_st_label(st),
                       sname, k, (double)v[k]);
  free(sname);
  if (rc) free(v);
  else *out = v;
  return rc;
}

/* The mode (and group) the file says its quantized tensors have, against
 * the model's; the first quantized tensor names the place. */
static nnrt_status check_mode(const nnrt_st *st, const char *name, const nnrt_st_tensor *t,
                              const nnc_weights_qform *form, nnrt_error *err) {
  const char *mode = nnrt_st_metadata(st, "nnc.quantize");
  if (!mode || strcmp(mode, form->mode) != 0)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: expected f32 values or %s's quantized ones, found %s values %s%s%s",
                       nnrt_st_label(st), name, form->mode, nnrt_dtype_name(t->dtype),
                       mode ? "quantized as " : "and no nnc.quantize in the file's metadata", mode ? mode : "",
                       mode ? " (the file's nnc.quantize)" : "");
  if (!form->group) return NNRT_OK;
  char want[32];
  snprintf(want, sizeof want, "%d", form->group);
  const char *group = nnrt_st_metadata(st, "nnc.group_size");
  if (!group || strcmp(group, want) != 0)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: expected %s's groups of %s k (nnc.group_size), found %s%s",
                       nnrt_st_label(st), name, form->mode, want, group ? group : "none",
                       group ? " (the file's nnc.group_size)" : " in the file's metadata");
  return NNRT_OK;
}

/* A tensor of the file against what the form says it is. */
static nnrt_status check_tensor(const nnrt_st *st, const nnrt_st_desc *want, const nnrt_st_tensor *t,
                                const char *mode, nnrt_error *err) {
  if (t->dtype == want->dtype && same_shape(want, t)) return NNRT_OK;
  char a[96], b[96];
  return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: expected %s %s (%s), found %s %s", nnrt_st_label(st), want->name,
                     nnrt_dtype_name(want->dtype), shape_str(want->rank, want->shape, a, sizeof a), mode,
                     nnrt_dtype_name(t->dtype), shape_str(t->rank, t->shape, b, sizeof b));
}

/* Every q within [-qmax, qmax] (int4: no pad nibble set), every scale finite and >= 0. */
static nnrt_status check_values(const nnrt_st *st, const char *name, const nnrt_st_tensor *q, const float *scale,
                                size_t nscale, int K, int n_k, const nnc_weights_qform *form, nnrt_error *err) {
  const unsigned char *b = q->data;
  for (size_t j = 0; j < q->nbytes; j++) {
    int lo, hi = 0;
    if (form->bits == 8) {
      lo = (int)(int8_t)b[j];
    } else {
      lo = (b[j] & 15) - ((b[j] & 8) << 1);
      hi = (b[j] >> 4) - ((b[j] & 128) >> 3);
      /* the byte's place along K: its high nibble is k = K past the end when K is odd */
      int64_t along = n_k ? (int64_t)(j % (size_t)q->shape[1]) : (int64_t)(j / (size_t)q->shape[1]);
      if (K % 2 && along == K / 2 && hi != 0)
        return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: byte %zu holds %d past K = %d, expected a pad nibble of 0",
                           nnrt_st_label(st), name, j, hi, K);
    }
    int bad = lo < -form->qmax || lo > form->qmax ? lo : hi < -form->qmax || hi > form->qmax ? hi : 0;
    if (bad)
      return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: byte %zu holds %d, expected %s's values in [-%d, %d]",
                         nnrt_st_label(st), name, j, bad, form->mode, form->qmax, form->qmax);
  }
  for (size_t j = 0; j < nscale; j++)
    if (!(scale[j] >= 0.0f) || !isfinite(scale[j]))
      return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s" SCALE_SUFFIX ": scale %zu is %g, expected a finite value >= 0",
                         nnrt_st_label(st), name, j, (double)scale[j]);
  return NNRT_OK;
}

/* One quantized weight stored as q and scales: checked, then imported. */
static nnrt_status load_one(const nnrt_st *st, const nnrt_st_desc *d, const nnrt_st_tensor *t, const int *shape,
                            const nnc_weights_qform *form, nnc_weights_import_fn import, void *ctx, int i, void *dst,
                            nnrt_error *err) {
  nnrt_status rc = check_mode(st, d->name, t, form, err);
  char *sname = scale_name(d->name);
  if (!sname) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory loading %s", d->name);
  qshapes s = shapes_of(d->name, shape[0], shape[1], shape[2], form->bits, form->group);
  s.scale.name = sname;
  const nnrt_st_tensor *ts = NULL;
  if (!rc) rc = check_tensor(st, &s.values, t, form->mode, err);
  if (!rc) rc = nnrt_st_find(st, sname, &ts, err);
  if (!rc) rc = check_tensor(st, &s.scale, ts, form->mode, err);
  size_t nscale = !rc ? (size_t)ts->numel : 0;
  float *scale = !rc ? malloc(nscale * sizeof *scale + 1) : NULL;
  if (!rc && !scale) rc = nnrt_errorf(err, NNRT_E_NOMEM, "out of memory loading %s", sname);
  if (!rc) rc = nnrt_st_copy_f32(st, ts, scale, nscale, err);
  if (!rc) rc = check_values(st, d->name, t, scale, nscale, shape[1], shape[2], form, err);
  if (!rc) import(ctx, i, t->data, scale, dst);
  free(scale);
  free(sname);
  return rc;
}

/* The f32 loader's quantize callback, called with the subset's index. */
typedef struct subset {
  nnc_weights_convert_fn quantize;
  void *ctx;
  const int *index;   /* the manifest's index of the subset's entry */
} subset;

static void quantize_at(void *ctx, int j, const float *values, void *dst) {
  const subset *s = ctx;
  s->quantize(s->ctx, s->index[j], values, dst);
}

nnrt_status nnc_weights_load_held(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                                  const unsigned char *quantized, const int (*shape)[3],
                                  const nnc_weights_qform *form, nnc_weights_convert_fn quantize,
                                  nnc_weights_import_fn import, nnc_weights_smooth_fn smooth, void *ctx,
                                  nnrt_error *err) {
  /* SmoothQuant's factors first: the values are quantized with them */
  for (int i = 0; smooth && i < n; i++) {
    if (!quantized[i]) continue;
    float *f = NULL;
    nnrt_status rc = read_smooth(st, manifest[i].name, shape[i][1], &f, err);
    if (!rc && smooth(ctx, i, f, dst[i], err)) rc = err->code ? err->code : NNRT_E_NOMEM;
    free(f);
    if (rc) return rc;
  }
  /* the weights stored as q and scales; the others load as any weights file's */
  nnrt_st_desc *rest = calloc((size_t)n + 1, sizeof *rest);
  void **rest_dst = calloc((size_t)n + 1, sizeof *rest_dst);
  unsigned char *rest_q = calloc((size_t)n + 1, 1);
  int *index = calloc((size_t)n + 1, sizeof *index);
  nnrt_status rc = rest && rest_dst && rest_q && index ? NNRT_OK
                                                       : nnrt_errorf(err, NNRT_E_NOMEM, "out of memory loading weights");
  int m = 0;
  for (int i = 0; !rc && i < n; i++) {
    const nnrt_st_tensor *t = NULL;
    if (quantized[i] && nnrt_st_find(st, manifest[i].name, &t, NULL) == NNRT_OK &&
        (t->dtype == NNRT_I8 || t->dtype == NNRT_U8)) {
      rc = load_one(st, &manifest[i], t, shape[i], form, import, ctx, i, dst[i], err);
      continue;
    }
    rest[m] = manifest[i];
    rest_dst[m] = dst[i];
    rest_q[m] = quantized[i];
    index[m++] = i;
  }
  subset sub = {quantize, ctx, index};
  if (!rc) rc = nnc_weights_load_converted(st, rest, m, rest_dst, rest_q, quantize_at, &sub, err);
  free(rest);
  free(rest_dst);
  free(rest_q);
  free(index);
  return rc;
}

nnrt_status nnc_weights_save_held(const char *path, const nnrt_st_desc *manifest, int n, void *const *w,
                                  const unsigned char *quantized, const int (*shape)[3],
                                  const nnc_weights_qform *form, nnc_weights_export_fn export_fn,
                                  nnc_weights_smooth_of_fn smooth_of, void *ctx, nnrt_error *err) {
  /* up to three tensors a weight; the buffers of the quantized ones owned here */
  nnrt_st_desc *desc = calloc(3 * (size_t)n + 1, sizeof *desc);
  const void **data = calloc(3 * (size_t)n + 1, sizeof *data);
  void **owned = calloc(4 * (size_t)n + 1, sizeof *owned);
  nnrt_status rc = desc && data && owned ? NNRT_OK : nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory", path);
  int m = 0, k = 0;
  for (int i = 0; !rc && i < n; i++) {
    if (!quantized[i]) {
      desc[m] = manifest[i];
      data[m++] = w[i];
      continue;
    }
    qshapes s = shapes_of(manifest[i].name, shape[i][0], shape[i][1], shape[i][2], form->bits, form->group);
    char *sname = scale_name(manifest[i].name);
    size_t nv = (size_t)(s.values.shape[0] * s.values.shape[1]), ns = (size_t)(s.scale.shape[0] * s.scale.shape[1]);
    void *values = malloc(nv + 1);
    float *scales = malloc(ns * sizeof *scales + 1);
    owned[k++] = sname;
    owned[k++] = values;
    owned[k++] = scales;
    if (!sname || !values || !scales) {
      rc = nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory for %s", path, manifest[i].name);
      break;
    }
    export_fn(ctx, i, w[i], values, scales);
    s.scale.name = sname;
    desc[m] = s.values;
    data[m++] = values;
    desc[m] = s.scale;
    data[m++] = scales;
    const float *f = smooth_of ? smooth_of(ctx, i, w[i]) : NULL;
    if (!f) continue;
    char *fname = suffixed(manifest[i].name, SMOOTH_SUFFIX);
    owned[k++] = fname;
    if (!fname) {
      rc = nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory for %s", path, manifest[i].name);
      break;
    }
    desc[m] = (nnrt_st_desc){fname, NNRT_F32, 1, {shape[i][1]}};
    data[m++] = f;
  }
  char group[32];
  snprintf(group, sizeof group, "%d", form->group);
  const char *meta[4] = {"nnc.quantize", form->mode, "nnc.group_size", group};
  if (!rc) rc = nnrt_st_write_meta(path, m, desc, data, form->group ? 2 : 1, meta, err);
  for (int j = 0; j < k; j++) free(owned[j]);
  free(owned);
  free(data);
  free(desc);
  return rc;
}

nnrt_status nnc_weights_read_f32(const nnrt_st *st, const nnrt_st_desc *d, float *out, nnrt_error *err) {
  const nnrt_st_tensor *t = NULL;
  nnrt_status rc = nnrt_st_find(st, d->name, &t, err);
  if (rc) return rc;
  if (!(t->dtype == NNRT_I8 || t->dtype == NNRT_U8) || d->rank != 2) {
    nnrt_st_desc want = *d;
    if (t->dtype == NNRT_F16 || t->dtype == NNRT_BF16) want.dtype = t->dtype;
    rc = nnrt_st_check(st, &want, 1, NULL, 0, err);
    return rc ? rc : nnrt_st_copy_f32(st, t, out, (size_t)nnc_weights_numel(d), err);
  }
  /* q and scales: the file's form, and which axis of d is K, from the tensors' shapes */
  nnc_weights_qform form = {nnrt_st_metadata(st, "nnc.quantize"), t->dtype == NNRT_U8 ? 4 : 8, 0, 0};
  const char *group = nnrt_st_metadata(st, "nnc.group_size");
  if (form.bits == 4) form.group = group ? atoi(group) : 0;
  if (!form.mode || (form.bits == 4 && form.group <= 0))
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: %s values without nnc.quantize%s in the file's metadata",
                       nnrt_st_label(st), d->name, nnrt_dtype_name(t->dtype), form.bits == 4 ? " and nnc.group_size" : "");
  char *sname = scale_name(d->name);
  const nnrt_st_tensor *ts = NULL;
  rc = sname ? nnrt_st_find(st, sname, &ts, err) : nnrt_errorf(err, NNRT_E_NOMEM, "out of memory reading %s", d->name);
  int n_k = -1, N = 0, K = 0;
  for (int o = 1; !rc && o >= 0 && n_k < 0; o--) {
    int nn = (int)(o ? d->shape[0] : d->shape[1]), kk = (int)(o ? d->shape[1] : d->shape[0]);
    qshapes s = shapes_of(d->name, nn, kk, o, form.bits, form.group);
    if (s.values.dtype == t->dtype && same_shape(&s.values, t) && ts->dtype == NNRT_F32 && same_shape(&s.scale, ts)) {
      n_k = o;
      N = nn;
      K = kk;
    }
  }
  char a[96], b[96], c[96];
  if (!rc && n_k < 0)
    rc = nnrt_errorf(err, NNRT_E_FORMAT, "%s: %s: %s %s with %s %s %s do not quantize a weight of %s (%s)",
                     nnrt_st_label(st), d->name, nnrt_dtype_name(t->dtype), shape_str(t->rank, t->shape, a, sizeof a),
                     sname, nnrt_dtype_name(ts->dtype), shape_str(ts->rank, ts->shape, b, sizeof b),
                     shape_str(d->rank, d->shape, c, sizeof c), form.mode);
  float *scale = !rc ? malloc((size_t)ts->numel * sizeof *scale + 1) : NULL;
  if (!rc && !scale) rc = nnrt_errorf(err, NNRT_E_NOMEM, "out of memory reading %s", sname);
  if (!rc) rc = nnrt_st_copy_f32(st, ts, scale, (size_t)ts->numel, err);
  const unsigned char *q = t->data;
  int64_t G = form.group ? ((int64_t)K + form.group - 1) / form.group : 1, kv = form.bits == 4 ? ((int64_t)K + 1) / 2 : K;
  for (int64_t n = 0; !rc && n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      int v;
      if (form.bits == 8) {
        v = (int)(int8_t)q[n_k ? n * K + k : k * N + n];
      } else {
        unsigned byte = q[n_k ? n * kv + k / 2 : k / 2 * N + n];
        v = (int)((byte >> (k % 2 * 4)) & 15u);
        v -= (v & 8) << 1;
      }
      int64_t g = form.group ? k / form.group : 0;
      out[n_k ? n * K + k : k * N + n] = (float)v * scale[n_k ? n * G + g : g * N + n];
    }
  /* a migrated weight's q * scale is W times s along K */
  float *f = NULL;
  if (!rc) rc = read_smooth(st, d->name, K, &f, err);
  for (int64_t n = 0; f && n < N; n++)
    for (int64_t k = 0; k < K; k++) out[n_k ? n * K + k : k * N + n] /= f[k];
  free(f);
  free(scale);
  free(sname);
  return rc;
}
