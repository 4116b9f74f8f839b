/* templates/cuda/pdl.cuh — programmatic dependent launch (sm_90 and up).
 *
 * A kernel launched with programmatic_attr() may start while the kernel
 * before it in the stream is still running, once every block of that one
 * has called let_next_start() or exited. Its blocks then do what needs
 * nothing from earlier kernels (barriers, tensor maps, copies of weights)
 * under the other's tail, and wait() before anything else. Under CUDA
 * graphs this hides the gap between two kernels and the first loads'
 * latency (gemm_tma_ln's trace: ~3 us and ~2.6 us of a 13 us GEMM).
 * Launched so: nnc's TMA GEMMs and skinny GEMM, the prefill attention
 * kernels (mma, wgmma), the row kernels (rows.cuh), the reductions
 * (reduce.cuh), nnc_map's epilogue kernels and the emitted loop kernels.
 * All but the GEMMs wait() at their first instruction (nothing to do
 * before it) and still gain the launch: BERT B=32 T=128 -0.9%, GPT-2 B=1
 * T=128 -1.2% on an H200 (2026-11-30).
 *
 * The contract of a kernel launched so:
 * - every thread calls wait() before it reads memory an earlier kernel may
 *   write, and before it writes any memory (an earlier kernel may still
 *   read it);
 * - before wait() it reads only memory no kernel wrote since the last
 *   launch without the attribute: parameters and weights set by copies
 *   before the run (a "fixed" operand, as the emitters decide it), since
 *   a chain of such launches may all start before the one they follow.
 * wait() returns once every earlier kernel has completed and its writes
 * are visible, so a chain of such kernels stays ordered. Both calls are
 * no-ops for a kernel launched without the attribute, and below sm_90. */
#ifndef NNC_CUDA_PDL_CUH
#define NNC_CUDA_PDL_CUH

#include <cuda_runtime.h>

/* 0: every launch waits for the kernel before to end, as without the
 * attribute (-DNNC_PDL=0 in NVCCFLAGS: to time what the early start buys) */
#ifndef NNC_PDL
#define NNC_PDL 1
#endif

namespace nnc_pdl {

/* Waits for every kernel before this one in the stream to complete. */
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* Lets the next kernel (if launched with the attribute) start once every
 * block of this one has called it or exited. Says nothing about this
 * kernel's writes: the next one's wait() covers them. */
__device__ __forceinline__ void let_next_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* The launch attribute that allows the early start (cudaLaunchKernelEx). */
inline cudaLaunchAttribute programmatic_attr() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = NNC_PDL;
  return a;
}

/* kernel<<<grid, block, smem, s>>>(args...) with the early start allowed:
 * the kernel must keep the contract above (nnc's loop, map, row and
 * attention kernels call wait() first). A refused launch is also what
 * cudaGetLastError() returns next. */
template <typename... P, typename... A>
inline cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute at = programmatic_attr();
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<A &&>(args)...);
}

}  // namespace nnc_pdl

#endif
