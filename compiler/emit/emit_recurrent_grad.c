/* compiler/emit/emit_recurrent_grad.c — the steps of lstm_scan_grad and
 * gru_scan_grad as plain loops for one batch row (emit_recurrent.c wraps
 * them for each target): first the forward again, writing each step's gates
 * (and the LSTM's c) into `saved` and the h it read into hprev, then the
 * steps in reverse with the running state gradients in dh0 (and dc0), which
 * end as the initial states' gradients. A step writes its gates' gradients,
 * then reads them back for the state gradient W_hh^T da: no scratch besides
 * the outputs. */
#include <stdio.h>

#include "emit_c.h"

#define ACCESS (EC_EXPR * 3)

/* The operands by role (ir.h's order), and the text around them. */
typedef struct grad_row {
  const ec_access *a;
  bool lstm;
  int xw, w, bias, h0, c0, y, dy, dhn, dcn;     /* inputs; c0, dcn: -1 for the GRU */
  int dxw, da, dh0, dc0, hprev, saved;          /* outputs; da is dxw for the LSTM */
  nnc_sb *b;
} grad_row;

static char *ld(const grad_row *r, int t, const char *name, const char *idx, char *buf) {
  return r->a->ld(r->a, t, name, idx, buf, ACCESS);
}

/* `name[idx] = v;` through the target, on a line of its own. */
static void st(const grad_row *r, const char *ind, int t, const char *name, const char *idx, const char *v) {
  char s[ACCESS * 2];
  nnc_sb_printf(r->b, "%s%s;\n", ind, r->a->st(r->a, t, name, idx, v, s, sizeof s));
}

