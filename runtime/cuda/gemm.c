/* runtime/cuda/gemm.c — row-major matrix products through cuBLASLt, with
 * bias, activation and residual fused into the epilogue.
 *
 * cuBLASLt is column-major. A row-major [R,C] matrix with leading dimension
 * ld is the column-major [C,R] matrix with the same ld, its transpose; so
 * D = A.B (row-major) is computed as the column-major D^T = B^T . A^T, with
 * our B as cuBLASLt's first operand and our A as its second. The bias, one
 * value per column of D, is then one per row of D^T: what cuBLASLt's bias
 * epilogue broadcasts.
 *
 * Finding an algorithm (the heuristic query) costs far more than a small
 * product, so each distinct problem is planned once: descriptors, layouts
 * and the algorithm are cached, keyed by everything the heuristic looked
 * at, pointer alignments included (an algorithm chosen for 16-byte aligned
 * data may not run on 4-byte aligned data), and by g->algo, which of the
 * heuristic's results runs it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_cuda_impl.h"

/* A phased product takes up to 6P + 2 plans, 8P with a residual (P <= 8):
 * its bands' calls of one phase differ only by N (three widths at most) and
 * by the alignment of every other 64-column step. */
#define CACHE_PLANS 128

typedef struct plan {
  bool valid;
  long long key[NNRT_CUDA_GEMM_KEY_LEN];
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc, ld; /* cuBLASLt's A (our B), B (our A), C, D */
  cublasLtMatmulAlgo_t algo;
} plan;

struct nnrt_cuda_blas {
  cublasLtHandle_t lt;
  void *workspace;
  size_t workspace_bytes;
  plan plans[CACHE_PLANS];
  int next_evict; /* round robin once the cache is full */
  long long queries;
};

static const char *dtype_name(nnrt_cuda_dtype t) {
  switch (t) {
  case NNRT_DT_F32: return "f32";
  case NNRT_DT_BF16: return "bf16";
  case NNRT_DT_F16: return "f16";
  case NNRT_DT_E4M3: return "e4m3";
  }
  return "?";
}

static size_t dtype_size(nnrt_cuda_dtype t) { return t == NNRT_DT_F32 ? 4 : t == NNRT_DT_E4M3 ? 1 : 2; }

static cudaDataType_t cuda_type(nnrt_cuda_dtype t) {
  switch (t) {
  case NNRT_DT_BF16: return CUDA_R_16BF;
  case NNRT_DT_F16: return CUDA_R_16F;
  case NNRT_DT_E4M3: return CUDA_R_8F_E4M3;
  case NNRT_DT_F32: break;
  }
  return CUDA_R_32F;
}

static bool valid_dtype(int t) { return t == NNRT_DT_F32 || t == NNRT_DT_BF16 || t == NNRT_DT_F16 || t == NNRT_DT_E4M3; }

static const char *epilogue_name(int e) {
  switch (e) {
  case NNRT_EPI_NONE: return "none";
  case NNRT_EPI_RELU: return "relu";
  case NNRT_EPI_GELU_TANH: return "gelu_tanh";
  case NNRT_EPI_GELU_ERF: return "gelu_erf";
  case NNRT_EPI_GELU_TANH_AUX: return "gelu_tanh_aux";
  case NNRT_EPI_DGELU_TANH: return "dgelu_tanh";
  case NNRT_EPI_BGRAD_A: return "bgrad_a";
  case NNRT_EPI_BGRAD_B: return "bgrad_b";
  }
  return "?";
}

/* The name of a GEMM in messages, "GEMM 17x129x33 (MxNxK) batch 3
 * bf16->f32 ...", formatted only when a message needs it: a call that
 * succeeds formats nothing. */
typedef struct gemm_name {
  const nnrt_cuda_gemm *g;
  bool done;
  char s[320];
} gemm_name;

static const char *name_of(gemm_name *n) {
  const nnrt_cuda_gemm *g = n->g;
  if (!n->done) {
    char algo[32] = ""; /* which heuristic result, when not the first */
    if (g->algo) snprintf(algo, sizeof algo, " algo %d", g->algo);
    snprintf(n->s, sizeof n->s, "GEMM %dx%dx%d (MxNxK) batch %d %s->%s%s%s%s%s epilogue %s%s%s%s",
             g->M, g->N, g->K, g->batch, valid_dtype((int)g->ab) ? dtype_name(g->ab) : "?",
             valid_dtype((int)g->out) ? dtype_name(g->out) : "?", g->tf32 ? " tf32" : "",
             g->a_trans ? " A transposed" : "", g->b_trans ? " B transposed" : "",
             g->a_scale || g->b_scale ? " row/channel scales" : "", epilogue_name(g->epilogue),
             g->bias ? " +bias" : "", g->residual ? " +residual" : "", algo);
  }
  n->done = true;
  return n->s;
}

