/* compiler/emit/c_simd_scan.c — lstm_scan and gru_scan (inference and the
 * forward of training) on the C SIMD target as PyTorch's CPU kernels run
 * them: each time step is one GEMM over every batch row,
 *   gates [B, G*H] = h [B, H] . W_hh^T + b_hh   (+ xw[:, t, :] for the LSTM),
 * into a buffer in the workspace, then the step's gate math, with the
 * templates' vector activations (kernels/simd_math.h). A batch row's h
 * depends on its own h alone, so the scan is one parallel_for of the
 * model's pool: a task per thread takes a block of batch rows through every
 * step, each step their part of the GEMM through the nnc_simd_gemm template
 * on its own thread (in its slice of the workspace), then their gate math,
 * with no barrier between steps. A parallel_for a step cost ~12 us on a
 * 2-core VM, 96 of them a forward of the 2-layer forecaster. W_hh is packed
 * into the micro-kernel's order once a scan (b_packed), not by every GEMM.
 * The LSTM's step GEMM is the bare product: b_hh and the step's xw are
 * added by its cell (nnc_lstm_cell), which reads every gate anyway, in one
 * vector pass with the gate math (the GEMM's epilogue pass over the gates
 * and the cell's five passes cost the forecaster 5% on a Zen 5 VM).
 *
 * An LSTM whose kernel took the linear computing xw (fuse_patterns.c
 * match_scan_input) multiplies each step's [h | x_t] by [W_hh | W_ih]^T
 * instead: K = H + F, W_ih packed beside W_hh, the two biases summed once,
 * and a task keeps its rows of [h | x_t] (the GEMM's A) in the workspace,
 * the cell writing h there as well as into y. xw for every step, [B, T,
 * 4H], is then never written and read back, and layer 0's K = 8 GEMM, slow
 * for its size, is gone: the forecaster 1.51 -> 1.10 ms on two threads of a
 * Zen 5 VM, with the register block the tuner picks for a scan's few rows
 * a task (tune_c_simd.c).
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
static void scan_sizes(const ec_ctx *x, int ki, const nnc_node *n, long long G, long long H, long long F,
                       nnc_sb *b) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  char B[EC_EXPR], M[EC_EXPR + 8];
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[0], "d->", B, sizeof B);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int M = %s, N = %lld, K = %lld;\n", as_int(B, M, sizeof M), G * H, H + F);
  nnc_sb_printf(&body, "  *g = (nnc_simd_gemm_args){\n      .M = M, .N = N, .K = K, .batch = 1,\n"
                       "      .lda = K, .ldb = K, .b_trans = 1, .ldc = N,\n"
                       "      .alpha = 1.0f, .act = NNC_SIMD_ACT_NONE,\n%s  };\n",
                F ? "      .a_inplace = 1,   /* a task's rows of [h | x_t] stay in L1: read, not packed, every step */\n"
                  : "");
  if (F)
    nnc_sb_printf(b, "/* A step's product over every batch row, gates [B, %lld] = [h | x_t] . [W_hh | W_ih]^T (b_hh + b_ih\n"
                     " * are added by the cell); [h | x_t] [B, %lld + %lld], the GEMM's A, is set per step. */\n",
                  G * H, H, F);
  else
    nnc_sb_printf(b, "/* A step's recurrent product over every batch row, gates [B, %lld] = h . W_hh^T%s;\n"
                     " * h [B, %lld], the GEMM's A, is set per step. */\n",
                  G * H, lstm ? " (b_hh and\n * xw[:, t, :] are added by the cell)" : " + b_hh", H);
  nnc_sb_printf(b, "static void k%d_sizes(const %s_dims *d, nnc_simd_gemm_args *g) {\n", ki, x->p);
  if (!ec_names(body.buf, "d")) nnc_sb_printf(b, "  (void)d;   /* every size is a constant */\n");
  if (body.buf) nnc_sb_puts(b, body.buf);
  if (body.oom) b->oom = true;
  nnc_sb_printf(b, "}\n\n");
  nnc_sb_free(&body);
}

