/* compiler/emit/cuda_kernels.c — the launcher of every kernel of a CUDA
 * model: GEMMs through cuBLASLt or nnc's own tensor-core GEMM, attention,
 * softmax and the norms through templates/cuda, everything else through the
 * loops of cuda_loops.c.
 *
 * GEMMs run on cuBLASLt with what it can fuse: its epilogues add a bias and
 * apply ReLU or tanh-GELU, and its C operand adds a residual when there is no
 * activation. A LayerNorm or RMSNorm of A's rows runs as a norm kernel before
 * it; an erf-GELU, SiLU, sigmoid or tanh, or an activation followed by a
 * residual, as an epilogue kernel after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

#define EXPR EC_EXPR

static char *dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* `int` of a size expression: a constant as it is, an expression of dims cast. */
static char *as_int(const char *e, char *buf, size_t n) {
  bool constant = strspn(e, "0123456789") == strlen(e);
  snprintf(buf, n, constant ? "%.500s" : "(int)(%.490s)", e);
  return buf;
}


/* " * (int)(e)" to multiply by the batch e, "" when it is 1. */
static char *times(const char *e, char *buf, size_t n) {
  char i[EXPR + 16];
  if (strcmp(e, "1") == 0) buf[0] = 0;
  else snprintf(buf, n, " * %.500s", as_int(e, i, sizeof i));
  return buf;
}

/* ------------------------------------------------------------------ GEMM */

typedef struct gemm_plan {
  ec_gemm_shape s;
  bool pre_norm;       /* cuBLASLt path: a norm kernel writes A to the workspace first */
  bool post;           /* cuBLASLt path: an epilogue kernel applies act (+ residual) after */
  const char *lt_epi;  /* NNRT_EPI_* of the cuBLASLt call */
  bool lt_residual;    /* the residual rides cuBLASLt's C operand */
  int pad_n;           /* > 0: rows of the output padded to this many elements in the workspace */
  char why[200];
} gemm_plan;


/* Measured on an H100 (bench/NOTES.md): cuBLASLt runs these GEMMs at about
 * 600 TFLOP/s, nnc's mma.sync GEMM at 150-230, so a LayerNorm kernel (about
 * 10 us for 8192x768) before cuBLASLt and an epilogue kernel after it beat the
 * fused kernel by 2-3x. nnc's GEMM stays in templates/cuda for the fusions
 * cuBLASLt cannot express once it is faster; the plan uses it for none today. */
static nnc_status plan_gemm(const ec_ctx *x, const nnc_kernel *k, gemm_plan *p, nnc_error *err) {
  const nnc_gemm_desc *d = &k->d.gemm;
  memset(p, 0, sizeof *p);
  ec_gemm_shape_of(x, k, &p->s);
  bool lt_act = d->act == NNC_OP_NONE || d->act == NNC_OP_RELU || (d->act == NNC_OP_GELU && d->gelu_tanh);
  bool act_res = d->act != NNC_OP_NONE && d->residual >= 0;
  p->pre_norm = d->prologue != NNC_NORM_NONE;
  p->post = !lt_act || act_res;
  p->lt_epi = p->post || d->act == NNC_OP_NONE ? "NNRT_EPI_NONE"
              : d->act == NNC_OP_RELU          ? "NNRT_EPI_RELU"
                                               : "NNRT_EPI_GELU_TANH";
  p->lt_residual = d->residual >= 0 && !p->post;
  /* rows that are not a multiple of 16 bytes keep cuBLASLt off its fast
   * kernels (the GPT-2 LM head, N = 50257, ran 5x slower): compute into
   * padded rows and copy; the residual would need the same padding */
  int esize = nnc_dtype_size(x->g->tensors[d->out].dtype);
  if (strspn(p->s.N, "0123456789") == strlen(p->s.N) && !p->lt_residual) {
    long long n = atoll(p->s.N), align = 16 / esize;
    if (n % align && n >= 1024) p->pad_n = (int)((n + align - 1) / align * align);   /* narrow rows: not worth a copy */
  }
  snprintf(p->why, sizeof p->why, "cuBLASLt%s%s%s", p->pre_norm ? " after a norm kernel" : "",
           p->pad_n ? " into rows padded to 16 bytes, copied" : "", p->post ? ", then an epilogue kernel" : "");
  return NNC_OK;
}

/* The sizes and strides every GEMM path shares, as `const int M = ..` lines. */
static void gemm_dims(const ec_ctx *x, const gemm_plan *p, nnc_sb *b) {
  char M[EXPR], N[EXPR], K[EXPR];
  nnc_sb_printf(b, "  const int M = %s, N = %s, K = %s;\n", as_int(p->s.M, M, sizeof M), as_int(p->s.N, N, sizeof N),
                as_int(p->s.K, K, sizeof K));
}

