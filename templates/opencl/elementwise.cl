/* templates/opencl/elementwise.cl — one pass of a fused elementwise chain:
 * y[i] = NNC_EW_EXPR for i < n, computed in f32 from x0..x3 (the inputs'
 * elements, as floats) and i.
 *
 * Macros:
 *   NNC_EW_NIN   inputs read, 1 to 4 (1); the unused pointers may be NULL
 *   NNC_EW_EXPR  the chain as an expression of x0..x3, built from the
 *                helpers of common.cl, e.g. nnc_gelu_erf(x0 + x1)
 *                (default nnc_act(NNC_ACT, x0))
 *   NNC_ACT      for the default expression (NNC_ACT_NONE)
 * Input k is broadcast along one axis: element i reads xk[(i / dk) % nk];
 * dk = 1, nk = n reads it in full, dk = 1, nk = N a [N] row vector of an
 * [M,N] output, dk = N, nk = M a [M,1] column, nk = 1 a scalar. Any global
 * size works: items stride over n. y may be one of the inputs when that
 * input is read in full. */
#ifndef NNC_EW_NIN
#define NNC_EW_NIN 1
#endif
#ifndef NNC_ACT
#define NNC_ACT NNC_ACT_NONE
#endif
#ifndef NNC_EW_EXPR
#define NNC_EW_EXPR nnc_act(NNC_ACT, x0)
#endif

__kernel void nnc_elementwise(long n, __global nnc_t *y,
                              __global const nnc_t *in0, long d0, long n0,
                              __global const nnc_t *in1, long d1, long n1,
                              __global const nnc_t *in2, long d2, long n2,
                              __global const nnc_t *in3, long d3, long n3) {
  const long step = (long)get_global_size(0);
  for (long i = (long)get_global_id(0); i < n; i += step) {
    const float x0 = NNC_LOAD(in0, (i / d0) % n0);
#if NNC_EW_NIN > 1
    const float x1 = NNC_LOAD(in1, (i / d1) % n1);
#endif
#if NNC_EW_NIN > 2
    const float x2 = NNC_LOAD(in2, (i / d2) % n2);
#endif
#if NNC_EW_NIN > 3
    const float x3 = NNC_LOAD(in3, (i / d3) % n3);
#endif
    NNC_STORE(y, i, NNC_EW_EXPR);
  }
}
