/* tests/unit/test_rt_safetensors.c — safetensors reading, validation,
 * manifest checks and writing. Files go to a mkdtemp folder. Every corrupt
 * or lying file must give its exact status and a message naming the file
 * and, where one is at fault, the tensor. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnrt.h"

static char dir[64];

static const char *path_of(const char *name) {
  static char p[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

static int count_files(void) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static int setup(void **state) {
  snprintf(dir, sizeof dir, "/tmp/nnrt_st_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(path_of(e->d_name));
  closedir(d);
  return rmdir(dir);
}

static void write_bytes(const char *name, const void *p, size_t n) {
  FILE *f = fopen(path_of(name), "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *name, size_t *n) {
  FILE *f = fopen(path_of(name), "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return p;
}

/* A file whose 8-byte length field says hlen, then header, then ndata bytes
 * of data (0x5a). */
static void write_st_len(const char *name, uint64_t hlen, const char *header, size_t ndata) {
  size_t h = strlen(header), n = 8 + h + ndata;
  unsigned char *p = malloc(n);
  assert_non_null(p);
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(hlen >> (8 * i));
  memcpy(p + 8, header, h);
  memset(p + 8 + h, 0x5a, ndata);
  write_bytes(name, p, n);
  free(p);
}

static void write_st(const char *name, const char *header, size_t ndata) {
  write_st_len(name, strlen(header), header, ndata);
}

/* Opening must fail with code, and the message must hold each of the
 * strings that follow (NULL-terminated), and the file name. */
static void expect_open_fails(const char *name, nnrt_status code, ...) {
  nnrt_error err = {0};
  nnrt_st *st = (nnrt_st *)&err;
  nnrt_status rc = nnrt_st_open(path_of(name), &st, &err);
  if (rc != code) fail_msg("%s: expected status %d, found %d (%s)", name, code, rc, err.msg);
  assert_null(st);
  assert_int_equal(err.code, code);
  if (!strstr(err.msg, name)) fail_msg("message lacks the file name %s: %s", name, err.msg);
  va_list ap;
  va_start(ap, code);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(err.msg, s)) fail_msg("message lacks \"%s\": %s", s, err.msg);
  va_end(ap);
}

/* ------------------------------------------------------------ round trip */

static const float f32_vals[15] = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-30f, 3e38f, 7.0f,
                                   -1.0f / 3.0f, 12345.678f, 0.1f, -0.1f, 2.0f, 4.0f, 8.5f};
/* f16 bits and the values they stand for, by hand */
static const uint16_t f16_bits[7] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x0400, 0x8000, 0x3555};
static const float f16_vals[7] = {1.0f, -2.5f, 65504.0f, 0x1p-24f, 0x1p-14f, -0.0f,
                                  0.333251953125f};
static const uint16_t bf16_bits[6] = {0x3f80, 0xc020, 0x4780, 0x0001, 0xbf80, 0x4049};
static const float bf16_vals[6] = {1.0f, -2.5f, 65536.0f, 0x1p-133f, -1.0f, 3.140625f};
static const int32_t i32_vals[5] = {1, -2, 2147483647, -2147483647 - 1, 0};
static const float scalar = 42.5f;

#define NT 7
static const nnrt_st_desc descs[NT] = {
  {"layer.0.weight", NNRT_F32, 2, {3, 5}},
  {"layer.0.bias", NNRT_F16, 1, {7}},
  {"emb", NNRT_BF16, 3, {2, 3, 1}},
  {"empty", NNRT_F32, 2, {0, 4}},
  {"scale", NNRT_F32, 0, {0}},
  {"ids", NNRT_I32, 1, {5}},
  {"odd \"name\"\\ \xc3\xa9\t", NNRT_F32, 1, {1}},
};

static void write_round_trip(const char *name) {
  const void *data[NT] = {f32_vals, f16_bits, bf16_bits, NULL, &scalar, i32_vals, &scalar};
  nnrt_error err = {0};
  assert_int_equal(nnrt_st_write(path_of(name), NT, descs, data, &err), NNRT_OK);
}

