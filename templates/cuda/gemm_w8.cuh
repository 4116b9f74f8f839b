/* templates/cuda/gemm_w8.cuh — the weight-only int8 GEMM: activations in T
 * (f32, bf16 or f16), the weight int8 [N, K] with an f32 scale per output
 * channel, and
 *   d[m][n] = act(alpha * sum_k a[m][k] * w[n][k] * w_scale[n] + bias[n])
 *             + residual[m][n]     (or act(... + residual) when act_last)
 * written as TO (f32, bf16 or f16).
 *
 * Why: a decode step's GEMMs have a few rows of A against the whole weight,
 * so they take the time it takes to read the weight once. At a byte a
 * weight that is half bf16's time, and the weight stays int8 in memory.
 *
 * Few rows (M <= NNC_W8_ROWS; T bf16 or f16: M <= TC_ROWS, below):
 * nnc_w8::rows_kernel, on CUDA cores (at a few rows the bytes, not the
 * multiplies, set the time). A warp owns CW = 2
 * output columns for MR rows (MR in {1, 2, 4, 8}, the smallest >= M; more
 * rows are row blocks of 8, grid.y). Its lanes stride over K in 16-byte
 * chunks of each column's weight row (16 k a lane, 512 k a warp step), U =
 * 2 chunks a column at a time, and the next step's chunks are loaded before
 * this step's are multiplied: 8 16-byte loads a lane in flight, which is
 * what keeps a weight of a few MB streaming. The weight is loaded with
 * L1::no_allocate (read once: it would only push A out of L1); A's 16
 * matching values a row come from L1/L2 (A is small). Sums are f32 FMAs
 * into acc[MR][CW] (with MR * CW < 8, k alternates between 2 or 4 sets of
 * them, so the FMA chains do not wait on each other), then halved across
 * the warp: each shuffle step sends half of the remaining sums and keeps
 * the other half (MR * CW - 1 + 5 - log2(MR * CW) shuffles instead of 5 a
 * sum), leaving each output whole in 32 / (MR * CW) lanes. No atomics:
 * the same bits every run.
 *
 * int8 to f32: I2F converts at a quarter of the FMA rate (16 a clock per
 * SM on sm_80/sm_90), which at M = 1 would cost more than the bytes. So a
 * byte b becomes b + 128 (an XOR of 0x80 per byte), is placed by PRMT under
 * the exponent of 2^23 (the float 2^23 + b + 128, exact), and one FADD of
 * -(2^23 + 128) leaves b: two full-rate operations.
 *
 * More rows on tensor cores (T bf16 or f16, TC_ROWS < M <= NNC_W8_ROWS):
 * nnc_w8::tc_kernel. On CUDA cores each row costs its FMAs and A's loads
 * and conversions again (the kernel is latency-bound: the weights are
 * 0.3-2.4 MB), so at 8 rows it was no faster than cuBLASLt's bf16 GEMM,
 * which reads twice the bytes. An m16n8k16 MMA takes up to 16 rows at the
 * cost of one: the int8 weight becomes bf16/f16 exactly in full-rate
 * operations (tc_w8), A goes in as loaded (the MMA's k permuted to match
 * the lane's bytes), sums are f32. A block is 8 columns, its warps K
 * slices, as many as keep each warp's steps in flight at once. f32 T, and
 * 1-4 rows, stay on rows_kernel: the MMA kernel took 3.5-4.6 us at 1 row
 * (rows_kernel 2.7-4.2), nearly its time at 16.
 *   H200, --time (graph-timed, GPT-2's decode GEMMs, bf16, us; "before":
 *   rows_kernel at 8 rows):
 *     N x K       M = 1  M = 8 before / now  M = 16  cuBLASLt M = 8
 *     2304 x 768   2.93        4.71 / 3.88    4.24       4.53
 *     768 x 768    2.67        3.44 / 3.29    3.55       4.35
 *     3072 x 768   3.15        4.86 / 4.04    4.40       4.78
 *     768 x 3072   4.22        6.57 / 4.46    4.94       6.82
 *   (M = 1: rows_kernel, as before; M = 4 on it: 3.00-5.21.)
 *
 * Many rows (M > NNC_W8_ROWS): a prefill, where the multiplies are the
 * work. One kernel writes w * w_scale rounded to T into the workspace ws
 * ([N, K]), then cuBLASLt multiplies on tensor cores with bias, activation
 * and residual in its epilogue (runtime/cuda/nnrt_cuda.h's
 * nnrt_cuda_gemm_run). Where it cannot (no handle, SiLU or the erf GELU,
 * an activation before the residual, K = 0, a type pair it lacks, or no
 * algorithm on this GPU) the rows kernel runs over all M rows instead:
 * slow but exact. The rounding of w * w_scale to T is the only difference
 * between the two (2^-9 relative for bf16).
 *
 *   nnc_cuda_status nnc_cuda_w8_gemm<T, TO>(nnrt_cuda_blas *h, const nnc_cuda_w8_gemm_args<T, TO> &f, void *ws,
 *                                         cudaStream_t s, nnc_cuda_error *err);
 * K a multiple of 16; a and w 16-byte aligned; ws 16-byte aligned, at least
 * nnc_cuda_w8_ws_bytes<T>(M, N, K) bytes (NULL where that is 0). Returns
 * NNC_CUDA_E_ARG (nothing launched) for bad arguments. Never synchronizes.
 * Builds for sm_80 and later (gemm_kernel.cuh, included for its
 * activations, does); nothing here needs sm_90a. */
