/* support/nnc_weights.c — weights loading against a model's manifest. */
#include "nnc_weights.h"

#include <stdlib.h>
#include <string.h>

int64_t nnc_weights_numel(const nnrt_st_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->rank; i++) n *= d->shape[i];
  return n;
}

static int accepts(nnrt_dtype want, nnrt_dtype got) {
  return got == want || (want == NNRT_F32 && (got == NNRT_F16 || got == NNRT_BF16));
}

nnrt_status nnc_weights_load(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                          nnrt_error *err) {
  /* nnrt_st_check wants exact dtypes: check against a copy of the manifest
   * that takes the file's dtype wherever a conversion to f32 exists. */
  nnrt_st_desc *want = calloc((size_t)(n > 0 ? n : 1), sizeof *want);
  if (!want) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory checking the weights file");
  for (int i = 0; i < n; i++) {
    want[i] = manifest[i];
    const nnrt_st_tensor *t = NULL;
    if (nnrt_st_find(st, manifest[i].name, &t, NULL) == NNRT_OK && accepts(manifest[i].dtype, t->dtype))
      want[i].dtype = t->dtype;
  }
  nnrt_status rc = nnrt_st_check(st, want, n, NULL, 0, err);
  free(want);
  for (int i = 0; i < n && rc == NNRT_OK; i++) {
    const nnrt_st_tensor *t = NULL;
    rc = nnrt_st_find(st, manifest[i].name, &t, err);
    if (rc) break;
    size_t count = (size_t)nnc_weights_numel(&manifest[i]);
    if (manifest[i].dtype == NNRT_F32)
      rc = nnrt_st_copy_f32(st, t, dst[i], count, err);
    else
      rc = nnrt_st_copy(st, t, dst[i], count * nnrt_dtype_size(manifest[i].dtype), err);
  }
  return rc;
}
