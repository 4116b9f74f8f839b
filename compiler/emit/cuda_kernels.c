/* compiler/emit/cuda_kernels.c — the launcher of every kernel of a CUDA
 * model: GEMMs through cuBLASLt or nnc's own tensor-core GEMM, attention,
 * softmax, the norms, the cross-entropy and its gradient through
 * templates/cuda, everything else through the loops of cuda_loops.c.
 *
 * GEMMs run on cuBLASLt with what it can fuse: its epilogues add a bias and
 * apply ReLU or tanh-GELU, and its C operand adds a residual when there is no
 * activation. A LayerNorm or RMSNorm of A's rows runs as a norm kernel before
 * it; an erf-GELU, SiLU, sigmoid or tanh, or an activation followed by a
 * residual, as an epilogue kernel after it. On cuda-sm90a, a GEMM whose
 * output rows cuBLASLt would write padded and copy (N not a multiple of 8,
 * 1024 or more: GPT-2's LM head) runs on nnc's wgmma GEMM instead, which
 * writes rows of any alignment in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_recurrent.h"
#include "emit_targets.h"

#define EXPR EC_EXPR

static char *dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* `int` of a size expression: a constant as it is, an expression of dims cast. */
static char *as_int(const char *e, char *buf, size_t n) {
  bool constant = strspn(e, "0123456789") == strlen(e);
  snprintf(buf, n, constant ? "%.500s" : "(int)(%.490s)", e);
  return buf;
}


/* " * (int)(e)" to multiply by the batch e, "" when it is 1. */
static char *times(const char *e, char *buf, size_t n) {
  char i[EXPR + 16];
  if (strcmp(e, "1") == 0) buf[0] = 0;
  else snprintf(buf, n, " * %.500s", as_int(e, i, sizeof i));
  return buf;
}

/* ------------------------------------------------------------------ GEMM */

typedef struct gemm_plan {
  ec_gemm_shape s;
  int own;             /* >= 0: nnc's GEMM (templates/cuda/gemm.cuh) at tile configuration own_cfg[own] */
  bool pre_norm;       /* cuBLASLt path: a norm kernel writes A to the workspace first */
  bool post;           /* cuBLASLt path: an epilogue kernel applies act (+ residual) after */
  const char *lt_epi;  /* NNRT_EPI_* of the cuBLASLt call */
  bool lt_residual;    /* the residual rides cuBLASLt's C operand */
  int pad_n;           /* > 0: rows of the output padded to this many elements in the workspace */
  int split_n;         /* > 0: two cuBLASLt calls, columns [0, split_n) and the rest (N a multiple of 64 first) */
  int algo;            /* > 0: cuBLASLt's algo-th heuristic result (nnrt_cuda_gemm.algo), from --tune=measure */
  bool wg;             /* nnc's wgmma GEMM (templates/cuda/gemm_wgmma.cuh), after the norm kernel if pre_norm */
  char why[320];
} gemm_plan;

/* cuBLASLt's heuristic results after the first that --tune=measure tries:
 * "cublaslt-a1".."cublaslt-a3" (and "cublaslt-split-a1".. for the split). */
#define LT_ALGOS 3

/* nnc's GEMM's tile configurations (gemm.cuh's nnc_cuda_gemm_config), the
 * variants --tune=measure times against cuBLASLt. */
static const char *const own_cfg[] = {"128x256x32", "128x128x32", "128x128x64", "64x64x32"};
#define OWN_CFGS ((int)(sizeof own_cfg / sizeof own_cfg[0]))

static bool constant(const char *e) { return strspn(e, "0123456789") == strlen(e); }

/* The rows of the output padded to 16 bytes in the inputs' type, or 0 when
 * they need no padding or cannot have it (N not a constant, a residual on
 * cuBLASLt's C operand, which would need the same padding). */
static int pad_of(const ec_ctx *x, const nnc_gemm_desc *d, const ec_gemm_shape *s, bool lt_residual) {
  if (!constant(s->N) || lt_residual || d->aux_kind != NNC_AUX_NONE || d->bgrad_from != NNC_BGRAD_NONE) return 0;
  long long n = atoll(s->N), align = 16 / nnc_dtype_size(x->g->tensors[d->a].dtype);
  return n % align ? (int)((n + align - 1) / align * align) : 0;
}

/* The split of the columns into a multiple of 64 and the rest: into padded
 * rows (both calls' outputs start 16-byte aligned), B as rows of K (the rest
 * of B starts at a row), one call's batch. */
static bool split_fits(const nnc_gemm_desc *d, const ec_gemm_shape *s, int pad) {
  return pad && d->b_trans && s->first_inner == 0 && atoll(s->N) > 64;
}

/* nnc's GEMM takes bf16/f16 in and out alike, A as [M, K], one batch stride
 * per operand, constant N and K that are multiples of 8, and the activations
 * it has. */
static bool own_fits(const ec_ctx *x, const nnc_gemm_desc *d, const ec_gemm_shape *s) {
  nnc_dtype t = x->g->tensors[d->a].dtype;
  bool act = d->act == NNC_OP_NONE || d->act == NNC_OP_RELU || d->act == NNC_OP_GELU || d->act == NNC_OP_SILU;
  /* its pipeline is sm_80's: cp.async, ldmatrix and m16n8k16 products */
  return x->r->target->cuda.cp_async && !d->a_trans && d->aux_kind == NNC_AUX_NONE && !d->act_last && !d->residual_mul &&
         (t == NNC_BF16 || t == NNC_F16) &&
         x->g->tensors[d->out].dtype == t &&
         s->first_inner == 0 && constant(s->N) && constant(s->K) && atoll(s->N) % 8 == 0 && atoll(s->K) % 8 == 0 &&
         act;
}

/* nnc's wgmma GEMM (sm_90a): bf16/f16 operands, A as [M, K], B as [N, K], the output in
 * f32 or the operands' type, no batch, K a multiple of 8; its epilogue adds
 * the bias and a residual (in the output's type) and applies ReLU, SiLU or
 * either GELU, before or after the residual. A norm kernel may run before it. */
static bool wgmma_fits(const ec_ctx *x, const nnc_gemm_desc *d, const ec_gemm_shape *s) {
  nnc_dtype t = x->g->tensors[d->a].dtype, o = x->g->tensors[d->out].dtype;
  bool act = d->act == NNC_OP_NONE || d->act == NNC_OP_RELU || d->act == NNC_OP_SILU || d->act == NNC_OP_GELU;
  bool res = d->residual < 0 || (!d->residual_mul && x->g->tensors[d->residual].dtype == o);
  return x->r->target->cuda.wgmma_ok && !d->a_trans && d->aux_kind == NNC_AUX_NONE && (t == NNC_BF16 || t == NNC_F16) &&
         x->g->tensors[d->b].dtype == t && (o == t || o == NNC_F32) && d->b_trans && s->nb == 0 && constant(s->K) &&
         atoll(s->K) % 8 == 0 && act && res && d->bgrad_from == NNC_BGRAD_NONE;
}

/* The heuristic result an implementation's name asks for: "cublaslt-a2"
 * is "cublaslt" with algo 2; base gets the name without the suffix. */
static int algo_suffix(const char *impl, char *base, size_t n) {
  size_t len = strlen(impl);
  int algo = 0;
  if (len > 3 && impl[len - 3] == '-' && impl[len - 2] == 'a' && impl[len - 1] >= '1' &&
      impl[len - 1] <= '0' + LT_ALGOS && strncmp(impl, "cublaslt", 8) == 0) {
    algo = impl[len - 1] - '0';
    len -= 3;
  }
  snprintf(base, n, "%.*s", (int)len, impl);
  return algo;
}

/* Measured on an H100 (bench/NOTES.md, nnc --tune=measure): cuBLASLt runs
 * these GEMMs at about 600 TFLOP/s, nnc's mma.sync GEMM 3-4x slower even with
 * the LayerNorm prologue and the epilogue fused, so the analytic rule always
 * takes cuBLASLt. Rows of 1024 elements or more whose N is not a multiple of
 * 8 are computed into padded rows and, where B is [N, K], in two calls: the
 * columns up to a multiple of 64, then the rest (GPT-2's LM head, N = 50257:
 * 6.5 ms in one call, 2.1 ms in two). impl (from --tune=measure) names
 * another of gemm_variants' choices; "-aN" after a cuBLASLt one runs
 * cuBLASLt's N-th heuristic result instead of its first. On sm_90a those
 * padded rows are nnc's wgmma GEMM's instead: measured on an H100, GPT-2's
 * LM head (f32 logits, B=8 T=1024) takes 1.57 ms there against 2.11 ms. */
