/* compiler/emit/emit_c_bench.c — the files for bench_<model>: <model>_graph.c
 * rebuilds the model's graph with the ir.h builder (tables of its symbols,
 * inputs, parameters, live nodes with their attributes and output shapes,
 * and outputs) for the float64 reference of --check, and bench_<model>.c
 * describes the model to the generic harness in support/nnc_bench.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emit_c.h"
#include "emit_c_train.h"
#include "opencl.h"

#define EXPR 512

static void dim_lit(nnc_sb *b, nnc_dim d) {
  nnc_sb_printf(b, "{%lld, %d, {%d, %d, %d, %d}}", (long long)d.k, d.nsym, d.nsym > 0 ? d.sym[0] : 0,
                d.nsym > 1 ? d.sym[1] : 0, d.nsym > 2 ? d.sym[2] : 0, d.nsym > 3 ? d.sym[3] : 0);
}

static void shape_lit(nnc_sb *b, const nnc_tensor *t) {
  nnc_sb_printf(b, "{");
  for (int i = 0; i < NNC_MAX_RANK; i++) {
    nnc_sb_printf(b, "%s", i ? ", " : "");
    dim_lit(b, i < t->rank ? t->shape[i] : nnc_dim_const(0));
  }
  nnc_sb_printf(b, "}");
}

static const char *dtype_enum(nnc_dtype t) {
  switch (t) {
  case NNC_F16: return "NNC_F16";
  case NNC_BF16: return "NNC_BF16";
  case NNC_I32: return "NNC_I32";
  default: return "NNC_F32";
  }
}

/* An output's element type for the harness: bf16 and f16 ones are outputs
 * left in the storage dtype (--outputs=storage). */
static const char *output_nnrt(nnc_dtype t) {
  switch (t) {
  case NNC_F16: return "NNRT_F16";
  case NNC_BF16: return "NNRT_BF16";
  case NNC_I32: return "NNRT_I32";
  default: return "NNRT_F32";
  }
}

/* A source tensor: name, dtype, rank, shape, line. */
static void tensor_row(nnc_sb *b, const nnc_tensor *t, int id) {
  char s[600];
  nnc_sb_printf(b, "  {%d, \"%s\", %s, %d, ", id, nnc_emit_c_string(t->name, s, sizeof s), dtype_enum(t->dtype), t->rank);
  shape_lit(b, t);
  nnc_sb_printf(b, ", %d},\n", t->loc.line);
}

