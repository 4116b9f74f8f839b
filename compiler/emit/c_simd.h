/* compiler/emit/c_simd.h — the C SIMD emitter's parts and what they share.
 *
 * c_simd.c checks the schedule fits the target and writes the folder; the
 * other files each write one kind of output: the API (c_simd_api.c), the
 * kernel calls (c_simd_kernels.c), the plain C loops (c_simd_loops.c), the
 * graph and bench files for --check (c_simd_bench.c) and the build files
 * (c_simd_build.c). */
#ifndef NNC_C_SIMD_H
#define NNC_C_SIMD_H

#include "emit.h"
#include "emit_util.h"

typedef struct cs_ctx {
  const nnc_emit_request *r;
  const nnc_schedule *s;
  const nnc_graph *g;
  char p[64];              /* C prefix of every API name: the model's name */
  char P[64];              /* the same in capitals, for macros */
  char (*sym)[64];         /* C names of the symbols */
  char (*in_name)[64];     /* fields of <p>_inputs, per graph input */
  char (*out_name)[64];    /* fields of <p>_outputs, per graph output */
  int *param_of;           /* per tensor: index into g->params, or -1 */
  int *input_of;           /* per tensor: index into g->inputs, or -1 */
  int *output_of;          /* per tensor: first index into g->outputs, or -1 */
  const char *isa;         /* "avx2", ... for comments and flags */
  char cflags[256];        /* the target's flags for the Makefile */
  char tile_defs[256];     /* -DNNC_GEMM_MR=... from the tuner */
} cs_ctx;

/* The C type of a tensor's elements: "float" or "int32_t". */
const char *cs_ctype(const nnc_graph *g, int t);
/* A C expression for the first element of tensor t during a run (inside a
 * kernel function, where `c` is the run context): "c->in->ids",
 * "(float *)(c->m->arena + 4096)", ... */
char *cs_ptr(const cs_ctx *x, int t, char *buf, size_t n);
/* What a reader needs to know of tensor t, for a comment: "h.0.ln_1.weight [96]". */
char *cs_note(const cs_ctx *x, int t, char *buf, size_t n);
/* Whether the C text s names the identifier id (not as part of a longer one). */
bool cs_names(const char *s, const char *id);
/* Appends `head {`, the lines pre (may be NULL), `const <p>_dims *d = <dims>;`
 * when body reads d->, then body and `}`; frees body. */
void cs_emit_function(const cs_ctx *x, nnc_sb *b, const char *head, const char *pre, const char *dims, nnc_sb *body);
/* `lhs = <tensor t>;` indented by ind, with the tensor's name and shape in a comment. */
void cs_assign(const cs_ctx *x, nnc_sb *b, int ind, const char *lhs, int t);
/* "(a) * (b)" without the factors that are 1 or the parentheses a single
 * product does not need. */
char *cs_mul(const char *a, const char *b, char *buf, size_t n);
/* Tensor t's element count as a C int64_t expression of d->SYM. */
char *cs_elems(const cs_ctx *x, int t, char *buf, size_t n);
/* Product of dims [from, to) of tensor t ("1" when empty). */
char *cs_dims_product(const cs_ctx *x, int t, int from, int to, char *buf, size_t n);
/* "gpt2.lua:31" for a location. */
char *cs_where(nnc_srcloc loc, char *buf, size_t n);
/* "layernorm + linear + gelu": the ops of kernel k. */
char *cs_kernel_ops(const cs_ctx *x, int k, char *buf, size_t n);
/* What kernel k computes: the label of its main node, else its output's name. */
const char *cs_kernel_name(const cs_ctx *x, int k);
/* A float literal for v ("0.5f", "INFINITY"); dbl: a double literal. */
char *cs_literal(double v, bool dbl, char *buf, size_t n);

/* Kernel functions: appends `static int k<i>(const run_ctx *c)` for every
 * kernel to b (GEMM, attention, rows, gather through the templates; the
 * rest through c_simd_loops.c), and the cost function. */
nnc_status cs_emit_kernels(const cs_ctx *x, nnc_sb *b, nnc_error *err);
/* The plain C loop of an elementwise, reduce, move, loss or non-last-axis
 * softmax kernel. */
nnc_status cs_emit_loop_kernel(const cs_ctx *x, int k, nnc_sb *b, nnc_error *err);
/* The workspace bytes kernel k needs at the maxima, as statements that
 * raise `need` (GEMM and attention only). */
void cs_emit_workspace(const cs_ctx *x, int k, nnc_sb *b);

nnc_status cs_write_header(const cs_ctx *x, const char *dir, nnc_error *err);
nnc_status cs_write_model(const cs_ctx *x, const char *dir, nnc_error *err);
nnc_status cs_write_graph(const cs_ctx *x, const char *dir, nnc_error *err);
nnc_status cs_write_bench(const cs_ctx *x, const char *dir, nnc_error *err);
nnc_status cs_write_build(const cs_ctx *x, const char *dir, nnc_error *err);

#endif
