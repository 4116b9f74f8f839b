/* compiler/emit/cuda_qweights.c — weights held quantized in a CUDA folder:
 * --quantize=w8a8's and int8w's int8 [N, K] with a scale per output channel,
 * int4w's int4 [N, K / 2] with a scale per group of 128 k. Which weights,
 * their bytes in the weights block, their quantization on the GPU when the
 * float values load, a quantized checkpoint loaded as saved, and
 * <model>_save_quantized. Their GEMMs: cuda_w8a8.c (A quantized too) and
 * cuda_weight_only.c (A as it is).
 *
 * A marked weight (passes/quantize.c: the linear layers' weights whose K is
 * a multiple of 16, 32 for int4) is held in its place in the weights block
 * as ec_fp8_held_of lays it out: the values K-major whatever the file's
 * layout, then the f32 scales from the next 256 bytes. upload() sends the
 * float values to the device and quantizes them there: max|w| / 127 per
 * channel (templates/cuda/w8a8.cuh), max|w| / 7 per group of 128 k
 * (templates/cuda/gemm_w4.cuh), the C SIMD rules, so that either target
 * holds the same values. */
#include <stdio.h>
#include <string.h>

#include "cuda.h"

/* A weight held quantized (int8 or int4), or NULL. */
static const nnc_tensor *held_weight(const ec_ctx *x, int t) {
  const nnc_tensor *w = &x->g->tensors[t];
  return w->kind == NNC_TENSOR_PARAM &&
                 (w->quant.kind == NNC_QUANT_INT8_CHANNEL || w->quant.kind == NNC_QUANT_INT4_GROUP)
             ? w
             : NULL;
}

/* The folder's mode (the pass marks every weight one way): its name, and
 * how a quantized checkpoint stores it (nnc_weights_qform). */
typedef struct qmode {
  const char *name, *values;
  int bits, group, qmax;
} qmode;

static qmode mode_of(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++) {
    const nnc_tensor *t = held_weight(x, x->g->params[i]);
    if (!t) continue;
    if (t->quant.kind == NNC_QUANT_INT4_GROUP)
      return (qmode){"int4w", "int4 [n, k / 2] (k even in bits 0-3), a scale per 128 k", 4, t->quant.group, 7};
    return (qmode){t->quant.a8 ? "w8a8" : "int8w", "int8 [n, k], a scale per output channel", 8, 0, 127};
  }
  return (qmode){"none", "", 8, 0, 127};
}

bool cu_qweight_any(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++)
    if (held_weight(x, x->g->params[i])) return true;
  return false;
}

bool cu_smooth_any(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++) {
    const nnc_tensor *t = held_weight(x, x->g->params[i]);
    if (t && ec_fp8_held_of(t).smooth) return true;
  }
  return false;
}

bool cu_w8a8_gemm(const ec_ctx *x, const nnc_gemm_desc *d) {
  const nnc_tensor *w = d->windowed ? NULL : held_weight(x, d->b);
  return w && w->quant.kind == NNC_QUANT_INT8_CHANNEL && w->quant.a8;
}

int cu_weight_only_bits(const ec_ctx *x, const nnc_gemm_desc *d) {
  const nnc_tensor *w = d->windowed ? NULL : held_weight(x, d->b);
  if (!w || w->quant.a8) return 0;
  return w->quant.kind == NNC_QUANT_INT4_GROUP ? 4 : 8;
}

