/* templates/cuda/gemm.cuh — our tensor-core GEMM (bf16/f16 in, f32
 * accumulate) with a LayerNorm/RMSNorm prologue on the rows of A, which
 * cuBLASLt cannot fuse, and a register epilogue.
 *
 *   out = act(alpha * (norm(a) . b) + bias) + residual        (batch times)
 *   norm(x)_k = (x_k - mean) * rstd * gamma_k + beta_k,  rstd = 1/sqrt(var + eps)
 *               (population variance over the K elements of the row)
 *   rms:        x_k / sqrt(mean(x^2) + eps) * gamma_k
 *
 * Interface (types in gemm_args.cuh):
 *   enum nnc_cuda_act  { NNC_CUDA_ACT_NONE, _RELU, _GELU_ERF, _GELU_TANH, _SILU };
 *   enum nnc_cuda_norm { NNC_CUDA_NORM_NONE, _LAYER, _RMS };
 *   template <typename T> struct nnc_cuda_gemm_args {
 *     int M, N, K, batch; const T *a; long long lda, stride_a;
 *     const T *b; long long ldb, stride_b; int b_trans;
 *     const T *bias; const T *residual; long long ldr, stride_r;
 *     T *out; long long ldc, stride_c; float alpha; nnc_cuda_act act;
 *     nnc_cuda_norm norm; const T *gamma; const T *beta; float eps; };
 *   size_t nnc_cuda_gemm_workspace_bytes<T>(const nnc_cuda_gemm_args<T> &);
 *   nnc_cuda_status nnc_cuda_gemm<T>(const nnc_cuda_gemm_args<T> &, void *workspace,
 *                                    size_t workspace_bytes, cudaStream_t, nnc_cuda_error *);
 *   nnc_cuda_status nnc_cuda_gemm_ex<T>(..., nnc_cuda_gemm_config cfg, ...): the same with the
 *                                    tile configuration forced (tests and benchmarks).
 * T is __nv_bfloat16 or __half (f32 GEMMs go to cuBLASLt). Two launches on
 * the stream when norm != NONE: the row statistics (gemm_stats.cuh) into
 * the workspace, batch * M * 8 bytes, then the tile kernel (gemm_kernel.cuh).
 *
 * What it accepts (else NNC_CUDA_E_ARG, nothing launched, and err->msg says
 * which argument; the emitter then calls cuBLASLt):
 *   M, N, K >= 0, batch >= 0 (any zero but K launches nothing; K == 0 gives
 *   act(bias) + residual); N % 8 == 0 and K % 8 == 0;
 *   a and b 16-byte aligned, lda, ldb, stride_a, stride_b multiples of 8,
 *   lda >= K, ldb >= K (b_trans) or >= N;
 *   out, residual and bias 4-byte aligned, ldc, ldr, stride_c, stride_r
 *   even, ldc, ldr >= N; gamma, beta element-aligned (NULL: 1 and 0);
 *   eps >= 0; ceil(M / 128) and batch <= 65535 (grid limits);
 *   workspace 8-byte aligned, at least nnc_cuda_gemm_workspace_bytes.
 * residual may be out itself (each element is read, then written, by the
 * same thread) but must not otherwise overlap it; out must not overlap a or
 * b. Never synchronizes. */
#ifndef NNC_CUDA_GEMM_CUH
#define NNC_CUDA_GEMM_CUH

#include <atomic>
#include <type_traits>

#include "gemm_args.cuh"
#include "gemm_kernel.cuh"
#include "gemm_stats.cuh"

