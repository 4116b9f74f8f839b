/* compiler/emit/validate.c — parses an emitted source with libclang and
 * turns its first error into an nnc error that names the kernel.
 *
 * libclang parses from memory (an unsaved file under the source's own
 * path, so its quoted includes resolve beside it); only diagnostics of
 * severity error or fatal count: warnings are the user's compiler's
 * business, with the flags of the folder's build file. */
#include "validate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc_config.h"

#if NNC_HAVE_CLANG
#include <clang-c/Index.h>
#endif

bool nnc_validate_available(void) { return NNC_HAVE_CLANG; }

#if !NNC_HAVE_CLANG

nnc_status nnc_validate_source(const char *name, const char *text, nnc_source_lang lang,
                               const char *const *include_dirs, int ninc, nnc_error *err) {
  return NNC_OK;
}

nnc_status nnc_validate_file(const char *dir, const char *rel, nnc_source_lang lang, nnc_error *err) {
  return NNC_OK;
}

#else

/* The comment line the emitters write before a kernel: only blanks before
 * the opening mark, the closing mark last, and "(kernel N," inside. */
static bool kernel_comment(const char *s, size_t len, int *k) {
  while (len && (*s == ' ' || *s == '\t')) s++, len--;
  while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r')) len--;
  if (len < 4 || strncmp(s, "/*", 2) != 0 || strncmp(s + len - 2, "*/", 2) != 0) return false;
  static const char tag[] = "(kernel ";
  for (size_t i = 2; i + sizeof tag - 1 < len - 2; i++) {
    if (strncmp(s + i, tag, sizeof tag - 1) != 0) continue;
    size_t j = i + sizeof tag - 1;
    int n = 0, digits = 0;
    while (j < len && s[j] >= '0' && s[j] <= '9' && digits < 9) n = n * 10 + (s[j++] - '0'), digits++;
    if (digits && j < len && s[j] == ',') {
      *k = n;
      return true;
    }
  }
  return false;
}

typedef struct comment_at {
  unsigned line;    /* 1-based; 0 when there is none */
  int kernel;
  const char *s;    /* the comment, blanks around it dropped */
  int len;
} comment_at;

/* The nearest kernel comment at or above line `line` of text. */
static comment_at comment_above(const char *text, unsigned line) {
  comment_at c = {0, -1, NULL, 0};
  const char *p = text;
  for (unsigned l = 1; l <= line && *p; l++) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int k;
    if (kernel_comment(p, len, &k)) {
      const char *s = p;
      while (*s == ' ' || *s == '\t') s++;
      const char *end = strstr(s, "*/");
      c = (comment_at){l, k, s, (int)(end + 2 - s)};
    }
    if (!e) break;
    p = e + 1;
  }
  return c;
}

/* Function definitions of the main file that start on lines (lo, hi] and
 * are not kernel k's own (kK, kK_<name>): the template functions the OpenCL
 * emitter pastes are renamed that way, and so are the C SIMD kernel's
 * helpers. */
typedef struct fn_scan {
  unsigned lo, hi;
  int kernel;
  bool other;
} fn_scan;

static bool kernel_function(const char *name, int k) {
  char pre[32];
  int n = snprintf(pre, sizeof pre, "k%d", k);
  return name && strncmp(name, pre, (size_t)n) == 0 && (name[n] == 0 || name[n] == '_');
}

static enum CXChildVisitResult scan_fn(CXCursor c, CXCursor parent, CXClientData data) {
  fn_scan *f = data;
  if (clang_getCursorKind(c) != CXCursor_FunctionDecl || !clang_isCursorDefinition(c)) return CXChildVisit_Continue;
  CXSourceLocation at = clang_getRangeStart(clang_getCursorExtent(c));
  if (!clang_Location_isFromMainFile(at)) return CXChildVisit_Continue;
  unsigned line = 0;
  clang_getExpansionLocation(at, NULL, &line, NULL, NULL);
  if (line <= f->lo || line > f->hi) return CXChildVisit_Continue;
  CXString name = clang_getCursorSpelling(c);
  if (!kernel_function(clang_getCString(name), f->kernel)) f->other = true;
  clang_disposeString(name);
  return f->other ? CXChildVisit_Break : CXChildVisit_Continue;
}

/* path shown relative to the folder of the main file `name`. */
static const char *shown(const char *name, const char *path) {
  const char *slash = strrchr(name, '/');
  if (!path) return slash ? slash + 1 : name;
  size_t n = slash ? (size_t)(slash - name) : 0;
  if (n && strncmp(path, name, n) == 0 && path[n] == '/') {
    path += n + 1;
    while (strncmp(path, "./", 2) == 0) path += 2;
  }
  return path;
}

