/* compiler/emit/cuda_kernels.c — the launcher of every kernel of a CUDA
 * model, kind by kind: GEMMs through cuda_gemm.c; attention, softmax, the
 * norms, reductions, moves, the cross-entropy and its gradient through
 * templates/cuda; everything else through the loops of cuda_loops.c. Also
 * the device workspace each kernel needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_recurrent.h"
#include "emit_targets.h"

#define EXPR EC_EXPR

static char *dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

char *cu_as_int(const char *e, char *buf, size_t n) {
  bool constant = strspn(e, "0123456789") == strlen(e);
  snprintf(buf, n, constant ? "%.500s" : "(int)(%.490s)", e);
  return buf;
}

/* A reduce kernel runs reduce.cuh: one node on floats (an integer one is a loop). */
static bool reduce_template(const ec_ctx *x, const nnc_kernel *k) {
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  return k->nnodes == 1 && x->g->tensors[n->in[0]].dtype != NNC_I32 && x->g->tensors[n->out[0]].dtype != NNC_I32;
}

void cu_emit_workspace(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  if (k->kind == NNC_KERNEL_ATTENTION || k->kind == NNC_KERNEL_ATTENTION_GRAD) {
    const nnc_attention_desc *a = ec_attn_desc(k);
    bool conv = a->mask >= 0 && x->g->tensors[a->mask].dtype != x->g->tensors[a->q].dtype;
    bool grad = k->kind == NNC_KERNEL_ATTENTION_GRAD;
    if (!conv && !grad) return;
    char me[EXPR], rows[EXPR];
    nnc_sb_printf(b, "  {\n    size_t w = 0;\n");
    if (conv)
      nnc_sb_printf(b, "    w += pad_offset((size_t)(%s) * sizeof(%s));   /* kernel %d: the mask as q's type */\n",
                    ec_elems(x, a->mask, me, sizeof me), cu_stype(x, a->q), ki);
    if (grad)
      nnc_sb_printf(b, "    w += (size_t)(%s) * sizeof(float);   /* kernel %d: a float per query row */\n",
                    ec_elems(x, a->lse, rows, sizeof rows), ki);
    nnc_sb_printf(b, "    if (w > need) need = w;\n  }\n");
    return;
  }
  if (k->kind == NNC_KERNEL_NORM_GRAD) {
    int xt = x->g->nodes[k->nodes[0]].in[0];
    const nnc_tensor *t = &x->g->tensors[xt];
    char rows[EXPR], cols[EXPR];
    ec_dims_product(x, xt, 0, t->rank - 1, rows, sizeof rows);
    ec_dims_product(x, xt, t->rank - 1, t->rank, cols, sizeof cols);
    nnc_sb_printf(b, "  {\n    size_t w = nnc_cuda_norm_bwd_workspace_bytes((int)(%s), (int)(%s));   /* kernel %d: "
                     "the gamma and beta sums' partials */\n    if (w > need) need = w;\n  }\n", rows, cols, ki);
    return;
  }
  if (k->kind == NNC_KERNEL_REDUCE && reduce_template(x, k)) {
    const nnc_node *n = &x->g->nodes[k->nodes[0]];
    const int axis = n->attrs.axis, rank = x->g->tensors[n->in[0]].rank;
    char outer[EXPR], len[EXPR], inner[EXPR];
    ec_dims_product(x, n->in[0], 0, axis, outer, sizeof outer);
    ec_dims_product(x, n->in[0], axis, axis + 1, len, sizeof len);
    ec_dims_product(x, n->in[0], axis + 1, rank, inner, sizeof inner);
    nnc_sb_printf(b, "  {\n    size_t w = nnc_cuda_reduce_workspace_bytes((int)(%s), (int)(%s), (int)(%s));   /* kernel %d: "
                     "the column sums' partials */\n    if (w > need) need = w;\n  }\n", outer, len, inner, ki);
    return;
  }
  if (k->kind == NNC_KERNEL_LOSS && x->g->nodes[k->nodes[0]].op == NNC_OP_CROSS_ENTROPY) {
    char rows[EXPR];
    nnc_sb_printf(b, "  {\n    size_t w = (size_t)(%s) * sizeof(float);   /* kernel %d: each row's loss */\n"
                     "    if (w > need) need = w;\n  }\n",
                  ec_elems(x, x->g->nodes[k->nodes[0]].in[1], rows, sizeof rows), ki);
    return;
  }
  if (k->kind == NNC_KERNEL_GEMM) cu_gemm_workspace(x, ki, b);
}

