/* runtime/cuda/nnrt_cuda.h — the CUDA part of libnnrt: devices, CUDA and
 * cuBLAS errors as nnrt_status values, a caching device allocator, pinned
 * host buffers and copies, streams and events, and cuBLASLt matrix products
 * with fused bias / activation / residual.
 *
 * Host C11 over the CUDA runtime and cuBLASLt C APIs: these files build with
 * gcc (or nvcc) with -I<runtime> -I/usr/local/cuda/include and link
 * -lcudart -lcublasLt. The generated model folder for a CUDA target copies
 * runtime/ and runtime/cuda/ and builds them there.
 *
 * Conventions are those of nnrt.h: every function that can fail returns an
 * nnrt_status and fills the nnrt_error it is given (may be NULL); nothing
 * aborts or exits; destroy/free functions return nothing and accept NULL.
 * Without a usable CUDA device or driver every entry point that needs one
 * returns NNRT_E_DEVICE with a message ending in "(no usable CUDA device or
 * driver)", and never crashes.
 *
 * Combinations the runtime cannot do (a GEMM epilogue cuBLASLt lacks, an
 * unsupported type pair) are NNRT_E_ARG with a message starting
 * "unsupported:"; nnrt_cuda_gemm_supported answers the same question
 * beforehand so the emitter can fall back at create time.
 *
 * Threading: a handle (allocator, blas) is used by one thread at a time. */
#ifndef NNRT_CUDA_H
#define NNRT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "nnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

/* The nnrt_status a CUDA runtime error stands for: out of memory is
 * NNRT_E_NOMEM; invalid values, handles and pointers NNRT_E_ARG; "not ready"
 * NNRT_E_STATE; everything else (no device, launch failures, faults)
 * NNRT_E_DEVICE. cudaSuccess is NNRT_OK. */
nnrt_status nnrt_cuda_status_of(cudaError_t e);
/* The same for cuBLAS: CUBLAS_STATUS_ALLOC_FAILED is NNRT_E_NOMEM,
 * INVALID_VALUE and NOT_SUPPORTED NNRT_E_ARG, NOT_INITIALIZED NNRT_E_STATE,
 * INTERNAL_ERROR NNRT_E_INTERNAL, the rest NNRT_E_DEVICE. */
nnrt_status nnrt_cuda_blas_status_of(cublasStatus_t s);

/* For e != cudaSuccess: fills err with "what: cudaErrorName: description"
 * (plus the no-device hint where it applies), clears the runtime's last
 * error so a later launch check does not report it again, and returns
 * nnrt_cuda_status_of(e). cudaSuccess returns NNRT_OK and leaves err. */
nnrt_status nnrt_cuda_check(cudaError_t e, const char *what, nnrt_error *err);
/* The same for a cuBLAS status: "what: CUBLAS_STATUS_NAME: description". */
nnrt_status nnrt_cuda_blas_check(cublasStatus_t s, const char *what, nnrt_error *err);

/* ---------------------------------------------------------------- device */

typedef struct nnrt_cuda_device_info {
  int index;
  char name[256];
  int cc_major, cc_minor;    /* compute capability, e.g. 9.0 */
  int sm_count;              /* streaming multiprocessors */
  size_t total_mem;          /* bytes of device memory */
  int l2_bytes;              /* L2 cache */
  int clock_khz;             /* peak SM clock */
  int mem_clock_khz;         /* peak memory clock */
  int mem_bus_bits;          /* memory bus width */
  size_t smem_optin_bytes;   /* shared memory a block may opt in to */
} nnrt_cuda_device_info;

/* Number of CUDA devices; 0 and NNRT_E_DEVICE when there is none (or no
 * driver). out must not be NULL. */
nnrt_status nnrt_cuda_device_count(int *out, nnrt_error *err);
/* Parses the value of NNC_CUDA_DEVICE: a decimal index in [0, count), no
 * sign, spaces or trailing characters; NNRT_E_ARG naming the text otherwise.
 * Pure (touches no device). */
nnrt_status nnrt_cuda_device_parse(const char *text, int count, int *out, nnrt_error *err);
/* Makes a device current for the calling thread (cudaSetDevice). index >= 0
 * names it; index < 0 takes NNC_CUDA_DEVICE when set, else device 0. The
 * index used goes to *chosen (may be NULL). */