#ifndef NNC_CUDA_GEMM_W8_CUH
#define NNC_CUDA_GEMM_W8_CUH

#include <type_traits>

#include "gemm_kernel.cuh"
#include "runtime/cuda/nnrt_cuda.h"

/* The most rows the rows kernels take before cuBLASLt does. 32: on an
 * H200 a GPT-2 decode step at 24 and 32 sequences took 10-12% less than
 * with 16 (the weight dequantized for cuBLASLt every step), at 48 and 64
 * 5% more (bench/NOTES.md, session 34). */
#ifndef NNC_W8_ROWS
#define NNC_W8_ROWS 32
#endif

template <typename T, typename TO> struct nnc_cuda_w8_gemm_args {
  int M, N, K;                 /* K a multiple of 16 */
  const T *a;                  /* [M, K], rows K apart, 16-byte aligned */
  const signed char *w;        /* [N, K] int8, 16-byte aligned */
  const float *w_scale;        /* [N]: w's value is w[n][k] * w_scale[n] */
  const TO *bias;              /* [N] or NULL */
  const TO *residual;          /* [M, N] or NULL; may be d itself */
  bool act_last;               /* act(... + residual) instead of act(...) + residual */
  TO *d;                       /* [M, N] */
  float alpha;
  nnc_cuda_act act;
};

namespace nnc_w8 {

constexpr int WARPS = 4, THREADS = WARPS * 32;
constexpr int CW = 2;             /* columns a warp */
constexpr int BN = WARPS * CW;    /* columns a block */
constexpr int U = 2;              /* 16-byte chunks a lane loads per column per step */
constexpr int MR_MAX = 8;         /* rows a block, at most */
constexpr int DQ_THREADS = 256;   /* the dequantization kernel's blocks */
/* The rows kernel's blocks an SM, for ptxas: at most 170 registers a
 * thread, which every instance fits without spilling (left to itself ptxas
 * held f32's MR = 8 to 128 registers and spilled). */
constexpr int BLOCKS_PER_SM = 3;
constexpr const char *KERNEL = "nnc_cuda_w8_gemm";

/* 16 weight bytes, read once: kept out of L1, which holds A. Volatile: as
 * a plain asm the compiler took it for a pure function and loaded the
 * chunks past K too (`ch < chunks ? load : 0` made a select), reading past
 * the weight's end (compute-sanitizer's memcheck). */
__device__ __forceinline__ uint4 load_weight(const signed char *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/* Four int8 (one word, byte 0 first) as floats: PRMT and FADD (above). */
__device__ __forceinline__ void i8x4_to_f32(uint32_t x, float *f) {
  const uint32_t u = x ^ 0x80808080u;
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650u + i)) - 8388736.0f;
}

/* 16 int8 (one 16-byte chunk) as floats. */
__device__ __forceinline__ void i8x16_to_f32(const uint4 &q, float (&f)[16]) {
  i8x4_to_f32(q.x, f);
  i8x4_to_f32(q.y, f + 4);
  i8x4_to_f32(q.z, f + 8);
  i8x4_to_f32(q.w, f + 12);
}

/* 16 consecutive elements of A at a 16-byte aligned p, as floats. */
template <typename T> __device__ __forceinline__ void load_a16(const T *p, float (&f)[16]) {
  constexpr int V = nnc_dtype<T>::VEC;
  const uint4 *src = reinterpret_cast<const uint4 *>(p);
#pragma unroll
  for (int i = 0; i < 16 / V; ++i) {
    alignas(16) T t[V];
    *reinterpret_cast<uint4 *>(t) = __ldg(src + i);
#pragma unroll
    for (int j = 0; j < V; ++j) f[i * V + j] = nnc_dtype<T>::load(t[j]);
  }
}

