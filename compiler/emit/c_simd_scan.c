/* compiler/emit/c_simd_scan.c — lstm_scan and gru_scan (inference and the
 * forward of training) on the C SIMD target as PyTorch's CPU kernels run
 * them: each time step is one GEMM over every batch row,
 *   gates [B, G*H] = h [B, H] . W_hh^T + b_hh   (+ xw[:, t, :] for the LSTM),
 * through the nnc_simd_gemm template on the model's threads into a buffer
 * at the start of the workspace, then the step's gate math over the batch
 * rows on the model's threads (nnc_glue_rows), with the templates' vector
 * activations (kernels/simd_math.h).
 *
 * The numerics are emit_recurrent.c's: PyTorch's gate order (i, f, g, o;
 * r, z, n) and the GRU's n gate tanh(xw_n + r (W_hn h + b_hn)), so for the
 * GRU the product stays apart from xw. h of the previous step is read from
 * y in place (the GEMM's A, rows T*H apart), the initial one from h_n,
 * which holds it until the last step's h is copied there; c lives in c_n.
 * The gradients keep their loops (emit_recurrent.c). */
#include <stdio.h>
#include <string.h>

#include "c_simd.h"

/* `int` of a size expression: a constant as it is, an expression of dims cast. */
static char *as_int(const char *e, char *buf, size_t n) {
  snprintf(buf, n, strspn(e, "0123456789") == strlen(e) ? "%s" : "(int)(%s)", e);
  return buf;
}

/* k<ki>_sizes: the step GEMM's sizes and flags (no pointers), shared by the
 * kernel and workspace_need. */
static void scan_sizes(const ec_ctx *x, int ki, const nnc_node *n, long long G, long long H, nnc_sb *b) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  char B[EC_EXPR], M[EC_EXPR + 8], T[EC_EXPR], ldr[EC_EXPR + 40] = "";
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[1], "d->", T, sizeof T);
  if (lstm) snprintf(ldr, sizeof ldr, strchr(T, ' ') ? " .ldr = (ptrdiff_t)(%s) * N," : " .ldr = (ptrdiff_t)%s * N,", T);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int M = %s, N = %lld, K = %lld;\n", as_int(B, M, sizeof M), G * H, H);
  nnc_sb_printf(&body, "  *g = (nnc_simd_gemm_args){\n      .M = M, .N = N, .K = K, .batch = 1,\n"
                       "      .lda = K, .ldb = K, .b_trans = 1, .ldc = N,%s\n"
                       "      .alpha = 1.0f, .act = NNC_SIMD_ACT_NONE,\n  };\n",
                ldr);
  nnc_sb_printf(b, "/* A step's recurrent product over every batch row, gates [B, %lld] = h . W_hh^T + b_hh%s;\n"
                   " * h [B, %lld], the GEMM's A, is set per step. */\n",
                G * H, lstm ? "\n * + xw[:, t, :] (the residual, rows T * N apart)" : "", H);
  nnc_sb_printf(b, "static void k%d_sizes(const %s_dims *d, nnc_simd_gemm_args *g) {\n", ki, x->p);
  if (!ec_names(body.buf, "d")) nnc_sb_printf(b, "  (void)d;   /* every size is a constant */\n");
  if (body.buf) nnc_sb_puts(b, body.buf);
  if (body.oom) b->oom = true;
  nnc_sb_printf(b, "}\n\n");
  nnc_sb_free(&body);
}

/* k<ki>_step, what the gate math of one step is told, and k<ki>_gates, the
 * gate math of a task's batch rows. */
