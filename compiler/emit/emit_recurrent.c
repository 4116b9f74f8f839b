/* compiler/emit/emit_recurrent.c — the steps of lstm_scan and gru_scan as
 * plain loops, the same text for the device loops (a work-item a batch row)
 * and the C SIMD target's gradients (a task takes whole batch rows; its
 * forward scans are a GEMM a step, c_simd_scan.c): the steps of one row
 * depend on each other, the rows do not. A step is the recurrent product
 * W_hh h for every gate of a unit at once, then that unit's gate math, so
 * no gate value is stored. h of the previous step is read back from y (the
 * initial one from h_n, which is written last); c lives in c_n. */
#include <stdio.h>

#include "c_simd.h"

/* Room for the text of one element access. */
#define ACCESS (EC_EXPR * 3)

void ec_emit_recurrent_row(const ec_ctx *x, const nnc_node *n, const ec_access *a, const char *I, const char *ind,
                           nnc_sb *b) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN, rev = n->attrs.reverse;
  int G = lstm ? 4 : 3;
  int h0 = n->nin > 3 ? n->in[3] : -1, c0 = n->nin > 4 ? n->in[4] : -1;
  int y = n->out[0], hn = n->out[1], cn = lstm ? n->out[2] : -1;
  char l1[ACCESS], l2[ACCESS], s1[ACCESS], idx[EC_EXPR];
  nnc_sb_printf(b, "%s/* %s, %s in time; the state: h_n holds the initial h until the last step's is copied there%s */\n",
                ind, lstm ? "LSTM" : "GRU", rev ? "backwards" : "forwards", lstm ? ", c_n holds c" : "");
  nnc_sb_printf(b, "%sfor (%s j = 0; j < H; j++) {\n", ind, I);
  nnc_sb_printf(b, "%s  %s;\n", ind, a->st(a, hn, "hn", "b * H + j", h0 >= 0 ? a->ld(a, h0, "h0", "b * H + j", l1, sizeof l1)
                                                                          : "0.0f", s1, sizeof s1));
  if (lstm)
    nnc_sb_printf(b, "%s  %s;\n", ind, a->st(a, cn, "cn", "b * H + j", c0 >= 0 ? a->ld(a, c0, "c0", "b * H + j", l1, sizeof l1)
                                                                            : "0.0f", s1, sizeof s1));
  nnc_sb_printf(b, "%s}\n", ind);
  nnc_sb_printf(b, "%sfor (%s s = 0; s < T; s++) {\n", ind, I);
  nnc_sb_printf(b, "%s  const %s t = %s, prev = %s;   /* prev: the step whose h this one reads, -1: the initial */\n",
                ind, I, rev ? "T - 1 - s" : "s", rev ? "s == 0 ? -1 : t + 1" : "t - 1");
  nnc_sb_printf(b, "%s  const %s xr = (b * T + t) * %d * H, yr = (b * T + t) * H;\n", ind, I, G);
  /* the recurrent product of the unit's G gates: dots on raw pointers, or a loop through ld */
  if (a->dot) {
    nnc_sb_printf(b, "%s  const float *hp = prev < 0 ? hn + b * H : y + (b * T + prev) * H;\n", ind);
    nnc_sb_printf(b, "%s  for (%s j = 0; j < H; j++) {\n", ind, I);
    for (int k = 0; k < G; k++) {
      char wr[32];
      snprintf(idx, sizeof idx, k ? "%d * H + j" : "j", k);
      snprintf(wr, sizeof wr, k ? "(%d * H + j) * H" : "j * H", k);
      nnc_sb_printf(b, "%s    const float a%d = bias[%s] + %s(w + %s, hp, H);\n", ind, k, idx, a->dot, wr);
    }
  } else {
    nnc_sb_printf(b, "%s  for (%s j = 0; j < H; j++) {\n%s    float", ind, I, ind);
    for (int k = 0; k < G; k++) {
      snprintf(idx, sizeof idx, k ? "%d * H + j" : "j", k);
      nnc_sb_printf(b, "%s a%d = %s", k ? "," : "", k, a->ld(a, n->in[2], "bias", idx, l1, sizeof l1));
    }
    nnc_sb_printf(b, ";\n%s    for (%s k = 0; k < H; k++) {\n", ind, I);
    nnc_sb_printf(b, "%s      const float hk = prev < 0 ? %s : %s;\n", ind,
                  a->ld(a, hn, "hn", "b * H + k", l1, sizeof l1), a->ld(a, y, "y", "(b * T + prev) * H + k", l2, sizeof l2));
    for (int k = 0; k < G; k++) {
      snprintf(idx, sizeof idx, k ? "(%d * H + j) * H + k" : "j * H + k", k);
      nnc_sb_printf(b, "%s      a%d += %s * hk;\n", ind, k, a->ld(a, n->in[1], "w", idx, l1, sizeof l1));
    }
    nnc_sb_printf(b, "%s    }\n", ind);
  }
  char xv[4][ACCESS];
  for (int k = 0; k < G; k++) {
    snprintf(idx, sizeof idx, k ? "xr + %d * H + j" : "xr + j", k);
    a->ld(a, n->in[0], "xw", idx, xv[k], sizeof xv[k]);
  }
  if (lstm) {
    nnc_sb_printf(b, "%s    const float ig = 1.0f / (1.0f + expf(-(%s + a0))), fg = 1.0f / (1.0f + expf(-(%s + a1)));\n",
                  ind, xv[0], xv[1]);
    nnc_sb_printf(b, "%s    const float gg = tanhf(%s + a2), og = 1.0f / (1.0f + expf(-(%s + a3)));\n", ind, xv[2], xv[3]);
    nnc_sb_printf(b, "%s    const float cj = fg * %s + ig * gg;\n", ind, a->ld(a, cn, "cn", "b * H + j", l1, sizeof l1));
    nnc_sb_printf(b, "%s    %s;\n", ind, a->st(a, cn, "cn", "b * H + j", "cj", s1, sizeof s1));
    nnc_sb_printf(b, "%s    %s;\n", ind, a->st(a, y, "y", "yr + j", "og * tanhf(cj)", s1, sizeof s1));
  } else {
    nnc_sb_printf(b, "%s    const float rg = 1.0f / (1.0f + expf(-(%s + a0))), zg = 1.0f / (1.0f + expf(-(%s + a1)));\n",
                  ind, xv[0], xv[1]);
    nnc_sb_printf(b, "%s    const float ng = tanhf(%s + rg * a2);\n", ind, xv[2]);
    nnc_sb_printf(b, "%s    const float hj = prev < 0 ? %s : %s;\n", ind, a->ld(a, hn, "hn", "b * H + j", l1, sizeof l1),
                  a->ld(a, y, "y", "(b * T + prev) * H + j", l2, sizeof l2));
    nnc_sb_printf(b, "%s    %s;\n", ind, a->st(a, y, "y", "yr + j", "(1.0f - zg) * ng + zg * hj", s1, sizeof s1));
  }
  nnc_sb_printf(b, "%s  }\n%s}\n", ind, ind);
  nnc_sb_printf(b, "%sif (T > 0)\n%s  for (%s j = 0; j < H; j++) %s;\n", ind, ind, I,
                a->st(a, hn, "hn", "b * H + j", a->ld(a, y, "y", rev ? "b * T * H + j" : "(b * T + T - 1) * H + j", l1,
                                                      sizeof l1), s1, sizeof s1));
}

