/* compiler/passes/fuse_match.h — what the fusion patterns (fuse_patterns.c)
 * share with the driver that turns their matches into kernels (fuse.c). */
#ifndef NNC_FUSE_MATCH_H
#define NNC_FUSE_MATCH_H

#include "passes.h"

/* The graph being fused and which nodes are already taken. */
typedef struct fuse_ctx {
  const nnc_graph *g;
  nnc_uses uses;
  const int *owner;   /* per node: the group that took it, -1 while free */
  bool gemm_aux;      /* GEMMs may save or read an activation's input (nnc_compile_opts) */
  bool gemm_bgrad;    /* GEMMs may write a bias gradient (nnc_compile_opts) */
  bool gemm_act_last; /* GEMMs may apply an activation after their residual (nnc_compile_opts) */
  int gemm_windows;   /* GEMMs of at most this many outputs may gather A from an im2col's image (nnc_compile_opts) */
  unsigned gemm_windows_types;   /* ... of these dtypes, bit 1u << nnc_dtype each (nnc_compile_opts) */
  bool gemm_pool;     /* a GEMM may max-pool its result (nnc_compile_opts) */
  int channel_run;    /* ... and channels (and outputs) a multiple of this (nnc_compile_opts; 8 when 0) */
  bool reduce_windows; /* pools may reduce an im2col's taps from its image (nnc_compile_opts) */
  bool gather_loops;   /* elementwise chains may read an embedding's table through its ids (nnc_compile_opts) */
  bool row_loops;      /* a layernorm or rmsnorm may take the chain computing its input (nnc_compile_opts) */
  bool reduce_loops;   /* a reduction may take the chains before and after it (nnc_compile_opts) */
  bool gemm_norm_rows; /* a GEMM's norm prologue may move into the chain computing its input (nnc_compile_opts) */
  bool scan_input;     /* an lstm_scan may take the linear computing its xw (nnc_compile_opts) */
} fuse_ctx;

/* One match: the nodes of a future kernel (any order; the driver sorts
 * them), its kind, the node whose Lua line the kernel reports and, for GEMM
 * and attention, the descriptor. `nodes` is scratch room for g->nnodes ids,
 * owned by the driver. A row or reduce kernel that carries a chain may also
 * write values of the shape its loop walks that are read outside it or are
 * graph outputs (side[0..nside), made by nodes other than its last): the
 * norm's input rows, the reduced input's elements. */
typedef struct fuse_group {
  nnc_kernel_kind kind;
  int nnodes;
  int *nodes;
  int main;
  int nside;
  int side[NNC_MAX_IO];
  nnc_gemm_desc gemm;
  nnc_attention_desc attn;
  nnc_attention_grad_desc attn_grad;
} fuse_group;

/* A pattern tries to build a group whose anchor is node `anchor` (live and
 * free); false when the anchor does not fit it. */
typedef bool (*fuse_match_fn)(const fuse_ctx *c, int anchor, fuse_group *out);

typedef struct fuse_pattern {
  const char *name;
  fuse_match_fn match;
} fuse_pattern;

/* softmax(masks(scale(q . transpose(k)))) . v anchored at the softmax; the
 * attention-op pass (attention_op.c) matches with it too. */
bool nnc_fuse_match_attention(const fuse_ctx *c, int anchor, fuse_group *out);

/* Whether the layernorm or rmsnorm node `norm`, taken from a GEMM's
 * prologue, can join the elementwise group `chain` whose last node computes
 * its input, as one row kernel (nnc_compile_opts.gemm_norm_rows): the rows
 * fit a warp, the kernel reads at most NNC_MAX_IO tensors, and the chain's
 * value, when others read it too, is a side output they read after the
 * norm. *side gets that value, or -1. */
bool nnc_fuse_norm_joins_chain(const fuse_ctx *c, const fuse_group *chain, int norm, int *side);

/* The pattern table, in priority order; the last entry takes any node. */
extern const fuse_pattern nnc_fuse_patterns[];
extern const int nnc_fuse_npatterns;

#endif
