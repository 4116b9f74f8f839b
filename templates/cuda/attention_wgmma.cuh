/* templates/cuda/attention_wgmma.cuh — the Hopper path of attention (sm_90a
 * only): flash attention with the products on wgmma (wgmma.cuh) and the
 * tiles brought in by the bulk tensor copy (tma.cuh), for bf16 and f16 with
 * D == Dv == 64 or 128. Included by attention.cuh, which dispatches to it
 * when the model is built for cuda-sm90a (NNC_CUDA_SM90A) and the tensors
 * can be described to the copy engine (nnc_attn::tma_fits).
 *
 * A block of NWG warpgroups owns BQ = 64 * NWG consecutive queries of one
 * (batch, head); warpgroup g owns rows [64 g, 64 g + 64) of them, its warp w
 * the 16 rows from 64 g + 16 w, in the layout of the mma.sync path, so the
 * mask, online softmax and store are attention_tile.cuh's. Q, K and V land
 * in shared memory in the 128-byte swizzle, a tile as D / 64 panels of 64
 * columns (a swizzled row is 128 bytes), each panel one copy issued by one
 * thread that completes on a barrier of its buffer; K tiles of BK keys sit
 * in a ring of STAGES buffers, V tiles in one of STAGES + 1, so the copies
 * of the next tiles overlap the work on this one.
 * Per tile and warpgroup: S = Q K^T as D / 16 wgmma steps reading Q and K
 * from shared memory (64 x BK accumulators in registers), mask and online
 * softmax, then O += P V with P from registers (rounded to T) and V read
 * from shared memory transposed, BK / 16 steps; S of the next tile runs
 * while this tile's softmax does (wg_tiles).
 *
 * How the warpgroups of a block share the buffers (SCHED): 0, a block
 * barrier a tile, after which thread 0 starts the next copies (one
 * warpgroup a block, the other blocks of the SM keeping the tensor cores
 * busy: D = 64); 1, each warpgroup says when it is done with a tile and the
 * last one to say so starts the copies into its buffers, so a warpgroup
 * never waits for the other's softmax (two warpgroups, one block an SM: D
 * = 128, whose 64 x 128 f32 O takes 64 registers a thread); 2, the same,
 * and the warpgroups take turns issuing their products (FA3's ping-pong),
 * meant to run one's softmax under the other's products: 3-11% slower
 * than 1 at D = 128 on an H200 (helper h-attn128, 2026-11-29).
 *
 * Causal: key tiles above the diagonal of the block's last query are never
 * loaded, heavy (late) query blocks are scheduled first (tile_of_block); as
 * in the mma.sync path. */
#ifndef NNC_CUDA_ATTENTION_WGMMA_CUH
#define NNC_CUDA_ATTENTION_WGMMA_CUH

#include <type_traits>

#include "attention_ops16.cuh"
#include "attention_tile.cuh"
#include "pdl.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

template <typename T> struct nnc_cuda_attn_args;

/* The kernel's parameter: the arguments and the tensor maps of q, k, v
 * (dims D, rows, heads, batch; boxes of one panel), read by the copy
 * engine from parameter space. */
template <typename T> struct nnc_attn_wgmma_params {
  nnc_cuda_attn_args<T> a;
  CUtensorMap q, k, v;
};

/* Shared memory of one block: the Q tile, KS K tiles and VS V tiles, a
 * barrier each for them and Q, KS counters of the warpgroups done with a
 * step (SCHED 1 and 2), and the slack that aligns the first tile to 1024
 * bytes (the swizzle's period). */
template <typename T, int D, int BK, int NWG, int KS, int VS> constexpr size_t nnc_attn_wgmma_smem() {
  return (size_t)(64 * NWG * D + (KS + VS) * BK * D) * sizeof(T) + (KS + VS + 1 + KS) * sizeof(uint64_t) + 1024;
}

