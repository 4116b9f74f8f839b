/* tests/unit/models_util.h — what the model tests (test_models.c,
 * test_models_gpt2.c, test_models_decode.c) share: a model loaded and
 * compiled from models/<name>.lua, its tensors by name, the expected
 * parameter lists, the float64 reference run over the graph and over the
 * fused schedule, and the pieces of a float64 network written by hand with
 * explicit loops (an oracle independent of the IR). Failures go through
 * cmocka's fail_msg. */
#ifndef NNC_TESTS_MODELS_UTIL_H
#define NNC_TESTS_MODELS_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "ir/schedule.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "ref/ref.h"

#ifndef NNC_SOURCE_ROOT
#define NNC_SOURCE_ROOT "."
/* ------------------------------------------------------------- folds */

/* The head split and merge around every attention were folded into it
 * (passes/fold_heads.c): `moves` copy kernels are left; fused_qkv: q, k and
 * v are thirds of one projection of width 3*width. */
void check_heads_folded(const model *m, int moves, bool fused_qkv,
                        int64_t width);

#endif

/* ------------------------------------------------------------ loading */

typedef struct model {
  nnc_graph g;
  nnc_schedule s;
  bool scheduled;
} model;

void model_free(model *m);
/* models/<name>.lua with the given -D overrides, compiled (train: its
 * training step, as nnc --train, with recompute policy rc); co may be NULL. */
void load_model_with(model *m, const char *name, const char *const *defines,
                     int ndefines, bool train, const nnc_compile_opts *co,
                     nnc_recompute rc);
/* models/<name>.lua (train: its training step) under --precision=prec. */
void load_model_prec(model *m, const char *name, const char *const *defines,
                     int ndefines, bool train, const nnc_compile_opts *co,
                     const char *prec);
/* The training step of models/<name>.lua under --precision=prec. */
void load_train_prec(model *m, const char *name, const char *const *defines,
                     int ndefines, const nnc_compile_opts *co,
                     const char *prec);
void load_model_as(model *m, const char *name, const char *const *defines,
                   int ndefines, bool train, const nnc_compile_opts *co);
void load_model(model *m, const char *name, const char *const *defines,
                int ndefines);

/* The tensor among ids named name, or -1; the others fail when there is none.
 */
int find_tensor(const nnc_graph *g, const int *ids, int n, const char *name);
int param_id(const nnc_graph *g, const char *name);
int input_id(const nnc_graph *g, const char *name);
int output_id(const nnc_graph *g, const char *name);

/* ------------------------------------------- expected parameter lists */

typedef struct expect {
  char name[96];
  int rank;
  int64_t dims[2];
} expect;

typedef struct expect_list {
  expect *e;
  int n, cap;
} expect_list;

/* Adds the parameter named by fmt, of rank 1 ([d0]) or 2 ([d0, d1]). */
void want(expect_list *l, int rank, int64_t d0, int64_t d1, const char *fmt,
          ...) __attribute__((format(printf, 5, 6)));
/* The graph's parameters are exactly l's (in any order), f32, with l's shapes.
 */
void check_params(const nnc_graph *g, const expect_list *l);

/* A tensor's shape, each dim a constant (sym NULL) or one named symbol. */
typedef struct dimspec {
  const char *sym;
  int64_t k;
} dimspec;

void check_shape(const nnc_graph *g, int t, nnc_dtype dtype, int rank,
                 const dimspec *ds);

/* ------------------------------------------------- running the oracle */

/* Symbol sizes by name for nnc_ref_init: B = b, T = t, every other 1 (free it).
 */
int64_t *sizes(const nnc_graph *g, int64_t b, int64_t t);
void ref_setup(nnc_ref *r, const model *m, const int64_t *sym, uint64_t seed);
void run_graph(nnc_ref *r);
double max_abs(const double *a, int64_t n);
/* The float64 reference over the unfused graph and over m's schedule, on
 * the same random inputs and weights (sizes sym, seed); free both. */
void run_graph_and_schedule(const model *m, const int64_t *sym, uint64_t seed, nnc_ref *graph, nnc_ref *sched);
/* The fused schedule evaluated by the reference equals the graph within tol. */
void check_schedule_tol(const model *m, int64_t b, int64_t t, double tol);
void check_schedule(const model *m, int64_t b, int64_t t);

/* ------------------------------------- a float64 network, by hand */

/* y[r, n] = sum_k x[r, k] * W + b, W [n_out, k] or, when in_out, [k, n_out]. */
void dense(const double *x, int64_t rows, int64_t k, const double *w,
           const double *b, int64_t n_out, bool in_out, double *y);
void layer_norm(const double *x, int64_t rows, int64_t c, const double *g,
                const double *b, double eps, double *y);
/* Multi-head attention on rows laid out [B, T, C] with head h in columns
 * h*D .. h*D+D-1 of q, k and v (all with row stride ld). A key is skipped
 * when causal and after the query, or when mask (per [b, t]) is 0. */
void attend(const double *q, const double *k, const double *v, int64_t ld,
            int64_t batch, int64_t T, int64_t heads, int64_t D, bool causal,
            const double *mask, double *y);
/* n zeroed doubles (free them). */
double *vec(int64_t n);
/* The reference's values of the parameter named by fmt. */
const double *pval(const nnc_ref *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* got equals want_v within tol (relative), and want_v is not all zeros. */
void check_close(const double *got, const double *want_v, int64_t n, double tol,
                 const char *what);

/* ------------------------------------------------------------- folds */

/* The head split and merge around every attention were folded into it
 * (passes/fold_heads.c): `moves` copy kernels are left; fused_qkv: q, k and
 * v are thirds of one projection of width 3*width. */
void check_heads_folded(const model *m, int moves, bool fused_qkv,
                        int64_t width);

#endif
