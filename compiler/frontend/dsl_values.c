/* compiler/frontend/dsl_values.c — the Lua values of the model language:
 * tensors, dims, scopes and dtypes (full userdata with metatables), and shape
 * tables. A tensor userdata holds a tensor id; one userdata per id is kept so
 * that `param("w", {3}) == param("w", {3})` holds for tied weights. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

#define TENSOR_MT "nnc.tensor"
#define DIM_MT "nnc.dim"
#define SCOPE_MT "nnc.scope"
#define DTYPE_MT "nnc.dtype"

/* Registry keys (their addresses) of the tensor and dtype caches. */
static const char tensor_cache = 't', dtype_cache = 'd';

/* ------------------------------------------------------------ tensors */

void fe_push_tensor(lua_State *L, int id) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &tensor_cache);
  if (lua_rawgeti(L, -1, (lua_Integer)id + 1) == LUA_TUSERDATA) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  int *p = lua_newuserdatauv(L, sizeof *p, 0);
  *p = id;
  luaL_setmetatable(L, TENSOR_MT);
  lua_pushvalue(L, -1);
  lua_rawseti(L, -3, (lua_Integer)id + 1);
  lua_remove(L, -2);
}

int fe_tensor_at(lua_State *L, int idx) {
  const int *p = luaL_testudata(L, idx, TENSOR_MT);
  if (!p || *p < 0 || *p >= fe_get(L)->g->ntensors) return -1;
  return *p;
}

static int tensor_index(lua_State *L) {
  fe_state *fe = fe_get(L);
  int id = fe_arg_tensor(L, 1, "tensor");
  const nnc_tensor *t = &fe->g->tensors[id];
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (strcmp(k, "shape") == 0) {
    lua_createtable(L, t->rank, 0);
    for (int i = 0; i < t->rank; i++) {
      fe_push_dim(L, t->shape[i]);
      lua_rawseti(L, -2, i + 1);
    }
  } else if (strcmp(k, "rank") == 0) {
    lua_pushinteger(L, t->rank);
  } else if (strcmp(k, "dtype") == 0) {
    fe_push_dtype(L, t->dtype);
  } else if (strcmp(k, "name") == 0) {
    lua_pushstring(L, t->name);
  } else if (strcmp(k, "reshape") == 0) {
    lua_pushcfunction(L, fe_l_reshape);
  } else if (strcmp(k, "transpose") == 0) {
    lua_pushcfunction(L, fe_l_transpose);
  } else if (strcmp(k, "permute") == 0) {
    lua_pushcfunction(L, fe_l_permute);
  } else {
    char d[256];
    return fe_fail(L, NNC_E_MODEL,
                   "tensor %s: expected a field (shape, rank, dtype, name) or a method (reshape, transpose, "
                   "permute), found %s",
                   t->name, fe_describe(L, 2, d, sizeof d));
  }
  return 1;
}

static int tensor_tostring(lua_State *L) {
  fe_state *fe = fe_get(L);
  const nnc_tensor *t = &fe->g->tensors[fe_arg_tensor(L, 1, "tostring")];
  char shape[256];
  nnc_shape_format(fe->g, t->rank, t->shape, shape, sizeof shape);
  lua_pushfstring(L, "tensor %s %s%s (%s:%d)", t->name, nnc_dtype_name(t->dtype), shape,
                  t->loc.file ? t->loc.file : "?", t->loc.line);
  return 1;
}

/* ------------------------------------------------------------ dims */

void fe_push_dim(lua_State *L, nnc_dim d) {
  if (d.nsym == 0) {
    lua_pushinteger(L, d.k);
    return;
  }
  nnc_dim *p = lua_newuserdatauv(L, sizeof *p, 0);
  *p = d;
  luaL_setmetatable(L, DIM_MT);
}

bool fe_dim_at(lua_State *L, int idx, nnc_dim *d) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    int ok = 0;
    lua_Integer v = lua_tointegerx(L, idx, &ok);
    if (ok) *d = nnc_dim_const(v);
    return ok;
  }
  const nnc_dim *p = luaL_testudata(L, idx, DIM_MT);
  if (p) *d = *p;
  return p != NULL;
}

