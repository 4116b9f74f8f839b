/* compiler/measure.c — `nnc --tune=measure` (measure.h): the tuning file, the
 * probe build and run, and the choice of the fastest implementation. */
#include "measure.h"

#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnc_config.h"

/* ------------------------------------------------------------ the file */

static void copy(char *dst, size_t n, const char *src, size_t len) {
  if (len >= n) len = n - 1;
  memcpy(dst, src, len);
  dst[len] = 0;
}

/* One line into e: five tab-separated fields, the last a time >= 0 or
 * "unavailable" (us = INFINITY). */
static bool parse_line(char *line, nnc_tuning_entry *e) {
  line[strcspn(line, "\r\n")] = 0;
  char *f[5];
  int nf = 0;
  for (char *p = line; p; nf++) {
    if (nf == 5) return false;   /* a sixth field */
    f[nf] = p;
    p = strchr(p, '\t');
    if (p) *p++ = 0;
  }
  if (nf != 5) return false;
  char *end;
  double us = strtod(f[4], &end);
  if (strcmp(f[4], "unavailable") == 0) us = INFINITY;
  else if (end == f[4] || *end || !(us >= 0) || !isfinite(us)) return false;
  if (!f[0][0] || !f[2][0] || !f[3][0]) return false;
  copy(e->gpu, sizeof e->gpu, f[0], strlen(f[0]));
  copy(e->version, sizeof e->version, f[1], strlen(f[1]));
  copy(e->key, sizeof e->key, f[2], strlen(f[2]));
  copy(e->impl, sizeof e->impl, f[3], strlen(f[3]));
  e->us = us;
  return true;
}

static nnc_status push(nnc_tuning *t, const nnc_tuning_entry *e, nnc_error *err) {
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 64;
    nnc_tuning_entry *p = realloc(t->e, (size_t)cap * sizeof *p);
    if (!p) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory reading the tuning file");
    t->e = p;
    t->cap = cap;
  }
  t->e[t->n++] = *e;
  return NNC_OK;
}

nnc_status nnc_tuning_read(const char *path, nnc_tuning *t, nnc_error *err) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT) return NNC_OK;
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "tuning file %s: cannot be read: %s", path, strerror(errno));
  }
  char line[1024];
  nnc_status st = NNC_OK;
  while (!st && fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      /* longer than any line nnc writes: skip the rest of it */
      int c;
      while ((c = fgetc(f)) != EOF && c != '\n') {}
      t->malformed++;
      continue;
    }
    if (line[0] == '#' || line[0] == '\n') continue;
    nnc_tuning_entry e;
    if (parse_line(line, &e)) st = push(t, &e, err);
    else t->malformed++;
  }
  fclose(f);
  if (st) nnc_tuning_free(t);
  return st;
}

double nnc_tuning_find(const nnc_tuning *t, const char *gpu, const char *key, const char *impl) {
  /* the last line wins: a later measurement replaces an earlier one */
  for (int i = t->n - 1; i >= 0; i--) {
    const nnc_tuning_entry *e = &t->e[i];
    if (!strcmp(e->gpu, gpu) && !strcmp(e->version, NNC_VERSION) && !strcmp(e->key, key) && !strcmp(e->impl, impl))
      return e->us;
  }
  return -1;
}

/* mkdir -p of the folder that holds path. */
static nnc_status make_parent(const char *path, nnc_error *err) {
  char dir[4096];
  copy(dir, sizeof dir, path, strlen(path));
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return NNC_OK;
  *slash = 0;
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(dir, 0755) && errno != EEXIST)
      return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "tuning file %s: cannot make folder %s: %s", path, dir, strerror(errno));
    *p = '/';
  }
  if (mkdir(dir, 0755) && errno != EEXIST)
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "tuning file %s: cannot make folder %s: %s", path, dir, strerror(errno));
  return NNC_OK;
}

