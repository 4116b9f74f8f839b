/* support/nnc_weights.c — weights loading against a model's manifest. */
#include "nnc_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t nnc_weights_numel(const nnrt_st_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->rank; i++) n *= d->shape[i];
  return n;
}

int64_t nnc_weights_shard_numel(const nnrt_st_desc *d, const nnc_weights_shard *s) {
  if (!s->parts) return nnc_weights_numel(d);
  if (!s->whole) return nnc_weights_numel(d) / s->parts;
  int64_t len = d->shape[s->axis];
  return len ? nnc_weights_numel(d) / len * ((len + s->parts - 1) / s->parts) : 0;
}

/* A padded slice: rank's chunk of each outer run, zeros past the file's end. */
static void slice_padded(const unsigned char *src, size_t elem, int64_t outer, int64_t len, int64_t inner,
                         const nnc_weights_shard *s, int rank, unsigned char *out) {
  int64_t chunk = (len + s->parts - 1) / s->parts, lo = rank * chunk, hi = lo + chunk < len ? lo + chunk : len;
  size_t run = (size_t)(chunk * inner) * elem, have = hi > lo ? (size_t)((hi - lo) * inner) * elem : 0;
  for (int64_t o = 0; o < outer; o++, out += run) {
    if (have) memcpy(out, src + (size_t)((o * len + lo) * inner) * elem, have);
    memset(out + have, 0, run - have);
  }
}

void nnc_weights_slice(const void *full, size_t elem, const nnrt_st_desc *d, const nnc_weights_shard *s, int rank,
                       void *dst) {
  int64_t outer = 1, inner = 1, len = d->shape[s->axis];
  for (int i = 0; i < s->axis; i++) outer *= d->shape[i];
  for (int i = s->axis + 1; i < d->rank; i++) inner *= d->shape[i];
  if (s->whole) {
    slice_padded(full, elem, outer, len, inner, s, rank, dst);
    return;
  }
  int64_t chunk = len / ((int64_t)s->groups * s->parts), run = chunk * inner;
  const unsigned char *src = full;
  unsigned char *out = dst;
  for (int64_t o = 0; o < outer; o++)
    for (int g = 0; g < s->groups; g++, out += (size_t)run * elem)
      memcpy(out, src + (size_t)((o * len + ((int64_t)g * s->parts + rank) * chunk) * inner) * elem, (size_t)run * elem);
}

/* slice_padded's inverse: the rank's rows below the file's end back in place. */
static void unslice_padded(const unsigned char *part, size_t elem, int64_t outer, int64_t len, int64_t inner,
                           const nnc_weights_shard *s, int rank, unsigned char *full) {
  int64_t chunk = (len + s->parts - 1) / s->parts, lo = rank * chunk, hi = lo + chunk < len ? lo + chunk : len;
  size_t run = (size_t)(chunk * inner) * elem, have = hi > lo ? (size_t)((hi - lo) * inner) * elem : 0;
  for (int64_t o = 0; o < outer && have; o++, part += run)
    memcpy(full + (size_t)((o * len + lo) * inner) * elem, part, have);
}

void nnc_weights_unslice(const void *part, size_t elem, const nnrt_st_desc *d, const nnc_weights_shard *s, int rank,
                         void *full) {
  int64_t outer = 1, inner = 1, len = d->shape[s->axis];
  for (int i = 0; i < s->axis; i++) outer *= d->shape[i];
  for (int i = s->axis + 1; i < d->rank; i++) inner *= d->shape[i];
  if (s->whole) {
    unslice_padded(part, elem, outer, len, inner, s, rank, full);
    return;
  }
  int64_t chunk = len / ((int64_t)s->groups * s->parts), run = chunk * inner;
  const unsigned char *in = part;
  unsigned char *dst = full;
  for (int64_t o = 0; o < outer; o++)
    for (int g = 0; g < s->groups; g++, in += (size_t)run * elem)
      memcpy(dst + (size_t)((o * len + ((int64_t)g * s->parts + rank) * chunk) * inner) * elem, in, (size_t)run * elem);
}

static int accepts(nnrt_dtype want, nnrt_dtype got) {
  return got == want || (want == NNRT_F32 && (got == NNRT_F16 || got == NNRT_BF16));
}

nnrt_status nnc_weights_load(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                          nnrt_error *err) {
  return nnc_weights_load_converted(st, manifest, n, dst, NULL, NULL, NULL, err);
}

