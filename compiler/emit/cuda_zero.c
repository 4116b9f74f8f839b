/* compiler/emit/cuda_zero.c — ZeRO stage 1 for a CUDA folder compiled with
 * --train --parallel=dp:M,zero1: each rank keeps the AdamW moments of 1/M
 * of the weights (ZERO_SHARD, zero_owned(): emit_c_train.c) and updates only
 * those. The hooks written here take the place of cuda_train.c's: the
 * gradients are reduce-scattered at the update on the model's stream (the
 * buckets beside the backward are all-reduces, so they are off under ZeRO),
 * the norm is the shard's summed over the ranks, the update runs on the
 * shard and the updated weights are all-gathered as f32 in the micro-batch
 * block, then stored (and their master copy refreshed) by
 * nnc_optim_store. Checkpoints gather the moments for rank 0's file.
 *
 * The f32 master weights stay whole on every rank: the gathered f32 values
 * refresh them, so every rank can write a checkpoint's weights or resume
 * without one more collective; sharding them too is the next saving. */
#include <stdio.h>

#include "cuda.h"

void cu_zero_struct(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b,
    "  nnc_optim_param *store_table; /* ZeRO-1: every weight whole, for nnc_optim_store */\n"
    "  int store_sent;\n");
}

/* The shard's norm, the sum over the ranks and the update with its
 * all-gather. */
void cu_zero_hooks(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* Each rank's gradients summed over the ranks into the shard it owns\n"
    " * alone (a reduce-scatter in place: the optimizer reads no other); the rest\n"
    " * of m->grad keeps this rank's own sums. */\n"
    "static int train_all_reduce(%s_model *m) {\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_comm_reduce_scatter(m->comm, m->grad, m->grad + (int64_t)m->comm->rank * ZERO_SHARD,\n"
    "                               (size_t)ZERO_SHARD, NNRT_F32, NNRT_REDUCE_SUM, m->stream, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the gradients over the ranks: %%s\", e.msg);\n"
    "  return 0;\n}\n\n"
    "/* The squares of the owned gradients, summed over the ranks (in double,\n"
    " * on the device): the global norm, though no rank holds every summed\n"
    " * gradient. */\n"
    "static int train_sum_squares(%s_model *m, double *ss) {\n"
    "  int64_t lo, hi;\n"
    "  zero_owned(m->comm->rank, &lo, &hi);\n"
    "  nnc_optim_sum_squares<<<NNC_OPTIM_SUM_BLOCKS, NNC_OPTIM_SUM_THREADS, 0, m->stream>>>(m->grad + lo, hi - lo, m->partial);\n"
    "  nnc_optim_sum_partials<<<1, NNC_OPTIM_SUM_BLOCKS, 0, m->stream>>>(m->partial);\n"
    "  int rc = train_launched(m, \"the gradients' norm\");\n"
    "  if (rc) return rc;\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_comm_all_reduce(m->comm, m->partial, m->partial, 1, NNRT_F64, NNRT_REDUCE_SUM, m->stream, &e) ||\n"
    "      nnrt_comm_nccl_wait(m->comm, m->stream, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the gradient norm over the ranks: %%s\", e.msg);\n"
    "  cudaError_t ce = cudaMemcpy(ss, m->partial, sizeof *ss, cudaMemcpyDeviceToHost);\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s: the gradients' norm: %%s\", cudaGetErrorString(ce));\n}\n\n",
    p, P, p, p, P, p, P, p);
  nnc_sb_printf(b,
    "/* Bytes of one element of a weight as stored. */\n"
    "static size_t stored_size(const nnc_optim_param *q) {\n"
    "  return q->stored == NNC_OPTIM_BF16 || q->stored == NNC_OPTIM_F16 ? 2 : 4;\n}\n\n"
    "/* A table to the device when it differs from what was sent last (host:\n"
    " * that copy; NULL for a table that never changes, sent once). */\n"
    "static int send_table(%s_model *m, nnc_optim_param *dev, nnc_optim_param *host, int *sent,\n"
    "                      const nnc_optim_param *table) {\n"
    "  if (*sent && (!host || memcmp(table, host, NPARAMS * sizeof *table) == 0)) return 0;\n"
    "  /* a pageable copy is staged before the call returns */\n"
    "  cudaError_t ce = cudaMemcpyAsync(dev, table, NPARAMS * sizeof *table, cudaMemcpyHostToDevice, m->stream);\n"
    "  if (ce != cudaSuccess) return fail(m, %s_E_DEVICE, \"%s: the update's table: %%s\", cudaGetErrorString(ce));\n"
    "  if (host) memcpy(host, table, NPARAMS * sizeof *table);\n"
    "  *sent = 1;\n"
    "  return 0;\n}\n\n",
    p, P, p);
  nnc_sb_printf(b,
    "/* The update of the owned shard (its table: each weight's owned elements,\n"
    " * numbered from the shard's start), then every rank's updated f32 values\n"
    " * gathered into the micro-batch block (free between updates) in the flat\n"
    " * layout and stored into every weight: the ranks hold the same weights\n"
    " * again. */\n"
    "static int train_apply(%s_model *m, const nnrt_optim *opt, float scale, const %s_train_options *o) {\n"
    "  int64_t lo, hi;\n"
    "  zero_owned(m->comm->rank, &lo, &hi);\n"
    "  float *flat = NULL;\n"
    "  int rc = train_part(m, &flat);\n"
    "  if (!m->store_table && !rc) {\n"
    "    nnrt_error e = {};\n"
    "    if (nnrt_cuda_malloc(m->alloc, NPARAMS * sizeof(nnc_optim_param), (void **)&m->store_table, &e))\n"
    "      rc = fail(m, %s_E_DEVICE, \"%s: allocating the store's table: %%s\", e.msg);\n"
    "  }\n"
    "  if (!rc) rc = send_table(m, m->store_table, NULL, &m->store_sent, update_base);\n"
    "  if (rc) return rc;\n"
    "  nnc_optim_param table[NPARAMS];\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    const nnc_optim_param *q = &update_base[j];\n"
    "    const int64_t a = q->at > lo ? q->at : lo, z = q->at + q->n < hi ? q->at + q->n : hi;\n"
    "    table[j] = *q;\n"
    "    table[j].at = a - lo;\n"
    "    table[j].n = z > a ? z - a : 0;\n"
    "    table[j].w_off = q->w_off + (long long)((a - q->at) * (int64_t)stored_size(q));\n"
    "    table[j].decay = decays(o, j);\n"
    "  }\n"
    "  rc = send_table(m, m->update_table, m->update_host, &m->update_sent, table);\n"
    "  if (rc) return rc;\n",
    p, p, P, p);
  cu_optim_step(b);
  nnc_sb_printf(b,
    "  const int64_t most = (ZERO_SHARD < TRAIN_LARGEST ? ZERO_SHARD : TRAIN_LARGEST), want = (most + 255) / 256;\n"
    "  const dim3 grid((unsigned)(want < 512 ? want : 512), NPARAMS);\n"
    "  nnc_optim_update<<<grid, 256, 0, m->stream>>>(m->update_table, s, m->weights, m->master ? m->master + lo : NULL,\n"
    "                                                m->grad + lo, m->mom, m->vel);\n"
    "  rc = train_launched(m, \"the optimizer's update\");\n"
    "  /* the owned f32 values into the flat block: a weight stored as f32 is\n"
    "   * its own master */\n"
    "  cudaError_t ce = cudaSuccess;\n"
    "  for (int j = 0; !rc && ce == cudaSuccess && j < NPARAMS; j++) {\n"
    "    const nnc_optim_param *q = &table[j];\n"
    "    if (!q->n || q->stored == NNC_OPTIM_FROZEN) continue;\n"
    "    const void *src = q->stored == NNC_OPTIM_F32 ? (const void *)(m->weights + q->w_off) : (const void *)(m->master + lo + q->at);\n"
    "    ce = cudaMemcpyAsync(flat + lo + q->at, src, (size_t)q->n * 4, cudaMemcpyDeviceToDevice, m->stream);\n"
    "  }\n"
    "  if (!rc && ce != cudaSuccess) rc = fail(m, %s_E_DEVICE, \"%s: the updated shard: %%s\", cudaGetErrorString(ce));\n"
    "  if (rc) return rc;\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_comm_all_gather(m->comm, flat + lo, flat, (size_t)ZERO_SHARD, NNRT_F32, m->stream, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s_train_update: the updated weights from the ranks: %%s\", e.msg);\n"
    "  const int64_t wide = (TRAIN_LARGEST + 255) / 256;\n"
    "  const dim3 all((unsigned)(wide < 512 ? wide : 512), NPARAMS);\n"
    "  nnc_optim_store<<<all, 256, 0, m->stream>>>(m->store_table, m->weights, m->master, flat);\n"
    "  return train_launched(m, \"storing the gathered weights\");\n}\n\n",
    P, p, P, p);
}

