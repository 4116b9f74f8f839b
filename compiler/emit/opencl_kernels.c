/* compiler/emit/opencl_kernels.c — the kernels of an OpenCL model that come
 * from templates/opencl (GEMM with its norm prologue and fused epilogue,
 * attention, softmax and the norms over the last axis) and their launchers;
 * everything else goes to opencl_loops.c.
 *
 * The program holds one copy of a template per kernel that uses it, its
 * macros (tiles, activation, prologue, B's layout) set before the copy and
 * its kernels renamed to k<i>_<name>, so every kernel is specialised and the
 * model still builds one program. A template's tensors are of the storage
 * type (common.cl's nnc_t), except where a macro says otherwise: a GEMM's
 * C widened to f32 (NNC_C_F32) and an i32 attention mask (NNC_MASK_I32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "opencl.h"

#define EXPR EC_EXPR

const char *ocl_template(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "opencl/kernels/%s", name);
  for (int i = 0; i < nnc_embedded_count; i++)
    if (strcmp(nnc_embedded_files[i].path, path) == 0) return nnc_embedded_files[i].data;
  return NULL;
}

int ocl_kernel(ocl_ctx *o, const char *fmt, int k) {
  if (o->nkern >= OCL_MAX_KERNELS) return OCL_MAX_KERNELS - 1;
  snprintf(o->kbuf[o->nkern], sizeof o->kbuf[0], fmt, k);
  o->kname[o->nkern] = o->kbuf[o->nkern];
  return o->nkern++;
}

static char *dim_of(const ec_ctx *x, int t, int i, char *buf, size_t n) {
  return nnc_emit_dim_expr(x->g, x->g->tensors[t].shape[i], "d->", buf, n);
}

/* The template's text between #define lines and the #undef of each, so the
 * next copy may set them again; each rep[2i] of the text (it must be there)
 * becomes rep[2i+1]. */
static nnc_status paste(ocl_ctx *o, const char *file, const char *defs, const char *undefs, const char *const *rep,
                        int nrep, nnc_error *err) {
  const char *t = ocl_template(file);
  if (!t) return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "opencl: the template %s is not embedded in nnc", file);
  nnc_sb_printf(&o->cl, "%s", defs);
  while (*t) {
    const char *at = NULL;
    int which = -1;
    for (int i = 0; i < nrep; i++) {
      const char *f = strstr(t, rep[2 * i]);
      if (f && (!at || f < at)) {
        at = f;
        which = i;
      }
    }
    if (!at) {
      nnc_sb_puts(&o->cl, t);
      break;
    }
    nnc_sb_printf(&o->cl, "%.*s%s", (int)(at - t), t, rep[2 * which + 1]);
    t = at + strlen(rep[2 * which]);
  }
  for (int i = 0; i < nrep; i++)
    if (!strstr(ocl_template(file), rep[2 * i]))
      return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "opencl: %s has no \"%s\"", file, rep[2 * i]);
  char u[512];
  snprintf(u, sizeof u, "%s", undefs);
  for (char *w = strtok(u, " "); w; w = strtok(NULL, " ")) nnc_sb_printf(&o->cl, "#undef %s\n", w);
  nnc_sb_printf(&o->cl, "\n");
  return NNC_OK;
}

static int act_code(const nnc_gemm_desc *d) {
  switch (d->act) {
  case NNC_OP_NONE: return 0;
  case NNC_OP_RELU: return 1;
  case NNC_OP_GELU: return d->gelu_tanh ? 3 : 2;
  case NNC_OP_SILU: return 4;
  case NNC_OP_SIGMOID: return 5;
  case NNC_OP_TANH: return 6;
  default: return -1;
  }
}

static void host_head(ocl_ctx *o, int ki) {
  nnc_sb_printf(&o->host, "static int k%d(%s_model *m, const %s_dims *d) {\n  cl_int e = 0;\n  cl_uint a = 0;\n", ki,
                o->x.p, o->x.p);
}

static void arg_mem_at(ocl_ctx *o, int t, int ind) {
  if (t < 0) nnc_sb_printf(&o->host, "%*sARG_NULL();\n", ind, "");
  else nnc_sb_printf(&o->host, "%*sARG_MEM(%d);\n", ind, "", o->slot_of[t]);
}

static void arg_mem(ocl_ctx *o, int t) { arg_mem_at(o, t, 2); }

/* Tensor t (-1: absent), the operand `role` of kernel ki, is of the storage
 * type, as the template reads it. */
