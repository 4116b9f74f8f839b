/* compiler/emit/emit_c_train.c — the training API every C-API target
 * declares for a model compiled with --train, and the parts of its
 * definition that do not depend on where the weights live: the options and
 * their defaults, the learning-rate schedule, the table of each weight's
 * place in the gradient and optimizer blocks, and which weights decay. The
 * target writes the rest (c_simd_train.c). */
#include <stdio.h>
#include <string.h>

#include "emit_c_train.h"
#include "passes/passes.h"

int ec_train_loss(const ec_ctx *x) {
  for (int i = 0; i < x->g->noutputs; i++)
    if (strncmp(x->g->outputs[i].name, "grad.", 5) != 0) return i;
  return -1;
}

int ec_train_param_of_output(const ec_ctx *x, int i) {
  const nnc_graph *g = x->g;
  if (strncmp(g->outputs[i].name, "grad.", 5) != 0) return -1;
  for (int j = 0; j < g->nparams; j++)
    if (strcmp(g->outputs[i].name + 5, g->tensors[g->params[j]].name) == 0) return j;
  return -1;
}

bool ec_train_is_kept(const ec_ctx *x, int i) {
  return i != ec_train_loss(x) && ec_train_param_of_output(x, i) < 0;
}

int ec_train_nkept(const ec_ctx *x) {
  int n = 0;
  for (int i = 0; i < x->g->noutputs; i++) n += ec_train_is_kept(x, i);
  return n;
}

