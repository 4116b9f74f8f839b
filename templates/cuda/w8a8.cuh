/* templates/cuda/w8a8.cuh — int8 weights on CUDA: the one interface a
 * folder calls (cuda_w8a8.c and cuda_int8w.c emit the calls). Under
 * --quantize=int8w the weights are the same and the GEMM is gemm_w8.cuh's
 * nnc_cuda_w8_gemm, A as it is; what follows is --quantize=w8a8's.
 *
 * Weights: int8 [N, K] (K-major whatever the file's layout) with an f32
 * scale per output channel, max|w| / 127, quantized once on the device
 * from the f32 values when they load (nnc_cuda_w8a8_weight), then (16-byte
 * aligned) SmoothQuant's tail: a header and K factors (quant_rows.cuh).
 * Activations: each GEMM's A quantized to int8 when it runs, a scale per
 * row (max|a| / 127, symmetric; no calibration), in one kernel that also
 * applies the layernorm or rmsnorm the GEMM reads (nnc_cuda_w8a8_rows).
 * The product (nnc_cuda_w8a8_gemm): nnc's int8 GEMM with the scales, bias,
 * activation and residual in its epilogue: on sm_90a builds
 * (NNC_CUDA_SM90A) gemm_tma8.cuh's (wgmma s8 at twice mma.sync's rate,
 * TMA loads, persistent), elsewhere gemm_w8a8.cuh's mma.sync one.
 *
 * Why our own GEMM and not cuBLASLt's int8 (CUDA_R_8I, COMPUTE_32I):
 * cuBLASLt's int8 matmuls scale by one alpha (or an alpha per row of D in
 * a pointer mode), and write int32 or int8, not bf16: a row scale times a
 * column scale and a bf16 output take an int32 D and a second kernel, 4
 * bytes an output written and read again (BERT MiniLM's 4096 x 1536
 * output: 50 MB of traffic against the 19 MB the GEMM reads and writes).
 * Its outer-vector scales are FP8's only. Here every scale is applied in
 * registers, any N is written (odd too), and sm_80 and sm_90 run the same
 * kernel; gemm_tma8.cuh does the same on Hopper's wgmma. */
#ifndef NNC_CUDA_W8A8_CUH
#define NNC_CUDA_W8A8_CUH

#include "gemm_w4.cuh"
#include "gemm_w8.cuh"
#include "gemm_w8a8.cuh"
#include "quant_rows.cuh"
#if defined(NNC_CUDA_SM90A)
#include "gemm_tma8.cuh"
#endif

/* Which kernel an sm_90a build runs: gemm_tma8.cuh from this many rows of
 * A up, gemm_w8a8.cuh's mma.sync one below, whose fixed cost a launch is
 * lower. On an H200, BERT MiniLM took 0.686 ms at B=32 T=128 (4096 rows)
 * on gemm_tma8 against 0.845 on mma.sync, and 0.406 against 0.370 at B=1
 * T=128 (128 rows); 1024 lies between, the crossing itself is not
 * measured. A build may set it (0: gemm_tma8 always). */
#ifndef NNC_W8A8_TMA8_ROWS
#define NNC_W8A8_TMA8_ROWS 1024
#endif

/* w (N*K f32 on the device, [N, K] or, in_out, [K, N]) to int8 [N, K] in q
 * with a scale per output channel in scale: C SIMD's values (the DIVIDE
 * rule of nnc_quant_weight_kernel), input channel k times s_k where smooth
 * (a SmoothQuant tail, quant_rows.cuh's nnc_quant_smooth; nullptr: none)
 * is on. */
inline nnc_cuda_status nnc_cuda_w8a8_weight(const float *w, int N, int K, bool in_out, const void *smooth,
                                            signed char *q, float *scale, cudaStream_t s, nnc_cuda_error *err) {
  return nnc_cuda_quant_weight<nnc_quant_s8, true>(w, N, K, in_out, smooth, reinterpret_cast<unsigned char *>(q), scale,
                                                   s, "nnc_cuda_w8a8_weight", err);
}

/* Row r of x [rows, cols] (leading dimension ldx), normalized as norm says
 * (gamma, beta: cols elements or NULL) and column k divided by s_k where
 * smooth (the weight's SmoothQuant tail, or nullptr) is on, to int8 in q
 * [rows, cols] with its scale (max |value| / 127) in scale[r]. */
template <typename T>
nnc_cuda_status nnc_cuda_w8a8_rows(nnc_quant_norm norm, int rows, int cols, const T *x, long long ldx, const T *gamma,
                                   const T *beta, float eps, const void *smooth, signed char *q, float *scale,
                                   cudaStream_t s, nnc_cuda_error *err) {
  return nnc_cuda_quant_rows<nnc_quant_s8, T>(norm, rows, cols, x, ldx, gamma, beta, eps, nullptr, smooth,
                                              reinterpret_cast<unsigned char *>(q), scale, s, "nnc_cuda_w8a8_rows", err);
}

/* The GEMM f describes, on the stream s: what a folder calls. Both kernels
 * take the same arguments and sum int32 exactly; only the order of the
 * epilogue's f32 operations differs. */
template <typename TO>
nnc_cuda_status nnc_cuda_w8a8_gemm(const nnc_cuda_w8a8_gemm_args<TO> &f, cudaStream_t s, nnc_cuda_error *err) {
#if defined(NNC_CUDA_SM90A)
  if (f.M >= NNC_W8A8_TMA8_ROWS) {
    nnc_cuda_gemm_tma8_args<signed char, TO> t = {};
    t.M = f.M, t.N = f.N, t.K = f.K;
    t.a = f.a, t.lda = f.K, t.a_scale = f.a_scale, t.a_scale_step = 1;
    t.b = f.w, t.ldb = f.K, t.b_scale = f.w_scale;
    t.bias = f.bias, t.residual = f.residual, t.ldr = f.N, t.act = f.act, t.act_last = f.act_last;
    t.alpha = f.alpha, t.c = f.d, t.ldc = f.N;
    return t.act != NNC_CUDA_ACT_NONE || t.residual ? nnc_cuda_gemm_tma8<signed char, TO, true>(t, s, err)
                                                    : nnc_cuda_gemm_tma8<signed char, TO, false>(t, s, err);
  }
#endif
  return nnc_cuda_gemm_w8a8(f, s, err);
}

#endif
