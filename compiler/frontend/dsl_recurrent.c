/* compiler/frontend/dsl_recurrent.c — the recurrent layers of the model
 * language, lstm() and gru(), with torch.nn.LSTM's and torch.nn.GRU's
 * parameter names and shapes (weight_ih_l{k}[G*H, in], weight_hh_l{k}[G*H, H],
 * bias_ih_l{k}, bias_hh_l{k}[G*H], "_reverse" for the backward direction),
 * so that a PyTorch state dict loads as it is.
 *
 * Each layer and direction is the input projection of every time step as
 * one linear (one GEMM over B*T rows, b_ih in its epilogue), then one scan
 * node (lstm_scan, gru_scan) that runs the steps with the gate math fused.
 * A bidirectional layer concatenates its two directions' outputs for the
 * next. Initial states are optional inputs and final states extra results,
 * both [layers * directions, B, H] as in PyTorch. */
#include <stdio.h>
#include <string.h>

#include "fe.h"

static const nnc_tensor *tensor(lua_State *L, int id) { return &fe_get(L)->g->tensors[id]; }

static int node1(lua_State *L, nnc_op op, int nin, const int *in, const nnc_attrs *a, const char *label,
                 const fe_shape *preset) {
  return fe_out(L, fe_add_node(L, op, nin, in, a, 1, label, preset));
}

static int swap01(lua_State *L, int x) {
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.perm[0] = 1;
  at.perm[2] = 2;
  return node1(L, NNC_OP_TRANSPOSE, 1, &x, &at, NULL, NULL);
}

/* State k of s [L*D, B, H] as [B, H]. */
static int state_at(lua_State *L, int s, int k) {
  const nnc_tensor *t = tensor(L, s);
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.start = nnc_dim_const(k);
  at.stop = nnc_dim_const(k + 1);
  int one = node1(L, NNC_OP_SLICE, 1, &s, &at, NULL, NULL);
  fe_shape sh = {2, {t->shape[1], t->shape[2]}};
  return node1(L, NNC_OP_RESHAPE, 1, &one, NULL, NULL, &sh);
}

/* The n states [B, H] stacked as [n, B, H]. */
static int stack(lua_State *L, int n, const int *st) {
  const nnc_tensor *t = tensor(L, st[0]);
  fe_shape sh = {3, {nnc_dim_const(1), t->shape[0], t->shape[1]}};
  int rows[NNC_MAX_IO];
  for (int i = 0; i < n; i++) rows[i] = node1(L, NNC_OP_RESHAPE, 1, &st[i], NULL, NULL, &sh);
  if (n == 1) return rows[0];
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  return node1(L, NNC_OP_CONCAT, n, rows, &at, NULL, NULL);
}

/* Option key of the opts at idx: a tensor [L*D, B, H] (the given batch and
 * hidden sizes), or -1 when absent. */
static int opt_state(lua_State *L, int idx, const char *fn, const char *key, int64_t n, nnc_dim B, int64_t H,
                     nnc_dtype dt) {
  char d[256], s[128];
  if (!lua_istable(L, idx)) return -1;
  lua_getfield(L, idx, key);
  int t = fe_tensor_at(L, -1);
  if (t < 0 && !lua_isnil(L, -1))
    fe_fail(L, NNC_E_MODEL, "%s: expected a tensor for %s, found %s", fn, key, fe_describe(L, -1, d, sizeof d));
  if (t >= 0) {
    const nnc_tensor *v = tensor(L, t);
    nnc_dim want[3] = {nnc_dim_const(n), B, nnc_dim_const(H)};
    if (v->rank != 3 || v->dtype != dt || !nnc_dim_eq(v->shape[0], want[0]) || !nnc_dim_eq(v->shape[1], B) ||
        !nnc_dim_eq(v->shape[2], want[2]))
      fe_fail(L, NNC_E_SHAPE, "%s: expected %s %s%s ([layers * directions, batch, hidden]), found %s", fn, key,
              nnc_dtype_name(dt), nnc_shape_format(fe_get(L)->g, 3, want, s, sizeof s),
              fe_describe(L, -1, d, sizeof d));
  }
  lua_pop(L, 1);
  return t;
}

