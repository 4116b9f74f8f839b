/* tests/unit/test_broken_models.c — the corpus of broken models.
 *
 * Every file in tests/broken/ is a small model with one mistake. Each is run
 * through the front-end and the passes; the test checks the status and the
 * whole message, which must name the file and line, say what was expected and
 * what was found. The suite runs under AddressSanitizer, so a crash or a leak
 * on any error path fails it too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "ir/schedule.h"
#include "passes/passes.h"

#ifndef NNC_SOURCE_ROOT
#define NNC_SOURCE_ROOT "."
#endif

typedef struct broken_case {
  const char *file;     /* in tests/broken/ */
  const char *define;   /* one -D name=value, or NULL */
  nnc_status status;
  const char *msg;      /* the whole message, paths as given: tests/broken/<file> */
} broken_case;

#define B "tests/broken/"

static const broken_case cases[] = {
    /* Lua itself */
    {"syntax.lua", NULL, NNC_E_MODEL, B "syntax.lua:4: 'then' expected near 'output'"},
    {"unknown_op.lua", NULL, NNC_E_MODEL, B "unknown_op.lua:3: attempt to call a nil value (global 'fft2d')"},
    {"model_error.lua", NULL, NNC_E_MODEL, B "model_error.lua:4: heads (3) must divide d (10)"},
    {"error_value.lua", NULL, NNC_E_MODEL,
     B "error_value.lua:3: error: expected a message string, found a table value"},

    /* misuse of the language */
    {"wrong_arity.lua", NULL, NNC_E_MODEL, B "wrong_arity.lua:3: matmul: expected 2 tensors, found 1"},
    {"string_for_tensor.lua", NULL, NNC_E_MODEL, B "string_for_tensor.lua:3: relu: expected a tensor, found \"x\""},
    {"undefined_dim.lua", NULL, NNC_E_MODEL,
     B "undefined_dim.lua:2: input x: dim \"N\" is not declared (declare it with dim(\"N\", max) or \"N<=max\")"},
    {"dim_max0.lua", NULL, NNC_E_MODEL, B "dim_max0.lua:2: dim B: expected a maximum of at least 1, found 0"},
    {"bad_dtype.lua", NULL, NNC_E_MODEL,
     B "bad_dtype.lua:2: input x: expected a dtype (f32, f16, bf16 or i32), found nil"},
    {"dup_param.lua", NULL, NNC_E_SHAPE,
     B "dup_param.lua:4: parameter w: expected f32[3,4] as declared at " B "dup_param.lua:3, found f32[4,3]"},
    {"param_symbolic.lua", NULL, NNC_E_SHAPE,
     B "param_symbolic.lua:4: parameter bias: expected constant dims (weights have a fixed size), found a "
       "symbolic dim 1"},
    {"output_input.lua", NULL, NNC_E_MODEL,
     B "output_input.lua:3: output \"y\": expected a computed value, found input x (outputs must be computed by "
       "the model)"},
    {"dup_output.lua", NULL, NNC_E_MODEL, B "dup_output.lua:4: output \"y\": already declared at " B "dup_output.lua:3"},
    {"no_outputs.lua", NULL, NNC_E_MODEL, "no_outputs: the model has no outputs: call output(name, x)"},

    /* shapes and dtypes */
    {"add_shape.lua", NULL, NNC_E_SHAPE, B "add_shape.lua:5: add: shapes [B,10] and [B,12] do not broadcast (dim 2: 10 vs 12)"},
    {"linear_features.lua", NULL, NNC_E_SHAPE,
     B "linear_features.lua:4: linear: input has 20 features, weight proj.weight expects 21"},
    {"matmul_inner.lua", NULL, NNC_E_SHAPE,
     B "matmul_inner.lua:5: matmul: inner dims differ: a is [B,5,7], b is [6,3] (7 vs 6)"},
    {"dtype_mismatch.lua", NULL, NNC_E_SHAPE, B "dtype_mismatch.lua:4: add: dtypes differ: a is f32, b is i32"},
    {"embedding_f32_ids.lua", NULL, NNC_E_SHAPE,
     B "embedding_f32_ids.lua:3: embedding: expected i32 ids, found ids f32"},
    {"softmax_axis.lua", NULL, NNC_E_SHAPE, B "softmax_axis.lua:3: softmax: expected an axis of 1 to 2, found 3"},
    {"reshape_count.lua", NULL, NNC_E_SHAPE,
     B "reshape_count.lua:3: reshape: x [3,5] has 15 elements, [4,4] has 16"},
    {"reshape_two_inferred.lua", NULL, NNC_E_MODEL,
     B "reshape_two_inferred.lua:3: reshape: expected at most one -1, found 2"},
    {"transpose_axes.lua", NULL, NNC_E_SHAPE, B "transpose_axes.lua:3: transpose: expected axes of 1 to 3, found 1 and 4"},
    {"slice_past_end.lua", NULL, NNC_E_SHAPE,
     B "slice_past_end.lua:3: slice: expected last <= 8 on axis 2, found 9"},
    {"concat_mismatch.lua", NULL, NNC_E_SHAPE,
     B "concat_mismatch.lua:4: concat: dim 1 differs: a is [3,5], b is [4,5]"},
    {"split_not_dividing.lua", NULL, NNC_E_SHAPE,
     B "split_not_dividing.lua:3: split: 10 on axis 2 does not divide into 3 equal parts"},
    {"causal_rank1.lua", NULL, NNC_E_SHAPE,
     B "causal_rank1.lua:3: causal_mask: expected scores of rank >= 2 [..., T, S], found s f32[9]"},
    {"padding_mask_shape.lua", NULL, NNC_E_SHAPE,
     B "padding_mask_shape.lua:5: padding_mask: expected a mask [B,6] for scores s [B,4,6,6], found m [B,7]"},

    /* names the generated sources could not hold */
    {"param_comment.lua", NULL, NNC_E_MODEL,
     B "param_comment.lua:3: parameter \"fc*/x.weight\": expected a name without quotes, backslashes, control "
       "characters, \"/*\" or \"*/\" (it is written into the generated C sources)"},
    {"input_quote.lua", NULL, NNC_E_MODEL,
     B "input_quote.lua:2: input \"x\"y\": expected a name without quotes, backslashes, control characters, "
       "\"/*\" or \"*/\" (it is written into the generated C sources)"},

    /* convolution and pooling */
    {"conv_rank.lua", NULL, NNC_E_SHAPE,
     B "conv_rank.lua:3: conv2d: expected an image of rank 4 ([N, C, H, W]), found tensor x f32[3,20]"},
    {"conv_groups.lua", NULL, NNC_E_SHAPE,
     B "conv_groups.lua:3: conv2d: expected input channels divisible by groups 4, found 6 channels"},
    {"conv_padding.lua", NULL, NNC_E_SHAPE,
     B "conv_padding.lua:3: conv2d: expected padding smaller than the kernel, found padding 3x3 for a kernel 3x3 "
       "(dilation 1x1)"},
    {"conv_too_small.lua", NULL, NNC_E_SHAPE,
     B "conv_too_small.lua:3: conv2d: expected an image at least as large as the kernel 5x5 (dilation 1x1, padding "
       "0x0), found x f32[2,3,4,4]"},
    {"conv_weight.lua", NULL, NNC_E_SHAPE,
     B "conv_weight.lua:4: parameter conv1.weight: expected f32[8,3,3,3] as declared at " B "conv_weight.lua:3, "
       "found f32[8,4,3,3]"},
    {"pool_padding.lua", NULL, NNC_E_SHAPE,
     B "pool_padding.lua:3: maxpool2d: expected padding at most half the kernel, found padding 2x2 for a kernel 2x2"},
    {"adaptive_size.lua", NULL, NNC_E_SHAPE,
     B "adaptive_size.lua:3: adaptive_avgpool2d: expected an output size that divides the image's 9x9, found 4x4"},

    /* recurrent layers */
    {"rnn_hidden.lua", NULL, NNC_E_SHAPE,
     B "rnn_hidden.lua:4: lstm: hidden size 6 over 3 input features needs lstm.weight_hh_l0 f32[24,6], found "
       "f32[20,5] declared at " B "rnn_hidden.lua:3"},
    {"rnn_state_shape.lua", NULL, NNC_E_SHAPE,
     B "rnn_state_shape.lua:4: gru: expected h0 f32[2,2,6] ([layers * directions, batch, hidden]), found tensor h0 "
       "f32[1,2,6]"},
    {"rnn_rank.lua", NULL, NNC_E_SHAPE,
     B "rnn_rank.lua:3: lstm: expected an input of rank 3 ([T, B, features]) with a constant number of features, "
       "found tensor x f32[2,3]"},
    {"rnn_h0_alone.lua", NULL, NNC_E_MODEL,
     B "rnn_h0_alone.lua:4: lstm: expected both initial states h0 and c0 or neither, found h0 alone"},

    /* LLaMA-family ops: grouped-query attention, rotary embeddings */
    {"gqa_heads.lua", NULL, NNC_E_SHAPE,
     B "gqa_heads.lua:4: sdpa: expected q's heads (dim 2) to be a multiple of k's (grouped-query attention), found "
       "tensor q f32[2,6,5,8] and tensor k f32[2,4,5,8]"},
    {"rope_dims_odd.lua", NULL, NNC_E_SHAPE,
     B "rope_dims_odd.lua:3: rope: expected dims even, >= 2 and at most the last dim 8 of x f32[2,4,5,8], found 5"},
    {"rope_dims_big.lua", NULL, NNC_E_SHAPE,
     B "rope_dims_big.lua:3: rope: expected dims even, >= 2 and at most the last dim 8 of x f32[2,4,5,8], found 10"},
    {"rope_positions.lua", NULL, NNC_E_SHAPE,
     B "rope_positions.lua:4: rope: expected positions i32[5] or i32[2,5] for x f32[2,4,5,8] (time axis 3), found "
       "pos i32[6]"},

    /* generation's kv caches */
    {"kv_cache_const_s.lua", NULL, NNC_E_MODEL,
     B "kv_cache_const_s.lua:4: kv_cache: expected a symbolic dim S (the keys after this call) as argument 3, found 16"},
    {"kv_cache_short.lua", NULL, NNC_E_SHAPE,
     B "kv_cache_short.lua:5: kv_cache: expected x's rows (at most 32) to fit in S (at most 16), found "
       "k f32[2,3,T,4]"},
    {"kv_cache_twice.lua", NULL, NNC_E_MODEL,
     B "kv_cache_twice.lua:6: state \"cache.k\": already declared at tests/broken/kv_cache_twice.lua:5"},

    /* the sandbox and its budgets */
    {"runaway_loop.lua", NULL, NNC_E_LIMIT,
     B "runaway_loop.lua:3: instruction budget of 200000000 exceeded (an endless loop?)"},
    {"budget_pcall.lua", NULL, NNC_E_LIMIT,
     B "budget_pcall.lua:3: instruction budget of 200000000 exceeded (an endless loop?)"},
    {"memory_bomb.lua", NULL, NNC_E_LIMIT, B "memory_bomb.lua:4: memory budget of 512 MiB exceeded"},
    {"memory_bomb_concat.lua", NULL, NNC_E_LIMIT, B "memory_bomb_concat.lua:4: memory budget of 512 MiB exceeded"},
    {"use_io.lua", NULL, NNC_E_MODEL,
     B "use_io.lua:2: io is not available in a model (the sandbox has no file or OS access)"},
    {"use_os.lua", NULL, NNC_E_MODEL,
     B "use_os.lua:2: os is not available in a model (the sandbox has no file or OS access)"},
    {"use_require.lua", NULL, NNC_E_MODEL,
     B "use_require.lua:2: require is not available in a model (the sandbox has no file or OS access)"},
    {"use_load.lua", NULL, NNC_E_MODEL,
     B "use_load.lua:2: load is not available in a model (the sandbox has no file or OS access)"},
    {"use_dofile.lua", NULL, NNC_E_MODEL,
     B "use_dofile.lua:2: dofile is not available in a model (the sandbox has no file or OS access)"},
    {"include_escape.lua", NULL, NNC_E_MODEL,
     B "include_escape.lua:2: include: \"../x.lua\" leaves the model's folder " B},
    {"include_absolute.lua", NULL, NNC_E_MODEL,
     B "include_absolute.lua:2: include: expected a path relative to the including file, found \"/etc/passwd\""},
    {"include_recursion.lua", NULL, NNC_E_MODEL,
     B "include_recursion.lua:2: include: expected at most 16 nested includes"},

    /* -D on the command line */
    {"define_unknown.lua", "layer=3", NNC_E_USAGE,
     "-D layer=3: no config key is named layer (the keys are: layers, width)"},
    {"define_type.lua", "layers=two", NNC_E_USAGE,
     B "define_type.lua:2: -D layers=two: expected a number, found \"two\""},
};

