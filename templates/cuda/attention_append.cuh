/* templates/cuda/attention_append.cuh — the kv-cache append folded into the
 * attention (nnc_cuda_attn_args.k_new and v_new).
 *
 * A decode step of a transformer writes each layer's new key and value rows
 * into the layer's caches, then attends over the caches. As kernels of their
 * own the two copies cost 2-5 us each even under CUDA graphs: 24 of GPT-2's
 * ~112 kernels a step, 0.11 ms of 1.1 at B=64 on an H200 (bench/NOTES.md,
 * "Decode at B=64"). So the attention takes the new rows beside the caches
 * and makes sure that rows S - T .. S - 1 of each cache hold them:
 * - the decode kernels (attention_decode.cuh) do it inside: every block of
 *   a (batch, k/v head) reads keys S - T .. S - 1 from k_new and v_new
 *   (the groups kernel before its loop over the cache's older keys, the
 *   kernel of a thread a key through key_rows below), never from the
 *   cache, and exactly one of them, the block of the group's first query
 *   head and the first query row (appends_rows), writes them into the
 *   cache; no block of the launch reads those cache rows, so nothing waits
 *   for the write;
 * - every other path (prefill, the flash kernels) reads the caches whole:
 *   nnc_attn::append_rows launches one small copy kernel for k and v
 *   together, then the attention runs as it would without.
 * The rows are copied as they are (the element type, no conversion), so the
 * cache holds the same bits a separate copy kernel writes. */
#ifndef NNC_CUDA_ATTENTION_APPEND_CUH
#define NNC_CUDA_ATTENTION_APPEND_CUH

namespace nnc_attn {

/* Where a block's keys come from: rows j < fresh of the cache at cache +
 * j * st, the rest from the new rows at fresh_rows + (j - fresh) * nst
 * (fresh = S - T with k_new set, past every key without). The strides are
 * row()'s arguments, read from the kernel's parameters: no registers held
 * through the key loop for them. */
template <typename E> struct key_rows {
  const E *cache, *fresh_rows;
  int fresh;
  __device__ __forceinline__ const E *row(int j, long long st, long long nst) const {
    return j >= fresh ? fresh_rows + (long long)(j - fresh) * nst : cache + (long long)j * st;
  }
};

/* The keys (is_v false) or values of batch b and k/v head g, each row
 * starting `col` elements in. */
template <typename E>
__device__ __forceinline__ key_rows<E> rows_of(const nnc_cuda_attn_args<E> &a, bool is_v, int b, int g, int col) {
  key_rows<E> r;
  const E *nw = is_v ? a.v_new : a.k_new;
  r.cache = (is_v ? a.v + b * a.v_sb + g * a.v_sh : a.k + b * a.k_sb + g * a.k_sh) + col;
  r.fresh = nw ? a.S - a.T : 0x7fffffff;
  r.fresh_rows = nw ? nw + b * (is_v ? a.vn_sb : a.kn_sb) + g * (is_v ? a.vn_sh : a.kn_sh) + col : nullptr;
  return r;
}

/* Whether the block of query head h and query row i is the one that writes
 * its k/v head's new rows: the first query head of the group, first row. */
template <typename E> __device__ __forceinline__ bool appends_rows(const nnc_cuda_attn_args<E> &a, int h, int i) {
  return i == 0 && (a.kv_group > 1 ? h % a.kv_group : 0) == 0;
}

/* Copies T rows of width w from src (row stride sst) to dst (dst_st) over
 * the threads `tid` of `nthreads`: 16 bytes at a time when vec (w a
 * multiple of 16 bytes, both 16-byte aligned with such strides), else an
 * element at a time. */
template <typename E>
__device__ __forceinline__ void copy_rows(E *dst, long long dst_st, const E *src, long long sst, int T, int w, bool vec,
                                          int tid, int nthreads) {
  constexpr int N = nnc_dtype<E>::VEC;
  if (vec) {
    const int nv = w / N;
    for (int e = tid; e < T * nv; e += nthreads)
      *reinterpret_cast<uint4 *>(dst + (long long)(e / nv) * dst_st + e % nv * N) =
          *reinterpret_cast<const uint4 *>(src + (long long)(e / nv) * sst + e % nv * N);
  } else {
    for (int e = tid; e < T * w; e += nthreads) dst[(long long)(e / w) * dst_st + e % w] = src[(long long)(e / w) * sst + e % w];
  }
}

/* Copies the T new rows of k (width D) and v (width Dv) of batch b and k/v
 * head g into rows S - T .. S - 1 of the caches (vec: as copy_rows); with
 * ROPE and rope_k, k's rotated (attention_rope.cuh). ROPE false: a caller
 * that never has rope_k set, compiled without the angles' code. krows (not
 * NULL): k's rows already rotated, T rows of D at stride D (the decode
 * kernels' shared copy). */
template <bool ROPE, typename E>
__device__ __forceinline__ void copy_new_rows(const nnc_cuda_attn_args<E> &a, int b, int g, bool vec, int tid,
                                              int nthreads, const E *krows = nullptr) {
  const long long row = a.S - a.T;
  E *kc = const_cast<E *>(a.k) + b * a.k_sb + g * a.k_sh + row * a.k_st;
  if (krows)
    copy_rows(kc, a.k_st, krows, a.D, a.T, a.D, vec, tid, nthreads);
  else if (ROPE && a.k_new && a.rope_k)
    rope_rows(a, kc, a.k_st, a.k_new + b * a.kn_sb + g * a.kn_sh, a.kn_st, a.T, a.D, b, 0, tid, nthreads);
  else if (a.k_new)
    copy_rows(kc, a.k_st, a.k_new + b * a.kn_sb + g * a.kn_sh, a.kn_st, a.T, a.D, vec, tid, nthreads);
  if (a.v_new)
    copy_rows(const_cast<E *>(a.v) + b * a.v_sb + g * a.v_sh + row * a.v_st, a.v_st,
              a.v_new + b * a.vn_sb + g * a.vn_sh, a.vn_st, a.T, a.Dv, vec, tid, nthreads);
}

}  // namespace nnc_attn