static nnc_status want_storage(const ocl_ctx *o, int ki, int t, const char *role, nnc_error *err) {
  const ec_ctx *x = &o->x;
  if (t < 0 || x->g->tensors[t].dtype == x->r->precision.storage) return NNC_OK;
  return nnc_errorf(err, NNC_E_TARGET, x->s->k[ki].loc, "%s: kernel %d (%s): %s %s is %s, expected %s (the storage of "
                    "--precision=%s)", x->r->target->name, ki, nnc_kernel_kind_name(x->s->k[ki].kind), role,
                    x->g->tensors[t].name, nnc_dtype_name(x->g->tensors[t].dtype),
                    nnc_dtype_name(x->r->precision.storage), x->r->precision.name);
}

/* ------------------------------------------------------------------ GEMM */

static int add_list(ocl_ctx *o, const nnc_ocl_list *l, const nnc_opencl_desc *d) {
  for (int i = 0; i < o->ntl; i++)
    if (memcmp(&o->tl[i].l, l, sizeof *l) == 0) return i;
  memcpy(&o->tl[o->ntl].l, l, sizeof *l);   /* padding too: lists are compared with memcmp */
  o->tl[o->ntl].pick = nnc_opencl_pick(l, d);
  return o->ntl++;
}

nnc_status ocl_tile_lists(ocl_ctx *o, nnc_error *err) {
  const ec_ctx *x = &o->x;
  int nk = x->s->nk ? x->s->nk : 1;
  /* a kernel has at most two lists (a GEMM and its prologue's statistics) */
  o->tl = calloc((size_t)nk * 2, sizeof *o->tl);
  o->tl_of = malloc((size_t)nk * sizeof *o->tl_of);
  o->stats_of = malloc((size_t)nk * sizeof *o->stats_of);
  o->gc = calloc((size_t)nk, sizeof *o->gc);
  if (!o->tl || !o->tl_of || !o->stats_of || !o->gc)
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  const nnc_opencl_desc *d = &x->r->target->opencl;
  nnc_ocl_list l;
  for (int k = 0; k < x->s->nk; k++) {
    o->tl_of[k] = o->stats_of[k] = -1;
    nnc_opencl_candidates(x->r->target, x->s, k, &l);
    if (l.n) o->tl_of[k] = add_list(o, &l, d);
    nnc_opencl_stats_candidates(x->r->target, x->s, k, &l);
    if (l.n) o->stats_of[k] = add_list(o, &l, d);
  }
  return NNC_OK;
}

/* The copy of gemm.cl with these macros: the one already in the program, or
 * a new one (kernel ki names its kernels). */
