/* compiler/emit/device_loops_elementwise.c — the elementwise chains a GPU
 * target writes itself (device_loops.c has the other loops and the
 * conventions): a work-item per output element, operands broadcast by
 * stride 0 and padding masks read as [B, S]; where the target has vector
 * loops and the arrays allow, V elements a work-item through 16-byte
 * vectors. */
#include <stdio.h>
#include <string.h>

#include "device_loops.h"

static bool same_shape(const ec_ctx *x, int a, int b) {
  const nnc_tensor *ta = &x->g->tensors[a], *tb = &x->g->tensors[b];
  if (ta->rank != tb->rank) return false;
  for (int i = 0; i < ta->rank; i++)
    if (!nnc_dim_eq(ta->shape[i], tb->shape[i])) return false;
  return true;
}

/* The offset in operand t of output element (i0, ..., j): "e" when t has the
 * output's shape. */
static void operand_offset(const ec_ctx *x, int t, int out, char *buf, size_t n) {
  if (same_shape(x, t, out)) {
    snprintf(buf, n, "e");
    return;
  }
  int r = x->g->tensors[out].rank;
  size_t len = 0;
  buf[0] = 0;
  for (int dd = 0; dd < r; dd++) {
    char st[EXPR], id[16], f[EXPR + 16], w[EXPR + 8];
    ec_operand_stride(x, t, out, dd, st, sizeof st);
    if (!st[0]) continue;
    dl_as_index(st, w, sizeof w);
    if (dd == r - 1) snprintf(id, sizeof id, "j");
    else snprintf(id, sizeof id, "i%d", dd);
    len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? " + " : "", ec_mul(id, w, f, sizeof f));
  }
  if (!len) snprintf(buf, n, "0");
}

/* ----------------------------------------------------------- elementwise */

/* How the chain of kernel k reads each operand q: its value at each element
 * (plain), as a [B, S] padding mask (as_mask), or as the table of one or
 * more embedding lookups (table), each lookup reading its row through the
 * id of the element's row into an array of its own (g<its output>). An
 * operand read only as ids is none of these. */
void dl_operand_uses(const ec_ctx *x, const nnc_kernel *k, bool *plain, bool *as_mask, bool *table) {
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &x->g->nodes[k->nodes[i]];
    if (n->op == NNC_OP_EMBEDDING) continue;   /* its table and ids: below */
    for (int j = 0; j < n->nin; j++)
      for (int q = 0; q < k->nin; q++)
        if (k->in[q] == n->in[j]) {
          if (n->op == NNC_OP_PADDING_MASK && j == 1) as_mask[q] = true;
          else plain[q] = true;
        }
  }
  for (int q = 0; q < k->nin; q++) table[q] = nnc_kernel_looks_up(x->g, k, k->in[q]);
}

/* Elements a vector where a work-item of elementwise kernel k can take V
 * output elements at a time: 16 bytes of the narrowest array, so that V
 * elements of each array are whole 16-byte vectors (an f32 output of a bf16
 * chain: two). Needs the target's vector loops; f32, bf16 or f16 values
 * throughout (i32 chains compute in double); the output's last dim a
 * constant multiple of V; and each operand either with that last dim, read
 * as vectors (its rows are whole vectors, so a broadcast along leading axes
 * keeps them aligned), or broadcast along it: scalar[q], one value a vector;
 * and a chain that reads no coordinates (a vector's elements share them).
 * 0: an element at a time. */
