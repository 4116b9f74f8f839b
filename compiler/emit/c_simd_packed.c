/* compiler/emit/c_simd_packed.c — weights packed once at load in a C SIMD
 * inference folder.
 *
 * The GEMM template packs B into its micro-kernel's panels on every call.
 * When B is a weight, or made of weights alone by prepare()'s kernels, the
 * panels are the same on every run, so they are made once and the GEMM
 * reads them (nnc_simd_gemm_args.b_packed). At a decode step's one row of A
 * the packing cost more than the product (bench_gemm 1x768x3072: 0.76 ->
 * 0.35 ms). A weight that only such GEMMs read is held packed in the
 * weights block itself, packed as it loads (file or set_weight), so it
 * costs no memory. So is one that embedding gathers read besides (GPT-2's
 * tied wte, 154 MB): the gather reads its rows out of the panels
 * (nnc_simd_embedding_packed). Any other (a weight transposed at load, a
 * table an elementwise loop reads) gets a packed copy that prepare()
 * makes. Quantized and parallel
 * folders load through loaders of their own and keep copies; quantized
 * weights (held int8/int4) and training builds (their weights change every
 * step) are not packed here. */
#include <stdlib.h>
#include <string.h>

#include "c_simd.h"

/* Kernel k's GEMM can read a packed B: an f32 B the same on every run (in
 * weight[]), sizes known at compile time, one matrix (the template packs
 * batch item 0 only). */
static bool packable(const ec_ctx *x, const nnc_kernel *k, const bool *weight) {
  if (k->kind != NNC_KERNEL_GEMM || k->at_load) return false;
  const nnc_gemm_desc *d = &k->d.gemm;
  if (d->b < 0 || !weight[d->b] || x->g->tensors[d->b].dtype != NNC_F32 || cs_quantized_b(x, k)) return false;
  ec_gemm_shape s;
  ec_gemm_shape_of(x, k, &s);
  return s.nb == 0 && s.N[0] && s.K[0] && strspn(s.N, "0123456789") == strlen(s.N) &&
         strspn(s.K, "0123456789") == strlen(s.K);
}

nnc_status cs_plan_packed(ec_ctx *x, nnc_error *err) {
  const nnc_schedule *s = x->s;
  const nnc_graph *g = x->g;
  x->npacked = 0;
  if (x->r->train || !s->nk) return NNC_OK;
  bool *weight = calloc((size_t)g->ntensors + 1, sizeof *weight);
  x->packed_b = malloc((size_t)s->nk * sizeof *x->packed_b);
  if (!weight || !x->packed_b) {
    free(weight);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "c-simd: out of memory planning the packed weights");
  }
  for (int i = 0; i < g->nparams; i++) weight[g->params[i]] = true;
  for (int ki = 0; ki < s->nk; ki++) {
    const nnc_kernel *k = &s->k[ki];
    /* what prepare() makes, and views of weights, are weights too (passes/hoist_weights.c) */
    bool made = k->at_load || k->kind == NNC_KERNEL_VIEW;
    for (int i = 0; made && k->kind == NNC_KERNEL_VIEW && i < k->nin; i++) made = weight[k->in[i]];
    for (int i = 0; made && i < k->nout; i++) weight[k->out[i]] = true;
    x->packed_b[ki] = -1;
    if (!packable(x, k, weight)) continue;
    /* one packed copy of a B however many GEMMs read it the same way */
    for (int kj = 0; kj < ki && x->packed_b[ki] < 0; kj++)
      if (x->packed_b[kj] >= 0 && s->k[kj].d.gemm.b == k->d.gemm.b && s->k[kj].d.gemm.b_trans == k->d.gemm.b_trans)
        x->packed_b[ki] = x->packed_b[kj];
    if (x->packed_b[ki] < 0) x->packed_b[ki] = x->npacked++;
  }
  free(weight);
  return NNC_OK;
}

/* Kernel k is an embedding gather with t as its table: the template's
 * gather (c_simd_kernels.c), which can read the table's rows out of its
 * panels. */
static bool gathers_rows_of(const ec_ctx *x, const nnc_kernel *k, int t) {
  if (k->kind != NNC_KERNEL_GATHER) return false;
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  return n->op == NNC_OP_EMBEDDING && n->in[0] == t && n->in[1] != t;
}

/* The first kernel reading slot j's B. */
static int first_reader(const ec_ctx *x, int j) {
  for (int ki = 0; ki < x->s->nk; ki++)
    if (x->packed_b[ki] == j) return ki;
  return -1;
}

int cs_packed_param(const ec_ctx *x, int j) {
  /* a quantized or parallel folder loads its weights through loaders of
   * their own (held int8, shards): there the packed weights are copies */
  if (cs_quantized(x) || x->world > 1) return -1;
  const int t = x->s->k[first_reader(x, j)].d.gemm.b;
  if (x->param_of[t] < 0) return -1;
  /* held packed, the weight's values are gone: every other reader must
   * read the panels too */
  for (int ki = 0; ki < x->s->nk; ki++) {
    const nnc_kernel *k = &x->s->k[ki];
    for (int i = 0; i < k->nin; i++)
      if (k->in[i] == t && x->packed_b[ki] != j && !gathers_rows_of(x, k, t)) return -1;
  }
  return x->param_of[t];
}

int cs_held_slot(const ec_ctx *x, int t) {
  if (x->param_of[t] < 0) return -1;
  for (int j = 0; j < x->npacked; j++)
    if (cs_packed_param(x, j) == x->param_of[t]) return j;
  return -1;
}

bool cs_prepares(const ec_ctx *x) {
  for (int j = 0; j < x->npacked; j++)
    if (cs_packed_param(x, j) < 0) return true;
  return ec_load_kernels(x) > 0;
}