namespace nnc_attn {

/* A panel of a tile: 64 columns of its rows, 128 bytes a row. */
constexpr int PANEL = 64;

/* Issues S = Q K^T for a warpgroup (one commit group): the k16 step kd
 * reads panel kd / 4 of both tiles (Q's panels QROWS rows, K's BK rows
 * apart), 32 * (kd % 4) bytes into its rows. */
template <typename T, int D, int BK, int QROWS>
__device__ __forceinline__ void wg_qk(float (&s)[BK / 2], uint64_t dq, const T *kt) {
  const uint64_t dk = nnc_wg::desc_sw128(nnc_smem_u32(kt));
  nnc_wg::fence();
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
    const int pn = kd / 4, c = kd % 4;
    nnc_wg::mma<T>::template ss<BK>(s, dq + pn * (QROWS * 128 >> 4) + 2 * c, dk + pn * (BK * 128 >> 4) + 2 * c, kd);
  }
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
 * starts 16 rows (2048 bytes) further down its panels; D = 128 takes both
 * panels (BK rows apart) in one n128 product. */
template <typename T, int D, int BK>
__device__ __forceinline__ void wg_pv(float (&o)[D / 2], const uint32_t (&p)[BK / 16][4], const T *vt) {
  static_assert(D == 64 || D == 128, "one or two panels");
  if constexpr (D == 64) {
    const uint64_t dv = nnc_wg::desc_sw128(nnc_smem_u32(vt));
    nnc_wg::fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) nnc_wg::mma<T>::rs_n64_tb(o, p[kk], dv + kk * (16 * 128 >> 4));
  } else {
    const uint64_t dv = nnc_wg::desc_sw128_panels(nnc_smem_u32(vt), BK * 128);
    nnc_wg::fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) nnc_wg::mma<T>::rs_n128_tb(o, p[kk], dv + kk * (16 * 128 >> 4));
  }
  nnc_wg::commit();
}

/* Named barriers (bar 0 is __syncthreads'; an immediate id, so that ptxas
 * reserves only the ones used): sync waits until N threads have come (this
 * one included), arrive counts this warp's without waiting. */
template <int ID, int N> __device__ __forceinline__ void bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}
template <int ID, int N> __device__ __forceinline__ void bar_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}
/* Adds 1 to a counter in shared memory, returning the old value; acquire and
 * release: what this thread's warpgroup did before is seen by the thread
 * that counts next. */
__device__ __forceinline__ uint32_t count_in(uint32_t *c) {
  uint32_t old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n" : "=r"(old) : "r"(nnc_smem_u32(c)) : "memory");
  return old;
}

/* The kernel's start: the block's queries and (batch, head), the key tiles
 * it walks, its tiles and barriers in shared memory. K tile t sits in
 * buffer t % KS, V tile t in buffer t % VS, each with a barrier that
 * completes when its copy has landed. */
