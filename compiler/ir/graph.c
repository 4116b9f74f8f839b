/* compiler/ir/graph.c — building a graph: symbols, tensors, nodes, outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Grows *arr (of *cap elements of size sz) to hold at least need elements. */
static bool grow(void **arr, int *cap, int need, size_t sz) {
  if (need <= *cap) return true;
  int ncap = *cap ? *cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  void *p = realloc(*arr, (size_t)ncap * sz);
  if (!p) return false;
  *arr = p;
  *cap = ncap;
  return true;
}
#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof *(arr))

static nnc_status oom(nnc_error *err) {
  return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while building the graph");
}

void nnc_graph_init(nnc_graph *g) { memset(g, 0, sizeof *g); }

void nnc_graph_free(nnc_graph *g) {
  for (int i = 0; i < g->ntensors; i++) free(g->tensors[i].name);
  for (int i = 0; i < g->noutputs; i++) free(g->outputs[i].name);
  for (int i = 0; i < g->nstrings; i++) free(g->strings[i]);
  free(g->tensors); free(g->nodes); free(g->syms); free(g->inputs);
  free(g->params); free(g->states); free(g->outputs); free(g->strings); free(g->name);
  memset(g, 0, sizeof *g);
}

const char *nnc_graph_intern(nnc_graph *g, const char *s) {
  if (!s) return NULL;
  for (int i = g->nstrings - 1; i >= 0; i--)
    if (strcmp(g->strings[i], s) == 0) return g->strings[i];
  if (!GROW(g->strings, g->cap_strings, g->nstrings + 1)) return NULL;
  char *c = strdup(s);
  if (!c) return NULL;
  g->strings[g->nstrings++] = c;
  return c;
}

int nnc_graph_find_symbol(const nnc_graph *g, const char *name) {
  for (int i = 0; i < g->nsyms; i++)
    if (strcmp(g->syms[i].name, name) == 0) return i;
  return -1;
}

nnc_status nnc_graph_add_symbol(nnc_graph *g, const char *name, int64_t max,
                                nnc_srcloc loc, int *id, nnc_error *err) {
  if (!name[0] || strlen(name) >= sizeof g->syms[0].name)
    return nnc_errorf(err, NNC_E_MODEL, loc, "dim: expected a name of 1 to %zu characters, found \"%s\"",
                      sizeof g->syms[0].name - 1, name);
  if (max < 1)
    return nnc_errorf(err, NNC_E_MODEL, loc, "dim %s: expected a maximum of at least 1, found %lld",
                      name, (long long)max);
  int s = nnc_graph_find_symbol(g, name);
  if (s >= 0) {
    if (g->syms[s].max != max)
      return nnc_errorf(err, NNC_E_MODEL, loc, "dim %s: declared with maximum %lld at %s:%d, now %lld",
                        name, (long long)g->syms[s].max, g->syms[s].loc.file ? g->syms[s].loc.file : "?",
                        g->syms[s].loc.line, (long long)max);
    *id = s;
    return NNC_OK;
  }
  if (!GROW(g->syms, g->cap_syms, g->nsyms + 1)) return oom(err);
  nnc_symbol *sym = &g->syms[g->nsyms];
  memset(sym, 0, sizeof *sym);
  strcpy(sym->name, name);
  sym->max = max;
  sym->loc = loc;
  *id = g->nsyms++;
  return NNC_OK;
}

static nnc_status add_tensor(nnc_graph *g, const char *name, nnc_tensor_kind kind,
                             nnc_dtype dtype, int rank, const nnc_dim *shape,
                             nnc_srcloc loc, int *id, nnc_error *err) {
  if (rank < 0 || rank > NNC_MAX_RANK)
    return nnc_errorf(err, NNC_E_SHAPE, loc, "%s: expected a rank of 0 to %d, found %d",
                      name, NNC_MAX_RANK, rank);
  if (!GROW(g->tensors, g->cap_tensors, g->ntensors + 1)) return oom(err);
  nnc_tensor *t = &g->tensors[g->ntensors];
  memset(t, 0, sizeof *t);
  t->name = strdup(name);
  if (!t->name) return oom(err);
  t->kind = kind;
  t->dtype = dtype;
  t->rank = rank;
  if (shape) memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  t->producer = -1;
  t->loc = loc;
  *id = g->ntensors++;
  return NNC_OK;
}