nnrt_status nnrt_cuda_device_select(int index, int *chosen, nnrt_error *err);
/* Properties of device index (which need not be current). */
nnrt_status nnrt_cuda_device_info_get(int index, nnrt_cuda_device_info *out, nnrt_error *err);

/* ------------------------------------------------------------- allocator */

/* A caching allocator of device memory on the device current at create.
 * Sizes are rounded up to a size class (4 classes per power of two, from
 * 512 bytes: at most 25% over); a freed block goes on its class's free
 * list and the next request of that class takes it without calling
 * cudaMalloc. Memory goes back to CUDA only on nnrt_cuda_alloc_trim, when
 * cudaMalloc runs out (the cache is trimmed and the call retried once) and
 * on destroy.
 *
 * Blocks are handed out again without synchronizing: that is right when the
 * work that used a freed block and the work that uses it next are ordered
 * (one stream, as the generated code runs). With several streams, sync
 * before freeing a block another stream may still read. */
typedef struct nnrt_cuda_alloc nnrt_cuda_alloc;

typedef struct nnrt_cuda_alloc_stats {
  size_t in_use;      /* bytes (of size classes) handed out and not freed */
  size_t cached;      /* bytes on free lists */
  size_t peak;        /* highest in_use since create */
  size_t device_allocs;  /* cudaMalloc calls made */
  size_t reuses;      /* requests served from a free list */
} nnrt_cuda_alloc_stats;

/* The size class of a request of bytes (0 is served as 1): the smallest
 * m * 2^e >= bytes with m in {4, 5, 6, 7}, and at least 512. 0 when bytes
 * is too large to round up. Pure. */
size_t nnrt_cuda_size_class(size_t bytes);

nnrt_status nnrt_cuda_alloc_create(nnrt_cuda_alloc **out, nnrt_error *err);
/* cudaFrees every block, in use or cached. */
void nnrt_cuda_alloc_destroy(nnrt_cuda_alloc *a);
/* At least bytes of device memory, 256-byte aligned; bytes 0 gives a valid,
 * unique pointer. NNRT_E_NOMEM when the device is full even after a trim,
 * NNRT_E_SIZE when bytes has no size class. */
nnrt_status nnrt_cuda_malloc(nnrt_cuda_alloc *a, size_t bytes, void **out, nnrt_error *err);
/* Puts p back on its free list; p == NULL is a no-op. NNRT_E_ARG when p is
 * not a block of this allocator in use (a double free or a foreign pointer). */
nnrt_status nnrt_cuda_free(nnrt_cuda_alloc *a, void *p, nnrt_error *err);
/* cudaFrees every cached block. */
nnrt_status nnrt_cuda_alloc_trim(nnrt_cuda_alloc *a, nnrt_error *err);
/* Zeros when a is NULL. */
nnrt_cuda_alloc_stats nnrt_cuda_alloc_get_stats(const nnrt_cuda_alloc *a);

/* ---------------------------------------------------- host memory, copies */

/* Page-locked host memory (cudaHostAlloc), so copies run asynchronously at
 * full speed. bytes 0 gives a valid pointer. Free with nnrt_cuda_host_free. */
nnrt_status nnrt_cuda_host_alloc(size_t bytes, void **out, nnrt_error *err);
void nnrt_cuda_host_free(void *p);
/* Copies bytes from src to dst on stream, in whichever direction the
 * pointers say (unified addressing). Asynchronous when the host side is
 * pinned. bytes 0 does nothing. */
nnrt_status nnrt_cuda_copy_async(void *dst, const void *src, size_t bytes, cudaStream_t stream,
                                 nnrt_error *err);

/* ------------------------------------------------------ streams, events */

/* A stream that does not synchronize with the legacy default stream. */
nnrt_status nnrt_cuda_stream_create(cudaStream_t *out, nnrt_error *err);
/* Destroying the default stream (NULL) does nothing. */
void nnrt_cuda_stream_destroy(cudaStream_t s);
nnrt_status nnrt_cuda_stream_sync(cudaStream_t s, nnrt_error *err);

