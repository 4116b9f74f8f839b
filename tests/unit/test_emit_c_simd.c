/* tests/unit/test_emit_c_simd.c — the C SIMD emitter end to end: every model
 * of models/ (small configs) and every op family of tests/ops/ is compiled,
 * emitted, built with make (only a C compiler) and run with bench --check,
 * which compares each output with the float64 reference on the same random
 * inputs and weights and fails above 1e-5. Then the C API is misused from a
 * program built against one folder (tests/ops/api_misuse.c), and the
 * emitter's own errors: f16/bf16 tensors, an -o that nnc did not write, a
 * failed emit leaving nothing behind. --outputs=storage writes the same
 * folder as the default (C SIMD stores f32), and the harness's bf16/f16
 * outputs (those of a CUDA folder with --outputs=storage) are checked with
 * the MLP's and GPT-2's logits narrowed by an adapter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "test_sh.h"

static char work[256];   /* a fresh folder for this run's outputs */

/* Front-end, passes, tuner and emitter, as nnc -o does. */
static nnc_status emit_model_train(const char *model, const char *target, const char *const *defs, int nd,
                                   const char *out, bool train, nnc_error *err) {
  nnc_build_opts o = {.model = model, .target = target, .defines = defs, .ndefines = nd, .out_dir = out,
                      .train = train};
  return nnc_build(&o, err);
}

/* nnc --generate: a decoder with kv caches and generate_<model>. */
static void emit_generate(const char *model, const char *dir, const char *const *defs, int nd) {
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  snprintf(out, sizeof out, "%s/%s", work, dir);
  nnc_build_opts o = {.model = path, .target = "c-simd", .defines = defs, .ndefines = nd, .out_dir = out, .generate = true};
  nnc_status st = nnc_build(&o, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
}

static nnc_status emit_model(const char *model, const char *target, const char *const *defs, int nd,
                             const char *out, nnc_error *err) {
  return emit_model_train(model, target, defs, nd, out, false, err);
}

/* Emits model (relative to the source root) into work/dir (--train: its
 * training step, whose outputs are the loss and every gradient), builds it
 * and runs bench --check with dims; asserts every step. */
static void build_and_check_as(const char *model, const char *name, const char *dir, bool train,
                               const char *const *defs, int nd, const char *dims) {
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  snprintf(out, sizeof out, "%s/%s", work, dir);
  nnc_status st = emit_model_train(path, "c-simd", defs, nd, out, train, &err);
  if (st) fprintf(stderr, "%s: %s\n", model, err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
  int rc = sh("cd %s && ./bench_%s --check %s --runs 2 --warmup 1 > check.log 2>&1; r=$?; cat check.log | grep -E 'relative|top-1|warning:|FAIL|bench'; exit $r",
              out, name, dims);
  assert_int_equal(rc, 0);
}

static void build_and_check(const char *model, const char *name, const char *const *defs, int nd, const char *dims) {
  build_and_check_as(model, name, name, false, defs, nd, dims);
}

/* The value of `#define name N` in a generated file, or -1. */
static long define_in(const char *path, const char *name) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  char line[512], want[128];
  snprintf(want, sizeof want, "#define %s ", name);
  long v = -1;
  while (v < 0 && fgets(line, sizeof line, f))
    if (strncmp(line, want, strlen(want)) == 0) v = strtol(line + strlen(want), NULL, 10);
  fclose(f);
  return v;
}

/* A training folder's forward_only() (evaluation) runs fewer kernels than
 * its whole schedule, and at least one. */
static void assert_forward_smaller(const char *dir, const char *file) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s/%s", work, dir, file);
  long all = define_in(p, "NKERNELS"), fwd = define_in(p, "NKERNELS_FORWARD");
  print_message("%s: the forward alone runs %ld of %ld kernels\n", file, fwd, all);
  assert_true(fwd > 0 && fwd < all);
}

/* Training steps: the loss and every parameter's gradient against the
 * float64 reference of the joint forward and backward graph; GPT-2 also at
 * T < ctx (the position table's gradient is zero past T). */
static void test_mlp_train(void **state) {
  const char *d[] = {"batch=37", "hidden1=129", "hidden2=33"};
  build_and_check_as("models/mlp.lua", "mlp", "mlp_train", true, d, 3, "-d B=17");
  char p[512];
  snprintf(p, sizeof p, "%s/mlp_train/mlp.h", work);
  assert_true(file_has(p, "grad_fc1_weight"));
  assert_forward_smaller("mlp_train", "mlp.c");
  /* its weights change every step: the GEMMs pack them per call */
  snprintf(p, sizeof p, "%s/mlp_train/mlp.c", work);
  assert_false(file_has(p, "b_packed"));
}

static void test_gpt2_train(void **state) {
  const char *d[] = {"layers=2", "d=48", "heads=4", "vocab=101", "ctx=19"};
  build_and_check_as("models/gpt2.lua", "gpt2", "gpt2_train", true, d, 5, "-d B=3 -d T=19");
  char out[512];
  snprintf(out, sizeof out, "%s/gpt2_train", work);
  assert_int_equal(sh("cd %s && ./bench_gpt2 --check -d B=2 -d T=5 --runs 1 --warmup 0 > /dev/null", out), 0);
  assert_forward_smaller("gpt2_train", "gpt2.c");
}

/* The last value of key in a --json log, or NAN. */
static double last_json(const char *path, const char *key) {
  FILE *f = fopen(path, "rb");
  if (!f) return NAN;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  double v = NAN;
  for (const char *at = strstr(buf, key); at; at = strstr(at + 1, key)) v = strtod(at + strlen(key), NULL);
  return v;
}

/* train_gpt2 and train_mlp (the folders of test_gpt2_train and
 * test_mlp_train): --check; a run resumed from a checkpoint gives the same
 * losses and the same final checkpoint, bit for bit; bad token and sample
 * files and a bad learning rate fail naming the file and position, and the
 * checkpoint on disk stays as it was; the classifier learns separable
 * clusters. */