int dl_chain_vec(const ec_loop_target *lt, const nnc_kernel *k, const bool *plain, const bool *as_mask,
                 const bool *table, bool *scalar) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  const nnc_tensor *o = &g->tensors[k->out[0]];
  if (!lt->vec_loops || o->rank == 0 || !dl_vec_dtype(o->dtype) || dl_placed16(x, k->out[0]) < 0) return 0;
  for (int i = 0; i < k->nnodes; i++)
    if (!dl_vec_dtype(g->tensors[g->nodes[k->nodes[i]].out[0]].dtype)) return 0;
  int es = nnc_dtype_size(o->dtype);
  for (int q = 0; q < k->nin; q++) {
    const nnc_tensor *t = &g->tensors[k->in[q]];
    if (!plain[q] && !as_mask[q] && !table[q]) continue;   /* ids: one read a vector */
    if (as_mask[q] || !dl_vec_dtype(t->dtype)) return 0;
    scalar[q] = t->rank == 0 || nnc_dim_eq_const(t->shape[t->rank - 1], 1);
    if (table[q] && scalar[q]) return 0;   /* rows of one element: no vectors */
    if (!(plain[q] || table[q]) || scalar[q]) continue;
    if (!nnc_dim_eq(t->shape[t->rank - 1], o->shape[o->rank - 1]) || dl_placed16(x, k->in[q]) < 0) return 0;
    if (nnc_dtype_size(t->dtype) < es) es = nnc_dtype_size(t->dtype);
  }
  const nnc_dim c = o->shape[o->rank - 1];
  if (!nnc_dim_is_const(c) || c.k % (16 / es)) return 0;
  /* the vector's elements share their coordinates: a chain that reads them (a mask) goes element by element */
  nnc_sb ops;
  nnc_sb_init(&ops);
  char last[32];
  dl_chain_ops(lt, k, 0, scalar, &ops, last);
  bool coords = dl_reads_coords(x, k->out[0], ops.buf);
  nnc_sb_free(&ops);
  return coords ? 0 : 16 / es;
}

/* The chain of kernel k for work-item step u into ops: each node's value
 * from the operands a<q>[u] (or, V > 0, element l of the vector: a<q>[u][l],
 * scalar[q] ones a<q>[u]); last gets the name of the last value. */
void dl_chain_ops(const ec_loop_target *lt, const nnc_kernel *k, int V, const bool *scalar, nnc_sb *ops,
                      char last[32]) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  int out = k->out[0];
  const char *ind = V ? "        " : "      ";
  snprintf(last, 32, "0.0f");
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &g->nodes[k->nodes[i]];
    bool dbl = g->tensors[n->out[0]].dtype == NNC_I32;
    char opnd[2][64];
    if (n->op == NNC_OP_EMBEDDING) {
      /* the table's element, read through the row's id with the operands */
      char where[300];
      nnc_sb_printf(ops, V ? "%sconst float v%d = g%d[u][l];   /* %s %s */\n" : "%sconst float v%d = g%d[u];   /* %s %s */\n",
                    ind, n->out[0], n->out[0], ec_where(n->loc, where, sizeof where), nnc_op_info_of(n->op)->name);
      snprintf(last, 32, "v%d", n->out[0]);
      continue;
    }
    for (int j = 0; j < n->nin && j < 2; j++) {
      int t = n->in[j], q = nnc_kernel_input(k, t);
      char v[48];
      if (n->op == NNC_OP_PADDING_MASK && j == 1) snprintf(v, sizeof v, "m%d[u]", q);
      else if (q >= 0) snprintf(v, sizeof v, V && !scalar[q] ? "a%d[u][l]" : "a%d[u]", q);
      else snprintf(v, sizeof v, "v%d", t);
      snprintf(opnd[j], sizeof opnd[j], dbl && !(n->op == NNC_OP_PADDING_MASK && j == 1) ? "(double)%s" : "%s", v);
    }
    char ex[2048], where[300];
    ec_node_expr(x, n, opnd[0], n->nin > 1 ? opnd[1] : "", dbl, out, ex, sizeof ex);
    /* every value is float here: i32 results are truncated, then held as float */
    nnc_sb_printf(ops, "%sconst float v%d = %s%s%s;   /* %s %s */\n", ind, n->out[0], dbl ? "(float)nnc_to_i32(" : "",
                  ex, dbl ? ")" : "", ec_where(n->loc, where, sizeof where), nnc_op_info_of(n->op)->name);
    snprintf(last, 32, "v%d", n->out[0]);
  }
}

