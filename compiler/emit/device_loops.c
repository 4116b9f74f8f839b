/* compiler/emit/device_loops.c — the kernels a GPU target writes itself:
 * elementwise chains (numpy broadcasting by stride 0, masks from the row and
 * column index), data movement, embedding gathers, reductions, softmax over
 * an axis other than the last and the cross-entropy loss; for a --train
 * graph also pad (the gradient of slice), the embedding's gradient (a
 * scatter-add) and the cross-entropy's gradient. The cross-entropy and its
 * gradient here are OpenCL's: CUDA runs them on the row kernels of
 * templates/cuda/softmax.cuh (a row a warp or a block, not a thread).
 *
 * Each is one kernel whose work-items walk the flat index of what they write
 * (NNC_LOOP, which the target defines: a CUDA grid-stride loop, an OpenCL
 * global-id loop), so neighbouring items write neighbouring elements; values
 * are loaded as float (nnc_ld), computed in float (double for i32 results
 * and for sums) and rounded to the stored type (nnc_st). The text is the
 * same for CUDA C++ and OpenCL C; how a kernel receives its tensors and is
 * launched comes from the target (ec_loop_target in emit_c.h), and so may
 * each element access, where the target's nnc_ld and nnc_st cannot take
 * every type (ec_ctx.loop_load). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device_loops.h"

char *dl_dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* A size of the run (the dims are int64_t) as an int: 64-bit products and
 * divisions cost several times more on a GPU, and nnc checks that every
 * index fits an int. Constants stay as they are. */
char *dl_as_index(const char *e, char *buf, size_t n) {
  snprintf(buf, n, strstr(e, "d->") ? "(int)(%s)" : "%s", e);
  return buf;
}

/* Element idx of tensor t through pointer name, as a float (the target's
 * ec_ctx.loop_load, loop_store and loop_copy, or nnc_ld and nnc_st). */
char *dl_ld(const ec_loop_target *lt, int t, const char *name, const char *idx, char *buf, size_t n) {
  return ec_loop_ld(lt->x, t, name, idx, buf, n);
}

/* The statement (without `;`) storing the float v into element idx. */
char *dl_st(const ec_loop_target *lt, int t, const char *name, const char *idx, const char *v, char *buf,
                size_t n) {
  return ec_loop_st(lt->x, t, name, idx, v, buf, n);
}

/* The statement (without `;`) copying element sidx of src into element idx. */
static char *cp(const ec_loop_target *lt, int t, const char *name, const char *idx, const char *src, const char *sidx,
                char *buf, size_t n) {
  if (lt->x->loop_copy) lt->x->loop_copy(lt->x, t, name, idx, src, sidx, buf, n);
  else snprintf(buf, n, "%s[%s] = %s[%s]", name, idx, src, sidx);
  return buf;
}

/* Statements naming the coordinates of flat index `e` in tensor t that the
 * text `uses` reads: i0 .. i<rank-2> and j, the last. */
void dl_unravel(const ec_ctx *x, int t, const char *e, const char *uses, nnc_sb *b, int ind) {
  int r = x->g->tensors[t].rank;
  if (r == 0) return;
  char id[16], dim[EXPR];
  int lo = -1;   /* the first coordinate the text reads */
  for (int dd = r - 1; dd >= 0; dd--) {
    if (dd == r - 1) snprintf(id, sizeof id, "j");
    else snprintf(id, sizeof id, "i%d", dd);
    if (ec_names(uses, id)) lo = dd;
  }
  if (lo < 0) return;
  if (r == 1) {
    nnc_sb_printf(b, "%*sconst int j = %s;\n", ind, "", e);
    return;
  }
  nnc_sb_printf(b, "%*sint rem = %s;\n", ind, "", e);
  for (int dd = r - 1; dd >= lo; dd--) {
    if (dd == r - 1) snprintf(id, sizeof id, "j");
    else snprintf(id, sizeof id, "i%d", dd);
    char f[EXPR + 8];
    /* an int, in parentheses unless a number: `rem % (int)(d->B * d->T)`, the dim of a reshape */
    dl_dim_of(x, t, dd, dim, sizeof dim);
    if (strstr(dim, "d->")) dl_as_index(dim, f, sizeof f);
    else snprintf(f, sizeof f, strchr(dim, ' ') ? "(%s)" : "%s", dim);
    if (dd == 0) {
      nnc_sb_printf(b, "%*sconst int %s = rem;\n", ind, "", id);
      break;
    }
    if (ec_names(uses, id)) nnc_sb_printf(b, "%*sconst int %s = rem %% %s;\n", ind, "", id, f);
    if (dd > lo) nnc_sb_printf(b, "%*srem /= %s;\n", ind, "", f);
  }
}

/* Where tensor t lives, for a loop on 16-byte vectors: 1 in the arena or the
 * weights at a multiple of 16 bytes (the plan aligns both to 256), 0 a
 * caller's buffer (an input or output), whose alignment only the kernel can
 * test, -1 neither. */
int dl_placed16(const ec_ctx *x, int t) {
  const nnc_buffer *b = &x->s->plan.buf[t];
  if (b->storage == NNC_STORE_ALIAS && b->alias_of >= 0 && b->alias_of != t) return dl_placed16(x, b->alias_of);
  if (x->input_of[t] >= 0 || x->output_of[t] >= 0) return 0;
  if (x->param_of[t] >= 0) return x->w_off[x->param_of[t]] % 16 == 0 ? 1 : -1;
  return b->offset % 16 == 0 ? 1 : -1;
}

bool dl_vec_dtype(nnc_dtype d) { return d == NNC_F32 || d == NNC_BF16 || d == NNC_F16; }

/* ------------------------------------------------------------ reductions */

/* outer x len x inner around axis of tensor t. */
static void around_axis(const ec_ctx *x, int t, int axis, char *outer, char *len, char *inner) {
  ec_dims_product(x, t, 0, axis, outer, EXPR);
  ec_dims_product(x, t, axis, axis + 1, len, EXPR);
  ec_dims_product(x, t, axis + 1, x->g->tensors[t].rank, inner, EXPR);
}