nnrt_status nnc_weights_load_converted(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                                       const unsigned char *convert, nnc_weights_convert_fn fn, void *ctx,
                                       nnrt_error *err) {
  /* nnrt_st_check wants exact dtypes: check against a copy of the manifest
   * that takes the file's dtype wherever a conversion to f32 exists. */
  nnrt_st_desc *want = calloc((size_t)(n > 0 ? n : 1), sizeof *want);
  if (!want) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory checking the weights file");
  for (int i = 0; i < n; i++) {
    want[i] = manifest[i];
    const nnrt_st_tensor *t = NULL;
    if (nnrt_st_find(st, manifest[i].name, &t, NULL) == NNRT_OK && accepts(manifest[i].dtype, t->dtype))
      want[i].dtype = t->dtype;
  }
  nnrt_status rc = nnrt_st_check(st, want, n, NULL, 0, err);
  free(want);
  for (int i = 0; i < n && rc == NNRT_OK; i++) {
    const nnrt_st_tensor *t = NULL;
    rc = nnrt_st_find(st, manifest[i].name, &t, err);
    if (rc) break;
    size_t count = (size_t)nnc_weights_numel(&manifest[i]);
    if (convert && convert[i]) {
      /* one tensor's f32 values at a time: the held form is written from them */
      float *values = malloc(count * sizeof *values + 1);
      if (!values) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory converting %s", manifest[i].name);
      rc = nnrt_st_copy_f32(st, t, values, count, err);
      if (!rc) fn(ctx, i, values, dst[i]);
      free(values);
    } else if (manifest[i].dtype == NNRT_F32)
      rc = nnrt_st_copy_f32(st, t, dst[i], count, err);
    else
      rc = nnrt_st_copy(st, t, dst[i], count * nnrt_dtype_size(manifest[i].dtype), err);
  }
  return rc;
}

/* safetensors files are little-endian: raw bytes are f32 values only on such a host */
static int little_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one;
}

nnrt_status nnc_weights_load_shards(const nnrt_st *st, const nnrt_st_desc *manifest, const nnc_weights_shard *shards,
                                    int rank, int n, void *const *dst, nnrt_error *err) {
  /* the whole tensors are checked as nnc_weights_load checks them; tensors
   * kept whole load through it, one at a time */
  nnrt_status rc = NNRT_OK;
  for (int i = 0; i < n && rc == NNRT_OK; i++) {
    if (!shards[i].parts) {
      rc = nnc_weights_load(st, &manifest[i], 1, &dst[i], err);
      continue;
    }
    const nnrt_st_tensor *t = NULL;
    rc = nnrt_st_find(st, manifest[i].name, &t, err);
    if (rc) break;
    nnrt_st_desc want = manifest[i];
    if (accepts(manifest[i].dtype, t->dtype)) want.dtype = t->dtype;
    rc = nnrt_st_check(st, &want, 1, NULL, 0, err);
    if (rc) break;
    if (t->dtype == manifest[i].dtype && little_endian()) {
      nnc_weights_slice(t->data, (size_t)nnrt_dtype_size(t->dtype), &manifest[i], &shards[i], rank, dst[i]);
      continue;
    }
    size_t count = (size_t)nnc_weights_numel(&manifest[i]);
    float *whole = malloc(count * sizeof *whole + 1);
    if (!whole) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory converting %s to f32", manifest[i].name);
    rc = nnrt_st_copy_f32(st, t, whole, count, err);
    if (!rc) nnc_weights_slice(whole, sizeof *whole, &manifest[i], &shards[i], rank, dst[i]);
    free(whole);
  }
  return rc;
}

nnrt_status nnc_weights_load_state_shards(const nnrt_st *st, const char *path, const nnrt_st_desc *manifest,
                                          const nnc_weights_shard *shards, int rank, int n, float *const *mom,
                                          float *const *vel, int64_t *step, nnrt_error *err) {
  /* the steps taken, read and checked as one process reads them (no weights) */
  const nnrt_ckpt none = {0};
  nnrt_status rc = nnrt_ckpt_load_state(st, path, &none, step, err);
  const nnrt_st_tensor *t = NULL;
  const int fresh = !rc && nnrt_st_find(st, NNRT_CKPT_STEP, &t, NULL) != NNRT_OK;
  for (int i = 0; !rc && i < n; i++) {
    if (fresh) {   /* weights alone: a fresh optimizer */
      size_t count = (size_t)nnc_weights_shard_numel(&manifest[i], &shards[i]);
      if (count) memset(mom[i], 0, count * sizeof *mom[i]);
      if (count) memset(vel[i], 0, count * sizeof *vel[i]);
      continue;
    }
    /* each moment is an F32 tensor of its weight's shape: sliced as the weight is */
    for (int k = 0; !rc && k < 2; k++) {
      const char *which = k ? NNRT_CKPT_VEL : NNRT_CKPT_MOM;
      size_t len = strlen(which) + strlen(manifest[i].name) + 1;
      char *name = malloc(len);
      if (!name) return nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory", path);
      snprintf(name, len, "%s%s", which, manifest[i].name);
      nnrt_st_desc d = manifest[i];
      d.name = name;
      d.dtype = NNRT_F32;
      void *const dst[1] = {k ? vel[i] : mom[i]};
      rc = nnc_weights_load_shards(st, &d, &shards[i], rank, 1, dst, err);
      free(name);
    }
  }
  return rc;
}
