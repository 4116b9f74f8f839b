/* compiler/emit/c_simd_quant.c — weights held quantized (--quantize=int8w,
 * w8a8, int4w) in a C SIMD folder: which weights, their bytes in the
 * weights block, and the quantization of the file's f32 values when they
 * load (the layout is the GEMM template's: nnc_simd_q8_pack, or
 * nnc_simd_w8a8_pack when the GEMM quantizes its A too, or nnc_simd_q4_pack
 * for int4 groups). */
#include "c_simd.h"

/* One held form: its --quantize name, the template that reads it and its
 * functions, the GEMM argument, and a note for comments. */
typedef struct qform {
  const char *mode, *file, *prefix, *field, *held;
  int bits, group, qmax;   /* as a quantized checkpoint stores it (nnc_weights_qform) */
  bool smooth;             /* its held forms carry SmoothQuant's factors (the _smooth functions) */
  const char *layout;      /* the generated tables' comment: how a weight is held */
  const char *a_note;      /* and what its GEMMs do to A ("" when nothing) */
} qform;

static const qform forms[] = {
  {"int8w", "gemm_q8.c", "nnc_simd_q8", "b_q8", "int8", 8, 0, 127, false,
   "int8 with an f32 scale per output channel", ""},
  {"w8a8", "gemm_w8a8.c", "nnc_simd_w8a8", "b_w8a8", "int8, A quantized per row", 8, 0, 31, true,
   "int8 with an f32 scale per output channel",
   "\n * The GEMMs that read them quantize their rows of A to int8 as they run."},
  {"int4w", "gemm_q4.c", "nnc_simd_q4", "b_q4", "int4, a scale per 128 k", 4, 128, 7, false,
   "int4 with an f32 scale per group of 128 k of an output channel", ""},
};

static bool held_quant(const nnc_tensor *t) { return t->quant.kind != NNC_QUANT_NONE; }

static const qform *form_of(const nnc_tensor *t) {
  return t->quant.kind == NNC_QUANT_INT4_GROUP ? &forms[2] : t->quant.a8 ? &forms[1] : &forms[0];
}

/* The model's held form (the pass marks every weight one way;
 * cs_quant_check makes sure); NULL when none is quantized. */
static const qform *model_form(const ec_ctx *x) {
  for (int i = 0; i < x->g->nparams; i++) {
    const nnc_tensor *t = &x->g->tensors[x->g->params[i]];
    if (held_quant(t)) return form_of(t);
  }
  return NULL;
}

bool cs_quantized(const ec_ctx *x) { return model_form(x) != NULL; }

bool cs_quantized_b(const ec_ctx *x, const nnc_kernel *k) {
  return k->kind == NNC_KERNEL_GEMM && k->d.gemm.b >= 0 && held_quant(&x->g->tensors[k->d.gemm.b]);
}

const char *cs_quant_b_field(const ec_ctx *x, const nnc_kernel *k, const char **held) {
  const qform *f = form_of(&x->g->tensors[k->d.gemm.b]);
  *held = f->held;
  return f->field;
}

nnc_status cs_quant_check(const ec_ctx *x, nnc_error *err) {
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    for (int j = 0; j < k->nin; j++) {
      const nnc_tensor *t = &x->g->tensors[k->in[j]];
      if (!held_quant(t)) continue;
      /* the pass marks weights only linear layers read: one that another
       * kernel reads would see the held bytes as floats */
      const nnc_gemm_desc *d = &k->d.gemm;
      if (k->kind != NNC_KERNEL_GEMM || d->b != k->in[j] || d->windowed || t->rank != 2 ||
          d->b_trans != (t->quant.axis == 0))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: kernel %d (%s) reads the %s weight %s other than as "
                          "its GEMM's B", ki, nnc_kernel_kind_name(k->kind), form_of(t)->held, t->name);
      if (form_of(t) != model_form(x))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: the weight %s is %s, others are %s", t->name,
                          form_of(t)->mode, model_form(x)->mode);
      if (t->quant.kind == NNC_QUANT_INT4_GROUP && t->quant.group != 128)
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: the int4 weight %s has groups of %d, expected 128 "
                          "(the template's NNC_SIMD_Q4_GROUP)", t->name, t->quant.group);
      if (!nnc_dim_is_const(t->shape[0]) || !nnc_dim_is_const(t->shape[1]))
        return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "c-simd: the quantized weight %s has a symbolic dim", t->name);
    }
  }
  return NNC_OK;
}