static nnc_status emit_reduce(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char outer[EXPR], len[EXPR], inner[EXPR], cnt[EXPR * 2 + 8];
  around_axis(x, n->in[0], n->attrs.axis, outer, len, inner);
  bool max = n->op == NNC_OP_MAX;
  nnc_sb body;
  nnc_sb_init(&body);
  lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  ec_mul(outer, inner, cnt, sizeof cnt);
  nnc_sb_printf(&body, "  const int len = %s, inner = %s;\n", len, inner);
  char a[ACCESS], v[EXPR];
  nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n    const int o = e / inner, i = e %% inner;\n"
                       "    double acc = %s;\n    for (int l = 0; l < len; l++) {\n"
                       "      const double v = %s;\n", cnt, max ? "-INFINITY" : "0.0",
                dl_ld(lt, n->in[0], "x", "(o * len + l) * inner + i", a, sizeof a));
  if (max) nnc_sb_printf(&body, "      acc = v > acc || isnan(v) ? v : acc;   /* NaN wins, as in the reference */\n");
  else nnc_sb_printf(&body, "      acc += v;\n");
  const char *val = n->op == NNC_OP_MEAN ? "acc / (double)len" : "acc";
  if (x->g->tensors[n->out[0]].dtype == NNC_I32) nnc_sb_printf(&body, "    }\n    y[e] = nnc_to_i32(%s);\n  }\n", val);
  else {
    snprintf(v, sizeof v, "(float)(%s)", val);
    nnc_sb_printf(&body, "    }\n    %s;\n  }\n", dl_st(lt, n->out[0], "y", "e", v, a, sizeof a));
  }
  lt->finish(lt->self, ki, cnt, &body);
  return NNC_OK;
}

/* softmax over a middle axis: a thread per (outer, inner) pair */
static nnc_status emit_softmax_axis(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char outer[EXPR], len[EXPR], inner[EXPR], cnt[EXPR * 2 + 8];
  around_axis(x, n->in[0], n->attrs.axis, outer, len, inner);
  ec_mul(outer, inner, cnt, sizeof cnt);
  nnc_sb body;
  nnc_sb_init(&body);
  lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  char xl[ACCESS], v[ACCESS + 64], yl[ACCESS * 2];
  dl_ld(lt, n->in[0], "x", "base + l * inner", xl, sizeof xl);
  snprintf(v, sizeof v, "max == -INFINITY ? 0.0f : (float)(exp((double)%s - max) / sum)", xl);
  nnc_sb_printf(&body,
    "  const int len = %s, inner = %s;\n"
    "  NNC_LOOP(e, %s) {\n"
    "    const int base = e / inner * len * inner + e %% inner;\n"
    "    float max = -INFINITY;\n"
    "    for (int l = 0; l < len; l++) max = fmaxf(max, %s);\n"
    "    double sum = 0;\n"
    "    if (max != -INFINITY)\n"
    "      for (int l = 0; l < len; l++) sum += exp((double)%s - max);\n"
    "    for (int l = 0; l < len; l++)   /* every entry masked: zeros */\n"
    "      %s;\n"
    "  }\n", len, inner, cnt, xl, xl, dl_st(lt, n->out[0], "y", "base + l * inner", v, yl, sizeof yl));
  lt->finish(lt->self, ki, cnt, &body);
  return NNC_OK;
}

/* The 32-bit word of two bf16/f16 (or one f32) paddings of im2col node n:
 * 0 or -inf (max pooling's); NULL for any other. */
static const char *pad_word(const nnc_graph *g, const nnc_node *n) {
  if (n->attrs.scalar == 0) return "0u";
  if (!(isinf(n->attrs.scalar) && n->attrs.scalar < 0)) return NULL;
  switch (g->tensors[n->in[0]].dtype) {
  case NNC_BF16: return "0xff80ff80u";
  case NNC_F16: return "0xfc00fc00u";
  case NNC_F32: return "0xff800000u";
  default: return NULL;
  }
}

/* How many elements a work-item of im2col node n copies at once: the
 * elements of 16 bytes when the target has a 16-byte type, the windows are
 * tap-major, a tap's channels fill whole 16-byte units and the padding is 0
 * or -inf; else 0 (element by element). */
static long long im2col_vec(const ec_loop_target *lt, const nnc_node *n) {
  const nnc_tensor *in = &lt->x->g->tensors[n->in[0]];
  long long es = (long long)nnc_dtype_size(in->dtype);
  if (!lt->vec16 || !n->attrs.win.tap_major || !pad_word(lt->x->g, n) || 16 % es) return 0;
  return in->shape[3].k * es % 16 == 0 ? 16 / es : 0;
}

/* Whether a work-item of im2col node n can write 8 of its 2-byte elements
 * as one 16-byte store though a tap's channels are no whole 16 bytes (an
 * RGB stem's rows of 8 taps x 3 channels): tap-major zero-padded windows
 * whose row of taps x channels is. */
static bool im2col_run(const ec_loop_target *lt, const nnc_node *n) {
  const nnc_tensor *in = &lt->x->g->tensors[n->in[0]];
  const nnc_window *w = &n->attrs.win;
  return lt->vec16 && w->tap_major && w->nhwc && n->attrs.scalar == 0 && nnc_dtype_size(in->dtype) == 2 &&
         (long long)w->kh * w->kw * in->shape[3].k % 8 == 0 && im2col_vec(lt, n) == 0;
}

/* Elements of a row of pad node n when a work-item can write the row as one
 * 16-byte unit: the pad is along the last axis, the padded row is 16 bytes
 * of 2- or 4-byte elements and the target has a 16-byte type; else 0. */