nnc_status ec_write_graph(const ec_ctx *x, const char *dir, nnc_error *err) {
  /* a parallel plan, horizontal fusion or --gelu=tanh is checked against the model as written */
  const nnc_graph *g = x->r->whole ? x->r->whole : x->g;
  nnc_sb b;
  nnc_sb_init(&b);
  char s[600], file[512];
  const char *mf = x->r->model_path ? nnc_emit_basename(x->r->model_path) : "model.lua";
  nnc_sb_printf(&b,
    "/* %s_graph.c — the graph of %s, rebuilt with nnc's ir.h builder for the float64\n"
    " * reference evaluator (check/) that bench_%s --check compares with. Only the\n"
    " * benchmark links it. Tensor ids in the tables are those of the compiled graph;\n"
    " * live nodes only, with the output shapes nnc inferred. */\n"
    "#include <math.h>\n#include <stdlib.h>\n#include <string.h>\n\n#include \"check/ir/ir.h\"\n\n"
    "nnc_status %s_build_graph(nnc_graph *g, nnc_error *err);\n\n",
    x->p, x->p, x->p, x->p);
  nnc_sb_printf(&b, "typedef struct src_tensor {\n  int id;\n  const char *name;\n  nnc_dtype dtype;\n  int rank;\n"
                    "  nnc_dim shape[NNC_MAX_RANK];\n  int line;\n} src_tensor;\n\n");
  nnc_sb_printf(&b, "typedef struct src_node {\n  nnc_op op;\n  int nin, in[NNC_MAX_IO];\n  int nout;\n"
                    "  src_tensor out[NNC_MAX_IO];\n  nnc_attrs attrs;\n  const char *label;\n  int line;\n} src_node;\n\n");
  nnc_sb_printf(&b, "static const struct {\n  const char *name;\n  int64_t max;\n  int line;\n} syms[%d] = {\n",
                g->nsyms ? g->nsyms : 1);
  for (int i = 0; i < g->nsyms; i++)
    nnc_sb_printf(&b, "  {\"%s\", %lld, %d},\n", nnc_emit_c_string(g->syms[i].name, s, sizeof s),
                  (long long)g->syms[i].max, g->syms[i].loc.line);
  if (!g->nsyms) nnc_sb_printf(&b, "  {\"\", 0, 0},\n");
  nnc_sb_printf(&b, "};\n\nstatic const src_tensor inputs[%d] = {\n", g->ninputs ? g->ninputs : 1);
  for (int i = 0; i < g->ninputs; i++) tensor_row(&b, &g->tensors[g->inputs[i]], g->inputs[i]);
  if (!g->ninputs) nnc_sb_printf(&b, "  {0, \"\", NNC_F32, 0, {{0, 0, {0, 0, 0, 0}}}, 0},\n");
  nnc_sb_printf(&b, "};\n\nstatic const src_tensor params[%d] = {\n", g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) tensor_row(&b, &g->tensors[g->params[i]], g->params[i]);
  if (!g->nparams) nnc_sb_printf(&b, "  {0, \"\", NNC_F32, 0, {{0, 0, {0, 0, 0, 0}}}, 0},\n");
  if (g->nstates) {
    nnc_sb_printf(&b, "};\n\n/* the kv caches, zero when the model is created */\nstatic const src_tensor states[%d] = {\n",
                  g->nstates);
    for (int i = 0; i < g->nstates; i++) tensor_row(&b, &g->tensors[g->states[i]], g->states[i]);
  }
  nnc_sb_printf(&b, "};\n\nstatic const src_node nodes[] = {\n");
  int nlive = 0;
  for (int ni = 0; ni < g->nnodes; ni++) {
    const nnc_node *n = &g->nodes[ni];
    if (n->dead) continue;
    nlive++;
    nnc_sb_printf(&b, "  {%d, %d, {", (int)n->op, n->nin);
    for (int i = 0; i < n->nin; i++) nnc_sb_printf(&b, "%s%d", i ? ", " : "", n->in[i]);
    nnc_sb_printf(&b, "}, %d, {\n", n->nout);
    for (int i = 0; i < n->nout; i++) {
      nnc_sb_printf(&b, "  ");
      tensor_row(&b, &g->tensors[n->out[i]], n->out[i]);
    }
    const nnc_attrs *a = &n->attrs;
    nnc_sb_printf(&b, "   }, {.axis = %d, .keepdim = %d, .perm = {", a->axis, a->keepdim ? 1 : 0);
    for (int i = 0; i < NNC_MAX_RANK; i++) nnc_sb_printf(&b, "%s%d", i ? ", " : "", a->perm[i]);
    nnc_sb_printf(&b, "}, .start = ");
    dim_lit(&b, a->start);
    nnc_sb_printf(&b, ", .stop = ");
    dim_lit(&b, a->stop);
    /* max pooling pads with -inf, which %a would print as a bare word */
    if (isinf(a->scalar)) nnc_sb_printf(&b, ", .scalar = %sINFINITY", a->scalar < 0 ? "-" : "");
    else nnc_sb_printf(&b, ", .scalar = %a", a->scalar);
    nnc_sb_printf(&b, ", .eps = %a, .gelu_tanh = %d, .weight_in_out = %d, .to = %s", a->eps,
                  a->gelu_tanh ? 1 : 0, a->weight_in_out ? 1 : 0, dtype_enum(a->to));
    /* the gradient ops' attributes, where a node has them (--train) */
    if (a->act) nnc_sb_printf(&b, ", .act = %d", (int)a->act);
    if (a->mask_zero) nnc_sb_printf(&b, ", .mask_zero = 1");
    if (a->causal) nnc_sb_printf(&b, ", .causal = 1");
    if (n->op == NNC_OP_IM2COL || n->op == NNC_OP_COL2IM)
      nnc_sb_printf(&b, ", .win = {%d, %d, %d, %d, %d, %d, %d, %d, %d, %d}", a->win.kh, a->win.kw, a->win.sh,
                    a->win.sw, a->win.ph, a->win.pw, a->win.dh, a->win.dw, a->win.nhwc ? 1 : 0, a->win.tap_major ? 1 : 0);
    if (a->reverse) nnc_sb_printf(&b, ", .reverse = 1");   /* the recurrent scans, rope's gradient */
    if (a->rot_dims) nnc_sb_printf(&b, ", .rot_dims = %d", a->rot_dims);   /* rope */
    nnc_sb_printf(&b, "},\n");
    nnc_sb_printf(&b, "   \"%s\", %d},\n", nnc_emit_c_string(n->label ? n->label : "", s, sizeof s), n->loc.line);
  }
  if (!nlive) nnc_sb_printf(&b, "  {NNC_OP_NONE, 0, {0}, 0, {{0}}, {0}, \"\", 0},\n");
  nnc_sb_printf(&b, "};\n\nstatic const struct {\n  const char *name;\n  int tensor;\n  int line;\n} outputs[%d] = {\n",
                g->noutputs);
  for (int i = 0; i < g->noutputs; i++)
    nnc_sb_printf(&b, "  {\"%s\", %d, %d},\n", nnc_emit_c_string(g->outputs[i].name, s, sizeof s), g->outputs[i].tensor,
                  g->outputs[i].loc.line);
  nnc_sb_printf(&b, "};\n\n");
  nnc_sb_printf(&b,
    "nnc_status %s_build_graph(nnc_graph *g, nnc_error *err) {\n"
    "  const int ntensors = %d, nsyms = %d, ninputs = %d, nparams = %d, nnodes = %d, noutputs = %d;\n"
    "  int *map = malloc((size_t)ntensors * sizeof *map);\n"
    "  const char *file = nnc_graph_intern(g, \"%s\");\n"
    "  g->name = malloc(%zu);\n"
    "  if (!map || !file || !g->name) {\n    free(map);\n"
    "    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, \"out of memory rebuilding the graph\");\n  }\n"
    "  memcpy(g->name, \"%s\", %zu);\n"
    "  nnc_status st = NNC_OK;\n"
    "  for (int i = 0; i < ntensors; i++) map[i] = -1;\n"
    "  for (int i = 0; !st && i < nsyms; i++) {\n"
    "    int id;\n"
    "    st = nnc_graph_add_symbol(g, syms[i].name, syms[i].max, (nnc_srcloc){file, syms[i].line}, &id, err);\n"
    "  }\n"
    "  for (int i = 0; !st && i < ninputs; i++)\n"
    "    st = nnc_graph_add_input(g, inputs[i].name, inputs[i].dtype, inputs[i].rank, inputs[i].shape,\n"
    "                             (nnc_srcloc){file, inputs[i].line}, &map[inputs[i].id], err);\n"
    "  for (int i = 0; !st && i < nparams; i++)\n"
    "    st = nnc_graph_add_param(g, params[i].name, params[i].dtype, params[i].rank, params[i].shape,\n"
    "                             (nnc_srcloc){file, params[i].line}, &map[params[i].id], err);\n"
    "%s"
    "  for (int i = 0; !st && i < nnodes; i++) {\n"
    "    const src_node *n = &nodes[i];\n"
    "    int in[NNC_MAX_IO], nid;\n"
    "    for (int j = 0; j < n->nin; j++) in[j] = map[n->in[j]];\n"
    "    st = nnc_graph_add_node(g, n->op, n->nin, in, &n->attrs, n->nout, (nnc_srcloc){file, n->line}, n->label, &nid, err);\n"
    "    for (int j = 0; !st && j < n->nout; j++) {\n"
    "      nnc_tensor *t = &g->tensors[g->nodes[nid].out[j]];\n"
    "      t->dtype = n->out[j].dtype;\n"
    "      t->rank = n->out[j].rank;\n"
    "      memcpy(t->shape, n->out[j].shape, sizeof t->shape);\n"
    "      map[n->out[j].id] = g->nodes[nid].out[j];\n"
    "    }\n"
    "  }\n"
    "  for (int i = 0; !st && i < noutputs; i++)\n"
    "    st = nnc_graph_add_output(g, outputs[i].name, map[outputs[i].tensor], (nnc_srcloc){file, outputs[i].line}, err);\n"
    "  free(map);\n"
    "  return st;\n}\n",
    x->p, g->ntensors, g->nsyms, g->ninputs, g->nparams, nlive, g->noutputs, nnc_emit_c_string(mf, file, sizeof file),
    strlen(x->p) + 1, x->p, strlen(x->p) + 1,
    g->nstates ? "  for (int i = 0; !st && i < (int)(sizeof states / sizeof *states); i++)\n"
                 "    st = nnc_graph_add_state(g, states[i].name, states[i].dtype, states[i].rank, states[i].shape,\n"
                 "                             (nnc_srcloc){file, states[i].line}, &map[states[i].id], err);\n"
               : "");
  char name[128];
  snprintf(name, sizeof name, "%s_graph.c", x->p);
  nnc_status st = nnc_emit_write_sb(dir, name, &b, err);
  nnc_sb_free(&b);
  return st;
}

