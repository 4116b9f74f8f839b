/* compiler/ir/ir.h — the graph every stage of nnc shares.
 *
 * A model is a graph of tensors and nodes kept in flat arrays and referred to
 * by integer ids (an index into the array). Tensors are inputs (given per
 * call), parameters (loaded from the weights file, named by their safetensors
 * key) or values (computed by exactly one node). Nodes never disappear from the
 * array: a pass that removes one marks it dead, so ids stay stable and every
 * message can still point at the Lua line that created it.
 *
 * Shapes may use symbolic dims (batch, sequence length) that have a maximum;
 * a dim is a constant times a product of symbols, so `B*T` after a reshape is
 * still exact. Sizes are planned at the maxima and given per call.
 *
 * Axes in the IR are 0-based; the Lua DSL is 1-based (and -1 is the last axis)
 * and converts at its boundary. */
#ifndef NNC_IR_H
#define NNC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define NNC_MAX_RANK 6
#define NNC_MAX_IO 16      /* inputs or outputs of one node (concat, split) */
#define NNC_DIM_SYMS 4     /* symbolic factors in one dim */

/* ---------------------------------------------------------------- dtypes */

typedef enum nnc_dtype {
  NNC_F32,
  NNC_F16,
  NNC_BF16,
  NNC_I32,
  NNC_DTYPE_COUNT
} nnc_dtype;

const char *nnc_dtype_name(nnc_dtype t);   /* "f32", "f16", "bf16", "i32" */
int nnc_dtype_size(nnc_dtype t);           /* bytes per element */
bool nnc_dtype_is_float(nnc_dtype t);
/* Parses a name as written in the DSL or a safetensors header ("F32", "f32",
 * "BF16", "I32", ...); false when unknown. */
bool nnc_dtype_parse(const char *name, nnc_dtype *out);

/* ------------------------------------------------------------------ dims */

/* A symbolic dimension, declared in the model with its maximum. */
typedef struct nnc_symbol {
  char name[32];
  int64_t max;
  nnc_srcloc loc;
} nnc_symbol;

/* value = k * prod(symbols[sym[i]] for i < nsym); sym[] is sorted and may
 * repeat. A constant dim has nsym == 0. */
typedef struct nnc_dim {
  int64_t k;
  int nsym;
  int sym[NNC_DIM_SYMS];
} nnc_dim;

nnc_dim nnc_dim_const(int64_t k);
nnc_dim nnc_dim_sym(int sym);
bool nnc_dim_is_const(nnc_dim d);
bool nnc_dim_eq(nnc_dim a, nnc_dim b);
bool nnc_dim_eq_const(nnc_dim a, int64_t k);
/* a * b; false when the product has more than NNC_DIM_SYMS symbols or the
 * constant overflows. */
bool nnc_dim_mul(nnc_dim a, nnc_dim b, nnc_dim *out);
/* a / b when it is exact (b's symbols are a sub-multiset of a's and the
 * constants divide); false otherwise. */
bool nnc_dim_div(nnc_dim a, nnc_dim b, nnc_dim *out);
/* The value with every symbol at the given sizes (vals indexed by symbol id). */
int64_t nnc_dim_eval(nnc_dim d, const int64_t *vals);

/* ------------------------------------------------------------------- ops */

/* One entry per operation of the model language. The table in op_table.c
 * gives each its name, class and arity; shape rules are in passes/infer.c. */
