/* compiler/emit/c_simd_kernels.c — one C function per kernel: GEMM and
 * attention through their templates with sizes and strides from the
 * tensors' shapes, row kernels and embedding through theirs, everything else
 * as a plain loop (c_simd_loops.c); and the cost (flops, bytes) of each. */
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

#define EXPR 512

static const nnc_node *main_node(const cs_ctx *x, const nnc_kernel *k, nnc_op a, nnc_op b) {
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &x->g->nodes[k->nodes[i]];
    if (n->op == a || n->op == b) return n;
  }
  return NULL;
}

static char *dim_of(const cs_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* The template kernels read f32 only. */
static nnc_status want_f32(const cs_ctx *x, const nnc_kernel *k, int t, const char *role, nnc_error *err) {
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

/* How a GEMM's batch dims map to one template call and the loops around it. */
typedef struct gemm_shape {
  bool linear;
  int nb;              /* batch dims of the output */
  int first_inner;     /* batch dims [first_inner, nb) collapse into the call's batch */
  bool a_full[NNC_MAX_RANK], b_full[NNC_MAX_RANK];
  char M[EXPR], N[EXPR], K[EXPR];
} gemm_shape;

/* Whether operand t (rank r, two matrix dims) has out batch dim i (of nb), not broadcast. */
static bool has_batch_dim(const cs_ctx *x, int t, int i, int nb) {
  const nnc_tensor *tt = &x->g->tensors[t];
  int j = i - (nb - (tt->rank - 2));
  return j >= 0 && !nnc_dim_eq_const(tt->shape[j], 1);
}

static void gemm_shape_of(const cs_ctx *x, const nnc_kernel *k, gemm_shape *s) {
  const nnc_gemm_desc *d = &k->d.gemm;
  const nnc_graph *g = x->g;
  const nnc_tensor *a = &g->tensors[d->a], *o = &g->tensors[d->out];
  memset(s, 0, sizeof *s);
  s->linear = main_node(x, k, NNC_OP_LINEAR, NNC_OP_LINEAR) != NULL;
  dim_of(x, d->a, a->rank - 1, s->K, EXPR);
  dim_of(x, d->out, o->rank - 1, s->N, EXPR);
  if (s->linear) {
    cs_dims_product(x, d->a, 0, a->rank - 1, s->M, EXPR);
    return;
  }
  dim_of(x, d->a, a->rank - 2, s->M, EXPR);
  s->nb = o->rank - 2;
  bool b_batched = g->tensors[d->b].rank > 2;
  for (int i = 0; i < s->nb; i++) {
    s->a_full[i] = has_batch_dim(x, d->a, i, s->nb);
    s->b_full[i] = b_batched && has_batch_dim(x, d->b, i, s->nb);
  }
  s->first_inner = s->nb;
  while (s->first_inner > 0 && (s->first_inner == s->nb ||
                                (s->a_full[s->first_inner - 1] == s->a_full[s->nb - 1] &&
                                 s->b_full[s->first_inner - 1] == s->b_full[s->nb - 1])))
    s->first_inner--;
}

/* Statements filling the sizes and flags of `nnc_simd_gemm_args g` (no pointers). */
static void gemm_sizes(const cs_ctx *x, const nnc_kernel *k, const gemm_shape *s, nnc_sb *b) {
  const nnc_gemm_desc *d = &k->d.gemm;
  char batch[EXPR], lit[64];
  cs_dims_product(x, d->out, s->first_inner, s->nb, batch, sizeof batch);
  nnc_sb_printf(b, "  g.M = (int)(%s);\n  g.N = (int)(%s);\n  g.K = (int)(%s);\n  g.batch = (int)(%s);\n", s->M, s->N,
                s->K, batch);
  nnc_sb_printf(b, "  g.lda = g.K;\n  g.b_trans = %d;\n  g.ldb = %s;\n  g.ldc = g.N;\n  g.ldr = g.N;\n", d->b_trans ? 1 : 0,
                d->b_trans ? "g.K" : "g.N");
  bool af = s->nb && s->a_full[s->nb - 1], bf = s->nb && s->b_full[s->nb - 1];
  nnc_sb_printf(b, "  g.stride_a = %s;\n  g.stride_b = %s;\n  g.stride_c = (ptrdiff_t)g.M * g.N;\n  g.stride_r = g.stride_c;\n",
                af ? "(ptrdiff_t)g.M * g.K" : "0", bf ? "(ptrdiff_t)g.K * g.N" : "0");
  nnc_sb_printf(b, "  g.alpha = %s;\n  g.act = %s;\n", cs_literal(d->alpha, false, lit, sizeof lit),
                act_name(d->act, d->gelu_tanh));
  nnc_sb_printf(b, "  g.prologue = %s;\n", d->prologue == NNC_NORM_LAYER ? "NNC_SIMD_PRO_LAYERNORM"
                                          : d->prologue == NNC_NORM_RMS ? "NNC_SIMD_PRO_RMSNORM" : "NNC_SIMD_PRO_NONE");
  if (d->prologue != NNC_NORM_NONE) nnc_sb_printf(b, "  g.eps = %s;\n", cs_literal(d->norm_eps, false, lit, sizeof lit));
}

static nnc_status emit_gemm(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  const int ops[] = {d->a, d->b, d->bias, d->residual, d->out, d->norm_gamma, d->norm_beta};
  const char *roles[] = {"A", "B", "bias", "residual", "output", "gamma", "beta"};
  for (int i = 0; i < 7; i++) {
    nnc_status st = want_f32(x, k, ops[i], roles[i], err);
    if (st) return st;
  }
  gemm_shape s;
  gemm_shape_of(x, k, &s);
  nnc_sb_printf(b, "static void k%d_sizes(const %s_dims *d, nnc_simd_gemm_args *gp) {\n  nnc_simd_gemm_args g;\n"
                   "  memset(&g, 0, sizeof g);\n  (void)d;\n", ki, x->p);
  gemm_sizes(x, k, &s, b);
  nnc_sb_printf(b, "  *gp = g;\n}\n\n");
  char p[256];
  nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  nnc_simd_gemm_args g;\n  nnc_simd_error e;\n"
                   "  k%d_sizes(d, &g);\n", ki, x->p, ki);
  nnc_sb_printf(b, "  const float *A = %s;\n", cs_ptr(x, d->a, p, sizeof p));
  nnc_sb_printf(b, "  const float *B = %s;\n", cs_ptr(x, d->b, p, sizeof p));
  nnc_sb_printf(b, "  float *C = %s;\n", cs_ptr(x, d->out, p, sizeof p));
  nnc_sb_printf(b, "  const float *R = %s;\n", d->residual >= 0 ? cs_ptr(x, d->residual, p, sizeof p) : "NULL");
  if (d->bias >= 0) nnc_sb_printf(b, "  g.bias = %s;\n", cs_ptr(x, d->bias, p, sizeof p));
  if (d->norm_gamma >= 0) nnc_sb_printf(b, "  g.gamma = %s;\n", cs_ptr(x, d->norm_gamma, p, sizeof p));
  if (d->norm_beta >= 0) nnc_sb_printf(b, "  g.beta = %s;\n", cs_ptr(x, d->norm_beta, p, sizeof p));
  nnc_sb_printf(b, "  size_t need = nnc_simd_gemm_workspace_bytes(&g, c->m->par.nthreads);\n"
                   "  int rc = ensure_ws(c->m, need);\n  if (rc) return rc;\n");
  /* loops over the batch dims the call cannot stride over */
  nnc_sb off_a, off_b, off_c;
  nnc_sb_init(&off_a);
  nnc_sb_init(&off_b);
  nnc_sb_init(&off_c);
  nnc_sb_puts(&off_a, "0");
  nnc_sb_puts(&off_b, "0");
  nnc_sb_puts(&off_c, "0");
  for (int i = 0; i < s.first_inner; i++) {
    char n[EXPR], st[EXPR];
    dim_of(x, d->out, i, n, sizeof n);
    nnc_sb_printf(b, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++) {\n", 2 + 2 * i, "", i, i, n, i);
    const nnc_tensor *ta = &x->g->tensors[d->a], *tb = &x->g->tensors[d->b];
    if (s.a_full[i])
      nnc_sb_printf(&off_a, " + i%d * (%s)", i,
                    cs_dims_product(x, d->a, i - (s.nb - (ta->rank - 2)) + 1, ta->rank, st, sizeof st));
    if (s.b_full[i])
      nnc_sb_printf(&off_b, " + i%d * (%s)", i,
                    cs_dims_product(x, d->b, i - (s.nb - (tb->rank - 2)) + 1, tb->rank, st, sizeof st));
    nnc_sb_printf(&off_c, " + i%d * (%s)", i, cs_dims_product(x, d->out, i + 1, s.nb + 2, st, sizeof st));
  }
  if (off_a.oom || off_b.oom || off_c.oom) b->oom = true;
  int ind = 2 + 2 * s.first_inner;
  nnc_sb_printf(b, "%*sg.A = A + %s;\n%*sg.B = B + %s;\n%*sg.C = C + %s;\n%*sg.residual = R ? R + %s : NULL;\n", ind, "",
                off_a.buf ? off_a.buf : "0", ind, "", off_b.buf ? off_b.buf : "0", ind, "", off_c.buf ? off_c.buf : "0",
                ind, "", off_c.buf ? off_c.buf : "0");
  nnc_sb_free(&off_a);
  nnc_sb_free(&off_b);
  nnc_sb_free(&off_c);
  nnc_sb_printf(b, "%*sif (nnc_simd_gemm(&g, &c->m->par, c->m->ws, c->m->ws_size, &e)) return kernel_failed(c->m, %d, e.msg);\n",
                ind, "", ki);
  for (int i = s.first_inner - 1; i >= 0; i--) nnc_sb_printf(b, "%*s}\n", 2 + 2 * i, "");
  nnc_sb_printf(b, "  return 0;\n}\n\n");
  return NNC_OK;
}

/* ------------------------------------------------------------- attention */

static nnc_status emit_attention(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_attention_desc *a = &k->d.attn;
  const int ops[] = {a->q, a->k, a->v, a->out};
  const char *roles[] = {"query", "key", "value", "output"};
  for (int i = 0; i < 4; i++) {
    nnc_status st = want_f32(x, k, ops[i], roles[i], err);
    if (st) return st;
  }
  const nnc_tensor *q = &x->g->tensors[a->q];
  int r = q->rank;
  if (r == 2 && a->mask >= 0 && a->causal)
    return nnc_errorf(err, NNC_E_TARGET, k->loc,
                      "c-simd: attention on rank-2 scores with both a causal and a padding mask is not supported; "
                      "give q, k and v a batch dim");
  char T[EXPR], S[EXPR], D[EXPR], Dv[EXPR], batch[EXPR], heads[EXPR], lit[64], p[256];
  dim_of(x, a->q, r - 2, T, sizeof T);
  dim_of(x, a->k, r - 2, S, sizeof S);
  dim_of(x, a->q, r - 1, D, sizeof D);
  dim_of(x, a->v, r - 1, Dv, sizeof Dv);
  nnc_sb_printf(b, "static void k%d_sizes(const %s_dims *d, nnc_simd_attn_args *ap) {\n  nnc_simd_attn_args a;\n"
                   "  memset(&a, 0, sizeof a);\n  (void)d;\n", ki, x->p);
  nnc_sb_printf(b, "  a.T = (int)(%s);\n  a.S = (int)(%s);\n  a.D = (int)(%s);\n  a.Dv = (int)(%s);\n", T, S, D, Dv);
  if (r >= 3) {
    dim_of(x, a->q, 0, batch, sizeof batch);
    cs_dims_product(x, a->q, 1, r - 2, heads, sizeof heads);
    nnc_sb_printf(b, "  a.batch = (int)(%s);\n  a.heads = (int)(%s);\n", batch, heads);
    nnc_sb_printf(b,
      "  a.q_st = a.D;\n  a.q_sh = (ptrdiff_t)a.T * a.D;\n  a.q_sb = a.heads * a.q_sh;\n"
      "  a.k_st = a.D;\n  a.k_sh = (ptrdiff_t)a.S * a.D;\n  a.k_sb = a.heads * a.k_sh;\n"
      "  a.v_st = a.Dv;\n  a.v_sh = (ptrdiff_t)a.S * a.Dv;\n  a.v_sb = a.heads * a.v_sh;\n"
      "  a.o_st = a.Dv;\n  a.o_sh = (ptrdiff_t)a.T * a.Dv;\n  a.o_sb = a.heads * a.o_sh;\n");
  } else if (a->mask >= 0) {
    /* rank 2 with a mask: query row i uses mask row i, so each row is a batch of one query */
    nnc_sb_printf(b, "  a.batch = a.T;\n  a.heads = 1;\n  a.T = 1;\n"
                     "  a.q_st = a.D;\n  a.q_sb = a.D;\n  a.k_st = a.D;\n  a.v_st = a.Dv;\n  a.o_st = a.Dv;\n  a.o_sb = a.Dv;\n");
  } else {
    nnc_sb_printf(b, "  a.batch = 1;\n  a.heads = 1;\n  a.q_st = a.D;\n  a.k_st = a.D;\n  a.v_st = a.Dv;\n  a.o_st = a.Dv;\n");
  }
  nnc_sb_printf(b, "  a.scale = %s;\n  a.causal = %d;\n  a.mask_sb = a.S;\n  *ap = a;\n}\n\n",
                cs_literal(a->scale, false, lit, sizeof lit), a->causal ? 1 : 0);
  bool conv = a->mask >= 0 && x->g->tensors[a->mask].dtype != NNC_F32;
  nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  nnc_simd_attn_args a;\n  nnc_simd_error e;\n"
                   "  k%d_sizes(d, &a);\n", ki, x->p, ki);
  nnc_sb_printf(b, "  a.q = %s;\n", cs_ptr(x, a->q, p, sizeof p));
  nnc_sb_printf(b, "  a.k = %s;\n", cs_ptr(x, a->k, p, sizeof p));
  nnc_sb_printf(b, "  a.v = %s;\n", cs_ptr(x, a->v, p, sizeof p));
  nnc_sb_printf(b, "  a.out = %s;\n", cs_ptr(x, a->out, p, sizeof p));
  if (conv) {
    char me[EXPR];
    cs_elems(x, a->mask, me, sizeof me);
    nnc_sb_printf(b, "  /* the %s mask as floats, at the start of the workspace */\n"
                     "  size_t mask_bytes = ((size_t)(%s) * sizeof(float) + 63) / 64 * 64;\n"
                     "  size_t need = mask_bytes + nnc_simd_attention_workspace_bytes(&a, c->m->par.nthreads);\n"
                     "  int rc = ensure_ws(c->m, need);\n  if (rc) return rc;\n"
                     "  float *mask = c->m->ws;\n  const %s *mask_in = %s;\n"
                     "  for (int64_t i = 0; i < (int64_t)(%s); i++) mask[i] = (float)mask_in[i];\n"
                     "  a.mask = mask;\n"
                     "  if (nnc_simd_attention(&a, &c->m->par, (unsigned char *)c->m->ws + mask_bytes, c->m->ws_size - mask_bytes, &e))\n"
                     "    return kernel_failed(c->m, %d, e.msg);\n",
                  cs_ctype(x->g, a->mask), me, cs_ctype(x->g, a->mask), cs_ptr(x, a->mask, p, sizeof p), me, ki);
  } else {
    if (a->mask >= 0) nnc_sb_printf(b, "  a.mask = %s;\n", cs_ptr(x, a->mask, p, sizeof p));
    nnc_sb_printf(b, "  size_t need = nnc_simd_attention_workspace_bytes(&a, c->m->par.nthreads);\n"
                     "  int rc = ensure_ws(c->m, need);\n  if (rc) return rc;\n"
                     "  if (nnc_simd_attention(&a, &c->m->par, c->m->ws, c->m->ws_size, &e)) return kernel_failed(c->m, %d, e.msg);\n",
                  ki);
  }
  nnc_sb_printf(b, "  return 0;\n}\n\n");
  return NNC_OK;
}

void cs_emit_workspace(const cs_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  if (k->kind == NNC_KERNEL_GEMM) {
    nnc_sb_printf(b, "  {\n    nnc_simd_gemm_args g;\n    k%d_sizes(d, &g);\n"
                     "    size_t w = nnc_simd_gemm_workspace_bytes(&g, nthreads);\n    if (w > need) need = w;\n  }\n", ki);
  } else if (k->kind == NNC_KERNEL_ATTENTION) {
    char me[EXPR] = "0";
    if (k->d.attn.mask >= 0 && x->g->tensors[k->d.attn.mask].dtype != NNC_F32) cs_elems(x, k->d.attn.mask, me, sizeof me);
    nnc_sb_printf(b, "  {\n    nnc_simd_attn_args a;\n    k%d_sizes(d, &a);\n"
                     "    size_t w = ((size_t)(%s) * sizeof(float) + 63) / 64 * 64 + nnc_simd_attention_workspace_bytes(&a, nthreads);\n"
                     "    if (w > need) need = w;\n  }\n", ki, me);
  }
}

/* ------------------------------------------------------ rows and gather */

static nnc_status emit_row(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
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
  char rows[EXPR], cols[EXPR], p[256], lit[64];
  cs_dims_product(x, n->in[0], 0, t->rank - 1, rows, sizeof rows);
  cs_dims_product(x, n->in[0], t->rank - 1, t->rank, cols, sizeof cols);
  nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  nnc_simd_error e;\n  (void)d;\n", ki, x->p);
  nnc_sb_printf(b, "  const int rows = (int)(%s), cols = (int)(%s);\n", rows, cols);
  nnc_sb_printf(b, "  const float *x = %s;\n", cs_ptr(x, n->in[0], p, sizeof p));
  nnc_sb_printf(b, "  float *y = %s;\n", cs_ptr(x, n->out[0], p, sizeof p));
  if (n->op == NNC_OP_SOFTMAX) {
    nnc_sb_printf(b, "  if (nnc_simd_softmax(rows, cols, x, cols, y, cols, &c->m->par, &e))");
  } else if (n->op == NNC_OP_LAYERNORM) {
    nnc_sb_printf(b, "  const float *gamma = %s;\n", cs_ptr(x, n->in[1], p, sizeof p));
    nnc_sb_printf(b, "  const float *beta = %s;\n", cs_ptr(x, n->in[2], p, sizeof p));
    nnc_sb_printf(b, "  if (nnc_simd_layernorm(rows, cols, x, cols, gamma, beta, %s, y, cols, &c->m->par, &e))",
                  cs_literal(n->attrs.eps, false, lit, sizeof lit));
  } else {
    nnc_sb_printf(b, "  const float *gamma = %s;\n", cs_ptr(x, n->in[1], p, sizeof p));
    nnc_sb_printf(b, "  if (nnc_simd_rmsnorm(rows, cols, x, cols, gamma, %s, y, cols, &c->m->par, &e))",
                  cs_literal(n->attrs.eps, false, lit, sizeof lit));
  }
  nnc_sb_printf(b, " return kernel_failed(c->m, %d, e.msg);\n  return 0;\n}\n\n", ki);
  return NNC_OK;
}

static nnc_status emit_gather(const cs_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  nnc_status st = want_f32(x, k, n->in[0], "table", err);
  if (st) return st;
  char count[EXPR], V[EXPR], C[EXPR], p[256];
  cs_elems(x, n->in[1], count, sizeof count);
  dim_of(x, n->in[0], 0, V, sizeof V);
  dim_of(x, n->in[0], 1, C, sizeof C);
  nnc_sb_printf(b, "static int k%d(const run_ctx *c) {\n  const %s_dims *d = c->d;\n  nnc_simd_error e;\n  (void)d;\n", ki, x->p);
  nnc_sb_printf(b, "  const float *table = %s;\n", cs_ptr(x, n->in[0], p, sizeof p));
  nnc_sb_printf(b, "  const int32_t *ids = %s;\n", cs_ptr(x, n->in[1], p, sizeof p));
  nnc_sb_printf(b, "  float *y = %s;\n", cs_ptr(x, n->out[0], p, sizeof p));
  nnc_sb_printf(b, "  if (nnc_simd_embedding((int)(%s), ids, %s, %s, table, %s, y, %s, &e)) return kernel_failed(c->m, %d, e.msg);\n"
                   "  return 0;\n}\n\n", count, V, C, C, C, ki);
  return NNC_OK;
}

/* ----------------------------------------------------------------- costs */

/* Element counts as a double expression. */
static char *delems(const cs_ctx *x, int t, char *buf, size_t n) {
  char e[EXPR];
  snprintf(buf, n, "(double)(%s)", cs_elems(x, t, e, sizeof e));
  return buf;
}

static void emit_costs(const cs_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b, "/* The work of kernel k at the sizes d: flops, and the bytes it must move\n"
                   " * (each operand read once, each output written once). */\n"
                   "static void kernel_cost(int k, const %s_dims *d, double *flops, double *bytes) {\n"
                   "  (void)d;\n  switch (k) {\n", x->p);
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    if (k->kind == NNC_KERNEL_VIEW) continue;
    char e[EXPR], by[EXPR * 4] = "0";
    for (int i = 0; i < k->nin + k->nout; i++) {
      int t = i < k->nin ? k->in[i] : k->out[i - k->nin];
      size_t len = strlen(by);
      snprintf(by + len, sizeof by - len, " + %s", delems(x, t, e, sizeof e));
    }
    nnc_sb_printf(b, "  case %d:\n", ki);
    if (k->kind == NNC_KERNEL_GEMM) {
      gemm_shape s;
      gemm_shape_of(x, k, &s);
      char batch[EXPR];
      cs_dims_product(x, k->d.gemm.out, 0, s.nb, batch, sizeof batch);
      nnc_sb_printf(b, "    *flops = 2.0 * (double)(%s) * (double)(%s) * (double)(%s) * (double)(%s);\n", batch, s.M, s.N, s.K);
    } else if (k->kind == NNC_KERNEL_ATTENTION) {
      const nnc_attention_desc *a = &k->d.attn;
      int r = x->g->tensors[a->q].rank;
      char S[EXPR], D[EXPR], Dv[EXPR];
      dim_of(x, a->k, r - 2, S, sizeof S);
      dim_of(x, a->q, r - 1, D, sizeof D);
      dim_of(x, a->v, r - 1, Dv, sizeof Dv);
      nnc_sb_printf(b, "    *flops = 2.0 * %s / (double)(%s) * (double)(%s) * ((double)(%s) + (double)(%s));\n",
                    delems(x, a->q, e, sizeof e), D, S, D, Dv);
    } else {
      int t = k->kind == NNC_KERNEL_REDUCE || k->kind == NNC_KERNEL_LOSS ? k->in[0] : k->out[0];
      double per = k->kind == NNC_KERNEL_ROW ? 5.0 : k->kind == NNC_KERNEL_MOVE || k->kind == NNC_KERNEL_GATHER ? 0.0
                                                                                                                 : (double)k->nnodes;
      nnc_sb_printf(b, "    *flops = %g * %s;\n", per, delems(x, t, e, sizeof e));
    }
    nnc_sb_printf(b, "    *bytes = 4.0 * (%s);\n    return;\n", by);
  }
  nnc_sb_printf(b, "  default:\n    *flops = *bytes = 0;\n    return;\n  }\n}\n\n");
}