static void gemm_batch(const ec_ctx *x, const nnc_kernel *k, const gemm_plan *p, char *batch, size_t n, bool *sa,
                       bool *sb) {
  ec_dims_product(x, k->d.gemm.out, 0, p->s.nb, batch, n);
  *sa = p->s.nb && p->s.a_full[p->s.nb - 1];
  *sb = p->s.nb && p->s.b_full[p->s.nb - 1];
}

static const char *nnrt_dt(const ec_ctx *x, int t) {
  switch (x->g->tensors[t].dtype) {
  case NNC_BF16: return "NNRT_DT_BF16";
  case NNC_F16: return "NNRT_DT_F16";
  default: return "NNRT_DT_F32";
  }
}

/* The epilogue kernel of the cuBLASLt path: out = act(out) (+ residual). */
static void emit_post_kernel(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  nnc_node act = {0};
  act.op = d->act;
  act.attrs.gelu_tanh = d->gelu_tanh;
  char ex[1024];
  ec_node_expr(x, &act, "v", "", false, d->out, ex, sizeof ex);
  const char *ty = cu_stype(x, d->out);
  nnc_sb_printf(b, "/* kernel %d's activation%s after cuBLASLt */\n", ki, d->residual >= 0 ? " and residual" : "");
  nnc_sb_printf(b, "__global__ void k%d_post(%s *y, const %s *r, long long n) {\n", ki, ty, ty);
  nnc_sb_printf(b, "  NNC_LOOP(e, n) {\n    const float v = nnc_ld(y[e]);\n");
  nnc_sb_printf(b, "    nnc_st(&y[e], %s%s);\n  }\n}\n\n", ex, d->residual >= 0 ? " + nnc_ld(r[e])" : "");
}

/* Batch dims [0, first_inner) of the output broadcast differently in A and B
 * than the inner ones: one cuBLASLt call per outer index, each on the inner
 * batch, A and B offset by the outer index along the dims they have. */
static void outer_loop(const ec_ctx *x, const nnc_kernel *k, const gemm_plan *p, const char *inner, nnc_sb *b) {
  const nnc_gemm_desc *d = &k->d.gemm;
  char outer[EXPR], dim[EXPR], st[EXPR];
  ec_dims_product(x, d->out, 0, p->s.first_inner, outer, sizeof outer);
  const char *ty = cu_stype(x, d->out), *ta = cu_stype(x, d->a), *tb = cu_stype(x, d->b);
  nnc_sb_printf(b, "  /* the batch dims before the last %d broadcast differently in A and B: a call per index */\n",
                p->s.nb - p->s.first_inner);
  nnc_sb_printf(b, "  for (long long o = 0; o < (long long)(%s); o++) {\n    long long rem = o, oa = 0, ob = 0;\n", outer);
  for (int dd = p->s.first_inner - 1; dd >= 0; dd--) {
    nnc_emit_dim_expr(x->g, x->g->tensors[d->out].shape[dd], "d->", dim, sizeof dim);
    nnc_sb_printf(b, "    {\n      const long long i = rem %% (%s);\n      rem /= (%s);\n", dim, dim);
    const int ops[2] = {d->a, d->b};
    const bool full[2] = {p->s.a_full[dd], p->s.b_full[dd]};
    for (int q = 0; q < 2; q++) {
      int r = x->g->tensors[ops[q]].rank, j = dd - (p->s.nb - (r - 2));
      if (!full[q] || j < 0) continue;
      ec_dims_product(x, ops[q], j + 1, r - 2, st, sizeof st);
      nnc_sb_printf(b, "      %s += i * (%s);\n", q ? "ob" : "oa", st);
    }
    nnc_sb_printf(b, "    }\n");
  }
  nnc_sb_printf(b, "    nnrt_cuda_gemm go = g;\n"
                   "    go.A = (const %s *)g.A + oa * M * K;\n    go.B = (const %s *)g.B + ob * K * N;\n"
                   "    go.D = (%s *)g.D + o * (long long)(%s) * M * N;\n", ta, tb, ty, inner);
  if (p->lt_residual) nnc_sb_printf(b, "    go.residual = (const %s *)g.residual + o * (long long)(%s) * M * N;\n", ty, inner);
  nnc_sb_printf(b, "    if (nnrt_cuda_gemm_run(m->blas, &go, s, &err)) return kernel_failed(m, %d, err.msg);\n  }\n",
                (int)(k - x->s->k));
}

