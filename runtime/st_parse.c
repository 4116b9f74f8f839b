/* runtime/st_parse.c — validation of a safetensors file.
 *
 * Layout: 8 bytes little-endian header length N, N bytes of JSON header, then
 * the data section. The header maps each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
 * data section) and may hold "__metadata__", an object of strings. Nothing in
 * the file is trusted: every size is checked before it is used, and every
 * message names the file and, where one is at fault, the tensor.
 *
 * Decided: gaps between tensors and bytes after the last one are accepted
 * (only overlap is an error); keys of an entry other than the three are
 * ignored. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_st_impl.h"

enum { JSON_MAX_DEPTH = 16 };
/* About ten JSON values per tensor: room for 400k tensors. */
#define JSON_MAX_VALUES ((size_t)4 << 20)

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* "label: tensor "name": " + the formatted rest. */
static nnrt_status tensor_error(nnrt_error *err, const nnrt_st *st, const char *name,
                                const char *fmt, ...) NNRT_PRINTF(4, 5);

static nnrt_status tensor_error(nnrt_error *err, const nnrt_st *st, const char *name,
                                const char *fmt, ...) {
  char rest[400], show[NNRT_SHOW_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rest, sizeof rest, fmt, ap);
  va_end(ap);
  return nnrt_errorf(err, NNRT_E_FORMAT, "%s: tensor \"%s\": %s", st->label,
                     nnrt_st_show(name, show), rest);
}

static nnrt_status parse_dtype(const nnrt_st *st, const char *name, const nnrt_json *e,
                               nnrt_dtype *out, nnrt_error *err) {
  const nnrt_json *v = nnrt_json_get(e, "dtype");
  char show[NNRT_SHOW_MAX];
  if (!v) return tensor_error(err, st, name, "expected a \"dtype\", found none");
  if (v->kind != NNRT_JSON_STRING)
    return tensor_error(err, st, name, "expected \"dtype\" to be a string, found %s",
                        nnrt_json_kind_name(v->kind));
  if (!nnrt_dtype_parse(v->s, out))
    return tensor_error(err, st, name,
                        "unknown dtype \"%s\" (expected F32, F16, BF16, F64, I8..I64, U8..U64, "
                        "BOOL, F8_E5M2 or F8_E4M3)",
                        nnrt_st_show(v->s, show));
  return NNRT_OK;
}

/* A JSON number as written, for messages. */
static void number_text(const nnrt_json *v, char *buf, size_t size) {
  if (v->kind != NNRT_JSON_NUMBER) {
    snprintf(buf, size, "%s", nnrt_json_kind_name(v->kind));
    return;
  }
  snprintf(buf, size, "%.*s", v->len > 40 ? 40 : (int)v->len, v->s);
}

static nnrt_status parse_shape(const nnrt_st *st, const char *name, const nnrt_json *e,
                               nnrt_st_tensor *t, nnrt_error *err) {
  const nnrt_json *v = nnrt_json_get(e, "shape");
  if (!v) return tensor_error(err, st, name, "expected a \"shape\", found none");
  if (v->kind != NNRT_JSON_ARRAY)
    return tensor_error(err, st, name, "expected \"shape\" to be an array, found %s",
                        nnrt_json_kind_name(v->kind));
  if (v->n > NNRT_MAX_RANK)
    return tensor_error(err, st, name, "shape has rank %zu, above the supported %d", v->n,
                        NNRT_MAX_RANK);
  t->rank = (int)v->n;
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < v->n; i++) {
    const nnrt_json *d = &v->items[i];
    if (d->kind != NNRT_JSON_NUMBER || !d->is_int || d->i < 0) {
      char txt[48];
      number_text(d, txt, sizeof txt);
      return tensor_error(err, st, name,
                          "expected shape dim %zu to be a non-negative integer, found %s", i, txt);
    }
    t->shape[i] = d->i;
    uint64_t dim = (uint64_t)d->i;
    if (dim && numel > (uint64_t)INT64_MAX / dim) overflow = true;
    else numel *= dim;
  }
  /* A zero dim makes the product 0 however large the others are. */
  for (int i = 0; i < t->rank; i++)
    if (t->shape[i] == 0) {
      numel = 0;
      overflow = false;
    }
  size_t esize = nnrt_dtype_size(t->dtype);
  if (overflow || numel > (uint64_t)INT64_MAX / esize) {
    char s[NNRT_SHAPE_MAX];
    return tensor_error(err, st, name, "shape %s of %s has more bytes than fit in 63 bits",
                        nnrt_st_shape_str(t->rank, t->shape, s), nnrt_dtype_name(t->dtype));
  }
  t->numel = (int64_t)numel;
  return NNRT_OK;
}

