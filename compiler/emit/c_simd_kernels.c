/* compiler/emit/c_simd_kernels.c — one C function per kernel: GEMM and
 * attention through their templates with sizes and strides from the
 * tensors' shapes, row kernels and embedding through theirs, everything else
 * as a plain loop (c_simd_loops.c); and the cost (flops, bytes) of each. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

#define EXPR 512

static char *dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* The template kernels read f32 only. */
static nnc_status want_f32(const ec_ctx *x, const nnc_kernel *k, int t, const char *role, nnc_error *err) {
  if (t < 0 || x->g->tensors[t].dtype == NNC_F32) return NNC_OK;
  return nnc_errorf(err, NNC_E_TARGET, k->loc, "c-simd: the %s kernel's %s %s is %s, expected f32",
                    nnc_kernel_kind_name(k->kind), role, x->g->tensors[t].name, nnc_dtype_name(x->g->tensors[t].dtype));
}

static const char *act_name(nnc_op act, bool gelu_tanh) {
  switch (act) {
  case NNC_OP_RELU: return "NNC_SIMD_ACT_RELU";
  case NNC_OP_GELU: return gelu_tanh ? "NNC_SIMD_ACT_GELU_TANH" : "NNC_SIMD_ACT_GELU_ERF";
  case NNC_OP_SILU: return "NNC_SIMD_ACT_SILU";
  case NNC_OP_SIGMOID: return "NNC_SIMD_ACT_SIGMOID";
  case NNC_OP_TANH: return "NNC_SIMD_ACT_TANH";
  default: return "NNC_SIMD_ACT_NONE";
  }
}

/* ------------------------------------------------------------------ GEMM */

/* `int` of a size expression: a constant as it is, an expression of dims cast. */
static char *as_int(const char *e, char *buf, size_t n) {
  bool constant = strspn(e, "0123456789") == strlen(e);
  snprintf(buf, n, constant ? "%s" : "(int)(%s)", e);
  return buf;
}

/* Any N: the micro-kernel reads the windows in place whatever the number
 * of outputs, and a GEMM of more than one NC panel gathers A once into its
 * workspace, no more than the im2col's copy. */
int nnc_c_simd_gemm_windows(const nnc_target_desc *t) {
  (void)t;
  return INT_MAX;
}

void cs_window_fields(const ec_ctx *x, const nnc_node *im, const char *field, const char *what, nnc_sb *body) {
  const nnc_window *w = &im->attrs.win;
  char e[5][EXPR], v[5][EXPR];
  const int t[5] = {im->in[0], im->in[0], im->in[0], im->out[0], im->out[0]}, ax[5] = {1, 2, 3, 1, 2};
  for (int i = 0; i < 5; i++) as_int(dim_of(x, t[i], ax[i], e[i], EXPR), v[i], EXPR);
  nnc_sb_printf(body, "      /* %s %dx%d windows (stride %dx%d, padding %dx%d, dilation %dx%d) */\n"
                      "      .%s = {.H = %s, .W = %s, .C = %s, .OH = %s, .OW = %s, .KH = %d, .KW = %d,\n"
                      "      %*s        .SH = %d, .SW = %d, .PH = %d, .PW = %d, .DH = %d, .DW = %d},\n",
                what, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, field, v[0], v[1], v[2], v[3], v[4],
                w->kh, w->kw, (int)strlen(field) - 3, "", w->sh, w->sw, w->ph, w->pw, w->dh, w->dw);
}

/* k<ki>_sizes: the sizes and flags of the kernel's nnc_simd_gemm_args (no
 * pointers), shared by the kernel and workspace_need. */