__host__ __device__ constexpr int log2i(int v) { return v > 1 ? 1 + log2i(v / 2) : 0; }

/* Sums each of the warp's values v[0 .. N) over its 32 lanes (N a power of
 * two up to 32; O = 16 at the first call): while more than one value is
 * left, each lane sends half of them to its partner O lanes away and keeps
 * the other half (the lane with bit O set the upper half), so N - 1
 * shuffles leave one value a lane; 5 - log2(N) more finish it. Value i
 * ends in v[0] of lanes i << (5 - log2(N)) up to the next value's. A
 * template recursion, so every index is a constant (a loop over N was left
 * rolled, and v went to local memory).
 * Started at O < 16 it sums over aligned groups of 2 O lanes instead
 * (gemm_w4.cuh): with N <= 2 O as above (lane l of a group, l < 2 O, in
 * place of lane), else each lane is left N / (2 O) whole sums, values
 * l N / (2 O) on, in v[0 .. N / (2 O)). */
template <int N, int O, int V> __device__ __forceinline__ void reduce_scatter(float (&v)[V], int lane) {
  static_assert(N <= V && (N & (N - 1)) == 0 && (O & (O - 1)) == 0 && O <= 16, "a power of two, at most V values");
  if constexpr (N > 1 && O > 0) {
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float send = upper ? v[i] : v[i + N / 2];
      const float keep = upper ? v[i + N / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    reduce_scatter<N / 2, O / 2>(v, lane);
  } else if constexpr (O > 0) {
    v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
    reduce_scatter<1, O / 2>(v, lane);
  }
}

/* Grid: (ceil(N / BN), row blocks); THREADS threads. Block y takes rows
 * m0 = MR y, MR (y + gridDim.y), ... Rows and columns past M and N read row
 * M - 1 and column N - 1 again (no branch in the k loop) and write nothing. */
template <typename T, typename TO, int MR>
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) rows_kernel(const nnc_cuda_w8_gemm_args<T, TO> f) {
  constexpr int V = MR * CW;                   /* outputs a warp */
  constexpr int S = V >= 8 ? 1 : 8 / V;         /* accumulator sets: at least 8 independent FMA chains */
  constexpr int LG = log2i(V);
  static_assert(16 % S == 0 && (V & (V - 1)) == 0 && V <= 32, "16 k split evenly over the sets; V a power of two");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n0 = (blockIdx.x * WARPS + warp) * CW;
  if (n0 >= f.N) return; /* the whole warp: nothing below synchronizes the block */
  const int chunks = f.K / 16;
  const signed char *wrow[CW];
#pragma unroll
  for (int c = 0; c < CW; ++c) wrow[c] = f.w + (long long)(n0 + c < f.N ? n0 + c : f.N - 1) * f.K;

  /* One step's chunks: chunk ch0 + 32 u of each column, zero past K. */
  auto load = [&](uint4 (&q)[U][CW], int ch0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < CW; ++c)
        q[u][c] = ch0 + 32 * u < chunks ? load_weight(wrow[c] + (long long)(ch0 + 32 * u) * 16) : make_uint4(0, 0, 0, 0);
  };

  for (long long m0 = (long long)blockIdx.y * MR; m0 < f.M; m0 += (long long)gridDim.y * MR) {
    const T *arow[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) arow[r] = f.a + (m0 + r < f.M ? m0 + r : f.M - 1) * f.K;
    float acc[S][MR][CW];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int c = 0; c < CW; ++c) acc[s][r][c] = 0.0f;

    uint4 cur[U][CW];
    load(cur, lane);
    for (int ch0 = lane; ch0 < chunks; ch0 += 32 * U) {
      uint4 next[U][CW];
      load(next, ch0 + 32 * U); /* in flight while this step multiplies */
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = ch0 + 32 * u;
        if (ch >= chunks) break;
        float wf[CW][16];
#pragma unroll
        for (int c = 0; c < CW; ++c) i8x16_to_f32(cur[u][c], wf[c]);
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          float av[16];
          load_a16(arow[r] + (long long)ch * 16, av);
#pragma unroll
          for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int c = 0; c < CW; ++c) acc[j % S][r][c] = fmaf(av[j], wf[c][j], acc[j % S][r][c]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int c = 0; c < CW; ++c) cur[u][c] = next[u][c];
    }

    float v[V];
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        float sum = acc[0][r][c];
#pragma unroll
        for (int s = 1; s < S; ++s) sum += acc[s][r][c];
        v[r * CW + c] = sum;
      }
    reduce_scatter<V, 16>(v, lane);

    /* the first lane of each value's group writes it */
    if (lane % (32 >> LG) != 0) continue;
    const int i = lane >> (5 - LG), r = i / CW, c = i % CW;
    const long long m = m0 + r;
    const int n = n0 + c;
    if (m >= f.M || n >= f.N) continue;
    const long long at = m * f.N + n;
    const float b = f.bias ? nnc_dtype<TO>::load(f.bias[n]) : 0.0f;
    const float x = fmaf(v[0], f.alpha * f.w_scale[n], b);
    const float res = f.residual ? nnc_dtype<TO>::load(f.residual[at]) : 0.0f;
    const float y = f.act_last ? nnc_gemm_act_rt(f.act, x + res) : nnc_gemm_act_rt(f.act, x) + res;
    f.d[at] = nnc_dtype<TO>::store(y);
  }
}