static void test_train_program(void **state) {
  char g[512], m[512];
  snprintf(g, sizeof g, "%s/gpt2_train", work);
  snprintf(m, sizeof m, "%s/mlp_train", work);
  assert_int_equal(sh("cc -O1 -I%s %s/tests/train/make_data.c %s/libmlp.a -lm -lpthread -o %s/make_data && "
                      "%s/make_data %s 101 784 10", m, NNC_SOURCE_ROOT, m, work, work, work), 0);
  assert_int_equal(sh("cd %s && ./train_gpt2 --check --threads 2 > train_check.log 2>&1 || cat train_check.log", g), 0);
  /* --check's evaluation: the forward alone gives the accumulate's loss, gradients untouched */
  char log[600];
  snprintf(log, sizeof log, "%s/train_check.log", g);
  assert_true(file_has(log, "the same bits as the accumulate's; the gradients untouched"));
  const char *run = "./train_gpt2 --data ../tok.bin --batch 2 --seq 7 --accumulate 2 --threads 2 --json";
  assert_int_equal(sh("cd %s && %s --steps 4 --save a.st --save-every 2 > a.log && %s --steps 2 --save b.st > b1.log && "
                      "%s --steps 4 --resume b.st --save b.st > b2.log && cmp a.st b.st", g, run, run, run), 0);
  assert_int_equal(sh("cd %s && grep -o '\"loss\": [^,]*' a.log | tail -2 > a34 && "
                      "grep -o '\"loss\": [^,]*' b2.log > b34 && cmp a34 b34 && test $(wc -l < b34) = 2", g), 0);
  /* bad files and options: exit 1 (2 for the command line), the message, a.st untouched */
  static const struct {
    const char *args, *says;
    int rc;
  } bad[] = {
    {"--data ../bad_magic.bin", "bad_magic.bin: expected magic 20240520 and version 1 at byte 0", 1},
    {"--data ../truncated.bin", "truncated.bin: the header counts 3000 tokens, the file holds 1000", 1},
    {"--data ../big_id.bin", "big_id.bin: token 123 (byte 1270) is 101; the model's vocabulary has 101", 1},
    {"--data ../tok.bin --lr 0", "expected --lr > 0", 2},
    {"--data ../tok.bin --resume ../cls.safetensors", "cls.safetensors", 1},
    {"--data ../missing.bin", "missing.bin: cannot open", 1},
  };
  assert_int_equal(sh("cd %s && cp a.st keep.st", g), 0);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char log[600];
    snprintf(log, sizeof log, "%s/bad.log", g);
    int rc = sh("cd %s && ./train_gpt2 %s --steps 1 --save a.st > bad.log 2>&1", g, bad[i].args);
    if (rc != bad[i].rc || !file_has(log, bad[i].says)) {
      sh("cat %s", log);
      fail_msg("train_gpt2 %s: expected exit %d and \"%s\"", bad[i].args, bad[i].rc, bad[i].says);
    }
    assert_int_equal(sh("cmp %s/a.st %s/keep.st", g, g), 0);
  }
  /* the classifier */
  assert_int_equal(sh("cd %s && ./train_mlp --check --threads 2 > train_check.log 2>&1 || cat train_check.log", m), 0);
  snprintf(log, sizeof log, "%s/train_check.log", m);
  assert_true(file_has(log, "the same bits as the accumulate's; the gradients untouched"));
  assert_true(file_has(log, "its logits: the same bits"));
  assert_int_equal(sh("cd %s && ./train_mlp --data ../cls.safetensors --val ../cls.safetensors --batch 16 --steps 30 "
                      "--lr 3e-3 --shuffle --eval-every 10 --threads 2 --json > cls.log", m), 0);
  snprintf(log, sizeof log, "%s/cls.log", m);
  double acc = last_json(log, "\"val_accuracy\": ");
  if (!(acc >= 0.95)) fail_msg("train_mlp: validation accuracy %g after 30 updates, expected >= 0.95", acc);
  assert_int_equal(sh("cd %s && ./train_mlp --data ../nan.safetensors --steps 1 > nan.log 2>&1", m), 1);
  snprintf(log, sizeof log, "%s/nan.log", m);
  assert_true(file_has(log, "nan.safetensors: x[7][3] is nan; samples must be finite"));
}

/* mlp_train_step (AdamW) overfits one small batch: tests/train/overfit_mlp.c;
 * its forward alone (mlp_forward, mlp_train_eval) gives the accumulate's
 * loss and logits, bit for bit, and leaves the gradients: forward_mlp.c */
static void test_mlp_train_step(void **state) {
  const char *d[] = {"pixels=13", "hidden1=33", "hidden2=17", "classes=5"};
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/models/mlp.lua", NNC_SOURCE_ROOT);
  snprintf(out, sizeof out, "%s/mlp_train_step", work);
  nnc_status st = emit_model_train(path, "c-simd", d, 4, out, true, &err);
  if (st) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 libmlp.a > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
  assert_int_equal(sh("cc -O1 -I%s %s/tests/train/overfit_mlp.c %s/libmlp.a -lm -lpthread -o %s/overfit && %s/overfit",
                      out, NNC_SOURCE_ROOT, out, out, out), 0);
  assert_int_equal(sh("cc -O1 -I%s %s/tests/train/forward_mlp.c %s/libmlp.a -lm -lpthread -o %s/forward && %s/forward",
                      out, NNC_SOURCE_ROOT, out, out, out), 0);
}

/* Loss scaling through the API (tests/train/loss_scale_mlp.c, in the folder
 * of test_mlp_train_step): scaled gradients, skipped updates, growth, resume. */
static void test_mlp_loss_scale(void **state) {
  char out[512];
  snprintf(out, sizeof out, "%s/mlp_train_step", work);
  assert_int_equal(sh("cc -O1 -I%s %s/tests/train/loss_scale_mlp.c %s/libmlp.a -lm -lpthread -o %s/loss_scale && "
                      "cd %s && ./loss_scale", out, NNC_SOURCE_ROOT, out, out, out), 0);
}

/* train_mlp (the folder of test_mlp_train, the data of test_train_program)
 * with dynamic loss scaling from 1024, doubling after every good update: the
 * scale in the log and in the checkpoint, so that a resumed run ends in the
 * same checkpoint. */
