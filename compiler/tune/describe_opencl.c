/* compiler/tune/describe_opencl.c — compile-time defaults of an OpenCL
 * device by class; the runtime reads the real values with clGetDeviceInfo.
 *
 * GPU: 32 KiB local memory (the OpenCL 1.2 minimum; NVIDIA gives 48, AMD and
 * Intel 64), work-groups of 256 (the largest AMD and many Intel parts
 * allow), 16 compute units, preferred float vector width 1 (scalar SIMT
 * lanes), 32 lanes in lockstep (a warp; AMD's wavefront is 64), 2 MiB of L2.
 * CPU (PoCL): local memory is ordinary memory, so a work-group's tile should
 * fit the host's L2; PoCL allows work-groups of 4096 and prefers the ISA's
 * vector width; compute units are the host's cores. */
#include "tune_rules.h"

nnc_status nnc_describe_opencl(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err) {
  nnc_opencl_desc *o = &out->opencl;
  o->device = info->device;
  if (info->device == NNC_DEVICE_CPU) {
    const nnc_target_info *isa = nnc_target_for_isa(nnc_host_isa());
    nnc_host_caches(&out->l1d, &out->l2, &out->l3, &out->cores);
    out->vector_width = isa ? isa->vector_width : 1;
    out->vector_regs = isa ? isa->vector_regs : 0;
    out->fma_units = isa ? isa->fma_units : 0;
    out->fma_per_cycle = out->fma_units * out->vector_width;
    o->local_mem = out->l2;
    o->max_work_group = 4096;
    o->compute_units = out->cores;
    o->preferred_vector_width = out->vector_width;
    o->simd_width = out->vector_width;
    return NNC_OK;
  }
  if (info->device == NNC_DEVICE_GPU) {
    o->local_mem = 32 << 10;
    o->max_work_group = 256;
    o->compute_units = 16;
    o->preferred_vector_width = 1;
    o->simd_width = 32;
    out->vector_width = 32;
    out->l1d = o->local_mem;
    out->l2 = 2 << 20;
    out->cores = o->compute_units;
    return NNC_OK;
  }
  return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "target %s: OpenCL target without a device class", info->name);
}