/* The first error of tu as an nnc error, or NNC_OK when there is none. */
static nnc_status report(CXTranslationUnit tu, const char *name, const char *text, nnc_error *err) {
  unsigned n = clang_getNumDiagnostics(tu), nerr = 0;
  CXDiagnostic first = NULL;
  for (unsigned i = 0; i < n; i++) {
    CXDiagnostic d = clang_getDiagnostic(tu, i);
    enum CXDiagnosticSeverity sev = clang_getDiagnosticSeverity(d);
    if (sev == CXDiagnostic_Error || sev == CXDiagnostic_Fatal) {
      nerr++;
      if (!first) {
        first = d;
        continue;
      }
    }
    clang_disposeDiagnostic(d);
  }
  if (!first) return NNC_OK;
  CXSourceLocation loc = clang_getDiagnosticLocation(first);
  CXFile file = NULL;
  unsigned line = 0, col = 0;
  clang_getExpansionLocation(loc, &file, &line, &col, NULL);
  CXString fname = clang_getFileName(file);
  CXString msg = clang_getDiagnosticSpelling(first);
  char where[1200];
  const char *fn = clang_getCString(fname);
  if (file && line)
    snprintf(where, sizeof where, "%s:%u:%u", shown(name, fn), line, col);
  else
    snprintf(where, sizeof where, "%s", shown(name, NULL));
  comment_at c = {0, -1, NULL, 0};
  if (file && line && clang_Location_isFromMainFile(loc)) {
    c = comment_above(text, line);
    if (c.line) {
      fn_scan f = {c.line, line, c.kernel, false};
      clang_visitChildren(clang_getTranslationUnitCursor(tu), scan_fn, &f);
      if (f.other) c.line = 0;
    }
  }
  char more[64] = "";
  if (nerr > 1) snprintf(more, sizeof more, "; and %u more error%s", nerr - 1, nerr > 2 ? "s" : "");
  nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "generated %s: %s%s%.*s%s; libclang rejected the code nnc generated (a bug in nnc: please report it)",
             where, clang_getCString(msg), c.line ? "; in " : "", c.line ? c.len : 0, c.line ? c.s : "", more);
  clang_disposeString(msg);
  clang_disposeString(fname);
  clang_disposeDiagnostic(first);
  return NNC_E_INTERNAL;
}

nnc_status nnc_validate_source(const char *name, const char *text, nnc_source_lang lang,
                               const char *const *include_dirs, int ninc, nnc_error *err) {
  if (!name || !text || ninc < 0 || (ninc > 0 && !include_dirs))
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC,
                      "validate: expected a file name, its text and %d include folders", ninc);
  if (lang != NNC_LANG_C11 && lang != NNC_LANG_OPENCL12)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "validate %s: expected C11 or OpenCL C 1.2, found language %d",
                      name, (int)lang);
  const char **args = malloc((size_t)(8 + 2 * ninc) * sizeof *args);
  if (!args) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while checking %s", name);
  int nargs = 0;
  if (lang == NNC_LANG_OPENCL12) {
    /* the builtins (get_global_id, vload4, native_exp, ...) come from the
     * opencl-c.h of clang's resource folder */
    static const char *const cl[] = {"-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header"};
    for (size_t i = 0; i < sizeof cl / sizeof cl[0]; i++) args[nargs++] = cl[i];
  } else {
    static const char *const c[] = {"-x", "c", "-std=c11"};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) args[nargs++] = c[i];
  }
  for (int i = 0; i < ninc; i++) {
    args[nargs++] = "-I";
    args[nargs++] = include_dirs[i];
  }
  CXIndex idx = clang_createIndex(0, 0);
  struct CXUnsavedFile file = {name, text, (unsigned long)strlen(text)};
  CXTranslationUnit tu = NULL;
  enum CXErrorCode rc = clang_parseTranslationUnit2(idx, name, args, nargs, &file, 1, CXTranslationUnit_None, &tu);
  free(args);
  nnc_status st;
  if (rc != CXError_Success || !tu)
    st = nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC,
                    "generated %s: libclang could not parse it (CXErrorCode %d; expected 0, success)", shown(name, NULL),
                    (int)rc);
  else
    st = report(tu, name, text, err);
  if (tu) clang_disposeTranslationUnit(tu);
  clang_disposeIndex(idx);
  return st;
}

nnc_status nnc_validate_file(const char *dir, const char *rel, nnc_source_lang lang, nnc_error *err) {
  char path[4096];
  if (!dir || !rel) return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "validate: expected a folder and a file in it");
  if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path)
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "%s/%s: path too long", dir, rel);
  FILE *f = fopen(path, "rb");
  if (!f) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot read %s back to check it: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *text = malloc(cap);
  while (text) {
    len += fread(text + len, 1, cap - len - 1, f);
    if (len < cap - 1) break;
    char *bigger = realloc(text, cap * 2);
    if (!bigger) {
      free(text);
      text = NULL;
      break;
    }
    text = bigger;
    cap *= 2;
  }
  bool bad = ferror(f) != 0;
  fclose(f);
  if (!text) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while checking %s", path);
  if (bad) {
    free(text);
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot read %s back to check it", path);
  }
  text[len] = 0;
  char rt[4200];
  snprintf(rt, sizeof rt, "%s/runtime", dir);
  const char *inc[] = {dir, rt};
  nnc_status st = nnc_validate_source(path, text, lang, inc, 2, err);
  free(text);
  return st;
}

#endif
