/* compiler/emit/cuda_gemm.c — the launcher of every GEMM kernel of a CUDA
 * model: the plan that picks its implementation (cuBLASLt with what its
 * epilogues fuse, nnc's mma.sync GEMM, nnc's wgmma GEMM, FP8, the skinny
 * branch for decode steps), the epilogue kernel after cuBLASLt where it
 * cannot fuse the activation or residual, the workspace each needs, and the
 * --tune=measure probe that times the implementations of every GEMM.
 *
 * GEMMs run on cuBLASLt with what it can fuse: its epilogues add a bias and
 * apply ReLU or tanh-GELU, and its C operand adds a residual when there is no
 * activation. A LayerNorm or RMSNorm of A's rows runs as a norm kernel before
 * it; an erf-GELU, SiLU, sigmoid or tanh, or an activation followed by a
 * residual, as an epilogue kernel after it. A GEMM whose output rows are
 * not 16-byte aligned (N not a multiple of 8, 1024 or more: GPT-2's LM
 * head) runs as cuBLASLt calls per phase of rows (the runtime's
 * row_phases), which write the rows in place at the aligned rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "emit_targets.h"

#define EXPR EC_EXPR

/* " * (int)(e)" to multiply by the batch e, "" when it is 1. */
static char *times(const char *e, char *buf, size_t n) {
  char i[EXPR + 16];
  if (strcmp(e, "1") == 0) buf[0] = 0;
  else snprintf(buf, n, " * %.500s", cu_as_int(e, i, sizeof i));
  return buf;
}

/* Which kernel runs the product (the cuBLASLt ways differ by gemm_plan's
 * other fields). */
typedef enum gemm_impl {
  IMPL_CUBLASLT,   /* runtime/cuda/gemm.c */
  IMPL_OWN,        /* nnc's mma.sync GEMM (templates/cuda/gemm.cuh) at tile configuration own_cfg[cfg] */
  IMPL_WGMMA,      /* gemm_wgmma.cuh, after the norm kernel if pre_norm */
  IMPL_TMA,        /* gemm_tma.cuh (TMA, warp-specialized, persistent), likewise */
  IMPL_TMA_LN,     /* gemm_tma_ln.cuh: the post-norm layernorm in the epilogue (nnc_gemm_desc.post_norm) */
} gemm_impl;

typedef struct gemm_plan {
  ec_gemm_shape s;
  gemm_impl impl;
  int cfg;             /* IMPL_OWN's tile configuration */
  bool pre_norm;       /* cuBLASLt path: a norm kernel writes A to the workspace first */
  bool post;           /* cuBLASLt path: an epilogue kernel applies act (+ residual) after */
  const char *lt_epi;  /* NNRT_EPI_* of the cuBLASLt call */
  bool lt_residual;    /* the residual rides cuBLASLt's C operand */
  int pad_n;           /* > 0: rows of the output padded to this many elements in the workspace */
  int split_n;         /* > 0: two cuBLASLt calls, columns [0, split_n) and the rest (N a multiple of 64 first) */
  bool phases;         /* cuBLASLt on rows that are not 16-byte aligned, a call per phase of rows (row_phases):
                          from PHASES_ROWS rows on when IMPL_WGMMA or pad_n (they take fewer), else always */
  bool phases_ok;      /* phases would fit: their rows unaligned, one batch, A [M, K], B [N, K], no epilogue
                          kernel after (phases_block returns before one) */
  int algo;            /* > 0: cuBLASLt's algo-th heuristic result (nnrt_cuda_gemm.algo), from --tune=measure */
  char why[320];
} gemm_plan;

static bool wgmma_impl(const gemm_plan *p) { return p->impl == IMPL_WGMMA || p->impl == IMPL_TMA; }

/* Whether the GEMM's code starts with the skinny GEMM's branch for a few rows, and up to how many
 * (cuda_skinny.c): cuBLASLt's and nnc's wgmma GEMMs may. */
static cu_skinny_rule skinny_rule(const ec_ctx *x, const nnc_gemm_desc *d, const gemm_plan *p) {
  if (p->impl != IMPL_CUBLASLT && !wgmma_impl(p)) return CU_SKINNY_NONE;
  return cu_skinny_rule_of(x, d, &p->s, p->impl == IMPL_WGMMA);
}

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

/* Phases of rows re-read B once a phase (4 for f32 rows, 8 for bf16): from
 * this many rows on, the product outweighs that (GPT-2's LM head at 8192
 * rows: 1.19 ms against 1.45 on nnc's wgmma GEMM, H200); below, the rule's
 * other way (a decode step's 64 rows would read the 77 MB weight 4 times). */
#define PHASES_ROWS 1024

/* nnrt_cuda_gemm's row_phases: output rows not 16-byte aligned (pad), one
 * batch item, A [M, K], B [N, K], no aux or bias gradient. */
