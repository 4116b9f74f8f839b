/* compiler/ref/ref_gemm.c — a GEMM kernel from its descriptor alone:
 *   out = post_norm(act(alpha * (prologue(A) . B) + bias) + residual)
 * (with NNC_AUX_SAVE the activation's input written to aux too; with
 * NNC_AUX_ACT_GRAD out = act'(aux) * alpha * (A . B)) row by row, the way the template computes it, so a descriptor that names
 * the wrong operand or drops an op gives a different result than the graph. */
#include <math.h>
#include <stdlib.h>

#include "ref_internal.h"

/* Operand t of the kernel when t >= 0; *v stays NULL for an absent one. */
static nnc_status optional(const nnc_ref *r, const nnc_kernel *k, int ki, int t, const char *role,
                           const double **v, nnc_error *err) {
  *v = NULL;
  return t < 0 ? NNC_OK : nnc_ref_kernel_operand(r, k, ki, t, role, v, err);
}

/* A rank-1 vector [K] is the matrix [1,K] with no batch dims. */
static nnc_ref_shape as_matrix(nnc_ref_shape s) {
  if (s.rank == 1) {
    s.rank = 2;
    s.d[1] = s.d[0];
    s.d[0] = 1;
  }
  return s;
}

static nnc_ref_shape batch_of(const nnc_ref_shape *s) {
  nnc_ref_shape b = {.rank = s->rank - 2};
  for (int i = 0; i < b.rank; i++) b.d[i] = s->d[i];
  return b;
}

/* n values at x, xs apart, through norm (NNC_NORM_NONE: copied) into row. */
static void norm_row(nnc_norm norm, double eps, const double *x, int64_t xs, int64_t n, const double *gamma,
                     const double *beta, double *row) {
  if (norm == NNC_NORM_NONE) {
    for (int64_t c = 0; c < n; c++) row[c] = x[c * xs];
    return;
  }
  double mean = 0, var = 0;
  if (norm == NNC_NORM_LAYER) {
    for (int64_t c = 0; c < n; c++) mean += x[c * xs];
    mean /= (double)n;
  }
  for (int64_t c = 0; c < n; c++) var += (x[c * xs] - mean) * (x[c * xs] - mean);
  double inv = 1.0 / sqrt(var / (double)n + eps);
  for (int64_t c = 0; c < n; c++)
    row[c] = (x[c * xs] - mean) * inv * (gamma ? gamma[c] : 1.0) + (beta ? beta[c] : 0.0);
}

/* A windowed GEMM's A: the kernel's im2col node and the view after it run
 * as graph ops (ref_window.c's definition of the windows), which the
 * targets' gathering loads must match. */
static nnc_status windows(nnc_ref *r, const nnc_kernel *k, int ki, const nnc_gemm_desc *d, const double **a,
                          nnc_error *err) {
  int view = d->a >= 0 && d->a < r->g->ntensors ? r->g->tensors[d->a].producer : -1;
  bool ok = d->window >= 0 && d->window < r->g->nnodes && view >= 0 && r->g->nodes[d->window].op == NNC_OP_IM2COL &&
            r->g->nodes[view].nin >= 1 && r->g->nodes[view].in[0] == r->g->nodes[d->window].out[0];
  bool has_w = false, has_v = false;
  for (int i = 0; ok && i < k->nnodes; i++) {
    has_w |= k->nodes[i] == d->window;
    has_v |= k->nodes[i] == view;
  }
  if (!ok || !has_w || !has_v)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected A made inside the kernel by its im2col "
                               "(node %d) and a view of it", d->window);
  nnc_status st = nnc_ref_eval_node(r, d->window, err);
  if (!st) st = nnc_ref_eval_node(r, view, err);
  *a = r->val[d->a];
  return st;
}

/* A pooled GEMM's pool: its im2col node, then the max after it, run as
 * graph ops on the result (the tensor the im2col reads). */
