/* compiler/emit/emit_util.h — what every emitter needs to write text files:
 * a growing string buffer, files written under the output folder, C
 * identifiers made from model names, and dims written as C expressions. */
#ifndef NNC_EMIT_UTIL_H
#define NNC_EMIT_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "../ir/ir.h"

/* A string that grows; running out of memory is sticky and reported when the
 * buffer is written (nnc_emit_write_sb), so writers need not check each call. */
typedef struct nnc_sb {
  char *buf;
  size_t len, cap;
  bool oom;
} nnc_sb;

void nnc_sb_init(nnc_sb *b);
void nnc_sb_free(nnc_sb *b);
void nnc_sb_printf(nnc_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nnc_sb_puts(nnc_sb *b, const char *s);

/* Writes data to dir/rel, creating rel's folders. */
nnc_status nnc_emit_write_file(const char *dir, const char *rel, const char *data, size_t n,
                               nnc_error *err);
/* Writes b to dir/rel; NNC_E_NOMEM when b ran out of memory. */
nnc_status nnc_emit_write_sb(const char *dir, const char *rel, const nnc_sb *b, nnc_error *err);

/* A C identifier made from name: every other character becomes '_', a leading
 * digit or a C keyword gets a '_' added. */
void nnc_emit_c_ident(const char *name, char *out, size_t n);

/* Dim d as a C expression of int64_t values, symbols written as
 * `prefix` + their name ("3 * d->B", "d->B * d->T", "768"). */
char *nnc_emit_dim_expr(const nnc_graph *g, nnc_dim d, const char *prefix, char *buf, size_t n);

/* The file name of a path, without folders ("models/gpt2.lua" -> "gpt2.lua"). */
const char *nnc_emit_basename(const char *path);

/* A C string literal's contents for s (quotes, backslashes and control
 * characters escaped) into out. */
char *nnc_emit_c_string(const char *s, char *out, size_t n);

/* s made safe inside a C comment (a closing star-slash broken up, newlines as spaces). */
char *nnc_emit_comment(const char *s, char *out, size_t n);

#endif