/* An event with timing. */
nnrt_status nnrt_cuda_event_create(cudaEvent_t *out, nnrt_error *err);
void nnrt_cuda_event_destroy(cudaEvent_t e);
nnrt_status nnrt_cuda_event_record(cudaEvent_t e, cudaStream_t s, nnrt_error *err);
nnrt_status nnrt_cuda_event_sync(cudaEvent_t e, nnrt_error *err);
/* Milliseconds from start to stop, both recorded; waits for stop. */
nnrt_status nnrt_cuda_event_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, float *ms,
                                       nnrt_error *err);

/* ------------------------------------------------------------------ GEMM */

/* E4M3: OCP FP8 e4m3 bytes (--precision=fp8), for A and B only. */
typedef enum { NNRT_DT_F32, NNRT_DT_BF16, NNRT_DT_F16, NNRT_DT_E4M3 } nnrt_cuda_dtype;

/* GELU_TANH is cuBLASLt's GELU; GELU_ERF is not in cuBLASLt and is always
 * reported unsupported, so the emitter applies it in a separate kernel.
 * The two of a training step's MLP take aux (below):
 *   GELU_TANH_AUX: aux = alpha A.op(B) + bias too (the GELU's input, kept
 *                  for its gradient), D = gelu(aux);
 *   DGELU_TANH:    D = alpha A.op(B) * gelu'(aux) (the gradient through the
 *                  GELU: aux is its input), no bias.
 * BGRAD_A and BGRAD_B write bgrad (below) besides D: a weight gradient's
 * bias gradient, the sums of its dy over the rows, from the operand the GEMM
 * reads anyway: A (dW = dy^T x, cuBLASLt's BGRADB) or B (dW = x^T dy, its
 * BGRADA). */
typedef enum {
  NNRT_EPI_NONE,
  NNRT_EPI_RELU,
  NNRT_EPI_GELU_TANH,
  NNRT_EPI_GELU_ERF,
  NNRT_EPI_GELU_TANH_AUX,
  NNRT_EPI_DGELU_TANH,
  NNRT_EPI_BGRAD_A,
  NNRT_EPI_BGRAD_B
} nnrt_cuda_epilogue;

/* One (batched) product, row-major:
 *   D[b] = act(alpha * A[b] . op(B[b]) + bias) + residual[b]
 * for b in [0, batch), A[b] at A + b*stride_a elements, and so on.
 * Leading dimensions and strides count elements of the matrix's type.
 *
 * Types: ab F32 -> out F32 (tf32: tensor cores, inputs rounded to tf32);
 * ab BF16 -> out BF16 or F32; ab F16 -> out F16 or F32. Accumulation in f32.
 * ab E4M3 -> out BF16 or F32 (sm_89 and up): A [M,K] and B [N,K] (b_trans,
 * not a_trans: cuBLASLt's FP8 kernels read both operands K-major), K, lda
 * and ldb multiples of 16, no batch, epilogues NONE, RELU and GELU_TANH
 * only, fast accumulation on (CUBLASLT_MATMUL_DESC_FAST_ACCUM). With
 * a_scale and b_scale, D = act(alpha * (a_scale[m] * b_scale[n] * A.B^T) +
 * bias) + residual: A's rows and B's output channels each have an f32
 * scale (cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, Hopper
 * only: elsewhere the heuristic finds no algorithm and the call answers
 * "unsupported"); without them the product is unscaled. ab E4M3 -> out
 * E4M3 too, with d_scale (one device float the result is multiplied by
 * before it is rounded to e4m3: 1 / the scale its reader's A takes), a bf16
 * bias, no residual; cuBLASLt may have no algorithm for it with the scale
 * vectors (then "unsupported", as above).
 * bias is [N] of the out type, the same for every batch item.
 * residual has D's shape and leading dimension ldd, batch stride stride_r,
 * and may be D itself (then stride_r must equal stride_d).
 * An activation together with a residual needs act_after_residual (cuBLASLt
 * applies the activation after adding it: D = act(alpha A.op(B) + bias +
 * residual)); K == 0 is unsupported. BGRAD_* take a residual.
 * Strides may be 0 for A and B (one matrix for every batch item), not for D. */
