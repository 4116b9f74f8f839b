/* compiler/emit/c_simd_scan.c — lstm_scan and gru_scan (inference and the
 * forward of training) on the C SIMD target as PyTorch's CPU kernels run
 * them: each time step is one GEMM over every batch row,
 *   gates [B, G*H] = h [B, H] . W_hh^T + b_hh   (+ xw[:, t, :] for the LSTM),
 * into a buffer at the start of the workspace, then the step's gate math,
 * with the templates' vector activations (kernels/simd_math.h). A step is
 * one parallel_for of the model's pool: a task per thread takes a block of
 * batch rows, runs their part of the GEMM through the nnc_simd_gemm template
 * on its own thread (in its slice of the workspace), then their gate math,
 * so a step wakes the threads once (a GEMM on the pool, then the gate math
 * through nnc_glue_rows, took two wake-ups a step and ~20% longer).
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

/* k<ki>_step, what a task of one step is told, and k<ki>_rows, a task:
 * its batch rows' GEMM on its thread, then their gate math. */
static void scan_rows(const ec_ctx *x, int ki, const nnc_node *n, long long H, nnc_sb *b) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  char B[EC_EXPR], T[EC_EXPR], pre[160], head[96];
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[1], "d->", T, sizeof T);
  nnc_sb_printf(b, "/* One step of kernel %d, as its tasks see it. */\n"
                   "typedef struct k%d_step {\n  const run_ctx *c;\n"
                   "  nnc_simd_gemm_args g;   /* the step's GEMM over every batch row (C: the gates, [B, %d * H]) */\n"
                   "  int64_t t;              /* the time index */\n"
                   "  int per;                /* batch rows a task takes */\n"
                   "  unsigned char *ws;      /* per thread, `each` bytes of workspace for a task's GEMM */\n"
                   "  size_t each;\n"
                   "  atomic_int failed;      /* a task's GEMM refused its arguments; msg says why */\n"
                   "  char msg[256];\n} k%d_step;\n\n",
                ki, ki, lstm ? 4 : 3, ki);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *xw", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  if (lstm) ec_assign(x, &body, 2, "float *cn", n->out[2]);
  nnc_sb_printf(&body, "  const int64_t B = %s, T = %s, H = %lld;\n", B, T, H);
  nnc_sb_printf(&body,
    "  const int64_t r0 = (int64_t)task * s->per, r1 = r0 + s->per < B ? r0 + s->per : B;\n"
    "  /* the rows' part of the step's GEMM, on this thread alone */\n"
    "  nnc_simd_gemm_args g = s->g;\n"
    "  g.M = (int)(r1 - r0);\n  g.A += r0 * g.lda;\n  g.C += r0 * g.ldc;\n%s"
    "  nnc_simd_error e;\n"
    "  if (nnc_simd_gemm(&g, NULL, s->ws + (size_t)thread * s->each, s->each, &e)) {\n"
    "    if (!atomic_exchange(&s->failed, 1)) memcpy(s->msg, e.msg, sizeof s->msg);\n"
    "    return;\n  }\n",
    lstm ? "  g.residual += r0 * g.ldr;\n" : "");
  nnc_sb_printf(&body, "  /* their gate math, from the gates into %s */\n  const int64_t next = s->t %s 1;\n"
                       "  for (int64_t b = r0; b < r1; b++) {\n", lstm ? "c_n and y" : "y", n->attrs.reverse ? "-" : "+");
  nnc_sb_printf(&body, "    float *a = s->g.C + b * %d * H, *yr = y + (b * T + s->t) * H;\n", lstm ? 4 : 3);
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
      "    const float *xr = xw + (b * T + s->t) * 3 * H, *hp = s->g.A + b * s->g.lda;\n"
      "    for (int64_t j = 0; j < 2 * H; j++) a[j] += xr[j];\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_SIGMOID, a, 2 * H);   /* r, z */\n"
      "    for (int64_t j = 0; j < H; j++) a[2 * H + j] = xr[2 * H + j] + a[j] * a[2 * H + j];\n"
      "    nnc_rnn_act(NNC_SIMD_ACT_TANH, a + 2 * H, H);   /* n = tanh(xw_n + r (W_hn h + b_hn)) */\n"
      "    for (int64_t j = 0; j < H; j++) yr[j] = (1.0f - a[H + j]) * a[2 * H + j] + a[H + j] * hp[j];   "
      "/* h = (1 - z) n + z h */\n");
  }
  nnc_sb_printf(&body,
    "    /* the row's xw at the next step, which %s reads: a miss (rows T * %d * H apart) taken now */\n"
    "    if (next >= 0 && next < T)\n"
    "      for (int64_t j = 0; j < %d * H; j += 16) __builtin_prefetch(xw + (b * T + next) * %d * H + j);\n  }\n",
    lstm ? "its GEMM (the residual)" : "its gate math", lstm ? 4 : 3, lstm ? 4 : 3, lstm ? 4 : 3);
  nnc_sb_printf(b, "/* Task `task` of step s->t: batch rows [r0, r1). */\n");
  snprintf(pre, sizeof pre, "  k%d_step *s = p;\n  const run_ctx *c = s->c;\n", ki);
  snprintf(head, sizeof head, "static void k%d_rows(void *p, int task, int thread)", ki);
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
    "  }\n}\n\n"
    "/* A scan's step over nthreads: *ntasks tasks of *per batch rows (one task when the\n"
    " * step's GEMM g is too small to be worth waking a thread). Returns the workspace:\n"
    " * *gates bytes for the gates [M, N], then *each bytes per thread for a task's GEMM\n"
    " * (whole 64-byte lines). */\n"
    "static size_t nnc_rnn_split(const nnc_simd_gemm_args *g, int nthreads, int *ntasks, int *per,\n"
    "                            size_t *gates, size_t *each) {\n"
    "  const double work = (double)g->M * g->N * g->K;\n"
    "  *ntasks = work < 65536.0 || g->M < 2 ? 1 : g->M < nthreads ? g->M : nthreads;\n"
    "  *per = (g->M + *ntasks - 1) / *ntasks;\n"
    "  nnc_simd_gemm_args task = *g;\n"
    "  task.M = *per;\n"
    "  *gates = ((size_t)g->M * (size_t)g->N * sizeof(float) + 63) / 64 * 64;\n"
    "  *each = (nnc_simd_gemm_workspace_bytes(&task, 1) + 63) / 64 * 64;\n"
    "  return *gates + (size_t)nthreads * *each;\n}\n\n");
}

