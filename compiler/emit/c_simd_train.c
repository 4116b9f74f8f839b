/* compiler/emit/c_simd_train.c — the training API of a C SIMD folder
 * compiled with --train (declared by emit_c_train.c): <p>_run computes the
 * loss and every weight's gradient; _train_accumulate sums the gradients of
 * micro-batches, _train_update averages them, clips their global norm and
 * updates every weight in place with AdamW or SGD (runtime/optim.c), one
 * fused pass per weight tensor over the weights, the gradient and the
 * optimizer state; _save and _load write and read checkpoints. */
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

void cs_train_struct(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b,
    "  float *grad, *part, *mom, *vel; /* training: gradients (summed over micro-batches), one micro-batch's,\n"
    "                                     and the optimizer state, each in the weights' layout */\n"
    "  void *kept[%d];               /* training: the model's other outputs of the last micro-batch */\n"
    "  int nacc;                     /* micro-batches accumulated since the last update */\n"
    "  int64_t step;                 /* updates taken */\n",
    ec_train_nkept(x) ? ec_train_nkept(x) : 1);
  ec_train_scale_struct(x, b);
}

void cs_train_destroy(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b, "  free(m->grad);\n  free(m->part);\n  free(m->mom);\n  free(m->vel);\n"
                   "  for (size_t i = 0; i < sizeof m->kept / sizeof m->kept[0]; i++) free(m->kept[i]);\n");
}

/* train_state(): the gradient and optimizer blocks, allocated on first use. */
static void write_state(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  const nnc_graph *g = x->g;
  /* ZeRO-1: the blocks the collectives read padded to whole shards, the
   * optimizer state one shard */
  const char *block = x->zero1 ? "TRAIN_PADDED" : "TRAIN_NUMEL", *state = x->zero1 ? "ZERO_SHARD" : "TRAIN_NUMEL";
  nnc_sb_printf(b,
    "/* The gradient, micro-batch and optimizer blocks (and the kept outputs'\n"
    " * buffers at the maxima), allocated by the first call that needs them. */\n"
    "static int train_state(%s_model *m) {\n"
    "  if (m->grad) return 0;\n"
    "  m->grad = calloc(%s, sizeof *m->grad);\n"
    "  m->part = malloc(%s * sizeof *m->part);\n"
    "  m->mom = calloc(%s, sizeof *m->mom);\n"
    "  m->vel = calloc(%s, sizeof *m->vel);\n"
    "  int ok = m->grad && m->part && m->mom && m->vel;\n"
    "  m->loss_scale = TRAIN_LOSS_SCALE;\n", p, block, block, state, state);
  int k = 0;
  for (int i = 0; i < g->noutputs; i++) {
    if (!ec_train_is_kept(x, i)) continue;
    const nnc_tensor *t = &g->tensors[g->outputs[i].tensor];
    nnc_sb_printf(b, "  m->kept[%d] = malloc(%lld * 4 + 4);   /* %s at the maxima */\n  ok = ok && m->kept[%d];\n", k,
                  (long long)nnc_tensor_max_elems(g, t), g->outputs[i].name, k);
    k++;
  }
  nnc_sb_printf(b,
    "  if (ok) return 0;\n"
    "  free(m->grad);\n  free(m->part);\n  free(m->mom);\n  free(m->vel);\n"
    "  m->grad = m->part = m->mom = m->vel = NULL;\n"
    "  return fail(m, %s_E_NOMEM, \"%s: out of memory for the gradients and the optimizer state (%%lld floats each)\",\n"
    "              (long long)TRAIN_NUMEL);\n}\n\n", P, p);
}

