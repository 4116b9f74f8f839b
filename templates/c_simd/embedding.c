/* templates/c_simd/embedding.c — gathering rows of a table by id. Ids come
 * from the caller's input, so each is checked before anything is written.
 * A table may be one rank's rows of a vocabulary split over ranks: ids of
 * other ranks' rows give zeros there (their rank's all_reduce adds them). */
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

nnc_simd_status nnc_simd_embedding_rows(int n, const int32_t *ids, int vocab, int first, int rows, int cols,
                                        const float *table, ptrdiff_t ld_table,
                                        float *out, ptrdiff_t ld_out, nnc_simd_error *err) {
  static const char *const ROWS = "nnc_simd_embedding_rows";
  if (n < 0 || vocab < 0 || first < 0 || rows < 0 || cols < 0)
    return nnc_simd_fail(err, ROWS, "expected n, vocab, first, rows, cols >= 0, found n=%d vocab=%d first=%d "
                         "rows=%d cols=%d", n, vocab, first, rows, cols);
  if (n == 0) return NNC_SIMD_OK;
  if (!ids || (cols > 0 && (!table || !out)))
    return nnc_simd_fail(err, ROWS, "expected ids, table and out, found ids=%p table=%p out=%p",
                         (const void *)ids, (const void *)table, (void *)out);
  if (ld_table < cols || ld_out < cols)
    return nnc_simd_fail(err, ROWS, "expected ld_table, ld_out >= cols=%d, found %td and %td",
                         cols, ld_table, ld_out);
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return nnc_simd_fail(err, ROWS, "expected ids in [0, %d), found ids[%d] = %d", vocab, i, (int)ids[i]);
  for (int i = 0; i < n; ++i) {
    float *o = out + (ptrdiff_t)i * ld_out;
    int64_t row = (int64_t)ids[i] - first;
    if (row >= 0 && row < rows) memcpy(o, table + (ptrdiff_t)row * ld_table, (size_t)cols * sizeof(float));
    else memset(o, 0, (size_t)cols * sizeof(float));
  }
  return NNC_SIMD_OK;
}
