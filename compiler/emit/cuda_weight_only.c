/* compiler/emit/cuda_weight_only.c — --quantize=int8w and int4w in a CUDA
 * folder: the GEMMs of weights held as int8 [N, K] with a scale per output
 * channel or int4 [N, K / 2] with a scale per group of 128 k (held and
 * quantized at load: cuda_qweights.c), their A as it is.
 * nnc_cuda_w8_gemm (templates/cuda/gemm_w8.cuh) and nnc_cuda_w4_gemm
 * (gemm_w4.cuh) multiply a few rows (a decode step's) straight from the
 * quantized weight, each byte read once, and dequantize the weight into the
 * workspace for cuBLASLt when there are many (prefill), so the weight-only
 * modes pay off where the weights' bytes are the time. A norm before the
 * GEMM (GPT-2's pre-norms) runs first, its rows into the workspace
 * (emit_gemm's, as for cuBLASLt); an epilogue cuBLASLt lacks (SiLU, the erf
 * GELU, an activation before the residual, a residual that multiplies) is
 * the epilogue kernel's, as for the float GEMM, so that a prompt's GEMMs
 * stay on tensor cores. */

#include "cuda.h"

void cu_weight_only_gemm_body(const ec_ctx *x, int ki, bool post, bool residual, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  const char *ta = cu_stype(x, d->a), *to = cu_stype(x, d->out);
  const char *w = cu_weight_only_bits(x, d) == 4 ? "w4" : "w8";
  /* with a norm first, emit_gemm's rows of A normalized into the workspace (A) and e are above */
  if (d->prologue == NNC_NORM_NONE) nnc_sb_printf(body, "  nnc_cuda_error e;\n");
  nnc_sb_printf(body, "  nnc_cuda_%s_gemm_args<%s, %s> f = {};\n  f.M = M;\n  f.N = N;\n  f.K = K;\n", w, ta, to);
  if (d->prologue != NNC_NORM_NONE) nnc_sb_printf(body, "  f.a = A;\n");
  else ec_assign(x, body, 2, "f.a", d->a);
  cu_qweight_gemm_fields(x, d, post, residual, body);
  /* the dequantized weight (many rows) after the normalized rows */
  nnc_sb_printf(body, "  void *ws = (unsigned char *)m->ws + %s;\n",
                d->prologue != NNC_NORM_NONE ? "pad_offset((size_t)M * K * sizeof *A)" : "0");
  nnc_sb_printf(body, "  if (nnc_cuda_%s_gemm(m->blas, f, ws, s, &e)) return kernel_failed(m, %d, e.msg);\n", w, ki);
}

void cu_weight_only_workspace(const ec_ctx *x, int ki, const char *M, const char *N, const char *K, nnc_sb *b) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  const char *ta = cu_stype(x, d->a);
  nnc_sb_printf(b, "  {   /* kernel %d:%s the weight dequantized (many rows) */\n    size_t w = 0;\n", ki,
                d->prologue != NNC_NORM_NONE ? " A normalized," : "");
  if (d->prologue != NNC_NORM_NONE)
    nnc_sb_printf(b, "    w += pad_offset((size_t)(%s) * (%s) * sizeof(%s));\n", M, K, ta);
  nnc_sb_printf(b, "    w += nnc_cuda_%s_ws_bytes<%s>((int)(%s), (int)(%s), (int)(%s));\n    if (w > need) need = w;\n  }\n",
                cu_weight_only_bits(x, d) == 4 ? "w4" : "w8", ta, M, N, K);
}