/* Whether text reads a coordinate of an element of tensor t (e, j, i<d>). */
bool dl_reads_coords(const ec_ctx *x, int t, const char *text) {
  nnc_sb idx;
  nnc_sb_init(&idx);
  dl_unravel(x, t, "e", text, &idx, 0);
  bool r = idx.buf || idx.oom || ec_names(text, "e");
  nnc_sb_free(&idx);
  return r;
}

/* The loads of the operands of chain k for work-item step u into loads
 * (each into a<q>[u], m<q>[u] or a lookup's g<t>[u], indexed by the
 * coordinates of element e of k's output), and the declarations of those
 * arrays, `slots` steps each, into arrays (n bytes; false when it is too
 * small). */
bool dl_chain_loads(const ec_loop_target *lt, const nnc_kernel *k, const bool *plain, const bool *as_mask, int V,
                    const bool *scalar, const char *slots, nnc_sb *loads, char *arrays, size_t n) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  int out = k->out[0];
  char e[EXPR], name[16], acc[ACCESS];
  size_t alen = 0;
  arrays[0] = 0;
  for (int q = 0; q < k->nin; q++) {
    snprintf(name, sizeof name, "x%d", q);
    if (plain[q]) {
      operand_offset(x, k->in[q], out, e, sizeof e);
      if (V && !scalar[q]) {
        nnc_sb_printf(loads, "      nnc_vld(%s + %s, a%d[u]);\n", name, e, q);
        alen += (size_t)snprintf(arrays + alen, alen < n ? n - alen : 0, "%sa%d[%s][%d]", alen ? ", " : "", q, slots, V);
      } else {
        nnc_sb_printf(loads, "      a%d[u] = %s;\n", q, dl_ld(lt, k->in[q], name, e, acc, sizeof acc));
        alen += (size_t)snprintf(arrays + alen, alen < n ? n - alen : 0, "%sa%d[%s]", alen ? ", " : "", q, slots);
      }
    }
    if (as_mask[q]) {
      char S[EXPR], at[EXPR + 16];
      /* a [B, S] padding mask: row i0 (the batch), column j (the key) */
      dl_dim_of(x, k->in[q], g->tensors[k->in[q]].rank - 1, S, sizeof S);
      snprintf(at, sizeof at, "i0 * %s + j", S);
      nnc_sb_printf(loads, "      m%d[u] = %s;\n", q, dl_ld(lt, k->in[q], name, at, acc, sizeof acc));
      alen += (size_t)snprintf(arrays + alen, alen < n ? n - alen : 0, "%sm%d[%s]", alen ? ", " : "", q, slots);
    }
  }
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *nd = &g->nodes[k->nodes[i]];
    if (nd->op != NNC_OP_EMBEDDING) continue;
    /* a lookup: the row of the element's row's id (an id outside the table: NaN, as the lookup kernel gives) */
    char C[EXPR], rows[EXPR], at[EXPR + 32], tn[16];
    int t = nd->in[0], qt = nnc_kernel_input(k, t), qi = nnc_kernel_input(k, nd->in[1]), v = nd->out[0];
    snprintf(tn, sizeof tn, "x%d", qt);
    dl_dim_of(x, t, 1, C, sizeof C);
    dl_dim_of(x, t, 0, rows, sizeof rows);
    char Ci[EXPR + 8];
    dl_as_index(C, Ci, sizeof Ci);
    nnc_sb_printf(loads, "      {\n        const int id = x%d[e / %s];   /* %s's row of %s */\n", qi, Ci,
                  g->tensors[nd->in[1]].name, g->tensors[t].name);
    snprintf(at, sizeof at, "id * %s + j", Ci);
    if (V) {
      nnc_sb_printf(loads, "        if (id >= 0 && id < %s) nnc_vld(%s + %s, g%d[u]);\n"
                           "        else NNC_VEC_FOR(l, %d) g%d[u][l] = NAN;\n      }\n", rows, tn, at, v, V, v);
      alen += (size_t)snprintf(arrays + alen, alen < n ? n - alen : 0, "%sg%d[%s][%d]", alen ? ", " : "", v, slots, V);
    } else {
      nnc_sb_printf(loads, "        g%d[u] = id >= 0 && id < %s ? %s : NAN;\n      }\n", v, rows,
                    dl_ld(lt, t, tn, at, acc, sizeof acc));
      alen += (size_t)snprintf(arrays + alen, alen < n ? n - alen : 0, "%sg%d[%s]", alen ? ", " : "", v, slots);
    }
  }
  return alen < n;
}