static nnc_status plan_gemm(const ec_ctx *x, const nnc_kernel *k, const char *impl, gemm_plan *p, nnc_error *err) {
  const nnc_gemm_desc *d = &k->d.gemm;
  memset(p, 0, sizeof *p);
  p->own = -1;
  const char *name = impl;
  char base[24];
  if (impl && impl[0]) {
    p->algo = algo_suffix(impl, base, sizeof base);
    impl = base;
  }
  ec_gemm_shape_of(x, k, &p->s);
  if (d->windowed) {
    snprintf(p->why, sizeof p->why, "nnc's implicit-GEMM convolution on wgmma: the windows gathered from the image, "
             "never stored");
    return NNC_OK;
  }
  bool gelu_tanh = d->act == NNC_OP_GELU && d->gelu_tanh;
  bool lt_act = d->act == NNC_OP_NONE || d->act == NNC_OP_RELU || gelu_tanh;
  bool act_res = d->act != NNC_OP_NONE && d->residual >= 0 && !d->act_last;
  if (d->aux_kind != NNC_AUX_NONE)   /* cuBLASLt's GELU aux epilogues: aux rows of 8s, in the output's type */
    lt_act = gelu_tanh && constant(p->s.N) && atoll(p->s.N) % 8 == 0 &&
             x->g->tensors[d->out].dtype == x->g->tensors[d->a].dtype;
  p->pre_norm = d->prologue != NNC_NORM_NONE;
  /* a residual that multiplies (SwiGLU's gate) is the epilogue kernel's: cuBLASLt's C only adds */
  p->post = !lt_act || act_res || d->residual_mul;
  p->lt_epi = d->bgrad_from != NNC_BGRAD_NONE                       ? (d->bgrad_from == NNC_BGRAD_B ? "NNRT_EPI_BGRAD_B" : "NNRT_EPI_BGRAD_A")
              : p->post || d->act == NNC_OP_NONE ? "NNRT_EPI_NONE"
              : d->aux_kind == NNC_AUX_SAVE     ? "NNRT_EPI_GELU_TANH_AUX"
              : d->aux_kind == NNC_AUX_ACT_GRAD ? "NNRT_EPI_DGELU_TANH"
              : d->act == NNC_OP_RELU          ? "NNRT_EPI_RELU"
                                               : "NNRT_EPI_GELU_TANH";
  /* act_last: cuBLASLt adds the residual (its C) before its epilogue, or before the epilogue kernel's activation */
  p->lt_residual = d->residual >= 0 && !d->residual_mul && (!p->post || d->act_last);
  if (cu_fp8_gemm(x, d)) {   /* --precision=fp8: one way, whatever --tune=measure found for bf16 */
    snprintf(p->why, sizeof p->why, "FP8: A's rows to e4m3 with a scale each%s, then cuBLASLt e4m3 x e4m3 with the "
             "row and channel scales%s (where cuBLASLt has no algorithm: %s)", p->pre_norm ? " by the norm kernel" : "",
             p->post ? ", then an epilogue kernel" : "",
             x->r->target->cuda.wgmma_ok ? "nnc's wgmma FP8 GEMM, rows of any N"
                                         : "unscaled f32 columns, then the scales and epilogue in a kernel");
    return NNC_OK;
  }
  int pad = pad_of(x, d, &p->s, p->lt_residual);
  const char *how = "by rule";
  bool wg_fits = wgmma_fits(x, d, &p->s);
  /* Not by rule for an activation cuBLASLt lacks: on an H200, BERT's
   * intermediate.dense (4096 x 1536 x 384, erf-GELU) took 58 us there
   * against 29 us for cuBLASLt and the epilogue kernel (bench/NOTES.md);
   * --tune=measure weighs it. */
  if ((!impl || !impl[0]) && pad >= 1024 && wg_fits) {
    p->wg = true;
  } else if (!impl || !impl[0]) {
    if (pad >= 1024) p->pad_n = pad;   /* narrow rows: not worth a copy */
    if (pad >= 1024 && split_fits(d, &p->s, pad)) p->split_n = (int)(atoll(p->s.N) / 64 * 64);
  } else if (strcmp(impl, "wgmma") == 0 && wg_fits) {
    p->wg = true;
    how = "measured";
  } else if (strcmp(impl, "cublaslt-padded") == 0 && pad && !p->algo) {
    p->pad_n = pad;
    how = "measured";
  } else if (strcmp(impl, "cublaslt-split") == 0 && split_fits(d, &p->s, pad)) {
    p->pad_n = pad;
    p->split_n = (int)(atoll(p->s.N) / 64 * 64);
    how = "measured";
  } else if (strcmp(impl, "cublaslt") == 0) {
    how = "measured";
  } else {
    for (int c = 0; c < OWN_CFGS && own_fits(x, d, &p->s); c++)
      if (strncmp(impl, "nnc-", 4) == 0 && strcmp(impl + 4, own_cfg[c]) == 0) p->own = c;
    if (p->own < 0)
      return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "kernel %d: expected one of its implementations, found \"%s\"",
                        (int)(k - x->s->k), name);
    snprintf(p->why, sizeof p->why, "nnc's tensor-core GEMM, tiles %s (measured)", own_cfg[p->own]);
    return NNC_OK;
  }
  bool widen = x->g->tensors[d->out].dtype != x->g->tensors[d->a].dtype;
  if (p->wg) {
    p->post = false;   /* its epilogue applies the activation and residual */
    snprintf(p->why, sizeof p->why, "nnc's wgmma GEMM%s, rows written in place%s%s (%s)",
             p->pre_norm ? " after a norm kernel" : "", widen ? ", f32 out" : "",
             d->act != NNC_OP_NONE && d->residual >= 0 ? ", the activation and residual in its epilogue"
             : d->act != NNC_OP_NONE                   ? ", the activation in its epilogue"
             : d->residual >= 0                        ? ", the residual in its epilogue"
                                                       : "",
             how);
    return NNC_OK;
  }
  char algo[48] = "";
  if (p->algo) snprintf(algo, sizeof algo, ", the heuristic's algorithm %d%s", p->algo, p->split_n ? " in the first call" : "");
  snprintf(p->why, sizeof p->why, "cuBLASLt%s%s%s%s%s%s%s (%s)", p->pre_norm ? " after a norm kernel" : "",
           d->bgrad_from != NNC_BGRAD_NONE ? ", the bias gradient (dy's column sums) in its epilogue" : "",
           p->split_n ? " in two calls (N a multiple of 64, then the rest)" : "",
           p->pad_n ? " into rows padded to 16 bytes, copied" : "", p->pad_n && widen ? " as f32" : widen ? ", f32 out" : "",
           algo, p->post ? ", then an epilogue kernel" : "", how);
  return NNC_OK;
}

/* The most a GEMM lists: the three cuBLASLt ways with the extra heuristic
 * results of plain and split (split needs padded rows, where nnc's GEMM does
 * not fit), or plain cuBLASLt with them and every tile configuration. */
_Static_assert(3 + 2 * LT_ALGOS + 1 <= NNC_MAX_VARIANTS && 1 + LT_ALGOS + OWN_CFGS + 1 <= NNC_MAX_VARIANTS,
               "NNC_MAX_VARIANTS holds every implementation of a GEMM");

/* The implementations of GEMM kernel k, the analytic rule's first; each of
 * "cublaslt" and "cublaslt-split" is followed by its "-a1".."-a3", cuBLASLt's
 * 2nd to 4th heuristic results (a GEMM for which the heuristic has fewer
 * fails in the probe and is not a candidate). */
static void gemm_variants(const ec_ctx *x, const nnc_kernel *k, nnc_kernel_variants *v) {
  const nnc_gemm_desc *d = &k->d.gemm;
  gemm_plan p;
  nnc_error e;
  memset(v, 0, sizeof *v);
  if (d->windowed || plan_gemm(x, k, NULL, &p, &e)) return;   /* a convolution has one implementation */
  int pad = pad_of(x, d, &p.s, p.lt_residual);
  /* the rule's choice first, then the other cuBLASLt ways */
  if (p.wg) snprintf(v->name[v->n++], sizeof v->name[0], "wgmma");
  const char *lt[3] = {"cublaslt", "cublaslt-padded", "cublaslt-split"};
  int first = p.split_n ? 2 : p.pad_n ? 1 : 0, nlt = !pad ? 1 : split_fits(d, &p.s, pad) ? 3 : 2;
  /* j = -1: the rule's way (unless it is wgmma's); then the others in order */
  for (int j = p.wg ? 0 : -1; j < nlt; j++) {
    int i = j < 0 ? first : j;
    if (j == first && !p.wg) continue;
    snprintf(v->name[v->n++], sizeof v->name[0], "%s", lt[i]);
    bool padded = i == 1;   /* tried with the heuristic's first result only */
    for (int a = 1; a <= LT_ALGOS && !padded; a++)
      snprintf(v->name[v->n++], sizeof v->name[0], "%s-a%d", lt[i], a);
  }
  for (int c = 0; c < OWN_CFGS && own_fits(x, d, &p.s); c++)
    snprintf(v->name[v->n++], sizeof v->name[0], "nnc-%s", own_cfg[c]);
  if (!p.wg && wgmma_fits(x, d, &p.s)) snprintf(v->name[v->n++], sizeof v->name[0], "wgmma");
  /* the key: sizes at the maxima, types and fusions */
  int64_t *max = malloc(((size_t)x->g->nsyms + 1) * sizeof *max);
  if (!max) {
    v->n = 0;
    return;
  }
  for (int i = 0; i < x->g->nsyms; i++) max[i] = x->g->syms[i].max;
  const nnc_tensor *a = &x->g->tensors[d->a], *o = &x->g->tensors[d->out];
  int64_t rows = 1;
  for (int i = 0; i < o->rank - 1; i++) rows *= nnc_dim_eval(o->shape[i], max);
  snprintf(v->key, sizeof v->key, "gemm rows=%lld N=%lld K=%lld ab=%s out=%s%s%s%s%s%s%s%s%s%s",
           (long long)rows, (long long)nnc_dim_eval(o->shape[o->rank - 1], max),
           (long long)nnc_dim_eval(a->shape[a->rank - (d->a_trans ? 2 : 1)], max), nnc_dtype_name(a->dtype),
           nnc_dtype_name(o->dtype), d->a_trans ? " a_trans" : "", d->b_trans ? " b_trans" : "", x->r->precision.tf32 ? " tf32" : "",
           d->prologue == NNC_NORM_LAYER ? " layernorm" : d->prologue == NNC_NORM_RMS ? " rmsnorm" : "",
           d->bias >= 0 ? " bias" : "", d->act == NNC_OP_NONE ? "" : d->gelu_tanh ? " gelu_tanh" : " ",
           d->act == NNC_OP_NONE || d->gelu_tanh ? "" : nnc_op_info_of(d->act)->name, d->residual >= 0 ? " residual" : "",
           d->bgrad_from != NNC_BGRAD_NONE ? " bgrad" : d->act_last ? " act_last" : "");
  free(max);
}

/* The sizes and strides every GEMM path shares, as `const int M = ..` lines. */
static void gemm_dims(const ec_ctx *x, const gemm_plan *p, nnc_sb *b) {
  char M[EXPR], N[EXPR], K[EXPR];
  nnc_sb_printf(b, "  const int M = %s, N = %s, K = %s;\n", as_int(p->s.M, M, sizeof M), as_int(p->s.N, N, sizeof N),
                as_int(p->s.K, K, sizeof K));
}

static void gemm_batch(const ec_ctx *x, const nnc_kernel *k, const gemm_plan *p, char *batch, size_t n, bool *sa,
                       bool *sb) {
  ec_dims_product(x, k->d.gemm.out, 0, p->s.nb, batch, n);
  *sa = p->s.nb && p->s.a_full[p->s.nb - 1];
  *sb = p->s.nb && p->s.b_full[p->s.nb - 1];
}