static bool phases_fit(const nnc_gemm_desc *d, const ec_gemm_shape *s, int pad) {
  return pad && d->b_trans && !d->a_trans && s->nb == 0 && d->aux_kind == NNC_AUX_NONE &&
         d->bgrad_from == NNC_BGRAD_NONE;
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

/* Rows of 1024 elements or more that are not 16-byte aligned, without
 * phases: nnc's wgmma GEMM where it fits, else padded rows (in two calls
 * where split fits); narrower rows stay as they are (not worth a copy). */
static void unaligned_way(gemm_plan *p, const nnc_gemm_desc *d, int pad, bool wg_fits) {
  if (pad < 1024) return;
  if (wg_fits) {
    p->impl = IMPL_WGMMA;
    return;
  }
  p->pad_n = pad;
  if (split_fits(d, &p->s, pad)) p->split_n = (int)(atoll(p->s.N) / 64 * 64);
}

/* Measured on an H100 (bench/NOTES.md, nnc --tune=measure): cuBLASLt runs
 * these GEMMs at about 600 TFLOP/s, nnc's mma.sync GEMM 3-4x slower even with
 * the LayerNorm prologue and the epilogue fused, so the analytic rule always
 * takes cuBLASLt. Rows of 1024 elements or more whose N is not a multiple of
 * 8 run by phases of rows (row_phases) where B is [N, K] and there is one
 * batch item: GPT-2's LM head (f32 logits, B=8 T=1024, H200) takes 1.19 ms
 * so against 6.7 ms in one call, ~2.1 ms into padded rows copied after, and
 * 1.45 ms on nnc's wgmma GEMM (sm_90a), which takes the other such GEMMs
 * there; elsewhere they go into padded rows, in two calls when B is [N, K]
 * (the columns up to a multiple of 64, then the rest). impl (from
 * --tune=measure) names another of gemm_variants' choices; "-aN" after a
 * cuBLASLt one runs cuBLASLt's N-th heuristic result instead of its first. */
static nnc_status plan_gemm(const ec_ctx *x, const nnc_kernel *k, const char *impl, gemm_plan *p, nnc_error *err) {
  const nnc_gemm_desc *d = &k->d.gemm;
  memset(p, 0, sizeof *p);
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
  if (d->post_norm != NNC_NORM_NONE) {   /* the pass made it for this kernel alone (nnc_cuda_gemm_post_norm) */
    p->impl = IMPL_TMA_LN;
    snprintf(p->why, sizeof p->why, "nnc's TMA/wgmma GEMM whose blocks hold whole rows: the bias, the residual and "
             "the layernorm of each row in its epilogue, the sum never stored");
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
             x->r->target->cuda.wgmma_ok ? "nnc's TMA wgmma FP8 GEMM, rows of any N"
                                         : "unscaled f32 columns, then the scales and epilogue in a kernel");
    return NNC_OK;
  }
  if (cu_w8a8_gemm(x, d)) {   /* --quantize=w8a8: one way, whatever --tune=measure found for the float GEMM */
    p->post = d->residual_mul;   /* the kernel's epilogue adds; a residual that multiplies is the epilogue kernel's */
    p->lt_epi = "NNRT_EPI_NONE";
    p->lt_residual = false;
    snprintf(p->why, sizeof p->why, "W8A8: A's rows to int8 with a scale each%s, then nnc's int8 %s GEMM "
             "(int32 sums) with the row and channel scales, bias%s in its epilogue%s", p->pre_norm ? " by the norm kernel" : "",
             x->r->target->cuda.wgmma_ok ? "TMA wgmma (mma.sync under 1024 rows)" : "mma.sync", p->post ? "" : ", activation and residual",
             p->post ? ", then an epilogue kernel" : "");
    return NNC_OK;
  }
  if (cu_weight_only_bits(x, d)) {   /* --quantize=int8w, int4w: one way, whatever --tune=measure found */
    /* the epilogue split as the float GEMM's (post, lt_residual above): with many rows nnc_cuda_w8_gemm runs
     * cuBLASLt, whose epilogue lacks SiLU, the erf GELU and an activation before the residual; the kernel
     * would otherwise take its CUDA-core way for all of them */
    p->lt_epi = "NNRT_EPI_NONE";
    const bool int4 = cu_weight_only_bits(x, d) == 4;
    snprintf(p->why, sizeof p->why, "%s: %sthe %s weight read as it is for a few rows (nnc's CUDA-core kernel, %s "
             "a weight), dequantized for cuBLASLt for many; bias%s in the epilogue%s", int4 ? "INT4W" : "INT8W",
             p->pre_norm ? "A's rows normalized, then " : "", int4 ? "int4" : "int8", int4 ? "half a byte" : "one byte", p->post ? (p->lt_residual ? " and residual" : "")
                                                                    : ", activation and residual",
             p->post ? ", then an epilogue kernel" : "");
    return NNC_OK;
  }
  int pad = pad_of(x, d, &p->s, p->lt_residual);
  const char *how = "by rule";
  bool wg_fits = wgmma_fits(x, d, &p->s);
  /* Not by rule for an activation cuBLASLt lacks: on an H200, BERT's
   * intermediate.dense (4096 x 1536 x 384, erf-GELU through nnc_gelu_erf16)
   * took 30.8 us on gemm_tma against 23.9 for cuBLASLt alone, and BERT 10%
   * longer than with cuBLASLt and the epilogue kernel (bench/NOTES.md,
   * session 30); --tune=measure weighs it. */
  p->phases_ok = phases_fit(d, &p->s, pad) && !p->post;
  if (!impl || !impl[0]) {
    unaligned_way(p, d, pad, wg_fits);
    p->phases = pad >= 1024 && p->phases_ok;   /* from PHASES_ROWS rows on; the way above for fewer */
  } else if (strcmp(impl, "wgmma") == 0 && wg_fits) {
    p->impl = IMPL_WGMMA;
    how = "measured";
  } else if (strcmp(impl, "tma") == 0 && wg_fits) {
    p->impl = IMPL_TMA;
    how = "measured";
  } else if (strcmp(impl, "cublaslt-phased") == 0 && p->phases_ok && !p->algo) {
    unaligned_way(p, d, pad, wg_fits);   /* below PHASES_ROWS rows, as the rule */
    p->phases = true;
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
      if (strncmp(impl, "nnc-", 4) == 0 && strcmp(impl + 4, own_cfg[c]) == 0) {
        p->impl = IMPL_OWN;
        p->cfg = c;
      }
    if (p->impl != IMPL_OWN)
      return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "kernel %d: expected one of its implementations, found \"%s\"",
                        (int)(k - x->s->k), name);
    snprintf(p->why, sizeof p->why, "nnc's tensor-core GEMM, tiles %s (measured)", own_cfg[p->cfg]);
    return NNC_OK;
  }
  bool widen = x->g->tensors[d->out].dtype != x->g->tensors[d->a].dtype;
  if (wgmma_impl(p)) {
    p->post = false;   /* its epilogue applies the activation and residual */
    snprintf(p->why, sizeof p->why, "nnc's %s GEMM%s, rows written in place%s%s (%s)",
             p->impl == IMPL_TMA ? "TMA/wgmma persistent" : "wgmma", p->pre_norm ? " after a norm kernel" : "", widen ? ", f32 out" : "",
             d->act != NNC_OP_NONE && d->residual >= 0 ? ", the activation and residual in its epilogue"
             : d->act != NNC_OP_NONE                   ? ", the activation in its epilogue"
             : d->residual >= 0                        ? ", the residual in its epilogue"
                                                       : "",
             how);
    return NNC_OK;
  }
  char algo[48] = "";
  if (p->algo) snprintf(algo, sizeof algo, ", the heuristic's algorithm %d%s", p->algo, p->split_n ? " in the first call" : "");
  snprintf(p->why, sizeof p->why, "cuBLASLt%s%s%s%s%s%s%s%s (%s)", p->pre_norm ? " after a norm kernel" : "",
           d->bgrad_from != NNC_BGRAD_NONE ? ", the bias gradient (dy's column sums) in its epilogue" : "",
           p->split_n ? " in two calls (N a multiple of 64, then the rest)" : "",
           p->phases && !p->pad_n ? ", a call per phase of rows (rows of N are not 16-byte aligned: row_phases)" : "",
           p->pad_n ? " into rows padded to 16 bytes, copied" : "", p->pad_n && widen ? " as f32" : widen ? ", f32 out" : "",
           algo, p->post ? ", then an epilogue kernel" : "", how);
  return NNC_OK;
}

