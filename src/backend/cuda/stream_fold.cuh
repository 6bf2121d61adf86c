// The streamed matmul's folds (matmul_stream.cu): at decode widths the op
// before a projection runs inside the projection's kernel, in its 256
// consumer threads, and writes the bf16 activation rows into shared memory;
// the producer warp then streams weights only. Each fold computes the bits
// of the kernel it replaces (docs/kernels.md, "Folds"):
//  - kFoldNorm: rmsnorm.cu's RMSNorm of the fp32 residual rows, whole rows,
//    once per block;
//  - kFoldSwiglu: swiglu.cu's silu(gate) * up from the fp32 gate|up rows,
//    over the k range of the block's current item (the down projection's
//    rows are too long to hold whole).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace nextn::cuda::stream {

enum Fold : int { kNoFold = 0, kFoldNorm = 1, kFoldSwiglu = 2 };

constexpr int kFoldThreads = 256;  // the consumer warps
constexpr int kNormPer = 24;       // folded norm: row elements per consumer thread (cols <= 256 x 24)
// Loads a thread keeps in flight before it stores: a load after a shared
// store waits for it (the compiler cannot tell the pointers apart), so the
// folds load a batch into registers first, one round trip per batch.
constexpr int kFoldBatch = 8;
static_assert(kNormPer % kFoldBatch == 0);

struct FoldArgs {
  const float* x = nullptr;  // [T][ld] fp32: residual rows (norm), gate | up rows (swiglu)
  int ld = 0;
  const float* gamma = nullptr;  // [cols] (norm)
  float eps = 0.0f;              // (norm)
  int up = 0;                    // swiglu: column of up's first element in a row of x
  int off = 0, stride = 0;       // the bf16 rows in shared memory: byte offset, row stride
};

// Named barrier 1: the 256 consumer threads (the producer warp never joins).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// block_sum's shape (common.cuh) over the consumer threads: butterfly in each
// warp, then the warp sums in warp order; `scratch` holds 8 floats.
__device__ __forceinline__ float consumers_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  consumers_sync();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  consumers_sync();
  float s = 0.0f;
  for (int w = 0; w < kFoldThreads / 32; ++w) s = add_rn(s, scratch[w]);
  return s;
}

// rmsnorm_kernel's arithmetic (rmsnorm.cu) with the consumers as its block:
// thread t sums the squares of elements t, t + 256, ... in that order, the
// sums meet in consumers_sum, and the output is bf16(x * inv * gamma).
__device__ void fold_norm(const FoldArgs& f, int T, int n, uint8_t* smem, float* scratch) {
  const int tid = threadIdx.x;
  for (int t = 0; t < T; ++t) {
    const float* xr = f.x + size_t(t) * f.ld;
    float v[kNormPer];
#pragma unroll
    for (int j = 0; j < kNormPer; ++j) v[j] = tid + j * kFoldThreads < n ? xr[tid + j * kFoldThreads] : 0.0f;
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kNormPer; ++j)
      if (tid + j * kFoldThreads < n) ss = add_rn(ss, mul_rn(v[j], v[j]));
    const float inv = rms_inverse(consumers_sum(ss, scratch), n, f.eps);
    bf16* out = reinterpret_cast<bf16*>(smem + f.off + t * f.stride);
#pragma unroll
    for (int j0 = 0; j0 < kNormPer; j0 += kFoldBatch) {
      float gamma[kFoldBatch];
#pragma unroll
      for (int j = 0; j < kFoldBatch; ++j) {
        const int i = tid + (j0 + j) * kFoldThreads;
        gamma[j] = i < n ? f.gamma[i] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kFoldBatch; ++j) {
        const int i = tid + (j0 + j) * kFoldThreads;
        if (i < n) out[i] = from_f32<bf16>(mul_rn(mul_rn(v[j0 + j], inv), gamma[j]));
      }
    }
  }
  consumers_sync();  // the rows are complete before any warp reads them
}

// swiglu_kernel's arithmetic (swiglu.cu) for columns [k0, k1) of T rows,
// written from the start of each shared row. The caller has synchronised
// the consumers since they last read the rows.
__device__ void fold_swiglu(const FoldArgs& f, int T, int k0, int k1, uint8_t* smem) {
  const int n = k1 - k0;
  for (int t = 0; t < T; ++t) {
    const float* gate = f.x + size_t(t) * f.ld + k0;
    const float* up = gate + f.up;
    bf16* out = reinterpret_cast<bf16*>(smem + f.off + t * f.stride);
    for (int base = threadIdx.x; base < n; base += kFoldBatch * kFoldThreads) {
      float g[kFoldBatch], u[kFoldBatch];
#pragma unroll
      for (int j = 0; j < kFoldBatch; ++j) {
        const int i = base + j * kFoldThreads;
        g[j] = i < n ? gate[i] : 0.0f;
        u[j] = i < n ? up[i] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kFoldBatch; ++j) {
        const int i = base + j * kFoldThreads;
        if (i < n) out[i] = from_f32<bf16>(mul_rn(silu(g[j]), u[j]));
      }
    }
  }
  consumers_sync();
}

// Shared bytes of one folded activation row of `cols` columns: 16-byte
// reads of 8 rows at this stride hit distinct banks (as stream_unit.cuh's
// kXStride).
constexpr int fold_row_bytes(int cols) { return 2 * cols + 64; }

}  // namespace nextn::cuda::stream
