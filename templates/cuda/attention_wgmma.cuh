/* templates/cuda/attention_wgmma.cuh — the Hopper path of attention (sm_90a
 * only): flash attention with the products on wgmma (wgmma.cuh) for bf16
 * and f16, D == Dv == 64. Included by attention.cuh, which dispatches to it
 * when the model is built for cuda-sm90a (NNC_CUDA_SM90A).
 *
 * A block of NWG warpgroups owns BQ = 64 * NWG consecutive queries of one
 * (batch, head); warpgroup g owns rows [64 g, 64 g + 64) of them, its warp w
 * the 16 rows from 64 g + 16 w, in the layout of the mma.sync path, so the
 * mask, online softmax and store are attention_tile.cuh's. Q, K and V sit in
 * shared memory in the 128-byte swizzle (the layout of the mma.sync path's
 * tiles for D = 64, written by the same cp.async copy), K and V tiles of BK
 * keys double-buffered: the copy of tile j + 1 overlaps the work on tile j.
 * Per tile and warpgroup: S = Q K^T as D / 16 wgmma steps reading Q and K
 * from shared memory (64 x BK accumulators in registers), mask and online
 * softmax, then O += P V with P from registers (rounded to T) and V read
 * from shared memory transposed, BK / 16 steps. The two products of a
 * warpgroup wait on each other; the other warpgroups (and blocks) keep the
 * tensor cores busy meanwhile.
 *
 * Causal: key tiles above the diagonal of the block's last query are never
 * loaded, heavy (late) query blocks are scheduled first; as in the mma.sync
 * path. */
#ifndef NNC_CUDA_ATTENTION_WGMMA_CUH
#define NNC_CUDA_ATTENTION_WGMMA_CUH

#include "attention_ops16.cuh"
#include "attention_tile.cuh"
#include "wgmma.cuh"

template <typename T> struct nnc_cuda_attn_args;

/* Shared memory of one block: the Q tile, two K and two V tiles, and the
 * slack that aligns the first to 1024 bytes (the swizzle's period). */
template <typename T, int D, int BK, int NWG> constexpr size_t nnc_attn_wgmma_smem() {
  return (size_t)(64 * NWG * D + 4 * BK * D) * sizeof(T) + 1024;
}

namespace nnc_attn {

/* Starts the copies of key tile t (rows from t * BK) into K and V tiles
 * sk, sv; rows past S are zero-filled. */
template <typename T, int D, int BK, int NTHREADS>
__device__ __forceinline__ void load_kv_tile(T *sk, T *sv, const T *kg, const T *vg, const nnc_cuda_attn_args<T> &a,
                                             int t) {
  const int k0 = t * BK;
  load_tile_swz<T, D, BK, NTHREADS>(sk, kg, kg + (long long)k0 * a.k_st, a.k_st, a.S - k0);
  load_tile_swz<T, D, BK, NTHREADS>(sv, vg, vg + (long long)k0 * a.v_st, a.v_st, a.S - k0);
}

/* Issues S = Q K^T for a warpgroup (one commit group): the k16 step kd
 * starts 32 bytes further into the rows of both tiles. */
template <typename T, int D, int BK>
__device__ __forceinline__ void wg_qk(float (&s)[BK / 2], uint64_t dq, const T *kt) {
  const uint64_t dk = nnc_wg::desc_sw128(nnc_smem_u32(kt));
  nnc_wg::fence();
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) nnc_wg::mma<T>::template ss<BK>(s, dq + 2 * kd, dk + 2 * kd, kd);
  nnc_wg::commit();
}

/* P's A fragments: its k16 step kk is the weights' n8 tiles 2 kk and
 * 2 kk + 1, rounded to T. */