static long long pad_vec(const ec_loop_target *lt, const nnc_node *n) {
  const nnc_tensor *in = &lt->x->g->tensors[n->in[0]], *o = &lt->x->g->tensors[n->out[0]];
  long long es = (long long)nnc_dtype_size(o->dtype);
  nnc_dim row = o->shape[o->rank - 1];
  if (!lt->vec16 || n->attrs.axis != o->rank - 1 || in->dtype != o->dtype || (es != 2 && es != 4) ||
      !nnc_dim_is_const(row) || row.k * es != 16 || !nnc_dim_is_const(n->attrs.start))
    return 0;
  return row.k;
}

/* Elements of a 16-byte vector when a work-item of slice node n can copy
 * whole vectors: the slice is along an axis other than the last, so the
 * rows after it (the inner elements) are a constant number of whole vectors,
 * and both buffers are the run's own (16-byte aligned); else 0. */
static long long slice_vec(const ec_loop_target *lt, const nnc_node *n) {
  const nnc_tensor *in = &lt->x->g->tensors[n->in[0]], *o = &lt->x->g->tensors[n->out[0]];
  long long es = (long long)nnc_dtype_size(o->dtype), inner = 1;
  if (!lt->vec16 || !lt->vec_loops || in->dtype != o->dtype || 16 % es || dl_placed16(lt->x, n->in[0]) != 1 ||
      dl_placed16(lt->x, n->out[0]) != 1)
    return 0;
  for (int i = n->attrs.axis + 1; i < o->rank; i++) {
    if (!nnc_dim_is_const(o->shape[i])) return 0;
    inner *= o->shape[i].k;
  }
  return inner * es % 16 == 0 ? 16 / es : 0;
}

/* ------------------------------------------------------------------ moves */