/* ------------------------------------------------------------- attention */

/* The kv appends folded into a forward attention (nnc_attention_desc.append):
 * a.k_new / a.v_new and their strides, where the kv_append read its rows. */
static void emit_appends(const ec_ctx *x, const nnc_kernel *k, nnc_sb *b) {
  static const char *const names[2][2] = {{"k_new", "kn"}, {"v_new", "vn"}};
  if (k->kind != NNC_KERNEL_ATTENTION) return;
  const nnc_attention_desc *a = &k->d.attn;
  for (int i = 0; i < 2; i++) {
    const nnc_attn_append *ap = &a->append[i];
    if (!ap->on) continue;
    char off[EXPR], sb[EXPR], sh[EXPR], si[EXPR], p[256], cache[600], src[600];
    nnc_emit_dim_expr(x->g, ap->src.offset, "d->", off, sizeof off);
    nnc_emit_dim_expr(x->g, ap->src.sb, "d->", sb, sizeof sb);
    nnc_emit_dim_expr(x->g, ap->src.sh, "d->", sh, sizeof sh);
    nnc_emit_dim_expr(x->g, ap->src.si, "d->", si, sizeof si);
    const bool zero = strcmp(off, "0") == 0;
    if (i == 0 || !a->append[0].on)
      nnc_sb_printf(b, "  /* the kv appends run inside the attention (a copy kernel each would cost a launch a layer):\n"
                       "   * this call's T new rows become rows S - T .. S - 1 of the caches, attended to as they are written */\n");
    nnc_sb_printf(b, "  /* %s read in place: %s, into %s */\n", names[i][0], ec_note(x, ap->src.base, src, sizeof src),
                  ec_note(x, x->g->nodes[ap->node].in[0], cache, sizeof cache));
    nnc_sb_printf(b, "  a.%s = %s%s%s;\n  a.%s_sb = %s;\n  a.%s_sh = %s;\n  a.%s_st = %s;\n", names[i][0],
                  ec_ptr(x, ap->src.base, p, sizeof p), zero ? "" : " + ", zero ? "" : off, names[i][1], sb, names[i][1],
                  sh, names[i][1], si);
  }
}

/* The ropes folded into a forward attention (nnc_attention_desc.rope): q
 * read where its rope read x, and the rope's arguments (k_new is already
 * where k's rope read x: emit_appends). */
