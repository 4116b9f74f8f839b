/* compiler/frontend/dsl_move.c — ops that move data: reshape, transpose,
 * permute, slice, concat and split. Axes arrive 1-based or negative and
 * leave 0-based; slices arrive 1-based inclusive and leave as [start, stop). */
#include <stdio.h>
#include <string.h>

#include "fe.h"

static int push1(lua_State *L, int node) {
  fe_push_tensor(L, fe_out(L, node));
  return 1;
}

static const nnc_tensor *tensor(lua_State *L, int id) { return &fe_get(L)->g->tensors[id]; }

int fe_l_reshape(lua_State *L) {
  int x = fe_arg_tensor(L, 1, "reshape");
  fe_shape s;
  fe_arg_shape(L, 2, "reshape", true, &s);
  return push1(L, fe_add_node(L, NNC_OP_RESHAPE, 1, &x, NULL, 1, NULL, &s));
}

/* A DSL axis -> 0-based, or -1 when out of range. */
static int axis0(lua_Integer a, int rank) {
  if (a >= 1 && a <= rank) return (int)a - 1;
  if (a < 0 && a >= -rank) return rank + (int)a;
  return -1;
}

int fe_l_transpose(lua_State *L) {
  int x = fe_arg_tensor(L, 1, "transpose");
  int rank = tensor(L, x)->rank;
  char d[256];
  if (rank < 2)
    return fe_fail(L, NNC_E_SHAPE, "transpose: expected a tensor of rank >= 2, found %s", fe_describe(L, 1, d, sizeof d));
  lua_Integer a = lua_isnoneornil(L, 2) ? -2 : fe_arg_int(L, 2, "transpose", "axis");
  lua_Integer b = lua_isnoneornil(L, 3) ? -1 : fe_arg_int(L, 3, "transpose", "axis");
  int i = axis0(a, rank), j = axis0(b, rank);
  if (i < 0 || j < 0)
    return fe_fail(L, NNC_E_SHAPE, "transpose: expected axes of 1 to %d, found %lld and %lld", rank, (long long)a,
                   (long long)b);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  for (int k = 0; k < rank; k++) at.perm[k] = k;
  at.perm[i] = j;
  at.perm[j] = i;
  return push1(L, fe_add_node(L, NNC_OP_TRANSPOSE, 1, &x, &at, 1, NULL, NULL));
}

int fe_l_permute(lua_State *L) {
  int x = fe_arg_tensor(L, 1, "permute");
  int rank = tensor(L, x)->rank;
  char d[256];
  if (!lua_istable(L, 2))
    return fe_fail(L, NNC_E_MODEL, "permute: expected a table of axes, found %s", fe_describe(L, 2, d, sizeof d));
  lua_Integer n = luaL_len(L, 2);
  if (n != rank)
    return fe_fail(L, NNC_E_SHAPE, "permute: expected %d axes for %s, found %lld", rank,
                   fe_describe(L, 1, d, sizeof d), (long long)n);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  bool seen[NNC_MAX_RANK] = {false}, ok = true;
  char list[128] = "";
  size_t used = 0;
  for (int k = 0; k < rank; k++) {
    lua_geti(L, 2, k + 1);
    lua_Integer a = fe_arg_int(L, -1, "permute", "axis");
    lua_pop(L, 1);
    at.perm[k] = axis0(a, rank);
    ok = ok && at.perm[k] >= 0 && !seen[at.perm[k]];
    if (ok) seen[at.perm[k]] = true;
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%lld", k ? "," : "", (long long)a);
  }
  if (!ok) return fe_fail(L, NNC_E_SHAPE, "permute: expected a permutation of 1..%d, found {%s}", rank, list);
  return push1(L, fe_add_node(L, NNC_OP_TRANSPOSE, 1, &x, &at, 1, NULL, NULL));
}

/* slice(x, axis, first, last): negative bounds count from the end when the
 * axis has a constant size; last == -1 also works on a symbolic one. */
static int l_slice(lua_State *L) {
  int x = fe_arg_tensor(L, 1, "slice");
  const nnc_tensor *t = tensor(L, x);
  if (lua_isnoneornil(L, 2)) return fe_fail(L, NNC_E_MODEL, "slice: expected an axis, found nil");
  int axis = fe_arg_axis(L, 2, t->rank, "slice", 0);
  nnc_dim size = t->shape[axis];
  lua_Integer first = fe_arg_int(L, 3, "slice", "first index");
  nnc_dim last;
  char d[256];
  if (!fe_dim_at(L, 4, &last))
    return fe_fail(L, NNC_E_MODEL, "slice: expected the last index as an integer or a dim, found %s",
                   fe_describe(L, 4, d, sizeof d));
  bool const_size = nnc_dim_is_const(size);
  if (first < 0 && const_size) first += size.k + 1;
  if (nnc_dim_eq_const(last, -1) && !const_size) last = size;
  else if (nnc_dim_is_const(last) && last.k < 0 && const_size) last.k += size.k + 1;
  if (first < 1) return fe_fail(L, NNC_E_SHAPE, "slice: expected first >= 1 on axis %d, found %lld", axis + 1, (long long)first);
  if (nnc_dim_is_const(last) && const_size && last.k > size.k)
    return fe_fail(L, NNC_E_SHAPE, "slice: expected last <= %lld on axis %d, found %lld", (long long)size.k, axis + 1,
                   (long long)last.k);
  if (nnc_dim_is_const(last) && last.k < first)
    return fe_fail(L, NNC_E_SHAPE, "slice: expected first <= last on axis %d, found %lld and %lld", axis + 1,
                   (long long)first, (long long)last.k);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = axis;
  at.start = nnc_dim_const(first - 1);
  at.stop = last;
  return push1(L, fe_add_node(L, NNC_OP_SLICE, 1, &x, &at, 1, NULL, NULL));
}