typedef enum nnc_op {
  NNC_OP_NONE,
  /* elementwise, one input */
  NNC_OP_RELU, NNC_OP_GELU, NNC_OP_SILU, NNC_OP_SIGMOID, NNC_OP_TANH,
  NNC_OP_EXP, NNC_OP_LOG, NNC_OP_SQRT, NNC_OP_NEG, NNC_OP_CAST,
  /* elementwise with a scalar attribute: x+s, x-s, s-x, x*s, x/s, s/x, x^s */
  NNC_OP_ADD_S, NNC_OP_SUB_S, NNC_OP_RSUB_S, NNC_OP_MUL_S, NNC_OP_DIV_S,
  NNC_OP_RDIV_S, NNC_OP_POW_S,
  /* elementwise, two inputs with numpy broadcasting */
  NNC_OP_ADD, NNC_OP_SUB, NNC_OP_MUL, NNC_OP_DIV,
  /* masks on attention scores [..., T, S]: masked entries become -inf */
  NNC_OP_CAUSAL_MASK,   /* key j masked for query i when j > i + (S - T) */
  NNC_OP_PADDING_MASK,  /* in[1] is a [B, S] mask; key j of batch b masked when mask == 0 */
  /* matrix products */
  NNC_OP_LINEAR,        /* in: x [..., K], weight, [bias N]; weight [N, K], or [K, N] when attrs.weight_in_out */
  NNC_OP_MATMUL,        /* in: a [..., M, K], b [..., K, N]; batch dims broadcast */
  /* row operations over the last axis (softmax: over attrs.axis) */
  NNC_OP_SOFTMAX,
  NNC_OP_LAYERNORM,     /* in: x, gamma, beta; attrs.eps */
  NNC_OP_RMSNORM,       /* in: x, gamma; attrs.eps */
  /* reductions over attrs.axis, keeping it as size 1 when attrs.keepdim */
  NNC_OP_SUM, NNC_OP_MEAN, NNC_OP_MAX,
  /* data movement */
  NNC_OP_RESHAPE,       /* output shape is the output tensor's shape */
  NNC_OP_TRANSPOSE,     /* output axis i is input axis attrs.perm[i] */
  NNC_OP_SLICE,         /* [attrs.start, attrs.stop) along attrs.axis */
  NNC_OP_CONCAT,        /* along attrs.axis */
  NNC_OP_SPLIT,         /* along attrs.axis; the sizes are the outputs' shapes */
  /* lookup */
  NNC_OP_EMBEDDING,     /* in: table [V, C], ids i32 [...]; out [..., C] */
  /* loss */
  NNC_OP_CROSS_ENTROPY, /* in: logits [..., V], targets i32 [...]; out: mean loss, shape [] */
  /* attention as one op: what --train turns the sdpa pattern into (passes/attention_op.c) so
   * that its gradient is a flash-attention backward instead of T x T matrices */
  NNC_OP_ATTENTION,     /* in: q [..., T, D], k [..., S, D], v [..., S, Dv], [mask [B, S]];
                           attrs.scalar (the scale), attrs.causal; out: o [..., T, Dv] and
                           lse f32 [..., T], each row's log-sum-exp of its scaled, masked scores */
  /* gradients: what the autodiff pass (passes/autodiff.c) writes besides the
   * ops above. Each is the VJP of one forward op that the others cannot
   * express without a copy or a T x T detour. */
  NNC_OP_ACT_GRAD,      /* in: x, dy; dy * act'(x) for the activation attrs.act (gelu: attrs.gelu_tanh) */
  NNC_OP_EQUAL,         /* in: a, b (broadcasting); 1 where a == b, else 0: where a max came from */
  NNC_OP_EXPAND,        /* in: x; broadcast (numpy rules) to the output tensor's shape: a sum's gradient */
  NNC_OP_PAD,           /* in: x; the output tensor's shape, zero but for x at attrs.start along attrs.axis:
                           a slice's gradient */
  NNC_OP_EMBEDDING_GRAD, /* in: dy [..., C], ids i32 [...]; out [V, C] (its shape set by the caller):
                            row ids[i] is the sum of the dy rows that looked it up */
  NNC_OP_CROSS_ENTROPY_GRAD, /* in: logits [..., V], targets i32 [...], dloss []; out: d loss / d logits,
                                (softmax(logits) - onehot(targets)) * dloss / rows */
  NNC_OP_ATTENTION_GRAD, /* in: q, k, v, o, lse, do, [mask] of an attention; attrs as its; out: dq, dk, dv */
  NNC_OP_LAYERNORM_GRAD, /* in: x, gamma, dy, [dres]; attrs.eps; out: dx (plus dres: the residual stream's
                            gradient, added in the same pass), dgamma, dbeta (the row statistics recomputed) */
  NNC_OP_RMSNORM_GRAD,   /* in: x, gamma, dy, [dres]; attrs.eps; out: dx (plus dres), dgamma */
  /* windows of an image: what convolution (a GEMM after it) and pooling (a
   * reduction after it) read */
  NNC_OP_IM2COL,        /* in: x [N, C, H, W] ([N, H, W, C] when attrs.win.nhwc); out [N, OH, OW, C, KH*KW]:
                           (n, oh, ow, c, i*KW + j) is x[n, c, oh*SH - PH + i*DH, ow*SW - PW + j*DW],
                           attrs.scalar outside the image (0, or -inf for max pooling); with
                           attrs.win.tap_major, out [N, OH, OW, KH*KW, C] and (n, oh, ow, i*KW + j, c) */
  NNC_OP_COL2IM,        /* in: windows [N, OH, OW, C, KH*KW] (or tap-major); out: the image, its shape set by the caller: each
                           pixel the sum of the window entries im2col (the same attrs.win) read it into; im2col's
                           gradient */
  /* recurrent layers, one direction of one layer each: the input projection for every step is a linear
   * before it (one GEMM); these run the steps in order. Time runs backwards when attrs.reverse. */
  NNC_OP_LSTM_SCAN,     /* in: xw [B, T, 4H] (x W_ih^T + b_ih, gates i, f, g, o as PyTorch), w_hh [4H, H], b_hh [4H],
                           [h0 [B, H], c0 [B, H]] (zeros when absent); out: y [B, T, H], h_n [B, H], c_n [B, H] */
  NNC_OP_GRU_SCAN,      /* in: xw [B, T, 3H] (gates r, z, n), w_hh [3H, H], b_hh [3H], [h0 [B, H]];
                           out: y [B, T, H], h_n [B, H]; n = tanh(xw_n + r * (W_hn h + b_hn)) as PyTorch */
  /* their gradients, backward through time: a first pass recomputes each step's gates (into `saved`, which
   * nothing else reads) and the h each step read (hprev), a second walks the steps back. The recurrent
   * weight's gradient is then one GEMM outside, da^T hprev over all B*T rows, and its bias's a column sum */
  NNC_OP_LSTM_SCAN_GRAD, /* in: xw, w_hh, b_hh, h0, c0, y, dy, dh_n, dc_n (zeros for what the forward lacked or
                            nothing read); out: dxw [B, T, 4H] (also da: the same), dh0, dc0 [B, H], hprev [B, T, H],
                            saved [B, T, 5H] (i, f, g, o, c) */
  NNC_OP_GRU_SCAN_GRAD,  /* in: xw, w_hh, b_hh, h0, y, dy, dh_n; out: dxw [B, T, 3H], da [B, T, 3H] (d(W_hh h + b_hh):
                            dxw but for the n gate, times r), dh0 [B, H], hprev [B, T, H], saved [B, T, 4H]
                            (r, z, n, W_hn h + b_hn) */
  /* rotary position embedding (LLaMA's, Hugging Face's rotate_half form): the first attrs.rot_dims entries
   * of the last axis are two halves, entry i < rot_dims/2 paired with i + rot_dims/2 and the pair turned by
   * theta = pos * attrs.scalar^(-2i/rot_dims) (attrs.scalar the base); the rest pass through. The position
   * of an element is its index along axis attrs.axis (the time axis), or positions[t] ([T]) or
   * positions[b, t] ([B, T], b the index along axis 0) when given. attrs.reverse turns by -theta (the
   * gradient). A loop kernel of its own (a MOVE kernel), like im2col */
  NNC_OP_ROPE,          /* in: x [..., D], [positions i32 [T] or [B, T]]; out: x's shape */
  /* a key/value cache for generation: the one op that writes a state tensor. x's T rows (the keys or
   * values of this call's tokens) go to rows S - T .. S - 1 of the cache, which then holds every key
   * the call attends to; S (a symbol: the keys after this call) >= T is checked when a call starts.
   * The output is the cache's first S rows. The attention reading it reads the cache in place
   * (passes/fold_heads.c) and the output is then never stored */
  NNC_OP_KV_APPEND,     /* in: cache [..., C, D] (a state; C its capacity, S's maximum), x [..., T, D];
                           out: [..., S, D] */
  NNC_OP_ALL_REDUCE,    /* in: x; out: x's shape, the sum over the attrs.ranks ranks of a parallel plan of
                           their x, times attrs.scalar (passes/parallel.c inserts it; the runtime's
                           communicator runs it) */
  NNC_OP_ALL_GATHER,    /* in: x [...]; out: [attrs.ranks, ...], every rank's x stacked in rank order (what the
                           communicator's all_gather writes: rank-major chunks). A gather along another axis is
                           this, then a transpose and a reshape (passes/parallel_vocab.c) */
  /* tensor-parallel training (passes/parallel_vocab.c, autodiff_rules.c): ops that read the rank they run on */
  NNC_OP_RANK_SLICE,    /* in: x [attrs.ranks, ...]; out [...]: this rank's entry along axis 0 (all_gather's
                           gradient: each rank keeps its own part of the gathered tensor's gradient) */
  NNC_OP_CE_SHARD,      /* in: logits [..., R] (this rank's classes rank*R .. rank*R + R - 1 of attrs.vocab,
                           split over attrs.ranks), targets i32 [...], shift [...] (the rows' max over every
                           rank); out [..., 2]: the sum over the rank's classes below attrs.vocab of
                           exp(logit - shift), and logit[target] - shift where the rank holds the target, else 0:
                           summed over the ranks, a row's loss is log(sum) - that */
  NNC_OP_CE_SHARD_GRAD, /* in: logits, targets, shift (as cross_entropy_shard's), dstats [..., 2]; out [..., R]:
                           dstats[0] * exp(logit - shift) + dstats[1] * onehot(target) on the rank's classes,
                           0 on its padded ones (shift is a constant of the loss: no gradient) */
  NNC_OP_COUNT
} nnc_op;

