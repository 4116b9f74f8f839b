/* runtime/json.c — a small strict JSON parser for safetensors headers.
 *
 * Values are parsed into a tree that lives in one bump-allocated document.
 * Children are collected on one shared stack while their array or object is
 * open and moved into the document when it closes, so a deep or wide text
 * costs one growing buffer rather than one per level. Recursion is bounded
 * by limits.max_depth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_json.h"

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

struct nnrt_json_doc {
  chunk *chunks;
  nnrt_json root;
};

typedef struct parser {
  const unsigned char *start, *p, *end;
  nnrt_json_doc *doc;
  nnrt_json_limits lim;
  size_t nvalues;
  nnrt_json *stack;  /* children of the open arrays and objects */
  size_t nstack, capstack;
  nnrt_error *err;
} parser;

enum { CHUNK_BYTES = 64 * 1024 };

static void *doc_alloc(nnrt_json_doc *d, size_t bytes) {
  bytes = (bytes + 15u) & ~(size_t)15u;
  chunk *c = d->chunks;
  if (!c || c->cap - c->used < bytes) {
    size_t cap = bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->cap = cap;
    c->used = 0;
    /* A big block goes behind the current chunk so the current one keeps
     * serving small requests. */
    if (d->chunks && cap > CHUNK_BYTES) {
      c->next = d->chunks->next;
      d->chunks->next = c;
    } else {
      c->next = d->chunks;
      d->chunks = c;
    }
  }
  void *r = c->data + c->used;
  c->used += bytes;
  return r;
}

static nnrt_status fail(parser *ps, const unsigned char *at, const char *what) {
  size_t pos = (size_t)(at - ps->start);
  if (at >= ps->end)
    return nnrt_errorf(ps->err, NNRT_E_FORMAT,
                       "invalid JSON at byte %zu: %s, found the end of the text", pos, what);
  unsigned c = *at;
  if (c >= 0x20 && c < 0x7f)
    return nnrt_errorf(ps->err, NNRT_E_FORMAT, "invalid JSON at byte %zu: %s, found '%c'", pos,
                       what, c);
  return nnrt_errorf(ps->err, NNRT_E_FORMAT, "invalid JSON at byte %zu: %s, found byte 0x%02x",
                     pos, what, c);
}

static nnrt_status nomem(parser *ps) {
  return nnrt_errorf(ps->err, NNRT_E_NOMEM, "out of memory parsing JSON");
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static nnrt_status push(parser *ps, const nnrt_json *v) {
  if (ps->nstack == ps->capstack) {
    size_t cap = ps->capstack ? 2 * ps->capstack : 64;
    nnrt_json *s = realloc(ps->stack, cap * sizeof *s);
    if (!s) return nomem(ps);
    ps->stack = s;
    ps->capstack = cap;
  }
  ps->stack[ps->nstack++] = *v;
  return NNRT_OK;
}

/* Moves the children above base on the stack into the document. */
static nnrt_status pop_children(parser *ps, size_t base, nnrt_json *v) {
  v->n = ps->nstack - base;
  v->items = NULL;
  if (v->n) {
    v->items = doc_alloc(ps->doc, v->n * sizeof *v->items);
    if (!v->items) return nomem(ps);
    memcpy(v->items, ps->stack + base, v->n * sizeof *v->items);
  }
  ps->nstack = base;
  return NNRT_OK;
}

/* The length of a valid UTF-8 sequence at p (1..4), 0 when invalid:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  int n;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1fu; }
  else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0fu; }
  else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07u; }
  else return 0;
  if (end - p < n) return 0;
  for (int i = 1; i < n; i++) {
    if ((p[i] & 0xc0u) != 0x80u) return 0;
    cp = (cp << 6) | (p[i] & 0x3fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
  if (end - p < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

static char *put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xc0 | (cp >> 6));
    *o++ = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xe0 | (cp >> 12));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *o++ = (char)(0x80 | (cp & 0x3f));
  } else {
    *o++ = (char)(0xf0 | (cp >> 18));
    *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *o++ = (char)(0x80 | (cp & 0x3f));
  }
  return o;
}

/* ps->p is at the opening quote. The decoded text is never longer than the
 * quoted one, so it is sized from a first scan for the closing quote. */
static nnrt_status parse_string(parser *ps, nnrt_json *v) {
  const unsigned char *q = ps->p + 1;
  while (q < ps->end && *q != '"') {
    if (*q == '\\' && ps->end - q < 2) q = ps->end;
    else q += (*q == '\\') ? 2 : 1;
  }
  if (q >= ps->end) return fail(ps, ps->end, "expected the closing '\"' of a string");
  char *out = doc_alloc(ps->doc, (size_t)(q - ps->p));
  if (!out) return nomem(ps);
  char *o = out;
  const unsigned char *p = ps->p + 1;
  while (p < q) {
    unsigned c = *p;
    if (c < 0x20) return fail(ps, p, "expected no control character inside a string");
    if (c != '\\') {
      int n = utf8_len(p, q);
      if (!n) return fail(ps, p, "expected valid UTF-8 in a string");
      memcpy(o, p, (size_t)n);
      o += n;
      p += n;
      continue;
    }
    const unsigned char *esc = p;
    p++;
    switch (*p) {
    case '"': *o++ = '"'; p++; break;
    case '\\': *o++ = '\\'; p++; break;
    case '/': *o++ = '/'; p++; break;
    case 'b': *o++ = '\b'; p++; break;
    case 'f': *o++ = '\f'; p++; break;
    case 'n': *o++ = '\n'; p++; break;
    case 'r': *o++ = '\r'; p++; break;
    case 't': *o++ = '\t'; p++; break;
    case 'u': {
      unsigned cp, lo;
      if (!hex4(p + 1, q, &cp)) return fail(ps, esc, "expected four hex digits after \\u");
      p += 5;
      if (cp >= 0xdc00 && cp <= 0xdfff)
        return fail(ps, esc, "expected no lone low surrogate in a \\u escape");
      if (cp >= 0xd800 && cp <= 0xdbff) {
        if (q - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, q, &lo) || lo < 0xdc00 ||
            lo > 0xdfff)
          return fail(ps, esc, "expected a low surrogate \\u escape after a high one");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        p += 6;
      }
      /* Names are C strings: an embedded NUL would silently cut them. */
      if (cp == 0) return fail(ps, esc, "expected no \\u0000 in a string");
      o = put_utf8(o, cp);
      break;
    }
    default: return fail(ps, esc, "expected a valid escape sequence");
    }
  }
  *o = 0;
  v->kind = NNRT_JSON_STRING;
  v->s = out;
  v->len = (size_t)(o - out);
  ps->p = q + 1;
  return NNRT_OK;
}

