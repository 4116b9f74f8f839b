/* tests/unit/tp_logits.c — one run of a generated model on a weights file
 * and fixed ids, its logits written raw (f32, row-major) to OUT.<rank>:
 * parallel_mpi.sh builds it against the model compiled without a plan (one
 * process, rank 0) and with --parallel=tp:N (under mpirun, every rank), and
 * compares the files. Built with -DMODEL=<model> -DIDS=<its ids input>
 * -I<the generated folder> and linked with lib<model>.a.
 *
 * usage: tp_logits WEIGHTS OUT B T VOCAB */
#include <stdio.h>
#include <stdlib.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define API(f) CAT(MODEL, f)

#include STR(MODEL.h)

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s WEIGHTS OUT B T VOCAB\n", argv[0]);
    return 2;
  }
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  API(dims) d = {atoll(argv[3]), atoll(argv[4])};
  int vocab = atoi(argv[5]);
  size_t n = (size_t)(d.B * d.T), count = n * (size_t)vocab;
  int32_t *ids = malloc(n * sizeof *ids);
  float *logits = malloc(count * sizeof *logits);
  if (!ids || !logits) return 1;
  /* ids across the whole vocabulary: every rank's rows, the last ones included */
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 5) % (size_t)vocab);
  ids[n - 1] = vocab - 1;
  API(options) o;
  API(options_default)(&o);
  o.threads = 1;   /* the ranks share the machine */
  API(model) *m = NULL;
  int rc = API(create)(&o, &m);
  if (!rc) rc = API(load_weights_file)(m, argv[1]);
  API(inputs) in = {0};
  in.IDS = ids;
  API(outputs) out = {logits};
  if (!rc) rc = API(run)(m, &d, &in, &out);
  if (rc) {
    fprintf(stderr, "rank %s: %s\n", rank ? rank : "0", API(last_error)(m));
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s.%s", argv[2], rank ? rank : "0");
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(logits, sizeof *logits, count, f) != count || fclose(f)) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  API(destroy)(m);
  free(ids);
  free(logits);
  return 0;
}
