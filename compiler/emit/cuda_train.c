/* compiler/emit/cuda_train.c — the training API of a CUDA folder compiled
 * with --train (declared by emit_c_train.c): the gradients, the optimizer's
 * moments and, for bf16 or f16 storage, f32 master weights live on the GPU
 * in blocks laid out as train_table says; the micro-batches' gradients are
 * summed there, their global norm is reduced there (double, a fixed order:
 * the same bits on every run) and one launch updates every weight
 * (kernels/optim.cuh). Only the loss, the norm and checkpoints cross to the
 * host. */
#include <stdio.h>
#include <string.h>

#include "cuda.h"

bool cu_train_master(const ec_ctx *x) { return x->r->train && x->r->precision.storage != NNC_F32; }

void cu_train_struct(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b,
    "  /* training (nnc --train): device blocks in train_table's layout */\n"
    "  float *grad, *part, *mom, *vel; /* gradients summed over micro-batches, one micro-batch's,\n"
    "                                     the optimizer's moments */\n"
    "  float *master;                /* f32 master weights (the weights are stored narrow), else NULL */\n"
    "  nnc_optim_param *update_table; /* the update's view of each weight */\n"
    "  nnc_optim_param update_host[NPARAMS]; /* what update_table holds, once update_sent */\n"
    "  int update_sent;\n"
    "  double *partial;              /* the gradients' sum of squares, per block (tp:N: two sums) */\n"
    "  float *grad_host;             /* host: _train_gradient's copy */\n"
    "  void *kept_host[%d];          /* host: _train_output's copies */\n"
    "  int nacc;                     /* micro-batches accumulated since the last update */\n"
    "  int64_t step;                 /* updates taken */\n",
    ec_train_nkept(x) ? ec_train_nkept(x) : 1);
  if (x->zero1) cu_zero_struct(x, b);
  cu_grad_buckets_struct(x, b);
  ec_train_scale_struct(x, b);
}

void cu_train_destroy(const ec_ctx *x, nnc_sb *b) {
  cu_grad_buckets_destroy(x, b);
  nnc_sb_printf(b, "  free(m->grad_host);\n"
                   "  for (size_t i = 0; i < sizeof m->kept_host / sizeof m->kept_host[0]; i++) free(m->kept_host[i]);\n");
}

/* train_state(): the device blocks and host copies, on first use. */
static void write_state(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  const nnc_graph *g = x->g;
  nnc_sb_printf(b,
    "/* The gradient and moment blocks (zeroed), the update's table and the host\n"
    " * copies, allocated by the first call that needs them; the micro-batch\n"
    " * block only when one is needed (train_part): a step without accumulation\n"
    " * or evaluation goes without its bytes. */\n"
    "static int train_state(%s_model *m) {\n"
    "  if (m->grad) return 0;\n"
    "  nnrt_error e = {};\n"
    "  const size_t bytes = (size_t)TRAIN_NUMEL * sizeof(float);\n"
    "  /* the gradients, then the two moments%s */\n"
    "  const size_t size[3] = {(size_t)%s * 4, (size_t)%s * 4, (size_t)%s * 4};\n"
    "  float *blk[3] = {NULL, NULL, NULL};\n"
    "  int rc = 0;\n"
    "  for (int i = 0; !rc && i < 3; i++) {\n"
    "    rc = nnrt_cuda_malloc(m->alloc, size[i], (void **)&blk[i], &e);\n"
    "    if (!rc && cudaMemsetAsync(blk[i], 0, size[i], m->stream) != cudaSuccess) rc = %s_E_DEVICE;\n"
    "  }\n"
    "  if (!rc) rc = nnrt_cuda_malloc(m->alloc, NPARAMS * sizeof(nnc_optim_param), (void **)&m->update_table, &e);\n"
    "  if (!rc) rc = nnrt_cuda_malloc(m->alloc, %d * NNC_OPTIM_SUM_BLOCKS * sizeof(double), (void **)&m->partial, &e);\n"
    "  if (!rc && !(m->grad_host = (float *)malloc(bytes))) rc = %s_E_NOMEM;\n",
    p, x->zero1 ? " (ZeRO-1: padded to whole shards; this rank's shard)" : "",
    x->zero1 ? "TRAIN_PADDED" : "TRAIN_NUMEL", x->zero1 ? "ZERO_SHARD" : "TRAIN_NUMEL",
    x->zero1 ? "ZERO_SHARD" : "TRAIN_NUMEL", P, g->ranks > 1 ? 2 : 1, P);
  int k = 0;
  for (int i = 0; i < g->noutputs; i++) {
    if (!ec_train_is_kept(x, i)) continue;
    nnc_sb_printf(b, "  if (!rc && !(m->kept_host[%d] = malloc(io_bytes(&m->dmax, 0, %d) + 4))) rc = %s_E_NOMEM;   /* %s */\n",
                  k++, i, P, g->outputs[i].name);
  }
  cu_grad_buckets_create(x, b);
  nnc_sb_printf(b,
    "  if (rc) {\n"
    "    (void)cudaGetLastError();\n"
    "    return fail(m, rc, \"%s: allocating the gradients and the optimizer state (3 blocks of %%lld floats)%%s%%s\",\n"
    "                (long long)TRAIN_NUMEL, e.msg[0] ? \": \" : \"\", e.msg);\n"
    "  }\n"
    "  m->grad = blk[0];\n  m->mom = blk[1];\n  m->vel = blk[2];\n"
    "  m->nacc = 0;\n"
    "  m->loss_scale = TRAIN_LOSS_SCALE;\n"
    "  return 0;\n}\n\n", p);
}

