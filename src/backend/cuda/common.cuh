// Shared device helpers for the CUDA kernels: activation types, fixed-order
// reductions. Every reduction here has a fixed shape (a butterfly over a
// warp, then warps in index order), so its result never depends on how many
// rows or tokens a launch covers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace nextn::cuda {

using bf16 = __nv_bfloat16;

// Activation element: bf16 (the default mode) or float (fp32-activation mode).
template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<bf16>(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }

// Plain IEEE operations without contraction, where the CPU reference's
// rounding is to be mirrored exactly.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }

// Position `pos`'s row (Hkv * hd elements) of the keys (which 0) or values
// (which 1) of `kv`'s layer (kernels.h, KvBlocks).
template <typename TX>
__device__ __forceinline__ TX* kv_row(const KvBlocks& kv, int which, int pos, int row) {
  return static_cast<TX*>(kv.table[pos / kKvBlockTokens]) +
         (size_t(kv.layer * 2 + which) * kKvBlockTokens + size_t(pos % kKvBlockTokens)) * size_t(row);
}

__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, add_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float sigmoid(float x) { return __fdiv_rn(1.0f, add_rn(1.0f, expf(-x))); }
// transformers' gelu_pytorch_tanh, in cpu::gelu_tanh's order of operations.
__device__ __forceinline__ float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  const float cube = mul_rn(mul_rn(mul_rn(0.044715f, x), x), x);
  return mul_rn(mul_rn(0.5f, x), add_rn(1.0f, tanhf(mul_rn(c, add_rn(x, cube)))));
}
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Butterfly sum over the 32 lanes; every lane gets the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = add_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum with a fixed shape: butterfly in each warp, then the warp
// sums in warp order. `scratch` holds at least 32 floats; all threads of
// the block must call it; every thread gets the result.
// The warps' partial sums added in warp order from zero: block_sum's last
// step, and that of every fixed-order sum across warps (the folded norm's,
// the GDN step's per-head ones).
__device__ __forceinline__ float sum_in_warp_order(const float* partials, int count) {
  float s = 0.0f;
  for (int w = 0; w < count; ++w) s = add_rn(s, partials[w]);
  return s;
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return sum_in_warp_order(scratch, nwarps);
}

// RMSNorm's multiplier from a row's sum of squares: 1 / sqrt(ss / n + eps),
// each step rounded once, as cpu::rmsnorm rounds it. Every norm kernel uses
// it; rmsnorm.cu and the streamed matmul's folded norm (matmul_stream.cu)
// must give the same bits.
__device__ __forceinline__ float rms_inverse(float ss, int n, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(add_rn(__fdiv_rn(ss, float(n)), eps)));
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < nwarps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

// (value, index) with "greater value, then lower index" as a total order:
// the result of a reduction does not depend on its order. NaN loses.
struct ArgMax {
  float v;
  int i;
};
__device__ __forceinline__ bool argmax_better(float va, int ia, float vb, int ib) {
  if (va != va) return false;
  if (vb != vb) return true;
  return va > vb || (va == vb && ia < ib);
}
__device__ __forceinline__ ArgMax warp_argmax(ArgMax a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, a.v, o);
    const int i = __shfl_xor_sync(0xffffffffu, a.i, o);
    if (argmax_better(v, i, a.v, a.i)) a = {v, i};
  }
  return a;
}

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// A head projection's block counts its own work (one thread, after its k
// loop): the weight bytes it read, the logits it stored, and, for the block
// that owns the first output tile (`lead`), the T rows and the path id.
__device__ __forceinline__ void tally_block(const HeadTally& t, bool lead, int T, unsigned long long read,
                                            unsigned long long written) {
  if (t.counters == nullptr) return;
  atomicAdd(&t.counters->head_bytes_read, read);
  if (written != 0) atomicAdd(&t.counters->logits_bytes_written, written);
  if (lead) {
    atomicAdd(&t.counters->rows_projected, (unsigned long long)T);
    t.counters->last_path = t.path;
  }
}

}  // namespace nextn::cuda