static bool no(char *reason, size_t size, const char *why) {
  if (reason && size) snprintf(reason, size, "%s", why);
  return false;
}

bool nnrt_cuda_gemm_supported(const nnrt_cuda_gemm *g, char *reason, size_t reason_size) {
  if (reason && reason_size) reason[0] = '\0';
  if (!g) return no(reason, reason_size, "the GEMM description is NULL");
  if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 0)
    return no(reason, reason_size, "a size (M, N, K or batch) is negative");
  if (!valid_dtype((int)g->ab) || !valid_dtype((int)g->out))
    return no(reason, reason_size, "the A/B or output type is not f32, bf16 or f16");
  if (g->epilogue < NNRT_EPI_NONE || g->epilogue > NNRT_EPI_BGRAD_B)
    return no(reason, reason_size, "the epilogue is not one of nnrt_cuda_epilogue");
  if (g->epilogue == NNRT_EPI_GELU_ERF)
    return no(reason, reason_size,
              "GELU in its erf form is not a cuBLASLt epilogue (only the tanh form is)");
  bool bgrad = g->epilogue == NNRT_EPI_BGRAD_A || g->epilogue == NNRT_EPI_BGRAD_B;
  bool act = g->epilogue == NNRT_EPI_RELU || g->epilogue == NNRT_EPI_GELU_TANH;
  if (g->residual && g->epilogue != NNRT_EPI_NONE && !bgrad && !(act && g->act_after_residual))
    return no(reason, reason_size,
              "an activation with a residual: cuBLASLt adds the residual before the activation (act_after_residual "
              "says that is wanted)");
  bool aux = g->epilogue == NNRT_EPI_GELU_TANH_AUX || g->epilogue == NNRT_EPI_DGELU_TANH;
  if (aux != (g->aux != NULL))
    return no(reason, reason_size, aux ? "the epilogue needs aux (the GELU's input), found NULL"
                                       : "aux is set but the epilogue does not use it");
  if (aux && (g->ldaux < g->N || g->ldaux % 8 != 0))
    return no(reason, reason_size, "aux's leading dimension must be >= N and a multiple of 8");
  if (aux && g->out != g->ab)
    return no(reason, reason_size, "aux epilogues write or read aux in the output type: the output must be "
              "the A/B type");
  if (g->epilogue == NNRT_EPI_DGELU_TANH && g->bias)
    return no(reason, reason_size, "DGELU multiplies the product by gelu'(aux): no bias");
  if (bgrad != (g->bgrad != NULL))
    return no(reason, reason_size, bgrad ? "the BGRAD epilogues need bgrad (the bias gradient they write), found NULL"
                                         : "bgrad is set but the epilogue is not BGRAD_A or BGRAD_B");
  if (bgrad && (g->bias || g->batch > 1))
    return no(reason, reason_size, "BGRAD_A and BGRAD_B take no bias and one batch item");
  /* measured (CUDA 12, H100/H200, every type pair): cuBLASLt plans them only
   * when the summed operand is stored with k along its rows */
  if (g->epilogue == NNRT_EPI_BGRAD_A && !g->a_trans)
    return no(reason, reason_size, "BGRAD_A needs A transposed (stored [K,M], as a weight gradient's dy^T)");
  if (g->epilogue == NNRT_EPI_BGRAD_B && g->b_trans)
    return no(reason, reason_size, "BGRAD_B needs B stored [K,N], not transposed (as a weight gradient's dy)");
  if (g->out == NNRT_DT_E4M3 && g->ab != NNRT_DT_E4M3)
    return no(reason, reason_size, "an e4m3 output needs e4m3 inputs: expected a bf16 or f32 output");
  if (g->out == NNRT_DT_E4M3 && !g->d_scale)
    return no(reason, reason_size, "an e4m3 output needs d_scale (what its values are multiplied by), found NULL");
  if (g->out == NNRT_DT_E4M3 && g->residual)
    return no(reason, reason_size, "an e4m3 output takes no residual (cuBLASLt's C would be bf16)");
  if (g->out != NNRT_DT_E4M3 && g->d_scale)
    return no(reason, reason_size, "d_scale is for an e4m3 output only");
  if (g->ab != NNRT_DT_E4M3 && (g->a_scale || g->b_scale))
    return no(reason, reason_size, "a_scale and b_scale are for e4m3 inputs only");
  if (g->ab == NNRT_DT_E4M3) {
    if (g->out != NNRT_DT_BF16 && g->out != NNRT_DT_F32 && g->out != NNRT_DT_E4M3)
      return no(reason, reason_size, "e4m3 inputs must give a bf16, f32 or e4m3 output");
    if (g->a_trans || !g->b_trans)
      return no(reason, reason_size, "e4m3 needs A [M,K] and B [N,K] (b_trans): cuBLASLt's FP8 kernels read both "
                "operands K-major");
    if (g->K % 16 != 0)
      return no(reason, reason_size, "e4m3 needs K a multiple of 16");
    if (g->batch > 1)
      return no(reason, reason_size, "e4m3 takes one batch item");
    if (g->epilogue != NNRT_EPI_NONE && g->epilogue != NNRT_EPI_RELU && g->epilogue != NNRT_EPI_GELU_TANH)
      return no(reason, reason_size, "e4m3 takes the epilogues none, relu and gelu_tanh only");
    if ((g->a_scale != NULL) != (g->b_scale != NULL))
      return no(reason, reason_size, "e4m3 takes both a_scale and b_scale or neither");
    if (g->tf32) return no(reason, reason_size, "tf32 applies to f32 inputs only");
  }
  if (g->ab == NNRT_DT_F32 && g->out != NNRT_DT_F32)
    return no(reason, reason_size, "f32 inputs must give an f32 output");
  if (g->ab != NNRT_DT_F32 && g->ab != NNRT_DT_E4M3 && g->out != g->ab && g->out != NNRT_DT_F32)
    return no(reason, reason_size, "bf16/f16 inputs must give their own type or f32");
  if (g->tf32 && g->ab != NNRT_DT_F32)
    return no(reason, reason_size, "tf32 applies to f32 inputs only");
  if (g->K == 0 && g->M > 0 && g->N > 0 && g->batch > 0)
    return no(reason, reason_size, "K = 0 (an empty inner dimension)");
  if (g->row_phases && (g->batch > 1 || g->a_trans || !g->b_trans))
    return no(reason, reason_size, "row_phases needs batch 1, A [M,K] and B [N,K] (b_trans): a phase's rows are "
              "every P-th row of A, its columns start at a row of B");
  if (g->row_phases && (aux || bgrad || g->a_scale))
    return no(reason, reason_size, "row_phases takes no aux, bgrad or scale vectors (a phase's rows of a_scale would "
              "be P apart)");
  if (g->row_phases && g->ab == NNRT_DT_E4M3)
    return no(reason, reason_size, "row_phases takes no e4m3 inputs (cuBLASLt's FP8 kernels refuse its narrow calls' "
              "N, not a multiple of 16)");
  return true;
}

