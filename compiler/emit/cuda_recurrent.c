/* compiler/emit/cuda_recurrent.c — lstm_scan and gru_scan (forward) on the
 * CUDA target: one call of nnc_cuda_rnn_scan (templates/cuda/recurrent.cuh),
 * a cooperative launch whose blocks keep their slice of W_hh in shared
 * memory for the whole scan and meet at a grid barrier between steps. The
 * loops of device_loops.c ran one thread per sequence (the LSTM forecaster,
 * B=64 T=48 H=64, took 33 ms on an H100); they remain for what the template
 * does not take: tensors of mixed or non-float dtypes, and the gradients. */
#include <stdio.h>

#include "cuda_recurrent.h"

/* The template takes a scan whose float tensors all have one dtype. */
static bool fits(const ec_ctx *x, const nnc_kernel *k) {
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  if (k->nnodes != 1 || (n->op != NNC_OP_LSTM_SCAN && n->op != NNC_OP_GRU_SCAN)) return false;
  nnc_dtype t = x->g->tensors[n->in[0]].dtype;
  if (t != NNC_F32 && t != NNC_BF16 && t != NNC_F16) return false;
  for (int i = 0; i < n->nin; i++)
    if (x->g->tensors[n->in[i]].dtype != t) return false;
  for (int i = 0; i < n->nout; i++)
    if (x->g->tensors[n->out[i]].dtype != t) return false;
  return true;
}

/* Whether an earlier kernel already included recurrent.cuh. */
static bool included(const ec_ctx *x, int ki) {
  for (int i = 0; i < ki; i++)
    if (x->s->k[i].kind == x->s->k[ki].kind && fits(x, &x->s->k[i])) return true;
  return false;
}

nnc_status cu_emit_recurrent(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  if (!fits(x, k)) return cu_emit_loop_kernel(x, ki, b, err);
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *xw = &x->g->tensors[n->in[0]];
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  char B[EC_EXPR], T[EC_EXPR], head[160];
  nnc_emit_dim_expr(x->g, xw->shape[0], "d->", B, sizeof B);
  nnc_emit_dim_expr(x->g, xw->shape[1], "d->", T, sizeof T);
  if (!included(x, ki))
    nnc_sb_printf(b, "#include \"kernels/recurrent.cuh\"   /* the recurrent scans' persistent kernel */\n\n");
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* %s, %s in time: one cooperative launch; each block keeps its units' rows of W_hh\n"
                       "     in shared memory, the steps meet at a grid barrier */\n",
                lstm ? "LSTM" : "GRU", n->attrs.reverse ? "backwards" : "forwards");
  nnc_sb_printf(&body, "  nnc_cuda_rnn_args<%s> a = {};\n  a.B = (int)(%s);\n  a.T = (int)(%s);\n  a.H = %lld;\n"
                       "  a.gru = %s;\n  a.reverse = %s;\n",
                cu_stype(x, n->in[0]), B, T, (long long)x->g->tensors[n->in[1]].shape[1].k, lstm ? "false" : "true",
                n->attrs.reverse ? "true" : "false");
  static const char *const in[5] = {"a.xw", "a.w", "a.bias", "a.h0", "a.c0"}, *const out[3] = {"a.y", "a.hn", "a.cn"};
  for (int i = 0; i < n->nin && i < 5; i++) ec_assign(x, &body, 2, in[i], n->in[i]);
  for (int i = 0; i < n->nout && i < 3; i++) ec_assign(x, &body, 2, out[i], n->out[i]);
  nnc_sb_printf(&body, "  nnc_cuda_error e;\n  if (nnc_cuda_rnn_scan(a, s, &e))\n"
                       "    return kernel_failed(m, %d, e.msg);\n  return 0;\n", ki);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}