static nnc_status emit_move(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  /* a kv_append or rope comes last, after the head split it reads in place */
  if (g->nodes[k->nodes[k->nnodes - 1]].op == NNC_OP_KV_APPEND) return ec_emit_device_kv_append(lt, ki, err);
  if (g->nodes[k->nodes[k->nnodes - 1]].op == NNC_OP_ROPE) return ec_emit_device_rope(lt, ki, err);
  if (n->op == NNC_OP_LSTM_SCAN || n->op == NNC_OP_GRU_SCAN || n->op == NNC_OP_LSTM_SCAN_GRAD ||
      n->op == NNC_OP_GRU_SCAN_GRAD)
    return ec_emit_device_recurrent(lt, ki, err);
  char e[EXPR], f[EXPR], stride[EXPR], n_expr[EXPR], c[ACCESS];
  nnc_sb body, loop;
  nnc_sb_init(&body);
  nnc_sb_init(&loop);
  if (n->op == NNC_OP_RESHAPE || n->op == NNC_OP_TRANSPOSE) {
    lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
    lt->pointer(lt->self, &body, "", "y", n->out[0]);
    const nnc_tensor *o = &g->tensors[n->out[0]], *in = &g->tensors[n->in[0]];
    ec_elems(x, n->out[0], n_expr, sizeof n_expr);
    if (n->op == NNC_OP_RESHAPE) {
      nnc_sb_printf(&loop, "    %s;\n", cp(lt, n->out[0], "y", "e", "x", "e", c, sizeof c));
    } else {
      /* output coordinate dd walks input dim perm[dd] */
      size_t len = 0;
      for (int dd = 0; dd < o->rank; dd++) {
        char id[16];
        if (dd == o->rank - 1) snprintf(id, sizeof id, "j");
        else snprintf(id, sizeof id, "i%d", dd);
        char w[EXPR + 8];
        ec_dims_product(x, n->in[0], n->attrs.perm[dd] + 1, in->rank, stride, sizeof stride);
        len += (size_t)snprintf(e + len, len < sizeof e ? sizeof e - len : 0, "%s%s", len ? " + " : "",
                                ec_mul(id, dl_as_index(stride, w, sizeof w), f, sizeof f));
      }
      nnc_sb_printf(&loop, "    %s;\n", cp(lt, n->out[0], "y", "e", "x", len ? e : "0", c, sizeof c));
    }
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
    dl_unravel(x, n->out[0], "e", loop.buf, &body, 4);
  } else if (n->op == NNC_OP_IM2COL && im2col_vec(lt, n) > 0) {
    /* tap-major windows, 16 bytes a work-item: V channels of one tap, copied whole */
    const nnc_window *w = &n->attrs.win;
    const nnc_tensor *in = &g->tensors[n->in[0]], *o = &g->tensors[n->out[0]];
    long long V = im2col_vec(lt, n), C = in->shape[3].k, H = in->shape[1].k, W = in->shape[2].k;
    char all[EXPR];
    ec_elems(x, n->out[0], all, sizeof all);
    snprintf(n_expr, sizeof n_expr, "(%.*s) / %lld", (int)sizeof n_expr - 32, all, V);
    lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
    lt->pointer(lt->self, &body, "", "y", n->out[0]);
    nnc_sb_printf(&body, "  /* windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d over an NHWC image, taps outer,\n"
                         "     %lld channels (16 bytes) a work-item */\n"
                         "  const int CV = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n"
                         "  const %s *xv = (const %s *)x;\n  %s *yv = (%s *)y;\n",
                  w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, V, C / V, H, W, (long long)o->shape[1].k,
                  (long long)o->shape[2].k, lt->vec16, lt->vec16, lt->vec16, lt->vec16);
    nnc_sb_printf(&loop, "    const int cv = e %% CV, kk = e / CV %% %d, r = e / CV / %d;\n"
                         "    const int b = r / (OH * OW), ih = r / OW %% OH * %d - %d + kk / %d * %d,\n"
                         "              iw = r %% OW * %d - %d + kk %% %d * %d;\n"
                         "    yv[e] = ih >= 0 && ih < H && iw >= 0 && iw < W ? xv[((b * H + ih) * W + iw) * CV + cv]\n"
                         "                                                : %s(%s, %s, %s, %s);\n",
                  w->kh * w->kw, w->kh * w->kw, w->sh, w->ph, w->kw, w->dh, w->sw, w->pw, w->kw, w->dw, lt->vec16_make,
                  pad_word(g, n), pad_word(g, n), pad_word(g, n), pad_word(g, n));
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
  } else if (n->op == NNC_OP_IM2COL && im2col_run(lt, n)) {
    /* a row of windows (KK*C elements) a work-item: constant loops, so the
     * taps' offsets fold at compile time; each element read alone, each 8
     * written as one 16-byte store */
    const nnc_window *w = &n->attrs.win;
    const nnc_tensor *in = &g->tensors[n->in[0]], *o = &g->tensors[n->out[0]];
    long long C = in->shape[3].k, H = in->shape[1].k, W = in->shape[2].k, KK = (long long)w->kh * w->kw;
    char all[EXPR];
    ec_elems(x, n->out[0], all, sizeof all);
    snprintf(n_expr, sizeof n_expr, "(%.*s) / %lld", (int)sizeof n_expr - 32, all, KK * C);
    lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
    lt->pointer(lt->self, &body, "", "y", n->out[0]);
    nnc_sb_printf(&body, "  /* windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d over an NHWC image, taps outer,\n"
                         "     a row of windows (%lld taps x %lld channels, 16-byte stores) a work-item */\n"
                         "  const int C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n"
                         "  const unsigned short *xs = (const unsigned short *)x;\n  %s *yv = (%s *)y;\n",
                  w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, KK, C, C, H, W, (long long)o->shape[1].k,
                  (long long)o->shape[2].k, lt->vec16, lt->vec16);
    nnc_sb_printf(&loop, "    const int r = e, b = r / (OH * OW), ih0 = r / OW %% OH * %d - %d, iw0 = r %% OW * %d - %d;\n"
                         "    for (int v = 0; v < %lld; v++) {\n"
                         "      unsigned int w[4] = {0u, 0u, 0u, 0u};\n"
                         "      for (int l = 0; l < 8; l++) {\n"
                         "        const int ch = (v * 8 + l) %% C, kk = (v * 8 + l) / C;\n"
                         "        const int ih = ih0 + kk / %d * %d, iw = iw0 + kk %% %d * %d;\n"
                         "        if (ih >= 0 && ih < H && iw >= 0 && iw < W)\n"
                         "          w[l / 2] |= (unsigned int)xs[((b * H + ih) * W + iw) * C + ch] << 16 * (l %% 2);\n"
                         "      }\n"
                         "      yv[r * %lld + v] = %s(w[0], w[1], w[2], w[3]);\n"
                         "    }\n",
                  w->sh, w->ph, w->sw, w->pw, KK * C / 8, w->kw, w->dh, w->kw, w->dw, KK * C / 8, lt->vec16_make);
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
  } else if (n->op == NNC_OP_PAD && pad_vec(lt, n) > 0) {
    /* a row a work-item: its source elements' bits placed in the four words of one 16-byte store */
    const nnc_tensor *o = &g->tensors[n->out[0]];
    long long E = pad_vec(lt, n), es = (long long)nnc_dtype_size(o->dtype);
    const char *bits = es == 2 ? "short" : "int";
    char all[EXPR], inlen[EXPR];
    ec_elems(x, n->out[0], all, sizeof all);
    snprintf(n_expr, sizeof n_expr, "(%.*s) / %lld", (int)sizeof n_expr - 32, all, E);
    dl_dim_of(x, n->in[0], o->rank - 1, inlen, sizeof inlen);
    lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
    lt->pointer(lt->self, &body, "", "y", n->out[0]);
    nnc_sb_printf(&body, "  /* rows of %lld elements (16 bytes): x's %s at %lld, zeros around */\n"
                         "  const int in_len = %s, start = %lld;\n"
                         "  const unsigned %s *xs = (const unsigned %s *)x;\n  %s *yv = (%s *)y;\n",
                  E, inlen, (long long)n->attrs.start.k, inlen, (long long)n->attrs.start.k, bits, bits, lt->vec16,
                  lt->vec16);
    nnc_sb_printf(&loop, "    unsigned int w[4] = {0u, 0u, 0u, 0u};\n    for (int l = 0; l < in_len; l++)\n");
    if (es == 2)
      nnc_sb_printf(&loop, "      w[(start + l) / 2] |= (unsigned int)xs[e * in_len + l] << 16 * ((start + l) %% 2);\n");
    else
      nnc_sb_printf(&loop, "      w[start + l] = xs[e * in_len + l];\n");
    nnc_sb_printf(&loop, "    yv[e] = %s(w[0], w[1], w[2], w[3]);\n", lt->vec16_make);
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
  } else if (n->op == NNC_OP_IM2COL) {
    /* output (b, oh, ow, ch, i*KW + j) reads the image at (oh*SH - PH + i*DH, ow*SW - PW + j*DW) */
    const nnc_window *w = &n->attrs.win;
    const nnc_tensor *in = &g->tensors[n->in[0]], *o = &g->tensors[n->out[0]];
    char z[ACCESS];
    long long C = in->shape[w->nhwc ? 3 : 1].k, H = in->shape[w->nhwc ? 1 : 2].k, W = in->shape[w->nhwc ? 2 : 3].k;
    ec_elems(x, n->out[0], n_expr, sizeof n_expr);
    lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
    lt->pointer(lt->self, &body, "", "y", n->out[0]);
    nnc_sb_printf(&body, "  /* windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d over a %s image */\n"
                         "  const int C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n",
                  w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, w->nhwc ? "NHWC" : "NCHW", C, H, W,
                  (long long)o->shape[1].k, (long long)o->shape[2].k);
    /* tap-major windows: channels fastest, so neighbouring threads read neighbouring channels */
    if (w->tap_major)
      nnc_sb_printf(&loop, "    const int ch = e %% C, kk = e / C %% %d, r = e / C / %d;\n", w->kh * w->kw, w->kh * w->kw);
    else
      nnc_sb_printf(&loop, "    const int kk = e %% %d, ch = e / %d %% C, r = e / %d / C;\n", w->kh * w->kw, w->kh * w->kw,
                    w->kh * w->kw);
    nnc_sb_printf(&loop, "    const int b = r / (OH * OW), ih = r / OW %% OH * %d - %d + kk / %d * %d,\n"
                         "              iw = r %% OW * %d - %d + kk %% %d * %d;\n"
                         "    if (ih >= 0 && ih < H && iw >= 0 && iw < W) %s;\n    else %s;\n",
                  w->sh, w->ph, w->kw, w->dh, w->sw, w->pw, w->kw, w->dw,
                  cp(lt, n->out[0], "y", "e", "x",
                     w->nhwc ? "((b * H + ih) * W + iw) * C + ch" : "((b * C + ch) * H + ih) * W + iw", c, sizeof c),
                  dl_st(lt, n->out[0], "y", "e", isinf(n->attrs.scalar) ? (n->attrs.scalar < 0 ? "-INFINITY" : "INFINITY")
                                                                     : "0.0f", z, sizeof z));
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
  } else if (n->op == NNC_OP_COL2IM) {
    /* im2col's gradient: each pixel gathers the window entries that read it,
     * in a fixed order (no atomics: the same bits every run) */
    const nnc_window *w = &n->attrs.win;
    const nnc_tensor *in = &g->tensors[n->in[0]], *o = &g->tensors[n->out[0]];
    char z[ACCESS], a[ACCESS];
    long long C = o->shape[w->nhwc ? 3 : 1].k, H = o->shape[w->nhwc ? 1 : 2].k, W = o->shape[w->nhwc ? 2 : 3].k;
    ec_elems(x, n->out[0], n_expr, sizeof n_expr);
    lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
    lt->pointer(lt->self, &body, "", "y", n->out[0]);
    nnc_sb_printf(&body, "  /* windows %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d, a %s image */\n"
                         "  const int C = %lld, H = %lld, W = %lld, OH = %lld, OW = %lld;\n",
                  w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw, w->nhwc ? "NHWC" : "NCHW", C, H, W,
                  (long long)in->shape[1].k, (long long)in->shape[2].k);
    nnc_sb_printf(&loop, "    const int %s;\n"
                         "    float acc = 0.0f;\n"
                         "    for (int i = 0; i < %d; i++) {\n"
                         "      const int th = h + %d - i * %d;\n"
                         "      if (th < 0 || th %% %d || th / %d >= OH) continue;\n"
                         "      for (int j = 0; j < %d; j++) {\n"
                         "        const int tw = w + %d - j * %d;\n"
                         "        if (tw < 0 || tw %% %d || tw / %d >= OW) continue;\n"
                         "        acc += %s;\n      }\n    }\n    %s;\n",
                  w->nhwc ? "ch = e % C, w = e / C % W, h = e / (C * W) % H, b = e / (C * W * H)"
                          : "w = e % W, h = e / W % H, ch = e / (W * H) % C, b = e / (W * H * C)",
                  w->kh, w->ph, w->dh, w->sh, w->sh, w->kw, w->pw, w->dw, w->sw, w->sw,
                  dl_ld(lt, n->in[0], "x", w->tap_major ? "(((b * OH + th / SH_) * OW + tw / SW_) * KK_ + i * KW_ + j) * C + ch"
                                                     : "(((b * OH + th / SH_) * OW + tw / SW_) * C + ch) * KK_ + i * KW_ + j",
                     a, sizeof a),
                  dl_st(lt, n->out[0], "y", "e", "acc", z, sizeof z));
    nnc_sb_printf(&body, "  const int SH_ = %d, SW_ = %d, KK_ = %d, KW_ = %d;\n", w->sh, w->sw, w->kh * w->kw, w->kw);
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
  } else {
    /* slice, concat, split: (outer o, position l along the axis, inner i) */
    int axis = n->attrs.axis;
    int whole = n->op == NNC_OP_SPLIT ? n->in[0] : n->out[0];
    char outer[EXPR], len[EXPR], inner[EXPR];
    around_axis(x, whole, axis, outer, len, inner);
    ec_elems(x, whole, n_expr, sizeof n_expr);
    if (n->op == NNC_OP_PAD) {
      /* x's chunk at start along the axis, zeros around it */
      char start[EXPR], inlen[EXPR], z[ACCESS];
      nnc_emit_dim_expr(g, n->attrs.start, "d->", start, sizeof start);
      dl_dim_of(x, n->in[0], axis, inlen, sizeof inlen);
      lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
      lt->pointer(lt->self, &body, "", "y", n->out[0]);
      nnc_sb_printf(&body, "  const int len = %s, inner = %s, in_len = %s, start = %s;\n", len, inner, inlen, start);
      nnc_sb_printf(&loop, "    const int i = e %% inner, l = e / inner %% len - start, o = e / inner / len;\n"
                           "    if (l >= 0 && l < in_len) %s;\n    else %s;\n",
                    cp(lt, n->out[0], "y", "e", "x", "(o * in_len + l) * inner + i", c, sizeof c),
                    dl_st(lt, n->out[0], "y", "e", "0.0f", z, sizeof z));
    } else if (n->op == NNC_OP_SLICE && slice_vec(lt, n) > 0) {
      /* a work-item copies a 16-byte vector: V elements of an inner row */
      long long V = slice_vec(lt, n);
      char start[EXPR], inlen[EXPR];
      nnc_emit_dim_expr(g, n->attrs.start, "d->", start, sizeof start);
      dl_dim_of(x, n->in[0], axis, inlen, sizeof inlen);
      lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
      lt->pointer(lt->self, &body, "", "y", n->out[0]);
      nnc_sb_printf(&body, "  const int len = %s, inner = %s / %lld, in_len = %s, start = %s;   /* inner: vectors */\n"
                           "  const %s *xv = (const %s *)x;\n  %s *yv = (%s *)y;\n",
                    len, inner, V, inlen, start, lt->vec16, lt->vec16, lt->vec16, lt->vec16);
      nnc_sb_printf(&loop, "    const int i = e %% inner, l = e / inner %% len, o = e / inner / len;\n"
                           "    yv[e] = xv[(o * in_len + start + l) * inner + i];\n");
      char all[EXPR];
      snprintf(all, sizeof all, "%s", n_expr);
      snprintf(n_expr, sizeof n_expr, "(%.*s) / %lld", (int)sizeof n_expr - 32, all, V);
    } else if (n->op == NNC_OP_SLICE) {
      char start[EXPR], inlen[EXPR];
      nnc_emit_dim_expr(g, n->attrs.start, "d->", start, sizeof start);
      dl_dim_of(x, n->in[0], axis, inlen, sizeof inlen);
      lt->pointer(lt->self, &body, "const ", "x", n->in[0]);
      lt->pointer(lt->self, &body, "", "y", n->out[0]);
      nnc_sb_printf(&body, "  const int len = %s, inner = %s, in_len = %s, start = %s;\n", len, inner, inlen, start);
      nnc_sb_printf(&loop, "    const int i = e %% inner, l = e / inner %% len, o = e / inner / len;\n    %s;\n",
                    cp(lt, n->out[0], "y", "e", "x", "(o * in_len + start + l) * inner + i", c, sizeof c));
    } else {
      bool cat = n->op == NNC_OP_CONCAT;
      int nparts = cat ? n->nin : n->nout;
      lt->pointer(lt->self, &body, cat ? "" : "const ", cat ? "y" : "x", whole);
      for (int i = 0; i < nparts; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "%s%d", cat ? "x" : "y", i);
        lt->pointer(lt->self, &body, cat ? "const " : "", nm, cat ? n->in[i] : n->out[i]);
      }
      nnc_sb_printf(&body, "  const int len = %s, inner = %s;\n", len, inner);
      nnc_sb_printf(&loop, "    const int i = e %% inner, o = e / inner / len;\n    int l = e / inner %% len;\n");
      for (int i = 0; i < nparts; i++) {
        char l[EXPR];
        dl_dim_of(x, cat ? n->in[i] : n->out[i], axis, l, sizeof l);
        bool last = i + 1 == nparts;
        nnc_sb_printf(&loop, "    {\n      const int L = %s;\n", l);
        const char *ind = last ? "      " : "        ";
        if (!last) nnc_sb_printf(&loop, "      if (l < L) {\n");
        char part[16];
        snprintf(part, sizeof part, "%s%d", cat ? "x" : "y", i);
        if (cat) cp(lt, whole, "y", "e", part, "(o * L + l) * inner + i", c, sizeof c);
        else cp(lt, whole, part, "(o * L + l) * inner + i", "x", "e", c, sizeof c);
        nnc_sb_printf(&loop, "%s%s;\n", ind, c);
        if (!last) nnc_sb_printf(&loop, "        continue;\n      }\n      l -= L;\n");
        nnc_sb_printf(&loop, "    }\n");
      }
    }
    nnc_sb_printf(&body, "  NNC_LOOP(e, %s) {\n", n_expr);
  }
  if (loop.buf) nnc_sb_puts(&body, loop.buf);
  if (loop.oom) body.oom = true;
  nnc_sb_free(&loop);
  nnc_sb_printf(&body, "  }\n");
  lt->finish(lt->self, ki, n_expr, &body);
  return NNC_OK;
}

