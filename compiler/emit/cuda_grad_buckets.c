/* compiler/emit/cuda_grad_buckets.c — data parallelism's gradient sums,
 * overlapped with the backward (--train --parallel=dp:M on cuda-*).
 *
 * The weights' gradients are cut into buckets of about 25 MB, walking the
 * weights from the last declared to the first (the order the backward
 * finishes them in). A bucket is final after the last kernel that writes one
 * of its gradients; right after that kernel's launch forward() records an
 * event, and a second stream waits for it and sums the bucket over the ranks
 * in place (NCCL) while the backward goes on. forward() ends by making its
 * stream wait for the last sum. Every micro-batch's gradients are summed so:
 * with accumulation, the sums of the parts add up to the sum of the whole. */
#include <stdio.h>
#include <stdlib.h>

#include "cuda.h"

#define BUCKET_FLOATS (25ll * 1024 * 1024 / 4)

typedef struct bucket {
  int lo, hi;        /* weights lo..hi (declaration order), their gradients contiguous */
  int out_lo;        /* the output that holds weight lo's gradient: the bucket's start */
  int64_t count;     /* floats */
  int done_at;       /* the kernel after which every gradient in it is final; nk: the end of forward() */
} bucket;

/* The buckets of x's training graph into *out (freed by the caller);
 * returns how many, -1 when out of memory. */
static int find_buckets(const ec_ctx *x, bucket **out) {
  const nnc_graph *g = x->g;
  const nnc_schedule *s = x->s;
  int *out_of = malloc((size_t)(g->nparams + 1) * sizeof *out_of);
  bucket *b = calloc((size_t)(g->nparams + 1), sizeof *b);
  if (!out_of || !b) {
    free(out_of);
    free(b);
    return -1;
  }
  for (int j = 0; j < g->nparams; j++) out_of[j] = -1;
  for (int i = 0; i < g->noutputs; i++) {
    int j = ec_train_param_of_output(x, i);
    if (j >= 0) out_of[j] = i;
  }
  int n = 0;
  bucket cur = {-1, -1, -1, 0, -1};
  for (int j = g->nparams - 1; j >= -1; j--) {
    int i = j >= 0 ? out_of[j] : -1;
    /* a weight without a gradient ends the bucket: the ranges stay contiguous */
    if (i < 0 || (cur.count >= BUCKET_FLOATS)) {
      if (cur.count > 0) b[n++] = cur;
      cur = (bucket){-1, -1, -1, 0, -1};
      if (i < 0) continue;
    }
    int t = g->outputs[i].tensor, p = g->tensors[t].producer;
    /* an output written twice under two names is copied at the end */
    int k = x->output_of[t] == i && p >= 0 ? s->kernel_of_node[p] : s->nk;
    if (cur.hi < 0) cur.hi = j;
    cur.lo = j;
    cur.out_lo = i;
    cur.count += nnc_tensor_max_elems(g, &g->tensors[g->params[j]]);
    if (k > cur.done_at) cur.done_at = k;
  }
  free(out_of);
  *out = b;
  return n;
}

/* Under ZeRO-1 the gradients are reduce-scattered at the update instead
 * (cuda_zero.c): these buckets are all-reduces. */
bool cu_grad_buckets_on(const ec_ctx *x) { return x->r->train && x->dp > 1 && !x->zero1; }

static void emit_bucket(const ec_ctx *x, const bucket *bk, nnc_sb *b) {
  const nnc_graph *g = x->g;
  char first[600], last[600];
  nnc_emit_comment(g->tensors[g->params[bk->lo]].name, first, sizeof first);
  nnc_emit_comment(g->tensors[g->params[bk->hi]].name, last, sizeof last);
  nnc_sb_printf(b, "  /* the gradients of %s .. %s are final: summed over the ranks beside the backward */\n"
                   "  if (int rc_ = reduce_grads(m, s, c.out.%s, %lld)) return rc_;\n",
                first, last, x->out_name[bk->out_lo], (long long)bk->count);
}