static nnc_status emit_gemm(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  gemm_plan p;
  nnc_status st = plan_gemm(x, k, &p, err);
  if (st) return st;
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* %s */\n", p.why);
  {
    char batch[EXPR], bi[EXPR], lit[64], pa[256];
    bool sa, sb;
    gemm_batch(x, k, &p, batch, sizeof batch, &sa, &sb);
    gemm_dims(x, &p, &body);
    const char *A = "A";
    if (p.pre_norm) {
      /* the normalized rows of A, in the workspace */
      char pg[256], pbeta[256] = "nullptr";
      ec_ptr(x, d->norm_gamma, pg, sizeof pg);
      if (d->norm_beta >= 0) ec_ptr(x, d->norm_beta, pbeta, sizeof pbeta);
      nnc_sb_printf(&body, "  %s *A = (%s *)m->ws;   /* A's rows normalized */\n  nnc_cuda_error e;\n",
                    cu_stype(x, d->a), cu_stype(x, d->a));
      if (d->prologue == NNC_NORM_LAYER)
        nnc_sb_printf(&body, "  if (nnc_cuda_layernorm(M%s, K, %s, K, %s, %s, %s, A, K, s, &e))\n",
                      times(batch, bi, sizeof bi), ec_ptr(x, d->a, pa, sizeof pa), pg, pbeta,
                      ec_literal(d->norm_eps, false, lit, sizeof lit));
      else
        nnc_sb_printf(&body, "  if (nnc_cuda_rmsnorm(M%s, K, %s, K, %s, %s, A, K, s, &e))\n",
                      times(batch, bi, sizeof bi), ec_ptr(x, d->a, pa, sizeof pa), pg,
                      ec_literal(d->norm_eps, false, lit, sizeof lit));
      nnc_sb_printf(&body, "    return kernel_failed(m, %d, e.msg);\n", ki);
    }
    char inner[EXPR], ii[EXPR];
    ec_dims_product(x, d->out, p.s.first_inner, p.s.nb, inner, sizeof inner);
    nnc_sb_printf(&body, "  nnrt_cuda_gemm g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n  g.batch = %s;\n",
                  as_int(inner, ii, sizeof ii));
    nnc_sb_printf(&body, "  g.ab = %s;\n  g.out = %s;\n", nnrt_dt(x, d->a), nnrt_dt(x, d->out));
    if (x->r->precision.tf32) nnc_sb_printf(&body, "  g.tf32 = true;   /* --precision=tf32 */\n");
    if (p.pre_norm) nnc_sb_printf(&body, "  g.A = %s;\n", A);
    else ec_assign(x, &body, 2, "g.A", d->a);
    nnc_sb_printf(&body, "  g.lda = K;\n");
    if (sa) nnc_sb_printf(&body, "  g.stride_a = (long long)M * K;\n");
    ec_assign(x, &body, 2, "g.B", d->b);
    nnc_sb_printf(&body, "  g.ldb = %s;\n  g.b_trans = %s;\n", d->b_trans ? "K" : "N", d->b_trans ? "true" : "false");
    if (sb) nnc_sb_printf(&body, "  g.stride_b = (long long)K * N;\n");
    if (d->bias >= 0) ec_assign(x, &body, 2, "g.bias", d->bias);
    if (p.lt_residual) {
      ec_assign(x, &body, 2, "g.residual", d->residual);
      nnc_sb_printf(&body, "  g.stride_r = (long long)M * N;\n");
    }
    if (p.pad_n) {
      nnc_sb_printf(&body, "  const int ldp = %d;   /* N rounded up to 16 bytes */\n"
                           "  %s *P = (%s *)((unsigned char *)m->ws + %s);\n  g.D = P;\n  g.ldd = ldp;\n"
                           "  g.stride_d = (long long)M * ldp;\n", p.pad_n, cu_stype(x, d->out), cu_stype(x, d->out),
                    p.pre_norm ? "pad_offset((size_t)M * K * sizeof *A)" : "0");
    } else {
      ec_assign(x, &body, 2, "g.D", d->out);
      nnc_sb_printf(&body, "  g.ldd = N;\n  g.stride_d = (long long)M * N;\n");
    }
    nnc_sb_printf(&body, "  g.alpha = %s;\n  g.epilogue = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit), p.lt_epi);
    nnc_sb_printf(&body, "  nnrt_error err = {};\n");
    if (p.s.first_inner > 0) outer_loop(x, k, &p, ii, &body);
    else nnc_sb_printf(&body, "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n", ki);
    if (p.pad_n) {
      char po[256];
      nnc_sb_printf(&body, "  nnc_unpad_rows<<<nnc_loop_blocks((long long)M * N%s), NNC_LOOP_THREADS, 0, s>>>(\n"
                           "      %s, P, M%s, N, ldp);\n"
                           "  if (launched(m, %d)) return %s_E_DEVICE;\n",
                    times(batch, bi, sizeof bi), ec_ptr(x, d->out, po, sizeof po), times(batch, bi, sizeof bi), ki, x->P);
      if (!p.post) nnc_sb_printf(&body, "  return 0;\n");
    }
    if (p.post) {
      emit_post_kernel(x, ki, b);
      char pr[256] = "nullptr", pout[256];
      if (d->residual >= 0) ec_ptr(x, d->residual, pr, sizeof pr);
      nnc_sb_printf(&body, "  const long long n = (long long)M * N%s;\n"
                           "  k%d_post<<<nnc_loop_blocks(n), NNC_LOOP_THREADS, 0, s>>>(%s, %s, n);\n"
                           "  return launched(m, %d);\n", times(batch, bi, sizeof bi), ki,
                    ec_ptr(x, d->out, pout, sizeof pout), pr, ki);
    } else if (!p.pad_n) {
      nnc_sb_printf(&body, "  return 0;\n");
    }
  }
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

void cu_emit_workspace(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  if (k->kind == NNC_KERNEL_ATTENTION) {
    const nnc_attention_desc *a = &k->d.attn;
    if (a->mask < 0 || x->g->tensors[a->mask].dtype == x->g->tensors[a->q].dtype) return;
    char me[EXPR];
    nnc_sb_printf(b, "  {\n    size_t w = (size_t)(%s) * sizeof(%s);   /* kernel %d: the mask as q's type */\n"
                     "    if (w > need) need = w;\n  }\n",
                  ec_elems(x, a->mask, me, sizeof me), cu_stype(x, a->q), ki);
    return;
  }
  if (k->kind != NNC_KERNEL_GEMM) return;
  gemm_plan p;
  nnc_error e;
  if (plan_gemm(x, k, &p, &e)) return;
  if (p.pre_norm || p.pad_n) {
    char a[EXPR], rows[EXPR];
    const nnc_tensor *o = &x->g->tensors[k->d.gemm.out];
    nnc_sb_printf(b, "  {   /* kernel %d:%s%s */\n    size_t w = 0;\n", ki, p.pre_norm ? " A normalized" : "",
                  p.pad_n ? " the output with padded rows" : "");
    if (p.pre_norm)
      nnc_sb_printf(b, "    w += pad_offset((size_t)(%s) * sizeof(%s));\n", ec_elems(x, k->d.gemm.a, a, sizeof a),
                    cu_stype(x, k->d.gemm.a));
    if (p.pad_n) {
      ec_dims_product(x, k->d.gemm.out, 0, o->rank - 1, rows, sizeof rows);
      nnc_sb_printf(b, "    w += (size_t)(%s) * %d * sizeof(%s);\n", rows, p.pad_n, cu_stype(x, k->d.gemm.out));
    }
    nnc_sb_printf(b, "    if (w > need) need = w;\n  }\n");
  }
}

/* ------------------------------------------------------------- attention */

static nnc_status emit_attention(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_attention_desc *a = &k->d.attn;
  const nnc_tensor *q = &x->g->tensors[a->q];
  int r = q->rank;
  if (r == 2 && a->mask >= 0 && a->causal)
    return nnc_errorf(err, NNC_E_TARGET, k->loc,
                      "%s: attention on rank-2 scores with both a causal and a padding mask is not supported; "
                      "give q, k and v a batch dim", x->r->target->name);
  char T[EXPR], S[EXPR], D[EXPR], Dv[EXPR], t2[EXPR], s2[EXPR], d2[EXPR], v2[EXPR], lit[64];
  as_int(dim_of(x, a->q, r - 2, t2, sizeof t2), T, sizeof T);
  as_int(dim_of(x, a->k, r - 2, s2, sizeof s2), S, sizeof S);
  as_int(dim_of(x, a->q, r - 1, d2, sizeof d2), D, sizeof D);
  as_int(dim_of(x, a->v, r - 1, v2, sizeof v2), Dv, sizeof Dv);
  const char *ty = cu_stype(x, a->q);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int T = %s, S = %s, D = %s, Dv = %s;\n", T, S, D, Dv);
  nnc_sb_printf(&body, "  nnc_cuda_attn_args<%s> a = {};\n", ty);
  if (r >= 3) {
    char bt[EXPR], hd[EXPR], bi[EXPR], hi[EXPR];
    dim_of(x, a->q, 0, bt, sizeof bt);
    ec_dims_product(x, a->q, 1, r - 2, hd, sizeof hd);
    /* a batch dim of k or v that is 1 broadcasts: stride 0 */
    bool kb = !nnc_dim_eq_const(x->g->tensors[a->k].shape[0], 1) || nnc_dim_eq_const(q->shape[0], 1);
    bool vb = !nnc_dim_eq_const(x->g->tensors[a->v].shape[0], 1) || nnc_dim_eq_const(q->shape[0], 1);
    nnc_sb_printf(&body, "  const int heads = %s;\n", as_int(hd, hi, sizeof hi));
    nnc_sb_printf(&body,
      "  a.batch = %s;\n  a.heads = heads;\n  a.T = T;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n"
      "  a.q_st = D;\n  a.q_sh = (long long)T * D;\n  a.q_sb = (long long)heads * T * D;\n"
      "  a.k_st = D;\n  a.k_sh = (long long)S * D;\n  a.k_sb = %s;\n"
      "  a.v_st = Dv;\n  a.v_sh = (long long)S * Dv;\n  a.v_sb = %s;\n"
      "  a.o_st = Dv;\n  a.o_sh = (long long)T * Dv;\n  a.o_sb = (long long)heads * T * Dv;\n",
      as_int(bt, bi, sizeof bi), kb ? "(long long)heads * S * D" : "0", vb ? "(long long)heads * S * Dv" : "0");
  } else if (a->mask >= 0) {
    /* rank 2 with a mask: query row i uses mask row i, so each row is a batch of one query */
    nnc_sb_printf(&body, "  a.batch = T;\n  a.heads = 1;\n  a.T = 1;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n"
                         "  a.q_st = D;\n  a.q_sb = D;\n  a.k_st = D;\n  a.v_st = Dv;\n  a.o_st = Dv;\n  a.o_sb = Dv;\n");
  } else {
    nnc_sb_printf(&body, "  a.batch = 1;\n  a.heads = 1;\n  a.T = T;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n"
                         "  a.q_st = D;\n  a.k_st = D;\n  a.v_st = Dv;\n  a.o_st = Dv;\n");
  }
  nnc_sb_printf(&body, "  a.scale = %s;\n  a.causal = %d;\n", ec_literal(a->scale, false, lit, sizeof lit),
                a->causal ? 1 : 0);
  /* operands read or written in place of a folded head split or merge get
   * their base and strides after the contiguous ones */
  ec_attn_strides unused;
  if (!ec_attn_view(x, a, NNC_ATTN_Q, &unused)) ec_assign(x, &body, 2, "a.q", a->q);
  if (!ec_attn_view(x, a, NNC_ATTN_K, &unused)) ec_assign(x, &body, 2, "a.k", a->k);
  if (!ec_attn_view(x, a, NNC_ATTN_V, &unused)) ec_assign(x, &body, 2, "a.v", a->v);
  if (!ec_attn_view(x, a, NNC_ATTN_OUT, &unused)) ec_assign(x, &body, 2, "a.out", a->out);
  ec_attn_emit_views(x, a, "a.", NULL, &body);
  if (a->mask >= 0 && x->g->tensors[a->mask].dtype != x->g->tensors[a->q].dtype) {
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
  nnc_sb_printf(&body, "  nnc_cuda_error e;\n  if (nnc_cuda_attention(a, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                       "  return 0;\n", ki);
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

/* ------------------------------------------------------------------- rows */

static nnc_status emit_row(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  /* softmax over another axis than the last: a loop */
  if (n->op == NNC_OP_SOFTMAX && n->attrs.axis != in->rank - 1) return cu_emit_loop_kernel(x, ki, b, err);
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], lit[64], px[256], py[256], pg[256], pb[256];
  ec_dims_product(x, n->in[0], 0, in->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
  as_int(rows, ri, sizeof ri);
  as_int(cols, ci, sizeof ci);
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
  nnc_sb_printf(&body, "    return kernel_failed(m, %d, e.msg);\n  return 0;\n", ki);
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

nnc_status cu_emit_kernels(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
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
    case NNC_KERNEL_ATTENTION: st = emit_attention(x, ki, b, err); break;
    case NNC_KERNEL_ROW: st = emit_row(x, ki, b, err); break;
    default: st = cu_emit_loop_kernel(x, ki, b, err); break;
    }
    if (st) return st;
  }
  ec_emit_costs(x, b);
  return NNC_OK;
}