void cu_qweight_gemm_fields(const ec_ctx *x, const nnc_gemm_desc *d, bool post, bool residual, nnc_sb *body) {
  const nnc_tensor *t = &x->g->tensors[d->b];
  ec_fp8_held h = ec_fp8_held_of(t);
  long long off = (long long)x->w_off[x->param_of[d->b]];
  const bool int4 = t->quant.kind == NNC_QUANT_INT4_GROUP;
  char lit[64];
  nnc_sb_printf(body, "  f.w = (const %s *)(c.weights + %lld);   /* %s, %s */\n"
                      "  f.w_scale = (const float *)(c.weights + %lld);\n",
                int4 ? "unsigned char" : "signed char", off + (long long)h.q, t->name,
                int4 ? "int4 [N, K / 2]" : "int8 [N, K]", off + (long long)h.scales);
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

void cu_qweight_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const qmode q = mode_of(x);
  const int np = g->nparams ? g->nparams : 1;
  nnc_sb_printf(b, "/* --quantize=%s: the weights held as %s\n"
                   " * (n > 0) in the weight's place, the scales (n x groups) `scales` bytes in,\n"
                   " * SmoothQuant's tail (w8a8: a 16-byte header, int32 1 when on, then k factors)\n"
                   " * `smooth` bytes in (0: none); in_out: the file holds [k, n]. */\n"
                   "static const struct {\n  int n, k, in_out, groups;\n  size_t scales, smooth;\n} qweight_layout[%d] = {\n",
                q.name, q.values, np);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = held_weight(x, g->params[i]);
    if (!t) {
      nnc_sb_printf(b, "  {0, 0, 0, 0, 0, 0},\n");
      continue;
    }
    ec_fp8_held h = ec_fp8_held_of(t);
    nnc_sb_printf(b, "  {%lld, %lld, %d, %lld, %lld, %lld},   /* %s */\n", (long long)h.n, (long long)h.k,
                  t->quant.axis, (long long)h.groups, (long long)h.scales, (long long)h.smooth, t->name);
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0, 0, 0, 0, 0, 0},\n");
  nnc_sb_printf(b, "};\n\n");
  /* what support/nnc_weights_quant.h's loader and saver of quantized checkpoints ask */
  nnc_sb_printf(b, "/* A quantized checkpoint (support/nnc_weights_quant.h: `<name>` %s in the manifest's\n"
                   " * shape%s and `<name>.scale`, as _save_quantized here or in a C SIMD %s\n"
                   " * folder writes it) loads as saved: which weights, {N, K, 1 when [N, K]}, and the mode.%s */\n"
                   "static const unsigned char qweight_file[%d] = {",
                q.bits == 4 ? "U8" : "I8", q.bits == 4 ? " with K halved" : "", q.name,
                strcmp(q.name, "w8a8") == 0 ? " Its values may be\n * on C SIMD's 6-bit grid: any |q| <= 127 multiplies the same." : "",
                np);
  for (int i = 0; i < g->nparams; i++) nnc_sb_printf(b, "%s%d", i ? ", " : "", held_weight(x, g->params[i]) ? 1 : 0);
  if (!g->nparams) nnc_sb_printf(b, "0");
  nnc_sb_printf(b, "};\nstatic const int qweight_shape[%d][3] = {\n", np);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = held_weight(x, g->params[i]);
    if (!t) {
      nnc_sb_printf(b, "  {0, 0, 0},\n");
      continue;
    }
    ec_fp8_held h = ec_fp8_held_of(t);
    nnc_sb_printf(b, "  {%lld, %lld, %d},\n", (long long)h.n, (long long)h.k, t->quant.axis == 0);
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0, 0, 0},\n");
  nnc_sb_printf(b, "};\nstatic const nnc_weights_qform qweight_form = {\"%s\", %d, %d, %d};\n\n"
                   "/* Bytes of a channel of weight i's held values. */\n"
                   "static size_t qweight_row(int i) {\n"
                   "  return qweight_form.bits == 4 ? ((size_t)qweight_layout[i].k + 1) / 2 : (size_t)qweight_layout[i].k;\n"
                   "}\n\n"
                   "/* Bytes of weight i's held form: values, scales and a SmoothQuant tail. */\n"
                   "static size_t qweight_bytes(int i) {\n"
                   "  return qweight_layout[i].smooth ? qweight_layout[i].smooth + 16 + (size_t)qweight_layout[i].k * 4\n"
                   "                                  : qweight_layout[i].scales + (size_t)qweight_layout[i].n * qweight_layout[i].groups * 4;\n"
                   "}\n\n", q.name, q.bits, q.group, q.qmax);
}