template <typename T, int NT>
__device__ __forceinline__ void pack_weights(uint32_t (&p)[NT / 2][4], const float (&s)[1][NT][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    p[kk][0] = nnc_mma<T>::pack2(s[0][2 * kk][0], s[0][2 * kk][1]);
    p[kk][1] = nnc_mma<T>::pack2(s[0][2 * kk][2], s[0][2 * kk][3]);
    p[kk][2] = nnc_mma<T>::pack2(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    p[kk][3] = nnc_mma<T>::pack2(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

/* Issues O += P V for a warpgroup (one commit group): V's k16 step kk
 * starts 16 rows (2048 bytes) further down. */
template <typename T, int D, int BK>
__device__ __forceinline__ void wg_pv(float (&o)[D / 2], const uint32_t (&p)[BK / 16][4], const T *vt) {
  const uint64_t dv = nnc_wg::desc_sw128(nnc_smem_u32(vt));
  nnc_wg::fence();
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) nnc_wg::mma<T>::rs_n64_tb(o, p[kk], dv + kk * (16 * D * sizeof(T) >> 4));
  nnc_wg::commit();
}

/* The kernel's start: the block's queries, the (batch, head)
 * pointers, the key tiles it walks and its tiles in shared memory. */
template <typename T, int D, int BK, int NWG> struct wg_block {
  T *sq, *sk, *sv; /* Q, then two K tiles, then two V tiles */
  const T *qg, *kg, *vg, *mrow;
  T *og;
  int q0, off, ntiles;

  __device__ __forceinline__ wg_block(const nnc_cuda_attn_args<T> &a, unsigned char *smem) {
    const uint32_t raw = nnc_smem_u32(smem);
    sq = reinterpret_cast<T *>(smem + (((raw + 1023) & ~1023u) - raw));
    sk = sq + 64 * NWG * D;
    sv = sk + 2 * BK * D;
    const int qt = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    q0 = qt * 64 * NWG;
    off = a.S - a.T; /* causal: query i sees keys j <= i + off */
    qg = a.q + b * a.q_sb + h * a.q_sh;
    kg = a.k + b * a.k_sb + h * a.k_sh;
    vg = a.v + b * a.v_sb + h * a.v_sh;
    og = a.out + b * a.o_sb + h * a.o_sh;
    mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
    int kend = a.S;
    if (a.causal) kend = min(kend, q0 + 64 * NWG + off);
    ntiles = kend > 0 ? (kend + BK - 1) / BK : 0;
  }
  __device__ __forceinline__ T *kt(int t) const { return sk + (t % 2) * BK * D; }
  __device__ __forceinline__ T *vt(int t) const { return sv + (t % 2) * BK * D; }
  /* whether key tile t needs the per-element mask for queries from row0 on */
  __device__ __forceinline__ bool edge(const nnc_cuda_attn_args<T> &a, int t, int row0) const {
    const int k0 = t * BK;
    return k0 + BK > a.S || (a.causal && k0 + BK - 1 > row0 + off) || mrow != nullptr;
  }
};

}  // namespace nnc_attn

/* Per tile: S = Q K^T, softmax, O += P V, each product waited for before
 * the next step; K and V double-buffered. Overlapping the next tile's S
 * with this tile's softmax inside a warpgroup (FA3's pipelining, three
 * stages) measured slower on an H100 (58.9 against 56.0 us, causal B=8
 * H=12 T=1024) than one warpgroup a block and three blocks an SM, whose
 * warpgroups overlap each other. */
template <typename T, int D, int BK, int NWG, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) nnc_attn_wgmma_kernel(const nnc_cuda_attn_args<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_attn;
  constexpr int NTHREADS = NWG * 128, NT = BK / 8, ND = D / 8;
  static_assert(D == 64, "rows of 128 bytes: one swizzle period a row");
  static_assert(BK == 64 || BK == 128, "S is one wgmma of n64 or n128");
  extern __shared__ __align__(16) unsigned char nnc_attn_wg_smem[];
  const wg_block<T, D, BK, NWG> k(a, nnc_attn_wg_smem);
  const int g = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;

  /* copy groups: Q with tile 0, then one group a tile (empty past the end),
   * so that "all but the newest group" is always the tile to work on */
  load_tile_swz<T, D, 64 * NWG, NTHREADS>(k.sq, k.qg, k.qg + (long long)k.q0 * a.q_st, a.q_st, a.T - k.q0);
  for (int t = 0; t < 2; ++t) {
    if (t < k.ntiles) load_kv_tile<T, D, BK, NTHREADS>(k.kt(t), k.vt(t), k.kg, k.vg, a, t);
    nnc_cp_async_commit();
  }

  float o[1][ND][4], s[1][NT][4];
  float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int nd = 0; nd < ND; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.0f;
  float(&of)[ND * 4] = reinterpret_cast<float(&)[ND * 4]>(o);
  float(&sf)[NT * 4] = reinterpret_cast<float(&)[NT * 4]>(s);
  const float sl2 = a.scale * 1.4426950408889634f; /* exp(x) = exp2(x * log2 e) */
  const int row0 = k.q0 + g * 64 + warp * 16;      /* the warp's first query */
  const uint64_t dq = nnc_wg::desc_sw128(nnc_smem_u32(k.sq + g * 64 * D));

  for (int j = 0; j < k.ntiles; ++j) {
    nnc_cp_async_wait<1>();
    nnc_wg::fence_proxy_async();
    __syncthreads();
    wg_qk<T, D, BK>(sf, dq, k.kt(j));
    nnc_wg::wait<0>();
    nnc_wg::fence_regs(sf);
    if (k.edge(a, j, k.q0 + g * 64)) mask_scores<T, 1, NT>(s, a, k.mrow, j * BK, row0, lane);
    online_softmax<1, NT, ND>(s, m, l, o, sl2);
    uint32_t p[NT / 2][4];
    pack_weights<T, NT>(p, s);
    wg_pv<T, D, BK>(of, p, k.vt(j));
    nnc_wg::wait<0>();
    nnc_wg::fence_regs(of);
    __syncthreads(); /* every warpgroup is done with this buffer: refill it */
    if (j + 2 < k.ntiles) load_kv_tile<T, D, BK, NTHREADS>(k.kt(j), k.vt(j), k.kg, k.vg, a, j + 2);
    nnc_cp_async_commit();
  }
  nnc_cp_async_wait<0>();
  store_rows<T, 1, ND>(o, l, k.og, a.o_st, row0, a.T, lane);
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture (nvcc's -arch=sm_90a adds compute_90
   * PTX): never dispatched to, and if a build mixes that up, it fails loudly */
  __trap();
#endif
}

#endif
