/* compiler/ir/status.c — formatting of error values. */
#include "status.h"

#include <stdio.h>

nnc_status nnc_verrorf(nnc_error *err, nnc_status code, nnc_srcloc loc,
                       const char *fmt, va_list ap) {
  if (!err) return code;
  err->code = code;
  int n = 0;
  if (loc.file) n = snprintf(err->msg, sizeof err->msg, "%s:%d: ", loc.file, loc.line);
  if (n < 0 || (size_t)n >= sizeof err->msg) n = 0;
  vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
  return code;
}

nnc_status nnc_errorf(nnc_error *err, nnc_status code, nnc_srcloc loc,
                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nnc_verrorf(err, code, loc, fmt, ap);
  va_end(ap);
  return code;
}

const char *nnc_status_name(nnc_status s) {
  switch (s) {
  case NNC_OK: return "ok";
  case NNC_E_USAGE: return "usage error";
  case NNC_E_MODEL: return "model error";
  case NNC_E_SHAPE: return "shape error";
  case NNC_E_LIMIT: return "limit exceeded";
  case NNC_E_IO: return "i/o error";
  case NNC_E_TARGET: return "target error";
  case NNC_E_NOMEM: return "out of memory";
  case NNC_E_INTERNAL: return "internal error";
  }
  return "unknown status";
}
