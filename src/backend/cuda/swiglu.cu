// SwiGLU, the MLP's elementwise step: out = silu(gate) * up, from the fused
// gate|up projection (fp32) to the down projection's input type.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {
namespace {

template <typename TO>
__global__ void __launch_bounds__(256) swiglu_kernel(const float* gu, int ld, int I, TO* out, int ldo) {
  pdl_prologue();
  const int t = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= I) return;
  const float g = gu[size_t(t) * ld + i], u = gu[size_t(t) * ld + I + i];
  out[size_t(t) * ldo + i] = from_f32<TO>(mul_rn(silu(g), u));
}

}  // namespace

void swiglu(const float* gu, int ld, int I, int T, void* out, Act act, int ldo, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(I, 256)), unsigned(T));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(swiglu_kernel<bf16>, grid, 256, 0, s, gu, ld, I, static_cast<bf16*>(out), ldo));
  else
    CUDA_CHECK(launch_kernel(swiglu_kernel<float>, grid, 256, 0, s, gu, ld, I, static_cast<float*>(out), ldo));
  CUDA_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace nextn::cuda
