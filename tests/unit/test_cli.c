/* tests/unit/test_cli.c — the nnc command: options, exit codes, outputs, and
 * that a failed compile leaves nothing behind. Runs the built binary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_sh.h"

static char dir[256];

/* Runs nnc with args (a shell fragment), captures stdout+stderr into out,
 * returns the exit code. */
static int nnc(char *out, size_t n, const char *fmt, ...) {
  char args[2048], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd %s && %s/compiler/nnc %s 2>&1", dir, NNC_BUILD_ROOT, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  int st = pclose(p);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static void write_file(const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static bool exists(const char *name) {
  char path[512];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, &st) == 0;
}

static const char *tiny =
  "local cfg = config { width = 5 }\n"
  "local B = dim(\"B\", 4)\n"
  "local x = input(\"x\", f32, { B, 3 })\n"
  "local h = relu(linear(x, cfg.width, param(\"fc1\")))\n"
  "output(\"y\", linear(h, 2, param(\"out\")))\n";

static const char *broken =
  "local x = input(\"x\", f32, { 2, 3 })\n"
  "local y = input(\"y\", f32, { 2, 4 })\n"
  "output(\"z\", x + y)\n";

static int setup(void **state) {
  strcpy(dir, "/tmp/nnc_cli_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  write_file("tiny.lua", tiny);
  write_file("broken.lua", broken);
  return 0;
}

static int teardown(void **state) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_help_version_targets(void **state) {
  char out[16384];
  assert_int_equal(nnc(out, sizeof out, "--help"), 0);
  assert_non_null(strstr(out, "exit codes"));
  assert_non_null(strstr(out, "--emit=plan"));
  assert_int_equal(nnc(out, sizeof out, "--version"), 0);
  assert_string_equal(out, "nnc " NNC_VERSION_STRING "\n");
  assert_int_equal(nnc(out, sizeof out, "--list-targets"), 0);
  assert_non_null(strstr(out, "c-simd"));
  assert_non_null(strstr(out, "cuda-sm90"));
  assert_non_null(strstr(out, "opencl"));
}

static void test_usage_errors(void **state) {
  char out[4096];
  assert_int_equal(nnc(out, sizeof out, ""), 1);
  assert_non_null(strstr(out, "expected a model file"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --frobnicate"), 1);
  assert_non_null(strstr(out, "unknown option \"--frobnicate\""));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --emit=asm"), 1);
  assert_non_null(strstr(out, "--emit: expected ir, dot or plan, found \"asm\""));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua other.lua"), 1);
  assert_int_equal(nnc(out, sizeof out, "tiny.lua -D novalue"), 1);
  assert_non_null(strstr(out, "-D: expected name=value"));
}

static void test_targets(void **state) {
  char out[4096];
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm42 --emit=ir"), 6);
  assert_non_null(strstr(out, "unknown target \"cuda-sm42\"; known: c-simd"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm70 --precision=tf32 -o outdir"), 6);
  assert_non_null(strstr(out, "target cuda-sm70 has no tf32 tensor cores; expected --precision=f32 or f16"));
  assert_false(exists("outdir"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm75 --precision=bf16 -o outdir"), 6);
  assert_non_null(strstr(out, "target cuda-sm75 has no bf16 tensor cores; expected --precision=f32 or f16"));
  assert_false(exists("outdir"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=c-simd --tune=measure -o outdir"), 1);
  assert_non_null(strstr(out, "--tune=measure: expected a cuda-* target, found c-simd"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --tune=fast -o outdir"), 1);
  assert_non_null(strstr(out, "--tune: expected analytic or measure, found \"fast\""));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --cuda-graphs -o outdir"), 1);
  assert_non_null(strstr(out, "--cuda-graphs: expected a cuda-* target, found c-simd"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --cuda-graphs=off -o outdir"), 1);
  assert_non_null(strstr(out, "--cuda-graphs: expected a cuda-* target, found c-simd"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --cuda-graphs=maybe -o outdir"), 1);
  assert_non_null(strstr(out, "--cuda-graphs: expected on or off, found \"maybe\""));
  assert_false(exists("outdir"));
  /* narrow storage is for GPU targets; an unknown precision is a usage error */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --precision=bf16 -o outdir"), 6);
  assert_non_null(strstr(out, "--precision=bf16: target c-simd computes and stores f32"));
  assert_false(exists("outdir"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=f8 -o outdir"), 1);
  assert_non_null(strstr(out, "--precision: expected f32, tf32, bf16, f16 or fp8, found \"f8\""));
  assert_false(exists("outdir"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 -o cudadir"), 0);
  assert_true(exists("cudadir/tiny.cu"));
  assert_true(exists("cudadir/kernels/attention.cuh"));
  assert_true(exists("cudadir/runtime/cuda/nnrt_cuda.h"));
  assert_false(exists("cudadir/kernels/gemm.c"));   /* no C SIMD kernels in a CUDA folder */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua -o outdir"), 0);
  assert_true(exists("outdir/tiny.h"));
  assert_true(exists("outdir/Makefile"));
  assert_true(exists("outdir/bench_tiny.c"));
  assert_int_equal(nnc(out, sizeof out, "broken.lua -o brokendir"), 3);
  assert_false(exists("brokendir"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=c-avx2 --explain"), 0);
  assert_non_null(strstr(out, "target c-avx2: isa avx2, 8 f32 lanes x 16 vector registers"));
  assert_non_null(strstr(out, "gemm M=4 N=5 K=3: 6x16 register block"));
}

/* --outputs=f32|storage: narrow outputs for cuda-* under bf16 storage, no
 * change where floats are f32 (c-simd, --precision=f32), refused for OpenCL
 * and for a value that is neither. */
static void test_outputs(void **state) {
  char out[16384], path[512];
  assert_int_equal(nnc(out, sizeof out, "--help"), 0);
  assert_non_null(strstr(out, "--outputs=storage float outputs keep the storage dtype of --precision"));
  assert_non_null(strstr(out, "with f32 or tf32 (so on c-simd) it\n                    changes nothing"));
  /* a bad value: a usage error, on every path, nothing written */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --outputs=f64 -o badout"), 1);
  assert_non_null(strstr(out, "--outputs: expected f32 or storage, found \"f64\""));
  assert_false(exists("badout"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 --outputs= --emit=ir"), 1);
  assert_non_null(strstr(out, "--outputs: expected f32 or storage, found \"\""));
  /* OpenCL refuses it (even where the floats are f32), f32 outputs are fine */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=opencl --outputs=storage -o ocldir"), 6);
  assert_non_null(strstr(out, "--outputs=storage: target opencl returns f32 outputs only; expected --outputs=f32"));
  assert_false(exists("ocldir"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=opencl --outputs=f32 --explain"), 0);
  /* c-simd computes and stores f32: accepted, the same folder as without it */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --outputs=storage -o simd_storage"), 0);
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --outputs=f32 -o simd_f32"), 0);
  snprintf(path, sizeof path, "%s/simd_storage/tiny.h", dir);
  assert_true(file_has(path, "  float *y;   /* f32[B,2] */"));
  assert_int_equal(sh("cd %s && diff -r simd_storage simd_f32 > /dev/null", dir), 0);
  /* cuda bf16: the logits are bf16 bits at the API; the default keeps f32 */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 --outputs=storage -o cuda_storage"), 0);
  snprintf(path, sizeof path, "%s/cuda_storage/tiny.h", dir);
  assert_true(file_has(path, "  uint16_t *y;   /* bf16[B,2] */"));
  assert_true(file_has(path, "nnrt_bf16_to_f32 converts one"));
  snprintf(path, sizeof path, "%s/cuda_storage/README.md", dir);
  assert_true(file_has(path, "the float outputs are left\nin the storage dtype, bf16 (nnc was given `--outputs=storage`)"));
  snprintf(path, sizeof path, "%s/cuda_storage/tiny.cu", dir);
  assert_true(file_has(path, " * precision bf16, outputs left in bf16 (--outputs=storage: no cast to f32).\n"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=f16 --outputs=storage -o cuda_f16"), 0);
  snprintf(path, sizeof path, "%s/cuda_f16/tiny.h", dir);
  assert_true(file_has(path, "  uint16_t *y;   /* f16[B,2] */"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 -o cuda_default"), 0);
  snprintf(path, sizeof path, "%s/cuda_default/tiny.h", dir);
  assert_true(file_has(path, "  float *y;   /* f32[B,2] */"));
  assert_false(file_has(path, "uint16_t"));
  /* tf32 stores f32: nothing changes */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=tf32 --outputs=storage -o cuda_tf32"), 0);
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=tf32 -o cuda_tf32_default"), 0);
  assert_int_equal(sh("cd %s && diff -r cuda_tf32 cuda_tf32_default > /dev/null", dir), 0);
  /* the graph: no cast before the output, which is the linear's bf16 */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 --outputs=storage --emit=ir"), 0);
  assert_non_null(strstr(out, "output y = t7 bf16[B,2]"));
  assert_non_null(strstr(out, "kernels (3):"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 --emit=ir"), 0);
  assert_non_null(strstr(out, "output y = t9 f32[B,2]"));
  assert_non_null(strstr(out, "kernels (4):"));
  /* --explain says so */
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 --outputs=storage --explain"), 0);
  assert_non_null(strstr(out, "output y: bf16[B,2], left in the storage dtype (--outputs=storage: no cast to f32)"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=bf16 --explain"), 0);
  assert_non_null(strstr(out, "output y: f32[B,2], cast from bf16 where it leaves (--outputs=storage would keep bf16)"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --target=cuda-sm80 --precision=f32 --outputs=storage --explain"), 0);
  assert_null(strstr(out, "output y:"));
}

static void test_emit_views(void **state) {
  char out[65536];
  assert_int_equal(nnc(out, sizeof out, "tiny.lua"), 0);
  assert_non_null(strstr(out, "tiny: ok: 1 inputs, 1 outputs, 4 parameters"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --emit=ir"), 0);
  assert_non_null(strstr(out, "linear"));
  assert_non_null(strstr(out, "tiny.lua:4"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --emit=dot"), 0);
  assert_non_null(strstr(out, "digraph"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua --emit=plan -o plan.txt"), 0);
  assert_true(exists("plan.txt"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua -D width=7 --emit=ir"), 0);
  assert_non_null(strstr(out, "[B,7]"));
}

static void test_broken_model_writes_nothing(void **state) {
  char out[4096];
  assert_int_equal(nnc(out, sizeof out, "broken.lua --emit=plan -o broken.txt"), 3);
  assert_non_null(strstr(out, "broken.lua:3: add: shapes [2,3] and [2,4] do not broadcast"));
  assert_false(exists("broken.txt"));
  assert_int_equal(nnc(out, sizeof out, "missing.lua --emit=ir"), 5);
  assert_non_null(strstr(out, "missing.lua"));
  assert_int_equal(nnc(out, sizeof out, "tiny.lua -D nosuchkey=1"), 1);
  assert_non_null(strstr(out, "nosuchkey"));
}

static void test_random_weights(void **state) {
  char out[4096], path[512];
  assert_int_equal(nnc(out, sizeof out, "weights tiny.lua -o w.safetensors --seed=7 -D width=6"), 0);
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char len8[8];
  assert_int_equal(fread(len8, 1, 8, f), 8);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  assert_true(hlen > 0 && hlen < 4096);
  char header[4096];
  assert_int_equal(fread(header, 1, hlen, f), hlen);
  header[hlen] = 0;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  /* fc1 [6,3] + [6], out [2,6] + [2]: 38 floats after the header */
  assert_int_equal(size, (long)(8 + hlen + 38 * 4));
  assert_non_null(strstr(header, "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[6,3]"));
  assert_non_null(strstr(header, "\"out.bias\":{\"dtype\":\"F32\",\"shape\":[2]"));
  assert_int_equal(nnc(out, sizeof out, "weights tiny.lua"), 1);
  assert_int_equal(nnc(out, sizeof out, "weights tiny.lua -o x.safetensors --seed=abc"), 1);
  assert_false(exists("x.safetensors"));
}

static void test_real_model_plan(void **state) {
  char out[1 << 17];
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --emit=plan", NNC_SOURCE_ROOT), 0);
  assert_non_null(strstr(out, "peak"));
  assert_non_null(strstr(out, "unplanned"));
}

/* --parallel: the plan in --explain (its collectives and their bytes) and
 * in --emit=ir (each weight's slice); what no plan does yet is refused. */
static void test_parallel_plan(void **state) {
  char out[1 << 17];
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua -D layers=2 --parallel=tp:2 --explain", NNC_SOURCE_ROOT), 0);
  /* 2 layers' 6 weights each and the vocabulary (wte, tied to the head) */
  assert_non_null(strstr(out, "parallel plan: tp:2, 13 of 28 weights sliced"));
  assert_non_null(strstr(out, "collective: all_reduce h.1.mlp.c_proj.all_reduce f32[B,T,768] over 2 ranks, 25.166 MB"));
  /* each rank's 25129 of the 50257 logits at B x T = 8192, f32: 823.427 MB; with the 5 all_reduces of
   * 25.166 MB (4 pairs and the embedding), 949.256 MB */
  assert_non_null(strstr(out, "collective: all_gather linear.all_gather f32[B,T,25129] over 2 ranks, 823.427 MB"));
  assert_non_null(strstr(out, "collectives: 5 all_reduces, 1 all_gathers, 949.256 MB a run"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua -D layers=1 -D vocab=101 --parallel=tp:4 --emit=ir",
                       NNC_SOURCE_ROOT), 0);
  assert_non_null(strstr(out, "wte.weight f32[26,768]  (a rank's slice: rows r*26.. of the file's 101 along dim 1, "
                              "zeros past its end)"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua -D layers=1 --parallel=tp:2 --emit=ir", NNC_SOURCE_ROOT), 0);
  assert_non_null(strstr(out, "h.0.attn.c_attn.weight f32[768,1152]  (a rank's slice: 1/2 of dim 2 in each of its 3 groups)"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --parallel=tp:2 --target=opencl -o par_out", NNC_SOURCE_ROOT), 6);
  assert_non_null(strstr(out, "target opencl does not run collectives yet"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --parallel=dp:2 -o par_out", NNC_SOURCE_ROOT), 1);
  assert_non_null(strstr(out, "expected --train"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --parallel=dp:2,zero1 -o par_out", NNC_SOURCE_ROOT), 1);
  assert_non_null(strstr(out, "zero1: expected --train"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --train --parallel=zero1 -o par_out", NNC_SOURCE_ROOT), 1);
  assert_non_null(strstr(out, "expected dp:M with M >= 2"));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --parallel=pp:2 --emit=ir", NNC_SOURCE_ROOT), 1);
  assert_non_null(strstr(out, "expected tp:N and/or dp:M"));
  assert_false(exists("par_out"));
}

/* --recompute: a bad level or no --train is a usage error; each level's
 * plan of the training step peaks lower than the one before, and a folder
 * compiled with it leaves nothing behind when refused. */
static void test_recompute(void **state) {
  char out[1 << 17];
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --train --recompute=all --emit=plan", NNC_SOURCE_ROOT), 1);
  assert_non_null(strstr(out, "--recompute: expected none, gelu, norm or block, found \"all\""));
  assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua --recompute=gelu -o rc_out", NNC_SOURCE_ROOT), 1);
  assert_non_null(strstr(out, "--recompute=gelu: expected --train"));
  assert_false(exists("rc_out"));
  const char *levels[] = {"none", "gelu", "norm", "block"};
  long long last = -1;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(nnc(out, sizeof out, "%s/models/gpt2.lua -D layers=2 --train --recompute=%s --emit=plan",
                         NNC_SOURCE_ROOT, levels[i]), 0);
    const char *p = strstr(out, "peak ");
    assert_non_null(p);
    long long peak = atoll(p + 5);
    assert_true(peak > 0);
    if (last >= 0 && !(peak < last)) fail_msg("--recompute=%s: peak %lld, expected below %lld", levels[i], peak, last);
    last = peak;
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_help_version_targets),
    cmocka_unit_test(test_usage_errors),
    cmocka_unit_test(test_targets),
    cmocka_unit_test(test_outputs),
    cmocka_unit_test(test_emit_views),
    cmocka_unit_test(test_broken_model_writes_nothing),
    cmocka_unit_test(test_random_weights),
    cmocka_unit_test(test_real_model_plan),
    cmocka_unit_test(test_recompute),
    cmocka_unit_test(test_parallel_plan),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