bool cs_packed_in_place(const ec_ctx *x) {
  for (int j = 0; j < x->npacked; j++)
    if (cs_packed_param(x, j) >= 0) return true;
  return false;
}

void cs_emit_packed_table(const ec_ctx *x, nnc_sb *b) {
  if (!x->npacked) return;
  nnc_sb_printf(b,
    "/* The weights the GEMMs read packed into the micro-kernel's panels (B's\n"
    " * sizes: K, N, and whether it is held [N, K]): a weight only they (and\n"
    " * embedding gathers, which read its rows out of the panels) read is held\n"
    " * so in the weights block from the moment it loads (param: its index);\n"
    " * any other (param -1) is packed by prepare() into a block of its own.\n"
    " * The first kernel that reads each. */\n"
    "#define NPACKED %d\n"
    "static const struct {\n  int K, N, b_trans, param;\n} packed_b[NPACKED] = {\n", x->npacked);
  for (int j = 0; j < x->npacked; j++) {
    const int ki = first_reader(x, j);
    const nnc_kernel *k = &x->s->k[ki];
    ec_gemm_shape s;
    ec_gemm_shape_of(x, k, &s);
    char note[600];
    nnc_sb_printf(b, "  {%s, %s, %d, %d},   /* %s: kernel %d */\n", s.K, s.N, k->d.gemm.b_trans,
                  cs_packed_param(x, j), ec_note(x, k->d.gemm.b, note, sizeof note), ki);
  }
  nnc_sb_printf(b,
    "};\n\n"
    "/* Floats of slot j's panels, rounded up to 64 bytes: blocks laid end to\n"
    " * end stay aligned. */\n"
    "static size_t packed_floats(int j) {\n"
    "  const nnc_simd_gemm_args g = {.K = packed_b[j].K, .N = packed_b[j].N};\n"
    "  return (nnc_simd_gemm_packed_b_floats(&g) + 15) / 16 * 16;\n"
    "}\n\n"
    "/* Each slot's panels: in the weights block (held there), else in one block\n"
    " * of their own. */\n"
    "static int packed_alloc(%s_model *m, nnrt_error *e) {\n"
    "  size_t total = 0;\n"
    "  for (int j = 0; j < NPACKED; j++)\n"
    "    if (packed_b[j].param < 0) total += packed_floats(j);\n"
    "  int rc = total ? nnrt_aligned_alloc(total * sizeof(float), 64, &m->packed, e) : 0;\n"
    "  for (size_t j = 0, off = 0; !rc && j < NPACKED; j++)\n"
    "    if (packed_b[j].param >= 0) {\n"
    "      m->pb[j] = m->w[packed_b[j].param];\n"
    "    } else {\n"
    "      m->pb[j] = (float *)m->packed + off;\n"
    "      off += packed_floats(j);\n"
    "    }\n"
    "  return rc;\n"
    "}\n\n"
    "/* B (slot j's weight) into its panels at dst, on the pool's threads. */\n"
    "static void pack_b(%s_model *m, int j, const float *B, float *dst) {\n"
    "  const nnc_simd_gemm_args g = {.K = packed_b[j].K, .N = packed_b[j].N, .B = B,\n"
    "                                .ldb = packed_b[j].b_trans ? packed_b[j].K : packed_b[j].N,\n"
    "                                .b_trans = packed_b[j].b_trans};\n"
    "  nnc_simd_gemm_pack_b(&g, &m->par, dst);\n"
    "}\n\n", x->p, x->p);
  if (!cs_packed_in_place(x)) return;
  nnc_sb_printf(b, "/* The weights held packed (packed_b's param). */\nstatic const unsigned char held_packed[NPARAMS] = {");
  for (int i = 0; i < x->g->nparams; i++) {
    bool held = false;
    for (int j = 0; j < x->npacked && !held; j++) held = cs_packed_param(x, j) == i;
    nnc_sb_printf(b, "%s%d%s", i % 24 ? " " : "\n  ", held, i + 1 < x->g->nparams ? "," : "\n};\n\n");
  }
  nnc_sb_printf(b,
    "/* Bytes of weight i in the weights block: its panels when held packed,\n"
    " * else its values; each starts on a 64-byte line. */\n"
    "static size_t weight_bytes(int i) {\n"
    "  size_t n = (size_t)nnc_weights_numel(&manifest[i]) * 4;\n"
    "  for (int j = 0; j < NPACKED; j++)\n"
    "    if (packed_b[j].param == i) n = packed_floats(j) * sizeof(float);\n"
    "  return (n + 63) / 64 * 64;\n"
    "}\n\n"
    "/* Weight i's values, as the file or set_weight gives them, into its\n"
    " * panels at dst (ctx: the model). */\n"
    "static void pack_weight(void *ctx, int i, const float *values, void *dst) {\n"
    "  for (int j = 0; j < NPACKED; j++)\n"
    "    if (packed_b[j].param == i) pack_b(ctx, j, values, dst);\n"
    "}\n\n");
}

void cs_emit_pack_calls(const ec_ctx *x, nnc_sb *b) {
  if (!x->npacked || !cs_prepares(x)) return;
  bool first = true;
  for (int j = 0; j < x->npacked; j++) {
    if (cs_packed_param(x, j) >= 0) continue;
    char p[256], note[600];
    const int t = x->s->k[first_reader(x, j)].d.gemm.b;
    if (first) nnc_sb_printf(b, "  /* the weights the GEMMs read packed that are not held so (packed_b) */\n");
    first = false;
    nnc_sb_printf(b, "  pack_b(c->m, %d, %s, c->m->pb[%d]);   /* %s */\n", j, ec_ptr(x, t, p, sizeof p), j,
                  ec_note(x, t, note, sizeof note));
  }
}
