/* templates/cuda/gemm_tma_rows.cuh — the row stores of gemm_tma.cuh's
 * epilogue: a staged chunk (64 rows x 64 f32 in a warpgroup's buffer,
 * gemm_tma_epilogue.cuh's swizzle) into rows of C, by the warpgroup's 128
 * threads (t), the first rows rows and cols columns only (those inside C).
 *
 * Scalar loops serve any C: thread t takes column t % 64 of every second
 * row, so a warp writes 32 consecutive elements of a row, coalesced at any
 * alignment. The 16-byte loops serve C (and the residual) whose rows all
 * start 16-byte aligned (GPT-2's and BERT's activations; not the LM head's
 * 50257-wide rows): a thread takes 16 bytes of a row (4 f32 or 8 bf16), a
 * row's 64 columns take 16 or 8 threads, so there are 4 or 8 times fewer
 * store instructions. The 8 columns of a narrow type are two 16-byte
 * shared loads: with the swizzle, two threads of a quarter warp share a
 * bank there (2-way); f32 reads are conflict-free.
 *
 * In each loop a batch's shared (and residual) loads are issued before its
 * stores, so their latency is paid once a batch. The plain loops only
 * convert and store (alpha and bias were applied on the way into the
 * buffer). The EPI loops are compiled per activation, and take
 * streaming stores as a run-time flag (the plain ones as a template
 * parameter: that instance must stay lean). The residual may be C itself:
 * each element is read, then written, by the same thread. */
#ifndef NNC_CUDA_GEMM_TMA_ROWS_CUH
#define NNC_CUDA_GEMM_TMA_ROWS_CUH

#include "gemm_kernel.cuh"
#include "nnc_cuda.cuh"

namespace nnc_gt {

constexpr int CHUNK = 64;                /* columns staged at a time */
constexpr int CHUNK_FLOATS = 64 * CHUNK; /* a warpgroup's buffer */

/* Where column c of row r of a chunk sits in its buffer. */
__device__ __forceinline__ int swz(int r, int c) { return r * CHUNK + (c ^ ((r & 3) << 3)); }

/* CS: streaming (evict-first) stores, so that a C written once (the f32
 * logits) does not push A and B out of L2. */
template <bool CS, typename TO> __device__ __forceinline__ void put(TO *p, float v) {
  if constexpr (CS)
    __stcs(p, nnc_dtype<TO>::store(v));
  else
    *p = nnc_dtype<TO>::store(v);
}

/* 16 bytes (V = 16 / sizeof(TO) values) at a 16-byte aligned p, as one
 * 16-byte store (in PTX: as a uint4 assignment nvcc 13 split it into four
 * 4-byte stores beside the element-wise tail path). */
template <bool CS, typename TO>
__device__ __forceinline__ void put16(TO *p, const float (&v)[16 / sizeof(TO)]) {
  uint4 u;
  if constexpr (sizeof(TO) == 4) {
    u = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  } else {
    u = make_uint4(nnc_mma<TO>::pack2(v[0], v[1]), nnc_mma<TO>::pack2(v[2], v[3]), nnc_mma<TO>::pack2(v[4], v[5]),
                   nnc_mma<TO>::pack2(v[6], v[7]));
  }
  if constexpr (CS)
    __stcs(reinterpret_cast<uint4 *>(p), u);
  else
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
                 : "memory");
}

/* V consecutive staged values of row r from column c0 (a multiple of 4). */
template <int V> __device__ __forceinline__ void staged(const float *cs, int r, int c0, float (&v)[V]) {
#pragma unroll
  for (int q = 0; q < V / 4; ++q) {
    const float4 x = *reinterpret_cast<const float4 *>(cs + swz(r, c0 + 4 * q));
    v[4 * q] = x.x, v[4 * q + 1] = x.y, v[4 * q + 2] = x.z, v[4 * q + 3] = x.w;
  }
}

template <bool CS, typename TO>
__device__ __forceinline__ void store_plain(const float *cs, TO *c, long long ldc, int rows, int cols, int t) {
  constexpr int RB = 16; /* rows a batch: a full tile's 32 rows a thread in two */
  const int col = t % CHUNK;
  if (col >= cols) return;
  for (int r0 = t / CHUNK; r0 < rows; r0 += 2 * RB) {
    float v[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) v[i] = r0 + 2 * i < rows ? cs[swz(r0 + 2 * i, col)] : 0.0f;
#pragma unroll
    for (int i = 0; i < RB; ++i)
      if (r0 + 2 * i < rows) put<CS>(c + (long long)(r0 + 2 * i) * ldc + col, v[i]);
  }
}

/* Rows of 16-byte aligned starts: thread t takes columns [c0, c0 + V) of
 * rows t / TPR, t / TPR + RPP, ...: all of its rows (NR) in one batch. A
 * group that N cuts short is stored an element at a time. ROWS: the most
 * rows a chunk has (64; gemm_tma8.cuh's halves 32: half the registers). */
template <bool CS, typename TO, int ROWS = 64>
__device__ __forceinline__ void store_plain16(const float *cs, TO *c, long long ldc, int rows, int cols, int t) {
  constexpr int V = 16 / (int)sizeof(TO), TPR = CHUNK / V, RPP = 128 / TPR, NR = ROWS / RPP;
  const int c0 = t % TPR * V, r0 = t / TPR;
  if (c0 >= cols) return;
  const bool whole = c0 + V <= cols;
  float v[NR][V];
#pragma unroll
  for (int i = 0; i < NR; ++i)
    if (r0 + RPP * i < rows) staged<V>(cs, r0 + RPP * i, c0, v[i]);
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    if (r0 + RPP * i >= rows) break;
    TO *p = c + (long long)(r0 + RPP * i) * ldc + c0;
    if (whole) {
      put16<CS>(p, v[i]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e)
        if (c0 + e < cols) put<CS>(p + e, v[i][e]);
    }
  }
}

