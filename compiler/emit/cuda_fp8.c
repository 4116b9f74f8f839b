/* compiler/emit/cuda_fp8.c — --precision=fp8 in a CUDA folder
 * (templates/cuda/fp8.cuh).
 *
 * A weight marked NNC_QUANT_FP8_CHANNEL (passes/quantize.c) is held in the
 * weights block as e4m3 [N, K] (K-major whatever the file's layout, as
 * cuBLASLt's FP8 kernels read it), then its N f32 scales at the next 256
 * bytes, then one f32: the fixed scale of its GEMMs' A from `nnc calibrate`
 * ("<weight>.input_scale" in the file load() reads), 0 for each row's own
 * (ec_fp8_held). A tied weight (a head tied to the embedding's table)
 * keeps its bf16 values first, for the gather, then its e4m3 copy.
 * upload() sends the float values to the device and quantizes them there
 * (and sets the fixed scale to 0). A GEMM reading such a weight quantizes its A to e4m3 first, a scale
 * per row, in one kernel that also applies the layernorm or rmsnorm it
 * reads; then nnc_cuda_gemm_fp8 runs cuBLASLt e4m3 x e4m3 with both scale
 * vectors and the epilogue, or (where it has no algorithm) nnc's wgmma FP8
 * GEMM on sm_90a, its fallback elsewhere. Everything else is as under
 * --precision=bf16. (GPT-2's c_fc writing mlp.c_proj's A as e4m3 itself,
 * with nnc calibrate's fixed scale, through that GEMM, was built in 6ac3067
 * and taken out: 0.147 ms on an H200 against cuBLASLt's 0.068 plus the
 * reader's 0.033 row pass.) */
#include <stdio.h>
#include <string.h>

#include "cuda.h"

#define EXPR EC_EXPR

static const nnc_tensor *fp8_weight(const ec_ctx *x, int t) {
  const nnc_tensor *w = &x->g->tensors[t];
  return w->kind == NNC_TENSOR_PARAM && w->quant.kind == NNC_QUANT_FP8_CHANNEL ? w : NULL;
}

bool cu_fp8_any(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++)
    if (fp8_weight(x, x->g->params[i])) return true;
  return false;
}

bool cu_fp8_gemm(const ec_ctx *x, const nnc_gemm_desc *d) { return !d->windowed && fp8_weight(x, d->b) != NULL; }

void cu_fp8_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  nnc_sb_printf(b, "/* --precision=fp8: the weights held as e4m3 [n, k] (n > 0) `q` bytes into the\n"
                   " * weight's place (after a tied weight's bf16 values, which its other readers read),\n"
                   " * a scale per output channel `scales` bytes in, then the fixed scale of its GEMMs'\n"
                   " * A; in_out: the file holds [k, n]. */\n"
                   "static const struct {\n  int n, k, in_out;\n  size_t q, scales;\n} fp8_layout[%d] = {\n",
                g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = fp8_weight(x, g->params[i]);
    if (!t) {
      nnc_sb_printf(b, "  {0, 0, 0, 0, 0},\n");
      continue;
    }
    ec_fp8_held h = ec_fp8_held_of(t);
    nnc_sb_printf(b, "  {%lld, %lld, %d, %lld, %lld},   /* %s%s */\n", (long long)h.n, (long long)h.k,
                  t->quant.axis, (long long)h.q, (long long)h.scales, t->name,
                  t->quant.tied ? ": tied, an e4m3 copy for its linears after its bf16 values" : "");
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0, 0, 0, 0, 0},\n");
  nnc_sb_printf(b, "};\n\n");
}

