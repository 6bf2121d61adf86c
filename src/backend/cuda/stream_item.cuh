// One item of the streamed matmul, consumer side (matmul_stream.cu and
// matmul_chain.cu run the same code): the units of the item's k range
// through the MMAs, the two k halves' sum, the outputs or split-K partials,
// and the tile's reduction by its last split. Shapes and orders as described
// at the top of matmul_stream.cu.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/stream_layout.cuh"
#include "backend/cuda/stream_ring.cuh"
#include "backend/cuda/stream_unit.cuh"

namespace nextn::cuda::stream {

constexpr int kWarps = 8;  // consumer warps
constexpr int kThreads = (kWarps + 1) * 32;

// A consumer lane's offsets in a stage (stream_unit.cuh's LaneOffsets) for a
// layout of gpc groups per unit row (group 1 << gshift) and unit_bytes.
template <int FMT>
__device__ __forceinline__ LaneOffsets lane_offsets(int gpc, int gshift, int unit_bytes, int kh, int rg, int lane) {
  constexpr int BITS = fmt_bits(FMT);
  const int g = lane >> 2, c = lane & 3;
  LaneOffsets o;
  o.w = (kh * 4 + rg) * 4 * 32 * lane_bytes(BITS) + lane * lane_bytes(BITS);
  // (row, group) entry of row rg*32 + g, group of piece 2kh
  o.sb = unit_weight_bytes(BITS) + ((rg * 32 + g) * gpc + ((64 * kh) >> gshift)) * group_entry_bytes(FMT);
  o.x = unit_bytes + g * kXStride + 16 * c + 128 * kh;  // token g, piece 2kh
  return o;
}

// The units [c0, c1) of an item from the ring: wait for each stage, run it,
// hand it back. `stage` and `parity` are the consumer's ring position.
template <int FMT, int NF>
__device__ __forceinline__ void consume_units(const uint8_t* smem, uint64_t* full, uint64_t* empty, int stage_smem,
                                              int stages, int& stage, uint32_t& parity, int c0, int c1, int gpc,
                                              const LaneOffsets& off, const bool (&tok)[NF], float (&acc)[2][NF][4],
                                              int lane) {
  for (int ch = c0; ch < c1; ++ch) {
    mbar_wait(&full[stage], parity);
    const uint8_t* st = smem + stage * stage_smem;
    if constexpr (FMT == kFp8A8) {
      if (gpc == 2)
        unit_compute_a8<NF, 2>(st, off, tok, acc, lane);
      else if (gpc == 1)
        unit_compute_a8<NF, 1>(st, off, tok, acc, lane);
      else
        unit_compute_a8<NF, 4>(st, off, tok, acc, lane);
    } else if (gpc == 2)
      unit_compute<FMT, NF, 2>(st, off, tok, acc);
    else if (gpc == 1)
      unit_compute<FMT, NF, 1>(st, off, tok, acc);
    else
      unit_compute<FMT, NF, 4>(st, off, tok, acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);
    if (++stage == stages) {
      stage = 0;
      parity ^= 1u;
    }
  }
}

// The two k halves: k half 1 hands its sums over `red` ([rg][2 NF 4][32]),
// k half 0 adds them (half 0 + half 1). The red_read barrier keeps half 1
// from refilling the buffer before half 0 has read it: first and last say
// whether this block has an item before and after this one.
template <int NF>
__device__ __forceinline__ void sum_k_halves(float (&acc)[2][NF][4], float* red, int rg, int kh, int lane,
                                             bool first_item, bool last_item) {
  float* my_red = red + rg * (2 * NF * 4) * 32;
  if (kh == 1) {
    if (!first_item) red_read_wait();  // half 0 has read the previous item's sums
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int i = 0; i < 4; ++i) my_red[((m * NF + f) * 4 + i) * 32 + lane] = acc[m][f][i];
  }
  consumers_sync();
  if (kh == 0) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][f][i] = add_rn(acc[m][f][i], my_red[((m * NF + f) * 4 + i) * 32 + lane]);
    if (!last_item) red_read_arrive();
  }
}

// Where an item's sums go: y (+)= for an unsplit matrix, else split s's
// partials [splits][T][rows], summed by the tile's last split. half: a
// SwiGLU-paired matrix's intermediate size (its layout row r goes to y's
// column source_row(r, half); such a matrix is never split), else 0.
struct ItemOutput {
  float* y;
  int ldy, accumulate;
  float* partial;
  int rows, T, splits;
  int half = 0;
};

