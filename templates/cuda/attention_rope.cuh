/* templates/cuda/attention_rope.cuh — rope (rotary position embedding)
 * folded into the attention (nnc_cuda_attn_args.rope_q, rope_k).
 *
 * LLaMA's decode step rotates this call's query rows and new key rows before
 * attending: two kernels a layer of their own (each 2-5 us even under CUDA
 * graphs) that read the projection and write rotated rows the attention
 * reads once. With rope_q (rope_k) set, q (k_new) points at the rows before
 * rotation and the attention turns them itself:
 * - the decode kernels (attention_decode.cuh) rotate the block's query row
 *   and its k/v head's new key rows into shared memory before the key loop
 *   and read them from there; the block that appends (appends_rows) copies
 *   the rotated key rows into the cache;
 * - every other path: nnc_attn_append_kernel rotates the key rows while it
 *   copies them into the cache, and the query rows in place, where q points
 *   (compiler/passes/fold_rope.c folds a query rope only where nothing else
 *   reads those unrotated columns), before the attention runs as without.
 *
 * The rotation is compiler/emit/emit_rope.c's, Hugging Face's rotate_half:
 * entry i < half = rope_dims / 2 of a row with entry i + half, turned by
 * theta_i = pos * base^(-2i/rope_dims), the angle and its cos and sin in
 * double, each then rounded to float; y_i = x_i c - x_{i+half} s,
 * y_{i+half} = x_{i+half} c + x_i s in f32, each product and the sum
 * rounded on its own (no FMA: emit_rope.c's CUDA kernel writes the same
 * intrinsics, and the host's C computes the same bits); entries
 * past rope_dims pass through; one rounding to the element type. So the
 * cache holds the bits a rope kernel and a copy would have written, and the
 * attention sees the query a rope kernel would have stored.
 * Positions: rope_pos[b * rope_pos_sb + t] for query / new row t of batch
 * b (rope_pos_sb 0: one list for every batch), or t itself when NULL. */
#ifndef NNC_CUDA_ATTENTION_ROPE_CUH
#define NNC_CUDA_ATTENTION_ROPE_CUH

namespace nnc_attn {

/* The position of row t of batch b. */
template <typename E> __device__ __forceinline__ double rope_position(const nnc_cuda_attn_args<E> &a, int b, int t) {
  return a.rope_pos ? (double)a.rope_pos[(long long)b * a.rope_pos_sb + t] : (double)t;
}

/* cos and sin of pair i's angle at position p, as floats. */
template <typename E>
__device__ __forceinline__ void rope_cs(const nnc_cuda_attn_args<E> &a, double p, int i, float &c, float &s) {
  const double th = p * pow(a.rope_base, -2.0 * i / a.rope_dims);
  c = (float)cos(th);
  s = (float)sin(th);
}

/* Entry d of row x rotated at position p, as a float (before the one
 * rounding to the element type). */
template <typename E>
__device__ __forceinline__ float rope_entry(const nnc_cuda_attn_args<E> &a, const E *x, int d, double p) {
  const int half = a.rope_dims / 2;
  const float xd = nnc_dtype<E>::load(x[d]);
  if (d >= 2 * half) return xd;
  float c, s;
  rope_cs(a, p, d < half ? d : d - half, c, s);
  if (d < half) return __fsub_rn(__fmul_rn(xd, c), __fmul_rn(nnc_dtype<E>::load(x[d + half]), s));
  return __fadd_rn(__fmul_rn(xd, c), __fmul_rn(nnc_dtype<E>::load(x[d - half]), s));
}

/* n rows of width w from src (row stride sst), rotated, into dst (row
 * stride dst_st); row r is time row t0 + r of batch b; over threads tid of
 * nthreads. dst may not overlap src. */
template <typename E>
__device__ __forceinline__ void rope_rows(const nnc_cuda_attn_args<E> &a, E *dst, long long dst_st, const E *src,
                                          long long sst, int n, int w, int b, int t0, int tid, int nthreads) {
  for (int e = tid; e < n * w; e += nthreads) {
    const int r = e / w, d = e % w;
    dst[(long long)r * dst_st + d] =
        nnc_dtype<E>::store(rope_entry(a, src + (long long)r * sst, d, rope_position(a, b, t0 + r)));
  }
}

/* Query rows of batch b and query heads h0 .. h0 + nh - 1 rotated where
 * they are: a thread a pair (both read before either is written) or a
 * passed entry (left alone). */
template <typename E>
__device__ __forceinline__ void rope_q_in_place(const nnc_cuda_attn_args<E> &a, int b, int h0, int nh, int tid,
                                                int nthreads) {
  const int half = a.rope_dims / 2;
  const long long pairs = (long long)nh * a.T * half;
  for (long long e = tid; e < pairs; e += nthreads) {
    const int i = (int)(e % half), t = (int)(e / half % a.T), h = h0 + (int)(e / half / a.T);
    E *x = const_cast<E *>(a.q) + b * a.q_sb + h * a.q_sh + (long long)t * a.q_st;
    float c, s;
    rope_cs(a, rope_position(a, b, t), i, c, s);
    const float x0 = nnc_dtype<E>::load(x[i]), x1 = nnc_dtype<E>::load(x[i + half]);
    x[i] = nnc_dtype<E>::store(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
    x[i + half] = nnc_dtype<E>::store(__fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
  }
}

/* Checks the rope arguments: an even rotated width within D, a base > 0,
 * rope_k only with new key rows, positions aligned. */
template <typename E> nnc_cuda_status check_rope(const nnc_cuda_attn_args<E> &a, const char *kernel, nnc_cuda_error *err) {
  if (!a.rope_q && !a.rope_k) return NNC_CUDA_OK;
  if (a.rope_dims < 2 || a.rope_dims % 2 || a.rope_dims > a.D)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected rope_dims even, >= 2 and at most D = %d, found %d",
                         a.D, a.rope_dims);
  if (!(a.rope_base > 0.0))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected rope_base > 0, found %g", a.rope_base);
  if (a.rope_k && !a.k_new)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected k_new with rope_k (the new key rows to rotate), found NULL");
  if (a.rope_pos && reinterpret_cast<uintptr_t>(a.rope_pos) % sizeof(int) != 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected rope_pos aligned to 4 bytes, found %p",
                         (const void *)a.rope_pos);
  return NNC_CUDA_OK;
}

}  // namespace nnc_attn

#endif
