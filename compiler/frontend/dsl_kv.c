/* compiler/frontend/dsl_kv.c — kv_cache(name, x, S): generation's key/value
 * cache. Under nnc --generate a decoder runs on the tokens of this call
 * only (a prompt, or one new token a sequence) and attends to every earlier
 * one: x [..., T, D] (this call's keys or values) is appended to a state
 * tensor `name` [..., C, D] held by the model instance, C the maximum of S,
 * and the result is the cache's first S rows [..., S, D], S being the keys
 * after this call (a symbol: dim("S", ctx)). */
#include <string.h>

#include "fe.h"

static int l_kv_cache(lua_State *L) {
  fe_state *fe = fe_get(L);
  char d[256];
  const char *name = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
  if (!name) return fe_fail(L, NNC_E_MODEL, "kv_cache: expected a name as argument 1, found %s", fe_describe(L, 1, d, sizeof d));
  int in[2];
  in[1] = fe_arg_tensor(L, 2, "kv_cache");
  nnc_dim S;
  if (!fe_dim_at(L, 3, &S) || S.nsym != 1 || S.k != 1)
    return fe_fail(L, NNC_E_MODEL, "kv_cache: expected a symbolic dim S (the keys after this call) as argument 3, found %s",
                   fe_describe(L, 3, d, sizeof d));
  const nnc_tensor *x = &fe->g->tensors[in[1]];
  if (x->rank < 2)
    return fe_fail(L, NNC_E_SHAPE, "kv_cache: expected x of rank >= 2 [..., T, D], found %s", fe_describe(L, 2, d, sizeof d));
  nnc_dim shape[NNC_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  shape[x->rank - 2] = nnc_dim_const(fe->g->syms[S.sym[0]].max);
  fe_check(L, nnc_graph_add_state(fe->g, name, x->dtype, x->rank, shape, fe_loc(L), &in[0], &fe->err));
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.stop = S;
  fe_push_tensor(L, fe_out(L, fe_add_node(L, NNC_OP_KV_APPEND, 2, in, &at, 1, name, NULL)));
  return 1;
}

void fe_kv_register(lua_State *L) {
  lua_pushcfunction(L, l_kv_cache);
  lua_setglobal(L, "kv_cache");
}