static void scan_gates(const ec_ctx *x, int ki, const nnc_node *n, long long H, nnc_sb *b) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  char T[EC_EXPR], pre[160], head[96];
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[1], "d->", T, sizeof T);
  nnc_sb_printf(b, "/* One step of kernel %d, as its gate math sees it. */\n"
                   "typedef struct k%d_step {\n  const run_ctx *c;\n  int64_t t;      /* the time index */\n"
                   "  float *gates;   /* [B, %d * H]: %s */\n",
                ki, ki, lstm ? 4 : 3, lstm ? "the pre-activations of i, f, g, o" : "W_hh h + b_hh of r, z, n");
  if (!lstm)
    nnc_sb_printf(b, "  const float *h;   /* the previous h (the GEMM's A), rows ldh apart */\n  int64_t ldh;\n");
  nnc_sb_printf(b, "} k%d_step;\n\n", ki);
  nnc_sb body;
  nnc_sb_init(&body);
  if (!lstm) ec_assign(x, &body, 2, "const float *xw", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  if (lstm) ec_assign(x, &body, 2, "float *cn", n->out[2]);
  nnc_sb_printf(&body, "  const int64_t T = %s, H = %lld;\n  for (int64_t b = r0; b < r1; b++) {\n", T, H);
  nnc_sb_printf(&body, "    float *a = s->gates + b * %d * H, *yr = y + (b * T + s->t) * H;\n", lstm ? 4 : 3);
  if (lstm) {
    nnc_sb_printf(&body,
      "    float *cr = cn + b * H;\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_SIGMOID, a, 2 * H);       /* i, f */\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_TANH, a + 2 * H, H);      /* g */\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_SIGMOID, a + 3 * H, H);   /* o */\n"
      "    for (int64_t j = 0; j < H; j++) {\n"
      "      cr[j] = a[H + j] * cr[j] + a[j] * a[2 * H + j];   /* c = f c + i g */\n"
      "      yr[j] = cr[j];\n    }\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_TANH, yr, H);\n"
      "    for (int64_t j = 0; j < H; j++) yr[j] *= a[3 * H + j];   /* h = o tanh(c) */\n");
  } else {
    nnc_sb_printf(&body,
      "    const float *xr = xw + (b * T + s->t) * 3 * H, *hp = s->h + b * s->ldh;\n"
      "    for (int64_t j = 0; j < 2 * H; j++) a[j] += xr[j];\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_SIGMOID, a, 2 * H);   /* r, z */\n"
      "    for (int64_t j = 0; j < H; j++) a[2 * H + j] = xr[2 * H + j] + a[j] * a[2 * H + j];\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_TANH, a + 2 * H, H);   /* n = tanh(xw_n + r (W_hn h + b_hn)) */\n"
      "    for (int64_t j = 0; j < H; j++) yr[j] = (1.0f - a[H + j]) * a[2 * H + j] + a[H + j] * hp[j];   "
      "/* h = (1 - z) n + z h */\n");
  }
  nnc_sb_printf(&body, "  }\n");
  nnc_sb_printf(b, "/* The gate math of step s->t for batch rows [r0, r1): %s. */\n",
                lstm ? "c = f c + i g, h = o tanh(c) into c_n and y" : "h = (1 - z) n + z h into y");
  snprintf(pre, sizeof pre, "  const k%d_step *s = p;\n  const run_ctx *c = s->c;\n", ki);
  snprintf(head, sizeof head, "static void k%d_gates(void *p, int64_t r0, int64_t r1)", ki);
  ec_emit_function(x, b, head, pre, "c->d", &body);
}

void cs_emit_scan_helpers(nnc_sb *b) {
  nnc_sb_printf(b,
    "/* act over x[0, n) in place with the vector forms of kernels/simd_math.h (those of\n"
    " * nnc_simd_activation); the tail through a padded vector, so every element gets the\n"
    " * same arithmetic. */\n"
    "static inline void nnc_rnn_act(nnc_simd_act act, float *x, int64_t n) {\n"
    "  int64_t i = 0;\n"
    "  for (; i + NNC_VW <= n; i += NNC_VW) nnc_vstore(x + i, nnc_vact(act, nnc_vload(x + i)));\n"
    "  if (i < n) {\n"
    "    float tail[NNC_VW] = {0};\n"
    "    memcpy(tail, x + i, (size_t)(n - i) * sizeof *x);\n"
    "    nnc_vstore(tail, nnc_vact(act, nnc_vload(tail)));\n"
    "    memcpy(x + i, tail, (size_t)(n - i) * sizeof *x);\n"
    "  }\n}\n\n");
}