static nnc_status gemm_copy(ocl_ctx *o, int ki, int list, int stats, int act, int pro, const nnc_gemm_desc *d,
                            bool c_f32, const ocl_gemm_copy **out, nnc_error *err) {
  char key[112];
  snprintf(key, sizeof key, "T%d T%d A_TRANS=%d B_TRANS=%d ACT=%d PROLOGUE=%d C_F32=%d RES_MUL=%d", list, stats,
           d->a_trans ? 1 : 0, d->b_trans ? 1 : 0, act, pro, c_f32 ? 1 : 0, d->residual_mul ? 1 : 0);
  for (int i = 0; i < o->ngc; i++)
    if (strcmp(o->gc[i].key, key) == 0) {
      *out = &o->gc[i];
      return NNC_OK;
    }
  char defs[1024], tiles[256], wg[32] = "64";
  if (stats >= 0) snprintf(wg, sizeof wg, "T%d_WG", stats);
  if (o->tl[list].l.cpu)
    snprintf(tiles, sizeof tiles, "#define NNC_GEMM_CPU 1\n#define NNC_VW T%d_VW\n#define NNC_MR T%d_WM\n#define NNC_NR T%d_WN\n"
                                  "#define NNC_KC T%d_KC\n#define NNC_LM T%d_LM\n#define NNC_LN T%d_LN\n",
             list, list, list, list, list, list);
  else
    snprintf(tiles, sizeof tiles, "#define NNC_GEMM_CPU 0\n#define NNC_TM (T%d_LM * T%d_WM)\n#define NNC_TN (T%d_LN * T%d_WN)\n"
                                  "#define NNC_TK T%d_KC\n#define NNC_WM T%d_WM\n#define NNC_WN T%d_WN\n",
             list, list, list, list, list, list, list);
  snprintf(defs, sizeof defs,
           "/* kernel %d: GEMM, the tiles of list %d (picked at create), activation %d, prologue %d%s%s; later GEMM "
           "kernels with the same macros run this copy too */\n%s"
           "#define NNC_A_TRANS %d\n#define NNC_B_TRANS %d\n#define NNC_ACT %d\n#define NNC_PROLOGUE %d\n#define NNC_WG %s\n"
           "#define NNC_C_F32 %d\n#define NNC_RES_MUL %d\n#define nnc_gemm k%d_gemm\n#define nnc_gemm_row_stats k%d_stats\n",
           ki, list, act, pro, c_f32 ? ", C written as f32" : "", d->residual_mul ? ", times the residual" : "", tiles,
           d->a_trans ? 1 : 0, d->b_trans ? 1 : 0, act, pro, wg, c_f32 ? 1 : 0, d->residual_mul ? 1 : 0, ki, ki);
  nnc_status st = paste(o, "gemm.cl", defs,
                        "NNC_GEMM_CPU NNC_A_TRANS NNC_B_TRANS NNC_ACT NNC_PROLOGUE NNC_WG NNC_C_F32 NNC_RES_MUL NNC_RES NNC_C_T NNC_STORE_C NNC_VSTORE_C "
                        "NNC_GEMM_ARGS NNC_GEMM_STORE NNC_TM NNC_TN NNC_TK NNC_WM NNC_WN NNC_KB NNC_LX NNC_LY NNC_NT "
                        "NNC_VW NNC_MR NNC_NR NNC_KC NNC_LM NNC_LN NNC_CAT_ NNC_CAT NNC_VF NNC_VLDF NNC_VSTF NNC_VLDG NNC_VSTC "
                        "NNC_NV NNC_GM NNC_GN NNC_VLD_PART NNC_JOBS nnc_gemm nnc_gemm_row_stats",
                        NULL, 0, err);
  if (st) return st;
  ocl_gemm_copy *g = &o->gc[o->ngc++];
  snprintf(g->key, sizeof g->key, "%s", key);
  g->kstats = pro ? ocl_kernel(o, "k%d_stats", ki) : -1;
  g->kgemm = ocl_kernel(o, "k%d_gemm", ki);
  *out = g;
  return NNC_OK;
}

