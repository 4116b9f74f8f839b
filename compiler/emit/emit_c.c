/* compiler/emit/emit_c.c — the naming context and C expression helpers that
 * the emitters writing a C API share (see emit_c.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_c.h"
#include "validate.h"

const char *ec_ctype(const nnc_graph *g, int t) {
  switch (g->tensors[t].dtype) {
  case NNC_I32: return "int32_t";
  case NNC_BF16: return "__nv_bfloat16";
  case NNC_F16: return "__half";
  default: return "float";
  }
}

char *ec_where(nnc_srcloc loc, char *buf, size_t n) {
  snprintf(buf, n, "%s:%d", loc.file ? nnc_emit_basename(loc.file) : "?", loc.line);
  return buf;
}

char *ec_literal(double v, bool dbl, char *buf, size_t n) {
  if (isnan(v)) snprintf(buf, n, "NAN");
  else if (isinf(v)) snprintf(buf, n, "%sINFINITY", v < 0 ? "-" : "");
  else {
    char t[64];
    snprintf(t, sizeof t, dbl ? "%.17g" : "%.9g", v);
    bool plain = !strpbrk(t, ".e");
    snprintf(buf, n, "%s%s%s", t, plain ? ".0" : "", dbl ? "" : "f");
  }
  return buf;
}

char *ec_dims_product(const ec_ctx *x, int t, int from, int to, char *buf, size_t n) {
  const nnc_tensor *tt = &x->g->tensors[t];
  size_t len = 0;
  buf[0] = 0;
  for (int i = from; i < to && len < n; i++) {
    char e[256];
    nnc_dim d = tt->shape[i];
    if (nnc_dim_eq_const(d, 1)) continue;
    nnc_emit_dim_expr(x->g, d, "d->", e, sizeof e);
    len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " * " : "", e);
  }
  if (!len) snprintf(buf, n, "1");
  return buf;
}

char *ec_elems(const ec_ctx *x, int t, char *buf, size_t n) {
  return ec_dims_product(x, t, 0, x->g->tensors[t].rank, buf, n);
}

char *ec_ptr(const ec_ctx *x, int t, char *buf, size_t n) {
  const nnc_buffer *b = &x->s->plan.buf[t];
  if (b->storage == NNC_STORE_ALIAS && b->alias_of >= 0 && b->alias_of != t) {
    /* a view: the same memory as its root, seen with this tensor's type */
    char root[256];
    ec_ptr(x, b->alias_of, root, sizeof root);
    if (x->g->tensors[t].dtype == x->g->tensors[b->alias_of].dtype) snprintf(buf, n, "%s", root);
    else snprintf(buf, n, "(%s *)(%s)", ec_ctype(x->g, t), root);
    return buf;
  }
  if (x->device) {
    const char *ty = ec_ctype(x->g, t);
    if (x->input_of[t] >= 0) snprintf(buf, n, "c.in.%s", x->in_name[x->input_of[t]]);
    else if (x->output_of[t] >= 0 && x->g->tensors[t].dtype != NNC_BF16 && x->g->tensors[t].dtype != NNC_F16)
      snprintf(buf, n, "c.out.%s", x->out_name[x->output_of[t]]);
    /* a narrow output (--outputs=storage) is uint16_t at the API: its bits */
    else if (x->output_of[t] >= 0) snprintf(buf, n, "((%s *)c.out.%s)", ty, x->out_name[x->output_of[t]]);
    else if (x->param_of[t] >= 0) snprintf(buf, n, "(%s *)(c.weights + %lld)", ty, (long long)x->w_off[x->param_of[t]]);
    else if (b->offset == 0) snprintf(buf, n, "(%s *)c.arena", ty);
    else snprintf(buf, n, "(%s *)(c.arena + %lld)", ty, (long long)b->offset);
    return buf;
  }
  if (x->input_of[t] >= 0) snprintf(buf, n, "c->in->%s", x->in_name[x->input_of[t]]);
  else if (x->output_of[t] >= 0) snprintf(buf, n, "c->out->%s", x->out_name[x->output_of[t]]);
  else if (x->param_of[t] >= 0) snprintf(buf, n, "(%s *)c->m->w[%d]", ec_ctype(x->g, t), x->param_of[t]);
  else if (b->offset == 0) snprintf(buf, n, "(%s *)c->m->arena", ec_ctype(x->g, t));
  else snprintf(buf, n, "(%s *)(c->m->arena + %lld)", ec_ctype(x->g, t), (long long)b->offset);
  return buf;
}

char *ec_note(const ec_ctx *x, int t, char *buf, size_t n) {
  const nnc_tensor *tt = &x->g->tensors[t];
  char sh[256], name[256];
  nnc_shape_format(x->g, tt->rank, tt->shape, sh, sizeof sh);
  snprintf(buf, n, "%s %s", nnc_emit_comment(tt->name ? tt->name : "?", name, sizeof name), sh);
  return buf;
}

static bool ident_char(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool ec_names(const char *s, const char *id) {
  size_t l = strlen(id);
  for (const char *p = s ? strstr(s, id) : NULL; p; p = strstr(p + 1, id))
    if ((p == s || !ident_char(p[-1])) && !ident_char(p[l])) return true;
  return false;
}

void ec_assign(const ec_ctx *x, nnc_sb *b, int ind, const char *lhs, int t) {
  char p[256], note[600];
  nnc_sb_printf(b, "%*s%s = %s;   /* %s */\n", ind, "", lhs, ec_ptr(x, t, p, sizeof p), ec_note(x, t, note, sizeof note));
}

void ec_emit_function(const ec_ctx *x, nnc_sb *b, const char *head, const char *pre, const char *dims, nnc_sb *body) {
  nnc_sb_printf(b, "%s {\n%s", head, pre ? pre : "");
  /* "d->" after a non-identifier character: the run's dims are read */
  bool uses_d = false;
  for (const char *p = body->buf ? strstr(body->buf, "d->") : NULL; p && !uses_d; p = strstr(p + 1, "d->"))
    uses_d = p == body->buf || !ident_char(p[-1]);
  if (uses_d) nnc_sb_printf(b, "  const %s_dims *d = %s;\n", x->p, dims);
  if (body->buf) nnc_sb_puts(b, body->buf);
  if (body->oom) b->oom = true;
  nnc_sb_printf(b, "}\n\n");
  nnc_sb_free(body);
}

/* Whether e needs parentheses as a factor: it holds more than a product. */
static bool compound(const char *e) { return strstr(e, " + ") || strstr(e, " - ") || strchr(e, '/') || strchr(e, '%'); }

char *ec_mul(const char *a, const char *b, char *buf, size_t n) {
  if (strcmp(b, "1") == 0) snprintf(buf, n, compound(a) ? "(%s)" : "%s", a);
  else if (strcmp(a, "1") == 0) snprintf(buf, n, compound(b) ? "(%s)" : "%s", b);
  else snprintf(buf, n, "%s%s%s * %s%s%s", compound(a) ? "(" : "", a, compound(a) ? ")" : "", compound(b) ? "(" : "", b,
                compound(b) ? ")" : "");
  return buf;
}

char *ec_kernel_ops(const ec_ctx *x, int k, char *buf, size_t n) {
  const nnc_kernel *kk = &x->s->k[k];
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < kk->nnodes && len < n; i++) {
    const nnc_node *nd = &x->g->nodes[kk->nodes[i]];
    len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? " + " : "", nnc_op_info_of(nd->op)->name);
  }
  return buf;
}

