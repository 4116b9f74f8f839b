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
  const nnc_tensor *w = &x->g->tensors[d->b];
  const long long tail = (long long)x->w_off[x->param_of[d->b]] + (long long)ec_fp8_held_of(w).smooth;
  nnc_sb_printf(body, "  if (nnc_cuda_w8a8_rows<%s>(%s, M, K, %s, K, %s, %s, %s,\n"
                      "                         c.weights + %lld,   /* %s's SmoothQuant tail */\n"
                      "                         Aq, a_scale, s, &e))\n"
                      "    return kernel_failed(m, %d, e.msg);\n",
                ta, norm, ec_ptr(x, d->a, pa, sizeof pa), pg, pbeta,
                ec_literal(d->prologue != NNC_NORM_NONE ? d->norm_eps : 0.0, false, lit, sizeof lit), tail, w->name, ki);
  gemm_call(x, ki, post, body);
}

bool cu_smooth_shared_any(const ec_ctx *x) {
  for (int ki = 0; ki < x->s->nk; ki++)
    if (x->s->k[ki].kind == NNC_KERNEL_GEMM && cu_w8a8_gemm(x, &x->s->k[ki].d.gemm) && rows_of_previous(x, ki)) return true;
  return false;
}

void cu_w8a8_smooth_check(const ec_ctx *x, nnc_sb *b) {
  if (!cu_smooth_shared_any(x)) return;
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b, "/* Weights whose GEMMs quantize one A once (the second reads the first's\n"
                   " * int8 rows), as manifest indices: A is divided by the first's SmoothQuant\n"
                   " * factors, so both must carry the same. */\n"
                   "static const int shared_rows[][2] = {\n");
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    if (k->kind != NNC_KERNEL_GEMM || !cu_w8a8_gemm(x, &k->d.gemm) || !rows_of_previous(x, ki)) continue;
    const int a = x->s->k[ki - 1].d.gemm.b, c = k->d.gemm.b;
    nnc_sb_printf(b, "  {%d, %d},   /* %s, %s */\n", x->param_of[a], x->param_of[c], x->g->tensors[a].name,
                  x->g->tensors[c].name);
  }
  nnc_sb_printf(b,
    "};\n\n"
    "static int check_shared_smooth(%s_model *m) {\n"
    "  for (size_t j = 0; j < sizeof shared_rows / sizeof shared_rows[0]; j++) {\n"
    "    const int a = shared_rows[j][0], c = shared_rows[j][1];\n"
    "    const size_t n = 16 + (size_t)qweight_layout[a].k * 4;\n"
    "    unsigned char *ta = (unsigned char *)malloc(2 * n);\n"
    "    if (!ta) return fail(m, %s_E_NOMEM, \"out of memory checking %%s.smooth\", manifest[c].name);\n"
    "    cudaError_t ce = cudaMemcpy(ta, m->weights + layout[a].offset + qweight_layout[a].smooth, n, cudaMemcpyDeviceToHost);\n"
    "    if (ce == cudaSuccess)\n"
    "      ce = cudaMemcpy(ta + n, m->weights + layout[c].offset + qweight_layout[c].smooth, n, cudaMemcpyDeviceToHost);\n"
    "    int32_t on_a = 0, on_c = 0;\n"
    "    memcpy(&on_a, ta, 4);\n"
    "    memcpy(&on_c, ta + n, 4);\n"
    "    const int same = on_a == on_c && (!on_a || memcmp(ta + 16, ta + n + 16, n - 16) == 0);\n"
    "    free(ta);\n"
    "    if (ce != cudaSuccess)\n"
    "      return fail(m, %s_E_DEVICE, \"checking %%s.smooth: %%s\", manifest[c].name, cudaGetErrorString(ce));\n"
    "    if (!same)\n"
    "      return fail(m, %s_E_FORMAT, \"%%s.smooth: expected the factors of %%s.smooth (%%s), found %%s: the two GEMMs \"\n"
    "                  \"quantize one input once (nnc calibrate --smooth writes one vector for all its linears)\",\n"
    "                  manifest[c].name, manifest[a].name, on_a ? \"given\" : \"none\", on_c ? \"other ones\" : \"none\");\n"
    "  }\n  return 0;\n}\n\n", p, P, P, P);
}

void cu_w8a8_workspace(const ec_ctx *x, int ki, const char *M, const char *K, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b, "  {   /* kernel %d: A as int8, its row scales */\n"
                   "    size_t w = pad_offset((size_t)(%s) * (%s)) + (size_t)(%s) * sizeof(float);\n"
                   "    if (w > need) need = w;\n  }\n", ki, M, K, M);
}