nnc_status cs_emit_scan(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  bool lstm = n->op == NNC_OP_LSTM_SCAN, rev = n->attrs.reverse;
  long long G = lstm ? 4 : 3, H = x->g->tensors[n->in[1]].shape[1].k;
  int h0 = n->nin > 3 ? n->in[3] : -1, c0 = n->nin > 4 ? n->in[4] : -1;
  scan_sizes(x, ki, n, G, H, b);
  scan_rows(x, ki, n, H, b);

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
  nnc_sb_printf(&body,
    "  k%d_step st = {.c = c};\n"
    "  k%d_sizes(d, &st.g);\n"
    "  /* the workspace: the gates, then a slice per thread for a task's GEMM */\n"
    "  int ntasks;\n  size_t gates;\n"
    "  int rc = ensure_ws(c->m, nnc_rnn_split(&st.g, c->m->par.nthreads, &ntasks, &st.per, &gates, &st.each));\n"
    "  if (rc) return rc;\n"
    "  st.g.B = w;\n  st.g.bias = bias;\n  st.g.C = c->m->ws;\n"
    "  st.ws = (unsigned char *)c->m->ws + gates;\n"
    "  atomic_init(&st.failed, 0);\n", ki, ki);
  nnc_sb_printf(&body, "  /* the initial state: h_n holds h until the last step's is copied there%s */\n",
                lstm ? ", c_n holds c" : "");
  if (h0 >= 0) nnc_sb_printf(&body, "  memcpy(hn, h0, (size_t)(B * H) * sizeof *hn);\n");
  else nnc_sb_printf(&body, "  memset(hn, 0, (size_t)(B * H) * sizeof *hn);\n");
  if (lstm && c0 >= 0) nnc_sb_printf(&body, "  memcpy(cn, c0, (size_t)(B * H) * sizeof *cn);\n");
  else if (lstm) nnc_sb_printf(&body, "  memset(cn, 0, (size_t)(B * H) * sizeof *cn);\n");
  nnc_sb_printf(&body, "  for (int64_t s = 0; s < T; s++) {\n");
  nnc_sb_printf(&body, "    /* %s in time; h: the initial state at the first step, then the previous step's y */\n",
                rev ? "backwards" : "forwards");
  nnc_sb_printf(&body, "    st.t = %s;\n    st.g.A = s == 0 ? hn : y + (st.t %s 1) * H;\n    st.g.lda = s == 0 ? H : T * H;\n",
                rev ? "T - 1 - s" : "s", rev ? "+" : "-");
  if (lstm) nnc_sb_printf(&body, "    st.g.residual = xw + st.t * 4 * H;\n");
  nnc_sb_printf(&body,
    "    if (ntasks > 1) c->m->par.parallel_for(c->m->par.pool, ntasks, k%d_rows, &st);\n"
    "    else k%d_rows(&st, 0, 0);\n"
    "    if (atomic_load(&st.failed)) return kernel_failed(c->m, %d, st.msg);\n  }\n", ki, ki, ki);
  nnc_sb_printf(&body, "  /* h_n: the last step's h */\n  if (T > 0)\n"
                       "    for (int64_t b = 0; b < B; b++) memcpy(hn + b * H, y + (b * T + %s) * H, H * sizeof *hn);\n"
                       "  return 0;\n", rev ? "0" : "T - 1");
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

void cs_emit_scan_workspace(int ki, nnc_sb *b) {
  nnc_sb_printf(b, "  {   /* kernel %d: the gates, then a slice per thread for a task's GEMM */\n"
                   "    nnc_simd_gemm_args g;\n    k%d_sizes(d, &g);\n"
                   "    int ntasks, per;\n    size_t gates, each;\n"
                   "    size_t w = nnc_rnn_split(&g, nthreads, &ntasks, &per, &gates, &each);\n"
                   "    if (w > need) need = w;\n  }\n", ki, ki);
}
