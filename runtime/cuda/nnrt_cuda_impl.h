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

#endif