#undef B

/* Loads and compiles one broken model; returns the first failure. */
static nnc_status run_case(const broken_case *c, nnc_error *err) {
  char path[256];
  snprintf(path, sizeof path, "tests/broken/%s", c->file);
  const char *defines[1] = {c->define};
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = c->define ? 1 : 0};
  nnc_graph g;
  nnc_graph_init(&g);
  nnc_status st = nnc_frontend_load(&o, &g, err);
  if (st == NNC_OK) {
    nnc_schedule s;
    nnc_schedule_init(&s, &g);
    st = nnc_compile_graph(&g, &s, err);
    nnc_schedule_free(&s);
  }
  nnc_graph_free(&g);
  return st;
}

static void test_case(void **state) {
  const broken_case *c = *state;
  nnc_error err = {0};
  nnc_status st = run_case(c, &err);
  if (st != c->status || strcmp(err.msg, c->msg) != 0)
    fail_msg("%s\n  expected: %s: %s\n  found:    %s: %s", c->file, nnc_status_name(c->status), c->msg,
             nnc_status_name(st), err.msg);
}

/* A message must start with the file and a line, unless it is about the
 * whole model (no outputs) or the command line (-D). */
static void test_messages_name_the_line(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const broken_case *c = &cases[i];
    if (c->msg[0] == '-' || strstr(c->file, "no_outputs")) continue;
    char prefix[256];
    int n = snprintf(prefix, sizeof prefix, "tests/broken/%s:", c->file);
    if (strncmp(c->msg, prefix, (size_t)n) != 0) fail_msg("%s: message does not start with %s", c->file, prefix);
    const char *line = c->msg + n;
    if (!(line[0] >= '1' && line[0] <= '9')) fail_msg("%s: no line number after %s", c->file, prefix);
  }
}

