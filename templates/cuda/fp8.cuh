/* templates/cuda/fp8.cuh — --precision=fp8's kernels: e4m3 operands for
 * cuBLASLt's FP8 GEMMs and the GEMM call itself.
 *
 * Weights (per output channel, max|w| / 448, held [N, K]) and activations
 * (a scale per row, max|a| / 448, or a fixed one from `nnc calibrate`;
 * fused with the layernorm or rmsnorm the GEMM reads) are quantized by
 * quant_rows.cuh's kernels in its e4m3 format.
 * The GEMM: cuBLASLt e4m3 x e4m3 with both scale vectors
 * (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: Hopper only) and the bias,
 * activation and residual in its epilogue. Where cuBLASLt has no algorithm
 * for that (Ada; a combination it lacks: rows of D not 16-byte aligned, as
 * GPT-2's tied head's 50257), on sm_90a nnc's own wgmma FP8 GEMM
 * (gemm_tma8.cuh, or gemm_wgmma_fp8.cuh with -DNNC_FP8_TMA8=0: any N, the
 * scales and epilogue in its registers),
 * elsewhere the same product unscaled into f32 columns of the workspace, a
 * slice of columns at a time (all of A's rows against a few hundred of
 * W's: the slice stays in L2 for the epilogue), then one kernel applies
 * the scales, bias, activation and residual. On sm_90a our kernel can also
 * write a GEMM's output as e4m3 for the next GEMM's A when that A has a
 * fixed (calibrated) scale, which cuBLASLt refuses with scale vectors
 * (nnc_cuda_gemm_fp8_e4m3; no folder calls it: on an H200 GPT-2's c_fc
 * took 0.147 ms that way against cuBLASLt's 0.068 plus the reader's 0.033
 * row pass).
 *
 * Conversions round to nearest even and saturate to +-448 (cvt's
 * .satfinite), as runtime/half.c's nnrt_f32_to_e4m3 does on the host. */
#ifndef NNC_CUDA_FP8_CUH
#define NNC_CUDA_FP8_CUH

#include <cuda_fp8.h>

#include "nnc_cuda.cuh"
#include "quant_rows.cuh"
#include "runtime/cuda/nnrt_cuda.h"
#if defined(NNC_CUDA_SM90A)
#include "gemm_tma8.cuh"
#include "gemm_wgmma_fp8.cuh"
#endif

/* The fallback's f32 columns: at most this many bytes of workspace at a time. */
#define NNC_FP8_TMP_BYTES ((size_t)16 << 20)

/* Weights: w (N*K f32 on the device, [N, K] or, in_out, [K, N]) to e4m3
 * [N, K] in q with a scale per output channel in scale (max|w| / 448). */
inline nnc_cuda_status nnc_cuda_fp8_weight(const float *w, int N, int K, bool in_out, unsigned char *q, float *scale,
                                           cudaStream_t s, nnc_cuda_error *err) {
  return nnc_cuda_quant_weight<nnc_quant_e4m3>(w, N, K, in_out, nullptr, q, scale, s, "nnc_cuda_fp8_weight", err);
}

/* What a GEMM's A rows are before they are quantized (quant_rows.cuh's). */
enum nnc_fp8_norm { NNC_FP8_PLAIN = NNC_QUANT_PLAIN, NNC_FP8_LAYERNORM = NNC_QUANT_LAYERNORM, NNC_FP8_RMSNORM = NNC_QUANT_RMSNORM };

/* Row r of x [rows, cols] (leading dimension ldx), normalized as norm says
 * (gamma, beta: cols elements or NULL), to e4m3 in q [rows, cols] with its
 * scale in scale[r]: the row's max |value| / 448, or *fixed where fixed is
 * not NULL and *fixed > 0 (a device float: nnc calibrate's scale). */
template <typename T>
nnc_cuda_status nnc_cuda_fp8_rows(nnc_fp8_norm norm, int rows, int cols, const T *x, long long ldx, const T *gamma,
                                  const T *beta, float eps, const float *fixed, unsigned char *q, float *scale,
                                  cudaStream_t s, nnc_cuda_error *err) {
  return nnc_cuda_quant_rows<nnc_quant_e4m3, T>((nnc_quant_norm)norm, rows, cols, x, ldx, gamma, beta, eps, fixed, nullptr, q,
                                                scale, s, "nnc_cuda_fp8_rows", err);
}

/* One FP8 GEMM: D [M, N] (leading dimension N) = act(alpha * (a_scale[m] *
 * w_scale[n] * A.W^T) + bias) + residual, A [M, K] and W [N, K] e4m3. act is
 * NNRT_EPI_NONE, NNRT_EPI_RELU or NNRT_EPI_GELU_TANH; act_after_residual:
 * act(... + residual) instead. tmp: workspace for the fallback's f32
 * columns (nnc_cuda_fp8_tmp_bytes). */
