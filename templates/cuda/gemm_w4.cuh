/* templates/cuda/gemm_w4.cuh — the weight-only int4 GEMM: activations in T
 * (f32, bf16 or f16), the weight int4 [N, K] with an f32 scale per output
 * channel and group of 128 consecutive k, and
 *   d[m][n] = act(alpha * sum_k a[m][k] * q(n, k) * w_scale[n][k / 128]
 *                 + bias[n]) + residual[m][n]  (or act(... + residual))
 * written as TO (f32, bf16 or f16): gemm_w8.cuh's GEMM with group scales.
 *
 * Why: a decode step reads each weight once, so its GEMMs take the time
 * the weight's bytes take; at half a byte a weight int4 is a quarter of
 * bf16's bytes (plus a scale per 128 weights: 1/32 more).
 *
 * Layout: row n of w is K / 2 bytes, byte j holding k = 2j in bits 0-3 and
 * k = 2j + 1 in bits 4-7, two's complement in [-7, 7] (C SIMD's values,
 * nnc_simd_q4_pack's rule: nnc_cuda_w4_weight); w_scale [N, G], G =
 * ceil(K / 128), the last group shorter when K is not a multiple of 128.
 * K is a multiple of 32: a row is whole 16-byte chunks of 32 k, and a chunk
 * lies in one group.
 *
 * Few rows (M <= NNC_W4_ROWS): nnc_w4::rows_kernel, on CUDA cores, MR rows
 * a block (1, 2, 4 or 8, the smallest >= M; more rows are row blocks of 8,
 * grid.y). A lane owns CW = 2 columns; KT lanes of a warp (8 or 32) and KS
 * warps of a block (1, 2 or 4) split each column's chunks, so that a
 * GPT-2 GEMM of 768 x 768 (24 chunks a row, 295 KB) still spreads over
 * ~100 blocks and a lane has a chunk or two, not 24 chunks a warp on 24
 * warps (launch_rows picks KT and KS per shape). With KT = 8 the 4 column
 * groups of a warp read the same 16 bytes of A, one L1 wavefront per load
 * instead of 4. As gemm_w8.cuh's: U = 2 chunks a column a step (1 at 8
 * rows, for registers) with the next step's in flight, the weight loaded
 * with L1::no_allocate. A chunk's 32 products are summed into a partial,
 * then multiplied by the chunk's group scale into the accumulator (one FMA
 * per 32); sums are halved across the KT lanes (nnc_w8::reduce_scatter),
 * then added across the KS warps through shared memory in a fixed order.
 * No atomics: the same bits every run.
 *
 * That kernel takes M <= TC_ROWS (2), and f32 T. More rows (T bf16 or
 * f16) take gemm_w8.cuh's tensor-core kernel, nnc_w8::tc_kernel, with
 * tc_w4's conversion (below) and a group's scale applied to each warp
 * step's sums (a step is 128 k): on CUDA cores M = 8 took 5.5-6.4 us, no
 * faster than cuBLASLt bf16 at 4 times the bytes (the k loop rolled for
 * registers and waiting on A once a word; prefetching A's lines into L1
 * took 768 x 768 from 5.8 to 4.4 us but 768 x 3072 from 5.6 to 10.1).
 *   H200, --time (graph-timed, GPT-2's decode GEMMs, bf16, us; "before":
 *   rows_kernel at 8 rows):
 *     N x K       M = 1  M = 8 before / now  M = 16  cuBLASLt M = 8
 *     2304 x 768   3.16        6.31 / 3.42    4.19       4.53
 *     768 x 768    2.84        5.77 / 2.98    3.30       4.35
 *     3072 x 768   3.28        6.42 / 3.49    4.22       4.78
 *     768 x 3072   3.31        5.55 / 4.29    5.32       6.83
 *   (M = 1: rows_kernel, as before. M = 2 on it took 3.1-3.7 us, M = 4 on
 *   the MMA kernel 2.9-4.1: TC_ROWS = 1 is likely better, not yet tried.)
 *
 * int4 to f32 without I2F (a quarter of the FMA rate): nibble i of a word
 * (bits 4i .. 4i + 3, i < 4) XORed with 8 is v + 8 in 0 .. 15; masked in
 * place under the exponent of 2^(23 - 4i), whose mantissa's bit 4i is
 * worth 1, it is the float 2^(23 - 4i) + v + 8 (one LOP3: mask, XOR and
 * exponent), and one FADD of -(2^(23 - 4i) + 8) leaves v. Nibbles 4-7 are
 * nibbles 0-3 of the word shifted by 16: 8 values in 17 operations.
 *
 * Many rows (M > NNC_W4_ROWS): as gemm_w8.cuh, one kernel writes w *
 * w_scale rounded to T into the workspace ws ([N, K]), then cuBLASLt with
 * bias, activation and residual in its epilogue; where it cannot (no
 * handle, SiLU or the erf GELU, an activation before the residual, K = 0,
 * a type pair it lacks, no algorithm on this GPU) the rows kernel runs
 * over all M rows.
 *
 *   nnc_cuda_status nnc_cuda_w4_gemm<T, TO>(nnrt_cuda_blas *h, const nnc_cuda_w4_gemm_args<T, TO> &f, void *ws,
 *                                         cudaStream_t s, nnc_cuda_error *err);
 *   nnc_cuda_status nnc_cuda_w4_weight(const float *w, int N, int K, bool in_out, unsigned char *q, float *scale,
 *                                      cudaStream_t s, nnc_cuda_error *err);
 * K a multiple of 32; a and w 16-byte aligned; ws 16-byte aligned, at least
 * nnc_cuda_w4_ws_bytes<T>(M, N, K) bytes (NULL where that is 0). Returns
 * NNC_CUDA_E_ARG (nothing launched) for bad arguments. Never synchronizes.
 * Builds for sm_80 and later. */
