/* tests/ops/expect.h — the check of the programs in tests/ops that
 * test_emit_c_simd builds against a generated folder: a failed condition
 * prints its line and message and counts, and the program goes on so that
 * one run shows every failure (main returns failures ? 1 : 0). */
#ifndef NNC_TESTS_OPS_EXPECT_H
#define NNC_TESTS_OPS_EXPECT_H

#include <stdio.h>

static int failures;

#define EXPECT(cond, ...)                     \
  do {                                        \
    if (!(cond)) {                            \
      fprintf(stderr, "line %d: ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);           \
      fprintf(stderr, "\n");                  \
      failures++;                             \
    }                                         \
  } while (0)

#endif