static int is_digit(const unsigned char *p, const unsigned char *end) {
  return p < end && *p >= '0' && *p <= '9';
}

static nnrt_status parse_number(parser *ps, nnrt_json *v) {
  const unsigned char *p = ps->p, *begin = p;
  bool neg = false, integral = true, fits = true;
  uint64_t mag = 0;
  if (*p == '-') {
    neg = true;
    p++;
  }
  if (!is_digit(p, ps->end)) return fail(ps, p, "expected a digit");
  if (*p == '0') {
    p++;
    if (is_digit(p, ps->end)) return fail(ps, p, "expected no leading zero in a number");
  } else {
    while (is_digit(p, ps->end)) {
      unsigned d = *p++ - '0';
      if (mag > (UINT64_MAX - d) / 10) fits = false;
      else mag = mag * 10 + d;
    }
  }
  if (p < ps->end && *p == '.') {
    integral = false;
    p++;
    if (!is_digit(p, ps->end)) return fail(ps, p, "expected a digit after '.'");
    while (is_digit(p, ps->end)) p++;
  }
  if (p < ps->end && (*p == 'e' || *p == 'E')) {
    integral = false;
    p++;
    if (p < ps->end && (*p == '+' || *p == '-')) p++;
    if (!is_digit(p, ps->end)) return fail(ps, p, "expected a digit in the exponent");
    while (is_digit(p, ps->end)) p++;
  }
  v->kind = NNRT_JSON_NUMBER;
  v->s = (const char *)begin;
  v->len = (size_t)(p - begin);
  uint64_t lim = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  v->is_int = integral && fits && mag <= lim;
  if (v->is_int) v->i = neg ? (mag == lim ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
  ps->p = p;
  return NNRT_OK;
}

static nnrt_status parse_literal(parser *ps, nnrt_json *v, const char *word, nnrt_json_kind kind,
                                 bool b) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
    return fail(ps, ps->p, "expected a value");
  v->kind = kind;
  v->b = b;
  ps->p += n;
  return NNRT_OK;
}

