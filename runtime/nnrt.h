/* runtime/nnrt.h — libnnrt, the runtime the generated code links against.
 *
 * This is the one public header. The sources under runtime/ are copied into
 * every output folder of the C SIMD target and must build there with nothing
 * but a C11 compiler, pthreads and libm: no config header, no other library.
 *
 * Errors are values. Every function that can fail returns an nnrt_status and,
 * when given an nnrt_error, fills it with a message that says what was
 * expected, what was found and where (file name, tensor name). Nothing aborts
 * or exits the host program. Pure conversions and accessors that cannot fail
 * return their value; destroy functions return nothing and accept NULL. */
#ifndef NNRT_H
#define NNRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define NNRT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NNRT_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- errors */

typedef enum nnrt_status {
  NNRT_OK = 0,
  NNRT_E_ARG = 1,      /* a NULL or invalid argument */
  NNRT_E_STATE = 2,    /* a call in the wrong order (or from the wrong place) */
  NNRT_E_SIZE = 3,     /* a size above the compiled maximum or a buffer too small */
  NNRT_E_IO = 4,       /* a file could not be opened, read or written */
  NNRT_E_FORMAT = 5,   /* a bad weights file: corrupt, lying, or not the model's */
  NNRT_E_NOMEM = 6,    /* out of memory (or of threads) */
  NNRT_E_DEVICE = 7,   /* the device or its driver failed */
  NNRT_E_INTERNAL = 8, /* a bug in libnnrt */
  NNRT_E_COMM = 9      /* a collective failed, or a rank did not answer within the timeout */
} nnrt_status;

typedef struct nnrt_error {
  nnrt_status code;
  char msg[512];
} nnrt_error;

/* Fills err (when not NULL) with code and the formatted message (truncated
 * to fit) and returns code, so callers can write `return nnrt_errorf(...)`. */
nnrt_status nnrt_errorf(nnrt_error *err, nnrt_status code, const char *fmt, ...)
    NNRT_PRINTF(3, 4);

/* Short name of a status, e.g. "bad weights file". */
const char *nnrt_status_name(nnrt_status s);

/* ---------------------------------------------------------------- memory */

/* size bytes aligned to align (a power of two; raised to sizeof(void *) when
 * smaller). size 0 gives a valid, unique pointer. Free with nnrt_aligned_free. */
nnrt_status nnrt_aligned_alloc(size_t size, size_t align, void **out, nnrt_error *err);
void nnrt_aligned_free(void *p);

/* The activation arena: one aligned block per model instance. The memory
 * planner gives each intermediate an offset into it (nnrt_arena_at); the
 * bump allocator (nnrt_arena_alloc) serves scratch space on top, given back
 * all at once by nnrt_arena_reset. */
typedef struct nnrt_arena nnrt_arena;

nnrt_status nnrt_arena_create(size_t bytes, size_t align, nnrt_arena **out, nnrt_error *err);
void nnrt_arena_destroy(nnrt_arena *a);
void *nnrt_arena_base(const nnrt_arena *a);
size_t nnrt_arena_size(const nnrt_arena *a);
size_t nnrt_arena_used(const nnrt_arena *a);
/* A pointer to [offset, offset+bytes) of the arena; NNRT_E_SIZE past its end,
 * NNRT_E_ARG when offset is not a multiple of the arena's alignment. */
nnrt_status nnrt_arena_at(const nnrt_arena *a, size_t offset, size_t bytes, void **out,
                          nnrt_error *err);
/* The next bytes of the arena, aligned; NNRT_E_SIZE when they do not fit. */
nnrt_status nnrt_arena_alloc(nnrt_arena *a, size_t bytes, void **out, nnrt_error *err);
void nnrt_arena_reset(nnrt_arena *a);

/* ----------------------------------------------------------- thread pool */

