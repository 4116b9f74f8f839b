/* compiler/emit/device_loops_chains.c — the row and reduce kernels that
 * carry elementwise chains (nnc_compile_opts.row_loops, reduce_loops), on a
 * target whose loops can share work across a group of threads
 * (ec_loop_target.finish_grid):
 *   - a layernorm or rmsnorm whose input a chain computes: a warp a row,
 *     each lane computing its elements of the row into registers (16-byte
 *     vectors where the arrays allow), the row's statistics summed across
 *     the warp, the normalized row stored; the chain's result is never
 *     written (BERT's embeddings: two lookups, a position row, their sum
 *     and its layernorm in one pass);
 *   - a sum, mean or max with the chain computing its input (the prologue)
 *     and the ops on its results (the epilogue): a block per (outer index,
 *     tile of columns), its threads across the columns and down the
 *     reduced axis, partials added in a fixed order (the same bits every
 *     run), the epilogue on each result (BERT's mean pooling: sum(x * m) /
 *     sum(m) as one kernel reading x once).
 * Either may also write side outputs (nnc_kernel.out past its last node's):
 * values of the shape its loop walks that others read, stored where the
 * loop computes them (the norm's input row from the registers that hold
 * it; each element of the reduced tensor, or of an op on what the loop
 * reads, as the loop visits it once: BERT's last hidden state cast to its
 * f32 output by the pooling kernel).
 * The chains' loads and values come from device_loops_elementwise.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_loops.h"

/* Threads of a reduce kernel's block. */
#define REDUCE_THREADS 256

/* text into b, each line's indent changed by shift (< 0: fewer spaces). */
static void shifted(nnc_sb *b, const char *text, int shift) {
  for (const char *p = text; p && *p;) {
    const char *nl = strchr(p, '\n');
    int len = nl ? (int)(nl - p + 1) : (int)strlen(p), lead = 0;
    while (lead < len && p[lead] == ' ') lead++;
    int ind = lead + shift < 0 ? 0 : lead + shift;
    nnc_sb_printf(b, "%*s%.*s", len > 1 ? ind : 0, "", len - lead, p + lead);
    p += len;
  }
}

/* k's nodes [first, first + count) as a chain whose result is out: in[]
 * stays the kernel's, so operand q is x<q> in every part. */
static nnc_kernel part_of(const nnc_kernel *k, int first, int count, int out) {
  nnc_kernel v = *k;
  v.nodes = k->nodes + first;
  v.nnodes = count;
  v.nout = 1;
  v.out[0] = out;
  return v;
}

/* dl_chain_vec's V for chain c, or 0 where an operand it reads as vectors
 * (or y, when y_vec) is a caller's buffer, whose alignment only a run can
 * test (the elementwise loops test it; these kernels go element by element). */
static int chain_vec(const ec_loop_target *lt, const nnc_kernel *c, int y, bool y_vec, const bool *plain,
                     const bool *as_mask, const bool *table, bool *scalar) {
  const ec_ctx *x = lt->x;
  int V = dl_chain_vec(lt, c, plain, as_mask, table, scalar);
  for (int q = 0; V && q < c->nin; q++)
    if ((plain[q] || table[q]) && !scalar[q] && dl_placed16(x, c->in[q]) == 0) V = 0;
  if (V && y_vec && dl_placed16(x, y) != 1) V = 0;
  return V;
}

/* A lane's first column of slot u: `lane + u * 32`, times V when V > 0. */
static const char *slot_col(int V, char *buf, size_t n) {
  if (V) snprintf(buf, n, "(lane + u * 32) * %d", V);
  else snprintf(buf, n, "lane + u * 32");
  return buf;
}

/* The index in k->out of the kernel's first side output: the outputs past
 * its last node's. */
static int first_side(const ec_ctx *x, const nnc_kernel *k) { return x->g->nodes[k->nodes[k->nnodes - 1]].nout; }

/* The pointers x<q> to every input, y to the output and y<i> to side
 * output i; a side output in a caller's buffer that V-element vectors of
 * its type fill whole 16-byte stores gets y<i>_vec, whether it is aligned
 * for them (one test a thread, the same for the whole grid). */
