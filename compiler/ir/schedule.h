/* compiler/ir/schedule.h — what the fusion pass hands to the back-ends.
 *
 * A schedule is the list of kernels that run one after another. Each kernel is
 * a fused group of graph nodes with a kind (which template runs it) and a
 * descriptor of that kind which says, in the template's terms, what to compute
 * (which tensor is A, whether LayerNorm runs on its rows first, which
 * activation follows). A back-end reads only the descriptors; the reference
 * evaluator (ref/) runs the same descriptors in float64, so a fusion that
 * captured the wrong operand or forgot an op fails the fusion tests without any
 * back-end.
 *
 * The memory plan gives every intermediate tensor an offset in one arena,
 * sized for the maximum of every symbolic dim. */
#ifndef NNC_SCHEDULE_H
#define NNC_SCHEDULE_H

#include "ir.h"

typedef enum nnc_kernel_kind {
  NNC_KERNEL_ELEMENTWISE, /* a chain of elementwise ops: one loop, one output */
  NNC_KERNEL_GEMM,        /* linear / matmul with prologue and epilogue */
  NNC_KERNEL_ATTENTION,   /* QK^T, scale, masks, softmax, .V */
  NNC_KERNEL_ROW,         /* softmax, layernorm or rmsnorm on its own */
  NNC_KERNEL_REDUCE,      /* sum, mean, max */
  NNC_KERNEL_GATHER,      /* embedding lookup */
  NNC_KERNEL_MOVE,        /* transpose, slice, concat, split: a copy */
  NNC_KERNEL_VIEW,        /* reshape of a contiguous tensor: no work, aliases its input */
  NNC_KERNEL_LOSS,        /* cross-entropy */
  NNC_KERNEL_ATTENTION_GRAD, /* flash-attention backward: dq, dk, dv */
  NNC_KERNEL_NORM_GRAD,   /* layernorm or rmsnorm backward: dx and the gamma (beta) sums */
  NNC_KERNEL_KIND_COUNT
} nnc_kernel_kind;

const char *nnc_kernel_kind_name(nnc_kernel_kind k);

typedef enum nnc_norm {
  NNC_NORM_NONE,
  NNC_NORM_LAYER,  /* (x - mean) / sqrt(var + eps) * gamma + beta */
  NNC_NORM_RMS     /* x / sqrt(mean(x^2) + eps) * gamma */
} nnc_norm;

/* What a GEMM does with its aux tensor (out's shape), in a training step
 * where an activation's input is needed again by its gradient. */
typedef enum nnc_gemm_aux {
  NNC_AUX_NONE,
  NNC_AUX_SAVE,       /* aux = alpha * A.B + bias (the activation's input) is written too; out = act(aux) */
  NNC_AUX_ACT_GRAD    /* out = act'(aux) * alpha * A.B: the GEMM before an activation's gradient (act_grad),
                         aux the activation's input; no bias, no residual */
} nnc_gemm_aux;

/* Whether a GEMM writes the bias gradient beside a weight gradient: the
 * column sums of its dy, taken from the operand the product reads anyway.
 * Then alpha is 1 and there is no batch, bias, aux or activation. */
typedef enum nnc_gemm_bgrad {
  NNC_BGRAD_NONE,
  NNC_BGRAD_A,        /* dW = dy^T x (nn.Linear's [N, K] weight; A = dy^T, a_trans): bgrad[m] = sum over k of A[m, k] */
  NNC_BGRAD_B         /* dW = x^T dy (a [K, N] weight; B = dy, not b_trans): bgrad[n] = sum over k of B[k, n] */
} nnc_gemm_bgrad;

