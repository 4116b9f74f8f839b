/* templates/cuda/norm_bwd.cuh — the backward of layernorm and rmsnorm
 * (layernorm.cuh) over the last axis of x [rows, cols], for training: dx,
 * dgamma and dbeta in two kernels where a chain of reductions and
 * elementwise kernels took ~16.
 *
 * Per row, in f32, statistics recomputed from x as the forward computes
 * them (nothing saved): mean (0 for rmsnorm), rstd, xhat = (x - mean) *
 * rstd, g = dy * gamma,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (no mean(g) for rmsnorm),
 * and over the rows dgamma = sum dy * xhat, dbeta = sum dy. The row means
 * come from two sums per round: sum x and sum g, then sum (x - mean)^2 and
 * sum g (x - mean) (rmsnorm: sum x^2 and sum g x in one round).
 *
 *   nnc_cuda_status nnc_cuda_norm_bwd<E>(const nnc_cuda_norm_bwd_args<E> &a,
 *                                        cudaStream_t s, nnc_cuda_error *err);
 * E: float, __half, __nv_bfloat16. gamma may be NULL (1): dgamma is then
 * not written and may be NULL; dbeta may be NULL and is ignored for
 * rmsnorm. dx may be x or dy (same ld). work: a 16-byte aligned device
 * buffer of nnc_cuda_norm_bwd_workspace_bytes(rows, cols) bytes. Returns
 * NNC_CUDA_E_ARG (nothing launched) for a negative size, eps < 0, ld < cols,
 * a NULL or misaligned pointer, or cols > 2^21; NNC_CUDA_E_LAUNCH when the
 * runtime refuses. rows == 0 writes zeros to dgamma and dbeta; cols == 0
 * launches nothing. Never synchronizes.
 *
 * Deterministic, no atomics: the rows are cut into chunks of
 * NNC_NORM_BWD_CHUNK rows (fixed, whatever the GPU). A chunk adds its rows'
 * dy * xhat and dy, in a fixed order, into one row of partial sums in work;
 * then nnc_norm_bwd_finish_kernel adds the chunks' partials in chunk order
 * (in double) into dgamma and dbeta.
 *
 * Paths:
 * - rows in registers (nnc_norm_bwd_rows_kernel) when cols is a multiple of
 *   the 16-byte vector (8 bf16/f16, 4 f32), cols <= 4096, and every row of
 *   x, dy and dx starts on a 16-byte boundary: a block of 256 threads per
 *   chunk, groups of TPR threads (1, 2, 4 or 8 warps, the fewest that hold
 *   the row) each owning a row at a time, VPT vectors a thread (at most
 *   NNC_NORM_BWD_ELEMS elements). A thread keeps the same columns for every
 *   row of its chunk, so its dgamma / dbeta partials stay in registers; at
 *   the end the block's groups add theirs through shared memory in group
 *   order. x and dy are read once, dx written once. GPT-2's 768 bf16
 *   columns: 2 warps a row, 2 vectors a thread (the second on half the
 *   lanes), 16 rows a group.
 * - any other shape (odd cols, misaligned rows, wider rows): a block per row
 *   computes the row's four scalars (mean, rstd, mean(g), mean(g xhat)) into
 *   work, then a block per (chunk, 32 columns) writes dx and the partials,
 *   lanes across the columns, warps down the rows; x and dy are read twice
 *   (the second time mostly from L2). */
#ifndef NNC_CUDA_NORM_BWD_CUH
#define NNC_CUDA_NORM_BWD_CUH

#include "nnc_cuda.cuh"

template <typename E> struct nnc_cuda_norm_bwd_args {
  int rows, cols;
  int rms; /* 0: layernorm, 1: rmsnorm */
  float eps;
  const E *x;
  long long ldx;
  const E *dy;
  long long lddy;
  const E *gamma; /* may be NULL */
  E *dx;
  long long lddx;
  const E *dres; /* may be NULL: the residual stream's gradient, added to dx (may be dx) */
  long long lddres;
  E *dgamma; /* may be NULL */
  E *dbeta;  /* may be NULL; ignored for rms */
  float *work; /* nnc_cuda_norm_bwd_workspace_bytes(rows, cols) bytes */
};