const char *ec_kernel_name(const ec_ctx *x, int k) {
  const nnc_kernel *kk = &x->s->k[k];
  /* the node the kernel is about: the product of a GEMM, the softmax of an
   * attention, the sink of a chain, else its only node */
  const nnc_node *pick = &x->g->nodes[kk->nodes[kk->nnodes - 1]];
  for (int i = 0; i < kk->nnodes; i++) {
    const nnc_node *nd = &x->g->nodes[kk->nodes[i]];
    if ((kk->kind == NNC_KERNEL_GEMM && (nd->op == NNC_OP_LINEAR || nd->op == NNC_OP_MATMUL)) ||
        (kk->kind == NNC_KERNEL_ATTENTION && nd->op == NNC_OP_SOFTMAX))
      pick = nd;
  }
  if (kk->kind == NNC_KERNEL_ATTENTION && pick->op == NNC_OP_SOFTMAX) return "attention";
  return pick->label ? pick->label : x->g->tensors[kk->out[0]].name;
}

#define EXPR 512

static const char *float_fn(nnc_op op) {
  switch (op) {
  case NNC_OP_EXP: return "exp";
  case NNC_OP_LOG: return "log";
  case NNC_OP_SQRT: return "sqrt";
  case NNC_OP_TANH: return "tanh";
  default: return NULL;
  }
}

/* dy * act'(x) for act_grad (x is a, dy is dy), as one expression: the
 * compiler merges the repeated tanh/exp calls. */
static void act_grad_expr(const nnc_node *n, const char *a, const char *dy, bool dbl, char *buf, size_t len) {
  const char *f = dbl ? "" : "f";
  char c[64], k[64], s[300];
  switch (n->attrs.act) {
  case NNC_OP_RELU: snprintf(buf, len, "(%s > 0.0%s ? %s : 0.0%s)", a, f, dy, f); return;
  case NNC_OP_GELU:
    if (n->attrs.gelu_tanh) {
      char t[300];
      snprintf(t, sizeof t, "tanh%s(%s * (%s + 0.044715%s * %s * %s * %s))", f,
               ec_literal(0.79788456080286535588, dbl, c, sizeof c), a, f, a, a, a);
      snprintf(buf, len, "(%s * (0.5%s * (1.0%s + %s) + 0.5%s * %s * (1.0%s - %s * %s) * %s * (1.0%s + 0.134145%s * %s * %s)))",
               dy, f, f, t, f, a, f, t, t, c, f, f, a, a);
    } else {
      snprintf(buf, len, "(%s * (0.5%s * (1.0%s + erf%s(%s * %s)) + %s * %s * exp%s(-0.5%s * %s * %s)))", dy, f, f, f, a,
               ec_literal(0.70710678118654752440, dbl, c, sizeof c), a,
               ec_literal(0.39894228040143267794, dbl, k, sizeof k), f, f, a, a);
    }
    return;
  case NNC_OP_SILU:
    snprintf(s, sizeof s, "(1.0%s / (1.0%s + exp%s(-%s)))", f, f, f, a);
    snprintf(buf, len, "(%s * %s * (1.0%s + %s * (1.0%s - %s)))", dy, s, f, a, f, s);
    return;
  case NNC_OP_SIGMOID:
    snprintf(s, sizeof s, "(1.0%s / (1.0%s + exp%s(-%s)))", f, f, f, a);
    snprintf(buf, len, "(%s * %s * (1.0%s - %s))", dy, s, f, s);
    return;
  case NNC_OP_TANH:
    snprintf(buf, len, "(%s * (1.0%s - tanh%s(%s) * tanh%s(%s)))", dy, f, f, a, f, a);
    return;
  default: snprintf(buf, len, "%s", dy); return;
  }
}

void ec_node_expr(const ec_ctx *x, const nnc_node *n, const char *a, const char *bb, bool dbl, int out,
                      char *buf, size_t len) {
  const char *f = dbl ? "" : "f";
  char s[64], h[64], one[16], zero[16];
  ec_literal(n->attrs.scalar, dbl, s, sizeof s);
  snprintf(one, sizeof one, "1.0%s", f);
  snprintf(zero, sizeof zero, "0.0%s", f);
  const char *fn = float_fn(n->op);
  if (fn) {
    snprintf(buf, len, "%s%s(%s)", fn, f, a);
    return;
  }
  switch (n->op) {
  case NNC_OP_RELU: snprintf(buf, len, "(%s < %s ? %s : %s)", a, zero, zero, a); return;
  case NNC_OP_GELU:
    if (n->attrs.gelu_tanh)
      snprintf(buf, len, "(0.5%s * %s * (%s + tanh%s(%s * (%s + 0.044715%s * %s * %s * %s))))", f, a, one, f,
               ec_literal(0.79788456080286535588, dbl, h, sizeof h), a, f, a, a, a);
    else if (x->gelu_erf && !dbl && out >= 0 && x->g->tensors[out].dtype != NNC_F32) /* stored in 16 bits */
      snprintf(buf, len, "%s(%s)", x->gelu_erf, a);
    else
      snprintf(buf, len, "(0.5%s * %s * (%s + erf%s(%s * %s)))", f, a, one, f, a,
               ec_literal(0.70710678118654752440, dbl, h, sizeof h));
    return;
  case NNC_OP_SILU: snprintf(buf, len, "(%s / (%s + exp%s(-%s)))", a, one, f, a); return;
  case NNC_OP_SIGMOID: snprintf(buf, len, "(%s / (%s + exp%s(-%s)))", one, one, f, a); return;
  case NNC_OP_NEG: snprintf(buf, len, "(-%s)", a); return;
  case NNC_OP_CAST: snprintf(buf, len, "%s", a); return;
  case NNC_OP_ADD_S: snprintf(buf, len, "(%s + %s)", a, s); return;
  case NNC_OP_SUB_S: snprintf(buf, len, "(%s - %s)", a, s); return;
  case NNC_OP_RSUB_S: snprintf(buf, len, "(%s - %s)", s, a); return;
  case NNC_OP_MUL_S: snprintf(buf, len, "(%s * %s)", a, s); return;
  case NNC_OP_DIV_S: snprintf(buf, len, "(%s / %s)", a, s); return;
  case NNC_OP_RDIV_S: snprintf(buf, len, "(%s / %s)", s, a); return;
  case NNC_OP_POW_S: snprintf(buf, len, "pow%s(%s, %s)", f, a, s); return;
  case NNC_OP_ADD: snprintf(buf, len, "(%s + %s)", a, bb); return;
  case NNC_OP_SUB: snprintf(buf, len, "(%s - %s)", a, bb); return;
  case NNC_OP_MUL: snprintf(buf, len, "(%s * %s)", a, bb); return;
  case NNC_OP_DIV: snprintf(buf, len, "(%s / %s)", a, bb); return;
  case NNC_OP_CAUSAL_MASK: {
    const nnc_tensor *o = &x->g->tensors[out];
    char T[EXPR], S[EXPR];
    const char *fill = n->attrs.mask_zero ? zero : "-INFINITY";
    nnc_emit_dim_expr(x->g, o->shape[o->rank - 2], "d->", T, sizeof T);
    nnc_emit_dim_expr(x->g, o->shape[o->rank - 1], "d->", S, sizeof S);
    if (strcmp(S, T) == 0) snprintf(buf, len, "(j > i%d ? %s : %s)", o->rank - 2, fill, a);
    else snprintf(buf, len, "(j > i%d + ((%s) - (%s)) ? %s : %s)", o->rank - 2, S, T, fill, a);
    return;
  }
  case NNC_OP_PADDING_MASK:
    snprintf(buf, len, "(%s == 0 ? %s : %s)", bb, n->attrs.mask_zero ? zero : "-INFINITY", a);
    return;
  case NNC_OP_EQUAL: snprintf(buf, len, "(%s == %s ? %s : %s)", a, bb, one, zero); return;
  case NNC_OP_ACT_GRAD: act_grad_expr(n, a, bb, dbl, buf, len); return;
  default: snprintf(buf, len, "%s", a); return;
  }
}

