/* compiler/frontend/dsl_ops.c — the compute ops of the model language:
 * operators on tensors, elementwise functions, linear and matmul, the norms,
 * embedding, softmax, reductions, masks, the loss and dropout. Ops that own
 * parameters take a scope and label their node with its prefix. */
#include <stdio.h>
#include <string.h>

#include "fe.h"

static int push1(lua_State *L, int node) {
  fe_push_tensor(L, fe_out(L, node));
  return 1;
}

/* ------------------------------------------------------------ operators */

/* tensor OP tensor, tensor OP number, number OP tensor. For number OP tensor
 * `swapped` is the op (ADD_S for commutative ones, RSUB_S, RDIV_S); NONE: an
 * error. */
static int arith(lua_State *L, const char *fn, nnc_op both, nnc_op scalar, nnc_op swapped) {
  int a = fe_tensor_at(L, 1), b = fe_tensor_at(L, 2);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  if (a >= 0 && b >= 0 && both != NNC_OP_NONE) {
    int in[2] = {a, b};
    return push1(L, fe_add_node(L, both, 2, in, &at, 1, NULL, NULL));
  }
  if (a >= 0 && lua_type(L, 2) == LUA_TNUMBER) {
    at.scalar = (double)lua_tonumber(L, 2);
    return push1(L, fe_add_node(L, scalar, 1, &a, &at, 1, NULL, NULL));
  }
  if (b >= 0 && lua_type(L, 1) == LUA_TNUMBER && swapped != NNC_OP_NONE) {
    at.scalar = (double)lua_tonumber(L, 1);
    return push1(L, fe_add_node(L, swapped, 1, &b, &at, 1, NULL, NULL));
  }
  char d1[256], d2[256];
  return fe_fail(L, NNC_E_MODEL, "%s: expected %s, found %s and %s", fn,
                 both != NNC_OP_NONE ? "tensors or a tensor and a number" : "a tensor and a number exponent",
                 fe_describe(L, 1, d1, sizeof d1), fe_describe(L, 2, d2, sizeof d2));
}

int fe_l_add(lua_State *L) { return arith(L, "add", NNC_OP_ADD, NNC_OP_ADD_S, NNC_OP_ADD_S); }
int fe_l_sub(lua_State *L) { return arith(L, "sub", NNC_OP_SUB, NNC_OP_SUB_S, NNC_OP_RSUB_S); }
int fe_l_mul(lua_State *L) { return arith(L, "mul", NNC_OP_MUL, NNC_OP_MUL_S, NNC_OP_MUL_S); }
int fe_l_div(lua_State *L) { return arith(L, "div", NNC_OP_DIV, NNC_OP_DIV_S, NNC_OP_RDIV_S); }
int fe_l_pow(lua_State *L) { return arith(L, "pow", NNC_OP_NONE, NNC_OP_POW_S, NNC_OP_NONE); }

int fe_l_unm(lua_State *L) {
  int x = fe_arg_tensor(L, 1, "neg");
  return push1(L, fe_add_node(L, NNC_OP_NEG, 1, &x, NULL, 1, NULL, NULL));
}

/* ------------------------------------------------------------ elementwise */

static int unary(lua_State *L, nnc_op op, const nnc_attrs *at) {
  int x = fe_arg_tensor(L, 1, nnc_op_info_of(op)->name);
  return push1(L, fe_add_node(L, op, 1, &x, at, 1, NULL, NULL));
}

static int l_relu(lua_State *L) { return unary(L, NNC_OP_RELU, NULL); }
static int l_silu(lua_State *L) { return unary(L, NNC_OP_SILU, NULL); }
static int l_sigmoid(lua_State *L) { return unary(L, NNC_OP_SIGMOID, NULL); }
static int l_tanh(lua_State *L) { return unary(L, NNC_OP_TANH, NULL); }
static int l_exp(lua_State *L) { return unary(L, NNC_OP_EXP, NULL); }
static int l_log(lua_State *L) { return unary(L, NNC_OP_LOG, NULL); }
static int l_sqrt(lua_State *L) { return unary(L, NNC_OP_SQRT, NULL); }

