/* templates/cuda/attention_simt.cuh — the general path of attention: any D,
 * Dv, any T in {float, __half, __nv_bfloat16}, f32 arithmetic on CUDA cores.
 * Included by attention.cuh, which holds the interface and the dispatch.
 *
 * A block of WARPS warps owns BQ = WARPS * RPW queries of one (batch, head);
 * each warp walks its RPW rows one after the other. The block's query rows,
 * their f32 accumulators and a tile of BK keys and values (converted to f32)
 * sit in shared memory. Per tile and row, lane l scores keys l, l + 32, ...
 * of the tile (full dot products; K rows are padded to an odd stride so the
 * 32 lanes read 32 banks), the warp reduces the tile's max and sum by
 * shuffles (online softmax), writes the weights to a per-warp buffer, and
 * each lane updates the accumulator columns l, l + 32, ... of the row.
 * Keys past the causal limit of the block's last query are never loaded; a
 * row with no unmasked key keeps l = 0 and is written as zeros. */
#ifndef NNC_CUDA_ATTENTION_SIMT_CUH
#define NNC_CUDA_ATTENTION_SIMT_CUH

#include "attention_tile.cuh"
#include "nnc_cuda.cuh"

extern __shared__ __align__(16) unsigned char nnc_attn_smem[];

template <typename T> struct nnc_cuda_attn_args;

/* The row stride of the f32 K tile: odd, so that lanes reading one column of
 * 32 consecutive rows hit 32 distinct banks. */
__host__ __device__ inline int nnc_attn_simt_kstride(int D) { return D | 1; }

/* Shared memory of one block, in bytes. */
template <int BK, int WARPS, int RPW> size_t nnc_attn_simt_smem(int D, int Dv) {
  const size_t floats = (size_t)BK * ((size_t)nnc_attn_simt_kstride(D) + (size_t)Dv) +
                        (size_t)WARPS * RPW * ((size_t)D + (size_t)Dv) + (size_t)WARPS * BK;
  return floats * sizeof(float);
}