/* upload_qweight: the float values to the device, quantized there. */
static void emit_upload(const ec_ctx *x, const qmode *q, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  const bool int4 = q->bits == 4;
  nnc_sb_printf(b,
    "/* --quantize=%s: weight i's float values to the device, then quantized there to\n"
    " * %s (%s). */\n"
    "static int upload_qweight(%s_model *m, int i, const float *data, size_t count) {\n"
    "  float *dev = NULL;\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_cuda_malloc(m->alloc, count * sizeof *dev, (void **)&dev, &e))\n"
    "    return fail(m, %s_E_NOMEM, \"quantizing weight %%s: %%s\", manifest[i].name, e.msg);\n"
    "  unsigned char *w = m->weights + layout[i].offset;\n"
    "  cudaError_t ce = cudaMemcpyAsync(dev, data, count * sizeof *dev, cudaMemcpyHostToDevice, m->stream);\n"
    "  nnc_cuda_error ke = {};\n"
    "  int bad = ce == cudaSuccess && %s(dev, qweight_layout[i].n, qweight_layout[i].k, qweight_layout[i].in_out != 0,%s\n"
    "                                       (%s *)w, (float *)(w + qweight_layout[i].scales), m->stream, &ke);\n"
    "  if (ce == cudaSuccess && !bad) ce = cudaStreamSynchronize(m->stream);\n"
    "  nnrt_cuda_free(m->alloc, dev, NULL);\n"
    "  if (bad) return fail(m, %s_E_DEVICE, \"quantizing weight %%s to %s: %%s\", manifest[i].name, ke.msg);\n"
    "  if (ce != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"quantizing weight %%s to %s: %%s\", manifest[i].name, cudaGetErrorString(ce));\n"
    "  return 0;\n}\n\n",
    q->name, int4 ? "int4 [n, k / 2] with a scale per group of 128 k" : "int8 [n, k] with a scale per output channel",
    int4 ? "max|w| / 7 over the group" : "max|w| / 127", p, P, int4 ? "nnc_cuda_w4_weight" : "nnc_cuda_w8a8_weight",
    int4 ? "" : "\n                                       qweight_layout[i].smooth ? w + qweight_layout[i].smooth : nullptr,",
    int4 ? "unsigned char" : "signed char", P, int4 ? "int4" : "int8", P, int4 ? "int4" : "int8");
}

/* The host side of a quantized checkpoint: its values and scales to the
 * held form and back (the file's [k, n] transposed), and the held form's
 * copy to and from the device. */