/* One forward and backward into grad (the first micro-batch) or part. */
static void write_pass(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  const int L = ec_train_loss(x);
  nnc_sb_printf(b,
    "/* Forward and backward on one batch of host inputs: the gradients land in\n"
    " * dst (device), the loss in *loss, the kept outputs in m->out_dev. */\n"
    "static int train_pass(%s_model *m, const %s_dims *d, const %s_inputs *in, float *dst, float *loss) {\n"
    "  m->err[0] = 0;\n"
    "  %s_outputs out;\n  memset(&out, 0, sizeof out);\n", p, p, p, p);
  for (int i = 0; i < g->noutputs; i++) {
    int j = ec_train_param_of_output(x, i);
    if (j >= 0) nnc_sb_printf(b, "  out.%s = dst + train_table[%d].at;\n", x->out_name[i], j);
    else nnc_sb_printf(b, "  out.%s = (%s *)m->out_dev[%d];\n", x->out_name[i], ec_api_ctype(g, g->outputs[i].tensor), i);
  }
  nnc_sb_printf(b,
    "  /* the loss scale is staged to the device with the other inputs */\n"
    "  const %s_inputs sin = scaled_inputs(m, in);\n"
    "  int rc = check_run(m, d, &sin, &out);\n"
    "  %s_inputs din;\n"
    "  if (!rc) rc = stage_inputs(m, d, &sin, &din);\n"
    "  if (!rc) rc = launch(m, d, &din, &out, m->stream);\n"
    "  if (rc) return rc;\n"
    "  cudaError_t ce = cudaMemcpyAsync(loss, m->out_dev[%d], sizeof *loss, cudaMemcpyDeviceToHost, m->stream);\n"
    "  if (ce == cudaSuccess) ce = cudaStreamSynchronize(m->stream);\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s: a training pass: %%s\", cudaGetErrorString(ce));\n}\n\n",
    p, p, L, P, p);
}

/* The nnc_optim_step s of an update from the runtime's options opt and the
 * gradient scale (train_apply's and ZeRO-1's, cuda_zero.c). */
void cu_optim_step(nnc_sb *b) {
  nnc_sb_puts(b,
    "  nnc_optim_step s;\n"
    "  s.lr = opt->lr;\n  s.beta1 = opt->beta1;\n  s.beta2 = opt->beta2;\n  s.eps = opt->eps;\n"
    "  s.weight_decay = opt->weight_decay;\n  s.scale = scale;\n  s.sgd = opt->sgd;\n"
    "  /* bias corrections in double, as runtime/optim.c does */\n"
    "  s.inv_c1 = (float)(1.0 / (1.0 - pow((double)opt->beta1, (double)opt->step)));\n"
    "  s.inv_sqrt_c2 = (float)(1.0 / sqrt(1.0 - pow((double)opt->beta2, (double)opt->step)));\n");
}

