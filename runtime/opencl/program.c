/* runtime/opencl/program.c — building programs from source, and the binary
 * cache on disk that lets the next process skip the compiler. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnrt_opencl_impl.h"

/* An entry larger than this is not a program binary: treated as corrupt. */
#define MAX_ENTRY ((uint64_t)1 << 30)

uint64_t nnrt_cl_fnv1a64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t nnrt_cl_cache_key(const char *device_name, const char *driver, const char *options,
                           const char *source) {
  const char *parts[4] = {device_name, driver, options, source};
  uint64_t h = NNRT_CL_FNV_OFFSET;
  for (int i = 0; i < 4; i++) {
    const char *s = parts[i] ? parts[i] : "";
    h = nnrt_cl_fnv1a64(h, s, strlen(s) + 1);
  }
  return h;
}

nnrt_status nnrt_cl_cache_dir(const char *option, char *buf, size_t size, nnrt_error *err) {
  if (!buf || size == 0) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_cache_dir: buf is NULL or size 0");
  buf[0] = '\0';
  const char *base = NULL, *suffix = "", *from = "the cache option";
  const char *env;
  if (option && option[0]) {
    base = option;
  } else if ((env = getenv("NNC_OPENCL_CACHE")) && env[0]) {
    base = env;
    from = "NNC_OPENCL_CACHE";
  } else if ((env = getenv("XDG_CACHE_HOME")) && env[0]) {
    base = env;
    suffix = "/nnc";
    from = "XDG_CACHE_HOME";
  } else if ((env = getenv("HOME")) && env[0]) {
    base = env;
    suffix = "/.cache/nnc";
    from = "HOME";
  } else {
    return nnrt_errorf(err, NNRT_E_ARG,
                       "OpenCL binary cache: no folder given and none of NNC_OPENCL_CACHE, "
                       "XDG_CACHE_HOME, HOME is set");
  }
  int w = snprintf(buf, size, "%s%s", base, suffix);
  if (w < 0 || (size_t)w >= size) {
    buf[0] = '\0';
    return nnrt_errorf(err, NNRT_E_SIZE,
                       "OpenCL binary cache: the folder from %s is %d bytes long, at most %zu "
                       "fit: \"%.64s...\"", from, w, size - 1, base);
  }
  return NNRT_OK;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* mkdir -p; false when the folder does not exist afterwards. Another
 * process making the same folder at the same time is fine (EEXIST). */
static bool make_dirs(const char *dir) {
  char path[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof path) return false;
  memcpy(path, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (path[i] != '/' && path[i] != '\0') continue;
    char c = path[i];
    path[i] = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return false;
    path[i] = c;
  }
  struct stat sb;
  return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void entry_path(const nnrt_cl *cl, uint64_t key, char *buf, size_t size) {
  snprintf(buf, size, "%s/%016llx.clbin", cl->cache_dir, (unsigned long long)key);
}

/* The binary of a valid entry, malloc'ed; NULL when there is none or it is
 * corrupt (*corrupt says which). */
static unsigned char *load_entry(const char *path, uint64_t key, size_t *len, bool *corrupt) {
  *corrupt = false;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char head[NNRT_CL_CACHE_HEADER];
  unsigned char *bin = NULL;
  *corrupt = true;
  if (fread(head, 1, sizeof head, f) != sizeof head) goto done;
  if (memcmp(head, NNRT_CL_CACHE_MAGIC, 8) != 0 || get_u64(head + 8) != key) goto done;
  uint64_t n = get_u64(head + 16);
  if (n == 0 || n > MAX_ENTRY) goto done;
  bin = malloc((size_t)n);
  if (!bin) {
    /* Not the entry's fault: leave it for a later, roomier process. */
    *corrupt = false;
    goto done;
  }
  /* Exactly n bytes and nothing after them. */
  if (fread(bin, 1, (size_t)n, f) != (size_t)n || fgetc(f) != EOF ||
      nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, bin, (size_t)n) != get_u64(head + 24)) {
    free(bin);
    bin = NULL;
    goto done;
  }
  *corrupt = false;
  *len = (size_t)n;
done:
  fclose(f);
  return bin;
}

/* Writes the entry to a temporary file of the cache folder and renames it
 * into place: rename is atomic within a file system, so a reader sees the
 * old entry, none, or the whole new one, whatever other processes do. */
static bool store_entry(const nnrt_cl *cl, const char *path, uint64_t key,
                        const unsigned char *bin, size_t len) {
  if (!make_dirs(cl->cache_dir)) return false;
  char tmp[4200];
  int w = snprintf(tmp, sizeof tmp, "%s/.tmp-%016llx-XXXXXX", cl->cache_dir,
                   (unsigned long long)key);
  if (w < 0 || (size_t)w >= sizeof tmp) return false;
  int fd = mkstemp(tmp);
  if (fd < 0) return false;
  unsigned char head[NNRT_CL_CACHE_HEADER];
  memcpy(head, NNRT_CL_CACHE_MAGIC, 8);
  put_u64(head + 8, key);
  put_u64(head + 16, (uint64_t)len);
  put_u64(head + 24, nnrt_cl_fnv1a64(NNRT_CL_FNV_OFFSET, bin, len));
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(tmp);
    return false;
  }
  /* mkstemp makes the file 0600; entries are as shareable as the folder. */
  fchmod(fd, 0644);
  bool ok = fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(bin, 1, len, f) == len;
  ok = fflush(f) == 0 && ok;
  ok = fsync(fd) == 0 && ok;
  ok = fclose(f) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  return ok;
}