static int dim_mul(lua_State *L) {
  nnc_dim a, b, r;
  char d1[256], d2[256];
  if (!fe_dim_at(L, 1, &a) || !fe_dim_at(L, 2, &b) || a.k < 0 || b.k < 0)
    return fe_fail(L, NNC_E_MODEL, "dim: expected a product of dims and integers >= 0, found %s * %s",
                   fe_describe(L, 1, d1, sizeof d1), fe_describe(L, 2, d2, sizeof d2));
  if (!nnc_dim_mul(a, b, &r))
    return fe_fail(L, NNC_E_LIMIT, "dim: %s * %s has more than %d symbolic factors or overflows",
                   fe_describe(L, 1, d1, sizeof d1), fe_describe(L, 2, d2, sizeof d2), NNC_DIM_SYMS);
  fe_push_dim(L, r);
  return 1;
}

static int dim_eq(lua_State *L) {
  nnc_dim a, b;
  lua_pushboolean(L, fe_dim_at(L, 1, &a) && fe_dim_at(L, 2, &b) && nnc_dim_eq(a, b));
  return 1;
}

static int dim_tostring(lua_State *L) {
  nnc_dim d;
  char buf[128];
  if (!fe_dim_at(L, 1, &d)) return fe_fail(L, NNC_E_MODEL, "tostring: expected a dim");
  lua_pushstring(L, nnc_dim_format(fe_get(L)->g, d, buf, sizeof buf));
  return 1;
}

/* ------------------------------------------------------------ scopes */

void fe_push_scope(lua_State *L, const char *prefix) {
  size_t n = strlen(prefix);
  char *p = lua_newuserdatauv(L, n + 1, 0);
  memcpy(p, prefix, n + 1);
  luaL_setmetatable(L, SCOPE_MT);
}

const char *fe_scope_at(lua_State *L, int idx) { return luaL_testudata(L, idx, SCOPE_MT); }

/* scope.name and scope[i]: numbers are written as they are (h[0] is h.0). */
static int scope_index(lua_State *L) {
  const char *prefix = fe_scope_at(L, 1);
  char d[256];
  if (!prefix) return fe_fail(L, NNC_E_MODEL, "scope: expected a scope");
  if (lua_isinteger(L, 2)) lua_pushfstring(L, "%s.%I", prefix, (LUAI_UACINT)lua_tointeger(L, 2));
  else if (lua_type(L, 2) == LUA_TNUMBER) lua_pushfstring(L, "%s.%f", prefix, (LUAI_UACNUMBER)lua_tonumber(L, 2));
  else if (lua_type(L, 2) == LUA_TSTRING) lua_pushfstring(L, "%s.%s", prefix, lua_tostring(L, 2));
  else
    return fe_fail(L, NNC_E_MODEL, "scope %s: expected a name or a number after it, found %s", prefix,
                   fe_describe(L, 2, d, sizeof d));
  fe_push_scope(L, lua_tostring(L, -1));
  return 1;
}

static int scope_tostring(lua_State *L) {
  const char *prefix = fe_scope_at(L, 1);
  lua_pushfstring(L, "scope %s", prefix ? prefix : "?");
  return 1;
}

static int scope_eq(lua_State *L) {
  const char *a = fe_scope_at(L, 1), *b = fe_scope_at(L, 2);
  lua_pushboolean(L, a && b && strcmp(a, b) == 0);
  return 1;
}

/* ------------------------------------------------------------ dtypes */

void fe_push_dtype(lua_State *L, nnc_dtype t) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &dtype_cache);
  lua_rawgeti(L, -1, (lua_Integer)t + 1);
  lua_remove(L, -2);
}

bool fe_dtype_at(lua_State *L, int idx, nnc_dtype *t) {
  const int *p = luaL_testudata(L, idx, DTYPE_MT);
  if (p) *t = (nnc_dtype)*p;
  return p != NULL;
}

static int dtype_tostring(lua_State *L) {
  nnc_dtype t;
  lua_pushstring(L, fe_dtype_at(L, 1, &t) ? nnc_dtype_name(t) : "?");
  return 1;
}

/* ------------------------------------------------------------ shapes */

