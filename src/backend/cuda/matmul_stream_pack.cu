// The streamed matmul's layout at load: the stage units written from MLX's
// word order (or FP8's bytes) and the fp32 scales, and embedding rows read
// back from them (stream_layout.cuh; the matmul itself: matmul_stream.cu).
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/stream_layout.cuh"

namespace nextn::cuda {
namespace {

using namespace stream;

// ---- load-time repacking into stage units ----
// Unit (tile, chunk): [kh][rg][m][h][lane] pieces of lane_bytes, then the
// group entries [row][gpc]: bf16 (scale, bias) pairs, FP8's fp32 scales, or
// Z4's fp32 scale and bf16 pair (128 + zero) x 2 (zeros from `biases`). Rows
// past the matrix are zero. FP8 bytes are read as Q8's
// words are (element k of a row at byte k). half: a SwiGLU-paired matrix's
// intermediate size, whose layout row r holds checkpoint row
// source_row(r, half); 0 for any other matrix.
template <int FMT>
__global__ void stream_pack_kernel(const uint32_t* w, const float* scales, const float* biases, int rows, int cols,
                                   int group, int tiles, int chunks, int unit_bytes, int half, uint8_t* out) {
  pdl_prologue();
  constexpr int BITS = fmt_bits(FMT);
  constexpr int LB = lane_bytes(BITS), kUnits = 8 * 4 * 32;
  const int gpc = kK / group, per_unit = kUnits + kRows * gpc;
  const size_t total = size_t(tiles) * chunks * per_unit;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t tc = i / per_unit;
    const int u = int(i % per_unit);
    const int tile = int(tc / chunks), ch = int(tc % chunks);
    uint8_t* base = out + tc * unit_bytes;
    if (u < kUnits) {
      const int lane = u & 31, mh = (u >> 5) & 3, wg = u >> 7;
      const int kh = wg >> 2, rg = wg & 3, g = lane >> 2, c = lane & 3;
      const int row = tile * kRows + rg * 32 + 16 * (mh >> 1) + 8 * (mh & 1) + g, src = source_row(row, half);
      uint32_t v[LB / 4] = {};
      if (row < rows) {
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int k = ch * kK + 32 * (2 * kh + jj) + 8 * c;
          if constexpr (BITS == 4) {
            const uint32_t word = w[size_t(src) * (cols / 8) + k / 8];  // MLX: element e at bits [4e, 4e + 4)
            uint32_t r = 0;
#pragma unroll
            for (int e = 0; e < 8; ++e) r |= ((word >> (4 * e)) & 0xfu) << q4_bit(e);
            v[jj] = r;
          } else {
            v[2 * jj] = w[size_t(src) * (cols / 4) + k / 4];
            v[2 * jj + 1] = w[size_t(src) * (cols / 4) + k / 4 + 1];
          }
        }
      }
      uint32_t* dst = reinterpret_cast<uint32_t*>(base + size_t(u) * LB);
#pragma unroll
      for (int q = 0; q < LB / 4; ++q) dst[q] = v[q];
    } else {
      const int e = u - kUnits, r = e / gpc, gi = e % gpc;
      const int row = tile * kRows + r, src = source_row(row, half);
      uint32_t sb = 0, zp = 0;
      if (row < rows && fmt_scaled(FMT)) {
        const size_t gidx = size_t(src) * (cols / group) + size_t(ch) * kK / group + gi;
        sb = __float_as_uint(scales[gidx]);
        if (FMT == kZ4) {
          const bf16 z = __float2bfloat16_rn(128.0f + biases[gidx]);  // exact: zeros are 0..16
          zp = uint32_t(*reinterpret_cast<const uint16_t*>(&z)) * 0x10001u;
        }
      } else if (row < rows) {
        const size_t gidx = size_t(src) * (cols / group) + size_t(ch) * kK / group + gi;
        const bf16 sv = __float2bfloat16_rn(scales[gidx]), bv = __float2bfloat16_rn(biases[gidx]);
        sb = uint32_t(*reinterpret_cast<const uint16_t*>(&sv)) | (uint32_t(*reinterpret_cast<const uint16_t*>(&bv)) << 16);
      }
      uint32_t* entry = reinterpret_cast<uint32_t*>(base + unit_weight_bytes(BITS)) + (r * gpc + gi) * (group_entry_bytes(FMT) / 4);
      entry[0] = sb;
      if (FMT == kZ4) entry[1] = zp;
    }
  }
}