void ec_train_decls(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  nnc_sb_printf(b,
    "/* Training (nnc --train). %s_run computes the loss and every weight's\n"
    " * gradient (the outputs grad.<weight>), _forward the loss and the other\n"
    " * outputs alone (for evaluation); the functions below keep the\n"
    " * gradients and the optimizer state in m and update the weights in place:\n"
    " *   AdamW: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,\n"
    " *          w -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd w)\n"
    " *   SGD:   m = b1 m + g, w -= lr (m + wd w)\n"
    " * with g the mean gradient of the micro-batches accumulated since the last\n"
    " * update, scaled so that its global norm is at most clip. */\n"
    "typedef struct %s_train_options {\n"
    "  int sgd;               /* 0: AdamW; 1: SGD with momentum beta1 */\n"
    "  float lr;              /* the peak learning rate (> 0) */\n"
    "  int64_t warmup_steps;  /* linear warm-up: update t <= warmup_steps uses lr t / warmup_steps */\n"
    "  int64_t decay_steps;   /* then a cosine decay over this many updates to lr min_lr_ratio; 0: none */\n"
    "  float min_lr_ratio;\n"
    "  float beta1, beta2, eps, weight_decay;\n"
    "  const char *no_decay;  /* the weights without weight decay: comma-separated names where '*'\n"
    "                            matches any run (\"*.bias, ln_*\"); NULL: the weights of rank 1\n"
    "                            (biases, norm weights) */\n"
    "  float clip;            /* largest global gradient norm; 0: no clipping */\n"
    "  int dynamic_scale;     /* loss scaling (below): 1 dynamic, -1 a fixed scale; 0: dynamic under f16\n"
    "                            storage only */\n"
    "  int64_t scale_window;  /* dynamic: good updates in a row before the scale doubles; 0: 2000 */\n"
    "} %s_train_options;\n\n"
    "/* AdamW: lr 1e-3, no warm-up or decay, betas 0.9 and 0.999, eps 1e-8, weight\n"
    " * decay 0.01 on the weights of rank >= 2, no clipping, the precision's\n"
    " * loss scaling. */\n"
    "void %s_train_options_default(%s_train_options *o);\n"
    "/* The learning rate of update `step` (1 for the first) under o's schedule. */\n"
    "float %s_train_lr(const %s_train_options *o, int64_t step);\n\n"
    "/* Forward and backward on one (micro-)batch: adds its gradients to those\n"
    " * accumulated since the last update; *loss gets its loss. */\n"
    "int %s_train_accumulate(%s_model *m, const %s_dims *d, const %s_inputs *in, float *loss);\n"
    "/* One optimizer update with the mean of the accumulated gradients; *lr\n"
    " * and *grad_norm (each may be NULL) get the learning rate used and the\n"
    " * norm before clipping (of the unscaled gradient). A non-finite norm\n"
    " * leaves the weights unchanged: an error, or with dynamic loss scaling a\n"
    " * skipped update (see loss scaling). Either way the accumulation starts\n"
    " * again. */\n"
    "int %s_train_update(%s_model *m, const %s_train_options *o, float *lr, float *grad_norm);\n"
    "/* _accumulate then _update on one batch; a non-finite loss leaves the\n"
    " * weights unchanged. */\n"
    "int %s_train_step(%s_model *m, const %s_dims *d, const %s_inputs *in, const %s_train_options *o,\n"
    "                  float *loss, float *grad_norm);\n",
    p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p);
  nnc_sb_printf(b,
    "/* The loss of a batch with the current weights, for a validation set:\n"
    " * the forward alone (only the kernels that the loss and the model's other\n"
    " * outputs need: about a third of a step's work), the same kernels as in\n"
    " * _train_accumulate, so the same loss on the same batch. The weights, the\n"
    " * accumulated gradients and the optimizer state are untouched;\n"
    " * _train_output then gives this batch's other outputs. */\n"
    "int %s_train_eval(%s_model *m, const %s_dims *d, const %s_inputs *in, float *loss);\n"
    "/* The same forward into out's loss and the model's other outputs (a\n"
    " * classifier's logits) in the caller's buffers, as an inference build's\n"
    " * _run would with the same weights: the gradient fields of out are not\n"
    " * read (they may be NULL) and the weights, gradients and optimizer state\n"
    " * are untouched (allocated, like by every call here, on first use). */\n"
    "int %s_forward(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out);\n\n"
    "/* Updates taken (restored by _load). */\n"
    "int64_t %s_train_steps(const %s_model *m);\n"
    "/* The gradient of a weight, summed over the micro-batches since the last\n"
    " * update (after an update: those it used), in the weight's layout; NULL\n"
    " * for an unknown name or before the first _train_accumulate. */\n"
    "const float *%s_train_gradient(const %s_model *m, const char *name);\n"
    "/* An output of the model other than the loss and the gradients (a\n"
    " * classifier's logits) at the last micro-batch's sizes; NULL when the\n"
    " * model has none of that name or nothing has run. */\n"
    "const void *%s_train_output(const %s_model *m, const char *name);\n\n"
    "/* A checkpoint in one safetensors file: the weights under their names (an\n"
    " * inference build of the model loads it as its weights file), the\n"
    " * optimizer's moments and the update count. _save writes a temporary file\n"
    " * and renames it over path. _load also takes a file of weights alone (a\n"
    " * fresh optimizer); a file that fails leaves m as it was. Resuming from a\n"
    " * checkpoint gives the same next update, bit for bit. */\n"
    "int %s_save(%s_model *m, const char *path);\n"
    "int %s_load(%s_model *m, const char *path);\n\n",
    p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p);
  if (x->zero1)
    nnc_sb_printf(b,
      "/* --parallel=dp:%d,zero1: each rank keeps the optimizer state of 1/%d of\n"
      " * the weights. _save gathers it from every rank, so every rank calls _save\n"
      " * (rank 0 writes the file); after an update _train_gradient gives this\n"
      " * rank's own sums but in its shard, summed over the ranks. */\n\n",
      x->world, x->world);
  ec_train_scale_decls(x, b);
}

/* --parallel=dp:M,zero1: which elements of the flat block of weights each
 * rank owns. The shards are cut from the flat block in train_table's order,
 * not from each weight: one reduce-scatter and one all-gather an update
 * whatever the number of weights, every shard the same size (the last
 * padded), and no weight needs a size that M divides. */
