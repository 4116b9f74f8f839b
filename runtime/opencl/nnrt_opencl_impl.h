/* runtime/opencl/nnrt_opencl_impl.h — what the files of runtime/opencl share
 * and the generated code does not see. */
#ifndef NNRT_OPENCL_IMPL_H
#define NNRT_OPENCL_IMPL_H

#include "nnrt_opencl.h"

struct nnrt_cl {
  nnrt_cl_device_info dev;
  cl_context ctx;
  cl_command_queue queue;
  bool cache_on;
  char cache_dir[4096];
  nnrt_cl_cache_stats stats;
};

#define NNRT_CL_NO_DEVICE_HINT "(no OpenCL platform or device)"

#endif