static nnrt_status parse_offsets(const nnrt_st *st, const char *name, const nnrt_json *e,
                                 uint64_t data_size, nnrt_st_tensor *t, nnrt_error *err) {
  const nnrt_json *v = nnrt_json_get(e, "data_offsets");
  if (!v) return tensor_error(err, st, name, "expected \"data_offsets\", found none");
  if (v->kind != NNRT_JSON_ARRAY)
    return tensor_error(err, st, name,
                        "expected \"data_offsets\" to be an array [begin, end], found %s",
                        nnrt_json_kind_name(v->kind));
  if (v->n != 2)
    return tensor_error(err, st, name,
                        "expected \"data_offsets\" to hold 2 integers [begin, end], found %zu",
                        v->n);
  for (int i = 0; i < 2; i++) {
    const nnrt_json *d = &v->items[i];
    if (d->kind != NNRT_JSON_NUMBER || !d->is_int || d->i < 0) {
      char txt[48];
      number_text(d, txt, sizeof txt);
      return tensor_error(err, st, name,
                          "expected data_offsets %s to be a non-negative integer, found %s",
                          i ? "end" : "begin", txt);
    }
  }
  uint64_t begin = (uint64_t)v->items[0].i, end = (uint64_t)v->items[1].i;
  if (begin > end)
    return tensor_error(err, st, name, "data_offsets [%llu, %llu] end before they begin",
                        (unsigned long long)begin, (unsigned long long)end);
  if (end > data_size)
    return tensor_error(err, st, name,
                        "data_offsets [%llu, %llu] run past the data section of %llu bytes "
                        "(file truncated?)",
                        (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_size);
  uint64_t need = (uint64_t)t->numel * nnrt_dtype_size(t->dtype);
  if (end - begin != need) {
    char s[NNRT_SHAPE_MAX];
    return tensor_error(err, st, name,
                        "data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %llu",
                        (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), nnrt_dtype_name(t->dtype),
                        nnrt_st_shape_str(t->rank, t->shape, s), (unsigned long long)need);
  }
  t->offset = begin;
  t->nbytes = (size_t)need;
  return NNRT_OK;
}

static nnrt_status check_metadata(const nnrt_st *st, const nnrt_json *m, nnrt_error *err) {
  char show[NNRT_SHOW_MAX];
  if (m->kind != NNRT_JSON_OBJECT)
    return nnrt_errorf(err, NNRT_E_FORMAT,
                       "%s: expected \"__metadata__\" to be an object of strings, found %s",
                       st->label, nnrt_json_kind_name(m->kind));
  for (size_t i = 0; i < m->n; i++)
    if (m->items[i].kind != NNRT_JSON_STRING)
      return nnrt_errorf(err, NNRT_E_FORMAT,
                         "%s: expected \"__metadata__\" value \"%s\" to be a string, found %s",
                         st->label, nnrt_st_show(m->items[i].key, show),
                         nnrt_json_kind_name(m->items[i].kind));
  return NNRT_OK;
}

static int cmp_offset(const void *a, const void *b) {
  const nnrt_st_tensor *x = *(const nnrt_st_tensor *const *)a;
  const nnrt_st_tensor *y = *(const nnrt_st_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const nnrt_st_tensor *)a)->name, ((const nnrt_st_tensor *)b)->name);
}

