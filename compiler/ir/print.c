/* compiler/ir/print.c — the human views of a compiled graph (--emit=ir|dot|plan).
 *
 * Nodes are written %<node id> and tensors t<tensor id>, so a line of one
 * view can be found in the others; names and labels come from the model. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "print.h"

#define CELL 320

static nnc_status finish(FILE *f, nnc_error *err) {
  if (ferror(f)) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot write the view: output error");
  return NNC_OK;
}

static nnc_status oom(nnc_error *err) {
  return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while printing");
}

/* Appends printf-formatted text to buf (of CELL bytes), truncating. */
static void cat(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cat(char *buf, const char *fmt, ...) {
  size_t n = strlen(buf);
  if (n + 1 >= CELL) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, CELL - n, fmt, ap);
  va_end(ap);
}

static const char *file_of(nnc_srcloc loc) { return loc.file ? loc.file : "?"; }

/* "f32[B,T,768]" */
static const char *type_str(const nnc_graph *g, int t, char *buf) {
  char shape[CELL];
  const nnc_tensor *x = &g->tensors[t];
  snprintf(buf, CELL, "%s%s", nnc_dtype_name(x->dtype), nnc_shape_format(g, x->rank, x->shape, shape, sizeof shape));
  return buf;
}

/* "t7" or "-" for an absent operand. */
static const char *tref(int t, char *buf) {
  if (t < 0) snprintf(buf, 16, "-");
  else snprintf(buf, 16, "t%d", t);
  return buf;
}

/* ---------------------------------------------------------------- --emit=ir */

enum { COL_ID, COL_OP, COL_IN, COL_OUT, COL_KERNEL, COL_LABEL, COL_LOC, NCOLS };
typedef struct row { char col[NCOLS][CELL]; } row;

static void node_row(const nnc_schedule *s, int id, row *r) {
  const nnc_graph *g = s->g;
  const nnc_node *n = &g->nodes[id];
  char t[CELL];
  memset(r, 0, sizeof *r);
  snprintf(r->col[COL_ID], CELL, "%%%d", id);
  snprintf(r->col[COL_OP], CELL, "%s%s", nnc_op_info_of(n->op)->name, n->op == NNC_OP_GELU && n->attrs.gelu_tanh ? "(tanh)" : "");
  for (int i = 0; i < n->nin; i++) cat(r->col[COL_IN], "%st%d", i ? " " : "", n->in[i]);
  cat(r->col[COL_IN], " ->");
  for (int i = 0; i < n->nout; i++)
    cat(r->col[COL_OUT], "%st%d %s", i ? ", " : "", n->out[i], type_str(g, n->out[i], t));
  int k = s->kernel_of_node ? s->kernel_of_node[id] : -1;
  if (k >= 0) snprintf(r->col[COL_KERNEL], CELL, "kernel #%d (%s)", k, nnc_kernel_kind_name(s->k[k].kind));
  else snprintf(r->col[COL_KERNEL], CELL, "no kernel");
  snprintf(r->col[COL_LABEL], CELL, "%s", n->label ? n->label : "");
  snprintf(r->col[COL_LOC], CELL, "%s:%d", file_of(n->loc), n->loc.line);
}

static void print_rows(FILE *f, const row *rows, int n) {
  int w[NCOLS] = {0};
  for (int i = 0; i < n; i++)
    for (int c = 0; c < NCOLS; c++) {
      int l = (int)strlen(rows[i].col[c]);
      if (l > w[c]) w[c] = l;
    }
  for (int i = 0; i < n; i++) {
    fprintf(f, "%-*s", w[COL_ID], rows[i].col[COL_ID]);
    for (int c = 1; c < NCOLS - 1; c++) fprintf(f, "  %-*s", w[c], rows[i].col[c]);
    fprintf(f, "  %s\n", rows[i].col[NCOLS - 1]);
  }
}