typedef enum nnc_op_class {
  NNC_CLASS_NONE,
  NNC_CLASS_UNARY,      /* elementwise, one input (scalar ops included) */
  NNC_CLASS_BINARY,     /* elementwise, two inputs, broadcasting */
  NNC_CLASS_MASK,       /* elementwise on scores, index dependent */
  NNC_CLASS_MATMUL,
  NNC_CLASS_ROW,        /* softmax and the norms */
  NNC_CLASS_REDUCE,
  NNC_CLASS_MOVE,       /* reshape, transpose, slice, concat, split */
  NNC_CLASS_GATHER,     /* embedding and its gradient (a scatter-add) */
  NNC_CLASS_LOSS,       /* cross-entropy and its gradient */
  NNC_CLASS_ATTENTION   /* attention and its gradient */
} nnc_op_class;

typedef struct nnc_op_info {
  const char *name;     /* as written in the DSL, e.g. "layernorm" */
  nnc_op_class cls;
  int min_in, max_in;   /* arity; max_in == NNC_MAX_IO for concat */
  int nout;             /* outputs; 0 for split (its outputs' count is the model's) */
} nnc_op_info;

const nnc_op_info *nnc_op_info_of(nnc_op op);
/* Elementwise: unary, scalar, binary and mask ops (they fuse into one loop). */
bool nnc_op_is_elementwise(nnc_op op);
/* Activations that a GEMM epilogue can apply. */
bool nnc_op_is_activation(nnc_op op);