static bool listed(const char *file) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (strcmp(cases[i].file, file) == 0) return true;
  return false;
}

/* The table lists every .lua file in tests/broken/, each once. */
static void test_corpus_is_complete(void **state) {
  (void)state;
  size_t n = sizeof cases / sizeof cases[0];
  assert_true(n >= 34);
  for (size_t i = 0; i < n; i++) {
    char path[256];
    snprintf(path, sizeof path, "tests/broken/%s", cases[i].file);
    if (access(path, R_OK) != 0) fail_msg("%s is missing", path);
    for (size_t j = 0; j < i; j++)
      if (strcmp(cases[i].file, cases[j].file) == 0) fail_msg("%s is listed twice", cases[i].file);
  }
  DIR *d = opendir("tests/broken");
  assert_non_null(d);
  size_t files = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".lua") != 0) continue;
    files++;
    if (!listed(e->d_name)) {
      closedir(d);
      fail_msg("tests/broken/%s is not in the table", e->d_name);
    }
  }
  closedir(d);
  assert_int_equal(files, n);
}

#define NCASES (sizeof cases / sizeof cases[0])

int main(void) {
  /* Messages carry paths as the user gave them: run from the source root. */
  if (chdir(NNC_SOURCE_ROOT) != 0) {
    fprintf(stderr, "cannot enter %s\n", NNC_SOURCE_ROOT);
    return 1;
  }
  struct CMUnitTest tests[NCASES + 2];
  tests[0] = (struct CMUnitTest)cmocka_unit_test(test_corpus_is_complete);
  tests[1] = (struct CMUnitTest)cmocka_unit_test(test_messages_name_the_line);
  for (size_t i = 0; i < NCASES; i++)
    tests[i + 2] = (struct CMUnitTest){cases[i].file, test_case, NULL, NULL, (void *)&cases[i]};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