typedef struct nnrt_cuda_gemm {
  int M, N, K, batch;            /* out[M,N] per batch item, row-major */
  nnrt_cuda_dtype ab, out;       /* A and B type; out/bias/residual type */
  bool tf32;                     /* f32 inputs on tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) */
  const void *A; long long lda, stride_a;  /* a_trans ? A [K,M] row-major (x^T of a weight gradient) : A [M,K] */
  bool a_trans;
  const void *B; long long ldb, stride_b;  /* b_trans ? B [N,K] row-major (nn.Linear) : B [K,N] */
  bool b_trans;
  const void *bias;              /* [N] of the out type, or NULL */
  const void *residual; long long stride_r;  /* out-shaped, added (beta = 1), or NULL; may equal D */
  bool act_after_residual;       /* with a residual and an activation: act(... + residual) (above) */
  void *D; long long ldd, stride_d;
  float alpha;
  int epilogue;                  /* nnrt_cuda_epilogue */
  void *aux; long long ldaux, stride_aux;  /* D-shaped, of the out type, ldaux a multiple of 8: the
                                              *_AUX and D* epilogues' (written or read), else NULL */
  void *bgrad;                   /* BGRAD_A: [M] of the out type, bgrad[m] = sum over k of A[m][k] (the
                                    column sums of A stored [K,M]: a_trans); BGRAD_B: [N], bgrad[n] =
                                    sum over k of B[k][n] (B stored [K,N]: not b_trans); else NULL.
                                    Not scaled by alpha; no bias, no batch; other layouts of the
                                    summed operand are unsupported (cuBLASLt has no kernel) */
  int algo;                      /* which of cuBLASLt's heuristic results runs it (below) */
  const float *a_scale;          /* E4M3 only: [M] device floats, A's row m is a_scale[m] times its bytes' values */
  const float *b_scale;          /* E4M3 only: [N] device floats, B's row n (an output channel) likewise; both or
                                    neither */
  const float *d_scale;          /* out E4M3 only (and required): one device float, D = e4m3(d_scale * (...)),
                                    saturating: the next GEMM's A quantized by this one's epilogue */
  bool row_phases;               /* for rows of D not 16-byte aligned (below) */
  size_t phase_band_bytes;       /* row_phases: B's bytes per column band; 0: NNRT_CUDA_PHASE_BAND_BYTES (below) */
} nnrt_cuda_gemm;

/* row_phases: cuBLASLt's fast kernels need every row of D to start 16-byte
 * aligned; rows of an odd length (GPT-2's LM head, N = ldd = 50257) get a
 * kernel several times slower. With row_phases the product runs as P calls,
 * P = 16 / gcd(ldd * size of out, 16): call r takes the rows m = r (mod P),
 * whose starts agree mod 16 bytes (leading dimension P * ldd), from the
 * first column at a 16-byte boundary on, a multiple of 64 columns (an odd
 * N is as slow as unaligned rows); then narrow calls for the columns
 * after them and before them (fewer than 64 + 16 / size of out): two over
 * all rows, or, with a residual (in place too), per phase, so that every
 * element gets the residual once. Needs batch 1, A
 * [M,K] (not a_trans), B [N,K] (b_trans), no aux, bgrad or scale vectors
 * (a_scale's rows would be P apart), no e4m3 inputs (cuBLASLt's FP8
 * kernels want N a multiple of 16). With rows aligned already (P = 1) it is
 * the wide call and, when N is not a multiple of 64, a call for the rest.
 * algo applies to every call.
 *
 * Each phase reads all of B: when the wide columns' rows of B (columns x K x
 * size of A/B) pass phase_band_bytes, the wide columns are split into bands
 * of whole 64-column tiles, about equal, each within the budget, and every
 * phase runs over a band before the next band starts, so that the band's
 * rows of B are read from memory once and from L2 by the other phases.
 * phase_band_bytes 0 takes NNRT_CUDA_PHASE_BAND_BYTES; SIZE_MAX (any budget
 * above B's size) gives one band, the P calls over all wide columns. Bands
 * change which calls run, not what is written. gemm.c built with
 * -DNNRT_CUDA_PHASE_BAND_BYTES=... changes the default (to time a model's
 * head without changing the compiler).
 * The default is one band: on an H200 (test_rt_cuda_gpu --bench, session
 * 27) GPT-2's head took 1.156 ms in one band against 1.128 in bands of 12
 * MiB, 1.253 of 24 and 1.370 of 6 (f32 out), and 0.951 against 1.015-1.540
 * (bf16 out); the whole model did not move (4.203 against 4.201 ms, B=8
 * T=1024): the calls' tails cost what the rereads of B save. */