void cu_fp8_upload(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* --precision=fp8: weight i's float values to the device, then quantized there to\n"
    " * e4m3 [n, k] with a scale per output channel (max|w| / 448). */\n"
    "static int upload_fp8(%s_model *m, int i, const float *data, size_t count) {\n"
    "  float *dev = NULL;\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_cuda_malloc(m->alloc, count * sizeof *dev, (void **)&dev, &e))\n"
    "    return fail(m, %s_E_NOMEM, \"quantizing weight %%s: %%s\", manifest[i].name, e.msg);\n"
    "  unsigned char *w = m->weights + layout[i].offset, *q = w + fp8_layout[i].q;\n"
    "  float *scales = (float *)(w + fp8_layout[i].scales);\n"
    "  cudaError_t ce = cudaMemcpyAsync(dev, data, count * sizeof *dev, cudaMemcpyHostToDevice, m->stream);\n"
    "  nnc_cuda_error ke = {};\n"
    "  int bad = ce == cudaSuccess && nnc_cuda_fp8_weight(dev, fp8_layout[i].n, fp8_layout[i].k, fp8_layout[i].in_out != 0,\n"
    "                                                     q, scales, m->stream, &ke);\n"
    "  const float dynamic = 0.0f;   /* until load_input_scales gives a fixed one */\n"
    "  if (ce == cudaSuccess && !bad)\n"
    "    ce = cudaMemcpyAsync(scales + fp8_layout[i].n, &dynamic, sizeof dynamic, cudaMemcpyHostToDevice, m->stream);\n"
    "  if (ce == cudaSuccess && !bad) ce = cudaStreamSynchronize(m->stream);\n"
    "  nnrt_cuda_free(m->alloc, dev, NULL);\n"
    "  if (bad) return fail(m, %s_E_DEVICE, \"quantizing weight %%s to e4m3: %%s\", manifest[i].name, ke.msg);\n"
    "  if (ce != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"quantizing weight %%s to e4m3: %%s\", manifest[i].name, cudaGetErrorString(ce));\n"
    "  return 0;\n}\n\n", p, P, P, P);
  nnc_sb_printf(b,
    "/* nnc calibrate's fixed scales of the e4m3 GEMMs' A: \"<weight>.input_scale\", one f32,\n"
    " * for the weights whose file has one (the others keep each row's own scale). */\n"
    "static int load_input_scales(%s_model *m, const nnrt_st *st) {\n"
    "  for (int i = 0; i < NPARAMS; i++) {\n"
    "    if (!fp8_layout[i].n) continue;\n"
    "    char name[512];\n"
    "    snprintf(name, sizeof name, \"%%s.input_scale\", manifest[i].name);\n"
    "    const nnrt_st_tensor *t = NULL;\n"
    "    nnrt_error e = {};\n"
    "    if (nnrt_st_find(st, name, &t, &e)) continue;\n"
    "    float v = 0.0f;\n"
    "    if (t->numel != 1 || nnrt_st_copy_f32(st, t, &v, 1, &e) || !(v > 0.0f) || !isfinite(v))\n"
    "      return fail(m, %s_E_FORMAT, \"%%s: expected one positive finite float, found %%lld values%%s%%s\", name,\n"
    "                  (long long)t->numel, e.msg[0] ? \": \" : \"\", e.msg);\n"
    "    unsigned char *at = m->weights + layout[i].offset + fp8_layout[i].scales + (size_t)fp8_layout[i].n * 4;\n"
    "    cudaError_t ce = cudaMemcpy(at, &v, sizeof v, cudaMemcpyHostToDevice);\n"
    "    if (ce != cudaSuccess) return fail(m, %s_E_DEVICE, \"%%s to the GPU: %%s\", name, cudaGetErrorString(ce));\n"
    "  }\n  return 0;\n}\n\n", p, P, P);
}

/* The pointers of weight t held as e4m3, its scales and its A's fixed scale. */
static void weight_ptrs(const ec_ctx *x, int t, char *q, char *scale, char *fixed, size_t n) {
  ec_fp8_held h = ec_fp8_held_of(&x->g->tensors[t]);
  long long off = (long long)x->w_off[x->param_of[t]];
  snprintf(q, n, "(const unsigned char *)(c.weights + %lld)", off + (long long)h.q);
  snprintf(scale, n, "(const float *)(c.weights + %lld)", off + (long long)h.scales);
  snprintf(fixed, n, "(const float *)(c.weights + %lld)", off + (long long)h.fixed);
}

