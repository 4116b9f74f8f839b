/* compiler/emit/emit_targets.h — the emitters behind nnc_emit, one per
 * target family (the table is in emit.c). */
#ifndef NNC_EMIT_TARGETS_H
#define NNC_EMIT_TARGETS_H

#include "emit.h"

/* C with SIMD intrinsics for the host (c-simd, c-avx2, c-avx512, c-neon,
 * c-generic): see c_simd.c. */
nnc_status nnc_emit_c_simd(const nnc_emit_request *r, const char *dir, nnc_error *err);
/* The most outputs of a C SIMD GEMM that gathers A from an im2col's
 * image (templates/c_simd/gemm_windows.c): any. */
int nnc_c_simd_gemm_windows(const nnc_target_desc *t);

/* CUDA C++ for NVIDIA GPUs (cuda-sm70 ... cuda-sm90a): see cuda.c. */
nnc_status nnc_emit_cuda(const nnc_emit_request *r, const char *dir, nnc_error *err);
/* Its GEMMs' implementations: cuBLASLt (rows padded or not) and nnc's own
 * tensor-core GEMM at each tile configuration it fits. */
nnc_status nnc_cuda_variants(const nnc_emit_request *r, nnc_kernel_variants *out, nnc_error *err);
/* The most outputs of a GEMM that gathers A from an im2col's image on t
 * (wgmma's implicit convolution, sm_90a), 0 elsewhere: see cuda_conv.c. */
int nnc_cuda_gemm_windows(const nnc_target_desc *t);
/* The most columns of a GEMM whose post-norm layernorm runs in its
 * epilogue (templates/cuda/gemm_tma_ln.cuh: sm_90a, N <= 512); 0 elsewhere. */
int nnc_cuda_gemm_post_norm(const nnc_target_desc *t);

/* OpenCL C 1.2 for any OpenCL device, PoCL included (opencl, opencl-gpu,
 * opencl-cpu): see opencl.c. */
nnc_status nnc_emit_opencl(const nnc_emit_request *r, const char *dir, nnc_error *err);

#endif
