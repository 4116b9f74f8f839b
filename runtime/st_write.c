/* runtime/st_write.c — writing a safetensors file (random weights for
 * `nnc weights`, fixtures for tests).
 *
 * The file is written under a temporary name next to path and renamed over
 * it at the end, so a failed write leaves no partial file behind and a
 * reader never sees a half-written one. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnrt_st_impl.h"

typedef struct buf {
  char *p;
  size_t len, cap;
  bool failed;
} buf;

static void put(buf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->cap - b->len < n + 1) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->failed = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* A JSON string: quotes, backslashes and control characters escaped. */
static void put_json_string(buf *b, const char *s) {
  put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      put(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      put(b, esc, 6);
    } else {
      put(b, s, 1);
    }
  }
  put(b, "\"", 1);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static nnrt_status check_tensor(const nnrt_st_desc *d, const void *data, int i, uint64_t *nbytes,
                                nnrt_error *err) {
  if (!d->name) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor %d has no name", i);
  char show[NNRT_SHOW_MAX];
  nnrt_st_show(d->name, show);
  if (strcmp(d->name, "__metadata__") == 0)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: \"__metadata__\" is not a tensor name");
  if (!nnrt_json_valid_utf8(d->name, strlen(d->name)))
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor \"%s\": name is not valid UTF-8",
                       show);
  if ((unsigned)d->dtype >= NNRT_DTYPE_COUNT)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor \"%s\": invalid dtype %d", show,
                       (int)d->dtype);
  if (d->rank < 0 || d->rank > NNRT_MAX_RANK)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor \"%s\": rank %d, expected 0..%d",
                       show, d->rank, NNRT_MAX_RANK);
  uint64_t numel = 1;
  bool zero = false, overflow = false;
  for (int k = 0; k < d->rank; k++) {
    if (d->shape[k] < 0)
      return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor \"%s\": dim %d is %lld", show, k,
                         (long long)d->shape[k]);
    uint64_t dim = (uint64_t)d->shape[k];
    if (!dim) zero = true;
    else if (numel > (uint64_t)INT64_MAX / dim) overflow = true;
    else numel *= dim;
  }
  if (zero) numel = 0;
  size_t esize = nnrt_dtype_size(d->dtype);
  if ((overflow && !zero) || numel > (uint64_t)INT64_MAX / esize || numel * esize > SIZE_MAX)
    return nnrt_errorf(err, NNRT_E_SIZE, "nnrt_st_write: tensor \"%s\" is too large", show);
  *nbytes = numel * esize;
  if (*nbytes && !data)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor \"%s\": data is NULL", show);
  return NNRT_OK;
}

static nnrt_status check_unique(int n, const nnrt_st_desc *tensors, nnrt_error *err) {
  if (n < 2) return NNRT_OK;
  const char **names = malloc((size_t)n * sizeof *names);
  if (!names) return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_st_write: out of memory");
  for (int i = 0; i < n; i++) names[i] = tensors[i].name;
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  nnrt_status rc = NNRT_OK;
  for (int i = 1; i < n && rc == NNRT_OK; i++)
    if (strcmp(names[i - 1], names[i]) == 0) {
      char show[NNRT_SHOW_MAX];
      rc = nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: tensor \"%s\" is given twice",
                       nnrt_st_show(names[i], show));
    }
  free(names);
  return rc;
}

