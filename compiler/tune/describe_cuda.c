/* compiler/tune/describe_cuda.c — the CUDA compute capabilities nnc targets.
 *
 * Per-SM limits are from the CUDA C++ Programming Guide's "Technical
 * Specifications per Compute Capability" and "Arithmetic Instructions"
 * (f32 FMAs per clock per SM); tensor-core shapes from the PTX ISA's
 * mma.sync and wgmma.mma_async sections. SM count and L2 size belong to a
 * chip, not to a capability: each row names the chip whose values it
 * carries (the runtime reads the real device's with cudaGetDeviceProperties).
 * CUDA 13 dropped Volta: its nvcc rejects sm_70, so that row's last CUDA is 12. */
#include "tune_rules.h"

#define KIB(x) ((int64_t)(x) << 10)
#define MIB(x) ((int64_t)(x) << 20)

typedef struct cuda_row {
  nnc_cuda_desc d;
  int fp32_per_sm;       /* f32 FMA results per clock per SM */
  int sms;               /* of the chip */
  int64_t l2;            /* of the chip */
} cuda_row;

/* mma.sync shapes by generation: Volta's first HMMA, Turing's, Ampere's
 * (kept by Ada and Hopper), and Ada's FP8 */
#define MMA_SM70 1, {{"f16", 8, 8, 4}}
#define MMA_SM75 2, {{"f16", 16, 8, 8}, {"s8", 8, 8, 16}}
#define MMA_SM80 4, {{"f16", 16, 8, 16}, {"bf16", 16, 8, 16}, {"tf32", 16, 8, 8}, {"s8", 16, 8, 32}}
#define MMA_SM89 5, {{"f16", 16, 8, 16}, {"bf16", 16, 8, 16}, {"tf32", 16, 8, 8}, {"s8", 16, 8, 32}, \
                     {"e4m3", 16, 8, 32}}
#define WGMMA_NONE 0, {{0}}
#define WGMMA_SM90 5, {{"f16", 64, 256, 16}, {"bf16", 64, 256, 16}, {"tf32", 64, 256, 8}, \
                       {"e4m3", 64, 256, 32}, {"s8", 64, 256, 32}}

/*  sm  chip   smem/SM   /block    opt-in    L1+smem   regs SM, block, thread  warps blocks threads */
static const cuda_row rows[] = {
  {{70, "Tesla V100 SXM2", KIB(96), KIB(48), KIB(96), KIB(128), 65536, 65536, 255, 64, 32, 1024,
    MMA_SM70, WGMMA_NONE, false, false, false, false, 12}, 64, 80, MIB(6)},
  {{75, "Tesla T4", KIB(64), KIB(48), KIB(64), KIB(96), 65536, 65536, 255, 32, 16, 1024,
    MMA_SM75, WGMMA_NONE, true, false, false, false, 0}, 64, 40, MIB(4)},
  {{80, "A100 SXM4", KIB(164), KIB(48), KIB(163), KIB(192), 65536, 65536, 255, 64, 32, 1024,
    MMA_SM80, WGMMA_NONE, true, true, false, false, 0}, 64, 108, MIB(40)},
  {{86, "A10", KIB(100), KIB(48), KIB(99), KIB(128), 65536, 65536, 255, 48, 16, 1024,
    MMA_SM80, WGMMA_NONE, true, true, false, false, 0}, 128, 72, MIB(6)},
  {{89, "L4", KIB(100), KIB(48), KIB(99), KIB(128), 65536, 65536, 255, 48, 24, 1024,
    MMA_SM89, WGMMA_NONE, true, true, false, false, 0}, 128, 58, MIB(48)},
  {{90, "H100 SXM5", KIB(228), KIB(48), KIB(227), KIB(256), 65536, 65536, 255, 64, 32, 1024,
    MMA_SM89, WGMMA_SM90, true, true, true, false, 0}, 128, 132, MIB(50)},
};

nnc_status nnc_describe_cuda(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err) {
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const cuda_row *r = &rows[i];
    if (r->d.sm != info->sm) continue;
    out->cuda = r->d;
    /* wgmma exists only in the arch-specific sm_90a */
    out->cuda.wgmma_ok = info->sm_arch_specific && r->d.nwgmma > 0;
    if (!out->cuda.wgmma_ok) out->cuda.nwgmma = 0;
    out->vector_width = 32;   /* a warp */
    out->fma_per_cycle = r->fp32_per_sm;
    out->l1d = r->d.l1_smem_per_sm;
    out->l2 = r->l2;
    out->cores = r->sms;
    return NNC_OK;
  }
  return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "target %s: compute capability %d.%d is not in the CUDA table",
                    info->name, info->sm / 10, info->sm % 10);
}
