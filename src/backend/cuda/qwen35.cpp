// The CUDA runtime for Qwen3.5: host side (weights, buffers, graphs). The
// kernels live in the .cu files beside this one, behind kernels.h.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/check.h"
#include "core/error.h"
#include "io/checkpoint.h"

namespace nextn {

std::string cuda_device_summary() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("--backend cuda: no CUDA device available ({})", cudaGetErrorString(e));
  }
  if (n == 0) fail("--backend cuda: no CUDA device available (cudaGetDeviceCount found none)");
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  if (p.major != 9)
    fail("--backend cuda: this build targets sm_90a (Hopper); device 0 is {} with compute capability {}.{}", p.name,
         p.major, p.minor);
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     double(p.totalGlobalMem) / double(1ull << 30));
}

std::unique_ptr<ModelRuntime> make_cuda_runtime(const Qwen35Checkpoint& ckpt, int max_tokens) {
  (void)cuda_device_summary();
  (void)ckpt;
  (void)max_tokens;
  fail("--backend cuda: the CUDA runtime is not implemented yet");
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