/* Rows per chunk: 64 rows make GPT-2's 16384 rows 256 blocks (one wave of
 * two blocks per SM on an H100) and keep the partials (two float rows per
 * chunk) at 1/32 of what the row kernel reads in bf16. */
constexpr int NNC_NORM_BWD_CHUNK = 64;
constexpr int NNC_NORM_BWD_THREADS = 256;
/* Elements a thread of the register path holds: with x and dy as loaded,
 * gamma and the two partials, 16 keep it under 128 registers, two blocks an
 * SM (24, a warp per GPT-2 bf16 row, took 158 and spilled under the cap). */
constexpr int NNC_NORM_BWD_ELEMS = 16;

__host__ __device__ inline long long nnc_norm_bwd_chunks(int rows) {
  return ((long long)rows + NNC_NORM_BWD_CHUNK - 1) / NNC_NORM_BWD_CHUNK;
}

/* work: partials of dgamma [chunks][cols], of dbeta [chunks][cols], then
 * the generic path's four scalars per row. */
inline size_t nnc_cuda_norm_bwd_workspace_bytes(int rows, int cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return (2 * (size_t)nnc_norm_bwd_chunks(rows) * (size_t)cols + 4 * (size_t)rows) * sizeof(float);
}

/* Sums (a, b) over the TPR threads of a group: TPR/32 whole warps, blockDim.x
 * a multiple of TPR; red holds blockDim.x / 32 entries. Every thread of the
 * block must call it (barriers); the warps' sums are added in warp order. */
template <int TPR> __device__ __forceinline__ float2 nnc_norm_bwd_sum2(float a, float b, float2 *red) {
  static_assert(TPR % 32 == 0, "a group is whole warps");
  a = nnc_warp_reduce<nnc_sum_op, 32>(a);
  b = nnc_warp_reduce<nnc_sum_op, 32>(b);
  if constexpr (TPR > 32) {
    constexpr int W = TPR / 32;
    const int warp = threadIdx.x / 32, first = warp / W * W;
    if (threadIdx.x % 32 == 0) red[warp] = make_float2(a, b);
    __syncthreads();
    a = red[first].x, b = red[first].y;
#pragma unroll
    for (int w = 1; w < W; ++w) a += red[first + w].x, b += red[first + w].y;
    __syncthreads();
  }
  return make_float2(a, b);
}

/* A row's scalars, from its sums. */
struct nnc_norm_bwd_row {
  float mean, rstd, mg, mgx; /* dx = rstd * (g - (xhat * mgx + mg)) */
};

/* Converts the VEC elements of a raw 16-byte vector. */
template <typename E> __device__ __forceinline__ float nnc_norm_bwd_at(const uint4 &v, int j) {
  return nnc_dtype<E>::load(reinterpret_cast<const E *>(&v)[j]);
}

/* The register path: a block per chunk, groups of TPR threads, VPT vectors
 * a thread. x and dy stay as loaded (raw, half the registers of floats for
 * bf16/f16), gamma and the partials as floats. */