static void test_train_program_scaled(void **state) {
  char m[512], log[600];
  snprintf(m, sizeof m, "%s/mlp_train", work);
  const char *run = "./train_mlp --data ../cls.safetensors --batch 16 --threads 2 --json --dynamic-scale "
                    "--loss-scale 1024 --scale-window 1";
  assert_int_equal(sh("cd %s && %s --steps 4 --save sa.st > sa.log && %s --steps 2 --save sb.st > /dev/null && "
                      "%s --steps 4 --resume sb.st --save sb.st > sb.log && cmp sa.st sb.st", m, run, run, run), 0);
  snprintf(log, sizeof log, "%s/sa.log", m);
  assert_true(file_has(log, "\"loss_scale\": 1024, \"skipped\": false, \"skipped_total\": 0}"));
  assert_true(last_json(log, "\"loss_scale\": ") == 8192);
  snprintf(log, sizeof log, "%s/sb.log", m);
  assert_true(last_json(log, "\"loss_scale\": ") == 8192);
  /* the flags' errors */
  assert_int_equal(sh("cd %s && ./train_mlp --data ../cls.safetensors --loss-scale -2 > bad.log 2>&1", m), 2);
  snprintf(log, sizeof log, "%s/bad.log", m);
  assert_true(file_has(log, "expected --loss-scale > 0"));
}

static void test_embedding_loss_train(void **state) {
  build_and_check_as("tests/ops/embedding_loss.lua", "embedding_loss", "embedding_loss_train", true, NULL, 0,
                     "-d B=3 -d T=7");
}

/* causal, padded and both, through the attention op and its backward */
static void test_attention_train(void **state) {
  build_and_check_as("tests/ops/attention_loss.lua", "attention_loss", "attention_loss_train", true, NULL, 0,
                     "-d B=3 -d T=19");
}

static void test_mlp(void **state) {
  const char *d[] = {"batch=37", "hidden1=129", "hidden2=33"};
  build_and_check("models/mlp.lua", "mlp", d, 3, "-d B=17");
  char p[512];
  snprintf(p, sizeof p, "%s/mlp/mlp.c", work);
  assert_true(file_has(p, "/* mlp.lua:17  fc1: linear + relu  (kernel 0, gemm) */"));
  /* weights only the GEMMs read are held packed from the moment they load */
  assert_true(file_has(p, "nnc_weights_load_converted(st, manifest, NPARAMS, m->w, held_packed, pack_weight, m, e)"));
  assert_true(file_has(p, "  g.b_packed = c->m->pb[2];   /* out.weight [10,33], held packed */\n"));
  assert_false(file_has(p, "static int prepare("));
  snprintf(p, sizeof p, "%s/mlp/mlp.h", work);
  assert_true(file_has(p, "int mlp_run(mlp_model *m, const mlp_dims *d, const mlp_inputs *in, mlp_outputs *out);"));
  snprintf(p, sizeof p, "%s/mlp/weights_manifest.json", work);
  assert_true(file_has(p, "{\"name\": \"fc1.weight\", \"dtype\": \"F32\", \"shape\": [129, 784]}"));
}

static void test_gpt2(void **state) {
  const char *d[] = {"layers=2", "d=48", "heads=4", "vocab=101", "ctx=64"};
  build_and_check("models/gpt2.lua", "gpt2", d, 5, "-d B=3 -d T=17");
  char p[512];
  snprintf(p, sizeof p, "%s/gpt2/gpt2.c", work);
  assert_true(file_has(p, "h.0.mlp.c_fc: layernorm + linear + gelu  (kernel"));
  assert_true(file_has(p, "nnc_simd_attention("));
  /* the tied wte is held packed for the head only: the lookup reads its rows out of the panels, and
   * nothing is left for a prepare() to copy */
  assert_true(file_has(p, "  g.b_packed = c->m->pb[8];   /* wte.weight [101,48], held packed */\n"));
  assert_true(file_has(p, "nnc_simd_embedding_packed((int)(d->B * d->T), ids, 101, 48, packed_b[8].b_trans, table, y, 48,"));
  assert_false(file_has(p, "static int prepare("));
}

static void test_bert(void **state) {
  const char *d[] = {"layers=2", "hidden=48", "heads=4", "intermediate=129", "vocab=101", "positions=64",
                     "batch=4", "seq=32"};
  build_and_check("models/bert.lua", "bert", d, 8, "-d B=3 -d T=17");
}

#define OP_TEST(op, dims)                                                 \
  static void test_op_##op(void **state) {                               \
    build_and_check("tests/ops/" #op ".lua", #op, NULL, 0, dims);         \
  }
OP_TEST(elementwise, "-d B=3 -d T=17")
OP_TEST(masks, "-d B=3 -d T=17")
OP_TEST(softmax_axis, "-d B=3")
OP_TEST(reduce, "-d B=3 -d T=17")
OP_TEST(move, "-d B=3 -d T=17")
OP_TEST(embedding_loss, "-d B=3 -d T=17")
OP_TEST(matmul, "-d B=3 -d T=17")
OP_TEST(norms, "-d B=3 -d T=17")
OP_TEST(attention, "-d B=3 -d T=17")
OP_TEST(conv, "-d B=3")
OP_TEST(layout, "-d B=2")
OP_TEST(recurrent, "-d B=3 -d T=4")
OP_TEST(rope, "-d B=3 -d T=17")
OP_TEST(gqa, "-d B=3 -d T=11")
OP_TEST(chains, "-d B=3 -d T=7")

/* Tied embeddings (tests/ops/tied_embedding.lua): wte, read by a lookup and
 * the head's GEMM, is held packed once (no copy, no prepare() for it); the
 * table `other`, which an elementwise op reads too, keeps its values and a
 * copy packed by prepare(). --check, then tests/ops/tied_set_weight.c:
 * weights from a file, then each table set after a run, against a float64
 * model of its own. */
static void test_tied_embedding(void **state) {
  build_and_check("tests/ops/tied_embedding.lua", "tied_embedding", NULL, 0, "-d B=3 -d T=7");
  char out[512], p[600];
  snprintf(out, sizeof out, "%s/tied_embedding", work);
  snprintf(p, sizeof p, "%s/tied_embedding.c", out);
  assert_true(file_has(p, "  g.b_packed = c->m->pb[0];   /* wte [69,300], held packed */\n"));
  assert_true(file_has(p, "nnc_simd_embedding_packed((int)(d->B * d->T), ids, 69, 300, packed_b[0].b_trans, table, y, 300,"));
  assert_true(file_has(p, "  g.b_packed = c->m->pb[1];   /* other [37,20], packed by prepare() */\n"));
  assert_true(file_has(p, "nnc_simd_embedding((int)(d->B * d->T), ids, 37, 20, table, 20, y, 20, &e)"));
  assert_true(file_has(p, "  pack_b(c->m, 1, (float *)c->m->w[1], c->m->pb[1]);   /* other [37,20] */\n"));
  assert_int_equal(sh("cc -std=c11 -Wall -Wextra -Werror -I%s %s/tests/ops/tied_set_weight.c %s/libtied_embedding.a "
                      "-o %s/tied_set_weight -lm -lpthread", out, NNC_SOURCE_ROOT, out, out), 0);
  assert_int_equal(sh("%s/tied_set_weight %s", out, out), 0);
}