#ifndef NNC_CUDA_GEMM_W4_CUH
#define NNC_CUDA_GEMM_W4_CUH

#include "gemm_w8.cuh"

/* The most rows the rows kernels take before cuBLASLt does. 32: on an
 * H200 a GPT-2 decode step at 24 and 32 sequences took 10-12% less than
 * with 16 (the weight dequantized for cuBLASLt every step), at 48 and 64
 * 5% more (bench/NOTES.md, session 34). */
#ifndef NNC_W4_ROWS
#define NNC_W4_ROWS 32
#endif

template <typename T, typename TO> struct nnc_cuda_w4_gemm_args {
  int M, N, K;                 /* K a multiple of 32 */
  const T *a;                  /* [M, K], rows K apart, 16-byte aligned */
  const unsigned char *w;      /* [N, K / 2] packed int4, 16-byte aligned (above) */
  const float *w_scale;        /* [N, G], G = (K + 127) / 128 */
  const TO *bias;              /* [N] or NULL */
  const TO *residual;          /* [M, N] or NULL; may be d itself */
  bool act_last;               /* act(... + residual) instead of act(...) + residual */
  TO *d;                       /* [M, N] */
  float alpha;
  nnc_cuda_act act;
};

namespace nnc_w4 {

using nnc_w8::log2i;
using nnc_w8::reduce_scatter;

constexpr int WARPS = 4, THREADS = WARPS * 32;
constexpr int CW = 2;             /* columns a lane */
constexpr int MR_MAX = 8;         /* rows a block, at most */
constexpr int GROUP = 128;        /* k a scale */
constexpr int DQ_THREADS = 256;   /* the dequantization kernel's blocks */
constexpr int Q_WARPS = 8;        /* the weight quantizer's columns a block */
/* The rows kernel's blocks an SM, for ptxas: at most 128 registers a
 * thread, so that TARGET_BLOCKS fit in one wave. */
constexpr int BLOCKS_PER_SM = 4;
/* Blocks launch_rows aims for (about 4 an SM of an H100/H200): past it a
 * lane takes more chunks rather than the block fewer columns. */
constexpr long long TARGET_BLOCKS = 512;
constexpr const char *KERNEL = "nnc_cuda_w4_gemm";
constexpr int TC_ROWS = 2; /* up to this many rows, rows_kernel; more, nnc_w8::tc_kernel (T bf16, f16) */

/* nnc_w8::load_weight, volatile: the same chunks for every row block, so
 * ptxas hoisted the first ones out of the row loop and, short of
 * registers, stored them to local memory, whose stores wait for the data
 * before the next step's loads go out. */
__device__ __forceinline__ uint4 load_weight(const unsigned char *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/* Nibble I < 4 of x as a float: LOP3 and FADD (above). */
template <int I> __device__ __forceinline__ float nibble(uint32_t x) {
  constexpr uint32_t exponent = (uint32_t)(127 + 23 - 4 * I) << 23;
  constexpr float bias = (float)(1u << (23 - 4 * I)) + 8.0f;
  return __uint_as_float((x & (0xFu << (4 * I))) ^ (exponent | (8u << (4 * I)))) - bias;
}

/* Eight int4 (one word, k = 0 in bits 0-3) as floats. */
__device__ __forceinline__ void i4x8_to_f32(uint32_t x, float (&f)[8]) {
  const uint32_t h = x >> 16;
  f[0] = nibble<0>(x), f[1] = nibble<1>(x), f[2] = nibble<2>(x), f[3] = nibble<3>(x);
  f[4] = nibble<0>(h), f[5] = nibble<1>(h), f[6] = nibble<2>(h), f[7] = nibble<3>(h);
}

using nnc_w8::word;

/* 8 consecutive elements of A at a 16-byte aligned p, as floats. */
template <typename T> __device__ __forceinline__ void load_a8(const T *p, float (&f)[8]) {
  constexpr int V = nnc_dtype<T>::VEC;
  const uint4 *src = reinterpret_cast<const uint4 *>(p);
#pragma unroll
  for (int i = 0; i < 8 / V; ++i) {
    alignas(16) T t[V];
    *reinterpret_cast<uint4 *>(t) = __ldg(src + i);
#pragma unroll
    for (int j = 0; j < V; ++j) f[i * V + j] = nnc_dtype<T>::load(t[j]);
  }
}

/* Grid: (ceil(N / columns a block), row blocks); THREADS threads; ks_n
 * (1, 2, 4) warps split K. Warp w takes K slice w % ks_n of column group
 * w / ks_n; lane l chunk slot l % KT of sub-group l / KT, CW columns each.
 * A column's chunks go to its ks_n * KT slots in turn. Block y takes rows
 * m0 = MR y, MR (y + gridDim.y), ... Rows and columns past M and N read row
 * M - 1 and column N - 1 again (no branch in the k loop) and write nothing. */
template <typename T, typename TO, int MR, int KT>
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) rows_kernel(const nnc_cuda_w4_gemm_args<T, TO> f, int ks_n) {
  constexpr int V = MR * CW;             /* outputs a lane */
  constexpr int SUB = 32 / KT;           /* column groups a warp */
  constexpr int S = V >= 8 ? 1 : 8 / V;  /* partial sets: at least 8 independent FMA chains */
  constexpr int NL = V >= KT ? V / KT : 1;  /* whole sums a lane holds after the warp's reduction */
  constexpr int U = MR >= 8 ? 1 : 2;        /* chunks a column a step: 8 rows have the FMAs to wait on */
  /* a chunk's words one at a time from 4 rows up: unrolled, ptxas loaded
   * all MR x 4 of A's 16-byte vectors first, and 8 rows spilled */
  constexpr int JU = MR >= 4 ? 1 : 4;
  static_assert((KT == 8 || KT == 32) && (V & (V - 1)) == 0 && V <= 16, "KT 8 or 32, V a power of two");
  __shared__ float part_sum[WARPS][SUB][V];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kt = lane % KT, sub = lane / KT;
  const int ks = warp % ks_n, groups = WARPS / ks_n;
  const int n0 = ((blockIdx.x * groups + warp / ks_n) * SUB + sub) * CW;
  const int chunks = f.K / 32, G = (f.K + GROUP - 1) / GROUP;
  const int slots = ks_n * KT;
  const int first = n0 < f.N ? ks * KT + kt : chunks; /* a lane past N loads nothing */
  const unsigned char *wrow[CW];
  const float *srow[CW];
#pragma unroll
  for (int c = 0; c < CW; ++c) {
    const long long n = n0 + c < f.N ? n0 + c : f.N - 1;
    wrow[c] = f.w + n * (f.K / 2);
    srow[c] = f.w_scale + n * G;
  }
  /* which of the reduced sums this lane holds, and whether it writes them */
  constexpr int SHARE = V >= KT ? 1 : KT / V; /* lanes that hold the same sum */
  const int i0 = V >= KT ? kt * NL : kt / SHARE;
  const bool writer = kt % SHARE == 0;

  /* One step's chunks and their group scales: chunk ch0 + slots u of each
   * column, zero past K. */
  auto load = [&](uint4 (&q)[U][CW], float (&sc)[U][CW], int ch0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        const int ch = ch0 + slots * u;
        q[u][c] = ch < chunks ? load_weight(wrow[c] + (long long)ch * 16) : make_uint4(0, 0, 0, 0);
        sc[u][c] = ch < chunks ? __ldg(srow[c] + ch / 4) : 0.0f;
      }
  };