static const char *nnrt_dt(const ec_ctx *x, int t) {
  switch (x->g->tensors[t].dtype) {
  case NNC_BF16: return "NNRT_DT_BF16";
  case NNC_F16: return "NNRT_DT_F16";
  default: return "NNRT_DT_F32";
  }
}

/* The loop of an epilogue kernel after cuBLASLt: NNC_UNROLL elements a
 * thread, every load issued before the first store (one 2-byte load at a
 * time kept such a kernel at a third of the bandwidth, as the elementwise
 * loops found). arrays declares the loaded values ("ay[NNC_UNROLL], ..."),
 * loads fills them for element e, ex is y's new value for element u. */
static void post_loop(nnc_sb *b, const char *arrays, const char *loads, const char *ex) {
  nnc_sb_printf(b, "  NNC_LOOP_UNROLLED(e0, stride, n) {\n    float %s;\n"
                   "    NNC_UNROLL_FOR(u) {\n      if (e0 + u * stride >= n) break;\n"
                   "      const long long e = e0 + u * stride;\n%s    }\n"
                   "    NNC_UNROLL_FOR(u) {\n      if (e0 + u * stride >= n) break;\n"
                   "      nnc_st(&y[e0 + u * stride], %s);\n    }\n  }\n}\n\n",
                arrays, loads, ex);
}

/* The epilogue kernel of the cuBLASLt path: out = act(out) (+ residual),
 * named after its launcher fn (the probe has one launcher per
 * implementation, each cuBLASLt one with its epilogue kernel). */
static void emit_post_kernel(const ec_ctx *x, int ki, const char *fn, nnc_sb *b) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  nnc_node act = {0};
  act.op = d->act;
  act.attrs.gelu_tanh = d->gelu_tanh;
  char ex[1024];
  if (d->aux_kind != NNC_AUX_NONE) {
    /* SAVE: cuBLASLt wrote the activation's input into x; ACT_GRAD: the
     * product into y, times act'(x) here */
    bool grad = d->aux_kind == NNC_AUX_ACT_GRAD;
    if (grad) {
      act.op = NNC_OP_ACT_GRAD;
      act.attrs.act = d->act;
    }
    ec_node_expr(x, &act, "ax[u]", "ay[u]", false, d->out, ex, sizeof ex);
    const char *ty = cu_stype(x, d->out);
    nnc_sb_printf(b, "/* kernel %d's %s after cuBLASLt */\n", ki,
                  grad ? "activation's derivative at its saved input" : "activation of its saved input");
    nnc_sb_printf(b, "__global__ void %s_post(%s *y, const %s *x, long long n) {\n", fn, ty, ty);
    if (grad) post_loop(b, "ax[NNC_UNROLL], ay[NNC_UNROLL]", "      ax[u] = nnc_ld(x[e]);\n      ay[u] = nnc_ld(y[e]);\n", ex);
    else post_loop(b, "ax[NNC_UNROLL]", "      ax[u] = nnc_ld(x[e]);\n", ex);
    return;
  }
  ec_node_expr(x, &act, "ay[u]", "", false, d->out, ex, sizeof ex);
  const char *ty = cu_stype(x, d->out);
  bool res = d->residual >= 0 && !d->act_last;   /* act_last: cuBLASLt added it */
  const char *with = !res ? "" : d->residual_mul ? " times the residual" : " and residual";
  nnc_sb_printf(b, "/* kernel %d's activation%s after cuBLASLt */\n", ki, with);
  nnc_sb_printf(b, "__global__ void %s_post(%s *y, const %s *r, long long n) {\n", fn, ty, ty);
  char full[1100];
  snprintf(full, sizeof full, "%s%s", ex, !res ? "" : d->residual_mul ? " * ar[u]" : " + ar[u]");
  post_loop(b, res ? "ay[NNC_UNROLL], ar[NNC_UNROLL]" : "ay[NNC_UNROLL]",
            res ? "      ay[u] = nnc_ld(y[e]);\n      ar[u] = nnc_ld(r[e]);\n" : "      ay[u] = nnc_ld(y[e]);\n", full);
}

/* Batch dims [0, first_inner) of the output broadcast differently in A and B
 * than the inner ones: one cuBLASLt call per outer index, each on the inner
 * batch, A and B offset by the outer index along the dims they have. */
static void outer_loop(const ec_ctx *x, const nnc_kernel *k, const gemm_plan *p, const char *inner, nnc_sb *b) {
  const nnc_gemm_desc *d = &k->d.gemm;
  char outer[EXPR], dim[EXPR], st[EXPR];
  ec_dims_product(x, d->out, 0, p->s.first_inner, outer, sizeof outer);
  const char *ty = cu_stype(x, d->out), *ta = cu_stype(x, d->a), *tb = cu_stype(x, d->b);
  nnc_sb_printf(b, "  /* the batch dims before the last %d broadcast differently in A and B: a call per index */\n",
                p->s.nb - p->s.first_inner);
  nnc_sb_printf(b, "  for (long long o = 0; o < (long long)(%s); o++) {\n    long long rem = o, oa = 0, ob = 0;\n", outer);
  for (int dd = p->s.first_inner - 1; dd >= 0; dd--) {
    nnc_emit_dim_expr(x->g, x->g->tensors[d->out].shape[dd], "d->", dim, sizeof dim);
    nnc_sb_printf(b, "    {\n      const long long i = rem %% (%s);\n      rem /= (%s);\n", dim, dim);
    const int ops[2] = {d->a, d->b};
    const bool full[2] = {p->s.a_full[dd], p->s.b_full[dd]};
    for (int q = 0; q < 2; q++) {
      int r = x->g->tensors[ops[q]].rank, j = dd - (p->s.nb - (r - 2));
      if (!full[q] || j < 0) continue;
      ec_dims_product(x, ops[q], j + 1, r - 2, st, sizeof st);
      nnc_sb_printf(b, "      %s += i * (%s);\n", q ? "ob" : "oa", st);
    }
    nnc_sb_printf(b, "    }\n");
  }
  nnc_sb_printf(b, "    nnrt_cuda_gemm go = g;\n"
                   "    go.A = (const %s *)g.A + oa * M * K;\n    go.B = (const %s *)g.B + ob * K * N;\n"
                   "    go.D = (%s *)g.D + o * (long long)(%s) * M * N;\n", ta, tb, ty, inner);
  if (p->lt_residual) nnc_sb_printf(b, "    go.residual = (const %s *)g.residual + o * (long long)(%s) * M * N;\n", ty, inner);
  nnc_sb_printf(b, "    if (nnrt_cuda_gemm_run(m->blas, &go, s, &err)) return kernel_failed(m, %d, err.msg);\n  }\n",
                (int)(k - x->s->k));
}

/* The chosen implementation of kernel k: --tune=measure's, else "" (the rule's). */
static const char *impl_of(const ec_ctx *x, int k) { return x->r->tiles ? x->r->tiles[k].impl : ""; }

/* nnc's GEMM: one call of gemm.cuh with every fusion in its arguments. */
static void own_gemm_body(const ec_ctx *x, int ki, const gemm_plan *p, nnc_sb *body) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  char batch[EXPR], inner[EXPR], lit[64];
  bool sa, sb;
  gemm_batch(x, k, p, batch, sizeof batch, &sa, &sb);
  gemm_dims(x, p, body);
  nnc_sb_printf(body, "  nnc_cuda_gemm_args<%s> g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n  g.batch = %s;\n",
                cu_stype(x, d->a), as_int(batch, inner, sizeof inner));
  ec_assign(x, body, 2, "g.a", d->a);
  nnc_sb_printf(body, "  g.lda = K;\n");
  if (sa) nnc_sb_printf(body, "  g.stride_a = (long long)M * K;\n");
  ec_assign(x, body, 2, "g.b", d->b);
  nnc_sb_printf(body, "  g.ldb = %s;\n  g.b_trans = %d;\n", d->b_trans ? "K" : "N", d->b_trans ? 1 : 0);
  if (sb) nnc_sb_printf(body, "  g.stride_b = (long long)K * N;\n");
  if (d->bias >= 0) ec_assign(x, body, 2, "g.bias", d->bias);
  if (d->residual >= 0) {
    ec_assign(x, body, 2, "g.residual", d->residual);
    nnc_sb_printf(body, "  g.ldr = N;\n  g.stride_r = (long long)M * N;\n");
  }
  ec_assign(x, body, 2, "g.out", d->out);
  nnc_sb_printf(body, "  g.ldc = N;\n  g.stride_c = (long long)M * N;\n  g.alpha = %s;\n",
                ec_literal(d->alpha, false, lit, sizeof lit));
  nnc_sb_printf(body, "  g.act = %s;\n", cu_gemm_act(d));
  if (d->prologue != NNC_NORM_NONE) {
    nnc_sb_printf(body, "  g.norm = %s;\n", d->prologue == NNC_NORM_LAYER ? "NNC_CUDA_NORM_LAYER" : "NNC_CUDA_NORM_RMS");
    ec_assign(x, body, 2, "g.gamma", d->norm_gamma);
    if (d->norm_beta >= 0) ec_assign(x, body, 2, "g.beta", d->norm_beta);
    nnc_sb_printf(body, "  g.eps = %s;\n", ec_literal(d->norm_eps, false, lit, sizeof lit));
  }
  nnc_sb_printf(body, "  nnc_cuda_error e;\n"
                      "  if (nnc_cuda_gemm_ex(g, NNC_CUDA_GEMM_%s, m->ws, m->ws_size, s, &e))\n"
                      "    return kernel_failed(m, %d, e.msg);\n  return 0;\n", own_cfg[p->own], ki);
}

/* nnc's wgmma GEMM: one call of gemm_wgmma.cuh writing the output rows in
 * place (A is the normalized copy in the workspace after a norm kernel). */
