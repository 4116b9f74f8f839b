/* compiler/ref/ref_schedule.c — runs a schedule kernel by kernel.
 *
 * A kernel may read only the tensors it lists in k->in (and the values earlier
 * kernels wrote), and after it runs only its k->out keep a value: anything else
 * it computed is freed, so a later kernel that needs a value the fusion pass
 * made internal finds nothing and fails instead of reading it. */
#include <stdio.h>
#include <stdlib.h>

#include "ref_internal.h"

bool nnc_ref_kernel_lists(const int *ids, int n, int t) {
  for (int i = 0; i < n; i++)
    if (ids[i] == t) return true;
  return false;
}

nnc_status nnc_ref_kernel_fail(const nnc_ref *r, const nnc_kernel *k, int ki, nnc_status code,
                               nnc_error *err, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return nnc_errorf(err, code, k->loc, "reference: kernel %d (%s): %s", ki, nnc_kernel_kind_name(k->kind), msg);
}

nnc_status nnc_ref_kernel_operand(const nnc_ref *r, const nnc_kernel *k, int ki, int t,
                                  const char *role, const double **out, nnc_error *err) {
  if (t < 0 || t >= r->g->ntensors)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected a tensor id for %s, found %d", role, t);
  const char *name = r->g->tensors[t].name;
  if (!nnc_ref_kernel_lists(k->in, k->nin, t))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected %s (%s) among the kernel's inputs, "
                               "found it missing", name, role);
  if (!r->val[t])
    return nnc_ref_kernel_fail(r, k, ki, r->g->tensors[t].kind == NNC_TENSOR_VALUE ? NNC_E_INTERNAL : NNC_E_USAGE,
                               err, "expected %s (%s) to hold a value %s, found none", name, role,
                               r->g->tensors[t].kind == NNC_TENSOR_VALUE ? "written by an earlier kernel"
                                                                          : "set before the reference runs");
  *out = r->val[t];
  return NNC_OK;
}

/* True when tensor t is written by one of the first `upto` nodes of k. */
static bool made_inside(const nnc_ref *r, const nnc_kernel *k, int upto, int t) {
  for (int i = 0; i < upto; i++) {
    const nnc_node *n = &r->g->nodes[k->nodes[i]];
    if (nnc_ref_kernel_lists(n->out, n->nout, t)) return true;
  }
  return false;
}

/* Whether input j of node n is q, k, v or out of a folded attention_grad
 * (read through its view's base, which the kernel checks itself). */
static bool read_through_view(const nnc_kernel *k, const nnc_node *n, int j) {
  return k->kind == NNC_KERNEL_ATTENTION_GRAD && n->op == NNC_OP_ATTENTION_GRAD && j < 4 &&
         k->d.attn_grad.fwd.view[j].on;
}

/* Whether node i of kernel k belongs to a kv_append or rope folded into
 * its attention (fold_append.c and fold_rope.c put those nodes first): the
 * attention reads their rows through its own views (ref_attention.c's
 * run_appends and run_ropes). */
static bool appended(const nnc_kernel *k, int i) {
  if (k->kind != NNC_KERNEL_ATTENTION) return false;
  for (int a = 0; a < 4; a++) {
    bool on = a < 2 ? k->d.attn.append[a].on : k->d.attn.rope[a - 2].on;
    int node = a < 2 ? k->d.attn.append[a].node : k->d.attn.rope[a - 2].node;
    if (on)
      for (int j = i; j < k->nnodes; j++)
        if (k->nodes[j] == node) return true;
  }
  return false;
}

/* The kernel's lists are well formed and every tensor its nodes read from
 * outside is one of its inputs with a value. */
