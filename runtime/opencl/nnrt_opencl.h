/* runtime/opencl/nnrt_opencl.h — the OpenCL part of libnnrt: OpenCL errors
 * as nnrt_status values, platform/device listing and choice, a context with
 * one in-order profiling queue, programs built from source with a binary
 * cache on disk, buffers, kernel launches and event timing.
 *
 * Host C11 over the OpenCL 1.2 C API through the ICD loader: these files
 * build with gcc -I<runtime> -I<runtime>/opencl -DCL_TARGET_OPENCL_VERSION=120
 * and link -lOpenCL. The generated model folder for an OpenCL target copies
 * runtime/ and runtime/opencl/ and builds them there.
 *
 * Conventions are those of nnrt.h: every function that can fail returns an
 * nnrt_status and fills the nnrt_error it is given (may be NULL); nothing
 * aborts or exits; destroy/release functions return nothing and accept NULL.
 * Without an OpenCL platform or device every entry point that needs one
 * returns NNRT_E_DEVICE with a message ending in "(no OpenCL platform or
 * device)", and never crashes.
 *
 * Threading: one nnrt_cl is used by one thread at a time; separate nnrt_cl
 * handles may build into the same cache folder from any number of threads
 * or processes at once. */
#ifndef NNRT_OPENCL_H
#define NNRT_OPENCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "nnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

/* The nnrt_status an OpenCL error code stands for: the out-of-memory codes
 * (CL_OUT_OF_HOST_MEMORY, CL_OUT_OF_RESOURCES,
 * CL_MEM_OBJECT_ALLOCATION_FAILURE) are NNRT_E_NOMEM; CL_INVALID_* codes
 * NNRT_E_ARG, except CL_INVALID_BUFFER_SIZE, CL_INVALID_WORK_GROUP_SIZE,
 * CL_INVALID_WORK_ITEM_SIZE and CL_INVALID_GLOBAL_WORK_SIZE (NNRT_E_SIZE),
 * CL_INVALID_PROGRAM_EXECUTABLE (NNRT_E_STATE) and CL_INVALID_BINARY
 * (NNRT_E_FORMAT); CL_MISALIGNED_SUB_BUFFER_OFFSET NNRT_E_ARG;
 * CL_PROFILING_INFO_NOT_AVAILABLE NNRT_E_STATE; everything else (no device,
 * build and compile failures, unknown codes) NNRT_E_DEVICE. CL_SUCCESS is
 * NNRT_OK. */
nnrt_status nnrt_cl_status_of(cl_int e);
/* The symbolic name of an OpenCL 1.2 error code, e.g. "CL_INVALID_VALUE";
 * "CL_SUCCESS" for 0 and "CL_UNKNOWN_ERROR" for a code it does not know. */
const char *nnrt_cl_error_name(cl_int e);
/* For e != CL_SUCCESS: fills err with "what: CL_NAME (code)" (plus the
 * no-device hint for CL_DEVICE_NOT_FOUND and CL_PLATFORM_NOT_FOUND_KHR) and
 * returns nnrt_cl_status_of(e). CL_SUCCESS returns NNRT_OK and leaves err. */
nnrt_status nnrt_cl_check(cl_int e, const char *what, nnrt_error *err);

/* ---------------------------------------------------------------- device */

#define NNRT_CL_MAX_PLATFORMS 16
#define NNRT_CL_MAX_DEVICES 64   /* over all platforms */

typedef struct nnrt_cl_device_info {
  int platform;               /* index of the platform, as clGetPlatformIDs lists them */
  int index;                  /* index of the device within its platform */
  cl_platform_id platform_id;
  cl_device_id id;
  cl_device_type type;        /* CL_DEVICE_TYPE_GPU, _CPU, ... */
  char platform_name[128];
  char name[256];             /* CL_DEVICE_NAME */
  char driver[128];           /* CL_DRIVER_VERSION */
  char version[128];          /* CL_DEVICE_VERSION */
  cl_uint compute_units;
  cl_ulong global_mem;        /* bytes */
  size_t max_work_group;
  cl_ulong local_mem;         /* CL_DEVICE_LOCAL_MEM_SIZE, bytes */
  cl_uint preferred_vector;   /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT */
} nnrt_cl_device_info;

