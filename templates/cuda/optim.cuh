/* templates/cuda/optim.cuh — the training step's update on the GPU: the sum
 * of a micro-batch's gradients into the accumulated ones, the gradients'
 * sum of squares (for the global norm and its clipping), and AdamW or SGD
 * over every weight in one launch.
 *
 * The gradients and the optimizer's moments live in blocks of floats where
 * each weight has its own range (nnc_optim_param.at); the weights are where
 * the model keeps them: updated in place when stored as f32, else updated in
 * an f32 master block of the same layout as the gradients and copied, rounded
 * to the nearest, into their bf16 or f16 storage. */
#ifndef NNC_CUDA_OPTIM_CUH
#define NNC_CUDA_OPTIM_CUH

#include "nnc_cuda.cuh"

/* One weight as the update sees it. */
struct nnc_optim_param {
  long long at;       /* first element in the gradient, moment and master blocks */
  long long n;        /* elements */
  long long w_off;    /* bytes into the weights block of its stored copy */
  int stored;         /* NNC_OPTIM_F32, _BF16, _F16, or _FROZEN: no update (integer weights) */
  int decay;          /* 1: weight decay applies */
  int sliced;         /* --parallel=tp:N: this rank holds a slice of the weight (its gradient's squares
                         are summed over the ranks for the norm), else the whole weight */
};
enum { NNC_OPTIM_F32 = 0, NNC_OPTIM_BF16 = 1, NNC_OPTIM_F16 = 2, NNC_OPTIM_FROZEN = 3 };

/* The scalars of one update: lr at this step, the gradient's scale (the
 * clipping and the mean over micro-batches), the bias corrections. */
struct nnc_optim_step {
  float lr, beta1, beta2, eps, weight_decay;
  float scale;        /* multiplies every gradient */
  float inv_c1;       /* 1 / (1 - beta1^t) */
  float inv_sqrt_c2;  /* 1 / sqrt(1 - beta2^t) */
  int sgd;            /* 1: SGD with momentum beta1, else AdamW */
};

/* acc[i] += part[i] */
__global__ void nnc_optim_accumulate(float *__restrict__ acc, const float *__restrict__ part, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc[i] += part[i];
}

#define NNC_OPTIM_SUM_BLOCKS 256
#define NNC_OPTIM_SUM_THREADS 256

/* Block b adds up the squares of its grid-stride share of x in double:
 * partial[b]. A fixed grid and a fixed order make the sum the same bit for
 * bit on every run (a resumed run repeats the uninterrupted one). */