/* ------------------------------------------------------------------ C SIMD */

static char *cs_ld(const ec_access *a, int t, const char *name, const char *idx, char *buf, size_t n) {
  (void)a;
  (void)t;
  snprintf(buf, n, "%s[%s]", name, idx);
  return buf;
}

static char *cs_st(const ec_access *a, int t, const char *name, const char *idx, const char *v, char *buf, size_t n) {
  (void)a;
  (void)t;
  snprintf(buf, n, "%s[%s] = %s", name, idx, v);
  return buf;
}

/* The tensors of scan (or scan gradient) n as the names its steps use, through declare. */
static void operands(const nnc_node *n, void (*declare)(void *self, bool out, const char *name, int t), void *self) {
  static const char *const scan_in[9] = {"xw", "w", "bias", "h0", "c0"}, *const scan_out[5] = {"y", "hn", "cn"};
  static const char *const lstm_in[9] = {"xw", "w", "bias", "h0", "c0", "y", "dy", "dhn", "dcn"};
  static const char *const lstm_out[5] = {"dxw", "dh0", "dc0", "hprev", "saved"};
  static const char *const gru_in[9] = {"xw", "w", "bias", "h0", "y", "dy", "dhn"};
  static const char *const gru_out[5] = {"dxw", "da", "dh0", "hprev", "saved"};
  bool lg = n->op == NNC_OP_LSTM_SCAN_GRAD, gg = n->op == NNC_OP_GRU_SCAN_GRAD;
  const char *const *in = lg ? lstm_in : gg ? gru_in : scan_in, *const *out = lg ? lstm_out : gg ? gru_out : scan_out;
  for (int i = 0; i < n->nin; i++) declare(self, false, in[i], n->in[i]);
  for (int i = 0; i < n->nout; i++) declare(self, true, out[i], n->out[i]);
}

