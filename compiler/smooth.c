/* compiler/smooth.c — `nnc calibrate --smooth=ALPHA` (smooth.h). */
#include "smooth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_READERS 8

/* One norm whose output linears read: its gamma (and beta) and the
 * linears, all [..., K] -> [..., N_i]. fold: only those linears read it
 * (and only the norm its gamma and beta), so s folds into the file's
 * values; otherwise each linear's weight gets `<weight>.smooth`. */
typedef struct migration {
  int node, gamma, beta;        /* beta -1: rmsnorm */
  int reader[MAX_READERS], nreaders;
  int64_t K;
  bool fold;
} migration;

/* A changed tensor of the file (t), or an added one (t NULL: `name`, [n]):
 * its f32 values. */
typedef struct changed {
  const nnrt_st_tensor *t;
  char *name;
  int64_t n;
  float *v;
} changed;

nnc_status nnc_smooth_alpha(const char *text, double *alpha, nnc_error *err) {
  char *end = NULL;
  double a = text ? strtod(text, &end) : NAN;
  if (!end || *end || !(a > 0.0 && a < 1.0))
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--smooth: expected an alpha with 0 < alpha < 1 (SmoothQuant's "
                      "0.5), found \"%s\"", text ? text : "");
  *alpha = a;
  return NNC_OK;
}

/* How many live nodes read tensor t (as any input), and whether it is an output of the graph. */
static int readers_of(const nnc_graph *g, int t) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const nnc_node *x = &g->nodes[i];
    for (int j = 0; !x->dead && j < x->nin; j++) n += x->in[j] == t;
  }
  for (int i = 0; i < g->noutputs; i++) n += g->outputs[i].tensor == t;
  return n;
}

/* Whether node n is a norm whose output linears read as their A, each with
 * a weight of its own: m gets it, folded when nothing else reads the output
 * and only the norm reads its gamma and beta. */
static bool migratable(const nnc_graph *g, int n, migration *m) {
  const nnc_node *x = &g->nodes[n];
  if (x->dead || (x->op != NNC_OP_LAYERNORM && x->op != NNC_OP_RMSNORM)) return false;
  const int out = x->out[0];
  const nnc_tensor *o = &g->tensors[out];
  m->node = n;
  m->gamma = x->nin > 1 ? x->in[1] : -1;
  m->beta = x->op == NNC_OP_LAYERNORM && x->nin > 2 ? x->in[2] : -1;
  m->nreaders = 0;
  m->K = o->rank ? o->shape[o->rank - 1].k : 0;
  if (!o->rank || !nnc_dim_is_const(o->shape[o->rank - 1])) return false;
  int reads = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const nnc_node *y = &g->nodes[i];
    if (y->dead) continue;
    for (int j = 0; j < y->nin; j++) {
      if (y->in[j] != out) continue;
      reads++;
      if (y->op != NNC_OP_LINEAR || j != 0 || m->nreaders == MAX_READERS) continue;
      const nnc_tensor *w = &g->tensors[y->in[1]];
      /* the weight only this linear reads, K along its input axis */
      if (w->kind == NNC_TENSOR_PARAM && w->rank == 2 && readers_of(g, y->in[1]) == 1 &&
          nnc_dim_eq_const(w->shape[y->attrs.weight_in_out ? 0 : 1], m->K))
        m->reader[m->nreaders++] = i;
    }
  }
  const bool own = m->gamma >= 0 && g->tensors[m->gamma].kind == NNC_TENSOR_PARAM && readers_of(g, m->gamma) == 1 &&
                   (m->beta < 0 || (g->tensors[m->beta].kind == NNC_TENSOR_PARAM && readers_of(g, m->beta) == 1));
  m->fold = own && m->nreaders == reads && reads == readers_of(g, out);
  return m->nreaders > 0;
}

/* The file's tensor t as f32 values, to be changed and written. */
static nnc_status load(const nnrt_st *w, const nnc_graph *g, int t, changed *c, nnc_error *err) {
  nnrt_error e = {0};
  if (nnrt_st_find(w, g->tensors[t].name, &c->t, &e))
    return nnc_errorf(err, NNC_E_USAGE, g->tensors[t].loc, "calibrate --smooth: %s", e.msg);
  c->v = malloc((size_t)(c->t->numel ? c->t->numel : 1) * sizeof *c->v);
  if (!c->v) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
  if (nnrt_st_copy_f32(w, c->t, c->v, (size_t)c->t->numel, &e))
    return nnc_errorf(err, NNC_E_USAGE, g->tensors[t].loc, "calibrate --smooth: %s", e.msg);
  return NNC_OK;
}

/* s (K values) for m from the reference's A and weights; *lo, *hi: its range,
 * *a_before, *a_after: the largest max|A_k| over the smallest, before and after. */
