// The streamed matmul's stage-unit layout (matmul_stream.cu computes from it,
// matmul_stream_pack.cu writes and reads it): tiles of kRows rows, units of
// kK columns, each unit the packed weights in lane order and then one entry
// per (row, group): a bf16 (scale, bias) pair, FP8's fp32 scale, or Z4's fp32
// scale and bf16 pair (128 + zero, 128 + zero).
#pragma once
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace nextn::cuda::stream {

constexpr int kRows = 128;          // rows per tile
constexpr int kK = kChunkK;         // k per stage unit

// Weight formats of a stage unit: the bits per weight, and whether the
// group's word is a bf16 (scale, bias) pair applied while decoding (affine)
// or an fp32 scale applied to the group's MMA sums (scaled). kFp8A8 is
// kFp8's layout computed the W8A8 way (DevMatrix::fp8_activations): the
// activations quantized to e4m3 in the kernel, FP8 MMAs.
enum Fmt : int { kQ4 = 0, kQ8 = 1, kFp8 = 2, kZ4 = 3, kFp8A8 = 4 };
constexpr int fmt_bits(int f) { return f == kQ4 || f == kZ4 ? 4 : 8; }
constexpr bool fmt_scaled(int f) { return f == kFp8 || f == kZ4 || f == kFp8A8; }
// Bytes of a (row, group) entry.
constexpr int group_entry_bytes(int f) { return f == kZ4 ? 8 : 4; }
// The layout's format (the packing: kFp8A8 packs as kFp8).
inline int fmt_of(WKind k) {
  switch (k) {
    case WKind::Q4: return kQ4;
    case WKind::Q8: return kQ8;
    case WKind::FP8: return kFp8;
    case WKind::Z4: return kZ4;
    default: fail("matmul: weight kind {} has no streamed layout", int(k));
  }
}
// The kernel's format: the layout's, or kFp8A8 for a W8A8 FP8 matrix.
inline int compute_fmt_of(const DevMatrix& m) {
  return m.kind == WKind::FP8 && m.fp8_activations ? kFp8A8 : fmt_of(m.kind);
}

// The checkpoint row that layout row r holds in a matrix whose rows are a
// SwiGLU's [gate (half rows); up (half rows)] (DevMatrix::swiglu_pairs): in
// each 16-row block, gate rows 8b..8b+7, then up rows half + 8b..8b+7.
// half == 0: an unpaired matrix, row r itself.
__host__ __device__ constexpr int source_row(int r, int half) {
  return half == 0 ? r : (r & 8 ? half : 0) + ((r >> 4) << 3) + (r & 7);
}

// Bytes of packed weights per unit and per lane (of one (m, h) fragment pair).
constexpr int unit_weight_bytes(int bits) { return kRows * kK * bits / 8; }
constexpr int lane_bytes(int bits) { return bits == 4 ? 8 : 16; }

// Bytes of a stage unit: the packed weights, then one entry per (row, group).
inline int unit_bytes_of(const DevMatrix& m) {
  const int f = fmt_of(m.kind);
  return unit_weight_bytes(fmt_bits(f)) + kRows * (kK / m.group) * group_entry_bytes(f);
}

}  // namespace nextn::cuda::stream