/* One run of the joint graph into grad (the first micro-batch) or part. */
static void write_pass(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p;
  nnc_sb_printf(b,
    "/* Forward and backward on one batch: the gradients land in dst, the loss\n"
    " * in *loss, the kept outputs in m->kept. */\n"
    "static int train_pass(%s_model *m, const %s_dims *d, const %s_inputs *in, float *dst, float *loss) {\n"
    "  %s_outputs out = {\n", p, p, p, p);
  int k = 0;
  for (int i = 0; i < g->noutputs; i++) {
    int j = ec_train_param_of_output(x, i);
    if (i == ec_train_loss(x)) nnc_sb_printf(b, "      .%s = loss,\n", x->out_name[i]);
    else if (j >= 0) nnc_sb_printf(b, "      .%s = dst + train_table[%d].at,\n", x->out_name[i], j);
    else nnc_sb_printf(b, "      .%s = m->kept[%d],\n", x->out_name[i], k++);
  }
  nnc_sb_printf(b, "  };\n"
                   "  const %s_inputs sin = scaled_inputs(m, in);\n"
                   "  return %s_run(m, d, &sin, &out);\n}\n\n", p, p);
}

/* The hooks of the shared _train_accumulate and _train_update
 * (emit_c_train.c): adding a micro-batch's gradients, their sum of squares,
 * and the optimizer's pass, one per weight tensor (runtime/optim.c) split
 * over the model's threads. */
static void write_hooks(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  nnc_sb_printf(b,
    "/* The block of one micro-batch's gradients (allocated with the others). */\n"
    "static int train_part(%s_model *m, float **part) {\n"
    "  *part = m->part;\n"
    "  return 0;\n}\n\n"
    "static int train_add_part(%s_model *m) {\n"
    "  for (int64_t i = 0; i < TRAIN_NUMEL; i++) m->grad[i] += m->part[i];\n"
    "  return 0;\n}\n\n", p, p);
  if (x->zero1) {
    cs_zero_hooks(x, b);
  } else {
    if (x->g->ranks > 1)
      ec_train_tp_norm(x, b, "nnrt_sum_squares(m->grad + train_table[j].at, nnc_weights_shard_numel(&manifest[j], &shards[j]))");
    else nnc_sb_printf(b,
      "static int train_sum_squares(%s_model *m, double *ss) {\n"
      "  *ss = 0;\n"
      "  for (int j = 0; j < NPARAMS; j++) *ss += nnrt_sum_squares(m->grad + train_table[j].at, nnc_weights_numel(&manifest[j]));\n"
      "  return 0;\n}\n\n", p);
    nnc_sb_printf(b,
    "/* The optimizer on elements [r0, r1) of one weight, for the pool: the\n"
    " * update is elementwise, so any split gives the same floats. */\n"
    "typedef struct update_job {\n"
    "  %s_model *m;\n  const nnrt_optim *opt;\n  float scale;\n  int j, decay;\n"
    "} update_job;\n\n"
    "static void update_rows(void *p, int64_t r0, int64_t r1) {\n"
    "  const update_job *u = p;\n"
    "  const int64_t at = train_table[u->j].at + r0;\n"
    "  float *w = (float *)u->m->w[u->j] + r0;\n"
    "  nnrt_optim_update(u->opt, w, u->m->grad + at, u->scale, u->m->mom + at, u->m->vel + at, r1 - r0, u->decay);\n}\n\n"
    "static int train_apply(%s_model *m, const nnrt_optim *opt, float scale, const %s_train_options *o) {\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    update_job u = {m, opt, scale, j, decays(o, j)};\n"
    "    nnc_glue_rows(&m->pool, %s, 1, update_rows, &u);\n"
    "  }\n"
    "  return 0;\n}\n\n",
    /* under tp:N each rank updates its slice of a weight */
    p, p, p, x->g->ranks > 1 ? "nnc_weights_shard_numel(&manifest[j], &shards[j])" : "nnc_weights_numel(&manifest[j])");
  }
  if (x->dp > 1)
    nnc_sb_printf(b,
      "/* --parallel=%s: a micro-batch's loss averaged over the %d ranks of the\n"
      " * dp group, each one's gradients summed into every one's (in place). */\n"
      "static int train_mean_loss(%s_model *m, float *loss) {\n"
      "  nnrt_error e = {0};\n"
      "  if (nnrt_comm_all_reduce(m->%s, loss, loss, 1, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e))\n"
      "    return fail(m, %s_E_COMM, \"%s_train_accumulate: the loss over the ranks: %%s\", e.msg);\n"
      "  *loss /= %d;\n"
      "  return 0;\n}\n\n",
      x->plan, x->dp, p, x->dpc, x->P, p, x->dp);
  if (x->dp > 1 && !x->zero1)
    nnc_sb_printf(b,
      "static int train_all_reduce(%s_model *m) {\n"
      "  nnrt_error e = {0};\n"
      "  if (nnrt_comm_all_reduce(m->%s, m->grad, m->grad, (size_t)TRAIN_NUMEL, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e))\n"
      "    return fail(m, %s_E_COMM, \"%s_train_update: the gradients over the ranks: %%s\", e.msg);\n"
      "  return 0;\n}\n\n",
      p, x->dpc, x->P, p);
}

