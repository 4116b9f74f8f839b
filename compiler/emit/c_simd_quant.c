/* compiler/emit/c_simd_quant.c — weights held as int8 (--quantize=int8w)
 * in a C SIMD folder: which weights, their bytes in the weights block, and
 * the quantization of the file's f32 values when they load (the layout is
 * the GEMM template's, nnc_simd_q8_pack). */
#include "c_simd.h"

static bool held_int8(const nnc_tensor *t) { return t->quant.kind == NNC_QUANT_INT8_CHANNEL; }

bool cs_quantized(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++)
    if (held_int8(&x->g->tensors[x->g->params[i]])) return true;
  return false;
}

bool cs_quantized_b(const ec_ctx *x, const nnc_kernel *k) {
  return k->kind == NNC_KERNEL_GEMM && k->d.gemm.b >= 0 && held_int8(&x->g->tensors[k->d.gemm.b]);
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
      if (!nnc_dim_is_const(t->shape[0]) || !nnc_dim_is_const(t->shape[1]))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: the int8 weight %s has a symbolic dim", t->name);
    }
  }
  return NNC_OK;
}

void cs_emit_quant_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  if (!cs_quantized(x)) return;
  nnc_sb_printf(b,
    "/* --quantize=int8w: the weights held as int8 with an f32 scale per output\n"
    " * channel, in the GEMM's panel order (kernels/gemm_q8.c), quantized from the\n"
    " * file's f32 values when they load; the manifest keeps the file's view. Per\n"
    " * weight: the GEMM's N (output channels), K, and whether it is [N, K]. */\n"
    "static const unsigned char quantized[%d] = {", g->nparams);
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
    "  size_t n = quantized[i] ? nnc_simd_q8_bytes(q8_shape[i][0], q8_shape[i][1])\n"
    "                          : (size_t)nnc_weights_numel(&manifest[i]) * 4;\n"
    "  return (n + 63) / 64 * 64;\n}\n\n"
    "/* Weight i's f32 values, as the file or set_weight gives them, into its\n"
    " * int8 form at dst. */\n"
    "static void quantize_weight(void *ctx, int i, const float *values, void *dst) {\n"
    "  (void)ctx;\n"
    "  int N = q8_shape[i][0], K = q8_shape[i][1], n_k = q8_shape[i][2];\n"
    "  nnc_simd_q8_pack(values, n_k ? K : N, n_k, N, K, dst);\n}\n\n");
}