/* The kernels take sizes as int: every dim product they see must fit. */
nnc_status ec_check_sizes(const ec_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  for (int t = 0; t < g->ntensors; t++) {
    const nnc_tensor *tt = &g->tensors[t];
    if (tt->kind == NNC_TENSOR_VALUE && (tt->producer < 0 || g->nodes[tt->producer].dead)) continue;
    int64_t n = nnc_tensor_max_elems(g, tt);
    if (n < 0 || n > INT_MAX)
      return nnc_errorf(err, NNC_E_LIMIT, tt->loc,
                        "%s: %s has %lld elements at the dims' maxima, expected at most %d (the kernels index with int)",
                        x->r->target->name, tt->name, (long long)n, INT_MAX);
  }
  return NNC_OK;
}

bool ec_kernel_is_pool(const ec_ctx *x, int ki) {
  const nnc_kernel *k = &x->s->k[ki];
  return k->kind == NNC_KERNEL_REDUCE && k->nnodes >= 2 && x->g->nodes[k->nodes[0]].op == NNC_OP_IM2COL;
}

bool ec_kernel_has_op(const ec_ctx *x, const nnc_kernel *k, nnc_op op) {
  for (int i = 0; i < k->nnodes; i++)
    if (x->g->nodes[k->nodes[i]].op == op) return true;
  return false;
}

/* How a GEMM's batch dims map to one template call and the loops around it. */

/* Whether operand t (rank r, two matrix dims) has out batch dim i (of nb), not broadcast. */
static bool has_batch_dim(const ec_ctx *x, int t, int i, int nb) {
  const nnc_tensor *tt = &x->g->tensors[t];
  int j = i - (nb - (tt->rank - 2));
  return j >= 0 && !nnc_dim_eq_const(tt->shape[j], 1);
}