static void check_round_trip(const nnrt_st *st) {
  nnrt_error err = {0};
  assert_int_equal(nnrt_st_count(st), NT);
  for (int i = 1; i < NT; i++)
    assert_true(strcmp(nnrt_st_at(st, i - 1)->name, nnrt_st_at(st, i)->name) < 0);
  assert_null(nnrt_st_at(st, NT));
  assert_null(nnrt_st_at(st, -1));
  for (int i = 0; i < NT; i++) {
    const nnrt_st_tensor *t = NULL;
    assert_int_equal(nnrt_st_find(st, descs[i].name, &t, &err), NNRT_OK);
    assert_string_equal(t->name, descs[i].name);
    assert_int_equal(t->dtype, descs[i].dtype);
    assert_int_equal(t->rank, descs[i].rank);
    int64_t numel = 1;
    for (int k = 0; k < t->rank; k++) {
      assert_int_equal(t->shape[k], descs[i].shape[k]);
      numel *= descs[i].shape[k];
    }
    assert_int_equal(t->numel, numel);
    assert_int_equal(t->nbytes, (size_t)numel * nnrt_dtype_size(t->dtype));
  }
  const nnrt_st_tensor *t;
  float out[16];
  unsigned char raw[64];

  assert_int_equal(nnrt_st_find(st, "layer.0.weight", &t, &err), NNRT_OK);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 15, &err), NNRT_OK);
  assert_memory_equal(out, f32_vals, sizeof f32_vals);

  assert_int_equal(nnrt_st_find(st, "layer.0.bias", &t, &err), NNRT_OK);
  assert_int_equal(nnrt_st_copy(st, t, raw, sizeof raw, &err), NNRT_OK);
  assert_memory_equal(raw, f16_bits, sizeof f16_bits);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 7, &err), NNRT_OK);
  for (int i = 0; i < 7; i++) assert_memory_equal(&out[i], &f16_vals[i], 4);

  assert_int_equal(nnrt_st_find(st, "emb", &t, &err), NNRT_OK);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 6, &err), NNRT_OK);
  for (int i = 0; i < 6; i++) assert_memory_equal(&out[i], &bf16_vals[i], 4);

  assert_int_equal(nnrt_st_find(st, "empty", &t, &err), NNRT_OK);
  assert_int_equal(t->numel, 0);
  assert_int_equal(t->nbytes, 0);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 0, &err), NNRT_OK);

  assert_int_equal(nnrt_st_find(st, "scale", &t, &err), NNRT_OK);
  assert_int_equal(t->numel, 1);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 1, &err), NNRT_OK);
  assert_true(out[0] == 42.5f);

  assert_int_equal(nnrt_st_find(st, "ids", &t, &err), NNRT_OK);
  assert_int_equal(nnrt_st_copy(st, t, raw, 20, &err), NNRT_OK);
  assert_memory_equal(raw, i32_vals, sizeof i32_vals);

  assert_int_equal(nnrt_st_find(st, descs[6].name, &t, &err), NNRT_OK);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 1, &err), NNRT_OK);
  assert_true(out[0] == 42.5f);

  char report[256] = "x";
  assert_int_equal(nnrt_st_check(st, descs, NT, report, sizeof report, &err), NNRT_OK);
  assert_string_equal(report, "");
}

static void test_round_trip_file(void **state) {
  write_round_trip("rt.safetensors");
  nnrt_st *st = NULL;
  nnrt_error err = {0};
  assert_int_equal(nnrt_st_open(path_of("rt.safetensors"), &st, &err), NNRT_OK);
  check_round_trip(st);
  nnrt_st_close(st);
}

/* From memory, at an odd address so every tensor is misaligned. */
static void test_round_trip_memory_unaligned(void **state) {
  write_round_trip("rtm.safetensors");
  size_t n;
  unsigned char *file = read_bytes("rtm.safetensors", &n);
  unsigned char *buf = malloc(n + 1);
  assert_non_null(buf);
  memcpy(buf + 1, file, n);
  nnrt_st *st = NULL;
  nnrt_error err = {0};
  assert_int_equal(nnrt_st_open_memory(buf + 1, n, "mem.safetensors", &st, &err), NNRT_OK);
  check_round_trip(st);
  nnrt_st_close(st);
  free(buf);
  free(file);
}

