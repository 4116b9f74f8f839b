/* templates/c_simd/embedding.c — gathering rows of a table by id. Ids come
 * from the caller's input, so each is checked before anything is written. */
#include "internal.h"

static const char *const KERNEL = "nnc_simd_embedding";

nnc_simd_status nnc_simd_embedding(int n, const int32_t *ids, int rows, int cols,
                                   const float *table, ptrdiff_t ld_table,
                                   float *out, ptrdiff_t ld_out, nnc_simd_error *err) {
  if (n < 0 || rows < 0 || cols < 0)
    return nnc_simd_fail(err, KERNEL, "expected n, rows, cols >= 0, found n=%d rows=%d cols=%d",
                         n, rows, cols);
  if (n == 0) return NNC_SIMD_OK;
  if (!ids || (cols > 0 && (!table || !out)))
    return nnc_simd_fail(err, KERNEL, "expected ids, table and out, found ids=%p table=%p out=%p",
                         (const void *)ids, (const void *)table, (void *)out);
  if (ld_table < cols || ld_out < cols)
    return nnc_simd_fail(err, KERNEL, "expected ld_table, ld_out >= cols=%d, found %td and %td",
                         cols, ld_table, ld_out);
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= rows)
      return nnc_simd_fail(err, KERNEL, "expected ids in [0, %d), found ids[%d] = %d", rows, i,
                           (int)ids[i]);
  for (int i = 0; i < n; ++i)
    memcpy(out + (ptrdiff_t)i * ld_out, table + (ptrdiff_t)ids[i] * ld_table,
           (size_t)cols * sizeof(float));
  return NNC_SIMD_OK;
}