static void wgmma_body(const ec_ctx *x, int ki, const gemm_plan *p, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  char lit[64];
  nnc_sb_printf(body, "  nnc_cuda_gemm_wgmma_args<%s, %s> g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n",
                cu_stype(x, d->a), cu_stype(x, d->out));
  if (p->pre_norm) nnc_sb_printf(body, "  g.a = A;\n");
  else ec_assign(x, body, 2, "g.a", d->a);
  nnc_sb_printf(body, "  g.lda = K;\n");
  ec_assign(x, body, 2, "g.b", d->b);
  nnc_sb_printf(body, "  g.ldb = K;\n");
  if (d->bias >= 0) ec_assign(x, body, 2, "g.bias", d->bias);
  if (d->residual >= 0) {
    ec_assign(x, body, 2, "g.residual", d->residual);
    nnc_sb_printf(body, "  g.ldr = N;\n");
  }
  if (d->act != NNC_OP_NONE) nnc_sb_printf(body, "  g.act = %s;\n", cu_gemm_act(d));
  if (d->act != NNC_OP_NONE && d->residual >= 0 && d->act_last) nnc_sb_printf(body, "  g.act_last = true;\n");
  nnc_sb_printf(body, "  g.alpha = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit));
  ec_assign(x, body, 2, "g.c", d->out);
  /* the instance with the epilogue only where there is one: it costs the plain product's stores */
  char inst[96] = "";
  if (d->act != NNC_OP_NONE || d->residual >= 0)
    snprintf(inst, sizeof inst, "<%s, %s, true>", cu_stype(x, d->a), cu_stype(x, d->out));
  nnc_sb_printf(body, "  g.ldc = N;\n%s  if (nnc_cuda_gemm_wgmma%s(g, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                      "  return 0;\n", p->pre_norm ? "" : "  nnc_cuda_error e;\n", inst, ki);
}

/* GEMM kernel ki as `static int NAME(m, c, s)` with implementation impl. */
/* After the cuBLASLt call: the epilogue kernel (p->post) and the return. */
static void emit_post_call(const ec_ctx *x, int ki, const gemm_plan *p, const char *name, const char *batch, nnc_sb *b,
                           nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  char bi[EC_EXPR + 32];
  if (p->post) {
    emit_post_kernel(x, ki, name, b);
    char pr[256] = "nullptr", pout[256];
    if (d->residual >= 0 && !d->act_last) ec_ptr(x, d->residual, pr, sizeof pr);
    if (d->aux_kind != NNC_AUX_NONE) ec_ptr(x, d->aux, pr, sizeof pr);
    nnc_sb_printf(body, "  const long long n = (long long)M * N%s;\n"
                        "  %s_post<<<nnc_loop_blocks((n + NNC_UNROLL - 1) / NNC_UNROLL), NNC_LOOP_THREADS, 0, s>>>(%s, %s, n);\n"
                        "  return launched(m, %d);\n", times(batch, bi, sizeof bi), name,
                  ec_ptr(x, d->out, pout, sizeof pout), pr, ki);
  } else if (!p->pad_n) {
    nnc_sb_printf(body, "  return 0;\n");
  }
}

static nnc_status emit_gemm(const ec_ctx *x, int ki, const char *impl, const char *name, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  gemm_plan p;
  nnc_status st = plan_gemm(x, k, impl, &p, err);
  if (st) return st;
  nnc_sb body;
  nnc_sb_init(&body);
  bool fp8 = cu_fp8_gemm(x, d);   /* cuda_fp8.c */
  bool skinny = p.own < 0 && !fp8 && cu_skinny_fits(x, d, &p.s);   /* cuda_skinny.c */
  nnc_sb_printf(&body, "  /* %s%s */\n", p.why, skinny ? "; nnc's skinny GEMM when M <= 64 if built with -DNNC_SKINNY_GEMM" : "");
  if (d->windowed) {
    cu_conv_body(x, ki, &body);
  } else if (p.own >= 0) {
    own_gemm_body(x, ki, &p, &body);
  } else {
    char batch[EXPR], bi[EXPR], lit[64], pa[256];
    bool sa, sb;
    gemm_batch(x, k, &p, batch, sizeof batch, &sa, &sb);
    gemm_dims(x, &p, &body);
    const char *A = "A";
    if (fp8 && (p.s.nb > 0 || d->a_trans || d->aux_kind != NNC_AUX_NONE || d->bgrad_from != NNC_BGRAD_NONE)) {
      nnc_sb_free(&body);
      return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "kernel %d: an e4m3 weight's GEMM must be a linear of one batch "
                        "item with A [M, K] and no aux or bias gradient", ki);
    }
    if (fp8) {
      cu_fp8_gemm_body(x, ki, p.lt_epi, p.lt_residual, d->act_last && !p.post, &body);
      emit_post_call(x, ki, &p, name, batch, b, &body);
    } else if (p.pre_norm) {
      /* the normalized rows of A, in the workspace */
      char pg[256], pbeta[256] = "nullptr";
      ec_ptr(x, d->norm_gamma, pg, sizeof pg);
      if (d->norm_beta >= 0) ec_ptr(x, d->norm_beta, pbeta, sizeof pbeta);
      nnc_sb_printf(&body, "  %s *A = (%s *)m->ws;   /* A's rows normalized */\n  nnc_cuda_error e;\n",
                    cu_stype(x, d->a), cu_stype(x, d->a));
      if (d->prologue == NNC_NORM_LAYER)
        nnc_sb_printf(&body, "  if (nnc_cuda_layernorm(M%s, K, %s, K, %s, %s, %s, A, K, s, &e))\n",
                      times(batch, bi, sizeof bi), ec_ptr(x, d->a, pa, sizeof pa), pg, pbeta,
                      ec_literal(d->norm_eps, false, lit, sizeof lit));
      else
        nnc_sb_printf(&body, "  if (nnc_cuda_rmsnorm(M%s, K, %s, K, %s, %s, A, K, s, &e))\n",
                      times(batch, bi, sizeof bi), ec_ptr(x, d->a, pa, sizeof pa), pg,
                      ec_literal(d->norm_eps, false, lit, sizeof lit));
      nnc_sb_printf(&body, "    return kernel_failed(m, %d, e.msg);\n", ki);
    }
    if (skinny) cu_skinny_block(x, ki, &p.s, p.pre_norm ? "A" : NULL, &body);
    if (!fp8 && p.wg) {
      wgmma_body(x, ki, &p, &body);
    } else if (!fp8) {
      char inner[EXPR], ii[EXPR];
      ec_dims_product(x, d->out, p.s.first_inner, p.s.nb, inner, sizeof inner);
      nnc_sb_printf(&body, "  nnrt_cuda_gemm g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n  g.batch = %s;\n",
                    as_int(inner, ii, sizeof ii));
      nnc_sb_printf(&body, "  g.ab = %s;\n  g.out = %s;\n", nnrt_dt(x, d->a), nnrt_dt(x, p.pad_n ? d->a : d->out));
      if (x->r->precision.tf32) nnc_sb_printf(&body, "  g.tf32 = true;   /* --precision=tf32 */\n");
      if (p.pre_norm) nnc_sb_printf(&body, "  g.A = %s;\n", A);
      else ec_assign(x, &body, 2, "g.A", d->a);
      nnc_sb_printf(&body, "%s", d->a_trans ? "  g.lda = M;\n  g.a_trans = true;   /* A is [K, M] */\n" : "  g.lda = K;\n");
      if (sa) nnc_sb_printf(&body, "  g.stride_a = (long long)M * K;\n");
      ec_assign(x, &body, 2, "g.B", d->b);
      nnc_sb_printf(&body, "  g.ldb = %s;\n  g.b_trans = %s;\n", d->b_trans ? "K" : "N", d->b_trans ? "true" : "false");
      if (sb) nnc_sb_printf(&body, "  g.stride_b = (long long)K * N;\n");
      if (d->bias >= 0) ec_assign(x, &body, 2, "g.bias", d->bias);
      if (d->bgrad_from != NNC_BGRAD_NONE) {
        ec_assign(x, &body, 2, "g.bgrad", d->bgrad);
        nnc_sb_printf(&body, "  /* written: the bias gradient, the column sums of dy (%s) */\n", d->bgrad_from == NNC_BGRAD_B ? "B" : "A^T");
      }
      if (p.lt_residual) {
        ec_assign(x, &body, 2, "g.residual", d->residual);
        nnc_sb_printf(&body, "  g.stride_r = (long long)M * N;\n");
        if (d->act_last && !p.post)
          nnc_sb_printf(&body, "  g.act_after_residual = true;   /* act(A.B + bias + residual) */\n");
      }
      if (p.pad_n) {
        nnc_sb_printf(&body, "  const int ldp = %d;   /* N rounded up to 16 bytes */\n"
                             "  %s *P = (%s *)((unsigned char *)m->ws + %s);\n  g.D = P;\n  g.ldd = ldp;\n"
                             "  g.stride_d = (long long)M * ldp;\n", p.pad_n, cu_stype(x, d->a), cu_stype(x, d->a),
                      p.pre_norm ? "pad_offset((size_t)M * K * sizeof *A)" : "0");
      } else {
        /* the activation's input goes where it is kept; the epilogue kernel makes out */
        bool to_aux = d->aux_kind == NNC_AUX_SAVE && p.post;
        ec_assign(x, &body, 2, "g.D", to_aux ? d->aux : d->out);
        nnc_sb_printf(&body, "  g.ldd = N;\n  g.stride_d = (long long)M * N;\n");
      }
      if (d->aux_kind != NNC_AUX_NONE && !p.post) {
        ec_assign(x, &body, 2, "g.aux", d->aux);
        nnc_sb_printf(&body, "  g.ldaux = N;\n  g.stride_aux = (long long)M * N;   /* %s */\n",
                      d->aux_kind == NNC_AUX_SAVE ? "written: the GELU's input, for its gradient"
                                                  : "read: the GELU's input, for gelu'");
      }
      nnc_sb_printf(&body, "  g.alpha = %s;\n  g.epilogue = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit), p.lt_epi);
      if (p.algo)
        nnc_sb_printf(&body, "  g.algo = %d;   /* cuBLASLt's heuristic result %d, not its first: --tune=measure timed it faster */\n",
                      p.algo, p.algo);
      nnc_sb_printf(&body, "  nnrt_error err = {};\n");
      if (p.s.first_inner > 0) {
        outer_loop(x, k, &p, ii, &body);
      } else if (p.split_n) {
        nnc_sb_printf(&body, "  const int N0 = %d;   /* the columns in cuBLASLt's tiles of 64 */\n  g.N = N0;\n"
                             "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n"
                             "  g.N = N - N0;\n  g.B = (const %s *)g.B + (long long)N0 * K;\n  g.D = P + N0;\n",
                      p.split_n, ki, cu_stype(x, d->b));
        if (p.algo) nnc_sb_printf(&body, "  g.algo = 0;   /* the narrow rest: the heuristic's first */\n");
        if (d->bias >= 0) nnc_sb_printf(&body, "  g.bias = (const %s *)g.bias + N0;\n", cu_stype(x, d->bias));
        nnc_sb_printf(&body, "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n", ki);
      } else {
        nnc_sb_printf(&body, "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n", ki);
      }
      if (p.pad_n) {
        char po[256];
        nnc_sb_printf(&body, "  if (M%s > 0)\n"
                             "    nnc_unpad_rows<<<M%s, NNC_UNPAD_THREADS, 0, s>>>(%s, P, N, ldp);\n"
                             "  if (launched(m, %d)) return %s_E_DEVICE;\n",
                      times(batch, bi, sizeof bi), times(batch, bi, sizeof bi), ec_ptr(x, d->out, po, sizeof po), ki, x->P);
        if (!p.post) nnc_sb_printf(&body, "  return 0;\n");
      }
      emit_post_call(x, ki, &p, name, batch, b, &body);
    }
  }
  char head[160];
  snprintf(head, sizeof head, "static int %s(%s_model *m, const run_args &c, cudaStream_t s)", name, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

static void gemm_workspace(const ec_ctx *x, int ki, const char *impl, nnc_sb *b);

/* A reduce kernel runs reduce.cuh: one node on floats (an integer one is a loop). */
static bool reduce_template(const ec_ctx *x, const nnc_kernel *k) {
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  return k->nnodes == 1 && x->g->tensors[n->in[0]].dtype != NNC_I32 && x->g->tensors[n->out[0]].dtype != NNC_I32;
}

void cu_emit_workspace(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  if (k->kind == NNC_KERNEL_ATTENTION || k->kind == NNC_KERNEL_ATTENTION_GRAD) {
    const nnc_attention_desc *a = ec_attn_desc(k);
    bool conv = a->mask >= 0 && x->g->tensors[a->mask].dtype != x->g->tensors[a->q].dtype;
    bool grad = k->kind == NNC_KERNEL_ATTENTION_GRAD;
    if (!conv && !grad) return;
    char me[EXPR], rows[EXPR];
    nnc_sb_printf(b, "  {\n    size_t w = 0;\n");
    if (conv)
      nnc_sb_printf(b, "    w += pad_offset((size_t)(%s) * sizeof(%s));   /* kernel %d: the mask as q's type */\n",
                    ec_elems(x, a->mask, me, sizeof me), cu_stype(x, a->q), ki);
    if (grad)
      nnc_sb_printf(b, "    w += (size_t)(%s) * sizeof(float);   /* kernel %d: a float per query row */\n",
                    ec_elems(x, a->lse, rows, sizeof rows), ki);
    nnc_sb_printf(b, "    if (w > need) need = w;\n  }\n");
    return;
  }
  if (k->kind == NNC_KERNEL_NORM_GRAD) {
    int xt = x->g->nodes[k->nodes[0]].in[0];
    const nnc_tensor *t = &x->g->tensors[xt];
    char rows[EXPR], cols[EXPR];
    ec_dims_product(x, xt, 0, t->rank - 1, rows, sizeof rows);
    ec_dims_product(x, xt, t->rank - 1, t->rank, cols, sizeof cols);
    nnc_sb_printf(b, "  {\n    size_t w = nnc_cuda_norm_bwd_workspace_bytes((int)(%s), (int)(%s));   /* kernel %d: "
                     "the gamma and beta sums' partials */\n    if (w > need) need = w;\n  }\n", rows, cols, ki);
    return;
  }
  if (k->kind == NNC_KERNEL_REDUCE && reduce_template(x, k)) {
    const nnc_node *n = &x->g->nodes[k->nodes[0]];
    const int axis = n->attrs.axis, rank = x->g->tensors[n->in[0]].rank;
    char outer[EXPR], len[EXPR], inner[EXPR];
    ec_dims_product(x, n->in[0], 0, axis, outer, sizeof outer);
    ec_dims_product(x, n->in[0], axis, axis + 1, len, sizeof len);
    ec_dims_product(x, n->in[0], axis + 1, rank, inner, sizeof inner);
    nnc_sb_printf(b, "  {\n    size_t w = nnc_cuda_reduce_workspace_bytes((int)(%s), (int)(%s), (int)(%s));   /* kernel %d: "
                     "the column sums' partials */\n    if (w > need) need = w;\n  }\n", outer, len, inner, ki);
    return;
  }
  if (k->kind == NNC_KERNEL_LOSS && x->g->nodes[k->nodes[0]].op == NNC_OP_CROSS_ENTROPY) {
    char rows[EXPR];
    nnc_sb_printf(b, "  {\n    size_t w = (size_t)(%s) * sizeof(float);   /* kernel %d: each row's loss */\n"
                     "    if (w > need) need = w;\n  }\n",
                  ec_elems(x, x->g->nodes[k->nodes[0]].in[1], rows, sizeof rows), ki);
    return;
  }
  if (k->kind != NNC_KERNEL_GEMM) return;
  /* the chosen implementation's, or in the probe every implementation's */
  nnc_kernel_variants v;
  gemm_variants(x, k, &v);
  if (!x->r->probe || v.n < 2) {
    v.n = 1;
    snprintf(v.name[0], sizeof v.name[0], "%s", impl_of(x, ki));
  }
  for (int i = 0; i < v.n; i++) gemm_workspace(x, ki, v.name[i], b);
}

static void gemm_workspace(const ec_ctx *x, int ki, const char *impl, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  gemm_plan p;
  nnc_error e;
  if (plan_gemm(x, k, impl, &p, &e)) return;
  if (cu_fp8_gemm(x, &k->d.gemm)) {
    cu_fp8_workspace(x, ki, p.s.M, p.s.N, p.s.K, b);
  } else if (p.own >= 0 && p.pre_norm) {
    char rows[EXPR];
    ec_dims_product(x, k->d.gemm.out, 0, x->g->tensors[k->d.gemm.out].rank - 1, rows, sizeof rows);
    nnc_sb_printf(b, "  {   /* kernel %d: row statistics of A, two floats a row */\n"
                     "    size_t w = (size_t)(%s) * 8;\n    if (w > need) need = w;\n  }\n", ki, rows);
  } else if (p.pre_norm || p.pad_n) {
    char a[EXPR], rows[EXPR];
    const nnc_tensor *o = &x->g->tensors[k->d.gemm.out];
    nnc_sb_printf(b, "  {   /* kernel %d:%s%s */\n    size_t w = 0;\n", ki, p.pre_norm ? " A normalized" : "",
                  p.pad_n ? " the output with padded rows" : "");
    if (p.pre_norm)
      nnc_sb_printf(b, "    w += pad_offset((size_t)(%s) * sizeof(%s));\n", ec_elems(x, k->d.gemm.a, a, sizeof a),
                    cu_stype(x, k->d.gemm.a));
    if (p.pad_n) {
      ec_dims_product(x, k->d.gemm.out, 0, o->rank - 1, rows, sizeof rows);
      nnc_sb_printf(b, "    w += (size_t)(%s) * %d * sizeof(%s);\n", rows, p.pad_n, cu_stype(x, k->d.gemm.a));
    }
    nnc_sb_printf(b, "    if (w > need) need = w;\n  }\n");
  }
}

/* ------------------------------------------------------------- attention */

/* The kv appends folded into a forward attention (nnc_attention_desc.append):
 * a.k_new / a.v_new and their strides, where the kv_append read its rows. */
static void emit_appends(const ec_ctx *x, const nnc_kernel *k, nnc_sb *b) {
  static const char *const names[2][2] = {{"k_new", "kn"}, {"v_new", "vn"}};
  if (k->kind != NNC_KERNEL_ATTENTION) return;
  const nnc_attention_desc *a = &k->d.attn;
  for (int i = 0; i < 2; i++) {
    const nnc_attn_append *ap = &a->append[i];
    if (!ap->on) continue;
    char off[EXPR], sb[EXPR], sh[EXPR], si[EXPR], p[256], cache[600], src[600];
    nnc_emit_dim_expr(x->g, ap->src.offset, "d->", off, sizeof off);
    nnc_emit_dim_expr(x->g, ap->src.sb, "d->", sb, sizeof sb);
    nnc_emit_dim_expr(x->g, ap->src.sh, "d->", sh, sizeof sh);
    nnc_emit_dim_expr(x->g, ap->src.si, "d->", si, sizeof si);
    const bool zero = strcmp(off, "0") == 0;
    if (i == 0 || !a->append[0].on)
      nnc_sb_printf(b, "  /* the kv appends run inside the attention (a copy kernel each would cost a launch a layer):\n"
                       "   * this call's T new rows become rows S - T .. S - 1 of the caches, attended to as they are written */\n");
    nnc_sb_printf(b, "  /* %s read in place: %s, into %s */\n", names[i][0], ec_note(x, ap->src.base, src, sizeof src),
                  ec_note(x, x->g->nodes[ap->node].in[0], cache, sizeof cache));
    nnc_sb_printf(b, "  a.%s = %s%s%s;\n  a.%s_sb = %s;\n  a.%s_sh = %s;\n  a.%s_st = %s;\n", names[i][0],
                  ec_ptr(x, ap->src.base, p, sizeof p), zero ? "" : " + ", zero ? "" : off, names[i][1], sb, names[i][1],
                  sh, names[i][1], si);
  }
}

/* The ropes folded into a forward attention (nnc_attention_desc.rope): q
 * read where its rope read x, and the rope's arguments (k_new is already
 * where k's rope read x: emit_appends). */
static void emit_ropes(const ec_ctx *x, const nnc_kernel *k, nnc_sb *b) {
  if (k->kind != NNC_KERNEL_ATTENTION) return;
  const nnc_attention_desc *a = &k->d.attn;
  const nnc_attn_rope *q = &a->rope[0], *kn = &a->rope[1];
  if (!q->on && !kn->on) return;
  const nnc_node *n = &x->g->nodes[(q->on ? q : kn)->node];
  char lit[64], src[600];
  nnc_sb_printf(b, "  /* the ropes of %s run inside the attention (a kernel each would cost a launch a layer): it turns\n"
                   "   * the rows as it reads them, entry i < %d of each row with i + %d by pos * %s^(-2i/%d) */\n",
                q->on && kn->on ? "q and the new key rows" : q->on ? "q" : "the new key rows", n->attrs.rot_dims / 2,
                n->attrs.rot_dims / 2, ec_literal(n->attrs.scalar, true, lit, sizeof lit), n->attrs.rot_dims);
  if (q->on) {
    char off[EXPR], sb[EXPR], sh[EXPR], si[EXPR], p[256];
    nnc_emit_dim_expr(x->g, q->src.offset, "d->", off, sizeof off);
    nnc_emit_dim_expr(x->g, q->src.sb, "d->", sb, sizeof sb);
    nnc_emit_dim_expr(x->g, q->src.sh, "d->", sh, sizeof sh);
    nnc_emit_dim_expr(x->g, q->src.si, "d->", si, sizeof si);
    const bool zero = strcmp(off, "0") == 0;
    nnc_sb_printf(b, "  /* q read before its rope: %s (turned in place there where the attention does not take its decode kernels) */\n",
                  ec_note(x, q->src.base, src, sizeof src));
    nnc_sb_printf(b, "  a.q = %s%s%s;\n  a.q_sb = %s;\n  a.q_sh = %s;\n  a.q_st = %s;\n  a.rope_q = 1;\n",
                  ec_ptr(x, q->src.base, p, sizeof p), zero ? "" : " + ", zero ? "" : off, sb, sh, si);
  }
  if (kn->on) nnc_sb_printf(b, "  a.rope_k = 1;   /* k_new holds the key rows before their rope */\n");
  if (n->nin > 1) {
    ec_assign(x, b, 2, "a.rope_pos", n->in[1]);
    /* positions [B, T]: a row of T each batch; [T]: one for all */
    nnc_sb_printf(b, "  a.rope_pos_sb = %s;\n", x->g->tensors[n->in[1]].rank == 2 ? "T" : "0");
  }
  nnc_sb_printf(b, "  a.rope_base = %s;\n  a.rope_dims = %d;\n", ec_literal(n->attrs.scalar, true, lit, sizeof lit),
                n->attrs.rot_dims);
}

/* Attention (nnc_cuda_attention) or its backward (nnc_cuda_attention_bwd):
 * sizes and the strides of contiguous operands, then pointers, the mask
 * (converted to q's type in the workspace when it is not) and the call. */
static nnc_status emit_attention(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  bool grad = k->kind == NNC_KERNEL_ATTENTION_GRAD;
  const nnc_attention_desc *a = ec_attn_desc(k);
  const nnc_tensor *q = &x->g->tensors[a->q];
  int r = q->rank;
  if (r == 2 && a->mask >= 0 && a->causal)
    return nnc_errorf(err, NNC_E_TARGET, k->loc,
                      "%s: attention on rank-2 scores with both a causal and a padding mask is not supported; "
                      "give q, k and v a batch dim", x->r->target->name);
  ec_attn_operand o[8];
  int n = ec_attn_operands(k, o);
  char T[EXPR], S[EXPR], D[EXPR], Dv[EXPR], t2[EXPR], s2[EXPR], d2[EXPR], v2[EXPR], lit[64];
  as_int(dim_of(x, a->q, r - 2, t2, sizeof t2), T, sizeof T);
  as_int(dim_of(x, a->k, r - 2, s2, sizeof s2), S, sizeof S);
  as_int(dim_of(x, a->q, r - 1, d2, sizeof d2), D, sizeof D);
  as_int(dim_of(x, a->v, r - 1, v2, sizeof v2), Dv, sizeof Dv);
  const char *ty = cu_stype(x, a->q);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int T = %s, S = %s, D = %s, Dv = %s;\n", T, S, D, Dv);
  nnc_sb_printf(&body, "  nnc_cuda_attn%s_args<%s> a = {};\n", grad ? "_bwd" : "", ty);
  /* grouped-query attention (ec_attn_grouped) only runs forward: its training step keeps the primitive ops */
  bool grouped = ec_attn_grouped(x->g, a);
  if (r >= 3) {
    char bt[EXPR], hd[EXPR], bi[EXPR], hi[EXPR];
    dim_of(x, a->q, 0, bt, sizeof bt);
    ec_dims_product(x, a->q, 1, r - 2, hd, sizeof hd);
    nnc_sb_printf(&body, "  const int heads = %s;\n", as_int(hd, hi, sizeof hi));
    nnc_sb_printf(&body, "  a.batch = %s;\n  a.heads = heads;\n  a.T = T;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n",
                  as_int(bt, bi, sizeof bi));
    if (grouped) {
      char g2[EXPR], gr[EXPR];
      as_int(dim_of(x, a->q, r - 3, g2, sizeof g2), gr, sizeof gr);
      nnc_sb_printf(&body, "  a.kv_group = %s;   /* grouped-query: query heads sharing a k/v head */\n", gr);
    }
    ec_attn_strides view;
    for (int i = 0; i < n; i++) {
      if (ec_attn_view(x, k, i, &view)) continue;   /* its view's strides are set where it is assigned */
      if (i == NNC_ATTN_Q && !grad && a->rope[0].on) continue;   /* q's are its rope's (emit_ropes) */
      const char *w = o[i].wide ? "Dv" : "D", *rows = o[i].keys ? "S" : "T", *p = o[i].strides;
      /* a batch dim of k or v that is 1 broadcasts: stride 0 */
      bool bcast = nnc_dim_eq_const(x->g->tensors[o[i].t].shape[0], 1) && !nnc_dim_eq_const(q->shape[0], 1);
      nnc_sb_printf(&body, "  a.%s_st = %s;\n  a.%s_sh = (long long)%s * %s;\n", p, w, p, rows, w);
      if (bcast) nnc_sb_printf(&body, "  a.%s_sb = 0;\n", p);
      else if (grouped && o[i].keys)
        nnc_sb_printf(&body, "  a.%s_sb = (long long)(heads / a.kv_group) * %s * %s;\n", p, rows, w);
      else nnc_sb_printf(&body, "  a.%s_sb = (long long)heads * %s * %s;\n", p, rows, w);
    }
  } else {
    /* rank 2 with a mask: query row i uses mask row i, so each row is a batch of one query */
    bool rows = a->mask >= 0;
    nnc_sb_printf(&body, "  a.batch = %s;\n  a.heads = 1;\n  a.T = %s;\n  a.S = S;\n  a.D = D;\n  a.Dv = Dv;\n",
                  rows ? "T" : "1", rows ? "1" : "T");
    for (int i = 0; i < n; i++) {
      const char *w = o[i].wide ? "Dv" : "D";
      nnc_sb_printf(&body, "  a.%s_st = %s;\n", o[i].strides, w);
      if (rows && !o[i].keys) nnc_sb_printf(&body, "  a.%s_sb = %s;\n", o[i].strides, w);
    }
  }
  nnc_sb_printf(&body, "  a.scale = %s;\n  a.causal = %d;\n", ec_literal(a->scale, false, lit, sizeof lit),
                a->causal ? 1 : 0);
  if (x->r->precision.tf32 && x->g->tensors[a->q].dtype == NNC_F32)
    nnc_sb_printf(&body, "  a.tf32 = 1;       /* --precision=tf32: the products on tf32 tensor cores */\n");
  /* operands read or written in place of a folded head split or merge get
   * their base and strides after the contiguous ones */
  ec_attn_strides unused;
  for (int i = 0; i < n; i++) {
    char lhs[16];
    snprintf(lhs, sizeof lhs, "a.%s", o[i].ptr);
    /* q behind a folded rope is never stored: emit_ropes points at the rope's x */
    if (i == NNC_ATTN_Q && !grad && a->rope[0].on) continue;
    if (!ec_attn_view(x, k, i, &unused)) ec_assign(x, &body, 2, lhs, o[i].t);
  }
  ec_attn_emit_views(x, k, "a.", NULL, &body);
  emit_appends(x, k, &body);
  emit_ropes(x, k, &body);
  if (a->lse >= 0) ec_assign(x, &body, 2, "a.lse", a->lse);
  bool conv = a->mask >= 0 && x->g->tensors[a->mask].dtype != x->g->tensors[a->q].dtype;
  if (conv) {
    /* the template reads the mask in q's type: convert it into the workspace */
    char me[EXPR], pm[256], note[600];
    ec_elems(x, a->mask, me, sizeof me);
    nnc_sb_printf(b, "/* kernel %d's padding mask %s in the type of q */\n"
                     "__global__ void k%d_mask(%s *y, const %s *m, long long n) {\n"
                     "  NNC_LOOP(e, n) nnc_st(&y[e], nnc_ld(m[e]));\n}\n\n",
                  ki, ec_note(x, a->mask, note, sizeof note), ki, ty, cu_stype(x, a->mask));
    nnc_sb_printf(&body, "  const long long mask_n = %s;\n  %s *mask = (%s *)m->ws;\n"
                         "  k%d_mask<<<nnc_loop_blocks(mask_n), NNC_LOOP_THREADS, 0, s>>>(mask, %s, mask_n);\n"
                         "  if (launched(m, %d)) return %s_E_DEVICE;\n  a.mask = mask;\n  a.mask_sb = S;\n",
                  me, ty, ty, ki, ec_ptr(x, a->mask, pm, sizeof pm), ki, x->P);
  } else if (a->mask >= 0) {
    ec_assign(x, &body, 2, "a.mask", a->mask);
    nnc_sb_printf(&body, "  a.mask_sb = S;\n");
  }
  if (grad)
    nnc_sb_printf(&body, "  /* each query row's sum of dout * out%s */\n"
                         "  a.delta = (float *)((unsigned char *)m->ws + %s);\n",
                  conv ? ", after the mask" : "", conv ? "pad_offset((size_t)mask_n * sizeof(*mask))" : "0");
  nnc_sb_printf(&body, "  nnc_cuda_error e;\n  if (nnc_cuda_attention%s(a, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                       "  return 0;\n", grad ? "_bwd" : "", ki);
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

/* k<ki>, whose body calls one template's host wrapper under `if (...)`
 * with an nnc_cuda_error e: its failure names the kernel. Frees body. */
static void template_call(const ec_ctx *x, int ki, nnc_sb *b, nnc_sb *body) {
  nnc_sb_printf(body, "    return kernel_failed(m, %d, e.msg);\n  return 0;\n", ki);
  char head[160];
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", body);
}

/* ------------------------------------------------------------------- rows */

/* layernorm_grad / rmsnorm_grad (norm_bwd.cuh): dx and the gamma (beta)
 * sums in one pass over the rows; the sums' partials per chunk of rows go
 * to the workspace and are added in chunk order (the same bits every run). */
static nnc_status emit_norm_grad(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  bool layer = n->op == NNC_OP_LAYERNORM_GRAD;
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], lit[64];
  ec_dims_product(x, n->in[0], 0, in->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  nnc_cuda_norm_bwd_args<%s> a = {};\n  a.rows = %s;\n  a.cols = %s;\n  a.rms = %d;\n  a.eps = %s;\n",
                cu_stype(x, n->in[0]), as_int(rows, ri, sizeof ri), as_int(cols, ci, sizeof ci), layer ? 0 : 1,
                ec_literal(n->attrs.eps, false, lit, sizeof lit));
  ec_assign(x, &body, 2, "a.x", n->in[0]);
  ec_assign(x, &body, 2, "a.gamma", n->in[1]);
  ec_assign(x, &body, 2, "a.dy", n->in[2]);
  ec_assign(x, &body, 2, "a.dx", n->out[0]);
  if (n->nin == 4) ec_assign(x, &body, 2, "a.dres", n->in[3]);   /* the residual's gradient, added to dx */
  ec_assign(x, &body, 2, "a.dgamma", n->out[1]);
  if (layer) ec_assign(x, &body, 2, "a.dbeta", n->out[2]);
  nnc_sb_printf(&body, "  a.ldx = a.lddy = a.lddx = a.lddres = a.cols;\n  a.work = (float *)m->ws;\n"
                       "  nnc_cuda_error e;\n  if (nnc_cuda_norm_bwd(a, s, &e))\n");
  template_call(x, ki, b, &body);
  return NNC_OK;
}

static nnc_status emit_row(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  /* softmax over another axis than the last: a loop */
  if (n->op == NNC_OP_SOFTMAX && n->attrs.axis != in->rank - 1) return cu_emit_loop_kernel(x, ki, b, err);
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], lit[64], px[256], py[256], pg[256], pb[256];
  ec_dims_product(x, n->in[0], 0, in->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
  as_int(rows, ri, sizeof ri);
  as_int(cols, ci, sizeof ci);
  ec_ptr(x, n->in[0], px, sizeof px);
  ec_ptr(x, n->out[0], py, sizeof py);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n  nnc_cuda_error e;\n", ri, ci);
  if (n->op == NNC_OP_SOFTMAX)
    nnc_sb_printf(&body, "  if (nnc_cuda_softmax(rows, cols, %s, cols, %s, cols, s, &e))\n", px, py);
  else if (n->op == NNC_OP_LAYERNORM)
    nnc_sb_printf(&body, "  if (nnc_cuda_layernorm(rows, cols, %s, cols, %s, %s, %s, %s, cols, s, &e))\n", px,
                  ec_ptr(x, n->in[1], pg, sizeof pg), ec_ptr(x, n->in[2], pb, sizeof pb),
                  ec_literal(n->attrs.eps, false, lit, sizeof lit), py);
  else
    nnc_sb_printf(&body, "  if (nnc_cuda_rmsnorm(rows, cols, %s, cols, %s, %s, %s, cols, s, &e))\n", px,
                  ec_ptr(x, n->in[1], pg, sizeof pg), ec_literal(n->attrs.eps, false, lit, sizeof lit), py);
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* ---------------------------------------------------------------- reduce */

/* A sum, mean or max over one axis of a float tensor through reduce.cuh
 * (coalesced warps; an integer one stays a loop). */
static nnc_status emit_reduce(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  if (cu_is_pool(x, ki)) {
    nnc_sb body;
    nnc_sb_init(&body);
    cu_pool_body(x, ki, &body);
    char head[160];
    snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
    ec_emit_function(x, b, head, NULL, "&c.d", &body);
    return NNC_OK;
  }
  if (!reduce_template(x, k)) return cu_emit_loop_kernel(x, ki, b, err);
  const int axis = n->attrs.axis, rank = g->tensors[n->in[0]].rank;
  char outer[EXPR], len[EXPR], inner[EXPR], oi[EXPR], li[EXPR], ii[EXPR], px[256], py[256];
  ec_dims_product(x, n->in[0], 0, axis, outer, sizeof outer);
  ec_dims_product(x, n->in[0], axis, axis + 1, len, sizeof len);
  ec_dims_product(x, n->in[0], axis + 1, rank, inner, sizeof inner);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int outer = %s, len = %s, inner = %s;\n  nnc_cuda_error e;\n", as_int(outer, oi, sizeof oi),
                as_int(len, li, sizeof li), as_int(inner, ii, sizeof ii));
  nnc_sb_printf(&body, "  if (nnc_cuda_reduce(%s, outer, len, inner, %s, %s, m->ws, m->ws_size, s, &e))\n",
                n->op == NNC_OP_MAX ? "NNC_REDUCE_MAX" : n->op == NNC_OP_MEAN ? "NNC_REDUCE_MEAN" : "NNC_REDUCE_SUM",
                ec_ptr(x, n->in[0], px, sizeof px), ec_ptr(x, n->out[0], py, sizeof py));
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* ------------------------------------------------------------------ moves */

/* A swap of the last two axes through transpose.cuh (a tile at a time);
 * other moves are loops. */
static nnc_status emit_move(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  if (n->op == NNC_OP_LSTM_SCAN || n->op == NNC_OP_GRU_SCAN) return cu_emit_recurrent(x, ki, b, err);
  if (n->op == NNC_OP_ALL_REDUCE) return cu_emit_all_reduce(x, ki, b, err);
  if (n->op == NNC_OP_ALL_GATHER) return cu_emit_all_gather(x, ki, b, err);
  if (n->op == NNC_OP_RANK_SLICE) return cu_emit_rank_slice(x, ki, b, err);
  if (n->op == NNC_OP_CE_SHARD || n->op == NNC_OP_CE_SHARD_GRAD) return cu_emit_ce_shard(x, ki, b, err);
  const int rank = g->tensors[n->in[0]].rank;
  bool swap = k->nnodes == 1 && n->op == NNC_OP_TRANSPOSE && rank >= 2 &&
              g->tensors[n->in[0]].dtype == g->tensors[n->out[0]].dtype && n->attrs.perm[rank - 2] == rank - 1 &&
              n->attrs.perm[rank - 1] == rank - 2;
  for (int i = 0; swap && i < rank - 2; i++) swap = n->attrs.perm[i] == i;
  if (!swap) return cu_emit_loop_kernel(x, ki, b, err);
  char batch[EXPR], rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], px[256], py[256];
  ec_dims_product(x, n->in[0], 0, rank - 2, batch, sizeof batch);
  dim_of(x, n->in[0], rank - 2, rows, sizeof rows);
  dim_of(x, n->in[0], rank - 1, cols, sizeof cols);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n  nnc_cuda_error e;\n", as_int(rows, ri, sizeof ri),
                as_int(cols, ci, sizeof ci));
  char bl[EXPR + 20];
  snprintf(bl, sizeof bl, strcmp(batch, "1") == 0 ? "%s" : "(long long)(%s)", batch);
  nnc_sb_printf(&body, "  if (nnc_cuda_transpose_last2(%s, rows, cols, %s, %s, s, &e))\n", bl,
                ec_ptr(x, n->in[0], px, sizeof px), ec_ptr(x, n->out[0], py, sizeof py));
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* ------------------------------------------------------------------- loss */

/* The cross-entropy and its gradient through softmax.cuh: a row a warp or
 * a block (the loops' one thread a row took GPT-2's loss, 1024 rows of
 * 50257 logits, 7 s on an H100); the loss's rows go to the workspace, then
 * one block adds them in order. */
static nnc_status emit_loss(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_graph *g = x->g;
  bool grad = n->op == NNC_OP_CROSS_ENTROPY_GRAD;
  int scalar = grad ? n->in[2] : n->out[0];   /* d loss, or the loss */
  nnc_dtype lt = g->tensors[n->in[0]].dtype, tt = g->tensors[n->in[1]].dtype, st = g->tensors[scalar].dtype;
  if (tt != NNC_I32 || st != NNC_F32 || (grad && g->tensors[n->out[0]].dtype != lt))
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "%s: kernel %d (%s): expected i32 targets, an f32 %s%s; found %s, %s, "
                      "a %s gradient", x->r->target->name, ki, nnc_op_info_of(n->op)->name, grad ? "d loss" : "loss",
                      grad ? " and the gradient in the logits' type" : "", nnc_dtype_name(tt), nnc_dtype_name(st),
                      nnc_dtype_name(g->tensors[n->out[0]].dtype));
  const nnc_tensor *l = &g->tensors[n->in[0]];
  char rows[EXPR], cols[EXPR], ri[EXPR], ci[EXPR], px[256], pt[256], ps[256], py[256];
  ec_dims_product(x, n->in[0], 0, l->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], l->rank - 1, cols, sizeof cols);
  ec_ptr(x, n->in[0], px, sizeof px);
  ec_ptr(x, n->in[1], pt, sizeof pt);
  ec_ptr(x, scalar, ps, sizeof ps);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  const int rows = %s, cols = %s;\n  nnc_cuda_error e;\n", as_int(rows, ri, sizeof ri),
                as_int(cols, ci, sizeof ci));
  if (grad)
    nnc_sb_printf(&body, "  if (nnc_cuda_cross_entropy_grad(rows, cols, %s, cols, %s, %s, %s, cols, s, &e))\n", px, pt,
                  ps, ec_ptr(x, n->out[0], py, sizeof py));
  else
    nnc_sb_printf(&body, "  if (nnc_cuda_cross_entropy(rows, cols, %s, cols, %s, (float *)m->ws, %s, s, &e))\n", px,
                  pt, ps);
  template_call(x, ki, b, &body);
  return NNC_OK;
}

/* A GEMM kernel: its implementation, or in the probe every implementation
 * (k<i>_v<j>) behind k<i>, which runs the one probe_variant[i] names. */
static nnc_status emit_gemm_kernel(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  char name[32];
  snprintf(name, sizeof name, "k%d", ki);
  nnc_kernel_variants v;
  gemm_variants(x, &x->s->k[ki], &v);
  if (!x->r->probe || v.n < 2) return emit_gemm(x, ki, impl_of(x, ki), name, b, err);
  for (int i = 0; i < v.n; i++) {
    snprintf(name, sizeof name, "k%d_v%d", ki, i);
    nnc_sb_printf(b, "/* implementation %d: %s */\n", i, v.name[i]);
    nnc_status st = emit_gemm(x, ki, v.name[i], name, b, err);
    if (st) return st;
  }
  nnc_sb_printf(b, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s) {\n  switch (probe_variant[%d]) {\n",
                ki, x->p, ki);
  for (int i = 1; i < v.n; i++) nnc_sb_printf(b, "  case %d: return k%d_v%d(m, c, s);\n", i, ki, i);
  nnc_sb_printf(b, "  default: return k%d_v0(m, c, s);\n  }\n}\n\n", ki);
  return NNC_OK;
}

/* The probe's <p>_tune: each implementation of every kernel that has
 * several, timed alone on the buffers of the run before (the harness's
 * --tune stages the inputs and runs forward once first). */
static void emit_tune(const ec_ctx *x, nnc_sb *b) {
  const char *p = x->p;
  nnc_sb_printf(b,
    "/* nnc --tune=measure's probe: \"gpu NAME\", then one line per implementation,\n"
    " * \"tune KERNEL IMPLEMENTATION MICROSECONDS\" (mean of %d launches after 3),\n"
    " * or \"tune KERNEL IMPLEMENTATION failed: WHY\". */\n"
    "extern \"C\" int %s_tune(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out, FILE *report) {\n"
    "  run_args c;\n  c.arena = m->arena;\n  c.weights = m->weights;\n  c.d = *d;\n  c.in = *in;\n  c.out = *out;\n%s"
    "  cudaStream_t s = m->stream;\n  cudaDeviceProp prop;\n"
    "  if (cudaGetDeviceProperties(&prop, m->device) != cudaSuccess) return fail(m, %s_E_DEVICE, \"no device properties\");\n"
    "  fprintf(report, \"gpu %%s\\n\", prop.name);\n"
    "  cudaEvent_t t0, t1;\n"
    "  if (cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess)\n"
    "    return fail(m, %s_E_DEVICE, \"creating events\");\n"
    "  static const struct {\n    int k, n;\n    const char *name[%d];\n  } list[] = {\n",
    20, p, p, p, p, p, ec_tp_rank_line(x), x->P, x->P, NNC_MAX_VARIANTS);
  for (int ki = 0; ki < x->s->nk; ki++) {
    if (x->s->k[ki].kind != NNC_KERNEL_GEMM) continue;
    nnc_kernel_variants v;
    gemm_variants(x, &x->s->k[ki], &v);
    if (v.n < 2) continue;
    nnc_sb_printf(b, "    {%d, %d, {", ki, v.n);
    for (int i = 0; i < v.n; i++) nnc_sb_printf(b, "%s\"%s\"", i ? ", " : "", v.name[i]);
    nnc_sb_printf(b, "}},\n");
  }
  nnc_sb_printf(b, "  };\n"
    "  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {\n"
    "    for (int v = 0; v < list[i].n; v++) {\n"
    "      probe_variant[list[i].k] = v;\n"
    "      int rc = 0;\n"
    "      for (int r = 0; !rc && r < 3; r++) rc = run_kernel(list[i].k, m, c, s);\n"
    "      cudaEventRecord(t0, s);\n"
    "      for (int r = 0; !rc && r < 20; r++) rc = run_kernel(list[i].k, m, c, s);\n"
    "      cudaEventRecord(t1, s);\n"
    "      cudaError_t ce = cudaStreamSynchronize(s);\n"
    "      float ms = 0;\n"
    "      if (!rc && ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, t0, t1);\n"
    "      if (rc || ce != cudaSuccess)\n"
    "        fprintf(report, \"tune %%d %%s failed: %%s\\n\", list[i].k, list[i].name[v], rc ? m->err : cudaGetErrorString(ce));\n"
    "      else\n"
    "        fprintf(report, \"tune %%d %%s %%.3f\\n\", list[i].k, list[i].name[v], ms * 1000.0 / 20);\n"
    "      fflush(report);\n"
    "      (void)cudaGetLastError();\n"
    "    }\n"
    "    probe_variant[list[i].k] = 0;\n"
    "  }\n"
    "  cudaEventDestroy(t0);\n  cudaEventDestroy(t1);\n  return 0;\n}\n\n");
  (void)p;
}

/* run_kernel(k, m, c, s): the probe's way to launch one kernel by number. */
static void emit_run_kernel(const ec_ctx *x, nnc_sb *b) {
  nnc_sb_printf(b, "static int run_kernel(int k, %s_model *m, const run_args &c, cudaStream_t s) {\n  switch (k) {\n", x->p);
  for (int ki = 0; ki < x->s->nk; ki++)
    if (x->s->k[ki].kind == NNC_KERNEL_GEMM) nnc_sb_printf(b, "  case %d: return k%d(m, c, s);\n", ki, ki);
  nnc_sb_printf(b, "  default: return 0;\n  }\n}\n\n");
}

nnc_status cu_emit_kernels(const ec_ctx *x, nnc_sb *b, nnc_error *err) {
  nnc_sb_printf(b, "/* ---------------------------------------------------------- the kernels */\n\n");
  bool own = false, wg = false, conv = false, pool = false, skinny = false;   /* which of nnc's GEMMs (and pools) a kernel uses */
  for (int ki = 0; ki < x->s->nk; ki++) {
    gemm_plan p;
    nnc_error e;
    pool |= cu_is_pool(x, ki);
    if (x->s->k[ki].kind != NNC_KERNEL_GEMM) continue;
    conv |= x->s->k[ki].d.gemm.windowed;
    nnc_kernel_variants v;
    gemm_variants(x, &x->s->k[ki], &v);
    for (int i = 0; x->r->probe && i < v.n; i++) {
      own |= strncmp(v.name[i], "nnc-", 4) == 0;
      wg |= strcmp(v.name[i], "wgmma") == 0;
    }
    if (!x->r->probe && !plan_gemm(x, &x->s->k[ki], impl_of(x, ki), &p, &e)) {
      own |= p.own >= 0;
      wg |= p.wg;
    }
    if (!plan_gemm(x, &x->s->k[ki], impl_of(x, ki), &p, &e))
      skinny |= p.own < 0 && cu_skinny_fits(x, &x->s->k[ki].d.gemm, &p.s);
  }
  if (own) nnc_sb_printf(b, "#include \"kernels/gemm.cuh\"   /* nnc's tensor-core GEMM */\n");
  if (wg) nnc_sb_printf(b, "#include \"kernels/gemm_wgmma.cuh\"   /* nnc's wgmma GEMM (sm_90a) */\n");
  if (conv) nnc_sb_printf(b, "#include \"kernels/conv_wgmma.cuh\"   /* nnc's implicit-GEMM convolution (sm_90a) */\n");
  if (pool) nnc_sb_printf(b, "#include \"kernels/pool.cuh\"   /* pools and depthwise convolutions from the image */\n");
  if (skinny) nnc_sb_printf(b, "#include \"kernels/gemm_skinny.cuh\"   /* GEMMs of a few rows (decode steps) */\n");
  if (own || wg || conv || pool || skinny) nnc_sb_printf(b, "\n");
  if (x->r->probe)
    nnc_sb_printf(b, "/* The probe's choice of implementation per kernel (0: the analytic rule's). */\n"
                     "static int probe_variant[NKERNELS];\n\n");
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    char where[300], ops[600], name[300];
    ec_where(k->loc, where, sizeof where);
    ec_kernel_ops(x, ki, ops, sizeof ops);
    nnc_emit_comment(ec_kernel_name(x, ki), name, sizeof name);
    if (k->kind == NNC_KERNEL_VIEW) continue;
    nnc_sb_printf(b, "/* %s  %s: %s  (kernel %d, %s) */\n", where, name, ops, ki, nnc_kernel_kind_name(k->kind));
    nnc_status st = NNC_OK;
    switch (k->kind) {
    case NNC_KERNEL_GEMM: st = emit_gemm_kernel(x, ki, b, err); break;
    case NNC_KERNEL_ATTENTION:
    case NNC_KERNEL_ATTENTION_GRAD: st = emit_attention(x, ki, b, err); break;
    case NNC_KERNEL_ROW: st = emit_row(x, ki, b, err); break;
    case NNC_KERNEL_NORM_GRAD: st = emit_norm_grad(x, ki, b); break;
    case NNC_KERNEL_LOSS: st = emit_loss(x, ki, b, err); break;
    case NNC_KERNEL_REDUCE: st = emit_reduce(x, ki, b, err); break;
    case NNC_KERNEL_MOVE: st = emit_move(x, ki, b, err); break;
    default: st = cu_emit_loop_kernel(x, ki, b, err); break;
    }
    if (st) return st;
  }
  ec_emit_costs(x, b);
  if (x->r->probe) {
    emit_run_kernel(x, b);
    emit_tune(x, b);
  }
  return NNC_OK;
}

nnc_status nnc_cuda_variants(const nnc_emit_request *r, nnc_kernel_variants *out, nnc_error *err) {
  ec_ctx x;
  nnc_status st = ec_ctx_init(&x, r, err);
  if (st) return st;
  for (int k = 0; k < r->s->nk; k++) {
    memset(&out[k], 0, sizeof out[k]);
    if (r->s->k[k].kind == NNC_KERNEL_GEMM) gemm_variants(&x, &r->s->k[k], &out[k]);
  }
  ec_ctx_free(&x);
  return NNC_OK;
}