static nnc_status emit_gemm(ocl_ctx *o, int ki, nnc_error *err) {
  const ec_ctx *x = &o->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_gemm_desc *d = &k->d.gemm;
  if (d->aux_kind != NNC_AUX_NONE)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "%s: the GEMM %s an activation's input for its gradient (a "
                      "training step); training is not supported on this target", x->r->target->name,
                      d->aux_kind == NNC_AUX_SAVE ? "saves" : "multiplies by the derivative at");
  if (d->bgrad_from != NNC_BGRAD_NONE)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "%s: the GEMM writes a bias gradient (a training step); training "
                      "is not supported on this target", x->r->target->name);
  ec_gemm_shape s;
  ec_gemm_shape_of(x, k, &s);
  int act = act_code(d);
  if (act < 0)
    return nnc_errorf(err, NNC_E_TARGET, k->loc, "%s: the GEMM's epilogue %s has no OpenCL activation code",
                      x->r->target->name, nnc_op_info_of(d->act)->name);
  int pro = d->prologue == NNC_NORM_LAYER ? 1 : d->prologue == NNC_NORM_RMS ? 2 : 0;
  int list = o->tl_of[ki], stats = o->stats_of[ki];
  bool cpu = o->tl[list].l.cpu != 0;
  /* the widening cast of a narrow result before a model output, fused in */
  bool c_f32 = x->g->tensors[d->out].dtype == NNC_F32 && x->r->precision.storage != NNC_F32;
  const int ops[] = {d->a, d->b, d->bias, d->residual, d->norm_gamma, d->norm_beta, c_f32 ? -1 : d->out};
  static const char *const roles[] = {"A", "B", "bias", "residual", "norm weight", "norm bias", "output"};
  nnc_status st = NNC_OK;
  for (int i = 0; !st && i < (int)(sizeof ops / sizeof ops[0]); i++) st = want_storage(o, ki, ops[i], roles[i], err);
  const ocl_gemm_copy *gc = NULL;
  if (!st) st = gemm_copy(o, ki, list, stats, act, pro, d, c_f32, &gc, err);
  if (st) return st;
  char batch[EXPR], outer[EXPR], lit[64], dim[EXPR], st_[EXPR];
  ec_dims_product(x, d->out, s.first_inner, s.nb, batch, sizeof batch);
  ec_dims_product(x, d->out, 0, s.first_inner, outer, sizeof outer);
  bool sa = s.nb && s.a_full[s.nb - 1], sb = s.nb && s.b_full[s.nb - 1];
  nnc_sb *h = &o->host;
  host_head(o, ki);
  nnc_sb_printf(h, "  const long long M = %s, N = %s, K = %s, batch = %s, outer = %s;\n", s.M, s.N, s.K, batch, outer);
  nnc_sb_printf(h, "  if (M == 0 || N == 0 || batch == 0) return 0;\n");
  nnc_sb_printf(h, "  const int *t = picked(m, %d);   /* list %d: the tiles create picked */\n"
                   "  const long long lm = t[GEMM_LM], ln = t[GEMM_LN], gm = lm * t[GEMM_WM], gn = ln * t[GEMM_WN];\n",
                list, list);
  if (cpu)
    nnc_sb_printf(h, "  /* the CPU way: dimension 0 walks M */\n"
                     "  const size_t global[3] = {(size_t)((M + gm - 1) / gm * lm), (size_t)((N + gn - 1) / gn * ln), (size_t)batch};\n"
                     "  const size_t local[3] = {(size_t)lm, (size_t)ln, 1};\n");
  else
    nnc_sb_printf(h, "  const size_t global[3] = {(size_t)((N + gn - 1) / gn * ln), (size_t)((M + gm - 1) / gm * lm), (size_t)batch};\n"
                     "  const size_t local[3] = {(size_t)ln, (size_t)lm, 1};\n");
  if (s.first_inner > 0)
    nnc_sb_printf(h, "  /* the batch dims before the last %d broadcast differently in A and B: a call per index */\n",
                  s.nb - s.first_inner);
  nnc_sb_printf(h, "  for (long long o = 0; o < outer; o++) {\n    long long oa = 0, ob = 0, rem = o;\n    (void)rem;\n");
  for (int dd = s.first_inner - 1; dd >= 0; dd--) {
    nnc_emit_dim_expr(x->g, x->g->tensors[d->out].shape[dd], "d->", dim, sizeof dim);
    nnc_sb_printf(h, "    {\n      const long long i = rem %% (%s);\n      rem /= (%s);\n", dim, dim);
    const int ops[2] = {d->a, d->b};
    const bool full[2] = {s.a_full[dd], s.b_full[dd]};
    for (int q = 0; q < 2; q++) {
      int r = x->g->tensors[ops[q]].rank, j = dd - (s.nb - (r - 2));
      if (!full[q] || j < 0) continue;
      ec_dims_product(x, ops[q], j + 1, r - 2, st_, sizeof st_);
      nnc_sb_printf(h, "      %s += i * (%s);\n", q ? "ob" : "oa", st_);
    }
    nnc_sb_printf(h, "      (void)i;\n    }\n");
  }
  nnc_sb_printf(h, "    const long long a_off = oa * M * K, b_off = ob * K * N, c_off = o * batch * M * N;\n"
                   "    cl_kernel kn;\n    int rc = 0;\n    a = 0;\n");
  if (pro) {
    nnc_sb_printf(h, "    kn = m->kern[%d];   /* the rows' statistics for the %s prologue */\n", gc->kstats,
                  pro == 1 ? "LayerNorm" : "RMSNorm");
    nnc_sb_printf(h, "    ARG_INT(M);\n    ARG_INT(K);\n");
    arg_mem_at(o, d->a, 4);
    nnc_sb_printf(h, "    ARG_LONG(a_off);\n    ARG_LONG(K);\n    ARG_LONG(%s);\n    ARG_FLOAT(%s);\n    ARG_STATS();\n",
                  sa ? "M * K" : "0", ec_literal(d->norm_eps, false, lit, sizeof lit));
    nnc_sb_printf(h, "    if (e) return arg_failed(m, %d, e);\n", ki);
    nnc_sb_printf(h, "    const size_t wg = (size_t)picked(m, %d)[ROWS_WG];   /* list %d: a group a row */\n"
                     "    const size_t sglobal[2] = {(size_t)M * wg, (size_t)batch}, slocal[2] = {wg, 1};\n"
                     "    rc = launch(m, %d, kn, 2, sglobal, slocal);\n    if (rc) return rc;\n    a = 0;\n",
                  stats, stats, ki);
  }
  nnc_sb_printf(h, "    kn = m->kern[%d];\n", gc->kgemm);
  nnc_sb_printf(h, "    ARG_INT(M);\n    ARG_INT(N);\n    ARG_INT(K);\n");
  arg_mem_at(o, d->a, 4);
  nnc_sb_printf(h, "    ARG_LONG(a_off);\n    ARG_LONG(%s);\n    ARG_LONG(%s);\n", d->a_trans ? "M" : "K", sa ? "M * K" : "0");
  arg_mem_at(o, d->b, 4);
  nnc_sb_printf(h, "    ARG_LONG(b_off);\n    ARG_LONG(%s);\n    ARG_LONG(%s);\n", d->b_trans ? "K" : "N", sb ? "K * N" : "0");
  arg_mem_at(o, d->out, 4);
  nnc_sb_printf(h, "    ARG_LONG(c_off);\n    ARG_LONG(N);\n    ARG_LONG(M * N);\n    ARG_FLOAT(%s);\n",
                ec_literal(d->alpha, false, lit, sizeof lit));
  arg_mem_at(o, d->bias, 4);
  arg_mem_at(o, d->residual, 4);
  nnc_sb_printf(h, "    ARG_LONG(c_off);\n    ARG_LONG(N);\n    ARG_LONG(M * N);\n");
  if (pro) {
    nnc_sb_printf(h, "    ARG_STATS();\n");
    arg_mem_at(o, d->norm_gamma, 4);
    arg_mem_at(o, d->norm_beta, 4);
  } else {
    nnc_sb_printf(h, "    ARG_NULL();\n    ARG_NULL();\n    ARG_NULL();\n");
  }
  nnc_sb_printf(h, "    if (e) return arg_failed(m, %d, e);\n", ki);
  nnc_sb_printf(h, "    rc = launch(m, %d, kn, 3, global, local);\n    if (rc) return rc;\n  }\n  return 0;\n}\n\n", ki);
  return NNC_OK;
}

