/* tests/unit/test_rt_json.c — the strict JSON parser of safetensors headers:
 * values and escapes decoded as by hand, every malformed text refused with
 * its byte offset, and the depth and size limits holding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_json.h"

static const nnrt_json_limits lim = {16, 1000};

static nnrt_json_doc *parse_ok(const char *text) {
  nnrt_json_doc *doc = NULL;
  nnrt_error err = {0};
  nnrt_status rc = nnrt_json_parse(text, strlen(text), lim, &doc, &err);
  if (rc != NNRT_OK) fail_msg("%s: %s", text, err.msg);
  return doc;
}

static void test_values(void **state) {
  nnrt_json_doc *doc = parse_ok(
      " {\"a\": [1, -2, 0, -0, 9223372036854775807, -9223372036854775808, 9223372036854775808,"
      " 1.5, 2e3], \"b\": {\"t\": true, \"f\": false, \"n\": null}, \"s\": \"x\\\"\\\\\\/\\b\\f\\n"
      "\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\xc3\xa9\", \"e\": [], \"o\": {}}\r\n");
  const nnrt_json *r = nnrt_json_root(doc);
  assert_int_equal(r->kind, NNRT_JSON_OBJECT);
  assert_int_equal(r->n, 5);
  const nnrt_json *a = nnrt_json_get(r, "a");
  assert_non_null(a);
  assert_int_equal(a->kind, NNRT_JSON_ARRAY);
  assert_int_equal(a->n, 9);
  const int64_t ints[6] = {1, -2, 0, 0, INT64_MAX, INT64_MIN};
  for (int i = 0; i < 6; i++) {
    assert_true(a->items[i].is_int);
    assert_true(a->items[i].i == ints[i]);
  }
  assert_false(a->items[6].is_int);  /* 2^63 does not fit */
  assert_int_equal(a->items[6].len, 19);
  assert_false(a->items[7].is_int);
  assert_memory_equal(a->items[7].s, "1.5", 3);
  assert_false(a->items[8].is_int);
  const nnrt_json *b = nnrt_json_get(r, "b");
  assert_int_equal(nnrt_json_get(b, "t")->kind, NNRT_JSON_BOOL);
  assert_true(nnrt_json_get(b, "t")->b);
  assert_false(nnrt_json_get(b, "f")->b);
  assert_int_equal(nnrt_json_get(b, "n")->kind, NNRT_JSON_NULL);
  const nnrt_json *s = nnrt_json_get(r, "s");
  const char *want = "x\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9";
  assert_string_equal(s->s, want);
  assert_int_equal(s->len, strlen(want));
  assert_int_equal(nnrt_json_get(r, "e")->n, 0);
  assert_int_equal(nnrt_json_get(r, "o")->kind, NNRT_JSON_OBJECT);
  assert_null(nnrt_json_get(r, "missing"));
  assert_null(nnrt_json_get(a, "a"));
  nnrt_json_free(doc);

  doc = parse_ok("\"\"");
  assert_int_equal(nnrt_json_root(doc)->len, 0);
  nnrt_json_free(doc);
  doc = parse_ok("-7");
  assert_true(nnrt_json_root(doc)->i == -7);
  nnrt_json_free(doc);
}