/* The MNIST CNN at a small odd size (convolutions, max pooling, flatten). */
static void test_mnist_cnn(void **state) {
  const char *d[] = {"size=13", "conv1=5", "conv2=7", "hidden=9", "batch=8"};
  build_and_check("models/mnist_cnn.lua", "mnist_cnn", d, 5, "-d B=3");
  /* fc1's weight is transposed at load, then packed by prepare() into a copy */
  char p[512];
  snprintf(p, sizeof p, "%s/mnist_cnn/mnist_cnn.c", work);
  assert_true(file_has(p, "  g.b_packed = c->m->pb[2];   /* fc1 [9,112], packed by prepare() */\n"));
  assert_true(file_has(p, "  pack_b(c->m, 2, (float *)(c->m->arena + "));
  /* its training step: im2col's gradient (col2im), max pooling's, the convolutions' weights */
  build_and_check_as("models/mnist_cnn.lua", "mnist_cnn", "mnist_cnn_train", true, d, 5, "-d B=3");
}

/* ResNet-18 at 33x33 with 4 channels, NCHW and NHWC: strided 7x7 and 1x1
 * convolutions, padded max pooling, batch norm, residual adds, global
 * pooling. NCHW repeats identical transposes, whose kernels GCC 12.2 folds
 * wrongly unless the Makefile turns its identical-code folding off. */
static void test_resnet18(void **state) {
  const char *nchw[] = {"size=33", "width=4", "classes=7", "batch=4"};
  const char *nhwc[] = {"size=33", "width=4", "classes=7", "batch=4", "layout=nhwc"};
  build_and_check_as("models/resnet18.lua", "resnet18", "resnet18", false, nchw, 4, "-d B=3");
  build_and_check_as("models/resnet18.lua", "resnet18", "resnet18_nhwc", false, nhwc, 5, "-d B=3");
  /* batch norm is folded into the convolutions once the weights are loaded
   * (prepare()): a weight set after a run must be folded again. A model
   * given bn1.weight after a run must answer as one given it before. */
  char out[512];
  snprintf(out, sizeof out, "%s/resnet18_nhwc", work);
  assert_true(sh("grep -q 'static int prepare' %s/resnet18.c", out) == 0);
  static const char driver[] =
    "#include <stdio.h>\n#include <string.h>\n#include \"resnet18.h\"\n"
    "static float img[3 * 33 * 33 * 3], o1[3 * 7], o2[3 * 7], o3[3 * 7];\n"
    "static int run(resnet18_model *m, float *o) {\n"
    "  resnet18_dims d = {3};\n  resnet18_inputs in = {img};\n  resnet18_outputs out = {o};\n"
    "  return resnet18_run(m, &d, &in, &out);\n}\n"
    "int main(void) {\n"
    "  for (int i = 0; i < (int)(sizeof img / sizeof *img); i++) img[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;\n"
    "  const float g[4] = {2.0f, -1.0f, 0.5f, 3.0f};\n"
    "  resnet18_model *a, *b;\n"
    "  if (resnet18_create(NULL, &a) || resnet18_create(NULL, &b)) return 2;\n"
    "  if (resnet18_load_weights_file(a, \"w.safetensors\") || resnet18_load_weights_file(b, \"w.safetensors\")) return 3;\n"
    "  if (run(a, o1) || resnet18_set_weight(a, \"bn1.weight\", g, 4) || run(a, o2)) return 4;\n"
    "  if (resnet18_set_weight(b, \"bn1.weight\", g, 4) || run(b, o3)) return 5;\n"
    "  if (!memcmp(o1, o2, sizeof o1)) return 6;   /* the new weight changed nothing */\n"
    "  if (memcmp(o2, o3, sizeof o2)) return 7;    /* a stale fold */\n"
    "  resnet18_destroy(a);\n  resnet18_destroy(b);\n  return 0;\n}\n";
  char path[600];
  snprintf(path, sizeof path, "%s/refold.c", out);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(driver, f);
  fclose(f);
  assert_int_equal(sh("cd %s && %s/compiler/nnc weights %s/models/resnet18.lua -D size=33 -D width=4 -D classes=7 "
                      "-D batch=4 -D layout=nhwc -o w.safetensors && cc -O1 -I. refold.c libresnet18.a -lm -lpthread "
                      "-o refold && ./refold", out, NNC_BUILD_ROOT, NNC_SOURCE_ROOT), 0);
}

/* The recurrent models at odd sizes: the LSTM forecaster (2 layers, batch
 * first, its last state through a slice) and the bidirectional GRU
 * classifier (embedding, mean over time), at a shorter T than compiled;
 * their training steps (backward through time: lstm_scan_grad,
 * gru_scan_grad). */
static void test_rnn_models(void **state) {
  const char *lstm[] = {"batch=4", "window=11", "features=5", "hidden=13", "horizon=3"};
  build_and_check("models/lstm_forecast.lua", "lstm_forecast", lstm, 5, "-d B=3 -d T=7");
  build_and_check_as("models/lstm_forecast.lua", "lstm_forecast", "lstm_forecast_train", true, lstm, 5,
                     "-d B=3 -d T=7");
  const char *gru[] = {"batch=4", "seq=11", "vocab=37", "embed=9", "hidden=7", "classes=3"};
  build_and_check("models/gru.lua", "gru", gru, 6, "-d B=3 -d T=7");
  build_and_check_as("models/gru.lua", "gru", "gru_train", true, gru, 6, "-d B=3 -d T=7");
}

