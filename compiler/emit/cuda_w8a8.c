/* compiler/emit/cuda_w8a8.c — int8 weights in a CUDA folder
 * (templates/cuda/w8a8.cuh): --quantize=w8a8's GEMMs, and the weights
 * themselves for --quantize=int8w too (its GEMMs: cuda_int8w.c).
 *
 * A weight marked NNC_QUANT_INT8_CHANNEL (passes/quantize.c: the linear
 * layers' weights whose K is a multiple of 16) is held in the
 * weights block as int8 [N, K] (K-major whatever the file's layout), then
 * its N f32 scales at the next 256 bytes (ec_fp8_held_of's layout, as
 * --precision=fp8's e4m3 weights; the fixed-scale float after them stays
 * unused: w8a8 has no calibration). upload() sends the float values to the
 * device and quantizes them there (max|w| / 127 per output channel).
 * A GEMM reading such a weight quantizes its A to int8 first, a scale per
 * row (max|a| / 127), in one kernel that also applies the layernorm or
 * rmsnorm it reads; then nnc_cuda_w8a8_gemm multiplies on int8 tensor cores
 * (int32 sums; wgmma through gemm_tma8.cuh where the folder is built for
 * sm_90a and A has 1024 rows or more, mma.sync elsewhere) and dequantizes in its epilogue: act(acc * a_scale[m] *
 * w_scale[n] + bias) (+ residual), written in the output's dtype. A
 * residual that multiplies (SwiGLU's gate) is left to the epilogue kernel
 * the cuBLASLt path uses (p->post). Everything else is as under the
 * folder's --precision. */
#include <stdio.h>
#include <string.h>

#include "cuda.h"

/* A weight held as int8 [N, K] (w8a8's or int8w's), or NULL. */
static const nnc_tensor *int8_weight(const ec_ctx *x, int t) {
  const nnc_tensor *w = &x->g->tensors[t];
  return w->kind == NNC_TENSOR_PARAM && w->quant.kind == NNC_QUANT_INT8_CHANNEL ? w : NULL;
}

/* The quantize mode of the folder's int8 weights: w8a8 quantizes A too. */
static bool any_a8(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++) {
    const nnc_tensor *t = int8_weight(x, x->g->params[i]);
    if (t && t->quant.a8) return true;
  }
  return false;
}

bool cu_int8_any(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++)
    if (int8_weight(x, x->g->params[i])) return true;
  return false;
}

bool cu_w8a8_gemm(const ec_ctx *x, const nnc_gemm_desc *d) {
  const nnc_tensor *w = d->windowed ? NULL : int8_weight(x, d->b);
  return w && w->quant.a8;
}

bool cu_int8w_gemm(const ec_ctx *x, const nnc_gemm_desc *d) {
  const nnc_tensor *w = d->windowed ? NULL : int8_weight(x, d->b);
  return w && !w->quant.a8;
}

void cu_int8_gemm_fields(const ec_ctx *x, const nnc_gemm_desc *d, bool post, bool residual, nnc_sb *body) {
  ec_fp8_held h = ec_fp8_held_of(&x->g->tensors[d->b]);
  long long off = (long long)x->w_off[x->param_of[d->b]];
  char lit[64];
  nnc_sb_printf(body, "  f.w = (const signed char *)(c.weights + %lld);   /* %s, int8 [N, K] */\n"
                      "  f.w_scale = (const float *)(c.weights + %lld);\n",
                off + (long long)h.q, x->g->tensors[d->b].name, off + (long long)h.scales);
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
}

void cu_int8_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *mode = any_a8(x) ? "w8a8" : "int8w";
  nnc_sb_printf(b, "/* --quantize=%s: the weights held as int8 [n, k] (n > 0) in the weight's place,\n"
                   " * a scale per output channel `scales` bytes in; in_out: the file holds [k, n]. */\n"
                   "static const struct {\n  int n, k, in_out;\n  size_t scales;\n} int8_layout[%d] = {\n", mode,
                g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = int8_weight(x, g->params[i]);
    if (!t) {
      nnc_sb_printf(b, "  {0, 0, 0, 0},\n");
      continue;
    }
    ec_fp8_held h = ec_fp8_held_of(t);
    nnc_sb_printf(b, "  {%lld, %lld, %d, %lld},   /* %s */\n", (long long)h.n, (long long)h.k, t->quant.axis,
                  (long long)h.scales, t->name);
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0, 0, 0, 0},\n");
  nnc_sb_printf(b, "};\n\n");
  /* what support/nnc_weights_quant.h's loader of quantized checkpoints asks */
  nnc_sb_printf(b, "/* A quantized checkpoint (support/nnc_weights_quant.h: `<name>` I8 in the manifest's\n"
                   " * shape and `<name>.scale`, as a C SIMD %s folder's _save_quantized writes) loads\n"
                   " * as saved: which weights, {N, K, 1 when [N, K]}, and the mode.%s */\n"
                   "static const unsigned char int8_quantized[%d] = {", mode,
                any_a8(x) ? " Its values may be\n * on C SIMD's 6-bit grid: any |q| <= 127 multiplies the same." : "",
                g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) nnc_sb_printf(b, "%s%d", i ? ", " : "", int8_weight(x, g->params[i]) ? 1 : 0);
  if (!g->nparams) nnc_sb_printf(b, "0");
  nnc_sb_printf(b, "};\nstatic const int int8_shape[%d][3] = {\n", g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = int8_weight(x, g->params[i]);
    if (!t) {
      nnc_sb_printf(b, "  {0, 0, 0},\n");
      continue;
    }
    ec_fp8_held h = ec_fp8_held_of(t);
    nnc_sb_printf(b, "  {%lld, %lld, %d},\n", (long long)h.n, (long long)h.k, t->quant.axis == 0);
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0, 0, 0},\n");
  nnc_sb_printf(b, "};\nstatic const nnc_weights_qform int8_form = {\"%s\", 8, 0, 127};\n\n", mode);
}