/* The largest power of two (up to 256) dividing the address: what the
 * heuristic is told, and part of the key. */
static long long align_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (a == 0) return 256;
  long long al = 1;
  while (al < 256 && (a & (uintptr_t)al) == 0) al *= 2;
  return al;
}

static void plan_release(plan *p) {
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
  memset(p, 0, sizeof *p);
}

nnrt_status nnrt_cuda_blas_create(size_t workspace_bytes, nnrt_cuda_blas **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_blas_create: out is NULL");
  *out = NULL;
  nnrt_status st = nnrt_cuda_need_device("creating a cuBLASLt handle", err);
  if (st != NNRT_OK) return st;
  nnrt_cuda_blas *h = calloc(1, sizeof *h);
  if (!h) return nnrt_errorf(err, NNRT_E_NOMEM, "out of host memory creating a cuBLASLt handle");
  h->workspace_bytes = workspace_bytes ? workspace_bytes : NNRT_CUDA_BLAS_DEFAULT_WORKSPACE;
  char what[96];
  snprintf(what, sizeof what, "allocating a cuBLASLt workspace of %zu bytes", h->workspace_bytes);
  if ((st = nnrt_cuda_blas_check(cublasLtCreate(&h->lt), "creating a cuBLASLt handle", err)) !=
          NNRT_OK ||
      (st = nnrt_cuda_check(cudaMalloc(&h->workspace, h->workspace_bytes), what, err)) !=
          NNRT_OK) {
    nnrt_cuda_blas_destroy(h);
    return st;
  }
  *out = h;
  return NNRT_OK;
}