/* ---- The tensor-core rows kernel (T bf16 or f16; gemm_w4.cuh's too). ---- */

constexpr long long TC_TARGET_WARPS = 1024; /* warps launch_tc aims for (about 8 an SM) */
constexpr int TC_ROWS = 4;                  /* up to this many rows, rows_kernel (above) */

/* 16 weight bytes, volatile: the same for every row block, and hoisted out
 * of the row loop they went to local memory (gemm_w4.cuh's load_weight). */
__device__ __forceinline__ uint4 load_weight_v(const unsigned char *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/* 16 bytes of A and a scale, volatile as load_weight_v. */
__device__ __forceinline__ uint4 load_a_v(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float load_f_v(const float *p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4 &q, int j) { return j == 0 ? q.x : j == 1 ? q.y : j == 2 ? q.z : q.w; }

/* p - q on two bf16 or f16 (as fma(q, -1, p)): exact for the integers here. */
template <typename T> __device__ __forceinline__ uint32_t sub2(uint32_t p, uint32_t q) {
  uint32_t d;
  if constexpr (std::is_same<T, __nv_bfloat16>::value)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(q), "r"(0xBF80BF80u), "r"(p));
  else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(q), "r"(0xBC00BC00u), "r"(p));
  return d;
}

/* c += a b, m16n8k16, T bf16 or f16, f32 sums. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* int8 weights for tc_kernel: a lane's 16-byte chunk is 16 k, a scale per
 * column (applied at the end). Pair p of the chunk (k = 2p, 2p + 1) as two
 * T, exactly, in full-rate operations only: bf16 holds 128 + (b & 127)
 * under the exponent of 2^7 (PRMT of b & 0x7f with 0x43) and 128 + 128 s
 * (s the sign bit: 0x4300 or 0x4380), and their difference is b; f16 holds
 * 1024 + (b ^ 0x80) under 2^10 (PRMT with 0x64), less 1152. */
struct tc_w8 {
  /* 2 steps at a time, the next 2 in flight (PIPE); up to 16 warps: 128 registers */
  static constexpr int NV = 16, U = 2, WARPS = 16;
  static constexpr bool GROUPS = false, PIPE = true;
  static __host__ __device__ long long row_bytes(int K) { return K; }
  template <typename T> static __device__ __forceinline__ void pairs(const uint4 &q, uint32_t (&b)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t x = word(q, j);
      if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        const uint32_t lo = x & 0x7f7f7f7fu, sg = x & 0x80808080u;
        b[2 * j] = sub2<T>(__byte_perm(lo, 0x43434343u, 0x4140), __byte_perm(sg, 0x43434343u, 0x4140));
        b[2 * j + 1] = sub2<T>(__byte_perm(lo, 0x43434343u, 0x4342), __byte_perm(sg, 0x43434343u, 0x4342));
      } else {
        const uint32_t u = x ^ 0x80808080u;
        b[2 * j] = sub2<T>(__byte_perm(u, 0x64646464u, 0x4140), 0x64806480u);
        b[2 * j + 1] = sub2<T>(__byte_perm(u, 0x64646464u, 0x4342), 0x64806480u);
      }
    }
  }
};

/* A few rows on tensor cores (T bf16 or f16; Q: tc_w8 or
 * gemm_w4.cuh's tc_w4, F its args). A block is one tile of 8 columns
 * and 16 rows (m16n8k16's; rows past M are row M - 1 again, and rows 8-15
 * are zeros, not loaded, where M <= 8), its blockDim.x / 32 warps the K
 * slices: warp w takes steps w, w + warps, ... of 4 Q::NV k. In a step lane
 * (g, t) = (lane / 4, lane % 4) loads the 16 weight bytes of column g at k
 * = 4 NV step + NV t (a warp: 64 bytes of each of 8 columns) and A's
 * matching NV values of rows g and g + 8, and the NV k become NV / 4 MMAs:
 * MMA i takes the lane's pairs 2i and 2i + 1 as both its A (rows g, g + 8)
 * and B (column g) fragments, which is m16n8k16's layout with the k of
 * each MMA permuted (a sum does not care), so A goes in as loaded, with no
 * shuffles. U steps at a time, the next U's in flight. The warps' sums are
 * added through shared memory in a fixed order. */
