/* compiler/passes/infer_recurrent.c — lstm_scan and gru_scan: the steps of
 * one direction of one recurrent layer over projected inputs xw [B, T, G*H]
 * (G gates: 4 for the LSTM, 3 for the GRU). The hidden size H comes from
 * w_hh [G*H, H], a weight, so it is a constant; batch and time may be
 * symbolic. */
#include "infer_util.h"

/* Input i has exactly the shape want (rank dims); role names it. */
static nnc_status want_shape(const nnc_infer_ctx *c, int i, int rank, const nnc_dim *want, const char *role) {
  const nnc_tensor *t = nnc_in(c, i);
  bool ok = t->rank == rank && t->dtype == nnc_in(c, 0)->dtype;
  for (int k = 0; ok && k < rank; k++) ok = nnc_dim_eq(t->shape[k], want[k]);
  if (ok) return NNC_OK;
  char s[NNC_DESC_LEN], d[NNC_DESC_LEN];
  return nnc_infer_fail(c, NNC_E_SHAPE, "expected %s %s%s, found %s", role, nnc_dtype_name(nnc_in(c, 0)->dtype),
                        nnc_infer_shape(c, rank, want, s), nnc_infer_desc(c, t, d));
}

nnc_status nnc_infer_recurrent(const nnc_infer_ctx *c) {
  bool lstm = c->n->op == NNC_OP_LSTM_SCAN;
  int gates = lstm ? 4 : 3;
  const nnc_tensor *xw = nnc_in(c, 0), *w = nnc_in(c, 1);
  char d[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "projected input");
  if (st) return st;
  if (lstm && c->n->nin == 4)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected both initial states h0 and c0 or neither, found h0 alone");
  if (w->rank != 2 || !nnc_dim_is_const(w->shape[0]) || !nnc_dim_is_const(w->shape[1]) || w->shape[1].k < 1 ||
      w->shape[0].k != gates * w->shape[1].k)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a recurrent weight [%d*H, H], found %s", gates,
                          nnc_infer_desc(c, w, d));
  int64_t H = w->shape[1].k;
  if (xw->rank != 3 || !nnc_dim_eq_const(xw->shape[2], gates * H))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a projected input [B, T, %lld] (%d gates of hidden size %lld), "
                          "found %s", (long long)(gates * H), gates, (long long)H, nnc_infer_desc(c, xw, d));
  nnc_dim gh[2] = {w->shape[0], w->shape[1]};
  if ((st = want_shape(c, 1, 2, gh, "a recurrent weight")) || (st = want_shape(c, 2, 1, gh, "a recurrent bias")))
    return st;
  nnc_dim state[2] = {xw->shape[0], w->shape[1]};
  for (int i = 3; i < c->n->nin; i++)
    if ((st = want_shape(c, i, 2, state, i == 3 ? "an initial hidden state" : "an initial cell state"))) return st;
  nnc_dim y[3] = {xw->shape[0], xw->shape[1], w->shape[1]};
  nnc_infer_set(c, 0, xw->dtype, 3, y);
  for (int i = 1; i < c->n->nout; i++) nnc_infer_set(c, i, xw->dtype, 2, state);
  return NNC_OK;
}
