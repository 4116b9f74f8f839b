/* templates/c_simd/nnc_simd.h — the kernels of the C SIMD target.
 *
 * This folder is copied next to the generated model sources and built with
 * nothing but a C11 compiler and libm, so it depends on no other nnc header.
 * All tensors are f32, row-major, with explicit leading dimensions (in
 * elements, >= the row length). Every kernel validates its arguments and
 * returns a status; on failure it fills *err (when not NULL) with a message
 * saying what was expected and what was found, and writes nothing.
 *
 * Parallelism is borrowed, never owned: a kernel splits its work into tasks
 * and hands them to the caller's parallel_for (libnnrt's thread pool has the
 * right signature); with a NULL parallel_for it runs them in order itself.
 * A task is told which thread runs it so that it can use that thread's slice
 * of the caller's workspace. */
#ifndef NNC_SIMD_KERNELS_H
#define NNC_SIMD_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum nnc_simd_status {
  NNC_SIMD_OK = 0,
  NNC_SIMD_E_ARG = 1 /* a NULL, negative, too small or inconsistent argument */
} nnc_simd_status;

typedef struct nnc_simd_error {
  nnc_simd_status code;
  char msg[256];
} nnc_simd_error;

typedef void (*nnc_simd_task_fn)(void *ctx, int task, int thread);
/* Runs task(ctx, t, thread) once for every t in [0, ntasks) and returns
 * when all are done; thread is in [0, nthreads) and no two tasks running
 * at the same time share it. */
typedef void (*nnc_simd_parallel_for_fn)(void *pool, int ntasks,
                                         nnc_simd_task_fn task, void *ctx);

typedef struct nnc_simd_par {
  nnc_simd_parallel_for_fn parallel_for; /* NULL: run serially */
  void *pool;
  int nthreads;                          /* threads parallel_for may use */
} nnc_simd_par;

typedef enum nnc_simd_act {
  NNC_SIMD_ACT_NONE,
  NNC_SIMD_ACT_RELU,
  NNC_SIMD_ACT_GELU_ERF,   /* 0.5 x (1 + erf(x / sqrt 2)) */
  NNC_SIMD_ACT_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  NNC_SIMD_ACT_SILU,       /* x sigmoid(x) */
  NNC_SIMD_ACT_SIGMOID,
  NNC_SIMD_ACT_TANH,
  NNC_SIMD_ACT_COUNT
} nnc_simd_act;

typedef enum nnc_simd_prologue {
  NNC_SIMD_PRO_NONE,
  NNC_SIMD_PRO_LAYERNORM,  /* (a - mean) / sqrt(var + eps) * gamma + beta (beta may be NULL) */
  NNC_SIMD_PRO_RMSNORM,    /* a / sqrt(mean(a^2) + eps) * gamma (beta unused) */
  NNC_SIMD_PRO_COUNT
} nnc_simd_prologue;

/* Name of the ISA the kernels were compiled for: "avx512", "avx2", "neon"
 * or "generic". */
const char *nnc_simd_isa(void);

/* ------------------------------------------------------------------ GEMM */

/* C[M,N] = act(alpha * P(A) . B + bias) + residual, batch times (times the
 * residual instead when residual_mul: SwiGLU's up projection by silu(gate)).
 * A is [M,K] (lda), or [K,M] when a_trans (lda >= M; no prologue: the
 * statistics are over rows of A). B is [K,N] (ldb), or [N,K] when b_trans (nn.Linear
 * weights). bias [N] and residual [M,N] (ldr) are optional (NULL). P is the
 * row prologue, with statistics over each whole row of A. Batch item i uses
 * A + i*stride_a, B + i*stride_b, C + i*stride_c, residual + i*stride_r
 * (a stride of 0 broadcasts); bias is shared. residual must not overlap C.
 * K == 0 is allowed: the product is zero. In a training step aux [M,N] (ldx,
 * aux + i*stride_x) holds an activation's input: with NNC_SIMD_AUX_SAVE it
 * is written, aux = alpha * P(A) . B + bias and C = act(aux) (no residual);
 * with NNC_SIMD_AUX_ACT_GRAD it is read, C = act'(aux) * alpha * P(A) . B
 * (the product an activation's gradient multiplies; no bias, no residual). */
typedef enum nnc_simd_aux {
  NNC_SIMD_AUX_NONE,
  NNC_SIMD_AUX_SAVE,
  NNC_SIMD_AUX_ACT_GRAD,
  NNC_SIMD_AUX_COUNT
} nnc_simd_aux;