/* The writer's bytes, by hand: length, header padded with spaces to 8, data. */
static void test_writer_exact_bytes(void **state) {
  const float v[2] = {1.0f, -2.0f};
  const nnrt_st_desc d = {"a", NNRT_F32, 1, {2}};
  const void *data[1] = {v};
  assert_int_equal(nnrt_st_write(path_of("exact.safetensors"), 1, &d, data, NULL), NNRT_OK);
  const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t jl = strlen(json), hl = (jl + 7) / 8 * 8, n;
  unsigned char *p = read_bytes("exact.safetensors", &n);
  assert_int_equal(n, 8 + hl + 8);
  assert_int_equal(p[0], hl);
  for (int i = 1; i < 8; i++) assert_int_equal(p[i], 0);
  assert_memory_equal(p + 8, json, jl);
  for (size_t i = jl; i < hl; i++) assert_int_equal(p[8 + i], ' ');
  assert_memory_equal(p + 8 + hl, v, 8);
  free(p);

  /* An empty file of tensors is valid too: "{}" padded. */
  assert_int_equal(nnrt_st_write(path_of("none.safetensors"), 0, NULL, NULL, NULL), NNRT_OK);
  p = read_bytes("none.safetensors", &n);
  assert_int_equal(n, 16);
  assert_memory_equal(p + 8, "{}      ", 8);
  free(p);
  nnrt_st *st = NULL;
  assert_int_equal(nnrt_st_open(path_of("none.safetensors"), &st, NULL), NNRT_OK);
  assert_int_equal(nnrt_st_count(st), 0);
  nnrt_st_close(st);
}

/* The writer's metadata: read back by key, the file's label, and bad pairs
 * (a NULL value, a key given twice) refused with nothing written. */
static void test_writer_metadata(void **state) {
  const int8_t v[3] = {1, -2, 3};
  const nnrt_st_desc d = {"q", NNRT_I8, 1, {3}};
  const void *data[1] = {v};
  const char *meta[4] = {"nnc.quantize", "int4w", "nnc.group_size", "128"};
  assert_int_equal(nnrt_st_write_meta(path_of("wmeta.safetensors"), 1, &d, data, 2, meta, NULL), NNRT_OK);
  nnrt_st *st = NULL;
  assert_int_equal(nnrt_st_open(path_of("wmeta.safetensors"), &st, NULL), NNRT_OK);
  assert_string_equal(nnrt_st_metadata(st, "nnc.quantize"), "int4w");
  assert_string_equal(nnrt_st_metadata(st, "nnc.group_size"), "128");
  assert_null(nnrt_st_metadata(st, "format"));
  assert_non_null(strstr(nnrt_st_label(st), "wmeta.safetensors"));
  assert_int_equal(nnrt_st_count(st), 1);
  nnrt_st_close(st);
  /* metadata alone */
  assert_int_equal(nnrt_st_write_meta(path_of("wmeta0.safetensors"), 0, NULL, NULL, 1, meta, NULL), NNRT_OK);
  assert_int_equal(nnrt_st_open(path_of("wmeta0.safetensors"), &st, NULL), NNRT_OK);
  assert_int_equal(nnrt_st_count(st), 0);
  assert_string_equal(nnrt_st_metadata(st, "nnc.quantize"), "int4w");
  nnrt_st_close(st);
  nnrt_error e;
  const char *twice[4] = {"k", "a", "k", "b"}, *null_value[2] = {"k", NULL};
  assert_int_equal(nnrt_st_write_meta(path_of("wmeta2.safetensors"), 1, &d, data, 2, twice, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "twice"));
  assert_int_equal(nnrt_st_write_meta(path_of("wmeta2.safetensors"), 1, &d, data, 1, null_value, &e), NNRT_E_ARG);
  assert_non_null(strstr(e.msg, "NULL"));
  assert_int_equal(access(path_of("wmeta2.safetensors"), F_OK), -1);
  (void)state;
}