template <typename T, typename TO, class Q, class F, bool HI>
__global__ void __launch_bounds__(32 * Q::WARPS) tc_kernel(const F f) {
  constexpr int NV = Q::NV, NA = NV / 8, U = Q::U; /* NA: A's 16-byte vectors a row a step */
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value, "bf16 or f16");
  __shared__ float4 part[Q::WARPS][32];
  const int lane = threadIdx.x % 32, ks = threadIdx.x / 32, ks_n = blockDim.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 8;
  const int nst = (f.K + 4 * NV - 1) / (4 * NV), G = (f.K + 127) / 128;
  const uint32_t zmask = f.K < 0 ? ~0u : 0u; /* 0, unknown to the compiler */
  const unsigned char *wrow =
      reinterpret_cast<const unsigned char *>(f.w) + (long long)(n0 + g < f.N ? n0 + g : f.N - 1) * Q::row_bytes(f.K) + t * 16;
  const float *srow[2];
  float bias[2], cscale[2]; /* the epilogue's, loaded now: after the barrier they were one more trip to L2 */
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int n = n0 + 2 * t + e < f.N ? n0 + 2 * t + e : f.N - 1;
    srow[e] = f.w_scale + (long long)n * G;
    bias[e] = f.bias ? nnc_dtype<TO>::load(f.bias[n]) : 0.0f;
    cscale[e] = Q::GROUPS ? f.alpha : f.alpha * f.w_scale[n];
  }

  struct step {
    uint4 w, lo[NA], hi[HI ? NA : 1];
    float sc[2];
  };
  for (long long m0 = (long long)blockIdx.y * 16; m0 < f.M; m0 += (long long)gridDim.y * 16) {
    const bool hi = HI && m0 + 8 < f.M;
    const T *alo = f.a + (m0 + g < f.M ? m0 + g : f.M - 1) * f.K + t * NV;
    const T *ahi = f.a + (m0 + 8 + g < f.M ? m0 + 8 + g : f.M - 1) * f.K + t * NV;
    /* step s's operands, zero past K */
    auto load = [&](step &d, int s) {
      const bool in = s < nst && s * 4 * NV + t * NV < f.K;
      const uint4 z = make_uint4(0, 0, 0, 0);
      d.w = in ? load_weight_v(wrow + (long long)s * 64) : z;
#pragma unroll
      for (int i = 0; i < NA; ++i) {
        d.lo[i] = in ? load_a_v(alo + (long long)s * 4 * NV + 8 * i) : z;
        if (HI) d.hi[HI ? i : 0] = in && hi ? load_a_v(ahi + (long long)s * 4 * NV + 8 * i) : z;
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) d.sc[e] = Q::GROUPS && s < nst ? load_f_v(srow[e] + s) : 0.0f;
    };
    float acc[2][4] = {};
    step cur[U], nxt[U];
    if (Q::PIPE)
#pragma unroll
      for (int u = 0; u < U; ++u) load(cur[u], ks + u * ks_n);
    for (int s0 = ks; s0 < nst; s0 += U * ks_n) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (Q::PIPE)
          load(nxt[u], s0 + (U + u) * ks_n); /* in flight while these steps multiply */
        else
          load(cur[u], s0 + u * ks_n);
      }
      __syncwarp(); /* the loads before the MMAs (ptxas moved some of tc_w4's past it anyway: dep, below) */
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (Q::PIPE && s0 + u * ks_n >= nst) break; /* else zeros: no branch between the loads and the MMAs */
        uint32_t b[NV / 2];
        Q::template pairs<T>(cur[u].w, b);
        if (!Q::PIPE) {
          /* the first MMA made to wait on all of the step's loads (dep is 0:
           * K >= 0): else ptxas issued A's later vectors after MMAs that
           * wait on the weight, an L2 trip after the memory's */
          uint32_t dep = __float_as_uint(cur[u].sc[0]) ^ __float_as_uint(cur[u].sc[1]);
#pragma unroll
          for (int i = 0; i < NA; ++i) dep ^= cur[u].lo[i].w ^ (HI ? cur[u].hi[HI ? i : 0].w : 0u);
          b[0] ^= dep & zmask;
        }
        float c[2][4] = {};
