// The streamed matmul's folds (matmul_stream.cu): at decode and verify
// widths (T <= kFoldedRows) the op before a projection runs inside the
// projection's kernel. Its producer warp, which copies each stage's
// activation slice in an unfolded call, computes the slice instead: the
// bf16 rows of the stage's 128 columns, with the arithmetic of the kernel it
// replaces, written where the copy would have put them. The consumers then
// read the stage exactly as they read an unfolded one. (docs/kernels.md,
// "Folds".)
//  - kFoldNorm: rmsnorm.cu's bf16(x * inv * gamma). The row multiplier inv
//    needs the whole row, so the consumer warps compute the T multipliers
//    once per block, with the norm kernel's sum order, before their first
//    stage (fold_inverses) and hand them to the producer (barrier 4).
//  - kFoldSwiglu: swiglu.cu's bf16(silu(gate) * up), elementwise: nothing
//    to hand over.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/stream_ring.cuh"

namespace nextn::cuda::stream {

enum Fold : int { kNoFold = 0, kFoldNorm = 1, kFoldSwiglu = 2 };

constexpr int kFoldThreads = 256;  // the consumer warps
constexpr int kMaxFoldRows = 8;    // one token fragment
// Loads a thread keeps in flight before it uses them: fold_inverses' row
// elements, the producer's rows of a slice.
constexpr int kFoldBatch = 8;
constexpr int kSliceRows = 4;

// The rows of a slice the producer loads in one batch, before it waits for
// the stage: every row of the fragment for the norm (its 32 x values are in
// flight together, so 5 to 8 rows cost one L2 round trip per stage, not two);
// kSliceRows for the SwiGLU fold, which loads gate and up and would spill.
template <int FOLD>
constexpr int slice_rows() {
  return FOLD == kFoldNorm ? kMaxFoldRows : kSliceRows;
}

struct FoldArgs {
  const float* x = nullptr;  // [T][ld] fp32: residual rows (norm), gate | up rows (swiglu)
  int ld = 0;
  const float* gamma = nullptr;  // [cols] (norm)
  float eps = 0.0f;              // (norm)
  int up = 0;                    // swiglu: column of up's first element in a row of x
};

// rmsnorm_kernel's multiplier (rmsnorm.cu) for each of the T rows, with the
// consumers as its 256-thread block: thread t sums the squares of elements
// t, t + 256, ... in that order, each warp sums its lanes by butterfly, and
// the warp sums meet in warp order (block_sum's shape). A batch of
// kFoldBatch elements of up to kSliceRows rows is in flight at once; all T
// rows share one barrier. `scratch` holds kMaxFoldRows x 8 floats.
__device__ inline void fold_inverses(const FoldArgs& f, int T, int n, float* inv, float* scratch) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int t0 = 0; t0 < T; t0 += kSliceRows) {
    float ss[kSliceRows] = {};
    for (int base = tid; base < n; base += kFoldBatch * kFoldThreads) {
      float v[kSliceRows][kFoldBatch];
#pragma unroll
      for (int r = 0; r < kSliceRows; ++r)
#pragma unroll
        for (int j = 0; j < kFoldBatch; ++j) {
          const int i = base + j * kFoldThreads;
          v[r][j] = t0 + r < T && i < n ? f.x[size_t(t0 + r) * f.ld + i] : 0.0f;
        }
#pragma unroll
      for (int r = 0; r < kSliceRows; ++r)
#pragma unroll
        for (int j = 0; j < kFoldBatch; ++j)
          if (base + j * kFoldThreads < n) ss[r] = add_rn(ss[r], mul_rn(v[r][j], v[r][j]));
    }
#pragma unroll
    for (int r = 0; r < kSliceRows; ++r) {
      const float w = warp_sum(ss[r]);
      if (lane == 0 && t0 + r < T) scratch[(t0 + r) * 8 + warp] = w;
    }
  }
  consumers_sync();
  if (tid < T) inv[tid] = rms_inverse(sum_in_warp_order(scratch + tid * 8, kFoldThreads / 32), n, f.eps);
  __syncwarp();  // bar.arrive is warp-aligned
  inverses_arrive();
}

// The producer's slice of one stage: columns [k, k + 128) of rows
// [t0, t0 + ROWS) (those below T), bf16, row t at dst + t *
// row_stride. Lane l computes elements l, l + 32, l + 64, l + 96 of each
// row. slice_load issues a batch's loads, slice_store uses them: the
// producer issues the first batch before it waits for the stage to be free.
template <int ROWS>
struct SliceRegs {
  float a[ROWS][4];  // x (norm) or gate (swiglu)
  float b[ROWS][4];  // up (swiglu)
  float gamma[4];    // (norm)
};

template <int FOLD, int ROWS>
__device__ __forceinline__ void slice_load(const FoldArgs& f, int T, int t0, int k, int lane, SliceRegs<ROWS>& s) {
  if constexpr (FOLD == kFoldNorm) {
#pragma unroll
    for (int j = 0; j < 4; ++j) s.gamma[j] = f.gamma[k + lane + 32 * j];
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float* row = f.x + size_t(t0 + r) * f.ld + k + lane;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s.a[r][j] = t0 + r < T ? row[32 * j] : 0.0f;
      if constexpr (FOLD == kFoldSwiglu) s.b[r][j] = t0 + r < T ? row[f.up + 32 * j] : 0.0f;
    }
  }
}

template <int FOLD, int ROWS>
__device__ __forceinline__ void slice_store(const SliceRegs<ROWS>& s, int T, int t0, const float* inv, uint8_t* dst,
                                            int row_stride, int lane) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (t0 + r >= T) break;
    bf16* out = reinterpret_cast<bf16*>(dst + (t0 + r) * row_stride) + lane;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float v = FOLD == kFoldNorm ? mul_rn(mul_rn(s.a[r][j], inv[t0 + r]), s.gamma[j])
                                        : mul_rn(silu(s.a[r][j]), s.b[r][j]);
      out[32 * j] = from_f32<bf16>(v);
    }
  }
}

}  // namespace nextn::cuda::stream
