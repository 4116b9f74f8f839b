/* templates/opencl/common.cl — what every nnc OpenCL kernel shares: the
 * storage formats, activations and work-group reductions. The host prepends
 * it to each kernel source (the kernels include no file, so no -I path is
 * needed).
 *
 * Storage is one of three formats, chosen by a macro defined before this
 * file; arithmetic is always f32, so the format only changes how an element
 * is loaded and stored:
 *   (default)   f32: nnc_t is float.
 *   NNC_F16     IEEE binary16: nnc_t is half, used only through pointers by
 *               vload_half and vstore_half_rte, which are core OpenCL 1.2:
 *               this needs no cl_khr_fp16, and a device that has it runs
 *               the same code (there is one path).
 *   NNC_BF16    bfloat16: nnc_t is ushort, the top 16 bits of a float (OpenCL
 *               C has no bfloat16 type).
 * Every access goes through these (p a __global pointer to the format, i an
 * element index, n 4, 8 or 16):
 *   NNC_LOAD(p, i)        element i as a float
 *   NNC_STORE(p, i, v)    the float v into element i, rounded to nearest even
 *   NNC_COPY(p, i, q, j)  element j of q into element i of p, unchanged
 *   NNC_VLOAD(n, p)       the n elements at p as a floatn
 *   NNC_VSTORE(n, v, p)   the floatn v into the n elements at p, each rounded
 * The same names with _F32, _F16 or _BF16 appended take that format
 * whatever the storage (a GEMM whose epilogue widens its result to f32). */

/* bfloat16 bits of the float bits u (a uint or uintn), rounded to nearest
 * even; NaN is left to the callers. */
#define NNC_BF16_ROUND(u) (((u) + 0x7fffu + (((u) >> 16) & 1u)) >> 16)
/* bfloat16 bits of v: rounded to nearest even, a NaN stays a (quiet) NaN */
inline ushort nnc_bf16_bits(float v) {
  const uint u = as_uint(v);
  return (ushort)(isnan(v) ? (u >> 16) | 0x40u : NNC_BF16_ROUND(u));
}

/* the vector built-ins by width: vload8, as_uint16, ... */
#define NNC_VNAME_(name, n) name##n
#define NNC_VNAME(name, n) NNC_VNAME_(name, n)

#define NNC_LOAD_F32(p, i) ((p)[i])
#define NNC_STORE_F32(p, i, v) ((p)[i] = (v))
#define NNC_COPY_F32(p, i, q, j) ((p)[i] = (q)[j])
#define NNC_VLOAD_F32(n, p) NNC_VNAME(vload, n)(0, p)
#define NNC_VSTORE_F32(n, v, p) NNC_VNAME(vstore, n)(v, 0, p)

#define NNC_LOAD_F16(p, i) vload_half((size_t)(i), p)
#define NNC_STORE_F16(p, i, v) vstore_half_rte(v, (size_t)(i), p)
#define NNC_COPY_F16(p, i, q, j) vstore_half(vload_half((size_t)(j), q), (size_t)(i), p)
#define NNC_VLOAD_F16(n, p) NNC_VNAME(vload_half, n)(0, p)
#define NNC_VSTORE_F16(n, v, p) NNC_VNAME(NNC_VNAME(vstore_half, n), _rte)(v, 0, p)

#define NNC_LOAD_BF16(p, i) as_float((uint)(p)[i] << 16)
#define NNC_STORE_BF16(p, i, v) ((p)[i] = nnc_bf16_bits(v))
#define NNC_COPY_BF16(p, i, q, j) ((p)[i] = (q)[j])
#define NNC_VLOAD_BF16(n, p) NNC_VNAME(as_float, n)(NNC_VNAME(convert_uint, n)(NNC_VNAME(vload, n)(0, p)) << 16)
#define NNC_VSTORE_BF16(n, v, p)                                                                 \
  NNC_VNAME(vstore, n)(NNC_VNAME(convert_ushort, n)(select(NNC_BF16_ROUND(NNC_VNAME(as_uint, n)(v)), \
                                                           (NNC_VNAME(as_uint, n)(v) >> 16) | 0x40u, isnan(v))), \
                       0, p)

#if defined(NNC_F16)
typedef half nnc_t;
#define NNC_LOAD NNC_LOAD_F16
#define NNC_STORE NNC_STORE_F16
#define NNC_COPY NNC_COPY_F16
#define NNC_VLOAD NNC_VLOAD_F16
#define NNC_VSTORE NNC_VSTORE_F16
#elif defined(NNC_BF16)
typedef ushort nnc_t;
#define NNC_LOAD NNC_LOAD_BF16
#define NNC_STORE NNC_STORE_BF16
#define NNC_COPY NNC_COPY_BF16
#define NNC_VLOAD NNC_VLOAD_BF16
#define NNC_VSTORE NNC_VSTORE_BF16
#else
typedef float nnc_t;
#define NNC_LOAD NNC_LOAD_F32
#define NNC_STORE NNC_STORE_F32
#define NNC_COPY NNC_COPY_F32
#define NNC_VLOAD NNC_VLOAD_F32
#define NNC_VSTORE NNC_VSTORE_F32
#endif

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