#ifndef NNRT_CUDA_PHASE_BAND_BYTES
#define NNRT_CUDA_PHASE_BAND_BYTES SIZE_MAX
#endif

/* algo 0 (a zeroed struct) runs cuBLASLt's first heuristic choice, from a
 * query for one result. algo i in [1, NNRT_CUDA_GEMM_ALGOS) runs the i-th
 * (from 0) of a query for up to NNRT_CUDA_GEMM_ALGOS results, which
 * --tune=measure times against the first: the heuristic's order is not
 * always the fastest. When the heuristic returns i results or fewer for the
 * problem, nnrt_cuda_gemm_run answers NNRT_E_ARG "unsupported: ... expected
 * algorithm index < n ..., found i"; an algo outside [0,
 * NNRT_CUDA_GEMM_ALGOS) is NNRT_E_ARG naming algo. */
#define NNRT_CUDA_GEMM_ALGOS 8

/* The cuBLASLt handle, one workspace, and a cache of (shape, types, leading
 * dimensions, strides, pointer alignments, epilogue, algo) -> (matmul descriptor,
 * layouts, chosen algorithm), so a repeated call makes no heuristic query.
 * Uses the device current at create. The workspace is shared by every call:
 * run the calls of one handle on one stream (or sync between streams). */
typedef struct nnrt_cuda_blas nnrt_cuda_blas;

#define NNRT_CUDA_BLAS_DEFAULT_WORKSPACE ((size_t)32 << 20)

/* workspace_bytes 0 means NNRT_CUDA_BLAS_DEFAULT_WORKSPACE. */
nnrt_status nnrt_cuda_blas_create(size_t workspace_bytes, nnrt_cuda_blas **out,
                                  nnrt_error *err);
void nnrt_cuda_blas_destroy(nnrt_cuda_blas *h);
/* Heuristic queries made so far (one per distinct problem; for tests). */
long long nnrt_cuda_blas_heuristic_queries(const nnrt_cuda_blas *h);

/* Whether the combination of types, epilogue, bias/residual and sizes in g
 * is one nnrt_cuda_gemm_run can do; when not, reason (if not NULL) gets why.
 * Looks only at the fields that decide that (M, N, K, batch, ab, out, tf32,
 * a_trans, b_trans, row_phases, epilogue, and bias, residual, aux, bgrad and
 * the scales being NULL or not), not at pointers or leading dimensions, nor
 * at algo (whether the heuristic has an algo-th result is known only on the
 * device), and touches no device. */
bool nnrt_cuda_gemm_supported(const nnrt_cuda_gemm *g, char *reason, size_t reason_size);

/* Enqueues the product on stream s. Checks the arguments first (NULL
 * pointers, negative sizes, leading dimensions smaller than the rows,
 * overlapping output batches, algo out of range: NNRT_E_ARG naming the
 * field; g's sizes and algo are checked before h, so those checks need no
 * device); an unsupported combination is NNRT_E_ARG "unsupported: ...".
 * M, N or batch 0 does nothing. Does not synchronize. */
nnrt_status nnrt_cuda_gemm_run(nnrt_cuda_blas *h, const nnrt_cuda_gemm *g, cudaStream_t s,
                               nnrt_error *err);

/* Whether nnrt_cuda_gemm_run's failure (st, e) says cuBLASLt has no
 * algorithm for the problem on this GPU ("unsupported: ...", or its
 * heuristic's CUBLAS_STATUS_NOT_SUPPORTED), which a caller with a GEMM of
 * its own may answer by running that one; any other failure is an error. */
bool nnrt_cuda_gemm_unsupported(nnrt_status st, const nnrt_error *e);

/* ----------------------------------------------------------------- peaks */

/* The GPU's rates for a roofline (peaks.c): *gbps the bandwidth of a 512 MiB
 * device copy (bytes read + written), *gflops an 8192^3 GEMM of dtype dt
 * (tf32 for f32 on tensor cores) through h; the best of five after a warm-up.
 * Takes 1.5 GiB of device memory from alloc for the duration. */
nnrt_status nnrt_cuda_measure_peaks(nnrt_cuda_blas *h, nnrt_cuda_alloc *alloc, nnrt_cuda_dtype dt, bool tf32,
                                    double *gflops, double *gbps, cudaStream_t s, nnrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