/* ----------------------------------------------------------------- gather */

/* Elements a vector of nnc_gather for embedding node n: 16 bytes of the
 * narrower of the table and the output, where rows of both are whole 16-byte
 * vectors (the row length a constant multiple) and the target has the vector
 * loops; 0 (an element at a time) otherwise, and for a vocabulary split. */
static int gather_vec(const ec_loop_target *lt, const nnc_node *n) {
  const nnc_graph *g = lt->x->g;
  const nnc_tensor *table = &g->tensors[n->in[0]], *y = &g->tensors[n->out[0]];
  if (!lt->vec_loops || n->attrs.ranks > 1 || !dl_vec_dtype(table->dtype) || !dl_vec_dtype(y->dtype)) return 0;
  int es = nnc_dtype_size(table->dtype) < nnc_dtype_size(y->dtype) ? nnc_dtype_size(table->dtype)
                                                                    : nnc_dtype_size(y->dtype);
  const nnc_dim c = table->shape[1];
  return nnc_dim_is_const(c) && c.k % (16 / es) == 0 ? 16 / es : 0;
}

static nnc_status emit_gather(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const bool split = n->attrs.ranks > 1;
  if (split && !lt->rank)
    return nnc_errorf(err, NNC_E_TARGET, n->loc, "%s: expected a target that runs parallel plans for a "
                      "vocabulary-split embedding, found one without ranks", x->r->target->name);
  char V[EXPR], C[EXPR], n_expr[EXPR];
  dl_dim_of(x, n->in[0], 0, V, sizeof V);
  dl_dim_of(x, n->in[0], 1, C, sizeof C);
  ec_elems(x, n->out[0], n_expr, sizeof n_expr);
  nnc_sb body;
  nnc_sb_init(&body);
  lt->pointer(lt->self, &body, "const ", "table", n->in[0]);
  lt->pointer(lt->self, &body, "const ", "ids", n->in[1]);
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  char row[ACCESS], v[ACCESS + 96], s[ACCESS * 2];
  if (split) {
    dl_ld(lt, n->in[0], "table", "(id - first) * C + e % C", row, sizeof row);
    snprintf(v, sizeof v, "id >= first && id < first + V ? %s : id >= 0 && id < %lld ? 0.0f : NAN", row,
             (long long)n->attrs.vocab);
    nnc_sb_printf(&body,
      "  /* this rank's rows of the vocabulary (%lld split over %d ranks) are ids first .. first + V - 1 */\n"
      "  const int V = %s, C = %s, first = %s * V;\n"
      "  NNC_LOOP(e, %s) {\n"
      "    const int id = ids[e / C];\n"
      "    /* another rank's id gives zeros (the all_reduce after adds its row); an id outside the\n"
      "     * vocabulary NaN: the run cannot stop here */\n"
      "    %s;\n"
      "  }\n", (long long)n->attrs.vocab, n->attrs.ranks, V, C, lt->rank, n_expr, dl_st(lt, n->out[0], "y", "e", v, s, sizeof s));
  } else if (gather_vec(lt, n)) {
    int N = gather_vec(lt, n);
    char rows[EXPR];
    ec_elems(x, n->in[1], rows, sizeof rows);
    nnc_sb_printf(&body,
      "  /* vectors of %d elements, an id and a division a vector; an id outside the table gives a row of NaN:\n"
      "   * the run cannot stop here */\n"
      "  nnc_gather<%d>(y, table, ids, (int)(%s), %s, %s);\n", N, N, rows, V, C);
    char threads[EXPR + 48];
    snprintf(threads, sizeof threads, "(int)nnc_vec_threads((%s) / %d)", n_expr, N);
    lt->finish(lt->self, ki, threads, &body);
    return NNC_OK;
  } else {
    dl_ld(lt, n->in[0], "table", "id * C + e % C", row, sizeof row);
    snprintf(v, sizeof v, "id >= 0 && id < V ? %s : NAN", row);
    nnc_sb_printf(&body,
      "  const int V = %s, C = %s;\n"
      "  NNC_LOOP(e, %s) {\n"
      "    const int id = ids[e / C];\n"
      "    /* an id outside the table gives a row of NaN: the run cannot stop here */\n"
      "    %s;\n"
      "  }\n", V, C, n_expr, dl_st(lt, n->out[0], "y", "e", v, s, sizeof s));
  }
  lt->finish(lt->self, ki, n_expr, &body);
  return NNC_OK;
}

