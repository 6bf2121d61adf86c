// Kernel launches with programmatic dependent launch (PDL, sm_90).
//
// Every kernel of the runtime starts with pdl_prologue(): it waits until the
// kernels it depends on have finished and their writes are visible
// (griddepcontrol.wait), then lets the next kernel in the stream be launched
// (griddepcontrol.launch_dependents). Launched through launch_kernel with PDL
// on, the next kernel's blocks are scheduled while this one runs and start
// the moment it ends, instead of after a full launch gap. Since every kernel
// waits before it reads or writes anything, the order of effects is exactly
// that of plain stream order: results do not depend on PDL (tested:
// CudaPdl.SameBitsWithoutPdl). Without the attribute both instructions are
// no-ops.
#pragma once
#include <cuda_runtime.h>

namespace nextn::cuda {

// On unless the calling thread suspends it: around a capture that must not
// have programmatic edges (the WHILE walk's body graph) or that the
// runtime's PdlPolicy (core/options.h) keeps without them.
bool pdl_active();
class PdlSuspend {
 public:
  PdlSuspend();
  ~PdlSuspend();
  PdlSuspend(const PdlSuspend&) = delete;
  PdlSuspend& operator=(const PdlSuspend&) = delete;
};

template <typename... KArgs, typename... Args>
inline cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                 Args&&... args) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_active() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

#ifdef __CUDACC__
__device__ __forceinline__ void pdl_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#endif

}  // namespace nextn::cuda