void ec_gemm_shape_of(const ec_ctx *x, const nnc_kernel *k, ec_gemm_shape *s) {
  const nnc_gemm_desc *d = &k->d.gemm;
  const nnc_graph *g = x->g;
  const nnc_tensor *a = &g->tensors[d->a], *o = &g->tensors[d->out];
  memset(s, 0, sizeof *s);
  s->linear = ec_kernel_has_op(x, k, NNC_OP_LINEAR);
  /* a_trans: A is [K, M] */
  nnc_emit_dim_expr(x->g, x->g->tensors[d->a].shape[a->rank - (d->a_trans ? 2 : 1)], "d->", s->K, EXPR);
  nnc_emit_dim_expr(x->g, x->g->tensors[d->out].shape[o->rank - 1], "d->", s->N, EXPR);
  if (s->linear) {
    ec_dims_product(x, d->a, 0, a->rank - 1, s->M, EXPR);
    return;
  }
  nnc_emit_dim_expr(x->g, x->g->tensors[d->a].shape[a->rank - (d->a_trans ? 1 : 2)], "d->", s->M, EXPR);
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

/* ----------------------------------------------------------------- costs */

/* Element counts as a double expression. */
static char *delems(const ec_ctx *x, int t, char *buf, size_t n) {
  char e[EXPR];
  snprintf(buf, n, "(double)(%s)", ec_elems(x, t, e, sizeof e));
  return buf;
}

void ec_emit_costs(const ec_ctx *x, nnc_sb *out) {
  nnc_sb *b = out;
  nnc_sb_printf(b, "/* The work of kernel k at the sizes d: flops, and the bytes it must move\n"
                   " * (each operand read once, each output written once, at its element size). */\n"
                   "static void kernel_cost(int k, const %s_dims *d, double *flops, double *bytes) {\n", x->p);
  nnc_sb cases;
  nnc_sb_init(&cases);
  b = &cases;
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    if (k->kind == NNC_KERNEL_VIEW) continue;
    char e[EXPR], by[EXPR * 4] = "";
    size_t line = 0;   /* characters on the current line of the sum, which wraps at about 100 */
    /* A gather reads only the rows it copies, a move only what it writes:
     * count their outputs twice (read and written) instead of the whole
     * table or source. A scan reads all of its inputs (x or xw, weights). */
    bool partial = k->kind == NNC_KERNEL_GATHER || (k->kind == NNC_KERNEL_MOVE && !nnc_kernel_scan(x->g, k, NULL, NULL));
    int skip = k->kind == NNC_KERNEL_GATHER ? x->g->nodes[k->nodes[0]].in[0] : -1;
    for (int i = 0; i < k->nin + k->nout * (partial ? 2 : 1); i++) {
      int t = i < k->nin ? k->in[i] : k->out[(i - k->nin) % k->nout];
      if (i < k->nin && partial && (k->kind == NNC_KERNEL_MOVE || t == skip)) continue;
      size_t len = strlen(by);
      char te[EXPR - 16];
      /* an e4m3 weight (--precision=fp8) or a GPU's int8 or int4 one is read as its bytes */
      const nnc_tensor *tt = &x->g->tensors[t];
      /* an embedding's table read inside an elementwise loop (or a row kernel's chain): the rows it reads,
       * one an output row, of its values (a tied fp8 weight's bf16 ones, not its e4m3 copy) */
      bool rows_read = i < k->nin && (k->kind == NNC_KERNEL_ELEMENTWISE || k->kind == NNC_KERNEL_ROW) &&
                       nnc_kernel_looks_up(x->g, k, t);
      double esize = rows_read ? nnc_dtype_size(tt->dtype) : ec_held_value_bytes(x, tt);
      snprintf(e, sizeof e, "%.1f * %s", esize, delems(x, rows_read ? k->out[0] : t, te, sizeof te));
      bool wrap = len && line + strlen(e) > 76;
      snprintf(by + len, sizeof by - len, "%s%s", !len ? "" : wrap ? " +\n                  " : " + ", e);
      line = (wrap ? 0 : line + 3) + strlen(e);
    }
    nnc_sb_printf(b, "  case %d:\n", ki);
    if (k->kind == NNC_KERNEL_GEMM) {
      ec_gemm_shape s;
      ec_gemm_shape_of(x, k, &s);
      char batch[EXPR], bt[EXPR + 16] = "";
      ec_dims_product(x, k->d.gemm.out, 0, s.nb, batch, sizeof batch);
      if (strcmp(batch, "1") != 0) snprintf(bt, sizeof bt, " * (double)(%s)", batch);
      nnc_sb_printf(b, "    *flops = 2.0%s * (double)(%s) * (double)(%s) * (double)(%s);\n", bt, s.M, s.N, s.K);
    } else if (k->kind == NNC_KERNEL_ATTENTION || k->kind == NNC_KERNEL_ATTENTION_GRAD) {
      /* the backward's useful work is five products of the forward's two */
      const char *mul = k->kind == NNC_KERNEL_ATTENTION ? "2.0" : "5.0";
      const nnc_attention_desc *a = ec_attn_desc(k);
      int r = x->g->tensors[a->q].rank;
      char S[EXPR], D[EXPR], Dv[EXPR];
      nnc_emit_dim_expr(x->g, x->g->tensors[a->k].shape[r - 2], "d->", S, sizeof S);
      nnc_emit_dim_expr(x->g, x->g->tensors[a->q].shape[r - 1], "d->", D, sizeof D);
      nnc_emit_dim_expr(x->g, x->g->tensors[a->v].shape[r - 1], "d->", Dv, sizeof Dv);
      if (a->causal) {
        /* query i sees i + 1 + S - T keys: T*S - T*(T-1)/2 pairs a head */
        char T[EXPR];
        nnc_emit_dim_expr(x->g, x->g->tensors[a->q].shape[r - 2], "d->", T, sizeof T);
        nnc_sb_printf(b, "    *flops = %s * %s / (double)(%s) / (double)(%s) *\n"
                         "             ((double)(%s) * (double)(%s) - (double)(%s) * ((double)(%s) - 1) / 2) *\n"
                         "             ((double)(%s) + (double)(%s));\n",
                      mul, delems(x, a->q, e, sizeof e), D, T, T, S, T, T, D, Dv);
      } else {
        nnc_sb_printf(b, "    *flops = %s * %s / (double)(%s) * (double)(%s) * ((double)(%s) + (double)(%s));\n",
                      mul, delems(x, a->q, e, sizeof e), D, S, D, Dv);
      }
    } else if (nnc_kernel_scan(x->g, k, NULL, NULL)) {
      /* each step's product: every step's gates times K (H, or H + F when it took its input's linear) */
      int64_t K;
      const nnc_node *n = nnc_kernel_scan(x->g, k, NULL, &K);
      nnc_sb_printf(b, "    *flops = 2.0 * %lld * %s;\n", (long long)K, delems(x, n->in[0], e, sizeof e));
    } else {
      int t = k->kind == NNC_KERNEL_REDUCE || k->kind == NNC_KERNEL_LOSS ? k->in[0] : k->out[0];
      double per = k->kind == NNC_KERNEL_ROW ? 5.0 : k->kind == NNC_KERNEL_MOVE || k->kind == NNC_KERNEL_GATHER ? 0.0
                                                                                                                 : (double)k->nnodes;
      if (per == 0) nnc_sb_printf(b, "    *flops = 0;\n");
      else nnc_sb_printf(b, "    *flops = %g * %s;\n", per, delems(x, t, e, sizeof e));
    }
    nnc_sb_printf(b, "    *bytes = %s;\n    return;\n", by[0] ? by : "0");
  }
  b = out;
  if (!ec_names(cases.buf, "d")) nnc_sb_printf(b, "  (void)d;   /* every size is a constant */\n");
  nnc_sb_printf(b, "  switch (k) {\n");
  if (cases.buf) nnc_sb_puts(b, cases.buf);
  if (cases.oom) b->oom = true;
  nnc_sb_free(&cases);
  nnc_sb_printf(b, "  default:\n    *flops = *bytes = 0;\n    return;\n  }\n}\n\n");
}

void ec_operand_stride(const ec_ctx *x, int t, int out, int od, char *buf, size_t n) {
  const nnc_tensor *tt = &x->g->tensors[t], *o = &x->g->tensors[out];
  int j = od - (o->rank - tt->rank);
  buf[0] = 0;
  if (j < 0 || nnc_dim_eq_const(tt->shape[j], 1)) return;
  ec_dims_product(x, t, j + 1, tt->rank, buf, n);
}

void ec_emit_dims_at_max(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b, "  const %s_dims dd = {", x->p);
  for (int i = 0; i < x->g->nsyms; i++) nnc_sb_printf(b, "%s.%s = max[%d]", i ? ", " : "", x->sym[i], i);
  nnc_sb_printf(b, "%s}, *d = &dd;\n", x->g->nsyms ? "" : "0");
}

void ec_emit_workspace_need(const ec_ctx *x, nnc_sb *b, void (*workspace)(const ec_ctx *, int, nnc_sb *),
                            const char *what, const char *params, const char *none) {
  nnc_sb ws;
  nnc_sb_init(&ws);
  for (int k = 0; k < x->s->nk; k++) workspace(x, k, &ws);
  nnc_sb_printf(b, "/* %s */\nstatic size_t workspace_need(%s) {\n", what, params);
  if (!ws.buf) {
    nnc_sb_printf(b, "%s  return 0;\n}\n\n", none);
  } else {
    ec_emit_dims_at_max(x, b);
    if (!x->g->nsyms) nnc_sb_printf(b, "  (void)max;   /* the model has no symbolic dims */\n");
    nnc_sb_printf(b, "  size_t need = 0;\n%s  return need;\n}\n\n", ws.buf);
  }
  if (ws.oom) b->oom = true;
  nnc_sb_free(&ws);
}