static nnc_status pool_result(nnc_ref *r, const nnc_kernel *k, int ki, const nnc_gemm_desc *d, nnc_error *err) {
  const nnc_graph *g = r->g;
  bool ok = d->pool >= 0 && d->pool < g->nnodes && g->nodes[d->pool].op == NNC_OP_IM2COL && d->out >= 0 &&
            g->tensors[d->out].producer >= 0 && g->nodes[g->tensors[d->out].producer].op == NNC_OP_MAX &&
            g->nodes[g->tensors[d->out].producer].in[0] == g->nodes[d->pool].out[0];
  int max = ok ? g->tensors[d->out].producer : -1;
  bool has_p = false, has_m = false;
  for (int i = 0; ok && i < k->nnodes; i++) {
    has_p |= k->nodes[i] == d->pool;
    has_m |= k->nodes[i] == max;
  }
  if (!ok || !has_p || !has_m)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected out made inside the kernel by the max of an "
                               "im2col (node %d) of the result", d->pool);
  nnc_status st = nnc_ref_eval_node(r, d->pool, err);
  return st ? st : nnc_ref_eval_node(r, max, err);
}

nnc_status nnc_ref_kernel_gemm(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  const nnc_gemm_desc *d = &k->d.gemm;
  /* the GEMM's result: out itself, or the image the pool reads */
  const int out = d->pooled && d->pool >= 0 && d->pool < r->g->nnodes ? r->g->nodes[d->pool].in[0] : d->out;
  const double *a, *b, *bias, *res, *gamma, *beta;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  bool norm = d->prologue != NNC_NORM_NONE, layer = d->prologue == NNC_NORM_LAYER;
  nnc_status st = d->windowed ? windows(r, k, ki, d, &a, err) : nnc_ref_kernel_operand(r, k, ki, d->a, "A", &a, err);
  if (!st) st = nnc_ref_kernel_operand(r, k, ki, d->b, "B", &b, err);
  if (!st) st = optional(r, k, ki, d->bias, "bias", &bias, err);
  if (!st) st = optional(r, k, ki, d->residual, "residual", &res, err);
  if (!st) st = optional(r, k, ki, norm ? d->norm_gamma : -1, "norm gamma", &gamma, err);
  if (!st) st = optional(r, k, ki, layer ? d->norm_beta : -1, "norm beta", &beta, err);
  const double *post_g = NULL, *post_b = NULL;
  bool post = d->post_norm != NNC_NORM_NONE;
  if (!st) st = optional(r, k, ki, post ? d->post_gamma : -1, "post-norm gamma", &post_g, err);
  if (!st) st = optional(r, k, ki, post ? d->post_beta : -1, "post-norm beta", &post_b, err);
  if (st) return st;
  if (post && (d->post_norm != NNC_NORM_LAYER || d->aux_kind != NNC_AUX_NONE || d->bgrad_from != NNC_BGRAD_NONE))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected a post-norm that is a layernorm, with no aux "
                               "or bias gradient, found norm %d", (int)d->post_norm);
  if (d->prologue != NNC_NORM_NONE && d->prologue != NNC_NORM_LAYER && d->prologue != NNC_NORM_RMS)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "unknown prologue %d", (int)d->prologue);
  if (norm && (!gamma || (layer && !beta)))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected the %s prologue's gamma%s, found none",
                               layer ? "layernorm" : "rmsnorm", layer ? " and beta" : "");
  if (d->act != NNC_OP_NONE && !nnc_op_is_activation(d->act))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected an activation epilogue, found op %s",
                               nnc_op_info_of(d->act)->name);
  if (d->out < 0 || d->out >= r->g->ntensors || !nnc_ref_kernel_lists(k->out, k->nout, d->out))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected its out (tensor %d) among the kernel's "
                               "outputs", d->out);
  const double *aux_in = NULL;
  double *aux_out = NULL;
  if (d->aux_kind == NNC_AUX_ACT_GRAD) {
    if (bias || res || d->act == NNC_OP_NONE)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected an activation's gradient with neither "
                                 "bias nor residual");
    st = nnc_ref_kernel_operand(r, k, ki, d->aux, "activation input", &aux_in, err);
    if (st) return st;
  } else if (d->aux_kind == NNC_AUX_SAVE) {
    if (res || d->act == NNC_OP_NONE || d->aux < 0 || d->aux >= r->g->ntensors ||
        !nnc_ref_kernel_lists(k->out, k->nout, d->aux))
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected an activation, no residual and its saved "
                                 "input (tensor %d) among the kernel's outputs", d->aux);
    aux_out = nnc_ref_alloc(r, d->aux);
    if (!aux_out) return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  }
  if (d->residual_mul && (!res || d->act_last))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected a residual to multiply by, the activation "
                               "before it");
  if (d->aux_kind != NNC_AUX_NONE && nnc_ref_elems(r, d->aux) != nnc_ref_elems(r, out))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected aux %s of out's shape %s",
                               nnc_ref_desc(r, d->aux, d1), nnc_ref_desc(r, out, d2));

  nnc_ref_shape sa0 = nnc_ref_shape_of(r, d->a), sb = nnc_ref_shape_of(r, d->b), so0 = nnc_ref_shape_of(r, out);
  bool ok = sa0.rank >= 1 && so0.rank >= 1 && (sa0.rank == 1) == (so0.rank == 1);
  nnc_ref_shape sa = as_matrix(sa0), so = as_matrix(so0);
  /* a_trans: A is [K, M], rank 2, with no prologue (fusion folds one or the other) */
  ok = ok && (!d->a_trans || (sa0.rank == 2 && !norm));
  int64_t M = sa.d[sa.rank - (d->a_trans ? 1 : 2)], K = sa.d[sa.rank - (d->a_trans ? 2 : 1)], N = 0;
  nnc_ref_shape ba = batch_of(&sa), bo = batch_of(&so), bb = {.rank = 0}, want;
  if (d->b_trans) {
    ok = ok && sb.rank == 2 && sb.d[1] == K;
    N = sb.d[0];
  } else {
    ok = ok && sb.rank >= 2 && sb.d[sb.rank - 2] == K;
    N = sb.d[sb.rank - 1];
    if (sb.rank >= 2) bb = batch_of(&sb);
  }
  ok = ok && so.d[so.rank - 2] == M && so.d[so.rank - 1] == N && nnc_ref_broadcast(&ba, &bb, &want) &&
       nnc_ref_shape_eq(&want, &bo);
  if (!ok)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected A %s, B %s and out [...,M,N], "
                               "found %s, %s and %s", d->a_trans ? "[K,M] with no prologue" : "[...,M,K]", d->b_trans ? "[N,K]" : "[...,K,N]",
                               nnc_ref_desc(r, d->a, d1), nnc_ref_desc(r, d->b, d2), nnc_ref_desc(r, out, d3));
  if ((bias && nnc_ref_elems(r, d->bias) != N) || (gamma && nnc_ref_elems(r, d->norm_gamma) != K) ||
      (beta && nnc_ref_elems(r, d->norm_beta) != K) || (post_g && nnc_ref_elems(r, d->post_gamma) != N) ||
      (post_b && nnc_ref_elems(r, d->post_beta) != N))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected a bias of %lld and norm parameters of %lld "
                               "values for out %s", (long long)N, (long long)K, nnc_ref_desc(r, out, d3));
  int64_t sta[NNC_MAX_RANK], stb[NNC_MAX_RANK], str[NNC_MAX_RANK], idx[NNC_MAX_RANK];
  nnc_ref_bcast_strides(&ba, &bo, sta);
  nnc_ref_bcast_strides(&bb, &bo, stb);
  if (res) {
    nnc_ref_shape sr = nnc_ref_shape_of(r, d->residual);
    if (!nnc_ref_bcast_strides(&sr, &so0, str))
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected a residual of out's shape %s, found %s",
                                 nnc_ref_desc(r, out, d3), nnc_ref_desc(r, d->residual, d1));
  }

  /* the bias gradient: the sums over k of the operand stored [K, M] (A) or [K, N] (B) */
  double *bg = NULL;
  if (d->bgrad_from != NNC_BGRAD_NONE) {
    int64_t len = d->bgrad_from == NNC_BGRAD_B ? N : M;
    if (!nnc_ref_kernel_lists(k->out, k->nout, d->bgrad) || bias || d->aux_kind != NNC_AUX_NONE ||
        d->act != NNC_OP_NONE || d->alpha != 1.0 || (d->bgrad_from == NNC_BGRAD_B ? d->b_trans : !d->a_trans) || bo.rank != 0 ||
        nnc_ref_elems(r, d->bgrad) != len)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected a bias gradient of %lld values among the "
                                 "kernel's outputs, of a GEMM without batch, bias, activation or alpha whose %s is "
                                 "stored [K, %s], found %s", (long long)len, d->bgrad_from == NNC_BGRAD_B ? "B" : "A",
                                 d->bgrad_from == NNC_BGRAD_B ? "N" : "M", nnc_ref_desc(r, d->bgrad, d1));
    if (!(bg = nnc_ref_alloc(r, d->bgrad))) return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
    const double *src = d->bgrad_from == NNC_BGRAD_B ? b : a;
    for (int64_t j = 0; j < len; j++) bg[j] = 0;
    for (int64_t c = 0; c < K; c++)
      for (int64_t j = 0; j < len; j++) bg[j] += src[c * len + j];
  }
  double *y = nnc_ref_alloc(r, out);
  double *row = malloc((size_t)(K > 0 ? K : 1) * sizeof *row);
  double *dot = malloc((size_t)(N > 0 ? N : 1) * sizeof *dot);
  if (!y || !row || !dot) {
    free(row);
    free(dot);
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  }
  int64_t batches = nnc_ref_shape_elems(&bo);
  for (int64_t p = 0; p < batches; p++) {
    nnc_ref_unravel(&bo, p, idx);
    int64_t oa = 0, ob = 0;
    for (int i = 0; i < bo.rank; i++) {
      oa += idx[i] * sta[i];
      ob += idx[i] * stb[i];
    }
    const double *bm = b + ob * K * N;
    for (int64_t m = 0; m < M; m++) {
      if (d->a_trans) norm_row(d->prologue, d->norm_eps, a + m, M, K, gamma, beta, row);
      else norm_row(d->prologue, d->norm_eps, a + (oa * M + m) * K, 1, K, gamma, beta, row);
      /* the dot products of the row, walking B's rows contiguously */
      for (int64_t j = 0; j < N; j++) dot[j] = 0;
      if (d->b_trans) {
        for (int64_t j = 0; j < N; j++)
          for (int64_t c = 0; c < K; c++) dot[j] += row[c] * bm[j * K + c];
      } else {
        for (int64_t c = 0; c < K; c++)
          for (int64_t j = 0; j < N; j++) dot[j] += row[c] * bm[c * N + j];
      }
      for (int64_t j = 0; j < N; j++) {
        int64_t e = (p * M + m) * N + j;
        double pre = d->alpha * dot[j] + (bias ? bias[j] : 0.0), v;
        if (aux_in) {
          v = nnc_ref_activation_grad(d->act, d->gelu_tanh, aux_in[e]) * pre;
        } else {
          if (aux_out) aux_out[e] = pre;
          v = nnc_ref_activation(d->act, d->gelu_tanh, pre);
        }
        if (res) {
          int64_t oi[NNC_MAX_RANK], off = 0;
          nnc_ref_unravel(&so0, e, oi);
          for (int i = 0; i < so0.rank; i++) off += oi[i] * str[i];
          v = d->act_last       ? nnc_ref_activation(d->act, d->gelu_tanh, pre + res[off])
              : d->residual_mul ? v * res[off]
                                : v + res[off];
        }
        y[e] = v;
      }
      if (d->post_norm != NNC_NORM_NONE) {
        double *yr = y + (p * M + m) * N;
        norm_row(d->post_norm, d->post_eps, yr, 1, N, post_g, post_b, dot);
        for (int64_t j = 0; j < N; j++) yr[j] = dot[j];
      }
    }
  }
  free(row);
  free(dot);
  return d->pooled ? pool_result(r, k, ki, d, err) : NNC_OK;
}