template <typename TO> struct nnc_cuda_fp8_gemm_args {
  int M, N, K;
  const unsigned char *a;
  const float *a_scale;
  const unsigned char *w;
  const float *w_scale;
  const TO *bias;
  const TO *residual;
  bool act_after_residual;
  TO *d;
  float alpha;
  int act;
  float *tmp;
};

/* The fallback's epilogue over columns [n0, n0 + cols) of D, tmp [M, cols]
 * holding them unscaled. */
template <typename TO>
__global__ void nnc_fp8_epilogue_kernel(nnc_cuda_fp8_gemm_args<TO> f, int n0, int cols, const float *tmp) {
  const long long n = (long long)f.M * cols;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const int r = (int)(e / cols), c = n0 + (int)(e % cols);
    const long long at = (long long)r * f.N + c;
    float v = f.alpha * tmp[e] * f.a_scale[r] * f.w_scale[c];
    if (f.bias) v += nnc_dtype<TO>::load(f.bias[c]);
    if (f.residual && f.act_after_residual) v += nnc_dtype<TO>::load(f.residual[at]);
    if (f.act == NNRT_EPI_RELU) v = fmaxf(v, 0.0f);
    else if (f.act == NNRT_EPI_GELU_TANH)
      v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    if (f.residual && !f.act_after_residual) v += nnc_dtype<TO>::load(f.residual[at]);
    f.d[at] = nnc_dtype<TO>::store(v);
  }
}

template <typename TO> constexpr nnrt_cuda_dtype nnc_fp8_out_type() {
  return sizeof(TO) == 4 ? NNRT_DT_F32 : NNRT_DT_BF16;
}

/* The fallback's slice: columns of a multiple of 16 (W's rows of the slice
 * start 16-byte aligned, tmp's rows too) such that M of them fit in
 * NNC_FP8_TMP_BYTES, at least 16, at most all n_cols. */
inline long long nnc_fp8_slice_cols(long long M, long long n_cols) {
  long long per = (long long)(NNC_FP8_TMP_BYTES / ((size_t)(M > 0 ? M : 1) * sizeof(float))) / 16 * 16;
  if (per < 16) per = 16;
  return per > n_cols ? n_cols : per;
}

/* Bytes of workspace the fallback needs for an M x n_cols product. */
inline size_t nnc_cuda_fp8_tmp_bytes(long long M, long long n_cols) {
  return (size_t)M * (size_t)nnc_fp8_slice_cols(M, n_cols) * sizeof(float);
}

/* The fallback: slices of columns unscaled into tmp, then the epilogue. */
template <typename TO>
nnc_cuda_status nnc_fp8_gemm_fallback(nnrt_cuda_blas *h, const nnc_cuda_fp8_gemm_args<TO> &f, cudaStream_t s,
                                      nnc_cuda_error *err) {
  const int slice = (int)nnc_fp8_slice_cols(f.M, f.N);
  for (int n0 = 0; n0 < f.N; n0 += slice) {
    const int cols = f.N - n0 < slice ? f.N - n0 : slice;
    nnrt_cuda_gemm g = {};
    g.M = f.M;
    g.N = cols;
    g.K = f.K;
    g.batch = 1;
    g.ab = NNRT_DT_E4M3;
    g.out = NNRT_DT_F32;
    g.A = f.a;
    g.lda = f.K;
    g.B = f.w + (long long)n0 * f.K;
    g.ldb = f.K;
    g.b_trans = true;
    g.D = f.tmp;
    g.ldd = cols;
    g.stride_d = (long long)f.M * cols;
    g.alpha = 1.0f;
    g.epilogue = NNRT_EPI_NONE;
    nnrt_error e = {};
    if (nnrt_cuda_gemm_run(h, &g, s, &e))
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_gemm_fp8", "unscaled fallback: %s", e.msg);
    const long long n = (long long)f.M * cols;
    const unsigned blocks = (unsigned)((n + NNC_QUANT_THREADS - 1) / NNC_QUANT_THREADS < 65535 * 8
                                           ? (n + NNC_QUANT_THREADS - 1) / NNC_QUANT_THREADS : 65535 * 8);
    nnc_fp8_epilogue_kernel<TO><<<blocks, NNC_QUANT_THREADS, 0, s>>>(f, n0, cols, f.tmp);
    if (nnc_cuda_check_launch(err, "nnc_cuda_gemm_fp8")) return NNC_CUDA_E_LAUNCH;
  }
  return NNC_CUDA_OK;
}

/* Whether this build has nnc's own wgmma FP8 GEMM (path 3): sm_90a only. */
constexpr bool nnc_fp8_has_own() {
#if defined(NNC_CUDA_SM90A)
  return true;
#else
  return false;
#endif
}

