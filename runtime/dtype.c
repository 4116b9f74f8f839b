/* runtime/dtype.c — the element types of safetensors files. */
#include <string.h>

#include "nnrt.h"

static const struct { const char *name; size_t size; } dtypes[NNRT_DTYPE_COUNT] = {
  [NNRT_BOOL] = {"BOOL", 1},       [NNRT_U8] = {"U8", 1},
  [NNRT_I8] = {"I8", 1},           [NNRT_F8_E5M2] = {"F8_E5M2", 1},
  [NNRT_F8_E4M3] = {"F8_E4M3", 1}, [NNRT_I16] = {"I16", 2},
  [NNRT_U16] = {"U16", 2},         [NNRT_F16] = {"F16", 2},
  [NNRT_BF16] = {"BF16", 2},       [NNRT_I32] = {"I32", 4},
  [NNRT_U32] = {"U32", 4},         [NNRT_F32] = {"F32", 4},
  [NNRT_F64] = {"F64", 8},         [NNRT_I64] = {"I64", 8},
  [NNRT_U64] = {"U64", 8},
};

const char *nnrt_dtype_name(nnrt_dtype t) {
  return (unsigned)t < NNRT_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t nnrt_dtype_size(nnrt_dtype t) {
  return (unsigned)t < NNRT_DTYPE_COUNT ? dtypes[t].size : 0;
}

bool nnrt_dtype_parse(const char *name, nnrt_dtype *out) {
  if (!name) return false;
  for (int i = 0; i < NNRT_DTYPE_COUNT; i++)
    if (strcmp(name, dtypes[i].name) == 0) {
      if (out) *out = (nnrt_dtype)i;
      return true;
    }
  return false;
}
