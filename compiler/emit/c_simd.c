/* compiler/emit/c_simd.c — the C SIMD emitter: checks that the schedule fits
 * the target (f32 math, sizes that fit the kernels' int arguments), names
 * everything the API shows, and writes the output folder. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_simd.h"
#include "embedded.h"
#include "emit_targets.h"

const char *cs_ctype(const nnc_graph *g, int t) { return g->tensors[t].dtype == NNC_I32 ? "int32_t" : "float"; }

char *cs_where(nnc_srcloc loc, char *buf, size_t n) {
  snprintf(buf, n, "%s:%d", loc.file ? nnc_emit_basename(loc.file) : "?", loc.line);
  return buf;
}

char *cs_literal(double v, bool dbl, char *buf, size_t n) {
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

char *cs_dims_product(const cs_ctx *x, int t, int from, int to, char *buf, size_t n) {
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

char *cs_elems(const cs_ctx *x, int t, char *buf, size_t n) {
  return cs_dims_product(x, t, 0, x->g->tensors[t].rank, buf, n);
}

char *cs_ptr(const cs_ctx *x, int t, char *buf, size_t n) {
  const nnc_buffer *b = &x->s->plan.buf[t];
  if (b->storage == NNC_STORE_ALIAS && b->alias_of >= 0 && b->alias_of != t) {
    /* a view: the same memory as its root, seen with this tensor's type */
    char root[256];
    cs_ptr(x, b->alias_of, root, sizeof root);
    if (x->g->tensors[t].dtype == x->g->tensors[b->alias_of].dtype) snprintf(buf, n, "%s", root);
    else snprintf(buf, n, "(%s *)(%s)", cs_ctype(x->g, t), root);
    return buf;
  }
  if (x->input_of[t] >= 0) snprintf(buf, n, "c->in->%s", x->in_name[x->input_of[t]]);
  else if (x->output_of[t] >= 0) snprintf(buf, n, "c->out->%s", x->out_name[x->output_of[t]]);
  else if (x->param_of[t] >= 0) snprintf(buf, n, "(%s *)c->m->w[%d]", cs_ctype(x->g, t), x->param_of[t]);
  else if (b->offset == 0) snprintf(buf, n, "(%s *)c->m->arena", cs_ctype(x->g, t));
  else snprintf(buf, n, "(%s *)(c->m->arena + %lld)", cs_ctype(x->g, t), (long long)b->offset);
  return buf;
}

char *cs_note(const cs_ctx *x, int t, char *buf, size_t n) {
  const nnc_tensor *tt = &x->g->tensors[t];
  char sh[256], name[256];
  nnc_shape_format(x->g, tt->rank, tt->shape, sh, sizeof sh);
  snprintf(buf, n, "%s %s", nnc_emit_comment(tt->name ? tt->name : "?", name, sizeof name), sh);
  return buf;
}

static bool ident_char(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool cs_names(const char *s, const char *id) {
  size_t l = strlen(id);
  for (const char *p = s ? strstr(s, id) : NULL; p; p = strstr(p + 1, id))
    if ((p == s || !ident_char(p[-1])) && !ident_char(p[l])) return true;
  return false;
}

void cs_assign(const cs_ctx *x, nnc_sb *b, int ind, const char *lhs, int t) {
  char p[256], note[600];
  nnc_sb_printf(b, "%*s%s = %s;   /* %s */\n", ind, "", lhs, cs_ptr(x, t, p, sizeof p), cs_note(x, t, note, sizeof note));
}

void cs_emit_function(const cs_ctx *x, nnc_sb *b, const char *head, const char *pre, const char *dims, nnc_sb *body) {
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

char *cs_mul(const char *a, const char *b, char *buf, size_t n) {
  if (strcmp(b, "1") == 0) snprintf(buf, n, compound(a) ? "(%s)" : "%s", a);
  else if (strcmp(a, "1") == 0) snprintf(buf, n, compound(b) ? "(%s)" : "%s", b);
  else snprintf(buf, n, "%s%s%s * %s%s%s", compound(a) ? "(" : "", a, compound(a) ? ")" : "", compound(b) ? "(" : "", b,
                compound(b) ? ")" : "");
  return buf;
}

char *cs_kernel_ops(const cs_ctx *x, int k, char *buf, size_t n) {
  const nnc_kernel *kk = &x->s->k[k];
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < kk->nnodes && len < n; i++) {
    const nnc_node *nd = &x->g->nodes[kk->nodes[i]];
    len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? " + " : "", nnc_op_info_of(nd->op)->name);
  }
  return buf;
}