template <typename E, int TPR, int VPT>
__global__ void __launch_bounds__(NNC_NORM_BWD_THREADS, 2) nnc_norm_bwd_rows_kernel(const nnc_cuda_norm_bwd_args<E> a) {
  constexpr int VEC = nnc_dtype<E>::VEC, G = NNC_NORM_BWD_THREADS / TPR;
  static_assert(NNC_NORM_BWD_CHUNK % G == 0, "every group takes the same number of rows");
  __shared__ float2 red[NNC_NORM_BWD_THREADS / 32];
  __shared__ float part[G * TPR * VPT * VEC]; /* [G][cols] */
  const int grp = threadIdx.x / TPR, lane = threadIdx.x % TPR, nvec = a.cols / VEC;
  const float inv_n = 1.0f / (float)a.cols;
  float gam[VPT][VEC], dg[VPT][VEC], db[VPT][VEC];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int col = (i * TPR + lane) * VEC;
    if (a.gamma && col < a.cols) nnc_load_vec_any(a.gamma + col, gam[i]);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (!a.gamma || col >= a.cols) gam[i][j] = 1.0f;
      dg[i][j] = db[i][j] = 0.0f;
    }
  }
  for (int it = 0; it < NNC_NORM_BWD_CHUNK / G; ++it) {
    const long long r = (long long)blockIdx.x * NNC_NORM_BWD_CHUNK + it * G + grp;
    const bool live = r < a.rows;
    /* all loads first; what is not loaded is 0 and adds 0 to every sum */
    uint4 xv[VPT], dv[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int col = (i * TPR + lane) * VEC;
      xv[i] = dv[i] = make_uint4(0, 0, 0, 0);
      if (live && i * TPR + lane < nvec) {
        xv[i] = *reinterpret_cast<const uint4 *>(a.x + r * a.ldx + col);
        dv[i] = *reinterpret_cast<const uint4 *>(a.dy + r * a.lddy + col);
      }
    }
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float x = nnc_norm_bwd_at<E>(xv[i], j), g = nnc_norm_bwd_at<E>(dv[i], j) * gam[i][j];
        s1 = a.rms ? fmaf(x, x, s1) : s1 + x;
        s2 = a.rms ? fmaf(g, x, s2) : s2 + g;
      }
    const float2 s = nnc_norm_bwd_sum2<TPR>(s1, s2, red);
    nnc_norm_bwd_row k;
    if (a.rms) {
      k.mean = 0.0f, k.mg = 0.0f;
      k.rstd = rsqrtf(s.x * inv_n + a.eps);
      k.mgx = s.y * k.rstd * inv_n;
    } else {
      k.mean = s.x * inv_n, k.mg = s.y * inv_n;
      float v = 0.0f, w = 0.0f;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        if (i * TPR + lane >= nvec) continue; /* padding would add mean^2 */
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float d = nnc_norm_bwd_at<E>(xv[i], j) - k.mean;
          v = fmaf(d, d, v);
          w = fmaf(nnc_norm_bwd_at<E>(dv[i], j) * gam[i][j], d, w);
        }
      }
      const float2 t = nnc_norm_bwd_sum2<TPR>(v, w, red);
      k.rstd = rsqrtf(t.x * inv_n + a.eps);
      k.mgx = t.y * k.rstd * inv_n;
    }
    if (!live) continue; /* after the reductions, which need every thread */
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int col = (i * TPR + lane) * VEC;
      if (i * TPR + lane >= nvec) continue;
      float out[VEC];
      uint4 rv = {0u, 0u, 0u, 0u};
      if (a.dres) rv = *reinterpret_cast<const uint4 *>(a.dres + r * a.lddres + col);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = nnc_norm_bwd_at<E>(dv[i], j), xh = (nnc_norm_bwd_at<E>(xv[i], j) - k.mean) * k.rstd;
        out[j] = k.rstd * (d * gam[i][j] - fmaf(xh, k.mgx, k.mg)) + (a.dres ? nnc_norm_bwd_at<E>(rv, j) : 0.0f);
        dg[i][j] = fmaf(d, xh, dg[i][j]);
        db[i][j] += d;
      }
      nnc_store_vec(a.dx + r * a.lddx + col, out);
    }
  }
  /* The chunk's partials: each group's into shared memory, then summed in
   * group order, dgamma's and then dbeta's. */
  float *const outs[2] = {a.dgamma ? a.work : nullptr,
                          a.dbeta ? a.work + nnc_norm_bwd_chunks(a.rows) * a.cols : nullptr};
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    if (!outs[q]) continue; /* uniform over the block */
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int col = (i * TPR + lane) * VEC;
      if (i * TPR + lane < nvec)