/* The device binary of a built program, malloc'ed; NULL when the driver
 * gives none (the program is still usable, it just is not cached). */
static unsigned char *program_binary(cl_program prog, size_t *len) {
  *len = 0;
  size_t n = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS ||
      n == 0 || n > MAX_ENTRY)
    return NULL;
  unsigned char *bin = malloc(n);
  if (!bin) return NULL;
  unsigned char *bins[1] = {bin};
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS) {
    free(bin);
    return NULL;
  }
  *len = n;
  return bin;
}

/* Builds from a cached binary; NULL when the driver refuses it. */
static cl_program from_binary(nnrt_cl *cl, const unsigned char *bin, size_t len,
                              const char *options) {
  cl_int e = CL_SUCCESS, bin_status = CL_SUCCESS;
  const unsigned char *bins[1] = {bin};
  cl_program prog =
      clCreateProgramWithBinary(cl->ctx, 1, &cl->dev.id, &len, bins, &bin_status, &e);
  if (e != CL_SUCCESS || bin_status != CL_SUCCESS) {
    if (prog) clReleaseProgram(prog);
    return NULL;
  }
  if (clBuildProgram(prog, 1, &cl->dev.id, options, NULL, NULL) != CL_SUCCESS) {
    clReleaseProgram(prog);
    return NULL;
  }
  return prog;
}

/* Fills err with the failure of clBuildProgram, its build log included. */
static nnrt_status build_error(nnrt_cl *cl, cl_program prog, cl_int e, const char *label,
                               nnrt_error *err) {
  char log[480];
  size_t n = 0;
  log[0] = '\0';
  /* Only the head of a long log fits the message; it holds the first error. */
  if (clGetProgramBuildInfo(prog, cl->dev.id, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) ==
          CL_SUCCESS && n > 0) {
    char *full = malloc(n + 1);
    if (full && clGetProgramBuildInfo(prog, cl->dev.id, CL_PROGRAM_BUILD_LOG, n, full, NULL) ==
                    CL_SUCCESS) {
      full[n] = '\0';
      snprintf(log, sizeof log, "%s", full);
    }
    free(full);
  }
  size_t len = strlen(log);
  while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\r'))
    log[--len] = '\0';
  nnrt_status st = nnrt_cl_status_of(e);
  if (st == NNRT_OK) st = NNRT_E_DEVICE;
  return nnrt_errorf(err, st, "%.120s: OpenCL build failed on %.64s: %s (%d); build log: %s",
                     label, cl->dev.name, nnrt_cl_error_name(e), (int)e,
                     log[0] ? log : "(empty)");
}

nnrt_status nnrt_cl_program_build(nnrt_cl *cl, const char *source, const char *options,
                                  const char *label, cl_program *out, nnrt_error *err) {
  if (!label) label = "OpenCL program";
  if (!cl || !source || !out)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: nnrt_cl_program_build: cl, source or out is NULL",
                       label);
  *out = NULL;
  if (!options) options = "";
  uint64_t key = nnrt_cl_cache_key(cl->dev.name, cl->dev.driver, options, source);
  char path[4200];
  if (cl->cache_on) {
    entry_path(cl, key, path, sizeof path);
    size_t len = 0;
    bool corrupt = false;
    unsigned char *bin = load_entry(path, key, &len, &corrupt);
    bool had_entry = bin != NULL;
    cl_program prog = had_entry ? from_binary(cl, bin, len, options) : NULL;
    free(bin);
    if (prog) {
      cl->stats.hits++;
      *out = prog;
      return NNRT_OK;
    }
    if (corrupt || had_entry) {
      /* Removing it (rather than only overwriting) keeps a bad entry from
       * being read again should the store below fail. */
      unlink(path);
      cl->stats.rejected++;
    }
  }
  cl->stats.misses++;
  cl_int e = CL_SUCCESS;
  cl_program prog = clCreateProgramWithSource(cl->ctx, 1, &source, NULL, &e);
  char what[200];
  snprintf(what, sizeof what, "%.120s: creating an OpenCL program", label);
  nnrt_status st = nnrt_cl_check(e, what, err);
  if (st != NNRT_OK) return st;
  e = clBuildProgram(prog, 1, &cl->dev.id, options, NULL, NULL);
  if (e != CL_SUCCESS) {
    st = build_error(cl, prog, e, label, err);
    clReleaseProgram(prog);
    return st;
  }
  if (cl->cache_on) {
    size_t len = 0;
    unsigned char *bin = program_binary(prog, &len);
    if (bin && store_entry(cl, path, key, bin, len))
      cl->stats.stored++;
    else
      cl->stats.store_failures++;
    free(bin);
  }
  *out = prog;
  return NNRT_OK;
}
