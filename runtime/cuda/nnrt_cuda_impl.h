/* runtime/cuda/nnrt_cuda_impl.h — shared by the files of runtime/cuda, not
 * part of the interface. */
#ifndef NNRT_CUDA_IMPL_H
#define NNRT_CUDA_IMPL_H

#include "nnrt_cuda.h"

/* NNRT_OK when the process sees at least one CUDA device; otherwise
 * NNRT_E_DEVICE with "what: no CUDA device ..." in err. Called by the
 * creators first, so that no library (cuBLASLt) is initialised for nothing. */
nnrt_status nnrt_cuda_need_device(const char *what, nnrt_error *err);

/* The plan cache's key of g (gemm.c): everything cuBLASLt's heuristic looks
 * at (sizes, types, leading dimensions, batch strides, pointer alignments,
 * bias/residual, epilogue) and algo. Pure; exposed for the unit test. */
#define NNRT_CUDA_GEMM_KEY_LEN 32
void nnrt_cuda_gemm_key(const nnrt_cuda_gemm *g, long long *key);

/* row_phases' cuBLASLt calls (gemm.c): fn(ctx, part) for each call of g (M,
 * N, K > 0, supported, row_phases set) in order, part being g's product over
 * some of its rows and columns, row_phases clear; the first status other
 * than NNRT_OK stops it and is returned. Pure (fn aside); exposed for the
 * unit test. */
typedef nnrt_status (*nnrt_cuda_gemm_part_fn)(void *ctx, const nnrt_cuda_gemm *part);
nnrt_status nnrt_cuda_gemm_phases(const nnrt_cuda_gemm *g, nnrt_cuda_gemm_part_fn fn, void *ctx);

#endif
