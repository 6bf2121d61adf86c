// The streamed matmul's ring (matmul_stream.cu): the sm_90 mbarriers that
// hand each stage from the producer warp to the consumer warps and back,
// the bulk copy that fills a stage with no registers held, and the named
// barriers of the block's warps.
#pragma once
#include <cstdint>

#include "backend/cuda/mma.cuh"  // smem_u32

namespace nextn::cuda::stream {

__device__ __forceinline__ void mbar_init(uint64_t* b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
// cp_async_arrive makes `bar` count one arrival once all of this thread's
// earlier cp.async (mma.cuh) have landed.
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
// The named barriers (0 is __syncthreads). The consumer warps' own, which
// the producer warp never joins: 1, all 256 consumer threads; 2, the 128 of
// k half 0; 3, "the k-half buffer is read" (k half 0 arrives, k half 1
// waits before refilling it).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
__device__ __forceinline__ void half0_sync() { asm volatile("bar.sync 2, 128;\n" ::: "memory"); }
__device__ __forceinline__ void red_read_arrive() { asm volatile("bar.arrive 3, 256;\n" ::: "memory"); }
__device__ __forceinline__ void red_read_wait() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }
// 4, once per block of a folded norm: the consumers have written the row
// multipliers (arrive) before the producer writes its first slice (sync).
__device__ __forceinline__ void inverses_arrive() { asm volatile("bar.arrive 4, 288;\n" ::: "memory"); }
__device__ __forceinline__ void inverses_wait() { asm volatile("bar.sync 4, 288;\n" ::: "memory"); }

// Thread 0 sets up a ring of `stages` stages, before the block's first
// __syncthreads: a full barrier completes on the weights' expect_tx and the
// 32 producer lanes' activation arrivals, an empty one on the consumer warps.
__device__ __forceinline__ void ring_init(uint64_t* full, uint64_t* empty, int stages, int consumer_warps) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(&full[i], 1 + 32);
      mbar_init(&empty[i], consumer_warps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
}

}  // namespace nextn::cuda::stream