static void emit_ropes(const ec_ctx *x, const nnc_kernel *k, nnc_sb *b) {
  if (k->kind != NNC_KERNEL_ATTENTION) return;
  const nnc_attention_desc *a = &k->d.attn;
  const nnc_attn_rope *q = &a->rope[0], *kn = &a->rope[1];
  if (!q->on && !kn->on) return;
  const nnc_node *n = &x->g->nodes[(q->on ? q : kn)->node];
  char lit[64], src[600];
  nnc_sb_printf(b, "  /* the ropes of %s run inside the attention (a kernel each would cost a launch a layer): it turns\n"
                   "   * the rows as it reads them, entry i < %d of each row with i + %d by pos * %s^(-2i/%d) */\n",
                q->on && kn->on ? "q and the new key rows" : q->on ? "q" : "the new key rows", n->attrs.rot_dims / 2,
                n->attrs.rot_dims / 2, ec_literal(n->attrs.scalar, true, lit, sizeof lit), n->attrs.rot_dims);
  if (q->on) {
    char off[EXPR], sb[EXPR], sh[EXPR], si[EXPR], p[256];
    nnc_emit_dim_expr(x->g, q->src.offset, "d->", off, sizeof off);
    nnc_emit_dim_expr(x->g, q->src.sb, "d->", sb, sizeof sb);
    nnc_emit_dim_expr(x->g, q->src.sh, "d->", sh, sizeof sh);
    nnc_emit_dim_expr(x->g, q->src.si, "d->", si, sizeof si);
    const bool zero = strcmp(off, "0") == 0;
    nnc_sb_printf(b, "  /* q read before its rope: %s (turned in place there where the attention does not take its decode kernels) */\n",
                  ec_note(x, q->src.base, src, sizeof src));
    nnc_sb_printf(b, "  a.q = %s%s%s;\n  a.q_sb = %s;\n  a.q_sh = %s;\n  a.q_st = %s;\n  a.rope_q = 1;\n",
                  ec_ptr(x, q->src.base, p, sizeof p), zero ? "" : " + ", zero ? "" : off, sb, sh, si);
  }
  if (kn->on) nnc_sb_printf(b, "  a.rope_k = 1;   /* k_new holds the key rows before their rope */\n");
  if (n->nin > 1) {
    ec_assign(x, b, 2, "a.rope_pos", n->in[1]);
    /* positions [B, T]: a row of T each batch; [T]: one for all */
    nnc_sb_printf(b, "  a.rope_pos_sb = %s;\n", x->g->tensors[n->in[1]].rank == 2 ? "T" : "0");
  }
  nnc_sb_printf(b, "  a.rope_base = %s;\n  a.rope_dims = %d;\n", ec_literal(n->attrs.scalar, true, lit, sizeof lit),
                n->attrs.rot_dims);
}

/* Attention (nnc_cuda_attention) or its backward (nnc_cuda_attention_bwd):
 * sizes and the strides of contiguous operands, then pointers, the mask
 * (converted to q's type in the workspace when it is not) and the call. */