static void emit_file_forms(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* Loading a file through nnc_weights_load_held into host buffers (weight i's\n"
    " * count floats): a float weight's values stay as they are, to be quantized on\n"
    " * the GPU by upload_qweight (held[i] 0); a quantized checkpoint's values and\n"
    " * scales become the held form, [n, row bytes] then n x groups scales at\n"
    " * qweight_layout[i].scales (held[i] 1), which upload_qweight_held copies as\n"
    " * they are. An int4 file's [k / 2, n] bytes transpose as bytes: a byte holds\n"
    " * k and k + 1 of one channel in either layout. */\n"
    "typedef struct qload {\n  unsigned char held[NPARAMS + 1];\n  %s_model *m;\n} qload;\n\n"
    "static void qweight_keep(void *ctx, int i, const float *values, void *dst) {\n"
    "  ((qload *)ctx)->held[i] = 0;\n"
    "  memcpy(dst, values, (size_t)qweight_shape[i][0] * qweight_shape[i][1] * sizeof *values);\n}\n\n"
    "static void qweight_import(void *ctx, int i, const void *values, const float *scales, void *dst) {\n"
    "  ((qload *)ctx)->held[i] = 1;\n"
    "  const size_t n = (size_t)qweight_shape[i][0], row = qweight_row(i), groups = (size_t)qweight_layout[i].groups;\n"
    "  const int n_k = qweight_shape[i][2];\n"
    "  const unsigned char *v = (const unsigned char *)values;\n"
    "  unsigned char *q = (unsigned char *)dst;\n"
    "  float *s = (float *)(q + qweight_layout[i].scales);\n"
    "  for (size_t r = 0; r < n; r++) {\n"
    "    for (size_t j = 0; j < row; j++) q[r * row + j] = n_k ? v[r * row + j] : v[j * n + r];\n"
    "    for (size_t c = 0; c < groups; c++) s[r * groups + c] = n_k ? scales[r * groups + c] : scales[c * n + r];\n"
    "  }\n}\n\n"
    "/* The held form (a host copy) in the file's layout: the inverse of qweight_import. */\n"
    "static void qweight_export(void *ctx, int i, const void *held, void *values, float *scales) {\n"
    "  (void)ctx;\n"
    "  const size_t n = (size_t)qweight_shape[i][0], row = qweight_row(i), groups = (size_t)qweight_layout[i].groups;\n"
    "  const int n_k = qweight_shape[i][2];\n"
    "  const unsigned char *q = (const unsigned char *)held;\n"
    "  const float *s = (const float *)(q + qweight_layout[i].scales);\n"
    "  unsigned char *v = (unsigned char *)values;\n"
    "  for (size_t r = 0; r < n; r++) {\n"
    "    for (size_t j = 0; j < row; j++) v[n_k ? r * row + j : j * n + r] = q[r * row + j];\n"
    "    for (size_t c = 0; c < groups; c++) scales[n_k ? r * groups + c : c * n + r] = s[r * groups + c];\n"
    "  }\n}\n\n"
    "/* Copies weight i's held form between host (held) and its place on the device. */\n"
    "static int copy_qweight(%s_model *m, int i, void *held, enum cudaMemcpyKind kind) {\n"
    "  unsigned char *w = m->weights + layout[i].offset, *h = (unsigned char *)held;\n"
    "  const size_t q = (size_t)qweight_layout[i].n * qweight_row(i), at = qweight_layout[i].scales;\n"
    "  const int up = kind == cudaMemcpyHostToDevice;\n"
    "  /* the scales, and SmoothQuant's tail on the way back (qweight_smooth writes it on the way up) */\n"
    "  const size_t s = up ? (size_t)qweight_layout[i].n * qweight_layout[i].groups * sizeof(float) : qweight_bytes(i) - at;\n"
    "  cudaError_t ce = up ? cudaMemcpy(w, h, q, kind) : cudaMemcpy(h, w, q, kind);\n"
    "  if (ce == cudaSuccess) ce = up ? cudaMemcpy(w + at, h + at, s, kind) : cudaMemcpy(h + at, w + at, s, kind);\n"
    "  if (ce != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"copying weight %%s %%s the GPU: %%s\", manifest[i].name, up ? \"to\" : \"from\",\n"
    "                cudaGetErrorString(ce));\n"
    "  return 0;\n}\n\n"
    "static int upload_qweight_held(%s_model *m, int i, const void *held) {\n"
    "  return copy_qweight(m, i, (void *)held, cudaMemcpyHostToDevice);\n}\n\n", p, p, P, p);
  if (!cu_smooth_any(x)) return;
  nnc_sb_printf(b,
    "/* SmoothQuant's factors of weight i (`<name>.smooth`; NULL: none) into its\n"
    " * tail on the device, before its values: upload_qweight quantizes input\n"
    " * channel k times s_k, and its GEMM divides A's column k by s_k. */\n"
    "static int qweight_smooth(void *ctx, int i, const float *s, void *dst, nnrt_error *err) {\n"
    "  (void)dst;\n"
    "  %s_model *m = ((qload *)ctx)->m;\n"
    "  const size_t k = s ? (size_t)qweight_layout[i].k : 0;\n"
    "  unsigned char *tail = (unsigned char *)calloc(16 + k * 4, 1);\n"
    "  if (!tail) return nnrt_errorf(err, NNRT_E_NOMEM, \"out of memory loading %%s.smooth\", manifest[i].name);\n"
    "  const int32_t on = s != NULL;\n"
    "  memcpy(tail, &on, 4);\n"
    "  if (s) memcpy(tail + 16, s, k * 4);\n"
    "  cudaError_t ce = cudaMemcpy(m->weights + layout[i].offset + qweight_layout[i].smooth, tail, 16 + k * 4,\n"
    "                              cudaMemcpyHostToDevice);\n"
    "  free(tail);\n"
    "  return ce == cudaSuccess ? 0 : nnrt_errorf(err, NNRT_E_IO, \"copying %%s.smooth to the GPU: %%s\", manifest[i].name,\n"
    "                                             cudaGetErrorString(ce));\n}\n\n"
    "/* The factors a held form (a host copy) carries, or NULL: for saving. */\n"
    "static const float *qweight_smooth_of(void *ctx, int i, const void *held) {\n"
    "  (void)ctx;\n"
    "  const unsigned char *t = (const unsigned char *)held + qweight_layout[i].smooth;\n"
    "  int32_t on = 0;\n"
    "  if (qweight_layout[i].smooth) memcpy(&on, t, 4);\n"
    "  return on ? (const float *)(const void *)(t + 16) : NULL;\n}\n\n", p);
}