static void print_gemm(FILE *f, const nnc_gemm_desc *d) {
  char a[16], b[16], c[16], e[16], o[16];
  fprintf(f, "      a=%s%s b=%s%s bias=%s residual=%s out=%s", tref(d->a, a), d->a_trans ? " (transposed)" : "",
          tref(d->b, b), d->b_trans ? " (transposed)" : "", tref(d->bias, c), tref(d->residual, e), tref(d->out, o));
  if (d->prologue == NNC_NORM_NONE) fprintf(f, " prologue=none");
  else
    fprintf(f, " prologue=%s(gamma=%s beta=%s eps=%g)", d->prologue == NNC_NORM_LAYER ? "layernorm" : "rmsnorm",
            tref(d->norm_gamma, a), tref(d->norm_beta, b), d->norm_eps);
  fprintf(f, " act=%s%s alpha=%g", d->act == NNC_OP_NONE ? "none" : nnc_op_info_of(d->act)->name,
          d->gelu_tanh ? "(tanh)" : "", d->alpha);
  if (d->aux_kind == NNC_AUX_SAVE) fprintf(f, " saves=%s (the activation's input)", tref(d->aux, a));
  if (d->act_last) fprintf(f, " (activation after the residual)");
  if (d->residual_mul) fprintf(f, " (times the residual)");
  if (d->windowed) fprintf(f, " (A gathered from the windows of node %d)", d->window);
  if (d->bgrad_from != NNC_BGRAD_NONE) fprintf(f, " bias_grad=%s (%s summed over k)", tref(d->bgrad, a), d->bgrad_from == NNC_BGRAD_B ? "B" : "A");
  if (d->aux_kind == NNC_AUX_ACT_GRAD) fprintf(f, " times act'(%s)", tref(d->aux, a));
  if (d->post_norm != NNC_NORM_NONE)
    fprintf(f, " post_norm=layernorm(gamma=%s beta=%s eps=%g)", tref(d->post_gamma, a), tref(d->post_beta, b),
            d->post_eps);
  fputc('\n', f);
}

/* The operands read or written in place of a folded head split or merge:
 * name=t<base>+offset[sb,sh,si]. */
static void print_views(FILE *f, const nnc_graph *g, const nnc_attn_view *v, const char *const *names) {
  bool any = false;
  for (int i = 0; i < 4; i++) {
    if (!v[i].on) continue;
    char o[64], b[64], h[64], r[64];
    fprintf(f, "%s %s=t%d+%s[%s,%s,%s]", any ? "" : "      views:", names[i], v[i].base,
            nnc_dim_format(g, v[i].offset, o, sizeof o), nnc_dim_format(g, v[i].sb, b, sizeof b),
            nnc_dim_format(g, v[i].sh, h, sizeof h), nnc_dim_format(g, v[i].si, r, sizeof r));
    any = true;
  }
  if (any) fputc('\n', f);
}

static void print_attn(FILE *f, const nnc_attention_desc *d) {
  char q[16], k[16], v[16], m[16], o[16], l[16];
  fprintf(f, "      q=%s k=%s v=%s mask=%s out=%s causal=%s scale=%.17g", tref(d->q, q), tref(d->k, k),
          tref(d->v, v), tref(d->mask, m), tref(d->out, o), d->causal ? "yes" : "no", d->scale);
  if (d->lse >= 0) fprintf(f, " lse=%s", tref(d->lse, l));
  fputc('\n', f);
}

static const char *const fwd_names[4] = {"q", "k", "v", "out"}, *const grad_names[4] = {"dout", "dq", "dk", "dv"};

/* The kv appends folded into an attention: the node and where its new rows are read. */
static void print_appends(FILE *f, const nnc_graph *g, const nnc_attention_desc *d) {
  bool any = false;
  for (int i = 0; i < 2; i++) {
    const nnc_attn_append *a = &d->append[i];
    if (!a->on) continue;
    char o[64], b[64], h[64], r[64];
    fprintf(f, "%s %s_new=%%%d:t%d+%s[%s,%s,%s]", any ? "" : "      appends:", fwd_names[NNC_ATTN_K + i], a->node,
            a->src.base, nnc_dim_format(g, a->src.offset, o, sizeof o), nnc_dim_format(g, a->src.sb, b, sizeof b),
            nnc_dim_format(g, a->src.sh, h, sizeof h), nnc_dim_format(g, a->src.si, r, sizeof r));
    any = true;
  }
  if (any) fputc('\n', f);
}

/* The ropes folded into an attention: the node and where it reads x. */
static void print_ropes(FILE *f, const nnc_graph *g, const nnc_attention_desc *d) {
  static const char *const names[2] = {"q", "k_new"};
  bool any = false;
  for (int i = 0; i < 2; i++) {
    const nnc_attn_rope *r = &d->rope[i];
    if (!r->on) continue;
    char o[64], b[64], h[64], s[64];
    fprintf(f, "%s %s=%%%d:t%d+%s[%s,%s,%s]", any ? "" : "      ropes:", names[i], r->node, r->src.base,
            nnc_dim_format(g, r->src.offset, o, sizeof o), nnc_dim_format(g, r->src.sb, b, sizeof b),
            nnc_dim_format(g, r->src.sh, h, sizeof h), nnc_dim_format(g, r->src.si, s, sizeof s));
    any = true;
  }
  if (any) fputc('\n', f);
}

