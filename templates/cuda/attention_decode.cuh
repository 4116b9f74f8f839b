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
 * rows into shared memory first (attention_rope.cuh): no rope launches.
 * Where the rows are few against the SMs (B=1), the launcher splits each
 * row's keys over the blocks of a thread block cluster (sm_90a), merged
 * through distributed shared memory: still one launch, no workspace. */
#ifndef NNC_CUDA_ATTENTION_DECODE_CUH
#define NNC_CUDA_ATTENTION_DECODE_CUH

/* the cluster split's device code only (sm_90 and later): older toolchains
 * (the sm_70 check's CUDA 12 headers under clang) lack what it includes */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

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

/* The same merge kept as a partial for the row's other blocks (a split
 * row, SPLIT in the groups kernel): blk[0 .. D-1] the weighted sums, blk[D]
 * the maximum and blk[D + 1] the sum of weights. */
template <int D, int NW> __device__ __forceinline__ void merge_warps_into(const float (&part)[NW][D + 2], float *blk) {
  for (int d = threadIdx.x; d < D; d += NW * 32) {
    float M = -INFINITY;
    for (int x = 0; x < NW; x++) M = fmaxf(M, part[x][D]);
    float L = 0.0f, sum = 0.0f;
    for (int x = 0; x < NW; x++) {
      const float c = M == -INFINITY ? 0.0f : exp2f(part[x][D] - M);
      L += part[x][D + 1] * c;
      sum += part[x][d] * c;
    }
    blk[d] = sum;
    if (d == 0) blk[D] = M, blk[D + 1] = L;
  }
}

/* The row's output from the partials of its P blocks (blk(r): rank r's, as
 * merge_warps_into leaves them), merged in rank order: the same bits
 * whatever order the blocks ran in. */
template <typename E, int D, int NW, typename B>
__device__ __forceinline__ void merge_blocks(B blk, int P, E *o) {
  for (int d = threadIdx.x; d < D; d += NW * 32) {
    float M = -INFINITY;
    for (int r = 0; r < P; r++) M = fmaxf(M, blk(r)[D]);
    float L = 0.0f, sum = 0.0f;
    for (int r = 0; r < P; r++) {
      const float c = M == -INFINITY ? 0.0f : exp2f(blk(r)[D] - M);
      L += blk(r)[D + 1] * c;
      sum += blk(r)[d] * c;
    }
    o[d] = nnc_dtype<E>::store(L > 0.0f ? sum / L : 0.0f);
  }
}

/* The blocks of NW warps an SM must hold for the launcher's choice of NW
 * (nnc_cuda_attention_decode) to run its rows in one wave: 6 of 4 warps,
 * 3 of 8, 2 of 16; i.e. at most 80, 80 and 64 registers a thread. */
constexpr int decode_min_blocks(int nw) { return nw <= 8 ? 24 / nw : 2; }

/* How many trips ahead the groups kernel asks L2 for cache rows (PF), as the launcher takes it
 * (bench/gpu_attn_decode.cu, H200, B=64 S=544, 4 warps: 30.9 us with none, 34.3 with 1, 37.3 with 2: at
 * full occupancy the prefetches only add requests), and for a row split over a cluster (B=1: 1 trip
 * ahead, 13.0 against 14.5 us unsplit, where a block's trips wait on latency, not bandwidth). */
constexpr int DECODE_PF = 0, DECODE_SPLIT_PF = 1;

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

namespace nnc_attn {

/* Asks L2 for the line holding p, with no register to wait on: the rows of
 * a later trip of the key loop travel from memory while this one computes. */
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

/* A cache row's 16 bytes of a thread, read once a step: not kept in L1 and first out of L2, so that the
 * stream neither thrashes L1 nor pushes out of L2 what the kernels around it reuse. H200, GPT-2's shape
 * at S=544 (bench/gpu_attn_decode.cu, the append call): B=64 33.7 -> 31.3 us, B=16 13.8 -> 13.1, B=1
 * the same; most of it from not allocating in L1 (31.4 with that alone). */
__device__ __forceinline__ uint4 load_stream(const void *p, unsigned long long policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint4 r;
  asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "l"(policy));
  return r;
#else
  (void)policy;
  return *reinterpret_cast<const uint4 *>(p);
#endif
}

