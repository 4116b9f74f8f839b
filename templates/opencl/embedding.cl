/* templates/opencl/embedding.cl — out[i,:] = table[ids[i],:].
 * Global size (cols rounded up to any local size, n); no macros. An id
 * outside [0, rows) writes a row of NaN and lowers *bad to its position
 * (atomic_min: start bad at n, and once the kernel is done it holds the
 * first bad position, or n), so the host can name the position and the id;
 * bad may be NULL. */
__kernel void nnc_embedding(int n, __global const int *ids, int rows, int cols,
                            __global const nnc_t *table, long ld_table,
                            __global nnc_t *out, long ld_out, __global int *bad) {
  const int c = (int)get_global_id(0), i = (int)get_global_id(1);
  if (c >= cols || i >= n) return;
  const int id = ids[i];
  if (id < 0 || id >= rows) {
    NNC_STORE(out, (long)i * ld_out + c, NAN);
    if (bad && c == 0) atomic_min(bad, i);
    return;
  }
  NNC_COPY(out, (long)i * ld_out + c, table, (long)id * ld_table + c);
}