#pragma unroll
        for (int i = 0; i < NV / 4; ++i) {
          float(&d)[4] = *(Q::GROUPS ? &c[i % 2] : &acc[i % 2]);
          /* A's words 2i and 2i + 1 of the lane's NV / 2: vector i / 2 */
          mma16816<T>(d, word(cur[u].lo[i / 2], 2 * i % 4), HI ? word(cur[u].hi[HI ? i / 2 : 0], 2 * i % 4) : 0u,
                      word(cur[u].lo[i / 2], 2 * i % 4 + 1), HI ? word(cur[u].hi[HI ? i / 2 : 0], 2 * i % 4 + 1) : 0u,
                      b[2 * i], b[2 * i + 1]);
        }
        if (Q::GROUPS) /* a step is one group of 128 k: its scale, columns 2t and 2t + 1 */
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[0][i] = fmaf(c[0][i] + c[1][i], cur[u].sc[i % 2], acc[0][i]);
      }
      if (Q::PIPE)
#pragma unroll
        for (int u = 0; u < U; ++u) cur[u] = nxt[u];
    }
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = acc[0][i] + acc[1][i];
    if (ks_n > 1) {
      part[ks][lane] = make_float4(v[0], v[1], v[2], v[3]);
      __syncthreads();
      if (ks == 0)
        for (int w = 1; w < ks_n; ++w) {
          const float4 p = part[w][lane];
          v[0] += p.x, v[1] += p.y, v[2] += p.z, v[3] += p.w;
        }
      __syncthreads(); /* read before the next row block writes */
    }
    if (ks != 0) continue;
    /* C's layout: v[i] is row g + 8 (i / 2), column 2t + i % 2 */
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long m = m0 + g + 8 * (i / 2);
      const int n = n0 + 2 * t + i % 2;
      if (m >= f.M || n >= f.N) continue;
      const long long at = m * f.N + n;
      const float x = fmaf(v[i], cscale[i % 2], bias[i % 2]);
      const float res = f.residual ? nnc_dtype<TO>::load(f.residual[at]) : 0.0f;
      const float y = f.act_last ? nnc_gemm_act_rt(f.act, x + res) : nnc_gemm_act_rt(f.act, x) + res;
      f.d[at] = nnc_dtype<TO>::store(y);
    }
  }
}

/* tc_kernel over all of f's rows: a block a column tile, its warps the
 * fewest K slices that make TC_TARGET_WARPS warps or leave a warp at most
 * 2 U steps (U without PIPE: all of them in flight at once), at most
 * Q::WARPS or a step each. */
template <typename T, typename TO, class Q, class F>
nnc_cuda_status launch_tc(const F &f, cudaStream_t s, nnc_cuda_error *err, const char *who) {
  const long long tiles = (f.N + 7) / 8, nst = (f.K + 4 * Q::NV - 1) / (4 * Q::NV), row_blocks = (f.M + 15) / 16;
  const unsigned gy = (unsigned)(row_blocks < 65535 ? row_blocks : 65535);
  long long ks_n = (TC_TARGET_WARPS + tiles * gy - 1) / (tiles * gy);
  const long long most = Q::PIPE ? 2 * Q::U : Q::U, few = (nst + most - 1) / most;
  if (ks_n < few) ks_n = few;
  if (ks_n > Q::WARPS) ks_n = Q::WARPS;
  if (ks_n > nst) ks_n = nst;
  if (ks_n < 1) ks_n = 1;
  const dim3 grid((unsigned)tiles, gy);
  if (f.M > 8)
    tc_kernel<T, TO, Q, F, true><<<grid, (unsigned)(32 * ks_n), 0, s>>>(f);
  else
    tc_kernel<T, TO, Q, F, false><<<grid, (unsigned)(32 * ks_n), 0, s>>>(f);
  return nnc_cuda_check_launch(err, who);
}

/* ws [N, K] = w * w_scale rounded to T: a thread a 16-byte chunk of w. */
template <typename T>
__global__ void __launch_bounds__(DQ_THREADS) dequant_kernel(const signed char *w, const float *w_scale, int N, int K,
                                                             T *ws) {
  constexpr int V = nnc_dtype<T>::VEC;
  const long long per_row = K / 16, total = (long long)N * per_row;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    float x[16];
    i8x16_to_f32(load_weight(w + i * 16), x);
    const float scale = w_scale[i / per_row];
#pragma unroll
    for (int g = 0; g < 16 / V; ++g) {
      float part[V];
#pragma unroll
      for (int j = 0; j < V; ++j) part[j] = x[g * V + j] * scale;
      nnc_store_vec(ws + i * 16 + g * V, part);
    }
  }
}