/* The most a GEMM lists: the four cuBLASLt ways (plain, padded, split,
 * phased) with the extra heuristic results of plain and split (split needs
 * padded rows, where nnc's GEMM does not fit), or plain cuBLASLt with them
 * and every tile configuration; then both wgmma GEMMs. */
_Static_assert(4 + 2 * LT_ALGOS + 2 <= NNC_MAX_VARIANTS && 1 + LT_ALGOS + OWN_CFGS + 2 <= NNC_MAX_VARIANTS,
               "NNC_MAX_VARIANTS holds every implementation of a GEMM");

/* The implementations of GEMM kernel k, the analytic rule's first; each of
 * "cublaslt" and "cublaslt-split" is followed by its "-a1".."-a3", cuBLASLt's
 * 2nd to 4th heuristic results (a GEMM for which the heuristic has fewer
 * fails in the probe and is not a candidate). */
void cu_gemm_variants(const ec_ctx *x, const nnc_kernel *k, nnc_kernel_variants *v) {
  const nnc_gemm_desc *d = &k->d.gemm;
  gemm_plan p;
  nnc_error e;
  memset(v, 0, sizeof *v);
  /* a convolution and a GEMM with a post-norm have one implementation */
  if (d->windowed || d->post_norm != NNC_NORM_NONE || plan_gemm(x, k, NULL, &p, &e)) return;
  int pad = pad_of(x, d, &p.s, p.lt_residual);
  /* the rule's choice first, then the other cuBLASLt ways */
  /* "cublaslt-phased" is the rule's way with phases from PHASES_ROWS rows */
  if (p.phases) snprintf(v->name[v->n++], sizeof v->name[0], "cublaslt-phased");
  else if (wgmma_impl(&p)) snprintf(v->name[v->n++], sizeof v->name[0], "wgmma");
  const char *lt[3] = {"cublaslt", "cublaslt-padded", "cublaslt-split"};
  int first = p.split_n ? 2 : p.pad_n ? 1 : 0, nlt = !pad ? 1 : split_fits(d, &p.s, pad) ? 3 : 2;
  /* j = -1: the rule's way (unless it is wgmma's); then the others in order */
  bool other = wgmma_impl(&p) || p.phases;   /* the rule's way is neither of lt's */
  for (int j = other ? 0 : -1; j < nlt; j++) {
    int i = j < 0 ? first : j;
    if (j == first && !other) continue;
    snprintf(v->name[v->n++], sizeof v->name[0], "%s", lt[i]);
    bool padded = i == 1;   /* tried with the heuristic's first result only */
    for (int a = 1; a <= LT_ALGOS && !padded; a++)
      snprintf(v->name[v->n++], sizeof v->name[0], "%s-a%d", lt[i], a);
  }
  for (int c = 0; c < OWN_CFGS && own_fits(x, d, &p.s); c++)
    snprintf(v->name[v->n++], sizeof v->name[0], "nnc-%s", own_cfg[c]);
  if (!p.phases && p.phases_ok) snprintf(v->name[v->n++], sizeof v->name[0], "cublaslt-phased");
  if ((p.phases || !wgmma_impl(&p)) && wgmma_fits(x, d, &p.s)) snprintf(v->name[v->n++], sizeof v->name[0], "wgmma");
  if (wgmma_fits(x, d, &p.s)) snprintf(v->name[v->n++], sizeof v->name[0], "tma");
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
  nnc_sb_printf(b, "  const int M = %s, N = %s, K = %s;\n", cu_as_int(p->s.M, M, sizeof M), cu_as_int(p->s.N, N, sizeof N),
                cu_as_int(p->s.K, K, sizeof K));
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

/* The epilogue kernel of the cuBLASLt path: out = act(out) (+ residual),
 * named after its launcher fn (the probe has one launcher per
 * implementation, each cuBLASLt one with its epilogue kernel): one
 * nnc_map (loops.cuh: 16-byte vectors, every load before the first store)
 * of y and the residual or saved input, v and w in its function. */
static void emit_post_kernel(const ec_ctx *x, int ki, const char *fn, nnc_sb *b) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  nnc_node act = {0};
  act.op = d->act;
  act.attrs.gelu_tanh = d->gelu_tanh;
  char ex[1024];
  const char *ty = cu_stype(x, d->out);
  if (d->aux_kind != NNC_AUX_NONE) {
    /* SAVE: cuBLASLt wrote the activation's input into x, y is act(x); ACT_GRAD: the
     * product into y, times act'(x) here */
    bool grad = d->aux_kind == NNC_AUX_ACT_GRAD;
    if (grad) {
      act.op = NNC_OP_ACT_GRAD;
      act.attrs.act = d->act;
    }
    ec_node_expr(x, &act, "w", "v", false, d->out, ex, sizeof ex);
    nnc_sb_printf(b, "/* kernel %d's %s after cuBLASLt */\n", ki,
                  grad ? "activation's derivative at its saved input" : "activation of its saved input");
    nnc_sb_printf(b, "__global__ void %s_post(%s *y, const %s *x, long long n) {\n"
                     "  nnc_map%s(y, x, n, [](float%s, float w) { return %s; });\n}\n\n",
                  fn, ty, ty, grad ? "" : "<false>", grad ? " v" : "", ex);
    return;
  }
  ec_node_expr(x, &act, "v", "", false, d->out, ex, sizeof ex);
  bool res = d->residual >= 0 && !d->act_last;   /* act_last: cuBLASLt added it */
  const char *with = !res ? "" : d->residual_mul ? " times the residual" : " and residual";
  nnc_sb_printf(b, "/* kernel %d's activation%s after cuBLASLt */\n", ki, with);
  nnc_sb_printf(b, "__global__ void %s_post(%s *y, const %s *r, long long n) {\n"
                   "  nnc_map(y, r, n, [](float v, float%s) { return %s%s; });\n}\n\n",
                fn, ty, ty, res ? " w" : "", ex, !res ? "" : d->residual_mul ? " * w" : " + w");
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
                cu_stype(x, d->a), cu_as_int(batch, inner, sizeof inner));
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
                      "    return kernel_failed(m, %d, e.msg);\n  return 0;\n", own_cfg[p->cfg], ki);
}