/* The windows of an NHWC image [images, H, W, C] that an implicit
 * convolution's GEMM reads as its A, never stored (nnc_simd_gemm_args.win;
 * KH 0: A is a matrix). Row m of A is the window at position (image, oh,
 * ow) = (m / (OH*OW), m / OW % OH, m % OW); its column k is tap (i, j) =
 * (k / C / KW, k / C % KW), channel k % C, taps outer: the pixel
 * (oh*SH - PH + i*DH, ow*SW - PW + j*DW) of the image, 0 outside it. */
typedef struct nnc_simd_windows {
  int H, W, C;
  int OH, OW;
  int KH, KW, SH, SW, PH, PW, DH, DW;
} nnc_simd_windows;

typedef struct nnc_simd_gemm_args {
  int M, N, K;
  int batch;                      /* >= 1 */
  const float *A;
  ptrdiff_t lda, stride_a;
  int a_trans;
  const float *B;
  ptrdiff_t ldb, stride_b;
  int b_trans;
  float *C;
  ptrdiff_t ldc, stride_c;
  float alpha;
  const float *bias;
  nnc_simd_act act;
  const float *residual;
  ptrdiff_t ldr, stride_r;
  int residual_mul;               /* C = act(...) * residual */
  nnc_simd_prologue prologue;
  const float *gamma, *beta;      /* [K] */
  float eps;
  nnc_simd_aux aux_mode;
  float *aux;                     /* written (SAVE) or read (ACT_GRAD) */
  ptrdiff_t ldx, stride_x;
  /* B already in the micro-kernel's order (nnc_simd_gemm_pack_b), read
   * instead of B: a caller that multiplies by the same B many times (a
   * scan's W_hh at every step) packs it once. Batch 1 only. */
  const float *b_packed;
  /* B held as int8 with a scale per column (nnc_simd_q8_pack), read
   * instead of B: one byte a weight. Batch 1, or stride_b 0 (every item
   * multiplies by the same weight); not with b_packed. */
  const void *b_q8;
  /* W8A8 (nnc_simd_w8a8_pack): B held as int8 with a scale per column, read
   * instead of B, and each row of A quantized to int8 (scale: its absmax /
   * 127) as it is packed; the products are summed in int32. Same batch rule
   * as b_q8; not with b_packed or b_q8. */
  const void *b_w8a8;
  /* B held as int4 with a scale per group of NNC_SIMD_Q4_GROUP k of a
   * column (nnc_simd_q4_pack), read instead of B: half a byte a weight.
   * Same batch rule as b_q8; not with b_packed, b_q8 or b_w8a8. */
  const void *b_q4;
  /* A read in place by the micro-kernel, row by row, instead of packed
   * first, where rows of A all of whose K stay in L1 are copied for nothing
   * (a scan's step: its rows of [h | x_t], every step): taken when one
   * task's rows span all of N in one panel (no A row is used twice across
   * tasks), without a prologue, a_trans or an int8/int4 B; a last block of
   * fewer than MR rows is still packed. */
  int a_inplace;
  /* A is the image these windows read (K = KH*KW*C, M a multiple of
   * OH*OW): a convolution without its im2col matrix. A block of MR rows
   * whose windows lie in one output row and inside the image is read in
   * place, tap by tap; others are gathered into a packed panel. Batch 1,
   * without a prologue, a_trans, an int8/int4/W8A8 B or a_inplace. */
  nnc_simd_windows win;
  /* C is max-pooled before it is stored (KH 0: not): the GEMM's result is
   * the NHWC image [images, H, W, C = N] (M = images*H*W) whose pool
   * windows, KH x KW with stride KH x KW (no padding, dilation 1, H and W
   * multiples of them), each give one pixel of C [images, OH, OW, N] (ldc
   * N): conv, relu, max pool in one pass (a NaN wins, the last one in tap
   * order, as the float64 reference has it). Each task computes whole rows
   * of windows into its workspace, then pools them. Batch 1, without a
   * residual or aux. */
  nnc_simd_windows pool;
} nnc_simd_gemm_args;

/* Pooling and depthwise convolution over the windows of an NHWC image x
 * [images, H, W, C] (win; the im2col never stored), into y [images, OH, OW,
 * C]: the max over each window's taps (padding is -inf; a NaN wins, the last
 * one, as the float64 reference has it), the mean (padding counts as zeros,
 * KH*KW taps always), or the sum of the taps times w [KH*KW, C]. */