/* ------------------------------------------------------------- attention */

static nnc_status emit_attention(ocl_ctx *o, int ki, nnc_error *err) {
  const ec_ctx *x = &o->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_attention_desc *a = &k->d.attn;
  const nnc_graph *g = x->g;
  const nnc_tensor *q = &g->tensors[a->q];
  int r = q->rank;
  if (r == 2 && a->mask >= 0 && a->causal)
    return nnc_errorf(err, NNC_E_TARGET, k->loc,
                      "%s: attention on rank-2 scores with both a causal and a padding mask is not supported; "
                      "give q, k and v a batch dim", x->r->target->name);
  char T[EXPR], S[EXPR], D[EXPR], Dv[EXPR], lit[64];
  dim_of(x, a->q, r - 2, T, sizeof T);
  dim_of(x, a->k, r - 2, S, sizeof S);
  dim_of(x, a->q, r - 1, D, sizeof D);
  dim_of(x, a->v, r - 1, Dv, sizeof Dv);
  /* the private and local arrays are sized by the head dims when they are constants */
  int64_t dmax64, dvmax64;
  nnc_opencl_attn_dmax(x->s, ki, &dmax64, &dvmax64);
  long long dmax = dmax64, dvmax = dvmax64;
  const nnc_tensor *v = &g->tensors[a->v];
  /* constant head dims of whole float8 vectors: rows as vectors */
  bool vec = q->shape[r - 1].nsym == 0 && v->shape[r - 1].nsym == 0 && dmax % 8 == 0 && dvmax % 8 == 0;
  int list = o->tl_of[ki];
  bool mask_i32 = a->mask >= 0 && g->tensors[a->mask].dtype == NNC_I32;
  const int ops[] = {a->view[NNC_ATTN_Q].on ? a->view[NNC_ATTN_Q].base : a->q,
                     a->view[NNC_ATTN_K].on ? a->view[NNC_ATTN_K].base : a->k,
                     a->view[NNC_ATTN_V].on ? a->view[NNC_ATTN_V].base : a->v,
                     a->view[NNC_ATTN_OUT].on ? a->view[NNC_ATTN_OUT].base : a->out, mask_i32 ? -1 : a->mask};
  static const char *const roles[] = {"q", "k", "v", "output", "mask"};
  for (int i = 0; i < (int)(sizeof ops / sizeof ops[0]); i++) {
    nnc_status st = want_storage(o, ki, ops[i], roles[i], err);
    if (st) return st;
  }
  char defs[512];
  snprintf(defs, sizeof defs, "/* kernel %d: attention, the queries a group and keys a step of list %d (picked at create) */\n"
                              "#define NNC_BQ T%d_BQ\n#define NNC_BK T%d_BK\n#define NNC_D_MAX %lld\n"
                              "#define NNC_DV_MAX %lld\n#define NNC_ATT_VEC %d\n#define NNC_MASK_I32 %d\n"
                              "#define nnc_attention k%d_attention\n",
           ki, list, list, list, dmax, dvmax, vec ? 1 : 0, mask_i32 ? 1 : 0, ki);
  /* every operand gets an element offset: a folded head split reads q, k
   * and v inside the fused projection's output */
  static const char *const rep[] = {
    "__global const nnc_t *q, long q_sb", "__global const nnc_t *q, long q_off, long q_sb",
    "__global const nnc_t *k, long k_sb", "__global const nnc_t *k, long k_off, long k_sb",
    "__global const nnc_t *v, long v_sb", "__global const nnc_t *v, long v_off, long v_sb",
    "__global nnc_t *out, long o_sb", "__global nnc_t *out, long o_off, long o_sb",
    "q += b * q_sb", "q += q_off + b * q_sb",
    "k += b * k_sb", "k += k_off + b * k_sb",
    "v += b * v_sb", "v += v_off + b * v_sb",
    "out + b * o_sb", "out + o_off + b * o_sb",
  };
  nnc_status st = paste(o, "attention.cl", defs,
                        "NNC_BQ NNC_BK NNC_D_MAX NNC_DV_MAX NNC_ATT_VEC NNC_MASK_I32 NNC_MASK_T NNC_MASK_KEEP nnc_attention",
                        rep, 8, err);
  if (st) return st;
  int kk = ocl_kernel(o, "k%d_attention", ki);
  nnc_sb *h = &o->host;
  host_head(o, ki);
  nnc_sb_printf(h, "  cl_kernel kn = m->kern[%d];\n  const long long T = %s, S = %s, D = %s, Dv = %s;\n", kk, T, S, D, Dv);
  nnc_sb_printf(h, "  if (D > %lld || Dv > %lld)\n    return kernel_failed(m, %d, \"head dims above the compiled maxima\");\n",
                dmax, dvmax, ki);
  char qs[3][EXPR], ks[3][EXPR], vs[3][EXPR], os[3][EXPR], batch[EXPR], heads[EXPR] = "1";
  /* sb, sh, st of q, k, v and out */
  char group[EXPR] = "1";
  if (ec_attn_grouped(g, a)) {
    /* grouped-query: query heads h read k and v head h / G (G, the group, query heads a k/v head) */
    dim_of(x, a->q, 0, batch, sizeof batch);
    ec_dims_product(x, a->q, 1, r - 2, heads, sizeof heads);
    dim_of(x, a->q, r - 3, group, sizeof group);
    snprintf(qs[0], EXPR, "H * T * D"); snprintf(qs[1], EXPR, "T * D"); snprintf(qs[2], EXPR, "D");
    snprintf(ks[0], EXPR, "H / G * S * D"); snprintf(ks[1], EXPR, "S * D"); snprintf(ks[2], EXPR, "D");
    snprintf(vs[0], EXPR, "H / G * S * Dv"); snprintf(vs[1], EXPR, "S * Dv"); snprintf(vs[2], EXPR, "Dv");
    snprintf(os[0], EXPR, "H * T * Dv"); snprintf(os[1], EXPR, "T * Dv"); snprintf(os[2], EXPR, "Dv");
    nnc_sb_printf(h, "  const long long B = %s, H = %s, G = %s, Tq = T, mask_sb = S;\n", batch, heads, group);
  } else if (r >= 3) {
    dim_of(x, a->q, 0, batch, sizeof batch);
    ec_dims_product(x, a->q, 1, r - 2, heads, sizeof heads);
    bool kb = !nnc_dim_eq_const(g->tensors[a->k].shape[0], 1) || nnc_dim_eq_const(q->shape[0], 1);
    bool vb = !nnc_dim_eq_const(v->shape[0], 1) || nnc_dim_eq_const(q->shape[0], 1);
    snprintf(qs[0], EXPR, "H * T * D"); snprintf(qs[1], EXPR, "T * D"); snprintf(qs[2], EXPR, "D");
    snprintf(ks[0], EXPR, kb ? "H * S * D" : "0"); snprintf(ks[1], EXPR, "S * D"); snprintf(ks[2], EXPR, "D");
    snprintf(vs[0], EXPR, vb ? "H * S * Dv" : "0"); snprintf(vs[1], EXPR, "S * Dv"); snprintf(vs[2], EXPR, "Dv");
    snprintf(os[0], EXPR, "H * T * Dv"); snprintf(os[1], EXPR, "T * Dv"); snprintf(os[2], EXPR, "Dv");
    nnc_sb_printf(h, "  const long long B = %s, H = %s, Tq = T, mask_sb = S;\n", batch, heads);
  } else if (a->mask >= 0) {
    /* rank 2 with a mask: query row i uses mask row i, so each row is a batch of one query */
    snprintf(qs[0], EXPR, "D"); snprintf(qs[1], EXPR, "0"); snprintf(qs[2], EXPR, "D");
    snprintf(ks[0], EXPR, "0"); snprintf(ks[1], EXPR, "0"); snprintf(ks[2], EXPR, "D");
    snprintf(vs[0], EXPR, "0"); snprintf(vs[1], EXPR, "0"); snprintf(vs[2], EXPR, "Dv");
    snprintf(os[0], EXPR, "Dv"); snprintf(os[1], EXPR, "0"); snprintf(os[2], EXPR, "Dv");
    nnc_sb_printf(h, "  const long long B = T, H = 1, Tq = 1, mask_sb = S;\n");
  } else {
    for (int i = 0; i < 2; i++) {
      snprintf(qs[i], EXPR, "0"); snprintf(ks[i], EXPR, "0"); snprintf(vs[i], EXPR, "0"); snprintf(os[i], EXPR, "0");
    }
    snprintf(qs[2], EXPR, "D"); snprintf(ks[2], EXPR, "D"); snprintf(vs[2], EXPR, "Dv"); snprintf(os[2], EXPR, "Dv");
    nnc_sb_printf(h, "  const long long B = 1, H = 1, Tq = T, mask_sb = S;\n");
  }
  nnc_sb_printf(h, "  if (Tq == 0 || B == 0 || H == 0) return 0;\n");
  nnc_sb_printf(h, "  ARG_INT(Tq);\n  ARG_INT(S);\n  ARG_INT(D);\n  ARG_INT(Dv);\n");
  const int ts[4] = {a->q, a->k, a->v, a->out};
  char (*str[4])[EXPR] = {qs, ks, vs, os};
  for (int i = 0; i < 4; i++) {
    const nnc_attn_view *w = &a->view[i];
    if (w->on) {
      char off[EXPR], sb[EXPR], sh[EXPR], si[EXPR];
      nnc_emit_dim_expr(g, w->offset, "d->", off, sizeof off);
      nnc_emit_dim_expr(g, w->sb, "d->", sb, sizeof sb);
      nnc_emit_dim_expr(g, w->sh, "d->", sh, sizeof sh);
      nnc_emit_dim_expr(g, w->si, "d->", si, sizeof si);
      nnc_sb_printf(h, "  /* a folded head %s: inside %s */\n", i == NNC_ATTN_OUT ? "merge" : "split",
                    g->tensors[w->base].name);
      arg_mem(o, w->base);
      nnc_sb_printf(h, "  ARG_LONG(%s);\n  ARG_LONG(%s);\n  ARG_LONG(%s);\n  ARG_LONG(%s);\n", off, sb, sh, si);
    } else {
      arg_mem(o, ts[i]);
      nnc_sb_printf(h, "  ARG_LONG(0);\n  ARG_LONG(%s);\n  ARG_LONG(%s);\n  ARG_LONG(%s);\n", str[i][0], str[i][1], str[i][2]);
    }
  }
  nnc_sb_printf(h, "  ARG_FLOAT(%s);\n  ARG_INT(%d);\n", ec_literal(a->scale, false, lit, sizeof lit), a->causal ? 1 : 0);
  arg_mem(o, a->mask);
  nnc_sb_printf(h, "  ARG_LONG(mask_sb);\n  ARG_INT(%s);\n  if (e) return arg_failed(m, %d, e);\n",
                strcmp(group, "1") ? "G" : "1", ki);
  nnc_sb_printf(h, "  const size_t bq = (size_t)picked(m, %d)[ATT_BQ];   /* list %d: a work-item a query */\n"
                   "  const size_t global[3] = {((size_t)Tq + bq - 1) / bq * bq, (size_t)H, (size_t)B}, local[3] = {bq, 1, 1};\n"
                   "  return launch(m, %d, kn, 3, global, local);\n}\n\n", list, list, ki);
  return NNC_OK;
}