void nnrt_cuda_blas_destroy(nnrt_cuda_blas *h) {
  if (!h) return;
  for (int i = 0; i < CACHE_PLANS; i++) plan_release(&h->plans[i]);
  if (h->workspace) cudaFree(h->workspace);
  if (h->lt) cublasLtDestroy(h->lt);
  free(h);
}

long long nnrt_cuda_blas_heuristic_queries(const nnrt_cuda_blas *h) { return h ? h->queries : 0; }

/* The bias's type (and C's): the output's, bf16 for an e4m3 output (the
 * types cuBLASLt's FP8 kernels pair with e4m3 D). */
static nnrt_cuda_dtype bias_type(const nnrt_cuda_gemm *g) { return g->out == NNRT_DT_E4M3 ? NNRT_DT_BF16 : g->out; }

/* Argument checks beyond what nnrt_cuda_gemm_supported covers; g has
 * M, N, K, batch > 0. */
static nnrt_status check_args(const nnrt_cuda_gemm *g, gemm_name *d, nnrt_error *err) {
  if (!g->A || !g->B || !g->D)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: %s is NULL", name_of(d), !g->A ? "A" : !g->B ? "B" : "D");
  long long b_cols = g->b_trans ? g->K : g->N;
  if (g->lda < (g->a_trans ? g->M : g->K))
    return nnrt_errorf(err, NNRT_E_ARG, "%s: lda must be at least %s = %d, found %lld", name_of(d),
                       g->a_trans ? "M" : "K", g->a_trans ? g->M : g->K, g->lda);
  if (g->ldb < b_cols)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: ldb must be at least %s = %lld, found %lld", name_of(d),
                       g->b_trans ? "K" : "N", b_cols, g->ldb);
  if (g->ab == NNRT_DT_E4M3 && (g->lda % 16 != 0 || g->ldb % 16 != 0))
    return nnrt_errorf(err, NNRT_E_ARG, "%s: e4m3 needs lda and ldb multiples of 16, found %lld and %lld", name_of(d),
                       g->lda, g->ldb);
  if ((uintptr_t)g->a_scale % 4 != 0 || (uintptr_t)g->b_scale % 4 != 0)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: a_scale and b_scale must be aligned to their 4-byte floats", name_of(d));
  if (g->ldd < g->N)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: ldd must be at least N = %d, found %lld", name_of(d), g->N,
                       g->ldd);
  if (g->batch > 1) {
    long long d_span = (long long)(g->M - 1) * g->ldd + g->N;
    if (g->stride_a < 0 || g->stride_b < 0 || g->stride_r < 0)
      return nnrt_errorf(err, NNRT_E_ARG, "%s: stride_%s is negative (%lld)", name_of(d),
                         g->stride_a < 0 ? "a" : g->stride_b < 0 ? "b" : "r",
                         g->stride_a < 0 ? g->stride_a : g->stride_b < 0 ? g->stride_b
                                                                         : g->stride_r);
    if (g->stride_d < d_span)
      return nnrt_errorf(err, NNRT_E_ARG,
                         "%s: stride_d must be at least (M-1)*ldd + N = %lld so that output "
                         "batches do not overlap, found %lld", name_of(d), d_span, g->stride_d);
    if (g->aux && g->stride_aux < (long long)(g->M - 1) * g->ldaux + g->N)
      return nnrt_errorf(err, NNRT_E_ARG, "%s: stride_aux must be at least (M-1)*ldaux + N = %lld, found %lld",
                         name_of(d), (long long)(g->M - 1) * g->ldaux + g->N, g->stride_aux);
    if (g->residual == g->D && g->stride_r != g->stride_d)
      return nnrt_errorf(err, NNRT_E_ARG,
                         "%s: the residual is D itself, so stride_r must equal stride_d = %lld, "
                         "found %lld", name_of(d), g->stride_d, g->stride_r);
  }
  if (g->bgrad && g->alpha != 1.0f)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: BGRAD sums its operand unscaled, so alpha must be 1, found %g", name_of(d),
                       (double)g->alpha);
  size_t ea = dtype_size(g->ab), eo = dtype_size(g->out), ebias = dtype_size(bias_type(g));
  const struct { const void *p; size_t size; const char *name; } ptrs[] = {
      {g->A, ea, "A"}, {g->B, ea, "B"}, {g->D, eo, "D"}, {g->bias, ebias, "bias"},
      {g->residual, eo, "residual"}, {g->bgrad, eo, "bgrad"}};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    if ((uintptr_t)ptrs[i].p % ptrs[i].size != 0)
      return nnrt_errorf(err, NNRT_E_ARG, "%s: %s (%p) is not aligned to its %zu-byte elements",
                         name_of(d), ptrs[i].name, ptrs[i].p, ptrs[i].size);
  return NNRT_OK;
}

