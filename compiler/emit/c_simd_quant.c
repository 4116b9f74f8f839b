/* compiler/emit/c_simd_quant.c — weights held as int8 (--quantize=int8w,
 * w8a8) in a C SIMD folder: which weights, their bytes in the weights block,
 * and the quantization of the file's f32 values when they load (the layout
 * is the GEMM template's: nnc_simd_q8_pack, or nnc_simd_w8a8_pack when the
 * GEMM quantizes its A too). */
#include "c_simd.h"

static bool held_int8(const nnc_tensor *t) { return t->quant.kind == NNC_QUANT_INT8_CHANNEL; }

/* Whether the model's int8 weights are w8a8's (the pass marks them all one
 * way; cs_quant_check makes sure). */
static bool w8a8(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++) {
    const nnc_tensor *t = &x->g->tensors[x->g->params[i]];
    if (held_int8(t)) return t->quant.a8 != 0;
  }
  return false;
}

bool cs_quantized(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++)
    if (held_int8(&x->g->tensors[x->g->params[i]])) return true;
  return false;
}

bool cs_quantized_b(const ec_ctx *x, const nnc_kernel *k) {
  return k->kind == NNC_KERNEL_GEMM && k->d.gemm.b >= 0 && held_int8(&x->g->tensors[k->d.gemm.b]);
}

bool cs_w8a8_b(const ec_ctx *x, const nnc_kernel *k) {
  return cs_quantized_b(x, k) && x->g->tensors[k->d.gemm.b].quant.a8;
}

nnc_status cs_quant_check(const ec_ctx *x, nnc_error *err) {
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    for (int j = 0; j < k->nin; j++) {
      const nnc_tensor *t = &x->g->tensors[k->in[j]];
      if (!held_int8(t)) continue;
      /* the pass marks weights only linear layers read: one that another
       * kernel reads would see int8 bytes as floats */
      const nnc_gemm_desc *d = &k->d.gemm;
      if (k->kind != NNC_KERNEL_GEMM || d->b != k->in[j] || d->windowed || t->rank != 2 ||
          d->b_trans != (t->quant.axis == 0))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: kernel %d (%s) reads the int8 weight %s other than as "
                          "its GEMM's B", ki, nnc_kernel_kind_name(k->kind), t->name);
      if ((t->quant.a8 != 0) != w8a8(x))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: the int8 weight %s is %s, others are not", t->name,
                          t->quant.a8 ? "w8a8" : "int8w");
      if (!nnc_dim_is_const(t->shape[0]) || !nnc_dim_is_const(t->shape[1]))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: the int8 weight %s has a symbolic dim", t->name);
    }
  }
  return NNC_OK;
}

void cs_emit_quant_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  if (!cs_quantized(x)) return;
  /* the functions of the weights' layout (templates/c_simd/nnc_simd.h) */
  const char *bytes = w8a8(x) ? "nnc_simd_w8a8_bytes" : "nnc_simd_q8_bytes";
  const char *pack = w8a8(x) ? "nnc_simd_w8a8_pack" : "nnc_simd_q8_pack";
  nnc_sb_printf(b,
    "/* --quantize=%s: the weights held as int8 with an f32 scale per output\n"
    " * channel, in the GEMM's panel order (kernels/%s), quantized from the\n"
    " * file's f32 values when they load; the manifest keeps the file's view.%s Per\n"
    " * weight: the GEMM's N (output channels), K, and whether it is [N, K]. */\n"
    "static const unsigned char quantized[%d] = {", w8a8(x) ? "w8a8" : "int8w", w8a8(x) ? "gemm_w8a8.c" : "gemm_q8.c",
    w8a8(x) ? "\n * The GEMMs that read them quantize their rows of A to int8 as they run." : "", g->nparams);
  for (int i = 0; i < g->nparams; i++)
    nnc_sb_printf(b, "%s%d", i ? ", " : "", held_int8(&g->tensors[g->params[i]]) ? 1 : 0);
  nnc_sb_printf(b, "};\nstatic const int q8_shape[%d][3] = {\n", g->nparams);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    if (!held_int8(t)) {
      nnc_sb_printf(b, "  {0, 0, 0},\n");
      continue;
    }
    int n_axis = t->quant.axis;
    nnc_sb_printf(b, "  {%lld, %lld, %d},   /* %s */\n", (long long)t->shape[n_axis].k,
                  (long long)t->shape[1 - n_axis].k, n_axis == 0, t->name);
  }
  nnc_sb_printf(b,
    "};\n\n"
    "/* Bytes of weight i in the weights block: its f32 values, or its int8\n"
    " * panels and scales; each starts on a 64-byte line. */\n"
    "static size_t held_bytes(int i) {\n"
    "  size_t n = quantized[i] ? %s(q8_shape[i][0], q8_shape[i][1])\n"
    "                          : (size_t)nnc_weights_numel(&manifest[i]) * 4;\n"
    "  return (n + 63) / 64 * 64;\n}\n\n"
    "/* Weight i's f32 values, as the file or set_weight gives them, into its\n"
    " * int8 form at dst. */\n"
    "static void quantize_weight(void *ctx, int i, const float *values, void *dst) {\n"
    "  (void)ctx;\n"
    "  int N = q8_shape[i][0], K = q8_shape[i][1], n_k = q8_shape[i][2];\n"
    "  %s(values, n_k ? K : N, n_k, N, K, dst);\n}\n\n", bytes, pack);
}