static void pointers(const ec_loop_target *lt, const nnc_kernel *k, int V, nnc_sb *body) {
  const ec_ctx *x = lt->x;
  char name[16];
  for (int q = 0; q < k->nin; q++) {
    snprintf(name, sizeof name, "x%d", q);
    lt->pointer(lt->self, body, "const ", name, k->in[q]);
  }
  lt->pointer(lt->self, body, "", "y", k->out[0]);
  for (int i = first_side(x, k); i < k->nout; i++) {
    snprintf(name, sizeof name, "y%d", i);
    lt->pointer(lt->self, body, "", name, k->out[i]);
    int t = k->out[i];
    if (V && V * nnc_dtype_size(x->g->tensors[t].dtype) % 16 == 0 && dl_placed16(x, t) == 0)
      nnc_sb_printf(body, "  const bool y%d_vec = nnc_aligned16(y%d);   /* the caller's buffer: 16-byte stores where "
                          "it is aligned */\n", i, i);
  }
}

/* The store of side output i (tensor t, pointer y<i>) of element `at` into
 * body, indented by ind: v names its value, or with V > 0 an array of the
 * V values of the vector from `at` on (16-byte stores where they fill
 * whole ones and the buffer is aligned: the plan's, or the caller's when
 * y<i>_vec says so; else element by element). The comment names the value
 * and the node that makes it. */
static void side_store(const ec_loop_target *lt, const nnc_kernel *k, int i, int V, const char *at, const char *v,
                       int ind, nnc_sb *body) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  int t = k->out[i], p = g->tensors[t].producer;
  char name[16], st[ACCESS * 2], idx[EXPR + 16], val[48], where[300], note[600];
  snprintf(name, sizeof name, "y%d", i);
  nnc_sb_printf(body, "%*s/* side output %s: %s %s */\n", ind, "", ec_note(x, t, note, sizeof note),
                ec_where(g->nodes[p].loc, where, sizeof where), nnc_op_info_of(g->nodes[p].op)->name);
  if (!V) {
    nnc_sb_printf(body, "%*s%s;\n", ind, "", dl_st(lt, t, name, at, v, st, sizeof st));
    return;
  }
  snprintf(idx, sizeof idx, "%s + l", at);
  snprintf(val, sizeof val, "%s[l]", v);
  dl_st(lt, t, name, idx, val, st, sizeof st);
  int placed = dl_placed16(x, t);
  bool whole = V * nnc_dtype_size(g->tensors[t].dtype) % 16 == 0;
  if (whole && placed == 1)
    nnc_sb_printf(body, "%*snnc_vst(%s + %s, %s);\n", ind, "", name, at, v);
  else if (whole && placed == 0)
    nnc_sb_printf(body, "%*sif (%s_vec) nnc_vst(%s + %s, %s);\n%*selse NNC_VEC_FOR(l, %d) %s;\n", ind, "", name, name, at, v,
                  ind, "", V, st);
  else
    nnc_sb_printf(body, "%*sNNC_VEC_FOR(l, %d) %s;\n", ind, "", V, st);
}

/* ------------------------------------------------------------------- rows */

