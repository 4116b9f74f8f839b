/* runtime/nnrt_st_impl.h — what the safetensors files of libnnrt share
 * (internal: the handle's layout and message helpers). */
#ifndef NNRT_ST_IMPL_H
#define NNRT_ST_IMPL_H

#include "nnrt.h"
#include "nnrt_json.h"

struct nnrt_st {
  char label[176];                /* the file as named in messages */
  const unsigned char *base;      /* the whole file */
  size_t size;
  void *map;                      /* the mapping to unmap, NULL for memory */
  size_t map_size;
  nnrt_json_doc *doc;             /* the header; names and metadata point into it */
  nnrt_st_tensor *tensors;        /* sorted by name */
  int n;
  const nnrt_json *metadata;      /* the "__metadata__" object or NULL */
};

/* A name made safe to print: control characters become '?', and a long one
 * is cut with "...". Returns buf. */
enum { NNRT_SHOW_MAX = 128 };
const char *nnrt_st_show(const char *name, char buf[NNRT_SHOW_MAX]);

/* "[2, 3]" (or "[]" for rank 0) into buf. Returns buf. */
enum { NNRT_SHAPE_MAX = 8 * 22 + 4 };
const char *nnrt_st_shape_str(int rank, const int64_t *shape, char buf[NNRT_SHAPE_MAX]);

/* Validates st->base[0, size) as a safetensors file and fills st->doc,
 * st->tensors, st->n and st->metadata (st->label already set). */
nnrt_status nnrt_st_parse(nnrt_st *st, nnrt_error *err);

#endif