typedef enum nnc_simd_pool_op { NNC_SIMD_POOL_MAX, NNC_SIMD_POOL_MEAN, NNC_SIMD_POOL_DEPTHWISE } nnc_simd_pool_op;
typedef struct nnc_simd_pool_args {
  nnc_simd_pool_op op;
  int images;
  nnc_simd_windows win;
  const float *x, *w;
  float *y;
} nnc_simd_pool_args;
nnc_simd_status nnc_simd_pool(const nnc_simd_pool_args *a, const nnc_simd_par *par, nnc_simd_error *err);

/* Bytes of workspace nnc_simd_gemm needs for these shapes and that many
 * threads (any alignment will do: the kernel aligns it itself). */
size_t nnc_simd_gemm_workspace_bytes(const nnc_simd_gemm_args *g, int nthreads);

nnc_simd_status nnc_simd_gemm(const nnc_simd_gemm_args *g, const nnc_simd_par *par,
                              void *workspace, size_t workspace_bytes,
                              nnc_simd_error *err);

/* Floats of g's B (B, ldb, b_trans, N, K) packed for b_packed, and the
 * packing itself into dst (64-byte aligned) on par's threads (NULL: the
 * caller's); batch item 0 only. */
size_t nnc_simd_gemm_packed_b_floats(const nnc_simd_gemm_args *g);
void nnc_simd_gemm_pack_b(const nnc_simd_gemm_args *g, const nnc_simd_par *par, float *dst);
/* Rows [k0, k0 + kc) of g's packed B (all N columns, laid out as
 * nnc_simd_gemm_pack_b lays out all of K) from part: [N, kc] when
 * g->b_trans, else [kc, N], of leading dimension ldp. A B joined along K
 * from parts (an LSTM step's [W_hh | W_ih]^T) is packed part by part. */
void nnc_simd_gemm_pack_b_part(const nnc_simd_gemm_args *g, const float *part, ptrdiff_t ldp, int k0, int kc,
                               float *dst);

/* Weight-only int8 (per output channel, symmetric): column n of B [K,N]
 * (row n of a b_trans B [N,K]) is held as q[k,n] = round(B[k,n] / s[n]) in
 * [-127, 127] with s[n] = max over k of |B[k,n]| / 127 (0 for a column of
 * zeros, then q = 0), and the GEMM multiplies by q[k,n] * s[n]. The bytes
 * are in the micro-kernel's order, so a GEMM reading them packs nothing.
 * nnc_simd_q8_bytes: their size for N columns of depth K; nnc_simd_q8_pack
 * writes them to dst (any alignment; 64 bytes is best); nnc_simd_q8_value
 * is the f32 value q[k,n] * s[n] the GEMM multiplies by (for references). */
size_t nnc_simd_q8_bytes(int N, int K);
void nnc_simd_q8_pack(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst);
float nnc_simd_q8_value(const void *q8, int N, int K, int k, int n);
/* A quantized checkpoint's form of those values (support/nnc_weights_quant.h):
 * q as int8 in the weight's own layout ([N,K] when b_trans, else [K,N]) and
 * the N scales; _export writes it from the held form, _import the held form
 * from it (the round trip is exact). The same for w8a8's. */
void nnc_simd_q8_export(const void *q8, int b_trans, int N, int K, int8_t *values, float *scales);
void nnc_simd_q8_import(const int8_t *values, const float *scales, int b_trans, int N, int K, void *dst);

/* W8A8 (gemm_w8a8.c): B's column n held as q[k,n] = round(B[k,n] / s[n]) in
 * [-31, 31], s[n] = max over k of |B[k,n]| / 31 (6 bits: two of AVX2's u8 x
 * s8 pair sums added then cannot saturate int16), with the columns' sums of q, in
 * the int8 micro-kernel's order. A row x of A is held as round(x / a) in
 * [-127, 127], a = max|x| / 127: nnc_simd_a8_quantize writes those n values
 * to q and returns a (0 for a row of zeros). C = (sum_k qa qb) * a * s[n],
 * the sum exact in int32. _bytes, _pack and _value as for q8.
 * SmoothQuant's migration (nnc calibrate --smooth, `<weight>.smooth`): a
 * held form may carry K factors s_k > 0. _pack_smooth quantizes B's row k
 * times s_k and keeps s (NULL: none, as _pack), and the GEMM divides A's
 * column k by s_k before quantizing its rows: the same product, with A's
 * large channels moved into B's per-column scales. _import_smooth holds
 * the saved values with their factors (NULL: none, as _import);
 * _set_smooth replaces a held form's factors (s may be its own); _smooth
 * gives them, or NULL. */