template <typename T, int D_, int BK_, int NWG_, int KS_, int VS_> struct wg_block {
  static constexpr int D = D_, BK = BK_, NWG = NWG_, KS = KS_, VS = VS_, BQ = 64 * NWG_;
  static constexpr int NP = D / PANEL; /* panels a tile */
  T *sq, *sk, *sv;       /* Q, then KS K tiles, then VS V tiles */
  uint64_t *kbar, *vbar; /* kbar[KS], vbar[VS], then Q's */
  uint32_t *done;        /* KS counters (as many uint64_t slots) after the barriers: warpgroups done with a step */
  const T *mrow;
  T *og;
  int q0, h, b, off, ntiles;

  __device__ __forceinline__ wg_block(const nnc_cuda_attn_args<T> &a, unsigned char *smem) {
    const uint32_t raw = nnc_smem_u32(smem);
    sq = reinterpret_cast<T *>(smem + (((raw + 1023) & ~1023u) - raw));
    sk = sq + BQ * D;
    sv = sk + KS * BK * D;
    kbar = reinterpret_cast<uint64_t *>(sv + VS * BK * D);
    vbar = kbar + KS;
    done = reinterpret_cast<uint32_t *>(vbar + VS + 1);
    const block_tile bt = tile_of_block(a.heads, a.causal);
    h = bt.h, b = bt.b;
    q0 = bt.qt * BQ;
    off = a.S - a.T; /* causal: query i sees keys j <= i + off */
    og = a.out + b * a.o_sb + h * a.o_sh;
    mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
    int kend = a.S;
    if (a.causal) kend = min(kend, q0 + BQ + off);
    ntiles = kend > 0 ? (kend + BK - 1) / BK : 0;
  }
  __device__ __forceinline__ uint64_t *qbar() const { return vbar + VS; }
  __device__ __forceinline__ T *kt(int t) const { return sk + (t % KS) * BK * D; }
  __device__ __forceinline__ T *vt(int t) const { return sv + (t % VS) * BK * D; }
  /* One thread starts a copy: Q, key tile t of K, of V (none past the last),
   * a copy a panel, all on the buffer's barrier. */
  __device__ __forceinline__ void load_q(const nnc_attn_wgmma_params<T> &p) const {
    nnc_tma::arrive_expect(qbar(), BQ * D * sizeof(T));
#pragma unroll
    for (int pn = 0; pn < NP; ++pn) nnc_tma::load_4d(sq + pn * BQ * PANEL, &p.q, qbar(), pn * PANEL, q0, h, b);
  }
  __device__ __forceinline__ void load_k(const nnc_attn_wgmma_params<T> &p, int t) const {
    if (t >= ntiles) return;
    nnc_tma::arrive_expect(&kbar[t % KS], BK * D * sizeof(T));
#pragma unroll
    for (int pn = 0; pn < NP; ++pn)
      nnc_tma::load_4d(kt(t) + pn * BK * PANEL, &p.k, &kbar[t % KS], pn * PANEL, t * BK, nnc_attn::kv_head(p.a, h), b);
  }
  __device__ __forceinline__ void load_v(const nnc_attn_wgmma_params<T> &p, int t) const {
    if (t >= ntiles) return;
    nnc_tma::arrive_expect(&vbar[t % VS], BK * D * sizeof(T));
#pragma unroll
    for (int pn = 0; pn < NP; ++pn)
      nnc_tma::load_4d(vt(t) + pn * BK * PANEL, &p.v, &vbar[t % VS], pn * PANEL, t * BK, nnc_attn::kv_head(p.a, h), b);
  }
  /* Waits until K (V) tile t has landed: the (t / KS)th phase of its buffer's barrier. */
  __device__ __forceinline__ void wait_k(int t) const { nnc_tma::wait(&kbar[t % KS], (unsigned)(t / KS) & 1u); }
  __device__ __forceinline__ void wait_v(int t) const { nnc_tma::wait(&vbar[t % VS], (unsigned)(t / VS) & 1u); }
  /* whether key tile t needs the per-element mask for queries from row0 on */
  __device__ __forceinline__ bool edge(const nnc_cuda_attn_args<T> &a, int t, int row0) const {
    const int k0 = t * BK;
    return k0 + BK > a.S || (a.causal && k0 + BK - 1 > row0 + off) || mrow != nullptr;
  }
  /* This warpgroup is done with K tile j (and, with v, V tile j - 1): their
   * buffers take tiles j + KS. SCHED 0: after a block barrier, thread 0
   * starts those copies. Otherwise the warpgroup's threads meet (each has
   * waited for its products), one of them counts the warpgroup in step j's
   * counter, and the warpgroup that completes the count starts them; a
   * counter serves steps KS apart, and no warpgroup reaches step j + KS
   * before those copies have started. */
  template <int SCHED>
  __device__ __forceinline__ void release(const nnc_attn_wgmma_params<T> &p, int j, bool v) const {
    if constexpr (SCHED == 0) {
      __syncthreads();
      if (threadIdx.x == 0) {
        load_k(p, j + KS);
        if (v) load_v(p, j + KS);
      }
    } else {
      /* each warp has waited for its own products: the last of the
       * block's NWG * 4 warps to count itself starts the copies */
      if (threadIdx.x % 32 == 0 && count_in(&done[j % KS]) % (NWG * 4) == NWG * 4 - 1) {
        load_k(p, j + KS);
        if (v) load_v(p, j + KS);
      }
    }
  }
};

/* The accumulators of one warpgroup's 64 queries: O, the running row max m
 * and this thread's part of the row sums l. */
template <typename T, typename Block> struct wg_rows {
  static constexpr int D = Block::D, BK = Block::BK, NT = BK / 8, ND = D / 8;
  const nnc_cuda_attn_args<T> &a;
  const Block &k;
  float o[1][ND][4], m[1][2], l[1][2];
  float sl2;           /* scale * log2 e: exp(x) = exp2(x * sl2 / scale) */
  int q64, row0, lane; /* the warpgroup's first query, the warp's, the lane */
  uint64_t dq;         /* the warpgroup's Q rows (of panel 0) */

  __device__ __forceinline__ wg_rows(const nnc_cuda_attn_args<T> &a_, const Block &k_) : a(a_), k(k_) {
    const int g = threadIdx.x / 128;
    q64 = k.q0 + g * 64;
    row0 = q64 + threadIdx.x % 128 / 32 * 16;
    lane = threadIdx.x % 32;
    sl2 = a.scale * 1.4426950408889634f;
    dq = nnc_wg::desc_sw128(nnc_smem_u32(k.sq + g * 64 * PANEL));
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) m[0][hr] = -INFINITY, l[0][hr] = 0.0f;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.0f;
  }
  __device__ __forceinline__ float (&of())[ND * 4] { return reinterpret_cast<float(&)[ND * 4]>(o); }
  /* Issues S = Q K^T of tile j (landed). */
  __device__ __forceinline__ void qk(float (&s)[1][NT][4], int j) const {
    wg_qk<T, D, BK, Block::BQ>(reinterpret_cast<float(&)[NT * 4]>(s), dq, k.kt(j));
  }
  /* Raw scores of tile j, waited for, become its weights; alpha rescales O. */
  __device__ __forceinline__ void weights(float (&s)[1][NT][4], int j, float (&alpha)[1][2]) {
    nnc_wg::fence_regs(reinterpret_cast<float(&)[NT * 4]>(s));
    if (k.edge(a, j, q64)) mask_scores<T, 1, NT>(s, a, k.mrow, j * BK, row0, lane);
    softmax_weights<1, NT>(s, m, l, alpha, sl2);
  }
  /* Issues O += P V of tile j (landed), P from registers. */
  __device__ __forceinline__ void pv(const uint32_t (&pw)[NT / 2][4], int j) { wg_pv<T, D, BK>(of(), pw, k.vt(j)); }
  /* After wait(): O may be read again. */
  __device__ __forceinline__ void o_landed() { nnc_wg::fence_regs(of()); }
  __device__ __forceinline__ void store() const {
    store_rows<T, 1, ND>(o, m, l, k.og, a.o_st, row0, a.T, lane, a.scale, lse_row(a, k.b, k.h));
  }
};

