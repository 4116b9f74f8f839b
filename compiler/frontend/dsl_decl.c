/* compiler/frontend/dsl_decl.c — the declarations of the model language:
 * config{}, dim, input, param, output, and print. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

/* Registry key (its address) of the set of every config{} key seen. */
static const char config_keys = 'k';

/* ------------------------------------------------------------ config */

/* Pushes the -D value converted to the type of the config value at idx. */
static void push_override(lua_State *L, int idx, const fe_define *d) {
  const char *v = d->value;
  int cur = lua_type(L, idx);
  if (cur == LUA_TNUMBER) {
    if (lua_stringtonumber(L, v) == 0)
      fe_fail(L, NNC_E_USAGE, "-D %s: expected a number, found \"%s\"", d->text, v);
    if (lua_isinteger(L, idx) && !lua_isinteger(L, -1)) {
      int ok = 0;
      lua_Integer i = lua_tointegerx(L, -1, &ok);
      if (!ok) fe_fail(L, NNC_E_USAGE, "-D %s: expected an integer, found \"%s\"", d->text, v);
      lua_pop(L, 1);
      lua_pushinteger(L, i);
    } else if (!lua_isinteger(L, idx) && lua_isinteger(L, -1)) {
      lua_Number n = (lua_Number)lua_tointeger(L, -1);
      lua_pop(L, 1);
      lua_pushnumber(L, n);
    }
  } else if (cur == LUA_TBOOLEAN) {
    if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
      fe_fail(L, NNC_E_USAGE, "-D %s: expected true or false, found \"%s\"", d->text, v);
    lua_pushboolean(L, strcmp(v, "true") == 0);
  } else if (cur == LUA_TSTRING) {
    lua_pushstring(L, v);
  } else {
    fe_fail(L, NNC_E_USAGE, "-D %s: expected a key holding a number, a boolean or a string, found a %s", d->text,
            luaL_typename(L, idx));
  }
}

int fe_l_config(lua_State *L) {
  fe_state *fe = fe_get(L);
  char desc[256];
  if (!lua_istable(L, 1))
    return fe_fail(L, NNC_E_MODEL, "config: expected a table of settings, found %s",
                   fe_describe(L, 1, desc, sizeof desc));
  lua_settop(L, 1);
  for (int i = 0; i < fe->ndefines; i++) {
    fe_define *d = &fe->defines[i];
    lua_pushlstring(L, d->text, d->name_len);
    if (lua_rawget(L, 1) == LUA_TNIL) {
      lua_pop(L, 1);
      continue;
    }
    d->used = true;
    lua_pushlstring(L, d->text, d->name_len);
    push_override(L, 2, d);
    lua_rawset(L, 1);
    lua_pop(L, 1);
  }
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &config_keys) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &config_keys);
  }
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    lua_pushvalue(L, -1);
    lua_pushboolean(L, 1);
    lua_rawset(L, 2);
  }
  lua_settop(L, 1);
  return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

void fe_check_defines(lua_State *L) {
  fe_state *fe = fe_get(L);
  for (int i = 0; i < fe->ndefines; i++) {
    const fe_define *d = &fe->defines[i];
    if (d->used) continue;
    /* the key strings stay alive in the registry set while they are sorted */
    const char *keys[256];
    int n = 0;
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &config_keys) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lua_pop(L, 1);
      if (n < (int)(sizeof keys / sizeof keys[0])) keys[n++] = lua_tostring(L, -1);
    }
    qsort(keys, (size_t)n, sizeof keys[0], cmp_str);
    char list[700] = "";
    size_t used = 0;
    for (int k = 0; k < n && used < sizeof list; k++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", keys[k]);
    if (n == 0)
      nnc_errorf(&fe->err, NNC_E_USAGE, NNC_NOLOC, "-D %s: no config key is named %.*s (the model has no config{})",
                 d->text, (int)d->name_len, d->text);
    else
      nnc_errorf(&fe->err, NNC_E_USAGE, NNC_NOLOC, "-D %s: no config key is named %.*s (the keys are: %s)", d->text,
                 (int)d->name_len, d->text, list);
    fe_raise(L);
  }
}

/* ------------------------------------------------------------ dim */