/* A fixed set of threads that run a parallel loop. The calling thread takes
 * part as thread 0; workers are threads 1..n-1. With one thread nothing is
 * started and loops run inline. A pool runs one loop at a time: a second
 * call while one runs (from a task or another thread) is NNRT_E_STATE. */
typedef struct nnrt_pool nnrt_pool;
typedef void (*nnrt_task_fn)(void *ctx, int64_t task, int thread);

#define NNRT_POOL_MAX_THREADS 1024

/* nthreads == 0 means one per online CPU. */
nnrt_status nnrt_pool_create(int nthreads, nnrt_pool **out, nnrt_error *err);
/* Stops and joins the workers; the pool must be idle. */
void nnrt_pool_destroy(nnrt_pool *pool);
int nnrt_pool_threads(const nnrt_pool *pool);
/* Runs fn(ctx, task, thread) once for every task in [0, ntasks) and returns
 * when all have finished. ntasks == 0 returns at once. */
nnrt_status nnrt_pool_parallel_for(nnrt_pool *pool, int64_t ntasks, nnrt_task_fn fn,
                                   void *ctx, nnrt_error *err);

/* ---------------------------------------------------------------- timers */

/* Monotonic nanoseconds from an arbitrary origin, for intervals. */
uint64_t nnrt_now_ns(void);

/* --------------------------------------------------------- half floats */

/* IEEE binary16 and bfloat16 as their bits. Narrowing rounds to nearest even,
 * overflows to infinity, keeps the sign of zero and makes every NaN a quiet
 * NaN with the same sign. */
float nnrt_f16_to_f32(uint16_t h);
uint16_t nnrt_f32_to_f16(float f);
float nnrt_bf16_to_f32(uint16_t h);
uint16_t nnrt_f32_to_bf16(float f);
/* OCP FP8 e4m3 ("e4m3fn", --precision=fp8's weights and activations) as its
 * bits: narrowing rounds to nearest even, saturates to +-448 (infinity too,
 * as CUDA's satfinite conversion does), keeps subnormals (multiples of 2^-9)
 * and the sign of zero, and makes a NaN 0x7f with its sign. */
float nnrt_e4m3_to_f32(uint8_t b);
uint8_t nnrt_f32_to_e4m3(float f);

/* --------------------------------------------------------------- dtypes */

/* The element types of the safetensors format. */
typedef enum nnrt_dtype {
  NNRT_BOOL,
  NNRT_U8,
  NNRT_I8,
  NNRT_F8_E5M2,
  NNRT_F8_E4M3,
  NNRT_I16,
  NNRT_U16,
  NNRT_F16,
  NNRT_BF16,
  NNRT_I32,
  NNRT_U32,
  NNRT_F32,
  NNRT_F64,
  NNRT_I64,
  NNRT_U64,
  NNRT_DTYPE_COUNT
} nnrt_dtype;

const char *nnrt_dtype_name(nnrt_dtype t);  /* as in a safetensors header: "F32" */
size_t nnrt_dtype_size(nnrt_dtype t);       /* bytes per element; 0 when invalid */
/* Exact, case-sensitive header name; false when unknown. */
bool nnrt_dtype_parse(const char *name, nnrt_dtype *out);

/* ----------------------------------------------------------- safetensors */

#define NNRT_MAX_RANK 8
#define NNRT_ST_MAX_HEADER 100000000u  /* bytes of JSON header accepted */

/* One tensor of an open file. data points into the mapping (or the caller's
 * buffer) and is NOT aligned in general: read it with memcpy or copy it out
 * with nnrt_st_copy / nnrt_st_copy_f32. */
typedef struct nnrt_st_tensor {
  const char *name;
  nnrt_dtype dtype;
  int rank;
  int64_t shape[NNRT_MAX_RANK];
  int64_t numel;
  const void *data;
  size_t nbytes;
  uint64_t offset;  /* of data within the data section */
} nnrt_st_tensor;

/* What the model expects of one tensor (an entry of the generated manifest),
 * and what the writer writes. */