static int l_concat(lua_State *L) {
  char d[256];
  if (!lua_istable(L, 1))
    return fe_fail(L, NNC_E_MODEL, "concat: expected a list of tensors, found %s", fe_describe(L, 1, d, sizeof d));
  lua_Integer n = luaL_len(L, 1);
  if (n < 1 || n > NNC_MAX_IO)
    return fe_fail(L, NNC_E_MODEL, "concat: expected a list of 1 to %d tensors, found %lld", NNC_MAX_IO, (long long)n);
  int in[NNC_MAX_IO];
  for (int i = 0; i < (int)n; i++) {
    lua_geti(L, 1, i + 1);
    in[i] = fe_tensor_at(L, -1);
    if (in[i] < 0)
      return fe_fail(L, NNC_E_MODEL, "concat: expected a tensor as entry %d of the list, found %s", i + 1,
                     fe_describe(L, -1, d, sizeof d));
    lua_pop(L, 1);
  }
  if (lua_isnoneornil(L, 2)) return fe_fail(L, NNC_E_MODEL, "concat: expected an axis, found nil");
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = fe_arg_axis(L, 2, tensor(L, in[0])->rank, "concat", 0);
  return push1(L, fe_add_node(L, NNC_OP_CONCAT, (int)n, in, &at, 1, NULL, NULL));
}

/* split(x, n, axis) into n equal parts, or split(x, {sizes}, axis). */
static int l_split(lua_State *L) {
  fe_state *fe = fe_get(L);
  char d[256];
  int x = fe_arg_tensor(L, 1, "split");
  const nnc_tensor *t = tensor(L, x);
  if (lua_isnoneornil(L, 3)) return fe_fail(L, NNC_E_MODEL, "split: expected an axis, found nil");
  int axis = fe_arg_axis(L, 3, t->rank, "split", 0);
  nnc_dim sizes[NNC_MAX_IO];
  int n = 0;
  if (lua_istable(L, 2)) {
    lua_Integer len = luaL_len(L, 2);
    if (len < 1 || len > NNC_MAX_IO)
      return fe_fail(L, NNC_E_MODEL, "split: expected 1 to %d sizes, found %lld", NNC_MAX_IO, (long long)len);
    for (n = 0; n < (int)len; n++) {
      lua_geti(L, 2, n + 1);
      if (!fe_dim_at(L, -1, &sizes[n]) || sizes[n].k < 0)
        return fe_fail(L, NNC_E_MODEL, "split: expected sizes >= 0 or dims, found %s as size %d",
                       fe_describe(L, -1, d, sizeof d), n + 1);
      lua_pop(L, 1);
    }
  } else {
    lua_Integer parts = fe_arg_int(L, 2, "split", "number of parts");
    if (parts < 1 || parts > NNC_MAX_IO)
      return fe_fail(L, NNC_E_MODEL, "split: expected 1 to %d parts, found %lld", NNC_MAX_IO, (long long)parts);
    nnc_dim part;
    if (!nnc_dim_div(t->shape[axis], nnc_dim_const(parts), &part)) {
      char s[64];
      return fe_fail(L, NNC_E_SHAPE, "split: %s on axis %d does not divide into %lld equal parts",
                     nnc_dim_format(fe->g, t->shape[axis], s, sizeof s), axis + 1, (long long)parts);
    }
    for (n = 0; n < (int)parts; n++) sizes[n] = part;
  }
  fe_shape out[NNC_MAX_IO];
  for (int i = 0; i < n; i++) {
    out[i].rank = t->rank;
    memcpy(out[i].dim, t->shape, sizeof out[i].dim);
    out[i].dim[axis] = sizes[i];
  }
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.axis = axis;
  return fe_push_outputs(L, fe_add_node(L, NNC_OP_SPLIT, 1, &x, &at, n, NULL, out));
}

void fe_move_register(lua_State *L) {
  static const luaL_Reg fns[] = {{"reshape", fe_l_reshape}, {"transpose", fe_l_transpose},
                                 {"permute", fe_l_permute}, {"slice", l_slice},
                                 {"concat", l_concat},      {"split", l_split},
                                 {NULL, NULL}};
  lua_pushglobaltable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