size_t nnc_simd_w8a8_bytes(int N, int K);
void nnc_simd_w8a8_pack(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst);
float nnc_simd_w8a8_value(const void *w, int N, int K, int k, int n);
void nnc_simd_w8a8_export(const void *w, int b_trans, int N, int K, int8_t *values, float *scales);
void nnc_simd_w8a8_import(const int8_t *values, const float *scales, int b_trans, int N, int K, void *dst);
void nnc_simd_w8a8_pack_smooth(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, const float *s, void *dst);
void nnc_simd_w8a8_import_smooth(const int8_t *values, const float *scales, int b_trans, int N, int K,
                                 const float *s, void *dst);
void nnc_simd_w8a8_set_smooth(void *w, int N, int K, const float *s);
const float *nnc_simd_w8a8_smooth(const void *w, int N, int K);
float nnc_simd_a8_quantize(const float *x, int n, int8_t *q);

/* Weight-only int4 (gemm_q4.c): column n of B [K,N] (row n of a b_trans B
 * [N,K]) in groups of NNC_SIMD_Q4_GROUP consecutive k (the last one shorter
 * when K is not a multiple), each held as q[k,n] = round(B[k,n] / s) in
 * [-7, 7] with s = max over the group of |B[k,n]| / 7 (0 for a group of
 * zeros), two a byte in the micro-kernel's order. _bytes, _pack and _value
 * as for q8.
 * A file's form of the same values (a quantized checkpoint): values as U8
 * in the weight's own layout ([N,K] when b_trans, else [K,N]) with K's
 * extent halved, rounding up: the byte at k/2 holds k even in bits 0-3 and
 * k odd in bits 4-7, two's complement (a pad nibble is 0); scales F32 in
 * the same layout with K's extent replaced by the number of groups.
 * nnc_simd_q4_export writes that form from the held one, nnc_simd_q4_import
 * the held one from it: the round trip is exact. */
#define NNC_SIMD_Q4_GROUP 128
size_t nnc_simd_q4_bytes(int N, int K);
void nnc_simd_q4_pack(const float *B, ptrdiff_t ldb, int b_trans, int N, int K, void *dst);
float nnc_simd_q4_value(const void *q4, int N, int K, int k, int n);
void nnc_simd_q4_export(const void *q4, int b_trans, int N, int K, uint8_t *values, float *scales);
void nnc_simd_q4_import(const uint8_t *values, const float *scales, int b_trans, int N, int K, void *dst);

/* ------------------------------------------------------------ row kernels */

/* y[r,:] = softmax(x[r,:]) over cols; a row that is all -inf gives zeros.
 * y may be x (same ld). */
nnc_simd_status nnc_simd_softmax(int rows, int cols, const float *x, ptrdiff_t ldx,
                                 float *y, ptrdiff_t ldy, const nnc_simd_par *par,
                                 nnc_simd_error *err);

/* y = (x - mean) / sqrt(var + eps) * gamma + beta per row; gamma and beta
 * may be NULL (1 and 0). y may be x. */
nnc_simd_status nnc_simd_layernorm(int rows, int cols, const float *x, ptrdiff_t ldx,
                                   const float *gamma, const float *beta, float eps,
                                   float *y, ptrdiff_t ldy, const nnc_simd_par *par,
                                   nnc_simd_error *err);

/* The backward of nnc_simd_layernorm (rms 0) or nnc_simd_rmsnorm (rms 1),
 * statistics recomputed from x: with xhat the normalized x and g = dy * gamma,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rmsnorm: no mean(g)),
 *   dgamma = sum over rows of dy * xhat,  dbeta = sum over rows of dy.
 * gamma may be NULL (1): dgamma is then not written and may be NULL; dbeta
 * may be NULL and is ignored for rmsnorm. rows == 0 writes zeros to them.
 * dx may be x or dy (same ld). The workspace (any alignment) holds per-chunk
 * column sums and may be NULL when neither dgamma nor dbeta is written;
 * dgamma and dbeta are the same, bit for bit, for any number of threads. */
