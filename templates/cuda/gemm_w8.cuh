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
 * Few rows (M <= NNC_W8_ROWS): nnc_w8::rows_kernel, on CUDA cores (at a
 * few rows the bytes, not the multiplies, set the time). A warp owns CW = 2
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

#include <cstring>
#include <type_traits>

#include "gemm_kernel.cuh"
#include "runtime/cuda/nnrt_cuda.h"

/* The most rows the rows kernel takes before cuBLASLt does. */
#ifndef NNC_W8_ROWS
#define NNC_W8_ROWS 16
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

/* 16 weight bytes, read once: kept out of L1, which holds A. */
__device__ __forceinline__ uint4 load_weight(const signed char *p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
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
  if (f.M < 0 || f.N < 0 || f.K < 0 || f.K % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected M, N >= 0 and K a multiple of 16, found M=%d N=%d K=%d",
                         f.M, f.N, f.K);
  if ((unsigned)f.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected an nnc_cuda_act (%d to %d), found act %d",
                         (int)NNC_CUDA_ACT_NONE, (int)NNC_CUDA_ACT_SILU, (int)f.act);
  if (f.M == 0 || f.N == 0) return NNC_CUDA_OK;
  if (!f.a || !f.w || !f.w_scale || !f.d)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a, w, w_scale and d, found a NULL one (a=%p w=%p "
                         "w_scale=%p d=%p)", (const void *)f.a, (const void *)f.w, (const void *)f.w_scale, (void *)f.d);
  const uintptr_t pa = reinterpret_cast<uintptr_t>(f.a), pw = reinterpret_cast<uintptr_t>(f.w);
  const uintptr_t pd = reinterpret_cast<uintptr_t>(f.d), pr = reinterpret_cast<uintptr_t>(f.residual);
  const uintptr_t pb = reinterpret_cast<uintptr_t>(f.bias), ps = reinterpret_cast<uintptr_t>(f.w_scale);
  if (pa % 16 || pw % 16 || pd % sizeof(TO) || pr % sizeof(TO) || pb % sizeof(TO) || ps % sizeof(float))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected a, w 16-byte aligned, d, residual, bias %zu-byte and w_scale 4-byte aligned, found "
                         "a=%p w=%p d=%p residual=%p bias=%p w_scale=%p", sizeof(TO), (const void *)f.a,
                         (const void *)f.w, (void *)f.d, (const void *)f.residual, (const void *)f.bias,
                         (const void *)f.w_scale);
  const size_t ws_bytes = nnc_cuda_w8_ws_bytes<T>(f.M, f.N, f.K);
  if (ws_bytes && (!ws || reinterpret_cast<uintptr_t>(ws) % 16))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected a 16-byte aligned workspace of %zu bytes for M=%d > NNC_W8_ROWS=%d, found ws=%p",
                         ws_bytes, f.M, NNC_W8_ROWS, ws);
  if (!ws_bytes || !h || f.act == NNC_CUDA_ACT_SILU) return run_rows(f, s, err);

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
  /* a combination cuBLASLt never does (erf GELU, activation before the residual, a type pair): no dequantization */
  if (!nnrt_cuda_gemm_supported(&g, nullptr, 0)) return run_rows(f, s, err);

  const long long blocks = ((long long)f.N * (f.K / 16) + DQ_THREADS - 1) / DQ_THREADS;
  dequant_kernel<T><<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), DQ_THREADS, 0, s>>>(
      f.w, f.w_scale, f.N, f.K, static_cast<T *>(ws));
  if (nnc_cuda_check_launch(err, KERNEL)) return NNC_CUDA_E_LAUNCH;
  nnrt_error e = {};
  const nnrt_status st = nnrt_cuda_gemm_run(h, &g, s, &e);
  if (st == NNRT_OK) return NNC_CUDA_OK;
  /* no algorithm on this GPU: "unsupported: ..." from the runtime, or the heuristic's own NOT_SUPPORTED */
  if (st == NNRT_E_ARG && (std::strncmp(e.msg, "unsupported", 11) == 0 ||
                           std::strstr(e.msg, "CUBLAS_STATUS_NOT_SUPPORTED") != nullptr))
    return run_rows(f, s, err);
  return nnc_cuda_fail(err, st == NNRT_E_ARG ? NNC_CUDA_E_ARG : NNC_CUDA_E_LAUNCH, KERNEL, "cuBLASLt: %s", e.msg);
}

#endif