nnc_status nnc_tuning_add(nnc_tuning *t, const nnc_tuning_entry *e, const char *path, nnc_error *err) {
  nnc_status st = push(t, e, err);
  if (st || !path) return st;
  if ((st = make_parent(path, err))) return st;
  FILE *f = fopen(path, "a");
  if (!f) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "tuning file %s: cannot be written: %s", path, strerror(errno));
  /* one fprintf a line on an O_APPEND stream: concurrent compiles add whole lines */
  setvbuf(f, NULL, _IOFBF, 1024);
  if (isinf(e->us)) fprintf(f, "%s\t%s\t%s\t%s\tunavailable\n", e->gpu, e->version, e->key, e->impl);
  else fprintf(f, "%s\t%s\t%s\t%s\t%.3f\n", e->gpu, e->version, e->key, e->impl, e->us);
  if (fclose(f)) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "tuning file %s: write failed: %s", path, strerror(errno));
  return NNC_OK;
}

void nnc_tuning_free(nnc_tuning *t) {
  free(t->e);
  memset(t, 0, sizeof *t);
}

nnc_status nnc_tuning_default_path(char *buf, size_t n, nnc_error *err) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int w;
  if (xdg && xdg[0] == '/') w = snprintf(buf, n, "%s/nnc/tuning.tsv", xdg);
  else if (home && home[0]) w = snprintf(buf, n, "%s/.cache/nnc/tuning.tsv", home);
  else return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "--tune=measure: expected $XDG_CACHE_HOME or $HOME for the tuning file, found neither; give --tune-file=PATH");
  if (w < 0 || (size_t)w >= n) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "the tuning file's path is too long");
  return NNC_OK;
}

/* ----------------------------------------------------------- the probe */

/* The GPU's name: $NNC_GPU_NAME, else nvidia-smi's for $NNC_CUDA_DEVICE (0). */
static nnc_status gpu_name(char *buf, size_t n, nnc_error *err) {
  const char *env = getenv("NNC_GPU_NAME");
  if (env && env[0]) {
    copy(buf, n, env, strlen(env));
    return NNC_OK;
  }
  const char *dev = getenv("NNC_CUDA_DEVICE");
  char cmd[256];
  snprintf(cmd, sizeof cmd, "nvidia-smi --query-gpu=name --format=csv,noheader -i %d 2>/dev/null",
           dev && dev[0] ? atoi(dev) : 0);
  FILE *p = popen(cmd, "r");
  buf[0] = 0;
  if (p) {
    if (!fgets(buf, (int)n, p)) buf[0] = 0;
    if (pclose(p) != 0) buf[0] = 0;
  }
  buf[strcspn(buf, "\r\n")] = 0;
  if (!buf[0])
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC,
                      "--tune=measure: expected an NVIDIA GPU on this machine (nvidia-smi names none); "
                      "set NNC_GPU_NAME to compile from a tuning file measured on another machine");
  return NNC_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* The probe's progress: a bar on a terminal, a line per kernel elsewhere. */
static void progress_bar(FILE *f, int done, int total, const char *what) {
  if (!f) return;
  if (isatty(fileno(f))) {
    int w = total ? 30 * done / total : 30;
    fprintf(f, "\r  measuring [%.*s%*s] %d/%d %-40.40s", w, "##############################", 30 - w, "", done, total,
            what);
    if (done == total) fprintf(f, "\n");
  } else {
    fprintf(f, "  measuring %d/%d %s\n", done, total, what);
  }
  fflush(f);
}

/* Builds the probe in a temporary folder, runs it and adds its times (for
 * gpu) to t and the file. */
