/* compiler/frontend/dsl_attn.c — sdpa: scaled dot-product attention written
 * as its primitive ops, in the one order the fusion pass recognises:
 *   kt = transpose(k), s = matmul(q, kt), s = s * scale, [causal_mask(s)],
 *   [padding_mask(s, mask)], p = softmax(s, last), out = matmul(p, v).
 *
 * Grouped-query attention (q [..., Hq, T, D], k and v [..., Hkv, S, D], G =
 * Hq / Hkv query heads a kv head) folds each group's query heads into the
 * rows of one head: q becomes [..., Hkv, G*T, D], so k and v are read once
 * for the G heads that share them, never copied, and the whole (with its
 * gradient: dk, dv summed over the group's rows) is plain attention. The
 * causal mask then needs each row's position: the rows are put in position
 * order (row t*G + g, a transpose of q and back of the output) and the mask
 * told G rows share a position (attrs.group). Without it, a reshape is
 * enough. */
#include <math.h>
#include <string.h>

#include "fe.h"

/* A node at the caller's line reshaping t to rank r, shape dims. */
static int reshape_to(lua_State *L, int t, int r, const nnc_dim *dims) {
  fe_shape sh = {.rank = r};
  memcpy(sh.dim, dims, (size_t)r * sizeof *dims);
  return fe_out(L, fe_add_node(L, NNC_OP_RESHAPE, 1, &t, NULL, 1, NULL, &sh));
}

/* Swaps axes a and a + 1 of t (rank r). */
static int swap_next(lua_State *L, int t, int r, int a) {
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  for (int i = 0; i < r; i++) at.perm[i] = i;
  at.perm[a] = a + 1;
  at.perm[a + 1] = a;
  return fe_out(L, fe_add_node(L, NNC_OP_TRANSPOSE, 1, &t, &at, 1, NULL, NULL));
}

/* q [..., Hkv*G, T, D] -> [..., Hkv, G*T, D] (rows g*T + t), or with
 * ordered, [..., Hkv, T*G, D] (rows t*G + g). */
static int fold_group(lua_State *L, int q, int G, bool ordered) {
  const nnc_tensor *t = &fe_get(L)->g->tensors[q];
  int r = t->rank;
  nnc_dim s[NNC_MAX_RANK + 1], Hkv;
  nnc_dim_div(t->shape[r - 3], nnc_dim_const(G), &Hkv);
  for (int i = 0; i < r - 3; i++) s[i] = t->shape[i];
  nnc_dim T = t->shape[r - 2], D = t->shape[r - 1], GT;
  if (!nnc_dim_mul(T, nnc_dim_const(G), &GT))
    return fe_fail(L, NNC_E_SHAPE, "sdpa: %d query heads a kv head times the query length is too large a dim", G);
  if (!ordered) {
    s[r - 3] = Hkv, s[r - 2] = GT, s[r - 1] = D;
    return reshape_to(L, q, r, s);
  }
  s[r - 3] = Hkv, s[r - 2] = nnc_dim_const(G), s[r - 1] = T, s[r] = D;
  q = swap_next(L, reshape_to(L, q, r + 1, s), r + 1, r - 2);
  s[r - 2] = GT, s[r - 1] = D;
  return reshape_to(L, q, r, s);
}

/* The inverse of fold_group for the output o [..., Hkv, G*T, Dv]. */
static int unfold_group(lua_State *L, int o, int G, bool ordered, nnc_dim Hq, nnc_dim T) {
  const nnc_tensor *t = &fe_get(L)->g->tensors[o];
  int r = t->rank;
  nnc_dim s[NNC_MAX_RANK + 1], Dv = t->shape[r - 1];
  for (int i = 0; i < r - 2; i++) s[i] = t->shape[i];
  if (ordered) {
    s[r - 2] = T, s[r - 1] = nnc_dim_const(G), s[r] = Dv;
    o = swap_next(L, reshape_to(L, o, r + 1, s), r + 1, r - 2);
  }
  s[r - 3] = Hq, s[r - 2] = T, s[r - 1] = Dv;
  return reshape_to(L, o, r, s);
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
  int G = 1;
  nnc_dim Hq = {0}, T = {0};
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
    G = (int)(hq.k / hk.k);
    Hq = hq;
    T = q->shape[r - 2];
    qkv[0] = fold_group(L, qkv[0], G, causal);
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
  if (causal) {
    memset(&at, 0, sizeof at);
    at.group = G > 1 ? G : 0;
    s = fe_out(L, fe_add_node(L, NNC_OP_CAUSAL_MASK, 1, &s, &at, 1, NULL, NULL));
  }
  if (mask >= 0) {
    int pm[2] = {s, mask};
    s = fe_out(L, fe_add_node(L, NNC_OP_PADDING_MASK, 2, pm, NULL, 1, NULL, NULL));
  }
  memset(&at, 0, sizeof at);
  at.axis = fe->g->tensors[s].rank - 1;
  int p = fe_out(L, fe_add_node(L, NNC_OP_SOFTMAX, 1, &s, &at, 1, NULL, NULL));
  int pv[2] = {p, qkv[2]};
  int o = fe_out(L, fe_add_node(L, NNC_OP_MATMUL, 2, pv, NULL, 1, NULL, NULL));
  if (G > 1) o = unfold_group(L, o, G, causal, Hq, T);
  fe_push_tensor(L, o);
  return 1;
}

void fe_attn_register(lua_State *L) {
  lua_pushcfunction(L, l_sdpa);
  lua_setglobal(L, "sdpa");
}