size_t nnc_simd_norm_bwd_workspace_bytes(int rows, int cols, int nthreads);
nnc_simd_status nnc_simd_norm_bwd(int rows, int cols, int rms, float eps, const float *x,
                                  ptrdiff_t ldx, const float *dy, ptrdiff_t lddy,
                                  const float *gamma, float *dx, ptrdiff_t lddx, float *dgamma,
                                  float *dbeta, const nnc_simd_par *par, void *workspace,
                                  size_t workspace_bytes, nnc_simd_error *err);
/* The same with dres (ld lddres) added to dx: the residual stream's
 * gradient joins the norm's in one pass. dres may be dx. */
nnc_simd_status nnc_simd_norm_bwd_res(int rows, int cols, int rms, float eps, const float *x,
                                      ptrdiff_t ldx, const float *dy, ptrdiff_t lddy, const float *dres,
                                      ptrdiff_t lddres, const float *gamma, float *dx, ptrdiff_t lddx,
                                      float *dgamma, float *dbeta, const nnc_simd_par *par, void *workspace,
                                      size_t workspace_bytes, nnc_simd_error *err);

/* y = x / sqrt(mean(x^2) + eps) * gamma per row; gamma may be NULL. */
nnc_simd_status nnc_simd_rmsnorm(int rows, int cols, const float *x, ptrdiff_t ldx,
                                 const float *gamma, float eps,
                                 float *y, ptrdiff_t ldy, const nnc_simd_par *par,
                                 nnc_simd_error *err);

/* ------------------------------------------------------------- attention */

/* out = softmax(scale * q . k^T + masks) . v for every (batch, head), with a
 * streaming softmax over blocks of keys: memory does not grow with T*S.
 * q [T,D], k [S,D], v [S,Dv], out [T,Dv] per (batch, head); element (b, h,
 * i, d) of q is at q + b*q_sb + h*q_sh + i*q_st + d, likewise for the others.
 * causal: key j is masked for query i when j > i + (S - T).
 * mask (optional) is [batch, S] with row stride mask_sb: key j of batch b is
 * masked when mask[b*mask_sb + j] == 0. A query whose keys are all masked
 * gives a row of zeros.
 * kv_group (grouped-query attention): query heads h share the k and v of
 * head h / kv_group (their h_sh steps between those heads); 0 or 1: a head
 * of k and v for each query head. heads must be a multiple of it.
 * lse (optional, [batch, heads, T], written when not NULL): the natural log
 * of each row's softmax denominator, lse[(b*heads + h)*T + i] =
 * log(sum_j e^(scale*s_ij - M)) + M over the unmasked keys (M their
 * largest scaled score), so that the probabilities are e^(scale*s_ij -
 * lse_i); +inf for a row whose keys are all masked (or S == 0). What goes to
 * out is the same, bit for bit, with or without it. */
typedef struct nnc_simd_attn_args {
  int batch, heads, T, S, D, Dv;
  const float *q;
  ptrdiff_t q_sb, q_sh, q_st;
  const float *k;
  ptrdiff_t k_sb, k_sh, k_st;
  const float *v;
  ptrdiff_t v_sb, v_sh, v_st;
  float *out;
  ptrdiff_t o_sb, o_sh, o_st;
  float scale;
  int causal;
  const float *mask;
  ptrdiff_t mask_sb;
  int kv_group;                  /* query heads a k/v head serves; 0 means 1 */
  float *lse;                    /* may be NULL */
} nnc_simd_attn_args;

size_t nnc_simd_attention_workspace_bytes(const nnc_simd_attn_args *a, int nthreads);

nnc_simd_status nnc_simd_attention(const nnc_simd_attn_args *a, const nnc_simd_par *par,
                                   void *workspace, size_t workspace_bytes,
                                   nnc_simd_error *err);

/* The backward of nnc_simd_attention: with P_ij = e^(scale*s_ij - lse_i)
 * (0 where masked, as in the forward), delta_i = dout_i . out_i,
 * dP_ij = dout_i . v_j and dS_ij = P_ij (dP_ij - delta_i):
 *   dv_j = sum_i P_ij dout_i,  dk_j = scale sum_i dS_ij q_i,
 *   dq_i = scale sum_j dS_ij k_j.
 * out and lse are the forward's output and its lse ([batch, heads, T]);
 * dout is d loss / d out. dq [T,D], dk [S,D] and dv [S,Dv] per (batch,
 * head) are overwritten (never accumulated into), so a k or v broadcast
 * over the batch (stride 0) gets one gradient per batch item in dk/dv, to
 * be summed by the caller; keys no query sees get zeros, and so do queries
 * whose keys are all masked. dq, dk and dv must not overlap the inputs;
 * they may interleave with each other (one buffer for the gradient of a
 * fused qkv projection) but must share no element. Memory per thread does
 * not grow with T*S, and the result is the same, bit for bit, for any
 * number of threads. */