  for (long long m0 = (long long)blockIdx.y * MR; m0 < f.M; m0 += (long long)gridDim.y * MR) {
    /* row r at a0 + roff[r]: 32-bit offsets, not MR 64-bit pointers */
    const T *a0 = f.a + m0 * f.K;
    int roff[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) roff[r] = (int)((m0 + r < f.M ? r : f.M - 1 - m0) * f.K);
    float acc[MR][CW];
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
      for (int c = 0; c < CW; ++c) acc[r][c] = 0.0f;

    uint4 cur[U][CW];
    float cur_s[U][CW];
    load(cur, cur_s, first);
    for (int ch0 = first; ch0 < chunks; ch0 += slots * U) {
      uint4 next[U][CW];
      float next_s[U][CW];
      load(next, next_s, ch0 + slots * U); /* in flight while this step multiplies */
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = ch0 + slots * u;
        if (ch >= chunks) break;
        float part[S][MR][CW];
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
          for (int r = 0; r < MR; ++r)
#pragma unroll
            for (int c = 0; c < CW; ++c) part[s][r][c] = 0.0f;
#pragma unroll JU
        for (int j = 0; j < 4; ++j) {
          float wf[CW][8];
#pragma unroll
          for (int c = 0; c < CW; ++c) i4x8_to_f32(word(cur[u][c], j), wf[c]);
#pragma unroll
          for (int r = 0; r < MR; ++r) {
            float av[8];
            load_a8(a0 + roff[r] + ch * 32 + j * 8, av);
#pragma unroll
            for (int e = 0; e < 8; ++e)
#pragma unroll
              for (int c = 0; c < CW; ++c) part[e % S][r][c] = fmaf(av[e], wf[c][e], part[e % S][r][c]);
          }
        }
#pragma unroll
        for (int r = 0; r < MR; ++r)
#pragma unroll
          for (int c = 0; c < CW; ++c) {
            float p = part[0][r][c];
#pragma unroll
            for (int s = 1; s < S; ++s) p += part[s][r][c];
            acc[r][c] = fmaf(p, cur_s[u][c], acc[r][c]);
          }
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int c = 0; c < CW; ++c) cur[u][c] = next[u][c], cur_s[u][c] = next_s[u][c];
    }