/* ------------------------------------------------------------------- loss */

/* What the loss and its gradient share: i32 targets, the classes V and the
 * rows, and the logits x and targets t declared at the top of body. */
static nnc_status loss_operands(const ec_loop_target *lt, const nnc_kernel *k, char *V, char *rows, nnc_sb *body,
                                nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  if (x->g->tensors[n->in[1]].dtype != NNC_I32)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "%s: %s expects i32 targets", x->r->target->name,
                      nnc_op_info_of(n->op)->name);
  dl_dim_of(x, n->in[0], x->g->tensors[n->in[0]].rank - 1, V, EXPR);
  ec_elems(x, n->in[1], rows, EXPR);
  lt->pointer(lt->self, body, "const ", "x", n->in[0]);
  lt->pointer(lt->self, body, "const ", "t", n->in[1]);
  return NNC_OK;
}

static nnc_status emit_loss(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char V[EXPR], rows[EXPR];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_status rc = loss_operands(lt, k, V, rows, &body, err);
  if (rc) {
    nnc_sb_free(&body);
    return rc;
  }
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  char xv[ACCESS], xt[ACCESS], y0[ACCESS];
  dl_ld(lt, n->in[0], "x", "r * V + v", xv, sizeof xv);
  dl_ld(lt, n->in[0], "x", "r * V + target", xt, sizeof xt);
  dl_st(lt, n->out[0], "y", "0", "(float)(total / (double)rows)", y0, sizeof y0);
  /* one work-item adds the rows' losses in order: the result does not
   * depend on the device's scheduling */
  nnc_sb_printf(&body,
    "  NNC_ONE_ITEM();\n"
    "  const int V = %s, rows = %s;\n"
    "  double total = 0;\n"
    "  for (int r = 0; r < rows; r++) {\n"
    "    const int target = t[r];\n"
    "    if (target < 0 || target >= V) {   /* a target outside the classes: NaN */\n"
    "      total = NAN;\n"
    "      continue;\n"
    "    }\n"
    "    double max = -INFINITY, sum = 0;\n"
    "    for (int v = 0; v < V; v++) max = fmax(max, (double)%s);\n"
    "    for (int v = 0; v < V; v++) sum += exp((double)%s - max);\n"
    "    total += max + log(sum) - %s;\n"
    "  }\n"
    "  %s;\n", V, rows, xv, xv, xt, y0);
  lt->finish(lt->self, ki, "1", &body);
  return NNC_OK;
}