/* Tile configurations: BM x BN x BK, warps, stages. AUTO picks by shape. */
enum nnc_cuda_gemm_config {
  NNC_CUDA_GEMM_AUTO,
  NNC_CUDA_GEMM_128x128x32, /* 2 x 2 warps of 64 x 64, 4 stages: 80 KB, 2 blocks an SM */
  NNC_CUDA_GEMM_128x256x32, /* 2 x 4 warps of 64 x 64, 4 stages: 120 KB, 1 block an SM */
  NNC_CUDA_GEMM_128x128x64, /* 2 x 2 warps of 64 x 64, 3 stages: 108 KB, 2 blocks an SM */
  NNC_CUDA_GEMM_64x64x32,   /* 2 x 2 warps of 32 x 32, 4 stages: 40 KB, for few tiles */
  NNC_CUDA_GEMM_CONFIG_COUNT
};

using nnc_gemm_tile_128x128x32 = nnc_gemm_tile<128, 128, 32, 2, 2, 4>;
using nnc_gemm_tile_128x256x32 = nnc_gemm_tile<128, 256, 32, 2, 4, 4>;
using nnc_gemm_tile_128x128x64 = nnc_gemm_tile<128, 128, 64, 2, 2, 3>;
using nnc_gemm_tile_64x64x32 = nnc_gemm_tile<64, 64, 32, 2, 2, 4>;

inline const char *nnc_cuda_gemm_config_name(nnc_cuda_gemm_config c) {
  switch (c) {
  case NNC_CUDA_GEMM_128x128x32: return "128x128x32";
  case NNC_CUDA_GEMM_128x256x32: return "128x256x32";
  case NNC_CUDA_GEMM_128x128x64: return "128x128x64";
  case NNC_CUDA_GEMM_64x64x32: return "64x64x32";
  default: return "auto";
  }
}

template <typename T> size_t nnc_cuda_gemm_workspace_bytes(const nnc_cuda_gemm_args<T> &a) {
  if (a.norm == NNC_CUDA_NORM_NONE || a.M <= 0 || a.K <= 0 || a.batch <= 0) return 0;
  return (size_t)a.M * (size_t)a.batch * sizeof(float2);
}

template <typename T, class C, bool B_TRANS, bool NORM>
cudaError_t nnc_gemm_launch_tile(const nnc_cuda_gemm_args<T> &a, const float2 *stats, cudaStream_t s) {
  auto kernel = nnc_gemm_kernel<T, C, B_TRANS, NORM>;
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, C::SMEM_BYTES, raised);
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((a.N + C::BN - 1) / C::BN), (unsigned)((a.M + C::BM - 1) / C::BM),
                  (unsigned)a.batch);
  kernel<<<grid, C::THREADS, C::SMEM_BYTES, s>>>(a, stats);
  return cudaSuccess;
}

template <typename T, class C>
cudaError_t nnc_gemm_launch_cfg(const nnc_cuda_gemm_args<T> &a, const float2 *stats, cudaStream_t s) {
  const bool norm = a.norm != NNC_CUDA_NORM_NONE && a.K > 0;
  if (a.b_trans)
    return norm ? nnc_gemm_launch_tile<T, C, true, true>(a, stats, s)
                : nnc_gemm_launch_tile<T, C, true, false>(a, stats, s);
  return norm ? nnc_gemm_launch_tile<T, C, false, true>(a, stats, s)
              : nnc_gemm_launch_tile<T, C, false, false>(a, stats, s);
}

inline size_t nnc_gemm_config_smem(nnc_cuda_gemm_config c) {
  switch (c) {
  case NNC_CUDA_GEMM_128x256x32: return nnc_gemm_tile_128x256x32::SMEM_BYTES;
  case NNC_CUDA_GEMM_128x128x64: return nnc_gemm_tile_128x128x64::SMEM_BYTES;
  case NNC_CUDA_GEMM_64x64x32: return nnc_gemm_tile_64x64x32::SMEM_BYTES;
  default: return nnc_gemm_tile_128x128x32::SMEM_BYTES;
  }
}

/* Big tiles once there are two 128 x 128 tiles per SM (one wave of the
 * 128 x 256 blocks, one per SM); below that the 64 x 64 tiles spread the
 * work over more SMs. 128x256x32 was the fastest big tile on an H100 for
 * LN + linear + GELU and for plain linear (bench/gpu_gemm.sh): the 128 x 128
 * tiles are bound by L2-to-SM traffic (ncu: L2 71% busy on plain linear). A configuration whose shared memory
 * the device cannot give a block falls back to the small one. */
