/* compiler/emit/emit_tp_ckpt.c — whole checkpoints of a model trained with
 * --train --parallel=tp:N (C SIMD over MPI, CUDA over NCCL). Each rank holds
 * its slices of the weights the plan splits and of their two moments; the
 * file holds the whole tensors, exactly as one process training the whole
 * model writes them, so a checkpoint moves between tp:N, other N and one
 * process, and an inference build loads it as weights.
 *
 * _save: every rank calls it. Each sliced tensor is all-gathered (one at a
 * time: the scratch is N slices of the largest) and rank 0 puts the slices
 * back in the file's layout (nnc_weights_unslice: a split vocabulary's
 * padded rows dropped); the weights every rank holds whole are rank 0's.
 * Rank 0 writes the file.
 * _load: each rank reads its slices of the whole moments
 * (nnc_weights_load_state_shards), as load() reads its slices of the
 * weights. */
#include <stdio.h>

#include "c_simd.h"
#include "cuda.h"

/* Under tp:N,dp:M the first dp group's tp group gathers and its first rank
 * (the world's 0) writes; the other groups hold the same values. */
static const char *other_groups(const ec_ctx *x) {
  if (!x->dpc) return "";
  return "  /* dp:M: the other tp groups hold the same weights and moments; the\n"
         "   * first one's ranks gather them and the world's rank 0 writes */\n"
         "  if (m->dp_comm->rank != 0) return 0;\n";
}

/* The part both targets share: the file's sizes of the sliced tensors, and
 * the host blocks rank 0 rebuilds them in. */
static void write_sizes(nnc_sb *b) {
  nnc_sb_printf(b,
    "  /* the sliced weights' elements in the file, and the largest slice */\n"
    "  int64_t whole = 0, most = 1;\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    if (!shards[j].parts) continue;\n"
    "    const int64_t mine = nnc_weights_shard_numel(&manifest[j], &shards[j]);\n"
    "    whole += nnc_weights_numel(&manifest[j]);\n"
    "    most = mine > most ? mine : most;\n"
    "  }\n");
}

void cs_tp_save(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* --parallel=tp:%d: every rank calls _save. The sliced weights and their\n"
    " * moments are gathered (one tensor at a time) and rebuilt whole on rank 0,\n"
    " * which writes what one process training the whole model would. */\n"
    "int %s_save(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n%s"
    "  const int root = m->comm->rank == 0, N = m->%s->world;\n",
    x->g->ranks, p, p, P, other_groups(x), x->tpc);
  write_sizes(b);
  nnc_sb_printf(b,
    "  /* rank 0: the sliced tensors whole (weights, then both moments); every\n"
    "   * rank: the N slices of one */\n"
    "  float *file = root ? malloc((size_t)(3 * whole) * sizeof *file + 1) : NULL;\n"
    "  float *all = malloc((size_t)(N * most) * sizeof *all);\n"
    "  if ((root && !file) || !all) {\n"
    "    free(file);\n    free(all);\n"
    "    return fail(m, %s_E_NOMEM, \"%s_save: out of memory for the gathered slices\");\n"
    "  }\n"
    "  void *w[NPARAMS];\n  float *mom[NPARAMS], *vel[NPARAMS];\n"
    "  nnrt_error e = {0};\n"
    "  int64_t at = 0;\n"
    "  for (int j = 0; !rc && j < NPARAMS; j++) {\n"
    "    w[j] = m->w[j];\n"
    "    mom[j] = m->mom + train_table[j].at;\n"
    "    vel[j] = m->vel + train_table[j].at;\n"
    "    if (!shards[j].parts) continue;\n"
    "    const int64_t mine = nnc_weights_shard_numel(&manifest[j], &shards[j]);\n"
    "    float *const src[3] = {(float *)m->w[j], mom[j], vel[j]};\n"
    "    for (int k = 0; !rc && k < 3; k++) {\n"
    "      float *dst = file + k * whole + at;\n"
    "      rc = nnrt_comm_all_gather(m->%s, src[k], all, (size_t)mine, NNRT_F32, NULL, &e);\n"
    "      for (int r = 0; !rc && root && r < N; r++)\n"
    "        nnc_weights_unslice(all + r * mine, sizeof *all, &manifest[j], &shards[j], r, dst);\n"
    "    }\n"
    "    if (root) {\n"
    "      w[j] = file + at;\n"
    "      mom[j] = file + whole + at;\n"
    "      vel[j] = file + 2 * whole + at;\n"
    "    }\n"
    "    at += nnc_weights_numel(&manifest[j]);\n"
    "  }\n"
    "  if (rc) rc = fail(m, %s_E_COMM, \"%s_save: gathering the slices from the ranks: %%s\", e.msg);\n"
    "  if (!rc && root) {\n"
    "    const nnrt_ckpt c = {NPARAMS, manifest, w, mom, vel, m->step, scale_state_of(m)};\n"
    "    if (nnrt_ckpt_save(path, &c, &e)) rc = fail(m, e.code, \"%s_save: %%s\", e.msg);\n"
    "  }\n"
    "  free(file);\n  free(all);\n"
    "  return rc;\n}\n\n",
    P, p, x->tpc, P, p, p);
}

/* _load's optimizer state: this rank's slices of the file's moments into
 * the blocks m1, m2 (train_table's layout), the steps taken into step; a
 * failure leaves its status in rc, or with `fails` its message in m too. */