/* The hooks of the shared _train_accumulate and _train_update
 * (emit_c_train.c), on the model's stream. */
/* --parallel=tp:N: the global norm counts each gradient once: the slices'
 * squares summed over the ranks (a padded vocabulary's extra rows have zero
 * gradients), the whole weights' (the same on every rank) from this rank
 * alone, as C SIMD's ec_train_tp_norm. The kernel reads each weight's place
 * from update_table, sent here when the update has not sent it yet (the
 * update sends it again with the options' decays). */
static void tp_sum_squares(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b,
    "/* --parallel=tp:%d: the gradient norm over the ranks: the squares of the\n"
    " * slices summed over them, the whole weights' (equal on every rank) once. */\n"
    "static int train_sum_squares(%s_model *m, double *ss) {\n"
    "  cudaError_t ce = m->update_sent ? cudaSuccess\n"
    "                   : cudaMemcpyAsync(m->update_table, update_base, sizeof update_base, cudaMemcpyHostToDevice, m->stream);\n"
    "  if (ce != cudaSuccess) return fail(m, %s_E_DEVICE, \"%s: the weights' table: %%s\", cudaGetErrorString(ce));\n"
    "  nnc_optim_sum_squares_parts<<<NNC_OPTIM_SUM_BLOCKS, NNC_OPTIM_SUM_THREADS, 0, m->stream>>>(m->grad, m->update_table, NPARAMS,\n"
    "                                                                                          m->partial);\n"
    "  nnc_optim_sum_partials<<<1, NNC_OPTIM_SUM_BLOCKS, 0, m->stream>>>(m->partial);\n"
    "  nnc_optim_sum_partials<<<1, NNC_OPTIM_SUM_BLOCKS, 0, m->stream>>>(m->partial + NNC_OPTIM_SUM_BLOCKS);\n"
    "  int rc = train_launched(m, \"the gradients' norm\");\n"
    "  if (rc) return rc;\n"
    "  nnrt_error e = {};\n"
    "  if (nnrt_comm_all_reduce(m->%s, m->partial, m->partial, 1, NNRT_F64, NNRT_REDUCE_SUM, m->stream, &e) ||\n"
    "      nnrt_comm_nccl_wait(m->%s, m->stream, &e))\n"
    "    return fail(m, %s_E_COMM, \"%s: the gradient norm over the ranks: %%s\", e.msg);\n"
    "  double sliced = 0, whole = 0;\n"
    "  ce = cudaMemcpyAsync(&sliced, m->partial, sizeof sliced, cudaMemcpyDeviceToHost, m->stream);\n"
    "  if (ce == cudaSuccess) ce = cudaMemcpyAsync(&whole, m->partial + NNC_OPTIM_SUM_BLOCKS, sizeof whole, cudaMemcpyDeviceToHost, m->stream);\n"
    "  if (ce == cudaSuccess) ce = cudaStreamSynchronize(m->stream);\n"
    "  if (ce != cudaSuccess) return fail(m, %s_E_DEVICE, \"%s: the gradients' norm: %%s\", cudaGetErrorString(ce));\n"
    "  *ss = sliced + whole;\n"
    "  return 0;\n}\n\n",
    x->g->ranks, x->p, x->P, x->p, x->tpc, x->tpc, x->P, x->p, x->P, x->p);
}