/* The L2 policy of load_stream: evict first (sm_80 on; 0 elsewhere, unused). */
__device__ __forceinline__ unsigned long long evict_first_policy() {
  unsigned long long policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

/* Lane sub of a key group of the decode kernel (D / VEC lanes, NW * 32 / that groups a block, U keys a
 * group a trip) asks L2 for the K (even r = sub % 2U) or V (odd r) row of batch b, k/v head g and key
 * j + r / 2 * groups, when that key is at most lc: the rows of the trip whose first key for the group is j. */
template <typename E, int D, int NW, int U>
__device__ __forceinline__ void prefetch_trip(const nnc_cuda_attn_args<E> &a, int b, int g, int j, int lc) {
  constexpr int N = nnc_dtype<E>::VEC, G = D / N, GROUPS = NW * 32 / G;
  const int sub = threadIdx.x % 32 % G, r = sub % (2 * U);
  j += r / 2 * GROUPS;
  if (j > lc) return;
  prefetch_l2(r % 2 ? a.v + b * a.v_sb + g * a.v_sh + (long long)j * a.v_st + sub * N
                    : a.k + b * a.k_sb + g * a.k_sh + (long long)j * a.k_st + sub * N);
}

/* One step of a group's online softmax over U keys whose K and V rows (this
 * thread's 16 bytes of each) are kr and vr; ok[u]: key u counts (the same
 * in the whole group). The scores are summed over the group's G lanes by
 * shuffles that every lane of the warp reaches; the rescale is one for the
 * U keys. (m, l, acc): the running maximum (log2 domain), sum of weights
 * and the thread's N accumulators. */
template <typename E, int G, int U>
__device__ __forceinline__ void attend_keys(float &m, float &l, float (&acc)[nnc_dtype<E>::VEC],
                                            const float (&qf)[nnc_dtype<E>::VEC], const uint4 (&kr)[U],
                                            const uint4 (&vr)[U], const bool (&ok)[U]) {
  constexpr int N = nnc_dtype<E>::VEC;
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
  if (mn == -INFINITY) return; /* nothing seen yet in this group */
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

}  // namespace nnc_attn

/* The same for many keys a row (a batch of sequences over long caches): a
 * group of G = D / VEC threads holds one key, each thread 16 bytes of its
 * row (a warp's load covers 32 / G whole rows, every byte of each sector
 * used), the dot product summed over the group by shuffles. Group g of the
 * block takes keys g, g + GROUPS, ...; U keys' K and V rows are loaded
 * before the first is used (2 U 16-byte loads a thread in flight), and
 * their softmax update is one rescale. A thread keeps VEC accumulators, not
 * D: few registers, many blocks an SM. The groups' partials merge by
 * shuffles within the warp, then through shared memory.
 *
 * With new rows (k_new / v_new) the T <= 4 keys S - T .. S - 1 are this
 * call's: group t < T takes key S - T + t from the new rows (or their
 * rotated copy) before the key loop, while q's row is loaded anyway, and the
 * loop then runs over the cache's keys 0 .. S - T - 1 exactly as without
 * appends (no choice per key between two places). One block of the k/v
 * head writes the new rows into the caches at its end, and no block reads
 * those cache rows.
 *
 * PF > 0: each trip asks L2 for the rows of the trip PF ahead (one line a
 * lane, no register held), so that more bytes are on their way from memory
 * than the 2 U loads a thread in flight: worth it where a block's trips
 * wait on latency (few blocks an SM), not at full occupancy (DECODE_PF). */
template <typename E, int D, int NW, int U, bool ROPE = false, int PF = nnc_attn::DECODE_PF, bool SPLIT = false>
__global__ void __launch_bounds__(NW * 32, nnc_attn::decode_min_blocks(NW)) nnc_attn_decode_groups_kernel(const nnc_cuda_attn_args<E> a) {
  constexpr int N = nnc_dtype<E>::VEC, G = D / N, GROUPS = NW * 32 / G;
  static_assert(G >= 1 && G <= 32 && 32 % G == 0, "a key's row in 1 to 32 lanes of one warp");
  static_assert(GROUPS >= 4, "a group for each of up to 4 new keys");
  static_assert(PF == 0 || 2 * U <= G, "a lane for each K and V row of a trip to prefetch");
  __shared__ float part[NW][D + 2];
  /* ROPE (attention_rope.cuh): the block's query row and its k/v head's T <= 4 new key rows, rotated */
  __shared__ __align__(16) E rq[ROPE ? D : 1], rk[ROPE ? 4 * D : 1];
  /* SPLIT: a row's keys go to the P blocks of a thread block cluster, a trip at a time (rank r takes
   * trips r, r + P, ...), and rank 0 merges their partials through distributed shared memory */
  int P = 1, rank = 0;
#if __CUDA_ARCH__ >= 900
  if constexpr (SPLIT) {
    P = (int)cooperative_groups::this_cluster().num_blocks();
    rank = (int)cooperative_groups::this_cluster().block_rank();
  }
#endif
  const int row = blockIdx.x / P; /* (b * heads + h) * T + i */
  const int i = row % a.T, bh = row / a.T, h = bh % a.heads, b = bh / a.heads;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, sub = lane % G, grp = threadIdx.x / G;
  const int g = nnc_attn::kv_head(a, h);
  const E *q = a.q + b * a.q_sb + h * a.q_sh + (long long)i * a.q_st;
  const int last = a.causal ? min(a.S - 1, i + (a.S - a.T)) : a.S - 1;
  /* keys from `fresh` on are this call's new rows (attention_append.cuh); the caches' rows there are
   * being written, so they are read from k_new / v_new */
  const int fresh = a.k_new || a.v_new ? a.S - a.T : a.S;
  const unsigned long long policy = nnc_attn::evict_first_policy(); /* the cache rows' (load_stream) */
  /* the first PF trips' rows are on their way before anything waits for q, the rotation or the new rows */
  if constexpr (PF > 0) {
#pragma unroll
    for (int t = 0; t < PF; t++)
      nnc_attn::prefetch_trip<E, D, NW, U>(a, b, g, grp + (rank + t * P) * U * GROUPS, min(last, fresh - 1));
  }
  if constexpr (ROPE) {
    /* every block of the k/v head rotates the same new rows to the same bits; the appending block
     * copies its rotated rows into the cache at the end */
    if (a.rope_q) {
      nnc_attn::rope_rows(a, rq, D, q, a.q_st, 1, D, b, i, threadIdx.x, NW * 32);
      q = rq;
    }
    if (a.rope_k)
      nnc_attn::rope_rows(a, rk, D, a.k_new + b * a.kn_sb + g * a.kn_sh, a.kn_st, a.T, D, b, 0, threadIdx.x, NW * 32);
    __syncthreads();
  }
  E *o = a.out + b * a.o_sb + h * a.o_sh + (long long)i * a.o_st;
  const E *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  const float qs = a.scale * 1.4426950408889634f; /* exponents in base 2 */
  float qf[N], acc[N];
  nnc_load_vec(q + sub * N, qf);
#pragma unroll
  for (int u = 0; u < N; u++) {
    qf[u] *= qs;
    acc[u] = 0.0f;
  }
  const E *kc = a.k + b * a.k_sb + g * a.k_sh + sub * N, *vc = a.v + b * a.v_sb + g * a.v_sh + sub * N;
  const int lc = min(last, fresh - 1); /* the last key read from the cache */
  float m = -INFINITY, l = 0.0f;
  if (fresh < a.S && rank == 0) { /* the new keys first: group t takes key fresh + t */
    const int j = fresh + grp;
    uint4 kr[1], vr[1];
    bool ok[1] = {grp < a.T && j <= last};
    if (ok[0]) {
      const E *kn = ROPE && a.rope_k ? rk + grp * D + sub * N
                    : a.k_new        ? a.k_new + b * a.kn_sb + g * a.kn_sh + grp * a.kn_st + sub * N
                                     : kc + (long long)j * a.k_st;
      const E *vn = a.v_new ? a.v_new + b * a.vn_sb + g * a.vn_sh + grp * a.vn_st + sub * N : vc + (long long)j * a.v_st;
      kr[0] = *reinterpret_cast<const uint4 *>(kn);
      vr[0] = *reinterpret_cast<const uint4 *>(vn);
      if (mrow) ok[0] = nnc_dtype<E>::load(mrow[j]) != 0.0f;
    }
    nnc_attn::attend_keys<E, G, 1>(m, l, acc, qf, kr, vr, ok);
  }
  /* the cache's keys 0 .. lc; the trip count is the warp's (its first group's), so that every lane
   * reaches the shuffles */
  const int first = w * (32 / G);
  for (int base = rank * GROUPS * U; base + first <= lc; base += P * GROUPS * U) {
    const int j0 = base + grp;
    uint4 kr[U], vr[U]; /* raw 16 bytes, converted at use: half the registers of floats */
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = j0 + u * GROUPS;
      /* the rows are loaded before the mask is known (a masked key's are read for nothing), so that
       * the loads do not wait for it */
      ok[u] = j <= lc; /* the same in the whole group */
      if (ok[u]) {
        kr[u] = nnc_attn::load_stream(kc + (long long)j * a.k_st, policy);
        vr[u] = nnc_attn::load_stream(vc + (long long)j * a.v_st, policy);
      }
    }
    if constexpr (PF > 0) nnc_attn::prefetch_trip<E, D, NW, U>(a, b, g, j0 + PF * P * U * GROUPS, lc);
    if (mrow) {
#pragma unroll
      for (int u = 0; u < U; u++)
        if (ok[u]) ok[u] = nnc_dtype<E>::load(mrow[j0 + u * GROUPS]) != 0.0f;
    }
    nnc_attn::attend_keys<E, G, U>(m, l, acc, qf, kr, vr, ok);
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
  if constexpr (SPLIT) {
#if __CUDA_ARCH__ >= 900
    __shared__ float blk[D + 2];
    nnc_attn::merge_warps_into<D, NW>(part, blk);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync(); /* every block's partial is in its shared memory */
    if (rank == 0) nnc_attn::merge_blocks<E, D, NW>([&](int r) { return cluster.map_shared_rank(blk, r); }, P, o);
    cluster.sync(); /* rank 0 reads the others' shared memory until here */
#endif
  } else {
    nnc_attn::merge_warps<E, D, NW>(part, o);
  }
  /* one block of the k/v head writes the new rows into the caches (none of the launch reads them
   * there), last, when the loop's registers are free; 16 bytes at a time (the decode kernels' rows are) */
  if (nnc_attn::appends_rows(a, h, i) && rank == 0)
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

/* The keys a trip of the groups kernel with NW warps and U keys a group covers (heads of 64). */
template <typename T> constexpr int decode_trip(int nw, int u) { return nw * 32 / (64 / nnc_dtype<T>::VEC) * u; }

/* Launches the groups kernel (NW warps, U keys a group) with each of the rows' keys dealt out to the P
 * blocks of a thread block cluster (SPLIT). */
template <typename T, int NW, int U, bool ROPE>
nnc_cuda_status decode_split(const nnc_cuda_attn_args<T> &a, long long rows, int P, cudaStream_t stream, nnc_cuda_error *err) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)P;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3((unsigned)(rows * P), 1, 1);
  cfg.blockDim = dim3(NW * 32, 1, 1);
  cfg.stream = stream;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  const cudaError_t e =
      cudaLaunchKernelEx(&cfg, nnc_attn_decode_groups_kernel<T, 64, NW, U, ROPE, DECODE_SPLIT_PF, true>, a);
  if (e != cudaSuccess) return runtime_fail(err, e, "cudaLaunchKernelEx");
  return nnc_cuda_check_launch(err, KERNEL);
}