void nnrt_cuda_gemm_key(const nnrt_cuda_gemm *g, long long *k) {
  bool batched = g->batch > 1;
  const void *c = g->residual ? g->residual : g->D;
  long long v[NNRT_CUDA_GEMM_KEY_LEN] = {g->M, g->N, g->K, g->batch, g->ab, g->out, g->tf32, g->b_trans,
                          g->bias != NULL, g->residual != NULL, g->epilogue, g->lda, g->ldb, g->ldd,
                          batched ? g->stride_a : 0, batched ? g->stride_b : 0,
                          batched && g->residual ? g->stride_r : 0, batched ? g->stride_d : 0,
                          align_of(g->A), align_of(g->B), align_of(c), align_of(g->D),
                          align_of(g->bias), g->algo, g->a_trans, g->aux != NULL, g->ldaux,
                          align_of(g->aux), align_of(g->bgrad), g->act_after_residual, g->a_scale != NULL,
                          g->b_scale != NULL};
  memcpy(k, v, sizeof v);
}

static cublasLtEpilogue_t lt_epilogue(const nnrt_cuda_gemm *g) {
  bool b = g->bias != NULL;
  switch (g->epilogue) {
  case NNRT_EPI_RELU: return b ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  case NNRT_EPI_GELU_TANH: return b ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  case NNRT_EPI_GELU_TANH_AUX: return b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  case NNRT_EPI_DGELU_TANH: return CUBLASLT_EPILOGUE_DGELU;
  /* our A is cuBLASLt's B, summed over k into one value per column of its D
   * (our rows); our B is its A, summed into one per row of its D */
  case NNRT_EPI_BGRAD_A: return CUBLASLT_EPILOGUE_BGRADB;
  case NNRT_EPI_BGRAD_B: return CUBLASLT_EPILOGUE_BGRADA;
  default: return b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

static cublasStatus_t make_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, long long rows,
                                  long long cols, long long ld, int batch, long long stride) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
  if (s != CUBLAS_STATUS_SUCCESS || batch <= 1) return s;
  int32_t count = batch;
  int64_t off = stride;
  s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off,
                                          sizeof off);
}

#define LT_TRY(call)                                                                     \
  do {                                                                                   \
    if ((s = (call)) != CUBLAS_STATUS_SUCCESS) goto fail;                                \
  } while (0)