typedef struct nnrt_st_desc {
  const char *name;
  nnrt_dtype dtype;
  int rank;
  int64_t shape[NNRT_MAX_RANK];
} nnrt_st_desc;

typedef struct nnrt_st nnrt_st;

/* Maps the file read-only and validates all of it; messages name the file
 * and, where one is at fault, the tensor. NNRT_E_IO when it cannot be opened
 * or mapped, NNRT_E_FORMAT for any fault of its contents. */
nnrt_status nnrt_st_open(const char *path, nnrt_st **out, nnrt_error *err);
/* The same over a caller's buffer, which must outlive the handle; label names
 * it in messages (NULL: "<memory>"). */
nnrt_status nnrt_st_open_memory(const void *data, size_t size, const char *label,
                                nnrt_st **out, nnrt_error *err);
void nnrt_st_close(nnrt_st *st);

/* Tensors in name order (strcmp); __metadata__ is not one of them. */
int nnrt_st_count(const nnrt_st *st);
const nnrt_st_tensor *nnrt_st_at(const nnrt_st *st, int i);  /* NULL when out of range */
/* The tensor called name; NNRT_E_FORMAT naming file and tensor when absent. */
nnrt_status nnrt_st_find(const nnrt_st *st, const char *name, const nnrt_st_tensor **out,
                         nnrt_error *err);
/* A value of the header's "__metadata__" object; NULL when absent. */
const char *nnrt_st_metadata(const nnrt_st *st, const char *key);
/* The file as messages name it (its path, or the label given). */
const char *nnrt_st_label(const nnrt_st *st);

/* Checks the file against the model's manifest: a missing tensor, a wrong
 * dtype or a wrong shape is NNRT_E_FORMAT naming the tensor with what was
 * expected and found. Tensors of the file the manifest does not name are not
 * an error: when report is not NULL it receives a line listing them (or ""),
 * truncated with "..." to report_size. */
nnrt_status nnrt_st_check(const nnrt_st *st, const nnrt_st_desc *manifest, int n,
                          char *report, size_t report_size, nnrt_error *err);

/* Copies the tensor's raw bytes to dst (dst_size >= t->nbytes, else
 * NNRT_E_SIZE). */
nnrt_status nnrt_st_copy(const nnrt_st *st, const nnrt_st_tensor *t, void *dst,
                         size_t dst_size, nnrt_error *err);
/* Copies the tensor to dst as f32, converting from F32, F16 or BF16
 * (NNRT_E_FORMAT for other dtypes); dst_count >= t->numel, else NNRT_E_SIZE. */
nnrt_status nnrt_st_copy_f32(const nnrt_st *st, const nnrt_st_tensor *t, float *dst,
                             size_t dst_count, nnrt_error *err);

/* Writes a valid safetensors file of n tensors, data[i] holding the bytes of
 * tensors[i] (numel * dtype size, NULL allowed when that is 0). The header
 * is padded with spaces so that the data section starts 8-aligned. On failure
 * no file is left at path. */
nnrt_status nnrt_st_write(const char *path, int n, const nnrt_st_desc *tensors,
                          const void *const *data, nnrt_error *err);
/* nnrt_st_write with a "__metadata__" object of nmeta strings: meta[2j] the
 * key, meta[2j + 1] its value (valid UTF-8, keys unique). */
nnrt_status nnrt_st_write_meta(const char *path, int n, const nnrt_st_desc *tensors, const void *const *data,
                               int nmeta, const char *const *meta, nnrt_error *err);

/* ------------------------------------------------------------ optimizers */

/* The settings of one optimizer step (the training step's update). */
typedef struct nnrt_optim {
  int sgd;              /* 0: AdamW; 1: SGD with momentum */
  float lr;             /* the learning rate of this step (after any schedule) */
  float beta1, beta2;   /* AdamW's moment decays (SGD: beta1 is the momentum) */
  float eps;            /* AdamW's denominator term */
  float weight_decay;   /* decoupled: w -= lr * weight_decay * w, where the tensor decays */
  int64_t step;         /* 1 for the first step: AdamW's bias correction */
} nnrt_optim;