static void test_metadata_and_gaps(void **state) {
  /* hand-written: metadata, escapes, a gap between tensors, trailing bytes */
  write_st("meta.safetensors",
           "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"a\\u00e9\\n\"},"
           "\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]},"
           "\"v\\u00e9\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
           20);
  nnrt_st *st = NULL;
  nnrt_error err = {0};
  assert_int_equal(nnrt_st_open(path_of("meta.safetensors"), &st, &err), NNRT_OK);
  assert_string_equal(nnrt_st_metadata(st, "format"), "pt");
  assert_string_equal(nnrt_st_metadata(st, "note"), "a\xc3\xa9\n");
  assert_null(nnrt_st_metadata(st, "missing"));
  assert_int_equal(nnrt_st_count(st), 2);
  const nnrt_st_tensor *t;
  assert_int_equal(nnrt_st_find(st, "v\xc3\xa9", &t, &err), NNRT_OK);
  assert_int_equal(t->rank, 0);
  assert_int_equal(t->nbytes, 8);
  assert_int_equal(nnrt_st_find(st, "__metadata__", &t, &err), NNRT_E_FORMAT);
  nnrt_st_close(st);
}

/* ------------------------------------------------------- corrupt files */

static void test_empty_and_short_files(void **state) {
  write_bytes("empty.safetensors", "", 0);
  expect_open_fails("empty.safetensors", NNRT_E_FORMAT, "0 bytes", "8-byte", NULL);
  write_bytes("short.safetensors", "\x10\0\0\0\0", 5);
  expect_open_fails("short.safetensors", NNRT_E_FORMAT, "5 bytes", NULL);
}

static void test_header_length_lies(void **state) {
  write_st_len("past.safetensors", 1000, "{}", 10);
  expect_open_fails("past.safetensors", NNRT_E_FORMAT, "1000", "past the end", NULL);
  write_st_len("huge.safetensors", (uint64_t)1 << 40, "{}", 10);
  expect_open_fails("huge.safetensors", NNRT_E_FORMAT, "1099511627776", "limit", NULL);
  write_st_len("max.safetensors", UINT64_MAX, "{}", 10);
  expect_open_fails("max.safetensors", NNRT_E_FORMAT, "limit", NULL);
  /* one byte short of the header: the JSON is cut */
  write_st_len("cut.safetensors", 3, "{}", 0);
  expect_open_fails("cut.safetensors", NNRT_E_FORMAT, "past the end", NULL);
  write_st_len("zero.safetensors", 0, "", 0);
  expect_open_fails("zero.safetensors", NNRT_E_FORMAT, "invalid JSON", NULL);
}

static void test_bad_json(void **state) {
  write_st("json1.safetensors", "{\"a\":{\"dtype\":\"F32\",}}", 0);
  expect_open_fails("json1.safetensors", NNRT_E_FORMAT, "invalid JSON", "byte 20", NULL);
  write_st("json2.safetensors", "{\"a\":1} x", 0);
  expect_open_fails("json2.safetensors", NNRT_E_FORMAT, "invalid JSON", NULL);
  write_st("json3.safetensors", "[1,2]", 0);
  expect_open_fails("json3.safetensors", NNRT_E_FORMAT, "JSON object", "an array", NULL);
  write_st("json4.safetensors", "{\"a\xff\":{}}", 0);
  expect_open_fails("json4.safetensors", NNRT_E_FORMAT, "UTF-8", NULL);
  const char nul[] = "\x0a\0\0\0\0\0\0\0{\"a\":\0\"b\"}";  /* a NUL inside the header */
  write_bytes("json5.safetensors", nul, sizeof nul - 1);
  expect_open_fails("json5.safetensors", NNRT_E_FORMAT, "invalid JSON", NULL);
  /* nesting far past the limit must fail cleanly, not blow the stack */
  size_t depth = 100000;
  char *deep = malloc(2 * depth + 32);
  assert_non_null(deep);
  strcpy(deep, "{\"__metadata__\":");
  size_t n = strlen(deep);
  memset(deep + n, '[', depth);
  memset(deep + n + depth, ']', depth);
  strcpy(deep + n + 2 * depth, "}");
  write_st("deep.safetensors", deep, 0);
  free(deep);
  expect_open_fails("deep.safetensors", NNRT_E_FORMAT, "deeper", NULL);
}