nnc_status cs_emit_scan(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  bool lstm = n->op == NNC_OP_LSTM_SCAN, rev = n->attrs.reverse;
  long long G = lstm ? 4 : 3, H = x->g->tensors[n->in[1]].shape[1].k;
  int h0 = n->nin > 3 ? n->in[3] : -1, c0 = n->nin > 4 ? n->in[4] : -1;
  scan_sizes(x, ki, n, G, H, b);
  scan_gates(x, ki, n, H, b);

  const nnc_tensor *xw = &x->g->tensors[n->in[0]];
  char B[EC_EXPR], T[EC_EXPR];
  nnc_emit_dim_expr(x->g, xw->shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, xw->shape[1], "d->", T, sizeof T);
  nnc_sb body;
  nnc_sb_init(&body);
  if (lstm) ec_assign(x, &body, 2, "const float *xw", n->in[0]);   /* the GRU's joins in the gate math */
  ec_assign(x, &body, 2, "const float *w", n->in[1]);
  ec_assign(x, &body, 2, "const float *bias", n->in[2]);
  if (h0 >= 0) ec_assign(x, &body, 2, "const float *h0", h0);
  if (c0 >= 0) ec_assign(x, &body, 2, "const float *c0", c0);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  ec_assign(x, &body, 2, "float *hn", n->out[1]);
  if (lstm) ec_assign(x, &body, 2, "float *cn", n->out[2]);
  nnc_sb_printf(&body, "  const int64_t B = %s, T = %s, H = %lld;\n", B, T, H);
  nnc_sb_printf(&body, "  nnc_simd_gemm_args g;\n  k%d_sizes(d, &g);\n  g.B = w;\n  g.bias = bias;\n", ki);
  nnc_sb_printf(&body,
    "  /* the workspace: a step's gates (whole 64-byte lines), then the GEMM's */\n"
    "  const size_t gates_bytes = ((size_t)g.M * (size_t)g.N * sizeof(float) + 63) / 64 * 64;\n"
    "  int rc = ensure_ws(c->m, gates_bytes + nnc_simd_gemm_workspace_bytes(&g, c->m->par.nthreads));\n"
    "  if (rc) return rc;\n"
    "  void *ws = (unsigned char *)c->m->ws + gates_bytes;\n"
    "  k%d_step st = {.c = c, .gates = c->m->ws};\n  g.C = st.gates;\n", ki);
  nnc_sb_printf(&body, "  /* the initial state: h_n holds h until the last step's is copied there%s */\n",
                lstm ? ", c_n holds c" : "");
  if (h0 >= 0) nnc_sb_printf(&body, "  memcpy(hn, h0, (size_t)(B * H) * sizeof *hn);\n");
  else nnc_sb_printf(&body, "  memset(hn, 0, (size_t)(B * H) * sizeof *hn);\n");
  if (lstm && c0 >= 0) nnc_sb_printf(&body, "  memcpy(cn, c0, (size_t)(B * H) * sizeof *cn);\n");
  else if (lstm) nnc_sb_printf(&body, "  memset(cn, 0, (size_t)(B * H) * sizeof *cn);\n");
  nnc_sb_printf(&body, "  nnc_simd_error e;\n  for (int64_t s = 0; s < T; s++) {\n");
  nnc_sb_printf(&body, "    /* %s in time; h: the initial state at the first step, then the previous step's y */\n",
                rev ? "backwards" : "forwards");
  nnc_sb_printf(&body, "    st.t = %s;\n    g.A = s == 0 ? hn : y + (st.t %s 1) * H;\n    g.lda = s == 0 ? H : T * H;\n",
                rev ? "T - 1 - s" : "s", rev ? "+" : "-");
  if (lstm) nnc_sb_printf(&body, "    g.residual = xw + st.t * 4 * H;\n");
  else nnc_sb_printf(&body, "    st.h = g.A;\n    st.ldh = g.lda;\n");
  nnc_sb_printf(&body,
    "    if (nnc_simd_gemm(&g, &c->m->par, ws, c->m->ws_size - gates_bytes, &e))\n"
    "      return kernel_failed(c->m, %d, e.msg);\n"
    "    /* the gate math, a unit's about as much work as 16 elements of a plain loop */\n"
    "    nnc_glue_rows(&c->m->pool, B, 16 * H, k%d_gates, &st);\n  }\n", ki, ki);
  nnc_sb_printf(&body, "  /* h_n: the last step's h */\n  if (T > 0)\n"
                       "    for (int64_t b = 0; b < B; b++) memcpy(hn + b * H, y + (b * T + %s) * H, H * sizeof *hn);\n"
                       "  return 0;\n", rev ? "0" : "T - 1");
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

void cs_emit_scan_workspace(int ki, nnc_sb *b) {
  nnc_sb_printf(b, "  {   /* kernel %d: a step's gates, then its GEMM's workspace */\n"
                   "    nnc_simd_gemm_args g;\n    k%d_sizes(d, &g);\n"
                   "    size_t w = ((size_t)g.M * (size_t)g.N * sizeof(float) + 63) / 64 * 64 +\n"
                   "               nnc_simd_gemm_workspace_bytes(&g, nthreads);\n"
                   "    if (w > need) need = w;\n  }\n", ki, ki);
}