/* The members of k<ki>_scan. */
static void scan_struct(int ki, int G, bool lstm, bool folded, nnc_sb *b) {
  nnc_sb_printf(b, "/* Kernel %d's scan, as its tasks see it. */\n"
                   "typedef struct k%d_scan {\n  const run_ctx *c;\n"
                   "  nnc_simd_gemm_args g;   /* a step's GEMM over every batch row (C: the gates, [B, %d * H]),\n"
                   "                            %s packed once for the scan (b_packed) */\n"
                   "  int per;                /* batch rows a task takes */\n"
                   "%s"
                   "  unsigned char *ws;      /* per thread, `each` bytes of workspace for a task's GEMM */\n"
                   "  size_t each;\n"
                   "  atomic_int failed;      /* a task's GEMM refused its arguments; msg says why */\n"
                   "  char msg[256];\n} k%d_scan;\n\n",
                ki, ki, G, folded ? "[W_hh | W_ih]" : "W_hh",
                folded ? "  const float *bias;      /* b_hh + b_ih, which the cell adds */\n"
                         "  float *hx;              /* [B, H + F]: each row's [h | x_t], the step GEMM's A */\n"
                : lstm ? "  const float *bias;       /* b_hh, which the cell adds (the step GEMM has no epilogue) */\n"
                       : "",
                ki);
}

/* k<ki>_rows of an LSTM scan that took its input's linear (proj): a task
 * copies its rows' x_t beside their h, runs the step's GEMM and the cell,
 * which writes h into y and into the rows' [h | x_t] for the next step. */
static void folded_rows(const ec_ctx *x, int ki, const nnc_node *n, const nnc_node *proj, long long H, nnc_sb *b) {
  bool rev = n->attrs.reverse;
  long long F = x->g->tensors[proj->in[1]].shape[1].k;
  char B[EC_EXPR], T[EC_EXPR], pre[160], head[96];
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[1], "d->", T, sizeof T);
  scan_struct(ki, 4, true, true, b);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *x", proj->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  ec_assign(x, &body, 2, "const float *hn", n->out[1]);
  ec_assign(x, &body, 2, "float *cn", n->out[2]);
  nnc_sb_printf(&body, "  const int64_t B = %s, T = %s, H = %lld, F = %lld, K = H + F;\n", B, T, H, F);
  nnc_sb_printf(&body,
    "  const int64_t r0 = (int64_t)task * s->per, r1 = r0 + s->per < B ? r0 + s->per : B;\n"
    "  if (r0 >= r1) return;\n"
    "  /* the rows' [h | x_t]: h from h_n (the initial state) before the first step, then from the cell */\n"
    "  float *hx = s->hx + r0 * K;\n"
    "  for (int64_t b = r0; b < r1; b++) memcpy(hx + (b - r0) * K, hn + b * H, (size_t)H * sizeof *hx);\n"
    "  /* the rows' part of each step's GEMM, on this thread alone */\n"
    "  nnc_simd_gemm_args g = s->g;\n"
    "  g.M = (int)(r1 - r0);\n  g.A = hx;\n  g.C += r0 * g.ldc;\n"
    "  for (int64_t step = 0; step < T; step++) {\n"
    "    const int64_t t = %s;\n"
    "    for (int64_t b = r0; b < r1; b++) memcpy(hx + (b - r0) * K + H, x + (b * T + t) * F, (size_t)F * sizeof *hx);\n"
    "    nnc_simd_error e;\n"
    "    if (nnc_simd_gemm(&g, NULL, s->ws + (size_t)thread * s->each, s->each, &e)) {\n"
    "      if (!atomic_exchange(&s->failed, 1)) memcpy(s->msg, e.msg, sizeof s->msg);\n"
    "      return;\n    }\n"
    "    /* their cells, from the gates into c_n, y and the next step's h */\n"
    "    for (int64_t b = r0; b < r1; b++)\n"
    "      nnc_lstm_cell(s->g.C + b * 4 * H, s->bias, NULL, H, cn + b * H, y + (b * T + t) * H, hx + (b - r0) * K);\n"
    "  }\n",
    rev ? "T - 1 - step" : "step");
  nnc_sb_printf(b, "/* Task `task` of the scan: batch rows [r0, r1), every step. */\n");
  snprintf(pre, sizeof pre, "  k%d_scan *s = p;\n  const run_ctx *c = s->c;\n", ki);
  snprintf(head, sizeof head, "static void k%d_rows(void *p, int task, int thread)", ki);
  ec_emit_function(x, b, head, pre, "c->d", &body);
}