void ec_tp_load_state(const ec_ctx *x, nnc_sb *b, const char *m1, const char *m2, bool fails) {
  char rank[64];
  snprintf(rank, sizeof rank, "m->%s->rank", x->tpc);
  nnc_sb_printf(b,
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    mom[j] = %s + train_table[j].at;\n"
    "    vel[j] = %s + train_table[j].at;\n"
    "  }\n"
    "  int64_t step = 0;\n"
    "  /* the file's moments are whole: this rank reads its slices of them */\n", m1, m2);
  if (fails)
    nnc_sb_printf(b,
      "  if (!rc && nnc_weights_load_state_shards(st, path, manifest, shards, %s, NPARAMS, mom, vel, &step, &e))\n"
      "    rc = fail(m, e.code, \"%s_load: %%s\", e.msg);\n", rank, x->p);
  else
    nnc_sb_printf(b, "  if (!rc) rc = nnc_weights_load_state_shards(st, path, manifest, shards, %s, NPARAMS, mom, vel, &step, &e);\n",
                  rank);
}

void cu_tp_save(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* --parallel=tp:%d: every rank calls _save. The sliced weights (as f32)\n"
    " * and their moments are gathered on the device (NCCL, one tensor at a\n"
    " * time), copied to the host and rebuilt whole on rank 0, which writes what\n"
    " * one process training the whole model would. */\n"
    "int %s_save(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  m->err[0] = 0;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n%s"
    "  const int root = m->comm->rank == 0, N = m->%s->world;\n",
    x->g->ranks, p, p, P, other_groups(x), x->tpc);
  write_sizes(b);
  nnc_sb_printf(b,
    "  /* this rank's state (the whole weights whole); rank 0: the sliced\n"
    "   * tensors whole (weights, then both moments); the N slices of one, on\n"
    "   * the device and on the host */\n"
    "  float *host = (float *)malloc((size_t)TRAIN_NUMEL * 3 * sizeof(float));\n"
    "  float *file = root ? (float *)malloc((size_t)(3 * whole) * sizeof(float) + 1) : NULL;\n"
    "  float *all = (float *)malloc((size_t)(N * most) * sizeof(float)), *dev = NULL;\n"
    "  nnrt_error e = {};\n"
    "  if (!host || (root && !file) || !all) rc = fail(m, %s_E_NOMEM, \"%s_save: out of memory for the gathered slices\");\n"
    "  if (!rc && nnrt_cuda_malloc(m->alloc, (size_t)(N * most) * sizeof(float), (void **)&dev, &e))\n"
    "    rc = fail(m, %s_E_DEVICE, \"%s_save: the gathered slices on the GPU: %%s\", e.msg);\n"
    "  if (!rc) rc = state_to_host(m, host, host + TRAIN_NUMEL, host + 2 * TRAIN_NUMEL);\n"
    "  void *w[NPARAMS];\n  float *mom[NPARAMS], *vel[NPARAMS];\n"
    "  nnrt_ckpt c = checkpoint_of(m, host, host + TRAIN_NUMEL, host + 2 * TRAIN_NUMEL, w, mom, vel);\n"
    "  int64_t at = 0;\n"
    "  cudaError_t ce = cudaSuccess;\n"
    "  for (int j = 0; !rc && j < NPARAMS; j++) {\n"
    "    if (!shards[j].parts) continue;\n"
    "    const int64_t mine = nnc_weights_shard_numel(&manifest[j], &shards[j]);\n"
    "    const float *const src[3] = {master_of(m, j), m->mom + train_table[j].at, m->vel + train_table[j].at};\n"
    "    for (int k = 0; !rc && k < 3; k++) {\n"
    "      float *dst = root ? file + k * whole + at : NULL;\n"
    "      if (nnrt_comm_all_gather(m->%s, src[k], dev, (size_t)mine, NNRT_F32, m->stream, &e) ||\n"
    "          nnrt_comm_nccl_wait(m->%s, m->stream, &e))\n"
    "        rc = fail(m, %s_E_COMM, \"%s_save: gathering %%s from the ranks: %%s\", manifest[j].name, e.msg);\n"
    "      if (!rc && root && (ce = cudaMemcpy(all, dev, (size_t)(N * mine) * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)\n"
    "        rc = fail(m, %s_E_DEVICE, \"%s_save: the gathered slices to the host: %%s\", cudaGetErrorString(ce));\n"
    "      for (int r = 0; !rc && root && r < N; r++)\n"
    "        nnc_weights_unslice(all + r * mine, sizeof(float), &manifest[j], &shards[j], r, dst);\n"
    "    }\n"
    "    if (root) {\n"
    "      w[j] = file + at;\n"
    "      mom[j] = file + whole + at;\n"
    "      vel[j] = file + 2 * whole + at;\n"
    "    }\n"
    "    at += nnc_weights_numel(&manifest[j]);\n"
    "  }\n"
    "  if (!rc && root && nnrt_ckpt_save(path, &c, &e)) rc = fail(m, e.code, \"%s_save: %%s\", e.msg);\n"
    "  if (dev) nnrt_cuda_free(m->alloc, dev, NULL);\n"
    "  free(host);\n  free(file);\n  free(all);\n"
    "  return rc;\n}\n\n",
    P, p, P, p, x->tpc, x->tpc, P, p, P, p, p);
}
