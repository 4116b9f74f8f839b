/* compiler/emit/c_simd_train.c — the training step of a C SIMD folder
 * compiled with --train: <model>_train_step runs the joint forward and
 * backward graph (whose outputs are the loss and the gradients), takes the
 * global gradient norm, clips it, and updates every weight in place with
 * AdamW or SGD (runtime/optim.c), one fused pass per weight tensor over the
 * weights, the gradient and the optimizer state. */
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

/* The output holding the gradient of parameter j ("grad.<name>"), or -1. */
static int grad_output(const ec_ctx *x, int j) {
  const nnc_graph *g = x->g;
  for (int i = 0; i < g->noutputs; i++)
    if (strncmp(g->outputs[i].name, "grad.", 5) == 0 &&
        strcmp(g->outputs[i].name + 5, g->tensors[g->params[j]].name) == 0)
      return i;
  return -1;
}

void cs_train_decls(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  nnc_sb_printf(b,
    "/* Training (nnc --train). %s_run computes the loss and every weight's\n"
    " * gradient; %s_train_step also updates the weights in m:\n"
    " *   AdamW: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,\n"
    " *          w -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd w)\n"
    " *   SGD:   m = b1 m + g, w -= lr (m + wd w)\n"
    " * with g the gradient scaled so that the global norm is at most clip.\n"
    " * Weights of rank 1 (biases, norm weights) take no weight decay. */\n"
    "typedef struct %s_train_options {\n"
    "  int sgd;              /* 0: AdamW; 1: SGD with momentum beta1 */\n"
    "  float lr;             /* learning rate of this step (> 0) */\n"
    "  float beta1, beta2, eps, weight_decay;\n"
    "  float clip;           /* largest global gradient norm; 0: no clipping */\n"
    "} %s_train_options;\n\n"
    "/* AdamW: lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight decay 0.01, no clipping. */\n"
    "void %s_train_options_default(%s_train_options *o);\n\n"
    "/* One step on a batch: forward, backward, update. *loss gets the batch's\n"
    " * loss and *grad_norm (may be NULL) the gradient norm before clipping.\n"
    " * The optimizer state lives in m (allocated by the first step). */\n"
    "int %s_train_step(%s_model *m, const %s_dims *d, const %s_inputs *in, const %s_train_options *o,\n"
    "                  float *loss, float *grad_norm);\n\n",
    p, p, p, p, p, p, p, p, p, p, p);
}

void cs_train_struct(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b,
    "  float *grad, *mom, *vel;     /* train_step: gradients and optimizer state, weights' layout */\n"
    "  int64_t step;               /* train_step: steps taken */\n");
}

void cs_train_destroy(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b, "  free(m->grad);\n  free(m->mom);\n  free(m->vel);\n");
}

nnc_status cs_write_train(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  int loss = -1;
  for (int i = 0; i < g->noutputs && loss < 0; i++)
    if (strncmp(g->outputs[i].name, "grad.", 5) != 0) loss = i;
  if (loss < 0)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "--train: the graph has no loss output");
  nnc_sb_printf(b,
    "void %s_train_options_default(%s_train_options *o) {\n"
    "  *o = (%s_train_options){.sgd = 0, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,\n"
    "                          .weight_decay = 0.01f, .clip = 0.0f};\n}\n\n", p, p, p);
  /* each weight's offset in the gradient and state blocks, and whether it decays */
  nnc_sb_printf(b, "/* Per weight: its offset in m->grad, m->mom and m->vel, and weight decay. */\n"
                   "static const struct {\n  int64_t at;\n  int decay;\n} train_table[%d] = {\n",
                g->nparams ? g->nparams : 1);
  int64_t at = 0;
  for (int j = 0; j < g->nparams; j++) {
    const nnc_tensor *t = &g->tensors[g->params[j]];
    nnc_sb_printf(b, "  {%lld, %d},   /* %s */\n", (long long)at, t->rank >= 2, t->name);
    at += nnc_tensor_max_elems(g, t);
  }
  nnc_sb_printf(b, "};\n#define TRAIN_NUMEL %lld\n\n", (long long)(at ? at : 1));
  nnc_sb_printf(b,
    "int %s_train_step(%s_model *m, const %s_dims *d, const %s_inputs *in, const %s_train_options *o,\n"
    "                  float *loss, float *grad_norm) {\n"
    "  if (!m || !o || !loss) return %s_E_ARG;\n"
    "  if (!(o->lr > 0) || !(o->clip >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))\n"
    "    return fail(m, %s_E_ARG, \"%s_train_step: expected lr > 0, clip >= 0 and betas in [0, 1), found lr %%g, \"\n"
    "                \"clip %%g, betas %%g and %%g\", o->lr, o->clip, o->beta1, o->beta2);\n"
    "  if (!m->grad) {\n"
    "    m->grad = malloc(TRAIN_NUMEL * sizeof *m->grad);\n"
    "    m->mom = calloc(TRAIN_NUMEL, sizeof *m->mom);\n"
    "    m->vel = calloc(TRAIN_NUMEL, sizeof *m->vel);\n"
    "    if (!m->grad || !m->mom || !m->vel) {\n"
    "      free(m->grad);\n      free(m->mom);\n      free(m->vel);\n"
    "      m->grad = m->mom = m->vel = NULL;\n"
    "      return fail(m, %s_E_NOMEM, \"%s_train_step: out of memory for the optimizer state\");\n"
    "    }\n"
    "  }\n"
    "  %s_outputs out = {\n", p, p, p, p, p, P, P, p, P, p, p);
  for (int i = 0; i < g->noutputs; i++) {
    if (i == loss) {
      nnc_sb_printf(b, "      .%s = loss,\n", x->out_name[i]);
      continue;
    }
    for (int j = 0; j < g->nparams; j++)
      if (grad_output(x, j) == i) nnc_sb_printf(b, "      .%s = m->grad + train_table[%d].at,\n", x->out_name[i], j);
  }
  nnc_sb_printf(b,
    "  };\n"
    "  int rc = %s_run(m, d, in, &out);\n"
    "  if (rc) return rc;\n"
    "  double ss = 0;\n"
    "  for (int j = 0; j < NPARAMS; j++) ss += nnrt_sum_squares(m->grad + train_table[j].at, nnc_weights_numel(&manifest[j]));\n"
    "  const double norm = sqrt(ss);\n"
    "  if (grad_norm) *grad_norm = (float)norm;\n"
    "  if (!isfinite(norm) || !isfinite(*loss))\n"
    "    return fail(m, %s_E_ARG, \"%s_train_step: the loss (%%g) or the gradient norm (%%g) is not finite; \"\n"
    "                \"the weights are unchanged\", (double)*loss, norm);\n"
    "  const float scale = o->clip > 0 && norm > o->clip ? (float)(o->clip / norm) : 1.0f;\n"
    "  m->step++;\n"
    "  const nnrt_optim opt = {.sgd = o->sgd, .lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,\n"
    "                          .weight_decay = o->weight_decay, .step = m->step};\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    const int64_t at = train_table[j].at;\n"
    "    nnrt_optim_update(&opt, m->w[j], m->grad + at, scale, m->mom + at, m->vel + at,\n"
    "                      nnc_weights_numel(&manifest[j]), train_table[j].decay);\n"
    "  }\n"
    "  return 0;\n}\n\n", p, P, p);
  return NNC_OK;
}