/* out = post_norm(act(alpha * (prologue(A) . B) + bias) + residual)
 *   (* residual when residual_mul: SwiGLU's silu(gate) * up, the up
 *   projection's GEMM multiplying by the gate's activation);
 *   A [..., M, K], or [K, M] when a_trans (a folded transpose: rank 2, no
 *   prologue, e.g. x^T in a weight gradient);
 *   B [N, K] when b_trans (nn.Linear), else [..., K, N];
 *   batch dims of A and B broadcast (matmul); bias [N]; residual has out's
 *   shape. Absent operands are -1. aux_kind (above) says what aux is; with
 *   NNC_AUX_SAVE there is no residual.
 *   bgrad_from (below) says whether bgrad is written too; windowed says
 *   whether A is gathered from an image instead of read; post_norm
 *   whether the rows of the result are normalized before they are stored. */
typedef struct nnc_gemm_desc {
  int a, b, bias, residual, out;
  bool a_trans, b_trans;
  nnc_norm prologue;
  int norm_gamma, norm_beta;   /* beta is -1 for rmsnorm */
  double norm_eps;
  nnc_op act;                  /* NNC_OP_NONE or an activation op */
  bool gelu_tanh;
  bool act_last;               /* out = act(alpha * A.B + bias + residual): the residual before the
                                  activation (ResNet's relu(conv + shortcut)) */
  bool residual_mul;           /* out = act(alpha * A.B + bias) * residual; never with act_last */
  double alpha;                /* 1 unless a scalar multiply was folded in */
  nnc_gemm_aux aux_kind;
  int aux;                     /* unless aux_kind is NNC_AUX_NONE */
  nnc_gemm_bgrad bgrad_from;
  int bgrad;                   /* unless bgrad_from is NNC_BGRAD_NONE */
  bool windowed;               /* an implicit convolution: A (a, the [..., M, K] view of an im2col's
                                  windows) is never stored; the GEMM gathers its rows from the image
                                  that im2col node `window` reads (NHWC, tap-major windows, zero
                                  padding), and that node and the view belong to the kernel */
  int window;                  /* the im2col node, when windowed */
  bool pooled;                 /* a max pool over the result, which alone reads it (NHWC windows of
                                  stride = kernel, no padding, dilation 1: conv, relu, pool in one
                                  pass; nnc_compile_opts.gemm_pool): out is the pool's result, and
                                  the im2col node `pool` and the max after it belong to the kernel */
  int pool;                    /* that im2col node, when pooled */
  nnc_norm post_norm;          /* a layernorm of each row of N after everything above (passes/
                                  fold_post_norm.c: BERT's post-norm blocks, where the row kernel would
                                  read the sum back): out is the norm's output, the sum is never stored;
                                  NNC_NORM_NONE (0) otherwise */
  int post_gamma, post_beta;   /* [N] each, or -1 */
  double post_eps;
} nnc_gemm_desc;

/* out[..., t, :] = softmax(scale * q[..., t, :] . k[..., s, :] + masks) . v
 *   q [..., T, D], k [..., S, D], v [..., S, Dv], out [..., T, Dv];
 *   the key transpose of the graph is folded in. mask is a [B, S] padding mask
 *   or -1; rows with every key masked give zeros. */
/* Where a rank-4 attention operand lives when the head split or merge around
 * it was folded into the kernel (passes/fold_heads.c): element (b, h, i, c)
 * of q, k, v or out is element offset + b*sb + h*sh + i*si + c of tensor
 * `base`, e.g. q read straight from the fused qkv projection [B, T, 3*C] with
 * offset 0, sb = T*3C, sh = D, si = 3C. Not `on` (zeroed): the operand's
 * own tensor, contiguous. */
typedef struct nnc_attn_view {
  bool on;
  int base;
  nnc_dim offset, sb, sh, si;
} nnc_attn_view;

enum { NNC_ATTN_Q, NNC_ATTN_K, NNC_ATTN_V, NNC_ATTN_OUT };

