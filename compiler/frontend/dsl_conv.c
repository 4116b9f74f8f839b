/* compiler/frontend/dsl_conv.c — the image ops of the model language:
 * conv2d, conv1d, maxpool2d, avgpool2d, adaptive_avgpool2d, batchnorm and
 * flatten, with PyTorch's weight layouts and names so that torchvision-style
 * checkpoints load.
 *
 * Each is written in the graph's own ops around im2col: a convolution is the
 * windows as rows ([N*OH*OW, C*KH*KW]) times the weight flattened to
 * [O, C*KH*KW], a linear whose bias and activation the GEMM epilogue fuses,
 * which gives NHWC. The image ops of an NCHW model are the NHWC ones between
 * two transposes (to NHWC before, back after): one lowering, the fast one,
 * and passes/layout.c cancels the transposes between consecutive image ops,
 * moving them through the elementwise ops between. Pooling is a max or mean
 * over each window. Batch norm (inference: the running
 * statistics) is one multiply-add per channel, the per-channel factors made
 * from the four weights by elementwise ops. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fe.h"

static const nnc_tensor *tensor(lua_State *L, int id) { return &fe_get(L)->g->tensors[id]; }

static int node_out(lua_State *L, nnc_op op, int nin, const int *in, const nnc_attrs *a, const char *label,
                    const fe_shape *preset) {
  return fe_out(L, fe_add_node(L, op, nin, in, a, 1, label, preset));
}

static int reshape(lua_State *L, int x, int rank, const nnc_dim *dims) {
  fe_shape s = {rank, {{0}}};
  memcpy(s.dim, dims, (size_t)rank * sizeof *dims);
  return node_out(L, NNC_OP_RESHAPE, 1, &x, NULL, NULL, &s);
}

static int permute(lua_State *L, int x, const int *perm) {
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  memcpy(at.perm, perm, (size_t)tensor(L, x)->rank * sizeof *perm);
  return node_out(L, NNC_OP_TRANSPOSE, 1, &x, &at, NULL, NULL);
}

static nnc_dim mul(lua_State *L, nnc_dim a, nnc_dim b, const char *fn) {
  nnc_dim r;
  if (!nnc_dim_mul(a, b, &r)) fe_fail(L, NNC_E_SHAPE, "%s: the batch times the output size is too large", fn);
  return r;
}

/* The value at idx as a size pair: an integer n (n, n) or a pair {h, w};
 * false for anything else. */