/* d loss / d logits = (softmax(logits) - onehot(targets)) * dloss / rows: a
 * work-item per row recomputes its softmax from the logits (the max, then
 * the sum in double, as the loss does) and writes the row's gradient. */
static nnc_status emit_loss_grad(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char V[EXPR], rows[EXPR];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_status rc = loss_operands(lt, k, V, rows, &body, err);
  if (rc) {
    nnc_sb_free(&body);
    return rc;
  }
  lt->pointer(lt->self, &body, "const ", "dloss", n->in[2]);
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  char xv[ACCESS], dl[ACCESS], g[ACCESS + 96], put[ACCESS * 3], nan[ACCESS];
  dl_ld(lt, n->in[0], "x", "r * V + v", xv, sizeof xv);
  dl_ld(lt, n->in[2], "dloss", "0", dl, sizeof dl);
  snprintf(g, sizeof g, "(float)((exp((double)%s - max) / sum - (v == target ? 1.0 : 0.0)) * scale)", xv);
  dl_st(lt, n->out[0], "y", "r * V + v", g, put, sizeof put);
  dl_st(lt, n->out[0], "y", "r * V + v", "NAN", nan, sizeof nan);
  nnc_sb_printf(&body,
    "  const int V = %s, rows = %s;\n"
    "  const double scale = (double)%s / (double)rows;\n"
    "  NNC_LOOP(r, rows) {\n"
    "    const int target = t[r];\n"
    "    if (target < 0 || target >= V) {   /* a target outside the classes: NaN, as the loss */\n"
    "      for (int v = 0; v < V; v++) %s;\n"
    "      continue;\n"
    "    }\n"
    "    double max = -INFINITY, sum = 0;\n"
    "    for (int v = 0; v < V; v++) max = fmax(max, (double)%s);\n"
    "    for (int v = 0; v < V; v++) sum += exp((double)%s - max);\n"
    "    for (int v = 0; v < V; v++) %s;\n"
    "  }\n", V, rows, dl, nan, xv, xv, put);
  lt->finish(lt->self, ki, rows, &body);
  return NNC_OK;
}

