/* compiler/tune/tune_rules.h — what each target family provides behind
 * nnc_target_describe and nnc_tune_kernel (the table is in tune.c), and the
 * problem sizes every family's rules read from a kernel. */
#ifndef NNC_TUNE_RULES_H
#define NNC_TUNE_RULES_H

#include "tune.h"

typedef nnc_status (*nnc_describe_fn)(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err);
typedef nnc_status (*nnc_tune_rules_fn)(const nnc_target_desc *t, const nnc_schedule *s, int k,
                                        nnc_tile *out, nnc_error *err);
typedef void (*nnc_explain_target_fn)(FILE *f, const nnc_target_desc *t);

/* One family's description of a chip and its tile rules. */
typedef struct nnc_tuner {
  nnc_target_family family;
  nnc_describe_fn describe;
  nnc_tune_rules_fn rules;
  nnc_explain_target_fn explain;   /* the --explain line about the chip */
} nnc_tuner;

/* The tuner of a family; NULL when there is none. */
const nnc_tuner *nnc_tuner_for(nnc_target_family family);

nnc_status nnc_describe_c_simd(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err);
nnc_status nnc_describe_cuda(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err);
nnc_status nnc_describe_opencl(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err);

nnc_status nnc_tune_c_simd(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err);
nnc_status nnc_tune_cuda(const nnc_target_desc *t, const nnc_schedule *s, int k,
                         nnc_tile *out, nnc_error *err);
nnc_status nnc_tune_opencl(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err);

void nnc_explain_c_simd(FILE *f, const nnc_target_desc *t);
void nnc_explain_cuda(FILE *f, const nnc_target_desc *t);
void nnc_explain_opencl(FILE *f, const nnc_target_desc *t);

/* The host, for the families that describe it (C SIMD, OpenCL on a CPU). */
const char *nnc_host_isa(void);
void nnc_host_caches(int64_t *l1d, int64_t *l2, int64_t *l3, int *cores);

/* Problem sizes of a kernel with every symbol at its maximum. */
typedef struct nnc_gemm_size {
  int64_t batch, m, n, k;      /* batch: matmul batch items (1 for linear, whose M folds them) */
} nnc_gemm_size;
typedef struct nnc_attn_size {
  int64_t heads, t, s, d, dv;  /* heads: batch x heads, the independent problems */
} nnc_attn_size;
typedef struct nnc_rows_size {
  int64_t rows, cols;          /* the kernel's output as rows of its last axis */
} nnc_rows_size;

int64_t nnc_tune_max_dim(const nnc_graph *g, nnc_dim d);
nnc_gemm_size nnc_tune_gemm_size(const nnc_schedule *s, const nnc_kernel *k);
nnc_attn_size nnc_tune_attn_size(const nnc_schedule *s, const nnc_kernel *k);
nnc_rows_size nnc_tune_rows_size(const nnc_schedule *s, const nnc_kernel *k);
/* An lstm_scan or gru_scan kernel's step GEMM, [B, G H] = [h | x_t] [G H, H (+ F where the kernel took
 * the linear computing xw)]^T, and its steps T; false for any other kernel. */
bool nnc_tune_scan_size(const nnc_schedule *s, const nnc_kernel *k, nnc_gemm_size *z, int64_t *steps);
/* " batch=4" for a batched GEMM, "" for one product: the reasons' wording. */
const char *nnc_tune_batch_note(int64_t batch, char *buf, size_t n);

static inline int64_t nnc_tune_clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }
static inline int64_t nnc_tune_ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }
static inline int64_t nnc_tune_round_up(int64_t v, int64_t m) { return nnc_tune_ceil_div(v, m) * m; }
static inline int64_t nnc_tune_round_down(int64_t v, int64_t m) { return m > 0 ? v / m * m : v; }

#endif
