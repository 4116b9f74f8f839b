/* compiler/tune/tune.h — what a target chip is, and the tile choice per kernel.
 *
 * A target description says what the tuning rules need to know about a chip
 * (vector width and registers, caches, cores). nnc_tune_kernel is the one
 * interface from a description and a scheduled kernel to its tiles; each
 * target family has its own rules behind it (tune.c holds the table), and
 * every rule writes a short reason that `nnc --explain` prints. */
#ifndef NNC_TUNE_H
#define NNC_TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "../ir/schedule.h"
#include "target.h"

typedef struct nnc_target_desc {
  const char *name;            /* the --target name */
  nnc_target_family family;
  const char *isa;             /* C SIMD: "avx512", "avx2", "neon" or "generic" */
  int vector_width;            /* f32 lanes of one vector register */
  int vector_regs;             /* architectural vector registers */
  int64_t l1d, l2, l3;         /* data cache bytes: L1d and L2 per core, L3 shared */
  int cores;
} nnc_target_desc;

/* The tiles of one kernel; fields a kernel's template does not read are 0. */
typedef struct nnc_tile {
  int mr, nr, kc, mc, nc;      /* GEMM: register block MR x NR, cache blocks KC, MC, NC */
  int attn_bq, attn_bk;        /* attention: queries per task, keys per streamed block */
  int row_min_elems;           /* row kernels: the fewest elements worth one task */
  char reason[320];            /* why, in one line */
} nnc_tile;

/* Fills the description of a target by name: `c-simd` detects the host's ISA,
 * `c-avx2` and the like fix it; caches and cores come from the host. */
nnc_status nnc_target_describe(const char *name, nnc_target_desc *out, nnc_error *err);

/* The tiles of kernel k of s for target t. */
nnc_status nnc_tune_kernel(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err);

/* One line per kernel with its tile choice and why (`nnc --explain`). */
void nnc_tune_explain(FILE *f, const nnc_target_desc *t, const nnc_schedule *s,
                      const nnc_tile *tiles);

#endif