static void write_hooks(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "/* After a launch of the update's kernels. */\n"
    "static int train_launched(%s_model *m, const char *what) {\n"
    "  cudaError_t ce = cudaGetLastError();\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s: %%s: %%s\", what, cudaGetErrorString(ce));\n}\n\n"
    "/* The block of one micro-batch's gradients, allocated on first need. */\n"
    "static int train_part(%s_model *m, float **part) {\n"
    "  nnrt_error e = {};\n"
    "  *part = NULL;\n"
    "  if (!m->part && nnrt_cuda_malloc(m->alloc, (size_t)%s * sizeof(float), (void **)&m->part, &e)) {\n"
    "    (void)cudaGetLastError();\n"
    "    return fail(m, %s_E_DEVICE, \"%s: allocating a micro-batch's gradients (%%lld floats): %%s\", (long long)TRAIN_NUMEL, e.msg);\n"
    "  }\n"
    "  *part = m->part;\n"
    "  return 0;\n}\n\n"
    "static int train_add_part(%s_model *m) {\n"
    "  nnc_optim_accumulate<<<1024, 256, 0, m->stream>>>(m->grad, m->part, TRAIN_NUMEL);\n"
    "  return train_launched(m, \"adding a micro-batch's gradients\");\n}\n\n",
    p, P, p, p, x->zero1 ? "TRAIN_PADDED" : "TRAIN_NUMEL", P, p, p);
  if (!x->zero1 && x->g->ranks <= 1)
    nnc_sb_printf(b,
    "static int train_sum_squares(%s_model *m, double *ss) {\n"
    "  nnc_optim_sum_squares<<<NNC_OPTIM_SUM_BLOCKS, NNC_OPTIM_SUM_THREADS, 0, m->stream>>>(m->grad, TRAIN_NUMEL, m->partial);\n"
    "  nnc_optim_sum_partials<<<1, NNC_OPTIM_SUM_BLOCKS, 0, m->stream>>>(m->partial);\n"
    "  int rc = train_launched(m, \"the gradients' norm\");\n"
    "  if (rc) return rc;\n"
    "  cudaError_t ce = cudaMemcpyAsync(ss, m->partial, sizeof *ss, cudaMemcpyDeviceToHost, m->stream);\n"
    "  if (ce == cudaSuccess) ce = cudaStreamSynchronize(m->stream);\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s: the gradients' norm: %%s\", cudaGetErrorString(ce));\n}\n\n",
    p, P, p);
  if (x->dp > 1)
    nnc_sb_printf(b,
      "/* --parallel=%s: a micro-batch's loss averaged over the %d ranks of the\n"
      " * dp group through NCCL (its gradients are summed %s). */\n"
      "static int train_mean_loss(%s_model *m, float *loss) {\n"
      "  nnrt_error e = {};\n"
      "  float *dl = (float *)m->out_dev[%d];\n"
      "  if (nnrt_comm_all_reduce(m->%s, dl, dl, 1, NNRT_F32, NNRT_REDUCE_SUM, m->stream, &e) ||\n"
      "      nnrt_comm_nccl_wait(m->%s, m->stream, &e))\n"
      "    return fail(m, %s_E_COMM, \"%s_train_accumulate: the loss over the ranks: %%s\", e.msg);\n"
      "  if (cudaMemcpy(loss, dl, sizeof *loss, cudaMemcpyDeviceToHost) != cudaSuccess)\n"
      "    return fail(m, %s_E_DEVICE, \"%s_train_accumulate: %%s\", cudaGetErrorString(cudaGetLastError()));\n"
      "  *loss /= %d;\n"
      "  return 0;\n}\n\n",
      x->plan, x->dp, x->zero1 ? "at the update, each rank's shard: cuda_zero.c" : "in the pass, cuda_grad_buckets.c",
      p, ec_train_loss(x), x->dpc, x->dpc, P, p, P, p, x->dp);
  /* every weight's place, size and storage are the compiler's: only the
   * decay, which the options choose, is filled in per update */
  const nnc_graph *g = x->g;
  nnc_sb_printf(b, "/* The update's view of each weight (its decay: set from the options). */\n"
                   "static const nnc_optim_param update_base[%d] = {\n", g->nparams ? g->nparams : 1);
  int64_t at = 0, largest = 1;
  for (int j = 0; j < g->nparams; j++) {
    const nnc_tensor *t = &g->tensors[g->params[j]];
    const int64_t n = nnc_tensor_max_elems(g, t);
    nnc_sb_printf(b, "  {%lld, %lld, %lld, %s, 0, %d},   /* %s%s */\n", (long long)at, (long long)n, (long long)x->w_off[j],
                  t->dtype == NNC_BF16 ? "NNC_OPTIM_BF16" : t->dtype == NNC_F16 ? "NNC_OPTIM_F16"
                  : t->dtype == NNC_I32 ? "NNC_OPTIM_FROZEN" : "NNC_OPTIM_F32", t->shard.parts > 1, t->name,
                  t->shard.parts > 1 ? ", this rank's slice" : "");
    at += n;
    if (n > largest) largest = n;
  }
  if (!g->nparams) nnc_sb_printf(b, "  {0, 0, 0, NNC_OPTIM_FROZEN, 0, 0},\n");
  nnc_sb_printf(b, "};\n/* elements of the largest weight: the update's blocks along x */\n#define TRAIN_LARGEST %lldll\n\n",
                (long long)largest);
  if (x->zero1) {
    cu_zero_hooks(x, b);
    return;
  }
  if (g->ranks > 1) tp_sum_squares(x, b);
  nnc_sb_printf(b,
    "static int train_apply(%s_model *m, const nnrt_optim *opt, float scale, const %s_train_options *o) {\n"
    "  nnc_optim_param table[NPARAMS];\n"
    "  memcpy(table, update_base, sizeof table);\n"
    "  for (int j = 0; j < NPARAMS; j++) table[j].decay = decays(o, j);\n"
    "  /* the device's copy changes only when the options' decays do; a pageable\n"
    "   * copy is staged before the call returns */\n"
    "  if (!m->update_sent || memcmp(table, m->update_host, sizeof table) != 0) {\n"
    "    cudaError_t ce = cudaMemcpyAsync(m->update_table, table, sizeof table, cudaMemcpyHostToDevice, m->stream);\n"
    "    if (ce != cudaSuccess) return fail(m, %s_E_DEVICE, \"%s: the update's table: %%s\", cudaGetErrorString(ce));\n"
    "    memcpy(m->update_host, table, sizeof table);\n"
    "    m->update_sent = 1;\n"
    "  }\n",
    p, p, P, p);
  cu_optim_step(b);
  nnc_sb_puts(b,
    "  /* blocks along x for the largest weight; the smaller ones' extra blocks exit at once */\n"
    "  const int64_t want = (TRAIN_LARGEST + 255) / 256;\n"
    "  const dim3 grid((unsigned)(want < 512 ? want : 512), NPARAMS);\n"
    "  nnc_optim_update<<<grid, 256, 0, m->stream>>>(m->update_table, s, m->weights, m->master, m->grad, m->mom, m->vel);\n"
    "  return train_launched(m, \"the optimizer's update\");\n}\n\n");
}

