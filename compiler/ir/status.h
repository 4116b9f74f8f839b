/* compiler/ir/status.h — errors are values.
 *
 * Every public function of the compiler returns an nnc_status and, on failure,
 * fills an nnc_error whose message names the Lua file:line, what was expected
 * and what was found. The CLI turns the status into its exit code. */
#ifndef NNC_STATUS_H
#define NNC_STATUS_H

#include <stdarg.h>

typedef enum nnc_status {
  NNC_OK = 0,
  NNC_E_USAGE = 1,    /* bad command line */
  NNC_E_MODEL = 2,    /* the model's Lua failed: syntax, runtime, DSL misuse, sandbox */
  NNC_E_SHAPE = 3,    /* shapes or dtypes do not agree */
  NNC_E_LIMIT = 4,    /* instruction or memory budget exceeded, or a size limit */
  NNC_E_IO = 5,       /* a file could not be read or written */
  NNC_E_TARGET = 6,   /* unknown or not yet implemented target */
  NNC_E_NOMEM = 7,    /* the compiler itself ran out of memory */
  NNC_E_INTERNAL = 8  /* a bug in nnc: please report it */
} nnc_status;

/* Where a node or tensor was written in the model: file is interned in the
 * graph (see nnc_graph_intern) and lives as long as it; NULL when unknown. */
typedef struct nnc_srcloc {
  const char *file;
  int line;
} nnc_srcloc;

#define NNC_NOLOC ((nnc_srcloc){NULL, 0})

typedef struct nnc_error {
  nnc_status code;
  char msg[1024];
} nnc_error;

/* Fills err (when not NULL) with "file:line: " + the formatted text and
 * returns code, so callers can write `return nnc_errorf(err, ...)`. */
nnc_status nnc_errorf(nnc_error *err, nnc_status code, nnc_srcloc loc,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
nnc_status nnc_verrorf(nnc_error *err, nnc_status code, nnc_srcloc loc,
                       const char *fmt, va_list ap);

/* Short name of a status, e.g. "shape error". */
const char *nnc_status_name(nnc_status s);

#endif
