// RMSNorm with the real-gamma convention (the checkpoint loader already
// turned (1+w) norms into their multiplier): y = x / sqrt(mean(x^2) + eps) * gamma,
// one block per row, sum of squares in a fixed-shape block reduction.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {
namespace {

// PER > 0: the row's elements are loaded into registers first (thread t
// holds t, t + 256, ...: all loads in flight at once, one memory latency per
// row instead of one per element) and reused for the output; the sum runs in
// the same per-thread order as the PER = 0 loop, so the bits are the same.
// One block per row and a few rows per call: without this the kernel waited
// on a chain of dependent loads (15 us for a 5120-wide row on the H200).
template <typename TI, typename TO, int PER>
__global__ void __launch_bounds__(256) rmsnorm_kernel(const TI* x, int ldx, const float* gamma, float eps, int n, TO* y,
                                                      int ldy, const int* out_row0) {
  pdl_prologue();
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const TI* xr = x + size_t(row) * ldx;
  TO* yr = nullptr;
  float ss = 0.0f;
  if constexpr (PER > 0) {
    float v[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int i = threadIdx.x + j * 256;
      v[j] = i < n ? to_f32(xr[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < PER; ++j)
      if (threadIdx.x + j * 256 < n) ss = add_rn(ss, mul_rn(v[j], v[j]));
    ss = block_sum(ss, scratch);
    const float inv = rms_inverse(ss, n, eps);
    yr = y + size_t(row + (out_row0 != nullptr ? *out_row0 : 0)) * ldy;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int i = threadIdx.x + j * 256;
      if (i < n) yr[i] = from_f32<TO>(mul_rn(mul_rn(v[j], inv), gamma[i]));
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = to_f32(xr[i]);
      ss = add_rn(ss, mul_rn(v, v));
    }
    ss = block_sum(ss, scratch);
    const float inv = rms_inverse(ss, n, eps);
    yr = y + size_t(row + (out_row0 != nullptr ? *out_row0 : 0)) * ldy;
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<TO>(mul_rn(mul_rn(to_f32(xr[i]), inv), gamma[i]));
  }
}

template <typename TI, typename TO>
void rmsnorm_launch(const TI* x, int ldx, const float* gamma, float eps, int rows, int n, TO* y, int ldy,
                    const int* out_row0, cudaStream_t s) {
  if (n <= 256 * 4)
    CUDA_CHECK(launch_kernel(rmsnorm_kernel<TI, TO, 4>, rows, 256, 0, s, x, ldx, gamma, eps, n, y, ldy, out_row0));
  else if (n <= 256 * 12)
    CUDA_CHECK(launch_kernel(rmsnorm_kernel<TI, TO, 12>, rows, 256, 0, s, x, ldx, gamma, eps, n, y, ldy, out_row0));
  else if (n <= 256 * 24)
    CUDA_CHECK(launch_kernel(rmsnorm_kernel<TI, TO, 24>, rows, 256, 0, s, x, ldx, gamma, eps, n, y, ldy, out_row0));
  else
    CUDA_CHECK(launch_kernel(rmsnorm_kernel<TI, TO, 0>, rows, 256, 0, s, x, ldx, gamma, eps, n, y, ldy, out_row0));
}

template <typename TI>
void rmsnorm_in(const TI* x, int ldx, const float* gamma, float eps, int rows, int n, void* y, Act out_act, int ldy,
                const int* out_row0, cudaStream_t s) {
  if (out_act == Act::BF16)
    rmsnorm_launch(x, ldx, gamma, eps, rows, n, static_cast<bf16*>(y), ldy, out_row0, s);
  else
    rmsnorm_launch(x, ldx, gamma, eps, rows, n, static_cast<float*>(y), ldy, out_row0, s);
}

}  // namespace

void rmsnorm(const void* x, Act in_act, int ldx, const float* gamma, float eps, int rows, int n, void* y,
             Act out_act, int ldy, const int* out_row0, cudaStream_t s) {
  if (in_act == Act::BF16)
    rmsnorm_in(static_cast<const bf16*>(x), ldx, gamma, eps, rows, n, y, out_act, ldy, out_row0, s);
  else
    rmsnorm_in(static_cast<const float*>(x), ldx, gamma, eps, rows, n, y, out_act, ldy, out_row0, s);
  CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace nextn::cuda