static void print_attn_grad(FILE *f, const nnc_graph *g, const nnc_attention_grad_desc *d) {
  char o[16], q[16], k[16], v[16];
  print_attn(f, &d->fwd);
  fprintf(f, "      dout=%s dq=%s dk=%s dv=%s\n", tref(d->dout, o), tref(d->dq, q), tref(d->dk, k), tref(d->dv, v));
  print_views(f, g, d->fwd.view, fwd_names);
  print_views(f, g, d->view, grad_names);
}

static void print_kernels(FILE *f, const nnc_schedule *s) {
  const nnc_graph *g = s->g;
  fprintf(f, "\nkernels (%d):\n", s->nk);
  for (int i = 0; i < s->nk; i++) {
    const nnc_kernel *k = &s->k[i];
    fprintf(f, "#%-4d %-11s", i, nnc_kernel_kind_name(k->kind));
    for (int j = 0; j < k->nnodes; j++)
      fprintf(f, " %%%d %s", k->nodes[j], nnc_op_info_of(g->nodes[k->nodes[j]].op)->name);
    fprintf(f, "  reads");
    for (int j = 0; j < k->nin; j++) fprintf(f, " t%d", k->in[j]);
    fprintf(f, "  writes");
    for (int j = 0; j < k->nout; j++) fprintf(f, " t%d", k->out[j]);
    fprintf(f, "  %s:%d\n", file_of(k->loc), k->loc.line);
    if (k->kind == NNC_KERNEL_GEMM) print_gemm(f, &k->d.gemm);
    if (k->kind == NNC_KERNEL_ATTENTION) {
      print_attn(f, &k->d.attn);
      print_views(f, g, k->d.attn.view, fwd_names);
      print_appends(f, g, &k->d.attn);
      print_ropes(f, g, &k->d.attn);
    }
    if (k->kind == NNC_KERNEL_ATTENTION_GRAD) print_attn_grad(f, g, &k->d.attn_grad);
  }
}

nnc_status nnc_print_ir(FILE *f, const nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = s->g;
  char t[CELL];
  int live = 0;
  for (int i = 0; i < g->nnodes; i++) live += !g->nodes[i].dead;
  fprintf(f, "; %s: %d inputs, %d parameters, %d outputs, %d live nodes, %d kernels\n",
          g->name ? g->name : "model", g->ninputs, g->nparams, g->noutputs, live, s->nk);
  for (int i = 0; i < g->nsyms; i++)
    fprintf(f, "dim    %s <= %lld  %s:%d\n", g->syms[i].name, (long long)g->syms[i].max, file_of(g->syms[i].loc),
            g->syms[i].loc.line);
  for (int i = 0; i < g->ninputs; i++) {
    const nnc_tensor *x = &g->tensors[g->inputs[i]];
    fprintf(f, "input  t%d %s %s  %s:%d\n", g->inputs[i], x->name, type_str(g, g->inputs[i], t), file_of(x->loc),
            x->loc.line);
  }
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *x = &g->tensors[g->params[i]];
    fprintf(f, "param  t%d %s %s", g->params[i], x->name, type_str(g, g->params[i], t));
    /* a parallel plan's slice: which part of the file's tensor this rank holds */
    if (x->shard.parts && x->shard.whole)
      fprintf(f, "  (a rank's slice: rows r*%lld.. of the file's %lld along dim %d, zeros past its end)",
              (long long)x->shape[x->shard.axis].k, (long long)x->shard.whole, x->shard.axis + 1);
    else if (x->shard.parts && x->shard.groups > 1)
      fprintf(f, "  (a rank's slice: 1/%d of dim %d in each of its %d groups)", x->shard.parts, x->shard.axis + 1,
              x->shard.groups);
    else if (x->shard.parts)
      fprintf(f, "  (a rank's slice: 1/%d of dim %d)", x->shard.parts, x->shard.axis + 1);
    if (x->quant.kind == NNC_QUANT_INT8_CHANNEL)
      fprintf(f, "  (held as int8, a scale per slice along dim %d: --quantize=%s)", x->quant.axis + 1,
              !x->quant.a8 ? "int8w" : x->quant.qmax == 31 ? "w8a8, 6-bit, its GEMM's rows int8 too"
                                                            : "w8a8, [N, K], its GEMM's rows int8 too");
    else if (x->quant.kind == NNC_QUANT_FP8_CHANNEL && x->quant.tied)
      fprintf(f, "  (tied: bf16 for its other readers, and an e4m3 copy [N, K] for its linears, a scale per slice "
              "along dim %d: --precision=fp8, its GEMM's rows e4m3 too)", x->quant.axis + 1);
    else if (x->quant.kind == NNC_QUANT_FP8_CHANNEL)
      fprintf(f, "  (held as e4m3 [N, K], a scale per slice along dim %d: --precision=fp8, its GEMM's rows e4m3 too)",
              x->quant.axis + 1);
    else if (x->quant.kind == NNC_QUANT_INT4_GROUP)
      fprintf(f, "  (held as int4, a scale per %d along dim %d of each slice along dim %d: --quantize=int4w)",
              x->quant.group, 2 - x->quant.axis, x->quant.axis + 1);
    fprintf(f, "\n");
  }
  for (int i = 0; i < g->nstates; i++) {
    const nnc_tensor *x = &g->tensors[g->states[i]];
    fprintf(f, "state  t%d %s %s  %s:%d\n", g->states[i], x->name, type_str(g, g->states[i], t), file_of(x->loc),
            x->loc.line);
  }
  for (int i = 0; i < g->noutputs; i++)
    fprintf(f, "output %s = t%d %s  %s:%d\n", g->outputs[i].name, g->outputs[i].tensor,
            type_str(g, g->outputs[i].tensor, t), file_of(g->outputs[i].loc), g->outputs[i].loc.line);
  fprintf(f, "\n");
  row *rows = malloc((size_t)(live ? live : 1) * sizeof *rows);
  if (!rows) return oom(err);
  int n = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (!g->nodes[i].dead) node_row(s, i, &rows[n++]);
  print_rows(f, rows, n);
  free(rows);
  print_kernels(f, s);
  return finish(f, err);
}