static bool to_pair(lua_State *L, int idx, const char *fn, const char *what, int *out) {
  char d[256];
  idx = lua_absindex(L, idx);
  if (lua_isinteger(L, idx)) {
    out[0] = out[1] = (int)lua_tointeger(L, idx);
    return true;
  }
  if (!lua_istable(L, idx) || luaL_len(L, idx) != 2) return false;
  for (int i = 0; i < 2; i++) {
    lua_geti(L, idx, i + 1);
    if (!lua_isinteger(L, -1)) fe_fail(L, NNC_E_MODEL, "%s: expected integers in %s, found %s", fn, what, fe_describe(L, -1, d, sizeof d));
    out[i] = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  return true;
}

/* Option key of the opts table at idx as a pair; dflt when absent. */
static void opt_pair(lua_State *L, int idx, const char *fn, const char *key, const int *dflt, int *out) {
  char d[256];
  out[0] = dflt[0];
  out[1] = dflt[1];
  if (!lua_istable(L, idx)) return;
  lua_getfield(L, idx, key);
  if (!lua_isnil(L, -1) && !to_pair(L, -1, fn, key, out))
    fe_fail(L, NNC_E_MODEL, "%s: expected an integer or a pair {h, w} for %s, found %s", fn, key,
            fe_describe(L, -1, d, sizeof d));
  lua_pop(L, 1);
}

/* A positional size argument as a pair. */
static void arg_pair(lua_State *L, int idx, const char *fn, const char *what, int *out) {
  char d[256];
  if (!to_pair(L, idx, fn, what, out))
    fe_fail(L, NNC_E_MODEL, "%s: expected the %s as an integer or a pair {h, w}, found %s", fn, what,
            fe_describe(L, idx, d, sizeof d));
}

/* layout = "nchw" (default) or "nhwc"; ncl/nlc for conv1d. */
static bool opt_channels_last(lua_State *L, int idx, const char *fn, const char *first, const char *last) {
  bool cl = false;
  if (!lua_istable(L, idx)) return false;
  lua_getfield(L, idx, "layout");
  const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  if (s && strcmp(s, last) == 0) cl = true;
  else if (!lua_isnil(L, -1) && !(s && strcmp(s, first) == 0)) {
    char d[256];
    fe_fail(L, NNC_E_MODEL, "%s: expected layout \"%s\" or \"%s\", found %s", fn, first, last, fe_describe(L, -1, d, sizeof d));
  }
  lua_pop(L, 1);
  return cl;
}

/* The image x as rank 4 with constant channels, height and width. */
static void want_image(lua_State *L, int x, int argi, const char *fn, bool nhwc) {
  const nnc_tensor *t = tensor(L, x);
  char d[256];
  if (t->rank != 4)
    fe_fail(L, NNC_E_SHAPE, "%s: expected an image of rank 4 (%s), found %s", fn, nhwc ? "[N, H, W, C]" : "[N, C, H, W]",
            fe_describe(L, argi, d, sizeof d));
  for (int i = 1; i < 4; i++)
    if (!nnc_dim_is_const(t->shape[i]))
      fe_fail(L, NNC_E_SHAPE, "%s: expected constant channels, height and width (weights and windows have fixed "
              "sizes), found %s", fn, fe_describe(L, argi, d, sizeof d));
}

/* The window w fits the image x: checked here, not only by
 * im2col's shape rule, because im2col reads the image after its transposes
 * and padding, which the message should not name. */
static void want_fits(lua_State *L, int x, const char *fn, const nnc_window *w, bool nhwc) {
  const nnc_tensor *t = tensor(L, x);
  int64_t H = t->shape[nhwc ? 1 : 2].k, W = t->shape[nhwc ? 2 : 3].k;
  int64_t oh = (H + 2 * w->ph - (int64_t)w->dh * (w->kh - 1) - 1) / w->sh + 1;
  int64_t ow = (W + 2 * w->pw - (int64_t)w->dw * (w->kw - 1) - 1) / w->sw + 1;
  char d[256];
  if (w->kh >= 1 && w->kw >= 1 && w->sh >= 1 && w->sw >= 1 && w->dh >= 1 && w->dw >= 1 && (oh < 1 || ow < 1))
    fe_fail(L, NNC_E_SHAPE, "%s: expected an image at least as large as the kernel %dx%d (dilation %dx%d, padding "
            "%dx%d), found %s %s%s", fn, w->kh, w->kw, w->dh, w->dw, w->ph, w->pw, t->name, nnc_dtype_name(t->dtype),
            nnc_shape_format(fe_get(L)->g, t->rank, t->shape, d, sizeof d));
}

/* The windows, labelled with the op that reads them (its messages name it). */
static int im2col(lua_State *L, int x, const nnc_window *w, double pad, const char *fn) {
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.win = *w;
  at.scalar = pad;
  return node_out(L, NNC_OP_IM2COL, 1, &x, &at, fn, NULL);
}

/* Channels of an NHWC image the tap-major windows round up to, the
 * target's (nnc_frontend_opts.channel_run): 8 of them fill 16 bytes in bf16,
 * what the CUDA copies move at once (an RGB image's 3 would be copied
 * element by element, and its GEMM's K of 7*7*3 is not 16-byte aligned
 * either); C SIMD's windows take any. */
static int64_t channel_run(lua_State *L) { return fe_get(L)->channel_run; }

/* t with zeros after its entries along axis, up to size. */
static int pad_to(lua_State *L, int t, int axis, int64_t size) {
  const nnc_tensor *x = tensor(L, t);
  fe_shape s = {x->rank, {{0}}};
  memcpy(s.dim, x->shape, (size_t)x->rank * sizeof *x->shape);
  s.dim[axis] = nnc_dim_const(size);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = axis;
  at.start = nnc_dim_const(0);
  return node_out(L, NNC_OP_PAD, 1, &t, &at, NULL, &s);
}

/* t with zeros after its C channels along axis, up to a multiple of channel_run. */
static int pad_channels(lua_State *L, int t, int axis, int64_t C) {
  int64_t run = channel_run(L);
  return pad_to(L, t, axis, (C + run - 1) / run * run);
}

/* Taps a row window of an image of few channels (an RGB stem's 3) widens
 * to, so that a row's taps times its channels fill whole 16-byte runs:
 * the row's KW taps of C channels are then one run of the windows, not KW
 * runs each padded to channel_run (ResNet's 7x7 stem: K = 7 rows of 8 taps
 * x 3 = 168, not 49 taps x 8 = 392). The extra taps read the image (or
 * its padding) and meet zero weights. 0 when that saves nothing or the
 * wider window would give fewer output columns. */
static int row_taps(const nnc_window *w, int64_t W, int64_t C, int64_t run) {
  if (C % run == 0 || w->kw < 2) return 0;
  int kw = w->kw;
  while (kw * C % run) kw++;
  int64_t ow = (W + 2 * w->pw - (int64_t)w->dw * (w->kw - 1) - 1) / w->sw + 1;
  int64_t ow2 = (W + 2 * w->pw - (int64_t)w->dw * (kw - 1) - 1) / w->sw + 1;
  int64_t padded = (C + run - 1) / run * run;
  return ow2 == ow && kw * C < w->kw * padded ? kw : 0;
}

/* The [N, OH, OW, O] result as the model's layout. */
static int to_layout(lua_State *L, int y, bool nhwc) {
  static const int to_nchw[4] = {0, 3, 1, 2};
  return nhwc ? y : permute(L, y, to_nchw);
}

/* The model's image as NHWC, what the windows read. */
static int from_layout(lua_State *L, int x, bool nhwc) {
  static const int to_nhwc[4] = {0, 2, 3, 1};
  return nhwc ? x : permute(L, x, to_nhwc);
}

/* The convolution of a rank-4 image by weight [O, C/groups, KH, KW] (any
 * shape with those elements: conv1d's [O, C/groups, K]) and an optional bias.
 * An NHWC image without groups takes its windows tap-major, each tap's
 * channels one contiguous run of the image (a copy, not a gather), and the
 * weight as [O, KH*KW, C] to match. A depthwise convolution (a group per
 * channel, one output each) is no GEMM at all: the tap-major windows times
 * the weight as [KH*KW, C], summed over the taps, which a target can run as
 * one pass over the image (a GEMM per channel of N = 1 cannot). */
static int conv_core(lua_State *L, int x, const nnc_window *w, int64_t O, int64_t groups, int weight, int bias,
                     const char *label, const char *fn) {
  nnc_window win = *w;
  int64_t C0 = tensor(L, x)->shape[3].k;
  bool depthwise = w->nhwc && groups > 1 && groups == C0 && O == groups;
  win.tap_major = w->nhwc && (groups == 1 || depthwise);
  int wide = groups == 1 && win.tap_major ? row_taps(&win, tensor(L, x)->shape[2].k, C0, channel_run(L)) : 0;
  if (wide) {
    /* two windowings: each output column's row of `wide` taps as one pixel of wide*C0 channels
     * ([N, H, OW, wide*C0]), then the KH x 1 windows over those rows, which the GEMM reads */
    int64_t KH = win.kh, KW = win.kw;
    nnc_window row = {1, wide, 1, win.sw, 0, win.pw, 1, win.dw, true, true};
    int r = im2col(L, x, &row, 0.0, fn);
    const nnc_tensor *rt = tensor(L, r);
    r = reshape(L, r, 4, (nnc_dim[]){rt->shape[0], rt->shape[1], rt->shape[2], nnc_dim_const(wide * C0)});
    nnc_window col = {win.kh, 1, win.sh, 1, win.ph, 0, win.dh, 1, true, true};
    /* the weight as [O, KH, wide, C0]: zeros for the extra taps */
    int wm = reshape(L, weight, 4, (nnc_dim[]){nnc_dim_const(O), nnc_dim_const(C0), nnc_dim_const(KH), nnc_dim_const(KW)});
    wm = pad_to(L, wm, 3, wide);
    wm = permute(L, wm, (const int[]){0, 2, 3, 1});
    wm = reshape(L, wm, 2, (nnc_dim[]){nnc_dim_const(O), nnc_dim_const(KH * wide * C0)});
    int cols = im2col(L, r, &col, 0.0, fn);
    const nnc_tensor *ct = tensor(L, cols);
    int a = reshape(L, cols, 4, (nnc_dim[]){ct->shape[0], ct->shape[1], ct->shape[2], nnc_dim_const(KH * wide * C0)});
    nnc_attrs at;
    memset(&at, 0, sizeof at);
    int in[3] = {a, wm, bias};
    return node_out(L, NNC_OP_LINEAR, bias >= 0 ? 3 : 2, in, &at, label, NULL);
  }
  if (groups == 1 && win.tap_major && C0 % channel_run(L)) x = pad_channels(L, x, 3, C0);
  int cols = im2col(L, x, &win, 0.0, fn);
  const nnc_tensor *ct = tensor(L, cols);
  nnc_dim N = ct->shape[0], OH = ct->shape[1], OW = ct->shape[2];
  int64_t C = ct->shape[win.tap_major ? 4 : 3].k, KK = ct->shape[win.tap_major ? 3 : 4].k, Cg = C / groups, Og = O / groups;
  nnc_dim rows = mul(L, mul(L, N, OH, fn), OW, fn);
  int y;
  if (depthwise) {
    int wm = reshape(L, weight, 2, (nnc_dim[]){nnc_dim_const(C), nnc_dim_const(KK)});
    wm = permute(L, wm, (const int[]){1, 0});
    int prod = node_out(L, NNC_OP_MUL, 2, (int[]){cols, wm}, NULL, label, NULL);
    nnc_attrs at;
    memset(&at, 0, sizeof at);
    at.axis = 3;
    y = node_out(L, NNC_OP_SUM, 1, &prod, &at, label, NULL);
    return bias >= 0 ? node_out(L, NNC_OP_ADD, 2, (int[]){y, bias}, NULL, label, NULL) : y;
  }
  if (groups == 1) {
    /* the windows as [N, OH, OW, C*KK]: the product is the [N, OH, OW, O] result itself, so
     * what follows (an activation, a residual) can join the GEMM's epilogue */
    int a = reshape(L, cols, 4, (nnc_dim[]){N, OH, OW, nnc_dim_const(C * KK)});
    int wm = weight;
    if (win.tap_major) {
      wm = reshape(L, wm, 3, (nnc_dim[]){nnc_dim_const(O), nnc_dim_const(C0), nnc_dim_const(KK)});
      wm = permute(L, wm, (const int[]){0, 2, 1});
      if (C0 != C) wm = pad_channels(L, wm, 2, C0);
    }
    wm = reshape(L, wm, 2, (nnc_dim[]){nnc_dim_const(O), nnc_dim_const(C * KK)});
    nnc_attrs at;
    memset(&at, 0, sizeof at);
    int in[3] = {a, wm, bias};
    return node_out(L, NNC_OP_LINEAR, bias >= 0 ? 3 : 2, in, &at, label, NULL);
  } else {
    /* per group: [groups, rows, Cg*KK] x [groups, Cg*KK, Og] */
    int a = reshape(L, cols, 3, (nnc_dim[]){rows, nnc_dim_const(groups), nnc_dim_const(Cg * KK)});
    a = permute(L, a, (const int[]){1, 0, 2});
    int wm = reshape(L, weight, 3, (nnc_dim[]){nnc_dim_const(groups), nnc_dim_const(Og), nnc_dim_const(Cg * KK)});
    wm = permute(L, wm, (const int[]){0, 2, 1});
    int in[2] = {a, wm};
    y = node_out(L, NNC_OP_MATMUL, 2, in, NULL, label, NULL);
    y = permute(L, y, (const int[]){1, 0, 2});
    y = reshape(L, y, 2, (nnc_dim[]){rows, nnc_dim_const(O)});
    if (bias >= 0) {
      int bin[2] = {y, bias};
      y = node_out(L, NNC_OP_ADD, 2, bin, NULL, label, NULL);
    }
  }
  return reshape(L, y, 4, (nnc_dim[]){N, OH, OW, nnc_dim_const(O)});
}

/* The input's C channels split into the groups. */
static void want_groups(lua_State *L, const char *fn, int64_t C, int64_t groups) {
  if (C % groups != 0)
    fe_fail(L, NNC_E_SHAPE, "%s: expected input channels divisible by groups %lld, found %lld channels", fn,
            (long long)groups, (long long)C);
}

/* Reads conv's common arguments: n_out, the scope and the options. */
static const char *conv_args(lua_State *L, const char *fn, lua_Integer *O, int64_t *groups, bool *bias) {
  static const char *const keys[] = {"stride", "padding", "dilation", "groups", "bias", "layout", NULL};
  char d[256];
  *O = fe_arg_int(L, 2, fn, "number of output channels");
  const char *prefix = fe_scope_at(L, 4);
  if (!prefix) fe_fail(L, NNC_E_MODEL, "%s: expected a scope for the weights, found %s", fn, fe_describe(L, 4, d, sizeof d));
  fe_arg_opts(L, 5, fn, keys);
  *groups = (int64_t)fe_opt_number(L, 5, fn, "groups", 1);
  *bias = fe_opt_bool(L, 5, fn, "bias", true);
  if (*O < 1 || *groups < 1 || *O % *groups != 0)
    fe_fail(L, NNC_E_SHAPE, "%s: expected output channels >= 1 divisible by groups >= 1, found %lld and groups %lld",
            fn, (long long)*O, (long long)*groups);
  return prefix;
}


/* conv2d(x, n_out, kernel, p, {stride, padding, dilation, groups, bias, layout}) */
static int l_conv2d(lua_State *L) {
  const char *fn = "conv2d";
  int x = fe_arg_tensor(L, 1, fn);
  lua_Integer O;
  int64_t groups;
  bool with_bias;
  const char *prefix = conv_args(L, fn, &O, &groups, &with_bias);
  bool nhwc = opt_channels_last(L, 5, fn, "nchw", "nhwc");
  want_image(L, x, 1, fn, nhwc);
  int64_t C = tensor(L, x)->shape[nhwc ? 3 : 1].k;
  want_groups(L, fn, C, groups);
  int k[2], s[2], p[2], dl[2];
  arg_pair(L, 3, fn, "kernel size", k);
  opt_pair(L, 5, fn, "stride", (const int[]){1, 1}, s);
  opt_pair(L, 5, fn, "padding", (const int[]){0, 0}, p);
  opt_pair(L, 5, fn, "dilation", (const int[]){1, 1}, dl);
  nnc_window w = {k[0], k[1], s[0], s[1], p[0], p[1], dl[0], dl[1], true, false};
  nnc_dtype t = fe_param_dtype(L, x);
  int64_t wd[4] = {O, C / groups, k[0] > 0 ? k[0] : 1, k[1] > 0 ? k[1] : 1};
  want_fits(L, x, fn, &w, nhwc);
  int weight = fe_make_param(L, prefix, "weight", t, 4, wd);
  int bias = with_bias ? fe_make_param(L, prefix, "bias", t, 1, &wd[0]) : -1;
  int y = conv_core(L, from_layout(L, x, nhwc), &w, O, groups, weight, bias, prefix, fn);
  fe_push_tensor(L, to_layout(L, y, nhwc));
  return 1;
}

/* conv1d(x [N, C, L], n_out, kernel, p, {stride, padding, dilation, groups, bias, layout = "ncl" | "nlc"}) */
static int l_conv1d(lua_State *L) {
  const char *fn = "conv1d";
  char d[256];
  int x = fe_arg_tensor(L, 1, fn);
  lua_Integer O;
  int64_t groups;
  bool with_bias;
  const char *prefix = conv_args(L, fn, &O, &groups, &with_bias);
  bool nlc = opt_channels_last(L, 5, fn, "ncl", "nlc");
  const nnc_tensor *t = tensor(L, x);
  if (t->rank != 3 || !nnc_dim_is_const(t->shape[1]) || !nnc_dim_is_const(t->shape[2]))
    return fe_fail(L, NNC_E_SHAPE, "conv1d: expected a sequence of rank 3 (%s) with constant channels and length, "
                   "found %s", nlc ? "[N, L, C]" : "[N, C, L]", fe_describe(L, 1, d, sizeof d));
  nnc_dim N = t->shape[0], A = t->shape[1], B = t->shape[2];
  int64_t C = (nlc ? B : A).k;
  want_groups(L, fn, C, groups);
  lua_Integer k = fe_arg_int(L, 3, fn, "kernel size");
  int s[2], p[2], dl[2];
  opt_pair(L, 5, fn, "stride", (const int[]){1, 1}, s);
  opt_pair(L, 5, fn, "padding", (const int[]){0, 0}, p);
  opt_pair(L, 5, fn, "dilation", (const int[]){1, 1}, dl);
  nnc_window w = {1, (int)k, 1, s[0], 0, p[0], 1, dl[0], nlc, false};
  /* one image row: [N, C, 1, L] or [N, 1, L, C] */
  nnc_dim one = nnc_dim_const(1);
  int x4 = reshape(L, x, 4, nlc ? (nnc_dim[]){N, one, A, B} : (nnc_dim[]){N, A, one, B});
  nnc_dtype dt = fe_param_dtype(L, x);
  int64_t wd[3] = {O, C / groups, k > 0 ? k : 1};
  int weight = fe_make_param(L, prefix, "weight", dt, 3, wd);
  int bias = with_bias ? fe_make_param(L, prefix, "bias", dt, 1, &wd[0]) : -1;
  int y = conv_core(L, x4, &w, O, groups, weight, bias, prefix, fn);   /* [N, 1, OL, O] */
  const nnc_tensor *yt = tensor(L, y);
  nnc_dim OL = yt->shape[2];
  y = reshape(L, y, 3, (nnc_dim[]){N, OL, nnc_dim_const(O)});
  fe_push_tensor(L, nlc ? y : permute(L, y, (const int[]){0, 2, 1}));
  return 1;
}

/* maxpool2d / avgpool2d(x, kernel, {stride = kernel, padding, dilation, layout, count_include_pad}) */
static int pool(lua_State *L, nnc_op reduce, const char *fn) {
  static const char *const max_keys[] = {"stride", "padding", "dilation", "layout", NULL};
  static const char *const avg_keys[] = {"stride", "padding", "layout", "count_include_pad", NULL};
  int x = fe_arg_tensor(L, 1, fn);
  fe_arg_opts(L, 3, fn, reduce == NNC_OP_MAX ? max_keys : avg_keys);
  bool nhwc = opt_channels_last(L, 3, fn, "nchw", "nhwc");
  want_image(L, x, 1, fn, nhwc);
  int k[2], s[2], p[2], dl[2];
  arg_pair(L, 2, fn, "kernel size", k);
  opt_pair(L, 3, fn, "stride", k, s);
  opt_pair(L, 3, fn, "padding", (const int[]){0, 0}, p);
  opt_pair(L, 3, fn, "dilation", (const int[]){1, 1}, dl);
  if (reduce == NNC_OP_MEAN && (p[0] || p[1]) && !fe_opt_bool(L, 3, fn, "count_include_pad", true))
    return fe_fail(L, NNC_E_MODEL, "avgpool2d: count_include_pad = false with padding is not supported; expected "
                   "count_include_pad = true (PyTorch's default) or no padding");
  /* PyTorch's rule for pools */
  if (2 * p[0] > (k[0] - 1) * dl[0] + 1 || 2 * p[1] > (k[1] - 1) * dl[1] + 1)
    return fe_fail(L, NNC_E_SHAPE, "%s: expected padding at most half the kernel, found padding %dx%d for a kernel "
                   "%dx%d", fn, p[0], p[1], k[0], k[1]);
  /* NHWC: tap-major windows (each tap's channels copied whole), reduced over the taps */
  nnc_window w = {k[0], k[1], s[0], s[1], p[0], p[1], dl[0], dl[1], true, true};
  want_fits(L, x, fn, &w, nhwc);
  int cols = im2col(L, from_layout(L, x, nhwc), &w, reduce == NNC_OP_MAX ? -INFINITY : 0.0, fn);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = 3;
  int y = node_out(L, reduce, 1, &cols, &at, NULL, NULL);
  fe_push_tensor(L, to_layout(L, y, nhwc));
  return 1;
}

static int l_maxpool2d(lua_State *L) { return pool(L, NNC_OP_MAX, "maxpool2d"); }
static int l_avgpool2d(lua_State *L) { return pool(L, NNC_OP_MEAN, "avgpool2d"); }

/* adaptive_avgpool2d(x, size, {layout}): sizes that divide the image's (the
 * usual global pooling to 1x1 among them), as an average pool. */
static int l_adaptive_avgpool2d(lua_State *L) {
  static const char *const keys[] = {"layout", NULL};
  const char *fn = "adaptive_avgpool2d";
  int x = fe_arg_tensor(L, 1, fn);
  fe_arg_opts(L, 3, fn, keys);
  bool nhwc = opt_channels_last(L, 3, fn, "nchw", "nhwc");
  want_image(L, x, 1, fn, nhwc);
  int o[2];
  arg_pair(L, 2, fn, "output size", o);
  const nnc_tensor *t = tensor(L, x);
  int64_t H = t->shape[nhwc ? 1 : 2].k, W = t->shape[nhwc ? 2 : 3].k;
  if (o[0] < 1 || o[1] < 1 || H % o[0] != 0 || W % o[1] != 0)
    return fe_fail(L, NNC_E_SHAPE, "adaptive_avgpool2d: expected an output size that divides the image's %lldx%lld, "
                   "found %dx%d", (long long)H, (long long)W, o[0], o[1]);
  int kh = (int)(H / o[0]), kw = (int)(W / o[1]);
  nnc_window w = {kh, kw, kh, kw, 0, 0, 1, 1, true, false};
  int cols = im2col(L, from_layout(L, x, nhwc), &w, 0.0, fn);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = 4;
  int y = node_out(L, NNC_OP_MEAN, 1, &cols, &at, NULL, NULL);
  fe_push_tensor(L, to_layout(L, y, nhwc));
  return 1;
}

/* The product of the conv2d that made x, when x is that conv2d's result as
 * it left conv2d (ungrouped: one linear over the windows, then the NCHW
 * transpose unless NHWC) and `axis` its channel axis: the linear node, else -1. */
static int conv_product_of(lua_State *L, int x, int axis) {
  const nnc_graph *g = fe_get(L)->g;
  int p = g->tensors[x].producer;
  if (p < 0) return -1;
  const nnc_node *n = &g->nodes[p];
  if (n->op == NNC_OP_TRANSPOSE && axis == 1 && n->attrs.perm[0] == 0 && n->attrs.perm[1] == 3 &&
      n->attrs.perm[2] == 1 && n->attrs.perm[3] == 2) {
    p = g->tensors[n->in[0]].producer;
    if (p < 0) return -1;
    n = &g->nodes[p];
  } else if (axis != g->tensors[x].rank - 1) {
    return -1;
  }
  if (n->op != NNC_OP_LINEAR || n->attrs.weight_in_out || g->tensors[n->out[0]].rank != 4) return -1;
  int a = g->tensors[n->in[0]].producer;
  if (a < 0 || g->nodes[a].op != NNC_OP_RESHAPE) return -1;
  int w = g->tensors[g->nodes[a].in[0]].producer;
  return w >= 0 && g->nodes[w].op == NNC_OP_IM2COL ? p : -1;
}

/* The convolution `lin` again with batch norm folded into it: its weight
 * rows times scale, its bias times scale plus shift; the result in x's
 * layout. The first product stays for any other reader of it (else dead). */
static int fold_into_conv(lua_State *L, int lin, int x, int scale, int shift, int64_t C, const char *prefix) {
  const nnc_graph *g = fe_get(L)->g;
  nnc_node n = g->nodes[lin];
  int sc = reshape(L, scale, 2, (nnc_dim[]){nnc_dim_const(C), nnc_dim_const(1)});
  int wm = node_out(L, NNC_OP_MUL, 2, (const int[]){n.in[1], sc}, NULL, prefix, NULL);
  int b = shift;
  if (n.nin == 3) {
    int bs = node_out(L, NNC_OP_MUL, 2, (const int[]){n.in[2], scale}, NULL, prefix, NULL);
    b = node_out(L, NNC_OP_ADD, 2, (const int[]){bs, shift}, NULL, prefix, NULL);
  }
  int y = node_out(L, NNC_OP_LINEAR, 3, (const int[]){n.in[0], wm, b}, &n.attrs, n.label, NULL);
  return g->tensors[x].producer == lin ? y : to_layout(L, y, false);
}

/* batchnorm(x, p, {eps = 1e-5, layout}): y = (x - running_mean) / sqrt(running_var + eps) * weight + bias
 * per channel (axis 2, or the last with layout "nhwc"/"nlc"/"nc"). Right after a conv2d, it is
 * folded into the convolution's weight and bias: one GEMM with a bias, no pass over the result. */
static int l_batchnorm(lua_State *L) {
  static const char *const keys[] = {"eps", "layout", NULL};
  const char *fn = "batchnorm";
  char d[256];
  int x = fe_arg_tensor(L, 1, fn);
  const char *prefix = fe_scope_at(L, 2);
  if (!prefix) return fe_fail(L, NNC_E_MODEL, "batchnorm: expected a scope, found %s", fe_describe(L, 2, d, sizeof d));
  fe_arg_opts(L, 3, fn, keys);
  double eps = fe_opt_number(L, 3, fn, "eps", 1e-5);
  const nnc_tensor *t = tensor(L, x);
  bool last = false;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "layout");
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    last = s && (strcmp(s, "nhwc") == 0 || strcmp(s, "nlc") == 0);
    if (!lua_isnil(L, -1) && !last && !(s && (strcmp(s, "nchw") == 0 || strcmp(s, "ncl") == 0 || strcmp(s, "nc") == 0)))
      return fe_fail(L, NNC_E_MODEL, "batchnorm: expected layout \"nchw\", \"ncl\", \"nc\", \"nhwc\" or \"nlc\", "
                     "found %s", fe_describe(L, -1, d, sizeof d));
    lua_pop(L, 1);
  }
  int axis = last ? t->rank - 1 : 1;
  if (t->rank < 2 || !nnc_dim_is_const(t->shape[axis]))
    return fe_fail(L, NNC_E_SHAPE, "batchnorm: expected a tensor of rank >= 2 with constant channels, found %s",
                   fe_describe(L, 1, d, sizeof d));
  int64_t C = t->shape[axis].k;
  int rank = t->rank;
  nnc_dtype dt = fe_param_dtype(L, x);
  int gamma = fe_make_param(L, prefix, "weight", dt, 1, &C), beta = fe_make_param(L, prefix, "bias", dt, 1, &C);
  int mean = fe_make_param(L, prefix, "running_mean", dt, 1, &C), var = fe_make_param(L, prefix, "running_var", dt, 1, &C);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.scalar = eps;
  int v = node_out(L, NNC_OP_ADD_S, 1, &var, &at, prefix, NULL);
  v = node_out(L, NNC_OP_SQRT, 1, &v, NULL, prefix, NULL);
  int scale = node_out(L, NNC_OP_DIV, 2, (const int[]){gamma, v}, NULL, prefix, NULL);
  int ms = node_out(L, NNC_OP_MUL, 2, (const int[]){mean, scale}, NULL, prefix, NULL);
  int shift = node_out(L, NNC_OP_SUB, 2, (const int[]){beta, ms}, NULL, prefix, NULL);
  int lin = conv_product_of(L, x, axis);
  if (lin >= 0) {
    fe_push_tensor(L, fold_into_conv(L, lin, x, scale, shift, C, prefix));
    return 1;
  }
  /* [C, 1, ..., 1] against the axes after the channels */
  nnc_dim pd[NNC_MAX_RANK];
  int pr = rank - axis;
  pd[0] = nnc_dim_const(C);
  for (int i = 1; i < pr; i++) pd[i] = nnc_dim_const(1);
  if (pr > 1) {
    scale = reshape(L, scale, pr, pd);
    shift = reshape(L, shift, pr, pd);
  }
  int y = node_out(L, NNC_OP_MUL, 2, (const int[]){x, scale}, NULL, prefix, NULL);
  y = node_out(L, NNC_OP_ADD, 2, (const int[]){y, shift}, NULL, prefix, NULL);
  fe_push_tensor(L, y);
  return 1;
}