/* A kv_append folded into the attention that reads its cache in place
 * (passes/fold_append.c, on a target whose attention writes the new rows
 * itself: nnc_emitter.attention_append): the kv_append node `node` runs
 * inside the attention kernel, which takes this call's T new rows from x
 * (element (b, h, t, c) of the kv_append's x at src.offset + b*src.sb +
 * h*src.sh + t*src.si + c of tensor src.base: the projection it came from,
 * or x itself) as keys S - T .. S - 1 and writes them into rows S - T ..
 * S - 1 of the cache (k's or v's view base). Not `on`: a kv_append kernel
 * of its own wrote the cache before the attention. */
typedef struct nnc_attn_append {
  bool on;
  int node;
  nnc_attn_view src;
} nnc_attn_append;

/* A rope folded into the attention (passes/fold_rope.c, on a target whose
 * attention rotates its rows itself: nnc_emitter.attention_rope): rope node
 * `node` (its attrs: base, rot_dims; its input 1: the positions, or none)
 * runs inside the attention kernel, which reads the rope's x [B, H, T, D]
 * through src (as nnc_attn_append.src) and turns the rows as it reads them.
 * rope[0]: q is that rope's output (through reshapes); rope[1]: append[0]'s
 * new key rows are (append[0].src is then the rope's src too). Not `on`: a
 * rope kernel of its own wrote the rows. */
typedef struct nnc_attn_rope {
  bool on;
  int node;
  nnc_attn_view src;
} nnc_attn_rope;

typedef struct nnc_attention_desc {
  int q, k, v, mask, out;
  int lse;                     /* f32 [..., T]: each row's log-sum-exp of its scaled, masked
                                  scores (for the backward), or -1 */
  bool causal;
  double scale;
  nnc_attn_view view[4];       /* indexed by NNC_ATTN_Q ... NNC_ATTN_OUT */
  nnc_attn_append append[2];   /* k's and v's (index NNC_ATTN_K - 1, NNC_ATTN_V - 1) */
  nnc_attn_rope rope[2];       /* q's and the new key rows' */
} nnc_attention_desc;

enum { NNC_ATTN_DOUT, NNC_ATTN_DQ, NNC_ATTN_DK, NNC_ATTN_DV };

/* The backward of an attention whose forward saved lse:
 *   P = exp(scale * q . k^T + masks - lse), delta = rowsum(dout * out),
 *   dv = P^T dout, dS = P * (dout . v^T - delta), dq = scale * dS k,
 *   dk = scale * dS^T q; P is recomputed a tile at a time, never stored.
 * fwd holds the forward's operands (q, k, v, mask, out, lse), causal and
 * scale. When the head split and merge were folded into the forward, they
 * are folded here too: fwd's views are the forward's, dout is read through
 * view[NNC_ATTN_DOUT] (the merge's gradient) and dq, dk, dv are written
 * through theirs (the split's gradient: often thirds of one [B, T, 3*C]
 * tensor, the concat of the three). Else every view is off. */
typedef struct nnc_attention_grad_desc {
  nnc_attention_desc fwd;
  int dout, dq, dk, dv;
  nnc_attn_view view[4];       /* indexed by NNC_ATTN_DOUT ... NNC_ATTN_DV */
} nnc_attention_grad_desc;

typedef struct nnc_kernel {
  nnc_kernel_kind kind;
  int nnodes;
  int *nodes;                  /* graph nodes it covers, in execution order */
  int nin, in[NNC_MAX_IO];     /* tensors read from outside the kernel */
  int nout, out[NNC_MAX_IO];   /* tensors it writes */
  nnc_srcloc loc;              /* the Lua line of its main node */
  bool at_load;                /* it reads weights alone (batch norm folded into a convolution, a weight's
                                  transpose or padding): inference runs it once the weights are loaded,
                                  not every run (passes/hoist_weights.c) */
  union {
    nnc_gemm_desc gemm;
    nnc_attention_desc attn;
    nnc_attention_grad_desc attn_grad;
    nnc_attn_view src;         /* kv_append and rope: where it reads x when a head split was folded in (on),
                                  as attention reads q: x (b, h, t, i) at base + offset + b*sb + h*sh + t*si + i */
  } d;                         /* for GEMM, the attentions, kv_append and rope; the rest read their nodes */
} nnc_kernel;