#pragma unroll
        for (int j = 0; j < VEC; ++j) part[grp * a.cols + col + j] = q ? db[i][j] : dg[i][j];
    }
    __syncthreads();
    float *dst = outs[q] + (long long)blockIdx.x * a.cols;
    for (int c = threadIdx.x; c < a.cols; c += NNC_NORM_BWD_THREADS) {
      float t = part[c];
#pragma unroll
      for (int g = 1; g < G; ++g) t += part[g * a.cols + c];
      dst[c] = t;
    }
    __syncthreads();
  }
}

/* The generic path, step 1: a block per row, strided scalar loads, the
 * row's scalars into stats[4 * row]. */
template <typename E>
__global__ void __launch_bounds__(NNC_NORM_BWD_THREADS) nnc_norm_bwd_stats_kernel(const nnc_cuda_norm_bwd_args<E> a,
                                                                                  float *stats) {
  __shared__ float2 red[NNC_NORM_BWD_THREADS / 32];
  const long long r = blockIdx.x;
  const E *x = a.x + r * a.ldx, *dy = a.dy + r * a.lddy;
  const float inv_n = 1.0f / (float)a.cols;
  float s1 = 0.0f, s2 = 0.0f;
  for (int c = threadIdx.x; c < a.cols; c += NNC_NORM_BWD_THREADS) {
    const float v = nnc_dtype<E>::load(x[c]);
    const float g = nnc_dtype<E>::load(dy[c]) * (a.gamma ? nnc_dtype<E>::load(a.gamma[c]) : 1.0f);
    s1 = a.rms ? fmaf(v, v, s1) : s1 + v;
    s2 = a.rms ? fmaf(g, v, s2) : s2 + g;
  }
  const float2 s = nnc_norm_bwd_sum2<NNC_NORM_BWD_THREADS>(s1, s2, red);
  nnc_norm_bwd_row k;
  if (a.rms) {
    k.mean = 0.0f, k.mg = 0.0f;
    k.rstd = rsqrtf(s.x * inv_n + a.eps);
    k.mgx = s.y * k.rstd * inv_n;
  } else {
    k.mean = s.x * inv_n, k.mg = s.y * inv_n;
    float v = 0.0f, w = 0.0f;
    for (int c = threadIdx.x; c < a.cols; c += NNC_NORM_BWD_THREADS) {
      const float d = nnc_dtype<E>::load(x[c]) - k.mean;
      const float g = nnc_dtype<E>::load(dy[c]) * (a.gamma ? nnc_dtype<E>::load(a.gamma[c]) : 1.0f);
      v = fmaf(d, d, v);
      w = fmaf(g, d, w);
    }
    const float2 t = nnc_norm_bwd_sum2<NNC_NORM_BWD_THREADS>(v, w, red);
    k.rstd = rsqrtf(t.x * inv_n + a.eps);
    k.mgx = t.y * k.rstd * inv_n;
  }
  if (threadIdx.x == 0) {
    float *o = stats + 4 * r;
    o[0] = k.mean, o[1] = k.rstd, o[2] = k.mg, o[3] = k.mgx;
  }
}

/* The generic path, step 2: a block per (chunk, 32 columns); lane = column,
 * warp w takes rows w, w + 8, ... of the chunk; the 8 warps' partials are
 * added in warp order. */