/* LSTM scans that took their input projections (c_simd_scan.c: x_t W_ih^T
 * in each step's GEMM), tests/ops/lstm_fold.lua: two layers sequence first
 * with initial states (hidden 13, 5 features: the cell's tail), a
 * bidirectional layer whose reverse scan folds too with hfuse off (on, the
 * two directions' projections are one GEMM and neither scan folds); every
 * output against the float64 reference at B 3, 1 and the compiled 4, T
 * shorter than compiled, 1 and the full 6, on one thread. Then large (B 37,
 * hidden 100, 300 features: K = 400 in two KC passes) on two threads: a
 * task of 19 or 10 rows reads its whole panels of [h | x_t] in place and
 * packs the rest (a_inplace), one of a row packs it all. */
static void test_lstm_fold(void **state) {
  static const char *const big[] = {"batch=37", "steps=9", "features=300", "hidden=100", "bi_features=150",
                                    "bi_hidden=60"};
  for (int run = 0; run < 3; run++) {
    char path[512], out[512];
    nnc_error err = {0};
    bool hfuse = run == 1, large = run == 2;
    snprintf(path, sizeof path, "%s/tests/ops/lstm_fold.lua", NNC_SOURCE_ROOT);
    snprintf(out, sizeof out, "%s/lstm_fold_%d", work, run);
    nnc_build_opts o = {.model = path, .target = "c-simd", .out_dir = out, .no_hfuse = !hfuse,
                        .defines = large ? big : NULL, .ndefines = large ? 6 : 0};
    nnc_status st = nnc_build(&o, &err);
    if (st) fprintf(stderr, "lstm_fold: %s\n", err.msg);
    assert_int_equal(st, NNC_OK);
    /* the kernels that took their linears: both deep layers, and without hfuse both directions */
    assert_int_equal(sh("test $(grep -c '\"move\", \"linear + lstm_scan\"' %s/lstm_fold.c) -eq %d", out, hfuse ? 2 : 4), 0);
    assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' > %s/make.log 2>&1 || cat %s/make.log", out, out, out), 0);
    static const char *const dims[] = {"-d B=3 -d T=4", "-d B=1 -d T=1", "-d B=4 -d T=6"};
    static const char *const large_dims[] = {"-d B=37 -d T=9", "-d B=19 -d T=5", "-d B=2 -d T=3"};
    for (int i = 0; i < 3; i++)
      assert_int_equal(sh("cd %s && ./bench_lstm_fold --check %s --threads %d --runs 2 --warmup 1 > check.log 2>&1; "
                          "r=$?; grep -E 'relative|FAIL' check.log; exit $r",
                          out, large ? large_dims[i] : dims[i], large ? 2 : 1), 0);
  }
}

/* LLaMA at odd sizes (6 query heads over 2 kv heads, head size 8, ffn 37):
 * rope, grouped-query causal attention, SwiGLU, RMSNorm; its training step
 * (rope's gradient is the turn back; dk and dv summed over each group). */