/* The forward again: hprev and the gates of every step. */
static void forward(const grad_row *r, const char *I, const char *ind) {
  nnc_sb *b = r->b;
  char l1[ACCESS], l2[ACCESS], l3[ACCESS], v[ACCESS * 2], in2[64], in3[64];
  snprintf(in2, sizeof in2, "%s  ", ind);
  snprintf(in3, sizeof in3, "%s    ", ind);
  int G = r->lstm ? 4 : 3;
  nnc_sb_printf(b, "%sfor (%s j = 0; j < H; j++)\n", in2, I);
  snprintf(v, sizeof v, "prev < 0 ? %s : %s", ld(r, r->h0, "h0", "b * H + j", l1),
           ld(r, r->y, "y", "(b * T + prev) * H + j", l2));
  st(r, in3, r->hprev, "hprev", "hr + j", v);
  if (r->a->dot) {
    /* raw f32 pointers: each gate's product as one dot */
    nnc_sb_printf(b, "%sfor (%s j = 0; j < H; j++) {\n", in2, I);
    for (int k = 0; k < G; k++) {
      char bi[32], wr[32];
      snprintf(bi, sizeof bi, k ? "%d * H + j" : "j", k);
      snprintf(wr, sizeof wr, k ? "(%d * H + j) * H" : "j * H", k);
      nnc_sb_printf(b, "%s  const float a%d = bias[%s] + %s(w + %s, hprev + hr, H);\n", in2, k, bi, r->a->dot, wr);
    }
  } else {
    nnc_sb_printf(b, "%sfor (%s j = 0; j < H; j++) {\n%s  float", in2, I, in2);
  }
  for (int k = 0; k < G && !r->a->dot; k++) {
    char idx[32];
    snprintf(idx, sizeof idx, "%d * H + j", k);
    nnc_sb_printf(b, "%s a%d = %s", k ? "," : "", k, ld(r, r->bias, "bias", idx, l1));
  }
  if (!r->a->dot) {
    nnc_sb_printf(b, ";\n%s  for (%s k = 0; k < H; k++) {\n%s    const float hk = %s;\n", in2, I, in2,
                  ld(r, r->hprev, "hprev", "hr + k", l1));
    for (int k = 0; k < G; k++) {
      char idx[32];
      snprintf(idx, sizeof idx, "(%d * H + j) * H + k", k);
      nnc_sb_printf(b, "%s    a%d += %s * hk;\n", in2, k, ld(r, r->w, "w", idx, l1));
    }
    nnc_sb_printf(b, "%s  }\n", in2);
  }
  if (r->lstm) {
    nnc_sb_printf(b, "%s  const float ig = 1.0f / (1.0f + expf(-(%s + a0))), fg = 1.0f / (1.0f + expf(-(%s + a1)));\n",
                  in2, ld(r, r->xw, "xw", "xr + j", l1), ld(r, r->xw, "xw", "xr + H + j", l2));
    nnc_sb_printf(b, "%s  const float gg = tanhf(%s + a2), og = 1.0f / (1.0f + expf(-(%s + a3)));\n", in2,
                  ld(r, r->xw, "xw", "xr + 2 * H + j", l1), ld(r, r->xw, "xw", "xr + 3 * H + j", l2));
    nnc_sb_printf(b, "%s  const float cp = prev < 0 ? %s : %s;\n", in2, ld(r, r->c0, "c0", "b * H + j", l1),
                  ld(r, r->saved, "saved", "(b * T + prev) * 5 * H + 4 * H + j", l2));
    st(r, in3, r->saved, "saved", "sr + j", "ig");
    st(r, in3, r->saved, "saved", "sr + H + j", "fg");
    st(r, in3, r->saved, "saved", "sr + 2 * H + j", "gg");
    st(r, in3, r->saved, "saved", "sr + 3 * H + j", "og");
    st(r, in3, r->saved, "saved", "sr + 4 * H + j", "fg * cp + ig * gg");
  } else {
    nnc_sb_printf(b, "%s  const float rg = 1.0f / (1.0f + expf(-(%s + a0))), zg = 1.0f / (1.0f + expf(-(%s + a1)));\n",
                  in2, ld(r, r->xw, "xw", "xr + j", l1), ld(r, r->xw, "xw", "xr + H + j", l2));
    st(r, in3, r->saved, "saved", "sr + j", "rg");
    st(r, in3, r->saved, "saved", "sr + H + j", "zg");
    snprintf(v, sizeof v, "tanhf(%s + rg * a2)", ld(r, r->xw, "xw", "xr + 2 * H + j", l3));
    st(r, in3, r->saved, "saved", "sr + 2 * H + j", v);
    st(r, in3, r->saved, "saved", "sr + 3 * H + j", "a2");
  }
  nnc_sb_printf(b, "%s}\n", in2);
}

/* One step back: the gates' gradients from the state gradients, then the
 * state gradient the step before leaves. */