/* Which GEMMs our kernel serves where both could: 1 every one (its first
 * call takes path 3 without asking cuBLASLt), 0 only those cuBLASLt has
 * no algorithm for. Chosen by timing on an H200: GPT-2's c_attn 0.088 ms
 * ours against cuBLASLt's 0.039, c_fc 0.137 / 0.063, mlp.c_proj 0.100 /
 * 0.043 (the whole model 7.13 ms against 4.49); a build may set it
 * (-DNNC_FP8_OWN_ALL=1) to measure again. */
#ifndef NNC_FP8_OWN_ALL
#define NNC_FP8_OWN_ALL 0
#endif

/* Which kernel path 3 runs for f32 or bf16 C: 1 gemm_tma8.cuh (TMA loads,
 * persistent, the epilogue under the next tile's loads), 0
 * gemm_wgmma_fp8.cuh (a build may set it to compare). An e4m3 C is
 * gemm_wgmma_fp8.cuh's alone. */
#ifndef NNC_FP8_TMA8
#define NNC_FP8_TMA8 1
#endif

/* Path 3: f by gemm_tma8.cuh or gemm_wgmma_fp8.cuh (NNC_FP8_TMA8), written
 * to d (TO), or by gemm_wgmma_fp8.cuh with d8, as e4m3 divided by
 * *d8_scale (then f.d is not written). */
template <typename TO>
nnc_cuda_status nnc_fp8_gemm_own(const nnc_cuda_fp8_gemm_args<TO> &f, unsigned char *d8, const float *d8_scale,
                                 cudaStream_t s, nnc_cuda_error *err) {
#if defined(NNC_CUDA_SM90A)
  const int act = f.act == NNRT_EPI_NONE ? NNC_GWF_NONE : f.act == NNRT_EPI_RELU ? NNC_GWF_RELU
                : f.act == NNRT_EPI_GELU_TANH ? NNC_GWF_GELU_TANH : -1;
  auto fill = [&](auto &g) {
    g.M = f.M;
    g.N = f.N;
    g.K = f.K;
    g.a = reinterpret_cast<const __nv_fp8_e4m3 *>(f.a);
    g.lda = f.K;
    g.a_scale = f.a_scale;
    g.a_scale_step = 1;
    g.b = reinterpret_cast<const __nv_fp8_e4m3 *>(f.w);
    g.ldb = f.K;
    g.b_scale = f.w_scale;
    g.bias = f.bias;
    g.residual = f.residual;
    g.ldr = f.N;
    g.act = act;
    g.act_after_residual = f.act_after_residual;
    g.alpha = f.alpha;
  };
  if (d8) {
    nnc_cuda_gemm_wgmma_fp8_args<__nv_fp8_e4m3, TO> g = {};
    fill(g);
    g.out_scale = d8_scale;
    g.c = reinterpret_cast<__nv_fp8_e4m3 *>(d8);
    g.ldc = f.N;
    return nnc_cuda_gemm_wgmma_fp8(g, s, err);
  }
  if constexpr (NNC_FP8_TMA8 != 0) {
    if (act < 0)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_gemm_fp8", "expected act none, relu or gelu_tanh, found %d",
                           f.act);
    nnc_cuda_gemm_tma8_args<__nv_fp8_e4m3, TO> t = {};
    t.M = f.M, t.N = f.N, t.K = f.K;
    t.a = reinterpret_cast<const __nv_fp8_e4m3 *>(f.a), t.lda = f.K, t.a_scale = f.a_scale, t.a_scale_step = 1;
    t.b = reinterpret_cast<const __nv_fp8_e4m3 *>(f.w), t.ldb = f.K, t.b_scale = f.w_scale;
    t.bias = f.bias, t.residual = f.residual, t.ldr = f.N, t.act_last = f.act_after_residual;
    t.act = act == NNC_GWF_RELU        ? NNC_CUDA_ACT_RELU
            : act == NNC_GWF_GELU_TANH ? NNC_CUDA_ACT_GELU_TANH
                                       : NNC_CUDA_ACT_NONE;
    t.alpha = f.alpha, t.c = f.d, t.ldc = f.N;
    return t.act != NNC_CUDA_ACT_NONE || t.residual ? nnc_cuda_gemm_tma8<__nv_fp8_e4m3, TO, true>(t, s, err)
                                                    : nnc_cuda_gemm_tma8<__nv_fp8_e4m3, TO, false>(t, s, err);
  } else {
    nnc_cuda_gemm_wgmma_fp8_args<TO, TO> g = {};
    fill(g);
    g.c = f.d;
    g.ldc = f.N;
    return nnc_cuda_gemm_wgmma_fp8(g, s, err);
  }