/* The harness's device hooks: the inputs copied once to device buffers, runs
 * on them that wait for the GPU, and the GPU's measured rates. */
static void device_adapters(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p;
  nnc_sb_printf(b,
    "/* Device copies of the inputs and room for the outputs, made once by b_stage. */\n"
    "static void *dev_in[%d], *dev_out[%d];\n\n"
    "static int b_stage(void *m, const int64_t *sym, void *const *in) {\n"
    "  int64_t ni[%d], no[%d];\n  b_elems(sym, ni, no);\n  (void)m;\n"
    "  for (int i = 0; i < %d; i++) {\n"
    "    if (!dev_in[i] && cudaMalloc(&dev_in[i], (size_t)ni[i] * 4 + 4) != cudaSuccess) return 1;\n"
    "    if (cudaMemcpy(dev_in[i], in[i], (size_t)ni[i] * 4, cudaMemcpyHostToDevice) != cudaSuccess) return 1;\n"
    "  }\n"
    "  for (int i = 0; i < %d; i++)\n"
    "    if (!dev_out[i] &&\n"
    "        cudaMalloc(&dev_out[i], (size_t)no[i] * nnrt_dtype_size((nnrt_dtype)output_dtype[i]) + 4) != cudaSuccess)\n"
    "      return 1;\n"
    "  return 0;\n}\n\n",
    g->ninputs ? g->ninputs : 1, g->noutputs, g->ninputs ? g->ninputs : 1, g->noutputs, g->ninputs, g->noutputs);
  nnc_sb_printf(b, "static int b_run_staged(void *m, const int64_t *sym, uint64_t *host_ns) {\n  %s_dims d;\n  %s_inputs i;\n  %s_outputs o;\n"
                   "  dims_of(sym, &d);\n  memset(&i, 0, sizeof i);\n  memset(&o, 0, sizeof o);\n", p, p, p);
  for (int i = 0; i < g->ninputs; i++) nnc_sb_printf(b, "  i.%s = dev_in[%d];\n", x->in_name[i], i);
  for (int i = 0; i < g->noutputs; i++) nnc_sb_printf(b, "  o.%s = dev_out[%d];\n", x->out_name[i], i);
  nnc_sb_printf(b, "  uint64_t t0 = nnrt_now_ns();\n  int rc = %s_run_device(m, &d, &i, &o, NULL);\n"
                   "  if (host_ns) *host_ns = nnrt_now_ns() - t0;\n  return rc ? rc : %s_sync(m);\n}\n\n", p, p);
  nnc_sb_printf(b, "static int b_peaks(void *m, double *gflops, double *gbps) { return %s_device_peaks(m, gflops, gbps); }\n\n", p);
  nnc_sb_printf(b, "/* --cuda-graphs on|off (on 1 or 0; -1 leaves options.cuda_graphs): whether\n"
                   " * graphs are on then, or -1 when the model refused. */\n"
                   "static int b_cuda_graphs(void *m, int on) {\n"
                   "  if (on >= 0) {\n    if (%s_cuda_graphs(m, on)) return -1;\n    graphs_on = on;\n  }\n"
                   "  return graphs_on;\n}\n\n", p);
  if (!x->r->probe) return;
  nnc_sb_printf(b, "/* The probe's timing of every implementation (in %s.cu). */\n"
                   "int %s_tune(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out, FILE *report);\n\n"
                   "static int b_tune(void *m, const int64_t *sym, FILE *report) {\n  %s_dims d;\n  %s_inputs i;\n"
                   "  %s_outputs o;\n  dims_of(sym, &d);\n  memset(&i, 0, sizeof i);\n  memset(&o, 0, sizeof o);\n",
                p, p, p, p, p, p, p, p, p);
  for (int i = 0; i < g->ninputs; i++) nnc_sb_printf(b, "  i.%s = dev_in[%d];\n", x->in_name[i], i);
  for (int i = 0; i < g->noutputs; i++) nnc_sb_printf(b, "  o.%s = dev_out[%d];\n", x->out_name[i], i);
  nnc_sb_printf(b, "  return %s_tune(m, &d, &i, &o, report);\n}\n\n", p);
}

