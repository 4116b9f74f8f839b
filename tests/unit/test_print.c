/* tests/unit/test_print.c — the --emit views: exact lines of the IR and plan
 * listings for a small graph, and a dot file that is well formed (balanced
 * braces and quotes, one cluster per kernel, every live node and every edge
 * endpoint declared). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/print.h"
#include "ir/schedule.h"
#include "passes/passes.h"

typedef struct tb {
  nnc_graph g;
  const char *file;
  int line;
} tb;

static nnc_srcloc at(tb *b, int line) { return (nnc_srcloc){b->file, line}; }

static int node(tb *b, nnc_op op, int nin, const int *in, const nnc_attrs *a, const char *label, int line,
                int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_node(&b->g, op, nin, in, a, 1, at(b, line), label, &id, &err)) fail_msg("%s", err.msg);
  if (shape) {
    nnc_tensor *t = &b->g.tensors[b->g.nodes[id].out[0]];
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  }
  if (nnc_infer_node(&b->g, id, &err)) fail_msg("infer: %s", err.msg);
  return b->g.nodes[id].out[0];
}

/* mlp.lua as the model writes it:
 *   3 x = input("x", f32, {"B<=5", 13})
 *   4 h = gelu(linear(layernorm(x, p.ln), 29, p.fc), {approx="tanh"})
 *   5 y = softmax(h):reshape{B * 29}
 *   6 output("y", exp(y) - "a \"quoted\" label")
 * The tensor and node ids are fixed by this order. */
static void build(tb *b, nnc_schedule *s) {
  nnc_error err = {0};
  int B = -1, x = -1, g = -1, be = -1, w = -1, bias = -1;
  nnc_graph_init(&b->g);
  b->g.name = strdup("mlp");
  b->file = nnc_graph_intern(&b->g, "mlp.lua");
  if (nnc_graph_add_symbol(&b->g, "B", 5, at(b, 3), &B, &err) ||
      nnc_graph_add_input(&b->g, "x", NNC_F32, 2, (nnc_dim[]){nnc_dim_sym(B), nnc_dim_const(13)}, at(b, 3), &x,
                          &err) ||
      nnc_graph_add_param(&b->g, "ln.weight", NNC_F32, 1, (nnc_dim[]){nnc_dim_const(13)}, at(b, 4), &g, &err) ||
      nnc_graph_add_param(&b->g, "ln.bias", NNC_F32, 1, (nnc_dim[]){nnc_dim_const(13)}, at(b, 4), &be, &err) ||
      nnc_graph_add_param(&b->g, "fc.weight", NNC_F32, 2, (nnc_dim[]){nnc_dim_const(29), nnc_dim_const(13)},
                          at(b, 4), &w, &err) ||
      nnc_graph_add_param(&b->g, "fc.bias", NNC_F32, 1, (nnc_dim[]){nnc_dim_const(29)}, at(b, 4), &bias, &err))
    fail_msg("%s", err.msg);
  nnc_attrs ln = {.eps = 1e-5}, ge = {.gelu_tanh = true}, sm = {.axis = 1};
  int h = node(b, NNC_OP_LAYERNORM, 3, (int[]){x, g, be}, &ln, "ln", 4, 0, NULL);            /* %0 t5 */
  h = node(b, NNC_OP_LINEAR, 3, (int[]){h, w, bias}, NULL, "fc", 4, 0, NULL);                /* %1 t6 */
  h = node(b, NNC_OP_GELU, 1, &h, &ge, "gelu", 4, 0, NULL);                                  /* %2 t7 */
  h = node(b, NNC_OP_SOFTMAX, 1, &h, &sm, "softmax", 5, 0, NULL);                            /* %3 t8 */
  h = node(b, NNC_OP_RESHAPE, 1, &h, NULL, "flat", 5, 1, (nnc_dim[]){{29, 1, {B}}});         /* %4 t9 */
  h = node(b, NNC_OP_EXP, 1, &h, NULL, "exp", 6, 0, NULL);                                   /* %5 t10 */
  nnc_attrs one = {.scalar = 1};
  h = node(b, NNC_OP_SUB_S, 1, &h, &one, "a \"quoted\" label", 6, 0, NULL);                  /* %6 t11 */
  if (nnc_graph_add_output(&b->g, "y", h, at(b, 6), &err)) fail_msg("%s", err.msg);
  nnc_schedule_init(s, &b->g);
  if (nnc_compile_graph(&b->g, s, &err)) fail_msg("compile: %s", err.msg);
}

