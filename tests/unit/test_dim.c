/* tests/unit/test_dim.c — symbolic dims (ir/dim.c): construction, equality,
 * exact products and quotients, evaluation and formatting. Expected values
 * are worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "compiler/ir/ir.h"

static nnc_graph G;
static int SB, ST, SH, SD;   /* B <= 32, T <= 1024, H <= 16, D <= 128 */

static int setup(void **state) {
  (void)state;
  nnc_error err;
  nnc_graph_init(&G);
  nnc_graph_add_symbol(&G, "B", 32, NNC_NOLOC, &SB, &err);
  nnc_graph_add_symbol(&G, "T", 1024, NNC_NOLOC, &ST, &err);
  nnc_graph_add_symbol(&G, "H", 16, NNC_NOLOC, &SH, &err);
  nnc_graph_add_symbol(&G, "D", 128, NNC_NOLOC, &SD, &err);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  nnc_graph_free(&G);
  return 0;
}

static nnc_dim K(int64_t k) { return nnc_dim_const(k); }
static nnc_dim S(int s) { return nnc_dim_sym(s); }
static nnc_dim MUL(nnc_dim a, nnc_dim b) {
  nnc_dim r;
  assert_true(nnc_dim_mul(a, b, &r));
  return r;
}

static const char *fmt(nnc_dim d) {
  static char buf[128];
  return nnc_dim_format(&G, d, buf, sizeof buf);
}

static void construct(void **state) {
  (void)state;
  nnc_dim c = K(768);
  assert_int_equal(c.k, 768);
  assert_int_equal(c.nsym, 0);
  assert_true(nnc_dim_is_const(c));
  nnc_dim s = S(ST);
  assert_int_equal(s.k, 1);
  assert_int_equal(s.nsym, 1);
  assert_int_equal(s.sym[0], ST);
  assert_false(nnc_dim_is_const(s));
  assert_true(nnc_dim_eq_const(c, 768));
  assert_false(nnc_dim_eq_const(c, 767));
  assert_false(nnc_dim_eq_const(s, 1));   /* T is not the constant 1, though its coefficient is */
  assert_true(nnc_dim_eq_const(K(0), 0));
}

static void equality(void **state) {
  (void)state;
  assert_true(nnc_dim_eq(K(7), K(7)));
  assert_false(nnc_dim_eq(K(7), K(8)));
  assert_true(nnc_dim_eq(S(SB), S(SB)));
  assert_false(nnc_dim_eq(S(SB), S(ST)));
  assert_false(nnc_dim_eq(S(SB), K(1)));
  assert_false(nnc_dim_eq(MUL(K(3), S(SB)), S(SB)));
  assert_false(nnc_dim_eq(MUL(S(SB), S(SB)), S(SB)));
  assert_true(nnc_dim_eq(MUL(S(SB), S(ST)), MUL(S(ST), S(SB))));
  /* every zero is the same size, whatever symbols multiply it */
  nnc_dim z = {.k = 0, .nsym = 1, .sym = {SB}};
  assert_true(nnc_dim_eq(z, K(0)));
  /* symbols past nsym do not count */
  nnc_dim a = {.k = 2, .nsym = 1, .sym = {SB, ST}};
  nnc_dim b = {.k = 2, .nsym = 1, .sym = {SB, SH}};
  assert_true(nnc_dim_eq(a, b));
}

static void products(void **state) {
  (void)state;
  nnc_dim r;
  assert_true(nnc_dim_mul(K(3), K(256), &r));
  assert_true(nnc_dim_eq_const(r, 768));
  /* symbols come out sorted by id, whatever the order of the factors */
  assert_true(nnc_dim_mul(S(ST), S(SB), &r));
  assert_int_equal(r.nsym, 2);
  assert_int_equal(r.sym[0], SB);
  assert_int_equal(r.sym[1], ST);
  assert_string_equal(fmt(r), "B*T");
  assert_true(nnc_dim_mul(MUL(K(3), S(SD)), MUL(S(ST), K(5)), &r));
  assert_int_equal(r.k, 15);
  assert_string_equal(fmt(r), "15*T*D");
  assert_true(nnc_dim_mul(S(SB), S(SB), &r));
  assert_string_equal(fmt(r), "B*B");
  /* four symbols fit, five do not */
  nnc_dim four = MUL(MUL(S(SB), S(ST)), MUL(S(SH), S(SD)));
  assert_int_equal(four.nsym, 4);
  assert_string_equal(fmt(four), "B*T*H*D");
  assert_false(nnc_dim_mul(four, S(SB), &r));
  assert_true(nnc_dim_mul(four, K(7), &r));
  assert_string_equal(fmt(r), "7*B*T*H*D");
  /* a zero product is the constant 0, even with too many symbols */
  assert_true(nnc_dim_mul(four, MUL(K(0), S(ST)), &r));
  assert_true(nnc_dim_eq_const(r, 0));
  assert_int_equal(r.nsym, 0);
  assert_false(nnc_dim_mul(K(INT64_MAX / 2 + 1), K(2), &r));
  assert_false(nnc_dim_mul(K(INT64_MIN), K(-1), &r));
  assert_true(nnc_dim_mul(K(1), S(SH), &r));
  assert_true(nnc_dim_eq(r, S(SH)));
}