#else
  (void)f, (void)d8, (void)d8_scale, (void)s;
  return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_gemm_fp8",
                       "path 3 (nnc's wgmma FP8 GEMM) needs an sm_90a build (NNC_CUDA_SM90A), found another");
#endif
}

/* The product, by cuBLASLt with both scale vectors and its epilogue where it
 * can (*path 1), else by our kernel on sm_90a (*path 3) or the fallback
 * (*path 2). With NNC_FP8_OWN_ALL an sm_90a build takes path 3 first. *path 0: not known yet;
 * the first call finds out (cuBLASLt answers "unsupported" before launching
 * anything) and the model keeps the answer, so later calls (and a captured
 * graph) take the path found at once. A kernel whose first call took path
 * 1 keeps it; a later size cuBLASLt has no algorithm for (a decode step's
 * few rows) takes the fallback for that call only. */
template <typename TO>
nnc_cuda_status nnc_cuda_gemm_fp8(nnrt_cuda_blas *h, const nnc_cuda_fp8_gemm_args<TO> &f, int *path, cudaStream_t s,
                                  nnc_cuda_error *err) {
  if (!f.a || !f.a_scale || !f.w || !f.w_scale || !f.d || !f.tmp || !path)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_gemm_fp8", "a NULL operand, scale, output or workspace");
  if (f.M == 0 || f.N == 0) return NNC_CUDA_OK;
  /* D's rows not 16-byte aligned (N % 16 under bf16 or f32): cuBLASLt has no FP8 algorithm */
  if (*path == 0 && nnc_fp8_has_own() && (NNC_FP8_OWN_ALL || f.N % 16)) *path = 3;
  if (*path == 3) return nnc_fp8_gemm_own(f, nullptr, nullptr, s, err);
  if (*path != 2) {
    nnrt_cuda_gemm g = {};
    g.M = f.M;
    g.N = f.N;
    g.K = f.K;
    g.batch = 1;
    g.ab = NNRT_DT_E4M3;
    g.out = nnc_fp8_out_type<TO>();
    g.A = f.a;
    g.lda = f.K;
    g.a_scale = f.a_scale;
    g.B = f.w;
    g.ldb = f.K;
    g.b_trans = true;
    g.b_scale = f.w_scale;
    g.bias = f.bias;
    g.residual = f.residual;
    g.stride_r = (long long)f.M * f.N;
    g.act_after_residual = f.act_after_residual;
    g.D = f.d;
    g.ldd = f.N;
    g.stride_d = (long long)f.M * f.N;
    g.alpha = f.alpha;
    g.epilogue = f.act;
    nnrt_error e = {};
    nnrt_status st = nnrt_cuda_gemm_run(h, &g, s, &e);
    if (st == NNRT_OK) {
      if (*path == 0) *path = 1;
      return NNC_CUDA_OK;
    }
    if (!nnrt_cuda_gemm_unsupported(st, &e)) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_gemm_fp8", "%s", e.msg);
    if (nnc_fp8_has_own()) {   /* this call, and every later one where the first found none */
      if (*path == 0) *path = 3;
      return nnc_fp8_gemm_own(f, nullptr, nullptr, s, err);
    }
    if (*path == 0) *path = 2;
  }
  return nnc_fp8_gemm_fallback(h, f, s, err);
}

/* The product written as e4m3 for the next GEMM's A (bias, activation and
 * residual as f says): d8[m][n] = e4m3(value / *d8_scale), saturated to
 * +-448, where *d8_scale (a device float) is the reader's fixed A scale
 * (nnc calibrate's), so the reader takes d8 as its quantized A with no
 * pass of its own. Only our kernel does this (sm_90a): cuBLASLt refused
 * e4m3 D with the scale vectors on an H200 (NOTES, "FP8 round 2"). *wrote:
 * whether d8 was written; where it was not (no sm_90a build) nothing ran,
 * and the caller writes f.d as usual and quantizes it in the reader. */
template <typename TO>
nnc_cuda_status nnc_cuda_gemm_fp8_e4m3(const nnc_cuda_fp8_gemm_args<TO> &f, unsigned char *d8, const float *d8_scale,
                                       bool *wrote, cudaStream_t s, nnc_cuda_error *err) {
  *wrote = false;
  if (!f.a || !f.a_scale || !f.w || !f.w_scale || !d8 || !d8_scale)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, "nnc_cuda_gemm_fp8_e4m3", "a NULL operand, scale or output");
  if (!nnc_fp8_has_own()) return NNC_CUDA_OK;
  if (nnc_fp8_gemm_own(f, d8, d8_scale, s, err)) return NNC_CUDA_E_ARG;
  *wrote = true;
  return NNC_CUDA_OK;
}

#endif