/* The new rows of every (batch, k/v head) into the caches, ahead of an
 * attention kernel that reads the caches whole: a block per (batch, k/v
 * head), its threads over the T rows of k and v; with rope_q, the rows of
 * the group's query heads rotated in place too (attention_rope.cuh). */
template <typename E>
__global__ void __launch_bounds__(128) nnc_attn_append_kernel(const nnc_cuda_attn_args<E> a, bool vec) {
  const int g = blockIdx.x % nnc_attn::kv_heads(a), b = blockIdx.x / nnc_attn::kv_heads(a);
  nnc_attn::copy_new_rows<true>(a, b, g, vec, threadIdx.x, blockDim.x);
  const int group = a.kv_group > 1 ? a.kv_group : 1;
  if (a.rope_q) nnc_attn::rope_q_in_place(a, b, g * group, group, threadIdx.x, blockDim.x);
}

namespace nnc_attn {

/* Checks the new rows' arguments: set only over S >= T keys, aligned to
 * the element size, and a cache of each batch's own (a broadcast cache,
 * batch stride 0, would take every batch's rows in the same place). */
template <typename E> nnc_cuda_status check_append(const nnc_cuda_attn_args<E> &a, const char *kernel, nnc_cuda_error *err) {
  if (!a.k_new && !a.v_new) return NNC_CUDA_OK;
  if (a.S < a.T)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected S >= T keys with new rows to append (k_new, v_new), "
                         "found S = %d, T = %d", a.S, a.T);
  const struct {
    const void *p;
    long long sb;
    const char *name;
  } x[2] = {{a.k_new, a.k_sb, "k_new"}, {a.v_new, a.v_sb, "v_new"}};
  for (const auto &n : x) {
    if (!n.p) continue;
    if (reinterpret_cast<uintptr_t>(n.p) % sizeof(E) != 0)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected %s aligned to %zu bytes, found %p", n.name, sizeof(E), n.p);
    if (n.sb == 0 && a.batch > 1)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected a cache for each batch with %s set, found a batch "
                           "stride of 0 over %d batches", n.name, a.batch);
  }
  return NNC_CUDA_OK;
}

/* Whether the new rows (when set) allow 16-byte loads: the decode kernels'
 * condition, as strides16 is for the caches. */
template <typename E> bool append16(const nnc_cuda_attn_args<E> &a) {
  const long long s[6] = {a.kn_sb, a.kn_sh, a.kn_st, a.vn_sb, a.vn_sh, a.vn_st};
  if (a.k_new && (!aligned16(a.k_new) || s[0] * (long long)sizeof(E) % 16 || s[1] * (long long)sizeof(E) % 16 ||
                  s[2] * (long long)sizeof(E) % 16))
    return false;
  if (a.v_new && (!aligned16(a.v_new) || s[3] * (long long)sizeof(E) % 16 || s[4] * (long long)sizeof(E) % 16 ||
                  s[5] * (long long)sizeof(E) % 16))
    return false;
  return true;
}

/* Whether the new rows and the caches' rows they go to allow 16-byte
 * copies: widths, pointers and strides all multiples of 16 bytes. */
template <typename E> bool rows16(const nnc_cuda_attn_args<E> &a) {
  const long long s[6] = {a.k_sb, a.k_sh, a.k_st, a.v_sb, a.v_sh, a.v_st};
  for (long long x : s)
    if (x * (long long)sizeof(E) % 16 != 0) return false;
  return append16(a) && aligned16(a.k) && aligned16(a.v) && a.D % nnc_dtype<E>::VEC == 0 &&
         a.Dv % nnc_dtype<E>::VEC == 0;
}

/* Launches nnc_attn_append_kernel when there are new rows or query rows to
 * rotate (one launch for k, v and q); the attention after it on the same
 * stream reads them. */
template <typename E> nnc_cuda_status append_rows(const nnc_cuda_attn_args<E> &a, cudaStream_t stream, nnc_cuda_error *err,
                                                  const char *kernel) {
  const long long blocks = (long long)a.batch * kv_heads(a);
  if ((!a.k_new && !a.v_new && !a.rope_q) || blocks == 0 || a.T == 0) return NNC_CUDA_OK;
  if (blocks > 0x7fffffffLL)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected batch * k/v heads < 2^31, found %lld", blocks);
  nnc_attn_append_kernel<E><<<(unsigned)blocks, 128, 0, stream>>>(a, rows16(a));
  return nnc_cuda_check_launch(err, kernel);
}

}  // namespace nnc_attn

#endif