/* The activation of a result stored as TO: the erf-form GELU of a 16-bit
 * one through nnc_gelu_erf16 (its error is far below the rounding to 16
 * bits, at a third of erff's instructions: BERT's intermediate GEMM spent
 * as long in erff as in its products), else nnc_gemm_act's. */
template <int ACT, typename TO> __device__ __forceinline__ float act_of(float x) {
  if constexpr (ACT == NNC_CUDA_ACT_GELU_ERF && sizeof(TO) == 2) return nnc_gelu_erf16(x);
  else return nnc_gemm_act<ACT>(x);
}

template <int ACT, typename TO> __device__ __forceinline__ float epi(float v, float r, bool act_last) {
  return act_last ? act_of<ACT, TO>(v + r) : act_of<ACT, TO>(v) + r;
}

/* act(v) + residual, or act(v + residual) when act_last; res NULL: none. */
template <int ACT, typename TO>
__device__ __forceinline__ void store_epi(const float *cs, TO *c, long long ldc, const TO *res, long long ldr,
                                          bool act_last, bool stream, int rows, int cols, int t) {
  constexpr int RB = 8;
  const int col = t % CHUNK;
  if (col >= cols) return;
  for (int r0 = t / CHUNK; r0 < rows; r0 += 2 * RB) {
    float v[RB], rv[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const int r = r0 + 2 * i;
      rv[i] = res && r < rows ? nnc_dtype<TO>::load(res[(long long)r * ldr + col]) : 0.0f;
      v[i] = r < rows ? cs[swz(r, col)] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      if (r0 + 2 * i >= rows) break;
      TO *p = c + (long long)(r0 + 2 * i) * ldc + col;
      const float x = epi<ACT, TO>(v[i], rv[i], act_last);
      if (stream)
        put<true>(p, x);
      else
        put<false>(p, x);
    }
  }
}

/* The same on 16-byte aligned rows (store_plain16's walk), RB rows a batch. */
template <int ACT, typename TO>
__device__ __forceinline__ void store_epi16(const float *cs, TO *c, long long ldc, const TO *res, long long ldr,
                                            bool act_last, bool stream, int rows, int cols, int t) {
  constexpr int V = 16 / (int)sizeof(TO), TPR = CHUNK / V, RPP = 128 / TPR, RB = 16 / V;
  const int c0 = t % TPR * V;
  if (c0 >= cols) return;
  const bool whole = c0 + V <= cols;
  for (int r0 = t / TPR; r0 < rows; r0 += RPP * RB) {
    float v[RB][V], rv[RB][V];
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const int r = r0 + RPP * i;
#pragma unroll
      for (int e = 0; e < V; ++e) rv[i][e] = 0.0f;
      if (r >= rows) continue;
      staged<V>(cs, r, c0, v[i]);
      if (!res) continue;
      const TO *q = res + (long long)r * ldr + c0;
      if (whole) {
        nnc_load_vec<TO>(q, rv[i]);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (c0 + e < cols) rv[i][e] = nnc_dtype<TO>::load(q[e]);
      }
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const int r = r0 + RPP * i;
      if (r >= rows) break;
      float x[V];
#pragma unroll
      for (int e = 0; e < V; ++e) x[e] = epi<ACT, TO>(v[i][e], rv[i][e], act_last);
      TO *p = c + (long long)r * ldc + c0;
      if (whole) {
        if (stream)
          put16<true>(p, x);
        else
          put16<false>(p, x);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (c0 + e < cols) {
            if (stream)
              put<true>(p + e, x[e]);
            else
              put<false>(p + e, x[e]);
          }
      }
    }
  }
}

/* The EPI loops for the activation act (chosen once a chunk, not per element). */
template <bool VEC, typename TO>
__device__ __forceinline__ void store_epi_any(const float *cs, TO *c, long long ldc, const TO *res, long long ldr,
                                              nnc_cuda_act act, bool act_last, bool stream, int rows, int cols,
                                              int t) {
#define NNC_GT_EPI(A)                                                                   \
  do {                                                                                  \
    if constexpr (VEC)                                                                  \
      store_epi16<A>(cs, c, ldc, res, ldr, act_last, stream, rows, cols, t);            \
    else                                                                                \
      store_epi<A>(cs, c, ldc, res, ldr, act_last, stream, rows, cols, t);              \
  } while (0)
  switch (act) {
  case NNC_CUDA_ACT_RELU: NNC_GT_EPI(NNC_CUDA_ACT_RELU); break;
  case NNC_CUDA_ACT_GELU_ERF: NNC_GT_EPI(NNC_CUDA_ACT_GELU_ERF); break;
  case NNC_CUDA_ACT_GELU_TANH: NNC_GT_EPI(NNC_CUDA_ACT_GELU_TANH); break;
  case NNC_CUDA_ACT_SILU: NNC_GT_EPI(NNC_CUDA_ACT_SILU); break;
  default: NNC_GT_EPI(NNC_CUDA_ACT_NONE); break;
  }
#undef NNC_GT_EPI
}

}  // namespace nnc_gt

#endif