static void test_bad_entries(void **state) {
  write_st("dtype.safetensors",
           "{\"ok\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"w.bad\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[4,20]}}",
           20);
  expect_open_fails("dtype.safetensors", NNRT_E_FORMAT, "\"w.bad\"", "unknown dtype \"F128\"",
                    NULL);
  write_st("nodtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("nodtype.safetensors", NNRT_E_FORMAT, "\"w\"", "dtype", NULL);
  write_st("dtypenum.safetensors", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("dtypenum.safetensors", NNRT_E_FORMAT, "\"w\"", "a number", NULL);
  write_st("noshape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("noshape.safetensors", NNRT_E_FORMAT, "\"w\"", "shape", NULL);
  write_st("shapestr.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":\"3\",\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("shapestr.safetensors", NNRT_E_FORMAT, "\"w\"", "a string", NULL);
  write_st("negdim.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("negdim.safetensors", NNRT_E_FORMAT, "\"w\"", "dim 1", "-3", NULL);
  write_st("fracdim.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("fracdim.safetensors", NNRT_E_FORMAT, "\"w\"", "2.5", NULL);
  write_st("expdim.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e3],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("expdim.safetensors", NNRT_E_FORMAT, "\"w\"", "1e3", NULL);
  write_st("bigdim.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
           4);
  expect_open_fails("bigdim.safetensors", NNRT_E_FORMAT, "\"w\"", "99999999999999999999", NULL);
  write_st("overflow.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
           4);
  expect_open_fails("overflow.safetensors", NNRT_E_FORMAT, "\"w\"", "63 bits", NULL);
  write_st("overflow2.safetensors",
           "{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("overflow2.safetensors", NNRT_E_FORMAT, "\"w\"", "63 bits", NULL);
  write_st("rank.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails("rank.safetensors", NNRT_E_FORMAT, "\"w\"", "rank 9", NULL);
  write_st("notobj.safetensors", "{\"w\":[1,2]}", 0);
  expect_open_fails("notobj.safetensors", NNRT_E_FORMAT, "\"w\"", "an array", NULL);
  write_st("offlen.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
           4);
  expect_open_fails("offlen.safetensors", NNRT_E_FORMAT, "\"w\"", "found 1", NULL);
  write_st("offneg.safetensors",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4);
  expect_open_fails("offneg.safetensors", NNRT_E_FORMAT, "\"w\"", "begin", NULL);
  write_st("meta.safetensors", "{\"__metadata__\":{\"a\":\"b\",\"n\":1}}", 0);
  expect_open_fails("meta.safetensors", NNRT_E_FORMAT, "__metadata__", "\"n\"", NULL);
  write_st("meta2.safetensors", "{\"__metadata__\":[]}", 0);
  expect_open_fails("meta2.safetensors", NNRT_E_FORMAT, "__metadata__", NULL);
}

static void test_lying_offsets(void **state) {
  /* truncated: the header promises 24 bytes of data, the file has 10 */
  write_st("trunc.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"h.1.w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]}}",
           10);
  expect_open_fails("trunc.safetensors", NNRT_E_FORMAT, "\"h.1.w\"", "[8, 24]", "10 bytes",
                    NULL);
  write_st("range.safetensors",
           "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1000000,1000004]}}", 8);
  expect_open_fails("range.safetensors", NNRT_E_FORMAT, "\"w\"", "past the data section", NULL);
  write_st("backwards.safetensors",
           "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 8);
  expect_open_fails("backwards.safetensors", NNRT_E_FORMAT, "\"w\"", "[4, 0]", NULL);
  write_st("overlap.safetensors",
           "{\"first\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
           "\"second\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
           16);
  expect_open_fails("overlap.safetensors", NNRT_E_FORMAT, "\"first\"", "\"second\"", "overlap",
                    NULL);
  /* one tensor inside a bigger one, listed after a third that ends later */
  write_st("inside.safetensors",
           "{\"big\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[0,10]},"
           "\"mid\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]},"
           "\"small\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]}}",
           16);
  expect_open_fails("inside.safetensors", NNRT_E_FORMAT, "\"small\"", "\"big\"", NULL);
  write_st("dup.safetensors",
           "{\"h.0.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"h.0.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           8);
  expect_open_fails("dup.safetensors", NNRT_E_FORMAT, "duplicate", "\"h.0.w\"", NULL);
  write_st("length.safetensors",
           "{\"w.len\":{\"dtype\":\"F16\",\"shape\":[3,3],\"data_offsets\":[0,16]}}", 16);
  expect_open_fails("length.safetensors", NNRT_E_FORMAT, "\"w.len\"", "16 bytes", "needs 18",
                    NULL);
  /* empty tensors at the same offset as others do not overlap anything */
  write_st("zeros.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"z1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
           "\"z2\":{\"dtype\":\"F32\",\"shape\":[5,0,3],\"data_offsets\":[2,2]}}",
           4);
  nnrt_st *st = NULL;
  assert_int_equal(nnrt_st_open(path_of("zeros.safetensors"), &st, NULL), NNRT_OK);
  assert_int_equal(nnrt_st_count(st), 3);
  nnrt_st_close(st);
}