/* `static size_t arena_need(const int64_t *max)`: the arena bytes for the
 * maxima max. */
void ec_emit_arena_need(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  /* arena bytes at given maxima: offsets are planned at the compiled maxima,
   * so the arena ends where the last tensor ends at these sizes */
  nnc_sb ends;
  nnc_sb_init(&ends);
  for (int t = 0; t < g->ntensors; t++) {
    const nnc_buffer *bf = &x->s->plan.buf[t];
    if (bf->storage != NNC_STORE_ARENA) continue;
    char e[512], line[700], note[600];
    char off[32] = "";
    if (bf->offset) snprintf(off, sizeof off, "%lld + ", (long long)bf->offset);
    snprintf(line, sizeof line, "    %s(size_t)(%s) * %d,", off, ec_elems(x, t, e, sizeof e),
             nnc_dtype_size(x->g->tensors[t].dtype));
    /* tensors that share an offset and a size end at the same place: one line for them */
    if (ends.buf && strstr(ends.buf, line)) continue;
    nnc_sb_printf(&ends, "%s   /* %s */\n", line, ec_note(x, t, note, sizeof note));
  }
  nnc_sb_printf(b, "/* Bytes of the arena for the maxima max: each tensor at its planned offset\n"
                   " * with its size at these maxima. */\n"
                   "static size_t arena_need(const int64_t *max) {\n");
  if (!ends.buf) {
    nnc_sb_printf(b, "  (void)max;   /* nothing lives in the arena */\n  return 64;\n}\n\n");
  } else {
    if (ec_names(ends.buf, "d")) {
      ec_emit_dims_at_max(x, b);
    } else {
      nnc_sb_printf(b, "  (void)max;   /* every size is a constant */\n");
    }
    nnc_sb_printf(b, "  const size_t ends[] = {\n%s  };\n  size_t need = 64;\n"
                     "  for (size_t i = 0; i < sizeof ends / sizeof *ends; i++)\n"
                     "    if (ends[i] > need) need = ends[i];\n  return need;\n}\n\n", ends.buf);
  }
  if (ends.oom) b->oom = true;
  nnc_sb_free(&ends);
}

nnc_status ec_write_manifest(const ec_ctx *x, const char *dir, nnc_error *err) {
  const nnc_graph *g = x->g;
  nnc_sb b;
  nnc_sb_init(&b);
  nnc_sb_printf(&b, "{\n  \"model\": \"%s\",\n  \"note\": \"F32 weights may also be given as F16 or BF16; they are converted to f32\",\n"
                    "  \"tensors\": [\n", x->p);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    nnc_sb_printf(&b, "    {\"name\": \"");
    for (const char *c = t->name; *c; c++) {
      if (*c == '"' || *c == '\\') nnc_sb_printf(&b, "\\%c", *c);
      else if ((unsigned char)*c < 32) nnc_sb_printf(&b, "\\u%04x", *c);
      else nnc_sb_printf(&b, "%c", *c);
    }
    nnc_sb_printf(&b, "\", \"dtype\": \"%s\", \"shape\": [", t->dtype == NNC_I32 ? "I32" : "F32");
    for (int d = 0; d < t->rank; d++) nnc_sb_printf(&b, "%s%lld", d ? ", " : "", (long long)ec_file_dim(t, d));
    nnc_sb_printf(&b, "]}%s\n", i + 1 < g->nparams ? "," : "");
  }
  nnc_sb_printf(&b, "  ]\n}\n");
  nnc_status st = nnc_emit_write_sb(dir, "weights_manifest.json", &b, err);
  nnc_sb_free(&b);
  return st;
}

/* `static int check_run(m, d, in, out)`: NULL arguments, weights not all
 * loaded, dims outside 1..the created maxima, NULL buffers; each a code and
 * a message through fail(). */
void ec_emit_check_run(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "static int check_run(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out) {\n"
    "  if (!d || !in || !out)\n"
    "    return fail(m, %s_E_ARG, \"%s_run: %%s is NULL\", !d ? \"dims\" : !in ? \"inputs\" : \"outputs\");\n"
    "  if (m->nloaded < NPARAMS) {\n"
    "    for (int i = 0; i < NPARAMS; i++)\n"
    "      if (!m->loaded[i])\n"
    "        return fail(m, %s_E_STATE, \"%s_run: the weights are not loaded (%%d of %%d missing, the first %%s): \"\n"
    "                    \"call %s_load_weights_file, _memory or %s_set_weight first\", NPARAMS - m->nloaded, NPARAMS, manifest[i].name);\n"
    "  }\n",
    p, p, p, p, P, p, P, p, p, p);
  if (g->nsyms) {
    nnc_sb_printf(b, "  const int64_t v[%d] = {", g->nsyms);
    for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(b, "%sd->%s", i ? ", " : "", x->sym[i]);
    nnc_sb_printf(b, "};\n"
      "  for (int i = 0; i < NSYMS; i++)\n"
      "    if (v[i] < 1 || v[i] > m->max[i])\n"
      "      return fail(m, %s_E_SIZE, \"%s_run: %%s = %%lld: expected 1 to %%lld (the maximum the model was created for)\",\n"
      "                  sym_names[i], (long long)v[i], (long long)m->max[i]);\n", P, p);
  }
  /* a kv cache holds the S keys a call attends to, this call's T among them */
  nnc_sb kv;
  nnc_sb_init(&kv);
  for (int n = 0; n < g->nnodes; n++) {
    const nnc_node *nd = &g->nodes[n];
    if (nd->dead || nd->op != NNC_OP_KV_APPEND) continue;
    const nnc_tensor *xt = &g->tensors[nd->in[1]];
    char S[256], T[256], line[2048];
    nnc_emit_dim_expr(g, nd->attrs.stop, "d->", S, sizeof S);
    nnc_emit_dim_expr(g, xt->shape[xt->rank - 2], "d->", T, sizeof T);
    snprintf(line, sizeof line,
             "  if (%s < %s)\n    return fail(m, %s_E_SIZE, \"%s_run: %s = %%lld: expected at least %s = %%lld (the cache holds "
             "this call's keys too)\", (long long)%s, (long long)%s);\n", S, T, P, p, S + 3, T + 3, S, T);
    if (!kv.buf || !strstr(kv.buf, line)) nnc_sb_puts(&kv, line);
  }
  if (kv.buf) nnc_sb_puts(b, kv.buf);
  if (kv.oom) b->oom = true;
  nnc_sb_free(&kv);
  for (int i = 0; i < g->ninputs; i++)
    nnc_sb_printf(b, "  if (!in->%s) return fail(m, %s_E_ARG, \"%s_run: input %s is NULL\");\n", x->in_name[i], P, p,
                  x->in_name[i]);
  for (int i = 0; i < g->noutputs; i++)
    nnc_sb_printf(b, "  if (!out->%s) return fail(m, %s_E_ARG, \"%s_run: output %s is NULL\");\n", x->out_name[i], P,
                  p, x->out_name[i]);
  nnc_sb_printf(b, "  return 0;\n}\n\n");
}