/* The loop of elementwise kernel k into body: a work-item takes EC_UNROLL
 * elements (V > 0: vectors of V elements) a stride apart, their loads first
 * (into a<q>[u]), then the chain and the stores (more bytes in flight than
 * one element's: a bf16 chain reached a third of an H100's bandwidth). */
static void elementwise_loop(const ec_loop_target *lt, const nnc_kernel *k, const bool *plain, const bool *as_mask,
                             int V, const bool *scalar, nnc_sb *body) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  int out = k->out[0];
  nnc_sb loads, ops;
  nnc_sb_init(&loads);
  nnc_sb_init(&ops);
  char acc[ACCESS], arrays[NNC_MAX_IO * 40];
  bool fits = dl_chain_loads(lt, k, plain, as_mask, V, scalar, "NNC_UNROLL", &loads, arrays, sizeof arrays);
  size_t alen = strlen(arrays);
  char last[32];
  if (V) nnc_sb_printf(&ops, "      float o[%d];\n      NNC_VEC_FOR(l, %d) {\n", V, V);
  dl_chain_ops(lt, k, V, scalar, &ops, last);
  if (V) nnc_sb_printf(&ops, "        o[l] = %s;\n      }\n      nnc_vst(y + e, o);\n", last);
  else if (g->tensors[out].dtype == NNC_I32) nnc_sb_printf(&ops, "      y[e] = nnc_to_i32(%s);\n", last);
  else nnc_sb_printf(&ops, "      %s;\n", dl_st(lt, out, "y", "e", last, acc, sizeof acc));
  char n_expr[EXPR], item[160];
  ec_elems(x, out, n_expr, sizeof n_expr);
  if (V) {
    nnc_sb_printf(body, "  const int n = (int)(%s) / %d;   /* vectors of %d elements */\n", n_expr, V, V);
    snprintf(item, sizeof item, "      if (e0 + u * stride >= n) break;\n"
                                "      const int e = (int)(e0 + u * stride) * %d;   /* the vector's first element */\n", V);
  } else {
    nnc_sb_printf(body, "  const int n = (int)(%s);\n", n_expr);
    snprintf(item, sizeof item, "      if (e0 + u * stride >= n) break;\n      const int e = (int)(e0 + u * stride);\n");
  }
  nnc_sb_printf(body, "  NNC_LOOP_UNROLLED(e0, stride, n) {\n");
  if (alen) nnc_sb_printf(body, "    float %s;\n", arrays);
  if (loads.buf) {
    /* loads of broadcast scalars only (an expand of [1]) need no index */
    nnc_sb idx;
    nnc_sb_init(&idx);
    dl_unravel(x, out, "e", loads.buf, &idx, 6);
    bool uses_e = idx.buf || ec_names(loads.buf, "e");
    nnc_sb_printf(body, "    NNC_UNROLL_FOR(u) {\n%s", uses_e ? item : "      if (e0 + u * stride >= n) break;\n");
    if (idx.buf) nnc_sb_puts(body, idx.buf);
    if (idx.oom) body->oom = true;
    nnc_sb_free(&idx);
    nnc_sb_printf(body, "%s    }\n", loads.buf);
  }
  nnc_sb_printf(body, "    NNC_UNROLL_FOR(u) {\n%s", item);
  dl_unravel(x, out, "e", ops.buf, body, 6);
  if (ops.buf) nnc_sb_puts(body, ops.buf);
  nnc_sb_printf(body, "    }\n  }\n");
  if (loads.oom || ops.oom || !fits) body->oom = true;
  nnc_sb_free(&loads);
  nnc_sb_free(&ops);
}