static nnc_status emit_attention(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  bool grad = k->kind == NNC_KERNEL_ATTENTION_GRAD;
  const nnc_attention_desc *a = ec_attn_desc(k);
  const nnc_tensor *q = &x->g->tensors[a->q];
  int r = q->rank;
  if (r == 2 && a->mask >= 0 && a->causal)
    return nnc_errorf(err, NNC_E_TARGET, k->loc,
                      "%s: attention on rank-2 scores with both a causal and a padding mask is not supported; "
                      "give q, k and v a batch dim", x->r->target->name);
  ec_attn_operand o[8];
  int n = ec_attn_operands(k, o);
  char T[EXPR], S[EXPR], D[EXPR], Dv[EXPR], t2[EXPR], s2[EXPR], d2[EXPR], v2[EXPR], lit[64];
  cu_as_int(dim_of(x, a->q, r - 2, t2, sizeof t2), T, sizeof T);
  cu_as_int(dim_of(x, a->k, r - 2, s2, sizeof s2), S, sizeof S);
  cu_as_int(dim_of(x, a->q, r - 1, d2, sizeof d2), D, sizeof D);
  cu_as_int(dim_of(x, a->v, r - 1, v2, sizeof v2), Dv, sizeof Dv);
  const char *ty = cu_stype(x, a->q);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int T = %s, S = %s, D = %s, Dv = %s;\n", T, S, D, Dv);
  nnc_sb_printf(&body, "  nnc_cuda_attn%s_args<%s> a = {};\n", grad ? "_bwd" : "", ty);
  /* grouped-query attention (ec_attn_grouped) only runs forward: its training step keeps the primitive ops */
  bool grouped = ec_attn_grouped(x->g, a);
  if (r >= 3) {
    char bt[EXPR], hd[EXPR], bi[EXPR], hi[EXPR];
    dim_of(x, a->q, 0, bt, sizeof bt);
    ec_dims_product(x, a->q, 1, r - 2, hd, sizeof hd);
    nnc_sb_printf(&body, "  const int heads = %s;\n", cu_as_int(hd, hi, sizeof hi));
    nnc_sb_printf(&body, "  a.batch = %s;\n  a.heads = heads;\n  a.T = T;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n",
                  cu_as_int(bt, bi, sizeof bi));
    if (grouped) {
      char g2[EXPR], gr[EXPR];
      cu_as_int(dim_of(x, a->q, r - 3, g2, sizeof g2), gr, sizeof gr);
      nnc_sb_printf(&body, "  a.kv_group = %s;   /* grouped-query: query heads sharing a k/v head */\n", gr);
    }
    ec_attn_strides view;
    for (int i = 0; i < n; i++) {
      if (ec_attn_view(x, k, i, &view)) continue;   /* its view's strides are set where it is assigned */
      if (i == NNC_ATTN_Q && !grad && a->rope[0].on) continue;   /* q's are its rope's (emit_ropes) */
      const char *w = o[i].wide ? "Dv" : "D", *rows = o[i].keys ? "S" : "T", *p = o[i].strides;
      /* a batch dim of k or v that is 1 broadcasts: stride 0 */
      bool bcast = nnc_dim_eq_const(x->g->tensors[o[i].t].shape[0], 1) && !nnc_dim_eq_const(q->shape[0], 1);
      nnc_sb_printf(&body, "  a.%s_st = %s;\n  a.%s_sh = (long long)%s * %s;\n", p, w, p, rows, w);
      if (bcast) nnc_sb_printf(&body, "  a.%s_sb = 0;\n", p);
      else if (grouped && o[i].keys)
        nnc_sb_printf(&body, "  a.%s_sb = (long long)(heads / a.kv_group) * %s * %s;\n", p, rows, w);
      else nnc_sb_printf(&body, "  a.%s_sb = (long long)heads * %s * %s;\n", p, rows, w);
    }
  } else {
    /* rank 2 with a mask: query row i uses mask row i, so each row is a batch of one query */
    bool rows = a->mask >= 0;
    nnc_sb_printf(&body, "  a.batch = %s;\n  a.heads = 1;\n  a.T = %s;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n",
                  rows ? "T" : "1", rows ? "1" : "T");
    for (int i = 0; i < n; i++) {
      const char *w = o[i].wide ? "Dv" : "D";
      nnc_sb_printf(&body, "  a.%s_st = %s;\n", o[i].strides, w);
      if (rows && !o[i].keys) nnc_sb_printf(&body, "  a.%s_sb = %s;\n", o[i].strides, w);
    }
  }
  nnc_sb_printf(&body, "  a.scale = %s;\n  a.causal = %d;\n", ec_literal(a->scale, false, lit, sizeof lit),
                a->causal ? 1 : 0);
  if (x->r->precision.tf32 && x->g->tensors[a->q].dtype == NNC_F32)
    nnc_sb_printf(&body, "  a.tf32 = 1;       /* --precision=tf32: the products on tf32 tensor cores */\n");
  /* operands read or written in place of a folded head split or merge get
   * their base and strides after the contiguous ones */
  ec_attn_strides unused;
  for (int i = 0; i < n; i++) {
    char lhs[16];
    snprintf(lhs, sizeof lhs, "a.%s", o[i].ptr);
    /* q behind a folded rope is never stored: emit_ropes points at the rope's x */
    if (i == NNC_ATTN_Q && !grad && a->rope[0].on) continue;
    if (!ec_attn_view(x, k, i, &unused)) ec_assign(x, &body, 2, lhs, o[i].t);
  }
  ec_attn_emit_views(x, k, "a.", NULL, &body);
  emit_appends(x, k, &body);
  emit_ropes(x, k, &body);
  if (a->lse >= 0) ec_assign(x, &body, 2, "a.lse", a->lse);
  bool conv = a->mask >= 0 && x->g->tensors[a->mask].dtype != x->g->tensors[a->q].dtype;
  if (conv) {
    /* the template reads the mask in q's type: convert it into the workspace */
    char me[EXPR], pm[256], note[600];
    ec_elems(x, a->mask, me, sizeof me);
    nnc_sb_printf(b, "/* kernel %d's padding mask %s in the type of q */\n"
                     "__global__ void k%d_mask(%s *y, const %s *m, long long n) {\n"
                     "  NNC_LOOP(e, n) nnc_st(&y[e], nnc_ld(m[e]));\n}\n\n",
                  ki, ec_note(x, a->mask, note, sizeof note), ki, ty, cu_stype(x, a->mask));
    nnc_sb_printf(&body, "  const long long mask_n = %s;\n  %s *mask = (%s *)m->ws;\n"
                         "  k%d_mask<<<nnc_loop_blocks(mask_n), NNC_LOOP_THREADS, 0, s>>>(mask, %s, mask_n);\n"
                         "  if (launched(m, %d)) return %s_E_DEVICE;\n  a.mask = mask;\n  a.mask_sb = S;\n",
                  me, ty, ty, ki, ec_ptr(x, a->mask, pm, sizeof pm), ki, x->P);
  } else if (a->mask >= 0) {
    ec_assign(x, &body, 2, "a.mask", a->mask);
    nnc_sb_printf(&body, "  a.mask_sb = S;\n");
  }
  if (grad)
    nnc_sb_printf(&body, "  /* each query row's sum of dout * out%s */\n"
                         "  a.delta = (float *)((unsigned char *)m->ws + %s);\n",
                  conv ? ", after the mask" : "", conv ? "pad_offset((size_t)mask_n * sizeof(*mask))" : "0");
  nnc_sb_printf(&body, "  nnc_cuda_error e;\n  if (nnc_cuda_attention%s(a, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                       "  return 0;\n", grad ? "_bwd" : "", ki);
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

/* k<ki>, whose body calls one template's host wrapper under `if (...)`
 * with an nnc_cuda_error e: its failure names the kernel. Frees body. */
static void template_call(const ec_ctx *x, int ki, nnc_sb *b, nnc_sb *body) {
  nnc_sb_printf(body, "    return kernel_failed(m, %d, e.msg);\n  return 0;\n", ki);
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", body);
}

/* ------------------------------------------------------------------- rows */

/* layernorm_grad / rmsnorm_grad (norm_bwd.cuh): dx and the gamma (beta)
 * sums in one pass over the rows; the sums' partials per chunk of rows go
 * to the workspace and are added in chunk order (the same bits every run). */
static nnc_status emit_norm_grad(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  bool layer = n->op == NNC_OP_LAYERNORM_GRAD;
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], lit[64];
  ec_dims_product(x, n->in[0], 0, in->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  nnc_cuda_norm_bwd_args<%s> a = {};\n  a.rows = %s;\n  a.cols = %s;\n  a.rms = %d;\n  a.eps = %s;\n",
                cu_stype(x, n->in[0]), cu_as_int(rows, ri, sizeof ri), cu_as_int(cols, ci, sizeof ci), layer ? 0 : 1,
                ec_literal(n->attrs.eps, false, lit, sizeof lit));
  ec_assign(x, &body, 2, "a.x", n->in[0]);
  ec_assign(x, &body, 2, "a.gamma", n->in[1]);
  ec_assign(x, &body, 2, "a.dy", n->in[2]);
  ec_assign(x, &body, 2, "a.dx", n->out[0]);
  if (n->nin == 4) ec_assign(x, &body, 2, "a.dres", n->in[3]);   /* the residual's gradient, added to dx */
  ec_assign(x, &body, 2, "a.dgamma", n->out[1]);
  if (layer) ec_assign(x, &body, 2, "a.dbeta", n->out[2]);
  nnc_sb_printf(&body, "  a.ldx = a.lddy = a.lddx = a.lddres = a.cols;\n  a.work = (float *)m->ws;\n"
                       "  nnc_cuda_error e;\n  if (nnc_cuda_norm_bwd(a, s, &e))\n");
  template_call(x, ki, b, &body);
  return NNC_OK;
}

static nnc_status emit_row(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  /* softmax over another axis than the last, or a norm with the chain computing its rows: a loop */
  if (k->nnodes > 1 || (n->op == NNC_OP_SOFTMAX && n->attrs.axis != in->rank - 1)) return cu_emit_loop_kernel(x, ki, b, err);
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], lit[64], px[256], py[256], pg[256], pb[256];
  ec_dims_product(x, n->in[0], 0, in->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
  cu_as_int(rows, ri, sizeof ri);
  cu_as_int(cols, ci, sizeof ci);
  ec_ptr(x, n->in[0], px, sizeof px);
  ec_ptr(x, n->out[0], py, sizeof py);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n  nnc_cuda_error e;\n", ri, ci);
  if (n->op == NNC_OP_SOFTMAX)
    nnc_sb_printf(&body, "  if (nnc_cuda_softmax(rows, cols, %s, cols, %s, cols, s, &e))\n", px, py);
  else if (n->op == NNC_OP_LAYERNORM)
    nnc_sb_printf(&body, "  if (nnc_cuda_layernorm(rows, cols, %s, cols, %s, %s, %s, %s, cols, s, &e))\n", px,
                  ec_ptr(x, n->in[1], pg, sizeof pg), ec_ptr(x, n->in[2], pb, sizeof pb),
                  ec_literal(n->attrs.eps, false, lit, sizeof lit), py);
  else
    nnc_sb_printf(&body, "  if (nnc_cuda_rmsnorm(rows, cols, %s, cols, %s, %s, %s, cols, s, &e))\n", px,
                  ec_ptr(x, n->in[1], pg, sizeof pg), ec_literal(n->attrs.eps, false, lit, sizeof lit), py);
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* ---------------------------------------------------------------- reduce */

/* A sum, mean or max over one axis of a float tensor through reduce.cuh
 * (coalesced warps; an integer one stays a loop). */
static nnc_status emit_reduce(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  if (ec_kernel_is_pool(x, ki)) {
    nnc_sb body;
    nnc_sb_init(&body);
    cu_pool_body(x, ki, &body);
    char head[160];
    snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
    ec_emit_function(x, b, head, NULL, "&c.d", &body);
    return NNC_OK;
  }
  if (!reduce_template(x, k)) return cu_emit_loop_kernel(x, ki, b, err);
  const int axis = n->attrs.axis, rank = g->tensors[n->in[0]].rank;
  char outer[EXPR], len[EXPR], inner[EXPR], oi[EXPR], li[EXPR], ii[EXPR], px[256], py[256];
  ec_dims_product(x, n->in[0], 0, axis, outer, sizeof outer);
  ec_dims_product(x, n->in[0], axis, axis + 1, len, sizeof len);
  ec_dims_product(x, n->in[0], axis + 1, rank, inner, sizeof inner);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int outer = %s, len = %s, inner = %s;\n  nnc_cuda_error e;\n", cu_as_int(outer, oi, sizeof oi),
                cu_as_int(len, li, sizeof li), cu_as_int(inner, ii, sizeof ii));
  nnc_sb_printf(&body, "  if (nnc_cuda_reduce(%s, outer, len, inner, %s, %s, m->ws, m->ws_size, s, &e))\n",
                n->op == NNC_OP_MAX ? "NNC_REDUCE_MAX" : n->op == NNC_OP_MEAN ? "NNC_REDUCE_MEAN" : "NNC_REDUCE_SUM",
                ec_ptr(x, n->in[0], px, sizeof px), ec_ptr(x, n->out[0], py, sizeof py));
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* ------------------------------------------------------------------ moves */

/* A swap of the last two axes through transpose.cuh (a tile at a time);
 * other moves are loops. */
static nnc_status emit_move(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  if (n->op == NNC_OP_LSTM_SCAN || n->op == NNC_OP_GRU_SCAN) return cu_emit_recurrent(x, ki, b, err);
  if (n->op == NNC_OP_ALL_REDUCE) return cu_emit_all_reduce(x, ki, b, err);
  if (n->op == NNC_OP_ALL_GATHER) return cu_emit_all_gather(x, ki, b, err);
  if (n->op == NNC_OP_RANK_SLICE) return cu_emit_rank_slice(x, ki, b, err);
  if (n->op == NNC_OP_CE_SHARD || n->op == NNC_OP_CE_SHARD_GRAD) return cu_emit_ce_shard(x, ki, b, err);
  const int rank = g->tensors[n->in[0]].rank;
  bool swap = k->nnodes == 1 && n->op == NNC_OP_TRANSPOSE && rank >= 2 &&
              g->tensors[n->in[0]].dtype == g->tensors[n->out[0]].dtype && n->attrs.perm[rank - 2] == rank - 1 &&
              n->attrs.perm[rank - 1] == rank - 2;
  for (int i = 0; swap && i < rank - 2; i++) swap = n->attrs.perm[i] == i;
  if (!swap) return cu_emit_loop_kernel(x, ki, b, err);
  char batch[EXPR], rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], px[256], py[256];
  ec_dims_product(x, n->in[0], 0, rank - 2, batch, sizeof batch);
  dim_of(x, n->in[0], rank - 2, rows, sizeof rows);
  dim_of(x, n->in[0], rank - 1, cols, sizeof cols);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n  nnc_cuda_error e;\n", cu_as_int(rows, ri, sizeof ri),
                cu_as_int(cols, ci, sizeof ci));
  char bl[EXPR + 20];
  snprintf(bl, sizeof bl, strcmp(batch, "1") == 0 ? "%s" : "(long long)(%s)", batch);
  nnc_sb_printf(&body, "  if (nnc_cuda_transpose_last2(%s, rows, cols, %s, %s, s, &e))\n", bl,
                ec_ptr(x, n->in[0], px, sizeof px), ec_ptr(x, n->out[0], py, sizeof py));
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* ------------------------------------------------------------------- loss */

/* The cross-entropy and its gradient through softmax.cuh: a row a warp or
 * a block (the loops' one thread a row took GPT-2's loss, 1024 rows of
 * 50257 logits, 7 s on an H100); the loss's rows go to the workspace, then
 * one block adds them in order. */
static nnc_status emit_loss(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  bool grad = n->op == NNC_OP_CROSS_ENTROPY_GRAD;
  int scalar = grad ? n->in[2] : n->out[0];   /* d loss, or the loss */
  nnc_dtype lt = g->tensors[n->in[0]].dtype, tt = g->tensors[n->in[1]].dtype, st = g->tensors[scalar].dtype;
  if (tt != NNC_I32 || st != NNC_F32 || (grad && g->tensors[n->out[0]].dtype != lt))
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "%s: kernel %d (%s): expected i32 targets, an f32 %s%s; found %s, %s, "
                      "a %s gradient", x->r->target->name, ki, nnc_op_info_of(n->op)->name, grad ? "d loss" : "loss",
                      grad ? " and the gradient in the logits' type" : "", nnc_dtype_name(tt), nnc_dtype_name(st),
                      nnc_dtype_name(g->tensors[n->out[0]].dtype));
  const nnc_tensor *l = &g->tensors[n->in[0]];
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], px[256], pt[256], ps[256], py[256];
  ec_dims_product(x, n->in[0], 0, l->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], l->rank - 1, cols, sizeof cols);
  ec_ptr(x, n->in[0], px, sizeof px);
  ec_ptr(x, n->in[1], pt, sizeof pt);
  ec_ptr(x, scalar, ps, sizeof ps);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n  nnc_cuda_error e;\n", cu_as_int(rows, ri, sizeof ri),
                cu_as_int(cols, ci, sizeof ci));
  if (grad)
    nnc_sb_printf(&body, "  if (nnc_cuda_cross_entropy_grad(rows, cols, %s, cols, %s, %s, %s, cols, s, &e))\n", px, pt,
                  ps, ec_ptr(x, n->out[0], py, sizeof py));
  else
    nnc_sb_printf(&body, "  if (nnc_cuda_cross_entropy(rows, cols, %s, cols, %s, (float *)m->ws, %s, s, &e))\n", px,
                  pt, ps);
  template_call(x, ki, b, &body);
  return NNC_OK;
}