template <typename T, int BK, int WARPS, int RPW>
__global__ void __launch_bounds__(WARPS * 32) nnc_attn_simt_kernel(const nnc_cuda_attn_args<T> a) {
  static_assert(BK % 32 == 0, "BK must be a multiple of 32");
  constexpr int BQ = WARPS * RPW;
  constexpr int SLOTS = BK / 32;
  constexpr int NTHREADS = WARPS * 32;
  const int D = a.D, Dv = a.Dv, ks = nnc_attn_simt_kstride(D);
  float *sk = reinterpret_cast<float *>(nnc_attn_smem); /* [BK][ks] */
  float *sv = sk + BK * ks;                             /* [BK][Dv] */
  float *sq = sv + BK * Dv;                             /* [BQ][D] */
  float *sacc = sq + BQ * D;                            /* [BQ][Dv] */
  float *sp = sacc + BQ * Dv;                           /* [WARPS][BK] */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const nnc_attn::block_tile bt = nnc_attn::tile_of_block(a.heads, a.causal);
  const int qt = bt.qt, h = bt.h, b = bt.b;
  const int q0 = qt * BQ;
  const int off = a.S - a.T;
  const T *qg = a.q + b * a.q_sb + h * a.q_sh;
  const T *kg = a.k + b * a.k_sb + nnc_attn::kv_head(a, h) * a.k_sh;
  const T *vg = a.v + b * a.v_sb + nnc_attn::kv_head(a, h) * a.v_sh;
  T *og = a.out + b * a.o_sb + h * a.o_sh;
  const T *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  float *lrow = nnc_attn::lse_row(a, b, h);

  for (int e = threadIdx.x; e < BQ * D; e += NTHREADS) {
    const int r = e / D, d = e % D;
    sq[e] = q0 + r < a.T ? nnc_dtype<T>::load(qg[(long long)(q0 + r) * a.q_st + d]) : 0.0f;
  }
  for (int e = threadIdx.x; e < BQ * Dv; e += NTHREADS) sacc[e] = 0.0f;

  float m[RPW], l[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  const float sl2 = a.scale * 1.4426950408889634f;
  const int qlast = min(a.T, q0 + BQ) - 1;
  const int kend = a.causal ? min(a.S, qlast + off + 1) : a.S;

  for (int k0 = 0; k0 < kend; k0 += BK) {
    __syncthreads(); /* the previous tile is no longer read (and sq is written) */
    for (int e = threadIdx.x; e < BK * D; e += NTHREADS) {
      const int r = e / D, d = e % D;
      sk[r * ks + d] = k0 + r < a.S ? nnc_dtype<T>::load(kg[(long long)(k0 + r) * a.k_st + d]) : 0.0f;
    }
    for (int e = threadIdx.x; e < BK * Dv; e += NTHREADS) {
      const int r = e / Dv, d = e % Dv;
      sv[e] = k0 + r < a.S ? nnc_dtype<T>::load(vg[(long long)(k0 + r) * a.v_st + d]) : 0.0f;
    }
    __syncthreads();
    const int nk = min(BK, kend - k0); /* keys of this tile anyone sees */

#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const int rl = warp * RPW + r, i = q0 + rl;
      if (i >= a.T) continue; /* warp-uniform */
      const float *qr = sq + rl * D;
      float x[SLOTS];
      float mx = m[r];
#pragma unroll
      for (int sl = 0; sl < SLOTS; ++sl) {
        const int jj = sl * 32 + lane, j = k0 + jj;
        float dot = 0.0f;
        if (jj < nk) {
          const float *kr = sk + jj * ks;
          for (int d = 0; d < D; ++d) dot = fmaf(qr[d], kr[d], dot);
        }
        x[sl] = dot * sl2;
        const bool gone = jj >= nk || (a.causal && j > i + off) ||
                          (mrow && nnc_dtype<T>::load(mrow[j]) == 0.0f);
        if (gone) x[sl] = -INFINITY;
        mx = fmaxf(mx, x[sl]);
      }
      mx = nnc_warp_reduce<nnc_max_op, 32>(mx);
      const float mu = mx == -INFINITY ? 0.0f : mx; /* exp2(-inf - mu) = 0, not NaN */
      const float alpha = exp2f(m[r] - mu);
      m[r] = mx;
      float ps = 0.0f;
#pragma unroll
      for (int sl = 0; sl < SLOTS; ++sl) {
        const float p = exp2f(x[sl] - mu);
        sp[warp * BK + sl * 32 + lane] = p;
        ps += p;
      }
      l[r] = l[r] * alpha + nnc_warp_reduce<nnc_sum_op, 32>(ps);
      __syncwarp();
      float *acc = sacc + rl * Dv;
      const float *pw = sp + warp * BK;
      for (int c = lane; c < Dv; c += 32) {
        float t = acc[c] * alpha;
        for (int jj = 0; jj < nk; ++jj) t = fmaf(pw[jj], sv[jj * Dv + c], t);
        acc[c] = t;
      }
      __syncwarp(); /* pw is rewritten by the next row */
    }
  }
  __syncthreads(); /* with no tile at all, sacc was zeroed by other warps */

#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int rl = warp * RPW + r, i = q0 + rl;
    if (i >= a.T) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* all keys masked: zeros */
    T *orow = og + (long long)i * a.o_st;
    for (int c = lane; c < Dv; c += 32) orow[c] = nnc_dtype<T>::store(sacc[rl * Dv + c] * inv);
    /* m is in units of log2 (scale * log2 e folded in) */
    if (lrow && lane == 0) lrow[i] = l[r] > 0.0f ? fmaf(m[r], 0.6931471805599453f, logf(l[r])) : INFINITY;
  }
}

#endif
