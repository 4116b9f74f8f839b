/* compiler/emit/cuda_int8w.c — --quantize=int8w in a CUDA folder: the
 * GEMMs of weights held as int8 [N, K] with a scale per output channel
 * (held and quantized at load as w8a8's are: cuda_w8a8.c), their A as it
 * is. nnc_cuda_w8_gemm (templates/cuda/gemm_w8.cuh) multiplies a few rows
 * (a decode step's) straight from the int8 weight, one byte a value read
 * once, and dequantizes the weight into the workspace for cuBLASLt when
 * there are many (prefill), so the weight-only mode pays off where the
 * weights' bytes are the time. A norm before the GEMM (GPT-2's pre-norms)
 * runs first, its rows into the workspace, as the cuBLASLt path does; an
 * epilogue cuBLASLt lacks (SiLU, the erf GELU, an activation before the
 * residual, a residual that multiplies) is the epilogue kernel's, as for
 * the float GEMM, so that a prompt's GEMMs stay on tensor cores. */
#include <stdio.h>

#include "cuda.h"

void cu_int8w_gemm_body(const ec_ctx *x, int ki, bool post, bool residual, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  const char *ta = cu_stype(x, d->a), *to = cu_stype(x, d->out);
  char pa[256], lit[64], pg[256] = "nullptr", pbeta[256] = "nullptr";
  nnc_sb_printf(body, "  nnc_cuda_error e;\n");
  if (d->prologue != NNC_NORM_NONE) {
    ec_ptr(x, d->norm_gamma, pg, sizeof pg);
    if (d->prologue == NNC_NORM_LAYER && d->norm_beta >= 0) ec_ptr(x, d->norm_beta, pbeta, sizeof pbeta);
    nnc_sb_printf(body, "  %s *A = (%s *)m->ws;   /* A's rows normalized */\n", ta, ta);
    if (d->prologue == NNC_NORM_LAYER)
      nnc_sb_printf(body, "  if (nnc_cuda_layernorm(M, K, %s, K, %s, %s, %s, A, K, s, &e))\n", ec_ptr(x, d->a, pa, sizeof pa),
                    pg, pbeta, ec_literal(d->norm_eps, false, lit, sizeof lit));
    else
      nnc_sb_printf(body, "  if (nnc_cuda_rmsnorm(M, K, %s, K, %s, %s, A, K, s, &e))\n", ec_ptr(x, d->a, pa, sizeof pa), pg,
                    ec_literal(d->norm_eps, false, lit, sizeof lit));
    nnc_sb_printf(body, "    return kernel_failed(m, %d, e.msg);\n", ki);
  }
  long long scales, q = cu_int8_held(x, d->b, &scales);
  nnc_sb_printf(body, "  nnc_cuda_w8_gemm_args<%s, %s> f = {};\n  f.M = M;\n  f.N = N;\n  f.K = K;\n", ta, to);
  if (d->prologue != NNC_NORM_NONE) nnc_sb_printf(body, "  f.a = A;\n");
  else ec_assign(x, body, 2, "f.a", d->a);
  nnc_sb_printf(body, "  f.w = (const signed char *)(c.weights + %lld);   /* %s, int8 [N, K] */\n"
                      "  f.w_scale = (const float *)(c.weights + %lld);\n",
                q, x->g->tensors[d->b].name, scales);
  if (d->bias >= 0) ec_assign(x, body, 2, "f.bias", d->bias);
  ec_assign(x, body, 2, "f.d", d->out);
  nnc_sb_printf(body, "  f.alpha = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit));
  if (post && residual) {
    ec_assign(x, body, 2, "f.residual", d->residual);
    nnc_sb_printf(body, "  /* the activation, after the residual: the epilogue kernel's, after */\n");
  } else if (post) {
    nnc_sb_printf(body, "  /* the activation and the residual: the epilogue kernel's, after */\n");
  } else {
    if (d->residual >= 0) ec_assign(x, body, 2, "f.residual", d->residual);
    if (d->residual >= 0 && d->act != NNC_OP_NONE && d->act_last)
      nnc_sb_printf(body, "  f.act_last = true;   /* act(A.B + bias + residual) */\n");
    nnc_sb_printf(body, "  f.act = %s;\n", cu_gemm_act(d));
  }
  /* the dequantized weight (many rows) after the normalized rows */
  nnc_sb_printf(body, "  void *ws = (unsigned char *)m->ws + %s;\n",
                d->prologue != NNC_NORM_NONE ? "pad_offset((size_t)M * K * sizeof *A)" : "0");
  nnc_sb_printf(body, "  if (nnc_cuda_w8_gemm(m->blas, f, ws, s, &e)) return kernel_failed(m, %d, e.msg);\n", ki);
}

void cu_int8w_workspace(const ec_ctx *x, int ki, const char *M, const char *N, const char *K, nnc_sb *b) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  const char *ta = cu_stype(x, d->a);
  nnc_sb_printf(b, "  {   /* kernel %d:%s the weight dequantized (many rows) */\n    size_t w = 0;\n", ki,
                d->prologue != NNC_NORM_NONE ? " A normalized," : "");
  if (d->prologue != NNC_NORM_NONE)
    nnc_sb_printf(b, "    w += pad_offset((size_t)(%s) * (%s) * sizeof(%s));\n", M, K, ta);
  nnc_sb_printf(b, "    w += nnc_cuda_w8_ws_bytes<%s>((int)(%s), (int)(%s), (int)(%s));\n    if (w > need) need = w;\n  }\n",
                ta, M, N, K);
}