/* Every prefix of a valid file is refused cleanly; every single-byte change
 * is either refused or still consistent (never a crash or an out-of-bounds
 * read, which ASan would catch). */
static void test_every_truncation_and_byte_flip(void **state) {
  write_round_trip("fuzz.safetensors");
  size_t n;
  unsigned char *file = read_bytes("fuzz.safetensors", &n);
  size_t hlen = file[0] | (size_t)file[1] << 8;
  for (size_t len = 0; len < n; len++) {
    unsigned char *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, file, len);
    nnrt_st *st = NULL;
    nnrt_error err = {0};
    nnrt_status rc = nnrt_st_open_memory(p, len, "fuzz", &st, &err);
    /* the last tensor in the data section is "odd..." (4 bytes): cutting
     * into it or before must fail */
    assert_int_equal(rc, NNRT_E_FORMAT);
    assert_non_null(strstr(err.msg, "fuzz"));
    free(p);
  }
  const unsigned char repl[] = {'"', '{', '}', '[', ']', ',', ':', '0', '9', '-', '\\', 0, 0xff};
  for (size_t i = 0; i < 8 + hlen; i++)
    for (size_t r = 0; r < sizeof repl; r++) {
      unsigned char *p = malloc(n);
      assert_non_null(p);
      memcpy(p, file, n);
      p[i] = repl[r];
      nnrt_st *st = NULL;
      nnrt_error err = {0};
      nnrt_status rc = nnrt_st_open_memory(p, n, "flip", &st, &err);
      assert_true(rc == NNRT_OK || rc == NNRT_E_FORMAT);
      if (rc == NNRT_OK) {
        for (int k = 0; k < nnrt_st_count(st); k++) {
          const nnrt_st_tensor *t = nnrt_st_at(st, k);
          unsigned char *dst = malloc(t->nbytes + 1);
          assert_non_null(dst);
          assert_int_equal(nnrt_st_copy(st, t, dst, t->nbytes, &err), NNRT_OK);
          free(dst);
        }
        nnrt_st_close(st);
      } else {
        assert_null(st);
        assert_non_null(strstr(err.msg, "flip"));
      }
      free(p);
    }
  free(file);
}