/* k<ki>_scan, what the scan's tasks are told, and k<ki>_rows, a task: its
 * batch rows through every time step, a step their GEMM on its thread, then
 * their gate math. A row's h depends on its own h alone, so the tasks never
 * wait for each other: the scan wakes the pool once. */
static void scan_rows(const ec_ctx *x, int ki, const nnc_node *n, const nnc_node *proj, long long H, nnc_sb *b) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN, rev = n->attrs.reverse;
  if (proj) {
    folded_rows(x, ki, n, proj, H, b);
    return;
  }
  int G = lstm ? 4 : 3;
  char B[EC_EXPR], T[EC_EXPR], pre[160], head[96];
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[1], "d->", T, sizeof T);
  scan_struct(ki, G, lstm, false, b);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *xw", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  ec_assign(x, &body, 2, "const float *hn", n->out[1]);
  if (lstm) ec_assign(x, &body, 2, "float *cn", n->out[2]);
  nnc_sb_printf(&body, "  const int64_t B = %s, T = %s, H = %lld;\n", B, T, H);
  nnc_sb_printf(&body,
    "  const int64_t r0 = (int64_t)task * s->per, r1 = r0 + s->per < B ? r0 + s->per : B;\n"
    "  if (r0 >= r1) return;\n"
    "  /* the rows' part of each step's GEMM, on this thread alone */\n"
    "  nnc_simd_gemm_args g = s->g;\n"
    "  g.M = (int)(r1 - r0);\n  g.C += r0 * g.ldc;\n"
    "  for (int64_t step = 0; step < T; step++) {\n"
    "    const int64_t t = %s, next = t %s 1;\n"
    "    /* h: the initial state (h_n) at the first step, then the previous step's y */\n"
    "    g.A = step == 0 ? hn + r0 * H : y + (r0 * T + t %s 1) * H;\n"
    "    g.lda = step == 0 ? H : T * H;\n",
    rev ? "T - 1 - step" : "step", rev ? "-" : "+", rev ? "+" : "-");
  nnc_sb_printf(&body,
    "    nnc_simd_error e;\n"
    "    if (nnc_simd_gemm(&g, NULL, s->ws + (size_t)thread * s->each, s->each, &e)) {\n"
    "      if (!atomic_exchange(&s->failed, 1)) memcpy(s->msg, e.msg, sizeof s->msg);\n"
    "      return;\n    }\n");
  nnc_sb_printf(&body, "    /* their gate math, from the gates into %s */\n"
                       "    for (int64_t b = r0; b < r1; b++) {\n", lstm ? "c_n and y" : "y");
  nnc_sb_printf(&body, "      float *a = s->g.C + b * %d * H, *yr = y + (b * T + t) * H;\n", G);
  if (lstm) {
    nnc_sb_printf(&body,
      "      nnc_lstm_cell(a, s->bias, xw + (b * T + t) * 4 * H, H, cn + b * H, yr, NULL);   /* c = f c + i g, h = o tanh(c) */\n");
  } else {
    nnc_sb_printf(&body,
      "      const float *xr = xw + (b * T + t) * 3 * H, *hp = g.A + (b - r0) * g.lda;\n"
      "      for (int64_t j = 0; j < 2 * H; j++) a[j] += xr[j];\n"
      "      nnc_rnn_act(NNC_SIMD_ACT_SIGMOID, a, 2 * H);   /* r, z */\n"
      "      for (int64_t j = 0; j < H; j++) a[2 * H + j] = xr[2 * H + j] + a[j] * a[2 * H + j];\n"
      "      nnc_rnn_act(NNC_SIMD_ACT_TANH, a + 2 * H, H);   /* n = tanh(xw_n + r (W_hn h + b_hn)) */\n"
      "      for (int64_t j = 0; j < H; j++) yr[j] = (1.0f - a[H + j]) * a[2 * H + j] + a[H + j] * hp[j];   "
      "/* h = (1 - z) n + z h */\n");
  }
  nnc_sb_printf(&body,
    "      /* the row's xw at the next step, which %s reads: a miss (rows T * %d * H apart) taken now */\n"
    "      if (next >= 0 && next < T)\n"
    "        for (int64_t j = 0; j < %d * H; j += 16) __builtin_prefetch(xw + (b * T + next) * %d * H + j);\n    }\n  }\n",
    lstm ? "its cell" : "its gate math", G, G, G);
  nnc_sb_printf(b, "/* Task `task` of the scan: batch rows [r0, r1), every step. */\n");
  snprintf(pre, sizeof pre, "  k%d_scan *s = p;\n  const run_ctx *c = s->c;\n", ki);
  snprintf(head, sizeof head, "static void k%d_rows(void *p, int task, int thread)", ki);
  ec_emit_function(x, b, head, pre, "c->d", &body);
}