static void backward(const grad_row *r, const char *I, const char *ind) {
  nnc_sb *b = r->b;
  char l1[ACCESS], l2[ACCESS], l3[ACCESS], l4[ACCESS], in2[64], in3[64];
  snprintf(in2, sizeof in2, "%s  ", ind);
  snprintf(in3, sizeof in3, "%s    ", ind);
  nnc_sb_printf(b, "%sfor (%s j = 0; j < H; j++) {\n", in2, I);
  nnc_sb_printf(b, "%s  const float dht = %s + %s;\n", in2, ld(r, r->dh0, "dh0", "b * H + j", l1),
                ld(r, r->dy, "dy", "hr + j", l2));
  if (r->lstm) {
    nnc_sb_printf(b, "%s  const float ig = %s, fg = %s,\n", in2, ld(r, r->saved, "saved", "sr + j", l1),
                  ld(r, r->saved, "saved", "sr + H + j", l2));
    nnc_sb_printf(b, "%s              gg = %s, og = %s;\n", in2, ld(r, r->saved, "saved", "sr + 2 * H + j", l1),
                  ld(r, r->saved, "saved", "sr + 3 * H + j", l2));
    nnc_sb_printf(b, "%s  const float cp = prev < 0 ? %s : %s;\n", in2, ld(r, r->c0, "c0", "b * H + j", l1),
                  ld(r, r->saved, "saved", "(b * T + prev) * 5 * H + 4 * H + j", l2));
    nnc_sb_printf(b, "%s  const float tc = tanhf(%s), dct = %s + dht * og * (1.0f - tc * tc);\n", in2,
                  ld(r, r->saved, "saved", "sr + 4 * H + j", l1), ld(r, r->dc0, "dc0", "b * H + j", l2));
    st(r, in3, r->dxw, "dxw", "xr + j", "dct * gg * ig * (1.0f - ig)");
    st(r, in3, r->dxw, "dxw", "xr + H + j", "dct * cp * fg * (1.0f - fg)");
    st(r, in3, r->dxw, "dxw", "xr + 2 * H + j", "dct * ig * (1.0f - gg * gg)");
    st(r, in3, r->dxw, "dxw", "xr + 3 * H + j", "dht * tc * og * (1.0f - og)");
    st(r, in3, r->dc0, "dc0", "b * H + j", "dct * fg");
  } else {
    nnc_sb_printf(b, "%s  const float rg = %s, zg = %s,\n", in2, ld(r, r->saved, "saved", "sr + j", l1),
                  ld(r, r->saved, "saved", "sr + H + j", l2));
    nnc_sb_printf(b, "%s              ng = %s, an = %s;\n", in2, ld(r, r->saved, "saved", "sr + 2 * H + j", l1),
                  ld(r, r->saved, "saved", "sr + 3 * H + j", l2));
    nnc_sb_printf(b, "%s  const float dnp = dht * (1.0f - zg) * (1.0f - ng * ng), dr = dnp * an * rg * (1.0f - rg),\n"
                     "%s              dz = dht * (%s - ng) * zg * (1.0f - zg);\n", in2, in2,
                  ld(r, r->hprev, "hprev", "hr + j", l1));
    st(r, in3, r->dxw, "dxw", "xr + j", "dr");
    st(r, in3, r->dxw, "dxw", "xr + H + j", "dz");
    st(r, in3, r->dxw, "dxw", "xr + 2 * H + j", "dnp");
    st(r, in3, r->da, "da", "xr + j", "dr");
    st(r, in3, r->da, "da", "xr + H + j", "dz");
    st(r, in3, r->da, "da", "xr + 2 * H + j", "dnp * rg");
  }
  nnc_sb_printf(b, "%s}\n", in2);
  /* dh of the step before: W_hh^T da, plus the GRU's direct path z * dh; on
   * raw f32 pointers as a sum of W_hh's rows (contiguous, so it vectorizes),
   * else summed in a register and stored once (a narrow dh0 would round
   * every term) */
  if (r->a->dot) {
    if (r->lstm) nnc_sb_printf(b, "%sfor (%s k = 0; k < H; k++) dh0[b * H + k] = 0.0f;\n", in2, I);
    else nnc_sb_printf(b, "%sfor (%s k = 0; k < H; k++) dh0[b * H + k] = (dh0[b * H + k] + dy[hr + k]) * saved[sr + H + k];\n",
                       in2, I);
    nnc_sb_printf(b, "%sfor (%s q = 0; q < %d * H; q++) {\n%s  const float dq = %s[xr + q];\n"
                     "%s  for (%s k = 0; k < H; k++) dh0[b * H + k] += w[q * H + k] * dq;\n%s}\n",
                  in2, I, r->lstm ? 4 : 3, in2, r->lstm ? "dxw" : "da", in2, I, in2);
    return;
  }
  nnc_sb_printf(b, "%sfor (%s k = 0; k < H; k++) {\n", in2, I);
  if (r->lstm)
    nnc_sb_printf(b, "%s  float acc = 0.0f;\n", in2);
  else
    nnc_sb_printf(b, "%s  float acc = (%s + %s) * %s;\n", in2, ld(r, r->dh0, "dh0", "b * H + k", l1),
                  ld(r, r->dy, "dy", "hr + k", l2), ld(r, r->saved, "saved", "sr + H + k", l3));
  nnc_sb_printf(b, "%s  for (%s q = 0; q < %d * H; q++) acc += %s * %s;\n", in2, I, r->lstm ? 4 : 3,
                ld(r, r->w, "w", "q * H + k", l1), ld(r, r->da, r->lstm ? "dxw" : "da", "xr + q", l4));
  st(r, in3, r->dh0, "dh0", "b * H + k", "acc");
  nnc_sb_printf(b, "%s}\n", in2);
}