static nnc_status check_shape(const nnc_graph *g, const char *what, const char *name,
                              int rank, const nnc_dim *shape, nnc_srcloc loc, nnc_error *err) {
  for (int i = 0; i < rank; i++) {
    if (shape[i].k < 0 || (shape[i].k == 0 && shape[i].nsym))
      return nnc_errorf(err, NNC_E_SHAPE, loc, "%s %s: expected dims >= 0, found %lld in dim %d",
                        what, name, (long long)shape[i].k, i + 1);
    for (int j = 0; j < shape[i].nsym; j++)
      if (shape[i].sym[j] < 0 || shape[i].sym[j] >= g->nsyms)
        return nnc_errorf(err, NNC_E_INTERNAL, loc, "%s %s: unknown symbol id %d", what, name,
                          shape[i].sym[j]);
  }
  return NNC_OK;
}

/* Names go into the generated sources' comments and strings: one that could
 * end either (a quote, a backslash, a control character, a comment's start
 * or end) is refused rather than escaped, so that the name the user reads
 * in the folder is the one written in the model. */
static nnc_status check_name(const char *what, const char *name, nnc_srcloc loc, nnc_error *err) {
  for (const char *p = name; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' || *p == 0x7f || (p[0] == '/' && p[1] == '*') ||
        (p[0] == '*' && p[1] == '/'))
      return nnc_errorf(err, NNC_E_MODEL, loc, "%s \"%.200s\": expected a name without quotes, backslashes, control "
                        "characters, \"/*\" or \"*/\" (it is written into the generated C sources)", what, name);
  return name[0] ? NNC_OK : nnc_errorf(err, NNC_E_MODEL, loc, "%s: expected a name, found \"\"", what);
}

nnc_status nnc_graph_add_input(nnc_graph *g, const char *name, nnc_dtype dtype,
                               int rank, const nnc_dim *shape, nnc_srcloc loc,
                               int *id, nnc_error *err) {
  nnc_status nst = check_name("input", name, loc, err);
  if (nst) return nst;
  for (int i = 0; i < g->ninputs; i++) {
    const nnc_tensor *o = &g->tensors[g->inputs[i]];
    if (strcmp(o->name, name) == 0)
      return nnc_errorf(err, NNC_E_MODEL, loc, "input \"%s\": already declared at %s:%d",
                        name, o->loc.file ? o->loc.file : "?", o->loc.line);
  }
  nnc_status st = check_shape(g, "input", name, rank, shape, loc, err);
  if (st) return st;
  if (!GROW(g->inputs, g->cap_inputs, g->ninputs + 1)) return oom(err);
  st = add_tensor(g, name, NNC_TENSOR_INPUT, dtype, rank, shape, loc, id, err);
  if (st) return st;
  g->inputs[g->ninputs++] = *id;
  return NNC_OK;
}

nnc_status nnc_graph_add_param(nnc_graph *g, const char *name, nnc_dtype dtype,
                               int rank, const nnc_dim *shape, nnc_srcloc loc,
                               int *id, nnc_error *err) {
  nnc_status nst = check_name("parameter", name, loc, err);
  if (nst) return nst;
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *o = &g->tensors[g->params[i]];
    if (strcmp(o->name, name) != 0) continue;
    bool same = o->dtype == dtype && o->rank == rank;
    for (int d = 0; same && d < rank; d++) same = nnc_dim_eq(o->shape[d], shape[d]);
    if (!same) {
      char a[128], b[128];
      return nnc_errorf(err, NNC_E_SHAPE, loc,
                        "parameter %s: expected %s%s as declared at %s:%d, found %s%s",
                        name, nnc_dtype_name(o->dtype), nnc_shape_format(g, o->rank, o->shape, a, sizeof a),
                        o->loc.file ? o->loc.file : "?", o->loc.line, nnc_dtype_name(dtype),
                        nnc_shape_format(g, rank, shape, b, sizeof b));
    }
    *id = g->params[i];
    return NNC_OK;
  }
  nnc_status st = check_shape(g, "parameter", name, rank, shape, loc, err);
  if (st) return st;
  for (int d = 0; d < rank; d++)
    if (shape[d].nsym)
      return nnc_errorf(err, NNC_E_SHAPE, loc,
                        "parameter %s: expected constant dims (weights have a fixed size), found a symbolic dim %d",
                        name, d + 1);
  if (!GROW(g->params, g->cap_params, g->nparams + 1)) return oom(err);
  st = add_tensor(g, name, NNC_TENSOR_PARAM, dtype, rank, shape, loc, id, err);
  if (st) return st;
  g->params[g->nparams++] = *id;
  return NNC_OK;
}

