/* templates/cuda/w8a8.cuh — --quantize=w8a8 on CUDA: the one interface a
 * folder calls (cuda_w8a8.c emits the calls).
 *
 * Weights: int8 [N, K] (K-major whatever the file's layout) with an f32
 * scale per output channel, max|w| / 127, quantized once on the device
 * from the f32 values when they load (nnc_cuda_w8a8_weight).
 * Activations: each GEMM's A quantized to int8 when it runs, a scale per
 * row (max|a| / 127, symmetric; no calibration), in one kernel that also
 * applies the layernorm or rmsnorm the GEMM reads (nnc_cuda_w8a8_rows).
 * The product: nnc's int8 mma.sync GEMM with the scales, bias, activation
 * and residual in its epilogue (gemm_w8a8.cuh, nnc_cuda_gemm_w8a8).
 *
 * Why our own GEMM and not cuBLASLt's int8 (CUDA_R_8I, COMPUTE_32I):
 * cuBLASLt's int8 matmuls scale by one alpha (or an alpha per row of D in
 * a pointer mode), and write int32 or int8, not bf16: a row scale times a
 * column scale and a bf16 output take an int32 D and a second kernel, 4
 * bytes an output written and read again (BERT MiniLM's 4096 x 1536
 * output: 50 MB of traffic against the 19 MB the GEMM reads and writes).
 * Its outer-vector scales are FP8's only. Here every scale is applied in
 * registers, any N is written (odd too), and sm_80 and sm_90 run the same
 * kernel. The price: mma.sync, not Hopper's wgmma, which the H200's full
 * int8 rate needs; a wgmma s8 kernel is the next step if the H200 says
 * this one is the bottleneck. */
#ifndef NNC_CUDA_W8A8_CUH
#define NNC_CUDA_W8A8_CUH

#include "gemm_w8a8.cuh"
#include "quant_rows.cuh"

/* w (N*K f32 on the device, [N, K] or, in_out, [K, N]) to int8 [N, K] in q
 * with a scale per output channel in scale. */
inline nnc_cuda_status nnc_cuda_w8a8_weight(const float *w, int N, int K, bool in_out, signed char *q, float *scale,
                                            cudaStream_t s, nnc_cuda_error *err) {
  return nnc_cuda_quant_weight<nnc_quant_s8>(w, N, K, in_out, reinterpret_cast<unsigned char *>(q), scale, s,
                                             "nnc_cuda_w8a8_weight", err);
}

/* Row r of x [rows, cols] (leading dimension ldx), normalized as norm says
 * (gamma, beta: cols elements or NULL), to int8 in q [rows, cols] with its
 * scale (max |value| / 127) in scale[r]. */
template <typename T>
nnc_cuda_status nnc_cuda_w8a8_rows(nnc_quant_norm norm, int rows, int cols, const T *x, long long ldx, const T *gamma,
                                   const T *beta, float eps, signed char *q, float *scale, cudaStream_t s,
                                   nnc_cuda_error *err) {
  return nnc_cuda_quant_rows<nnc_quant_s8, T>(norm, rows, cols, x, ldx, gamma, beta, eps, nullptr,
                                              reinterpret_cast<unsigned char *>(q), scale, s, "nnc_cuda_w8a8_rows", err);
}

#endif