// Embedding rows straight from the stage units (the tied embedding is then
// held once): element (row, k) dequantized in fp32 as weights.cuh's
// weight_at does, s * q + b with two roundings, from the same exact-in-bf16
// scale and bias, so the value is the same bits.
template <int BITS>
__global__ void __launch_bounds__(256) stream_rows_kernel(const uint8_t* packed, int cols, int group, int chunks,
                                                          int unit_bytes, const int32_t* tokens, float* x, int ldx) {
  pdl_prologue();
  constexpr int LB = lane_bytes(BITS);
  const int row = tokens[blockIdx.x], tile = row / kRows, r = row % kRows;
  const int rg = r / 32, m = (r / 16) & 1, h = (r / 8) & 1, g = r & 7, gpc = kK / group;
  for (int k = threadIdx.x; k < cols; k += blockDim.x) {
    const int ch = k / kK, kk = k % kK, j = kk / 32, c = (kk / 8) & 3, e = kk & 7;
    const int kh = j >> 1, jj = j & 1, lane = g * 4 + c;
    const uint8_t* unit = packed + (size_t(tile) * chunks + ch) * unit_bytes;
    const uint8_t* piece = unit + (((kh * 4 + rg) * 4 + (m * 2 + h)) * 32 + lane) * LB;
    uint32_t q;
    if constexpr (BITS == 4) {
      const uint32_t word = reinterpret_cast<const uint32_t*>(piece)[jj];
      q = (word >> q4_bit(e)) & 0xfu;
    } else {
      const uint32_t word = reinterpret_cast<const uint32_t*>(piece)[2 * jj + (e >> 2)];
      q = (word >> (8 * (e & 3))) & 0xffu;
    }
    const uint32_t sb = reinterpret_cast<const uint32_t*>(unit + unit_weight_bytes(BITS))[r * gpc + kk / group];
    const float sc = __uint_as_float(sb << 16), bi = __uint_as_float(sb & 0xffff0000u);
    x[size_t(blockIdx.x) * ldx + k] = add_rn(mul_rn(sc, float(q)), bi);
  }
}

}  // namespace

bool stream_eligible(const DevMatrix& m) {
  const bool affine = (m.kind == WKind::Q4 || m.kind == WKind::Q8) && m.sb_exact;
  return (affine || scaled_kind(m.kind)) && m.cols % kK == 0 && (m.group == 32 || m.group == 64 || m.group == 128);
}

int stream_tiles(const DevMatrix& m) { return ceil_div(m.rows, kRows); }

int64_t stream_layout_bytes(const DevMatrix& m) {
  return stream_eligible(m) ? int64_t(stream_tiles(m)) * (m.cols / kK) * unit_bytes_of(m) : 0;
}

int paired_half(const DevMatrix& m) {
  if (!m.swiglu_pairs) return 0;
  if (m.rows % 16 != 0 || m.splits != 1)
    fail("matmul: a SwiGLU-paired matrix needs rows % 16 == 0 and no split (rows {}, splits {})", m.rows, m.splits);
  return m.rows / 2;
}

void stream_embed_rows(const DevMatrix& E, const int32_t* tokens, int T, float* x, int ldx, cudaStream_t s) {
  if (scaled_kind(E.kind)) fail("embedding: weight kind {} is read by the matmul only", int(E.kind));
  if (E.swiglu_pairs) fail("embedding: a SwiGLU-paired matrix is not an embedding");
  const auto* packed = static_cast<const uint8_t*>(E.packed);
  const int chunks = E.cols / kK, ub = unit_bytes_of(E);
  if (E.kind == WKind::Q4)
    CUDA_CHECK(launch_kernel(stream_rows_kernel<4>, T, 256, 0, s, packed, E.cols, E.group, chunks, ub, tokens, x, ldx));
  else
    CUDA_CHECK(launch_kernel(stream_rows_kernel<8>, T, 256, 0, s, packed, E.cols, E.group, chunks, ub, tokens, x, ldx));
  CUDA_CHECK_LAUNCH("stream_rows_kernel");
}

void stream_pack(const DevMatrix& m, void* dst, cudaStream_t s) {
  const int tiles = stream_tiles(m), chunks = m.cols / kK, ub = unit_bytes_of(m);
  const size_t total = size_t(tiles) * chunks * (8 * 4 * 32 + kRows * (kK / m.group));
  const unsigned blocks = unsigned(std::min<size_t>(16384, (total + 255) / 256));
  auto* w = static_cast<const uint32_t*>(m.w);
  auto* out = static_cast<uint8_t*>(dst);
  auto pack = [&](auto kernel) {
    CUDA_CHECK(launch_kernel(kernel, blocks, 256, 0, s, w, m.scales, m.biases, m.rows, m.cols, m.group, tiles, chunks, ub,
                             paired_half(m), out));
  };
  switch (fmt_of(m.kind)) {
    case kQ4: pack(stream_pack_kernel<kQ4>); break;
    case kQ8: pack(stream_pack_kernel<kQ8>); break;
    case kFp8: pack(stream_pack_kernel<kFp8>); break;
    default: pack(stream_pack_kernel<kZ4>); break;
  }
  CUDA_CHECK_LAUNCH("stream_pack_kernel");
}

}  // namespace nextn::cuda