/* text into b, each line indented by ind more. */
static void indented(nnc_sb *b, const char *text, int ind) {
  for (const char *p = text; p && *p;) {
    const char *nl = strchr(p, '\n');
    int len = nl ? (int)(nl - p + 1) : (int)strlen(p);
    nnc_sb_printf(b, "%*s%.*s", len > 1 ? ind : 0, "", len, p);
    p += len;
  }
}

nnc_status dl_emit_elementwise(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_kernel *k = &x->s->k[ki];
  int out = k->out[0];
  bool plain[NNC_MAX_IO] = {false}, as_mask[NNC_MAX_IO] = {false}, table[NNC_MAX_IO] = {false};
  bool scalar[NNC_MAX_IO] = {false};
  dl_operand_uses(x, k, plain, as_mask, table);
  int V = dl_chain_vec(lt, k, plain, as_mask, table, scalar);
  nnc_sb body;
  nnc_sb_init(&body);
  char name[16], n_expr[EXPR], items[EXPR + 48], callers[NNC_MAX_IO * 8 + 8] = "";
  size_t clen = 0;
  for (int q = 0; q < k->nin; q++) {
    snprintf(name, sizeof name, "x%d", q);
    lt->pointer(lt->self, &body, "const ", name, k->in[q]);
    if (V && (plain[q] || table[q]) && !scalar[q] && dl_placed16(x, k->in[q]) == 0)
      clen += (size_t)snprintf(callers + clen, sizeof callers - clen, "%s%s", clen ? ", " : "", name);
  }
  lt->pointer(lt->self, &body, "", "y", out);
  if (V && dl_placed16(x, out) == 0) clen += (size_t)snprintf(callers + clen, sizeof callers - clen, "%sy", clen ? ", " : "");
  ec_elems(x, out, n_expr, sizeof n_expr);
  if (!V) {
    elementwise_loop(lt, k, plain, as_mask, 0, scalar, &body);
    /* the launch: a work-item per EC_UNROLL elements */
    snprintf(items, sizeof items, "((%s) + %d) / %d", n_expr, EC_UNROLL - 1, EC_UNROLL);
  } else {
    if (clen) {
      /* a caller's buffer need not be 16-byte aligned: the test is one branch the whole grid takes alike */
      nnc_sb vec;
      nnc_sb_init(&vec);
      elementwise_loop(lt, k, plain, as_mask, V, scalar, &vec);
      nnc_sb_printf(&body, "  if (nnc_aligned16(%s)) {   /* the caller's buffer%s: vectors where %s 16-byte aligned */\n",
                    callers, strchr(callers, ',') ? "s" : "", strchr(callers, ',') ? "they are" : "it is");
      indented(&body, vec.buf, 2);
      nnc_sb_printf(&body, "    return;\n  }\n");
      if (vec.oom || clen >= sizeof callers) body.oom = true;
      nnc_sb_free(&vec);
      elementwise_loop(lt, k, plain, as_mask, 0, scalar, &body);
    } else {
      elementwise_loop(lt, k, plain, as_mask, V, scalar, &body);
    }
    /* the launch: NNC_UNROLL vectors a thread, or one where that leaves few threads */
    snprintf(items, sizeof items, "(int)nnc_vec_threads((%s) / %d)", n_expr, V);
  }
  lt->finish(lt->self, ki, items, &body);
  return NNC_OK;
}