static nnc_status run_probe(const nnc_emit_request *r, const nnc_kernel_variants *v, const char *gpu, nnc_tuning *t,
                            const char *path, FILE *progress, nnc_error *err) {
  char tmp[] = "/tmp/nnc-probe-XXXXXX";
  if (!mkdtemp(tmp)) return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "--tune=measure: cannot make a folder in /tmp: %s", strerror(errno));
  char dir[64], cmd[512], log[64];
  snprintf(dir, sizeof dir, "%s/probe", tmp);
  snprintf(log, sizeof log, "%s/build.log", tmp);
  nnc_emit_request pr = *r;
  pr.out_dir = dir;
  pr.probe = true;
  pr.cuda_graphs = false;
  int total = 0;
  for (int k = 0; k < r->s->nk; k++) total += v[k].n > 1 ? v[k].n : 0;
  if (progress) fprintf(progress, "nnc: --tune=measure: building a probe of %d implementations on %s\n", total, gpu);
  nnc_status st = nnc_emit(&pr, err);
  if (!st) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(cmd, sizeof cmd, "make -C %s -j%ld > %s 2>&1", dir, cpus > 0 ? cpus : 1, log);
    if (system(cmd) != 0)
      st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--tune=measure: the probe did not build (%s); its log: %s", cmd, log);
  }
  glob_t gl = {0};
  char pat[96];
  snprintf(pat, sizeof pat, "%s/bench_*", dir);
  const char *bench = NULL;   /* bench_<model>, not bench_<model>.c */
  if (!st && glob(pat, 0, NULL, &gl) == 0)
    for (size_t i = 0; i < gl.gl_pathc; i++)
      if (!strchr(strrchr(gl.gl_pathv[i], '/'), '.')) bench = gl.gl_pathv[i];
  if (!st && !bench) st = nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "--tune=measure: no bench_* program in %s", dir);
  FILE *p = NULL;
  if (!st) {
    snprintf(cmd, sizeof cmd, "%s --tune 2>&1", bench);
    p = popen(cmd, "r");
    if (!p) st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "--tune=measure: cannot run %s: %s", cmd, strerror(errno));
  }
  char line[1024], last[1024] = "";
  int done = 0;
  while (!st && fgets(line, sizeof line, p)) {
    int k;
    char impl[64], rest[512];
    line[strcspn(line, "\n")] = 0;
    snprintf(last, sizeof last, "%s", line);
    if (sscanf(line, "tune %d %63s %511[^\n]", &k, impl, rest) != 3) continue;
    char what[128];
    snprintf(what, sizeof what, "kernel %d %s", k, impl);
    progress_bar(progress, ++done, total, what);
    char *end;
    double us = strtod(rest, &end);
    if (k < 0 || k >= r->s->nk) continue;
    if (end == rest) {
      /* "failed: why": not a candidate. A failure the runtime calls
       * "unsupported:" (cuBLASLt's heuristic has no such result for this
       * GEMM) is one every run would meet: it is written down as
       * unavailable, so the next compile need not probe again. Others
       * (a device error) are measured again next time. */
      if (strncmp(rest, "failed:", 7) != 0 || !strstr(line, "unsupported:")) continue;
      us = INFINITY;
    }
    nnc_tuning_entry e;
    memset(&e, 0, sizeof e);
    copy(e.gpu, sizeof e.gpu, gpu, strlen(gpu));
    copy(e.version, sizeof e.version, NNC_VERSION, strlen(NNC_VERSION));
    copy(e.key, sizeof e.key, v[k].key, strlen(v[k].key));
    copy(e.impl, sizeof e.impl, impl, strlen(impl));
    e.us = us;
    st = nnc_tuning_add(t, &e, path, err);
  }
  if (p) {
    int rc = pclose(p);
    if (!st && rc != 0)
      st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--tune=measure: the probe failed on the GPU: %s", last);
  }
  globfree(&gl);
  if (!st) nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  else if (progress) fprintf(progress, "nnc: the probe is kept in %s\n", tmp);
  return st;
}

/* ------------------------------------------------------------ the choice */