/* _save, _load, and the accessors of the state. */
static void write_checkpoints(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  /* under tp:N the file's view is built by the gather (emit_tp_ckpt.c) */
  if (x->g->ranks <= 1) nnc_sb_printf(b,
    "/* A checkpoint's view of m: each weight and its moments in blocks m1, m2. */\n"
    "static nnrt_ckpt checkpoint_of(%s_model *m, float *m1, float *m2, float **mom, float **vel) {\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    mom[j] = m1 + train_table[j].at;\n"
    "    vel[j] = m2 + train_table[j].at;\n"
    "  }\n"
    "  return (nnrt_ckpt){NPARAMS, manifest, m->w, mom, vel, m->step, scale_state_of(m)};\n}\n\n", p);
  if (x->zero1) cs_zero_save(x, b);
  else if (x->g->ranks > 1) cs_tp_save(x, b);
  else nnc_sb_printf(b,
    "int %s_save(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  float *mom[NPARAMS], *vel[NPARAMS];\n"
    "  nnrt_ckpt c = checkpoint_of(m, m->mom, m->vel, mom, vel);\n"
    "  nnrt_error e = {0};\n"
    "  rc = nnrt_ckpt_save(path, &c, &e);\n"
    "  return rc ? fail(m, rc, \"%s_save: %%s\", e.msg) : 0;\n}\n\n", p, p, P, p);
  nnc_sb_printf(b,
    "int %s_load(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  m->err[0] = 0;\n"
    "  nnrt_error e = {0};\n"
    "  nnrt_st *st = NULL;\n"
    "  rc = nnrt_st_open(path, &st, &e);\n"
    "  if (rc) return fail(m, rc, \"%s_load: %%s\", e.msg);\n"
    "  float *mom[NPARAMS], *vel[NPARAMS];\n"
    "  /* the moments land in the gradient blocks, free between updates, and\n"
    "   * take their place once the weights have loaded too: a file that fails\n"
    "   * leaves the model as it was */\n", p, p, P, p);
  if (x->g->ranks > 1) ec_tp_load_state(x, b, "m->grad", "m->part", false);
  else nnc_sb_printf(b,
    "  nnrt_ckpt c = checkpoint_of(m, m->grad, m->part, mom, vel);\n"
    "  int64_t step = 0;\n"
    "  rc = nnrt_ckpt_load_state(st, path, &c, &step, &e);\n");
  nnc_sb_printf(b,
    "  nnrt_scale_state scale;\n"
    "  if (!rc) rc = nnrt_ckpt_load_scale(st, path, &scale, &e);\n"
    "  if (rc) rc = fail(m, rc, \"%s_load: %%s\", e.msg);\n"
    "  else rc = load(m, st, &e);\n"
    "  nnrt_st_close(st);\n"
    "  if (rc) return rc;\n", p);
  if (x->zero1) cs_zero_take_moments(x, b);
  else nnc_sb_printf(b,
    "  float *t = m->mom;\n"
    "  m->mom = m->grad;\n"
    "  m->grad = t;\n"
    "  t = m->vel;\n"
    "  m->vel = m->part;\n"
    "  m->part = t;\n");
  nnc_sb_printf(b,
    "  m->step = step;\n"
    "  set_scale_state(m, &scale);\n"
    "  m->nacc = 0;\n"
    "  return 0;\n}\n\n"
    "const float *%s_train_gradient(const %s_model *m, const char *name) {\n"
    "  for (int j = 0; m && m->grad && name && j < NPARAMS; j++)\n"
    "    if (strcmp(manifest[j].name, name) == 0) return m->grad + train_table[j].at;\n"
    "  return NULL;\n}\n\n",
    p, p);
  nnc_sb_printf(b, "const void *%s_train_output(const %s_model *m, const char *name) {\n  if (!m || !name) return NULL;\n",
                p, p);
  int k = 0;
  for (int i = 0; i < x->g->noutputs; i++)
    if (ec_train_is_kept(x, i))
      nnc_sb_printf(b, "  if (strcmp(name, \"%s\") == 0) return m->kept[%d];\n", x->g->outputs[i].name, k++);
  nnc_sb_printf(b, "  return NULL;\n}\n\n");
}

