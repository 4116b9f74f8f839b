/* compiler/emit/emit_c_train_scale.c — loss scaling in the training API.
 *
 * autodiff multiplies the backward's seed by the input loss_scale, so every
 * gradient comes out times the model's current scale: under f16 storage the
 * small gradients stay above f16's underflow. The update divides the scale
 * out again (it folds into train_apply's scale). Dynamic scaling, the
 * default under f16: a non-finite gradient norm (an overflow at this scale)
 * skips the update and halves the scale; scale_window good updates in a row
 * double it. The state (scale, good updates in a row, updates skipped)
 * lives in the model and in checkpoints, so a resumed run takes the same
 * next step. */
#include <stdio.h>
#include <string.h>

#include "emit_c_train.h"
#include "passes/passes.h"

int ec_train_scale_input(const ec_ctx *x) {
  const nnc_graph *g = x->g;
  for (int i = 0; x->r->train && i < g->ninputs; i++)
    if (strcmp(g->tensors[g->inputs[i]].name, NNC_LOSS_SCALE_INPUT) == 0) return i;
  return -1;
}

void ec_train_scale_struct(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b,
    "  float loss_scale;             /* training: the gradients' factor, the loss_scale input of every pass */\n"
    "  int64_t scale_good;           /* updates in a row since the scale last changed */\n"
    "  int64_t skipped;              /* updates skipped for a non-finite gradient (dynamic scaling) */\n"
    "  int bad_loss;                 /* a micro-batch's loss since the last update was not finite */\n");
}

void ec_train_scale_decls(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  const bool f16 = x->r->precision.storage == NNC_F16;
  nnc_sb_printf(b,
    "/* Loss scaling. Every pass's gradients are d loss / d w times the model's\n"
    " * loss scale (%s when created; _load restores it), which keeps small f16\n"
    " * gradients above underflow; _train_gradient returns them so, and\n"
    " * _train_update divides it out (its norm and update are the unscaled\n"
    " * ones). With dynamic scaling (train options' dynamic_scale; the default\n"
    " * %s) a non-finite gradient norm skips the update (weights, moments and\n"
    " * _train_steps unchanged, *lr 0, _train_skipped counts it; the call\n"
    " * succeeds) and halves the scale, not below 1; scale_window good updates\n"
    " * in a row double it, up to %s. Without, a non-finite norm is an error. */\n"
    "/* Sets the scale of the next passes (finite, > 0) and drops the\n"
    " * micro-batches accumulated since the last update (they carry the old one). */\n"
    "int %s_train_set_loss_scale(%s_model *m, float scale);\n"
    "float %s_train_loss_scale(const %s_model *m);\n"
    "/* Updates skipped for a non-finite gradient (restored by _load). */\n"
    "int64_t %s_train_skipped(const %s_model *m);\n\n",
    f16 ? "32768" : "1", f16 ? "under f16 storage, as here" : "under f16 storage only", f16 ? "32768" : "2^24",
    p, p, p, p, p, p);
}

/* The constants and the update's and checkpoints' helpers (before the
 * target's train_state). */
void ec_train_scale_common(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  const bool f16 = x->r->precision.storage == NNC_F16;
  nnc_sb_printf(b,
    "/* Loss scaling: the first scale, the largest a doubling reaches (under\n"
    " * f16 storage 2^15: f16's largest value is 65504), whether it is dynamic\n"
    " * unless the options say, and the good updates before it doubles. */\n"
    "#define TRAIN_LOSS_SCALE %s\n#define TRAIN_SCALE_MAX %s\n#define TRAIN_DYNAMIC_DEFAULT %d\n"
    "#define TRAIN_SCALE_WINDOW 2000\n\n"
    "static int dynamic_scale(const %s_train_options *o) {\n"
    "  return o->dynamic_scale > 0 || (o->dynamic_scale == 0 && TRAIN_DYNAMIC_DEFAULT);\n}\n\n"
    "/* An update skipped for a non-finite gradient: the scale halves, not below 1. */\n"
    "static int skip_update(%s_model *m, float *lr) {\n"
    "  m->skipped++;\n"
    "  m->scale_good = 0;\n"
    "  if (m->loss_scale > 1) m->loss_scale = m->loss_scale > 2 ? m->loss_scale / 2 : 1.0f;\n"
    "  if (lr) *lr = 0;\n"
    "  return 0;\n}\n\n"
    "/* After a good update: scale_window of them in a row double the scale. */\n"
    "static void scale_after_update(%s_model *m, const %s_train_options *o) {\n"
    "  if (!dynamic_scale(o)) return;\n"
    "  if (++m->scale_good < (o->scale_window > 0 ? o->scale_window : TRAIN_SCALE_WINDOW)) return;\n"
    "  m->scale_good = 0;\n"
    "  if (m->loss_scale * 2 <= TRAIN_SCALE_MAX) m->loss_scale *= 2;\n}\n\n",
    f16 ? "32768.0f" : "1.0f", f16 ? "32768.0f" : "16777216.0f", f16 ? 1 : 0, p, p, p, p);
  const char *in = x->in_name[ec_train_scale_input(x)];
  nnc_sb_printf(b,
    "/* The caller's inputs with %s at m's scale: the training functions\n"
    " * fill it themselves (NULL inputs: all NULL but it, for check_run to refuse). */\n"
    "static %s_inputs scaled_inputs(%s_model *m, const %s_inputs *in) {\n"
    "  %s_inputs s;\n"
    "  memset(&s, 0, sizeof s);\n"
    "  if (in) s = *in;\n"
    "  s.%s = &m->loss_scale;\n"
    "  return s;\n}\n\n", in, p, p, p, p, in);
  nnc_sb_printf(b,
    "/* A checkpoint's loss scaling state, and m's from one (none: the first scale). */\n"
    "static nnrt_scale_state scale_state_of(const %s_model *m) {\n"
    "  nnrt_scale_state s = {m->loss_scale, m->scale_good, m->skipped};\n"
    "  return s;\n}\n\n"
    "static void set_scale_state(%s_model *m, const nnrt_scale_state *s) {\n"
    "  m->loss_scale = s->scale > 0 ? s->scale : TRAIN_LOSS_SCALE;\n"
    "  m->scale_good = s->good;\n"
    "  m->skipped = s->skipped;\n}\n\n", p, p);
}

/* _train_set_loss_scale, _train_loss_scale, _train_skipped (after it). */
void ec_train_scale_api(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "int %s_train_set_loss_scale(%s_model *m, float scale) {\n"
    "  if (!m) return %s_E_ARG;\n"
    "  if (!(scale > 0) || !isfinite(scale))\n"
    "    return fail(m, %s_E_ARG, \"%s_train_set_loss_scale: expected a finite scale > 0, found %%g\", (double)scale);\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  m->loss_scale = scale;\n"
    "  m->scale_good = 0;\n"
    "  m->nacc = 0;\n"
    "  return 0;\n}\n\n"
    "float %s_train_loss_scale(const %s_model *m) { return !m ? 0 : m->grad ? m->loss_scale : TRAIN_LOSS_SCALE; }\n\n"
    "int64_t %s_train_skipped(const %s_model *m) { return m ? m->skipped : 0; }\n\n",
    p, p, P, P, p, p, p, p, p);
}