static void build_header(buf *b, int n, const nnrt_st_desc *tensors, const uint64_t *nbytes, int nmeta,
                         const char *const *meta) {
  uint64_t offset = 0;
  char num[48];
  puts_(b, "{");
  if (nmeta > 0) {
    puts_(b, "\"__metadata__\":{");
    for (int j = 0; j < nmeta; j++) {
      if (j) puts_(b, ",");
      put_json_string(b, meta[2 * j]);
      puts_(b, ":");
      put_json_string(b, meta[2 * j + 1]);
    }
    puts_(b, n ? "}," : "}");
  }
  for (int i = 0; i < n; i++) {
    const nnrt_st_desc *d = &tensors[i];
    if (i) puts_(b, ",");
    put_json_string(b, d->name);
    puts_(b, ":{\"dtype\":\"");
    puts_(b, nnrt_dtype_name(d->dtype));
    puts_(b, "\",\"shape\":[");
    for (int k = 0; k < d->rank; k++) {
      snprintf(num, sizeof num, k ? ",%lld" : "%lld", (long long)d->shape[k]);
      puts_(b, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
             (unsigned long long)(offset + nbytes[i]));
    puts_(b, num);
    offset += nbytes[i];
  }
  puts_(b, "}");
  /* Pad so the data section starts 8-aligned, as the format recommends. */
  while (!b->failed && b->len % 8) puts_(b, " ");
}

static bool write_all(int fd, const void *data, size_t n) {
  const unsigned char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* Creates path.tmp.<pid>.<k> exclusively so two writers never share one. */
static int open_temp(const char *path, char *tmp, size_t size) {
  for (int k = 0; k < 100; k++) {
    if ((size_t)snprintf(tmp, size, "%s.tmp.%ld.%d", path, (long)getpid(), k) >= size) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static nnrt_status write_file(const char *path, const buf *header, int n,
                              const uint64_t *nbytes, const void *const *data, nnrt_error *err) {
  size_t tmp_size = strlen(path) + 64;
  char *tmp = malloc(tmp_size);
  if (!tmp) return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_st_write: out of memory");
  int fd = open_temp(path, tmp, tmp_size);
  if (fd < 0) {
    nnrt_status rc = nnrt_errorf(err, NNRT_E_IO, "%s: cannot create: %s", path, strerror(errno));
    free(tmp);
    return rc;
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)header->len >> (8 * i));
  bool ok = write_all(fd, len8, 8) && write_all(fd, header->p, header->len);
  for (int i = 0; ok && i < n; i++)
    if (nbytes[i]) ok = write_all(fd, data[i], (size_t)nbytes[i]);
  int saved = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = false;
    saved = errno;
  }
  nnrt_status rc = NNRT_OK;
  if (!ok) {
    unlink(tmp);
    rc = nnrt_errorf(err, NNRT_E_IO, "%s: cannot write: %s", path, strerror(saved));
  }
  free(tmp);
  return rc;
}

nnrt_status nnrt_st_write(const char *path, int n, const nnrt_st_desc *tensors,
                          const void *const *data, nnrt_error *err) {
  return nnrt_st_write_meta(path, n, tensors, data, 0, NULL, err);
}

/* The metadata's strings: there, valid UTF-8, keys unique. */
static nnrt_status check_meta(int nmeta, const char *const *meta, nnrt_error *err) {
  if (nmeta < 0 || (nmeta > 0 && !meta))
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: metadata: expected %d key/value pairs, found NULL", nmeta);
  for (int j = 0; j < 2 * nmeta; j++) {
    if (!meta[j] || !nnrt_json_valid_utf8(meta[j], strlen(meta[j])))
      return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: metadata %s %d is %s", j % 2 ? "value" : "key", j / 2,
                         meta[j] ? "not valid UTF-8" : "NULL");
    for (int k = 0; j % 2 == 0 && k < j; k += 2)
      if (strcmp(meta[k], meta[j]) == 0)
        return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_write: metadata key %d is given twice", j / 2);
  }
  return NNRT_OK;
}

nnrt_status nnrt_st_write_meta(const char *path, int n, const nnrt_st_desc *tensors, const void *const *data,
                               int nmeta, const char *const *meta, nnrt_error *err) {
  if (!path || n < 0 || (n > 0 && (!tensors || !data)))
    return nnrt_errorf(err, NNRT_E_ARG,
                       "nnrt_st_write: path, tensors or data is NULL, or n is negative");
  nnrt_status bad = check_meta(nmeta, meta, err);
  if (bad) return bad;
  uint64_t *nbytes = calloc(n ? (size_t)n : 1, sizeof *nbytes);
  if (!nbytes) return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_st_write: out of memory");
  nnrt_status rc = NNRT_OK;
  for (int i = 0; i < n && rc == NNRT_OK; i++)
    rc = check_tensor(&tensors[i], data[i], i, &nbytes[i], err);
  if (rc == NNRT_OK) rc = check_unique(n, tensors, err);
  buf header = {0};
  if (rc == NNRT_OK) {
    build_header(&header, n, tensors, nbytes, nmeta, meta);
    if (header.failed) rc = nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_st_write: out of memory");
    else if (header.len > NNRT_ST_MAX_HEADER)
      rc = nnrt_errorf(err, NNRT_E_SIZE, "%s: header of %zu bytes is above the limit of %u", path,
                       header.len, NNRT_ST_MAX_HEADER);
  }
  if (rc == NNRT_OK) rc = write_file(path, &header, n, nbytes, data, err);
  free(header.p);
  free(nbytes);
  return rc;
}