static void gemm_sizes(const ec_ctx *x, int ki, const nnc_kernel *k, const ec_gemm_shape *s, nnc_sb *b) {
  const nnc_gemm_desc *d = &k->d.gemm;
  char batch[EXPR], lit[64], M[EXPR], N[EXPR], K[EXPR], nb[EXPR];
  ec_dims_product(x, d->out, s->first_inner, s->nb, batch, sizeof batch);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int M = %s, N = %s, K = %s;\n", as_int(s->M, M, sizeof M), as_int(s->N, N, sizeof N),
                as_int(s->K, K, sizeof K));
  nnc_sb_printf(&body, "  *g = (nnc_simd_gemm_args){\n      .M = M, .N = N, .K = K, .batch = %s,\n",
                as_int(batch, nb, sizeof nb));
  nnc_sb_printf(&body, "      .lda = %s, .ldb = %s, .ldc = N, .ldr = N,\n", d->a_trans ? "M, .a_trans = 1" : "K",
                d->b_trans ? "K, .b_trans = 1" : "N");
  bool af = s->nb && s->a_full[s->nb - 1], bf = s->nb && s->b_full[s->nb - 1];
  if (af || bf)
    nnc_sb_printf(&body, "      %s%s%s\n", af ? ".stride_a = (ptrdiff_t)M * K," : "", af && bf ? " " : "",
                  bf ? ".stride_b = (ptrdiff_t)K * N," : "");
  nnc_sb_printf(&body, "      .stride_c = (ptrdiff_t)M * N, .stride_r = (ptrdiff_t)M * N,%s\n",
                d->residual_mul ? " .residual_mul = 1,   /* C = act(A.B) * residual */" : "");
  nnc_sb_printf(&body, "      .alpha = %s, .act = %s,\n", ec_literal(d->alpha, false, lit, sizeof lit),
                act_name(d->act, d->gelu_tanh));
  if (d->prologue != NNC_NORM_NONE)
    nnc_sb_printf(&body, "      .prologue = %s, .eps = %s,\n",
                  d->prologue == NNC_NORM_LAYER ? "NNC_SIMD_PRO_LAYERNORM" : "NNC_SIMD_PRO_RMSNORM",
                  ec_literal(d->norm_eps, false, lit, sizeof lit));
  if (d->windowed) cs_window_fields(x, &x->g->nodes[d->window], "win", "A: the image's", &body);
  if (d->pooled) cs_window_fields(x, &x->g->nodes[d->pool], "pool", "C: the max over the result's", &body);
  if (d->aux_kind != NNC_AUX_NONE)
    nnc_sb_printf(&body, "      .aux_mode = %s, .ldx = N, .stride_x = (ptrdiff_t)M * N,   /* %s */\n",
                  d->aux_kind == NNC_AUX_SAVE ? "NNC_SIMD_AUX_SAVE" : "NNC_SIMD_AUX_ACT_GRAD",
                  d->aux_kind == NNC_AUX_SAVE ? "aux: the activation's input, kept for its gradient"
                                              : "times act'(aux): the activation's gradient");
  nnc_sb_printf(&body, "  };\n");
  char head[256];
  snprintf(head, sizeof head, "static void k%d_sizes(const %s_dims *d, nnc_simd_gemm_args *g)", ki, x->p);
  nnc_sb_printf(b, "%s {\n", head);
  if (!ec_names(body.buf, "d")) nnc_sb_printf(b, "  (void)d;   /* every size is a constant */\n");
  if (body.buf) nnc_sb_puts(b, body.buf);
  if (body.oom) b->oom = true;
  nnc_sb_printf(b, "}\n\n");
  nnc_sb_free(&body);
}