void cu_int8_upload(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* --quantize=%s: weight i's float values to the device, then quantized there to\n"
    " * int8 [n, k] with a scale per output channel (max|w| / 127). */\n"
    "static int upload_int8(%s_model *m, int i, const float *data, size_t count) {\n"
    "  float *dev = NULL;\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_cuda_malloc(m->alloc, count * sizeof *dev, (void **)&dev, &e))\n"
    "    return fail(m, %s_E_NOMEM, \"quantizing weight %%s: %%s\", manifest[i].name, e.msg);\n"
    "  unsigned char *w = m->weights + layout[i].offset;\n"
    "  cudaError_t ce = cudaMemcpyAsync(dev, data, count * sizeof *dev, cudaMemcpyHostToDevice, m->stream);\n"
    "  nnc_cuda_error ke = {};\n"
    "  int bad = ce == cudaSuccess && nnc_cuda_w8a8_weight(dev, int8_layout[i].n, int8_layout[i].k, int8_layout[i].in_out != 0,\n"
    "                                                      (signed char *)w, (float *)(w + int8_layout[i].scales),\n"
    "                                                      m->stream, &ke);\n"
    "  if (ce == cudaSuccess && !bad) ce = cudaStreamSynchronize(m->stream);\n"
    "  nnrt_cuda_free(m->alloc, dev, NULL);\n"
    "  if (bad) return fail(m, %s_E_DEVICE, \"quantizing weight %%s to int8: %%s\", manifest[i].name, ke.msg);\n"
    "  if (ce != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"quantizing weight %%s to int8: %%s\", manifest[i].name, cudaGetErrorString(ce));\n"
    "  return 0;\n}\n\n", any_a8(x) ? "w8a8" : "int8w", p, P, P, P);
  nnc_sb_printf(b,
    "/* Loading a file through nnc_weights_load_held into host buffers (weight i's\n"
    " * count floats): a float weight's values stay as they are, to be quantized on\n"
    " * the GPU by upload_int8 (held[i] 0); a quantized checkpoint's int8 values and\n"
    " * scales become the held form, [n, k] then n scales at int8_layout[i].scales\n"
    " * (held[i] 1), which upload_int8_held copies as they are. */\n"
    "static void int8_keep(void *ctx, int i, const float *values, void *dst) {\n"
    "  ((unsigned char *)ctx)[i] = 0;\n"
    "  memcpy(dst, values, (size_t)int8_shape[i][0] * int8_shape[i][1] * sizeof *values);\n}\n\n"
    "static void int8_import(void *ctx, int i, const void *values, const float *scales, void *dst) {\n"
    "  ((unsigned char *)ctx)[i] = 1;\n"
    "  const int n = int8_shape[i][0], k = int8_shape[i][1], n_k = int8_shape[i][2];\n"
    "  const signed char *v = (const signed char *)values;\n"
    "  signed char *q = (signed char *)dst;\n"
    "  for (int r = 0; r < n; r++)\n"
    "    for (int j = 0; j < k; j++) q[(size_t)r * k + j] = n_k ? v[(size_t)r * k + j] : v[(size_t)j * n + r];\n"
    "  memcpy((unsigned char *)dst + int8_layout[i].scales, scales, (size_t)n * sizeof *scales);\n}\n\n"
    "static int upload_int8_held(%s_model *m, int i, const void *held) {\n"
    "  unsigned char *w = m->weights + layout[i].offset;\n"
    "  const size_t q = (size_t)int8_layout[i].n * int8_layout[i].k;\n"
    "  cudaError_t ce = cudaMemcpy(w, held, q, cudaMemcpyHostToDevice);\n"
    "  if (ce == cudaSuccess)\n"
    "    ce = cudaMemcpy(w + int8_layout[i].scales, (const unsigned char *)held + int8_layout[i].scales,\n"
    "                    (size_t)int8_layout[i].n * sizeof(float), cudaMemcpyHostToDevice);\n"
    "  if (ce != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"copying weight %%s to the GPU: %%s\", manifest[i].name, cudaGetErrorString(ce));\n"
    "  return 0;\n}\n\n", p, P);
}

/* The GEMM of kernel ki on Aq and a_scale: its arguments and the call. */
static void gemm_call(const ec_ctx *x, int ki, bool post, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  nnc_sb_printf(body, "  nnc_cuda_w8a8_gemm_args<%s> f = {};\n  f.M = M;\n  f.N = N;\n  f.K = K;\n"
                      "  f.a = Aq;\n  f.a_scale = a_scale;\n", cu_stype(x, d->out));
  cu_int8_gemm_fields(x, d, post, false, body);
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
