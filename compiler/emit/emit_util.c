/* compiler/emit/emit_util.c — text buffers, files and C names for emitters. */
#include "emit_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void nnc_sb_init(nnc_sb *b) { memset(b, 0, sizeof *b); }

void nnc_sb_free(nnc_sb *b) {
  free(b->buf);
  memset(b, 0, sizeof *b);
}

static bool reserve(nnc_sb *b, size_t extra) {
  if (b->oom) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->buf, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->buf = p;
  b->cap = cap;
  return true;
}

void nnc_sb_printf(nnc_sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void nnc_sb_puts(nnc_sb *b, const char *s) {
  size_t n = strlen(s);
  if (!reserve(b, n)) return;
  memcpy(b->buf + b->len, s, n + 1);
  b->len += n;
}

/* Creates every folder of dir/rel above the file itself. */
static nnc_status make_parents(const char *path, nnc_error *err) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "%s: path too long", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
      return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot create folder %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  return NNC_OK;
}

nnc_status nnc_emit_write_file(const char *dir, const char *rel, const char *data, size_t n,
                               nnc_error *err) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path)
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "%s/%s: path too long", dir, rel);
  nnc_status st = make_parents(path, err);
  if (st) return st;
  FILE *f = fopen(path, "wb");
  if (!f) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot write %s: %s", path, strerror(errno));
  bool ok = n == 0 || fwrite(data, 1, n, f) == n;
  if (fclose(f) != 0) ok = false;
  if (!ok) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot write %s: %s", path, strerror(errno));
  return NNC_OK;
}

nnc_status nnc_emit_write_sb(const char *dir, const char *rel, const nnc_sb *b, nnc_error *err) {
  if (b->oom) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while writing %s", rel);
  return nnc_emit_write_file(dir, rel, b->buf ? b->buf : "", b->len, err);
}

static const char *const keywords[] = {
  "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
  "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
  "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
  "volatile", "while", "_Bool", "_Complex", "_Imaginary", "bool", "true", "false", "NULL",
};

void nnc_emit_c_ident(const char *name, char *out, size_t n) {
  if (n == 0) return;
  size_t j = 0;
  if (!name[0] || (name[0] >= '0' && name[0] <= '9')) {
    if (j + 1 < n) out[j++] = '_';
  }
  for (const char *p = name; *p && j + 1 < n; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out[j++] = ok ? c : '_';
  }
  out[j] = 0;
  for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++)
    if (strcmp(out, keywords[k]) == 0 && j + 1 < n) {
      out[j++] = '_';
      out[j] = 0;
    }
}

char *nnc_emit_comment(const char *s, char *out, size_t n) {
  size_t j = 0;
  for (; *s && j + 2 < n; s++) {
    if (*s == '\n' || *s == '\r') {
      out[j++] = ' ';
      continue;
    }
    out[j++] = *s;
    if (*s == '*' && s[1] == '/') out[j++] = ' ';   /* keep the comment open */
  }
  out[j] = 0;
  return out;
}

char *nnc_emit_dim_expr(const nnc_graph *g, nnc_dim d, const char *prefix, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  if (d.nsym == 0 || d.k != 1) len += (size_t)snprintf(buf, n, "%lld", (long long)d.k);
  for (int i = 0; i < d.nsym && len < n; i++) {
    char id[64];
    nnc_emit_c_ident(g->syms[d.sym[i]].name, id, sizeof id);
    len += (size_t)snprintf(buf + len, n - len, "%s%s%s", len ? " * " : "", prefix, id);
  }
  return buf;
}

const char *nnc_emit_basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

char *nnc_emit_c_string(const char *s, char *out, size_t n) {
  size_t j = 0;
  for (; *s && j + 5 < n; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\' || c == '?') {   /* '?': no trigraphs */
      out[j++] = '\\';
      out[j++] = (char)c;
    } else if (c < 32 || c == 127) {
      j += (size_t)snprintf(out + j, n - j, "\\%03o", c);
    } else {
      out[j++] = (char)c;
    }
  }
  out[j] = 0;
  return out;
}
