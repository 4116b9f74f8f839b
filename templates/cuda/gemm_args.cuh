/* templates/cuda/gemm_args.cuh — the types of the GEMM interface (gemm.cuh
 * documents them): activation and row-norm enums, the argument struct. */
#ifndef NNC_CUDA_GEMM_ARGS_CUH
#define NNC_CUDA_GEMM_ARGS_CUH

#include "nnc_cuda.cuh"

enum nnc_cuda_act {
  NNC_CUDA_ACT_NONE,
  NNC_CUDA_ACT_RELU,
  NNC_CUDA_ACT_GELU_ERF,  /* 0.5 x (1 + erf(x / sqrt 2)) */
  NNC_CUDA_ACT_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  NNC_CUDA_ACT_SILU       /* x sigmoid(x) */
};

enum nnc_cuda_norm {
  NNC_CUDA_NORM_NONE,
  NNC_CUDA_NORM_LAYER, /* (x - mean) / sqrt(var + eps) * gamma + beta */
  NNC_CUDA_NORM_RMS    /* x / sqrt(mean(x^2) + eps) * gamma */
};

/* out = act(alpha * (norm(a) . b) + bias) + residual, batch times.
 * Batch item z reads a + z * stride_a, b + z * stride_b, residual + z *
 * stride_r and writes out + z * stride_c (a stride of 0 broadcasts); bias,
 * gamma and beta are shared. Leading dimensions and strides in elements. */
template <typename T> struct nnc_cuda_gemm_args {
  int M, N, K, batch;
  const T *a;              /* [M, K] */
  long long lda, stride_a;
  const T *b;              /* [N, K] when b_trans (nn.Linear weight), else [K, N] */
  long long ldb, stride_b;
  int b_trans;
  const T *bias;           /* [N] or NULL */
  const T *residual;       /* [M, N] or NULL; may be out itself (same ld) */
  long long ldr, stride_r;
  T *out;                  /* [M, N] */
  long long ldc, stride_c;
  float alpha;
  nnc_cuda_act act;
  nnc_cuda_norm norm;      /* over each whole row of a (K elements) */
  const T *gamma;          /* [K] or NULL (1) */
  const T *beta;           /* [K] or NULL (0); ignored by rmsnorm */
  float eps;
};

#endif
