/* runtime/comm_rendezvous.c — the rendezvous file: rank 0 leaves the bytes
 * the other ranks need to join (NCCL's unique id) at a path they all see.
 * Written as path.tmp and renamed, so a reader sees all of it or nothing. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnrt_comm.h"

nnrt_status nnrt_comm_rendezvous_write(const char *path, const void *data, size_t bytes, nnrt_error *err) {
  if (!path || !*path || (!data && bytes))
    return nnrt_errorf(err, NNRT_E_ARG, "rendezvous: expected a path and data, found NULL or \"\"");
  size_t n = strlen(path) + 5;
  char *tmp = malloc(n);
  if (!tmp) return nnrt_errorf(err, NNRT_E_NOMEM, "rendezvous %s: out of memory", path);
  snprintf(tmp, n, "%s.tmp", path);
  nnrt_status s = NNRT_OK;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    s = nnrt_errorf(err, NNRT_E_IO, "rank 0: cannot write the rendezvous file %s: %s", tmp, strerror(errno));
  } else {
    bool ok = fwrite(data, 1, bytes, f) == bytes;
    ok = (fclose(f) == 0) && ok;
    if (!ok) s = nnrt_errorf(err, NNRT_E_IO, "rank 0: writing the rendezvous file %s failed", tmp);
    else if (rename(tmp, path) != 0)
      s = nnrt_errorf(err, NNRT_E_IO, "rank 0: cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (s != NNRT_OK) remove(tmp);
  }
  free(tmp);
  return s;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

nnrt_status nnrt_comm_rendezvous_read(const char *path, void *data, size_t bytes, int rank, double timeout_s,
                                      nnrt_error *err) {
  if (!path || !*path || (!data && bytes))
    return nnrt_errorf(err, NNRT_E_ARG, "rank %d: rendezvous: expected a path and a buffer, found NULL or \"\"",
                       rank);
  uint64_t start = nnrt_now_ns();
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(data, 1, bytes, f);
      int extra = fgetc(f);
      fclose(f);
      if (got != bytes || extra != EOF)
        return nnrt_errorf(err, NNRT_E_COMM, "rank %d: rendezvous file %s: expected %zu bytes, found %s%zu",
                           rank, path, bytes, extra != EOF ? "more than " : "", got);
      return NNRT_OK;
    }
    if (errno != ENOENT)
      return nnrt_errorf(err, NNRT_E_IO, "rank %d: cannot read the rendezvous file %s: %s", rank, path,
                         strerror(errno));
    double waited = (double)(nnrt_now_ns() - start) * 1e-9;
    if (waited >= timeout_s)
      return nnrt_errorf(err, NNRT_E_COMM, "rank %d: no rendezvous file %s after %g s: did rank 0 start?", rank,
                         path, timeout_s);
    /* rank 0 may still be starting its GPU: no hurry, and no spinning */
    sleep_ms(10);
  }
}