__global__ void __launch_bounds__(NNC_OPTIM_SUM_THREADS)
nnc_optim_sum_squares(const float *__restrict__ x, long long n, double *__restrict__ partial) {
  __shared__ double s[NNC_OPTIM_SUM_THREADS];
  double v = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    v += (double)x[i] * (double)x[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = NNC_OPTIM_SUM_THREADS / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

/* The same in two sums, for a tensor-parallel norm: partial[b] over the
 * weights the ranks hold slices of, partial[NNC_OPTIM_SUM_BLOCKS + b] over
 * the whole ones; block b takes its grid-stride share of each weight in
 * turn (a fixed order again). */
__global__ void __launch_bounds__(NNC_OPTIM_SUM_THREADS)
nnc_optim_sum_squares_parts(const float *__restrict__ g, const nnc_optim_param *__restrict__ params, int nparams,
                            double *__restrict__ partial) {
  __shared__ double s[2][NNC_OPTIM_SUM_THREADS];
  double v[2] = {0, 0};
  for (int j = 0; j < nparams; j++) {
    const float *x = g + params[j].at;
    double q = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < params[j].n;
         i += (long long)gridDim.x * blockDim.x)
      q += (double)x[i] * (double)x[i];
    v[params[j].sliced ? 0 : 1] += q;
  }
  s[0][threadIdx.x] = v[0];
  s[1][threadIdx.x] = v[1];
  __syncthreads();
  for (int w = NNC_OPTIM_SUM_THREADS / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) {
      s[0][threadIdx.x] += s[0][threadIdx.x + w];
      s[1][threadIdx.x] += s[1][threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = s[0][0];
    partial[NNC_OPTIM_SUM_BLOCKS + blockIdx.x] = s[1][0];
  }
}

/* partial[0] = the sum of partial[0 .. NNC_OPTIM_SUM_BLOCKS), in a fixed order. */
__global__ void __launch_bounds__(NNC_OPTIM_SUM_BLOCKS) nnc_optim_sum_partials(double *partial) {
  __shared__ double s[NNC_OPTIM_SUM_BLOCKS];
  s[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (int w = NNC_OPTIM_SUM_BLOCKS / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[0] = s[0];
}

/* Every weight in one launch: blockIdx.y picks the weight, the x blocks
 * stride over its elements. One pass reads the gradient, both moments and
 * the f32 weight and writes the moments and the weight (and its narrow copy):
 *   AdamW: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
 *          w -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd w)
 *   SGD:   m = b1 m + g, w -= lr (m + wd w)
 * with g the gradient times s.scale, in the order of runtime/optim.c's
 * host update so that both give the same floats. */
__global__ void nnc_optim_update(const nnc_optim_param *__restrict__ params, nnc_optim_step s,
                                 unsigned char *weights, float *master, const float *__restrict__ grad,
                                 float *__restrict__ mom, float *__restrict__ vel) {
  const nnc_optim_param p = params[blockIdx.y];
  if (p.stored == NNC_OPTIM_FROZEN) return;
  float *w = p.stored == NNC_OPTIM_F32 ? (float *)(weights + p.w_off) : master + p.at;
  const float *g = grad + p.at;
  float *m = mom + p.at, *v = vel + p.at;
  const float wd = p.decay ? s.weight_decay : 0.0f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n; i += (long long)gridDim.x * blockDim.x) {
    const float gi = g[i] * s.scale;
    float wi = w[i];
    if (s.sgd) {
      const float mi = s.beta1 * m[i] + gi;
      m[i] = mi;
      wi -= s.lr * (mi + wd * wi);
    } else {
      const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
      const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      wi -= s.lr * (mi * s.inv_c1 / (sqrtf(vi) * s.inv_sqrt_c2 + s.eps) + wd * wi);
    }
    w[i] = wi;
    if (p.stored == NNC_OPTIM_BF16) ((__nv_bfloat16 *)(weights + p.w_off))[i] = __float2bfloat16_rn(wi);
    else if (p.stored == NNC_OPTIM_F16) ((__half *)(weights + p.w_off))[i] = __float2half_rn(wi);
  }
}

/* ZeRO-1 (--parallel=dp:M,zero1): after the ranks' updated f32 values are
 * gathered into one flat block (flat + p.at, the gradients' layout), every
 * weight is stored from there (rounded to the nearest when narrow) and its
 * master copy, where it has one, refreshed. */
__global__ void nnc_optim_store(const nnc_optim_param *__restrict__ params, unsigned char *weights, float *master,
                                const float *__restrict__ flat) {
  const nnc_optim_param p = params[blockIdx.y];
  if (p.stored == NNC_OPTIM_FROZEN) return;
  const float *src = flat + p.at;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n; i += (long long)gridDim.x * blockDim.x) {
    const float v = src[i];
    if (p.stored == NNC_OPTIM_F32) {
      ((float *)(weights + p.w_off))[i] = v;
      continue;
    }
    master[p.at + i] = v;
    if (p.stored == NNC_OPTIM_BF16) ((__nv_bfloat16 *)(weights + p.w_off))[i] = __float2bfloat16_rn(v);
    else ((__half *)(weights + p.w_off))[i] = __float2half_rn(v);
  }
}

#endif
