/* compiler/frontend/dsl_util.c — what every DSL function needs: the caller's
 * file:line, raising errors that keep their nnc status, reading arguments,
 * and adding a node with its shape inference. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../passes/passes.h"
#include "fe.h"

fe_state *fe_get(lua_State *L) { return *(fe_state **)lua_getextraspace(L); }

nnc_srcloc fe_loc_of(lua_State *L, const char *source, int line) {
  const char *file = source[0] == '@' || source[0] == '=' ? source + 1 : source;
  return (nnc_srcloc){nnc_graph_intern(fe_get(L)->g, file), line};
}

/* The first Lua function up the stack from the running C function: a DSL
 * function called through pcall or a metamethod still gets the model's line. */
nnc_srcloc fe_loc(lua_State *L) {
  lua_Debug ar;
  for (int level = 1; level < 64 && lua_getstack(L, level, &ar); level++)
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) return fe_loc_of(L, ar.source, ar.currentline);
  return NNC_NOLOC;
}

int fe_raise(lua_State *L) {
  lua_pushstring(L, fe_get(L)->err.msg);
  return lua_error(L);
}

int fe_fail(lua_State *L, nnc_status code, const char *fmt, ...) {
  fe_state *fe = fe_get(L);
  nnc_srcloc loc = fe_loc(L);
  va_list ap;
  va_start(ap, fmt);
  nnc_verrorf(&fe->err, code, loc, fmt, ap);
  va_end(ap);
  return fe_raise(L);
}

void fe_check(lua_State *L, nnc_status st) {
  if (st != NNC_OK) fe_raise(L);
}

const char *fe_describe(lua_State *L, int idx, char *buf, size_t n) {
  fe_state *fe = fe_get(L);
  int t = fe_tensor_at(L, idx);
  nnc_dim d;
  nnc_dtype dt;
  const char *scope = fe_scope_at(L, idx);
  if (t >= 0) {
    const nnc_tensor *x = &fe->g->tensors[t];
    char shape[160];
    snprintf(buf, n, "tensor %.120s %s%s", x->name, nnc_dtype_name(x->dtype),
             nnc_shape_format(fe->g, x->rank, x->shape, shape, sizeof shape));
  } else if (lua_type(L, idx) != LUA_TNUMBER && fe_dim_at(L, idx, &d)) {
    char s[64];
    snprintf(buf, n, "dim %s", nnc_dim_format(fe->g, d, s, sizeof s));
  } else if (scope) {
    snprintf(buf, n, "scope %.200s", scope);
  } else if (fe_dtype_at(L, idx, &dt)) {
    snprintf(buf, n, "dtype %s", nnc_dtype_name(dt));
  } else if (lua_isinteger(L, idx)) {
    snprintf(buf, n, "%lld", (long long)lua_tointeger(L, idx));
  } else if (lua_type(L, idx) == LUA_TNUMBER) {
    snprintf(buf, n, "%.14g", (double)lua_tonumber(L, idx));
  } else if (lua_type(L, idx) == LUA_TSTRING) {
    snprintf(buf, n, "\"%.200s\"", lua_tostring(L, idx));
  } else if (lua_type(L, idx) == LUA_TBOOLEAN) {
    snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false");
  } else if (lua_isnoneornil(L, idx)) {
    snprintf(buf, n, "nil");
  } else {
    snprintf(buf, n, "a %s", luaL_typename(L, idx));
  }
  return buf;
}

int fe_arg_tensor(lua_State *L, int idx, const char *fn) {
  int t = fe_tensor_at(L, idx);
  if (t < 0) {
    char d[256];
    fe_fail(L, NNC_E_MODEL, "%s: expected a tensor, found %s", fn, fe_describe(L, idx, d, sizeof d));
  }
  return t;
}

void fe_arg_tensors(lua_State *L, const char *fn, int n, int *ids) {
  for (int i = 0; i < n; i++) {
    ids[i] = fe_tensor_at(L, i + 1);
    if (ids[i] >= 0) continue;
    if (lua_isnoneornil(L, i + 1))
      fe_fail(L, NNC_E_MODEL, "%s: expected %d tensors, found %d", fn, n, i);
    char d[256];
    fe_fail(L, NNC_E_MODEL, "%s: expected a tensor as argument %d, found %s", fn, i + 1,
            fe_describe(L, i + 1, d, sizeof d));
  }
}