static void test_open_errors(void **state) {
  nnrt_error err = {0};
  nnrt_st *st = NULL;
  assert_int_equal(nnrt_st_open(path_of("does_not_exist.safetensors"), &st, &err), NNRT_E_IO);
  assert_non_null(strstr(err.msg, "does_not_exist.safetensors"));
  assert_null(st);
  assert_int_equal(nnrt_st_open(dir, &st, &err), NNRT_E_IO);
  assert_non_null(strstr(err.msg, "regular file"));
  assert_int_equal(nnrt_st_open(NULL, &st, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_st_open(path_of("x"), NULL, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_st_open_memory(NULL, 10, "m", &st, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_st_open_memory(NULL, 0, NULL, &st, &err), NNRT_E_FORMAT);
  assert_non_null(strstr(err.msg, "<memory>"));
  nnrt_st_close(NULL);
}

/* ------------------------------------------------------------ manifest */

static nnrt_st *open_model_file(void) {
  write_round_trip("model.safetensors");
  nnrt_st *st = NULL;
  nnrt_error err = {0};
  assert_int_equal(nnrt_st_open(path_of("model.safetensors"), &st, &err), NNRT_OK);
  return st;
}

static void expect_check_fails(const nnrt_st *st, const nnrt_st_desc *m, int n, ...) {
  nnrt_error err = {0};
  char report[256];
  assert_int_equal(nnrt_st_check(st, m, n, report, sizeof report, &err), NNRT_E_FORMAT);
  assert_int_equal(err.code, NNRT_E_FORMAT);
  if (!strstr(err.msg, "model.safetensors")) fail_msg("no file name: %s", err.msg);
  va_list ap;
  va_start(ap, n);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(err.msg, s)) fail_msg("message lacks \"%s\": %s", s, err.msg);
  va_end(ap);
}

static void test_manifest_mismatches(void **state) {
  nnrt_st *st = open_model_file();
  nnrt_st_desc m[NT];
  memcpy(m, descs, sizeof m);
  m[0].dtype = NNRT_F16;
  expect_check_fails(st, m, NT, "\"layer.0.weight\"", "expected dtype F16, found F32", NULL);
  memcpy(m, descs, sizeof m);
  m[0].shape[0] = 5;
  m[0].shape[1] = 3;
  expect_check_fails(st, m, NT, "\"layer.0.weight\"", "expected shape [5, 3], found [3, 5]",
                     NULL);
  memcpy(m, descs, sizeof m);
  m[4].rank = 1;
  m[4].shape[0] = 1;
  expect_check_fails(st, m, NT, "\"scale\"", "expected shape [1], found []", NULL);
  memcpy(m, descs, sizeof m);
  m[2].dtype = NNRT_F32;
  m[2].rank = 2;
  expect_check_fails(st, m, NT, "\"emb\"", "expected F32 [2, 3], found BF16 [2, 3, 1]", NULL);
  memcpy(m, descs, sizeof m);
  m[1].name = "lm_head.weight";
  expect_check_fails(st, m, NT, "missing tensor \"lm_head.weight\"", "F16 [7]", NULL);
  /* several problems: the first named, the rest counted */
  memcpy(m, descs, sizeof m);
  m[1].name = "gone.1";
  m[3].name = "gone.2";
  m[5].dtype = NNRT_F32;
  expect_check_fails(st, m, NT, "\"gone.1\"", "2 more problems", "2 tensors missing", NULL);
  nnrt_st_close(st);
}

static void test_extra_tensors_reported(void **state) {
  nnrt_st *st = open_model_file();
  nnrt_error err = {0};
  char report[512];
  /* the model uses only three of the seven */
  nnrt_st_desc m[3] = {descs[0], descs[3], descs[5]};
  assert_int_equal(nnrt_st_check(st, m, 3, report, sizeof report, &err), NNRT_OK);
  assert_non_null(strstr(report, "model.safetensors"));
  assert_non_null(strstr(report, "4 tensors not used"));
  assert_non_null(strstr(report, "emb"));
  assert_non_null(strstr(report, "layer.0.bias"));
  assert_non_null(strstr(report, "scale"));
  assert_non_null(strstr(report, "odd \"name\"\\ \xc3\xa9?"));  /* the tab shown as '?' */
  assert_null(strstr(report, "ids"));
  assert_null(strstr(report, "layer.0.weight"));
  /* a small buffer gets a truncated, terminated report */
  char small[40];
  memset(small, 'x', sizeof small);
  assert_int_equal(nnrt_st_check(st, m, 3, small, sizeof small, &err), NNRT_OK);
  assert_true(strlen(small) < sizeof small);
  assert_non_null(strstr(small, "..."));
  /* no report buffer is fine; the empty manifest lists everything */
  assert_int_equal(nnrt_st_check(st, m, 3, NULL, 0, &err), NNRT_OK);
  assert_int_equal(nnrt_st_check(st, NULL, 0, report, sizeof report, &err), NNRT_OK);
  assert_non_null(strstr(report, "7 tensors not used"));
  nnrt_st_close(st);
}

static void test_lookup_and_copy_errors(void **state) {
  nnrt_st *st = open_model_file();
  nnrt_error err = {0};
  const nnrt_st_tensor *t = NULL;
  assert_int_equal(nnrt_st_find(st, "h.9.mlp", &t, &err), NNRT_E_FORMAT);
  assert_null(t);
  assert_non_null(strstr(err.msg, "\"h.9.mlp\""));
  assert_non_null(strstr(err.msg, "model.safetensors"));
  assert_int_equal(nnrt_st_find(st, "layer.0.weight", &t, &err), NNRT_OK);
  float out[15];
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 14, &err), NNRT_E_SIZE);
  assert_non_null(strstr(err.msg, "\"layer.0.weight\""));
  assert_non_null(strstr(err.msg, "15"));
  assert_int_equal(nnrt_st_copy(st, t, out, 59, &err), NNRT_E_SIZE);
  nnrt_st_tensor copy = *t;
  assert_int_equal(nnrt_st_copy(st, &copy, out, sizeof out, &err), NNRT_E_ARG);
  assert_int_equal(nnrt_st_find(st, "ids", &t, &err), NNRT_OK);
  assert_int_equal(nnrt_st_copy_f32(st, t, out, 15, &err), NNRT_E_FORMAT);
  assert_non_null(strstr(err.msg, "I32"));
  assert_int_equal(nnrt_st_check(st, NULL, 2, NULL, 0, &err), NNRT_E_ARG);
  nnrt_st_desc bad = {NULL, NNRT_F32, 0, {0}};
  assert_int_equal(nnrt_st_check(st, &bad, 1, NULL, 0, &err), NNRT_E_ARG);
  bad.name = "x";
  bad.rank = 9;
  assert_int_equal(nnrt_st_check(st, &bad, 1, NULL, 0, &err), NNRT_E_ARG);
  nnrt_st_close(st);
}

