// The streamed matmul's stage-unit layout (matmul_stream.cu computes from it,
// matmul_stream_pack.cu writes and reads it): tiles of kRows rows, units of
// kK columns, each unit the packed weights in lane order and then one word
// per (row, group): a bf16 (scale, bias) pair or a scaled format's fp32 scale.
#pragma once
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace nextn::cuda::stream {

constexpr int kRows = 128;          // rows per tile
constexpr int kK = kChunkK;         // k per stage unit

// Weight formats of a stage unit: the bits per weight, and whether the
// group's word is a bf16 (scale, bias) pair applied while decoding (affine)
// or an fp32 scale applied to the group's MMA sums (scaled).
enum Fmt : int { kQ4 = 0, kQ8 = 1, kFp8 = 2, kS4 = 3 };
constexpr int fmt_bits(int f) { return f == kQ4 || f == kS4 ? 4 : 8; }
constexpr bool fmt_scaled(int f) { return f == kFp8 || f == kS4; }
inline int fmt_of(WKind k) {
  switch (k) {
    case WKind::Q4: return kQ4;
    case WKind::Q8: return kQ8;
    case WKind::FP8: return kFp8;
    case WKind::S4: return kS4;
    default: fail("matmul: weight kind {} has no streamed layout", int(k));
  }
}

// Bytes of packed weights per unit and per lane (of one (m, h) fragment pair).
constexpr int unit_weight_bytes(int bits) { return kRows * kK * bits / 8; }
constexpr int lane_bytes(int bits) { return bits == 4 ? 8 : 16; }

// Bytes of a stage unit: the packed weights, then one word per (row, group).
inline int unit_bytes_of(const DevMatrix& m) {
  return unit_weight_bytes(fmt_bits(fmt_of(m.kind))) + kRows * (kK / m.group) * 4;
}

}  // namespace nextn::cuda::stream