/* SCHED 2's turns: a warpgroup (of two; second: the one of threads 128 to
 * 255) waits for its turn (named barrier 1 for the first, 2 for the
 * second: its own 128 threads and the other's 128), and passes the turn. */
__device__ __forceinline__ void turn_wait(bool second) {
  if (second)
    bar_sync<2, 256>();
  else
    bar_sync<1, 256>();
}
__device__ __forceinline__ void turn_pass(bool second) {
  if (second)
    bar_arrive<1, 256>();
  else
    bar_arrive<2, 256>();
}

/* FA3's overlap inside a warpgroup: S of tile j and O += P V of tile j - 1
 * are issued together, the softmax of tile j runs while the second product
 * does, and O is rescaled once it has landed. No product stays in flight
 * across the loop's back edge (ptxas would serialise every wgmma). V tiles
 * live one step longer than K tiles, so VS == KS + 1: after step j, K tile
 * j and V tile j - 1 are free, and tile j + KS goes into their buffers
 * (the block started K and V tiles 0 to KS - 2; K tile KS - 1 and V tiles
 * KS - 1 and KS start here, K tile KS after tile 0's S).
 * Against the tile-by-tile loop (S, softmax, P V, each waited for) on an
 * H100, causal B=8 H=12 T=1024: 43.8 against 44.5 us at 3 and 4 blocks an
 * SM; B=1: 13.6 against 15.4 (session 7).
 * SCHED 2: the products of steps 1 to ntiles - 1 are issued in turns,
 * warpgroup 0 first; warpgroup 1 passes the turn once fewer than it takes
 * (the last pass would have no one to wait for it). */
template <int SCHED, typename T, typename Block>
__device__ __forceinline__ void wg_tiles(const nnc_attn_wgmma_params<T> &p, wg_rows<T, Block> &r, const Block &k) {
  constexpr int NT = Block::BK / 8, S = Block::KS;
  static_assert(Block::VS == Block::KS + 1, "V tiles live a step longer");
  static_assert(SCHED != 2 || Block::NWG == 2, "turns between two warpgroups");
  if (k.ntiles == 0) return;
  const bool second = threadIdx.x >= 128;
  if (threadIdx.x == 0) k.load_k(p, S - 1), k.load_v(p, S - 1), k.load_v(p, S);
  float s[1][NT][4], alpha[1][2];
  uint32_t pw[NT / 2][4];
  k.wait_k(0);
  r.qk(s, 0);
  nnc_wg::wait<0>();
  r.weights(s, 0, alpha); /* O is still zero: nothing to rescale */
  pack_weights<T, NT>(pw, s);
  k.template release<SCHED>(p, 0, false); /* K tile 0 */
  if (SCHED == 2 && second && k.ntiles > 1) turn_pass(second);
  for (int j = 1; j < k.ntiles; ++j) {
    k.wait_k(j);
    if constexpr (SCHED == 2) k.wait_v(j - 1), turn_wait(second);
    r.qk(s, j);
    if constexpr (SCHED != 2) k.wait_v(j - 1);
    r.pv(pw, j - 1);
    if (SCHED == 2 && !(second && j == k.ntiles - 1)) turn_pass(second);
    nnc_wg::wait<1>();
    r.weights(s, j, alpha);
    nnc_wg::wait<0>();
    r.o_landed();
    rescale_rows<1, Block::D / 8>(r.o, alpha);
    pack_weights<T, NT>(pw, s);
    k.template release<SCHED>(p, j, true); /* K tile j, V tile j - 1 */
  }
  k.wait_v(k.ntiles - 1);
  r.pv(pw, k.ntiles - 1);
  nnc_wg::wait<0>();
  r.o_landed();
}

}  // namespace nnc_attn

