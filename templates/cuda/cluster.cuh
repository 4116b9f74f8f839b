/* templates/cuda/cluster.cuh — what the blocks of a thread block cluster
 * (sm_90) use to talk to each other: their rank, the cluster-wide barrier,
 * and distributed shared memory (a store into a peer block's shared memory
 * and an arrive on a barrier there, which the peer waits on with acquire at
 * cluster scope, so the stores before the arrive are visible to it).
 *
 * Addresses of a peer's shared memory come from mapa: the same variable's
 * address in block `rank` of the cluster. A block must not exit while a peer
 * may still write to its shared memory: a kernel that exchanges ends with
 * sync() over the cluster. */
#ifndef NNC_CUDA_CLUSTER_CUH
#define NNC_CUDA_CLUSTER_CUH

#include <stdint.h>

#include "gemm_mma.cuh"

namespace nnc_cl {

__device__ __forceinline__ unsigned rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned count() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}

/* The cluster barrier in two halves: every thread of every block arrives
 * (releasing what it wrote before), and a thread's wait returns once all
 * have arrived (acquiring it); between the two a thread may work on. A
 * thread waits before it arrives again. The non-.aligned forms: threads of
 * a warp may reach them apart. */
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
__device__ __forceinline__ void sync() { arrive(), wait(); }

/* The shared::cluster address of p (this block's shared memory) in block rank. */
__device__ __forceinline__ uint32_t peer(const void *p, unsigned rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(nnc_smem_u32(p)), "r"(rank));
  return r;
}

__device__ __forceinline__ void store2(uint32_t addr, float x, float y) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

/* Arrives on the barrier at addr (a peer's, from peer()), releasing this
 * thread's earlier stores at cluster scope. */
__device__ __forceinline__ void arrive_remote(uint32_t addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(addr) : "memory");
}

/* One test of this block's barrier for the phase of the given parity, with
 * acquire at cluster scope: true once it completed. */
__device__ __forceinline__ bool test_acquire(uint64_t *bar, unsigned parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, "
      "p;\n}\n"
      : "=r"(done)
      : "r"(nnc_smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

}  // namespace nnc_cl

#endif