// k half 0's sums of rows row0 + [0, 32) (this warp's row group) for the
// token columns; then, split, a fence so the last split sees the partials.
template <int NF>
__device__ __forceinline__ void store_item(const ItemOutput& o, const float (&acc)[2][NF][4], int row0, int s,
                                           int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = row0 + 16 * m + g + (i >= 2 ? 8 : 0);
        const int t = 8 * f + 2 * c + (i & 1);
        if (r >= o.rows || t >= o.T) continue;
        if (o.splits > 1) {
          o.partial[(size_t(s) * o.T + t) * o.rows + r] = acc[m][f][i];
        } else {
          float* dst = o.y + size_t(t) * o.ldy + source_row(r, o.half);
          *dst = o.accumulate ? add_rn(*dst, acc[m][f][i]) : acc[m][f][i];
        }
      }
  if (o.splits > 1) __threadfence();
}

// The SwiGLU epilogue of a paired matrix (DevMatrix::swiglu_pairs, never
// split): lane (g, c) holds gate j in rows g and up j in rows g + 8 of each
// 16-row block, j = (row0 + 16 m) / 2 + g, so it writes
// act[t][j] = bf16(silu(gate) * up) with the swiglu kernel's arithmetic on
// the sums the plain epilogue would have stored.
template <int NF>
__device__ __forceinline__ void store_swiglu_item(__nv_bfloat16* act, int ld_act, int rows, int T,
                                                  const float (&acc)[2][NF][4], int row0, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = row0 + 16 * m + g, t = 8 * f + 2 * c + i;
        if (r >= rows || t >= T) continue;
        const int j = ((row0 + 16 * m) >> 1) + g;
        act[size_t(t) * ld_act + j] = from_f32<__nv_bfloat16>(mul_rn(silu(acc[m][f][i]), acc[m][f][2 + i]));
      }
}

// The last of a tile's splits to finish sums the partials in split order,
// all consumer threads. Each thread sums kSumRows outputs, loading
// kSumSplits partials of each before adding any: the loads are in flight
// together (a loop that added as it loaded waited one L2 round trip per
// partial, which cost gate_up at 32 rows more than its weights). Returns
// whether this block was the last (block-uniform); the tile's counter is
// back at zero then.
__device__ __forceinline__ bool reduce_splits(const ItemOutput& o, int* counters, int tile, int* last) {
  consumers_sync();  // this item's partials are written
  if (threadIdx.x == 0) *last = atomicAdd(&counters[tile], 1) == o.splits - 1;
  consumers_sync();
  if (!*last) return false;
  __threadfence();
  constexpr int kSumRows = 2, kSumSplits = 4, kStride = kWarps * 32;
  for (int base = threadIdx.x; base < o.T * kRows; base += kSumRows * kStride) {
    float v[kSumRows], part[kSumRows][kSumSplits];
    for (int k0 = 0; k0 < o.splits; k0 += kSumSplits) {
#pragma unroll
      for (int i = 0; i < kSumRows; ++i) {
        const int idx = base + i * kStride, t = idx / kRows, r = tile * kRows + idx % kRows;
        const bool real = idx < o.T * kRows && r < o.rows;
#pragma unroll
        for (int j = 0; j < kSumSplits; ++j)
          part[i][j] = real && k0 + j < o.splits ? __ldcg(o.partial + (size_t(k0 + j) * o.T + t) * o.rows + r) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kSumRows; ++i)
#pragma unroll
        for (int j = 0; j < kSumSplits; ++j) {
          if (k0 + j >= o.splits) break;
          v[i] = k0 + j == 0 ? part[i][j] : add_rn(v[i], part[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < kSumRows; ++i) {
      const int idx = base + i * kStride, t = idx / kRows, r = tile * kRows + idx % kRows;
      if (idx >= o.T * kRows || r >= o.rows) continue;
      float* dst = o.y + size_t(t) * o.ldy + r;
      *dst = o.accumulate ? add_rn(*dst, v[i]) : v[i];
    }
  }
  if (threadIdx.x == 0) counters[tile] = 0;
  return true;
}

}  // namespace nextn::cuda::stream