template <typename T, typename TO, int MR>
nnc_cuda_status launch_rows(const nnc_cuda_w8_gemm_args<T, TO> &f, cudaStream_t s, nnc_cuda_error *err) {
  const long long row_blocks = (f.M + MR - 1) / MR;
  const dim3 grid((unsigned)((f.N + BN - 1) / BN), (unsigned)(row_blocks < 65535 ? row_blocks : 65535));
  rows_kernel<T, TO, MR><<<grid, THREADS, 0, s>>>(f);
  return nnc_cuda_check_launch(err, KERNEL);
}

/* The rows kernel over all of f's rows, MR the smallest that covers M (8
 * for more). */
template <typename T, typename TO>
nnc_cuda_status run_rows(const nnc_cuda_w8_gemm_args<T, TO> &f, cudaStream_t s, nnc_cuda_error *err) {
  if constexpr (!std::is_same<T, float>::value)
    if (f.M > TC_ROWS) return launch_tc<T, TO, tc_w8>(f, s, err, KERNEL);
  if (f.M <= 1) return launch_rows<T, TO, 1>(f, s, err);
  if (f.M <= 2) return launch_rows<T, TO, 2>(f, s, err);
  if (f.M <= 4) return launch_rows<T, TO, 4>(f, s, err);
  return launch_rows<T, TO, MR_MAX>(f, s, err);
}

template <typename X> constexpr nnrt_cuda_dtype dtype_of() {
  static_assert(std::is_same<X, float>::value || std::is_same<X, __nv_bfloat16>::value ||
                    std::is_same<X, __half>::value,
                "f32, bf16 or f16");
  return std::is_same<X, float>::value ? NNRT_DT_F32 : std::is_same<X, __half>::value ? NNRT_DT_F16 : NNRT_DT_BF16;
}

/* cuBLASLt's epilogue for act; SiLU has none (the caller never asks). */
inline int epilogue_of(nnc_cuda_act act) {
  switch (act) {
  case NNC_CUDA_ACT_RELU: return NNRT_EPI_RELU;
  case NNC_CUDA_ACT_GELU_TANH: return NNRT_EPI_GELU_TANH;
  case NNC_CUDA_ACT_GELU_ERF: return NNRT_EPI_GELU_ERF;
  default: return NNRT_EPI_NONE;
  }
}

/* The argument checks both weight-only GEMMs make of f (F:
 * nnc_cuda_w8_gemm_args or nnc_cuda_w4_gemm_args): K a multiple of k_step,
 * act in range; then, unless M or N is 0, the pointers, their alignment
 * and the workspace ws_bytes asks for (rows, rows_name: the most rows the
 * rows path takes, for the message). */
template <typename TO, class F>
nnc_cuda_status check_args(const F &f, int k_step, size_t ws_bytes, const void *ws, int rows, const char *rows_name,
                           const char *who, nnc_cuda_error *err) {
  if (f.M < 0 || f.N < 0 || f.K < 0 || f.K % k_step)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "expected M, N >= 0 and K a multiple of %d, found M=%d N=%d K=%d",
                         k_step, f.M, f.N, f.K);
  if ((unsigned)f.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "expected an nnc_cuda_act (%d to %d), found act %d",
                         (int)NNC_CUDA_ACT_NONE, (int)NNC_CUDA_ACT_SILU, (int)f.act);
  if (f.M == 0 || f.N == 0) return NNC_CUDA_OK;
  if (!f.a || !f.w || !f.w_scale || !f.d)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "expected a, w, w_scale and d, found a NULL one (a=%p w=%p "
                         "w_scale=%p d=%p)", (const void *)f.a, (const void *)f.w, (const void *)f.w_scale, (void *)f.d);
  const uintptr_t pa = reinterpret_cast<uintptr_t>(f.a), pw = reinterpret_cast<uintptr_t>(f.w);
  const uintptr_t pd = reinterpret_cast<uintptr_t>(f.d), pr = reinterpret_cast<uintptr_t>(f.residual);
  const uintptr_t pb = reinterpret_cast<uintptr_t>(f.bias), ps = reinterpret_cast<uintptr_t>(f.w_scale);
  if (pa % 16 || pw % 16 || pd % sizeof(TO) || pr % sizeof(TO) || pb % sizeof(TO) || ps % sizeof(float))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who,
                         "expected a, w 16-byte aligned, d, residual, bias %zu-byte and w_scale 4-byte aligned, found "
                         "a=%p w=%p d=%p residual=%p bias=%p w_scale=%p", sizeof(TO), (const void *)f.a,
                         (const void *)f.w, (void *)f.d, (const void *)f.residual, (const void *)f.bias,
                         (const void *)f.w_scale);
  if (ws_bytes && (!ws || reinterpret_cast<uintptr_t>(ws) % 16))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who,
                         "expected a 16-byte aligned workspace of %zu bytes for M=%d > %s=%d, found ws=%p", ws_bytes,
                         f.M, rows_name, rows, ws);
  return NNC_CUDA_OK;
}