nnc_status dl_emit_row_chain(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *nm = &g->nodes[k->nodes[k->nnodes - 1]];
  const nnc_tensor *row = &g->tensors[nm->in[0]];
  if (!lt->finish_grid || (nm->op != NNC_OP_LAYERNORM && nm->op != NNC_OP_RMSNORM) || row->rank == 0 ||
      !nnc_dim_is_const(row->shape[row->rank - 1]))
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "%s: expected a layernorm or rmsnorm of constant rows after its "
                      "chain, on a target with grid loops, found %s", x->r->target->name, nnc_op_info_of(nm->op)->name);
  const nnc_kernel c = part_of(k, 0, k->nnodes - 1, nm->out[0]);
  bool plain[NNC_MAX_IO] = {false}, as_mask[NNC_MAX_IO] = {false}, scalar[NNC_MAX_IO] = {false};
  bool table[NNC_MAX_IO] = {false};
  dl_operand_uses(x, &c, plain, as_mask, table);
  const int V = chain_vec(lt, &c, nm->out[0], true, plain, as_mask, table, scalar);
  const long long C = row->shape[row->rank - 1].k, W = V ? V : 1, U = (C / W + 31) / 32;
  const bool ln = nm->op == NNC_OP_LAYERNORM;
  const int qg = nnc_kernel_input(k, nm->in[1]), qb = ln ? nnc_kernel_input(k, nm->in[2]) : -1;
  nnc_sb body, loads, ops;
  nnc_sb_init(&body);
  nnc_sb_init(&loads);
  nnc_sb_init(&ops);
  for (int i = first_side(x, k); i < k->nout; i++)
    if (k->out[i] != nm->in[0])
      return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "%s: expected a row kernel's side output to be its norm's input, "
                        "found %s", x->r->target->name, g->tensors[k->out[i]].name);
  pointers(lt, k, V, &body);
  char slots[24], arrays[NNC_MAX_IO * 40], last[32], rows[EXPR], ri[EXPR + 8], lit[64], where[300], what[32];
  snprintf(slots, sizeof slots, "%lld", U);
  bool fits = dl_chain_loads(lt, &c, plain, as_mask, V, scalar, slots, &loads, arrays, sizeof arrays);
  dl_chain_ops(lt, &c, V, scalar, &ops, last);
  ec_dims_product(x, nm->in[0], 0, row->rank - 1, rows, sizeof rows);
  snprintf(what, sizeof what, V ? "vectors of %d" : "elements", V);
  nnc_sb_printf(&body, "  const int rows = %s;\n", dl_as_index(rows, ri, sizeof ri));
  nnc_sb_printf(&body, "  NNC_ROW(r, lane, rows);   /* a warp a row: a lane holds its %s lane, lane + 32, ... */\n", what);
  nnc_sb_printf(&body, "  float %s%so[%lld]", arrays, arrays[0] ? ", " : "", U);
  if (V) nnc_sb_printf(&body, "[%d]", V);
  nnc_sb_printf(&body, ";\n");
  char item[200], head[120], sc[40];
  slot_col(V, sc, sizeof sc);
  snprintf(head, sizeof head, "    const int col = %s;\n    if (col >= %lld) break;\n", sc, C);
  snprintf(item, sizeof item, "%s    const int e = r * %lld + col;   /* the %s element */\n", head, C,
           V ? "vector's first" : "row's");
  if (loads.buf) {
    nnc_sb_printf(&body, "  NNC_SLOT_FOR(u, %lld) {\n%s", U, item);
    dl_unravel(x, c.out[0], "e", loads.buf, &body, 4);
    shifted(&body, loads.buf, -2);
    nnc_sb_printf(&body, "  }\n");
  }
  /* gamma and beta now, so that their latency passes under the chain and the row's sums (a load after a
   * store through y would wait for it: they may alias) */
  char per[16] = "", decl[96];
  if (V) snprintf(per, sizeof per, "[%d]", V);
  if (ln) snprintf(decl, sizeof decl, "gamma[%lld]%s, beta[%lld]%s", U, per, U, per);
  else snprintf(decl, sizeof decl, "gamma[%lld]%s", U, per);
  nnc_sb_printf(&body, "  float %s;\n  NNC_SLOT_FOR(u, %lld) {\n%s", decl, U, head);
  for (int p = 0; p < (ln ? 2 : 1); p++) {
    int q = p ? qb : qg, t = k->in[q], es = nnc_dtype_size(g->tensors[t].dtype);
    char ld[ACCESS], pn[16];
    snprintf(pn, sizeof pn, "x%d", q);
    const char *name = p ? "beta" : "gamma";
    if (V && (V * es) % 16 == 0 && dl_placed16(x, t) == 1)   /* whole 16-byte vectors */
      nnc_sb_printf(&body, "    nnc_vld(%s + col, %s[u]);\n", pn, name);
    else if (V)
      nnc_sb_printf(&body, "    NNC_VEC_FOR(l, %d) %s[u][l] = %s;\n", V, name, dl_ld(lt, t, pn, "col + l", ld, sizeof ld));
    else
      nnc_sb_printf(&body, "    %s[u] = %s;\n", name, dl_ld(lt, t, pn, "col", ld, sizeof ld));
  }
  nnc_sb_printf(&body, "  }\n");
  nnc_sb_printf(&body, "  float sum = 0.0f;\n  NNC_SLOT_FOR(u, %lld) {\n%s", U,
                dl_reads_coords(x, c.out[0], ops.buf) ? item : head);
  dl_unravel(x, c.out[0], "e", ops.buf, &body, 4);
  char at[EXPR];
  snprintf(at, sizeof at, "r * %lld + col", C);
  if (V) {
    nnc_sb_printf(&body, "    NNC_VEC_FOR(l, %d) {\n", V);
    shifted(&body, ops.buf, -2);
    nnc_sb_printf(&body, "      o[u][l] = %s;\n      sum += %s%s;\n    }\n", last, ln ? "" : "o[u][l] * ", last);
  } else {
    shifted(&body, ops.buf, -2);
    nnc_sb_printf(&body, "    o[u] = %s;\n    sum += %s%s;\n", last, ln ? "" : "o[u] * ", last);
  }
  /* the chain's value where others read it too, from the registers that hold it */
  for (int i = first_side(x, k); i < k->nout; i++) side_store(lt, k, i, V, at, "o[u]", 4, &body);
  nnc_sb_printf(&body, "  }\n");
  const char *ov = V ? "o[u][l]" : "o[u]";
  char vec_for[32] = "";
  if (V) snprintf(vec_for, sizeof vec_for, "NNC_VEC_FOR(l, %d) ", V);
  nnc_sb_printf(&body, "  /* %s %s: the row's statistics in f32, summed across the warp */\n",
                ec_where(nm->loc, where, sizeof where), nnc_op_info_of(nm->op)->name);
  if (ln) {
    nnc_sb_printf(&body, "  const float mean = nnc_row_sum(sum) / %lld.0f;\n  float sq = 0.0f;\n"
                         "  NNC_SLOT_FOR(u, %lld) {\n    if (%s >= %lld) break;\n"
                         "    %ssq = fmaf(%s - mean, %s - mean, sq);\n  }\n"
                         "  const float rstd = rsqrtf(nnc_row_sum(sq) / %lld.0f + %s);\n",
                  C, U, sc, C, vec_for, ov, ov, C, ec_literal(nm->attrs.eps, false, lit, sizeof lit));
  } else {
    nnc_sb_printf(&body, "  const float rstd = rsqrtf(nnc_row_sum(sum) / %lld.0f + %s);\n", C,
                  ec_literal(nm->attrs.eps, false, lit, sizeof lit));
  }
  nnc_sb_printf(&body, "  NNC_SLOT_FOR(u, %lld) {\n%s", U, head);
  char yst[ACCESS * 2], v[160];
  if (V) {
    nnc_sb_printf(&body, ln ? "    NNC_VEC_FOR(l, %d) o[u][l] = fmaf((o[u][l] - mean) * rstd, gamma[u][l], beta[u][l]);\n"
                            : "    NNC_VEC_FOR(l, %d) o[u][l] = o[u][l] * rstd * gamma[u][l];\n", V);
    nnc_sb_printf(&body, "    nnc_vst(y + r * %lld + col, o[u]);\n  }\n", C);
  } else {
    snprintf(v, sizeof v, ln ? "fmaf((o[u] - mean) * rstd, gamma[u], beta[u])" : "o[u] * rstd * gamma[u]");
    nnc_sb_printf(&body, "    %s;\n  }\n", dl_st(lt, nm->out[0], "y", at, v, yst, sizeof yst));
  }
  if (loads.oom || ops.oom || !fits) body.oom = true;
  nnc_sb_free(&loads);
  nnc_sb_free(&ops);
  char blocks[EXPR + 32];
  snprintf(blocks, sizeof blocks, "nnc_row_blocks(%s)", ri);
  lt->finish_grid(lt->self, ki, blocks, "NNC_ROW_WARPS * 32", &body);
  return NNC_OK;
}

