/* tests/unit/test_sh.h — what the emitter tests share: running a shell
 * command (its exit status, 128 when it did not exit) and looking for a
 * string in a generated file (up to 4 MiB of it). */
#ifndef NNC_TEST_SH_H
#define NNC_TEST_SH_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static bool file_has(const char *path, const char *needle) __attribute__((unused));
static bool file_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  static char buf[1 << 22];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strstr(buf, needle) != NULL;
}

#endif