/* _save, _load, and the accessors of the state, through host copies. */
static void write_checkpoints(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  /* under tp:N each rank's blocks hold its slices (their whole tensors'
   * elements: nnc_weights_shard_numel) */
  const char *numel =
      x->g->ranks > 1 ? "nnc_weights_shard_numel(&manifest[j], &shards[j])" : "nnc_weights_numel(&manifest[j])";
  nnc_sb_printf(b,
    "/* Weight j's f32 values on the device: the master copy, or the weight itself. */\n"
    "static const float *master_of(const %s_model *m, int j) {\n"
    "  return m->master ? m->master + train_table[j].at : (const float *)(m->weights + layout[j].offset);\n}\n\n", p);
  nnc_sb_printf(b,
    "/* The weights (as f32), both moments and the step, copied to host blocks\n"
    " * w, m1, m2 of TRAIN_NUMEL floats, as a checkpoint sees them. */\n"
    "static int state_to_host(%s_model *m, float *w, float *m1, float *m2) {\n", p);
  if (x->zero1) cu_zero_moments_to_host(x, b);
  else nnc_sb_printf(b,
    "  cudaError_t ce = cudaMemcpy(m1, m->mom, (size_t)TRAIN_NUMEL * 4, cudaMemcpyDeviceToHost);\n"
    "  if (ce == cudaSuccess) ce = cudaMemcpy(m2, m->vel, (size_t)TRAIN_NUMEL * 4, cudaMemcpyDeviceToHost);\n");
  nnc_sb_printf(b,
    "  for (int j = 0; ce == cudaSuccess && j < NPARAMS; j++) {\n"
    "    const size_t n = (size_t)%s;\n"
    "    /* integer weights (never trained) as they are stored, in the manifest's type */\n"
    "    const void *src = manifest[j].dtype == NNRT_I32 ? (const void *)(m->weights + layout[j].offset) : master_of(m, j);\n"
    "    ce = cudaMemcpy(w + train_table[j].at, src, n * 4, cudaMemcpyDeviceToHost);\n"
    "  }\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s: copying the training state from the GPU: %%s\",\n"
    "                                       cudaGetErrorString(ce));\n}\n\n", numel, P, p);
  nnc_sb_printf(b,
    "/* A checkpoint's view of host blocks w, m1, m2. */\n"
    "static nnrt_ckpt checkpoint_of(%s_model *m, float *wb, float *m1, float *m2, void **w, float **mom, float **vel) {\n"
    "  for (int j = 0; j < NPARAMS; j++) {\n"
    "    w[j] = wb ? wb + train_table[j].at : NULL;\n"
    "    mom[j] = m1 + train_table[j].at;\n"
    "    vel[j] = m2 + train_table[j].at;\n"
    "  }\n"
    "  return (nnrt_ckpt){NPARAMS, manifest, w, mom, vel, m->step, scale_state_of(m)};\n}\n\n",
    p);
  if (x->g->ranks > 1) cu_tp_save(x, b);
  else nnc_sb_printf(b,
    "int %s_save(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  m->err[0] = 0;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  float *host = (float *)malloc((size_t)TRAIN_NUMEL * 3 * sizeof(float));\n"
    "  if (!host) return fail(m, %s_E_NOMEM, \"%s_save: out of memory for the host copy (%%lld floats)\", (long long)TRAIN_NUMEL * 3);\n"
    "  rc = state_to_host(m, host, host + TRAIN_NUMEL, host + 2 * TRAIN_NUMEL);\n"
    "  void *w[NPARAMS];\n  float *mom[NPARAMS], *vel[NPARAMS];\n"
    "  nnrt_ckpt c = checkpoint_of(m, host, host + TRAIN_NUMEL, host + 2 * TRAIN_NUMEL, w, mom, vel);\n"
    "  nnrt_error e = {};\n"
    "  %sif (!rc && %snnrt_ckpt_save(path, &c, &e)) rc = fail(m, e.code, \"%s_save: %%s\", e.msg);\n"
    "  free(host);\n"
    "  return rc;\n}\n\n",
    p, p, P, P, p, x->zero1 ? "/* every rank gathered the state; rank 0 writes it */\n  " : "",
    x->zero1 ? "m->comm->rank == 0 && " : "", p);
  nnc_sb_printf(b,
    "int %s_load(%s_model *m, const char *path) {\n"
    "  if (!m || !path) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  if (rc) return rc;\n"
    "  m->err[0] = 0;\n"
    "  float *host = (float *)malloc((size_t)TRAIN_NUMEL * 2 * sizeof(float));\n"
    "  if (!host) return fail(m, %s_E_NOMEM, \"%s_load: out of memory for the host copy (%%lld floats)\", (long long)TRAIN_NUMEL * 2);\n"
    "  nnrt_error e = {};\n"
    "  nnrt_st *st = NULL;\n"
    "  rc = nnrt_st_open(path, &st, &e);\n"
    "  if (rc) rc = fail(m, rc, \"%s_load: %%s\", e.msg);\n"
    "  /* the moments first, to the host: a file that fails leaves the model as it was */\n"
    "  float *mom[NPARAMS], *vel[NPARAMS];\n", p, p, P, P, p, p);
  if (x->g->ranks > 1) ec_tp_load_state(x, b, "host", "host + TRAIN_NUMEL", true);
  else nnc_sb_printf(b,
    "  void *w[NPARAMS];\n"
    "  nnrt_ckpt c = checkpoint_of(m, NULL, host, host + TRAIN_NUMEL, w, mom, vel);\n"
    "  int64_t step = 0;\n"
    "  if (!rc && nnrt_ckpt_load_state(st, path, &c, &step, &e)) rc = fail(m, e.code, \"%s_load: %%s\", e.msg);\n", p);
  nnc_sb_printf(b,
    "  nnrt_scale_state scale;\n"
    "  if (!rc && nnrt_ckpt_load_scale(st, path, &scale, &e)) rc = fail(m, e.code, \"%s_load: %%s\", e.msg);\n"
    "  if (!rc) rc = load(m, st, &e);\n"
    "  if (st) nnrt_st_close(st);\n"
    "  cudaError_t ce = cudaSuccess;\n", p);
  if (x->zero1) cu_zero_moments_from_host(x, b);
  else nnc_sb_printf(b,
    "  if (!rc) ce = cudaMemcpy(m->mom, host, (size_t)TRAIN_NUMEL * 4, cudaMemcpyHostToDevice);\n"
    "  if (!rc && ce == cudaSuccess) ce = cudaMemcpy(m->vel, host + TRAIN_NUMEL, (size_t)TRAIN_NUMEL * 4, cudaMemcpyHostToDevice);\n");
  nnc_sb_printf(b,
    "  free(host);\n"
    "  if (!rc && ce != cudaSuccess) rc = fail(m, %s_E_DEVICE, \"%s_load: %%s\", cudaGetErrorString(ce));\n"
    "  if (rc) return rc;\n"
    "  m->step = step;\n"
    "  set_scale_state(m, &scale);\n"
    "  m->nacc = 0;\n"
    "  return 0;\n}\n\n",
    P, p);
  nnc_sb_printf(b,
    "const float *%s_train_gradient(const %s_model *m, const char *name) {\n"
    "  for (int j = 0; m && m->grad && name && j < NPARAMS; j++) {\n"
    "    if (strcmp(manifest[j].name, name) != 0) continue;\n"
    "    float *h = m->grad_host + train_table[j].at;\n"
    "    const size_t n = (size_t)%s;\n"
    "    if (cudaMemcpy(h, m->grad + train_table[j].at, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {\n"
    "      (void)cudaGetLastError();\n"
    "      return NULL;\n"
    "    }\n"
    "    return h;\n"
    "  }\n"
    "  return NULL;\n}\n\n"
    "const void *%s_train_output(const %s_model *m, const char *name) {\n"
    "  if (!m || !name || !m->grad || !m->has_run) return NULL;\n",
    p, p, numel, p, p);
  int k = 0;
  for (int i = 0; i < x->g->noutputs; i++) {
    if (!ec_train_is_kept(x, i)) continue;
    nnc_sb_printf(b,
      "  if (strcmp(name, \"%s\") == 0) {\n"
      "    if (cudaMemcpy(m->kept_host[%d], m->out_dev[%d], io_bytes(&m->last, 0, %d), cudaMemcpyDeviceToHost) != cudaSuccess) {\n"
      "      (void)cudaGetLastError();\n"
      "      return NULL;\n"
      "    }\n"
      "    return m->kept_host[%d];\n  }\n",
      x->g->outputs[i].name, k, i, i, k);
    k++;
  }
  nnc_sb_printf(b, "  return NULL;\n}\n\n");
}