/* --------------------------------------------------------------- --emit=dot */

/* Writes s as the inside of a Graphviz double-quoted string. */
static void dot_str(FILE *f, const char *s) {
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if (*s == '\n') fputs("\\n", f);
    else fputc(*s, f);
  }
}

nnc_status nnc_print_dot(FILE *f, const nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = s->g;
  char t[CELL];
  fprintf(f, "digraph \"");
  dot_str(f, g->name ? g->name : "model");
  fprintf(f, "\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
  for (int i = 0; i < g->ninputs; i++) {
    int x = g->inputs[i];
    fprintf(f, "  t%d [shape=ellipse, label=\"", x);
    dot_str(f, g->tensors[x].name);
    fprintf(f, "\\n%s\"];\n", type_str(g, x, t));
  }
  for (int i = 0; i < g->nparams; i++) {
    int x = g->params[i];
    fprintf(f, "  t%d [shape=note, style=filled, fillcolor=\"#eeeeee\", label=\"", x);
    dot_str(f, g->tensors[x].name);
    fprintf(f, "\\n%s\"];\n", type_str(g, x, t));
  }
  for (int i = 0; i < s->nk; i++) {
    const nnc_kernel *k = &s->k[i];
    fprintf(f, "  subgraph cluster_k%d {\n    label=\"#%d %s (", i, i, nnc_kernel_kind_name(k->kind));
    dot_str(f, file_of(k->loc));
    fprintf(f, ":%d)\";\n    style=rounded;\n", k->loc.line);
    for (int j = 0; j < k->nnodes; j++) {
      const nnc_node *n = &g->nodes[k->nodes[j]];
      fprintf(f, "    n%d [label=\"%%%d %s\\n", k->nodes[j], k->nodes[j], nnc_op_info_of(n->op)->name);
      dot_str(f, n->label);
      fprintf(f, "\"];\n");
    }
    fprintf(f, "  }\n");
  }
  for (int i = 0; i < g->noutputs; i++) {
    fprintf(f, "  out%d [shape=doubleoctagon, label=\"", i);
    dot_str(f, g->outputs[i].name);
    fprintf(f, "\"];\n");
  }
  /* an edge per tensor read, from its producer (or the input/param) */
  for (int i = 0; i < g->nnodes; i++) {
    const nnc_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->nin; j++) {
      int x = n->in[j], p = g->tensors[x].producer;
      if (p >= 0) fprintf(f, "  n%d -> n%d [label=\"%s\"];\n", p, i, type_str(g, x, t));
      else fprintf(f, "  t%d -> n%d;\n", x, i);
    }
  }
  for (int i = 0; i < g->noutputs; i++) {
    int x = g->outputs[i].tensor, p = g->tensors[x].producer;
    if (p >= 0) fprintf(f, "  n%d -> out%d [label=\"%s\"];\n", p, i, type_str(g, x, t));
  }
  fprintf(f, "}\n");
  return finish(f, err);
}