/* ---------------------------------------------------------------- reduce */

/* The smallest power of two >= n, at most 32. */
static int lanes_for(long long n) {
  int w = 1;
  while (w < 32 && w < n) w *= 2;
  return w;
}

nnc_status dl_emit_reduce_chain(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_graph *g = x->g;
  const nnc_kernel *k = &x->s->k[ki];
  int ri = -1;
  for (int i = 0; i < k->nnodes; i++) {
    nnc_op op = g->nodes[k->nodes[i]].op;
    if (op == NNC_OP_SUM || op == NNC_OP_MEAN || op == NNC_OP_MAX) ri = i;
  }
  if (!lt->finish_grid || ri < 0)
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "%s: expected a sum, mean or max among the reduce kernel's "
                      "nodes, on a target with grid loops", x->r->target->name);
  const nnc_node *rn = &g->nodes[k->nodes[ri]];
  const int X = rn->in[0], R = rn->out[0], Y = k->out[0], axis = rn->attrs.axis, rank = g->tensors[X].rank;
  const bool max = rn->op == NNC_OP_MAX;
  const nnc_kernel pro = part_of(k, 0, ri, X), epi = part_of(k, ri + 1, k->nnodes - ri - 1, Y);
  bool plain[NNC_MAX_IO] = {false}, as_mask[NNC_MAX_IO] = {false}, scalar[NNC_MAX_IO] = {false};
  bool table[NNC_MAX_IO] = {false};
  /* the prologue (nodes before the reduction) computes X, or only side values from X read as it is */
  bool made = false;
  for (int i = 0; i < ri; i++) made |= g->nodes[k->nodes[i]].out[0] == X;
  dl_operand_uses(x, &pro, plain, as_mask, table);
  if (!made) plain[nnc_kernel_input(k, X)] = true;   /* the reduction reads its input itself */
  char outer[EXPR], len[EXPR], inner[EXPR], oi[EXPR + 8], li[EXPR + 8], ii[EXPR + 8];
  ec_dims_product(x, X, 0, axis, outer, sizeof outer);
  ec_dims_product(x, X, axis, axis + 1, len, sizeof len);
  ec_dims_product(x, X, axis + 1, rank, inner, sizeof inner);
  const bool cinner = !strstr(inner, "d->");
  const long long in_k = cinner ? strtoll(inner, NULL, 10) : 0;
  int V = axis < rank - 1 ? chain_vec(lt, &pro, X, false, plain, as_mask, table, scalar) : 0;
  if (V && (!cinner || in_k % V)) V = 0;
  /* 8 lanes of 16-byte vectors (a 128-byte line a row) and 32 rows a step: BERT's pooling (32 x 384
   * bf16 columns over 128 rows) took 9.3 us as 32 x 32 lanes (64 blocks, 8 rows a step) */
  const int W = V ? V : 1, CW = lanes_for(!cinner ? 32 : V ? (in_k / W < 8 ? in_k / W : 8) : in_k);
  const int RS = REDUCE_THREADS / CW;
  nnc_sb body, loads, ops;
  nnc_sb_init(&body);
  nnc_sb_init(&loads);
  nnc_sb_init(&ops);
  pointers(lt, k, V, &body);
  char arrays[NNC_MAX_IO * 40], last[32], where[300];
  bool fits = dl_chain_loads(lt, &pro, plain, as_mask, V, scalar, "NNC_UNROLL", &loads, arrays, sizeof arrays);
  if (ri > 0) dl_chain_ops(lt, &pro, V, scalar, &ops, last);
  if (made) snprintf(last, sizeof last, "v%d", X);
  else snprintf(last, sizeof last, V ? "a%d[u][l]" : "a%d[u]", nnc_kernel_input(k, X));
  const int side0 = first_side(x, k);
  const bool sides = side0 < k->nout;
  const char *acc_l = V ? "acc[l]" : "acc";
  char comb[200];
  if (max) snprintf(comb, sizeof comb, "%s = (double)%s > %s || isnan(%s) ? (double)%s : %s;   /* NaN wins, as in the reference */",
                    acc_l, last, acc_l, last, last, acc_l);
  else snprintf(comb, sizeof comb, "%s += %s;", acc_l, last);
  nnc_sb_printf(&body, "  /* %s %s over axis %d: a block a (index of the axes before it, %d columns%s), %d threads\n"
                       "   * across them and %d down the axis */\n",
                ec_where(rn->loc, where, sizeof where), nnc_op_info_of(rn->op)->name, axis, CW * W,
                V ? " as vectors" : "", CW, RS);
  nnc_sb_printf(&body, "  const int len = %s, inner = %s, tiles = (inner / %d + %d) / %d;\n", dl_as_index(len, li, sizeof li),
                dl_as_index(inner, ii, sizeof ii), W, CW - 1, CW);
  nnc_sb_printf(&body, "  const int o = (int)NNC_BLOCK / tiles, col = ((int)NNC_BLOCK %% tiles * %d + (int)NNC_THREAD %% %d) * %d;\n"
                       "  const int step = (int)NNC_THREAD / %d;   /* rows step, step + %d, ... */\n", CW, CW, W, CW, RS);
  if (V) nnc_sb_printf(&body, "  double acc[%d];\n  NNC_VEC_FOR(l, %d) acc[l] = %s;\n", V, V, max ? "-INFINITY" : "0.0");
  else nnc_sb_printf(&body, "  double acc = %s;\n", max ? "-INFINITY" : "0.0");
  char item[200];
  snprintf(item, sizeof item, "        const int t = t0 + u * %d;\n        if (t >= len) break;\n"
                              "        const int e = (o * len + t) * inner + col;\n", RS);
  nnc_sb_printf(&body, "  if (col < inner) {\n    for (int t0 = step; t0 < len; t0 += NNC_UNROLL * %d) {\n", RS);
  if (arrays[0]) nnc_sb_printf(&body, "      float %s;\n", arrays);
  char brk[120];
  snprintf(brk, sizeof brk, "        if (t0 + u * %d >= len) break;\n", RS);
  nnc_sb_printf(&body, "      NNC_UNROLL_FOR(u) {\n%s", dl_reads_coords(x, X, loads.buf) ? item : brk);
  dl_unravel(x, X, "e", loads.buf, &body, 8);
  shifted(&body, loads.buf, 2);
  nnc_sb_printf(&body, "      }\n      NNC_UNROLL_FOR(u) {\n%s",
                sides || (ri > 0 && dl_reads_coords(x, X, ops.buf)) ? item : brk);
  if (ri > 0) dl_unravel(x, X, "e", ops.buf, &body, 8);
  /* a side output's value: the prologue's, or X's as read */
  char sv[NNC_MAX_IO][40];
  for (int i = side0; i < k->nout; i++) {
    bool inside = false;
    for (int j = 0; j < ri; j++) inside |= g->nodes[k->nodes[j]].out[0] == k->out[i];
    if (inside) snprintf(sv[i], sizeof sv[i], "v%d", k->out[i]);
    else snprintf(sv[i], sizeof sv[i], "%s", last);
  }
  if (V) {
    for (int i = side0; i < k->nout; i++) nnc_sb_printf(&body, "        float y%dv[%d];\n", i, V);
    nnc_sb_printf(&body, "        NNC_VEC_FOR(l, %d) {\n", V);
    if (ops.buf) shifted(&body, ops.buf, 2);
    for (int i = side0; i < k->nout; i++) nnc_sb_printf(&body, "          y%dv[l] = %s;\n", i, sv[i]);
    nnc_sb_printf(&body, "          %s\n        }\n", comb);
    for (int i = side0; i < k->nout; i++) {
      char arr[16];
      snprintf(arr, sizeof arr, "y%dv", i);
      side_store(lt, k, i, V, "e", arr, 8, &body);
    }
  } else {
    if (ops.buf) shifted(&body, ops.buf, 2);
    nnc_sb_printf(&body, "        %s\n", comb);
    for (int i = side0; i < k->nout; i++) side_store(lt, k, i, 0, "e", sv[i], 8, &body);
  }
  nnc_sb_printf(&body, "      }\n    }\n  }\n");
  /* the block's partials, added pairwise in a fixed order: the same bits every run */
  const char *vf = "";
  char vfor[32];
  if (V) {
    snprintf(vfor, sizeof vfor, "NNC_VEC_FOR(l, %d) ", V);
    vf = vfor;
  }
  /* part[l][thread]: neighbouring threads on neighbouring doubles, no bank conflicts */
  const char *me = V ? "part[l][NNC_THREAD]" : "part[NNC_THREAD]";
  char other[48], pair[400];
  snprintf(other, sizeof other, V ? "part[l][NNC_THREAD + h * %d]" : "part[NNC_THREAD + h * %d]", CW);
  if (max) snprintf(pair, sizeof pair, "%s = isnan(%s) || %s > %s ? %s : %s", me, other, other, me, other, me);
  else snprintf(pair, sizeof pair, "%s += %s", me, other);
  if (V) nnc_sb_printf(&body, "  NNC_SHARED double part[%d][%d];   /* each thread's partials */\n", V, REDUCE_THREADS);
  else nnc_sb_printf(&body, "  NNC_SHARED double part[%d];   /* each thread's partial */\n", REDUCE_THREADS);
  nnc_sb_printf(&body, "  %s%s = %s;\n  NNC_SYNC();\n", vf, me, acc_l);
  nnc_sb_printf(&body, "  for (int h = %d; h > 0; h /= 2) {   /* the partials of rows step and step + h */\n"
                       "    if (step < h) %s%s;\n    NNC_SYNC();\n  }\n", RS / 2, vf, pair);
  nnc_sb_printf(&body, "  if (step != 0 || col >= inner) return;\n");
  /* the epilogue, a result at a time */
  bool eplain[NNC_MAX_IO] = {false}, emask[NNC_MAX_IO] = {false}, etable[NNC_MAX_IO] = {false};
  bool escalar[NNC_MAX_IO] = {false};
  dl_operand_uses(x, &epi, eplain, emask, etable);
  nnc_sb eloads, eops;
  nnc_sb_init(&eloads);
  nnc_sb_init(&eops);
  char earrays[NNC_MAX_IO * 40], elast[32], ev[EXPR], yst[ACCESS * 2];
  /* the epilogue's loads for all the thread's results first (slot u = l), then its ops and stores: loads
   * after a store through another pointer would wait for it (they may alias) */
  char eslots[8];
  snprintf(eslots, sizeof eslots, "%d", W);
  bool efits = dl_chain_loads(lt, &epi, eplain, emask, 0, escalar, eslots, &eloads, earrays, sizeof earrays);
  dl_chain_ops(lt, &epi, 0, escalar, &eops, elast);
  char first[160];
  if (!earrays[0]) snprintf(first, sizeof first, "    const int e = o * inner + col%s;   /* the result's element */\n", V ? " + l" : "");
  else snprintf(first, sizeof first, "    const int e = o * inner + col%s, u = %s;   /* the result's element, its slot */\n",
                V ? " + l" : "", V ? "l" : "0");
  if (earrays[0]) nnc_sb_printf(&body, "  float %s;\n", earrays);
  if (eloads.buf) {
    nnc_sb_printf(&body, V ? "  NNC_VEC_FOR(l, %d) {\n" : "  {\n", V);
    nnc_sb_puts(&body, first);
    dl_unravel(x, Y, "e", eloads.buf, &body, 4);
    shifted(&body, eloads.buf, -2);
    nnc_sb_printf(&body, "  }\n");
  }
  nnc_sb_printf(&body, V ? "  NNC_VEC_FOR(l, %d) {\n" : "  {\n", V);
  nnc_sb_puts(&body, first);
  snprintf(ev, sizeof ev, "%s%s", V ? "part[l][NNC_THREAD]" : "part[NNC_THREAD]",
           rn->op == NNC_OP_MEAN ? " / (double)len" : "");
  nnc_sb_printf(&body, "    const float v%d = (float)(%s);   /* %s %s */\n", R, ev, ec_where(rn->loc, where, sizeof where),
                nnc_op_info_of(rn->op)->name);
  if (epi.nnodes) {
    dl_unravel(x, Y, "e", eops.buf, &body, 4);
    if (eops.buf) shifted(&body, eops.buf, -2);
  } else {
    snprintf(elast, sizeof elast, "v%d", R);
  }
  nnc_sb_printf(&body, "    %s;\n  }\n", dl_st(lt, Y, "y", "e", elast, yst, sizeof yst));
  if (loads.oom || ops.oom || eloads.oom || eops.oom || !fits || !efits) body.oom = true;
  nnc_sb_free(&loads);
  nnc_sb_free(&ops);
  nnc_sb_free(&eloads);
  nnc_sb_free(&eops);
  char blocks[EXPR * 2 + 64];
  snprintf(blocks, sizeof blocks, "%s * ((%s / %d + %d) / %d)", dl_as_index(outer, oi, sizeof oi), ii, W, CW - 1, CW);
  char threads[16];
  snprintf(threads, sizeof threads, "%d", REDUCE_THREADS);
  lt->finish_grid(lt->self, ki, blocks, threads, &body);
  return NNC_OK;
}