static int l_gelu(lua_State *L) {
  static const char *const keys[] = {"approx", NULL};
  fe_arg_tensor(L, 1, "gelu");
  fe_arg_opts(L, 2, "gelu", keys);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "approx");
    const char *a = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (a && strcmp(a, "tanh") == 0) at.gelu_tanh = true;
    else if (!lua_isnil(L, -1) && !(a && (strcmp(a, "none") == 0 || strcmp(a, "erf") == 0))) {
      char d[256];
      return fe_fail(L, NNC_E_MODEL, "gelu: expected approx \"tanh\" or \"erf\", found %s",
                     fe_describe(L, -1, d, sizeof d));
    }
    lua_pop(L, 1);
  }
  return unary(L, NNC_OP_GELU, &at);
}

static int l_cast(lua_State *L) {
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  fe_arg_tensor(L, 1, "cast");
  if (!fe_dtype_at(L, 2, &at.to)) {
    char d[256];
    return fe_fail(L, NNC_E_MODEL, "cast: expected a dtype (f32, f16, bf16 or i32), found %s",
                   fe_describe(L, 2, d, sizeof d));
  }
  return unary(L, NNC_OP_CAST, &at);
}

/* ------------------------------------------------------------ parameters */

nnc_dtype fe_param_dtype(lua_State *L, int x) {
  nnc_dtype t = fe_get(L)->g->tensors[x].dtype;
  return nnc_dtype_is_float(t) ? t : NNC_F32;
}

int fe_make_param(lua_State *L, const char *prefix, const char *suffix, nnc_dtype t, int rank,
                  const int64_t *dims) {
  fe_state *fe = fe_get(L);
  nnc_dim shape[NNC_MAX_RANK];
  for (int i = 0; i < rank; i++) shape[i] = nnc_dim_const(dims[i]);
  lua_pushfstring(L, "%s.%s", prefix, suffix);
  int id = -1;
  fe_check(L, nnc_graph_add_param(fe->g, lua_tostring(L, -1), t, rank, shape, fe_loc(L), &id, &fe->err));
  lua_pop(L, 1);
  return id;
}

/* x's last dim, which must be a constant because a weight is sized by it. */
static int64_t features(lua_State *L, int x, const char *fn) {
  fe_state *fe = fe_get(L);
  const nnc_tensor *t = &fe->g->tensors[x];
  char d[256];
  if (t->rank < 1 || !nnc_dim_is_const(t->shape[t->rank - 1]))
    fe_fail(L, NNC_E_SHAPE, "%s: expected an input whose last dim is a constant (weights have a fixed size), found %s",
            fn, fe_describe(L, 1, d, sizeof d));
  return t->shape[t->rank - 1].k;
}

/* ------------------------------------------------------------ linear, matmul */

