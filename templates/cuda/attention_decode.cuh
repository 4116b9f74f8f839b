/* templates/cuda/attention_decode.cuh — attention for a few query rows over
 * many keys: a decode step, one new token a sequence attending to its kv
 * cache (split-K attention, "flash-decoding", inside one block).
 *
 * The flash kernels give a block 64 query rows and walk the keys one tile
 * after the other. With one row a block, GPT-2 at B=1 runs 12 blocks, each
 * a chain of dependent tiles: 27 us for 544 keys (H200, session 16), where
 * the 1.7 MB they read take about 1 us. Here a block takes one query row
 * and deals its keys out to its threads: thread t owns keys t, t + 32*NW,
 * ..., keeps its own running maximum, sum and Dv accumulators in
 * registers, and the block merges the 32*NW partial softmaxes at the end
 * (warp shuffles, then shared memory). No workspace, one launch.
 *
 * For D == Dv == 64 (GPT-2's and LLaMA-7B-like heads are 64 or 128; 128
 * would hold 256 floats a thread), rows 16-byte aligned (q, k, v, out and
 * every stride), no lse (inference). Same results as attention.cuh's
 * kernels up to the order of the sums; all arithmetic in f32. With k_new /
 * v_new set the kernels append the new rows themselves (attention_append.cuh):
 * a decode step's kv append is no launch of its own; with rope_q / rope_k
 * the groups kernel's ROPE variant rotates the query row and the new key
 * rows into shared memory first (attention_rope.cuh): no rope launches. */
#ifndef NNC_CUDA_ATTENTION_DECODE_CUH
#define NNC_CUDA_ATTENTION_DECODE_CUH

namespace nnc_attn {

/* Merges the partial softmax (m2, l2, acc2) into (m, l, acc): both with
 * maxima in the log2 domain, -inf for one that saw no key. */
template <int D> __device__ __forceinline__ void merge_partial(float &m, float &l, float *acc, float m2, float l2,
                                                               const float *acc2) {
  const float mn = fmaxf(m, m2);
  const float c1 = mn == -INFINITY ? 0.0f : exp2f(m - mn), c2 = mn == -INFINITY ? 0.0f : exp2f(m2 - mn);
  l = l * c1 + l2 * c2;
#pragma unroll
  for (int d = 0; d < D; d++) acc[d] = acc[d] * c1 + acc2[d] * c2;
  m = mn;
}

/* The row's output from the NW warps' partials (part[w]: D sums, then the
 * maximum and the sum of weights), after a barrier. */
template <typename E, int D, int NW>
__device__ __forceinline__ void merge_warps(const float (&part)[NW][D + 2], E *o) {
  for (int d = threadIdx.x; d < D; d += NW * 32) {
    float M = -INFINITY;
    for (int x = 0; x < NW; x++) M = fmaxf(M, part[x][D]);
    float L = 0.0f, sum = 0.0f;
    for (int x = 0; x < NW; x++) {
      const float c = M == -INFINITY ? 0.0f : exp2f(part[x][D] - M);
      L += part[x][D + 1] * c;
      sum += part[x][d] * c;
    }
    o[d] = nnc_dtype<E>::store(L > 0.0f ? sum / L : 0.0f); /* every key masked: zeros */
  }
}

/* The blocks of NW warps an SM must hold for the launcher's choice of NW
 * (nnc_cuda_attention_decode) to run its rows in one wave: 6 of 4 warps,
 * 3 of 8, 2 of 16; i.e. at most 80, 80 and 64 registers a thread. */
constexpr int decode_min_blocks(int nw) { return nw <= 8 ? 24 / nw : 2; }

}  // namespace nnc_attn