void ec_emit_recurrent_grad_row(const ec_ctx *x, const nnc_node *n, const ec_access *a, const char *I,
                                const char *ind, nnc_sb *b) {
  (void)x;
  bool lstm = n->op == NNC_OP_LSTM_SCAN_GRAD, rev = n->attrs.reverse;
  grad_row r = {a, lstm, n->in[0], n->in[1], n->in[2], n->in[3], lstm ? n->in[4] : -1, n->in[lstm ? 5 : 4],
                n->in[lstm ? 6 : 5], n->in[lstm ? 7 : 6], lstm ? n->in[8] : -1, n->out[0],
                n->out[lstm ? 0 : 1], n->out[lstm ? 1 : 2], lstm ? n->out[2] : -1, n->out[3], n->out[4], b};
  char l1[ACCESS], in2[64], in3[64], tl[160], step[200];
  snprintf(in2, sizeof in2, "%s  ", ind);
  snprintf(in3, sizeof in3, "%s    ", ind);
  snprintf(tl, sizeof tl, "const %s t = %s, prev = %s;", I, rev ? "T - 1 - s" : "s",
           rev ? "s == 0 ? -1 : t + 1" : "t - 1");
  snprintf(step, sizeof step, "const %s xr = (b * T + t) * %d * H, hr = (b * T + t) * H, sr = (b * T + t) * %d * H;",
           I, lstm ? 4 : 3, lstm ? 5 : 4);
  nnc_sb_printf(b, "%s/* %s backward through time (its forward ran %s): the forward again, keeping each step's gates%s"
                   " in saved and the h it read in hprev */\n", ind, lstm ? "LSTM" : "GRU",
                rev ? "backwards" : "forwards", lstm ? " and c" : " and W_hn h + b_hn");
  nnc_sb_printf(b, "%sfor (%s s = 0; s < T; s++) {\n%s  %s\n%s  %s\n", ind, I, ind, tl, ind, step);
  forward(&r, I, ind);
  nnc_sb_printf(b, "%s}\n", ind);
  nnc_sb_printf(b, "%s/* then back, the state gradients running in dh0%s from those of the final states */\n", ind,
                lstm ? " and dc0" : "");
  nnc_sb_printf(b, "%sfor (%s j = 0; j < H; j++) {\n", ind, I);
  st(&r, in2, r.dh0, "dh0", "b * H + j", ld(&r, r.dhn, "dhn", "b * H + j", l1));
  if (lstm) st(&r, in2, r.dc0, "dc0", "b * H + j", ld(&r, r.dcn, "dcn", "b * H + j", l1));
  nnc_sb_printf(b, "%s}\n", ind);
  /* the GRU's way back reads the h a step started from in hprev, the LSTM's c in saved at prev */
  if (!lstm) snprintf(tl, sizeof tl, "const %s t = %s;", I, rev ? "T - 1 - s" : "s");
  nnc_sb_printf(b, "%sfor (%s s = T - 1; s >= 0; s--) {\n%s  %s\n%s  %s\n", ind, I, ind, tl, ind, step);
  backward(&r, I, ind);
  nnc_sb_printf(b, "%s}\n", ind);
  (void)in3;
}