nnc_status nnc_graph_add_state(nnc_graph *g, const char *name, nnc_dtype dtype,
                               int rank, const nnc_dim *shape, nnc_srcloc loc,
                               int *id, nnc_error *err) {
  nnc_status st = check_name("state", name, loc, err);
  if (st) return st;
  for (int i = 0; i < g->nstates; i++) {
    const nnc_tensor *o = &g->tensors[g->states[i]];
    if (strcmp(o->name, name) == 0)
      return nnc_errorf(err, NNC_E_MODEL, loc, "state \"%s\": already declared at %s:%d",
                        name, o->loc.file ? o->loc.file : "?", o->loc.line);
  }
  st = check_shape(g, "state", name, rank, shape, loc, err);
  if (st) return st;
  if (!GROW(g->states, g->cap_states, g->nstates + 1)) return oom(err);
  st = add_tensor(g, name, NNC_TENSOR_STATE, dtype, rank, shape, loc, id, err);
  if (st) return st;
  g->states[g->nstates++] = *id;
  return NNC_OK;
}

nnc_status nnc_graph_add_node(nnc_graph *g, nnc_op op, int nin, const int *in,
                              const nnc_attrs *attrs, int nout, nnc_srcloc loc,
                              const char *label, int *node_id, nnc_error *err) {
  const nnc_op_info *info = nnc_op_info_of(op);
  if (op <= NNC_OP_NONE || op >= NNC_OP_COUNT)
    return nnc_errorf(err, NNC_E_INTERNAL, loc, "add_node: unknown op %d", (int)op);
  if (nin < info->min_in || nin > info->max_in)
    return nnc_errorf(err, NNC_E_MODEL, loc, "%s: expected %d to %d inputs, found %d",
                      info->name, info->min_in, info->max_in, nin);
  if (nout < 1 || nout > NNC_MAX_IO)
    return nnc_errorf(err, NNC_E_MODEL, loc, "%s: expected 1 to %d outputs, found %d",
                      info->name, NNC_MAX_IO, nout);
  for (int i = 0; i < nin; i++)
    if (in[i] < 0 || in[i] >= g->ntensors)
      return nnc_errorf(err, NNC_E_INTERNAL, loc, "%s: input %d is not a tensor id (%d)",
                        info->name, i + 1, in[i]);
  if (!label) label = info->name;
  const char *ilabel = nnc_graph_intern(g, label);
  if (!ilabel || !GROW(g->nodes, g->cap_nodes, g->nnodes + 1)) return oom(err);
  int nid = g->nnodes;
  nnc_node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.nin = nin;
  memcpy(n.in, in, (size_t)nin * sizeof *in);
  if (attrs) n.attrs = *attrs;
  n.loc = loc;
  n.label = ilabel;
  for (int i = 0; i < nout; i++) {
    char name[256];
    if (nout > 1) snprintf(name, sizeof name, "%s#%d", label, i + 1);
    else snprintf(name, sizeof name, "%s", label);
    nnc_status st = add_tensor(g, name, NNC_TENSOR_VALUE, NNC_F32, 0, NULL, loc, &n.out[i], err);
    if (st) return st;
    g->tensors[n.out[i]].producer = nid;
  }
  n.nout = nout;
  g->nodes[g->nnodes++] = n;
  *node_id = nid;
  return NNC_OK;
}

nnc_status nnc_graph_rewrite_node(nnc_graph *g, int node, nnc_op op, int nin, const int *in,
                                  const nnc_attrs *attrs, int extra, nnc_error *err) {
  if (node < 0 || node >= g->nnodes || op <= NNC_OP_NONE || op >= NNC_OP_COUNT || nin < 0 || nin > NNC_MAX_IO ||
      extra < 0 || g->nodes[node].nout + extra > NNC_MAX_IO)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "rewrite_node: node %d, op %d, %d inputs, %d more outputs",
                      node, (int)op, nin, extra);
  for (int i = 0; i < extra; i++) {
    const nnc_node *n = &g->nodes[node];
    char name[256];
    snprintf(name, sizeof name, "%s#%d", n->label, n->nout + 1);
    int id = -1;
    nnc_status st = add_tensor(g, name, NNC_TENSOR_VALUE, NNC_F32, 0, NULL, n->loc, &id, err);
    if (st) return st;
    g->tensors[id].producer = node;
    g->nodes[node].out[g->nodes[node].nout++] = id;
  }
  nnc_node *n = &g->nodes[node];
  n->op = op;
  n->nin = nin;
  memcpy(n->in, in, (size_t)nin * sizeof *in);
  memset(&n->attrs, 0, sizeof n->attrs);
  if (attrs) n->attrs = *attrs;
  return NNC_OK;
}