static void quotients(void **state) {
  (void)state;
  nnc_dim r;
  assert_true(nnc_dim_div(K(768), K(12), &r));
  assert_true(nnc_dim_eq_const(r, 64));
  assert_false(nnc_dim_div(K(768), K(7), &r));
  assert_false(nnc_dim_div(K(5), K(0), &r));
  nnc_dim bt768 = MUL(MUL(S(SB), S(ST)), K(768));
  assert_true(nnc_dim_div(bt768, K(768), &r));
  assert_true(nnc_dim_eq(r, MUL(S(SB), S(ST))));
  assert_true(nnc_dim_div(bt768, MUL(S(ST), K(12)), &r));
  assert_string_equal(fmt(r), "64*B");
  assert_true(nnc_dim_div(bt768, bt768, &r));
  assert_true(nnc_dim_eq_const(r, 1));
  assert_true(nnc_dim_div(bt768, S(SB), &r));
  assert_string_equal(fmt(r), "768*T");
  /* a symbol the dividend lacks, below, between or above its own */
  assert_false(nnc_dim_div(S(ST), S(SB), &r));
  assert_false(nnc_dim_div(MUL(S(SB), S(SD)), S(ST), &r));
  assert_false(nnc_dim_div(S(SB), S(SD), &r));
  assert_false(nnc_dim_div(K(1024), S(ST), &r));
  /* repeated symbols divide one at a time */
  nnc_dim bbt = MUL(MUL(S(SB), S(SB)), S(ST));
  assert_true(nnc_dim_div(bbt, S(SB), &r));
  assert_string_equal(fmt(r), "B*T");
  assert_true(nnc_dim_div(bbt, MUL(S(SB), S(SB)), &r));
  assert_string_equal(fmt(r), "T");
  assert_false(nnc_dim_div(MUL(S(SB), S(ST)), MUL(S(SB), S(SB)), &r));
  assert_true(nnc_dim_div(K(0), K(5), &r));
  assert_true(nnc_dim_eq_const(r, 0));
  assert_true(nnc_dim_div(K(-6), K(3), &r));
  assert_true(nnc_dim_eq_const(r, -2));
  /* the one quotient that does not fit in 64 bits */
  assert_false(nnc_dim_div(K(INT64_MIN), K(-1), &r));
}

static void evaluation(void **state) {
  (void)state;
  int64_t vals[4];
  vals[SB] = 3;
  vals[ST] = 5;
  vals[SH] = 7;
  vals[SD] = 11;
  assert_int_equal(nnc_dim_eval(K(768), vals), 768);
  assert_int_equal(nnc_dim_eval(S(ST), vals), 5);
  assert_int_equal(nnc_dim_eval(MUL(MUL(S(SB), S(ST)), K(768)), vals), 3 * 5 * 768);
  assert_int_equal(nnc_dim_eval(MUL(S(SH), S(SH)), vals), 49);
  assert_int_equal(nnc_dim_eval(MUL(K(0), S(SD)), vals), 0);
}

static void formatting(void **state) {
  (void)state;
  assert_string_equal(fmt(K(768)), "768");
  assert_string_equal(fmt(K(0)), "0");
  assert_string_equal(fmt(K(-1)), "-1");
  assert_string_equal(fmt(S(SB)), "B");
  assert_string_equal(fmt(MUL(K(3), MUL(S(ST), S(SB)))), "3*B*T");
  assert_string_equal(fmt(MUL(K(-1), S(ST))), "-1*T");
  nnc_dim unknown = {.k = 2, .nsym = 1, .sym = {9}};
  assert_string_equal(fmt(unknown), "2*?");
  nnc_dim negative = {.k = 1, .nsym = 1, .sym = {-3}};
  assert_string_equal(fmt(negative), "?");
  char buf[64];
  assert_string_equal(nnc_dim_format(NULL, S(SB), buf, sizeof buf), "?");
  /* short buffers truncate without overrunning */
  char small[5];
  memset(small, 'x', sizeof small);
  assert_string_equal(nnc_dim_format(&G, MUL(K(3), MUL(S(ST), S(SB))), small, 4), "3*B");
  assert_int_equal(small[4], 'x');
  char one[1] = {'x'};
  assert_string_equal(nnc_dim_format(&G, K(123), one, 1), "");
  char none[1] = {'x'};
  nnc_dim_format(&G, K(123), none, 0);
  assert_int_equal(none[0], 'x');
}

static void shape_formatting(void **state) {
  (void)state;
  char buf[128];
  assert_string_equal(nnc_shape_format(&G, 0, NULL, buf, sizeof buf), "[]");
  nnc_dim shape[] = {S(SB), S(ST), K(768)};
  assert_string_equal(nnc_shape_format(&G, 3, shape, buf, sizeof buf), "[B,T,768]");
  nnc_dim prod[] = {MUL(S(SB), S(ST)), MUL(K(3), S(SD))};
  assert_string_equal(nnc_shape_format(&G, 2, prod, buf, sizeof buf), "[B*T,3*D]");
  char small[8];
  memset(small, 'x', sizeof small);
  assert_string_equal(nnc_shape_format(&G, 3, shape, small, 6), "[B,T,");
  assert_int_equal(small[6], 'x');
  assert_string_equal(nnc_shape_format(&G, 3, shape, small, 1), "");
  memset(small, 'x', sizeof small);
  nnc_shape_format(&G, 3, shape, small, 0);
  assert_int_equal(small[0], 'x');
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(construct, setup, teardown),
    cmocka_unit_test_setup_teardown(equality, setup, teardown),
    cmocka_unit_test_setup_teardown(products, setup, teardown),
    cmocka_unit_test_setup_teardown(quotients, setup, teardown),
    cmocka_unit_test_setup_teardown(evaluation, setup, teardown),
    cmocka_unit_test_setup_teardown(formatting, setup, teardown),
    cmocka_unit_test_setup_teardown(shape_formatting, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
