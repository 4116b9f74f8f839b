/* compiler/emit/cuda_w8a8.c — --quantize=w8a8's GEMMs in a CUDA folder
 * (templates/cuda/w8a8.cuh): weights held as int8 [N, K] with a scale per
 * output channel (cuda_qweights.c), and A quantized to int8 as each GEMM
 * runs, a scale per row (max|a| / 127), in one kernel that also applies
 * the layernorm or rmsnorm it reads; then nnc_cuda_w8a8_gemm multiplies on
 * int8 tensor cores (int32 sums; wgmma through gemm_tma8.cuh where the
 * folder is built for sm_90a and A has 1024 rows or more, mma.sync
 * elsewhere) and dequantizes in its epilogue: act(acc * a_scale[m] *
 * w_scale[n] + bias) (+ residual), written in the output's dtype. A
 * residual that multiplies (SwiGLU's gate) is left to the epilogue kernel
 * the cuBLASLt path uses (p->post). Everything else is as under the
 * folder's --precision. */
#include "cuda.h"

/* The GEMM of kernel ki on Aq and a_scale: its arguments and the call. */
static void gemm_call(const ec_ctx *x, int ki, bool post, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  nnc_sb_printf(body, "  nnc_cuda_w8a8_gemm_args<%s> f = {};\n  f.M = M;\n  f.N = N;\n  f.K = K;\n"
                      "  f.a = Aq;\n  f.a_scale = a_scale;\n", cu_stype(x, d->out));
  cu_qweight_gemm_fields(x, d, post, false, body);
  nnc_sb_printf(body, "  if (nnc_cuda_w8a8_gemm(f, s, &e)) return kernel_failed(m, %d, e.msg);\n", ki);
}

/* Kernel ki - 1 is a w8a8 GEMM of the same A and norm, run every time just
 * before ki (neither is made at load): the int8 rows it left in the
 * workspace are ki's A too. BERT's q, k and v, three linears of one input
 * (hfuse does not join quantized weights), quantize it once. */
static bool rows_of_previous(const ec_ctx *x, int ki) {
  if (ki == 0) return false;
  const nnc_kernel *k = &x->s->k[ki], *q = &x->s->k[ki - 1];
  if (q->kind != NNC_KERNEL_GEMM || q->at_load || k->at_load || !cu_w8a8_gemm(x, &q->d.gemm)) return false;
  const nnc_gemm_desc *a = &k->d.gemm, *b = &q->d.gemm;
  if (a->a != b->a || a->prologue != b->prologue) return false;
  return a->prologue == NNC_NORM_NONE ||
         (a->norm_gamma == b->norm_gamma && a->norm_beta == b->norm_beta && a->norm_eps == b->norm_eps);
}

void cu_w8a8_gemm_body(const ec_ctx *x, int ki, bool post, nnc_sb *body) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  const char *ta = cu_stype(x, d->a);
  char pa[256], lit[64], pg[256] = "nullptr", pbeta[256] = "nullptr";
  nnc_sb_printf(body, "  signed char *Aq = (signed char *)m->ws;   /* A's rows as int8 */\n"
                      "  float *a_scale = (float *)((unsigned char *)m->ws + pad_offset((size_t)M * K));   /* a scale a row */\n"
                      "  nnc_cuda_error e;\n");
  if (rows_of_previous(x, ki)) {
    nnc_sb_printf(body, "  /* A's int8 rows and scales: kernel %d's, which read the same input just before */\n", ki - 1);
    gemm_call(x, ki, post, body);
    return;
  }
  const char *norm = d->prologue == NNC_NORM_LAYER ? "NNC_QUANT_LAYERNORM"
                   : d->prologue == NNC_NORM_RMS   ? "NNC_QUANT_RMSNORM" : "NNC_QUANT_PLAIN";
  if (d->prologue != NNC_NORM_NONE) ec_ptr(x, d->norm_gamma, pg, sizeof pg);
  if (d->prologue == NNC_NORM_LAYER && d->norm_beta >= 0) ec_ptr(x, d->norm_beta, pbeta, sizeof pbeta);
  nnc_sb_printf(body, "  /* %s */\n", d->prologue == NNC_NORM_NONE  ? "A's rows to int8"
                                      : d->prologue == NNC_NORM_LAYER ? "the layernorm and the rows' int8 in one kernel"
                                                                      : "the rmsnorm and the rows' int8 in one kernel");
  nnc_sb_printf(body, "  if (nnc_cuda_w8a8_rows<%s>(%s, M, K, %s, K, %s, %s, %s, Aq, a_scale, s, &e))\n"
                      "    return kernel_failed(m, %d, e.msg);\n",
                ta, norm, ec_ptr(x, d->a, pa, sizeof pa), pg, pbeta,
                ec_literal(d->prologue != NNC_NORM_NONE ? d->norm_eps : 0.0, false, lit, sizeof lit), ki);
  gemm_call(x, ki, post, body);
}

void cu_w8a8_workspace(const ec_ctx *x, int ki, const char *M, const char *K, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b, "  {   /* kernel %d: A as int8, its row scales */\n"
                   "    size_t w = pad_offset((size_t)(%s) * (%s)) + (size_t)(%s) * sizeof(float);\n"
                   "    if (w > need) need = w;\n  }\n", ki, M, K, M);
}