    float v[V];
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
      for (int c = 0; c < CW; ++c) v[r * CW + c] = acc[r][c];
    reduce_scatter<V, KT / 2>(v, lane);
    if (ks_n > 1) {
      if (writer)
#pragma unroll
        for (int j = 0; j < NL; ++j) part_sum[warp][sub][i0 + j] = v[j];
      __syncthreads();
      /* the K slices' sums, in order, by the first slice's warp */
      if (writer && ks == 0)
#pragma unroll
        for (int j = 0; j < NL; ++j)
          for (int w = 1; w < ks_n; ++w) v[j] += part_sum[warp + w][sub][i0 + j];
      __syncthreads(); /* read before the next row block writes */
    }
    if (!writer || ks != 0) continue;
#pragma unroll
    for (int j = 0; j < NL; ++j) {
      const int i = i0 + j, r = i / CW, c = i % CW;
      const long long m = m0 + r;
      const int n = n0 + c;
      if (m >= f.M || n >= f.N) continue;
      const long long at = m * f.N + n;
      const float b = f.bias ? nnc_dtype<TO>::load(f.bias[n]) : 0.0f;
      const float x = fmaf(v[j], f.alpha, b);
      const float res = f.residual ? nnc_dtype<TO>::load(f.residual[at]) : 0.0f;
      const float y = f.act_last ? nnc_gemm_act_rt(f.act, x + res) : nnc_gemm_act_rt(f.act, x) + res;
      f.d[at] = nnc_dtype<TO>::store(y);
    }
  }
}