/* A sliding window over an image's height and width (im2col). */
typedef struct nnc_window {
  int kh, kw;                /* kernel */
  int sh, sw;                /* stride */
  int ph, pw;                /* zero padding on each side */
  int dh, dw;                /* dilation */
  bool nhwc;                 /* the image is [N, H, W, C], not [N, C, H, W] */
  bool tap_major;            /* im2col's windows are [N, OH, OW, KH*KW, C]: each tap's channels a
                                contiguous run of an NHWC image (a convolution's, with its weight
                                as [O, KH, KW, C]) */
} nnc_window;

/* Attributes of a node. One struct with named fields for every op; the
 * comment on each says which ops read it. Unused fields stay zero. */
typedef struct nnc_attrs {
  int axis;                  /* softmax, reductions, slice, concat, split */
  bool keepdim;              /* reductions */
  int perm[NNC_MAX_RANK];    /* transpose */
  nnc_dim start, stop;       /* slice (may be symbolic: wpe[0:T]) */
  double scalar;             /* scalar ops */
  double eps;                /* layernorm, rmsnorm */
  bool gelu_tanh;            /* gelu: tanh approximation instead of erf */
  bool weight_in_out;        /* linear: weight stored [in, out] (GPT-2 Conv1D) */
  nnc_dtype to;              /* cast */
  nnc_op act;                /* act_grad: the activation whose derivative it applies */
  bool mask_zero;            /* masks: masked entries become 0, not -inf (a mask's gradient) */
  bool causal;               /* attention, attention_grad */
  nnc_window win;            /* im2col */
  bool reverse;              /* lstm_scan, gru_scan and their gradients: from the last step to the first */
                             /* rope: turn by -theta (its gradient) */
  int rot_dims;              /* rope: how many leading entries of the last axis turn (even, >= 2) */
  int ranks;                 /* all_reduce, all_gather: the ranks it spans; embedding: > 1 when the table
                                is this rank's rows of a vocabulary split over that many ranks (the
                                table's first row is id rank * rows; other ids give zeros) */
  int64_t vocab;             /* embedding with ranks > 1: the whole vocabulary's rows (the ids' bound) */
                             /* embedding_grad with ranks > 1: the same (rows of other ranks' ids left out) */
  bool reduce_max;           /* all_reduce: the max over the ranks instead of the sum */
} nnc_attrs;