static void write_zero_shards(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b,
    "/* --parallel=dp:%d,zero1 (ZeRO stage 1): rank r owns elements\n"
    " * [r ZERO_SHARD, (r + 1) ZERO_SHARD) of the flat block of weights (train_table's\n"
    " * order) and keeps the optimizer's moments of those alone. The blocks that\n"
    " * the collectives read are padded to %d shards. */\n"
    "#define ZERO_RANKS %d\n"
    "#define ZERO_SHARD ((TRAIN_NUMEL + ZERO_RANKS - 1) / ZERO_RANKS)\n"
    "#define TRAIN_PADDED (ZERO_SHARD * ZERO_RANKS)\n\n"
    "/* The elements [*lo, *hi) of the flat block that rank owns (the last\n"
    " * shard stops at TRAIN_NUMEL; a rank past it owns none). */\n"
    "static void zero_owned(int rank, int64_t *lo, int64_t *hi) {\n"
    "  *lo = (int64_t)rank * ZERO_SHARD;\n"
    "  *hi = *lo + ZERO_SHARD < TRAIN_NUMEL ? *lo + ZERO_SHARD : TRAIN_NUMEL;\n"
    "  if (*hi < *lo) *hi = *lo;\n}\n\n",
    x->world, x->world, x->world);
}

nnc_status ec_train_common(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  if (ec_train_loss(x) < 0)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "--train: the graph has no loss output");
  nnc_sb_printf(b,
    "/* ------------------------------------------------------------ training */\n\n"
    "void %s_train_options_default(%s_train_options *o) {\n"
    "  memset(o, 0, sizeof *o);\n"
    "  o->lr = 1e-3f;\n  o->beta1 = 0.9f;\n  o->beta2 = 0.999f;\n  o->eps = 1e-8f;\n  o->weight_decay = 0.01f;\n}\n\n"
    "float %s_train_lr(const %s_train_options *o, int64_t step) {\n"
    "  const nnrt_lr_schedule s = {o->lr, o->warmup_steps, o->decay_steps, o->min_lr_ratio};\n"
    "  return nnrt_lr_at(&s, step);\n}\n\n", p, p, p, p);
  nnc_sb_printf(b, "/* Per weight: its offset in the gradient and optimizer blocks. */\n"
                   "static const struct {\n  int64_t at;\n} train_table[%d] = {\n", g->nparams ? g->nparams : 1);
  int64_t at = 0;
  for (int j = 0; j < g->nparams; j++) {
    const nnc_tensor *t = &g->tensors[g->params[j]];
    nnc_sb_printf(b, "  {%lld},   /* %s */\n", (long long)at, t->name);
    at += nnc_tensor_max_elems(g, t);
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0},\n");
  nnc_sb_printf(b, "};\n#define TRAIN_NUMEL ((int64_t)%lld)\n\n", (long long)(at ? at : 1));
  if (x->zero1) write_zero_shards(x, b);
  nnc_sb_printf(b,
    "static int check_options(%s_model *m, const %s_train_options *o) {\n"
    "  if (o->lr > 0 && o->clip >= 0 && o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1 && o->eps >= 0 &&\n"
    "      o->weight_decay >= 0 && o->warmup_steps >= 0 && o->decay_steps >= 0 && o->min_lr_ratio >= 0 &&\n"
    "      o->min_lr_ratio <= 1 && o->dynamic_scale >= -1 && o->dynamic_scale <= 1 && o->scale_window >= 0)\n"
    "    return 0;\n"
    "  return fail(m, %s_E_ARG, \"%s training options: expected lr > 0, clip >= 0, betas in [0, 1), eps, \"\n"
    "              \"weight_decay, warmup_steps, decay_steps and scale_window >= 0, min_lr_ratio in [0, 1] and \"\n"
    "              \"dynamic_scale -1, 0 or 1, found lr %%g, clip %%g, betas %%g and %%g, eps %%g, weight_decay %%g, \"\n"
    "              \"warmup_steps %%lld, decay_steps %%lld, scale_window %%lld, min_lr_ratio %%g, dynamic_scale %%d\",\n"
    "              o->lr, o->clip, o->beta1, o->beta2, o->eps, o->weight_decay, (long long)o->warmup_steps,\n"
    "              (long long)o->decay_steps, (long long)o->scale_window, o->min_lr_ratio, o->dynamic_scale);\n}\n\n"
    "/* Whether weight j takes weight decay under o. */\n"
    "static int decays(const %s_train_options *o, int j) {\n"
    "  return o->no_decay ? !nnrt_name_matches(o->no_decay, manifest[j].name) : manifest[j].rank >= 2;\n}\n\n",
    p, p, P, p, p);
  if (ec_train_scale_input(x) < 0)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "--train: the graph has no input " NNC_LOSS_SCALE_INPUT);
  ec_train_scale_common(x, b);
  return NNC_OK;
}