/* The index of tensor t among kernel k's inputs, or -1. */
int nnc_kernel_input(const nnc_kernel *k, int t);
/* Whether an embedding lookup among k's nodes reads t as its table (an
 * elementwise loop reading rows through ids: nnc_compile_opts.gather_loops). */
bool nnc_kernel_looks_up(const nnc_graph *g, const nnc_kernel *k, int t);
/* Kernel k's lstm_scan or gru_scan node (its last), or NULL for another
 * kernel; *proj (may be NULL) the linear computing the scan's xw when the
 * kernel took it (nnc_compile_opts.scan_input: its first node), else NULL.
 * *k_dim (may be NULL): the K of each step's product, H, or H + F with the
 * linear taken. */
const nnc_node *nnc_kernel_scan(const nnc_graph *g, const nnc_kernel *k, const nnc_node **proj, int64_t *k_dim);

/* Where one tensor lives during a run. */
typedef enum nnc_storage {
  NNC_STORE_USER,    /* a graph input or output: the caller's buffer */
  NNC_STORE_PARAM,   /* the weights */
  NNC_STORE_ARENA,   /* an intermediate at `offset` in the activation arena */
  NNC_STORE_ALIAS,   /* a view: shares the storage of `alias_of` */
  NNC_STORE_NONE     /* internal to a fused kernel: never in memory */
} nnc_storage;

typedef struct nnc_buffer {
  nnc_storage storage;
  int64_t offset, size;    /* arena bytes, at the symbols' maxima */
  int alias_of;            /* tensor id for NNC_STORE_ALIAS, else -1 */
  int first, last;         /* kernel that writes it, last kernel that reads it */
  bool in_place;           /* shares its offset with an input that dies there */
} nnc_buffer;

typedef struct nnc_memplan {
  nnc_buffer *buf;         /* one per graph tensor */
  int64_t peak;            /* arena size in bytes */
  int64_t unplanned;       /* sum of all arena tensors' sizes: the no-reuse cost */
  int64_t alignment;       /* of every offset, in bytes */
} nnc_memplan;

typedef struct nnc_schedule {
  const nnc_graph *g;
  nnc_kernel *k; int nk, cap_k;
  int *kernel_of_node;     /* g->nnodes entries: kernel index, -1 for dead nodes */
  nnc_memplan plan;        /* filled by nnc_pass_memplan */
} nnc_schedule;

void nnc_schedule_init(nnc_schedule *s, const nnc_graph *g);
void nnc_schedule_free(nnc_schedule *s);
/* Removes the kernels k with drop[k] (their nodes freed: a pass that folded
 * them elsewhere has moved or cleared them), keeping the others' order, and
 * renumbers kernel_of_node. */
nnc_status nnc_schedule_drop(nnc_schedule *s, const bool *drop, nnc_error *err);
/* One kernel's step of a folding pass: may fold other kernels into kernel
 * ki (marking them in drop) and sets *folded when it does; ctx is the
 * pass's own. */
typedef nnc_status (*nnc_fold_fn)(nnc_schedule *s, const nnc_uses *u, int ki, const void *ctx, bool *drop,
                                  bool *folded, nnc_error *err);
/* Runs fold over every kernel with the graph's uses, then drops what it
 * folded (nnc_schedule_drop); pass names it in the out-of-memory message. */
nnc_status nnc_schedule_fold(nnc_schedule *s, const char *pass, nnc_fold_fn fold, const void *ctx, nnc_error *err);
/* Appends a kernel (copying `nodes`) and returns its index in *idx. */
nnc_status nnc_schedule_add(nnc_schedule *s, nnc_kernel_kind kind, int nnodes,
                            const int *nodes, int *idx, nnc_error *err);

#endif