typedef struct nnc_simd_attn_bwd_args {
  int batch, heads, T, S, D, Dv;
  const float *q;
  ptrdiff_t q_sb, q_sh, q_st;
  const float *k;
  ptrdiff_t k_sb, k_sh, k_st;
  const float *v;
  ptrdiff_t v_sb, v_sh, v_st;
  const float *out;              /* the forward's output */
  ptrdiff_t o_sb, o_sh, o_st;
  const float *dout;             /* d loss / d out */
  ptrdiff_t do_sb, do_sh, do_st;
  const float *lse;              /* [batch, heads, T] from the forward */
  float *dq;
  ptrdiff_t dq_sb, dq_sh, dq_st;
  float *dk;
  ptrdiff_t dk_sb, dk_sh, dk_st;
  float *dv;
  ptrdiff_t dv_sb, dv_sh, dv_st;
  float scale;
  int causal;
  const float *mask;             /* may be NULL; as the forward */
  ptrdiff_t mask_sb;
} nnc_simd_attn_bwd_args;

size_t nnc_simd_attention_bwd_workspace_bytes(const nnc_simd_attn_bwd_args *a, int nthreads);

nnc_simd_status nnc_simd_attention_bwd(const nnc_simd_attn_bwd_args *a, const nnc_simd_par *par,
                                       void *workspace, size_t workspace_bytes,
                                       nnc_simd_error *err);

/* ----------------------------------------------------------- elementwise */

/* y[i] = act(x[i]) for i < n; y may be x. */
nnc_simd_status nnc_simd_activation(nnc_simd_act act, size_t n, const float *x, float *y,
                                    const nnc_simd_par *par, nnc_simd_error *err);

/* dx[i] = dy[i] * act'(x[i]) for i < n (the backward of nnc_simd_activation;
 * relu' is 0 at 0); dx may be x or dy. */
nnc_simd_status nnc_simd_activation_grad(nnc_simd_act act, size_t n, const float *x, const float *dy, float *dx,
                                         const nnc_simd_par *par, nnc_simd_error *err);

/* Softmax cross-entropy of each row of x [rows, V] against the class t[r]
 * (in [0, V), else an error naming the row): row_loss[r] (may be NULL) gets
 * logsumexp(x_r) - x_r[t_r]; dx (may be NULL) gets (softmax(x_r) -
 * onehot(t_r)) * scale. */
nnc_simd_status nnc_simd_cross_entropy(int rows, int V, const float *x, const int32_t *t, float *row_loss,
                                       float *dx, float scale, const nnc_simd_par *par, nnc_simd_error *err);

/* out[i,:] = table[ids[i],:] for i < n (cols floats per row); an id outside
 * [0, rows) is an error naming its position and value. */
nnc_simd_status nnc_simd_embedding(int n, const int32_t *ids, int rows, int cols,
                                   const float *table, ptrdiff_t ld_table,
                                   float *out, ptrdiff_t ld_out, nnc_simd_error *err);
/* One rank's part of a vocabulary-split embedding: table holds rows first
 * .. first + rows - 1 of a vocabulary of `vocab`; out[i,:] = table[ids[i] -
 * first,:] where ids[i] is one of them, zeros otherwise. An id outside
 * [0, vocab) is an error naming its position and value. */
nnc_simd_status nnc_simd_embedding_rows(int n, const int32_t *ids, int vocab, int first, int rows, int cols,
                                        const float *table, ptrdiff_t ld_table,
                                        float *out, ptrdiff_t ld_out, nnc_simd_error *err);
/* nnc_simd_embedding from a table [rows, cols] held as a GEMM's B packed
 * whole (nnc_simd_gemm_pack_b, the panels b_packed reads): B [N,K] itself
 * when b_trans (N = rows, K = cols; a tied language-model head's table),
 * else B [K,N] (K = rows, N = cols). The table is then held once, for the
 * GEMM and the gather both. Rows are split over par's threads. */
nnc_simd_status nnc_simd_embedding_packed(int n, const int32_t *ids, int rows, int cols, int b_trans,
                                          const float *packed, float *out, ptrdiff_t ld_out,
                                          const nnc_simd_par *par, nnc_simd_error *err);

#endif