int64_t ec_train_state_bytes(const ec_ctx *x) {
  int64_t n = 0;
  for (int j = 0; j < x->g->nparams; j++) n += nnc_tensor_max_elems(x->g, &x->g->tensors[x->g->params[j]]);
  if (x->zero1) n = (n + x->world - 1) / x->world;
  return 2 * 4 * n;   /* two f32 moments an element */
}

void ec_train_shared(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  char nacc[64] = "nacc";
  if (x->dp > 1) snprintf(nacc, sizeof nacc, "(nacc * %d)", x->dp);
  nnc_sb_printf(b,
    "int %s_train_accumulate(%s_model *m, const %s_dims *d, const %s_inputs *in, float *loss) {\n"
    "  if (!m || !loss) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  float *dst = m->grad;   /* the first micro-batch's gradients land in the sum */\n"
    "  if (!rc && m->nacc) rc = train_part(m, &dst);\n"
    "  if (!rc) rc = train_pass(m, d, in, dst, loss);\n%s"
    "  if (!rc && m->nacc) rc = train_add_part(m);\n"
    "  /* a non-finite loss fails the update: no loss scale explains it */\n"
    "  if (!rc) m->bad_loss = (m->nacc && m->bad_loss) || !isfinite(*loss);\n"
    "  if (!rc) m->nacc++;\n"
    "  return rc;\n}\n\n"
    "int %s_train_eval(%s_model *m, const %s_dims *d, const %s_inputs *in, float *loss) {\n"
    "  if (!m || !loss) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  return rc ? rc : train_forward_pass(m, d, in, loss);\n}\n\n",
    p, p, p, p, P,
    x->dp > 1 ? "  /* every rank's loss, averaged: a rank's non-finite loss fails every rank's update */\n"
                   "  if (!rc) rc = train_mean_loss(m, loss);\n" : "",
    p, p, p, p, P);
  nnc_sb_printf(b,
    "int %s_train_update(%s_model *m, const %s_train_options *o, float *lr, float *grad_norm) {\n"
    "  if (!m || !o) return %s_E_ARG;\n"
    "  int rc = check_options(m, o);\n"
    "  if (rc) return rc;\n"
    "  if (!m->nacc)\n"
    "    return fail(m, %s_E_STATE, \"%s_train_update: no gradient since the last update (call %s_train_accumulate \"\n"
    "                \"first)\");\n"
    "  const int nacc = m->nacc;\n"
    "  m->nacc = 0;\n%s"
    "  double ss = 0;\n"
    "  rc = train_sum_squares(m, &ss);\n"
    "  if (rc) return rc;\n"
    "  if (m->bad_loss)\n"
    "    return fail(m, %s_E_ARG, \"%s_train_update: a micro-batch's loss was not finite; the weights are unchanged\");\n"
    "  /* the norm of the mean over the micro-batches%s, the loss scale divided out */\n"
    "  const double norm = sqrt(ss) / %s / m->loss_scale;\n"
    "  if (grad_norm) *grad_norm = (float)norm;\n"
    "  if (!isfinite(norm) && dynamic_scale(o)) return skip_update(m, lr);\n"
    "  if (!isfinite(norm))\n"
    "    return fail(m, %s_E_ARG, \"%s_train_update: the gradient norm is %%g; the weights are unchanged\", norm);\n"
    "  const float scale = (float)((o->clip > 0 && norm > o->clip ? o->clip / norm : 1.0) / %s / m->loss_scale);\n"
    "  m->step++;\n"
    "  const float rate = %s_train_lr(o, m->step);\n"
    "  if (lr) *lr = rate;\n"
    "  nnrt_optim opt;\n"
    "  memset(&opt, 0, sizeof opt);\n"
    "  opt.sgd = o->sgd;\n  opt.lr = rate;\n  opt.beta1 = o->beta1;\n  opt.beta2 = o->beta2;\n  opt.eps = o->eps;\n"
    "  opt.weight_decay = o->weight_decay;\n  opt.step = m->step;\n"
    "  rc = train_apply(m, &opt, scale, o);\n"
    "  if (!rc) scale_after_update(m, o);\n"
    "  return rc;\n}\n\n",
    p, p, p, P, P, p, p,
    x->dp > 1 && !x->grads_summed_in_pass ? "  /* the gradients summed over the plan's ranks: each one's own batch */\n"
                                               "  rc = train_all_reduce(m);\n  if (rc) return rc;\n" : "",
    P, p, x->dp > 1 ? " and the ranks" : "", nacc, P, p, nacc, p);
  nnc_sb_printf(b,
    "int %s_train_step(%s_model *m, const %s_dims *d, const %s_inputs *in, const %s_train_options *o,\n"
    "                  float *loss, float *grad_norm) {\n"
    "  if (!m || !o || !loss) return %s_E_ARG;\n"
    "  int rc = check_options(m, o);\n"
    "  if (!rc) rc = %s_train_accumulate(m, d, in, loss);\n"
    "  if (!rc && !isfinite(*loss)) {\n"
    "    m->nacc = 0;\n"
    "    rc = fail(m, %s_E_ARG, \"%s_train_step: the loss is %%g; the weights are unchanged\", (double)*loss);\n"
    "  }\n"
    "  return rc ? rc : %s_train_update(m, o, NULL, grad_norm);\n}\n\n"
    "int64_t %s_train_steps(const %s_model *m) { return m ? m->step : 0; }\n\n",
    p, p, p, p, p, P, p, P, p, p, p, p);
  ec_train_scale_api(x, b);
}

