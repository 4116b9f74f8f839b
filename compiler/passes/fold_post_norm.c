/* compiler/passes/fold_post_norm.c — a post-norm layernorm runs in the
 * epilogue of the GEMM whose rows it normalizes.
 *
 * A post-norm block (BERT's: h = layernorm(x + dense(a))) is a GEMM kernel
 * with bias and residual, then a row kernel that reads the [M, N] sum back,
 * normalizes each row and writes it: on a GPU, 6 us and a launch for each
 * of BERT MiniLM's 12 at B=32, T=128 against ~10 us for the GEMM itself. A
 * GEMM whose blocks hold whole rows (templates/cuda/gemm_tma_ln.cuh: N up
 * to 512) can finish them instead, so the sum is never stored.
 *
 * On a target that offers it (nnc_compile_opts.gemm_post_norm: the most N)
 * the layernorm node joins the GEMM kernel (nnc_gemm_desc.post_norm) when
 * the GEMM's output is read by that layernorm alone and is no graph output,
 * and the GEMM is one the fused kernel runs: bf16 or f16 throughout, A
 * [..., M, K] read as it is (no prologue, no transpose), nn.Linear's B
 * [N, K], N and K constant, K a multiple of 8, alpha 1, no activation,
 * aux or bias gradient, a residual that adds (or none). The norm's output
 * then comes out earlier, at the GEMM's place; no kernel between read it,
 * as the norm kernel wrote it. Runs before memory planning, which then
 * gives the sum no storage. */
#include <stdlib.h>

#include "passes.h"

static bool narrow(nnc_dtype t) { return t == NNC_BF16 || t == NNC_F16; }

/* Whether tensor t (or -1) is absent or of dtype dt. */
static bool absent_or(const nnc_graph *g, int t, nnc_dtype dt) { return t < 0 || g->tensors[t].dtype == dt; }

/* Whether GEMM kernel k is one the fused kernel runs, with N <= max_n. */
static bool gemm_fits(const nnc_graph *g, const nnc_kernel *k, int max_n) {
  const nnc_gemm_desc *d = &k->d.gemm;
  if (k->kind != NNC_KERNEL_GEMM || d->windowed || d->a_trans || !d->b_trans || d->prologue != NNC_NORM_NONE ||
      d->act != NNC_OP_NONE || d->act_last || d->residual_mul || d->alpha != 1.0 || d->aux_kind != NNC_AUX_NONE ||
      d->bgrad_from != NNC_BGRAD_NONE || d->post_norm != NNC_NORM_NONE)
    return false;
  const nnc_tensor *a = &g->tensors[d->a], *b = &g->tensors[d->b], *o = &g->tensors[d->out];
  nnc_dtype t = o->dtype;
  if (!narrow(t) || a->dtype != t || b->dtype != t || !absent_or(g, d->bias, t) || !absent_or(g, d->residual, t) ||
      b->rank != 2 || a->rank < 2)
    return false;
  const nnc_dim n = b->shape[0], kd = b->shape[1];
  return nnc_dim_is_const(n) && nnc_dim_is_const(kd) && n.k > 0 && n.k <= max_n && kd.k % 8 == 0;
}

/* The row kernel of the layernorm that alone reads GEMM kernel ki's
 * output, when it can fold; else -1. */
static int norm_kernel(const nnc_schedule *s, const nnc_uses *u, int ki) {
  const nnc_graph *g = s->g;
  int y = s->k[ki].d.gemm.out;
  if (nnc_graph_is_output(g, y) || nnc_uses_count(u, y) != 1) return -1;
  int n = u->node[u->start[y]];
  const nnc_node *nd = &g->nodes[n];
  int kr = s->kernel_of_node[n];
  if (nd->op != NNC_OP_LAYERNORM || nd->in[0] != y || kr <= ki) return -1;
  const nnc_kernel *k = &s->k[kr];
  nnc_dtype t = g->tensors[y].dtype;
  if (k->kind != NNC_KERNEL_ROW || k->nnodes != 1 || g->tensors[nd->out[0]].dtype != t ||
      !absent_or(g, nd->in[1], t) || !absent_or(g, nd->nin > 2 ? nd->in[2] : -1, t))
    return -1;
  return kr;
}

/* Adds t (>= 0) to kernel k's inputs unless listed; false when they are full. */
static bool add_input(nnc_kernel *k, int t) {
  if (t < 0) return true;
  for (int i = 0; i < k->nin; i++)
    if (k->in[i] == t) return true;
  if (k->nin == NNC_MAX_IO) return false;
  k->in[k->nin++] = t;
  return true;
}

/* Moves the layernorm of row kernel kr into GEMM kernel ki's epilogue. */
static nnc_status fold_one(nnc_schedule *s, int ki, int kr, bool *drop, nnc_error *err) {
  nnc_kernel *k = &s->k[ki], *r = &s->k[kr];
  int n = r->nodes[0];
  const nnc_node *nd = &s->g->nodes[n];
  nnc_kernel grown = *k;
  if (!add_input(&grown, nd->in[1]) || !add_input(&grown, nd->nin > 2 ? nd->in[2] : -1)) return NNC_OK;
  int *nodes = realloc(k->nodes, (size_t)(k->nnodes + 1) * sizeof *nodes);
  if (!nodes) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "fold_post_norm: out of memory");
  nodes[k->nnodes] = n;
  grown.nodes = nodes;
  grown.nnodes = k->nnodes + 1;
  for (int i = 0; i < grown.nout; i++)
    if (grown.out[i] == k->d.gemm.out) grown.out[i] = nd->out[0];
  grown.d.gemm.out = nd->out[0];
  grown.d.gemm.post_norm = NNC_NORM_LAYER;
  grown.d.gemm.post_gamma = nd->in[1];
  grown.d.gemm.post_beta = nd->nin > 2 ? nd->in[2] : -1;
  grown.d.gemm.post_eps = nd->attrs.eps;
  *k = grown;
  s->kernel_of_node[n] = ki;
  free(r->nodes);
  r->nodes = NULL;
  r->nnodes = 0;
  drop[kr] = true;
  return NNC_OK;
}

/* ctx: the most N, an int */
static nnc_status fold_norm(nnc_schedule *s, const nnc_uses *u, int ki, const void *ctx, bool *drop, bool *folded,
                            nnc_error *err) {
  if (drop[ki] || !gemm_fits(s->g, &s->k[ki], *(const int *)ctx)) return NNC_OK;
  int kr = norm_kernel(s, u, ki);
  if (kr < 0 || drop[kr]) return NNC_OK;
  nnc_status st = fold_one(s, ki, kr, drop, err);
  *folded |= drop[kr];
  return st;
}

nnc_status nnc_pass_fold_post_norm(nnc_schedule *s, int max_n, nnc_error *err) {
  return nnc_schedule_fold(s, "fold_post_norm", fold_norm, &max_n, err);
}
