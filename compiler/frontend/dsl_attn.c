/* compiler/frontend/dsl_attn.c — sdpa: scaled dot-product attention written
 * as its primitive ops, in the one order the fusion pass recognises:
 *   kt = transpose(k), s = matmul(q, kt), s = s * scale, [causal_mask(s)],
 *   [padding_mask(s, mask)], p = softmax(s, last), out = matmul(p, v). */
#include <math.h>
#include <string.h>

#include "fe.h"

static int l_sdpa(lua_State *L) {
  static const char *const keys[] = {"causal", "mask", "scale", NULL};
  fe_state *fe = fe_get(L);
  char d[256];
  int qkv[3];
  fe_arg_tensors(L, "sdpa", 3, qkv);
  fe_arg_opts(L, 4, "sdpa", keys);
  bool causal = fe_opt_bool(L, 4, "sdpa", "causal", false);
  double scale = fe_opt_number(L, 4, "sdpa", "scale", NAN);
  int mask = -1;
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "mask");
    if (!lua_isnil(L, -1) && (mask = fe_tensor_at(L, -1)) < 0)
      return fe_fail(L, NNC_E_MODEL, "sdpa: expected a tensor for mask, found %s", fe_describe(L, -1, d, sizeof d));
    lua_pop(L, 1);
  }
  const nnc_tensor *q = &fe->g->tensors[qkv[0]], *k = &fe->g->tensors[qkv[1]];
  if (q->rank < 2 || k->rank < 2)
    return fe_fail(L, NNC_E_SHAPE, "sdpa: expected q and k of rank >= 2 [..., T, D], found %s",
                   fe_describe(L, q->rank < 2 ? 1 : 2, d, sizeof d));
  if (isnan(scale)) {
    nnc_dim dd = q->shape[q->rank - 1];
    if (!nnc_dim_is_const(dd) || dd.k < 1)
      return fe_fail(L, NNC_E_SHAPE,
                     "sdpa: expected q's last dim to be a constant >= 1 for the default scale 1/sqrt(D), found %s "
                     "(give {scale = ...})",
                     fe_describe(L, 1, d, sizeof d));
    scale = 1.0 / sqrt((double)dd.k);
  }
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  int kr = k->rank;
  for (int i = 0; i < kr; i++) at.perm[i] = i;
  at.perm[kr - 2] = kr - 1;
  at.perm[kr - 1] = kr - 2;
  /* q and k point into the tensor array, which grows below */
  int kt = fe_out(L, fe_add_node(L, NNC_OP_TRANSPOSE, 1, &qkv[1], &at, 1, NULL, NULL));
  int in[2] = {qkv[0], kt};
  int s = fe_out(L, fe_add_node(L, NNC_OP_MATMUL, 2, in, NULL, 1, NULL, NULL));
  memset(&at, 0, sizeof at);
  at.scalar = scale;
  s = fe_out(L, fe_add_node(L, NNC_OP_MUL_S, 1, &s, &at, 1, NULL, NULL));
  if (causal) s = fe_out(L, fe_add_node(L, NNC_OP_CAUSAL_MASK, 1, &s, NULL, 1, NULL, NULL));
  if (mask >= 0) {
    int pm[2] = {s, mask};
    s = fe_out(L, fe_add_node(L, NNC_OP_PADDING_MASK, 2, pm, NULL, 1, NULL, NULL));
  }
  memset(&at, 0, sizeof at);
  at.axis = fe->g->tensors[s].rank - 1;
  int p = fe_out(L, fe_add_node(L, NNC_OP_SOFTMAX, 1, &s, &at, 1, NULL, NULL));
  int pv[2] = {p, qkv[2]};
  fe_push_tensor(L, fe_out(L, fe_add_node(L, NNC_OP_MATMUL, 2, pv, NULL, 1, NULL, NULL)));
  return 1;
}

void fe_attn_register(lua_State *L) {
  lua_pushcfunction(L, l_sdpa);
  lua_setglobal(L, "sdpa");
}
