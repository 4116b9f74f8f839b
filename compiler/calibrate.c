/* compiler/calibrate.c — `nnc calibrate` (calibrate.h). */
#include "calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "ref/ref.h"
#include "runtime/nnrt.h"
#include "smooth.h"

#define E4M3_MAX 448.0

nnc_status nnc_calibrate_method(const char *text, double *percentile, nnc_error *err) {
  if (!text || strcmp(text, "absmax") == 0) {
    *percentile = 100.0;
    return NNC_OK;
  }
  char *end = NULL;
  double p = strncmp(text, "percentile:", 11) == 0 ? strtod(text + 11, &end) : NAN;
  if (!end || *end || !(p > 0.0 && p <= 100.0))
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--method: expected absmax or percentile:P with 0 < P <= 100, "
                      "found \"%s\"", text);
  *percentile = p;
  return NNC_OK;
}

/* The names of the weights a --precision=fp8 folder holds as e4m3: the
 * model compiled as nnc_build compiles it, then marked by the quantize pass. */
static nnc_status fp8_weights(const nnc_calibrate_opts *o, char ***names, int *n, nnc_error *err) {
  nnc_frontend_opts fo = {.path = o->model, .defines = o->defines, .ndefines = o->ndefines};
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  nnc_precision p;
  nnc_status st = nnc_precision_parse("fp8", &p, err);
  if (!st) st = nnc_frontend_load(&fo, &g, err);
  if (!st) st = nnc_pass_precision(&g, &p, err);
  if (!st) st = nnc_compile_graph(&g, &s, err);
  if (!st) st = nnc_pass_quantize(&g, NNC_QUANTIZE_FP8, true, n, err);
  if (!st) {
    *names = calloc((size_t)*n + 1, sizeof **names);
    if (!*names) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  }
  for (int i = 0, k = 0; !st && i < g.nparams; i++) {
    const nnc_tensor *t = &g.tensors[g.params[i]];
    if (t->quant.kind != NNC_QUANT_FP8_CHANNEL) continue;
    if (!((*names)[k++] = strdup(t->name))) st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  }
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
  return st;
}

/* The symbols' sizes from the data's shapes: each symbolic dim of an input
 * is k * one symbol. */
static nnc_status dims_of(const nnc_graph *g, const nnrt_st *data, int64_t *sym, nnc_error *err) {
  for (int i = 0; i < g->ninputs; i++) {
    const nnc_tensor *in = &g->tensors[g->inputs[i]];
    const nnrt_st_tensor *t;
    nnrt_error e = {0};
    if (nnrt_st_find(data, in->name, &t, &e))
      return nnc_errorf(err, NNC_E_USAGE, in->loc, "calibrate: --data: expected the input %s, found none in %s", in->name,
                        nnrt_st_label(data));
    if (t->rank != in->rank)
      return nnc_errorf(err, NNC_E_USAGE, in->loc, "calibrate: --data: input %s: expected rank %d, found %d", in->name,
                        in->rank, t->rank);
    for (int d = 0; d < in->rank; d++) {
      nnc_dim dim = in->shape[d];
      int64_t v = t->shape[d];
      if (dim.nsym == 0 && v == dim.k) continue;
      if (dim.nsym == 1 && dim.k > 0 && v % dim.k == 0 && v / dim.k >= 1 && v / dim.k <= g->syms[dim.sym[0]].max &&
          (sym[dim.sym[0]] == 0 || sym[dim.sym[0]] == v / dim.k)) {
        sym[dim.sym[0]] = v / dim.k;
        continue;
      }
      char want[64];
      return nnc_errorf(err, NNC_E_USAGE, in->loc, "calibrate: --data: input %s dim %d: expected %s (its symbols within "
                        "their maxima and agreeing across inputs), found %lld", in->name, d + 1,
                        nnc_dim_format(g, dim, want, sizeof want), (long long)v);
    }
  }
  for (int s = 0; s < g->nsyms; s++)
    if (sym[s] == 0)
      return nnc_errorf(err, NNC_E_USAGE, g->syms[s].loc, "calibrate: --data: expected an input whose shape gives %s, "
                        "found none", g->syms[s].name);
  return NNC_OK;
}