/* flatten(x, first = 2, last = -1): the axes first..last (1-based, inclusive) as one. */
static int l_flatten(lua_State *L) {
  const char *fn = "flatten";
  int x = fe_arg_tensor(L, 1, fn);
  const nnc_tensor *t = tensor(L, x);
  int r = t->rank;
  lua_Integer a = lua_isnoneornil(L, 2) ? 2 : fe_arg_int(L, 2, fn, "first axis");
  lua_Integer b = lua_isnoneornil(L, 3) ? -1 : fe_arg_int(L, 3, fn, "last axis");
  int i = a < 0 ? r + (int)a : (int)a - 1, j = b < 0 ? r + (int)b : (int)b - 1;
  if (i < 0 || j >= r || i > j)
    return fe_fail(L, NNC_E_SHAPE, "flatten: expected axes first <= last in 1..%d, found %lld and %lld", r,
                   (long long)a, (long long)b);
  nnc_dim out[NNC_MAX_RANK], m = nnc_dim_const(1);
  int o = 0;
  for (int k = 0; k < i; k++) out[o++] = t->shape[k];
  for (int k = i; k <= j; k++) m = mul(L, m, t->shape[k], fn);
  out[o++] = m;
  for (int k = j + 1; k < r; k++) out[o++] = t->shape[k];
  fe_push_tensor(L, reshape(L, x, o, out));
  return 1;
}

void fe_conv_register(lua_State *L) {
  static const luaL_Reg fns[] = {{"conv2d", l_conv2d},       {"conv1d", l_conv1d},
                                 {"maxpool2d", l_maxpool2d}, {"avgpool2d", l_avgpool2d},
                                 {"adaptive_avgpool2d", l_adaptive_avgpool2d},
                                 {"batchnorm", l_batchnorm}, {"flatten", l_flatten},
                                 {NULL, NULL}};
  lua_pushglobaltable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