/* --------------------------------------------------------------- tensors */

typedef enum nnc_tensor_kind {
  NNC_TENSOR_INPUT,   /* given per call */
  NNC_TENSOR_PARAM,   /* loaded from the weights file under its name */
  NNC_TENSOR_VALUE,   /* computed by node `producer` */
  NNC_TENSOR_STATE    /* held by the model instance from one call to the next (a kv cache), zero when the
                         instance is created; only kv_append writes it, in place */
} nnc_tensor_kind;

/* A parameter under a parallel plan: the weights file holds the whole
 * tensor; each of `parts` ranks holds one slice of it along `axis`. Seen as
 * groups x parts x chunk along that axis, rank r holds [:, r, :]: a fused
 * q|k|v projection (groups 3) gives each rank its heads of each of the three.
 * parts 0: the rank holds the whole tensor. whole > 0: the slices are padded
 * (groups 1): the file's length along axis is `whole`, which need not divide
 * by parts; each rank holds chunk = ceil(whole / parts) entries, rank r the
 * file's [r * chunk, min((r + 1) * chunk, whole)) and zeros after them (a
 * vocabulary split, passes/parallel_vocab.c). */
typedef struct nnc_shard {
  int axis;
  int parts;
  int groups;
  int64_t whole;
} nnc_shard;

/* A parameter the model holds quantized (--quantize, passes/quantize.c):
 * the weights file's f32 tensor becomes, at load, int8 values with one f32
 * scale per slice along `axis` (the output channel: 0 for nn.Linear's
 * [N, K], 1 for a [K, N] weight), symmetric: scale = max|w| / 127, q =
 * round(w / scale). The tensor's dtype stays f32: the graph computes with
 * the dequantized weight q * scale, so the reference evaluator given those
 * values evaluates the quantized model, and given the file's, the float
 * one. The layout in memory is the target's (its GEMM's packing).
 * a8 (--quantize=w8a8): the GEMM reading it also quantizes its A to int8
 * per row when it runs; on C SIMD the weight's grid is 6-bit (scale =
 * max|w| / 31, q in [-31, 31]: the AVX2 int8 products' int16 sums cannot
 * saturate), on a GPU the full 8 bits, and the tensor's dtype is the
 * storage dtype (bf16, f16 or f32); qmax says which grid. The reference,
 * given q * scale, is then exact in the weights only. */
