/* runtime/status.c — error values and their messages. */
#include <stdarg.h>
#include <stdio.h>

#include "nnrt.h"

nnrt_status nnrt_errorf(nnrt_error *err, nnrt_status code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

const char *nnrt_status_name(nnrt_status s) {
  switch (s) {
  case NNRT_OK: return "ok";
  case NNRT_E_ARG: return "invalid argument";
  case NNRT_E_STATE: return "call out of order";
  case NNRT_E_SIZE: return "size above maximum";
  case NNRT_E_IO: return "i/o error";
  case NNRT_E_FORMAT: return "bad weights file";
  case NNRT_E_NOMEM: return "out of memory";
  case NNRT_E_DEVICE: return "device error";
  case NNRT_E_INTERNAL: return "internal error";
  case NNRT_E_COMM: return "communication error";
  }
  return "unknown status";
}