void cs_emit_scan_helpers(nnc_sb *b, bool act, bool lstm_cell) {
  if (lstm_cell)
    nnc_sb_printf(b,
    "/* Units j.. of an LSTM cell, a vector of them: gate k (PyTorch's i, f, g, o) is a[k H] + bias[k H]\n"
    " * (+ xw[k H] when xr is given: the step's product, the biases, the input's projection), then\n"
    " * c = f c + i g, h = o tanh(c), stored into h and, when h2 is given, h2 too; sigmoid and tanh\n"
    " * to an absolute error of ~2e-7 (kernels/simd_math.h, nnc_vsigmoid_gate). */\n"
    "static inline void nnc_lstm_vec(const float *a, const float *bh, const float *xr, int64_t H, float *c, float *h,\n"
    "                                float *h2) {\n"
    "  nnc_vf v[4];\n"
    "  for (int k = 0; k < 4; k++) {\n"
    "    v[k] = nnc_vadd(nnc_vload(a + k * H), nnc_vload(bh + k * H));\n"
    "    if (xr) v[k] = nnc_vadd(v[k], nnc_vload(xr + k * H));\n"
    "  }\n"
    "  nnc_vf cc = nnc_vfma(nnc_vsigmoid_gate(v[1]), nnc_vload(c), nnc_vmul(nnc_vsigmoid_gate(v[0]), nnc_vtanh_gate(v[2])));\n"
    "  nnc_vstore(c, cc);\n"
    "  nnc_vf hh = nnc_vmul(nnc_vsigmoid_gate(v[3]), nnc_vtanh_gate(cc));\n"
    "  nnc_vstore(h, hh);\n"
    "  if (h2) nnc_vstore(h2, hh);\n}\n\n"
    "/* A row's LSTM cell over its H units in one pass (nnc_lstm_vec); the last units through padded\n"
    " * copies, so every unit gets the same arithmetic. */\n"
    "static inline void nnc_lstm_cell(const float *a, const float *bh, const float *xr, int64_t H, float *c, float *h,\n"
    "                                 float *h2) {\n"
    "  int64_t j = 0;\n"
    "  for (; j + NNC_VW <= H; j += NNC_VW) nnc_lstm_vec(a + j, bh + j, xr ? xr + j : NULL, H, c + j, h + j, h2 ? h2 + j : NULL);\n"
    "  if (j < H) {\n"
    "    const size_t n = (size_t)(H - j) * sizeof(float);\n"
    "    float ta[4 * NNC_VW] = {0}, tb[4 * NNC_VW] = {0}, tx[4 * NNC_VW] = {0}, tc[NNC_VW] = {0}, th[NNC_VW];\n"
    "    for (int k = 0; k < 4; k++) {\n"
    "      memcpy(ta + k * NNC_VW, a + k * H + j, n);\n"
    "      memcpy(tb + k * NNC_VW, bh + k * H + j, n);\n"
    "      if (xr) memcpy(tx + k * NNC_VW, xr + k * H + j, n);\n"
    "    }\n"
    "    memcpy(tc, c + j, n);\n"
    "    nnc_lstm_vec(ta, tb, xr ? tx : NULL, NNC_VW, tc, th, NULL);\n"
    "    memcpy(c + j, tc, n);\n"
    "    memcpy(h + j, th, n);\n"
    "    if (h2) memcpy(h2 + j, th, n);\n"
    "  }\n}\n\n");
  if (act)
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
  nnc_sb_printf(b,
    "/* A scan over nthreads: *ntasks tasks of *per batch rows (one task when the scan's\n"
    " * T GEMMs g are too small to be worth waking a thread). Returns the workspace:\n"
    " * *packed bytes for B (W_hh, or [W_hh | W_ih] when the scan took its input's\n"
    " * projection: folded), *gates bytes for the gates [M, N], and when folded the rows\n"
    " * of [h | x_t] [M, K] and the summed biases [N] after them, then *each bytes per\n"
    " * thread for a task's GEMM (whole 64-byte lines). */\n"
    "static size_t nnc_rnn_split(const nnc_simd_gemm_args *g, int64_t T, int folded, int nthreads, int *ntasks,\n"
    "                            int *per, size_t *packed, size_t *gates, size_t *each) {\n"
    "  const double work = (double)g->M * g->N * g->K * (double)T;\n"
    "  *ntasks = work < 65536.0 || g->M < 2 ? 1 : g->M < nthreads ? g->M : nthreads;\n"
    "  *per = (g->M + *ntasks - 1) / *ntasks;\n"
    "  nnc_simd_gemm_args task = *g;\n"
    "  task.M = *per;\n"
    "  *packed = (nnc_simd_gemm_packed_b_floats(g) * sizeof(float) + 63) / 64 * 64;\n"
    "  *gates = (((size_t)g->M * (size_t)g->N + (folded ? (size_t)g->M * (size_t)g->K + (size_t)g->N : 0)) *\n"
    "            sizeof(float) + 63) / 64 * 64;\n"
    "  *each = (nnc_simd_gemm_workspace_bytes(&task, 1) + 63) / 64 * 64;\n"
    "  return *packed + *gates + (size_t)nthreads * *each;\n}\n\n");
}