/* int4 weights for nnc_w8::tc_kernel: a lane's 16-byte chunk is 32 k (a
 * warp step 128 k: one group, whose scale multiplies the step's sums). Pair
 * p of the chunk (k = 2p, 2p + 1: byte p's two nibbles) as two T, exactly:
 * PRMT puts byte p and byte p of the word shifted by 4 in the two halves,
 * one LOP3 keeps each half's low nibble n, XORs it with 8 and sets the
 * exponent of 2^7 (bf16: 128 + (n ^ 8)) or 2^10 (f16: 1024 + (n ^ 8)), and
 * one subtraction of 136 or 1032 leaves v; 3.25 full-rate operations a
 * pair. */
struct tc_w4 {
  /* a step at a time, all of a warp's loaded at once, none in flight behind
   * them (A is twice tc_w8's a step); up to 24 warps (80 registers), so
   * that K = 3072 (24 steps) is a step a warp */
  static constexpr int NV = 32, U = 1, WARPS = 24;
  static constexpr bool GROUPS = true, PIPE = false;
  static __host__ __device__ long long row_bytes(int K) { return K / 2; }
  template <typename T> static __device__ __forceinline__ void pairs(const uint4 &q, uint32_t (&b)[16]) {
    constexpr uint32_t magic = std::is_same<T, __nv_bfloat16>::value ? 0x43084308u : 0x64086408u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t x = word(q, j), x4 = x >> 4;
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const uint32_t y = __byte_perm(x, x4, p | p << 4 | (4 + p) << 8 | (4 + p) << 12);
        b[4 * j + p] = nnc_w8::sub2<T>((y & 0x000f000fu) ^ magic, magic);
      }
    }
  }
};

/* ws [N, K] = w * w_scale rounded to T: a thread a 16-byte chunk of w. */
template <typename T>
__global__ void __launch_bounds__(DQ_THREADS) dequant_kernel(const unsigned char *w, const float *w_scale, int N, int K,
                                                             T *ws) {
  constexpr int V = nnc_dtype<T>::VEC;
  const long long per_row = K / 32, total = (long long)N * per_row;
  const int G = (K + GROUP - 1) / GROUP;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const uint4 q = load_weight(w + i * 16);
    const float scale = w_scale[i / per_row * G + i % per_row / 4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float x[8];
      i4x8_to_f32(word(q, j), x);
#pragma unroll
      for (int g = 0; g < 8 / V; ++g) {
        float part[V];
#pragma unroll
        for (int e = 0; e < V; ++e) part[e] = x[g * V + e] * scale;
        nnc_store_vec(ws + i * 32 + j * 8 + g * V, part);
      }
    }
  }
}