/* <p>_load_weights_file and _memory: open the safetensors file or image and
 * hand it to the model's load(m, st, &e). */
void ec_emit_load_files(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "int %s_load_weights_file(%s_model *m, const char *path) {\n"
    "  if (!m) return %s_E_ARG;\n"
    "  m->err[0] = 0;\n"
    "  if (!path) return fail(m, %s_E_ARG, \"%s_load_weights_file: path is NULL\");\n"
    "  nnrt_st *st = NULL;\n  nnrt_error e;\n  memset(&e, 0, sizeof e);\n"
    "  int rc = nnrt_st_open(path, &st, &e);\n"
    "  if (rc) return fail(m, rc, \"%%s\", e.msg);\n"
    "  rc = load(m, st, &e);\n  nnrt_st_close(st);\n  return rc;\n}\n\n"
    "int %s_load_weights_memory(%s_model *m, const void *data, size_t size) {\n"
    "  if (!m) return %s_E_ARG;\n"
    "  m->err[0] = 0;\n"
    "  if (!data) return fail(m, %s_E_ARG, \"%s_load_weights_memory: data is NULL\");\n"
    "  nnrt_st *st = NULL;\n  nnrt_error e;\n  memset(&e, 0, sizeof e);\n"
    "  int rc = nnrt_st_open_memory(data, size, \"<memory>\", &st, &e);\n"
    "  if (rc) return fail(m, rc, \"%%s\", e.msg);\n"
    "  rc = load(m, st, &e);\n  nnrt_st_close(st);\n  return rc;\n}\n\n",
    p, p, P, P, p, p, p, P, P, p);
}

bool ec_attn_view(const ec_ctx *x, const nnc_kernel *k, int i, ec_attn_strides *out) {
  const nnc_attn_view *v = i < 4 ? &ec_attn_desc(k)->view[i] : &k->d.attn_grad.view[i - 4];
  if (!v->on) return false;
  out->base = v->base;
  nnc_emit_dim_expr(x->g, v->offset, "d->", out->off, sizeof out->off);
  nnc_emit_dim_expr(x->g, v->sb, "d->", out->sb, sizeof out->sb);
  nnc_emit_dim_expr(x->g, v->sh, "d->", out->sh, sizeof out->sh);
  nnc_emit_dim_expr(x->g, v->si, "d->", out->si, sizeof out->si);
  return true;
}

void ec_attn_emit_views(const ec_ctx *x, const nnc_kernel *k, const char *arg, const char *cast, nnc_sb *b) {
  static const char *what[8] = {"q read", "k read", "v read", "out written", "dout read", "dq written", "dk written",
                                "dv written"};
  ec_attn_operand o[8];
  int n = ec_attn_operands(k, o);
  for (int i = 0; i < n; i++) {
    ec_attn_strides v;
    if (!ec_attn_view(x, k, i, &v)) continue;
    char p[256], note[600];
    /* the backward reads out where the forward wrote it */
    const char *w = k->kind == NNC_KERNEL_ATTENTION_GRAD && i == NNC_ATTN_OUT ? "out read" : what[i];
    nnc_sb_printf(b, "  /* %s in place: %s */\n", w, ec_note(x, v.base, note, sizeof note));
    nnc_sb_printf(b, "  %s%s = %s%s%s%s;\n", arg, o[i].ptr, cast ? cast : "", ec_ptr(x, v.base, p, sizeof p),
                  strcmp(v.off, "0") ? " + " : "", strcmp(v.off, "0") ? v.off : "");
    nnc_sb_printf(b, "  %s%s_sb = %s;\n  %s%s_sh = %s;\n  %s%s_st = %s;\n", arg, o[i].strides, v.sb, arg,
                  o[i].strides, v.sh, arg, o[i].strides, v.si);
  }
}

/* Unique C names for a list of model names. */
static void name_all(char (*out)[64], int n, const char *(*get)(const nnc_graph *, int), const nnc_graph *g) {
  for (int i = 0; i < n; i++) {
    nnc_emit_c_ident(get(g, i), out[i], 56);
    for (int j = 0; j < i; j++)
      if (strcmp(out[i], out[j]) == 0) {
        size_t l = strlen(out[i]);
        snprintf(out[i] + l, 64 - l, "_%d", i);
        break;
      }
  }
}

static const char *sym_name(const nnc_graph *g, int i) { return g->syms[i].name; }
static const char *input_name(const nnc_graph *g, int i) { return g->tensors[g->inputs[i]].name; }
static const char *output_name(const nnc_graph *g, int i) { return g->outputs[i].name; }

void ec_ctx_free(ec_ctx *x) {
  free(x->sym); free(x->in_name); free(x->out_name);
  free(x->param_of); free(x->input_of); free(x->output_of);
  free(x->w_off);
  free(x->packed_b);
}