static void test_llama(void **state) {
  const char *d[] = {"layers=2", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=64", "batch=4"};
  build_and_check("models/llama.lua", "llama", d, 8, "-d B=3 -d T=17");
  build_and_check_as("models/llama.lua", "llama", "llama_train", true, d, 8, "-d B=3 -d T=17");
  /* multi-query (one kv head), not grouped: the fused attention kernel when the mask is not causal is
   * tests/ops/gqa.lua's */
  const char *mq[] = {"layers=1", "d=40", "heads=5", "kv_heads=1", "ffn=23", "vocab=53", "ctx=32", "batch=4"};
  build_and_check_as("models/llama.lua", "llama", "llama_mqa", false, mq, 8, "-d B=2 -d T=9");
}

/* Generation: one call with older keys in the cache (zero ones: a fresh
 * model) against the reference, then generate_<model> --check, every
 * decode step's logits against the reference's full forward over the
 * sequence so far, with prompts of different lengths in one batch; and the
 * refusals: S < T, a prompt longer than the cache, a token id past the
 * vocabulary. */
static void test_generate(void **state) {
  const char *g[] = {"layers=2", "d=64", "heads=4", "vocab=101", "ctx=24", "batch=4"};
  emit_generate("models/gpt2.lua", "gpt2_gen", g, 6);
  char out[512];
  snprintf(out, sizeof out, "%s/gpt2_gen", work);
  assert_int_equal(sh("cd %s && ./bench_gpt2 --check -d B=3 -d T=5 -d S=11 --runs 1 --warmup 0 | grep -q 'relative error.* ok'", out), 0);
  assert_int_equal(sh("cd %s && ./generate_gpt2 --check --prompt '1,2,3;4,5,6,7,8,9,10;11' --steps 9 > gen.log 2>&1; r=$?; cat gen.log; exit $r", out), 0);
  assert_int_equal(sh("cd %s && ./generate_gpt2 --prompt '5,6' --steps 5 --temperature 0.9 --top-k 7 --top-p 0.8 --seed 3 | grep -q '^sequence 0: 5 6 |'", out), 0);
  assert_int_equal(sh("cd %s && ./bench_gpt2 -d T=5 -d S=3 --runs 1 2>&1 | grep -q 'S = 3: expected at least T = 5'", out), 0);
  assert_int_equal(sh("cd %s && ./generate_gpt2 --prompt '1,2,3' --steps 23 2>&1 | grep -q 'more than the cache'", out), 0);
  assert_int_equal(sh("cd %s && ./generate_gpt2 --prompt '1,101' 2>&1 | grep -q 'expected token ids 0 to 100'", out), 0);
  /* LLaMA: grouped-query attention over the caches, rope at each token's position */
  const char *l[] = {"layers=2", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=24", "batch=4"};
  emit_generate("models/llama.lua", "llama_gen", l, 8);
  snprintf(out, sizeof out, "%s/llama_gen", work);
  assert_int_equal(sh("cd %s && ./generate_llama --check --prompt '3,1,4,1,5;9,2' --steps 7 > gen.log 2>&1; r=$?; cat gen.log; exit $r", out), 0);
}

/* The edge sizes: every dim at 1 and at its maximum. */
static void test_edge_sizes(void **state) {
  char out[512];
  snprintf(out, sizeof out, "%s/attention", work);
  assert_int_equal(sh("cd %s && ./bench_attention --check -d B=1 -d T=1 --runs 1 --warmup 0 > /dev/null", out), 0);
  assert_int_equal(sh("cd %s && ./bench_attention --check -d B=8 -d T=32 --runs 1 --warmup 0 > /dev/null", out), 0);
  snprintf(out, sizeof out, "%s/masks", work);
  assert_int_equal(sh("cd %s && ./bench_masks --check -d B=1 -d T=1 --runs 1 --warmup 0 > /dev/null", out), 0);
  /* a size above the maximum is refused by the harness */
  assert_int_equal(sh("cd %s && ./bench_masks --check -d B=9 > /dev/null 2>&1", out), 2);
}

static void test_api_misuse(void **state) {
  const char *d[] = {"batch=37", "pixels=23", "hidden1=129", "hidden2=33", "classes=10"};
  char path[512], out[512];
  nnc_error err = {0};
  snprintf(path, sizeof path, "%s/models/mlp.lua", NNC_SOURCE_ROOT);
  snprintf(out, sizeof out, "%s/mlp_api", work);
  assert_int_equal(emit_model(path, "c-simd", d, 5, out, &err), NNC_OK);
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' libmlp.a > /dev/null", out), 0);
  assert_int_equal(sh("cc -std=c11 -Wall -Wextra -Werror -I%s %s/tests/ops/api_misuse.c %s/libmlp.a -o %s/api_misuse -lm -lpthread",
                      out, NNC_SOURCE_ROOT, out, out), 0);
  assert_int_equal(sh("%s/api_misuse %s", out, out), 0);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static bool leftovers(const char *prefix) {
  DIR *dir = opendir(work);
  bool found = false;
  struct dirent *e;
  while (dir && (e = readdir(dir)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) found = true;
  if (dir) closedir(dir);
  return found;
}

static void test_half_is_target_error(void **state) {
  char model[512], out[512];
  nnc_error err = {0};
  snprintf(model, sizeof model, "%s/half.lua", work);
  snprintf(out, sizeof out, "%s/half_out", work);
  write_text(model, "local x = input(\"x\", bf16, { 3 })\noutput(\"y\", relu(x))\n");
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "c-simd computes in f32: input x is bf16"));
  assert_non_null(strstr(err.msg, "half.lua:1"));
  assert_false(leftovers("half_out"));   /* neither the folder nor its temporary */
}

static void test_output_folder(void **state) {
  char model[512], out[512], file[600];
  nnc_error err = {0};
  snprintf(model, sizeof model, "%s/tiny.lua", work);
  snprintf(out, sizeof out, "%s/users_folder", work);
  write_text(model, "local x = input(\"x\", f32, { 5 })\noutput(\"y\", relu(x) * 2)\n");
  assert_int_equal(mkdir(out, 0777), 0);
  snprintf(file, sizeof file, "%s/precious.txt", out);
  write_text(file, "keep me");
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_E_IO);
  assert_non_null(strstr(err.msg, "was not written by nnc"));
  assert_true(file_has(file, "keep me"));
  /* a folder nnc wrote is replaced whole */
  snprintf(out, sizeof out, "%s/tiny_out", work);
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_OK);
  snprintf(file, sizeof file, "%s/stale.txt", out);
  write_text(file, "old");
  assert_int_equal(emit_model(model, "c-simd", NULL, 0, out, &err), NNC_OK);
  assert_int_equal(access(file, F_OK), -1);
  snprintf(file, sizeof file, "%s/tiny.h", out);
  assert_int_equal(access(file, F_OK), 0);
  /* a model without symbolic dims builds and checks too */
  assert_int_equal(sh("make -s -C %s -j2 CFLAGS='-O1 -march=native' > /dev/null 2>&1", out), 0);
  assert_int_equal(sh("cd %s && ./bench_tiny --check --runs 1 --json | grep -q '\"ok\": true'", out), 0);
  /* --no-peaks leaves the roofline at 0; --help exits 0 and lists it */
  assert_int_equal(sh("cd %s && ./bench_tiny --runs 1 --no-peaks --json | grep -q '\"peak_gflops\": 0, \"peak_gbps\": 0,'",
                      out), 0);
  assert_int_equal(sh("cd %s && ./bench_tiny --runs 1 --json | grep -q '\"peak_gflops\": 0,'", out), 1);
  assert_int_equal(sh("cd %s && ./bench_tiny --help | grep -q -- '--no-peaks'", out), 0);
}

/* ------------------------------------------ --outputs=storage, the harness */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* Replaces the first `old` in *text by `repl` (asserting there is one). */
static void replace(char **text, const char *old, const char *repl) {
  char *at = strstr(*text, old);
  if (!at) fail_msg("not found in the generated bench: %s", old);
  size_t head = (size_t)(at - *text), lo = strlen(old), lr = strlen(repl), tail = strlen(at + lo);
  char *r = malloc(head + lr + tail + 1);
  assert_non_null(r);
  memcpy(r, *text, head);
  memcpy(r + head, repl, lr);
  memcpy(r + head + lr, at + lo, tail + 1);
  free(*text);
  *text = r;
}

/* The max relative error of the logits in a bench --json log, or -1. */
static double json_error(const char *log) {
  char *t = slurp(log);
  const char *k = strstr(t, "\"max_rel_error\": {\"logits\": ");
  double e = k ? strtod(k + strlen("\"max_rel_error\": {\"logits\": "), NULL) : -1;
  free(t);
  return e;
}

/* The number after key in a bench log (the first), or NAN without it. */
static double log_number(const char *log, const char *key) {
  char *t = slurp(log);
  const char *k = strstr(t, key);
  double v = k ? strtod(k + strlen(key), NULL) : NAN;
  free(t);
  return v;
}

/* A copy of the built folder `name` whose harness takes the logits as a
 * narrow output, the way a CUDA folder compiled with --precision=bf16
 * --outputs=storage hands them over: output_dtype says NNRT_BF16 (or
 * NARROW_DTYPE), the tolerance is 1e-2, and the run adapter rounds the
 * model's f32 logits, times SIGN, to uint16_t bits (ENCODE) in the harness's
 * buffer, leaving the last SKIP elements unwritten. C SIMD stores f32 only, so this
 * is how the harness's narrow path (allocation, poison, widening, check,
 * report) runs without a GPU. */