/* What the values of input i must respect, found by following it through
 * copies and casts to the ops that index with it. */
typedef struct input_rule {
  nnc_dim bound;
  bool has_bound, mask;
} input_rule;

static void find_rule(const nnc_graph *g, const nnc_uses *u, int t, int depth, input_rule *r) {
  if (depth > g->nnodes) return;
  for (int i = u->start[t]; i < u->start[t + 1]; i++) {
    const nnc_node *n = &g->nodes[u->node[i]];
    bool second = n->nin > 1 && n->in[1] == t;
    if (n->op == NNC_OP_EMBEDDING && second) {
      r->has_bound = true;
      /* a vocabulary split's ids index the whole vocabulary, not this rank's rows */
      r->bound = n->attrs.ranks > 1 ? nnc_dim_const(n->attrs.vocab) : g->tensors[n->in[0]].shape[0];
    } else if (n->op == NNC_OP_CROSS_ENTROPY && second) {
      const nnc_tensor *l = &g->tensors[n->in[0]];
      r->has_bound = true;
      r->bound = l->shape[l->rank - 1];
    } else if (n->op == NNC_OP_PADDING_MASK && second) {
      r->mask = true;
    }
    if (nnc_op_info_of(n->op)->cls == NNC_CLASS_MOVE || n->op == NNC_OP_CAST)
      for (int j = 0; j < n->nout; j++) find_rule(g, u, n->out[j], depth + 1, r);
  }
}