static nnc_status check_kernel(const nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  if (k->nin < 0 || k->nin > NNC_MAX_IO || k->nout < 1 || k->nout > NNC_MAX_IO || k->nnodes < 0 ||
      (k->nnodes > 0 && !k->nodes))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected 0..%d inputs, 1..%d outputs and a node "
                               "list, found %d inputs, %d outputs, %d nodes", NNC_MAX_IO, NNC_MAX_IO, k->nin,
                               k->nout, k->nnodes);
  for (int i = 0; i < k->nin; i++)
    if (k->in[i] < 0 || k->in[i] >= r->g->ntensors)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "input %d is not a tensor id (%d)", i, k->in[i]);
  for (int i = 0; i < k->nout; i++)
    if (k->out[i] < 0 || k->out[i] >= r->g->ntensors || r->g->tensors[k->out[i]].kind != NNC_TENSOR_VALUE)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected output %d to be a computed value, "
                                 "found tensor id %d", i, k->out[i]);
  for (int i = 0; i < k->nnodes; i++) {
    int id = k->nodes[i];
    if (id < 0 || id >= r->g->nnodes || r->g->nodes[id].dead)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected live nodes, found node id %d", id);
    const nnc_node *n = &r->g->nodes[id];
    if (appended(k, i)) continue;
    for (int j = 0; j < n->nin; j++) {
      int t = n->in[j];
      if (t >= 0 && t < r->g->ntensors && made_inside(r, k, i, t)) continue;
      if (read_through_view(k, n, j)) continue;
      const double *v;
      char role[64];
      snprintf(role, sizeof role, "input of %s", nnc_op_info_of(n->op)->name);
      nnc_status st = nnc_ref_kernel_operand(r, k, ki, t, role, &v, err);
      if (st) return st;
    }
  }
  return NNC_OK;
}

/* Kinds without a descriptor run their nodes with the graph ops. */
static nnc_status run_nodes(nnc_ref *r, const nnc_kernel *k, nnc_error *err) {
  for (int i = 0; i < k->nnodes; i++) {
    nnc_status st = nnc_ref_eval_node(r, k->nodes[i], err);
    if (st) return st;
  }
  return NNC_OK;
}

/* Frees what the kernel's nodes computed that is not one of its outputs. */
static void drop_internal(nnc_ref *r, const nnc_kernel *k) {
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &r->g->nodes[k->nodes[i]];
    for (int j = 0; j < n->nout; j++) {
      int t = n->out[j];
      if (nnc_ref_kernel_lists(k->out, k->nout, t)) continue;
      free(r->val[t]);
      r->val[t] = NULL;
    }
  }
}

static nnc_status run_kernel(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  nnc_status st = check_kernel(r, k, ki, err);
  if (st) return st;
  switch (k->kind) {
  case NNC_KERNEL_GEMM: st = nnc_ref_kernel_gemm(r, k, ki, err); break;
  case NNC_KERNEL_ATTENTION: st = nnc_ref_kernel_attention(r, k, ki, err); break;
  case NNC_KERNEL_ELEMENTWISE: st = nnc_ref_kernel_elementwise(r, k, ki, err); break;
  case NNC_KERNEL_ROW: case NNC_KERNEL_REDUCE: case NNC_KERNEL_GATHER: case NNC_KERNEL_MOVE:
  case NNC_KERNEL_VIEW: case NNC_KERNEL_LOSS: case NNC_KERNEL_NORM_GRAD: st = run_nodes(r, k, err); break;
  case NNC_KERNEL_ATTENTION_GRAD: st = nnc_ref_kernel_attention_grad(r, k, ki, err); break;
  default:
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "unknown kernel kind %d", (int)k->kind);
  }
  drop_internal(r, k);
  if (st) return st;
  for (int i = 0; i < k->nout; i++)
    if (!r->val[k->out[i]])
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected its output %s to be written, found it "
                                 "unwritten", r->g->tensors[k->out[i]].name);
  return NNC_OK;
}

nnc_status nnc_ref_run_schedule(nnc_ref *r, const nnc_schedule *s, nnc_error *err) {
  if (s->g && s->g != r->g)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "reference: the schedule belongs to another graph");
  /* Values left by an earlier run must not stand in for what a kernel fails to write. */
  for (int t = 0; t < r->g->ntensors; t++)
    if (r->g->tensors[t].kind == NNC_TENSOR_VALUE) {
      free(r->val[t]);
      r->val[t] = NULL;
    }
  for (int i = 0; i < s->nk; i++) {
    nnc_status st = run_kernel(r, &s->k[i], i, err);
    if (st) return st;
  }
  return NNC_OK;
}