static int cmp_key(const void *a, const void *b) {
  const nnrt_json *x = *(const nnrt_json *const *)a, *y = *(const nnrt_json *const *)b;
  int c = strcmp(x->key, y->key);
  if (c) return c;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Sorting a copy of the member pointers finds duplicates in n log n, which
 * matters for headers with tens of thousands of tensors. */
static nnrt_status check_duplicates(parser *ps, const nnrt_json *obj) {
  if (obj->n < 2) return NNRT_OK;
  const nnrt_json **idx = malloc(obj->n * sizeof *idx);
  if (!idx) return nomem(ps);
  for (size_t i = 0; i < obj->n; i++) idx[i] = &obj->items[i];
  qsort(idx, obj->n, sizeof *idx, cmp_key);
  nnrt_status st = NNRT_OK;
  for (size_t i = 1; i < obj->n && st == NNRT_OK; i++)
    if (strcmp(idx[i - 1]->key, idx[i]->key) == 0)
      st = nnrt_errorf(ps->err, NNRT_E_FORMAT, "duplicate key \"%.200s\" at byte %zu",
                       idx[i]->key, idx[i]->pos);
  free(idx);
  return st;
}

static nnrt_status parse_value(parser *ps, nnrt_json *v, int depth);

static nnrt_status parse_container(parser *ps, nnrt_json *v, int depth, bool is_object) {
  if (depth >= ps->lim.max_depth)
    return nnrt_errorf(ps->err, NNRT_E_FORMAT, "JSON nested deeper than %d levels at byte %zu",
                       ps->lim.max_depth, (size_t)(ps->p - ps->start));
  char close = is_object ? '}' : ']';
  size_t base = ps->nstack;
  v->kind = is_object ? NNRT_JSON_OBJECT : NNRT_JSON_ARRAY;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    return pop_children(ps, base, v);
  }
  for (;;) {
    nnrt_json child;
    memset(&child, 0, sizeof child);
    nnrt_status st;
    if (is_object) {
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != '"') return fail(ps, ps->p, "expected a string key");
      nnrt_json key;
      memset(&key, 0, sizeof key);
      size_t kpos = (size_t)(ps->p - ps->start);
      if ((st = parse_string(ps, &key)) != NNRT_OK) return st;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return fail(ps, ps->p, "expected ':' after a key");
      ps->p++;
      if ((st = parse_value(ps, &child, depth + 1)) != NNRT_OK) return st;
      child.key = key.s;
      child.pos = kpos;
    } else if ((st = parse_value(ps, &child, depth + 1)) != NNRT_OK) {
      return st;
    }
    if ((st = push(ps, &child)) != NNRT_OK) return st;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      break;
    }
    return fail(ps, ps->p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  nnrt_status st = pop_children(ps, base, v);
  if (st == NNRT_OK && is_object) st = check_duplicates(ps, v);
  return st;
}

static nnrt_status parse_value(parser *ps, nnrt_json *v, int depth) {
  skip_ws(ps);
  if (++ps->nvalues > ps->lim.max_values)
    return nnrt_errorf(ps->err, NNRT_E_FORMAT, "more than %zu JSON values at byte %zu",
                       ps->lim.max_values, (size_t)(ps->p - ps->start));
  v->pos = (size_t)(ps->p - ps->start);
  if (ps->p >= ps->end) return fail(ps, ps->p, "expected a value");
  switch (*ps->p) {
  case '{': return parse_container(ps, v, depth, true);
  case '[': return parse_container(ps, v, depth, false);
  case '"': return parse_string(ps, v);
  case 't': return parse_literal(ps, v, "true", NNRT_JSON_BOOL, true);
  case 'f': return parse_literal(ps, v, "false", NNRT_JSON_BOOL, false);
  case 'n': return parse_literal(ps, v, "null", NNRT_JSON_NULL, false);
  default:
    if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, v);
    return fail(ps, ps->p, "expected a value");
  }
}

bool nnrt_json_valid_utf8(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s, *end = p + len;
  while (p < end) {
    int n = utf8_len(p, end);
    if (!n) return false;
    p += n;
  }
  return true;
}

void nnrt_json_free(nnrt_json_doc *doc) {
  if (!doc) return;
  for (chunk *c = doc->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(doc);
}

nnrt_status nnrt_json_parse(const char *text, size_t len, nnrt_json_limits limits,
                            nnrt_json_doc **out, nnrt_error *err) {
  if (!out || (!text && len))
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_json_parse: text or out is NULL");
  *out = NULL;
  if (limits.max_depth < 1 || limits.max_values < 1)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_json_parse: limits must be positive");
  nnrt_json_doc *doc = calloc(1, sizeof *doc);
  if (!doc) return nnrt_errorf(err, NNRT_E_NOMEM, "out of memory parsing JSON");
  const unsigned char *t = (const unsigned char *)(text ? text : "");
  parser ps = {.start = t, .p = t, .end = t + len, .doc = doc, .lim = limits, .err = err};
  nnrt_status st = parse_value(&ps, &doc->root, 0);
  if (st == NNRT_OK) {
    skip_ws(&ps);
    if (ps.p < ps.end) st = fail(&ps, ps.p, "expected the end of the text after the value");
  }
  free(ps.stack);
  if (st != NNRT_OK) {
    nnrt_json_free(doc);
    return st;
  }
  *out = doc;
  return NNRT_OK;
}

const nnrt_json *nnrt_json_root(const nnrt_json_doc *doc) { return doc ? &doc->root : NULL; }

const nnrt_json *nnrt_json_get(const nnrt_json *v, const char *key) {
  if (!v || v->kind != NNRT_JSON_OBJECT || !key) return NULL;
  for (size_t i = 0; i < v->n; i++)
    if (strcmp(v->items[i].key, key) == 0) return &v->items[i];
  return NULL;
}

const char *nnrt_json_kind_name(nnrt_json_kind k) {
  switch (k) {
  case NNRT_JSON_NULL: return "null";
  case NNRT_JSON_BOOL: return "a boolean";
  case NNRT_JSON_NUMBER: return "a number";
  case NNRT_JSON_STRING: return "a string";
  case NNRT_JSON_ARRAY: return "an array";
  case NNRT_JSON_OBJECT: return "an object";
  }
  return "?";
}