/* Whether the model holds weights quantized (--quantize=int8w, w8a8, int4w):
 * --check then measures it against the float model, and its tolerance is
 * int8's (below: w8a8's, int4's). */
static bool held_int8(const nnc_graph *g) {
  for (int i = 0; i < g->nparams; i++)
    if (g->tensors[g->params[i]].quant.kind != NNC_QUANT_NONE) return true;
  return false;
}

/* Whether those are w8a8's (6-bit weights, int8 activations): a looser
 * tolerance, the cosine and top-1 lines say more. */
static bool held_w8a8(const nnc_graph *g) {
  for (int i = 0; i < g->nparams; i++)
    if (g->tensors[g->params[i]].quant.a8) return true;
  return false;
}

/* Whether they are int4w's (groups of 128 k): looser still. */
static bool held_int4(const nnc_graph *g) {
  for (int i = 0; i < g->nparams; i++)
    if (g->tensors[g->params[i]].quant.kind == NNC_QUANT_INT4_GROUP) return true;
  return false;
}

nnc_status ec_write_bench(const ec_ctx *x, const char *dir, nnc_error *err) {
  const nnc_graph *g = x->g;
  const char *p = x->p;
  nnc_uses u;
  nnc_status st = nnc_uses_build(g, &u, err);
  if (st) return st;
  nnc_sb b;
  nnc_sb_init(&b);
  char s[600], e[EXPR];
  nnc_sb_printf(&b,
    "/* bench_%s.c — the benchmark of %s: describes the model to the harness in\n"
    " * support/nnc_bench.c. Run ./bench_%s --help for the options. */\n"
    "#include <string.h>\n\n%s#include \"%s.h\"\n#include \"support/nnc_bench.h\"\n\n"
    "nnc_status %s_build_graph(nnc_graph *g, nnc_error *err);\n\n", p, p, p,
    x->device ? "#include <cuda_runtime_api.h>\n\n" : "", p, p);
  nnc_sb_printf(&b, "static const char *const sym_names[%d] = {", g->nsyms ? g->nsyms : 1);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&b, "%s\"%s\"", i ? ", " : "", nnc_emit_c_string(g->syms[i].name, s, sizeof s));
  if (!g->nsyms) nnc_sb_printf(&b, "\"\"");
  nnc_sb_printf(&b, "};\nstatic const int64_t sym_max[%d] = {", g->nsyms ? g->nsyms : 1);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&b, "%s%lld", i ? ", " : "", (long long)g->syms[i].max);
  if (!g->nsyms) nnc_sb_printf(&b, "0");
  nnc_sb_printf(&b, "};\nstatic const char *const input_names[%d] = {", g->ninputs ? g->ninputs : 1);
  for (int i = 0; i < g->ninputs; i++) nnc_sb_printf(&b, "%s\"%s\"", i ? ", " : "", x->in_name[i]);
  if (!g->ninputs) nnc_sb_printf(&b, "\"\"");
  nnc_sb_printf(&b, "};\nstatic const int input_i32[%d] = {", g->ninputs ? g->ninputs : 1);
  for (int i = 0; i < g->ninputs; i++) nnc_sb_printf(&b, "%s%d", i ? ", " : "", g->tensors[g->inputs[i]].dtype == NNC_I32);
  if (!g->ninputs) nnc_sb_printf(&b, "0");
  nnc_sb_printf(&b, "};\nstatic const char *const output_names[%d] = {", g->noutputs);
  for (int i = 0; i < g->noutputs; i++) nnc_sb_printf(&b, "%s\"%s\"", i ? ", " : "", x->out_name[i]);
  nnc_sb_printf(&b, "};\nstatic const int output_dtype[%d] = {", g->noutputs);
  for (int i = 0; i < g->noutputs; i++)
    nnc_sb_printf(&b, "%s%s", i ? ", " : "", output_nnrt(g->tensors[g->outputs[i].tensor].dtype));
  nnc_sb_printf(&b, "};\nstatic const nnrt_st_desc manifest[%d] = {\n", g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    nnc_sb_printf(&b, "  {\"%s\", %s, %d, {", nnc_emit_c_string(t->name, s, sizeof s), t->dtype == NNC_I32 ? "NNRT_I32" : "NNRT_F32",
                  t->rank);
    for (int d = 0; d < t->rank; d++) nnc_sb_printf(&b, "%s%lld", d ? ", " : "", (long long)ec_file_dim(t, d));
    nnc_sb_printf(&b, "}},\n");
  }
  if (!g->nparams) nnc_sb_printf(&b, "  {\"\", NNRT_F32, 0, {0}},\n");
  nnc_sb_printf(&b, "};\n\n");
  /* adapters */
  if (x->device)
    nnc_sb_printf(&b, "/* Whether the model replays CUDA graphs: options.cuda_graphs, then --cuda-graphs. */\n"
                      "static int graphs_on;\n\n");
  /* a parallel plan's collectives, for the report */
  char comm[512] = "";
  if (x->world > 1)
    snprintf(comm, sizeof comm,
             "static void b_comm(const void *m, uint64_t *bytes, double *bus_bytes, double *wait_s) {\n"
             "  %s_comm_stats(m, bytes, bus_bytes, wait_s);\n}\n", p);
  /* a quantized model's checkpoint (--save-quantized) */
  bool saves = ec_saves_quantized(x);
  if (saves)
    snprintf(comm + strlen(comm), sizeof comm - strlen(comm),
             "static int b_save_quantized(void *m, const char *path) { return %s_save_quantized(m, path); }\n", p);
  nnc_sb_printf(&b,
    "static int b_create(int threads, void **m) {\n  %s_options o;\n  %s_options_default(&o);\n%s"
    "  %s_model *h = NULL;\n  int rc = %s_create(&o, &h);\n  *m = h;\n  return rc;\n}\n"
    "static void b_destroy(void *m) { %s_destroy(m); }\n"
    "static const char *b_last_error(const void *m) { return %s_last_error(m); }\n"
    "static int b_load_file(void *m, const char *path) { return %s_load_weights_file(m, path); }\n"
    "static int b_set_weight(void *m, const char *name, const float *data, size_t count) {\n"
    "  return %s_set_weight(m, name, data, count);\n}\n"
    "static void b_profile(void *m, int on) { %s_profile(m, on); }\n"
    "static size_t b_arena_bytes(const void *m) { return %s_arena_bytes(m); }\n"
    "%s"
    "static void b_kernel(const void *m, int i, nnc_bench_kernel *k) {\n  %s_kernel_info info;\n"
    "  memset(k, 0, sizeof *k);\n  if (%s_kernel_info_at(m, i, &info)) return;\n"
    "  k->name = info.name;\n  k->where = info.where;\n  k->kind = info.kind;\n  k->ops = info.ops;\n"
    "  k->ns = info.ns;\n  k->flops = info.flops;\n  k->bytes = info.bytes;\n}\n\n",
    p, p,
    x->device ? "  (void)threads;   /* a GPU model has no host threads */\n  graphs_on = o.cuda_graphs != 0;\n"
              : "  o.threads = threads;\n",
    p, p, p, p, p, p, p, p, comm, p, p);
  nnc_sb_printf(&b, "static void dims_of(const int64_t *sym, %s_dims *d) {\n  memset(d, 0, sizeof *d);\n  (void)sym;\n", p);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&b, "  d->%s = sym[%d];\n", x->sym[i], i);
  nnc_sb_printf(&b, "}\n\n");
  nnc_sb_printf(&b, "static int b_run(void *m, const int64_t *sym, void *const *in, void *const *out) {\n"
                    "  %s_dims d;\n  %s_inputs i;\n  %s_outputs o;\n  dims_of(sym, &d);\n"
                    "  memset(&i, 0, sizeof i);\n  memset(&o, 0, sizeof o);\n  (void)in;\n", p, p, p);
  for (int i = 0; i < g->ninputs; i++) nnc_sb_printf(&b, "  i.%s = in[%d];\n", x->in_name[i], i);
  for (int i = 0; i < g->noutputs; i++) nnc_sb_printf(&b, "  o.%s = out[%d];\n", x->out_name[i], i);
  nnc_sb_printf(&b, "  return %s_run(m, &d, &i, &o);\n}\n\n", p);
  nnc_sb_printf(&b, "static void b_elems(const int64_t *sym, int64_t *in, int64_t *out) {\n  %s_dims dd;\n"
                    "  const %s_dims *d = &dd;\n  dims_of(sym, &dd);\n  (void)d;\n  (void)in;\n", p, p);
  for (int i = 0; i < g->ninputs; i++) nnc_sb_printf(&b, "  in[%d] = %s;\n", i, ec_elems(x, g->inputs[i], e, sizeof e));
  for (int i = 0; i < g->noutputs; i++) nnc_sb_printf(&b, "  out[%d] = %s;\n", i, ec_elems(x, g->outputs[i].tensor, e, sizeof e));
  nnc_sb_printf(&b, "}\n\n");
  nnc_sb_printf(&b, "/* Values an input must respect: ids below the rows of the table they index,\n"
                    " * targets below the classes, masks of 0/1 with rows of their last dim. */\n"
                    "static void b_input_rules(const int64_t *sym, int64_t *bound, int *mask) {\n  %s_dims dd;\n"
                    "  const %s_dims *d = &dd;\n  dims_of(sym, &dd);\n  (void)d;\n  (void)bound;\n  (void)mask;\n", p, p);
  for (int i = 0; i < g->ninputs; i++) {
    input_rule r = {0};
    find_rule(g, &u, g->inputs[i], 0, &r);
    const nnc_tensor *t = &g->tensors[g->inputs[i]];
    if (i == ec_train_scale_input(x)) {   /* all ones, as a mask of one-element rows is: the plain gradients */
      nnc_sb_printf(&b, "  mask[%d] = 1;   /* the loss scale: 1 */\n  bound[%d] = 1;\n", i, i);
    } else if (r.mask) {
      nnc_sb_printf(&b, "  mask[%d] = 1;\n  bound[%d] = %s;\n", i, i,
                    t->rank ? nnc_emit_dim_expr(g, t->shape[t->rank - 1], "d->", e, sizeof e) : "1");
    } else {
      nnc_sb_printf(&b, "  mask[%d] = 0;\n  bound[%d] = %s;\n", i, i,
                    r.has_bound ? nnc_emit_dim_expr(g, r.bound, "d->", e, sizeof e) : "0");
    }
  }
  nnc_sb_printf(&b, "}\n\n");
  bool ocl = x->r->target->family == NNC_FAMILY_OPENCL;
  if (x->device) device_adapters(x, &b);
  else if (ocl) ocl_bench_adapters(x, &b);
  /* --train: train_<p> --check runs the same check, through the description */
  /* --generate: generate_<p> runs the model through the same description */
  bool library = x->r->train || g->nstates;
  if (library)
    nnc_sb_printf(&b, "const nnc_bench_model %s_bench_model = {\n", p);
  else
    nnc_sb_printf(&b, "int main(int argc, char **argv) {\n  static const nnc_bench_model md = {\n");
  nnc_sb_printf(&b,
    "    \"%s\", %d, sym_names, sym_max, %d, input_names, input_i32, %d, output_names, output_dtype,\n"
    "    %d, manifest, %d,\n"
    "    b_create, b_destroy, b_last_error, b_load_file, b_set_weight, b_run, b_profile, b_kernel,\n"
    "    b_arena_bytes, b_elems, b_input_rules, %s_build_graph,%s%s%s\n"
    "%s",
    p, g->nsyms, g->ninputs, g->noutputs, g->nparams, x->s->nk, p,
    ocl && x->r->precision.storage == NNC_BF16 ? "\n    1e-2, b_stage, b_run_staged, b_peaks, NNRT_BF16, NULL, NULL,   /* bf16 storage */"
    : ocl && x->r->precision.storage == NNC_F16 ? "\n    1e-2, b_stage, b_run_staged, b_peaks, NNRT_F16, NULL, NULL,   /* f16 storage */"
    : ocl        ? "\n    0, b_stage, b_run_staged, b_peaks, 0, NULL, NULL,   /* f32 tolerance, OpenCL buffers */"
    : !x->device && held_int4(g) ? "\n    2e-1, NULL, NULL, NULL, 0, NULL, NULL,   /* int4 weights against the float model: 2e-1 */"
    : !x->device && held_w8a8(g) ? "\n    5e-2, NULL, NULL, NULL, 0, NULL, NULL,   /* w8a8 against the float model: 5e-2 */"
    : !x->device && held_int8(g) ? "\n    2e-2, NULL, NULL, NULL, 0, NULL, NULL,   /* int8 weights against the float model: 2e-2 */"
    : !x->device ? "\n    0, NULL, NULL, NULL, 0, NULL, NULL,   /* f32 tolerance, no device */"
    : x->r->precision.fp8 ? "\n    1e-1, b_stage, b_run_staged, b_peaks, NNRT_BF16,   /* fp8 GEMMs against the float model (e4m3: 3 "
                            "mantissa bits, 2^-4 relative a rounding): 1e-1 */"
    : held_int4(g) && x->r->precision.storage == NNC_BF16 ? "\n    2e-1, b_stage, b_run_staged, b_peaks, NNRT_BF16,   /* int4 "
                            "weights and bf16 storage against the float model: 2e-1 */"
    : held_int4(g) && x->r->precision.storage == NNC_F16 ? "\n    2e-1, b_stage, b_run_staged, b_peaks, NNRT_F16,   /* int4 "
                            "weights and f16 storage against the float model: 2e-1 */"
    : held_int4(g) ? "\n    2e-1, b_stage, b_run_staged, b_peaks, 0,   /* int4 weights against the float model: 2e-1 */"
    : held_w8a8(g) && x->r->precision.storage == NNC_BF16 ? "\n    5e-2, b_stage, b_run_staged, b_peaks, NNRT_BF16,   /* w8a8 GEMMs "
                            "and bf16 storage against the float model: 5e-2 */"
    : held_w8a8(g) && x->r->precision.storage == NNC_F16 ? "\n    5e-2, b_stage, b_run_staged, b_peaks, NNRT_F16,   /* w8a8 GEMMs "
                            "and f16 storage against the float model: 5e-2 */"
    : held_w8a8(g) ? "\n    5e-2, b_stage, b_run_staged, b_peaks, 0,   /* w8a8 GEMMs against the float model: 5e-2 */"
    : held_int8(g) && x->r->precision.storage == NNC_BF16 ? "\n    5e-2, b_stage, b_run_staged, b_peaks, NNRT_BF16,   /* int8 "
                            "weights and bf16 storage against the float model: 5e-2 */"
    : held_int8(g) && x->r->precision.storage == NNC_F16 ? "\n    5e-2, b_stage, b_run_staged, b_peaks, NNRT_F16,   /* int8 "
                            "weights and f16 storage against the float model: 5e-2 */"
    : held_int8(g) ? "\n    2e-2, b_stage, b_run_staged, b_peaks, 0,   /* int8 weights against the float model: 2e-2 */"
    : x->r->precision.storage == NNC_BF16 ? "\n    1e-2, b_stage, b_run_staged, b_peaks, NNRT_BF16,   /* bf16 storage: 1e-2 */"
    : x->r->precision.storage == NNC_F16  ? "\n    1e-2, b_stage, b_run_staged, b_peaks, NNRT_F16,   /* f16 storage: 1e-2 */"
    : x->r->precision.tf32                ? "\n    1e-2, b_stage, b_run_staged, b_peaks, 0,   /* tf32 matmuls: 1e-2 */"
                                          : "\n    0, b_stage, b_run_staged, b_peaks, 0,",
    !x->device ? "" : x->r->probe ? "\n    b_tune, b_cuda_graphs," : "\n    NULL, b_cuda_graphs,",
    x->world > 1 ? (saves ? "\n    b_comm, b_save_quantized," : "\n    b_comm, NULL,   /* no quantized checkpoint */")
                 : (saves ? "\n    NULL, b_save_quantized,   /* no collectives; a quantized checkpoint */"
                          : "\n    NULL, NULL,   /* no collectives, no quantized checkpoint */"),
    library ? "};\n\n#ifndef NNC_BENCH_LIBRARY\n"
                  "int main(int argc, char **argv) { return nnc_bench_main(&" : "  };\n  return nnc_bench_main(&md, argc, argv);\n}\n");
  if (library) nnc_sb_printf(&b, "%s_bench_model, argc, argv); }\n#endif\n", p);
  nnc_uses_free(&u);
  char name[128];
  snprintf(name, sizeof name, "bench_%s.c", p);
  st = nnc_emit_write_sb(dir, name, &b, err);
  nnc_sb_free(&b);
  return st;
}