/* Tensors with bytes must not share any; empty ones occupy nothing. */
static nnrt_status check_overlap(const nnrt_st *st, nnrt_error *err) {
  if (st->n < 2) return NNRT_OK;
  const nnrt_st_tensor **idx = malloc((size_t)st->n * sizeof *idx);
  if (!idx) return nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory checking offsets", st->label);
  int m = 0;
  for (int i = 0; i < st->n; i++)
    if (st->tensors[i].nbytes) idx[m++] = &st->tensors[i];
  qsort(idx, (size_t)m, sizeof *idx, cmp_offset);
  nnrt_status rc = NNRT_OK;
  const nnrt_st_tensor *last = NULL;  /* the one reaching furthest so far */
  for (int i = 0; i < m && rc == NNRT_OK; i++) {
    if (last && idx[i]->offset < last->offset + last->nbytes) {
      char a[NNRT_SHOW_MAX], b[NNRT_SHOW_MAX];
      rc = nnrt_errorf(err, NNRT_E_FORMAT,
                       "%s: tensor \"%s\" at data_offsets [%llu, %llu] overlaps tensor \"%s\" "
                       "at [%llu, %llu]",
                       st->label, nnrt_st_show(idx[i]->name, a),
                       (unsigned long long)idx[i]->offset,
                       (unsigned long long)(idx[i]->offset + idx[i]->nbytes),
                       nnrt_st_show(last->name, b), (unsigned long long)last->offset,
                       (unsigned long long)(last->offset + last->nbytes));
    }
    if (!last || idx[i]->offset + idx[i]->nbytes > last->offset + last->nbytes) last = idx[i];
  }
  free(idx);
  return rc;
}

static nnrt_status parse_header(nnrt_st *st, uint64_t hlen, nnrt_error *err) {
  nnrt_json_limits lim = {JSON_MAX_DEPTH, JSON_MAX_VALUES};
  nnrt_status rc = nnrt_json_parse((const char *)st->base + 8, (size_t)hlen, lim, &st->doc, err);
  if (rc != NNRT_OK) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err ? err->msg : "");
    return nnrt_errorf(err, rc, "%s: header: %s", st->label, why);
  }
  const nnrt_json *root = nnrt_json_root(st->doc);
  if (root->kind != NNRT_JSON_OBJECT)
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: expected the header to be a JSON object, found %s",
                       st->label, nnrt_json_kind_name(root->kind));
  return NNRT_OK;
}

nnrt_status nnrt_st_parse(nnrt_st *st, nnrt_error *err) {
  if (st->size < 8)
    return nnrt_errorf(err, NNRT_E_FORMAT,
                       "%s: file is %zu bytes, shorter than the 8-byte header length", st->label,
                       st->size);
  uint64_t hlen = le64(st->base);
  if (hlen > NNRT_ST_MAX_HEADER)
    return nnrt_errorf(err, NNRT_E_FORMAT,
                       "%s: header length %llu is above the limit of %u bytes (not a "
                       "safetensors file?)",
                       st->label, (unsigned long long)hlen, NNRT_ST_MAX_HEADER);
  if (hlen > st->size - 8)
    return nnrt_errorf(err, NNRT_E_FORMAT,
                       "%s: header length %llu runs past the end of the file (%zu bytes after "
                       "the length)",
                       st->label, (unsigned long long)hlen, st->size - 8);
  nnrt_status rc = parse_header(st, hlen, err);
  if (rc != NNRT_OK) return rc;
  const nnrt_json *root = nnrt_json_root(st->doc);
  const unsigned char *data = st->base + 8 + hlen;
  uint64_t data_size = st->size - 8 - hlen;
  st->tensors = calloc(root->n ? root->n : 1, sizeof *st->tensors);
  if (!st->tensors) return nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory", st->label);
  for (size_t i = 0; i < root->n; i++) {
    const nnrt_json *e = &root->items[i];
    if (strcmp(e->key, "__metadata__") == 0) {
      if ((rc = check_metadata(st, e, err)) != NNRT_OK) return rc;
      st->metadata = e;
      continue;
    }
    if (e->kind != NNRT_JSON_OBJECT)
      return tensor_error(err, st, e->key,
                          "expected an object with dtype, shape and data_offsets, found %s",
                          nnrt_json_kind_name(e->kind));
    nnrt_st_tensor *t = &st->tensors[st->n];
    t->name = e->key;
    if ((rc = parse_dtype(st, e->key, e, &t->dtype, err)) != NNRT_OK) return rc;
    if ((rc = parse_shape(st, e->key, e, t, err)) != NNRT_OK) return rc;
    if ((rc = parse_offsets(st, e->key, e, data_size, t, err)) != NNRT_OK) return rc;
    t->data = data + t->offset;
    st->n++;
  }
  if ((rc = check_overlap(st, err)) != NNRT_OK) return rc;
  qsort(st->tensors, (size_t)st->n, sizeof *st->tensors, cmp_name);
  return NNRT_OK;
}