/* Fills p for g: descriptors, layouts, and one heuristic query. */
static nnrt_status plan_build(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, plan *p, gemm_name *d,
                              nnrt_error *err) {
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = NULL;
  cublasComputeType_t compute = g->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t tab = cuda_type(g->ab), tout = cuda_type(g->out);
  bool batched = g->batch > 1;
  LT_TRY(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  cublasOperation_t ta = g->b_trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = lt_epilogue(g);
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (g->ab == NNRT_DT_E4M3) {
    /* inference: Hopper's FP8 fast accumulation (TransformerEngine's choice
     * for forward GEMMs) over K of a few thousand */
    int8_t fast = 1;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  }
  if (g->a_scale) {
    /* our B is cuBLASLt's A: its scales run along cuBLASLt's rows (our N);
     * our A is its B, scaled along its columns (our M) */
    int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->b_scale,
                                          sizeof g->b_scale));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->a_scale,
                                          sizeof g->a_scale));
  }
  if (g->d_scale)
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &g->d_scale,
                                          sizeof g->d_scale));
  /* BGRAD's output rides the bias pointer */
  const void *bias = g->bgrad ? g->bgrad : g->bias;
  if (bias) {
    int32_t bt = (int32_t)cuda_type(bias_type(g));
    int64_t bstride = 0; /* one bias for every batch item */
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                          sizeof bt));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                          &bstride, sizeof bstride));
    /* The heuristic reads the bias pointer's alignment. */
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  if (g->aux) {
    int64_t ld = g->ldaux, stride = batched ? g->stride_aux : 0;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                          sizeof g->aux));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride,
                                          sizeof stride));
  }
  /* cuBLASLt's A is our B^T: [N,K] column-major, or (b_trans) its transpose
   * stored as [K,N]. Its B is our A^T, [K,M], or (a_trans) its transpose
   * stored as [M,K]. C and D are D^T, [N,M]. */
  if (g->b_trans)
    LT_TRY(make_layout(&p->la, tab, g->K, g->N, g->ldb, g->batch, batched ? g->stride_b : 0));
  else
    LT_TRY(make_layout(&p->la, tab, g->N, g->K, g->ldb, g->batch, batched ? g->stride_b : 0));
  if (g->a_trans)
    LT_TRY(make_layout(&p->lb, tab, g->M, g->K, g->lda, g->batch, batched ? g->stride_a : 0));
  else
    LT_TRY(make_layout(&p->lb, tab, g->K, g->M, g->lda, g->batch, batched ? g->stride_a : 0));
  LT_TRY(make_layout(&p->lc, cuda_type(bias_type(g)), g->N, g->M, g->ldd, g->batch,
                     batched ? (g->residual ? g->stride_r : g->stride_d) : 0));
  LT_TRY(make_layout(&p->ld, tout, g->N, g->M, g->ldd, g->batch, batched ? g->stride_d : 0));

  LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = h->workspace_bytes;
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws));
  const void *c = g->residual ? g->residual : g->D;
  uint32_t al[4] = {(uint32_t)align_of(g->B), (uint32_t)align_of(g->A), (uint32_t)align_of(c),
                    (uint32_t)align_of(g->D)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++)
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]));

  /* algo 0 asks for one result, as the runtime always has; a later index
   * asks for the heuristic's whole list and takes that entry. */
  cublasLtMatmulHeuristicResult_t results[NNRT_CUDA_GEMM_ALGOS];
  int found = 0, want = g->algo ? NNRT_CUDA_GEMM_ALGOS : 1;
  h->queries++;
  LT_TRY(cublasLtMatmulAlgoGetHeuristic(h->lt, p->desc, p->la, p->lb, p->lc, p->ld, pref, want,
                                        results, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found < 1 || results[0].state != CUBLAS_STATUS_SUCCESS) {
    plan_release(p);
    return nnrt_errorf(err, NNRT_E_ARG, "unsupported: %s: cuBLASLt has no algorithm for it", name_of(d));
  }
  if (g->algo >= found || results[g->algo].state != CUBLAS_STATUS_SUCCESS) {
    plan_release(p);
    return nnrt_errorf(err, NNRT_E_ARG,
                       "unsupported: %s: expected algorithm index < %d (cuBLASLt's heuristic returned %d "
                       "for M=%d N=%d K=%d), found %d", name_of(d), found, found, g->M, g->N, g->K, g->algo);
  }
  p->algo = results[g->algo].algo;
  p->valid = true;
  return NNRT_OK;

fail:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  plan_release(p);
  {
    char what[600];
    snprintf(what, sizeof what, "planning %s", name_of(d));
    return nnrt_cuda_blas_check(s, what, err);
  }
}

/* The cached plan for g, planning it on a miss. */
static nnrt_status plan_for(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, gemm_name *d, plan **out,
                            nnrt_error *err) {
  long long key[NNRT_CUDA_GEMM_KEY_LEN];
  nnrt_cuda_gemm_key(g, key);
  plan *slot = NULL;
  for (int i = 0; i < CACHE_PLANS; i++) {
    plan *p = &h->plans[i];
    if (p->valid && memcmp(p->key, key, sizeof key) == 0) {
      *out = p;
      return NNRT_OK;
    }
    if (!p->valid && !slot) slot = p;
  }
  if (!slot) {
    slot = &h->plans[h->next_evict];
    h->next_evict = (h->next_evict + 1) % CACHE_PLANS;
    plan_release(slot);
  }
  nnrt_status st = plan_build(h, g, slot, d, err);
  if (st != NNRT_OK) return st;
  memcpy(slot->key, key, sizeof key);
  *out = slot;
  return NNRT_OK;
}