nnc_status cs_emit_kernels(const cs_ctx *x, nnc_sb *b, nnc_error *err) {
  nnc_sb_printf(b, "/* ---------------------------------------------------------- the kernels */\n\n");
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    char where[300], ops[600], name[300];
    cs_where(k->loc, where, sizeof where);
    cs_kernel_ops(x, ki, ops, sizeof ops);
    nnc_emit_comment(cs_kernel_name(x, ki), name, sizeof name);
    if (k->kind == NNC_KERNEL_VIEW) continue;
    nnc_sb_printf(b, "/* kernel %d, %s: %s — %s (%s) */\n", ki, nnc_kernel_kind_name(k->kind), name, ops, where);
    nnc_status st = NNC_OK;
    switch (k->kind) {
    case NNC_KERNEL_GEMM: st = emit_gemm(x, ki, b, err); break;
    case NNC_KERNEL_ATTENTION: st = emit_attention(x, ki, b, err); break;
    case NNC_KERNEL_ROW: st = emit_row(x, ki, b, err); break;
    case NNC_KERNEL_GATHER: st = emit_gather(x, ki, b, err); break;
    default: st = cs_emit_loop_kernel(x, ki, b, err); break;
    }
    if (st) return st;
  }
  emit_costs(x, b);
  return NNC_OK;
}