/* ------------------------------------------------------------------- rows */

static nnc_status emit_row(ocl_ctx *o, int ki, nnc_error *err) {
  const ec_ctx *x = &o->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  if (n->op == NNC_OP_SOFTMAX && n->attrs.axis != in->rank - 1) return ocl_emit_loop_kernel(o, ki, err);
  static const char *const roles[] = {"input", "weight", "bias"};
  for (int i = 0; i < n->nin && i < 3; i++) {
    nnc_status st = want_storage(o, ki, n->in[i], roles[i], err);
    if (st) return st;
  }
  nnc_status st = want_storage(o, ki, n->out[0], "output", err);
  if (st) return st;
  int list = o->tl_of[ki];
  char defs[512];
  snprintf(defs, sizeof defs, "/* kernel %d: %s, the work-group of list %d (picked at create) */\n#define NNC_WG T%d_WG\n"
                              "#define nnc_softmax k%d_softmax\n#define nnc_layernorm k%d_layernorm\n#define nnc_rmsnorm k%d_rmsnorm\n",
           ki, nnc_op_info_of(n->op)->name, list, list, ki, ki, ki);
  st = paste(o, "rows.cl", defs, "NNC_WG nnc_softmax nnc_layernorm nnc_rmsnorm", NULL, 0, err);
  if (st) return st;
  const char *which = n->op == NNC_OP_SOFTMAX ? "k%d_softmax" : n->op == NNC_OP_LAYERNORM ? "k%d_layernorm" : "k%d_rmsnorm";
  int kk = ocl_kernel(o, which, ki);
  char rows[EXPR], cols[EXPR], lit[64];
  ec_dims_product(x, n->in[0], 0, in->rank - 1, rows, sizeof rows);
  dim_of(x, n->in[0], in->rank - 1, cols, sizeof cols);
  nnc_sb *h = &o->host;
  host_head(o, ki);
  nnc_sb_printf(h, "  cl_kernel kn = m->kern[%d];\n  const long long rows = %s, cols = %s;\n  if (rows == 0) return 0;\n"
                   "  ARG_INT(cols);\n", kk, rows, cols);
  arg_mem(o, n->in[0]);
  nnc_sb_printf(h, "  ARG_LONG(cols);\n");
  if (n->op == NNC_OP_LAYERNORM) {
    arg_mem(o, n->nin > 1 ? n->in[1] : -1);
    arg_mem(o, n->nin > 2 ? n->in[2] : -1);
    nnc_sb_printf(h, "  ARG_FLOAT(%s);\n", ec_literal(n->attrs.eps, false, lit, sizeof lit));
  } else if (n->op == NNC_OP_RMSNORM) {
    arg_mem(o, n->nin > 1 ? n->in[1] : -1);
    nnc_sb_printf(h, "  ARG_FLOAT(%s);\n", ec_literal(n->attrs.eps, false, lit, sizeof lit));
  }
  arg_mem(o, n->out[0]);
  nnc_sb_printf(h, "  ARG_LONG(cols);\n  if (e) return arg_failed(m, %d, e);\n", ki);
  nnc_sb_printf(h, "  const size_t wg = (size_t)picked(m, %d)[ROWS_WG];   /* list %d: a group a row */\n"
                   "  const size_t global[1] = {(size_t)rows * wg}, local[1] = {wg};\n"
                   "  return launch(m, %d, kn, 1, global, local);\n}\n\n", list, list, ki);
  return NNC_OK;
}

nnc_status ocl_emit_kernels(ocl_ctx *o, nnc_error *err) {
  const ec_ctx *x = &o->x;
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    if (k->kind == NNC_KERNEL_VIEW) continue;
    char where[300], ops[600], name[300];
    ec_where(k->loc, where, sizeof where);
    ec_kernel_ops(x, ki, ops, sizeof ops);
    nnc_emit_comment(ec_kernel_name(x, ki), name, sizeof name);
    nnc_sb_printf(&o->cl, "/* %s  %s: %s  (kernel %d, %s) */\n", where, name, ops, ki, nnc_kernel_kind_name(k->kind));
    nnc_sb_printf(&o->host, "/* %s  %s: %s  (kernel %d, %s) */\n", where, name, ops, ki, nnc_kernel_kind_name(k->kind));
    nnc_status st = NNC_OK;
    switch (k->kind) {
    case NNC_KERNEL_GEMM: st = emit_gemm(o, ki, err); break;
    case NNC_KERNEL_ATTENTION: st = emit_attention(o, ki, err); break;
    case NNC_KERNEL_ROW: st = emit_row(o, ki, err); break;
    default: st = ocl_emit_loop_kernel(o, ki, err); break;
    }
    if (st) return st;
  }
  return NNC_OK;
}