nnc_status cs_emit_scan(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_node *proj, *n = nnc_kernel_scan(x->g, &x->s->k[ki], &proj, NULL);
  bool lstm = n->op == NNC_OP_LSTM_SCAN, rev = n->attrs.reverse;
  long long G = lstm ? 4 : 3, H = x->g->tensors[n->in[1]].shape[1].k;
  long long F = proj ? x->g->tensors[proj->in[1]].shape[1].k : 0;
  int h0 = n->nin > 3 ? n->in[3] : -1, c0 = n->nin > 4 ? n->in[4] : -1;
  scan_sizes(x, ki, n, G, H, F, b);
  scan_rows(x, ki, n, proj, H, b);

  const nnc_tensor *xw = &x->g->tensors[n->in[0]];
  char B[EC_EXPR], T[EC_EXPR];
  nnc_emit_dim_expr(x->g, xw->shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, xw->shape[1], "d->", T, sizeof T);
  nnc_sb body;
  nnc_sb_init(&body);
  if (proj) {
    ec_assign(x, &body, 2, "const float *w_ih", proj->in[1]);
    ec_assign(x, &body, 2, "const float *b_ih", proj->in[2]);
  }
  ec_assign(x, &body, 2, "const float *w", n->in[1]);
  ec_assign(x, &body, 2, "const float *bias", n->in[2]);
  if (h0 >= 0) ec_assign(x, &body, 2, "const float *h0", h0);
  if (c0 >= 0) ec_assign(x, &body, 2, "const float *c0", c0);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  ec_assign(x, &body, 2, "float *hn", n->out[1]);
  if (lstm) ec_assign(x, &body, 2, "float *cn", n->out[2]);
  if (proj) nnc_sb_printf(&body, "  const int64_t B = %s, T = %s, H = %lld, F = %lld;\n", B, T, H, F);
  else nnc_sb_printf(&body, "  const int64_t B = %s, T = %s, H = %lld;\n", B, T, H);
  nnc_sb_printf(&body,
    "  k%d_scan st = {.c = c};\n"
    "  k%d_sizes(d, &st.g);\n"
    "  /* the workspace: %s packed, the gates%s, then a slice per thread for a task's GEMM */\n"
    "  int ntasks;\n  size_t packed, gates;\n"
    "  int rc = ensure_ws(c->m, nnc_rnn_split(&st.g, T, %d, c->m->par.nthreads, &ntasks, &st.per, &packed, &gates,\n"
    "                                         &st.each));\n"
    "  if (rc) return rc;\n",
    ki, ki, proj ? "[W_hh | W_ih]" : "W_hh", proj ? ", the rows of [h | x_t]\n   * and the biases' sum" : "",
    proj ? 1 : 0);
  if (proj)
    nnc_sb_printf(&body,
      "  /* [W_hh | W_ih] into the micro-kernel's order once, part by part: every step multiplies by it */\n"
      "  nnc_simd_gemm_pack_b_part(&st.g, w, H, 0, (int)H, c->m->ws);\n"
      "  nnc_simd_gemm_pack_b_part(&st.g, w_ih, F, (int)H, (int)F, c->m->ws);\n"
      "  st.g.b_packed = c->m->ws;\n"
      "  st.g.C = (float *)((unsigned char *)c->m->ws + packed);\n"
      "  st.hx = st.g.C + B * 4 * H;\n"
      "  float *bsum = st.hx + B * (H + F);\n"
      "  for (int64_t j = 0; j < 4 * H; j++) bsum[j] = bias[j] + b_ih[j];\n"
      "  st.bias = bsum;\n");
  else
    nnc_sb_printf(&body,
      "  /* W_hh into the micro-kernel's order once: every step multiplies by it */\n"
      "  st.g.B = w;\n  nnc_simd_gemm_pack_b(&st.g, &c->m->par, c->m->ws);\n  st.g.b_packed = c->m->ws;\n"
      "  %s = bias;\n  st.g.C = (float *)((unsigned char *)c->m->ws + packed);\n",
      lstm ? "st.bias" : "st.g.bias");
  nnc_sb_printf(&body,
    "  st.ws = (unsigned char *)c->m->ws + packed + gates;\n"
    "  atomic_init(&st.failed, 0);\n");
  nnc_sb_printf(&body, "  /* the initial state: h_n holds h until the last step's is copied there%s */\n",
                lstm ? ", c_n holds c" : "");
  if (h0 >= 0) nnc_sb_printf(&body, "  memcpy(hn, h0, (size_t)(B * H) * sizeof *hn);\n");
  else nnc_sb_printf(&body, "  memset(hn, 0, (size_t)(B * H) * sizeof *hn);\n");
  if (lstm && c0 >= 0) nnc_sb_printf(&body, "  memcpy(cn, c0, (size_t)(B * H) * sizeof *cn);\n");
  else if (lstm) nnc_sb_printf(&body, "  memset(cn, 0, (size_t)(B * H) * sizeof *cn);\n");
  nnc_sb_printf(&body,
    "  if (ntasks > 1) c->m->par.parallel_for(c->m->par.pool, ntasks, k%d_rows, &st);\n"
    "  else k%d_rows(&st, 0, 0);\n"
    "  if (atomic_load(&st.failed)) return kernel_failed(c->m, %d, st.msg);\n", ki, ki, ki);
  nnc_sb_printf(&body, "  /* h_n: the last step's h */\n  if (T > 0)\n"
                       "    for (int64_t b = 0; b < B; b++) memcpy(hn + b * H, y + (b * T + %s) * H, H * sizeof *hn);\n"
                       "  return 0;\n", rev ? "0" : "T - 1");
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}

void cs_emit_scan_workspace(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_node *proj, *n = nnc_kernel_scan(x->g, &x->s->k[ki], &proj, NULL);
  char T[EC_EXPR];
  nnc_emit_dim_expr(x->g, x->g->tensors[n->in[0]].shape[1], "d->", T, sizeof T);
  nnc_sb_printf(b, "  {   /* kernel %d: %s packed, the gates%s, then a slice per thread for a task's GEMM */\n"
                   "    nnc_simd_gemm_args g;\n    k%d_sizes(d, &g);\n"
                   "    int ntasks, per;\n    size_t packed, gates, each;\n"
                   "    size_t w = nnc_rnn_split(&g, %s, %d, nthreads, &ntasks, &per, &packed, &gates, &each);\n"
                   "    if (w > need) need = w;\n  }\n",
                ki, proj ? "[W_hh | W_ih]" : "W_hh", proj ? ", the rows of [h | x_t]\n       * and the biases' sum" : "", ki, T,
                proj ? 1 : 0);
}