/* Every device of every platform, platform by platform, into out[0..cap);
 * *count gets how many were stored. NNRT_E_DEVICE "(no OpenCL platform or
 * device)" when there is none. A platform whose devices cannot be listed is
 * skipped. */
nnrt_status nnrt_cl_devices(nnrt_cl_device_info *out, int cap, int *count, nnrt_error *err);

/* One line per device, "P:D name (type, driver)" joined by "; ", into buf
 * (truncated to size, always terminated). Pure. */
void nnrt_cl_device_list_text(const nnrt_cl_device_info *devs, int n, char *buf, size_t size);

/* Picks a device from devs by spec: "P:D" (platform and device index,
 * decimal digits only) or else a case-insensitive substring of the device
 * name (the first device that matches). NNRT_E_ARG naming spec and listing
 * the devices when nothing matches; source names where spec came from in
 * that message (e.g. "NNC_OPENCL_DEVICE"). Pure. */
nnrt_status nnrt_cl_device_match(const nnrt_cl_device_info *devs, int n, const char *spec,
                                 const char *source, nnrt_cl_device_info *out,
                                 nnrt_error *err);

/* Lists the devices and picks one: by spec when not NULL or empty, else by
 * $NNC_OPENCL_DEVICE when set and not empty, else the first GPU, else the
 * first device. */
nnrt_status nnrt_cl_device_choose(const char *spec, nnrt_cl_device_info *out, nnrt_error *err);

/* --------------------------------------------------- context and queue */

typedef struct nnrt_cl_options {
  const char *device;     /* device spec as for nnrt_cl_device_choose; NULL: environment */
  const char *cache_dir;  /* binary cache folder; NULL: see nnrt_cl_cache_dir */
  bool no_cache;          /* build every program from source, read and write no cache */
} nnrt_cl_options;

/* What the binary cache did for one nnrt_cl (for tests and logs). */
typedef struct nnrt_cl_cache_stats {
  long hits;            /* programs built from a cached binary */
  long misses;          /* programs built from source (no usable entry, or no cache) */
  long stored;          /* entries written */
  long store_failures;  /* entries that could not be written (the build still succeeded) */
  long rejected;        /* entries found corrupt or refused by the driver, removed */
} nnrt_cl_cache_stats;

/* A device, its context, one in-order command queue with profiling enabled,
 * and the binary cache settings. opt may be NULL (all defaults). When no
 * cache folder can be found (no option, variable or HOME) the cache is off;
 * a folder path too long is NNRT_E_SIZE. The folder is made on first store. */
typedef struct nnrt_cl nnrt_cl;

nnrt_status nnrt_cl_create(const nnrt_cl_options *opt, nnrt_cl **out, nnrt_error *err);
/* Waits for the queue, then releases queue and context. */
void nnrt_cl_destroy(nnrt_cl *cl);
const nnrt_cl_device_info *nnrt_cl_device(const nnrt_cl *cl);
cl_context nnrt_cl_context(const nnrt_cl *cl);
cl_command_queue nnrt_cl_queue(const nnrt_cl *cl);
/* The cache folder in use; "" when the cache is off. */
const char *nnrt_cl_cache_folder(const nnrt_cl *cl);
/* Zeros when cl is NULL. */
nnrt_cl_cache_stats nnrt_cl_get_cache_stats(const nnrt_cl *cl);
/* Waits until every command of the queue has finished. */
nnrt_status nnrt_cl_finish(nnrt_cl *cl, nnrt_error *err);

/* ------------------------------------------------------------- buffers */

/* A read-write device buffer of bytes (0 is served as 1 byte, since OpenCL
 * has no empty buffers). Release with nnrt_cl_buffer_release. */
nnrt_status nnrt_cl_buffer_create(nnrt_cl *cl, size_t bytes, cl_mem *out, nnrt_error *err);
void nnrt_cl_buffer_release(cl_mem m);
/* Blocking copies of bytes at offset of the buffer from / to host memory;
 * bytes 0 does nothing. */
nnrt_status nnrt_cl_write(nnrt_cl *cl, cl_mem dst, size_t offset, const void *src,
                          size_t bytes, nnrt_error *err);
