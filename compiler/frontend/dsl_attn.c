/* compiler/frontend/dsl_attn.c — sdpa: scaled dot-product attention written
 * as its primitive ops, in the one order the fusion pass recognises:
 *   kt = transpose(k), s = matmul(q, kt), s = s * scale, [causal_mask(s)],
 *   [padding_mask(s, mask)], p = softmax(s, last), out = matmul(p, v).
 *
 * Grouped-query attention (q [..., Hq, T, D], k and v [..., Hkv, S, D], G =
 * Hq / Hkv query heads a kv head; multi-query when Hkv is 1) gives each
 * group an axis of its own: q becomes [..., Hkv, G, T, D] and k, v
 * [..., Hkv, 1, S, D], reshapes that copy nothing, and the products
 * broadcast k and v over the group. So k and v are read once for the G
 * query heads that share them, never repeated; the masks see each head's
 * own [T, S] scores; and the gradient of a broadcast (a sum) adds dk and dv
 * over the group. The attention kernels take such operands with a head
 * stride of 0 for k and v (passes/fuse_patterns.c, the emitters). */
#include <math.h>
#include <string.h>

#include "fe.h"

/* A node at the caller's line reshaping t to rank r, shape dims. */
static int reshape_to(lua_State *L, int t, int r, const nnc_dim *dims) {
  fe_shape sh = {.rank = r};
  memcpy(sh.dim, dims, (size_t)r * sizeof *dims);
  return fe_out(L, fe_add_node(L, NNC_OP_RESHAPE, 1, &t, NULL, 1, NULL, &sh));
}

/* t [..., H, R, C] -> [..., Hkv, H / Hkv, R, C]: its heads as groups of H / Hkv. */
static int group_heads(lua_State *L, int t, int64_t Hkv) {
  const nnc_tensor *x = &fe_get(L)->g->tensors[t];
  int r = x->rank;
  nnc_dim s[NNC_MAX_RANK];
  for (int i = 0; i < r - 3; i++) s[i] = x->shape[i];
  s[r - 3] = nnc_dim_const(Hkv);
  s[r - 2] = nnc_dim_const(x->shape[r - 3].k / Hkv);
  s[r - 1] = x->shape[r - 2];
  s[r] = x->shape[r - 1];
  return reshape_to(L, t, r + 1, s);
}

/* o [..., Hkv, G, T, Dv] -> [..., Hkv*G, T, Dv] */
static int merge_groups(lua_State *L, int o) {
  const nnc_tensor *x = &fe_get(L)->g->tensors[o];
  int r = x->rank;
  nnc_dim s[NNC_MAX_RANK];
  for (int i = 0; i < r - 4; i++) s[i] = x->shape[i];
  s[r - 4] = nnc_dim_const(x->shape[r - 4].k * x->shape[r - 3].k);
  s[r - 3] = x->shape[r - 2];
  s[r - 2] = x->shape[r - 1];
  return reshape_to(L, o, r - 1, s);
}

static int l_sdpa(lua_State *L) {
  static const char *const keys[] = {"causal", "mask", "scale", NULL};
  fe_state *fe = fe_get(L);
  char d[256], d2[256];
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
  /* grouped-query (or multi-query) attention: fewer kv heads than query heads */
  bool grouped = false;
  const nnc_tensor *v = &fe->g->tensors[qkv[2]];
  if (q->rank >= 3 && k->rank == q->rank && !nnc_dim_eq(q->shape[q->rank - 3], k->shape[k->rank - 3])) {
    int r = q->rank;
    nnc_dim hq = q->shape[r - 3], hk = k->shape[r - 3];
    if (!nnc_dim_is_const(hq) || !nnc_dim_is_const(hk) || hk.k < 1 || hq.k % hk.k)
      return fe_fail(L, NNC_E_SHAPE, "sdpa: expected q's heads (dim %d) to be a multiple of k's (grouped-query "
                     "attention), found %s and %s", r - 2, fe_describe(L, 1, d, sizeof d),
                     fe_describe(L, 2, d2, sizeof d2));
    if (v->rank != r || !nnc_dim_eq(v->shape[r - 3], hk))
      return fe_fail(L, NNC_E_SHAPE, "sdpa: expected v with k's %lld heads, found %s", (long long)hk.k,
                     fe_describe(L, 3, d, sizeof d));
    if (r + 1 > NNC_MAX_RANK)
      return fe_fail(L, NNC_E_SHAPE, "sdpa: grouped-query attention needs q of rank at most %d, found %s",
                     NNC_MAX_RANK - 1, fe_describe(L, 1, d, sizeof d));
    grouped = true;
    for (int i = 0; i < 3; i++) qkv[i] = group_heads(L, qkv[i], hk.k);
    k = &fe->g->tensors[qkv[1]];
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
  int o = fe_out(L, fe_add_node(L, NNC_OP_MATMUL, 2, pv, NULL, 1, NULL, NULL));
  fe_push_tensor(L, grouped ? merge_groups(L, o) : o);
  return 1;
}

void fe_attn_register(lua_State *L) {
  lua_pushcfunction(L, l_sdpa);
  lua_setglobal(L, "sdpa");
}
