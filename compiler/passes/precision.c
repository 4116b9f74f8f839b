/* compiler/passes/precision.c — --precision: the storage dtype of floats.
 *
 * With bf16 or f16 storage every f32 weight is stored narrow, and every f32
 * graph input is cast to the storage dtype where it enters the graph; shape
 * inference then carries the narrow dtype through every op (kernels compute
 * in f32 and round when they store), and every float output is cast back to
 * f32, so the API's inputs and outputs keep the dtypes the model declares.
 * With --outputs=storage the outputs stay narrow instead: a caller that
 * wants bf16 logits saves the widening copy and half the bytes.
 * Arithmetic on weights alone (a batch norm folded into a convolution) stays
 * f32 (precision_weights.c). The casts are ordinary elementwise nodes:
 * fusion folds them into their neighbours where a pattern allows. --train's loss scale is cast to the
 * loss's dtype instead, the dtype of the backward's seed it multiplies. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "precision_internal.h"

nnc_status nnc_pass_nodes_to_front(nnc_graph *g, int from, nnc_error *err) {
  int n = g->nnodes, moved = n - from;
  if (moved <= 0 || from == 0) return NNC_OK;
  nnc_node *tmp = malloc((size_t)n * sizeof *tmp);
  if (!tmp) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "precision: out of memory");
  memcpy(tmp, g->nodes + from, (size_t)moved * sizeof *tmp);
  memcpy(tmp + moved, g->nodes, (size_t)from * sizeof *tmp);
  memcpy(g->nodes, tmp, (size_t)n * sizeof *tmp);
  free(tmp);
  for (int t = 0; t < g->ntensors; t++) {
    int p = g->tensors[t].producer;
    if (p < 0) continue;
    g->tensors[t].producer = p >= from ? p - from : p + moved;
  }
  return NNC_OK;
}

nnc_status nnc_precision_parse(const char *name, nnc_precision *out, nnc_error *err) {
  static const nnc_precision known[] = {
    {"f32", NNC_F32, false, false, false, false}, {"tf32", NNC_F32, true, false, false, false},
    {"bf16", NNC_BF16, false, false, false, false}, {"f16", NNC_F16, false, false, false, false},
    /* stored as bf16; quantize.c then marks the linear layers' weights e4m3 */
    {"fp8", NNC_BF16, false, false, false, true}};
  if (!name) name = "f32";
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(known[i].name, name) == 0) {
      *out = known[i];
      return NNC_OK;
    }
  return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--precision: expected f32, tf32, bf16, f16 or fp8, found \"%s\"", name);
}

nnc_status nnc_outputs_parse(const char *name, nnc_precision *p, nnc_error *err) {
  if (!name || strcmp(name, "f32") == 0) p->storage_outputs = false;
  else if (strcmp(name, "storage") == 0) p->storage_outputs = true;
  else return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--outputs: expected f32 or storage, found \"%s\"", name);
  return NNC_OK;
}

nnc_status nnc_precision_add_cast(nnc_graph *g, int t, nnc_dtype to, const char *label, int *out, nnc_error *err) {
  nnc_attrs a;
  memset(&a, 0, sizeof a);
  a.to = to;
  int node;
  nnc_status st = nnc_graph_add_node(g, NNC_OP_CAST, 1, &t, &a, 1, g->tensors[t].loc, label, &node, err);
  if (st) return st;
  *out = g->nodes[node].out[0];
  return nnc_infer_node(g, node, err);
}

/* The node that multiplies the backward's seed by --train's loss scale
 * (autodiff.c: mul(one, reshape(loss_scale))), or -1; *scale gets the
 * input's id. */
static int seed_mul(const nnc_graph *g, int *scale) {
  for (int i = 0; i < g->ninputs; i++) {
    if (strcmp(g->tensors[g->inputs[i]].name, NNC_LOSS_SCALE_INPUT) != 0) continue;
    *scale = g->inputs[i];
    for (int n = 0; n < g->nnodes; n++) {
      const nnc_node *x = &g->nodes[n];
      if (x->dead || x->op != NNC_OP_MUL || x->nin != 2) continue;
      int r = g->tensors[x->in[1]].producer;
      if (r >= 0 && g->nodes[r].op == NNC_OP_RESHAPE && g->nodes[r].in[0] == *scale) return n;
    }
  }
  return -1;
}

/* The loss scale multiplies the seed, which has the loss's dtype: f32 for a
 * cross-entropy's, the storage dtype for a loss of narrow values. It is cast
 * to that dtype, found by inferring the graph with the seed times itself. */