/* One pass over a tensor of n weights w, its gradient g scaled by gscale
 * (global-norm clipping, loss-scale removal) and its state m and v (v
 * unused by SGD): AdamW
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   w -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd w)
 * or SGD with momentum m = b1 m + g; w -= lr (m + wd w). decay says whether
 * this tensor takes weight decay (biases and norm weights do not). */
void nnrt_optim_update(const nnrt_optim *o, float *w, const float *g, float gscale, float *m, float *v, int64_t n,
                       int decay);

/* The sum of squares of n floats, in double (for the global gradient norm). */
double nnrt_sum_squares(const float *x, int64_t n);

/* ------------------------------------------------------- training support */

/* The learning rate: a linear warm-up over the first `warmup` steps (step t
 * gets lr t / warmup), then a cosine decay over `decay` steps down to
 * lr * min_ratio, which stays; decay 0 keeps lr after the warm-up. */
typedef struct nnrt_lr_schedule {
  float lr;
  int64_t warmup, decay;
  float min_ratio;
} nnrt_lr_schedule;

/* The learning rate of step (1 for the first). */
float nnrt_lr_at(const nnrt_lr_schedule *s, int64_t step);

/* Whether name matches one of the comma-separated patterns, where '*'
 * matches any run of characters ("*.bias, ln_*"); false for NULL. */
bool nnrt_name_matches(const char *patterns, const char *name);

/* The loss scaling's state (the training API's dynamic scaling for f16):
 * the scale, the good updates since it last changed and the updates
 * skipped for a non-finite gradient. scale 0: none. */
typedef struct nnrt_scale_state {
  float scale;
  int64_t good, skipped;
} nnrt_scale_state;

/* The names (and prefixes) of a checkpoint's optimizer tensors, below. */
#define NNRT_CKPT_STEP "optim.step"
#define NNRT_CKPT_MOM "optim.m."
#define NNRT_CKPT_VEL "optim.v."

/* A training checkpoint: the weights (n tensors of the manifest) under their
 * own names, so that an inference build loads the file as weights, and the
 * optimizer's moments as "optim.m.<name>" and "optim.v.<name>" (F32) with
 * the steps taken as "optim.step" (I64 [1]); a loss scale > 0 as
 * "optim.loss_scale" (F32 [1]) with "optim.scale_counts" (I64 [2]: good,
 * skipped). */
typedef struct nnrt_ckpt {
  int n;
  const nnrt_st_desc *manifest;
  void *const *w;       /* each weight, in the manifest's dtype */
  float *const *mom;    /* each weight's first and second moments */
  float *const *vel;
  int64_t step;
  nnrt_scale_state scale;
} nnrt_ckpt;

/* Writes c to path through a temporary file renamed over it at the end: a
 * failed save leaves the previous checkpoint as it was. */
nnrt_status nnrt_ckpt_save(const char *path, const nnrt_ckpt *c, nnrt_error *err);
/* Reads the optimizer state of c's weights from an open checkpoint into
 * c->mom and c->vel and the steps taken into *step; a file of weights alone
 * (no optim.step) gives zero moments and step 0. path names the file in
 * messages. The weights are loaded as any weights file is. */
nnrt_status nnrt_ckpt_load_state(const nnrt_st *st, const char *path, const nnrt_ckpt *c, int64_t *step,
                                 nnrt_error *err);
/* The loss scaling's state of an open checkpoint into *out; a file without
 * one (weights alone, or saved before loss scaling) gives zeros. */
nnrt_status nnrt_ckpt_load_scale(const nnrt_st *st, const char *path, nnrt_scale_state *out, nnrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
