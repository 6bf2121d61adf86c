// Element access to a DevMatrix on the device (the slow, exact path: one
// element at a time, dequantized in fp32 as cpu::Matrix::row does). The
// tensor-core matmul has its own vectorized loads in matmul.cu.
#pragma once
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {

template <WKind WK>
__device__ __forceinline__ float weight_at(const void* w, const float* scales, const float* biases, int cols,
                                           int group, int row, int k) {
  if constexpr (WK == WKind::F32) {
    return static_cast<const float*>(w)[size_t(row) * cols + k];
  } else if constexpr (WK == WKind::BF16) {
    return __bfloat162float(static_cast<const bf16*>(w)[size_t(row) * cols + k]);
  } else {
    constexpr int bits = WK == WKind::Q4 ? 4 : 8, per = 32 / bits;
    const uint32_t word = static_cast<const uint32_t*>(w)[size_t(row) * (cols / per) + k / per];
    // Q4 words are in pack_quant's layout (q4_bit), Q8 words in MLX's.
    const int bit = WK == WKind::Q4 ? q4_bit(k % per) : bits * (k % per);
    const uint32_t q = (word >> bit) & ((1u << bits) - 1u);
    const size_t gi = size_t(row) * (cols / group) + k / group;
    return add_rn(mul_rn(scales[gi], float(q)), biases[gi]);  // s * q + b, two roundings
  }
}

}  // namespace nextn::cuda
