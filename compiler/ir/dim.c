/* compiler/ir/dim.c — arithmetic on dims that are a constant times symbols. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

nnc_dim nnc_dim_const(int64_t k) { return (nnc_dim){.k = k}; }
nnc_dim nnc_dim_sym(int sym) { return (nnc_dim){.k = 1, .nsym = 1, .sym = {sym}}; }
bool nnc_dim_is_const(nnc_dim d) { return d.nsym == 0; }
bool nnc_dim_eq_const(nnc_dim a, int64_t k) { return a.nsym == 0 && a.k == k; }

bool nnc_dim_eq(nnc_dim a, nnc_dim b) {
  if (a.k != b.k) return false;
  if (a.k == 0) return true;
  if (a.nsym != b.nsym) return false;
  for (int i = 0; i < a.nsym; i++)
    if (a.sym[i] != b.sym[i]) return false;
  return true;
}

bool nnc_dim_mul(nnc_dim a, nnc_dim b, nnc_dim *out) {
  nnc_dim r = {0};
  if (__builtin_mul_overflow(a.k, b.k, &r.k)) return false;
  if (r.k == 0) { *out = r; return true; }
  if (a.nsym + b.nsym > NNC_DIM_SYMS) return false;
  int i = 0, j = 0;
  while (i < a.nsym || j < b.nsym) {   /* merge two sorted lists */
    if (j >= b.nsym || (i < a.nsym && a.sym[i] <= b.sym[j])) r.sym[r.nsym++] = a.sym[i++];
    else r.sym[r.nsym++] = b.sym[j++];
  }
  *out = r;
  return true;
}

bool nnc_dim_div(nnc_dim a, nnc_dim b, nnc_dim *out) {
  if (b.k == 0 || (a.k == INT64_MIN && b.k == -1) || a.k % b.k != 0) return false;   /* the one overflow */
  nnc_dim r = {.k = a.k / b.k};
  int j = 0;
  for (int i = 0; i < a.nsym; i++) {
    if (j < b.nsym && a.sym[i] == b.sym[j]) { j++; continue; }
    if (j < b.nsym && b.sym[j] < a.sym[i]) return false;   /* b has a symbol a lacks */
    r.sym[r.nsym++] = a.sym[i];
  }
  if (j != b.nsym) return false;
  if (r.k == 0) r.nsym = 0;
  *out = r;
  return true;
}

int64_t nnc_dim_eval(nnc_dim d, const int64_t *vals) {
  int64_t v = d.k;
  for (int i = 0; i < d.nsym; i++) v *= vals[d.sym[i]];
  return v;
}

char *nnc_dim_format(const nnc_graph *g, nnc_dim d, char *buf, size_t n) {
  size_t used = 0;
  if (n == 0) return buf;
  buf[0] = 0;
  if (d.nsym == 0 || d.k != 1) used += (size_t)snprintf(buf, n, "%lld", (long long)d.k);
  for (int i = 0; i < d.nsym && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? "*" : "",
                             g && d.sym[i] >= 0 && d.sym[i] < g->nsyms ? g->syms[d.sym[i]].name : "?");
  return buf;
}

char *nnc_shape_format(const nnc_graph *g, int rank, const nnc_dim *shape,
                       char *buf, size_t n) {
  size_t used = 0;
  if (n == 0) return buf;
  used += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && used < n; i++) {
    char d[64];
    used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "," : "",
                             nnc_dim_format(g, shape[i], d, sizeof d));
  }
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}