static int l_linear(lua_State *L) {
  static const char *const keys[] = {"bias", "layout", NULL};
  fe_state *fe = fe_get(L);
  char d[256];
  int x = fe_arg_tensor(L, 1, "linear");
  fe_arg_opts(L, 4, "linear", keys);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "layout");
    const char *lay = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (lay && strcmp(lay, "in_out") == 0) at.weight_in_out = true;
    else if (!lua_isnil(L, -1) && !(lay && strcmp(lay, "out_in") == 0))
      return fe_fail(L, NNC_E_MODEL, "linear: expected layout \"out_in\" or \"in_out\", found %s",
                     fe_describe(L, -1, d, sizeof d));
    lua_pop(L, 1);
    lua_getfield(L, 4, "bias");
  } else {
    lua_pushnil(L);
  }
  int bias_idx = lua_gettop(L);   /* the bias option */
  int in[3] = {x, -1, -1}, nin = 2;
  const char *prefix = fe_scope_at(L, 3);
  if (prefix) {
    lua_Integer n = fe_arg_int(L, 2, "linear", "number of outputs");
    if (n < 1) return fe_fail(L, NNC_E_SHAPE, "linear: expected at least 1 output, found %lld", (long long)n);
    if (!lua_isnil(L, bias_idx) && !lua_isboolean(L, bias_idx))
      return fe_fail(L, NNC_E_MODEL, "linear: expected bias true or false with a scope, found %s",
                     fe_describe(L, bias_idx, d, sizeof d));
    int64_t k = features(L, x, "linear");
    int64_t wd[2] = {at.weight_in_out ? k : n, at.weight_in_out ? n : k};
    nnc_dtype t = fe_param_dtype(L, x);
    in[1] = fe_make_param(L, prefix, "weight", t, 2, wd);
    if (lua_isnil(L, bias_idx) || lua_toboolean(L, bias_idx)) in[nin++] = fe_make_param(L, prefix, "bias", t, 1, &wd[at.weight_in_out ? 1 : 0]);
    return push1(L, fe_add_node(L, NNC_OP_LINEAR, nin, in, &at, 1, prefix, NULL));
  }
  in[1] = fe_tensor_at(L, 3);
  if (in[1] < 0)
    return fe_fail(L, NNC_E_MODEL, "linear: expected a scope or a weight tensor, found %s", fe_describe(L, 3, d, sizeof d));
  if (!lua_isnil(L, 2)) {
    lua_Integer n = fe_arg_int(L, 2, "linear", "number of outputs");
    const nnc_tensor *w = &fe->g->tensors[in[1]];
    if (w->rank == 2 && !nnc_dim_eq_const(w->shape[at.weight_in_out ? 1 : 0], n)) {
      char wd[256];
      return fe_fail(L, NNC_E_SHAPE, "linear: expected a weight with %lld outputs, found %s", (long long)n,
                     fe_describe(L, 3, wd, sizeof wd));
    }
  }
  if (fe_tensor_at(L, bias_idx) >= 0) in[nin++] = fe_tensor_at(L, bias_idx);
  else if (!lua_isnil(L, bias_idx) && !(lua_isboolean(L, bias_idx) && !lua_toboolean(L, bias_idx)))
    return fe_fail(L, NNC_E_MODEL, "linear: expected bias to be a tensor or false with a weight tensor, found %s",
                   fe_describe(L, bias_idx, d, sizeof d));
  return push1(L, fe_add_node(L, NNC_OP_LINEAR, nin, in, &at, 1, NULL, NULL));
}

static int l_matmul(lua_State *L) {
  int in[2];
  fe_arg_tensors(L, "matmul", 2, in);
  return push1(L, fe_add_node(L, NNC_OP_MATMUL, 2, in, NULL, 1, NULL, NULL));
}

/* ------------------------------------------------------------ norms, embedding */

static int norm(lua_State *L, nnc_op op, const char *fn, double eps, bool with_bias) {
  static const char *const keys[] = {"eps", NULL};
  char d[256];
  int x = fe_arg_tensor(L, 1, fn);
  const char *prefix = fe_scope_at(L, 2);
  if (!prefix) return fe_fail(L, NNC_E_MODEL, "%s: expected a scope, found %s", fn, fe_describe(L, 2, d, sizeof d));
  fe_arg_opts(L, 3, fn, keys);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.eps = fe_opt_number(L, 3, fn, "eps", eps);
  int64_t c = features(L, x, fn);
  nnc_dtype t = fe_param_dtype(L, x);
  int in[3] = {x, fe_make_param(L, prefix, "weight", t, 1, &c), -1};
  if (with_bias) in[2] = fe_make_param(L, prefix, "bias", t, 1, &c);
  return push1(L, fe_add_node(L, op, with_bias ? 3 : 2, in, &at, 1, prefix, NULL));
}

static int l_layernorm(lua_State *L) { return norm(L, NNC_OP_LAYERNORM, "layernorm", 1e-5, true); }
static int l_rmsnorm(lua_State *L) { return norm(L, NNC_OP_RMSNORM, "rmsnorm", 1e-6, false); }

/* embedding(ids, p, rows, cols) or embedding(ids, table) */
static int l_embedding(lua_State *L) {
  char d[256];
  int ids = fe_arg_tensor(L, 1, "embedding");
  const char *prefix = fe_scope_at(L, 2);
  int in[2] = {fe_tensor_at(L, 2), ids};
  if (prefix) {
    int64_t dims[2] = {fe_arg_int(L, 3, "embedding", "number of rows"), fe_arg_int(L, 4, "embedding", "number of columns")};
    if (dims[0] < 1 || dims[1] < 1)
      return fe_fail(L, NNC_E_SHAPE, "embedding: expected rows and columns >= 1, found %lld and %lld",
                     (long long)dims[0], (long long)dims[1]);
    in[0] = fe_make_param(L, prefix, "weight", NNC_F32, 2, dims);
  } else if (in[0] < 0) {
    return fe_fail(L, NNC_E_MODEL, "embedding: expected a scope or a table tensor, found %s",
                   fe_describe(L, 2, d, sizeof d));
  }
  return push1(L, fe_add_node(L, NNC_OP_EMBEDDING, 2, in, NULL, 1, prefix, NULL));
}

