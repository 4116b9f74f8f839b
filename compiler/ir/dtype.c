/* compiler/ir/dtype.c — element types. */
#include <string.h>
#include <strings.h>

#include "ir.h"

static const struct { const char *name, *st; int size; bool is_float; } dtypes[NNC_DTYPE_COUNT] = {
  [NNC_F32] = {"f32", "F32", 4, true},
  [NNC_F16] = {"f16", "F16", 2, true},
  [NNC_BF16] = {"bf16", "BF16", 2, true},
  [NNC_I32] = {"i32", "I32", 4, false},
};

const char *nnc_dtype_name(nnc_dtype t) { return t < NNC_DTYPE_COUNT ? dtypes[t].name : "?"; }
int nnc_dtype_size(nnc_dtype t) { return t < NNC_DTYPE_COUNT ? dtypes[t].size : 0; }
bool nnc_dtype_is_float(nnc_dtype t) { return t < NNC_DTYPE_COUNT && dtypes[t].is_float; }

bool nnc_dtype_parse(const char *name, nnc_dtype *out) {
  for (int i = 0; i < NNC_DTYPE_COUNT; i++)
    if (strcasecmp(name, dtypes[i].name) == 0) {
      *out = (nnc_dtype)i;
      return true;
    }
  return false;
}