void ec_train_tp_norm(const ec_ctx *x, nnc_sb *b, const char *squares) {
  const nnc_graph *g = x->g;
  nnc_sb_printf(b,
    "/* --parallel=tp:%d: which weights are this rank's slice of the file's\n"
    " * tensor (their gradients too), and which every rank holds whole. */\n"
    "static const unsigned char train_sliced[%d] = {", g->ranks, g->nparams ? g->nparams : 1);
  for (int j = 0; j < g->nparams; j++)
    nnc_sb_printf(b, "%s%d", j ? ", " : "", g->tensors[g->params[j]].shard.parts > 1);
  nnc_sb_printf(b, "%s};\n\n", g->nparams ? "" : "0");
  nnc_sb_printf(b,
    "/* The global norm counts each gradient once: the slices' squares summed\n"
    " * over the ranks (a padded vocabulary's extra rows have zero gradients),\n"
    " * the whole weights' (equal on every rank) from this rank alone. */\n"
    "static int train_sum_squares(%s_model *m, double *ss) {\n"
    "  double sliced = 0, whole = 0;\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    const double q = %s;\n"
    "    if (train_sliced[j]) sliced += q;\n"
    "    else whole += q;\n"
    "  }\n"
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_all_reduce(m->%s, &sliced, &sliced, 1, NNRT_F64, NNRT_REDUCE_SUM, NULL, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the gradient norm over the ranks: %%s\", e.msg);\n"
    "  *ss = sliced + whole;\n"
    "  return 0;\n}\n\n", x->p, squares, x->tpc, x->P, x->p);
}
