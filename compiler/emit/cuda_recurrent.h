/* compiler/emit/cuda_recurrent.h — the CUDA launch of lstm_scan and
 * gru_scan through templates/cuda/recurrent.cuh (cuda_recurrent.c). */
#ifndef NNC_CUDA_RECURRENT_H
#define NNC_CUDA_RECURRENT_H

#include "cuda.h"

/* k<ki> for an lstm_scan or gru_scan kernel: the persistent template kernel
 * when its tensors share one float dtype, else the loops of
 * cu_emit_loop_kernel. */
nnc_status cu_emit_recurrent(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err);

#endif