/* Weight quantization: warp w of block x makes column n = Q_WARPS x + w,
 * groups blockIdx.y, + gridDim.y, ...: lane l takes k = 128 g + 4 l .. + 3
 * (two bytes). The rule is nnc_simd_q4_pack's: amax over the group (NaN
 * ignored: fmaxf, as its `a > amax`); a group whose amax is 0 or not
 * finite is zero with scale 0; else s = amax / 7 and q = rint(w / s)
 * clamped to [-7, 7], NaN 0 (IEEE division and ties to even, as C's). */
__global__ void __launch_bounds__(Q_WARPS * 32)
weight_kernel(const float *w, int N, int K, int in_out, unsigned char *q, float *scale) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * Q_WARPS + threadIdx.x / 32;
  if (n >= N) return; /* the whole warp */
  const int G = (K + GROUP - 1) / GROUP;
  for (int g = blockIdx.y; g < G; g += gridDim.y) {
    const int k0 = g * GROUP + lane * 4;
    float x[4];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long k = k0 + i;
      x[i] = k < K ? (in_out ? w[k * N + n] : w[(long long)n * K + k]) : 0.0f;
      amax = fmaxf(amax, fabsf(x[i]));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const bool zero = !(amax > 0.0f) || !isfinite(amax);
    const float s = zero ? 0.0f : __fdiv_rn(amax, 7.0f);
    unsigned bits = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float r = zero ? 0.0f : rintf(__fdiv_rn(x[i], s));
      r = r > 7.0f ? 7.0f : r < -7.0f ? -7.0f : r == r ? r : 0.0f;
      bits |= ((unsigned)(int)r & 15u) << (4 * i);
    }
    if (k0 < K) *reinterpret_cast<unsigned short *>(q + (long long)n * (K / 2) + k0 / 2) = (unsigned short)bits;
    if (lane == 0) scale[(long long)n * G + g] = s;
  }
}

template <typename T, typename TO, int MR>
nnc_cuda_status launch_rows(const nnc_cuda_w4_gemm_args<T, TO> &f, cudaStream_t s, nnc_cuda_error *err) {
  /* (KT, KS) by slots a column, fewest first: the first that makes
   * TARGET_BLOCKS blocks, else the most slots a column's chunks fill to 3/4
   * or more (K = 768: 24 chunks, 32 slots). KT = 32 with KS = 1 would match
   * (8, 4)'s columns a block with 4 times its L1 wavefronts of A. */
  constexpr int opts[][2] = {{8, 1}, {8, 2}, {8, 4}, {32, 2}, {32, 4}};
  const long long chunks = f.K / 32, row_blocks = (f.M + MR - 1) / MR;
  const unsigned gy = (unsigned)(row_blocks < 65535 ? row_blocks : 65535);
  int pick = 0;
  long long col_blocks = 0;
  for (int i = 0; i < 5; ++i) {
    const int kt = opts[i][0], ks = opts[i][1];
    if (i > 0 && 3LL * kt * ks > 4 * chunks) break;
    const int cols = WARPS / ks * (32 / kt) * CW;
    pick = i;
    col_blocks = (f.N + cols - 1) / cols;
    if (col_blocks * gy >= TARGET_BLOCKS) break;
  }
  const dim3 grid((unsigned)col_blocks, gy);
  if (opts[pick][0] == 8)
    rows_kernel<T, TO, MR, 8><<<grid, THREADS, 0, s>>>(f, opts[pick][1]);
  else
    rows_kernel<T, TO, MR, 32><<<grid, THREADS, 0, s>>>(f, opts[pick][1]);
  return nnc_cuda_check_launch(err, KERNEL);
}

/* The rows kernel over all of f's rows, MR the smallest that covers M (8
 * for more). */