/* (The launcher does not take this kernel: gpu_attn_decode.cu's baseline. It takes no rope_q / rope_k.) */
template <typename E, int D, int NW>
__global__ void __launch_bounds__(NW * 32) nnc_attn_decode_kernel(const nnc_cuda_attn_args<E> a) {
  constexpr int N = nnc_dtype<E>::VEC; /* elements in 16 bytes */
  __shared__ float part[NW][D + 2];
  const int row = blockIdx.x; /* (b * heads + h) * T + i */
  const int i = row % a.T, bh = row / a.T, h = bh % a.heads, b = bh / a.heads;
  const int g = nnc_attn::kv_head(a, h);
  const E *q = a.q + b * a.q_sb + h * a.q_sh + (long long)i * a.q_st;
  /* keys S - T .. S - 1 from k_new / v_new when set (attention_append.cuh) */
  const nnc_attn::key_rows<E> k = nnc_attn::rows_of(a, false, b, g, 0), v = nnc_attn::rows_of(a, true, b, g, 0);
  E *o = a.out + b * a.o_sb + h * a.o_sh + (long long)i * a.o_st;
  const E *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  /* keys 0 .. last (causal: the cache's older rows and this call's up to i) */
  const int last = a.causal ? min(a.S - 1, i + (a.S - a.T)) : a.S - 1;
  float qf[D], acc[D];
  const float qs = a.scale * 1.4426950408889634f; /* exponents in base 2 */
#pragma unroll
  for (int d = 0; d < D; d += N) {
    float x[N];
    nnc_load_vec(q + d, x);
#pragma unroll
    for (int u = 0; u < N; u++) qf[d + u] = x[u] * qs;
  }
#pragma unroll
  for (int d = 0; d < D; d++) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = threadIdx.x; j <= last; j += NW * 32) {
    if (mrow && nnc_dtype<E>::load(mrow[j]) == 0.0f) continue;
    const E *kr = k.row(j, a.k_st, a.kn_st);
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < D; d += N) {
      float kv[N];
      nnc_load_vec(kr + d, kv);
#pragma unroll
      for (int u = 0; u < N; u++) s += qf[d + u] * kv[u];
    }
    const float mn = fmaxf(m, s), c = exp2f(m - mn), p = exp2f(s - mn);
    l = l * c + p;
    const E *vr = v.row(j, a.v_st, a.vn_st);
#pragma unroll
    for (int d = 0; d < D; d += N) {
      float vv[N];
      nnc_load_vec(vr + d, vv);
#pragma unroll
      for (int u = 0; u < N; u++) acc[d + u] = acc[d + u] * c + p * vv[u];
    }
    m = mn;
  }
  /* the warp's 32 partials into lane 0, then the warps' through shared memory */
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    float acc2[D];
#pragma unroll
    for (int d = 0; d < D; d++) acc2[d] = __shfl_xor_sync(0xffffffffu, acc[d], off);
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off), l2 = __shfl_xor_sync(0xffffffffu, l, off);
    nnc_attn::merge_partial<D>(m, l, acc, m2, l2, acc2);
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) {
    part[w][D] = m;
    part[w][D + 1] = l;
#pragma unroll
    for (int d = 0; d < D; d++) part[w][d] = acc[d];
  }
  __syncthreads();
  nnc_attn::merge_warps<E, D, NW>(part, o);
  /* one block of the k/v head writes the new rows into the caches (none of the launch reads them there),
   * 16 bytes at a time (the decode kernels' rows are) */
  if (nnc_attn::appends_rows(a, h, i)) nnc_attn::copy_new_rows<false>(a, b, g, true, threadIdx.x, NW * 32);
}

/* The same for many keys a row (a batch of sequences over long caches): a
 * group of G = D / VEC threads holds one key, each thread 16 bytes of its
 * row (a warp's load covers 32 / G whole rows, every byte of each sector
 * used), the dot product summed over the group by shuffles. Group g of the
 * block takes keys g, g + GROUPS, ...; U keys' K and V rows are loaded
 * before the first is used (2 U 16-byte loads a thread in flight), and
 * their softmax update is one rescale. A thread keeps VEC accumulators, not
 * D: few registers, many blocks an SM. The groups' partials merge by
 * shuffles within the warp, then through shared memory. */
