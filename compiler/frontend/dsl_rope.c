/* compiler/frontend/dsl_rope.c — rope(x [, positions] [, {base, dims, axis}]):
 * the rotary position embedding of LLaMA-family models as one op (ir.h's
 * NNC_OP_ROPE), Hugging Face's rotate_half convention. x is [..., T, D] by
 * default (the time axis second to last, as q and k are after the head
 * split); positions, when given, are i32 [T] or [B, T], else 0..T-1. */
#include <math.h>
#include <string.h>

#include "fe.h"

static int l_rope(lua_State *L) {
  static const char *const keys[] = {"base", "dims", "axis", NULL};
  fe_state *fe = fe_get(L);
  char d[256];
  int in[2];
  in[0] = fe_arg_tensor(L, 1, "rope");
  /* rope(x, {opts}) leaves the positions out */
  int opts = 3, nin = 1;
  if (lua_istable(L, 2) && fe_tensor_at(L, 2) < 0) opts = 2;
  else if (!lua_isnoneornil(L, 2)) {
    if ((in[1] = fe_tensor_at(L, 2)) < 0)
      return fe_fail(L, NNC_E_MODEL, "rope: expected a tensor of positions (or nil) as argument 2, found %s",
                     fe_describe(L, 2, d, sizeof d));
    nin = 2;
  }
  fe_arg_opts(L, opts, "rope", keys);
  const nnc_tensor *x = &fe->g->tensors[in[0]];
  int rank = x->rank;
  double base = fe_opt_number(L, opts, "rope", "base", 10000.0);
  double dims = fe_opt_number(L, opts, "rope", "dims", rank > 0 && nnc_dim_is_const(x->shape[rank - 1])
                                                          ? (double)x->shape[rank - 1].k : 0);
  double axis = fe_opt_number(L, opts, "rope", "axis", -2);
  if (dims != floor(dims) || dims < -1e9 || dims > 1e9)
    return fe_fail(L, NNC_E_MODEL, "rope: expected an integer dims, found %g", dims);
  if (axis != floor(axis) || axis == 0 || axis > rank || axis < -rank)
    return fe_fail(L, NNC_E_MODEL, "rope: expected an axis in 1..%d or -%d..-1 of %s, found %g", rank, rank,
                   fe_describe(L, 1, d, sizeof d), axis);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.scalar = base;
  at.rot_dims = (int)dims;
  at.axis = axis < 0 ? rank + (int)axis : (int)axis - 1;
  fe_push_tensor(L, fe_out(L, fe_add_node(L, NNC_OP_ROPE, nin, in, &at, 1, NULL, NULL)));
  return 1;
}

void fe_rope_register(lua_State *L) {
  lua_pushcfunction(L, l_rope);
  lua_setglobal(L, "rope");
}