static void narrow_copy(const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s_narrow", work, name);
  assert_int_equal(sh("rm -rf %s && cp -a %s/%s %s", out, work, name, out), 0);
  char path[600], text[2048];
  snprintf(path, sizeof path, "%s/bench_%s.c", out, name);
  char *b = slurp(path);
  replace(&b, "static const int output_dtype[1] = {NNRT_F32};",
          "#ifndef NARROW_DTYPE\n#define NARROW_DTYPE NNRT_BF16\n#endif\n"
          "static const int output_dtype[1] = {NARROW_DTYPE};");
  snprintf(text, sizeof text,
           "#include <stdlib.h>\n\n"
           "#ifndef SKIP\n#define SKIP 0\n#endif\n"
           "#ifndef ENCODE\n#define ENCODE nnrt_f32_to_bf16\n#endif\n"
           "#ifndef SIGN\n#define SIGN 1\n#endif\n\n"
           "static void b_elems(const int64_t *sym, int64_t *in, int64_t *out);\n\n"
           "static int narrow_run(void *m, const int64_t *sym, const %s_dims *d, const %s_inputs *in, %s_outputs *out) {\n"
           "  int64_t ni[8], no[1];\n"
           "  b_elems(sym, ni, no);\n"
           "  float *tmp = malloc((size_t)no[0] * sizeof *tmp + sizeof *tmp);\n"
           "  if (!tmp) return 1;\n"
           "  uint16_t *y = (uint16_t *)(void *)out->logits;\n"
           "  %s_outputs o = {tmp};\n"
           "  int rc = %s_run(m, d, in, &o);\n"
           "  for (int64_t e = 0; !rc && e + SKIP < no[0]; e++) y[e] = ENCODE(SIGN * tmp[e]);\n"
           "  free(tmp);\n"
           "  return rc;\n}\n\n"
           "static int b_run(void *m,",
           name, name, name, name, name);
  replace(&b, "static int b_run(void *m,", text);
  snprintf(text, sizeof text, "  return %s_run(m, &d, &i, &o);", name);
  replace(&b, text, "  return narrow_run(m, sym, &d, &i, &o);");
  /* the tolerance of a bf16/f16 folder */
  replace(&b, "\n    0, NULL, NULL, NULL, 0, NULL, NULL,", "\n    1e-2, NULL, NULL, NULL, 0, NULL, NULL,");
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(b, f);
  fclose(f);
  free(b);
}

/* Builds the narrow copy's bench with defs and runs --check (--json when
 * json), the log in check_<tag>.log; returns the exit code. */
static int narrow_check(const char *dir, const char *name, const char *defs, const char *dims, bool json,
                        const char *tag) {
  assert_int_equal(sh("touch %s/bench_%s.c && make -s -C %s CFLAGS='-O1 -march=native %s' bench_%s > %s/make_%s.log 2>&1 "
                      "|| cat %s/make_%s.log", dir, name, dir, defs, name, dir, tag, dir, tag), 0);
  return sh("cd %s && ./bench_%s --check %s --runs 1 --warmup 0 %s > check_%s.log 2>&1", dir, name, dims,
            json ? "--json" : "", tag);
}

/* narrow_outputs' check of the accuracy report (--check's cosine and top-1
 * agreement) over `positions` rows of logits: f32 against the reference is
 * alike at every position, bf16 close, an unwritten element is a NaN that
 * no cosine survives and one position lost, negated logits point the other
 * way and agree nowhere; the misses are warnings, the exit code the
 * tolerance's. */
static void accuracy_report(const char *name, const char *dir, const char *dims, int positions) {
  char log[700], want[200];
  /* f32: test_mlp's / test_gpt2's check.log (text) and check_f32.log (JSON) */
  snprintf(log, sizeof log, "%s/%s/check.log", work, name);
  assert_true(log_number(log, "logits                   f32  max relative error ") < 1e-5);
  double c32 = log_number(log, ", cosine ");
  assert_true(c32 >= 0.999999 && c32 <= 1);
  snprintf(want, sizeof want, "logits                   f32  top-1 agreement 100.0%% (%d of %d positions)\n", positions,
           positions);
  assert_true(file_has(log, want));
  assert_false(file_has(log, "warning:"));
  snprintf(log, sizeof log, "%s/%s/check_f32.log", work, name);
  assert_true(log_number(log, "\"cosine\": {\"logits\": ") >= 0.999999);
  snprintf(want, sizeof want, "\"top1_agreement\": {\"logits\": {\"fraction\": 1, \"agree\": %d, \"positions\": %d}}",
           positions, positions);
  assert_true(file_has(log, want));
  assert_true(file_has(log, "\"warnings\": []"));
  /* bf16: the rounding shows in the cosine, far above the warning */
  snprintf(log, sizeof log, "%s/check_bf16.log", dir);
  double c16 = log_number(log, "\"cosine\": {\"logits\": ");
  assert_true(c16 > 0.9999 && c16 < c32);
  snprintf(log, sizeof log, "%s/check_text.log", dir);
  assert_true(file_has(log, "logits                   bf16 top-1 agreement "));
  /* one element unwritten: NaN in one row */
  snprintf(log, sizeof log, "%s/check_skip.log", dir);
  assert_true(file_has(log, "\"cosine\": {\"logits\": null}"));
  snprintf(want, sizeof want, "\"agree\": %d, \"positions\": %d}", positions - 1, positions);
  assert_true(file_has(log, want));
  assert_true(file_has(log, "\"warnings\": [\"logits: cosine below 0.999\", \"logits: top-1 agreement below 99%\"]"));
  /* negated logits: every row's argmax is the reference's argmin */
  assert_int_equal(narrow_check(dir, name, "-DSIGN=-1", dims, false, "negated"), 1);
  snprintf(log, sizeof log, "%s/check_negated.log", dir);
  assert_true(log_number(log, ", cosine ") < -0.999);
  snprintf(want, sizeof want, "logits                   bf16 top-1 agreement 0.0%% (0 of %d positions)\n", positions);
  assert_true(file_has(log, want));
  assert_true(file_has(log, "logits                   bf16 warning: cosine -"));
  assert_true(file_has(log, "logits                   bf16 warning: top-1 agreement is below 99%\n"));
  assert_true(file_has(log, "FAILED"));
}