/* Each bad text with the byte offset its message must give. */
static void test_rejects(void **state) {
  static const struct { const char *text; const char *where; } bad[] = {
    {"", "byte 0"},
    {"   ", "byte 3"},
    {"{", "byte 1"},
    {"{\"a\"}", "byte 4"},
    {"{\"a\":1,}", "byte 7"},
    {"[1,]", "byte 3"},
    {"[1 2]", "byte 3"},
    {"{a:1}", "byte 1"},
    {"{'a':1}", "byte 1"},
    {"01", "byte 1"},
    {"1.", "byte 2"},
    {".5", "byte 0"},
    {"1e", "byte 2"},
    {"+1", "byte 0"},
    {"-", "byte 1"},
    {"NaN", "byte 0"},
    {"tru", "byte 0"},
    {"nul", "byte 0"},
    {"\"abc", "byte 4"},
    {"\"a\\x\"", "byte 2"},
    {"\"a\\u12\"", "byte 2"},
    {"\"\\ud800\"", "byte 1"},
    {"\"\\udc00\"", "byte 1"},
    {"\"\\ud800\\u0041\"", "byte 1"},
    {"\"\\u0000\"", "byte 1"},
    {"\"a\tb\"", "byte 2"},
    {"\"\xc0\xaf\"", "byte 1"},      /* overlong */
    {"\"\xed\xa0\x80\"", "byte 1"},  /* a surrogate in UTF-8 */
    {"\"\xf4\x90\x80\x80\"", "byte 1"},
    {"\"\xe2\x82\"", "byte 1"},      /* cut sequence */
    {"[1] [2]", "byte 4"},
    {"{\"a\":1,\"b\":2,\"a\":3}", "byte 13"},
    {"{\"x\":{\"k\":1,\"k\":1}}", "\"k\""},
    {"// c\n1", "byte 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    nnrt_json_doc *doc = (nnrt_json_doc *)&lim;
    nnrt_error err = {0};
    nnrt_status rc = nnrt_json_parse(bad[i].text, strlen(bad[i].text), lim, &doc, &err);
    if (rc != NNRT_E_FORMAT) fail_msg("accepted %s", bad[i].text);
    assert_null(doc);
    if (!strstr(err.msg, bad[i].where)) fail_msg("%s: expected %s in: %s", bad[i].text,
                                                 bad[i].where, err.msg);
  }
}

static void test_limits(void **state) {
  nnrt_error err = {0};
  nnrt_json_doc *doc = NULL;
  /* 16 levels pass, 17 fail */
  char text[64];
  memset(text, '[', 16);
  memset(text + 16, ']', 16);
  assert_int_equal(nnrt_json_parse(text, 32, lim, &doc, &err), NNRT_OK);
  nnrt_json_free(doc);
  memset(text, '[', 17);
  memset(text + 17, ']', 17);
  assert_int_equal(nnrt_json_parse(text, 34, lim, &doc, &err), NNRT_E_FORMAT);
  assert_non_null(strstr(err.msg, "deeper than 16"));
  /* a million open brackets: refused at the limit, no stack blow-up */
  size_t n = 1000000;
  char *deep = malloc(n);
  assert_non_null(deep);
  memset(deep, '[', n);
  assert_int_equal(nnrt_json_parse(deep, n, lim, &doc, &err), NNRT_E_FORMAT);
  free(deep);
  /* 1000 values pass, 1001 fail */
  char *wide = malloc(4000);
  assert_non_null(wide);
  size_t len = 0;
  wide[len++] = '[';
  for (int i = 0; i < 999; i++) len += (size_t)sprintf(wide + len, i ? ",%d" : "%d", i % 10);
  wide[len++] = ']';
  assert_int_equal(nnrt_json_parse(wide, len, lim, &doc, &err), NNRT_OK);
  assert_int_equal(nnrt_json_root(doc)->n, 999);
  assert_true(nnrt_json_root(doc)->items[998].i == 8);
  nnrt_json_free(doc);
  len--;
  len += (size_t)sprintf(wide + len, ",7]");
  assert_int_equal(nnrt_json_parse(wide, len, lim, &doc, &err), NNRT_E_FORMAT);
  assert_non_null(strstr(err.msg, "more than 1000"));
  free(wide);
  /* arguments */
  assert_int_equal(nnrt_json_parse(NULL, 3, lim, &doc, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_json_parse("1", 1, lim, NULL, &err), NNRT_E_ARG);
  nnrt_json_limits zero = {0, 0};
  assert_int_equal(nnrt_json_parse("1", 1, zero, &doc, &err), NNRT_E_ARG);
  nnrt_json_free(NULL);
}

/* Many long strings: the document's chunks grow past their first size. */
static void test_big_document(void **state) {
  size_t n = 300, cap = n * 200 + 16, len = 0;
  char *text = malloc(cap);
  assert_non_null(text);
  text[len++] = '{';
  for (size_t i = 0; i < n; i++) {
    len += (size_t)sprintf(text + len, "%s\"k%zu\":\"", i ? "," : "", i);
    memset(text + len, 'a' + (int)(i % 26), 150);
    len += 150;
    text[len++] = '"';
  }
  text[len++] = '}';
  nnrt_json_limits big = {4, 100000};
  nnrt_json_doc *doc = NULL;
  assert_int_equal(nnrt_json_parse(text, len, big, &doc, NULL), NNRT_OK);
  const nnrt_json *r = nnrt_json_root(doc);
  assert_int_equal(r->n, n);
  const nnrt_json *v = nnrt_json_get(r, "k123");
  assert_non_null(v);
  assert_int_equal(v->len, 150);
  assert_int_equal(v->s[149], 'a' + 123 % 26);
  nnrt_json_free(doc);
  free(text);
  /* valid UTF-8 check used by the writer */
  assert_true(nnrt_json_valid_utf8("ab\xc3\xa9", 4));
  assert_false(nnrt_json_valid_utf8("ab\xc3", 3));
  assert_true(nnrt_json_valid_utf8("", 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_values),
    cmocka_unit_test(test_rejects),
    cmocka_unit_test(test_limits),
    cmocka_unit_test(test_big_document),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