/* One block: the barriers (and counters), Q and K and V tiles 0 to
 * STAGES - 2, the tiles (STAGES buffers of K, STAGES + 1 of V), then the
 * rows. */
template <typename T, int D, int BK, int NWG, int STAGES, int MINB, int SCHED>
__global__ void __launch_bounds__(NWG * 128, MINB)
    nnc_attn_wgmma_kernel(const __grid_constant__ nnc_attn_wgmma_params<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_attn;
  static_assert(D == 64 || D == 128, "rows of one or two panels of 128 bytes");
  static_assert(BK == 64 || BK == 128, "S is one wgmma of n64 or n128");
  static_assert(STAGES >= 2, "a buffer to work on and one to fill");
  static_assert(SCHED >= 0 && SCHED <= 2, "a way of sharing the buffers");
  using Block = wg_block<T, D, BK, NWG, STAGES, STAGES + 1>;
  extern __shared__ __align__(16) unsigned char nnc_attn_wg_smem[];
  const Block k(p.a, nnc_attn_wg_smem);
  nnc_pdl::wait();           /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start(); /* a GEMM after it may start its own setup (pdl.cuh) */

  if (threadIdx.x == 0) {
    for (int i = 0; i <= Block::KS + Block::VS; ++i) nnc_tma::init(&k.kbar[i], 1);
    if constexpr (SCHED > 0)
      for (int i = 0; i < Block::KS; ++i) k.done[i] = 0;
    nnc_tma::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    k.load_q(p);
    for (int t = 0; t < STAGES - 1; ++t) k.load_k(p, t), k.load_v(p, t);
  }
  wg_rows<T, Block> r(p.a, k);
  nnc_tma::wait(k.qbar(), 0);
  wg_tiles<SCHED>(p, r, k);
  r.store();
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture (nvcc's -arch=sm_90a adds compute_90
   * PTX): never dispatched to, and if a build mixes that up, it fails loudly */
  __trap();
#endif
}

namespace nnc_attn {

/* Whether the copy engine can walk q, k and v: some keys (a tensor map has
 * no empty dimension), every stride positive and under 2^40 bytes (a
 * broadcast batch or head, stride 0, cannot be described; a dimension of 1
 * takes any stride). The other conditions, 16-byte alignment of pointers
 * and strides, are the mma path's. */
template <typename T> bool tma_fits(const nnc_cuda_attn_args<T> &a) {
  if (a.S == 0) return false;
  const long long s[9] = {a.q_sb, a.q_sh, a.q_st, a.k_sb, a.k_sh, a.k_st, a.v_sb, a.v_sh, a.v_st};
  const int kvh = a.kv_group > 1 ? a.heads / a.kv_group : a.heads;
  const int n[9] = {a.batch, a.heads, a.T, a.batch, kvh, a.S, a.batch, kvh, a.S};
  for (int i = 0; i < 9; ++i)
    if ((s[i] <= 0 && n[i] > 1) || s[i] * (long long)sizeof(T) >= (1ll << 40)) return false;
  return true;
}

/* The tensor map of one of q, k, v: dims (D, rows, heads, batch) (k and v:
 * their heads, fewer under grouped-query attention), boxes of one panel,
 * (64, box_rows, 1, 1); a stride a dimension of 1 makes meaningless becomes
 * 16 bytes, which the encoder accepts. */
template <typename T>
bool tma_map(CUtensorMap *map, const T *base, int rows, int heads, const nnc_cuda_attn_args<T> &a, long long st,
             long long sh, long long sb, int box_rows) {
  const CUtensorMapDataType type =
      std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const long long one = 16 / (long long)sizeof(T);
  const uint64_t dims[4] = {(uint64_t)a.D, (uint64_t)rows, (uint64_t)heads, (uint64_t)a.batch};
  const long long strides[3] = {st > 0 ? st : one, sh > 0 ? sh : one, sb > 0 ? sb : one};
  const uint32_t box[4] = {(uint32_t)PANEL, (uint32_t)box_rows, 1, 1};
  return nnc_tma::encode_4d(map, base, type, dims, strides, box);
}

}  // namespace nnc_attn

#endif