typedef enum nnc_quant_kind {
  NNC_QUANT_NONE,
  NNC_QUANT_INT8_CHANNEL,
  NNC_QUANT_INT4_GROUP,  /* --quantize=int4w: 4-bit, a scale per `group` k of a channel (max|w| / 7) */
  NNC_QUANT_FP8_CHANNEL  /* --precision=fp8: e4m3, a scale per output channel (max|w| / 448), held [N, K]
                            (K-major, what cuBLASLt's FP8 GEMMs read) whatever the file's layout; the
                            tensor's dtype is bf16 (the storage of everything else) */
} nnc_quant_kind;

typedef struct nnc_quant {
  nnc_quant_kind kind;
  int axis;
  int a8;
  int qmax;              /* the largest |q| of its grid: 127 (int8w; w8a8 on a GPU), 31 (w8a8 on C SIMD),
                            7 (int4w), 448 (fp8) */
  int group;             /* INT4_GROUP: k per scale along the other axis (128; the last group of a
                            channel is shorter when K is not a multiple) */
  int tied;              /* FP8_CHANNEL: other readers than linears read it too (a head tied to the
                            embedding's table): its values stay bf16 for them, and the linears read an
                            e4m3 copy made at load */
} nnc_quant;

typedef struct nnc_tensor {
  char *name;            /* input name, safetensors key, or a label such as "h.3.mlp.c_fc" */
  nnc_tensor_kind kind;
  nnc_dtype dtype;
  int rank;
  nnc_dim shape[NNC_MAX_RANK];   /* row-major, contiguous */
  int producer;          /* node id for values, -1 otherwise */
  nnc_srcloc loc;        /* where it was declared or computed */
  nnc_shard shard;       /* parameters: this rank's slice of the file's tensor (shape is the slice's) */
  nnc_quant quant;       /* parameters: how the model holds it (kind NONE: as its dtype) */
} nnc_tensor;

/* ----------------------------------------------------------------- nodes */

typedef struct nnc_node {
  nnc_op op;
  int nin, in[NNC_MAX_IO];     /* tensor ids */
  int nout, out[NNC_MAX_IO];   /* tensor ids, all produced here */
  nnc_attrs attrs;
  nnc_srcloc loc;              /* the Lua line that called the op */
  const char *label;           /* user-facing name of what it computes (interned) */
  bool dead;                   /* removed by a pass */
  bool recompute;              /* a forward node's copy that the backward reads instead of a saved
                                  activation (passes/recompute.c): CSE keeps it apart, fusion never
                                  groups it with an original */
} nnc_node;

/* ----------------------------------------------------------------- graph */

typedef struct nnc_output {
  char *name;
  int tensor;
  nnc_srcloc loc;
} nnc_output;

typedef struct nnc_graph {
  nnc_tensor *tensors; int ntensors, cap_tensors;
  nnc_node *nodes;     int nnodes, cap_nodes;
  nnc_symbol *syms;    int nsyms, cap_syms;
  int *inputs;         int ninputs, cap_inputs;    /* tensor ids, declaration order */
  int *params;         int nparams, cap_params;    /* tensor ids, declaration order */
  int *states;         int nstates, cap_states;    /* tensor ids, declaration order */
  nnc_output *outputs; int noutputs, cap_outputs;
  char **strings;      int nstrings, cap_strings;  /* interned file names and labels */
  char *name;          /* model name, from the file name ("gpt2") */
  int ranks;           /* processes one call spans under a parallel plan (--parallel); 0 or 1: one */
} nnc_graph;

void nnc_graph_init(nnc_graph *g);
void nnc_graph_free(nnc_graph *g);

/* Returns a copy of s owned by the graph (the same pointer for equal strings),
 * or NULL when out of memory. */
const char *nnc_graph_intern(nnc_graph *g, const char *s);

/* Declares a symbolic dim; a second declaration with the same name must give
 * the same maximum and returns the same id. */
