/* runtime/safetensors.c — opening safetensors weights and looking tensors up.
 *
 * A file is mapped read-only, so loading costs no copy until the generated
 * code copies each tensor where it wants it. The whole file is validated at
 * open (st_parse.c); after that every pointer handed out is in bounds.
 * A file truncated by someone else while mapped can still raise SIGBUS on
 * access: that is the price of mmap, and weights files are not edited in
 * place. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnrt_st_impl.h"

/* Long paths keep their tail, where the file name is. */
static void set_label(nnrt_st *st, const char *name) {
  size_t len = strlen(name), cap = sizeof st->label - 1;
  if (len <= cap) {
    memcpy(st->label, name, len + 1);
    return;
  }
  memcpy(st->label, "...", 3);
  memcpy(st->label + 3, name + len - (cap - 3), cap - 3 + 1);
}

void nnrt_st_close(nnrt_st *st) {
  if (!st) return;
  if (st->map) munmap(st->map, st->map_size);
  nnrt_json_free(st->doc);
  free(st->tensors);
  free(st);
}

static nnrt_status finish_open(nnrt_st *st, nnrt_st **out, nnrt_error *err) {
  nnrt_status rc = nnrt_st_parse(st, err);
  if (rc != NNRT_OK) {
    nnrt_st_close(st);
    return rc;
  }
  *out = st;
  return NNRT_OK;
}

nnrt_status nnrt_st_open_memory(const void *data, size_t size, const char *label, nnrt_st **out,
                                nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_open_memory: out is NULL");
  *out = NULL;
  if (!data && size)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_open_memory: data is NULL but size is %zu",
                       size);
  nnrt_st *st = calloc(1, sizeof *st);
  if (!st) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory opening weights");
  set_label(st, label ? label : "<memory>");
  st->base = data;
  st->size = size;
  return finish_open(st, out, err);
}

nnrt_status nnrt_st_open(const char *path, nnrt_st **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_open: out is NULL");
  *out = NULL;
  if (!path) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_open: path is NULL");
  nnrt_st *st = calloc(1, sizeof *st);
  if (!st) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory opening weights");
  set_label(st, path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    nnrt_status rc = nnrt_errorf(err, NNRT_E_IO, "%s: cannot open: %s", st->label, strerror(errno));
    nnrt_st_close(st);
    return rc;
  }
  struct stat sb;
  nnrt_status rc = NNRT_OK;
  if (fstat(fd, &sb) != 0)
    rc = nnrt_errorf(err, NNRT_E_IO, "%s: cannot stat: %s", st->label, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    rc = nnrt_errorf(err, NNRT_E_IO, "%s: expected a regular file", st->label);
  else if ((uintmax_t)sb.st_size > SIZE_MAX)
    rc = nnrt_errorf(err, NNRT_E_SIZE, "%s: file of %jd bytes does not fit in memory", st->label,
                     (intmax_t)sb.st_size);
  if (rc == NNRT_OK && sb.st_size > 0) {
    /* An empty file cannot be mapped; it fails validation below anyway. */
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      rc = nnrt_errorf(err, NNRT_E_IO, "%s: cannot map %jd bytes: %s", st->label,
                       (intmax_t)sb.st_size, strerror(errno));
    } else {
      st->map = m;
      st->map_size = (size_t)sb.st_size;
      st->base = m;
      st->size = (size_t)sb.st_size;
    }
  }
  close(fd);
  if (rc != NNRT_OK) {
    nnrt_st_close(st);
    return rc;
  }
  return finish_open(st, out, err);
}

int nnrt_st_count(const nnrt_st *st) { return st ? st->n : 0; }

const nnrt_st_tensor *nnrt_st_at(const nnrt_st *st, int i) {
  return st && i >= 0 && i < st->n ? &st->tensors[i] : NULL;
}

static int cmp_find(const void *key, const void *elem) {
  return strcmp(key, ((const nnrt_st_tensor *)elem)->name);
}

nnrt_status nnrt_st_find(const nnrt_st *st, const char *name, const nnrt_st_tensor **out,
                         nnrt_error *err) {
  if (!st || !name || !out)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_find: st, name or out is NULL");
  *out = bsearch(name, st->tensors, (size_t)st->n, sizeof *st->tensors, cmp_find);
  if (!*out) {
    char show[NNRT_SHOW_MAX];
    return nnrt_errorf(err, NNRT_E_FORMAT, "%s: no tensor \"%s\" in the file", st->label,
                       nnrt_st_show(name, show));
  }
  return NNRT_OK;
}

const char *nnrt_st_label(const nnrt_st *st) { return st ? st->label : "<none>"; }

const char *nnrt_st_metadata(const nnrt_st *st, const char *key) {
  if (!st || !key) return NULL;
  const nnrt_json *v = nnrt_json_get(st->metadata, key);
  return v ? v->s : NULL;
}