/* ------------------------------------------------------------ rows, reductions */

static int l_softmax(lua_State *L) {
  fe_state *fe = fe_get(L);
  int x = fe_arg_tensor(L, 1, "softmax");
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = fe_arg_axis(L, 2, fe->g->tensors[x].rank, "softmax", -1);
  return push1(L, fe_add_node(L, NNC_OP_SOFTMAX, 1, &x, &at, 1, NULL, NULL));
}

static int reduce(lua_State *L, nnc_op op) {
  fe_state *fe = fe_get(L);
  const char *fn = nnc_op_info_of(op)->name;
  char d[256];
  int x = fe_arg_tensor(L, 1, fn);
  if (lua_isnoneornil(L, 2)) return fe_fail(L, NNC_E_MODEL, "%s: expected an axis, found nil", fn);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = fe_arg_axis(L, 2, fe->g->tensors[x].rank, fn, -1);
  if (!lua_isnoneornil(L, 3) && !lua_isboolean(L, 3))
    return fe_fail(L, NNC_E_MODEL, "%s: expected keepdim true or false, found %s", fn, fe_describe(L, 3, d, sizeof d));
  at.keepdim = lua_toboolean(L, 3);
  return push1(L, fe_add_node(L, op, 1, &x, &at, 1, NULL, NULL));
}

static int l_sum(lua_State *L) { return reduce(L, NNC_OP_SUM); }
static int l_mean(lua_State *L) { return reduce(L, NNC_OP_MEAN); }
static int l_max(lua_State *L) { return reduce(L, NNC_OP_MAX); }

/* ------------------------------------------------------------ masks, loss, dropout */

static int l_causal_mask(lua_State *L) { return unary(L, NNC_OP_CAUSAL_MASK, NULL); }

static int l_padding_mask(lua_State *L) {
  int in[2];
  fe_arg_tensors(L, "padding_mask", 2, in);
  return push1(L, fe_add_node(L, NNC_OP_PADDING_MASK, 2, in, NULL, 1, NULL, NULL));
}

static int l_cross_entropy(lua_State *L) {
  int in[2];
  fe_arg_tensors(L, "cross_entropy", 2, in);
  return push1(L, fe_add_node(L, NNC_OP_CROSS_ENTROPY, 2, in, NULL, 1, NULL, NULL));
}

/* nnc compiles for inference: dropout is the identity. */
static int l_dropout(lua_State *L) {
  fe_arg_tensor(L, 1, "dropout");
  if (!lua_isnoneornil(L, 2) && lua_type(L, 2) != LUA_TNUMBER) {
    char d[256];
    return fe_fail(L, NNC_E_MODEL, "dropout: expected a probability, found %s", fe_describe(L, 2, d, sizeof d));
  }
  lua_settop(L, 1);
  return 1;
}

void fe_ops_register(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"relu", l_relu},         {"gelu", l_gelu},
      {"silu", l_silu},         {"sigmoid", l_sigmoid},
      {"tanh", l_tanh},         {"exp", l_exp},
      {"log", l_log},           {"sqrt", l_sqrt},
      {"cast", l_cast},         {"linear", l_linear},
      {"matmul", l_matmul},     {"layernorm", l_layernorm},
      {"rmsnorm", l_rmsnorm},   {"embedding", l_embedding},
      {"softmax", l_softmax},   {"sum", l_sum},
      {"mean", l_mean},         {"max", l_max},
      {"causal_mask", l_causal_mask}, {"padding_mask", l_padding_mask},
      {"cross_entropy", l_cross_entropy}, {"dropout", l_dropout},
      {NULL, NULL}};
  lua_pushglobaltable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