/* The forward alone (forward_only() of <p>.cu): _train_eval's hook and
 * _forward, on the model's device buffers. The gradient outputs point at
 * the micro-batch block, scratch between micro-batches: forward_only writes
 * none unless a kernel it needs also writes one. */
static void write_forward(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  const int L = ec_train_loss(x);
  nnc_sb_printf(b,
    "/* The forward alone on a batch of host inputs into the model's device\n"
    " * outputs (dout, which gets them): out's host buffers are checked, not\n"
    " * written; the gradients stay as they are. */\n"
    "static int forward_pass(%s_model *m, const %s_dims *d, const %s_inputs *in, const %s_outputs *out, %s_outputs *dout) {\n"
    "  m->err[0] = 0;\n"
    "  %s_outputs o = *out;\n"
    "  /* the gradients: the micro-batch block, scratch (check_run wants every buffer) */\n"
    "  float *part = NULL;\n"
    "  int prc = train_part(m, &part);\n"
    "  if (prc) return prc;\n", p, p, p, p, p, p);
  for (int i = 0; i < g->noutputs; i++) {
    int j = ec_train_param_of_output(x, i);
    if (j >= 0) nnc_sb_printf(b, "  o.%s = part + train_table[%d].at;\n", x->out_name[i], j);
  }
  nnc_sb_printf(b, "  *dout = o;\n");
  for (int i = 0; i < g->noutputs; i++)
    if (ec_train_param_of_output(x, i) < 0)
      nnc_sb_printf(b, "  dout->%s = (%s *)m->out_dev[%d];\n", x->out_name[i], ec_api_ctype(g, g->outputs[i].tensor), i);
  nnc_sb_printf(b,
    "  const %s_inputs sin = scaled_inputs(m, in);   /* loss_scale: checked, not read */\n"
    "  int rc = check_run(m, d, &sin, &o);\n"
    "  %s_inputs din;\n"
    "  if (!rc) rc = stage_inputs(m, d, &sin, &din);\n"
    "  return rc ? rc : run_kernels(m, d, &din, dout, m->stream, forward_only);\n}\n\n", p, p);
  nnc_sb_printf(b,
    "/* _train_eval's: the loss to *loss, the kept outputs left on the device. */\n"
    "static int train_forward_pass(%s_model *m, const %s_dims *d, const %s_inputs *in, float *loss) {\n"
    "  %s_outputs out, dout;\n  memset(&out, 0, sizeof out);\n", p, p, p, p);
  for (int i = 0; i < g->noutputs; i++)
    if (ec_train_param_of_output(x, i) < 0)
      nnc_sb_printf(b, "  out.%s = (%s *)m->out_dev[%d];\n", x->out_name[i], ec_api_ctype(g, g->outputs[i].tensor), i);
  nnc_sb_printf(b,
    "  int rc = forward_pass(m, d, in, &out, &dout);\n"
    "  if (rc) return rc;\n"
    "  cudaError_t ce = cudaMemcpyAsync(loss, m->out_dev[%d], sizeof *loss, cudaMemcpyDeviceToHost, m->stream);\n"
    "  if (ce == cudaSuccess) ce = cudaStreamSynchronize(m->stream);\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s_train_eval: %%s\", cudaGetErrorString(ce));\n}\n\n",
    L, P, p);
  nnc_sb_printf(b,
    "int %s_forward(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out) {\n"
    "  if (!m || !out) return %s_E_ARG;\n"
    "  int rc = train_state(m);\n"
    "  %s_outputs dout;\n"
    "  if (!rc) rc = forward_pass(m, d, in, out, &dout);\n"
    "  if (rc) return rc;\n"
    "  cudaError_t ce = cudaSuccess;\n", p, p, p, p, p, P, p);
  for (int i = 0; i < g->noutputs; i++)
    if (ec_train_param_of_output(x, i) < 0)
      nnc_sb_printf(b, "  if (ce == cudaSuccess)\n"
                       "    ce = cudaMemcpyAsync(out->%s, m->out_dev[%d], io_bytes(d, 0, %d), cudaMemcpyDeviceToHost, m->stream);\n",
                    x->out_name[i], i, i);
  nnc_sb_printf(b,
    "  if (ce == cudaSuccess) ce = cudaStreamSynchronize(m->stream);\n"
    "  return ce == cudaSuccess ? 0 : fail(m, %s_E_DEVICE, \"%s_forward: %%s\", cudaGetErrorString(ce));\n}\n\n", P, p);
}

nnc_status cu_write_train(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  (void)err;
  nnc_sb_printf(b, "/* The training API's state, passes and update (its options and schedule: above). */\n\n");
  write_state(x, b);
  write_pass(x, b);
  write_hooks(x, b);
  write_forward(x, b);
  ec_train_shared(x, b);
  write_checkpoints(x, b);
  return NNC_OK;
}