static nnc_status choose(const nnc_emit_request *r, const nnc_kernel_variants *v, const nnc_tuning *t, const char *gpu,
                         const char *path, nnc_tile *tiles, nnc_error *err) {
  for (int k = 0; k < r->s->nk; k++) {
    if (v[k].n < 2) continue;
    int best = -1;
    double best_us = 0;
    char why[sizeof tiles[k].reason];
    int w = snprintf(why, sizeof why, "measured on %s:", gpu);
    bool listed = false;
    for (int i = 0; i < v[k].n; i++) {
      double us = nnc_tuning_find(t, gpu, v[k].key, v[k].name[i]);
      if (us < 0) continue;
      if (w < (int)sizeof why && isinf(us))
        w += snprintf(why + w, sizeof why - (size_t)w, "%s %s unavailable", listed ? "," : "", v[k].name[i]);
      else if (w < (int)sizeof why)
        w += snprintf(why + w, sizeof why - (size_t)w, "%s %s %.1f us", listed ? "," : "", v[k].name[i], us);
      listed = true;
      if (isinf(us)) continue;
      if (best < 0 || us < best_us) {
        best = i;
        best_us = us;
      }
    }
    if (best < 0)
      return nnc_errorf(err, NNC_E_TARGET, r->s->k[k].loc,
                        "--tune=measure: kernel %d (%s): no time on %s for nnc %s in %s%s", k, v[k].key, gpu,
                        NNC_VERSION, path, listed ? " (every implementation there is unavailable)" : "");
    /* the pick stays at the end even when the list is cut short */
    int room = (int)sizeof tiles[k].reason - 1 - (int)strlen(" -> ") - (int)strlen(v[k].name[best]);
    snprintf(tiles[k].impl, sizeof tiles[k].impl, "%s", v[k].name[best]);
    snprintf(tiles[k].reason, sizeof tiles[k].reason, "%.*s -> %s", room, why, v[k].name[best]);
  }
  return NNC_OK;
}

nnc_status nnc_measure(const nnc_emit_request *r, nnc_tile *tiles, const char *tune_file, FILE *progress,
                       nnc_error *err) {
  nnc_kernel_variants *v = calloc((size_t)r->s->nk + 1, sizeof *v);
  if (!v) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while tuning");
  char path[4096], gpu[128];
  nnc_tuning t;
  memset(&t, 0, sizeof t);
  nnc_status st = nnc_emit_variants(r, v, err);
  bool any = false;
  for (int k = 0; !st && k < r->s->nk; k++) any |= v[k].n > 1;
  if (!st && any) {
    if (tune_file) copy(path, sizeof path, tune_file, strlen(tune_file));
    else st = nnc_tuning_default_path(path, sizeof path, err);
    if (!st) st = gpu_name(gpu, sizeof gpu, err);
    if (!st) st = nnc_tuning_read(path, &t, err);
    if (!st && t.malformed && progress)
      fprintf(progress, "nnc: tuning file %s: %d malformed lines skipped\n", path, t.malformed);
    bool missing = false;
    for (int k = 0; !st && k < r->s->nk && !missing; k++)
      for (int i = 0; i < v[k].n && v[k].n > 1; i++) missing |= nnc_tuning_find(&t, gpu, v[k].key, v[k].name[i]) < 0;
    if (!st && missing && getenv("NNC_GPU_NAME") && getenv("NNC_GPU_NAME")[0])
      st = nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC,
                      "--tune=measure: %s lacks times for %s (NNC_GPU_NAME) and nnc %s; measure on that GPU first",
                      path, gpu, NNC_VERSION);
    else if (!st && missing)
      st = run_probe(r, v, gpu, &t, path, progress, err);
    else if (!st && progress)
      fprintf(progress, "nnc: --tune=measure: every time found in %s\n", path);
    if (!st) st = choose(r, v, &t, gpu, path, tiles, err);
  }
  nnc_tuning_free(&t);
  free(v);
  return st;
}