nnc_status nnc_graph_add_output(nnc_graph *g, const char *name, int tensor,
                                nnc_srcloc loc, nnc_error *err) {
  if (tensor < 0 || tensor >= g->ntensors)
    return nnc_errorf(err, NNC_E_INTERNAL, loc, "output %s: not a tensor id (%d)", name, tensor);
  nnc_status nst = check_name("output", name, loc, err);
  if (nst) return nst;
  for (int i = 0; i < g->noutputs; i++)
    if (strcmp(g->outputs[i].name, name) == 0)
      return nnc_errorf(err, NNC_E_MODEL, loc, "output \"%s\": already declared at %s:%d", name,
                        g->outputs[i].loc.file ? g->outputs[i].loc.file : "?", g->outputs[i].loc.line);
  if (g->tensors[tensor].kind != NNC_TENSOR_VALUE)
    return nnc_errorf(err, NNC_E_MODEL, loc,
                      "output \"%s\": expected a computed value, found %s %s (outputs must be computed by the model)",
                      name, g->tensors[tensor].kind == NNC_TENSOR_INPUT   ? "input"
                            : g->tensors[tensor].kind == NNC_TENSOR_STATE ? "state"
                                                                          : "parameter",
                      g->tensors[tensor].name);
  if (!GROW(g->outputs, g->cap_outputs, g->noutputs + 1)) return oom(err);
  char *c = strdup(name);
  if (!c) return oom(err);
  g->outputs[g->noutputs++] = (nnc_output){c, tensor, loc};
  return NNC_OK;
}

bool nnc_graph_is_output(const nnc_graph *g, int tensor) {
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].tensor == tensor) return true;
  return false;
}

int64_t nnc_tensor_max_elems(const nnc_graph *g, const nnc_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->shape[i].k;
    for (int j = 0; j < t->shape[i].nsym; j++) d *= g->syms[t->shape[i].sym[j]].max;
    n *= d;
  }
  return n;
}

int64_t nnc_tensor_elems(const nnc_tensor *t, const int64_t *vals) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= nnc_dim_eval(t->shape[i], vals);
  return n;
}

nnc_status nnc_uses_build(const nnc_graph *g, nnc_uses *u, nnc_error *err) {
  u->start = calloc((size_t)g->ntensors + 1, sizeof *u->start);
  int total = 0;
  for (int n = 0; n < g->nnodes; n++)
    if (!g->nodes[n].dead) total += g->nodes[n].nin;
  u->node = malloc((size_t)(total ? total : 1) * sizeof *u->node);
  if (!u->start || !u->node) {
    nnc_uses_free(u);
    return oom(err);
  }
  for (int n = 0; n < g->nnodes; n++)
    if (!g->nodes[n].dead)
      for (int i = 0; i < g->nodes[n].nin; i++) u->start[g->nodes[n].in[i] + 1]++;
  for (int t = 0; t < g->ntensors; t++) u->start[t + 1] += u->start[t];
  int *fill = calloc((size_t)g->ntensors + 1, sizeof *fill);
  if (!fill) {
    nnc_uses_free(u);
    return oom(err);
  }
  for (int n = 0; n < g->nnodes; n++) {
    if (g->nodes[n].dead) continue;
    for (int i = 0; i < g->nodes[n].nin; i++) {
      int t = g->nodes[n].in[i];
      /* a node reading one tensor twice (x * x) is listed once */
      int s = u->start[t], e = s + fill[t];
      if (e > s && u->node[e - 1] == n) continue;
      u->node[s + fill[t]++] = n;
    }
  }
  /* close the gaps left by duplicates */
  int w = 0;
  for (int t = 0; t < g->ntensors; t++) {
    int s = u->start[t];
    u->start[t] = w;
    for (int i = 0; i < fill[t]; i++) u->node[w++] = u->node[s + i];
  }
  u->start[g->ntensors] = w;
  free(fill);
  return NNC_OK;
}

void nnc_uses_free(nnc_uses *u) {
  free(u->start);
  free(u->node);
  u->start = u->node = NULL;
}

bool nnc_name_is_variance(const char *name) {
  size_t n = strlen(name);
  return n >= 11 && strcmp(name + n - 11, "running_var") == 0;
}

nnc_status nnc_graph_move_node(nnc_graph *g, int from, int to, nnc_error *err) {
  if (from < 0 || from >= g->nnodes || to < 0 || to > from)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "move_node: node %d to %d of %d", from, to, g->nnodes);
  nnc_node n = g->nodes[from];
  memmove(&g->nodes[to + 1], &g->nodes[to], (size_t)(from - to) * sizeof *g->nodes);
  g->nodes[to] = n;
  for (int t = 0; t < g->ntensors; t++) {
    int p = g->tensors[t].producer;
    if (p == from) g->tensors[t].producer = to;
    else if (p >= to && p < from) g->tensors[t].producer = p + 1;
  }
  return NNC_OK;
}