/* <model>_save_quantized: every weight back to the host as the model holds
 * it (the quantized ones as their held form, the others as f32), then
 * nnc_weights_save_held writes the file a C SIMD folder writes. */
static void emit_save(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* Weight i as the model holds it, into a new host buffer *out: the held form\n"
    " * of a quantized one, the f32 values (i32 for an i32 weight) of another. */\n"
    "static int download(%s_model *m, int i, void **out) {\n"
    "  const size_t n = (size_t)nnc_weights_numel(&manifest[i]);\n"
    "  const size_t esize = layout[i].stored == NNRT_F32 || layout[i].stored == NNRT_I32 ? 4 : 2;\n"
    "  const size_t held = qweight_layout[i].n ? qweight_bytes(i) : 0;\n"
    "  unsigned char *h = (unsigned char *)malloc(held ? held : n * 4 + 1);\n"
    "  if (!h) return fail(m, %s_E_NOMEM, \"%s_save_quantized: out of memory for %%s\", manifest[i].name);\n"
    "  *out = h;\n"
    "  if (held) return copy_qweight(m, i, h, cudaMemcpyDeviceToHost);\n"
    "  /* the stored values at the front of h, widened from the back so that none is overwritten unread */\n"
    "  cudaError_t ce = cudaMemcpy(h, m->weights + layout[i].offset, n * esize, cudaMemcpyDeviceToHost);\n"
    "  if (ce != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"copying weight %%s from the GPU: %%s\", manifest[i].name, cudaGetErrorString(ce));\n"
    "  for (size_t k = n; esize == 2 && k-- > 0;) {\n"
    "    uint16_t v;\n"
    "    memcpy(&v, h + 2 * k, 2);\n"
    "    const float f = layout[i].stored == NNRT_BF16 ? nnrt_bf16_to_f32(v) : nnrt_f16_to_f32(v);\n"
    "    memcpy(h + 4 * k, &f, 4);\n"
    "  }\n"
    "  return 0;\n}\n\n", p, P, p, P);
  ec_save_quantized_head(x, b);
  nnc_sb_printf(b,
    "  if (cudaStreamSynchronize(m->stream) != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"%s_save_quantized: the GPU failed: %%s\", cudaGetErrorString(cudaGetLastError()));\n"
    "  void *host[NPARAMS + 1] = {0};\n"
    "  int rc = 0;\n"
    "  for (int i = 0; !rc && i < NPARAMS; i++) rc = download(m, i, &host[i]);\n"
    "  nnrt_error e = {};\n"
    "  if (!rc && nnc_weights_save_held(path, manifest, NPARAMS, host, qweight_file, qweight_shape, &qweight_form,\n"
    "                                   qweight_export, %s, NULL, &e))\n"
    "    rc = fail(m, e.code, \"%%s\", e.msg);\n"
    "  for (int i = 0; i < NPARAMS; i++) free(host[i]);\n"
    "  return rc;\n}\n\n", P, p, cu_smooth_any(x) ? "qweight_smooth_of" : "NULL");
}

void cu_qweight_upload(const ec_ctx *x, nnc_sb *b) {
  const qmode q = mode_of(x);
  emit_upload(x, &q, b);
  emit_file_forms(x, b);
  emit_save(x, b);
}

void cu_qweight_decls(const ec_ctx *x, nnc_sb *b) {
  const qmode q = mode_of(x);
  ec_save_quantized_decl(x, q.name, q.bits, b);
}
