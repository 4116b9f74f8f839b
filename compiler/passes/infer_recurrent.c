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

/* xw [B, T, G*H], w_hh [G*H, H] and b_hh [G*H], the inputs every scan and
 * scan gradient starts with; *H is the hidden size. */
static nnc_status want_scan(const nnc_infer_ctx *c, int gates, int64_t *H_out) {
  const nnc_tensor *xw = nnc_in(c, 0), *w = nnc_in(c, 1);
  char d[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "projected input");
  if (st) return st;
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
  *H_out = H;
  return NNC_OK;
}

nnc_status nnc_infer_recurrent(const nnc_infer_ctx *c) {
  bool lstm = c->n->op == NNC_OP_LSTM_SCAN;
  const nnc_tensor *xw = nnc_in(c, 0), *w = nnc_in(c, 1);
  int64_t H;
  if (lstm && c->n->nin == 4)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected both initial states h0 and c0 or neither, found h0 alone");
  nnc_status st = want_scan(c, lstm ? 4 : 3, &H);
  if (st) return st;
  nnc_dim state[2] = {xw->shape[0], w->shape[1]};
  for (int i = 3; i < c->n->nin; i++)
    if ((st = want_shape(c, i, 2, state, i == 3 ? "an initial hidden state" : "an initial cell state"))) return st;
  nnc_dim y[3] = {xw->shape[0], xw->shape[1], w->shape[1]};
  nnc_infer_set(c, 0, xw->dtype, 3, y);
  for (int i = 1; i < c->n->nout; i++) nnc_infer_set(c, i, xw->dtype, 2, state);
  return NNC_OK;
}

/* The gradients' inputs are the forward's (the optional states always
 * given), its output sequence and the gradients of its outputs. */
nnc_status nnc_infer_recurrent_grad(const nnc_infer_ctx *c) {
  bool lstm = c->n->op == NNC_OP_LSTM_SCAN_GRAD;
  int G = lstm ? 4 : 3, nstate = lstm ? 2 : 1;
  const nnc_tensor *xw = nnc_in(c, 0);
  int64_t H;
  nnc_status st = want_scan(c, G, &H);
  if (st) return st;
  nnc_dim state[2] = {xw->shape[0], nnc_dim_const(H)}, seq[3] = {xw->shape[0], xw->shape[1], nnc_dim_const(H)};
  int y = 3 + nstate;
  for (int i = 3; i < y; i++)
    if ((st = want_shape(c, i, 2, state, "an initial state"))) return st;
  if ((st = want_shape(c, y, 3, seq, "the output sequence")) || (st = want_shape(c, y + 1, 3, seq, "its gradient")))
    return st;
  for (int i = y + 2; i < c->n->nin; i++)
    if ((st = want_shape(c, i, 2, state, "a final state's gradient"))) return st;
  nnc_dim gates[3] = {xw->shape[0], xw->shape[1], nnc_dim_const(G * H)};
  nnc_dim saved[3] = {xw->shape[0], xw->shape[1], nnc_dim_const((lstm ? 5 : 4) * H)};
  int o = 0;
  nnc_infer_set(c, o++, xw->dtype, 3, gates);
  if (!lstm) nnc_infer_set(c, o++, xw->dtype, 3, gates);
  for (int i = 0; i < nstate; i++) nnc_infer_set(c, o++, xw->dtype, 2, state);
  nnc_infer_set(c, o++, xw->dtype, 3, seq);
  nnc_infer_set(c, o++, xw->dtype, 3, saved);
  return NNC_OK;
}