static void narrow_outputs(const char *model, const char *name, const char *const *defs, int nd, const char *dims,
                           int positions) {
  char path[512], a[512], b[512], log[700];
  nnc_error err = {0};
  /* c-simd: --outputs=storage writes the very folder the default does */
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, model);
  snprintf(a, sizeof a, "%s/%s_outputs_f32", work, name);
  snprintf(b, sizeof b, "%s/%s_outputs_storage", work, name);
  nnc_build_opts o = {.model = path, .target = "c-simd", .defines = defs, .ndefines = nd, .out_dir = a};
  assert_int_equal(nnc_build(&o, &err), NNC_OK);
  o.out_dir = b;
  o.outputs = "storage";
  assert_int_equal(nnc_build(&o, &err), NNC_OK);
  assert_int_equal(sh("diff -r %s %s", a, b), 0);
  /* the f32 build of test_mlp / test_gpt2: f32 logits, f32 accuracy */
  assert_int_equal(sh("cd %s/%s && ./bench_%s --check %s --runs 1 --warmup 0 --json > check_f32.log 2>&1",
                      work, name, name, dims), 0);
  snprintf(log, sizeof log, "%s/%s/check_f32.log", work, name);
  assert_true(file_has(log, "\"outputs\": {\"logits\": \"f32\"}"));
  double e32 = json_error(log);
  assert_true(e32 >= 0 && e32 < 1e-5);
  char dir[512];
  narrow_copy(name, dir, sizeof dir);
  /* bf16 logits: within the narrow tolerance, and the rounding shows */
  assert_int_equal(narrow_check(dir, name, "", dims, true, "bf16"), 0);
  snprintf(log, sizeof log, "%s/check_bf16.log", dir);
  assert_true(file_has(log, "\"outputs\": {\"logits\": \"bf16\"}"));
  assert_true(file_has(log, "\"ok\": true"));
  double e16 = json_error(log);
  assert_true(e16 > 1e-5 && e16 < 1e-2 && e16 > e32);
  assert_true(e16 < 1.0 / 256);   /* at most bf16's rounding, 2^-9 of the largest, with room */
  /* the printed summary names the dtype */
  assert_int_equal(sh("cd %s && ./bench_%s --check %s --runs 1 --warmup 0 > check_text.log 2>&1", dir, name, dims), 0);
  snprintf(log, sizeof log, "%s/check_text.log", dir);
  assert_true(file_has(log, "  outputs  logits bf16\n"));
  assert_true(file_has(log, "    logits                   bf16 max relative error"));
  /* f16 bits under an f16 output */
  assert_int_equal(narrow_check(dir, name, "-DNARROW_DTYPE=NNRT_F16 -DENCODE=nnrt_f32_to_f16", dims, true, "f16"), 0);
  snprintf(log, sizeof log, "%s/check_f16.log", dir);
  assert_true(file_has(log, "\"outputs\": {\"logits\": \"f16\"}"));
  double eh = json_error(log);
  assert_true(eh > 0 && eh < 1e-2);
  print_message("%s: logits max relative error: f32 output %.3g, bf16 %.3g, f16 %.3g\n", name, e32, e16, eh);
  /* one element left unwritten: the poison (a bf16 NaN) fails the check */
  assert_int_equal(narrow_check(dir, name, "-DSKIP=1", dims, true, "skip"), 1);
  snprintf(log, sizeof log, "%s/check_skip.log", dir);
  assert_true(file_has(log, "\"ok\": false"));
  assert_true(json_error(log) > 1e300);   /* NaN reads as an infinite error */
  /* f16 bits read as bf16: the check decodes by the declared dtype, and fails */
  assert_int_equal(narrow_check(dir, name, "-DENCODE=nnrt_f32_to_f16", dims, false, "wrong"), 1);
  snprintf(log, sizeof log, "%s/check_wrong.log", dir);
  assert_true(file_has(log, "FAILED"));
  accuracy_report(name, dir, dims, positions);
}

static void test_mlp_narrow_outputs(void **state) {
  const char *d[] = {"batch=37", "hidden1=129", "hidden2=33"};
  narrow_outputs("models/mlp.lua", "mlp", d, 3, "-d B=17", 17);
}

static void test_gpt2_narrow_outputs(void **state) {
  const char *d[] = {"layers=2", "d=48", "heads=4", "vocab=101", "ctx=64"};
  narrow_outputs("models/gpt2.lua", "gpt2", d, 5, "-d B=3 -d T=17", 3 * 17);
}

int main(void) {
  snprintf(work, sizeof work, "/tmp/nnc_emit_test_XXXXXX");
  if (!mkdtemp(work)) return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_half_is_target_error),
    cmocka_unit_test(test_output_folder),
    cmocka_unit_test(test_mlp),
    cmocka_unit_test(test_gpt2),
    cmocka_unit_test(test_mlp_narrow_outputs),
    cmocka_unit_test(test_gpt2_narrow_outputs),
    cmocka_unit_test(test_bert),
    cmocka_unit_test(test_mlp_train),
    cmocka_unit_test(test_gpt2_train),
    cmocka_unit_test(test_embedding_loss_train),
    cmocka_unit_test(test_attention_train),
    cmocka_unit_test(test_mlp_train_step),
    cmocka_unit_test(test_train_program),
    cmocka_unit_test(test_mlp_loss_scale),
    cmocka_unit_test(test_train_program_scaled),
    cmocka_unit_test(test_op_elementwise),
    cmocka_unit_test(test_op_masks),
    cmocka_unit_test(test_op_softmax_axis),
    cmocka_unit_test(test_op_reduce),
    cmocka_unit_test(test_op_move),
    cmocka_unit_test(test_op_embedding_loss),
    cmocka_unit_test(test_op_matmul),
    cmocka_unit_test(test_op_norms),
    cmocka_unit_test(test_op_attention),
    cmocka_unit_test(test_op_conv),
    cmocka_unit_test(test_op_layout),
    cmocka_unit_test(test_op_recurrent),
    cmocka_unit_test(test_rnn_models),
    cmocka_unit_test(test_lstm_fold),
    cmocka_unit_test(test_op_rope),
    cmocka_unit_test(test_op_gqa),
    cmocka_unit_test(test_op_chains),
    cmocka_unit_test(test_llama),
    cmocka_unit_test(test_generate),
    cmocka_unit_test(test_mnist_cnn),
    cmocka_unit_test(test_tied_embedding),
    cmocka_unit_test(test_resnet18),
    cmocka_unit_test(test_edge_sizes),
    cmocka_unit_test(test_api_misuse),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (!failed) sh("rm -rf %s", work);
  return failed;
}