/* One cuBLASLt call of a checked, supported g (row_phases handled). */
static nnrt_status run_one(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, cudaStream_t s, gemm_name *d,
                           nnrt_error *err);

static size_t gcd_of(size_t a, size_t b) {
  while (b) {
    size_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Columns [from, to) of q's rows (q's D, residual, bias at column 0), to
 * fn; nothing when empty. */
static nnrt_status part_columns(const nnrt_cuda_gemm *q, int from, int to, nnrt_cuda_gemm_part_fn fn, void *ctx) {
  if (to <= from) return NNRT_OK;
  size_t ea = dtype_size(q->ab), eo = dtype_size(q->out), eb = dtype_size(bias_type(q));
  nnrt_cuda_gemm p = *q;
  p.N = to - from;
  p.B = (const char *)q->B + (size_t)from * (size_t)q->ldb * ea;
  p.D = (char *)q->D + (size_t)from * eo;
  if (q->residual) p.residual = (const char *)q->residual + (size_t)from * eo;
  if (q->bias) p.bias = (const char *)q->bias + (size_t)from * eb;
  return fn(ctx, &p);
}

/* row_phases (nnrt_cuda.h): phase r's rows start (D + r * ldd) mod 16
 * bytes off a boundary; c of their columns reach the next one. cuBLASLt
 * is as slow on aligned rows whose N is odd (GPT-2's head, N 50257 at
 * ldd 50304: 6.7 ms, H200) as on unaligned ones, so the wide calls take
 * whole 64-column tiles. */
nnrt_status nnrt_cuda_gemm_phases(const nnrt_cuda_gemm *g, nnrt_cuda_gemm_part_fn fn, void *ctx) {
  size_t ea = dtype_size(g->ab), eo = dtype_size(g->out);
  size_t row = (size_t)g->ldd * eo;
  int P = (int)(16 / gcd_of(row % 16, 16)); /* <= 8: the output is 2 or 4 bytes (e4m3 inputs refused) */
  int phases = g->M < P ? g->M : P;
  /* phase r: rows m = r (mod P) over all columns; its wide calls take
   * tiles[r] 64-column tiles from column c[r], aligned rows of whole tiles */
  nnrt_cuda_gemm q[8];
  int c[8];
  long long tiles[8], most = 0;
  for (int r = 0; r < phases; r++) {
    size_t off = (size_t)r * row, mis = ((uintptr_t)g->D + off) % 16;
    c[r] = mis ? (int)((16 - mis) / eo) : 0;
    if (c[r] > g->N) c[r] = g->N;
    tiles[r] = (g->N - c[r]) / 64;
    if (tiles[r] > most) most = tiles[r];
    q[r] = *g;
    q[r].row_phases = false;
    q[r].M = (int)(((long long)g->M - r + P - 1) / P);
    q[r].A = (const char *)g->A + (size_t)r * (size_t)g->lda * ea;
    q[r].lda = g->lda * P;
    q[r].ldd = g->ldd * P;
    q[r].D = (char *)g->D + off;
    if (g->residual) q[r].residual = (const char *)g->residual + off;
  }
  /* Bands of tiles, band-major, so that the phases after the first find the
   * band's rows of B in L2: as few as the budget allows (at least a tile
   * each), their sizes differing by one tile at most. */
  size_t budget = g->phase_band_bytes ? g->phase_band_bytes : NNRT_CUDA_PHASE_BAND_BYTES;
  long long per = (long long)(budget / ((size_t)64 * (size_t)g->K * ea));
  if (per < 1) per = 1;
  long long bands = (most + per - 1) / per;
  nnrt_status st = NNRT_OK;
  for (long long b = 0; b < bands && st == NNRT_OK; b++) {
    long long t0 = most * b / bands, t1 = most * (b + 1) / bands;
    for (int r = 0; r < phases && st == NNRT_OK; r++) {
      long long lo = t0 < tiles[r] ? t0 : tiles[r], hi = t1 < tiles[r] ? t1 : tiles[r];
      st = part_columns(&q[r], c[r] + (int)(64 * lo), c[r] + (int)(64 * hi), fn, ctx);
    }
  }
  /* A residual must be added once: the narrow columns after and before a
   * phase's wide ones go per phase. Without one, the narrow columns of
   * every phase go in two calls over all rows, [0, the widest lead) and
   * [the first tail, N): a column a phase's wide call has written is
   * written again, the same product rounded by another kernel (bf16 rows: 2
   * calls instead of 15). */
  if (g->residual) {
    for (int r = 0; r < phases && st == NNRT_OK; r++) {
      st = part_columns(&q[r], c[r] + (int)(64 * tiles[r]), g->N, fn, ctx);
      if (st == NNRT_OK) st = part_columns(&q[r], 0, c[r], fn, ctx);
    }
    return st;
  }
  int lead = 0, tail = g->N;
  for (int r = 0; r < phases; r++) {
    int wide = c[r] + (int)(64 * tiles[r]);
    lead = c[r] > lead ? c[r] : lead;
    tail = wide < tail ? wide : tail;
  }
  nnrt_cuda_gemm all = *g;
  all.row_phases = false;
  if (st != NNRT_OK) return st;
  if (tail <= lead) return part_columns(&all, 0, g->N, fn, ctx); /* they meet */
  st = part_columns(&all, tail, g->N, fn, ctx);
  return st == NNRT_OK ? part_columns(&all, 0, lead, fn, ctx) : st;
}

typedef struct run_ctx {
  nnrt_cuda_blas *h;
  cudaStream_t s;
  nnrt_error *err;
} run_ctx;

static nnrt_status run_part(void *ctx, const nnrt_cuda_gemm *part) {
  run_ctx *x = ctx;
  gemm_name n = {.g = part};
  return run_one(x->h, part, x->s, &n, x->err);
}

bool nnrt_cuda_gemm_unsupported(nnrt_status st, const nnrt_error *e) {
  return st == NNRT_E_ARG && e &&
         (strncmp(e->msg, "unsupported", 11) == 0 || strstr(e->msg, "CUBLAS_STATUS_NOT_SUPPORTED") != NULL);
}

nnrt_status nnrt_cuda_gemm_run(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, cudaStream_t s,
                               nnrt_error *err) {
  if (!g) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_gemm_run: gemm is NULL");
  gemm_name name = {.g = g}, *d = &name;
  if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 0)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: sizes must not be negative", name_of(d));
  if (g->algo < 0 || g->algo >= NNRT_CUDA_GEMM_ALGOS)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: algo must be in [0, %d) (an index into cuBLASLt's heuristic results), "
                       "found %d", name_of(d), NNRT_CUDA_GEMM_ALGOS, g->algo);
  if (!h) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_gemm_run: handle is NULL");
  if (g->M == 0 || g->N == 0 || g->batch == 0) return NNRT_OK;
  char why[160];
  if (!nnrt_cuda_gemm_supported(g, why, sizeof why))
    return nnrt_errorf(err, NNRT_E_ARG, "unsupported: %s: %s", name_of(d), why);
  nnrt_status st = check_args(g, d, err);
  if (st != NNRT_OK) return st;
  if (g->row_phases) {
    run_ctx x = {h, s, err};
    return nnrt_cuda_gemm_phases(g, run_part, &x);
  }
  return run_one(h, g, s, d, err);
}