nnc_status nnc_graph_add_symbol(nnc_graph *g, const char *name, int64_t max,
                                nnc_srcloc loc, int *id, nnc_error *err);
/* Finds a symbol by name; -1 when absent. */
int nnc_graph_find_symbol(const nnc_graph *g, const char *name);

nnc_status nnc_graph_add_input(nnc_graph *g, const char *name, nnc_dtype dtype,
                               int rank, const nnc_dim *shape, nnc_srcloc loc,
                               int *id, nnc_error *err);
/* A parameter named like an existing one returns the same id when dtype and
 * shape agree (tied weights) and fails otherwise, naming both lines. */
nnc_status nnc_graph_add_param(nnc_graph *g, const char *name, nnc_dtype dtype,
                               int rank, const nnc_dim *shape, nnc_srcloc loc,
                               int *id, nnc_error *err);
/* Adds a node and `nout` value tensors for its outputs, named after the label
 * (with "#i" when there are several). Output dtypes and shapes are left for
 * shape inference (passes/infer.h) to fill; *node_id receives the node. */
/* A state tensor (NNC_TENSOR_STATE); names are unique among states. */
nnc_status nnc_graph_add_state(nnc_graph *g, const char *name, nnc_dtype dtype,
                               int rank, const nnc_dim *shape, nnc_srcloc loc,
                               int *id, nnc_error *err);
nnc_status nnc_graph_add_node(nnc_graph *g, nnc_op op, int nin, const int *in,
                              const nnc_attrs *attrs, int nout, nnc_srcloc loc,
                              const char *label, int *node_id, nnc_error *err);
nnc_status nnc_graph_add_output(nnc_graph *g, const char *name, int tensor,
                                nnc_srcloc loc, nnc_error *err);
/* Turns node `node` into `op` reading `in`, keeping its outputs and adding
 * `extra` new ones after them (their shapes left for inference): a pass that
 * replaces a group of nodes by one puts it in the place of the group's last,
 * so the node order stays topological. */
nnc_status nnc_graph_rewrite_node(nnc_graph *g, int node, nnc_op op, int nin, const int *in,
                                  const nnc_attrs *attrs, int extra, nnc_error *err);

/* Moves node `from` to index `to` (<= from), the nodes between one place
 * later, their outputs' producer ids following: a pass inserts a node into
 * the order by adding it, then moving it. */
nnc_status nnc_graph_move_node(nnc_graph *g, int from, int to, nnc_error *err);

/* Number of elements of a tensor with every symbol at its maximum. */
int64_t nnc_tensor_max_elems(const nnc_graph *g, const nnc_tensor *t);
/* Number of elements with symbols at the sizes in vals (indexed by symbol id). */
int64_t nnc_tensor_elems(const nnc_tensor *t, const int64_t *vals);

/* Writes "B", "768", "3*B*T" into buf; returns buf. */
char *nnc_dim_format(const nnc_graph *g, nnc_dim d, char *buf, size_t n);
/* Writes "[B,T,768]" into buf; returns buf. */
char *nnc_shape_format(const nnc_graph *g, int rank, const nnc_dim *shape,
                       char *buf, size_t n);

/* Consumers: for each tensor, the live nodes that read it (filled on demand by
 * passes; freed with nnc_uses_free). */
typedef struct nnc_uses {
  int *start;    /* ntensors + 1 offsets into node */
  int *node;     /* node ids, in node order */
} nnc_uses;
nnc_status nnc_uses_build(const nnc_graph *g, nnc_uses *u, nnc_error *err);
void nnc_uses_free(nnc_uses *u);
static inline int nnc_uses_count(const nnc_uses *u, int t) { return u->start[t + 1] - u->start[t]; }
/* True when the tensor is one of the graph's outputs. */
bool nnc_graph_is_output(const nnc_graph *g, int tensor);
/* True for a weight named like batch norm's running variance ("...running_var"),
 * which the model square-roots: random weights for it must be positive. */
bool nnc_name_is_variance(const char *name);

#endif