nnc_status ec_ctx_init(ec_ctx *x, const nnc_emit_request *r, nnc_error *err) {
  memset(x, 0, sizeof *x);
  x->r = r;
  x->s = r->s;
  x->g = r->s->g;
  const nnc_graph *g = x->g;
  const int tp = g->ranks > 1 ? g->ranks : 1;
  x->dp = r->dp > 1 ? r->dp : 1;
  x->world = tp * x->dp;
  x->zero1 = r->zero1 && x->world > 1;
  const bool both = tp > 1 && x->dp > 1;
  x->tpc = tp > 1 ? both ? "tp_comm" : "comm" : NULL;
  x->dpc = x->dp > 1 ? both ? "dp_comm" : "comm" : NULL;
  if (both) snprintf(x->plan, sizeof x->plan, "tp:%d,dp:%d", tp, x->dp);
  else snprintf(x->plan, sizeof x->plan, "%s:%d", tp > 1 ? "tp" : "dp", x->world);
  nnc_emit_c_ident(g->name && g->name[0] ? g->name : "model", x->p, 40);
  for (size_t i = 0; i <= strlen(x->p); i++)
    x->P[i] = (char)(x->p[i] >= 'a' && x->p[i] <= 'z' ? x->p[i] - 'a' + 'A' : x->p[i]);
  size_t nt = (size_t)(g->ntensors ? g->ntensors : 1);
  x->sym = calloc((size_t)g->nsyms + 1, sizeof *x->sym);
  x->in_name = calloc((size_t)g->ninputs + 1, sizeof *x->in_name);
  x->out_name = calloc((size_t)g->noutputs + 1, sizeof *x->out_name);
  x->param_of = malloc(nt * sizeof *x->param_of);
  x->input_of = malloc(nt * sizeof *x->input_of);
  x->output_of = malloc(nt * sizeof *x->output_of);
  if (!x->sym || !x->in_name || !x->out_name || !x->param_of || !x->input_of || !x->output_of) {
    ec_ctx_free(x);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  }
  for (size_t t = 0; t < nt; t++) x->param_of[t] = x->input_of[t] = x->output_of[t] = -1;
  for (int i = 0; i < g->nparams; i++) x->param_of[g->params[i]] = i;
  for (int i = 0; i < g->ninputs; i++) x->input_of[g->inputs[i]] = i;
  for (int i = g->noutputs - 1; i >= 0; i--) x->output_of[g->outputs[i].tensor] = i;
  name_all(x->sym, g->nsyms, sym_name, g);
  name_all(x->in_name, g->ninputs, input_name, g);
  name_all(x->out_name, g->noutputs, output_name, g);
  return NNC_OK;
}

nnc_status ec_validate_c(const ec_ctx *x, const char *dir, bool bench, nnc_error *err) {
  char src[96];
  snprintf(src, sizeof src, "%s_graph.c", x->p);
  nnc_status st = nnc_validate_file(dir, src, NNC_LANG_C11, err);
  snprintf(src, sizeof src, "bench_%s.c", x->p);
  if (!st && bench) st = nnc_validate_file(dir, src, NNC_LANG_C11, err);
  return st;
}

const char *ec_view_note(const nnc_kernel *k) {
  return nnc_kernel_is_joined_view(k) ? "its weights are loaded one after the other: the joined weight is theirs, nothing to copy"
                                      : "a view: it aliases its input, nothing to run";
}

static int64_t pad256(int64_t v) { return (v + 255) / 256 * 256; }

ec_fp8_held ec_fp8_held_of(const nnc_tensor *t) {
  ec_fp8_held h;
  const bool int4 = t->quant.kind == NNC_QUANT_INT4_GROUP;
  h.n = t->shape[t->quant.axis].k;
  h.k = t->shape[1 - t->quant.axis].k;
  h.groups = int4 ? (h.k + t->quant.group - 1) / t->quant.group : 1;
  h.q = t->quant.tied ? pad256(h.n * h.k * nnc_dtype_size(t->dtype)) : 0;
  h.scales = h.q + pad256(int4 ? h.n * ((h.k + 1) / 2) : h.n * h.k);
  h.fixed = h.scales + h.n * h.groups * 4;
  h.smooth = t->quant.kind == NNC_QUANT_INT8_CHANNEL && t->quant.a8 ? (h.fixed + 4 + 15) / 16 * 16 : 0;
  h.bytes = h.smooth ? h.smooth + 16 + h.k * 4 : h.fixed + 4;
  return h;
}

double ec_held_value_bytes(const ec_ctx *x, const nnc_tensor *t) {
  if (t->quant.kind == NNC_QUANT_FP8_CHANNEL || (x->device && t->quant.kind == NNC_QUANT_INT8_CHANNEL)) return 1.0;
  if (x->device && t->quant.kind == NNC_QUANT_INT4_GROUP) return 0.5;
  return nnc_dtype_size(t->dtype);
}

int64_t ec_held_bytes(const nnc_graph *g, const nnc_tensor *t) {
  /* a device target's int8 and int4 weights are held as fp8's e4m3 ones are */
  if (t->quant.kind != NNC_QUANT_NONE) return ec_fp8_held_of(t).bytes;
  return nnc_tensor_max_elems(g, t) * nnc_dtype_size(t->dtype);
}

bool ec_saves_quantized(const ec_ctx *x) {
  for (int i = 0; x->world <= 1 && i < x->g->nparams; i++) {
    nnc_quant_kind q = x->g->tensors[x->g->params[i]].quant.kind;
    if (q == NNC_QUANT_INT8_CHANNEL || q == NNC_QUANT_INT4_GROUP) return true;
  }
  return false;
}

void ec_save_quantized_decl(const ec_ctx *x, const char *mode, int bits, nnc_sb *b) {
  nnc_sb_printf(b,
    "/* --quantize=%s: writes the weights as the model holds them to a\n"
    " * safetensors file at path (a quantized checkpoint: each quantized weight\n"
    " * as its %s values <name> and scales <name>.scale, the mode in the\n"
    " * header's metadata; see support/nnc_weights_quant.h). %s_load_weights_file\n"
    " * loads such a file as it was saved, without an f32 checkpoint, as well as\n"
    " * an f32 one (quantized as it loads); a file of another mode is refused.\n"
    " * Every weight must be loaded or set first. */\n"
    "int %s_save_quantized(%s_model *m, const char *path);\n\n",
    mode, bits == 4 ? "packed int4" : "int8", x->p, x->p, x->p);
}

void ec_save_quantized_head(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p, *P = x->P;
  nnc_sb_printf(b,
    "int %s_save_quantized(%s_model *m, const char *path) {\n"
    "  if (!m) return %s_E_ARG;\n"
    "  m->err[0] = 0;\n"
    "  if (!path) return fail(m, %s_E_ARG, \"%s_save_quantized: path is NULL\");\n"
    "  if (m->nloaded < NPARAMS)\n"
    "    return fail(m, %s_E_STATE, \"%s_save_quantized: expected every weight loaded, found %%d of %%d\", m->nloaded,\n"
    "                NPARAMS);\n", p, p, P, P, p, P, p);
}

nnc_status ec_layout_weights(ec_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  x->w_off = malloc((size_t)(g->nparams + 1) * sizeof *x->w_off);
  if (!x->w_off) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  int *order = malloc((size_t)(g->nparams + 1) * sizeof *order);
  if (!order) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  nnc_status st = nnc_weight_order(x->s, order, err);
  int64_t off = 0;
  for (int j = 0; !st && j < g->nparams; j++) {
    int i = order[j];
    const nnc_tensor *t = &g->tensors[g->params[i]];
    x->w_off[i] = off;
    off += (ec_held_bytes(g, t) + 255) / 256 * 256;
  }
  free(order);
  x->w_off[g->nparams] = off;
  return st;
}

const nnc_attention_desc *ec_attn_desc(const nnc_kernel *k) {
  return k->kind == NNC_KERNEL_ATTENTION_GRAD ? &k->d.attn_grad.fwd : &k->d.attn;
}

