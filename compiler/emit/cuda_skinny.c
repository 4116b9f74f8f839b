/* compiler/emit/cuda_skinny.c — a GEMM's branch for a few rows: when M is
 * at most NNC_SKINNY_ROWS at run time (a decode step: one token a
 * sequence), one call of templates/cuda/gemm_skinny.cuh, which streams the
 * weight once over every SM (k split over a thread block cluster), before
 * the GEMM's usual path (cuBLASLt or nnc's wgmma GEMM) for larger M. The
 * same library runs the prefill (M = B x T) and the decode steps (M = B),
 * so the choice is made at run time; a constant M over 64 never takes it,
 * nor a vocabulary head on nnc's wgmma GEMM (cu_skinny_rule_of).
 * Needs sm_90 (clusters).
 *
 * NNC_SKINNY_ROWS is 16 unless the folder is built otherwise (make
 * NVCCFLAGS='-O3 -DNNC_SKINNY_ROWS=64'; 0 turns the branch off): under CUDA
 * graphs GPT-2's decode step gains with it up to 16 rows and loses above
 * (gemm_skinny.cuh has the figures). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

static bool digits(const char *e) { return e[0] && strspn(e, "0123456789") == strlen(e); }

static bool fits(const ec_ctx *x, const nnc_gemm_desc *d, const ec_gemm_shape *s) {
  const nnc_graph *g = x->g;
  nnc_dtype t = g->tensors[d->a].dtype, o = g->tensors[d->out].dtype;
  bool act = d->act == NNC_OP_NONE || d->act == NNC_OP_RELU || d->act == NNC_OP_GELU || d->act == NNC_OP_SILU;
  if (x->r->target->cuda.sm < 90 || !digits(s->K) || atoll(s->K) % 8 != 0) return false;
  if (digits(s->M) && atoll(s->M) > 64) return false;        /* never a few rows */
  if (!d->b_trans && (!digits(s->N) || atoll(s->N) % 8 != 0)) return false;   /* W [K, N]: 8 columns a load */
  return (t == NNC_BF16 || t == NNC_F16) && g->tensors[d->b].dtype == t && (o == t || o == NNC_F32) && !d->a_trans &&
         !d->windowed && !d->residual_mul && d->aux_kind == NNC_AUX_NONE && d->bgrad_from == NNC_BGRAD_NONE &&
         s->nb == 0 && act &&
         (d->bias < 0 || g->tensors[d->bias].dtype == t) && (d->residual < 0 || g->tensors[d->residual].dtype == o);
}

/* A vocabulary head (N K over 8M weights) takes the branch up to 16 rows
 * on cuBLASLt (A is re-read from L2 for every 64 columns, which above 16
 * rows costs more than the tensor-core GEMM's time) and never on nnc's
 * wgmma GEMM, whose 64 x 128 tiles up to 64 rows stream it faster at every
 * M (H200, GPT-2's head, bench/gpu_lm_head.cu: 22.6 against 24.0 us at 1
 * row, 24.6 against 31.9 at 16). */
cu_skinny_rule cu_skinny_rule_of(const ec_ctx *x, const nnc_gemm_desc *d, const ec_gemm_shape *s, bool on_wgmma) {
  if (!fits(x, d, s)) return CU_SKINNY_NONE;
  bool big = digits(s->N) && digits(s->K) && atoll(s->N) * atoll(s->K) > (8ll << 20);
  return !big ? CU_SKINNY_ROWS : on_wgmma ? CU_SKINNY_NONE : CU_SKINNY_16;
}

void cu_skinny_block(const ec_ctx *x, int ki, const ec_gemm_shape *s, cu_skinny_rule rule, const char *a, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  char lit[64];
  bool big = rule == CU_SKINNY_16;
  nnc_sb_printf(body, "  if (M <= NNC_SKINNY_ROWS%s) {   /* a few rows (a decode step): the skinny GEMM streams the weight "
                      "once%s */\n"
                      "    nnc_cuda_skinny_args<%s, %s> sk = {};\n    sk.M = M;\n    sk.N = N;\n    sk.K = K;\n",
                big ? " && M <= 16" : "",
                big ? "; above 16 rows the\n                      tensor-core GEMM is faster on a weight this large (bench/NOTES.md)" : "",
                cu_stype(x, d->a), cu_stype(x, d->out));
  if (a) nnc_sb_printf(body, "    sk.a = %s;\n", a);
  else ec_assign(x, body, 4, "sk.a", d->a);
  nnc_sb_printf(body, "    sk.lda = K;\n");
  ec_assign(x, body, 4, "sk.w", d->b);
  nnc_sb_printf(body, "    sk.ldw = %s;\n    sk.w_nk = %s;   /* W is %s */\n", d->b_trans ? "K" : "N",
                d->b_trans ? "true" : "false", d->b_trans ? "[N, K]" : "[K, N]");
  if (d->bias >= 0) ec_assign(x, body, 4, "sk.bias", d->bias);
  if (d->residual >= 0) ec_assign(x, body, 4, "sk.residual", d->residual);
  ec_assign(x, body, 4, "sk.c", d->out);
  nnc_sb_printf(body, "    sk.ldc = N;\n    sk.alpha = %s;\n    sk.act = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit),
                cu_gemm_act(d));
  if (d->act_last) nnc_sb_printf(body, "    sk.act_last = true;   /* act(A.B + bias + residual) */\n");
  if (cu_fixed_weight(x, ki, d->b))
    nnc_sb_printf(body, "    sk.w_fixed = true;   /* a weight: copied while the kernel before ends */\n");
  nnc_sb_printf(body, "    nnc_cuda_error se;\n    if (nnc_cuda_gemm_skinny(sk, s, &se)) return kernel_failed(m, %d, se.msg);\n"
                      "    return 0;\n  }\n", ki);
}