lua_Integer fe_arg_int(lua_State *L, int idx, const char *fn, const char *what) {
  int ok = 0;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok || lua_type(L, idx) != LUA_TNUMBER) {
    char d[256];
    fe_fail(L, NNC_E_MODEL, "%s: expected an integer %s, found %s", fn, what, fe_describe(L, idx, d, sizeof d));
  }
  return v;
}

int fe_arg_axis(lua_State *L, int idx, int rank, const char *fn, lua_Integer dflt) {
  lua_Integer a = lua_isnoneornil(L, idx) ? dflt : fe_arg_int(L, idx, fn, "axis");
  if (a >= 1 && a <= rank) return (int)a - 1;
  if (a < 0 && a >= -rank) return rank + (int)a;
  if (rank == 0) fe_fail(L, NNC_E_SHAPE, "%s: expected a tensor with an axis %lld, found one of rank 0", fn, (long long)a);
  return fe_fail(L, NNC_E_SHAPE, "%s: expected an axis of 1 to %d, found %lld", fn, rank, (long long)a);
}

void fe_arg_opts(lua_State *L, int idx, const char *fn, const char *const *keys) {
  if (lua_isnoneornil(L, idx)) return;
  char d[256];
  if (!lua_istable(L, idx))
    fe_fail(L, NNC_E_MODEL, "%s: expected a table of options, found %s", fn, fe_describe(L, idx, d, sizeof d));
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    bool known = false;
    if (lua_type(L, -2) == LUA_TSTRING)
      for (int i = 0; keys[i] && !known; i++) known = strcmp(lua_tostring(L, -2), keys[i]) == 0;
    if (!known) {
      char list[256] = "";
      size_t used = 0;
      for (int i = 0; keys[i] && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", keys[i]);
      fe_fail(L, NNC_E_MODEL, "%s: expected options %s, found %s", fn, list, fe_describe(L, -2, d, sizeof d));
    }
    lua_pop(L, 1);
  }
}

/* Pushes option key of the opts table at idx (nil when there is no table). */
static void get_opt(lua_State *L, int idx, const char *key) {
  if (lua_istable(L, idx)) lua_getfield(L, idx, key);
  else lua_pushnil(L);
}

double fe_opt_number(lua_State *L, int idx, const char *fn, const char *key, double dflt) {
  idx = lua_absindex(L, idx);
  get_opt(L, idx, key);
  double v = dflt;
  if (lua_type(L, -1) == LUA_TNUMBER) {
    v = (double)lua_tonumber(L, -1);
  } else if (!lua_isnil(L, -1)) {
    char d[256];
    fe_fail(L, NNC_E_MODEL, "%s: expected a number for %s, found %s", fn, key, fe_describe(L, -1, d, sizeof d));
  }
  lua_pop(L, 1);
  return v;
}

bool fe_opt_bool(lua_State *L, int idx, const char *fn, const char *key, bool dflt) {
  idx = lua_absindex(L, idx);
  get_opt(L, idx, key);
  bool v = dflt;
  if (lua_type(L, -1) == LUA_TBOOLEAN) {
    v = lua_toboolean(L, -1);
  } else if (!lua_isnil(L, -1)) {
    char d[256];
    fe_fail(L, NNC_E_MODEL, "%s: expected true or false for %s, found %s", fn, key, fe_describe(L, -1, d, sizeof d));
  }
  lua_pop(L, 1);
  return v;
}

int fe_add_node(lua_State *L, nnc_op op, int nin, const int *in, const nnc_attrs *a, int nout,
                const char *label, const fe_shape *preset) {
  fe_state *fe = fe_get(L);
  int node = -1;
  fe_check(L, nnc_graph_add_node(fe->g, op, nin, in, a, nout, fe_loc(L), label, &node, &fe->err));
  for (int i = 0; preset && i < nout; i++) {
    nnc_tensor *t = &fe->g->tensors[fe->g->nodes[node].out[i]];
    t->rank = preset[i].rank;
    memcpy(t->shape, preset[i].dim, sizeof t->shape);
  }
  fe_check(L, nnc_infer_node(fe->g, node, &fe->err));
  return node;
}

int fe_push_outputs(lua_State *L, int node) {
  const nnc_node *n = &fe_get(L)->g->nodes[node];
  luaL_checkstack(L, n->nout, "too many results");
  for (int i = 0; i < n->nout; i++) fe_push_tensor(L, n->out[i]);
  return n->nout;
}

int fe_out(lua_State *L, int node) { return fe_get(L)->g->nodes[node].out[0]; }
