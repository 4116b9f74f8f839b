/* compiler/ref/ref.c — the evaluator's state, its arrays, the graph run and
 * the error measure the tests compare with. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_internal.h"

nnc_status nnc_ref_init(nnc_ref *r, const nnc_graph *g, const int64_t *sym, nnc_error *err) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < g->nsyms; i++)
    if (!sym || sym[i] < 1 || sym[i] > g->syms[i].max)
      return nnc_errorf(err, NNC_E_USAGE, g->syms[i].loc,
                        "reference: expected a size of 1 to %lld for dim %s, found %lld",
                        (long long)g->syms[i].max, g->syms[i].name, sym ? (long long)sym[i] : 0LL);
  r->g = g;
  r->sym = malloc((size_t)(g->nsyms ? g->nsyms : 1) * sizeof *r->sym);
  r->val = calloc((size_t)(g->ntensors ? g->ntensors : 1), sizeof *r->val);
  if (!r->sym || !r->val) {
    nnc_ref_free(r);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "reference: out of memory");
  }
  if (g->nsyms) memcpy(r->sym, sym, (size_t)g->nsyms * sizeof *sym);
  return NNC_OK;
}

void nnc_ref_free(nnc_ref *r) {
  if (r->val && r->g)
    for (int t = 0; t < r->g->ntensors; t++) free(r->val[t]);
  free(r->val);
  free(r->sym);
  memset(r, 0, sizeof *r);
}

int64_t nnc_ref_elems(const nnc_ref *r, int t) {
  return nnc_tensor_elems(&r->g->tensors[t], r->sym);
}

double *nnc_ref_alloc(nnc_ref *r, int t) {
  if (!r->val[t]) {
    int64_t n = nnc_ref_elems(r, t);
    r->val[t] = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  }
  return r->val[t];
}

double nnc_ref_round(double v, nnc_dtype t) {
  int bits, emin; /* significant bits, exponent of the smallest normal */
  double max;     /* the largest finite value */
  switch (t) {
  case NNC_BF16: bits = 8, emin = -126, max = 0x1.fep127; break;
  case NNC_F16: bits = 11, emin = -14, max = 65504.0; break;
  case NNC_F32: bits = 24, emin = -126, max = FLT_MAX; break;
  default: return v;
  }
  if (!isfinite(v) || v == 0) return v;
  int e;
  frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
  const int lead = e - 1 > emin ? e - 1 : emin;  /* below the normals, the subnormals' fixed spacing */
  const double q = ldexp(1.0, lead - bits + 1);  /* the spacing of t's values around v */
  const double x = nearbyint(v / q) * q;         /* ties to even: the default rounding mode */
  return fabs(x) > max ? copysign(INFINITY, v) : x;
}

/* The values node n computed, rounded to r->store (see nnc_ref.store). */
static void round_outputs(nnc_ref *r, int n) {
  const nnc_node *nd = &r->g->nodes[n];
  for (int o = 0; o < nd->nout; o++) {
    const int t = nd->out[o];
    if (!r->val[t] || !nnc_dtype_is_float(r->g->tensors[t].dtype)) continue;
    for (int64_t i = 0, m = nnc_ref_elems(r, t); i < m; i++) r->val[t][i] = nnc_ref_round(r->val[t][i], r->store);
  }
}

nnc_status nnc_ref_run_graph(nnc_ref *r, nnc_error *err) {
  for (int n = 0; n < r->g->nnodes; n++) {
    if (r->g->nodes[n].dead) continue;
    nnc_status st = nnc_ref_eval_node(r, n, err);
    if (st) return st;
    if (r->store != NNC_F32) round_outputs(r, n);
  }
  return NNC_OK;
}

/* Equal values (infinities of one sign included: masked scores) differ by 0;
 * the scale is the largest finite |b| so an -inf in b hides nothing. */
double nnc_ref_rel_error(const double *a, const double *b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isnan(b[i])) return INFINITY;
    if (isfinite(b[i]) && fabs(b[i]) > scale) scale = fabs(b[i]);
    if (a[i] == b[i]) continue;
    double d = fabs(a[i] - b[i]);
    if (d > diff) diff = d;
  }
  if (isinf(diff)) return INFINITY;
  return diff / (scale > 1e-30 ? scale : 1e-30);
}
