/* templates/cuda/attention_tile.cuh — what the tensor-core attention kernels
 * (attention_mma.cuh for bf16/f16, attention_tf32.cuh for f32 on tf32) share:
 * the masking of a tile of scores, the online softmax and the final
 * normalisation and store. The copy and fragment instructions (cp.async,
 * ldmatrix, m16n8k16 mma) are the GEMM's, from gemm_mma.cuh.
 *
 * Both kernels hold a warp's scores in the m16n8 accumulator layout of
 * mma.sync: s[mt][nt][e] is row lane/4 + 8*(e/2) of m tile mt and column
 * 2*(lane%4) + e%2 of n tile nt, so each row lives in the 4 threads of a quad
 * (its max and sum take 2 shuffles) and the same functions serve both. */
#ifndef NNC_CUDA_ATTENTION_TILE_CUH
#define NNC_CUDA_ATTENTION_TILE_CUH

#include "gemm_mma.cuh"
#include "nnc_cuda.cuh"

template <typename T> struct nnc_cuda_attn_args;

namespace nnc_attn {

/* The operands of the tensor-core kernel for element type T and head dim D:
 * attention_ops16.cuh (bf16, f16) and attention_tf32.cuh (float). */
template <typename T, int D> struct tc_ops;

/* Which query tile and (batch, head) a block owns. The grid is (heads x
 * batch, query tiles) and blocks start in the order of their linear index,
 * x first: every (batch, head) starts its tile i before any starts tile
 * i + 1. Causal rows see more keys the later they are, so i counts from the
 * last tile: the heaviest blocks of the whole grid start first and the
 * lightest make the tail (with the tile as the fastest index, the heaviest
 * tiles of the last heads started last). */
struct block_tile {
  int qt, h, b;
};
__device__ __forceinline__ block_tile tile_of_block(int heads, bool causal) {
  const int i = (int)blockIdx.y;
  return {causal ? (int)gridDim.y - 1 - i : i, (int)blockIdx.x % heads, (int)blockIdx.x / heads};
}
/* The grid of tile_of_block for query tiles of bq rows. */
inline dim3 grid_of(int T, int bq, int heads, int batch) {
  return dim3((unsigned)(heads * batch), (unsigned)((T + bq - 1) / bq));
}

/* 2^x on the special-function unit (rel. error about 2^-22, below tf32's and
 * bf16's rounding); exp2f adds denormal handling around the same MUFU. */
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* Sets to -inf the raw scores of key tile [k0, k0 + 8 * NT) that the causal
 * limit, the end of the keys or the padding mask removes; row0 is the query
 * index of the warp's first row. */
template <typename T, int MT, int NT>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NT][4], const nnc_cuda_attn_args<T> &a,
                                            const T *mrow, int k0, int row0, int lane) {
  const int off = a.S - a.T;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
      const int col = k0 + nt * 8 + (lane % 4) * 2 + e2;
      const bool gone = col >= a.S || (mrow && nnc_dtype<T>::load(mrow[col]) == 0.0f);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = row0 + mt * 16 + lane / 4 + hr * 8;
          if (gone || (a.causal && col > row + off)) s[mt][nt][hr * 2 + e2] = -INFINITY;
        }
    }
  }
}

/* One tile of the online softmax: raw scores s become the weights
 * exp(scale * (s - m)) with m the running row max (sl2 = scale * log2 e, so
 * the scale folds into the exponent's FMA: scale > 0), this thread's part of
 * the row sums l is rescaled to the new max and grows by the tile's, and
 * alpha gets the factor that rescales the accumulators (rescale_rows). */
template <int MT, int NT>
__device__ __forceinline__ void softmax_weights(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                                float (&alpha)[MT][2], float sl2) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = m[mt][hr];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      /* nothing unmasked yet: subtract 0, so that exp2(-inf - m) is 0, not NaN */
      const float mus = (mx == -INFINITY ? 0.0f : mx) * sl2;
      alpha[mt][hr] = ex2(m[mt][hr] * sl2 - mus);
      m[mt][hr] = mx;
      float rs = 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float p0 = ex2(fmaf(s[mt][nt][2 * hr], sl2, -mus));
        const float p1 = ex2(fmaf(s[mt][nt][2 * hr + 1], sl2, -mus));
        s[mt][nt][2 * hr] = p0;
        s[mt][nt][2 * hr + 1] = p1;
        rs += p0 + p1;
      }
      l[mt][hr] = l[mt][hr] * alpha[mt][hr] + rs; /* this thread's part; the quad is summed at the end */
    }
  }
}

/* o *= alpha, row by row. */
template <int MT, int ND>
__device__ __forceinline__ void rescale_rows(float (&o)[MT][ND][4], const float (&alpha)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nd][e] *= alpha[mt][e / 2];
}

/* softmax_weights, then the accumulators rescaled at once. */
template <int MT, int NT, int ND>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&o)[MT][ND][4], float sl2) {
  float alpha[MT][2];
  softmax_weights<MT, NT>(s, m, l, alpha, sl2);
  rescale_rows<MT, ND>(o, alpha);
}

/* Two adjacent output elements (8-byte aligned for float, 4 for 16-bit). */
__device__ __forceinline__ void store2(float *p, float x, float y) {
  *reinterpret_cast<float2 *>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store2(__nv_bfloat16 *p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store2(__half *p, float x, float y) {
  *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(x, y);
}

/* The row of lse (the forward's log-sum-exp output) of (b, h), or NULL. */
template <typename A> __device__ __forceinline__ float *lse_row(const A &a, int b, int h) {
  return a.lse ? a.lse + ((long long)b * a.heads + h) * a.T : nullptr;
}

/* out rows = o / l for this warp's rows below a.T (row0: its first query);
 * a row whose keys were all masked (l = 0) is written as zeros. With lrow
 * set, lane 0 of each quad also writes the row's log-sum-exp, scale * m +
 * log l (m the raw row max the weights were taken against), +inf when l = 0. */
template <typename T, int MT, int ND>
__device__ __forceinline__ void store_rows(const float (&o)[MT][ND][4], const float (&m)[MT][2],
                                           const float (&l)[MT][2], T *og, long long o_st, int row0, int nrows,
                                           int lane, float scale, float *lrow) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = l[mt][hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int row = row0 + mt * 16 + lane / 4 + hr * 8;
      if (row < nrows) {
        T *orow = og + (long long)row * o_st + (lane % 4) * 2;
#pragma unroll
        for (int nd = 0; nd < ND; ++nd) store2(orow + nd * 8, o[mt][nd][2 * hr] * inv, o[mt][nd][2 * hr + 1] * inv);
        if (lrow && lane % 4 == 0) lrow[row] = sum > 0.0f ? fmaf(m[mt][hr], scale, logf(sum)) : INFINITY;
      }
    }
  }
}

}  // namespace nnc_attn

#endif