static nnc_status scales(const nnc_graph *g, const nnc_ref *r, const migration *m, double alpha, double *s, double *lo,
                         double *hi, double *a_before, double *a_after, nnc_error *err) {
  const int out = g->nodes[m->node].out[0];
  const double *a = r->val[out];
  if (!a) return nnc_errorf(err, NNC_E_INTERNAL, g->nodes[m->node].loc, "calibrate --smooth: no values of %s",
                            g->tensors[out].name);
  const int64_t K = m->K, rows = K ? nnc_ref_elems(r, out) / K : 0;
  double *amax = calloc((size_t)K + 1, sizeof *amax), *wmax = calloc((size_t)K + 1, sizeof *wmax);
  if (!amax || !wmax) {
    free(amax);
    free(wmax);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t k = 0; k < K; k++) amax[k] = fmax(amax[k], fabs(a[i * K + k]));
  for (int j = 0; j < m->nreaders; j++) {
    const nnc_node *y = &g->nodes[m->reader[j]];
    const double *w = r->val[y->in[1]];
    const int64_t N = nnc_ref_elems(r, y->in[1]) / K;
    for (int64_t n = 0; w && n < N; n++)
      for (int64_t k = 0; k < K; k++) wmax[k] = fmax(wmax[k], fabs(y->attrs.weight_in_out ? w[k * N + n] : w[n * K + k]));
  }
  double bmax = 0, bmin = INFINITY, smax = 0, smin = INFINITY;
  *lo = INFINITY;
  *hi = 0;
  for (int64_t k = 0; k < K; k++) {
    /* a channel the data never reaches, or no weight reads: left as it is */
    s[k] = amax[k] > 0 && wmax[k] > 0 ? pow(amax[k], alpha) / pow(wmax[k], 1.0 - alpha) : 1.0;
    *lo = fmin(*lo, s[k]);
    *hi = fmax(*hi, s[k]);
    if (amax[k] > 0) {
      bmax = fmax(bmax, amax[k]);
      bmin = fmin(bmin, amax[k]);
      smax = fmax(smax, amax[k] / s[k]);
      smin = fmin(smin, amax[k] / s[k]);
    }
  }
  *a_before = bmin > 0 && bmin < INFINITY ? bmax / bmin : 0;
  *a_after = smin > 0 && smin < INFINITY ? smax / smin : 0;
  free(amax);
  free(wmax);
  return NNC_OK;
}

/* `<weight>.smooth` = s for each reader, the file's values unchanged. */
static nnc_status add_factors(const nnc_graph *g, const migration *m, const double *s, changed *c, int *nc,
                              nnc_error *err) {
  for (int j = 0; j < m->nreaders; j++) {
    const char *w = g->tensors[g->nodes[m->reader[j]].in[1]].name;
    changed *a = &c[(*nc)++];
    size_t len = strlen(w) + sizeof ".smooth";
    a->name = malloc(len);
    a->n = m->K;
    a->v = malloc((size_t)(m->K ? m->K : 1) * sizeof *a->v);
    if (!a->name || !a->v) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
    snprintf(a->name, len, "%s.smooth", w);
    for (int64_t k = 0; k < m->K; k++) a->v[k] = (float)s[k];
  }
  return NNC_OK;
}

/* Column k of each reader's weight times s_k; gamma and beta over s_k. */
static nnc_status apply(const nnc_graph *g, const nnrt_st *w, const migration *m, const double *s, changed *c,
                        int *nc, nnc_error *err) {
  if (!m->fold) return add_factors(g, m, s, c, nc, err);
  nnc_status st = load(w, g, m->gamma, &c[(*nc)++], err);
  for (int64_t k = 0; !st && k < m->K; k++) c[*nc - 1].v[k] = (float)(c[*nc - 1].v[k] / s[k]);
  if (!st && m->beta >= 0) {
    st = load(w, g, m->beta, &c[(*nc)++], err);
    for (int64_t k = 0; !st && k < m->K; k++) c[*nc - 1].v[k] = (float)(c[*nc - 1].v[k] / s[k]);
  }
  for (int j = 0; !st && j < m->nreaders; j++) {
    const nnc_node *y = &g->nodes[m->reader[j]];
    st = load(w, g, y->in[1], &c[(*nc)++], err);
    float *v = c[*nc - 1].v;
    const int64_t N = st ? 0 : c[*nc - 1].t->numel / m->K;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < m->K; k++) {
        float *p = y->attrs.weight_in_out ? &v[k * N + n] : &v[n * m->K + k];
        *p = (float)(*p * s[k]);
      }
  }
  return st;
}

/* The largest relative difference of g's outputs from r's when the model
 * runs again with the changed values: the migration keeps the function, so
 * it is f32's rounding of the changed weights. */