static nnc_status cast_loss_scale(nnc_graph *g, int mul, int scale, nnc_error *err) {
  int keep = g->nodes[mul].in[1];
  g->nodes[mul].in[1] = g->nodes[mul].in[0];
  nnc_status st = nnc_pass_check(g, err);
  g->nodes[mul].in[1] = keep;
  nnc_dtype want = g->tensors[g->nodes[mul].in[0]].dtype;
  if (st || want == NNC_F32) return st;
  int first_new = g->nnodes, cast;
  st = nnc_precision_add_cast(g, scale, want, g->tensors[scale].name, &cast, err);
  for (int n = 0; !st && n < first_new; n++)
    for (int j = 0; j < g->nodes[n].nin; j++)
      if (g->nodes[n].in[j] == scale) g->nodes[n].in[j] = cast;
  return st ? st : nnc_pass_nodes_to_front(g, first_new, err);
}

nnc_status nnc_pass_precision(nnc_graph *g, const nnc_precision *p, nnc_error *err) {
  nnc_dtype storage = p->storage;
  if (storage == NNC_F32) return NNC_OK;
  if (storage != NNC_BF16 && storage != NNC_F16)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "precision: expected a storage dtype f32, bf16 or f16, found %s",
                      nnc_dtype_name(storage));
  /* a kv cache holds what its writer computes: values of the storage dtype */
  for (int i = 0; i < g->nstates; i++) {
    nnc_tensor *t = &g->tensors[g->states[i]];
    if (t->dtype == NNC_F32) t->dtype = storage;
  }
  if (p->f32_weight_math) {
    nnc_status wst = nnc_precision_keep_weight_math(g, storage, err);
    if (wst) return wst;
  } else {
    for (int i = 0; i < g->nparams; i++) {
      nnc_tensor *t = &g->tensors[g->params[i]];
      if (t->dtype == NNC_F32) t->dtype = storage;
    }
  }
  /* a model's own cast to f32 means "to float": the storage dtype */
  for (int n = 0; n < g->nnodes; n++)
    if (g->nodes[n].op == NNC_OP_CAST && g->nodes[n].attrs.to == NNC_F32) g->nodes[n].attrs.to = storage;
  /* each f32 input: a cast node that every reader reads instead */
  int first_new = g->nnodes, scale = -1, mul = seed_mul(g, &scale);
  for (int i = 0; i < g->ninputs; i++) {
    int in = g->inputs[i];
    if (g->tensors[in].dtype != NNC_F32 || (mul >= 0 && in == scale)) continue;
    int readers = 0;
    for (int n = 0; n < first_new; n++)
      for (int j = 0; j < g->nodes[n].nin; j++) readers += g->nodes[n].in[j] == in;
    if (!readers) continue;
    int cast;
    nnc_status st = nnc_precision_add_cast(g, in, storage, g->tensors[in].name, &cast, err);
    if (st) return st;
    for (int n = 0; n < first_new; n++)
      for (int j = 0; j < g->nodes[n].nin; j++)
        if (g->nodes[n].in[j] == in) g->nodes[n].in[j] = cast;
  }
  nnc_status st = nnc_pass_nodes_to_front(g, first_new, err);
  /* nnc_pass_nodes_to_front moved the seed's multiplication with the rest */
  if (!st && mul >= 0) st = cast_loss_scale(g, seed_mul(g, &scale), scale, err);
  /* inference carries the storage dtype to every value */
  if (!st) st = nnc_pass_check(g, err);
  for (int i = 0; !st && !p->storage_outputs && i < g->noutputs; i++) {
    int t = g->outputs[i].tensor;
    if (g->tensors[t].dtype != storage) continue;
    /* an input declared narrow and returned as it is stays what it was */
    if (g->tensors[t].kind == NNC_TENSOR_INPUT) continue;
    int cast;
    st = nnc_precision_add_cast(g, t, NNC_F32, g->outputs[i].name, &cast, err);
    /* right after what it reads, not at the end of the graph: the output is
     * written as soon as it is known (a data-parallel step sums each
     * gradient over the ranks from there, beside the rest of the backward) */
    int p = g->tensors[t].producer;
    if (!st && p >= 0 && p + 1 < g->nnodes - 1) st = nnc_graph_move_node(g, g->nnodes - 1, p + 1, err);
    if (st) break;
    /* every output naming the same tensor shares the cast */
    for (int j = i; j < g->noutputs; j++)
      if (g->outputs[j].tensor == t) g->outputs[j].tensor = cast;
  }
  return st;
}