/* How many blocks of a cluster the launcher splits each row's keys over (1: none): built for sm_90a
 * (clusters), fewer rows than half the SMs (B=1 of GPT-2: 12 rows on 132 SMs, each block a chain of
 * trips), as many as make about 4 blocks an SM, at most 8 (a portable cluster) and one a trip of keys. */
template <typename T> int decode_splits(const nnc_cuda_attn_args<T> &a, long long rows, long long sms) {
#ifdef NNC_CUDA_SM90A
  if (rows * 2 > sms) return 1;
  const long long trips = (a.S + decode_trip<T>(4, 4) - 1) / decode_trip<T>(4, 4), fill = 4 * sms / rows;
  return (int)(trips < fill ? (trips < 8 ? trips : 8) : (fill < 8 ? fill : 8));
#else
  (void)a, (void)rows, (void)sms;
  return 1;
#endif
}

}  // namespace nnc_attn

/* A block a query row; its width by how many rows there are against the
 * SMs (H100, S=544, bench/NOTES.md "decode attention's shape"): a few rows
 * (B=1: 12) leave most SMs idle, so each row's keys go to 16 warps (14.6 ->
 * 8.6 us at B=1, 18.2 -> 14.4 at 192 rows); at 3 blocks an SM 8 warps; past
 * that 4, whose many blocks keep the most loads in flight (86% of the copy
 * rate at 768 rows). On sm_90a, with fewer rows than half the SMs, each
 * row's keys go to a cluster of blocks instead (decode_splits). H200,
 * S=544 (bench/gpu_attn_decode.cu, session 37): B=64 (768 rows) 30.6 us
 * plain, 31.3 with the append, 34.5 with the rope too (84%, 82% and 74% of
 * the copy rate); B=1 (12 rows, clusters of 8) 7.2 and 8.1 us plain and
 * with the append (session 24: 10.5 with the rope, against 9.1, 9.7 and
 * 12.8 for 16 warps a row). */
template <typename T>
nnc_cuda_status nnc_cuda_attention_decode(const nnc_cuda_attn_args<T> &a, cudaStream_t stream, nnc_cuda_error *err) {
  const long long rows = (long long)a.batch * a.heads * a.T;
  if (rows > 0x7fffffffLL)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn::KERNEL, "expected batch * heads * T < 2^31, found %lld", rows);
  if ((a.rope_q || a.rope_k) && a.T > 4) /* the ROPE variant's shared rows: at most 4 new keys */
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn::KERNEL, "expected T <= 4 rows with rope folded in, found %d", a.T);
  const long long sms = nnc_attn::sm_count();
  const int splits = nnc_attn::decode_splits(a, rows, sms);
  if (splits > 1)
    return a.rope_q || a.rope_k ? nnc_attn::decode_split<T, 4, 4, true>(a, rows, splits, stream, err)
                                : nnc_attn::decode_split<T, 4, 4, false>(a, rows, splits, stream, err);
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