/* Tensor t of a file as doubles into v (n of them): floats widened, i32 as
 * integers. */
static nnc_status read_values(const nnrt_st *f, const nnrt_st_tensor *t, double *v, int64_t n, nnc_error *err) {
  nnrt_error e = {0};
  if (t->numel != n)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "calibrate: %s in %s: expected %lld values, found %lld", t->name,
                      nnrt_st_label(f), (long long)n, (long long)t->numel);
  void *buf = malloc((size_t)(n ? n : 1) * 4);
  if (!buf) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  nnrt_status rs = t->dtype == NNRT_I32 ? nnrt_st_copy(f, t, buf, (size_t)n * 4, &e)
                                        : nnrt_st_copy_f32(f, t, buf, (size_t)n, &e);
  for (int64_t i = 0; !rs && i < n; i++) {
    if (t->dtype == NNRT_I32) {
      int32_t x;
      memcpy(&x, (char *)buf + i * 4, 4);
      v[i] = x;
    } else {
      v[i] = ((float *)buf)[i];
    }
  }
  free(buf);
  return rs ? nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "calibrate: %s", e.msg) : NNC_OK;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The P-th percentile of |A| over every value the linears reading weight p
 * read (P = 100: the largest); *count gets how many. */
static nnc_status statistic(const nnc_graph *g, const nnc_ref *r, int p, double pct, double *out, int64_t *count,
                            nnc_error *err) {
  int64_t total = 0;
  for (int n = 0; n < g->nnodes; n++) {
    const nnc_node *x = &g->nodes[n];
    if (!x->dead && x->op == NNC_OP_LINEAR && x->in[1] == p) total += nnc_ref_elems(r, x->in[0]);
  }
  double *all = malloc((size_t)(total ? total : 1) * sizeof *all);
  if (!all) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  int64_t k = 0;
  for (int n = 0; n < g->nnodes; n++) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead || x->op != NNC_OP_LINEAR || x->in[1] != p) continue;
    const double *a = r->val[x->in[0]];
    if (!a) {
      free(all);
      return nnc_errorf(err, NNC_E_INTERNAL, x->loc, "calibrate: the reference kept no values of %s's input",
                        g->tensors[p].name);
    }
    for (int64_t i = 0, m = nnc_ref_elems(r, x->in[0]); i < m; i++) all[k++] = fabs(a[i]);
  }
  double v = 0;
  if (k && pct >= 100.0) {
    for (int64_t i = 0; i < k; i++) v = all[i] > v ? all[i] : v;
  } else if (k) {
    qsort(all, (size_t)k, sizeof *all, by_value);
    int64_t at = (int64_t)ceil(pct / 100.0 * (double)k) - 1;
    v = all[at < 0 ? 0 : at];
  }
  free(all);
  *out = v;
  *count = k;
  return NNC_OK;
}

static bool is_scale_of(const char *name, char *const *names, int n) {
  size_t len = strlen(name), suf = strlen(".input_scale");
  if (len <= suf || strcmp(name + len - suf, ".input_scale") != 0) return false;
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len - suf && strncmp(names[i], name, len - suf) == 0) return true;
  return false;
}

/* The weights file's tensors (but old input_scales of these weights), then
 * one input_scale a weight. */
static nnc_status write_out(const nnc_calibrate_opts *o, const nnrt_st *w, char **names, const float *scales, int n,
                            nnc_error *err) {
  int nw = nnrt_st_count(w), total = 0;
  nnrt_st_desc *desc = calloc((size_t)(nw + n) + 1, sizeof *desc);
  const void **data = calloc((size_t)(nw + n) + 1, sizeof *data);
  char **scale_names = calloc((size_t)n + 1, sizeof *scale_names);
  nnc_status st = desc && data && scale_names ? NNC_OK : nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  for (int i = 0; !st && i < nw; i++) {
    const nnrt_st_tensor *t = nnrt_st_at(w, i);
    if (is_scale_of(t->name, names, n)) continue;
    desc[total] = (nnrt_st_desc){t->name, t->dtype, t->rank, {0}};
    memcpy(desc[total].shape, t->shape, sizeof t->shape);
    data[total++] = t->data;
  }
  for (int i = 0; !st && i < n; i++) {
    size_t len = strlen(names[i]) + sizeof ".input_scale";
    if (!(scale_names[i] = malloc(len))) {
      st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
      break;
    }
    snprintf(scale_names[i], len, "%s.input_scale", names[i]);
    desc[total] = (nnrt_st_desc){scale_names[i], NNRT_F32, 1, {1}};
    data[total++] = &scales[i];
  }
  nnrt_error e = {0};
  if (!st && nnrt_st_write(o->out, total, desc, data, &e))
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "calibrate: -o %s: %s", o->out, e.msg);
  for (int i = 0; scale_names && i < n; i++) free(scale_names[i]);
  free(scale_names);
  free(desc);
  free(data);
  return st;
}