nnc_status cu_emit_kernels(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  nnc_sb_printf(b, "/* ---------------------------------------------------------- the kernels */\n\n");
  cu_gemm_templates t = {0};   /* which of nnc's GEMMs a kernel uses */
  bool conv = false, pool = false;
  for (int ki = 0; ki < x->s->nk; ki++) {
    pool |= ec_kernel_is_pool(x, ki);
    if (x->s->k[ki].kind != NNC_KERNEL_GEMM) continue;
    conv |= x->s->k[ki].d.gemm.windowed;
    cu_gemm_uses(x, ki, &t);
  }
  if (t.own) nnc_sb_printf(b, "#include \"kernels/gemm.cuh\"   /* nnc's tensor-core GEMM */\n");
  if (t.wg) nnc_sb_printf(b, "#include \"kernels/gemm_wgmma.cuh\"   /* nnc's wgmma GEMM (sm_90a) */\n");
  if (t.tma) nnc_sb_printf(b, "#include \"kernels/gemm_tma.cuh\"   /* nnc's TMA/wgmma persistent GEMM (sm_90a) */\n");
  if (t.ln) nnc_sb_printf(b, "#include \"kernels/gemm_tma_ln.cuh\"   /* nnc's GEMM + layernorm of whole rows (sm_90a) */\n");
  if (conv) nnc_sb_printf(b, "#include \"kernels/conv_wgmma.cuh\"   /* nnc's implicit-GEMM convolution (sm_90a) */\n");
  if (pool) nnc_sb_printf(b, "#include \"kernels/pool.cuh\"   /* pools and depthwise convolutions from the image */\n");
  if (t.skinny) nnc_sb_printf(b, "#include \"kernels/gemm_skinny.cuh\"   /* GEMMs of a few rows (decode steps) */\n");
  if (t.own || t.wg || t.tma || t.ln || conv || pool || t.skinny) nnc_sb_printf(b, "\n");
  if (x->r->probe)
    nnc_sb_printf(b, "/* The probe's choice of implementation per kernel (0: the analytic rule's). */\n"
                     "static int probe_variant[NKERNELS];\n\n");
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    char where[300], ops[600], name[300];
    ec_where(k->loc, where, sizeof where);
    ec_kernel_ops(x, ki, ops, sizeof ops);
    nnc_emit_comment(ec_kernel_name(x, ki), name, sizeof name);
    if (k->kind == NNC_KERNEL_VIEW) continue;
    nnc_sb_printf(b, "/* %s  %s: %s  (kernel %d, %s) */\n", where, name, ops, ki, nnc_kernel_kind_name(k->kind));
    nnc_status st = NNC_OK;
    switch (k->kind) {
    case NNC_KERNEL_GEMM: st = cu_emit_gemm_kernel(x, ki, b, err); break;
    case NNC_KERNEL_ATTENTION:
    case NNC_KERNEL_ATTENTION_GRAD: st = emit_attention(x, ki, b, err); break;
    case NNC_KERNEL_ROW: st = emit_row(x, ki, b, err); break;
    case NNC_KERNEL_NORM_GRAD: st = emit_norm_grad(x, ki, b); break;
    case NNC_KERNEL_LOSS: st = emit_loss(x, ki, b, err); break;
    case NNC_KERNEL_REDUCE: st = emit_reduce(x, ki, b, err); break;
    case NNC_KERNEL_MOVE: st = emit_move(x, ki, b, err); break;
    default: st = cu_emit_loop_kernel(x, ki, b, err); break;
    }
    if (st) return st;
  }
  ec_emit_costs(x, b);
  if (x->r->probe) cu_emit_probe(x, b);
  return NNC_OK;
}

nnc_status nnc_cuda_variants(const nnc_emit_request *r, nnc_kernel_variants *out, nnc_error *err) {
  ec_ctx x;
  nnc_status st = ec_ctx_init(&x, r, err);
  if (st) return st;
  for (int k = 0; k < r->s->nk; k++) {
    memset(&out[k], 0, sizeof out[k]);
    if (r->s->k[k].kind == NNC_KERNEL_GEMM) cu_gemm_variants(&x, &r->s->k[k], &out[k]);
  }
  ec_ctx_free(&x);
  return NNC_OK;
}