static nnrt_status run_one(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, cudaStream_t s, gemm_name *d,
                           nnrt_error *err) {
  plan *p = NULL;
  nnrt_status st = plan_for(h, g, d, &p, err);
  if (st != NNRT_OK) return st;
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  const void *bias = g->bgrad ? g->bgrad : g->bias;
  if (bias) bs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (g->aux && bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                        sizeof g->aux);
  if (g->a_scale && bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->b_scale, sizeof g->b_scale);
  if (g->a_scale && bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->a_scale, sizeof g->a_scale);
  if (g->d_scale && bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &g->d_scale, sizeof g->d_scale);
  float beta = g->residual ? 1.0f : 0.0f;
  /* an e4m3 D has a bf16 C, never read (beta 0, no residual): none given, as cuBLASLt's FP8 sample does */
  const void *c = g->residual ? g->residual : g->out == NNRT_DT_E4M3 ? NULL : g->D;
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasLtMatmul(h->lt, p->desc, &g->alpha, g->B, p->la, g->A, p->lb, &beta, c, p->lc, g->D,
                        p->ld, &p->algo, h->workspace, h->workspace_bytes, s);
  if (bs == CUBLAS_STATUS_SUCCESS) return NNRT_OK;
  char what[360];
  snprintf(what, sizeof what, "running %s", name_of(d));
  return nnrt_cuda_blas_check(bs, what, err);
}