/* Work-items of the scatter-add: about this many, each owning a column of a
 * block of rows of the table's gradient. */
#define SCATTER_ITEMS 65536

/* The embedding's gradient, a scatter-add without atomics: work-item e owns
 * column j of R consecutive rows of the [V, C] gradient (R from the table's
 * size, for about SCATTER_ITEMS items), zeroes them, then walks every id in
 * order and adds dy's element where the id names one of its rows. Each
 * element's sum is in the ids' order whatever the scheduling, as on C SIMD;
 * neighbouring items read and write neighbouring columns. */
static nnc_status emit_embedding_grad(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  char V[EXPR], C[EXPR], count[EXPR], items[EXPR * 2 + 80];
  dl_dim_of(x, n->out[0], 0, V, sizeof V);
  dl_dim_of(x, n->out[0], 1, C, sizeof C);
  ec_elems(x, n->in[1], count, sizeof count);
  int64_t R = nnc_tensor_max_elems(x->g, &x->g->tensors[n->out[0]]) / SCATTER_ITEMS + 1;
  if (R == 1) ec_mul(C, V, items, sizeof items);
  else snprintf(items, sizeof items, "%s * ((%s + %lld) / %lld)", C, V, (long long)R - 1, (long long)R);
  nnc_sb body;
  nnc_sb_init(&body);
  lt->pointer(lt->self, &body, "const ", "dy", n->in[0]);
  lt->pointer(lt->self, &body, "const ", "ids", n->in[1]);
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  /* a vocabulary split: this rank's rows are ids first .. first + V - 1, the other ids add nowhere */
  const bool split = n->attrs.ranks > 1;
  if (split && !lt->rank)
    return nnc_errorf(err, NNC_E_TARGET, n->loc, "%s: expected a target that runs parallel plans for a "
                      "vocabulary-split embedding's gradient, found one without ranks", x->r->target->name);
  char first[EXPR + 24];
  if (split) snprintf(first, sizeof first, ", first = %s * V", lt->rank);
  else first[0] = 0;
  char zero[ACCESS], yv[ACCESS], dv[ACCESS], sum[ACCESS * 2 + 8], add[ACCESS * 4];
  dl_st(lt, n->out[0], "y", "v * C + j", "0.0f", zero, sizeof zero);
  dl_ld(lt, n->out[0], "y", "id * C + j", yv, sizeof yv);
  dl_ld(lt, n->in[0], "dy", "r * C + j", dv, sizeof dv);
  snprintf(sum, sizeof sum, "%s + %s", yv, dv);
  dl_st(lt, n->out[0], "y", "id * C + j", sum, add, sizeof add);
  nnc_sb_printf(&body,
    "  const int V = %s, C = %s, count = %s, R = %lld%s;\n"
    "  NNC_LOOP(e, %s) {\n"
    "    const int j = e %% C, v0 = e / C * R, v1 = v0 + R < V ? v0 + R : V;\n"
    "    for (int v = v0; v < v1; v++) %s;\n"
    "    /* an id outside the table adds nowhere: the lookup made its row NaN, and so the loss */\n"
    "    for (int r0 = 0; r0 < count; r0 += 8) {\n"
    "      /* eight ids at a time: their loads go out together, not one per add */\n"
    "      int idv[8];\n"
    "      for (int u = 0; u < 8; u++) idv[u] = r0 + u < count ? ids[r0 + u]%s : -1;\n"
    "      for (int u = 0; u < 8; u++) {\n"
    "        const int id = idv[u], r = r0 + u;\n"
    "        if (id >= v0 && id < v1) %s;\n"
    "      }\n"
    "    }\n"
    "  }\n", V, C, count, (long long)R, first, items, zero, split ? " - first" : "", add);
  lt->finish(lt->self, ki, items, &body);
  return NNC_OK;
}

nnc_status ec_emit_device_loop(const ec_loop_target *lt, int ki, nnc_error *err) {
  const ec_ctx *x = lt->x;
  const nnc_kernel *k = &x->s->k[ki];
  switch (k->kind) {
  case NNC_KERNEL_ELEMENTWISE: return dl_emit_elementwise(lt, ki, err);
  case NNC_KERNEL_REDUCE: return k->nnodes > 1 ? dl_emit_reduce_chain(lt, ki, err) : emit_reduce(lt, ki, err);
  case NNC_KERNEL_ROW: return k->nnodes > 1 ? dl_emit_row_chain(lt, ki, err) : emit_softmax_axis(lt, ki, err);
  case NNC_KERNEL_MOVE: return emit_move(lt, ki, err);
  case NNC_KERNEL_GATHER:
    if (x->g->nodes[k->nodes[0]].op == NNC_OP_EMBEDDING_GRAD) return emit_embedding_grad(lt, ki, err);
    return emit_gather(lt, ki, err);
  case NNC_KERNEL_LOSS:
    if (x->g->nodes[k->nodes[0]].op == NNC_OP_CROSS_ENTROPY_GRAD) return emit_loss_grad(lt, ki, err);
    return emit_loss(lt, ki, err);
  default:
    return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "%s: no loop for a %s kernel", x->r->target->name,
                      nnc_kernel_kind_name(k->kind));
  }
}
