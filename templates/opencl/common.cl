/* templates/opencl/common.cl — what every nnc OpenCL kernel shares: the
 * storage type, activations and a work-group sum. The host prepends it to
 * each kernel source (the kernels include no file, so no -I path is needed).
 *
 * Storage is f32, or f16 with -DNNC_F16 on a device with cl_khr_fp16;
 * arithmetic is always f32, so f16 only changes loads and stores. */
#ifdef NNC_F16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half nnc_t;
#else
typedef float nnc_t;
#endif

#define NNC_LD(x) ((float)(x))
#define NNC_ST(x) ((nnc_t)(x))

/* Activation codes, the order of nnc_simd_act. */
#define NNC_ACT_NONE 0
#define NNC_ACT_RELU 1
#define NNC_ACT_GELU_ERF 2
#define NNC_ACT_GELU_TANH 3
#define NNC_ACT_SILU 4
#define NNC_ACT_SIGMOID 5
#define NNC_ACT_TANH 6

inline float nnc_relu(float x) { return fmax(x, 0.0f); }
/* 0.5 x (1 + erf(x / sqrt 2)) */
inline float nnc_gelu_erf(float x) { return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f)); }
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
inline float nnc_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
inline float nnc_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
inline float nnc_silu(float x) { return x * nnc_sigmoid(x); }

inline float nnc_act(int act, float x) {
  switch (act) {
  case NNC_ACT_RELU: return nnc_relu(x);
  case NNC_ACT_GELU_ERF: return nnc_gelu_erf(x);
  case NNC_ACT_GELU_TANH: return nnc_gelu_tanh(x);
  case NNC_ACT_SILU: return nnc_silu(x);
  case NNC_ACT_SIGMOID: return nnc_sigmoid(x);
  case NNC_ACT_TANH: return tanh(x);
  default: return x;
  }
}

/* The activation act (a constant) of x, a float or a vector of floats: the
 * built-in functions take vectors, so a vector epilogue computes its
 * activation a vector at a time. */
#define NNC_ACT_V(act, x)                                                                         \
  ((act) == NNC_ACT_RELU        ? fmax((x), 0.0f)                                                 \
   : (act) == NNC_ACT_GELU_ERF  ? 0.5f * (x) * (1.0f + erf((x) * 0.70710678118654752f))           \
   : (act) == NNC_ACT_GELU_TANH ? 0.5f * (x) * (1.0f + tanh(0.79788456080286536f * ((x) + 0.044715f * (x) * (x) * (x)))) \
   : (act) == NNC_ACT_SILU      ? (x) / (1.0f + exp(-(x)))                                        \
   : (act) == NNC_ACT_SIGMOID   ? 1.0f / (1.0f + exp(-(x)))                                       \
   : (act) == NNC_ACT_TANH      ? tanh(x)                                                         \
                                : (x))

/* Sum of v over the work-group's n items (n a power of two, scratch holds
 * n floats); every item of the group must call it, and every item gets the
 * sum. The trailing barrier lets the caller reuse scratch at once. */
inline float nnc_wg_sum(float v, __local float *scratch, int n) {
  const int lid = (int)get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s /= 2) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

/* Same for the maximum. */
inline float nnc_wg_max(float v, __local float *scratch, int n) {
  const int lid = (int)get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s /= 2) {
    if (lid < s) scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
