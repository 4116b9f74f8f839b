/* tests/unit/test_memplan.c — the memory plan, checked by an independent
 * checker: storage classes and lifetimes recomputed here from the schedule,
 * no two arena buffers alive at the same time share a byte (unless one took
 * the other's slot in place, where the checker verifies the conditions),
 * offsets aligned, peak within the unplanned sum; plus hand-built cases for
 * in-place chains, views and symbolic sizes, and random graphs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/schedule.h"
#include "passes/passes.h"

/* ------------------------------------------------------------- building */

typedef struct tb {
  nnc_graph g;
  const char *file;
  int line;
} tb;

static void tb_init(tb *b) {
  nnc_graph_init(&b->g);
  b->file = nnc_graph_intern(&b->g, "m.lua");
  b->g.name = strdup("m");
  b->line = 1;
}

static nnc_srcloc here(tb *b) { return (nnc_srcloc){b->file, b->line++}; }
static nnc_dim K(int64_t k) { return nnc_dim_const(k); }
static nnc_dim S(int s) { return nnc_dim_sym(s); }

static int sym(tb *b, const char *name, int64_t max) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_symbol(&b->g, name, max, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static int input(tb *b, const char *name, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_input(&b->g, name, NNC_F32, rank, shape, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static int param(tb *b, const char *name, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_param(&b->g, name, NNC_F32, rank, shape, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

/* Adds a one-output node (presetting its shape for reshape) and infers it. */
static int node(tb *b, nnc_op op, int nin, const int *in, const nnc_attrs *a, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_node(&b->g, op, nin, in, a, 1, here(b), NULL, &id, &err)) fail_msg("%s", err.msg);
  if (shape) {
    nnc_tensor *t = &b->g.tensors[b->g.nodes[id].out[0]];
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  }
  if (nnc_infer_node(&b->g, id, &err)) fail_msg("infer: %s", err.msg);
  return b->g.nodes[id].out[0];
}

static int op1(tb *b, nnc_op op, int x) { return node(b, op, 1, &x, NULL, 0, NULL); }
static int op2(tb *b, nnc_op op, int x, int y) { return node(b, op, 2, (int[]){x, y}, NULL, 0, NULL); }
static int softmax(tb *b, int x) {
  nnc_attrs a = {.axis = b->g.tensors[x].rank - 1};
  return node(b, NNC_OP_SOFTMAX, 1, &x, &a, 0, NULL);
}
static int reshape(tb *b, int x, int rank, const nnc_dim *shape) {
  return node(b, NNC_OP_RESHAPE, 1, &x, NULL, rank, shape);
}
static int linear(tb *b, int x, int w) { return node(b, NNC_OP_LINEAR, 2, (int[]){x, w}, NULL, 0, NULL); }
static void output(tb *b, const char *name, int t) {
  nnc_error err = {0};
  if (nnc_graph_add_output(&b->g, name, t, here(b), &err)) fail_msg("%s", err.msg);
}

static void plan(tb *b, nnc_schedule *s) {
  nnc_error err = {0};
  nnc_schedule_init(s, &b->g);
  if (nnc_pass_fuse(&b->g, NULL, s, &err)) fail_msg("fuse: %s", err.msg);
  if (nnc_pass_memplan(s, &err)) fail_msg("memplan: %s", err.msg);
}

static void done(tb *b, nnc_schedule *s) {
  nnc_schedule_free(s);
  nnc_graph_free(&b->g);
}

static int64_t align256(int64_t v) { return (v + 255) / 256 * 256; }

/* ------------------------------------------------------------- checker */

static bool is_output(const nnc_graph *g, int t) {
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].tensor == t) return true;
  return false;
}

/* Recomputes what the plan must say and checks it. */
static void check_plan(const nnc_schedule *s) {
  const nnc_graph *g = s->g;
  const nnc_memplan *p = &s->plan;
  assert_non_null(p->buf);
  assert_int_equal(p->alignment, 256);
  int n = g->ntensors;
  int *writer = malloc((size_t)n * sizeof *writer), *root = malloc((size_t)n * sizeof *root);
  int *last = malloc((size_t)n * sizeof *last);
  nnc_storage *want = malloc((size_t)n * sizeof *want);
  assert_true(writer && root && last && want);
  for (int t = 0; t < n; t++) {
    writer[t] = -1;
    root[t] = t;
    last[t] = -1;
    want[t] = NNC_STORE_NONE;
  }
  for (int i = 0; i < g->ninputs; i++) want[g->inputs[i]] = NNC_STORE_USER;
  for (int i = 0; i < g->nparams; i++) want[g->params[i]] = NNC_STORE_PARAM;
  for (int k = 0; k < s->nk; k++)
    for (int j = 0; j < s->k[k].nout; j++) {
      int t = s->k[k].out[j];
      writer[t] = k;
      last[t] = k;
      if (is_output(g, t)) {
        want[t] = NNC_STORE_USER;
      } else if (s->k[k].kind == NNC_KERNEL_VIEW) {
        want[t] = NNC_STORE_ALIAS;
        root[t] = root[s->k[k].in[0]];
      } else {
        want[t] = NNC_STORE_ARENA;
      }
    }
  for (int k = 0; k < s->nk; k++)
    for (int j = 0; j < s->k[k].nin; j++) {
      int t = s->k[k].in[j];
      if (last[t] < k) last[t] = k;
      if (last[root[t]] < k) last[root[t]] = k;
    }
  int64_t sum = 0, top = 0;
  for (int t = 0; t < n; t++) {
    const nnc_buffer *b = &p->buf[t];
    assert_int_equal(b->storage, want[t]);
    if (want[t] == NNC_STORE_ALIAS) {
      assert_int_equal(b->alias_of, root[t]);
      assert_int_not_equal(p->buf[root[t]].storage, NNC_STORE_ALIAS);
    } else {
      assert_int_equal(b->alias_of, -1);
    }
    if (want[t] != NNC_STORE_ARENA) continue;
    assert_int_equal(b->first, writer[t]);
    assert_int_equal(b->last, last[t]);
    assert_int_equal(b->offset % 256, 0);
    int64_t elems = nnc_tensor_max_elems(g, &g->tensors[t]);
    assert_int_equal(b->size, elems * nnc_dtype_size(g->tensors[t].dtype));
    sum += align256(b->size);
    if (b->offset + b->size > top) top = b->offset + b->size;
    assert_true(b->offset + b->size <= p->peak);
  }
  assert_true(p->peak >= top);
  assert_int_equal(p->unplanned, sum);
  assert_true(p->peak <= p->unplanned);
  /* no two buffers alive together overlap, except an in-place output over
   * the input it replaces: same offset, that input read by its writer and
   * dying there, an elementwise writer, the same size */
  for (int a = 0; a < n; a++) {
    const nnc_buffer *x = &p->buf[a];
    if (x->storage != NNC_STORE_ARENA) continue;
    for (int c = a + 1; c < n; c++) {
      const nnc_buffer *y = &p->buf[c];
      if (y->storage != NNC_STORE_ARENA) continue;
      bool together = x->first <= y->last && y->first <= x->last;
      bool overlap = x->offset < y->offset + y->size && y->offset < x->offset + x->size;
      if (!together || !overlap) continue;
      const nnc_buffer *later = x->first > y->first ? x : y, *earlier = later == x ? y : x;
      int lt = later == x ? a : c, et = later == x ? c : a;
      if (!later->in_place || later->offset != earlier->offset || earlier->last != later->first ||
          later->size != earlier->size)
        fail_msg("%s [%d..%d] at %lld+%lld overlaps %s [%d..%d] at %lld+%lld", g->tensors[a].name, x->first,
                 x->last, (long long)x->offset, (long long)x->size, g->tensors[c].name, y->first, y->last,
                 (long long)y->offset, (long long)y->size);
      const nnc_kernel *k = &s->k[later->first];
      assert_int_equal(k->kind, NNC_KERNEL_ELEMENTWISE);
      bool reads = false;
      for (int j = 0; j < k->nin; j++) reads |= root[k->in[j]] == et;
      assert_true(reads);
      assert_int_equal(k->out[0], lt);
    }
  }
  free(writer);
  free(root);
  free(last);
  free(want);
}

/* ---------------------------------------------------------------- tests */

/* softmax -> exp -> softmax -> ... : every exp writes over its input, each
 * softmax needs a second slot, so 10 kernels live in 2 slots. */
static void test_chain_two_slots(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", 2, (nnc_dim[]){S(N), K(13)});
  int h = x;
  int vals[10];
  for (int i = 0; i < 10; i++) vals[i] = h = i % 2 ? op1(&b, NNC_OP_EXP, h) : softmax(&b, h);
  output(&b, "y", softmax(&b, h));
  plan(&b, &s);
  check_plan(&s);
  assert_int_equal(s.nk, 11);
  int64_t one = align256(29 * 13 * 4);
  assert_true(s.plan.peak <= 2 * one);
  assert_int_equal(s.plan.unplanned, 10 * one);
  for (int i = 1; i < 10; i += 2) {
    assert_true(s.plan.buf[vals[i]].in_place);
    assert_int_equal(s.plan.buf[vals[i]].offset, s.plan.buf[vals[i - 1]].offset);
  }
  for (int i = 0; i < 10; i += 2) assert_false(s.plan.buf[vals[i]].in_place);
  done(&b, &s);
}

/* An input read again later cannot be overwritten; one of another size
 * (broadcast) neither. */
static void test_no_in_place(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", 2, (nnc_dim[]){S(N), K(13)});
  int a = softmax(&b, x);
  int e = op1(&b, NNC_OP_EXP, a);
  int c = softmax(&b, e);
  int d = op2(&b, NNC_OP_ADD, c, a);   /* a still alive here */
  int sd = softmax(&b, d);
  int row = softmax(&b, input(&b, "r", 1, (nnc_dim[]){K(13)}));
  int big = op2(&b, NNC_OP_MUL, sd, row);   /* row [13] is smaller than big [N,13] */
  output(&b, "y", softmax(&b, big));
  plan(&b, &s);
  check_plan(&s);
  assert_false(s.plan.buf[e].in_place);
  assert_true(s.plan.buf[d].in_place);    /* c dies at d and has d's size */
  assert_int_equal(s.plan.buf[d].offset, s.plan.buf[c].offset);
  assert_true(s.plan.buf[big].in_place);  /* over sd, not over row */
  assert_int_equal(s.plan.buf[big].offset, s.plan.buf[sd].offset);
  assert_int_not_equal(s.plan.buf[big].offset, s.plan.buf[row].offset);
  assert_int_equal(s.plan.buf[a].last, s.kernel_of_node[b.g.tensors[d].producer]);
  done(&b, &s);
}

/* Views alias the tensor that owns the storage, following chains; readers
 * of a view keep the root alive; a view of an input aliases the input; a
 * reshape that is an output is a copy into the caller's buffer. */
static void test_views(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  nnc_dim n13 = {13, 1, {N}};
  int x = input(&b, "x", 2, (nnc_dim[]){S(N), K(13)});
  int xv = reshape(&b, x, 1, (nnc_dim[]){n13});
  int a = softmax(&b, x);
  int v1 = reshape(&b, a, 1, (nnc_dim[]){n13});
  int v2 = reshape(&b, v1, 3, (nnc_dim[]){S(N), K(1), K(13)});
  int mid = softmax(&b, input(&b, "z", 2, (nnc_dim[]){S(N), K(13)}));
  int late = softmax(&b, v2);
  int o = reshape(&b, late, 1, (nnc_dim[]){n13});
  output(&b, "y", o);
  output(&b, "xv", op1(&b, NNC_OP_NEG, xv));
  output(&b, "mid", op1(&b, NNC_OP_EXP, mid));
  plan(&b, &s);
  check_plan(&s);
  assert_int_equal(s.plan.buf[xv].storage, NNC_STORE_ALIAS);
  assert_int_equal(s.plan.buf[xv].alias_of, x);
  assert_int_equal(s.plan.buf[v1].alias_of, a);
  assert_int_equal(s.plan.buf[v2].alias_of, a);
  assert_int_equal(s.plan.buf[v2].offset, s.plan.buf[a].offset);
  assert_int_equal(s.plan.buf[a].last, s.kernel_of_node[b.g.tensors[late].producer]);
  assert_int_equal(s.plan.buf[o].storage, NNC_STORE_USER);
  assert_int_equal(s.k[s.kernel_of_node[b.g.tensors[o].producer]].kind, NNC_KERNEL_MOVE);
  /* mid lives while a does (a is read through v2 after mid is written) */
  assert_true(s.plan.buf[mid].offset >= s.plan.buf[a].offset + s.plan.buf[a].size ||
              s.plan.buf[a].offset >= s.plan.buf[mid].offset + s.plan.buf[mid].size);
  done(&b, &s);
}

static int slice(tb *b, int x, int axis, nnc_dim start, nnc_dim stop) {
  nnc_attrs a = {.axis = axis, .start = start, .stop = stop};
  return node(b, NNC_OP_SLICE, 1, &x, &a, 0, NULL);
}

/* A slice that keeps its input's first bytes (start 0, the axes before it
 * of size 1) becomes a view (slice_view.c): the position table's first T
 * rows, a slice of a [1, 7, 5] value along axis 1; one that starts later,
 * one with a longer axis in front and one the caller receives stay copies. */
static void test_prefix_slices(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  nnc_error err = {0};
  tb_init(&b);
  int T = sym(&b, "T", 7);
  int table = param(&b, "wpe", 2, (nnc_dim[]){K(9), K(5)});
  int x = input(&b, "x", 2, (nnc_dim[]){S(T), K(5)});
  int z = input(&b, "z", 3, (nnc_dim[]){K(1), K(7), K(5)});
  int w = input(&b, "w", 2, (nnc_dim[]){K(2), K(7)});
  int rows = slice(&b, table, 0, K(0), S(T));
  int later = slice(&b, table, 0, K(2), K(7));
  int zs = slice(&b, op1(&b, NNC_OP_EXP, z), 1, K(0), K(3));
  int ws = slice(&b, w, 1, K(0), K(3));
  int out = slice(&b, table, 0, K(0), K(4));
  output(&b, "y", op2(&b, NNC_OP_ADD, x, rows));
  output(&b, "later", op1(&b, NNC_OP_NEG, later));
  output(&b, "zs", op1(&b, NNC_OP_NEG, zs));
  output(&b, "ws", op1(&b, NNC_OP_NEG, ws));
  output(&b, "out", out);
  nnc_schedule_init(&s, &b.g);
  if (nnc_pass_fuse(&b.g, NULL, &s, &err)) fail_msg("fuse: %s", err.msg);
  int viewed = -1;
  if (nnc_pass_slice_view(&s, &viewed, &err)) fail_msg("slice_view: %s", err.msg);
  if (nnc_pass_memplan(&s, &err)) fail_msg("memplan: %s", err.msg);
  check_plan(&s);
  assert_int_equal(viewed, 2);
  assert_int_equal(s.plan.buf[rows].storage, NNC_STORE_ALIAS);
  assert_int_equal(s.plan.buf[rows].alias_of, table);
  assert_int_equal(s.plan.buf[zs].storage, NNC_STORE_ALIAS);
  assert_int_equal(s.plan.buf[zs].alias_of, b.g.nodes[b.g.tensors[zs].producer].in[0]);
  assert_int_equal(s.plan.buf[later].storage, NNC_STORE_ARENA);
  assert_int_equal(s.plan.buf[ws].storage, NNC_STORE_ARENA);
  assert_int_equal(s.plan.buf[out].storage, NNC_STORE_USER);
  assert_int_equal(s.k[s.kernel_of_node[b.g.tensors[out].producer]].kind, NNC_KERNEL_MOVE);
  done(&b, &s);
}

/* Sizes at the symbols' maxima; values inside a fused kernel take no memory;
 * an f16 tensor is 2 bytes an element. */
static void test_sizes_and_internal(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 7), T = sym(&b, "T", 17);
  int x = input(&b, "x", 3, (nnc_dim[]){S(B), S(T), K(13)});
  int w = param(&b, "w", 2, (nnc_dim[]){K(29), K(13)});
  int h = linear(&b, softmax(&b, x), w);
  int r = op1(&b, NNC_OP_RELU, h);
  nnc_attrs ca = {.to = NNC_F16};
  int c = node(&b, NNC_OP_CAST, 1, &r, &ca, 0, NULL);
  int sm = softmax(&b, c);
  output(&b, "y", softmax(&b, sm));
  plan(&b, &s);
  check_plan(&s);
  int smx = b.g.nodes[b.g.tensors[h].producer].in[0];
  assert_int_equal(s.plan.buf[smx].size, 7 * 17 * 13 * 4);
  assert_int_equal(s.plan.buf[h].storage, NNC_STORE_NONE);
  assert_int_equal(s.plan.buf[r].storage, NNC_STORE_ARENA);
  assert_int_equal(s.plan.buf[r].size, 7 * 17 * 29 * 4);
  assert_int_equal(s.plan.buf[c].size, 7 * 17 * 29 * 2);
  assert_false(s.plan.buf[c].in_place);   /* half the bytes of r: no in place */
  assert_int_equal(s.plan.buf[w].storage, NNC_STORE_PARAM);
  assert_int_equal(s.plan.buf[x].storage, NNC_STORE_USER);
  done(&b, &s);
}

/* A graph whose only kernel writes an output: an empty arena. */
static void test_empty_arena(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int x = input(&b, "x", 1, (nnc_dim[]){K(5)});
  output(&b, "y", op1(&b, NNC_OP_EXP, x));
  plan(&b, &s);
  check_plan(&s);
  assert_int_equal(s.plan.peak, 0);
  assert_int_equal(s.plan.unplanned, 0);
  /* planning twice gives the same plan and leaks nothing */
  nnc_error err = {0};
  assert_int_equal(nnc_pass_memplan(&s, &err), NNC_OK);
  check_plan(&s);
  done(&b, &s);
}

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Random graphs of softmax, elementwise, reshape and linear nodes reading
 * random earlier values, a few of them outputs. */
static void test_random_graphs(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 60; seed++) {
    uint64_t r = seed * 0x9e3779b97f4a7c15ull;
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 1 + (int64_t)(rng(&r) % 9));
    int vals[64], nv = 0;
    vals[nv++] = input(&b, "x", 2, (nnc_dim[]){S(B), K(13)});
    vals[nv++] = input(&b, "y", 2, (nnc_dim[]){S(B), K(13)});
    int w = param(&b, "w", 2, (nnc_dim[]){K(13), K(13)});
    int nodes = 5 + (int)(rng(&r) % 40);
    for (int i = 0; i < nodes; i++) {
      int a = vals[rng(&r) % (uint64_t)nv], c = vals[rng(&r) % (uint64_t)nv], t;
      switch (rng(&r) % 6) {
      case 0: t = softmax(&b, a); break;
      case 1: t = op1(&b, NNC_OP_TANH, a); break;
      case 2: t = op2(&b, NNC_OP_MUL, a, c); break;
      case 3: t = reshape(&b, a, 2, (nnc_dim[]){S(B), K(13)}); break;
      case 4: t = linear(&b, a, w); break;
      default: t = op2(&b, NNC_OP_SUB, a, op1(&b, NNC_OP_EXP, c)); break;
      }
      vals[nv++] = t;
    }
    int nout = 1 + (int)(rng(&r) % 3);
    for (int i = 0; i < nout; i++) {
      int t = vals[2 + rng(&r) % (uint64_t)(nv - 2)];
      char name[16];
      snprintf(name, sizeof name, "o%d", i);
      if (!is_output(&b.g, t)) output(&b, name, t);
    }
    plan(&b, &s);
    check_plan(&s);
    done(&b, &s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_chain_two_slots),
    cmocka_unit_test(test_no_in_place),
    cmocka_unit_test(test_views),
    cmocka_unit_test(test_prefix_slices),
    cmocka_unit_test(test_sizes_and_internal),
    cmocka_unit_test(test_empty_arena),
    cmocka_unit_test(test_random_graphs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
