/* templates/c_simd/embedding.c — gathering rows of a table by id. Ids come
 * from the caller's input, so each is checked before anything is written.
 * A table may be one rank's rows of a vocabulary split over ranks: ids of
 * other ranks' rows give zeros there (their rank's all_reduce adds them).
 * A table may also be held as a GEMM's packed B (a tied embedding, whose
 * table is the language-model head's weight): its rows are read out of the
 * panels, so the table is not held twice. */
#include "gemm_internal.h"

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

typedef struct packed_job {
  const int32_t *ids;
  int rows, cols, b_trans;
  const float *packed;
  float *out;
  ptrdiff_t ld_out;
} packed_job;

static void packed_rows(void *ctx, int i0, int i1) {
  const packed_job *jb = ctx;
  for (int i = i0; i < i1; ++i) {
    float *o = jb->out + (ptrdiff_t)i * jb->ld_out;
    const int r = jb->ids[i];
    if (jb->b_trans) {
      /* row r is column n = r of B (K = cols): one float of each of its
       * panel's K rows */
      for (int c = 0; c < jb->cols; ++c) o[c] = jb->packed[nnc_gemm_packed_b_at(jb->cols, r, c)];
    } else {
      /* row r is row k = r of B (K = rows): NR consecutive floats a panel */
      for (int c = 0; c < jb->cols; c += NNC_GEMM_NR) {
        int nr = jb->cols - c < NNC_GEMM_NR ? jb->cols - c : NNC_GEMM_NR;
        memcpy(o + c, jb->packed + nnc_gemm_packed_b_at(jb->rows, c, r), (size_t)nr * sizeof(float));
      }
    }
  }
}

nnc_simd_status nnc_simd_embedding_packed(int n, const int32_t *ids, int rows, int cols, int b_trans,
                                          const float *packed, float *out, ptrdiff_t ld_out,
                                          const nnc_simd_par *par, nnc_simd_error *err) {
  static const char *const PACKED = "nnc_simd_embedding_packed";
  if (n < 0 || rows < 0 || cols < 0)
    return nnc_simd_fail(err, PACKED, "expected n, rows, cols >= 0, found n=%d rows=%d cols=%d", n, rows, cols);
  if (nnc_simd_check_par(par, PACKED, err)) return NNC_SIMD_E_ARG;
  if (n == 0) return NNC_SIMD_OK;
  if (!ids || (cols > 0 && (!packed || !out)))
    return nnc_simd_fail(err, PACKED, "expected ids, packed and out, found ids=%p packed=%p out=%p",
                         (const void *)ids, (const void *)packed, (void *)out);
  if (ld_out < cols) return nnc_simd_fail(err, PACKED, "expected ld_out >= cols=%d, found %td", cols, ld_out);
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= rows)
      return nnc_simd_fail(err, PACKED, "expected ids in [0, %d), found ids[%d] = %d", rows, i, (int)ids[i]);
  packed_job jb = {ids, rows, cols, b_trans, packed, out, ld_out};
  /* b_trans reads a whole cache line for each of a row's floats: a row
   * costs the run planner as many elements as those lines hold */
  nnc_simd_run_rows(par, n, b_trans ? cols * (NNC_SIMD_ALIGN / (int)sizeof(float)) : cols, packed_rows, &jb);
  return NNC_SIMD_OK;
}
