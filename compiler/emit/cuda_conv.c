/* compiler/emit/cuda_conv.c — the kernels that read an im2col's windows
 * straight from its NHWC image, never stored: a windowed GEMM
 * (nnc_gemm_desc.windowed: a convolution whose im2col joined its GEMM) as
 * one call of templates/cuda/conv_wgmma.cuh, and a pool or depthwise
 * convolution (an im2col and a max, mean or weighted sum over its taps in
 * one reduce kernel) as one call of templates/cuda/pool.cuh. The fusion
 * pass makes such GEMMs only where nnc_cuda_gemm_windows says the target
 * runs them (wgmma: sm_90a) and they pay, and the template takes them
 * (16-bit types, channels a multiple of 8). */
#include <stdio.h>

#include "cuda.h"

/* Up to 128 outputs: there the GEMM is bound by reading the windows, which
 * gathering takes off the memory bus. Wider ones are bound by the tensor
 * cores, where cuBLASLt's kernels beat this one's 140-210 TFLOP/s (an
 * H200, ResNet-18's 256- and 512-channel layers: bench/NOTES.md) by more
 * than the im2col copy costs. */
int nnc_cuda_gemm_windows(const nnc_target_desc *t) { return t->cuda.wgmma_ok ? 128 : 0; }

/* `int` of dim i of tensor t: its constant, or the expression cast. */
static void dim_int(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  char e[EC_EXPR];
  nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", e, sizeof e);
  snprintf(buf, n, nnc_dim_is_const(x->g->tensors[t].shape[i]) ? "%.200s" : "(int)(%.190s)", e);
}

const char *cu_gemm_act(const nnc_gemm_desc *d) {
  switch (d->act) {
  case NNC_OP_RELU: return "NNC_CUDA_ACT_RELU";
  case NNC_OP_SILU: return "NNC_CUDA_ACT_SILU";
  case NNC_OP_GELU: return d->gelu_tanh ? "NNC_CUDA_ACT_GELU_TANH" : "NNC_CUDA_ACT_GELU_ERF";
  default: return "NNC_CUDA_ACT_NONE";
  }
}

/* `g.x` and the geometry of im2col node `im` (the image and the windows'
 * sizes), the fields conv_wgmma.cuh's and pool.cuh's arguments share. */
static void window_fields(const ec_ctx *x, const nnc_node *im, nnc_sb *body) {
  const nnc_window *w = &im->attrs.win;
  int img = im->in[0], cols = im->out[0];
  char b[256], h[256], wd[256], c[256], oh[256], ow[256];
  dim_int(x, img, 0, b, sizeof b);
  dim_int(x, img, 1, h, sizeof h);
  dim_int(x, img, 2, wd, sizeof wd);
  dim_int(x, img, 3, c, sizeof c);
  dim_int(x, cols, 1, oh, sizeof oh);
  dim_int(x, cols, 2, ow, sizeof ow);
  ec_assign(x, body, 2, "g.x", img);
  nnc_sb_printf(body, "  g.B = %s;\n  g.H = %s;\n  g.W = %s;\n  g.C = %s;\n  g.OH = %s;\n  g.OW = %s;\n", b, h, wd, c,
                oh, ow);
  nnc_sb_printf(body, "  g.KH = %d;\n  g.KW = %d;\n  g.SH = %d;\n  g.SW = %d;\n  g.PH = %d;\n  g.PW = %d;\n"
                      "  g.DH = %d;\n  g.DW = %d;\n",
                w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw);
}

void cu_conv_body(const ec_ctx *x, int ki, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  const nnc_node *im = &x->g->nodes[d->window];
  char n[256], lit[64];
  dim_int(x, d->out, x->g->tensors[d->out].rank - 1, n, sizeof n);
  nnc_sb_printf(body, "  nnc_cuda_conv_args<%s> g = {};\n", cu_stype(x, im->in[0]));
  window_fields(x, im, body);
  ec_assign(x, body, 2, "g.w", d->b);
  nnc_sb_printf(body, "  g.N = %s;\n", n);
  if (d->bias >= 0) ec_assign(x, body, 2, "g.bias", d->bias);
  if (d->residual >= 0) ec_assign(x, body, 2, "g.residual", d->residual);
  ec_assign(x, body, 2, "g.out", d->out);
  nnc_sb_printf(body, "  g.alpha = %s;\n  g.act = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit), cu_gemm_act(d));
  if (d->act_last) nnc_sb_printf(body, "  g.act_last = true;   /* act(conv + bias + residual) */\n");
  nnc_sb_printf(body, "  nnc_cuda_error e;\n  if (nnc_cuda_conv_wgmma(g, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                      "  return 0;\n", ki);
}

void cu_pool_body(const ec_ctx *x, int ki, nnc_sb *body) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *im = &x->g->nodes[k->nodes[0]], *r = &x->g->nodes[k->nodes[k->nnodes - 1]];
  nnc_sb_printf(body, "  nnc_cuda_pool_args<%s> g = {};\n", cu_stype(x, im->in[0]));
  window_fields(x, im, body);
  if (k->nnodes == 3) {
    /* a depthwise convolution: the windows times the [taps, C] weight, summed */
    nnc_sb_printf(body, "  g.op = NNC_POOL_DEPTHWISE;\n");
    ec_assign(x, body, 2, "g.w", x->g->nodes[k->nodes[1]].in[1]);
  } else {
    nnc_sb_printf(body, "  g.op = %s;\n", r->op == NNC_OP_MAX ? "NNC_POOL_MAX" : "NNC_POOL_MEAN");
  }
  ec_assign(x, body, 2, "g.out", r->out[0]);
  nnc_sb_printf(body, "  nnc_cuda_error e;\n  if (nnc_cuda_pool(g, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                      "  return 0;\n", ki);
}