const char *cs_kernel_name(const cs_ctx *x, int k) {
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

/* Every tensor the generated code touches is f32 or i32: the C SIMD target
 * computes in f32. */
static nnc_status check_dtypes(const cs_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  for (int t = 0; t < g->ntensors; t++) {
    const nnc_tensor *tt = &g->tensors[t];
    if (tt->dtype == NNC_F32 || tt->dtype == NNC_I32) continue;
    if (tt->kind == NNC_TENSOR_VALUE && (tt->producer < 0 || g->nodes[tt->producer].dead)) continue;
    const char *what = tt->kind == NNC_TENSOR_INPUT ? "input" : tt->kind == NNC_TENSOR_PARAM ? "parameter" : "value";
    return nnc_errorf(err, NNC_E_TARGET, tt->loc, "c-simd computes in f32: %s %s is %s", what, tt->name,
                      nnc_dtype_name(tt->dtype));
  }
  return NNC_OK;
}

/* The kernels take sizes as int: every dim product they see must fit. */
static nnc_status check_sizes(const cs_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  for (int t = 0; t < g->ntensors; t++) {
    const nnc_tensor *tt = &g->tensors[t];
    if (tt->kind == NNC_TENSOR_VALUE && (tt->producer < 0 || g->nodes[tt->producer].dead)) continue;
    int64_t n = nnc_tensor_max_elems(g, tt);
    if (n < 0 || n > INT_MAX)
      return nnc_errorf(err, NNC_E_LIMIT, tt->loc,
                        "c-simd: %s has %lld elements at the dims' maxima, expected at most %d (the kernels index with int)",
                        tt->name, (long long)n, INT_MAX);
  }
  return NNC_OK;
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

/* The kernel of a kind with the most output elements times its inner
 * dimension (the most work at the maxima), or -1. */
static int largest_of(const cs_ctx *x, nnc_kernel_kind kind) {
  double best = -1;
  int pick = -1;
  for (int k = 0; k < x->s->nk; k++) {
    const nnc_kernel *kn = &x->s->k[k];
    if (kn->kind != kind) continue;
    int in = kind == NNC_KERNEL_GEMM ? kn->d.gemm.a : kn->d.attn.k;
    int out = kind == NNC_KERNEL_GEMM ? kn->d.gemm.out : kn->d.attn.out;
    const nnc_tensor *t = &x->g->tensors[in];
    double work = (double)nnc_tensor_max_elems(x->g, &x->g->tensors[out]) * (double)t->shape[t->rank - 1].k;
    if (work > best) {
      best = work;
      pick = k;
    }
  }
  return pick;
}

/* The template is compiled once per folder, so the tiles of the largest GEMM
 * and the largest attention serve every call of theirs; the row rule is the
 * same for every kernel. */
static void pick_tiles(cs_ctx *x) {
  size_t n = 0;
  x->tile_defs[0] = 0;
  if (!x->r->tiles || x->s->nk == 0) return;
  int g = largest_of(x, NNC_KERNEL_GEMM), a = largest_of(x, NNC_KERNEL_ATTENTION);
  if (g >= 0) {
    const nnc_tile *t = &x->r->tiles[g];
    n += (size_t)snprintf(x->tile_defs + n, sizeof x->tile_defs - n,
                          "-DNNC_GEMM_MR=%d -DNNC_GEMM_NR=%d -DNNC_GEMM_KC=%d -DNNC_GEMM_MC=%d -DNNC_GEMM_NC=%d ",
                          t->mr, t->nr, t->kc, t->mc, t->nc);
  }
  if (a >= 0 && n < sizeof x->tile_defs)
    n += (size_t)snprintf(x->tile_defs + n, sizeof x->tile_defs - n, "-DNNC_ATTN_BQ=%d -DNNC_ATTN_BK=%d ",
                          x->r->tiles[a].attn_bq, x->r->tiles[a].attn_bk);
  if (n < sizeof x->tile_defs)
    snprintf(x->tile_defs + n, sizeof x->tile_defs - n, "-DNNC_ROW_MIN_ELEMS=%d", x->r->tiles[0].row_min_elems);
}

/* The ISA from the target description, and the compiler flags that select it. */
static void pick_isa(cs_ctx *x) {
  const char *isa = x->r->target->isa ? x->r->target->isa : "generic";
  x->isa = isa;
  if (strcmp(x->r->target->name, "c-simd") == 0) snprintf(x->cflags, sizeof x->cflags, "-march=native");
  else if (strcmp(isa, "avx512") == 0) snprintf(x->cflags, sizeof x->cflags, "-mavx512f -mavx2 -mfma");
  else if (strcmp(isa, "avx2") == 0) snprintf(x->cflags, sizeof x->cflags, "-mavx2 -mfma");
  else if (strcmp(isa, "neon") == 0) snprintf(x->cflags, sizeof x->cflags, "-march=armv8-a");
  else snprintf(x->cflags, sizeof x->cflags, "-DNNC_ISA_GENERIC");
}

static void ctx_free(cs_ctx *x) {
  free(x->sym); free(x->in_name); free(x->out_name);
  free(x->param_of); free(x->input_of); free(x->output_of);
}

static nnc_status ctx_init(cs_ctx *x, const nnc_emit_request *r, nnc_error *err) {
  memset(x, 0, sizeof *x);
  x->r = r;
  x->s = r->s;
  x->g = r->s->g;
  const nnc_graph *g = x->g;
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
    ctx_free(x);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  }
  for (size_t t = 0; t < nt; t++) x->param_of[t] = x->input_of[t] = x->output_of[t] = -1;
  for (int i = 0; i < g->nparams; i++) x->param_of[g->params[i]] = i;
  for (int i = 0; i < g->ninputs; i++) x->input_of[g->inputs[i]] = i;
  for (int i = g->noutputs - 1; i >= 0; i--) x->output_of[g->outputs[i].tensor] = i;
  name_all(x->sym, g->nsyms, sym_name, g);
  name_all(x->in_name, g->ninputs, input_name, g);
  name_all(x->out_name, g->noutputs, output_name, g);
  pick_isa(x);
  pick_tiles(x);
  return NNC_OK;
}

static nnc_status copy_embedded(const char *dir, nnc_error *err) {
  for (int i = 0; i < nnc_embedded_count; i++) {
    const nnc_embedded_file *f = &nnc_embedded_files[i];
    nnc_status st = nnc_emit_write_file(dir, f->path, f->data, f->size, err);
    if (st) return st;
  }
  return NNC_OK;
}

nnc_status nnc_emit_c_simd(const nnc_emit_request *r, const char *dir, nnc_error *err) {
  cs_ctx x;
  nnc_status st = ctx_init(&x, r, err);
  if (st) return st;
  st = check_dtypes(&x, err);
  if (!st) st = check_sizes(&x, err);
  if (!st) st = cs_write_header(&x, dir, err);
  if (!st) st = cs_write_model(&x, dir, err);
  if (!st) st = cs_write_graph(&x, dir, err);
  if (!st) st = cs_write_bench(&x, dir, err);
  if (!st) st = cs_write_build(&x, dir, err);
  if (!st) st = copy_embedded(dir, err);
  ctx_free(&x);
  return st;
}
