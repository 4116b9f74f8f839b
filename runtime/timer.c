/* runtime/timer.c — a monotonic clock for the benchmark harness. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <time.h>

#include "nnrt.h"

uint64_t nnrt_now_ns(void) {
  struct timespec ts;
  /* CLOCK_MONOTONIC fails only when the system lacks it; 0 then stands for
   * "no reading" rather than a made-up time. */
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