void cu_fp8_gemm_body(const ec_ctx *x, int ki, const char *epi, bool lt_residual, bool act_after, nnc_sb *body) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  const char *ta = cu_stype(x, d->a), *to = cu_stype(x, d->out);
  char pa[256], lit[64], wq[256], ws[256], wf[256];
  nnc_sb_printf(body, "  unsigned char *Aq = (unsigned char *)m->ws;   /* A's rows as e4m3 */\n"
                      "  float *a_scale = (float *)((unsigned char *)m->ws + pad_offset((size_t)M * K));   /* a scale a row */\n"
                      "  nnc_cuda_error e;\n");
  const char *norm = d->prologue == NNC_NORM_LAYER ? "NNC_FP8_LAYERNORM"
                   : d->prologue == NNC_NORM_RMS   ? "NNC_FP8_RMSNORM" : "NNC_FP8_PLAIN";
  char pg[256] = "nullptr", pbeta[256] = "nullptr";
  if (d->prologue != NNC_NORM_NONE) ec_ptr(x, d->norm_gamma, pg, sizeof pg);
  if (d->prologue == NNC_NORM_LAYER && d->norm_beta >= 0) ec_ptr(x, d->norm_beta, pbeta, sizeof pbeta);
  nnc_sb_printf(body, "  /* %s */\n", d->prologue == NNC_NORM_NONE  ? "A's rows to e4m3"
                                      : d->prologue == NNC_NORM_LAYER ? "the layernorm and the rows' e4m3 in one kernel"
                                                                      : "the rmsnorm and the rows' e4m3 in one kernel");
  weight_ptrs(x, d->b, wq, ws, wf, sizeof wq);
  nnc_sb_printf(body, "  const float *fixed = %s;   /* nnc calibrate's scale of A, or 0: each row's */\n", wf);
  nnc_sb_printf(body, "  if (nnc_cuda_fp8_rows<%s>(%s, M, K, %s, K, %s, %s, %s, fixed, Aq, a_scale, s, &e))\n"
                      "    return kernel_failed(m, %d, e.msg);\n",
                ta, norm, ec_ptr(x, d->a, pa, sizeof pa), pg, pbeta,
                ec_literal(d->prologue != NNC_NORM_NONE ? d->norm_eps : 0.0, false, lit, sizeof lit), ki);
  nnc_sb_printf(body, "  nnc_cuda_fp8_gemm_args<%s> f = {};\n  f.M = M;\n  f.N = N;\n  f.K = K;\n"
                      "  f.a = Aq;\n  f.a_scale = a_scale;\n"
                      "  f.w = %s;   /* %s, e4m3 [N, K] */\n  f.w_scale = %s;\n",
                to, wq, x->g->tensors[d->b].name, ws);
  if (d->bias >= 0) ec_assign(x, body, 2, "f.bias", d->bias);
  if (lt_residual) ec_assign(x, body, 2, "f.residual", d->residual);
  if (lt_residual && act_after) nnc_sb_printf(body, "  f.act_after_residual = true;   /* act(A.B + bias + residual) */\n");
  ec_assign(x, body, 2, "f.d", d->out);
  nnc_sb_printf(body, "  f.alpha = %s;\n  f.act = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit), epi);
  nnc_sb_printf(body, "  f.tmp = (float *)((unsigned char *)a_scale + pad_offset((size_t)M * sizeof(float)));   "
                      "/* the fallback's f32 columns */\n"
                      "  if (nnc_cuda_gemm_fp8(m->blas, f, &m->fp8_path[%d], s, &e)) return kernel_failed(m, %d, e.msg);\n",
                ki, ki);
}

void cu_fp8_workspace(const ec_ctx *x, int ki, const char *M, const char *N, const char *K, nnc_sb *b) {
  nnc_sb_printf(b, "  {   /* kernel %d: A as e4m3, its row scales, the fallback's f32 columns */\n"
                   "    size_t w = pad_offset((size_t)(%s) * (%s)) + pad_offset((size_t)(%s) * sizeof(float)) +\n"
                   "               nnc_cuda_fp8_tmp_bytes((long long)(%s), (long long)(%s));\n"
                   "    if (w > need) need = w;\n  }\n", ki, M, K, M, M, N);
}