void cu_grad_buckets_after(const ec_ctx *x, int k, nnc_sb *b) {
  if (!cu_grad_buckets_on(x)) return;
  bucket *bk = NULL;
  int n = find_buckets(x, &bk);
  if (n < 0) {
    b->oom = true;
    return;
  }
  for (int i = 0; i < n; i++)
    if (bk[i].done_at == k) emit_bucket(x, &bk[i], b);
  if (k == x->s->nk)
    nnc_sb_printf(b, "  /* the step ends when the last sum does */\n"
                     "  if (cudaEventRecord(m->grads_summed, m->comm_stream) != cudaSuccess ||\n"
                     "      cudaStreamWaitEvent(s, m->grads_summed, 0) != cudaSuccess)\n"
                     "    return fail(m, %s_E_DEVICE, \"waiting for the gradients' sums: %%s\", cudaGetErrorString(cudaGetLastError()));\n",
                  x->P);
  free(bk);
}

void cu_grad_buckets_struct(const ec_ctx *x, nnc_sb *b) {
  if (!cu_grad_buckets_on(x)) return;
  nnc_sb_printf(b,
    "  cudaStream_t comm_stream;     /* --parallel=dp: the gradients' sums, beside the backward */\n"
    "  cudaEvent_t grads_ready, grads_summed; /* a bucket final on the stream; the last sum done */\n");
}

void cu_grad_buckets_functions(const ec_ctx *x, nnc_sb *b) {
  if (!cu_grad_buckets_on(x)) return;
  bucket *bk = NULL;
  int n = find_buckets(x, &bk);
  free(bk);
  nnc_sb_printf(b,
    "/* --parallel=%s: n gradients at g, final on stream s, summed over the\n"
    " * %d ranks of the dp group in place on the communication stream (%d\n"
    " * buckets a pass). */\n"
    "static int reduce_grads(%s_model *m, cudaStream_t s, float *g, size_t n) {\n"
    "  nnrt_error e = {};\n"
    "  if (cudaEventRecord(m->grads_ready, s) != cudaSuccess || cudaStreamWaitEvent(m->comm_stream, m->grads_ready, 0) != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"ordering a gradient sum: %%s\", cudaGetErrorString(cudaGetLastError()));\n"
    "  if (nnrt_comm_all_reduce(m->%s, g, g, n, NNRT_F32, NNRT_REDUCE_SUM, m->comm_stream, &e))\n"
    "    return fail(m, %s_E_COMM, \"summing gradients over the ranks: %%s\", e.msg);\n"
    "  return 0;\n}\n\n",
    x->plan, x->dp, n < 0 ? 0 : n, x->p, x->P, x->dpc, x->P);
}

void cu_grad_buckets_create(const ec_ctx *x, nnc_sb *b) {
  if (!cu_grad_buckets_on(x)) return;
  nnc_sb_printf(b,
    "  /* --parallel=dp: the stream the gradients' sums run on, and its events */\n"
    "  if (!rc) rc = nnrt_cuda_check(cudaStreamCreateWithFlags(&m->comm_stream, cudaStreamNonBlocking), \"the gradients' stream\", &e);\n"
    "  if (!rc) rc = nnrt_cuda_check(cudaEventCreateWithFlags(&m->grads_ready, cudaEventDisableTiming), \"an event\", &e);\n"
    "  if (!rc) rc = nnrt_cuda_check(cudaEventCreateWithFlags(&m->grads_summed, cudaEventDisableTiming), \"an event\", &e);\n");
}

void cu_grad_buckets_destroy(const ec_ctx *x, nnc_sb *b) {
  if (!cu_grad_buckets_on(x)) return;
  nnc_sb_printf(b, "  if (m->comm_stream) cudaStreamDestroy(m->comm_stream);\n"
                   "  if (m->grads_ready) cudaEventDestroy(m->grads_ready);\n"
                   "  if (m->grads_summed) cudaEventDestroy(m->grads_summed);\n");
}