template <typename E, int D, int NW, int U, bool ROPE = false>
__global__ void __launch_bounds__(NW * 32, nnc_attn::decode_min_blocks(NW)) nnc_attn_decode_groups_kernel(const nnc_cuda_attn_args<E> a) {
  constexpr int N = nnc_dtype<E>::VEC, G = D / N, GROUPS = NW * 32 / G;
  static_assert(G >= 1 && G <= 32 && 32 % G == 0, "a key's row in 1 to 32 lanes of one warp");
  __shared__ float part[NW][D + 2];
  /* ROPE (attention_rope.cuh): the block's query row and its k/v head's T <= 4 new key rows, rotated */
  __shared__ __align__(16) E rq[ROPE ? D : 1], rk[ROPE ? 4 * D : 1];
  const int row = blockIdx.x; /* (b * heads + h) * T + i */
  const int i = row % a.T, bh = row / a.T, h = bh % a.heads, b = bh / a.heads;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, sub = lane % G, grp = threadIdx.x / G;
  const int g = nnc_attn::kv_head(a, h);
  const E *q = a.q + b * a.q_sb + h * a.q_sh + (long long)i * a.q_st;
  /* keys S - T .. S - 1 from k_new / v_new when set (attention_append.cuh): one block of the k/v head
   * writes them into the caches, and no block reads those cache rows */
  nnc_attn::key_rows<E> k = nnc_attn::rows_of(a, false, b, g, sub * N);
  const nnc_attn::key_rows<E> v = nnc_attn::rows_of(a, true, b, g, sub * N);
  if constexpr (ROPE) {
    /* every block of the k/v head rotates the same new rows to the same bits; the appending block
     * copies its rotated rows into the cache at the end */
    if (a.rope_q) {
      nnc_attn::rope_rows(a, rq, D, q, a.q_st, 1, D, b, i, threadIdx.x, NW * 32);
      q = rq;
    }
    if (a.rope_k) {
      nnc_attn::rope_rows(a, rk, D, a.k_new + b * a.kn_sb + g * a.kn_sh, a.kn_st, a.T, D, b, 0, threadIdx.x, NW * 32);
      k.fresh_rows = rk + sub * N;
    }
    __syncthreads();
  }
  /* the new key rows' stride: k_new's, or the rotated rows' in shared memory */
  const auto knst = [&]() -> long long { return ROPE && a.rope_k ? D : a.kn_st; };
  E *o = a.out + b * a.o_sb + h * a.o_sh + (long long)i * a.o_st;
  const E *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  const int last = a.causal ? min(a.S - 1, i + (a.S - a.T)) : a.S - 1;
  const float qs = a.scale * 1.4426950408889634f; /* exponents in base 2 */
  float qf[N], acc[N];
  nnc_load_vec(q + sub * N, qf);
#pragma unroll
  for (int u = 0; u < N; u++) {
    qf[u] *= qs;
    acc[u] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  /* the trip count is the warp's (its first group's), so that every lane reaches the shuffles */
  const int first = w * (32 / G);
  for (int base = 0; base + first <= last; base += GROUPS * U) {
    const int j0 = base + grp;
    uint4 kr[U], vr[U]; /* raw 16 bytes, converted at use: half the registers of floats */
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = j0 + u * GROUPS;
      /* the rows are loaded before the mask is known (a masked key's are read for nothing), so that
       * the loads do not wait for it */
      ok[u] = j <= last; /* the same in the whole group */
      if (ok[u]) {
        kr[u] = *reinterpret_cast<const uint4 *>(k.row(j, a.k_st, knst()));
        vr[u] = *reinterpret_cast<const uint4 *>(v.row(j, a.v_st, a.vn_st));
      }
    }
    if (mrow) {
#pragma unroll
      for (int u = 0; u < U; u++)
        if (ok[u]) ok[u] = nnc_dtype<E>::load(mrow[j0 + u * GROUPS]) != 0.0f;
    }
    float sc[U], mn = m;
#pragma unroll
    for (int u = 0; u < U; u++) {
      float s = 0.0f;
      if (ok[u]) {
        float kf[N];
        nnc_load_vec(reinterpret_cast<const E *>(&kr[u]), kf);
#pragma unroll
        for (int e = 0; e < N; e++) s += qf[e] * kf[e];
      }
#pragma unroll
      for (int off = 1; off < G; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      sc[u] = ok[u] ? s : -INFINITY;
      mn = fmaxf(mn, sc[u]);
    }
    if (mn == -INFINITY) continue; /* nothing seen yet in this group; the next shuffles are the next trip's */
    const float c = exp2f(m - mn);
    l *= c;
#pragma unroll
    for (int e = 0; e < N; e++) acc[e] *= c;
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (!ok[u]) continue;
      const float p = exp2f(sc[u] - mn);
      float vf[N];
      nnc_load_vec(reinterpret_cast<const E *>(&vr[u]), vf);
      l += p;
#pragma unroll
      for (int e = 0; e < N; e++) acc[e] += p * vf[e];
    }
    m = mn;
  }
  /* the warp's groups into its first group (lanes 0 .. G-1), then the warps' through shared memory */
#pragma unroll
  for (int off = G; off < 32; off <<= 1) {
    float acc2[N];
#pragma unroll
    for (int e = 0; e < N; e++) acc2[e] = __shfl_xor_sync(0xffffffffu, acc[e], off);
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off), l2 = __shfl_xor_sync(0xffffffffu, l, off);
    nnc_attn::merge_partial<N>(m, l, acc, m2, l2, acc2);
  }
  if (lane < G) {
#pragma unroll
    for (int e = 0; e < N; e++) part[w][sub * N + e] = acc[e];
    if (lane == 0) {
      part[w][D] = m;
      part[w][D + 1] = l;
    }
  }
  __syncthreads();
  nnc_attn::merge_warps<E, D, NW>(part, o);
  /* one block of the k/v head writes the new rows into the caches (none of the launch reads them
   * there), last, when the loop's registers are free; 16 bytes at a time (the decode kernels' rows are) */
  if (nnc_attn::appends_rows(a, h, i))
    nnc_attn::copy_new_rows<false>(a, b, g, true, threadIdx.x, NW * 32, ROPE && a.rope_k ? rk : nullptr);
}