static nnc_status emit_gemm(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  const int ops[] = {d->a, d->b, d->bias, d->residual, d->out, d->norm_gamma, d->norm_beta,
                     d->aux_kind != NNC_AUX_NONE ? d->aux : -1};
  const char *roles[] = {"A", "B", "bias", "residual", "output", "gamma", "beta", "aux"};
  if (d->bgrad_from != NNC_BGRAD_NONE)   /* nnc_emitter.gemm_bgrad is off: the fusion leaves the sum apart */
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "kernel %d: expected a GEMM without a bias gradient on %s, found "
                      "one", ki, x->r->target->name);
  for (int i = 0; i < 8; i++) {
    nnc_status st = want_f32(x, k, ops[i], roles[i], err);
    if (st) return st;
  }
  ec_gemm_shape s;
  ec_gemm_shape_of(x, k, &s);
  gemm_sizes(x, ki, k, &s, b);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  nnc_simd_gemm_args g;\n  k%d_sizes(c->d, &g);\n", ki);
  bool loops = s.first_inner > 0, q8 = cs_quantized_b(x, k);
  if (q8) {
    /* the weight is held quantized (--quantize=int8w, int4w); with w8a8 the GEMM quantizes its
     * rows of A to int8 too */
    char note[600];
    const char *held;
    const char *field = cs_quant_b_field(x, k, &held);
    nnc_sb_printf(&body, "  g.%s = c->m->w[%d];   /* %s, %s */\n", field, x->param_of[d->b],
                  ec_note(x, d->b, note, sizeof note), held);
  }
  if (loops) {
    /* the batch dims the call cannot stride over are loops around it */
    ec_assign(x, &body, 2, "const float *A", d->a);
    if (!q8) ec_assign(x, &body, 2, "const float *B", d->b);
    ec_assign(x, &body, 2, "float *C", d->out);
    if (d->residual >= 0) ec_assign(x, &body, 2, "const float *R", d->residual);
    if (d->aux_kind != NNC_AUX_NONE) ec_assign(x, &body, 2, "float *X", d->aux);
  } else {
    ec_assign(x, &body, 2, "g.A", d->windowed ? x->g->nodes[d->window].in[0] : d->a);
    char note[600];
    if (x->packed_b && x->packed_b[ki] >= 0)
      nnc_sb_printf(&body, "  g.b_packed = c->m->pb[%d];   /* %s, %s */\n", x->packed_b[ki],
                    ec_note(x, d->b, note, sizeof note),
                    cs_packed_param(x, x->packed_b[ki]) >= 0 ? "held packed" : "packed by prepare()");
    else if (!q8) ec_assign(x, &body, 2, "g.B", d->b);
    ec_assign(x, &body, 2, "g.C", d->out);
    if (d->residual >= 0) ec_assign(x, &body, 2, "g.residual", d->residual);
    if (d->aux_kind != NNC_AUX_NONE) ec_assign(x, &body, 2, "g.aux", d->aux);
  }
  if (d->bias >= 0) ec_assign(x, &body, 2, "g.bias", d->bias);
  if (d->norm_gamma >= 0) ec_assign(x, &body, 2, "g.gamma", d->norm_gamma);
  if (d->norm_beta >= 0) ec_assign(x, &body, 2, "g.beta", d->norm_beta);
  nnc_sb_printf(&body, "  int rc = ensure_ws(c->m, nnc_simd_gemm_workspace_bytes(&g, c->m->par.nthreads));\n"
                       "  if (rc) return rc;\n  nnc_simd_error e;\n");
  nnc_sb off_a, off_b, off_c;
  nnc_sb_init(&off_a);
  nnc_sb_init(&off_b);
  nnc_sb_init(&off_c);
  for (int i = 0; i < s.first_inner; i++) {
    char n[EXPR], st[EXPR];
    dim_of(x, d->out, i, n, sizeof n);
    nnc_sb_printf(&body, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++) {\n", 2 + 2 * i, "", i, i, n, i);
    const nnc_tensor *ta = &x->g->tensors[d->a], *tb = &x->g->tensors[d->b];
    if (s.a_full[i])
      nnc_sb_printf(&off_a, " + i%d * %s", i,
                    ec_mul(ec_dims_product(x, d->a, i - (s.nb - (ta->rank - 2)) + 1, ta->rank, n, sizeof n), "1", st, sizeof st));
    if (s.b_full[i])
      nnc_sb_printf(&off_b, " + i%d * %s", i,
                    ec_mul(ec_dims_product(x, d->b, i - (s.nb - (tb->rank - 2)) + 1, tb->rank, n, sizeof n), "1", st, sizeof st));
    nnc_sb_printf(&off_c, " + i%d * %s", i, ec_mul(ec_dims_product(x, d->out, i + 1, s.nb + 2, n, sizeof n), "1", st, sizeof st));
  }
  if (off_a.oom || off_b.oom || off_c.oom) body.oom = true;
  int ind = 2 + 2 * s.first_inner;
  if (loops) {
    nnc_sb_printf(&body, "%*sg.A = A%s;\n", ind, "", off_a.buf ? off_a.buf : "");
    if (!q8) nnc_sb_printf(&body, "%*sg.B = B%s;\n", ind, "", off_b.buf ? off_b.buf : "");
    nnc_sb_printf(&body, "%*sg.C = C%s;\n", ind, "", off_c.buf ? off_c.buf : "");
    if (d->residual >= 0) nnc_sb_printf(&body, "%*sg.residual = R%s;\n", ind, "", off_c.buf ? off_c.buf : "");
    if (d->aux_kind != NNC_AUX_NONE) nnc_sb_printf(&body, "%*sg.aux = X%s;\n", ind, "", off_c.buf ? off_c.buf : "");
  }
  nnc_sb_free(&off_a);
  nnc_sb_free(&off_b);
  nnc_sb_free(&off_c);
  nnc_sb_printf(&body, "%*sif (nnc_simd_gemm(&g, &c->m->par, c->m->ws, c->m->ws_size, &e))\n"
                       "%*s  return kernel_failed(c->m, %d, e.msg);\n", ind, "", ind, "", ki);
  for (int i = s.first_inner - 1; i >= 0; i--) nnc_sb_printf(&body, "%*s}\n", 2 + 2 * i, "");
  nnc_sb_printf(&body, "  return 0;\n");
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

/* ------------------------------------------------------------- attention */

/* k<i>_sizes: the template's sizes and the strides of contiguous operands. */
static void attn_sizes(const ec_ctx *x, int ki, const char *type, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_attention_desc *a = ec_attn_desc(k);
  ec_attn_operand o[8];
  int n = ec_attn_operands(k, o), r = x->g->tensors[a->q].rank;
  char T[EXPR], S[EXPR], D[EXPR], Dv[EXPR], batch[EXPR], heads[EXPR], lit[64], e[EXPR];
  as_int(dim_of(x, a->q, r - 2, e, sizeof e), T, sizeof T);
  as_int(dim_of(x, a->k, r - 2, e, sizeof e), S, sizeof S);
  as_int(dim_of(x, a->q, r - 1, e, sizeof e), D, sizeof D);
  as_int(dim_of(x, a->v, r - 1, e, sizeof e), Dv, sizeof Dv);
  nnc_sb sz;
  nnc_sb_init(&sz);
  nnc_sb_printf(&sz, "  const int T = %s, S = %s, D = %s, Dv = %s;\n", T, S, D, Dv);
  /* grouped-query attention (ec_attn_grouped) only runs forward: its training step keeps the primitive ops */
  bool grouped = ec_attn_grouped(x->g, a);
  if (r >= 3) {
    ec_dims_product(x, a->q, 1, r - 2, e, sizeof e);
    nnc_sb_printf(&sz, "  const int heads = %s;\n", as_int(e, heads, sizeof heads));
    nnc_sb_printf(&sz, "  *a = (%s){\n      .batch = %s, .heads = heads, .T = T, .S = S, .D = D, .Dv = Dv,\n", type,
                  as_int(dim_of(x, a->q, 0, e, sizeof e), batch, sizeof batch));
    char group[EXPR] = "1";
    if (grouped) {
      /* grouped-query: query heads sharing a k/v head */
      as_int(dim_of(x, a->q, r - 3, lit, sizeof lit), group, sizeof group);
      nnc_sb_printf(&sz, "      .kv_group = %s,\n", group);
    }
    ec_attn_strides view;
    for (int i = 0; i < n; i++) {
      if (ec_attn_view(x, k, i, &view)) continue;   /* its view's strides are set where it is assigned */
      const char *w = o[i].wide ? "Dv" : "D", *rows = o[i].keys ? "S" : "T", *p = o[i].strides;
      if (grouped && o[i].keys)
        nnc_sb_printf(&sz, "      .%s_st = %s, .%s_sh = (ptrdiff_t)%s * %s, .%s_sb = (ptrdiff_t)(heads / %s) * %s * %s,\n",
                      p, w, p, rows, w, p, group, rows, w);
      else
        nnc_sb_printf(&sz, "      .%s_st = %s, .%s_sh = (ptrdiff_t)%s * %s, .%s_sb = (ptrdiff_t)heads * %s * %s,\n", p,
                      w, p, rows, w, p, rows, w);
    }
  } else if (a->mask >= 0) {
    /* rank 2 with a mask: query row i uses mask row i, so each row is a batch of one query */
    nnc_sb_printf(&sz, "  *a = (%s){\n      .batch = T, .heads = 1, .T = 1, .S = S, .D = D, .Dv = Dv,\n", type);
    for (int i = 0; i < n; i++) {
      const char *w = o[i].wide ? "Dv" : "D";
      if (o[i].keys) nnc_sb_printf(&sz, "      .%s_st = %s,\n", o[i].strides, w);
      else nnc_sb_printf(&sz, "      .%s_st = %s, .%s_sb = %s,\n", o[i].strides, w, o[i].strides, w);
    }
  } else {
    nnc_sb_printf(&sz, "  *a = (%s){\n      .batch = 1, .heads = 1, .T = T, .S = S, .D = D, .Dv = Dv,\n", type);
    for (int i = 0; i < n; i++) nnc_sb_printf(&sz, "      .%s_st = %s,\n", o[i].strides, o[i].wide ? "Dv" : "D");
  }
  nnc_sb_printf(&sz, "      .scale = %s,%s .mask_sb = S,\n  };\n", ec_literal(a->scale, false, lit, sizeof lit),
                a->causal ? " .causal = 1," : "");
  nnc_sb_printf(b, "static void k%d_sizes(const %s_dims *d, %s *a) {\n", ki, x->p, type);
  if (!ec_names(sz.buf, "d")) nnc_sb_printf(b, "  (void)d;   /* every size is a constant */\n");
  if (sz.buf) nnc_sb_puts(b, sz.buf);
  if (sz.oom) b->oom = true;
  nnc_sb_printf(b, "}\n\n");
  nnc_sb_free(&sz);
}

/* Attention (nnc_simd_attention) or its backward (nnc_simd_attention_bwd). */
static nnc_status emit_attention(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  bool grad = k->kind == NNC_KERNEL_ATTENTION_GRAD;
  const nnc_attention_desc *a = ec_attn_desc(k);
  const char *type = grad ? "nnc_simd_attn_bwd_args" : "nnc_simd_attn_args";
  const char *fn = grad ? "nnc_simd_attention_bwd" : "nnc_simd_attention";
  ec_attn_operand o[8];
  int n = ec_attn_operands(k, o);
  for (int i = 0; i < n; i++) {
    nnc_status st = want_f32(x, k, o[i].t, o[i].ptr, err);
    if (st) return st;
  }
  if (x->g->tensors[a->q].rank == 2 && a->mask >= 0 && a->causal)
    return nnc_errorf(err, NNC_E_TARGET, k->loc,
                      "c-simd: attention on rank-2 scores with both a causal and a padding mask is not supported; "
                      "give q, k and v a batch dim");
  attn_sizes(x, ki, type, b);
  bool conv = a->mask >= 0 && x->g->tensors[a->mask].dtype != NNC_F32;
  char p[256];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  %s a;\n  k%d_sizes(c->d, &a);\n", type, ki);
  /* operands read or written in place of a folded head split or merge get
   * their base and strides after the contiguous ones */
  ec_attn_strides unused;
  for (int i = 0; i < n; i++) {
    char lhs[16];
    snprintf(lhs, sizeof lhs, "a.%s", o[i].ptr);
    if (!ec_attn_view(x, k, i, &unused)) ec_assign(x, &body, 2, lhs, o[i].t);
  }
  ec_attn_emit_views(x, k, "a.", NULL, &body);
  if (a->lse >= 0) ec_assign(x, &body, 2, "a.lse", a->lse);
  if (conv) {
    char me[EXPR], note[600];
    ec_elems(x, a->mask, me, sizeof me);
    nnc_sb_printf(&body, "  /* the %s mask %s as floats, at the start of the workspace */\n"
                     "  size_t mask_bytes = ((size_t)(%s) * sizeof(float) + 63) / 64 * 64;\n"
                     "  int rc = ensure_ws(c->m, mask_bytes + %s_workspace_bytes(&a, c->m->par.nthreads));\n"
                     "  if (rc) return rc;\n"
                     "  float *mask = c->m->ws;\n  const %s *mask_in = %s;\n"
                     "  for (int64_t i = 0; i < (int64_t)(%s); i++) mask[i] = (float)mask_in[i];\n"
                     "  a.mask = mask;\n  nnc_simd_error e;\n"
                     "  void *ws = (unsigned char *)c->m->ws + mask_bytes;\n"
                     "  if (%s(&a, &c->m->par, ws, c->m->ws_size - mask_bytes, &e))\n"
                     "    return kernel_failed(c->m, %d, e.msg);\n",
                  ec_ctype(x->g, a->mask), ec_note(x, a->mask, note, sizeof note), me, fn, ec_ctype(x->g, a->mask),
                  ec_ptr(x, a->mask, p, sizeof p), me, fn, ki);
  } else {
    if (a->mask >= 0) ec_assign(x, &body, 2, "a.mask", a->mask);
    nnc_sb_printf(&body, "  int rc = ensure_ws(c->m, %s_workspace_bytes(&a, c->m->par.nthreads));\n"
                     "  if (rc) return rc;\n  nnc_simd_error e;\n"
                     "  if (%s(&a, &c->m->par, c->m->ws, c->m->ws_size, &e))\n"
                     "    return kernel_failed(c->m, %d, e.msg);\n", fn, fn, ki);
  }
  nnc_sb_printf(&body, "  return 0;\n");
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

/* layernorm_grad / rmsnorm_grad: dx and the gamma (beta) sums in one
 * pass over the rows (nnc_simd_norm_bwd), the sums' partials per chunk of
 * rows in the workspace. */
static nnc_status emit_norm_grad(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  for (int i = 0; i < n->nin; i++) {
    nnc_status st = want_f32(x, k, n->in[i], i == 1 ? "weight" : "input", err);
    if (st) return st;
  }
  bool layer = n->op == NNC_OP_LAYERNORM_GRAD;
  const nnc_tensor *t = &x->g->tensors[n->in[0]];
  char rows[EXPR], cols[EXPR], lit[64], ri[EXPR], ci[EXPR];
  ec_dims_product(x, n->in[0], 0, t->rank - 1, rows, sizeof rows);
  ec_dims_product(x, n->in[0], t->rank - 1, t->rank, cols, sizeof cols);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n", as_int(rows, ri, sizeof ri), as_int(cols, ci, sizeof ci));
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "const float *gamma", n->in[1]);
  ec_assign(x, &body, 2, "const float *dy", n->in[2]);
  if (n->nin == 4) ec_assign(x, &body, 2, "const float *dres", n->in[3]);   /* the residual's gradient, added */
  ec_assign(x, &body, 2, "float *dx", n->out[0]);
  ec_assign(x, &body, 2, "float *dgamma", n->out[1]);
  if (layer) ec_assign(x, &body, 2, "float *dbeta", n->out[2]);
  nnc_sb_printf(&body, "  int rc = ensure_ws(c->m, nnc_simd_norm_bwd_workspace_bytes(rows, cols, c->m->par.nthreads));\n"
                       "  if (rc) return rc;\n  nnc_simd_error e;\n"
                       "  if (nnc_simd_norm_bwd_res(rows, cols, %d, %s, x, cols, dy, cols, %s, cols, gamma, dx, cols, dgamma,\n"
                       "                            %s, &c->m->par, c->m->ws, c->m->ws_size, &e))\n"
                       "    return kernel_failed(c->m, %d, e.msg);\n  return 0;\n",
                layer ? 0 : 1, ec_literal(n->attrs.eps, false, lit, sizeof lit), n->nin == 4 ? "dres" : "NULL",
                layer ? "dbeta" : "NULL", ki);
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

void cs_emit_workspace(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  if (k->kind == NNC_KERNEL_NORM_GRAD) {
    const nnc_tensor *t = &x->g->tensors[x->g->nodes[k->nodes[0]].in[0]];
    char rows[EXPR], cols[EXPR];
    ec_dims_product(x, x->g->nodes[k->nodes[0]].in[0], 0, t->rank - 1, rows, sizeof rows);
    ec_dims_product(x, x->g->nodes[k->nodes[0]].in[0], t->rank - 1, t->rank, cols, sizeof cols);
    nnc_sb_printf(b, "  {   /* kernel %d: the gamma and beta sums' partials */\n"
                     "    size_t w = nnc_simd_norm_bwd_workspace_bytes((int)(%s), (int)(%s), nthreads);\n"
                     "    if (w > need) need = w;\n  }\n", ki, rows, cols);
  } else if (nnc_kernel_scan(x->g, k, NULL, NULL)) {
    cs_emit_scan_workspace(x, ki, b);
  } else if (k->kind == NNC_KERNEL_GEMM) {
    nnc_sb_printf(b, "  {\n    nnc_simd_gemm_args g;\n    k%d_sizes(d, &g);\n"
                     "    size_t w = nnc_simd_gemm_workspace_bytes(&g, nthreads);\n    if (w > need) need = w;\n  }\n", ki);
  } else if (k->kind == NNC_KERNEL_ATTENTION || k->kind == NNC_KERNEL_ATTENTION_GRAD) {
    bool grad = k->kind == NNC_KERNEL_ATTENTION_GRAD;
    int mask = ec_attn_desc(k)->mask;
    nnc_sb_printf(b, "  {\n    %s a;\n    k%d_sizes(d, &a);\n    size_t w = %s_workspace_bytes(&a, nthreads);\n",
                  grad ? "nnc_simd_attn_bwd_args" : "nnc_simd_attn_args", ki,
                  grad ? "nnc_simd_attention_bwd" : "nnc_simd_attention");
    if (mask >= 0 && x->g->tensors[mask].dtype != NNC_F32) {
      char me[EXPR];
      nnc_sb_printf(b, "    w += ((size_t)(%s) * sizeof(float) + 63) / 64 * 64;   /* the mask as floats */\n",
                    ec_elems(x, mask, me, sizeof me));
    }
    nnc_sb_printf(b, "    if (w > need) need = w;\n  }\n");
  }
}

/* ------------------------------------------------------ rows and gather */

static nnc_status emit_row(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  if (n->op == NNC_OP_SOFTMAX && n->attrs.axis != x->g->tensors[n->in[0]].rank - 1)
    return cs_emit_loop_kernel(x, ki, b, err);
  for (int i = 0; i < n->nin; i++) {
    nnc_status st = want_f32(x, k, n->in[i], i ? "weight" : "input", err);
    if (st) return st;
  }
  nnc_status st = want_f32(x, k, n->out[0], "output", err);
  if (st) return st;
  const nnc_tensor *t = &x->g->tensors[n->in[0]];
  char rows[EXPR], cols[EXPR], lit[64], ri[EXPR], ci[EXPR];
  ec_dims_product(x, n->in[0], 0, t->rank - 1, rows, sizeof rows);
  ec_dims_product(x, n->in[0], t->rank - 1, t->rank, cols, sizeof cols);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n", as_int(rows, ri, sizeof ri), as_int(cols, ci, sizeof ci));
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  if (n->op != NNC_OP_SOFTMAX) ec_assign(x, &body, 2, "const float *gamma", n->in[1]);
  if (n->op == NNC_OP_LAYERNORM) ec_assign(x, &body, 2, "const float *beta", n->in[2]);
  nnc_sb_printf(&body, "  nnc_simd_error e;\n");
  if (n->op == NNC_OP_SOFTMAX)
    nnc_sb_printf(&body, "  if (nnc_simd_softmax(rows, cols, x, cols, y, cols, &c->m->par, &e))\n");
  else if (n->op == NNC_OP_LAYERNORM)
    nnc_sb_printf(&body, "  if (nnc_simd_layernorm(rows, cols, x, cols, gamma, beta, %s, y, cols, &c->m->par, &e))\n",
                  ec_literal(n->attrs.eps, false, lit, sizeof lit));
  else
    nnc_sb_printf(&body, "  if (nnc_simd_rmsnorm(rows, cols, x, cols, gamma, %s, y, cols, &c->m->par, &e))\n",
                  ec_literal(n->attrs.eps, false, lit, sizeof lit));
  nnc_sb_printf(&body, "    return kernel_failed(c->m, %d, e.msg);\n  return 0;\n", ki);
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

static nnc_status emit_gather(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  nnc_status st = want_f32(x, k, n->in[0], "table", err);
  if (st) return st;
  char count[EXPR], V[EXPR], C[EXPR], ci[EXPR];
  ec_elems(x, n->in[1], count, sizeof count);
  dim_of(x, n->in[0], 0, V, sizeof V);
  dim_of(x, n->in[0], 1, C, sizeof C);
  nnc_sb body;
  nnc_sb_init(&body);
  const int slot = cs_held_slot(x, n->in[0]);
  ec_assign(x, &body, 2, "const float *table", n->in[0]);
  ec_assign(x, &body, 2, "const int32_t *ids", n->in[1]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  if (slot >= 0)
    nnc_sb_printf(&body, "  /* the table is a GEMM's B too, held packed for it (packed_b[%d]): its rows are read\n"
                         "   * out of the panels, so the weights block holds it once */\n"
                         "  nnc_simd_error e;\n"
                         "  if (nnc_simd_embedding_packed(%s, ids, %s, %s, packed_b[%d].b_trans, table, y, %s, &c->m->par, &e))\n"
                         "    return kernel_failed(c->m, %d, e.msg);\n  return 0;\n",
                  slot, as_int(count, ci, sizeof ci), V, C, slot, C, ki);
  else if (n->attrs.ranks > 1)
    nnc_sb_printf(&body, "  /* this rank's rows of the vocabulary (%lld split over %d ranks); another rank's id gives zeros\n"
                         "   * here, and the all_reduce after adds its row */\n"
                         "  nnc_simd_error e;\n"
                         "  if (nnc_simd_embedding_rows(%s, ids, %lld, c->m->%s->rank * %s, %s, %s, table, %s, y, %s, &e))\n"
                         "    return kernel_failed(c->m, %d, e.msg);\n  return 0;\n",
                  (long long)n->attrs.vocab, n->attrs.ranks, as_int(count, ci, sizeof ci), (long long)n->attrs.vocab,
                  x->tpc, V, V, C, C, C, ki);
  else
    nnc_sb_printf(&body, "  nnc_simd_error e;\n  if (nnc_simd_embedding(%s, ids, %s, %s, table, %s, y, %s, &e))\n"
                         "    return kernel_failed(c->m, %d, e.msg);\n  return 0;\n",
                  as_int(count, ci, sizeof ci), V, C, C, C, ki);
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

/* ----------------------------------------------------------- activations */

/* Whether tensor t has the shape of tensor u (so both are read alike). */
static bool same_shape(const nnc_graph *g, int t, int u) {
  const nnc_tensor *a = &g->tensors[t], *c = &g->tensors[u];
  if (a->rank != c->rank || a->dtype != NNC_F32 || c->dtype != NNC_F32) return false;
  for (int i = 0; i < a->rank; i++)
    if (!nnc_dim_eq(a->shape[i], c->shape[i])) return false;
  return true;
}

/* The activation an elementwise kernel is alone (as op or as the gradient
 * of one, over operands of the output's shape), or NULL: those go through
 * the vector templates, the rest through loops. */
static const char *lone_activation(const ec_ctx *x, const nnc_kernel *k) {
  if (k->kind != NNC_KERNEL_ELEMENTWISE || k->nnodes != 1) return NULL;
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const char *act = act_name(n->op == NNC_OP_ACT_GRAD ? n->attrs.act : n->op, n->attrs.gelu_tanh);
  if (strcmp(act, "NNC_SIMD_ACT_NONE") == 0) return NULL;
  for (int i = 0; i < n->nin; i++)
    if (!same_shape(x->g, n->in[i], n->out[0])) return NULL;
  return act;
}

/* y = act(x) through nnc_simd_activation, dx = dy act'(x) through
 * nnc_simd_activation_grad. */
static nnc_status emit_activation(const ec_ctx *x, int ki, const char *act, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char count[EXPR];
  ec_elems(x, n->out[0], count, sizeof count);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  if (n->op == NNC_OP_ACT_GRAD) ec_assign(x, &body, 2, "const float *dy", n->in[1]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body, "  nnc_simd_error e;\n");
  if (n->op == NNC_OP_ACT_GRAD)
    nnc_sb_printf(&body, "  if (nnc_simd_activation_grad(%s, (size_t)(%s), x, dy, y, &c->m->par, &e))\n", act, count);
  else
    nnc_sb_printf(&body, "  if (nnc_simd_activation(%s, (size_t)(%s), x, y, &c->m->par, &e))\n", act, count);
  nnc_sb_printf(&body, "    return kernel_failed(c->m, %d, e.msg);\n  return 0;\n", ki);
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

nnc_status cs_emit_kernels(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  nnc_sb_printf(b, "/* ---------------------------------------------------------- the kernels */\n\n");
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
    case NNC_KERNEL_GEMM: st = emit_gemm(x, ki, b, err); break;
    case NNC_KERNEL_ATTENTION:
    case NNC_KERNEL_ATTENTION_GRAD: st = emit_attention(x, ki, b, err); break;
    case NNC_KERNEL_ROW: st = emit_row(x, ki, b, err); break;
    case NNC_KERNEL_NORM_GRAD: st = emit_norm_grad(x, ki, b, err); break;
    case NNC_KERNEL_GATHER:
      /* the lookup through its template; its gradient, a scatter-add, as a loop */
      if (x->g->nodes[k->nodes[0]].op == NNC_OP_EMBEDDING) st = emit_gather(x, ki, b, err);
      else st = cs_emit_loop_kernel(x, ki, b, err);
      break;
    default:
      if (lone_activation(x, k)) st = emit_activation(x, ki, lone_activation(x, k), b);
      else st = cs_emit_loop_kernel(x, ki, b, err);
      break;
    }
    if (st) return st;
  }
  ec_emit_costs(x, b);
  return NNC_OK;
}
