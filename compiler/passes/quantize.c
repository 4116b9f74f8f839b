/* compiler/passes/quantize.c — --quantize: which weights the model holds
 * quantized.
 *
 * int8w (weight-only int8): the weight of every linear layer, an f32
 * parameter of rank 2 that nothing but linear layers read (as their weight),
 * is held as int8 with a scale per output channel (nnc_tensor.quant). The
 * graph does not change otherwise: its dtype stays f32 and each linear still
 * reads the parameter, so fusion, planning and the reference see the model
 * they saw; the emitter's GEMM reads the int8 values instead, and the folder
 * quantizes the file's f32 tensor when it loads it. Embeddings, norms,
 * biases and a weight tied to an embedding (GPT-2's wte, the LM head's too)
 * stay f32: a lookup reads a few rows, not the whole table, and the small
 * vectors are not worth a scale each.
 *
 * w8a8: the same weights (on a 6-bit grid on C SIMD, nnc_quant.a8), and
 * each GEMM that reads one quantizes its A to int8 per row (the row's
 * absmax) when it runs, so that the products are int8 x int8 in int32. No
 * calibration: the scales come from the rows themselves. On a GPU (device;
 * int8w there too) the weights are the storage dtype's (bf16 under
 * --precision=bf16), on the full 8-bit grid (no AVX2 int16 sums to keep
 * from saturating), and K must be a multiple of 16: the int8 GEMMs read
 * 16-byte pieces of rows (a weight outside that keeps its float GEMM).
 *
 * int4w: the same weights as int4, a scale per group of 128 consecutive k
 * of an output channel (max|w| / 7 over the group; the last group shorter
 * when K is not a multiple of 128), two weights a byte: an eighth of f32's
 * bytes plus 4 bytes of scale per 128 weights. On a GPU K must be a
 * multiple of 32 (the GEMM reads 16-byte pieces of rows: 32 k).
 *
 * fp8 (--precision=fp8, CUDA): the same weights, already bf16 by then, held
 * as e4m3 with a scale per output channel, where K and N are multiples of
 * 16 (cuBLASLt's FP8 kernels want 16-byte rows of both operands; a weight
 * outside that stays bf16). Each GEMM reading one quantizes its A to e4m3
 * per row as it runs. A weight that other ops read too (a head tied to the
 * embedding: the gather reads a few rows of it, the head GEMM all of it) is
 * marked `tied`: it stays bf16 for those readers and the folder makes an
 * e4m3 copy for its linears at load, under the same rule: N a multiple of
 * 16. GPT-2's 50257 is not, so its head stays bf16: with the copy's rows
 * padded to 50272 cuBLASLt has no algorithm writing the 50257-wide logits
 * (rows not 16-byte aligned) and the fallback (unscaled f32 slices, then
 * the epilogue) took 3.75 ms on an H200 against the bf16 head's 1.44; nnc's
 * own wgmma FP8 GEMM (cuda-sm90a) writes those rows but took 1.56 ms, and
 * the FP8 head costs accuracy (random weights: cosine 0.99976 -> 0.99913),
 * so the rule stays (commit 6ac3067 has the any-N wiring); a vocabulary
 * padded in the model (50304, as llm.c's) gets the copy. Only
 * fp8 does this: for int8w/w8a8/int4w the copy would be read by CPU GEMMs
 * that gain less than the memory it costs. */
#include <string.h>

#include "passes.h"

nnc_status nnc_quantize_parse(const char *name, nnc_quantize *out, nnc_error *err) {
  if (!name || strcmp(name, "none") == 0) *out = NNC_QUANTIZE_NONE;
  else if (strcmp(name, "int8w") == 0) *out = NNC_QUANTIZE_INT8W;
  else if (strcmp(name, "w8a8") == 0) *out = NNC_QUANTIZE_W8A8;
  else if (strcmp(name, "int4w") == 0) *out = NNC_QUANTIZE_INT4W;
  else return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--quantize: expected none, int8w, w8a8 or int4w, found \"%s\"",
                         name);
  return NNC_OK;
}