static bool is_name(const char *s, size_t n) {
  if (n == 0 || n >= sizeof ((nnc_symbol *)0)->name || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_') return false;
  return true;
}

/* "B" (declared before) or "B<=32" (declares it), spaces allowed around. */
static nnc_dim named_dim(lua_State *L, int idx, const char *who) {
  fe_state *fe = fe_get(L);
  const char *s = lua_tostring(L, idx), *le = strstr(s, "<=");
  const char *b = s, *e = le ? le : s + strlen(s);
  while (b < e && isspace((unsigned char)*b)) b++;
  while (e > b && isspace((unsigned char)e[-1])) e--;
  char name[sizeof ((nnc_symbol *)0)->name];
  long long max = 0;
  bool ok = is_name(b, (size_t)(e - b));
  if (ok) {
    memcpy(name, b, (size_t)(e - b));
    name[e - b] = 0;
  }
  if (ok && le) {
    char *end;
    max = strtoll(le + 2, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    ok = end != le + 2 && *end == 0;
  }
  if (!ok)
    fe_fail(L, NNC_E_MODEL, "%s: expected a dim name such as \"B\" or \"B<=32\", found \"%s\"", who, s);
  int id = -1;
  if (le) {
    fe_check(L, nnc_graph_add_symbol(fe->g, name, max, fe_loc(L), &id, &fe->err));
  } else {
    id = nnc_graph_find_symbol(fe->g, name);
    if (id < 0)
      fe_fail(L, NNC_E_MODEL, "%s: dim \"%s\" is not declared (declare it with dim(\"%s\", max) or \"%s<=max\")",
              who, name, name, name);
  }
  return nnc_dim_sym(id);
}

void fe_arg_shape(lua_State *L, int idx, const char *who, bool allow_infer, fe_shape *s) {
  char d[256];
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    fe_fail(L, NNC_E_MODEL, "%s: expected a shape (a table of sizes and dims), found %s", who,
            fe_describe(L, idx, d, sizeof d));
  lua_Integer n = luaL_len(L, idx);
  if (n > NNC_MAX_RANK)
    fe_fail(L, NNC_E_SHAPE, "%s: expected at most %d dims, found %lld", who, NNC_MAX_RANK, (long long)n);
  int inferred = 0;
  memset(s, 0, sizeof *s);
  for (int i = 0; i < (int)n; i++) {
    nnc_dim dim;
    lua_geti(L, idx, i + 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      dim = named_dim(L, -1, who);
    } else if (fe_dim_at(L, -1, &dim)) {
      if (allow_infer && nnc_dim_eq_const(dim, -1)) inferred++;
      else if (dim.k < 0)
        fe_fail(L, NNC_E_SHAPE, "%s: expected sizes >= 0, found %s in dim %d", who, fe_describe(L, -1, d, sizeof d),
                i + 1);
    } else {
      fe_fail(L, NNC_E_MODEL, "%s: expected a size, a dim or a dim name in dim %d, found %s", who, i + 1,
              fe_describe(L, -1, d, sizeof d));
    }
    s->dim[i] = dim;
    lua_pop(L, 1);
  }
  if (inferred > 1) fe_fail(L, NNC_E_MODEL, "%s: expected at most one -1, found %d", who, inferred);
  s->rank = (int)n;
}

/* ------------------------------------------------------------ opening */

void fe_values_open(lua_State *L) {
  static const luaL_Reg tensor_mt[] = {{"__index", tensor_index}, {"__tostring", tensor_tostring},
                                       {"__add", fe_l_add},       {"__sub", fe_l_sub},
                                       {"__mul", fe_l_mul},       {"__div", fe_l_div},
                                       {"__unm", fe_l_unm},       {"__pow", fe_l_pow},
                                       {NULL, NULL}};
  static const luaL_Reg dim_mt[] = {{"__mul", dim_mul}, {"__eq", dim_eq}, {"__tostring", dim_tostring}, {NULL, NULL}};
  static const luaL_Reg scope_mt[] = {{"__index", scope_index}, {"__tostring", scope_tostring},
                                      {"__eq", scope_eq}, {NULL, NULL}};
  static const luaL_Reg dtype_mt[] = {{"__tostring", dtype_tostring}, {NULL, NULL}};
  const struct { const char *name; const luaL_Reg *fns; } mts[] = {
      {TENSOR_MT, tensor_mt}, {DIM_MT, dim_mt}, {SCOPE_MT, scope_mt}, {DTYPE_MT, dtype_mt}};
  for (size_t i = 0; i < sizeof mts / sizeof mts[0]; i++) {
    luaL_newmetatable(L, mts[i].name);
    luaL_setfuncs(L, mts[i].fns, 0);
    lua_pop(L, 1);
  }
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &tensor_cache);
  /* the dtypes are globals: f32, f16, bf16, i32 */
  lua_createtable(L, NNC_DTYPE_COUNT, 0);
  for (int t = 0; t < NNC_DTYPE_COUNT; t++) {
    int *p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = t;
    luaL_setmetatable(L, DTYPE_MT);
    lua_pushvalue(L, -1);
    lua_setglobal(L, nnc_dtype_name((nnc_dtype)t));
    lua_rawseti(L, -2, t + 1);
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &dtype_cache);
}