/* Whether nnc_cuda_attention takes the decode kernel: few query rows, heads
 * of 64, 16-byte rows (the new ones to append too), no lse. */
template <typename T> bool nnc_cuda_attention_uses_decode(const nnc_cuda_attn_args<T> &a) {
  return a.T <= 4 && a.D == 64 && a.Dv == 64 && !a.lse && nnc_attn::aligned16(a.q) && nnc_attn::aligned16(a.k) &&
         nnc_attn::aligned16(a.v) && nnc_attn::aligned16(a.out) && nnc_attn::strides16(a) && nnc_attn::append16(a);
}

namespace nnc_attn {

/* The current device's SMs, asked once a device (the first 16). */
inline int sm_count() {
  static std::atomic<int> known[16];
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (dev >= 0 && dev < 16 && (n = known[dev].load(std::memory_order_relaxed)) > 0) return n;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  if (dev >= 0 && dev < 16) known[dev].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace nnc_attn

/* A block a query row; its width by how many rows there are against the
 * SMs (H100, S=544, bench/NOTES.md "decode attention's shape"): a few rows
 * (B=1: 12) leave most SMs idle, so each row's keys go to 16 warps (14.6 ->
 * 8.6 us at B=1, 18.2 -> 14.4 at 192 rows); at 3 blocks an SM 8 warps; past
 * that 4, whose many blocks keep the most loads in flight (86% of the copy
 * rate at 768 rows). */
template <typename T>
nnc_cuda_status nnc_cuda_attention_decode(const nnc_cuda_attn_args<T> &a, cudaStream_t stream, nnc_cuda_error *err) {
  const long long rows = (long long)a.batch * a.heads * a.T;
  if (rows > 0x7fffffffLL)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn::KERNEL, "expected batch * heads * T < 2^31, found %lld", rows);
  if ((a.rope_q || a.rope_k) && a.T > 4) /* the ROPE variant's shared rows: at most 4 new keys */
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn::KERNEL, "expected T <= 4 rows with rope folded in, found %d", a.T);
  const long long sms = nnc_attn::sm_count();
  /* rope folded in: the variant that rotates as it reads (the other keeps its registers and loads as they were) */
  if (a.rope_q || a.rope_k) {
    if (rows <= 2 * sms) nnc_attn_decode_groups_kernel<T, 64, 16, 2, true><<<(unsigned)rows, 16 * 32, 0, stream>>>(a);
    else if (rows <= 3 * sms) nnc_attn_decode_groups_kernel<T, 64, 8, 4, true><<<(unsigned)rows, 8 * 32, 0, stream>>>(a);
    else nnc_attn_decode_groups_kernel<T, 64, 4, 4, true><<<(unsigned)rows, 4 * 32, 0, stream>>>(a);
  } else if (rows <= 2 * sms) nnc_attn_decode_groups_kernel<T, 64, 16, 2><<<(unsigned)rows, 16 * 32, 0, stream>>>(a);
  else if (rows <= 3 * sms) nnc_attn_decode_groups_kernel<T, 64, 8, 4><<<(unsigned)rows, 8 * 32, 0, stream>>>(a);
  else nnc_attn_decode_groups_kernel<T, 64, 4, 4><<<(unsigned)rows, 4 * 32, 0, stream>>>(a);
  return nnc_cuda_check_launch(err, nnc_attn::KERNEL);
}

#endif