/* The forward alone (forward_only() of <p>.c): _train_eval's hook and
 * _forward. The gradient outputs point at the micro-batch block, scratch
 * between micro-batches: forward_only writes none unless a kernel it needs
 * also writes one. */
static void write_forward(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* The forward alone on one batch: the loss in *loss, the kept outputs in\n"
    " * m->kept; the gradients stay as they are. */\n"
    "static int train_forward_pass(%s_model *m, const %s_dims *d, const %s_inputs *in, float *loss) {\n"
    "  %s_outputs out = {\n", p, p, p, p);
  int k = 0;
  for (int i = 0; i < g->noutputs; i++) {
    int j = ec_train_param_of_output(x, i);
    if (i == ec_train_loss(x)) nnc_sb_printf(b, "      .%s = loss,\n", x->out_name[i]);
    else if (j >= 0) nnc_sb_printf(b, "      .%s = m->part + train_table[%d].at,\n", x->out_name[i], j);
    else nnc_sb_printf(b, "      .%s = m->kept[%d],\n", x->out_name[i], k++);
  }
  nnc_sb_printf(b, "  };\n"
                   "  const %s_inputs sin = scaled_inputs(m, in);   /* loss_scale: checked, not read */\n"
                   "  return run_kernels(m, d, &sin, &out, forward_only);\n}\n\n", p);
  nnc_sb_printf(b,
    "int %s_forward(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out) {\n"
    "  if (!m || !out) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  %s_outputs o = *out;\n"
    "  /* the gradients: the micro-batch block, scratch (check_run wants every buffer) */\n", p, p, p, p, p, P, p);
  for (int i = 0; i < g->noutputs; i++) {
    int j = ec_train_param_of_output(x, i);
    if (j >= 0) nnc_sb_printf(b, "  o.%s = m->part + train_table[%d].at;\n", x->out_name[i], j);
  }
  nnc_sb_printf(b, "  const %s_inputs sin = scaled_inputs(m, in);   /* loss_scale: checked, not read */\n"
                   "  return run_kernels(m, d, &sin, &o, forward_only);\n}\n\n", p);
}

nnc_status cs_write_train(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  nnc_status st = ec_train_common(x, b, err);
  if (st) return st;
  write_state(x, b);
  write_pass(x, b);
  write_hooks(x, b);
  write_forward(x, b);
  ec_train_shared(x, b);
  write_checkpoints(x, b);
  return NNC_OK;
}