/* -------------------------------------------------------------- writer */

static void test_writer_errors_leave_nothing(void **state) {
  int before = count_files();
  float v[4] = {0};
  nnrt_error err = {0};
  nnrt_st_desc d[2] = {{"w", NNRT_F32, 1, {4}}, {"w", NNRT_F32, 1, {4}}};
  const void *data[2] = {v, v};
  assert_int_equal(nnrt_st_write(path_of("dupw.safetensors"), 2, d, data, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "\"w\""));
  d[1].name = "__metadata__";
  assert_int_equal(nnrt_st_write(path_of("meta.safetensors"), 2, d, data, &err), NNRT_E_ARG);
  d[1].name = "u";
  data[1] = NULL;
  assert_int_equal(nnrt_st_write(path_of("null.safetensors"), 2, d, data, &err), NNRT_E_ARG);
  assert_non_null(strstr(err.msg, "\"u\""));
  data[1] = v;
  d[1].shape[0] = -1;
  assert_int_equal(nnrt_st_write(path_of("neg.safetensors"), 2, d, data, &err), NNRT_E_ARG);
  d[1].shape[0] = 4;
  d[1].name = "bad\xff";
  assert_int_equal(nnrt_st_write(path_of("utf.safetensors"), 2, d, data, &err), NNRT_E_ARG);
  d[1].name = "u";
  d[1].rank = 2;
  d[1].shape[0] = INT64_MAX;
  d[1].shape[1] = 2;
  assert_int_equal(nnrt_st_write(path_of("big.safetensors"), 2, d, data, &err), NNRT_E_SIZE);
  assert_int_equal(count_files(), before);
  d[1].rank = 1;
  d[1].shape[0] = 4;
  assert_int_equal(nnrt_st_write(path_of("nodir/w.safetensors"), 2, d, data, &err), NNRT_E_IO);
  assert_non_null(strstr(err.msg, "nodir/w.safetensors"));
  assert_int_equal(count_files(), before);
  assert_int_equal(nnrt_st_write(NULL, 2, d, data, &err), NNRT_E_ARG);
  /* and a good write leaves exactly one file, no temporary */
  assert_int_equal(nnrt_st_write(path_of("good.safetensors"), 2, d, data, &err), NNRT_OK);
  assert_int_equal(count_files(), before + 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_round_trip_file),
    cmocka_unit_test(test_round_trip_memory_unaligned),
    cmocka_unit_test(test_writer_exact_bytes),
    cmocka_unit_test(test_writer_metadata),
    cmocka_unit_test(test_metadata_and_gaps),
    cmocka_unit_test(test_empty_and_short_files),
    cmocka_unit_test(test_header_length_lies),
    cmocka_unit_test(test_bad_json),
    cmocka_unit_test(test_bad_entries),
    cmocka_unit_test(test_lying_offsets),
    cmocka_unit_test(test_every_truncation_and_byte_flip),
    cmocka_unit_test(test_open_errors),
    cmocka_unit_test(test_manifest_mismatches),
    cmocka_unit_test(test_extra_tensors_reported),
    cmocka_unit_test(test_lookup_and_copy_errors),
    cmocka_unit_test(test_writer_errors_leave_nothing),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