/* Whether a kernel before run kernel ki launches without the early start:
 * one that is not a GEMM (nnc's TMA GEMMs are the ones launched early) and
 * launches something (a view does not). Its launch waits for everything
 * before it, the kernels made at load included. */
static bool after_plain_launch(const ec_ctx *x, int ki) {
  for (int k = 0; k < ki; k++) {
    const nnc_kernel *kk = &x->s->k[k];
    if (!kk->at_load && kk->kind != NNC_KERNEL_GEMM && kk->kind != NNC_KERNEL_VIEW) return true;
  }
  return false;
}

/* A parameter (under --train the optimizer writes it after the backward:
 * never), or made from parameters alone at load (passes/hoist_weights.c: a
 * cast, a transpose) when run kernel ki comes after a plain launch: the
 * kernels made at load run on the run's stream just before its first
 * kernel, so a chain of early starts from there could meet them running. */
bool cu_fixed_weight(const ec_ctx *x, int ki, int t) {
  if (x->s->k[ki].at_load) return false;
  if (x->g->tensors[t].kind == NNC_TENSOR_PARAM) return !x->r->train;
  for (int k = 0; k < x->s->nk; k++)
    for (int i = 0; i < x->s->k[k].nout; i++)
      if (x->s->k[k].out[i] == t) return x->s->k[k].at_load && after_plain_launch(x, ki);
  return false;
}

/* The operands every args struct of nnc's wgmma GEMMs names alike: A (the
 * normalized copy in the workspace when normalized), B [N, K], the bias
 * and the residual; tma: the TMA GEMMs' b_fixed where B is a weight. */