/* The text a printer writes (through a real file, as the CLI does). */
static char *capture(nnc_status (*print)(FILE *, const nnc_schedule *, nnc_error *), const nnc_schedule *s) {
  FILE *f = tmpfile();
  assert_non_null(f);
  nnc_error err = {0};
  nnc_status st = print(f, s, &err);
  if (st) fail_msg("print: %s", err.msg);
  long len = ftell(f);
  assert_true(len > 0);
  char *text = malloc((size_t)len + 1);
  assert_non_null(text);
  rewind(f);
  assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
  text[len] = 0;
  fclose(f);
  return text;
}

/* text has a line equal to `line`. */
static void has_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && memcmp(p, line, n) == 0) return;
    p = e ? e + 1 : NULL;
  }
  fail_msg("no line \"%s\" in:\n%s", line, text);
}

static void test_ir(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  build(&b, &s);
  char *t = capture(nnc_print_ir, &s);
  has_line(t, "; mlp: 1 inputs, 4 parameters, 1 outputs, 7 live nodes, 4 kernels");
  has_line(t, "dim    B <= 5  mlp.lua:3");
  has_line(t, "input  t0 x f32[B,13]  mlp.lua:3");
  has_line(t, "param  t3 fc.weight f32[29,13]");
  has_line(t, "output y = t11 f32[29*B]  mlp.lua:6");
  has_line(t, "%0  layernorm   t0 t1 t2 ->  t5 f32[B,13]   kernel #0 (gemm)         ln                mlp.lua:4");
  has_line(t, "%1  linear      t5 t3 t4 ->  t6 f32[B,29]   kernel #0 (gemm)         fc                mlp.lua:4");
  has_line(t, "%4  reshape     t8 ->        t9 f32[29*B]   kernel #2 (view)         flat              mlp.lua:5");
  has_line(t, "%6  sub_scalar  t10 ->       t11 f32[29*B]  kernel #3 (elementwise)  a \"quoted\" label  mlp.lua:6");
  has_line(t, "kernels (4):");
  has_line(t, "#0    gemm        %0 layernorm %1 linear %2 gelu  reads t0 t1 t2 t3 t4  writes t7  mlp.lua:4");
  has_line(t, "      a=t0 b=t3 (transposed) bias=t4 residual=- out=t7 prologue=layernorm(gamma=t1 beta=t2 eps=1e-05) "
              "act=gelu(tanh) alpha=1");
  has_line(t, "#3    elementwise %5 exp %6 sub_scalar  reads t9  writes t11  mlp.lua:6");
  free(t);
  nnc_schedule_free(&s);
  nnc_graph_free(&b.g);
}

static void test_plan(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  build(&b, &s);
  char *t = capture(nnc_print_plan, &s);
  /* t7 gelu [B,29] f32 at B=5: 580 bytes, slot 768; t8 the same */
  has_line(t, "t7      gelu               0          580  #0..#1      f32[B,29]");
  has_line(t, "t8      softmax          768          580  #1..#3      f32[B,29]");
  has_line(t, "alias   t9 flat = view of t8 softmax (arena)");
  has_line(t, "peak 1536 bytes (0.00 MiB), unplanned 1536 bytes, saved 0.0%");
  free(t);
  nnc_schedule_free(&s);
  nnc_graph_free(&b.g);
}

