/* compiler/ref/ref.h — the float64 reference evaluator, the oracle of every test.
 *
 * Values are float64 arrays, row-major at concrete sizes (every symbol given a
 * value), indexed by tensor id. i32 tensors (token ids) hold integral doubles.
 * The caller fills the arrays of inputs and parameters; the evaluator
 * allocates the arrays of the values it computes. */
#ifndef NNC_REF_H
#define NNC_REF_H

#include "../ir/ir.h"
#include "../ir/schedule.h"

typedef struct nnc_ref {
  const nnc_graph *g;
  int64_t *sym;       /* g->nsyms concrete sizes, each in 1..max */
  double **val;       /* g->ntensors arrays; NULL where not (yet) computed */
  int rank;           /* the rank this evaluator plays in nnc_ref_run_ranks (a vocabulary split's
                         embedding reads it); 0 otherwise */
  nnc_dtype store;    /* NNC_F32 (nnc_ref_init's): float64 throughout. NNC_BF16 or NNC_F16: every float
                         value nnc_ref_run_graph computes is rounded to that type before a node reads it,
                         the reference of a model storing its values in 16 bits, whose distance from the
                         float64 one sizes the error that storage alone makes (bench --check) */
} nnc_ref;

/* Sets up r for g with the given symbol sizes (copied); every val NULL. */
nnc_status nnc_ref_init(nnc_ref *r, const nnc_graph *g, const int64_t *sym, nnc_error *err);
/* Frees every array in r->val (inputs and params included) and r itself. */
void nnc_ref_free(nnc_ref *r);
/* Number of elements of tensor t at r's sizes. */
int64_t nnc_ref_elems(const nnc_ref *r, int t);
/* Allocates r->val[t] (zeroed) if absent and returns it; NULL when out of memory. */
double *nnc_ref_alloc(nnc_ref *r, int t);

/* Fills every input and parameter with reproducible random values from seed:
 * floats uniform in [-1, 1) (norm gammas near 1 are not special-cased), i32
 * tensors with valid indices for the embedding or loss that reads them
 * (0 <= id < rows of the table) and 0/1 for padding masks (never a full row
 * of zeros). */
nnc_status nnc_ref_random_inputs(nnc_ref *r, uint64_t seed, nnc_error *err);

/* Evaluates every live node of the unfused graph, in order. */
nnc_status nnc_ref_run_graph(nnc_ref *r, nnc_error *err);

/* Evaluates the schedule kernel by kernel from the kernels' descriptors (GEMM
 * with its prologue and epilogue in one formula, attention with a streaming
 * softmax, elementwise chains element by element), leaving values internal to
 * a kernel uncomputed. Its outputs must equal nnc_ref_run_graph's. */
nnc_status nnc_ref_run_schedule(nnc_ref *r, const nnc_schedule *s, nnc_error *err);

/* A parallel plan's graph (passes/parallel.c) for its n ranks: rs[r] holds
 * rank r's inputs and parameter slices (all rs over one graph); each node
 * runs on every rank in turn, and an all_reduce sums the ranks' inputs into
 * each rank's output, an all_gather stacks them. A single evaluator refuses
 * collectives. Sets each rs[r].rank to r. */
nnc_status nnc_ref_run_ranks(nnc_ref *rs, int n, nnc_error *err);
/* Rank `rank`'s slice (sh) of a parameter whose whole value full has shape
 * full_shape (rank_dims dims), into dst (the slice's elements). */
void nnc_ref_shard_slice(const double *full, int rank_dims, const int64_t *full_shape, const nnc_shard *sh, int rank,
                         double *dst);

/* v rounded to the nearest value of type t (ties to even; past the largest
 * finite value, an infinity of v's sign; subnormals kept): bf16's 8
 * significant bits, f16's 11 (largest 65504), f32's 24. Other types, NaN
 * and infinities: v unchanged. */
double nnc_ref_round(double v, nnc_dtype t);

/* max |a - b| / max(max |b|, tiny) over n elements; +inf if any is NaN. */
double nnc_ref_rel_error(const double *a, const double *b, int64_t n);

/* The cosine similarity of a and b (n elements each), in float64: a.b / (|a| |b|).
 * Elements equal and infinite in both are left out (as by nnc_ref_rel_error);
 * any other NaN or infinity gives NaN. Two zero vectors (n = 0 included) are
 * alike, 1; a zero vector against a nonzero one, 0. */
double nnc_ref_cosine(const double *a, const double *b, int64_t n);

/* Logits of rows rows, cols classes each: how many rows have got's largest
 * element (the first, on ties in got) where want is largest. A tie in want,
 * within float64 rounding (1e-12 of the row's largest finite |want|), counts
 * as agreement for each tied class; a row with a NaN never agrees. 0 when
 * rows or cols is 0. */
int64_t nnc_ref_top1_agree(const double *got, const double *want, int64_t rows, int64_t cols);

#endif
