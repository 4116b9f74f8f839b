/* tests/unit/test_frontend.c — the Lua front-end: graphs built from small
 * model files written into a temporary folder, checked node by node (op,
 * shape, label, Lua line) against values worked out by hand; config
 * overrides; include and its folder rules; the sandbox and its budgets; and
 * every kind of error with its status and whole message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

/* The temporary folder: models live in <tmp>/m, files "outside" in <tmp>. */
static char tmp[256];
static char mdir[300];

static void write_at(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Writes <tmp>/m/name and returns its path in buf. */
static const char *model_file(char *buf, size_t n, const char *name, const char *text) {
  snprintf(buf, n, "%s/%s", mdir, name);
  write_at(buf, text);
  return buf;
}

typedef struct loaded {
  char path[512];
  nnc_graph g;
  nnc_error err;
  nnc_status st;
} loaded;

static void load_opts(loaded *l, const char *name, const char *text, nnc_frontend_opts o) {
  memset(l, 0, sizeof *l);
  model_file(l->path, sizeof l->path, name, text);
  nnc_graph_init(&l->g);
  o.path = l->path;
  l->st = nnc_frontend_load(&o, &l->g, &l->err);
}

static void load(loaded *l, const char *name, const char *text) {
  load_opts(l, name, text, (nnc_frontend_opts){0});
}

static void load_ok(loaded *l, const char *name, const char *text) {
  load(l, name, text);
  if (l->st != NNC_OK) fail_msg("%s: %s", l->path, l->err.msg);
}

/* The status and the whole message "<path>:<line>: <msg>" (line 0: no prefix). */
static void expect_error(const loaded *l, nnc_status st, int line, const char *msg) {
  char want[2048];
  if (line > 0) snprintf(want, sizeof want, "%s:%d: %s", l->path, line, msg);
  else snprintf(want, sizeof want, "%s", msg);
  if (l->st != st || strcmp(l->err.msg, want) != 0)
    fail_msg("expected %s: %s\n found    %s: %s", nnc_status_name(st), want, nnc_status_name(l->st), l->err.msg);
}

static void fails(const char *text, nnc_status st, int line, const char *msg) {
  loaded l;
  load(&l, "bad.lua", text);
  expect_error(&l, st, line, msg);
  nnc_graph_free(&l.g);
}

static const nnc_node *node(const loaded *l, int i) {
  assert_true(i < l->g.nnodes);
  return &l->g.nodes[i];
}

static const nnc_tensor *out(const loaded *l, int i) { return &l->g.tensors[node(l, i)->out[0]]; }

static void expect_shape(const loaded *l, const nnc_tensor *t, const char *shape) {
  char buf[256];
  assert_string_equal(nnc_shape_format(&l->g, t->rank, t->shape, buf, sizeof buf), shape);
}

/* Node i: op, label, output shape and Lua line (in the model file). */
static void expect_node(const loaded *l, int i, nnc_op op, const char *label, const char *shape, int line) {
  const nnc_node *n = node(l, i);
  if (n->op != op) fail_msg("node %d: op %s, expected %s", i, nnc_op_info_of(n->op)->name, nnc_op_info_of(op)->name);
  assert_string_equal(n->label, label);
  expect_shape(l, out(l, i), shape);
  assert_non_null(n->loc.file);
  assert_string_equal(n->loc.file, l->path);
  assert_int_equal(n->loc.line, line);
}

static int param_named(const loaded *l, const char *name) {
  for (int i = 0; i < l->g.nparams; i++)
    if (strcmp(l->g.tensors[l->g.params[i]].name, name) == 0) return l->g.params[i];
  fail_msg("no parameter %s", name);
  return -1;
}

static void expect_param(const loaded *l, const char *name, nnc_dtype dt, const char *shape, int line) {
  const nnc_tensor *t = &l->g.tensors[param_named(l, name)];
  assert_int_equal(t->kind, NNC_TENSOR_PARAM);
  assert_int_equal(t->dtype, dt);
  expect_shape(l, t, shape);
  assert_int_equal(t->loc.line, line);
}

/* ------------------------------------------------------------ graphs */

static void test_mlp_graph(void **state) {
  loaded l;
  load_ok(&l, "mlp.lua",
          "local cfg = config { hidden = 13, classes = 7 }\n"
          "local B = dim(\"B\", 5)\n"
          "local x = input(\"x\", f32, { B, 11 })\n"
          "local h = relu(linear(x, cfg.hidden, param(\"fc1\")))\n"
          "output(\"y\", linear(h, cfg.classes, param(\"out\"), { bias = false }))\n");
  assert_string_equal(l.g.name, "mlp");
  assert_int_equal(l.g.nsyms, 1);
  assert_string_equal(l.g.syms[0].name, "B");
  assert_int_equal(l.g.syms[0].max, 5);
  assert_int_equal(l.g.syms[0].loc.line, 2);
  assert_int_equal(l.g.ninputs, 1);
  const nnc_tensor *x = &l.g.tensors[l.g.inputs[0]];
  assert_string_equal(x->name, "x");
  expect_shape(&l, x, "[B,11]");
  assert_int_equal(x->loc.line, 3);
  assert_int_equal(l.g.nparams, 3);
  expect_param(&l, "fc1.weight", NNC_F32, "[13,11]", 4);
  expect_param(&l, "fc1.bias", NNC_F32, "[13]", 4);
  expect_param(&l, "out.weight", NNC_F32, "[7,13]", 5);
  assert_int_equal(l.g.nnodes, 3);
  expect_node(&l, 0, NNC_OP_LINEAR, "fc1", "[B,13]", 4);
  assert_int_equal(node(&l, 0)->nin, 3);
  assert_int_equal(node(&l, 0)->in[0], l.g.inputs[0]);
  assert_int_equal(node(&l, 0)->in[1], param_named(&l, "fc1.weight"));
  assert_int_equal(node(&l, 0)->in[2], param_named(&l, "fc1.bias"));
  assert_false(node(&l, 0)->attrs.weight_in_out);
  assert_string_equal(out(&l, 0)->name, "fc1");
  expect_node(&l, 1, NNC_OP_RELU, "relu", "[B,13]", 4);
  assert_int_equal(node(&l, 1)->in[0], node(&l, 0)->out[0]);
  expect_node(&l, 2, NNC_OP_LINEAR, "out", "[B,7]", 5);
  assert_int_equal(node(&l, 2)->nin, 2);
  assert_int_equal(l.g.noutputs, 1);
  assert_string_equal(l.g.outputs[0].name, "y");
  assert_int_equal(l.g.outputs[0].tensor, node(&l, 2)->out[0]);
  assert_int_equal(l.g.outputs[0].loc.line, 5);
  nnc_graph_free(&l.g);
}

/* Lines are those of the calls: inside a helper function, through pcall. */
static void test_locations(void **state) {
  loaded l;
  load_ok(&l, "locs.lua",
          "local function block(x)\n"
          "  return tanh(x)\n"
          "end\n"
          "local x = input(\"x\", f32, { 3 })\n"
          "local y = block(x)\n"
          "local ok, z = pcall(exp, y)\n"
          "assert(ok)\n"
          "output(\"y\",\n"
          "  z + y)\n");
  expect_node(&l, 0, NNC_OP_TANH, "tanh", "[3]", 2);
  expect_node(&l, 1, NNC_OP_EXP, "exp", "[3]", 6);
  expect_node(&l, 2, NNC_OP_ADD, "add", "[3]", 9);
  assert_int_equal(l.g.outputs[0].loc.line, 8);
  nnc_graph_free(&l.g);
}

static void test_operators(void **state) {
  loaded l;
  load_ok(&l, "ops.lua",
          "local x = input(\"x\", f32, { 3, 5 })\n"
          "local a = x + x\n"
          "local b = x + 2\n"
          "local c = 2 + x\n"
          "local d = x - 1.5\n"
          "local e = 3 - x\n"
          "local f = x * 4\n"
          "local g = 0.5 * x\n"
          "local h = x / 8\n"
          "local i = 1 / x\n"
          "local j = -x\n"
          "local k = x ^ 3\n"
          "local m = input(\"m\", f32, { 5 })\n"
          "output(\"y\", x * m - x / m)\n");
  static const struct { nnc_op op; double s; } want[] = {
      {NNC_OP_ADD, 0},      {NNC_OP_ADD_S, 2},  {NNC_OP_ADD_S, 2}, {NNC_OP_SUB_S, 1.5},
      {NNC_OP_RSUB_S, 3},   {NNC_OP_MUL_S, 4},  {NNC_OP_MUL_S, .5}, {NNC_OP_DIV_S, 8},
      {NNC_OP_RDIV_S, 1},   {NNC_OP_NEG, 0},    {NNC_OP_POW_S, 3}};
  for (int i = 0; i < 11; i++) {
    expect_node(&l, i, want[i].op, nnc_op_info_of(want[i].op)->name, "[3,5]", i + 2);
    assert_true(node(&l, i)->attrs.scalar == want[i].s);
    assert_int_equal(node(&l, i)->in[0], l.g.inputs[0]);
  }
  assert_int_equal(node(&l, 0)->in[1], l.g.inputs[0]);
  expect_node(&l, 11, NNC_OP_MUL, "mul", "[3,5]", 14);
  expect_node(&l, 12, NNC_OP_DIV, "div", "[3,5]", 14);
  expect_node(&l, 13, NNC_OP_SUB, "sub", "[3,5]", 14);
  assert_int_equal(node(&l, 13)->in[0], node(&l, 11)->out[0]);
  assert_int_equal(node(&l, 13)->in[1], node(&l, 12)->out[0]);
  assert_int_equal(node(&l, 11)->in[1], l.g.inputs[1]);
  nnc_graph_free(&l.g);
}

static void test_dims(void **state) {
  loaded l;
  load_ok(&l, "dims.lua",
          "local B = dim(\"B\", 4)\n"
          "local T = dim(\"T\", 9)\n"
          "local x = input(\"x\", f32, { B, T, 3 })\n"
          "local y = x:reshape { B * T, 3 }\n"
          "local z = y:reshape { 3 * B, -1 }\n"
          "assert(tostring(B * T) == \"B*T\", tostring(B * T))\n"
          "assert(tostring(3 * B) == \"3*B\" and tostring(B * 4) == \"4*B\")\n"
          "assert(B == dim(\"B\", 4) and B * T == T * B and B ~= T and 2 * B ~= B)\n"
          "local s = x.shape\n"
          "assert(#s == 3 and s[1] == B and s[2] == T and s[3] == 3 and math.type(s[3]) == \"integer\")\n"
          "assert(x.rank == 3 and x.dtype == f32 and x.name == \"x\" and tostring(f32) == \"f32\")\n"
          "assert(y.shape[1] == B * T and tostring(y.shape[1]) == \"B*T\")\n"
          "local u = input(\"u\", i32, { \"U <= 6\", \"U\", 0 })\n"
          "assert(u.dtype == i32 and u.dtype ~= f32)\n"
          "output(\"y\", z)\n");
  assert_int_equal(l.g.nsyms, 3);
  assert_string_equal(l.g.syms[2].name, "U");
  assert_int_equal(l.g.syms[2].max, 6);
  expect_node(&l, 0, NNC_OP_RESHAPE, "reshape", "[B*T,3]", 4);
  expect_node(&l, 1, NNC_OP_RESHAPE, "reshape", "[3*B,T]", 5);
  expect_shape(&l, &l.g.tensors[l.g.inputs[1]], "[U,U,0]");
  nnc_graph_free(&l.g);
}

/* The message names the first declaration (its path is only known here). */
static void test_dim_redeclared(void **state) {
  loaded l;
  load(&l, "redim.lua", "local B = dim(\"B\", 4)\nlocal C = dim(\"B\", 5)\n");
  char msg[1024];
  snprintf(msg, sizeof msg, "dim B: declared with maximum 4 at %s:1, now 5", l.path);
  expect_error(&l, NNC_E_MODEL, 2, msg);
  nnc_graph_free(&l.g);
}

static void test_scopes_and_params(void **state) {
  loaded l;
  load_ok(&l, "params.lua",
          "local h = param(\"h\")\n"
          "assert(tostring(h[3].mlp.c_fc) == \"scope h.3.mlp.c_fc\")\n"
          "assert(tostring(param(\"h\")[0]) == \"scope h.0\" and h.a == param(\"h.a\"))\n"
          "local w = param(h[1].w, { 3, 5 })\n"
          "local w2 = param(\"h.1.w\", { 3, 5 })\n"
          "assert(w == w2 and rawequal(w, w2))\n"
          "local e = param(\"e\", { 2 }, bf16)\n"
          "local s = param(\"s\", {})\n"
          "assert(e.dtype == bf16 and s.rank == 0)\n"
          "output(\"y\", relu(w))\n");
  assert_int_equal(l.g.nparams, 3);
  expect_param(&l, "h.1.w", NNC_F32, "[3,5]", 4);
  expect_param(&l, "e", NNC_BF16, "[2]", 7);
  expect_param(&l, "s", NNC_F32, "[]", 8);
  nnc_graph_free(&l.g);
}

static void test_norms_embedding_and_loss(void **state) {
  loaded l;
  load_ok(&l, "nets.lua",
          "local B = dim(\"B\", 3)\n"
          "local ids = input(\"ids\", i32, { B, 7 })\n"
          "local x = embedding(ids, param(\"wte\"), 11, 5)\n"
          "x = layernorm(x, param(\"ln\"), { eps = 1e-3 })\n"
          "x = rmsnorm(x, param(\"rms\"))\n"
          "local tab = param(\"tab\", { 13, 5 })\n"
          "local y = embedding(ids, tab)\n"
          "x = linear(x, 9, param(\"c\"), { layout = \"in_out\" })\n"
          "x = softmax(gelu(x, { approx = \"tanh\" }), 2)\n"
          "local r = sum(x, -1, true) + mean(x, 3, false):reshape { B, 7, 1 } + max(x, 3, true)\n"
          "output(\"loss\", cross_entropy(linear(x, 4, param(\"head\")), ids))\n"
          "output(\"r\", cast(r, f16))\n"
          "output(\"d\", dropout(y, 0.1) * 1)\n");
  expect_node(&l, 0, NNC_OP_EMBEDDING, "wte", "[B,7,5]", 3);
  assert_int_equal(node(&l, 0)->in[0], param_named(&l, "wte.weight"));
  assert_int_equal(node(&l, 0)->in[1], l.g.inputs[0]);
  expect_param(&l, "wte.weight", NNC_F32, "[11,5]", 3);
  expect_node(&l, 1, NNC_OP_LAYERNORM, "ln", "[B,7,5]", 4);
  assert_true(node(&l, 1)->attrs.eps == 1e-3);
  expect_param(&l, "ln.weight", NNC_F32, "[5]", 4);
  expect_param(&l, "ln.bias", NNC_F32, "[5]", 4);
  expect_node(&l, 2, NNC_OP_RMSNORM, "rms", "[B,7,5]", 5);
  assert_true(node(&l, 2)->attrs.eps == 1e-6);
  assert_int_equal(node(&l, 2)->nin, 2);
  expect_node(&l, 3, NNC_OP_EMBEDDING, "embedding", "[B,7,5]", 7);
  expect_node(&l, 4, NNC_OP_LINEAR, "c", "[B,7,9]", 8);
  assert_true(node(&l, 4)->attrs.weight_in_out);
  expect_param(&l, "c.weight", NNC_F32, "[5,9]", 8);
  expect_param(&l, "c.bias", NNC_F32, "[9]", 8);
  expect_node(&l, 5, NNC_OP_GELU, "gelu", "[B,7,9]", 9);
  assert_true(node(&l, 5)->attrs.gelu_tanh);
  expect_node(&l, 6, NNC_OP_SOFTMAX, "softmax", "[B,7,9]", 9);
  assert_int_equal(node(&l, 6)->attrs.axis, 1);
  expect_node(&l, 7, NNC_OP_SUM, "sum", "[B,7,1]", 10);
  assert_int_equal(node(&l, 7)->attrs.axis, 2);
  assert_true(node(&l, 7)->attrs.keepdim);
  expect_node(&l, 8, NNC_OP_MEAN, "mean", "[B,7]", 10);
  assert_false(node(&l, 8)->attrs.keepdim);
  expect_node(&l, 9, NNC_OP_RESHAPE, "reshape", "[B,7,1]", 10);
  expect_node(&l, 10, NNC_OP_ADD, "add", "[B,7,1]", 10);
  expect_node(&l, 11, NNC_OP_MAX, "max", "[B,7,1]", 10);
  expect_node(&l, 13, NNC_OP_LINEAR, "head", "[B,7,4]", 11);
  expect_node(&l, 14, NNC_OP_CROSS_ENTROPY, "cross_entropy", "[]", 11);
  expect_node(&l, 15, NNC_OP_CAST, "cast", "[B,7,1]", 12);
  assert_int_equal(node(&l, 15)->attrs.to, NNC_F16);
  assert_int_equal(out(&l, 15)->dtype, NNC_F16);
  /* dropout adds nothing: the mul reads the embedding directly */
  expect_node(&l, 16, NNC_OP_MUL_S, "mul_scalar", "[B,7,5]", 13);
  assert_int_equal(node(&l, 16)->in[0], node(&l, 3)->out[0]);
  assert_int_equal(l.g.nnodes, 17);
  nnc_graph_free(&l.g);
}

static void test_sdpa_expansion(void **state) {
  loaded l;
  load_ok(&l, "attn.lua",
          "local B, T = dim(\"B\", 2), dim(\"T\", 7)\n"
          "local q = input(\"q\", f32, { B, 3, T, 5 })\n"
          "local m = input(\"m\", i32, { B, T })\n"
          "output(\"a\", sdpa(q, q * 2, q * 3, { causal = true, mask = m }))\n"
          "output(\"b\", sdpa(q, q, q, { scale = 0.25 }))\n");
  expect_node(&l, 0, NNC_OP_MUL_S, "mul_scalar", "[B,3,T,5]", 4);
  expect_node(&l, 1, NNC_OP_MUL_S, "mul_scalar", "[B,3,T,5]", 4);
  expect_node(&l, 2, NNC_OP_TRANSPOSE, "transpose", "[B,3,5,T]", 4);
  assert_int_equal(node(&l, 2)->in[0], node(&l, 0)->out[0]);
  const int perm[4] = {0, 1, 3, 2};
  assert_memory_equal(node(&l, 2)->attrs.perm, perm, sizeof perm);
  expect_node(&l, 3, NNC_OP_MATMUL, "matmul", "[B,3,T,T]", 4);
  assert_int_equal(node(&l, 3)->in[0], l.g.inputs[0]);
  assert_int_equal(node(&l, 3)->in[1], node(&l, 2)->out[0]);
  expect_node(&l, 4, NNC_OP_MUL_S, "mul_scalar", "[B,3,T,T]", 4);
  assert_true(fabs(node(&l, 4)->attrs.scalar - 1 / sqrt(5.0)) < 1e-15);
  expect_node(&l, 5, NNC_OP_CAUSAL_MASK, "causal_mask", "[B,3,T,T]", 4);
  expect_node(&l, 6, NNC_OP_PADDING_MASK, "padding_mask", "[B,3,T,T]", 4);
  assert_int_equal(node(&l, 6)->in[1], l.g.inputs[1]);
  expect_node(&l, 7, NNC_OP_SOFTMAX, "softmax", "[B,3,T,T]", 4);
  assert_int_equal(node(&l, 7)->attrs.axis, 3);
  expect_node(&l, 8, NNC_OP_MATMUL, "matmul", "[B,3,T,5]", 4);
  assert_int_equal(node(&l, 8)->in[0], node(&l, 7)->out[0]);
  assert_int_equal(node(&l, 8)->in[1], node(&l, 1)->out[0]);
  /* without masks: transpose, matmul, scale, softmax, matmul */
  static const nnc_op plain[] = {NNC_OP_TRANSPOSE, NNC_OP_MATMUL, NNC_OP_MUL_S, NNC_OP_SOFTMAX, NNC_OP_MATMUL};
  for (int i = 0; i < 5; i++) assert_int_equal(node(&l, 9 + i)->op, plain[i]);
  assert_true(node(&l, 11)->attrs.scalar == 0.25);
  assert_int_equal(l.g.nnodes, 14);
  nnc_graph_free(&l.g);
  fails("local T = dim(\"T\", 4)\nlocal q = input(\"q\", f32, { 2, T, T })\nlocal y = sdpa(q, q, q)\n", NNC_E_SHAPE, 3,
        "sdpa: expected q's last dim to be a constant >= 1 for the default scale 1/sqrt(D), found tensor q f32[2,T,T] "
        "(give {scale = ...})");
  fails("local q = input(\"q\", f32, { 2, 4, 4 })\nlocal y = sdpa(q, q, q, { causel = true })\n", NNC_E_MODEL, 2,
        "sdpa: expected options causal, mask, scale, found \"causel\"");
}

static void test_move_ops(void **state) {
  loaded l;
  load_ok(&l, "move.lua",
          "local T = dim(\"T\", 8)\n"
          "local x = input(\"x\", f32, { 2, 9, 4 })\n"
          "local a, b, c = split(x, 3, -2)\n"
          "assert(select(\"#\", split(x, { 1, 3 }, 3)) == 2)\n"
          "local p, q = split(x, { 1, 3 }, 3)\n"
          "local t = x:transpose()\n"
          "local u = transpose(x, 1, -1)\n"
          "local v = x:permute { 3, 1, 2 }\n"
          "local s = slice(x, 2, 2, 4)\n"
          "local s2 = slice(x, -1, -2, -1)\n"
          "local wpe = param(\"wpe\", { 8, 3 })\n"
          "local s3 = slice(wpe, 1, 1, T)\n"
          "local k = concat({ a, b, c }, 2)\n"
          "output(\"y\", k)\n");
  expect_node(&l, 0, NNC_OP_SPLIT, "split", "[2,3,4]", 3);
  assert_int_equal(node(&l, 0)->nout, 3);
  assert_int_equal(node(&l, 0)->attrs.axis, 1);
  assert_string_equal(l.g.tensors[node(&l, 0)->out[2]].name, "split#3");
  expect_shape(&l, &l.g.tensors[node(&l, 2)->out[0]], "[2,9,1]");
  expect_shape(&l, &l.g.tensors[node(&l, 2)->out[1]], "[2,9,3]");
  expect_node(&l, 3, NNC_OP_TRANSPOSE, "transpose", "[2,4,9]", 6);
  expect_node(&l, 4, NNC_OP_TRANSPOSE, "transpose", "[4,9,2]", 7);
  expect_node(&l, 5, NNC_OP_TRANSPOSE, "transpose", "[4,2,9]", 8);
  const int perm[3] = {2, 0, 1};
  assert_memory_equal(node(&l, 5)->attrs.perm, perm, sizeof perm);
  expect_node(&l, 6, NNC_OP_SLICE, "slice", "[2,3,4]", 9);
  assert_int_equal(node(&l, 6)->attrs.axis, 1);
  assert_true(nnc_dim_eq_const(node(&l, 6)->attrs.start, 1) && nnc_dim_eq_const(node(&l, 6)->attrs.stop, 4));
  expect_node(&l, 7, NNC_OP_SLICE, "slice", "[2,9,2]", 10);
  assert_true(nnc_dim_eq_const(node(&l, 7)->attrs.start, 2) && nnc_dim_eq_const(node(&l, 7)->attrs.stop, 4));
  expect_node(&l, 8, NNC_OP_SLICE, "slice", "[T,3]", 12);
  expect_node(&l, 9, NNC_OP_CONCAT, "concat", "[2,9,4]", 13);
  assert_int_equal(node(&l, 9)->nin, 3);
  assert_int_equal(node(&l, 9)->in[2], node(&l, 0)->out[2]);
  nnc_graph_free(&l.g);
}

/* ------------------------------------------------------------ config */

static void load_defines(loaded *l, const char *text, int n, const char *const *defs) {
  load_opts(l, "cfg.lua", text, (nnc_frontend_opts){.defines = defs, .ndefines = n});
}

static const char cfg_model[] =
    "local cfg = config { n = 3, eps = 1e-5, name = \"a\", flag = false, big = 2 }\n"
    "output(\"y\", relu(input(\"x\", f32, { cfg.n, cfg.big })))\n"
    "return cfg\n";

static void test_config_overrides(void **state) {
  loaded l;
  const char *defs[] = {"n=7", "eps=1", "name=12", "flag=true", "n=5"};
  load_defines(&l, "local cfg = config { n = 3, eps = 1e-5, name = \"a\", flag = false, big = 2 }\n"
                   "assert(cfg.n == 5 and math.type(cfg.n) == \"integer\")\n"
                   "assert(cfg.eps == 1.0 and math.type(cfg.eps) == \"float\")\n"
                   "assert(cfg.name == \"12\" and cfg.flag == true and cfg.big == 2)\n"
                   "output(\"y\", relu(input(\"x\", f32, { cfg.n, cfg.big })))\n",
               5, defs);
  if (l.st) fail_msg("%s", l.err.msg);
  expect_shape(&l, &l.g.tensors[l.g.inputs[0]], "[5,2]");
  nnc_graph_free(&l.g);
  /* no -D: the values as written */
  load_defines(&l, cfg_model, 0, NULL);
  assert_int_equal(l.st, NNC_OK);
  expect_shape(&l, &l.g.tensors[l.g.inputs[0]], "[3,2]");
  nnc_graph_free(&l.g);
}

static void test_config_errors(void **state) {
  static const struct { const char *def; nnc_status st; int line; const char *msg; } cases[] = {
      {"n=abc", NNC_E_USAGE, 1, "-D n=abc: expected a number, found \"abc\""},
      {"n=2.5", NNC_E_USAGE, 1, "-D n=2.5: expected an integer, found \"2.5\""},
      {"flag=yes", NNC_E_USAGE, 1, "-D flag=yes: expected true or false, found \"yes\""},
      {"m=1", NNC_E_USAGE, 0, "-D m=1: no config key is named m (the keys are: big, eps, flag, n, name)"},
      {"=3", NNC_E_USAGE, 0, "-D: expected name=value, found \"=3\""},
      {"n", NNC_E_USAGE, 0, "-D: expected name=value, found \"n\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loaded l;
    load_defines(&l, cfg_model, 1, &cases[i].def);
    expect_error(&l, cases[i].st, cases[i].line, cases[i].msg);
    nnc_graph_free(&l.g);
  }
  loaded l;
  const char *def = "hidden=3";
  load_defines(&l, "local x = 1\nlocal cfg = config { hidden = { 4, 5 } }\n", 1, &def);
  expect_error(&l, NNC_E_USAGE, 2, "-D hidden=3: expected a key holding a number, a boolean or a string, found a table");
  nnc_graph_free(&l.g);
  def = "k=1";
  load_defines(&l, "local x = 1\n", 1, &def);
  expect_error(&l, NNC_E_USAGE, 0, "-D k=1: no config key is named k (the model has no config{})");
  nnc_graph_free(&l.g);
}

/* ------------------------------------------------------------ include */

static void test_include(void **state) {
  char p[512];
  snprintf(p, sizeof p, "%s/lib", mdir);
  mkdir(p, 0755);
  model_file(p, sizeof p, "lib/blocks.lua",
             "local act = include(\"act.lua\")\n"
             "shared = 41\n"
             "return { block = function(x) return act(x) * 2 end }, 7\n");
  model_file(p, sizeof p, "lib/act.lua", "return function(x)\n  return sigmoid(x)\nend\n");
  loaded l;
  load_ok(&l, "main.lua",
          "local lib, n = include(\"lib/blocks.lua\")\n"
          "assert(n == 7 and shared == 41)\n"
          "local x = input(\"x\", f32, { n })\n"
          "output(\"y\", lib.block(x))\n"
          "assert(include(\"lib/../lib/act.lua\") ~= nil)\n");
  expect_shape(&l, out(&l, 1), "[7]");
  char want[512];
  snprintf(want, sizeof want, "%s/lib/act.lua", mdir);
  assert_string_equal(node(&l, 0)->loc.file, want);
  assert_int_equal(node(&l, 0)->loc.line, 2);
  snprintf(want, sizeof want, "%s/lib/blocks.lua", mdir);
  assert_string_equal(node(&l, 1)->loc.file, want);
  assert_int_equal(node(&l, 1)->loc.line, 3);
  nnc_graph_free(&l.g);
}

static void test_include_errors(void **state) {
  char p[512], msg[1024], given[512];
  snprintf(p, sizeof p, "%s/outside.lua", tmp);
  write_at(p, "return 1\n");
  snprintf(p, sizeof p, "%s/sub", mdir);
  mkdir(p, 0755);
  snprintf(given, sizeof given, "%s/", mdir);
  /* a link inside the folder to a file outside it */
  char target[512];
  snprintf(target, sizeof target, "%s/outside.lua", tmp);
  snprintf(p, sizeof p, "%s/link.lua", mdir);
  unlink(p);
  assert_int_equal(symlink(target, p), 0);
  static const char *const escapes[] = {"../outside.lua", "sub/../../outside.lua", "link.lua", "../nowhere.lua"};
  for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
    char src[256];
    snprintf(src, sizeof src, "local a = 1\nlocal t = include(\"%s\")\n", escapes[i]);
    loaded l;
    load(&l, "inc.lua", src);
    snprintf(msg, sizeof msg, "include: \"%s\" leaves the model's folder %s", escapes[i], given);
    expect_error(&l, NNC_E_MODEL, 2, msg);
    nnc_graph_free(&l.g);
  }
  fails("include(\"/etc/passwd\")\n", NNC_E_MODEL, 1,
        "include: expected a path relative to the including file, found \"/etc/passwd\"");
  fails("include(3)\n", NNC_E_MODEL, 1, "include: expected a path, found 3");
  loaded l;
  load(&l, "self.lua", "local x = 1\ninclude(\"self.lua\")\n");
  expect_error(&l, NNC_E_MODEL, 2, "include: expected at most 16 nested includes");
  nnc_graph_free(&l.g);
  load(&l, "missing.lua", "include(\"nope.lua\")\n");
  snprintf(msg, sizeof msg, "include: cannot open %s/nope.lua: No such file or directory", mdir);
  expect_error(&l, NNC_E_IO, 1, msg);
  nnc_graph_free(&l.g);
  /* a syntax error in an included file names that file and line */
  model_file(p, sizeof p, "sub/broken.lua", "local x = 1\nlocal = 2\n");
  load(&l, "inc_syntax.lua", "include(\"sub/broken.lua\")\n");
  snprintf(msg, sizeof msg, "%s:2: <name> expected near '='", p);
  expect_error(&l, NNC_E_MODEL, 0, msg);
  nnc_graph_free(&l.g);
  /* a failed include caught by the model leaves the depth as it was */
  model_file(p, sizeof p, "sub/fail.lua", "error(\"no\")\n");
  load_ok(&l, "caught.lua",
          "for i = 1, 40 do assert(not pcall(include, \"sub/fail.lua\")) end\n"
          "output(\"y\", relu(input(\"x\", f32, { 1 })))\n");
  nnc_graph_free(&l.g);
}

/* ------------------------------------------------------------ sandbox */

static void test_sandbox(void **state) {
  static const char *const names[] = {"io", "os", "package", "debug", "require", "dofile", "loadfile", "load"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char src[128], msg[256];
    snprintf(src, sizeof src, "local x = 1\nlocal f = %s\n", names[i]);
    snprintf(msg, sizeof msg, "%s is not available in a model (the sandbox has no file or OS access)", names[i]);
    fails(src, NNC_E_MODEL, 2, msg);
  }
  fails("local x = 1\n\nlocal f = io.open(\"/etc/passwd\")\n", NNC_E_MODEL, 3,
        "io is not available in a model (the sandbox has no file or OS access)");
  loaded l;
  load_ok(&l, "libs.lua",
          "assert(collectgarbage == nil and rawget(_G, \"io\") == nil and coroutine == nil)\n"
          "assert(string.rep(\"a\", 3) == \"aaa\" and math.floor(2.5) == 2)\n"
          "assert(table.concat({ 1, 2 }, \",\") == \"1,2\" and utf8.char(65) == \"A\")\n"
          "assert(not pcall(function() return os end))\n"
          "undefined_global = nil\n"
          "assert(nothing_here == nil)\n");
  assert_int_equal(l.g.nnodes, 0);
  nnc_graph_free(&l.g);
}

static void test_budgets(void **state) {
  loaded l;
  load_opts(&l, "loop.lua", "local x = 1\nwhile true do x = x + 1 end\n",
            (nnc_frontend_opts){.max_instructions = 10007});
  expect_error(&l, NNC_E_LIMIT, 2, "instruction budget of 10007 exceeded (an endless loop?)");
  nnc_graph_free(&l.g);
  /* catching the error does not escape the budget */
  load_opts(&l, "loop2.lua", "local ok = pcall(function()\n  while true do end\nend)\nlocal y = 2\n",
            (nnc_frontend_opts){.max_instructions = 5000});
  assert_int_equal(l.st, NNC_E_LIMIT);
  assert_non_null(strstr(l.err.msg, "instruction budget of 5000 exceeded"));
  nnc_graph_free(&l.g);
  load_opts(&l, "bomb.lua", "local s = \"x\"\nfor _ = 1, 40 do\n  s = string.rep(s, 2)\nend\n",
            (nnc_frontend_opts){.max_memory = 2 << 20});
  expect_error(&l, NNC_E_LIMIT, 3, "memory budget of 2 MiB exceeded");
  nnc_graph_free(&l.g);
  load_opts(&l, "tbomb.lua", "local t = {}\nfor i = 1, 1e9 do t[i] = { i } end\n",
            (nnc_frontend_opts){.max_memory = 3 << 20});
  expect_error(&l, NNC_E_LIMIT, 2, "memory budget of 3 MiB exceeded");
  nnc_graph_free(&l.g);
  /* refused outright (over twice the budget) and caught: stopped at the next line */
  load_opts(&l, "bomb2.lua", "local ok = pcall(string.rep, \"x\", 1 << 22)\nlocal y = 1\n",
            (nnc_frontend_opts){.max_memory = 1 << 20});
  expect_error(&l, NNC_E_LIMIT, 2, "memory budget of 1 MiB exceeded");
  nnc_graph_free(&l.g);
  /* refused outright from far under the budget: Lua gives no line */
  load_opts(&l, "bomb3.lua", "local x = 1\nlocal s = string.rep(\"x\", 1 << 22)\nlocal y = 1\n",
            (nnc_frontend_opts){.max_memory = 1 << 20});
  char msg[600];
  snprintf(msg, sizeof msg, "%s: memory budget of 1 MiB exceeded", l.path);
  expect_error(&l, NNC_E_LIMIT, 0, msg);
  nnc_graph_free(&l.g);
  /* garbage past the budget is collected, not counted */
  load_opts(&l, "churn.lua",
            "local keep = {}\nfor i = 1, 30 do keep[i] = string.rep(\"k\", 20000) .. i end\n"
            "for i = 1, 300 do\n  local s = string.rep(\"y\", 20000) .. i\nend\n",
            (nnc_frontend_opts){.max_memory = 1 << 20});
  assert_int_equal(l.st, NNC_OK);
  nnc_graph_free(&l.g);
  load_opts(&l, "cbomb.lua", "local s = \"x\"\nwhile true do\n  s = s .. s\nend\n",
            (nnc_frontend_opts){.max_memory = 4 << 20});
  expect_error(&l, NNC_E_LIMIT, 3, "memory budget of 4 MiB exceeded");
  nnc_graph_free(&l.g);
  /* a finalizer would run with the hooks off, outside the budget */
  load_opts(&l, "gc.lua", "local x = 1\nsetmetatable({}, { __gc = function() while true do end end })\n",
            (nnc_frontend_opts){0});
  expect_error(&l, NNC_E_MODEL, 2,
               "setmetatable: __gc is not available in a model (finalizers would run outside the instruction budget)");
  nnc_graph_free(&l.g);
  /* too small for Lua to start: no line to name */
  load_opts(&l, "tiny.lua", "local x = 1\n", (nnc_frontend_opts){.max_memory = 1000});
  snprintf(msg, sizeof msg, "%s: memory budget of 1000 bytes exceeded", l.path);
  expect_error(&l, NNC_E_LIMIT, 0, msg);
  nnc_graph_free(&l.g);
  /* a model within its budgets is not disturbed by them */
  load_opts(&l, "fits.lua", "local s = 0\nfor i = 1, 1000 do s = s + i end\nassert(s == 500500)\n",
            (nnc_frontend_opts){.max_instructions = 20000, .max_memory = 1 << 20});
  assert_int_equal(l.st, NNC_OK);
  nnc_graph_free(&l.g);
}

/* ------------------------------------------------------------ errors */

static void test_lua_errors(void **state) {
  fails("local x = 1\nlocal = 3\n", NNC_E_MODEL, 2, "<name> expected near '='");
  fails("local x = 1\n\nerror(\"boom\")\n", NNC_E_MODEL, 3, "boom");
  fails("local x = 1\nerror({})\n", NNC_E_MODEL, 2, "error: expected a message string, found a table value");
  fails("error(42)\n", NNC_E_MODEL, 0, "42");
  fails("error(setmetatable({}, { __tostring = function() return \"custom\" end }))\n", NNC_E_MODEL, 0, "custom");
  fails("local x = nil\nlocal y = x.field\n", NNC_E_MODEL, 2, "attempt to index a nil value (local 'x')");
  loaded l;
  nnc_graph_init(&l.g);
  snprintf(l.path, sizeof l.path, "%s/does_not_exist.lua", mdir);
  l.st = nnc_frontend_load(&(nnc_frontend_opts){.path = l.path}, &l.g, &l.err);
  char msg[600];
  snprintf(msg, sizeof msg, "cannot open %s: No such file or directory", l.path);
  expect_error(&l, NNC_E_IO, 0, msg);
  nnc_graph_free(&l.g);
  nnc_error err = {0};
  nnc_graph g;
  nnc_graph_init(&g);
  assert_int_equal(nnc_frontend_load(&(nnc_frontend_opts){0}, &g, &err), NNC_E_USAGE);
  assert_string_equal(err.msg, "expected a model file");
  nnc_graph_free(&g);
}

/* Misuse of the DSL: the status, the line and the whole message. */
static void test_dsl_errors(void **state) {
  static const struct { const char *src; nnc_status st; const char *msg; } cases[] = {
      {"relu(3)", NNC_E_MODEL, "relu: expected a tensor, found 3"},
      {"matmul(x)", NNC_E_MODEL, "matmul: expected 2 tensors, found 1"},
      {"matmul(x, \"a\")", NNC_E_MODEL, "matmul: expected a tensor as argument 2, found \"a\""},
      {"local y = x + \"a\"", NNC_E_MODEL,
       "add: expected tensors or a tensor and a number, found tensor x f32[B,5] and \"a\""},
      {"local y = x ^ x", NNC_E_MODEL,
       "pow: expected a tensor and a number exponent, found tensor x f32[B,5] and tensor x f32[B,5]"},
      {"local y = 2 ^ x", NNC_E_MODEL, "pow: expected a tensor and a number exponent, found 2 and tensor x f32[B,5]"},
      {"local y = x.foo", NNC_E_MODEL,
       "tensor x: expected a field (shape, rank, dtype, name) or a method (reshape, transpose, permute), found \"foo\""},
      {"local y = x + input(\"z\", f32, { B, 4 })", NNC_E_SHAPE,
       "add: shapes [B,5] and [B,4] do not broadcast (dim 2: 5 vs 4)"},
      {"local y = softmax(x, 3)", NNC_E_SHAPE, "softmax: expected an axis of 1 to 2, found 3"},
      {"local y = softmax(x, -3)", NNC_E_SHAPE, "softmax: expected an axis of 1 to 2, found -3"},
      {"local y = softmax(x, 1.5)", NNC_E_MODEL, "softmax: expected an integer axis, found 1.5"},
      {"local y = sum(x)", NNC_E_MODEL, "sum: expected an axis, found nil"},
      {"local y = linear(x:transpose(), 3, param(\"p\"))", NNC_E_SHAPE,
       "linear: expected an input whose last dim is a constant (weights have a fixed size), found tensor transpose "
       "f32[5,B]"},
      {"local y = linear(x, 3, param(\"w\", { 4, 5 }))", NNC_E_SHAPE,
       "linear: expected a weight with 3 outputs, found tensor w f32[4,5]"},
      {"local y = linear(x, 3, param(\"p\"), { layout = \"io\" })", NNC_E_MODEL,
       "linear: expected layout \"out_in\" or \"in_out\", found \"io\""},
      {"local y = layernorm(x, \"ln\")", NNC_E_MODEL, "layernorm: expected a scope, found \"ln\""},
      {"local y = layernorm(x, param(\"ln\"), { eps = \"small\" })", NNC_E_MODEL,
       "layernorm: expected a number for eps, found \"small\""},
      {"local y = gelu(x, { approx = \"fast\" })", NNC_E_MODEL, "gelu: expected approx \"tanh\" or \"erf\", found \"fast\""},
      {"local y = x:reshape { -1, -1 }", NNC_E_MODEL, "reshape: expected at most one -1, found 2"},
      {"local y = x:reshape { 2, -3 }", NNC_E_SHAPE, "reshape: expected sizes >= 0, found -3 in dim 2"},
      {"local y = x:reshape { 1, 2, 3, 4, 5, 6, 7 }", NNC_E_SHAPE, "reshape: expected at most 6 dims, found 7"},
      {"local y = x:transpose(1, 3)", NNC_E_SHAPE, "transpose: expected axes of 1 to 2, found 1 and 3"},
      {"local y = transpose(input(\"v\", f32, { 4 }))", NNC_E_SHAPE,
       "transpose: expected a tensor of rank >= 2, found tensor v f32[4]"},
      {"local y = x:permute { 1, 1 }", NNC_E_SHAPE, "permute: expected a permutation of 1..2, found {1,1}"},
      {"local y = x:permute { 1 }", NNC_E_SHAPE, "permute: expected 2 axes for tensor x f32[B,5], found 1"},
      {"local y = slice(x, 2, 4, 2)", NNC_E_SHAPE, "slice: expected first <= last on axis 2, found 4 and 2"},
      {"local y = slice(x, 2, 0, 2)", NNC_E_SHAPE, "slice: expected first >= 1 on axis 2, found 0"},
      {"local y = slice(x, 2, 1, 6)", NNC_E_SHAPE, "slice: expected last <= 5 on axis 2, found 6"},
      {"local a, b = split(x, 2, 2)", NNC_E_SHAPE, "split: 5 on axis 2 does not divide into 2 equal parts"},
      {"local a, b = split(x, { 2, 2 }, 2)", NNC_E_SHAPE,
       "split: expected sizes that add up to 5 (axis 2 of x f32[B,5]), found 2+2 = 4"},
      {"local y = concat({}, 1)", NNC_E_MODEL, "concat: expected a list of 1 to 16 tensors, found 0"},
      {"local y = cast(x, \"f16\")", NNC_E_MODEL, "cast: expected a dtype (f32, f16, bf16 or i32), found \"f16\""},
      {"local y = input(\"v\", f32, { true })", NNC_E_MODEL,
       "input v: expected a size, a dim or a dim name in dim 1, found true"},
      {"local y = input(\"v\", f32, { \"N\" })", NNC_E_MODEL,
       "input v: dim \"N\" is not declared (declare it with dim(\"N\", max) or \"N<=max\")"},
      {"local y = input(\"v\", f32, { \"N<=x\" })", NNC_E_MODEL,
       "input v: expected a dim name such as \"B\" or \"B<=32\", found \"N<=x\""},
      {"local y = input(\"v\", f32, 3)", NNC_E_MODEL, "input v: expected a shape (a table of sizes and dims), found 3"},
      {"local y = input(\"x\", f32, { 3 })", NNC_E_MODEL, ""},
      {"local y = dim(\"2B\", 3)", NNC_E_MODEL, "dim: expected a name of letters, digits and _, found \"2B\""},
      {"local y = B * 0.5", NNC_E_MODEL, "dim: expected a product of dims and integers >= 0, found dim B * 0.5"},
      {"local y = param(3)", NNC_E_MODEL, "param: expected a name or a scope, found 3"},
      {"local y = param(\"h\")[true]", NNC_E_MODEL, "scope h: expected a name or a number after it, found true"},
      {"output(\"y\", 3)", NNC_E_MODEL, "output \"y\": expected a tensor, found 3"},
      {"local y = config(3)", NNC_E_MODEL, "config: expected a table of settings, found 3"},
      {"local y = dropout(x, \"a\")", NNC_E_MODEL, "dropout: expected a probability, found \"a\""},
      {"local y = embedding(x, 3)", NNC_E_MODEL, "embedding: expected a scope or a table tensor, found 3"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[512];
    snprintf(src, sizeof src, "local B = dim(\"B\", 6)\nlocal x = input(\"x\", f32, { B, 5 })\n%s\n", cases[i].src);
    loaded l;
    load(&l, "dsl.lua", src);
    char msg[1024];
    if (cases[i].msg[0]) {
      expect_error(&l, cases[i].st, 3, cases[i].msg);
    } else {
      snprintf(msg, sizeof msg, "input \"x\": already declared at %s:2", l.path);
      expect_error(&l, cases[i].st, 3, msg);
    }
    nnc_graph_free(&l.g);
  }
}

/* ------------------------------------------------------------ print, edges */

static void test_print(void **state) {
  FILE *f = tmpfile();
  assert_non_null(f);
  loaded l;
  load_opts(&l, "pr.lua",
            "local B = dim(\"B\", 3)\n"
            "local x = input(\"x\", f32, { B, 3 })\n"
            "local h = linear(x, 4, param(\"h\")[2].fc)\n"
            "print(x, 3, \"s\", B * 2, param(\"h\"), i32)\n"
            "print(h)\n"
            "print()\n",
            (nnc_frontend_opts){.print_to = f});
  assert_int_equal(l.st, NNC_OK);
  char buf[2048] = "", want[2048];
  rewind(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  snprintf(want, sizeof want, "tensor x f32[B,3] (%s:2)\t3\ts\t2*B\tscope h\ti32\ntensor h.2.fc f32[B,4] (%s:3)\n\n",
           l.path, l.path);
  assert_string_equal(buf, want);
  nnc_graph_free(&l.g);
}

static void test_edges(void **state) {
  loaded l;
  load_ok(&l, "empty.lua", "");
  assert_int_equal(l.g.nnodes, 0);
  assert_int_equal(l.g.ntensors, 0);
  assert_string_equal(l.g.name, "empty");
  nnc_graph_free(&l.g);
  load_ok(&l, "model.v2.txt",
          "local s = input(\"s\", f32, {})\n"
          "local z = input(\"z\", f32, { 0, 3 })\n"
          "local r = input(\"r\", f32, { 1, 2, 3, 4, 5, 6 })\n"
          "output(\"a\", relu(s))\n"
          "output(\"b\", sqrt(z))\n"
          "output(\"c\", log(r))\n");
  assert_string_equal(l.g.name, "model.v2.txt");
  expect_node(&l, 0, NNC_OP_RELU, "relu", "[]", 4);
  expect_node(&l, 1, NNC_OP_SQRT, "sqrt", "[0,3]", 5);
  expect_node(&l, 2, NNC_OP_LOG, "log", "[1,2,3,4,5,6]", 6);
  nnc_graph_free(&l.g);
  /* a model in the current folder, named without a folder */
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(mdir), 0);
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_error err = {0};
  write_at("here.lua", "local x = include(\"empty.lua\")\nerror(\"stop\")\n");
  assert_int_equal(nnc_frontend_load(&(nnc_frontend_opts){.path = "here.lua"}, &g, &err), NNC_E_MODEL);
  assert_string_equal(err.msg, "here.lua:2: stop");
  assert_string_equal(g.name, "here");
  nnc_graph_free(&g);
  assert_int_equal(chdir(cwd), 0);
}

/* ------------------------------------------------------------ setup */

static int remove_tree(const char *path) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  return system(cmd);
}

static int setup(void **state) {
  snprintf(tmp, sizeof tmp, "/tmp/nnc_frontend_XXXXXX");
  if (!mkdtemp(tmp)) return -1;
  snprintf(mdir, sizeof mdir, "%s/m", tmp);
  return mkdir(mdir, 0755);
}

static int teardown(void **state) { return remove_tree(tmp) == 0 ? 0 : -1; }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_graph),
      cmocka_unit_test(test_locations),
      cmocka_unit_test(test_operators),
      cmocka_unit_test(test_dims),
      cmocka_unit_test(test_dim_redeclared),
      cmocka_unit_test(test_scopes_and_params),
      cmocka_unit_test(test_norms_embedding_and_loss),
      cmocka_unit_test(test_sdpa_expansion),
      cmocka_unit_test(test_move_ops),
      cmocka_unit_test(test_config_overrides),
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_include),
      cmocka_unit_test(test_include_errors),
      cmocka_unit_test(test_sandbox),
      cmocka_unit_test(test_budgets),
      cmocka_unit_test(test_lua_errors),
      cmocka_unit_test(test_dsl_errors),
      cmocka_unit_test(test_print),
      cmocka_unit_test(test_edges),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