static nnc_status recheck(const nnc_graph *g, const nnc_ref *r, const changed *c, int nc, double *diff,
                          nnc_error *err) {
  nnc_ref again;
  nnc_status st = nnc_ref_init(&again, g, r->sym, err);
  if (st) return st;
  for (int i = 0; !st && i < g->ninputs + g->nparams; i++) {
    int t = i < g->ninputs ? g->inputs[i] : g->params[i - g->ninputs];
    double *v = nnc_ref_alloc(&again, t);
    if (!v || !r->val[t]) {
      st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
      break;
    }
    int64_t n = nnc_ref_elems(r, t);
    const changed *mine = NULL;
    for (int j = 0; j < nc && !mine; j++) mine = c[j].t && strcmp(c[j].t->name, g->tensors[t].name) == 0 ? &c[j] : NULL;
    for (int64_t k = 0; k < n; k++) v[k] = mine ? mine->v[k] : r->val[t][k];
  }
  if (!st) st = nnc_ref_run_graph(&again, err);
  *diff = 0;
  for (int i = 0; !st && i < g->noutputs; i++) {
    int t = g->outputs[i].tensor;
    *diff = fmax(*diff, nnc_ref_rel_error(again.val[t], r->val[t], nnc_ref_elems(r, t)));
  }
  nnc_ref_free(&again);
  return st;
}

/* w's tensors, the changed ones' values instead, then the added ones, to path. */
static nnc_status write_file(const nnrt_st *w, const changed *c, int nc, const char *path, nnc_error *err) {
  int nw = nnrt_st_count(w), n = nw;
  nnrt_st_desc *desc = calloc((size_t)(nw + nc) + 1, sizeof *desc);
  const void **data = calloc((size_t)(nw + nc) + 1, sizeof *data);
  nnc_status st = desc && data ? NNC_OK : nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
  for (int i = 0; !st && i < nw; i++) {
    const nnrt_st_tensor *t = nnrt_st_at(w, i);
    const changed *mine = NULL;
    for (int j = 0; j < nc && !mine; j++) mine = c[j].t == t ? &c[j] : NULL;
    desc[i] = (nnrt_st_desc){t->name, mine ? NNRT_F32 : t->dtype, t->rank, {0}};
    memcpy(desc[i].shape, t->shape, sizeof t->shape);
    data[i] = mine ? (const void *)mine->v : t->data;
  }
  for (int j = 0; !st && j < nc; j++) {
    if (c[j].t) continue;
    const nnrt_st_tensor *old = NULL;
    if (nnrt_st_find(w, c[j].name, &old, NULL) == NNRT_OK)
      st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "calibrate --smooth: expected a weights file without %s, found "
                      "one (the file was migrated already)", c[j].name);
    desc[n] = (nnrt_st_desc){c[j].name, NNRT_F32, 1, {c[j].n}};
    data[n++] = c[j].v;
  }
  nnrt_error e = {0};
  if (!st && nnrt_st_write(path, n, desc, data, &e))
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "calibrate: -o %s: %s", path, e.msg);
  free(desc);
  free(data);
  return st;
}

nnc_status nnc_smooth(const nnc_graph *g, const nnc_ref *r, const nnrt_st *w, double alpha, const char *out,
                      FILE *report, int *count, nnc_error *err) {
  /* gamma, beta and up to MAX_READERS weights a norm */
  changed *c = calloc((size_t)g->nnodes * (MAX_READERS + 2) + 1, sizeof *c);
  double *s = NULL;
  int nc = 0, migrated = 0;
  nnc_status st = c ? NNC_OK : nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
  for (int n = 0; !st && n < g->nnodes; n++) {
    migration m;
    if (!migratable(g, n, &m)) continue;
    double *grown = realloc(s, (size_t)(m.K + 1) * sizeof *s), lo = 0, hi = 0, before = 0, after = 0;
    if (!grown) {
      st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate --smooth: out of memory");
      break;
    }
    s = grown;
    st = scales(g, r, &m, alpha, s, &lo, &hi, &before, &after, err);
    if (!st) st = apply(g, w, &m, s, c, &nc, err);
    if (st) break;
    migrated++;
    if (report) {
      fprintf(report, "%s: s from %.4g to %.4g; max|A| over its channels' %.4g -> %.4g, %s",
              m.gamma >= 0 ? g->tensors[m.gamma].name : g->tensors[g->nodes[n].out[0]].name, lo, hi, before, after,
              m.fold ? "into" : "as the .smooth of");
      for (int j = 0; j < m.nreaders; j++) fprintf(report, " %s", g->tensors[g->nodes[m.reader[j]].in[1]].name);
      fprintf(report, "\n");
    }
  }
  if (!st && !migrated)
    st = nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "calibrate --smooth: expected a layernorm or rmsnorm whose output "
                    "a linear layer reads (with a weight of its own), found none");
  /* only folded norms change the file's values (added factors change no output) */
  bool folded = false;
  for (int i = 0; i < nc; i++) folded |= c[i].t != NULL;
  double diff = 0;
  if (!st && folded) st = recheck(g, r, c, nc, &diff, err);
  if (!st && folded && report)
    fprintf(report, "the outputs with the migrated weights: max relative difference %.3g\n", diff);
  if (!st) st = write_file(w, c, nc, out, err);
  for (int i = 0; c && i < nc; i++) {
    free(c[i].v);
    free(c[i].name);
  }
  free(c);
  free(s);
  if (count) *count = migrated;
  return st;
}