static void own_operands(const ec_ctx *x, int ki, const nnc_gemm_desc *d, bool normalized, bool tma, nnc_sb *body) {
  if (normalized) nnc_sb_printf(body, "  g.a = A;\n");
  else ec_assign(x, body, 2, "g.a", d->a);
  nnc_sb_printf(body, "  g.lda = K;\n");
  ec_assign(x, body, 2, "g.b", d->b);
  nnc_sb_printf(body, "  g.ldb = K;\n");
  if (tma && cu_fixed_weight(x, ki, d->b))
    nnc_sb_printf(body, "  g.b_fixed = true;   /* a weight: its first copies start while the kernel before ends */\n");
  if (d->bias >= 0) ec_assign(x, body, 2, "g.bias", d->bias);
  if (d->residual >= 0) {
    ec_assign(x, body, 2, "g.residual", d->residual);
    nnc_sb_printf(body, "  g.ldr = N;\n");
  }
}

/* nnc's wgmma GEMM: one call of gemm_wgmma.cuh or gemm_tma.cuh (the same
 * arguments) writing the output rows in place (A is the normalized copy in
 * the workspace after a norm kernel). */
static void wgmma_body(const ec_ctx *x, int ki, const gemm_plan *p, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  char lit[64];
  const char *f = p->impl == IMPL_TMA ? "nnc_cuda_gemm_tma" : "nnc_cuda_gemm_wgmma";
  nnc_sb_printf(body, "  %s_args<%s, %s> g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n", f,
                cu_stype(x, d->a), cu_stype(x, d->out));
  own_operands(x, ki, d, p->pre_norm, p->impl == IMPL_TMA, body);
  if (d->act != NNC_OP_NONE) nnc_sb_printf(body, "  g.act = %s;\n", cu_gemm_act(d));
  if (d->act != NNC_OP_NONE && d->residual >= 0 && d->act_last) nnc_sb_printf(body, "  g.act_last = true;\n");
  nnc_sb_printf(body, "  g.alpha = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit));
  ec_assign(x, body, 2, "g.c", d->out);
  /* the instance with the epilogue only where there is one: it costs the plain product's stores */
  char inst[96] = "";
  if (d->act != NNC_OP_NONE || d->residual >= 0)
    snprintf(inst, sizeof inst, "<%s, %s, true>", cu_stype(x, d->a), cu_stype(x, d->out));
  nnc_sb_printf(body, "  g.ldc = N;\n%s  if (%s%s(g, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                      "  return 0;\n", p->pre_norm ? "" : "  nnc_cuda_error e;\n", f, inst, ki);
}

/* Below this many rows the fused GEMM + layernorm loses to cuBLASLt and the
 * row kernel (H200, BERT MiniLM, whole model: B=1 T=16 0.197 ms against
 * 0.150, T=128 0.221 against 0.173, B=8 T=128 0.276 against 0.236; at B=32
 * T=128, 4096 rows, it wins: 0.455 against 0.469): a block holds 128 whole
 * rows, so 1024 rows fill 16 of 132 SMs, and its launch and first loads
 * are a fixed cost few rows do not pay. */
#define POST_NORM_ROWS 4096

/* nnc's GEMM + layernorm: one call of gemm_tma_ln.cuh, the norm's output
 * written in place of the sum; below POST_NORM_ROWS rows, cuBLASLt writes
 * the sum there and the layernorm row kernel normalizes it in place. */
static void ln_body(const ec_ctx *x, int ki, const gemm_plan *p, nnc_sb *body) {
  const nnc_gemm_desc *d = &x->s->k[ki].d.gemm;
  char lit[64], po[256], pg[256] = "nullptr", pb[256] = "nullptr";
  gemm_dims(x, p, body);
  nnc_sb_printf(body, "  if (M < %d) {   /* few rows: cuBLASLt (bias, residual), then the layernorm row kernel in place */\n"
                      "    nnrt_cuda_gemm lt = {};\n    lt.M = M;\n    lt.N = N;\n    lt.K = K;\n    lt.batch = 1;\n"
                      "    lt.ab = lt.out = %s;\n", POST_NORM_ROWS, nnrt_dt(x, d->a));
  ec_assign(x, body, 4, "lt.A", d->a);
  nnc_sb_printf(body, "    lt.lda = K;\n");
  ec_assign(x, body, 4, "lt.B", d->b);
  nnc_sb_printf(body, "    lt.ldb = K;\n    lt.b_trans = true;\n");
  if (d->bias >= 0) ec_assign(x, body, 4, "lt.bias", d->bias);
  if (d->residual >= 0) ec_assign(x, body, 4, "lt.residual", d->residual);
  ec_assign(x, body, 4, "lt.D", d->out);
  if (d->post_gamma >= 0) ec_ptr(x, d->post_gamma, pg, sizeof pg);
  if (d->post_beta >= 0) ec_ptr(x, d->post_beta, pb, sizeof pb);
  ec_ptr(x, d->out, po, sizeof po);
  nnc_sb_printf(body, "    lt.ldd = N;\n    lt.alpha = 1.0f;\n    lt.epilogue = NNRT_EPI_NONE;\n    nnrt_error err = {};\n"
                      "    if (nnrt_cuda_gemm_run(m->blas, &lt, s, &err)) return kernel_failed(m, %d, err.msg);\n"
                      "    nnc_cuda_error e;\n"
                      "    if (nnc_cuda_layernorm(M, N, %s, N, %s, %s, %s, %s, N, s, &e)) return kernel_failed(m, %d, e.msg);\n"
                      "    return 0;\n  }\n", ki, po, pg, pb, ec_literal(d->post_eps, false, lit, sizeof lit), po, ki);
  nnc_sb_printf(body, "  nnc_cuda_gemm_tma_ln_args<%s> g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n",
                cu_stype(x, d->a));
  own_operands(x, ki, d, false, true, body);
  if (d->post_gamma >= 0) ec_assign(x, body, 2, "g.gamma", d->post_gamma);
  if (d->post_beta >= 0) ec_assign(x, body, 2, "g.beta", d->post_beta);
  nnc_sb_printf(body, "  g.eps = %s;\n", ec_literal(d->post_eps, false, lit, sizeof lit));
  ec_assign(x, body, 2, "g.c", d->out);
  nnc_sb_printf(body, "  g.ldc = N;\n  nnc_cuda_error e;\n"
                      "  if (nnc_cuda_gemm_tma_ln(g, s, &e)) return kernel_failed(m, %d, e.msg);\n  return 0;\n", ki);
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
                        "  nnc_pdl::launch(%s_post, nnc_map_blocks<%s>(n), NNC_LOOP_THREADS, 0, s, %s, %s, n);\n"
                        "  return launched(m, %d);\n", times(batch, bi, sizeof bi), name, cu_stype(x, d->out),
                  ec_ptr(x, d->out, pout, sizeof pout), pr, ki);
  } else if (!p->pad_n) {
    nnc_sb_printf(body, "  return 0;\n");
  }
}