/* f's product on cuBLASLt, its B the weight dequantize() writes into ws
 * (T [N, K]), with bias, activation and residual in cuBLASLt's epilogue. It
 * sets *rows (nothing run) where cuBLASLt cannot: a combination it never
 * does (the erf GELU, an activation before the residual, a type pair:
 * nothing dequantized), or no algorithm on this GPU; the caller then runs
 * the rows path. */
template <typename T, typename TO, class F, class Dequant>
nnc_cuda_status dequantized_lt(nnrt_cuda_blas *h, const F &f, void *ws, cudaStream_t s, Dequant dequantize, bool *rows,
                               const char *who, nnc_cuda_error *err) {
  nnrt_cuda_gemm g = {};
  g.M = f.M;
  g.N = f.N;
  g.K = f.K;
  g.batch = 1;
  g.ab = dtype_of<T>();
  g.out = dtype_of<TO>();
  g.A = f.a;
  g.lda = f.K;
  g.B = ws;
  g.ldb = f.K;
  g.b_trans = true;
  g.bias = f.bias;
  g.residual = f.residual;
  g.stride_r = (long long)f.M * f.N;
  g.act_after_residual = f.act_last;
  g.D = f.d;
  g.ldd = f.N;
  g.stride_d = (long long)f.M * f.N;
  g.alpha = f.alpha;
  g.epilogue = epilogue_of(f.act);
  *rows = !nnrt_cuda_gemm_supported(&g, nullptr, 0);
  if (*rows) return NNC_CUDA_OK;
  dequantize();
  if (nnc_cuda_check_launch(err, who)) return NNC_CUDA_E_LAUNCH;
  nnrt_error e = {};
  const nnrt_status st = nnrt_cuda_gemm_run(h, &g, s, &e);
  *rows = nnrt_cuda_gemm_unsupported(st, &e);
  if (st == NNRT_OK || *rows) return NNC_CUDA_OK;
  return nnc_cuda_fail(err, st == NNRT_E_ARG ? NNC_CUDA_E_ARG : NNC_CUDA_E_LAUNCH, who, "cuBLASLt: %s", e.msg);
}

}  // namespace nnc_w8

/* Bytes of workspace nnc_cuda_w8_gemm needs: the dequantized weight where
 * M takes the cuBLASLt path, else 0. */
template <typename T> size_t nnc_cuda_w8_ws_bytes(int M, int N, int K) {
  return M > NNC_W8_ROWS && N > 0 && K > 0 ? (size_t)N * (size_t)K * sizeof(T) : 0;
}

/* d = act(alpha * (a . (w * w_scale)^T) + bias) (+ residual), on s. h: the
 * model's cuBLASLt handle (may be NULL: then never cuBLASLt). ws: device
 * workspace of at least nnc_cuda_w8_ws_bytes<T>(M, N, K) bytes (may be NULL
 * when that is 0). */
template <typename T, typename TO>
nnc_cuda_status nnc_cuda_w8_gemm(nnrt_cuda_blas *h, const nnc_cuda_w8_gemm_args<T, TO> &f, void *ws, cudaStream_t s,
                                 nnc_cuda_error *err) {
  using namespace nnc_w8;
  const size_t ws_bytes = nnc_cuda_w8_ws_bytes<T>(f.M, f.N, f.K);
  if (nnc_cuda_status st = check_args<TO>(f, 16, ws_bytes, ws, NNC_W8_ROWS, "NNC_W8_ROWS", KERNEL, err)) return st;
  if (f.M == 0 || f.N == 0) return NNC_CUDA_OK;
  bool rows = !ws_bytes || !h || f.act == NNC_CUDA_ACT_SILU;
  if (!rows) {
    const long long blocks = ((long long)f.N * (f.K / 16) + DQ_THREADS - 1) / DQ_THREADS;
    auto dequantize = [&] {
      dequant_kernel<T><<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), DQ_THREADS, 0, s>>>(
          f.w, f.w_scale, f.N, f.K, static_cast<T *>(ws));
    };
    if (nnc_cuda_status st = dequantized_lt<T, TO>(h, f, ws, s, dequantize, &rows, KERNEL, err)) return st;
  }
  return rows ? run_rows(f, s, err) : NNC_CUDA_OK;
}

#endif