/* -------------------------------------------------------------- --emit=plan */

/* The input whose slot an in-place tensor took: read by its writer, in the
 * arena at the same offset and dying there. */
static int in_place_of(const nnc_schedule *s, int t) {
  const nnc_memplan *p = &s->plan;
  const nnc_kernel *k = &s->k[p->buf[t].first];
  for (int j = 0; j < k->nin; j++) {
    int x = k->in[j];
    int r = p->buf[x].storage == NNC_STORE_ALIAS ? p->buf[x].alias_of : x;
    if (p->buf[r].storage == NNC_STORE_ARENA && p->buf[r].offset == p->buf[t].offset &&
        p->buf[r].last == p->buf[t].first)
      return r;
  }
  return -1;
}

nnc_status nnc_print_plan(FILE *f, const nnc_schedule *s, nnc_error *err) {
  const nnc_graph *g = s->g;
  const nnc_memplan *p = &s->plan;
  char t[CELL];
  if (!p->buf)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "print plan: the schedule has no memory plan");
  fprintf(f, "; memory plan of %s: arena offsets in bytes, aligned to %lld, sizes at the dims' maxima\n",
          g->name ? g->name : "model", (long long)p->alignment);
  int wname = 6;
  for (int i = 0; i < g->ntensors; i++)
    if (p->buf[i].storage == NNC_STORE_ARENA && (int)strlen(g->tensors[i].name) > wname)
      wname = (int)strlen(g->tensors[i].name);
  if (wname > 60) wname = 60;
  fprintf(f, "%-7s %-*s %12s %12s  %-11s %s\n", "tensor", wname, "name", "offset", "size", "kernels", "type");
  /* the states first: they live through every call */
  for (int i = 0; i < g->nstates; i++) {
    int x = g->states[i];
    char id[16];
    snprintf(id, sizeof id, "t%d", x);
    fprintf(f, "%-7s %-*s %12lld %12lld  %-11s %s  state, kept from call to call\n", id, wname, g->tensors[x].name,
            (long long)p->buf[x].offset, (long long)p->buf[x].size, "all", type_str(g, x, t));
  }
  /* in kernel order, so a run's memory reads top to bottom */
  for (int k = 0; k < s->nk; k++)
    for (int j = 0; j < s->k[k].nout; j++) {
      int x = s->k[k].out[j];
      const nnc_buffer *b = &p->buf[x];
      if (b->storage != NNC_STORE_ARENA) continue;
      char id[16], life[32];
      snprintf(id, sizeof id, "t%d", x);
      snprintf(life, sizeof life, "#%d..#%d", b->first, b->last);
      fprintf(f, "%-7s %-*s %12lld %12lld  %-11s %s", id, wname, g->tensors[x].name, (long long)b->offset,
              (long long)b->size, life, type_str(g, x, t));
      if (b->in_place) {
        int r = in_place_of(s, x);
        if (r >= 0) fprintf(f, "  in place of t%d", r);
        else fprintf(f, "  in place");
      }
      fprintf(f, "\n");
    }
  for (int x = 0; x < g->ntensors; x++)
    if (p->buf[x].storage == NNC_STORE_ALIAS) {
      int r = p->buf[x].alias_of;
      const char *where = p->buf[r].storage == NNC_STORE_ARENA ? "arena" :
                          p->buf[r].storage == NNC_STORE_USER ? "user buffer" : "weights";
      fprintf(f, "alias   t%d %s = view of t%d %s (%s)\n", x, g->tensors[x].name, r, g->tensors[r].name, where);
    }
  double saved = p->unplanned > 0 ? 100.0 * (double)(p->unplanned - p->peak) / (double)p->unplanned : 0.0;
  fprintf(f, "peak %lld bytes (%.2f MiB), unplanned %lld bytes, saved %.1f%%\n", (long long)p->peak,
          (double)p->peak / (1024.0 * 1024.0), (long long)p->unplanned, saved);
  return finish(f, err);
}