/* The cuBLASLt path: one nnrt_cuda_gemm (two calls with split_n, a call per
 * outer index with first_inner), the unpad copy after padded rows, then
 * the epilogue kernel or the return. in_block: inside phases_block, whose
 * comment already says why the rows go by phases. */
static void lt_body(const ec_ctx *x, int ki, const gemm_plan *p, const char *name, const char *batch, bool sa, bool sb,
                    bool in_block, nnc_sb *b, nnc_sb *body) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  char bi[EXPR], lit[64];
  const char *A = "A";
  char inner[EXPR], ii[EXPR];
  ec_dims_product(x, d->out, p->s.first_inner, p->s.nb, inner, sizeof inner);
  nnc_sb_printf(body, "  nnrt_cuda_gemm g = {};\n  g.M = M;\n  g.N = N;\n  g.K = K;\n  g.batch = %s;\n",
                cu_as_int(inner, ii, sizeof ii));
  nnc_sb_printf(body, "  g.ab = %s;\n  g.out = %s;\n", nnrt_dt(x, d->a), nnrt_dt(x, p->pad_n ? d->a : d->out));
  if (x->r->precision.tf32) nnc_sb_printf(body, "  g.tf32 = true;   /* --precision=tf32 */\n");
  if (p->pre_norm) nnc_sb_printf(body, "  g.A = %s;\n", A);
  else ec_assign(x, body, 2, "g.A", d->a);
  nnc_sb_printf(body, "%s", d->a_trans ? "  g.lda = M;\n  g.a_trans = true;   /* A is [K, M] */\n" : "  g.lda = K;\n");
  if (sa) nnc_sb_printf(body, "  g.stride_a = (long long)M * K;\n");
  ec_assign(x, body, 2, "g.B", d->b);
  nnc_sb_printf(body, "  g.ldb = %s;\n  g.b_trans = %s;\n", d->b_trans ? "K" : "N", d->b_trans ? "true" : "false");
  if (sb) nnc_sb_printf(body, "  g.stride_b = (long long)K * N;\n");
  if (d->bias >= 0) ec_assign(x, body, 2, "g.bias", d->bias);
  if (d->bgrad_from != NNC_BGRAD_NONE) {
    ec_assign(x, body, 2, "g.bgrad", d->bgrad);
    nnc_sb_printf(body, "  /* written: the bias gradient, the column sums of dy (%s) */\n", d->bgrad_from == NNC_BGRAD_B ? "B" : "A^T");
  }
  if (p->lt_residual) {
    ec_assign(x, body, 2, "g.residual", d->residual);
    nnc_sb_printf(body, "  g.stride_r = (long long)M * N;\n");
    if (d->act_last && !p->post)
      nnc_sb_printf(body, "  g.act_after_residual = true;   /* act(A.B + bias + residual) */\n");
  }
  if (p->pad_n) {
    nnc_sb_printf(body, "  const int ldp = %d;   /* N rounded up to 16 bytes */\n"
                         "  %s *P = (%s *)((unsigned char *)m->ws + %s);\n  g.D = P;\n  g.ldd = ldp;\n"
                         "  g.stride_d = (long long)M * ldp;\n", p->pad_n, cu_stype(x, d->a), cu_stype(x, d->a),
                  p->pre_norm ? "pad_offset((size_t)M * K * sizeof *A)" : "0");
  } else {
    /* the activation's input goes where it is kept; the epilogue kernel makes out */
    bool to_aux = d->aux_kind == NNC_AUX_SAVE && p->post;
    ec_assign(x, body, 2, "g.D", to_aux ? d->aux : d->out);
    nnc_sb_printf(body, "  g.ldd = N;\n  g.stride_d = (long long)M * N;\n");
  }
  if (d->aux_kind != NNC_AUX_NONE && !p->post) {
    ec_assign(x, body, 2, "g.aux", d->aux);
    nnc_sb_printf(body, "  g.ldaux = N;\n  g.stride_aux = (long long)M * N;   /* %s */\n",
                  d->aux_kind == NNC_AUX_SAVE ? "written: the GELU's input, for its gradient"
                                              : "read: the GELU's input, for gelu'");
  }
  nnc_sb_printf(body, "  g.alpha = %s;\n  g.epilogue = %s;\n", ec_literal(d->alpha, false, lit, sizeof lit), p->lt_epi);
  if (p->algo)
    nnc_sb_printf(body, "  g.algo = %d;   /* cuBLASLt's heuristic result %d, not its first: --tune=measure timed it faster */\n",
                  p->algo, p->algo);
  if (p->phases && !p->pad_n)
    nnc_sb_printf(body, "  g.row_phases = true;%s\n",
                  in_block ? "" : "   /* rows of N are not 16-byte aligned: a call per phase of rows */");
  nnc_sb_printf(body, "  nnrt_error err = {};\n");
  if (p->s.first_inner > 0) {
    outer_loop(x, k, p, ii, body);
  } else if (p->split_n) {
    nnc_sb_printf(body, "  const int N0 = %d;   /* the columns in cuBLASLt's tiles of 64 */\n  g.N = N0;\n"
                         "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n"
                         "  g.N = N - N0;\n  g.B = (const %s *)g.B + (long long)N0 * K;\n  g.D = P + N0;\n",
                  p->split_n, ki, cu_stype(x, d->b));
    if (p->algo) nnc_sb_printf(body, "  g.algo = 0;   /* the narrow rest: the heuristic's first */\n");
    if (d->bias >= 0) nnc_sb_printf(body, "  g.bias = (const %s *)g.bias + N0;\n", cu_stype(x, d->bias));
    nnc_sb_printf(body, "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n", ki);
  } else {
    nnc_sb_printf(body, "  if (nnrt_cuda_gemm_run(m->blas, &g, s, &err)) return kernel_failed(m, %d, err.msg);\n", ki);
  }
  if (p->pad_n) {
    char po[256];
    nnc_sb_printf(body, "  if (M%s > 0)\n"
                         "    nnc_unpad_rows<<<M%s, NNC_UNPAD_THREADS, 0, s>>>(%s, P, N, ldp);\n"
                         "  if (launched(m, %d)) return %s_E_DEVICE;\n",
                  times(batch, bi, sizeof bi), times(batch, bi, sizeof bi), ec_ptr(x, d->out, po, sizeof po), ki, x->P);
    if (!p->post) nnc_sb_printf(body, "  return 0;\n");
  }
  emit_post_call(x, ki, p, name, batch, b, body);
}