int fe_l_dim(lua_State *L) {
  fe_state *fe = fe_get(L);
  char desc[256];
  if (lua_type(L, 1) != LUA_TSTRING)
    return fe_fail(L, NNC_E_MODEL, "dim: expected a name, found %s", fe_describe(L, 1, desc, sizeof desc));
  const char *name = lua_tostring(L, 1);
  bool ok = isalpha((unsigned char)name[0]) || name[0] == '_';
  for (const char *c = name; ok && *c; c++) ok = isalnum((unsigned char)*c) || *c == '_';
  if (!ok) return fe_fail(L, NNC_E_MODEL, "dim: expected a name of letters, digits and _, found \"%s\"", name);
  char who[96];
  snprintf(who, sizeof who, "dim %.60s", name);
  lua_Integer max = fe_arg_int(L, 2, who, "maximum");
  int id = -1;
  fe_check(L, nnc_graph_add_symbol(fe->g, name, (int64_t)max, fe_loc(L), &id, &fe->err));
  fe_push_dim(L, nnc_dim_sym(id));
  return 1;
}

/* ------------------------------------------------------------ input, param, output */

static const char *arg_name(lua_State *L, int idx, const char *fn) {
  char desc[256];
  if (lua_type(L, idx) != LUA_TSTRING || !lua_tostring(L, idx)[0])
    fe_fail(L, NNC_E_MODEL, "%s: expected a name, found %s", fn, fe_describe(L, idx, desc, sizeof desc));
  return lua_tostring(L, idx);
}

static nnc_dtype arg_dtype(lua_State *L, int idx, const char *who) {
  nnc_dtype t;
  char desc[256];
  if (!fe_dtype_at(L, idx, &t))
    fe_fail(L, NNC_E_MODEL, "%s: expected a dtype (f32, f16, bf16 or i32), found %s", who,
            fe_describe(L, idx, desc, sizeof desc));
  return t;
}

int fe_l_input(lua_State *L) {
  fe_state *fe = fe_get(L);
  const char *name = arg_name(L, 1, "input");
  char who[300];
  snprintf(who, sizeof who, "input %.200s", name);
  nnc_dtype t = arg_dtype(L, 2, who);
  fe_shape s;
  fe_arg_shape(L, 3, who, false, &s);
  int id = -1;
  fe_check(L, nnc_graph_add_input(fe->g, name, t, s.rank, s.dim, fe_loc(L), &id, &fe->err));
  fe_push_tensor(L, id);
  return 1;
}

/* param(prefix) is a scope; param(name or scope, shape [, dtype]) a tensor. */
int fe_l_param(lua_State *L) {
  fe_state *fe = fe_get(L);
  char desc[256];
  const char *name = fe_scope_at(L, 1);
  if (!name && lua_type(L, 1) == LUA_TSTRING && lua_tostring(L, 1)[0]) name = lua_tostring(L, 1);
  if (!name)
    return fe_fail(L, NNC_E_MODEL, "param: expected a name or a scope, found %s", fe_describe(L, 1, desc, sizeof desc));
  if (lua_isnoneornil(L, 2)) {
    fe_push_scope(L, name);
    return 1;
  }
  char who[300];
  snprintf(who, sizeof who, "parameter %.200s", name);
  fe_shape s;
  fe_arg_shape(L, 2, who, false, &s);
  nnc_dtype t = lua_isnoneornil(L, 3) ? NNC_F32 : arg_dtype(L, 3, who);
  int id = -1;
  fe_check(L, nnc_graph_add_param(fe->g, name, t, s.rank, s.dim, fe_loc(L), &id, &fe->err));
  fe_push_tensor(L, id);
  return 1;
}

int fe_l_output(lua_State *L) {
  fe_state *fe = fe_get(L);
  const char *name = arg_name(L, 1, "output");
  char who[300];
  snprintf(who, sizeof who, "output \"%.200s\"", name);
  int t = fe_arg_tensor(L, 2, who);
  fe_check(L, nnc_graph_add_output(fe->g, name, t, fe_loc(L), &fe->err));
  return 0;
}

/* ------------------------------------------------------------ print */

int fe_l_print(lua_State *L) {
  FILE *f = fe_get(L)->print_to;
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) fputc('\t', f);
    fwrite(s, 1, len, f);
    lua_pop(L, 1);
  }
  fputc('\n', f);
  return 0;
}