nnrt_status nnrt_cl_read(nnrt_cl *cl, cl_mem src, size_t offset, void *dst, size_t bytes,
                         nnrt_error *err);

/* ------------------------------------------------------ kernels, events */

/* Enqueues kernel over dims (1 to 3) dimensions of global work items,
 * local NULL letting the driver choose the work-group size. When ev is not
 * NULL it receives the launch's event (release it with clReleaseEvent);
 * label names the kernel in messages. Does not wait. */
nnrt_status nnrt_cl_run(nnrt_cl *cl, cl_kernel kernel, cl_uint dims, const size_t *global,
                        const size_t *local, cl_event *ev, const char *label,
                        nnrt_error *err);
/* Nanoseconds the command of ev ran (CL_PROFILING_COMMAND_END - START);
 * waits for ev to complete. */
nnrt_status nnrt_cl_event_elapsed_ns(cl_event ev, uint64_t *ns, nnrt_error *err);

/* ---------------------------------------------------------------- peaks */

/* The device's rates for a roofline (runtime/opencl/peaks.c): *gbps the
 * bandwidth of a device-to-device copy of a buffer larger than the caches
 * (up to 256 MiB; bytes read plus written, GB/s; the median of 5 runs),
 * *gflops the fma rate of a dedicated kernel of independent float8 chains
 * (GFLOP/s; the best of 5 runs of about 20 ms), each timed with profiling
 * events after a warm-up. Builds its kernel through the program cache;
 * takes about a second. */
nnrt_status nnrt_cl_measure_peaks(nnrt_cl *cl, double *gflops, double *gbps, nnrt_error *err);

/* -------------------------------------------------- programs and cache */

/* FNV-1a, 64-bit: h is the running hash (start with NNRT_CL_FNV_OFFSET). */
#define NNRT_CL_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t nnrt_cl_fnv1a64(uint64_t h, const void *data, size_t n);

/* The cache key of a program: FNV-1a 64 of device name, driver version,
 * options and source, each followed by a zero byte (so that moving text
 * from one to the next changes the key). NULL counts as "". */
uint64_t nnrt_cl_cache_key(const char *device_name, const char *driver, const char *options,
                           const char *source);

/* The cache folder: option when not NULL or empty, else $NNC_OPENCL_CACHE,
 * else $XDG_CACHE_HOME/nnc, else $HOME/.cache/nnc (the empty variables
 * being skipped). NNRT_E_SIZE when it does not fit in size, NNRT_E_ARG when
 * none of them is set. Touches no file. */
nnrt_status nnrt_cl_cache_dir(const char *option, char *buf, size_t size, nnrt_error *err);

/* An entry is <folder>/<key as 16 hex digits>.clbin holding a 32-byte
 * header, then the device binary:
 *   "NNCCLBN1" | key (u64) | binary bytes (u64) | FNV-1a 64 of the binary
 * (u64), integers little-endian. It is written to a temporary file of the
 * same folder and renamed into place, so concurrent builders never see a
 * partial entry. */
#define NNRT_CL_CACHE_MAGIC "NNCCLBN1"
#define NNRT_CL_CACHE_HEADER 32

/* Builds source for cl's device with options (NULL: none), e.g.
 * "-D TILE_M=32 -D TILE_N=64", into *out (release with clReleaseProgram).
 *
 * With the cache on, a valid entry for the key is built from its binary
 * (a hit). An entry whose header, size or checksum is wrong, or that the
 * driver refuses, is removed and the program is built from source. After a
 * build from source the binary is stored; failing to store it (full disk,
 * read-only or missing folder that cannot be made) counts in
 * store_failures and is not an error.
 *
 * A compile error is NNRT_E_DEVICE with the message
 * "<label>: OpenCL build failed on <device>: CL_BUILD_PROGRAM_FAILURE
 * (-11); build log: <log>" (truncated to fit nnrt_error); label (NULL:
 * "OpenCL program") should say where the kernel came from, such as
 * "gpt2.lua:24 kernel 3". */
nnrt_status nnrt_cl_program_build(nnrt_cl *cl, const char *source, const char *options,
                                  const char *label, cl_program *out, nnrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