/* state_to_host()'s moments: every rank's shard, gathered through the
 * micro-batch block. */
void cu_zero_moments_to_host(const ec_ctx *x, nnc_sb *b) {
  const char *P = x->P;
  nnc_sb_printf(b,
    "  /* the moments are sharded: every rank calls _save and takes part in\n"
    "   * the gathers, through the micro-batch block (free between updates) */\n"
    "  float *flat = NULL;\n"
    "  int rc = train_part(m, &flat);\n"
    "  if (rc) return rc;\n"
    "  float *const dst[2] = {m1, m2}, *const src[2] = {m->mom, m->vel};\n"
    "  nnrt_error e = {};\n"
    "  cudaError_t ce = cudaSuccess;\n"
    "  for (int i = 0; i < 2 && ce == cudaSuccess; i++) {\n"
    "    if (nnrt_comm_all_gather(m->comm, src[i], flat, (size_t)ZERO_SHARD, NNRT_F32, m->stream, &e) ||\n"
    "        nnrt_comm_nccl_wait(m->comm, m->stream, &e))\n"
    "      return fail(m, %s_E_COMM, \"gathering the optimizer state from the ranks: %%s\", e.msg);\n"
    "    ce = cudaMemcpy(dst[i], flat, (size_t)TRAIN_NUMEL * 4, cudaMemcpyDeviceToHost);\n"
    "  }\n",
    P);
}

/* _load's: this rank's shard of the file's whole moments (host blocks). */
void cu_zero_moments_from_host(const ec_ctx *x, nnc_sb *b) {
  (void)x;
  nnc_sb_printf(b,
    "  /* the file's moments are whole: this rank keeps its shard of them */\n"
    "  int64_t lo, hi;\n"
    "  zero_owned(m->comm->rank, &lo, &hi);\n"
    "  if (!rc) ce = cudaMemcpy(m->mom, host + lo, (size_t)(hi - lo) * 4, cudaMemcpyHostToDevice);\n"
    "  if (!rc && ce == cudaSuccess) ce = cudaMemcpy(m->vel, host + TRAIN_NUMEL + lo, (size_t)(hi - lo) * 4, cudaMemcpyHostToDevice);\n");
}