/* Parameter prefix.name of shape dims [n, k]: one already declared (tied,
 * or given by hand) with another shape is an error that says which hidden
 * size and input width this layer needs it for. */
static int weight(lua_State *L, const char *fn, const char *prefix, const char *name, nnc_dtype dt, int rank,
                  const int64_t *dims, int64_t H, int64_t in) {
  const nnc_graph *g = fe_get(L)->g;
  char full[256], want[64], had[64];
  snprintf(full, sizeof full, "%s.%s", prefix, name);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    if (strcmp(t->name, full) != 0) continue;
    bool same = t->rank == rank && t->dtype == dt;
    for (int k = 0; same && k < rank; k++) same = nnc_dim_eq_const(t->shape[k], dims[k]);
    if (same) break;
    nnc_dim w[2] = {nnc_dim_const(dims[0]), nnc_dim_const(rank > 1 ? dims[1] : 0)};
    return fe_fail(L, NNC_E_SHAPE, "%s: hidden size %lld over %lld input features needs %s %s%s, found %s%s declared "
                   "at %s:%d", fn, (long long)H, (long long)in, full, nnc_dtype_name(dt),
                   nnc_shape_format(g, rank, w, want, sizeof want), nnc_dtype_name(t->dtype),
                   nnc_shape_format(g, t->rank, t->shape, had, sizeof had), t->loc.file ? t->loc.file : "?",
                   t->loc.line);
  }
  return fe_make_param(L, prefix, name, dt, rank, dims);
}

/* lstm / gru(x, hidden, p, {layers = 1, bidirectional = false, batch_first = false, h0, c0})
 *   -> output [T, B, D*H] ([B, T, D*H] batch first), h_n [L*D, B, H] (, c_n) */