/* The steps of one batch row of a scan or its gradient. */
static void row(const ec_ctx *x, const nnc_node *n, const ec_access *a, const char *I, const char *ind, nnc_sb *b) {
  if (n->op == NNC_OP_LSTM_SCAN_GRAD || n->op == NNC_OP_GRU_SCAN_GRAD) ec_emit_recurrent_grad_row(x, n, a, I, ind, b);
  else ec_emit_recurrent_row(x, n, a, I, ind, b);
}

typedef struct cs_decl {
  const ec_ctx *x;
  nnc_sb *b;
} cs_decl;

static void cs_declare(void *self, bool out, const char *name, int t) {
  cs_decl *d = self;
  char lhs[64];
  snprintf(lhs, sizeof lhs, "%sfloat *%s", out ? "" : "const ", name);
  ec_assign(d->x, d->b, 2, lhs, t);
}

/* k<ki>_rows, a task's batch rows, and k<ki>, which spreads the rows over
 * the model's threads. */
nnc_status cs_emit_recurrent(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const nnc_tensor *xw = &x->g->tensors[n->in[0]];
  char B[EC_EXPR], T[EC_EXPR], work[EC_EXPR], per[64];
  nnc_emit_dim_expr(x->g, xw->shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, xw->shape[1], "d->", T, sizeof T);
  long long H = x->g->tensors[n->in[1]].shape[1].k;
  nnc_sb body;
  nnc_sb_init(&body);
  cs_decl d = {x, &body};
  operands(n, cs_declare, &d);
  nnc_sb_printf(&body, "  const int64_t T = %s, H = %lld;\n  for (int64_t b = r0; b < r1; b++) {\n", T, H);
  const ec_access a = {x, cs_ld, cs_st, "nnc_rnn_dot"};
  row(x, n, &a, "int64_t", "    ", &body);
  nnc_sb_printf(&body, "  }\n");
  nnc_sb_printf(out, "#ifndef NNC_RNN_DOT\n#define NNC_RNN_DOT\n"
    "/* a . b over n floats in 8 partial sums, which the compiler keeps in one\n"
    " * vector register (a single sum is a chain it may not reorder) */\n"
    "static inline float nnc_rnn_dot(const float *a, const float *b, int64_t n) {\n"
    "  float s[8] = {0}, t = 0;\n  const int64_t n8 = n - n %% 8;\n"
    "  for (int64_t k = 0; k < n8; k += 8)\n    for (int i = 0; i < 8; i++) s[i] += a[k + i] * b[k + i];\n"
    "  for (int64_t k = n8; k < n; k++) t += a[k] * b[k];\n"
    "  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + t;\n}\n#endif\n\n");
  /* a row's work: T steps of G*H*H multiply-adds (three of them for a gradient) */
  snprintf(per, sizeof per, "%lld", (long long)xw->shape[2].k * H * (n->nout == 5 ? 3 : 1));
  ec_mul(T, per, work, sizeof work);
  cs_emit_rows_fns(x, ki, B, work, &body, out);
  return NNC_OK;
}

/* ------------------------------------------------------------ device loops */

static char *dev_ld(const ec_access *a, int t, const char *name, const char *idx, char *buf, size_t n) {
  return ec_loop_ld(a->x, t, name, idx, buf, n);
}

static char *dev_st(const ec_access *a, int t, const char *name, const char *idx, const char *v, char *buf,
                    size_t n) {
  return ec_loop_st(a->x, t, name, idx, v, buf, n);
}

typedef struct dev_decl {
  const ec_loop_target *lt;
  nnc_sb *b;
} dev_decl;

static void dev_declare(void *self, bool out, const char *name, int t) {
  dev_decl *d = self;
  d->lt->pointer(d->lt->self, d->b, out ? "" : "const ", name, t);
}

nnc_status ec_emit_device_recurrent(const ec_loop_target *lt, int ki, nnc_error *err) {
  (void)err;
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  const nnc_tensor *xw = &x->g->tensors[n->in[0]];
  char B[EC_EXPR], T[EC_EXPR];
  nnc_emit_dim_expr(x->g, xw->shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, xw->shape[1], "d->", T, sizeof T);
  nnc_sb body;
  nnc_sb_init(&body);
  dev_decl d = {lt, &body};
  operands(n, dev_declare, &d);
  nnc_sb_printf(&body, "  const int T = (int)(%s), H = %lld;\n  NNC_LOOP(b, %s) {\n", T,
                (long long)x->g->tensors[n->in[1]].shape[1].k, B);
  const ec_access a = {x, dev_ld, dev_st, NULL};
  row(x, n, &a, "int", "    ", &body);
  nnc_sb_printf(&body, "  }\n");
  lt->finish(lt->self, ki, B, &body);
  return NNC_OK;
}