template <typename T, typename TO>
nnc_cuda_status run_rows(const nnc_cuda_w4_gemm_args<T, TO> &f, cudaStream_t s, nnc_cuda_error *err) {
  if constexpr (!std::is_same<T, float>::value)
    if (f.M > TC_ROWS) return nnc_w8::launch_tc<T, TO, tc_w4>(f, s, err, KERNEL);
  if (f.M <= 1) return launch_rows<T, TO, 1>(f, s, err);
  if (f.M <= 2) return launch_rows<T, TO, 2>(f, s, err);
  if (f.M <= 4) return launch_rows<T, TO, 4>(f, s, err);
  return launch_rows<T, TO, MR_MAX>(f, s, err);
}

}  // namespace nnc_w4

/* Bytes of workspace nnc_cuda_w4_gemm needs: the dequantized weight where
 * M takes the cuBLASLt path, else 0. */
template <typename T> size_t nnc_cuda_w4_ws_bytes(int M, int N, int K) {
  return M > NNC_W4_ROWS && N > 0 && K > 0 ? (size_t)N * (size_t)K * sizeof(T) : 0;
}

/* d = act(alpha * (a . dequant(w)^T) + bias) (+ residual), on s. h: the
 * model's cuBLASLt handle (may be NULL: then never cuBLASLt). ws: device
 * workspace of at least nnc_cuda_w4_ws_bytes<T>(M, N, K) bytes (may be NULL
 * when that is 0). */
template <typename T, typename TO>
nnc_cuda_status nnc_cuda_w4_gemm(nnrt_cuda_blas *h, const nnc_cuda_w4_gemm_args<T, TO> &f, void *ws, cudaStream_t s,
                                 nnc_cuda_error *err) {
  using namespace nnc_w4;
  const size_t ws_bytes = nnc_cuda_w4_ws_bytes<T>(f.M, f.N, f.K);
  if (nnc_cuda_status st = nnc_w8::check_args<TO>(f, 32, ws_bytes, ws, NNC_W4_ROWS, "NNC_W4_ROWS", KERNEL, err))
    return st;
  if (f.M == 0 || f.N == 0) return NNC_CUDA_OK;
  bool rows = !ws_bytes || !h || f.act == NNC_CUDA_ACT_SILU;
  if (!rows) {
    const long long blocks = ((long long)f.N * (f.K / 32) + DQ_THREADS - 1) / DQ_THREADS;
    auto dequantize = [&] {
      dequant_kernel<T><<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), DQ_THREADS, 0, s>>>(
          f.w, f.w_scale, f.N, f.K, static_cast<T *>(ws));
    };
    if (nnc_cuda_status st = nnc_w8::dequantized_lt<T, TO>(h, f, ws, s, dequantize, &rows, KERNEL, err)) return st;
  }
  return rows ? run_rows(f, s, err) : NNC_CUDA_OK;
}

/* Load time: w (N*K f32 on the device, [N, K] or, in_out, [K, N]) to the
 * packed int4 [N, K / 2] in q and the [N, G] group scales in scale, exactly
 * as C SIMD's nnc_simd_q4_pack rounds them. */
inline nnc_cuda_status nnc_cuda_w4_weight(const float *w, int N, int K, bool in_out, unsigned char *q, float *scale,
                                          cudaStream_t s, nnc_cuda_error *err) {
  constexpr const char *who = "nnc_cuda_w4_weight";
  if (N < 0 || K < 0 || K % 32)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "expected N, K >= 0 and K a multiple of 32, found N=%d K=%d", N, K);
  if (!w || !q || !scale)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, who, "expected w, q and scale, found a NULL one (w=%p q=%p scale=%p)",
                         (const void *)w, (void *)q, (void *)scale);
  if (N == 0 || K == 0) return NNC_CUDA_OK;
  const int G = (K + nnc_w4::GROUP - 1) / nnc_w4::GROUP;
  const dim3 grid((unsigned)((N + nnc_w4::Q_WARPS - 1) / nnc_w4::Q_WARPS), (unsigned)(G < 65535 ? G : 65535));
  nnc_w4::weight_kernel<<<grid, nnc_w4::Q_WARPS * 32, 0, s>>>(w, N, K, in_out ? 1 : 0, q, scale);
  return nnc_cuda_check_launch(err, who);
}

#endif