static int rnn(lua_State *L, bool lstm) {
  static const char *const lstm_keys[] = {"layers", "bidirectional", "batch_first", "h0", "c0", NULL};
  static const char *const gru_keys[] = {"layers", "bidirectional", "batch_first", "h0", NULL};
  const char *fn = lstm ? "lstm" : "gru";
  char d[256], name[64], label[160];
  int x = fe_arg_tensor(L, 1, fn);
  lua_Integer H = fe_arg_int(L, 2, fn, "hidden size");
  const char *prefix = fe_scope_at(L, 3);
  if (!prefix) return fe_fail(L, NNC_E_MODEL, "%s: expected a scope for the weights, found %s", fn, fe_describe(L, 3, d, sizeof d));
  fe_arg_opts(L, 4, fn, lstm ? lstm_keys : gru_keys);
  double layers_opt = fe_opt_number(L, 4, fn, "layers", 1);
  int dirs = fe_opt_bool(L, 4, fn, "bidirectional", false) ? 2 : 1;
  bool batch_first = fe_opt_bool(L, 4, fn, "batch_first", false);
  if (H < 1 || H > (1 << 20))
    return fe_fail(L, NNC_E_SHAPE, "%s: expected a hidden size >= 1, found %lld", fn, (long long)H);
  if (layers_opt != (int)layers_opt || layers_opt < 1 || layers_opt * dirs > NNC_MAX_IO)
    return fe_fail(L, NNC_E_SHAPE, "%s: expected layers an integer in 1..%d, found %g", fn, NNC_MAX_IO / dirs,
                   layers_opt);
  int layers = (int)layers_opt, G = lstm ? 4 : 3;
  const nnc_tensor *xt = tensor(L, x);
  if (xt->rank != 3 || !nnc_dim_is_const(xt->shape[2]))
    return fe_fail(L, NNC_E_SHAPE, "%s: expected an input of rank 3 (%s) with a constant number of features, found %s",
                   fn, batch_first ? "[B, T, features]" : "[T, B, features]", fe_describe(L, 1, d, sizeof d));
  if (!batch_first) x = swap01(L, x);
  nnc_dim B = tensor(L, x)->shape[0];
  nnc_dtype dt = fe_param_dtype(L, x);
  int h0 = opt_state(L, 4, fn, "h0", (int64_t)layers * dirs, B, H, dt);
  int c0 = lstm ? opt_state(L, 4, fn, "c0", (int64_t)layers * dirs, B, H, dt) : -1;
  if (lstm && (h0 < 0) != (c0 < 0))
    return fe_fail(L, NNC_E_MODEL, "lstm: expected both initial states h0 and c0 or neither, found %s alone",
                   h0 >= 0 ? "h0" : "c0");
  int hn[NNC_MAX_IO], cn[NNC_MAX_IO];
  for (int l = 0; l < layers; l++) {
    int64_t in = tensor(L, x)->shape[2].k;
    int y[2];
    for (int r = 0; r < dirs; r++) {
      int k = l * dirs + r;
      const char *sfx = r ? "_reverse" : "";
      int64_t wi[2] = {G * H, in}, wh[2] = {G * H, H};
      snprintf(name, sizeof name, "weight_ih_l%d%s", l, sfx);
      int w_ih = weight(L, fn, prefix, name, dt, 2, wi, H, in);
      snprintf(name, sizeof name, "weight_hh_l%d%s", l, sfx);
      int w_hh = weight(L, fn, prefix, name, dt, 2, wh, H, in);
      snprintf(name, sizeof name, "bias_ih_l%d%s", l, sfx);
      int b_ih = weight(L, fn, prefix, name, dt, 1, wi, H, in);
      snprintf(name, sizeof name, "bias_hh_l%d%s", l, sfx);
      int b_hh = weight(L, fn, prefix, name, dt, 1, wh, H, in);
      snprintf(label, sizeof label, "%.120s.l%d%s", prefix, l, sfx);
      nnc_attrs at;
      memset(&at, 0, sizeof at);
      int xw = node1(L, NNC_OP_LINEAR, 3, (const int[]){x, w_ih, b_ih}, &at, label, NULL);
      int sin[5] = {xw, w_hh, b_hh, -1, -1}, nin = 3;
      if (h0 >= 0) sin[nin++] = state_at(L, h0, k);
      if (c0 >= 0) sin[nin++] = state_at(L, c0, k);
      at.reverse = r == 1;
      int node = fe_add_node(L, lstm ? NNC_OP_LSTM_SCAN : NNC_OP_GRU_SCAN, nin, sin, &at, lstm ? 3 : 2, label, NULL);
      const nnc_node *nd = &fe_get(L)->g->nodes[node];
      y[r] = nd->out[0];
      hn[k] = nd->out[1];
      if (lstm) cn[k] = nd->out[2];
    }
    if (dirs == 1) {
      x = y[0];
    } else {
      nnc_attrs at;
      memset(&at, 0, sizeof at);
      at.axis = 2;
      x = node1(L, NNC_OP_CONCAT, 2, y, &at, NULL, NULL);
    }
  }
  fe_push_tensor(L, batch_first ? x : swap01(L, x));
  fe_push_tensor(L, stack(L, layers * dirs, hn));
  if (lstm) fe_push_tensor(L, stack(L, layers * dirs, cn));
  return lstm ? 3 : 2;
}

static int l_lstm(lua_State *L) { return rnn(L, true); }
static int l_gru(lua_State *L) { return rnn(L, false); }

void fe_recurrent_register(lua_State *L) {
  static const luaL_Reg fns[] = {{"lstm", l_lstm}, {"gru", l_gru}, {NULL, NULL}};
  lua_pushglobaltable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