bool ec_attn_grouped(const nnc_graph *g, const nnc_attention_desc *a) {
  const nnc_tensor *q = &g->tensors[a->q], *k = &g->tensors[a->k], *v = &g->tensors[a->v];
  int r = q->rank;
  return r >= 4 && nnc_dim_eq_const(k->shape[r - 3], 1) && nnc_dim_eq_const(v->shape[r - 3], 1) &&
         !nnc_dim_eq_const(q->shape[r - 3], 1);
}

void ec_emit_profile(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b,
    "int %s_profile(%s_model *m, int on) {\n"
    "  if (!m) return %s_E_ARG;\n"
    "  m->profile = on != 0;\n"
    "  memset(m->ns, 0, sizeof m->ns);\n"
    "  return 0;\n}\n\n",
    x->p, x->p, x->P);
}

void ec_emit_kernel_info(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  nnc_sb_printf(b,
    "int %s_kernel_count(void) { return NKERNELS; }\n\n"
    "int %s_kernel_info_at(const %s_model *m, int i, %s_kernel_info *out) {\n"
    "  if (!m || !out || i < 0 || i >= NKERNELS) return %s_E_ARG;\n"
    "  out->name = kernel_table[i].name;\n"
    "  out->where = kernel_table[i].where;\n"
    "  out->kind = kernel_table[i].kind;\n"
    "  out->ops = kernel_table[i].ops;\n"
    "  out->ns = m->ns[i];\n"
    "  out->flops = out->bytes = 0;\n"
    "  if (m->has_run) kernel_cost(i, &m->last, &out->flops, &out->bytes);\n"
    "  return 0;\n}\n\n",
    p, p, p, p, x->P);
}

void ec_emit_comm_stats(const ec_ctx *x, nnc_sb *b) {
  if (x->world <= 1) return;
  if (x->tpc && x->dpc)
    nnc_sb_printf(b,
      "\n/* the collectives of both groups this rank belongs to */\n"
      "int %s_comm_stats(const %s_model *m, uint64_t *bytes, double *bus_bytes, double *wait_s) {\n"
      "  if (!m || !bytes || !bus_bytes || !wait_s) return %s_E_ARG;\n"
      "  *bytes = m->tp_comm->bytes + m->dp_comm->bytes;\n"
      "  *bus_bytes = m->tp_comm->bus_bytes + m->dp_comm->bus_bytes;\n"
      "  *wait_s = m->tp_comm->wait_s + m->dp_comm->wait_s;\n  return 0;\n}\n",
      x->p, x->p, x->P);
  else
    nnc_sb_printf(b,
      "\nint %s_comm_stats(const %s_model *m, uint64_t *bytes, double *bus_bytes, double *wait_s) {\n"
      "  if (!m || !bytes || !bus_bytes || !wait_s) return %s_E_ARG;\n"
      "  *bytes = m->comm->bytes;\n  *bus_bytes = m->comm->bus_bytes;\n  *wait_s = m->comm->wait_s;\n  return 0;\n}\n",
      x->p, x->p, x->P);
}

const char *ec_tp_rank_line(const ec_ctx *x) {
  if (!x->tpc) return "";
  return x->dpc ? "  c.rank = m->tp_comm->rank;\n" : "  c.rank = m->comm->rank;\n";
}

void ec_emit_comm_fields(const ec_ctx *x, nnc_sb *b, int width) {
  if (x->tpc && x->dpc)
    nnc_sb_printf(b, "  %-*s/* this rank's tp group (%d ranks): the split weights' collectives */\n"
                     "  %-*s/* its dp group (%d ranks): the gradients' sums, the loss's mean */\n",
                  width, "nnrt_comm *tp_comm;", x->world / x->dp, width, "nnrt_comm *dp_comm;", x->dp);
}

void ec_emit_comm_split(const ec_ctx *x, nnc_sb *b) {
  if (!x->tpc || !x->dpc) return;
  const int n = x->world / x->dp;
  nnc_sb_printf(b,
    "  /* --parallel=%s: rank = dp index * %d + tp index, as Megatron lays them\n"
    "   * out: a tp group's %d ranks are consecutive (one machine under mpirun's\n"
    "   * usual placement), a dp group holds every %d-th rank */\n"
    "  if (!rc) rc = nnrt_comm_split(m->comm, m->comm->rank / %d, m->comm->rank %% %d, &m->tp_comm, &e);\n"
    "  if (!rc) rc = nnrt_comm_split(m->comm, m->comm->rank %% %d, m->comm->rank / %d, &m->dp_comm, &e);\n",
    x->plan, n, n, n, n, n, n, n);
}

void ec_emit_comm_destroy(const ec_ctx *x, nnc_sb *b) {
  if (x->world <= 1) return;
  if (x->tpc && x->dpc) nnc_sb_printf(b, "  nnrt_comm_destroy(m->tp_comm);\n  nnrt_comm_destroy(m->dp_comm);\n");
  nnc_sb_printf(b, "  if (m->own_comm) nnrt_comm_destroy(m->comm);\n");
}

int ec_attn_operands(const nnc_kernel *k, ec_attn_operand *o) {
  const nnc_attention_desc *a = ec_attn_desc(k);
  int n = 0;
  o[n++] = (ec_attn_operand){"q", "q", a->q, false, false};
  o[n++] = (ec_attn_operand){"k", "k", a->k, true, false};
  o[n++] = (ec_attn_operand){"v", "v", a->v, true, true};
  o[n++] = (ec_attn_operand){"o", "out", a->out, false, true};
  if (k->kind == NNC_KERNEL_ATTENTION_GRAD) {
    const nnc_attention_grad_desc *g = &k->d.attn_grad;
    o[n++] = (ec_attn_operand){"do", "dout", g->dout, false, true};
    o[n++] = (ec_attn_operand){"dq", "dq", g->dq, false, false};
    o[n++] = (ec_attn_operand){"dk", "dk", g->dk, true, false};
    o[n++] = (ec_attn_operand){"dv", "dv", g->dv, true, true};
  }
  return n;
}

char *ec_loop_ld(const ec_ctx *x, int t, const char *name, const char *idx, char *buf, size_t n) {
  if (x->loop_load) x->loop_load(x, t, name, idx, buf, n);
  else snprintf(buf, n, "nnc_ld(%s[%s])", name, idx);
  return buf;
}

char *ec_loop_st(const ec_ctx *x, int t, const char *name, const char *idx, const char *v, char *buf, size_t n) {
  if (x->loop_store) x->loop_store(x, t, name, idx, v, buf, n);
  else snprintf(buf, n, "nnc_st(&%s[%s], %s)", name, idx, v);
  return buf;
}
