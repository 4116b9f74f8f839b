/* runtime/nnrt_json.h — a small strict JSON parser (internal to libnnrt).
 *
 * RFC 8259 without extensions: no comments, no trailing commas, no NaN,
 * strings must be valid UTF-8, duplicate keys in an object are an error.
 * Nesting depth and the number of values are bounded so that a hostile
 * header cannot exhaust the stack or the memory. Numbers are kept as their
 * text; those written as integers that fit int64 also as is_int/i. */
#ifndef NNRT_JSON_H
#define NNRT_JSON_H

#include "nnrt.h"

typedef enum nnrt_json_kind {
  NNRT_JSON_NULL,
  NNRT_JSON_BOOL,
  NNRT_JSON_NUMBER,
  NNRT_JSON_STRING,
  NNRT_JSON_ARRAY,
  NNRT_JSON_OBJECT
} nnrt_json_kind;

typedef struct nnrt_json nnrt_json;
struct nnrt_json {
  nnrt_json_kind kind;
  bool b;              /* BOOL */
  bool is_int;         /* NUMBER written as an integer that fits int64 */
  int64_t i;
  const char *s;       /* STRING: decoded, NUL-terminated; NUMBER: its text (not terminated) */
  size_t len;          /* bytes of s */
  const char *key;     /* the key of this member, when the parent is an OBJECT */
  nnrt_json *items;    /* ARRAY, OBJECT: the n members in order */
  size_t n;
  size_t pos;          /* byte offset in the text, for messages */
};

typedef struct nnrt_json_doc nnrt_json_doc;

typedef struct nnrt_json_limits {
  int max_depth;       /* arrays/objects nested deeper fail */
  size_t max_values;   /* more values in all fail */
} nnrt_json_limits;

/* Parses text[0, len) (NUL bytes inside are an error). NNRT_E_FORMAT with the
 * byte offset for malformed text or a limit passed; NNRT_E_NOMEM. */
nnrt_status nnrt_json_parse(const char *text, size_t len, nnrt_json_limits limits,
                            nnrt_json_doc **out, nnrt_error *err);
const nnrt_json *nnrt_json_root(const nnrt_json_doc *doc);
void nnrt_json_free(nnrt_json_doc *doc);

/* The member called key of an object; NULL when absent or v is no object. */
const nnrt_json *nnrt_json_get(const nnrt_json *v, const char *key);
/* Whether s[0, len) is valid UTF-8 (as the parser demands of strings). */
bool nnrt_json_valid_utf8(const char *s, size_t len);
/* "a string", "an array", ... for messages. */
const char *nnrt_json_kind_name(nnrt_json_kind k);

#endif