void cs_emit_quant_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const qform *f = model_form(x);
  if (!f) return;
  const bool smooth = f->smooth;
  /* the functions of the weights' layout (templates/c_simd/nnc_simd.h) */
  nnc_sb_printf(b,
    "/* --quantize=%s: the weights held as\n"
    " * %s,\n"
    " * in the GEMM's panel order (kernels/%s), quantized from the file's f32\n"
    " * values when they load; the manifest keeps the file's view.%s Per\n"
    " * weight: the GEMM's N (output channels), K, and whether it is [N, K]. */\n"
    "static const unsigned char quantized[%d] = {", f->mode,
    f->layout, f->file, f->a_note, g->nparams);
  for (int i = 0; i < g->nparams; i++)
    nnc_sb_printf(b, "%s%d", i ? ", " : "", held_quant(&g->tensors[g->params[i]]) ? 1 : 0);
  nnc_sb_printf(b, "};\nstatic const int q8_shape[%d][3] = {\n", g->nparams);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    if (!held_quant(t)) {
      nnc_sb_printf(b, "  {0, 0, 0},\n");
      continue;
    }
    int n_axis = t->quant.axis;
    nnc_sb_printf(b, "  {%lld, %lld, %d},   /* %s */\n", (long long)t->shape[n_axis].k,
                  (long long)t->shape[1 - n_axis].k, n_axis == 0, t->name);
  }
  nnc_sb_printf(b,
    "};\n\n"
    "/* Bytes of weight i in the weights block: its f32 values, or its held\n"
    " * values and scales; each starts on a 64-byte line. */\n"
    "static size_t held_bytes(int i) {\n"
    "  size_t n = quantized[i] ? %s_bytes(q8_shape[i][0], q8_shape[i][1])\n"
    "                          : (size_t)nnc_weights_numel(&manifest[i]) * 4;\n"
    "  return (n + 63) / 64 * 64;\n}\n\n"
    "/* Weight i's f32 values, as the file or set_weight gives them, into its\n"
    " * held form at dst%s. */\n"
    "static void quantize_weight(void *ctx, int i, const float *values, void *dst) {\n"
    "  (void)ctx;\n"
    "  int N = q8_shape[i][0], K = q8_shape[i][1], n_k = q8_shape[i][2];\n"
    "  %s_pack%s(values, n_k ? K : N, n_k, N, K, %sdst);\n}\n\n", f->prefix,
    smooth ? " (with the SmoothQuant factors it holds)" : "", f->prefix, smooth ? "_smooth" : "",
    smooth ? "nnc_simd_w8a8_smooth(dst, N, K), " : "");
  const char *vt = f->bits == 4 ? "uint8_t" : "int8_t";
  nnc_sb_printf(b,
    "/* How a quantized checkpoint stores them (support/nnc_weights_quant.h):\n"
    " * %s; weight i's held form from the\n"
    " * file's values and scales (loaded as they were saved), and back. */\n"
    "static const nnc_weights_qform qform = {\"%s\", %d, %d, %d};\n\n"
    "static void import_weight(void *ctx, int i, const void *values, const float *scales, void *dst) {\n"
    "  (void)ctx;\n"
    "  %s_import%s((const %s *)values, scales, q8_shape[i][2], q8_shape[i][0], q8_shape[i][1],%s dst);\n}\n\n"
    "static void export_weight(void *ctx, int i, const void *held, void *values, float *scales) {\n"
    "  (void)ctx;\n"
    "  %s_export(held, q8_shape[i][2], q8_shape[i][0], q8_shape[i][1], (%s *)values, scales);\n}\n\n",
    f->bits == 4 ? "int4 values two a byte, a scale per 128 k" : "int8 values, a scale per channel",
    f->mode, f->bits, f->group, f->qmax, f->prefix, smooth ? "_smooth" : "", vt,
    smooth ? "\n                             nnc_simd_w8a8_smooth(dst, q8_shape[i][0], q8_shape[i][1])," : "",
    f->prefix, vt);
  if (!smooth) return;
  nnc_sb_printf(b,
    "/* SmoothQuant's factors of weight i (`<name>.smooth`, or NULL: off), held\n"
    " * with its values (the loader sets them first): packing multiplies its input\n"
    " * channels by them, the GEMM divides A's columns by them. */\n"
    "static int smooth_weight(void *ctx, int i, const float *s, void *dst, nnrt_error *err) {\n"
    "  (void)ctx;\n  (void)err;\n"
    "  nnc_simd_w8a8_set_smooth(dst, q8_shape[i][0], q8_shape[i][1], s);\n  return 0;\n}\n\n"
    "static const float *smooth_of(void *ctx, int i, const void *held) {\n"
    "  (void)ctx;\n"
    "  return nnc_simd_w8a8_smooth(held, q8_shape[i][0], q8_shape[i][1]);\n}\n\n");
}

const char *cs_quant_smooth_fn(const ec_ctx *x, bool back) {
  const qform *f = model_form(x);
  return f && f->smooth ? (back ? "smooth_of" : "smooth_weight") : "NULL";
}

void cs_quant_decls(const ec_ctx *x, nnc_sb *b) {
  const qform *f = model_form(x);
  if (f) ec_save_quantized_decl(x, f->mode, f->bits, b);
}

void cs_emit_quant_api(const ec_ctx *x, nnc_sb *b) {
  if (!cs_quantized(x)) return;
  nnc_sb_printf(b, "\n");
  ec_save_quantized_head(x, b);
  nnc_sb_printf(b,
    "  nnrt_error e;\n  memset(&e, 0, sizeof e);\n"
    "  int rc = nnc_weights_save_held(path, manifest, NPARAMS, m->w, quantized, q8_shape, &qform, export_weight,\n"
    "                                  %s, NULL, &e);\n"
    "  return rc ? fail(m, rc, \"%%s\", e.msg) : 0;\n}\n", cs_quant_smooth_fn(x, true));
}