template <typename E>
__global__ void __launch_bounds__(NNC_NORM_BWD_THREADS) nnc_norm_bwd_cols_kernel(const nnc_cuda_norm_bwd_args<E> a,
                                                                                 const float *stats) {
  constexpr int WARPS = NNC_NORM_BWD_THREADS / 32;
  __shared__ float part[2][WARPS][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c = blockIdx.y * 32 + lane;
  float dg = 0.0f, db = 0.0f;
  if (c < a.cols) {
    const float gam = a.gamma ? nnc_dtype<E>::load(a.gamma[c]) : 1.0f;
    for (int it = w; it < NNC_NORM_BWD_CHUNK; it += WARPS) {
      const long long r = (long long)blockIdx.x * NNC_NORM_BWD_CHUNK + it;
      if (r >= a.rows) break;
      const float *k = stats + 4 * r;
      const float d = nnc_dtype<E>::load(a.dy[r * a.lddy + c]);
      const float xh = (nnc_dtype<E>::load(a.x[r * a.ldx + c]) - k[0]) * k[1];
      const float res = a.dres ? nnc_dtype<E>::load(a.dres[r * a.lddres + c]) : 0.0f;
      a.dx[r * a.lddx + c] = nnc_dtype<E>::store(k[1] * (d * gam - fmaf(xh, k[3], k[2])) + res);
      dg = fmaf(d, xh, dg);
      db += d;
    }
  }
  part[0][w][lane] = dg;
  part[1][w][lane] = db;
  __syncthreads();
  if (w < 2 && c < a.cols) {
    float *dst = w == 0 ? (a.dgamma ? a.work : nullptr) : (a.dbeta ? a.work + nnc_norm_bwd_chunks(a.rows) * a.cols : nullptr);
    if (dst) {
      float t = part[w][0][lane];
#pragma unroll
      for (int k = 1; k < WARPS; ++k) t += part[w][k][lane];
      dst[(long long)blockIdx.x * a.cols + c] = t;
    }
  }
}

/* dgamma (blockIdx.y 0) and dbeta (1): a block per 32 columns, 32 warps,
 * warp w adding chunks w, w + 32, ... in double, then the warps' sums in
 * warp order. */
template <typename E>
__global__ void __launch_bounds__(1024) nnc_norm_bwd_finish_kernel(const float *work, int chunks, int cols, E *dgamma,
                                                                   E *dbeta) {
  __shared__ double part[32][33];
  E *out = blockIdx.y == 0 ? dgamma : dbeta;
  if (!out) return; /* the whole block */
  const float *p = work + (size_t)blockIdx.y * chunks * cols;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
  double t = 0.0;
  if (c < cols)
#pragma unroll 4
    for (int k = w; k < chunks; k += 32) t += p[(size_t)k * cols + c];
  part[w][lane] = t;
  __syncthreads();
  if (w == 0 && c < cols) {
    double s = part[0][lane];
    for (int k = 1; k < 32; ++k) s += part[k][lane];
    out[c] = nnc_dtype<E>::store((float)s);
  }
}

/* Launches the register path when nvec vectors fit TPR threads of VPT. */
template <typename E, int TPR, int VPT>
inline bool nnc_norm_bwd_try(int nvec, const nnc_cuda_norm_bwd_args<E> &a, unsigned blocks, cudaStream_t s) {
  static_assert(VPT * nnc_dtype<E>::VEC <= NNC_NORM_BWD_ELEMS, "too many registers");
  if (nvec > TPR * VPT) return false;
  nnc_norm_bwd_rows_kernel<E, TPR, VPT><<<blocks, NNC_NORM_BWD_THREADS, 0, s>>>(a);
  return true;
}

/* The smallest group that holds the row, then the fewest vectors a thread;
 * false for rows of more than 256 * 16 elements. */
template <typename E>
inline bool nnc_norm_bwd_launch_rows(int nvec, const nnc_cuda_norm_bwd_args<E> &a, unsigned blocks, cudaStream_t s) {
  if constexpr (nnc_dtype<E>::VEC == 8)
    return nnc_norm_bwd_try<E, 32, 1>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 32, 2>(nvec, a, blocks, s) ||
           nnc_norm_bwd_try<E, 64, 2>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 128, 2>(nvec, a, blocks, s) ||
           nnc_norm_bwd_try<E, 256, 2>(nvec, a, blocks, s);
  else
    return nnc_norm_bwd_try<E, 32, 1>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 32, 2>(nvec, a, blocks, s) ||
           nnc_norm_bwd_try<E, 32, 3>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 32, 4>(nvec, a, blocks, s) ||
           nnc_norm_bwd_try<E, 64, 3>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 64, 4>(nvec, a, blocks, s) ||
           nnc_norm_bwd_try<E, 128, 3>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 128, 4>(nvec, a, blocks, s) ||
           nnc_norm_bwd_try<E, 256, 3>(nvec, a, blocks, s) || nnc_norm_bwd_try<E, 256, 4>(nvec, a, blocks, s);
}

template <typename E>
nnc_cuda_status nnc_cuda_norm_bwd(const nnc_cuda_norm_bwd_args<E> &args, cudaStream_t s, nnc_cuda_error *err) {
  const char *const KERNEL = "nnc_cuda_norm_bwd";
  nnc_cuda_norm_bwd_args<E> a = args;
  if (a.rows < 0 || a.cols < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected rows, cols >= 0, found rows=%d cols=%d", a.rows,
                         a.cols);
  if (!(a.eps >= 0.0f)) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected eps >= 0, found %g", (double)a.eps);
  /* the grids: column tiles of 32 in y */
  if (a.cols > 65535 * 32)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected cols <= %d, found %d", 65535 * 32, a.cols);
  /* what is written: dgamma only with a gamma, dbeta only for layernorm */
  if (!a.gamma) a.dgamma = nullptr;
  if (a.rms) a.dbeta = nullptr;
  if (a.cols == 0) return NNC_CUDA_OK;
  const bool has_rows = a.rows > 0;
  const struct {
    const void *p;
    const char *name;
    bool need;
    size_t align;
  } ptrs[8] = {{a.x, "x", has_rows, sizeof(E)},      {a.dy, "dy", has_rows, sizeof(E)},
               {a.dx, "dx", has_rows, sizeof(E)},    {a.work, "work", has_rows, 16},
               {a.gamma, "gamma", false, sizeof(E)}, {a.dgamma, "dgamma", false, sizeof(E)},
               {a.dbeta, "dbeta", false, sizeof(E)}, {a.dres, "dres", false, sizeof(E)}};
  for (const auto &p : ptrs) {
    if (p.need && !p.p)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a device pointer for %s, found NULL", p.name);
    if (reinterpret_cast<uintptr_t>(p.p) % p.align != 0)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected %s aligned to %zu bytes, found %p", p.name, p.align,
                           p.p);
  }
  if (has_rows && (a.ldx < a.cols || a.lddy < a.cols || a.lddx < a.cols || (a.dres && a.lddres < a.cols)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected ldx, lddy, lddx (and lddres) >= cols=%d, found %lld, "
                         "%lld, %lld, %lld", a.cols, a.ldx, a.lddy, a.lddx, a.lddres);
  const long long chunks = nnc_norm_bwd_chunks(a.rows);
  if (has_rows) {
    constexpr int VEC = nnc_dtype<E>::VEC;
    /* every row of x, dy and dx on a 16-byte boundary */
    const auto rows16 = [&](const void *p, long long ld) {
      return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (a.rows == 1 || ld * (long long)sizeof(E) % 16 == 0);
    };
    const bool vec = a.cols % VEC == 0 && rows16(a.x, a.ldx) && rows16(a.dy, a.lddy) && rows16(a.dx, a.lddx) &&
                     (!a.dres || rows16(a.dres, a.lddres));
    if (!vec || !nnc_norm_bwd_launch_rows(a.cols / VEC, a, (unsigned)chunks, s)) {
      float *stats = a.work + 2 * chunks * a.cols;
      nnc_norm_bwd_stats_kernel<E><<<(unsigned)a.rows, NNC_NORM_BWD_THREADS, 0, s>>>(a, stats);
      const dim3 grid((unsigned)chunks, (unsigned)((a.cols + 31) / 32));
      nnc_norm_bwd_cols_kernel<E><<<grid, NNC_NORM_BWD_THREADS, 0, s>>>(a, stats);
    }
  }
  if (a.dgamma || a.dbeta)
    nnc_norm_bwd_finish_kernel<E><<<dim3((unsigned)((a.cols + 31) / 32), 2), 1024, 0, s>>>(a.work, (int)chunks, a.cols,
                                                                                          a.dgamma, a.dbeta);
  return nnc_cuda_check_launch(err, KERNEL);
}

#endif