/* From PHASES_ROWS rows on, the whole product as cuBLASLt calls per phase of
 * rows (lt_body of the plan without its other way, indented into a block),
 * before the rule's way for fewer rows. */
static void phases_block(const ec_ctx *x, int ki, const gemm_plan *p, const char *name, nnc_sb *b, nnc_sb *body) {
  gemm_plan q = *p;
  q.impl = IMPL_CUBLASLT;
  q.pad_n = q.split_n = q.algo = 0;
  nnc_sb in;
  nnc_sb_init(&in);
  lt_body(x, ki, &q, name, "1", false, false, true, b, &in);
  nnc_sb_printf(body, "  /* %d rows or more: cuBLASLt, a call per phase of rows whose starts are 16-byte aligned alike\n"
                      "     (row_phases), at the aligned rate; below, each phase's reading of B costs more than that saves */\n"
                      "  if (M >= %d) {\n", PHASES_ROWS, PHASES_ROWS);
  for (const char *l = in.buf; l && *l;) {
    const char *e = strchr(l, '\n');
    size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
    nnc_sb_printf(body, "%s%.*s", n > 1 ? "  " : "", (int)n, l);
    l += n;
  }
  nnc_sb_printf(body, "  }\n");
  nnc_sb_free(&in);
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
  bool w8a8 = cu_w8a8_gemm(x, d);   /* cuda_w8a8.c */
  bool weight_only = cu_weight_only_bits(x, d) != 0;   /* cuda_weight_only.c */
  bool quant = fp8 || w8a8 || weight_only;   /* a quantized weight: a GEMM of its own */
  cu_skinny_rule skinny = quant ? CU_SKINNY_NONE : skinny_rule(x, d, &p);
  bool hybrid = !quant && p.phases && (wgmma_impl(&p) || p.pad_n);   /* phases_block first */
  char from[96] = "";
  if (hybrid) snprintf(from, sizeof from, "; from %d rows cuBLASLt, a call per phase of rows (row_phases)", PHASES_ROWS);
  nnc_sb_printf(&body, "  /* %s%s%s */\n", p.why, from,
                skinny ? "; nnc's skinny GEMM when M <= NNC_SKINNY_ROWS (gemm_skinny.cuh: 16 unless built otherwise)" : "");
  if (d->windowed) {
    cu_conv_body(x, ki, &body);
  } else if (p.impl == IMPL_TMA_LN) {
    ln_body(x, ki, &p, &body);
  } else if (p.impl == IMPL_OWN) {
    own_gemm_body(x, ki, &p, &body);
  } else {
    char batch[EXPR], bi[EXPR], lit[64], pa[256];
    bool sa, sb;
    gemm_batch(x, k, &p, batch, sizeof batch, &sa, &sb);
    gemm_dims(x, &p, &body);
    if (quant && (p.s.nb > 0 || d->a_trans || d->aux_kind != NNC_AUX_NONE || d->bgrad_from != NNC_BGRAD_NONE)) {
      nnc_sb_free(&body);
      return nnc_errorf(err, NNC_E_INTERNAL, k->loc, "kernel %d: an %s weight's GEMM must be a linear of one batch "
                        "item with A [M, K] and no aux or bias gradient", ki, fp8 ? "e4m3" : "integer");
    }
    if (fp8) {
      cu_fp8_gemm_body(x, ki, p.lt_epi, p.lt_residual, d->act_last && !p.post, &body);
      emit_post_call(x, ki, &p, name, batch, b, &body);
    } else if (w8a8) {
      cu_w8a8_gemm_body(x, ki, p.post, &body);
      emit_post_call(x, ki, &p, name, batch, b, &body);
    } else if (p.pre_norm) {
      /* the normalized rows of A, in the workspace (cuBLASLt's and the weight-only GEMMs' A) */
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
    if (weight_only) {
      cu_weight_only_gemm_body(x, ki, p.post, p.lt_residual, &body);
      emit_post_call(x, ki, &p, name, batch, b, &body);
    }
    if (skinny) cu_skinny_block(x, ki, &p.s, skinny, p.pre_norm ? "A" : NULL, &body);
    if (hybrid) phases_block(x, ki, &p, name, b, &body);
    if (!quant && wgmma_impl(&p)) {
      wgmma_body(x, ki, &p, &body);
    } else if (!quant) {
      lt_body(x, ki, &p, name, batch, sa, sb, false, b, &body);
    }
  }
  char head[160];
  snprintf(head, sizeof head, "static int %s(%s_model *m, const run_args &c, cudaStream_t s)", name, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &body);
  return NNC_OK;
}

static void gemm_workspace(const ec_ctx *x, int ki, const char *impl, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  gemm_plan p;
  nnc_error e;
  if (plan_gemm(x, k, impl, &p, &e)) return;
  if (cu_fp8_gemm(x, &k->d.gemm)) {
    cu_fp8_workspace(x, ki, p.s.M, p.s.N, p.s.K, b);
  } else if (cu_w8a8_gemm(x, &k->d.gemm)) {
    cu_w8a8_workspace(x, ki, p.s.M, p.s.K, b);
  } else if (cu_weight_only_bits(x, &k->d.gemm)) {
    cu_weight_only_workspace(x, ki, p.s.M, p.s.N, p.s.K, b);
  } else if (p.impl == IMPL_OWN && p.pre_norm) {
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

/* A GEMM kernel: its implementation, or in the probe every implementation
 * (k<i>_v<j>) behind k<i>, which runs the one probe_variant[i] names. */
nnc_status cu_emit_gemm_kernel(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  char name[32];
  snprintf(name, sizeof name, "k%d", ki);
  nnc_kernel_variants v;
  cu_gemm_variants(x, &x->s->k[ki], &v);
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
    cu_gemm_variants(x, &x->s->k[ki], &v);
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

/* Statements raising `need` to the workspace of GEMM kernel ki: the chosen
 * implementation's, or in the probe every implementation's. */
void cu_gemm_workspace(const ec_ctx *x, int ki, nnc_sb *b) {
  nnc_kernel_variants v;
  cu_gemm_variants(x, &x->s->k[ki], &v);
  if (!x->r->probe || v.n < 2) {
    v.n = 1;
    snprintf(v.name[0], sizeof v.name[0], "%s", impl_of(x, ki));
  }
  for (int i = 0; i < v.n; i++) gemm_workspace(x, ki, v.name[i], b);
}

int nnc_cuda_gemm_post_norm(const nnc_target_desc *t) { return t->cuda.wgmma_ok ? 512 : 0; }

void cu_gemm_uses(const ec_ctx *x, int ki, cu_gemm_templates *t) {
  gemm_plan p;
  nnc_error e;
  nnc_kernel_variants v;
  cu_gemm_variants(x, &x->s->k[ki], &v);
  for (int i = 0; x->r->probe && i < v.n; i++) {
    t->own |= strncmp(v.name[i], "nnc-", 4) == 0;
    t->wg |= strcmp(v.name[i], "wgmma") == 0;
    t->tma |= strcmp(v.name[i], "tma") == 0;
  }
  if (!plan_gemm(x, &x->s->k[ki], impl_of(x, ki), &p, &e)) {
    t->ln |= p.impl == IMPL_TMA_LN;
    t->skinny |= skinny_rule(x, &x->s->k[ki].d.gemm, &p) != CU_SKINNY_NONE;
    if (!x->r->probe) {
      t->own |= p.impl == IMPL_OWN;
      t->wg |= p.impl == IMPL_WGMMA;
      t->tma |= p.impl == IMPL_TMA;
    }
  }
}

void cu_emit_probe(const ec_ctx *x, nnc_sb *b) {
  emit_run_kernel(x, b);
  emit_tune(x, b);
}