nnc_status nnc_calibrate(const nnc_calibrate_opts *o, FILE *report, nnc_error *err) {
  char **names = NULL;
  int n = 0;
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_ref r;
  memset(&r, 0, sizeof r);
  nnrt_st *w = NULL, *data = NULL;
  float *scales = NULL;
  int64_t *sym = NULL;
  nnrt_error e = {0};
  nnc_status st = o->smooth > 0 ? NNC_OK : fp8_weights(o, &names, &n, err);
  nnc_frontend_opts fo = {.path = o->model, .defines = o->defines, .ndefines = o->ndefines};
  if (!st) st = nnc_frontend_load(&fo, &g, err);
  if (!st) st = nnc_pass_check(&g, err);
  if (!st && nnrt_st_open(o->weights, &w, &e)) st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "calibrate: --weights: %s", e.msg);
  if (!st && nnrt_st_open(o->data, &data, &e)) st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "calibrate: --data: %s", e.msg);
  if (!st && !(sym = calloc((size_t)g.nsyms + 1, sizeof *sym)))
    st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  if (!st) st = dims_of(&g, data, sym, err);
  if (!st) st = nnc_ref_init(&r, &g, sym, err);
  for (int pass = 0; pass < 2 && !st; pass++) {
    /* the inputs from --data, the parameters from --weights */
    int count = pass ? g.nparams : g.ninputs;
    for (int i = 0; !st && i < count; i++) {
      int t = pass ? g.params[i] : g.inputs[i];
      const nnrt_st_tensor *ft;
      const nnrt_st *f = pass ? w : data;
      if (nnrt_st_find(f, g.tensors[t].name, &ft, &e)) {
        st = nnc_errorf(err, NNC_E_USAGE, g.tensors[t].loc, "calibrate: %s", e.msg);
        break;
      }
      double *v = nnc_ref_alloc(&r, t);
      st = v ? read_values(f, ft, v, nnc_ref_elems(&r, t), err)
             : nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
    }
  }
  if (!st) st = nnc_ref_run_graph(&r, err);
  if (!st && o->smooth > 0) {
    st = nnc_smooth(&g, &r, w, o->smooth, o->out, report, NULL, err);
    n = 0;   /* no input scales */
  }
  if (!st && o->smooth <= 0 && !(scales = calloc((size_t)n + 1, sizeof *scales)))
    st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "calibrate: out of memory");
  for (int i = 0; !st && i < n; i++) {
    int p = -1;
    for (int j = 0; j < g.nparams && p < 0; j++)
      if (strcmp(g.tensors[g.params[j]].name, names[i]) == 0) p = g.params[j];
    double v = 0;
    int64_t count = 0;
    st = p < 0 ? nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "calibrate: %s is not a parameter of the model", names[i])
               : statistic(&g, &r, p, o->percentile, &v, &count, err);
    scales[i] = (float)(v / E4M3_MAX);
    if (!st && report)
      fprintf(report, "%s.input_scale %.6g (%s %.6g of %lld values)\n", names[i], (double)scales[i],
              o->percentile >= 100.0 ? "max |A|" : "percentile of |A|", v, (long long)count);
  }
  if (!st && o->smooth <= 0) st = write_out(o, w, names, scales, n, err);
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
  free(scales);
  free(sym);
  nnc_ref_free(&r);
  nnrt_st_close(w);
  nnrt_st_close(data);
  nnc_graph_free(&g);
  return st;
}
