// Register-tiled blocks of the CPU matrix product (see gemm.h), in Highway
// with dynamic dispatch. A tile holds RT input rows x RW weight rows of
// accumulators; each step of 8 columns loads RW weight vectors (bf16 widened
// in registers) and RT input vectors and updates RT * RW accumulators, so
// every loaded vector serves several products instead of one.
//
// Each output element keeps its own 8-lane accumulator and is finished by
// the same tail and pairwise reduction as cpu::dot: the tile shape, the
// block size and the thread that runs it cannot change a single bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/gemm_tiles.cpp"
// Arrays of vectors need sized vector types: leave out the scalable targets.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif
#include <algorithm>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef NEXTN_CPU_GEMM_TILES_ONCE
#define NEXTN_CPU_GEMM_TILES_ONCE
#include "backend/cpu/gemm.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace nextn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::CappedTag<float, 8>;
constexpr int kLanes = int(hn::MaxLanes(D()));
constexpr int kVecs = 8 / kLanes;  // vectors per 8-lane accumulator (2 on 4-lane targets)
static_assert(kLanes * kVecs == 8, "lane count must divide 8");

// Tile shape: as many accumulators as the register file holds next to the
// RW weight vectors and one input vector (32 vector registers on AVX-512
// and NEON, 16 on AVX2; 4-lane targets need two registers per accumulator).
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif
constexpr int kTileRows = kVecs == 1 ? 4 : 2;                          // RT
constexpr int kTileWeights = kVecs == 1 ? (kRegisters == 32 ? 4 : 3) : 2;  // RW

HWY_INLINE hn::Vec<D> LoadWeights(D d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE hn::Vec<D> LoadWeights(D d, const uint16_t* p) {
  // bf16 -> fp32 is exact: the 16 bits shifted into the high half.
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}
HWY_INLINE float WeightAt(const float* p, int64_t j) { return p[j]; }
HWY_INLINE float WeightAt(const uint16_t* p, int64_t j) {
  const uint32_t u = uint32_t(p[j]) << 16;
  float w;
  hwy::CopyBytes<4>(&u, &w);
  return w;
}

// y[t * ldy + r] = dot(x + t * ldx, w + r * ldw, n) for t < RT, r < RW.
template <int RT, int RW, class W>
HWY_NOINLINE void Tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t n, float* y, int64_t ldy) {
  const D d;
  using Vec = hn::Vec<D>;
  Vec acc[RT][RW][kVecs];
  for (int t = 0; t < RT; ++t)
    for (int r = 0; r < RW; ++r)
      for (int v = 0; v < kVecs; ++v) acc[t][r][v] = hn::Zero(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int v = 0; v < kVecs; ++v) {
      Vec wv[RW];
      for (int r = 0; r < RW; ++r) wv[r] = LoadWeights(d, w + r * ldw + i + v * kLanes);
      for (int t = 0; t < RT; ++t) {
        const Vec xv = hn::LoadU(d, x + t * ldx + i + v * kLanes);
        for (int r = 0; r < RW; ++r) acc[t][r][v] = hn::Add(acc[t][r][v], hn::Mul(xv, wv[r]));
      }
    }
  for (int t = 0; t < RT; ++t)
    for (int r = 0; r < RW; ++r) {
      HWY_ALIGN float a[8];
      for (int v = 0; v < kVecs; ++v) hn::Store(acc[t][r][v], d, a + v * kLanes);
      const float* xt = x + t * ldx;
      const W* wr = w + r * ldw;
      for (int64_t j = i, l = 0; j < n; ++j, ++l) a[l] += xt[j] * WeightAt(wr, j);  // tail: lanes 0.. as dot()
      y[t * ldy + r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
}

// One tile of up to kTileRows x kTileWeights: the full shape, or a smaller
// one at the block's edges (same per-element arithmetic).
template <class W, int RT = kTileRows>
void TileUpTo(int rt, int rw, const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t n, float* y,
              int64_t ldy) {
  if constexpr (RT > 1) {
    if (rt < RT) return TileUpTo<W, RT - 1>(rt, rw, x, ldx, w, ldw, n, y, ldy);
  }
  static_assert(kTileWeights >= 2 && kTileWeights <= 4, "edge dispatch covers 1..4 weight rows");
  switch (rw) {
    case 1: return Tile<RT, 1>(x, ldx, w, ldw, n, y, ldy);
    case 2: return Tile<RT, 2>(x, ldx, w, ldw, n, y, ldy);
    case 3:
      if constexpr (kTileWeights >= 3) return Tile<RT, 3>(x, ldx, w, ldw, n, y, ldy);
      break;
    default:
      if constexpr (kTileWeights >= 4) return Tile<RT, 4>(x, ldx, w, ldw, n, y, ldy);
      break;
  }
}

// The block, weight tiles outer so that each tile's weights are read from
// cache once per kTileRows input rows.
template <class W>
void Block(const float* x, int64_t ldx, int T, const W* w, int64_t ldw, int rows, int64_t n, float* y, int64_t ldy) {
  for (int r = 0; r < rows; r += kTileWeights) {
    const int rw = std::min(kTileWeights, rows - r);
    for (int t = 0; t < T; t += kTileRows)
      TileUpTo<W>(std::min(kTileRows, T - t), rw, x + t * ldx, ldx, w + r * ldw, ldw, n, y + t * ldy + r, ldy);
  }
}

void GemmBlockF32(const float* x, int64_t ldx, int T, const float* w, int64_t ldw, int rows, int64_t n, float* y,
                  int64_t ldy) {
  Block(x, ldx, T, w, ldw, rows, n, y, ldy);
}
void GemmBlockBf16(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n,
                   float* y, int64_t ldy) {
  Block(x, ldx, T, w, ldw, rows, n, y, ldy);
}

}  // namespace nextn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nextn::cpu {

HWY_EXPORT(GemmBlockF32);
HWY_EXPORT(GemmBlockBf16);

void gemm_block(const float* x, int64_t ldx, int T, const float* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmBlockF32)(x, ldx, T, w, ldw, rows, n, y, ldy);
}
void gemm_block(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmBlockBf16)(x, ldx, T, w, ldw, rows, n, y, ldy);
}

}  // namespace nextn::cpu
#endif  // HWY_ONCE
