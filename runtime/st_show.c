/* runtime/st_show.c — names and shapes as they appear in messages. */
#include <stdio.h>
#include <string.h>

#include "nnrt_st_impl.h"

const char *nnrt_st_show(const char *name, char buf[NNRT_SHOW_MAX]) {
  size_t len = strlen(name), keep = len < NNRT_SHOW_MAX ? len : NNRT_SHOW_MAX - 4;
  /* Cut on a character boundary, not inside a UTF-8 sequence. */
  while (keep < len && keep > 0 && ((unsigned char)name[keep] & 0xc0u) == 0x80u) keep--;
  for (size_t i = 0; i < keep; i++) {
    unsigned char c = (unsigned char)name[i];
    buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
  }
  if (keep < len) {
    memcpy(buf + keep, "...", 3);
    keep += 3;
  }
  buf[keep] = 0;
  return buf;
}

const char *nnrt_st_shape_str(int rank, const int64_t *shape, char buf[NNRT_SHAPE_MAX]) {
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < rank && i < NNRT_MAX_RANK; i++)
    n += (size_t)snprintf(buf + n, NNRT_SHAPE_MAX - n, i ? ", %lld" : "%lld", (long long)shape[i]);
  snprintf(buf + n, NNRT_SHAPE_MAX - n, "]");
  return buf;
}
