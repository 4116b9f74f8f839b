/* compiler/emit/c_simd_zero.c — ZeRO stage 1 for a C SIMD folder compiled
 * with --train --parallel=dp:M,zero1: each rank keeps the AdamW moments of
 * 1/M of the weights and updates only those. The hooks written here take the
 * place of c_simd_train.c's sum over the ranks (a reduce-scatter into the
 * owned shard), sum of squares (the shard's, summed over the ranks), update
 * (the shard's, then the weights all-gathered) and checkpoints (the moments
 * gathered for rank 0's file, sliced when one is read). The shards are
 * ranges of the flat block of weights (ZERO_SHARD, zero_owned(): written by
 * emit_c_train.c, which says why). */
#include <stdio.h>

#include "c_simd.h"

void cs_zero_hooks(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* The squares of the owned gradients, summed over the ranks: the global\n"
    " * norm, though no rank holds every summed gradient. */\n"
    "static int train_sum_squares(%s_model *m, double *ss) {\n"
    "  int64_t lo, hi;\n"
    "  zero_owned(m->comm->rank, &lo, &hi);\n"
    "  *ss = nnrt_sum_squares(m->grad + lo, hi - lo);\n"
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_all_reduce(m->comm, ss, ss, 1, NNRT_F64, NNRT_REDUCE_SUM, NULL, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the gradient norm over the ranks: %%s\", e.msg);\n"
    "  return 0;\n}\n\n"
    "/* The optimizer on elements [r0, r1) of the owned part of one weight\n"
    " * (from its element `from`), for the pool: the moments are the shard's. */\n"
    "typedef struct update_job {\n"
    "  %s_model *m;\n  const nnrt_optim *opt;\n  float scale;\n  int j, decay;\n  int64_t from;\n"
    "} update_job;\n\n"
    "static void update_rows(void *p, int64_t r0, int64_t r1) {\n"
    "  const update_job *u = p;\n"
    "  const int64_t at = train_table[u->j].at + u->from + r0;     /* in the flat block */\n"
    "  const int64_t s = at - (int64_t)u->m->comm->rank * ZERO_SHARD;   /* in the shard */\n"
    "  float *w = (float *)u->m->w[u->j] + u->from + r0;\n"
    "  nnrt_optim_update(u->opt, w, u->m->grad + at, u->scale, u->m->mom + s, u->m->vel + s, r1 - r0, u->decay);\n}\n\n"
    "/* The owned part of every weight updated and copied into its place in the\n"
    " * micro-batch block (free between updates), every rank's part gathered\n"
    " * there, and the weights copied back out: the ranks hold the same weights\n"
    " * again. */\n"
    "static int train_apply(%s_model *m, const nnrt_optim *opt, float scale, const %s_train_options *o) {\n"
    "  int64_t lo, hi;\n"
    "  zero_owned(m->comm->rank, &lo, &hi);\n"
    "  float *flat = m->part;\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    const int64_t at = train_table[j].at, n = nnc_weights_numel(&manifest[j]);\n"
    "    const int64_t a = at > lo ? at : lo, z = at + n < hi ? at + n : hi;   /* weight j's owned elements */\n"
    "    if (a >= z) continue;\n"
    "    update_job u = {m, opt, scale, j, decays(o, j), a - at};\n"
    "    nnc_glue_rows(&m->pool, z - a, 1, update_rows, &u);\n"
    "    memcpy(flat + a, (float *)m->w[j] + (a - at), (size_t)(z - a) * sizeof *flat);\n"
    "  }\n"
    "  /* the last shard's padding: sent, never read */\n"
    "  memset(flat + hi, 0, (size_t)(lo + ZERO_SHARD - hi) * sizeof *flat);\n"
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_all_gather(m->comm, flat + lo, flat, (size_t)ZERO_SHARD, NNRT_F32, NULL, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the updated weights from the ranks: %%s\", e.msg);\n"
    "  for (int j = 0; j < NPARAMS; j++)\n"
    "    memcpy((float *)m->w[j], flat + train_table[j].at, (size_t)nnc_weights_numel(&manifest[j]) * sizeof *flat);\n"
    "  return 0;\n}\n\n"
    "/* Each rank's gradients summed over the ranks into the shard it owns\n"
    " * alone (a reduce-scatter: the optimizer reads no other); the rest of\n"
    " * m->grad keeps this rank's own sums. */\n"
    "static int train_all_reduce(%s_model *m) {\n"
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_reduce_scatter(m->comm, m->grad, m->grad + (int64_t)m->comm->rank * ZERO_SHARD,\n"
    "                               (size_t)ZERO_SHARD, NNRT_F32, NNRT_REDUCE_SUM, NULL, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the gradients over the ranks: %%s\", e.msg);\n"
    "  return 0;\n}\n\n",
    p, P, p, p, p, p, P, p, p, P, p);
}

void cs_zero_save(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* Every rank calls _save: the moments are gathered from the ranks'\n"
    " * shards (an all-gather, the communicator's collective; the others drop\n"
    " * their copy) and rank 0 writes the file, the same as without ZeRO. */\n"
    "int %s_save(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  float *full = malloc(2 * TRAIN_PADDED * sizeof *full);\n"
    "  if (!full) return fail(m, %s_E_NOMEM, \"%s_save: out of memory for the gathered optimizer state\");\n"
    "  nnrt_error e = {0};\n"
    "  rc = nnrt_comm_all_gather(m->comm, m->mom, full, (size_t)ZERO_SHARD, NNRT_F32, NULL, &e);\n"
    "  if (!rc) rc = nnrt_comm_all_gather(m->comm, m->vel, full + TRAIN_PADDED, (size_t)ZERO_SHARD, NNRT_F32, NULL, &e);\n"
    "  if (!rc && m->comm->rank == 0) {\n"
    "    float *mom[NPARAMS], *vel[NPARAMS];\n"
    "    nnrt_ckpt c = checkpoint_of(m, full, full + TRAIN_PADDED, mom, vel);\n"
    "    rc = nnrt_ckpt_save(path, &c, &e);\n"
    "  }\n"
    "  free(full);\n"
    "  return rc ? fail(m, rc, \"%s_save: %%s\", e.msg) : 0;\n}\n\n",
    p, p, P, P, p, p);
}

void cs_zero_take_moments(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b,
    "  /* the file's moments are whole: this rank keeps its shard of them */\n"
    "  int64_t lo, hi;\n"
    "  zero_owned(m->comm->rank, &lo, &hi);\n"
    "  memcpy(m->mom, m->grad + lo, (size_t)(hi - lo) * sizeof *m->mom);\n"
    "  memcpy(m->vel, m->part + lo, (size_t)(hi - lo) * sizeof *m->vel);\n");
}