/* The identifier after `prefix` at p ("n12" -> 12), or -1. */
static int id_after(const char *p, char prefix) {
  if (*p != prefix) return -1;
  char *end;
  long v = strtol(p + 1, &end, 10);
  return end == p + 1 ? -1 : (int)v;
}

static void test_dot(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  build(&b, &s);
  char *t = capture(nnc_print_dot, &s);
  assert_true(strncmp(t, "digraph \"mlp\" {", 15) == 0);
  /* braces balance outside quoted strings, quotes close, and the graph ends at the last brace */
  int depth = 0, maxdepth = 0;
  bool quoted = false;
  const char *last_close = NULL;
  for (const char *p = t; *p; p++) {
    if (quoted) {
      if (*p == '\\' && p[1]) p++;
      else if (*p == '"') quoted = false;
      continue;
    }
    if (*p == '"') quoted = true;
    if (*p == '{') depth++, maxdepth = depth > maxdepth ? depth : maxdepth;
    if (*p == '}') {
      depth--;
      assert_true(depth >= 0);
      last_close = p;
    }
  }
  assert_false(quoted);
  assert_int_equal(depth, 0);
  assert_int_equal(maxdepth, 2);
  assert_non_null(last_close);
  assert_string_equal(last_close, "}\n");
  /* one cluster per kernel, each live node declared once inside its own */
  for (int k = 0; k < s.nk; k++) {
    char want[64];
    snprintf(want, sizeof want, "subgraph cluster_k%d {", k);
    const char *c = strstr(t, want);
    assert_non_null(c);
    const char *end = strstr(c, "\n  }\n");
    assert_non_null(end);
    for (int j = 0; j < s.k[k].nnodes; j++) {
      snprintf(want, sizeof want, "    n%d [label=", s.k[k].nodes[j]);
      const char *d = strstr(c, want);
      assert_true(d && d < end);
      assert_null(strstr(d + 1, want));
    }
  }
  /* the quoted label is escaped */
  assert_non_null(strstr(t, "a \\\"quoted\\\" label"));
  /* every edge joins declared nodes */
  int edges = 0;
  for (const char *p = strstr(t, " -> "); p; p = strstr(p + 4, " -> ")) {
    const char *from = p;
    while (from > t && from[-1] != ' ') from--;
    char decl[64];
    int id;
    if ((id = id_after(from, 'n')) >= 0) snprintf(decl, sizeof decl, "    n%d [label=", id);
    else if ((id = id_after(from, 't')) >= 0) snprintf(decl, sizeof decl, "  t%d [", id);
    else fail_msg("edge from an unknown node at %.20s", from);
    assert_non_null(strstr(t, decl));
    const char *to = p + 4;
    if ((id = id_after(to, 'n')) >= 0) snprintf(decl, sizeof decl, "    n%d [label=", id);
    else if ((id = id_after(to, 'o')) < 0 && strncmp(to, "out", 3) == 0)
      snprintf(decl, sizeof decl, "  out%d [", atoi(to + 3));
    else fail_msg("edge to an unknown node at %.20s", to);
    assert_non_null(strstr(t, decl));
    edges++;
  }
  /* 7 nodes read 11 tensors; 1 output */
  assert_int_equal(edges, 12);
  free(t);
  nnc_schedule_free(&s);
  nnc_graph_free(&b.g);
}

/* A write error is an error value. */
static void test_write_error(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  build(&b, &s);
  FILE *f = fopen("/dev/full", "w");
  if (f) {
    setvbuf(f, NULL, _IONBF, 0);
    nnc_error err = {0};
    assert_int_equal(nnc_print_ir(f, &s, &err), NNC_E_IO);
    fclose(f);
  }
  nnc_schedule_free(&s);
  nnc_graph_free(&b.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ir),
    cmocka_unit_test(test_plan),
    cmocka_unit_test(test_dot),
    cmocka_unit_test(test_write_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