inline nnc_cuda_gemm_config nnc_gemm_pick_config(int M, int N, int batch) {
  int dev = 0, sms = 132, smem_optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError(); /* the launch reports any real trouble */
    return NNC_CUDA_GEMM_64x64x32;
  }
  const long long big_tiles = (long long)((M + 127) / 128) * ((N + 127) / 128) * batch;
  const nnc_cuda_gemm_config big = NNC_CUDA_GEMM_128x256x32;
  if (big_tiles >= 2LL * sms && nnc_gemm_config_smem(big) <= (size_t)smem_optin) return big;
  return NNC_CUDA_GEMM_64x64x32;
}

template <typename T>
nnc_cuda_status nnc_cuda_gemm_ex(const nnc_cuda_gemm_args<T> &a, nnc_cuda_gemm_config cfg,
                                 void *workspace, size_t workspace_bytes, cudaStream_t stream,
                                 nnc_cuda_error *err) {
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                "nnc_cuda_gemm takes bf16 or f16; f32 GEMMs go to cuBLASLt");
  const char *kn = "nnc_cuda_gemm";
  if (a.M < 0 || a.N < 0 || a.K < 0 || a.batch < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected M, N, K, batch >= 0, found %d, %d, %d, %d",
                         a.M, a.N, a.K, a.batch);
  if (a.N % 8 || a.K % 8)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected N and K multiples of 8 (16-byte rows), found N=%d K=%d; use cuBLASLt",
                         a.N, a.K);
  if ((unsigned)a.act > (unsigned)NNC_CUDA_ACT_SILU || (unsigned)a.norm > (unsigned)NNC_CUDA_NORM_RMS)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "unknown act %d or norm %d", (int)a.act, (int)a.norm);
  if ((unsigned)cfg >= (unsigned)NNC_CUDA_GEMM_CONFIG_COUNT)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "unknown tile configuration %d", (int)cfg);
  if (a.M == 0 || a.N == 0 || a.batch == 0) return NNC_CUDA_OK;
  if (!a.out || (a.K > 0 && (!a.a || !a.b)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected a, b and out, found a=%p b=%p out=%p",
                         (const void *)a.a, (const void *)a.b, (void *)a.out);
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a.a), pb = reinterpret_cast<uintptr_t>(a.b);
  if (a.K > 0 && (pa % 16 || pb % 16 || a.lda % 8 || a.ldb % 8 || a.stride_a % 8 || a.stride_b % 8))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected a, b 16-byte aligned and lda, ldb, stride_a, stride_b multiples of 8, "
                         "found a=%p b=%p lda=%lld ldb=%lld stride_a=%lld stride_b=%lld; use cuBLASLt",
                         (const void *)a.a, (const void *)a.b, a.lda, a.ldb, a.stride_a, a.stride_b);
  if (a.K > 0 && (a.lda < a.K || a.ldb < (a.b_trans ? a.K : a.N) || a.stride_a < 0 || a.stride_b < 0))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected lda >= K=%d, ldb >= %s=%d, strides >= 0, found lda=%lld ldb=%lld "
                         "stride_a=%lld stride_b=%lld",
                         a.K, a.b_trans ? "K" : "N", a.b_trans ? a.K : a.N, a.lda, a.ldb, a.stride_a,
                         a.stride_b);
  const uintptr_t pc = reinterpret_cast<uintptr_t>(a.out), pr = reinterpret_cast<uintptr_t>(a.residual),
                  pbias = reinterpret_cast<uintptr_t>(a.bias);
  if (pc % 4 || pr % 4 || pbias % 4 || a.ldc % 2 || a.stride_c % 2 || (a.residual && (a.ldr % 2 || a.stride_r % 2)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected out, residual, bias 4-byte aligned and ldc, ldr, stride_c, stride_r "
                         "even, found out=%p residual=%p bias=%p ldc=%lld ldr=%lld stride_c=%lld "
                         "stride_r=%lld",
                         (void *)a.out, (const void *)a.residual, (const void *)a.bias, a.ldc, a.ldr,
                         a.stride_c, a.stride_r);
  if (a.ldc < a.N || a.stride_c < 0 || (a.residual && (a.ldr < a.N || a.stride_r < 0)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected ldc, ldr >= N=%d and strides >= 0, found ldc=%lld ldr=%lld "
                         "stride_c=%lld stride_r=%lld",
                         a.N, a.ldc, a.ldr, a.stride_c, a.stride_r);
  const bool norm = a.norm != NNC_CUDA_NORM_NONE && a.K > 0;
  if (norm) {
    const uintptr_t pg = reinterpret_cast<uintptr_t>(a.gamma), pbe = reinterpret_cast<uintptr_t>(a.beta);
    if (pg % sizeof(T) || pbe % sizeof(T) || !(a.eps >= 0.0f))
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                           "expected gamma, beta %zu-byte aligned and eps >= 0, found gamma=%p beta=%p "
                           "eps=%g",
                           sizeof(T), (const void *)a.gamma, (const void *)a.beta, (double)a.eps);
    const size_t need = nnc_cuda_gemm_workspace_bytes(a);
    if (!workspace || workspace_bytes < need || reinterpret_cast<uintptr_t>(workspace) % 8)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                           "expected an 8-byte aligned workspace of %zu bytes for the row statistics, "
                           "found %p of %zu bytes",
                           need, workspace, workspace_bytes);
  }
  if (cfg == NNC_CUDA_GEMM_AUTO) cfg = nnc_gemm_pick_config(a.M, a.N, a.batch);
  const int bm = cfg == NNC_CUDA_GEMM_64x64x32 ? 64 : 128;
  if ((a.M + bm - 1) / bm > 65535 || a.batch > 65535)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected ceil(M / %d) and batch <= 65535 (grid), found M=%d batch=%d", bm, a.M,
                         a.batch);

  nnc_cuda_gemm_args<T> g = a;
  if (a.norm == NNC_CUDA_NORM_RMS) g.beta = nullptr;
  const float2 *stats = static_cast<const float2 *>(workspace);
  if (norm) {
    const nnc_cuda_status st =
        nnc_cuda_gemm_row_stats(a.a, a.lda, a.stride_a, a.M, a.K, a.batch, a.norm == NNC_CUDA_NORM_RMS,
                                a.eps, static_cast<float2 *>(workspace), stream, err);
    if (st != NNC_CUDA_OK) return st;
  }
  cudaError_t e;
  switch (cfg) {
  case NNC_CUDA_GEMM_128x256x32: e = nnc_gemm_launch_cfg<T, nnc_gemm_tile_128x256x32>(g, stats, stream); break;
  case NNC_CUDA_GEMM_128x128x64: e = nnc_gemm_launch_cfg<T, nnc_gemm_tile_128x128x64>(g, stats, stream); break;
  case NNC_CUDA_GEMM_64x64x32: e = nnc_gemm_launch_cfg<T, nnc_gemm_tile_64x64x32>(g, stats, stream); break;
  default: e = nnc_gemm_launch_cfg<T, nnc_gemm_tile_128x128x32>(g, stats, stream); break;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, kn, "tile %s: %s (%s)", nnc_cuda_gemm_config_name(cfg),
                         cudaGetErrorString(e), cudaGetErrorName(e));
  }
  return nnc_cuda_check_launch(err, kn);
}

template <typename T>
nnc_cuda_status nnc_cuda_gemm(const nnc_cuda_gemm_args<T> &a, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream, nnc_cuda_error *err) {
  return nnc_cuda_gemm_ex(a, NNC_CUDA_GEMM_AUTO, workspace, workspace_bytes, stream, err);
}

#endif