const char *nnc_quantize_name(nnc_quantize q) {
  return q == NNC_QUANTIZE_INT8W ? "int8w" : q == NNC_QUANTIZE_W8A8 ? "w8a8" : q == NNC_QUANTIZE_INT4W ? "int4w"
       : q == NNC_QUANTIZE_FP8 ? "fp8" : "none";
}

/* The output-channel axis of parameter p when every live linear reading it
 * reads it as its weight alone (all with the same layout), at least one
 * does, and (unless `others` is given) nothing else reads it; -1 otherwise.
 * *others: whether ops that are not linears read it too. */
static int channel_axis(const nnc_graph *g, int p, bool *others) {
  int axis = -1;
  if (others) *others = false;
  for (int n = 0; n < g->nnodes; n++) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead) continue;
    for (int i = 0; i < x->nin; i++) {
      if (x->in[i] != p) continue;
      if (x->op != NNC_OP_LINEAR && others) {
        *others = true;
        continue;
      }
      if (x->op != NNC_OP_LINEAR || i != 1) return -1;
      int a = x->attrs.weight_in_out ? 1 : 0;   /* nn.Linear's [N, K], or [K, N] */
      if (axis >= 0 && axis != a) return -1;
      axis = a;
    }
  }
  return axis;
}

/* fp8: both dims constant multiples of 16 (cuBLASLt's FP8 rows of 16 bytes). */
static bool fp8_fits(const nnc_tensor *t) {
  for (int d = 0; d < 2; d++)
    if (!nnc_dim_is_const(t->shape[d]) || t->shape[d].k % 16 != 0) return false;
  return true;
}

/* int8 on a GPU: both dims constant, K (the axis other than the channels') a
 * multiple of `k_step` (16 int8 or 32 int4 k: 16 bytes). */
static bool device_fits(const nnc_tensor *t, int axis, int k_step) {
  return nnc_dim_is_const(t->shape[0]) && nnc_dim_is_const(t->shape[1]) && t->shape[1 - axis].k % k_step == 0;
}

/* The dtypes a weight may have to be held quantized: fp8's bf16, a GPU's
 * storage dtypes, else f32. */
static bool from_dtype(nnc_dtype d, nnc_quantize q, bool device) {
  if (q == NNC_QUANTIZE_FP8) return d == NNC_BF16;
  if (device) return d == NNC_F32 || d == NNC_BF16 || d == NNC_F16;
  return d == NNC_F32;
}

nnc_status nnc_pass_quantize(nnc_graph *g, nnc_quantize q, bool device, int *count, nnc_error *err) {
  (void)err;
  int marked = 0;
  bool on_gpu = device && (q == NNC_QUANTIZE_W8A8 || q == NNC_QUANTIZE_INT8W || q == NNC_QUANTIZE_INT4W);
  for (int i = 0; q != NNC_QUANTIZE_NONE && i < g->nparams; i++) {
    nnc_tensor *t = &g->tensors[g->params[i]];
    if (!from_dtype(t->dtype, q, on_gpu) || t->rank != 2 || t->shard.parts || t->quant.kind != NNC_QUANT_NONE) continue;
    bool tied = false;
    int axis = channel_axis(g, g->params[i], q == NNC_QUANTIZE_FP8 ? &tied : NULL);
    if (axis < 0 || (q == NNC_QUANTIZE_FP8 && !fp8_fits(t)) ||
        (on_gpu && !device_fits(t, axis, q == NNC_QUANTIZE_INT4W ? 32 : 16)))
      continue;
    t->quant.kind = q == NNC_QUANTIZE_INT4W ? NNC_QUANT_INT4_GROUP
                  : q == NNC_QUANTIZE_FP8   ? NNC_QUANT_FP8_CHANNEL : NNC_QUANT_INT8_CHANNEL;
    t->quant.axis = axis;
    t->quant.a8 = q == NNC_QUANTIZE_W8A8;
    t->quant.qmax = q == NNC_QUANTIZE_INT4W ? 7 : q == NNC_QUANTIZE_FP8 ? 448 : q == NNC_QUANTIZE_W8A8 && !on_gpu ? 31 : 127;
    t->quant.group = q == NNC_QUANTIZE_INT4W ? NNC_QUANTIZE_INT4_GROUP : 0;
    t->quant.tied = tied;
    marked++;
  }
  if (count) *count = marked;
  return NNC_OK;
}
