// Register-tiled blocks of the CPU matrix product (see gemm.h for the
// summation order), in Highway with dynamic dispatch. A tile holds RT input
// rows x RW weight rows of accumulators; each step of kSumLanes columns
// loads RW weight vectors (bf16 widened in registers) and RT input vectors
// and does RT * RW fused multiply-adds, so every loaded vector serves
// several products instead of one.
//
// Each output element has its own accumulator and is finished by the same
// tail and pairwise reduction whatever the tile: the tile shape, the block,
// the row count of the call and the thread that runs it cannot change a bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/gemm_tiles.cpp"
// Arrays of vectors need sized vector types: leave out the scalable targets.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef NEXTN_CPU_GEMM_TILES_ONCE
#define NEXTN_CPU_GEMM_TILES_ONCE
#include "backend/cpu/gemm.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace nextn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Partial sums per output element: one full vector on AVX2 (8) and AVX-512
// (16); two 4-lane vectors on 128-bit targets, whose FMA throughput does not
// gain from more.
constexpr int kSumLanes = std::clamp(int(hn::MaxLanes(hn::ScalableTag<float>())), 8, 16);
using D = hn::CappedTag<float, kSumLanes>;
constexpr int kLanes = int(hn::MaxLanes(D()));
constexpr int kVecs = kSumLanes / kLanes;
static_assert(kLanes * kVecs == kSumLanes, "lane count must divide the partial sums");

// Tile shape: as many accumulators as the register file holds next to the
// RW weight vectors and one input vector (32 vector registers on AVX-512
// and NEON, 16 on AVX2; 4-lane targets need two registers per accumulator).
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif
constexpr int kTileRows = kVecs == 1 ? 4 : 2;                              // RT
constexpr int kTileWeights = kVecs == 1 ? (kRegisters == 32 ? 4 : 3) : 2;  // RW

HWY_INLINE hn::Vec<D> LoadWeights(D d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE hn::Vec<D> LoadWeights(D d, const uint16_t* p) {
  // bf16 -> fp32 is exact: the 16 bits shifted into the high half.
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}
// The tail's multiply-add, as hn::MulAdd computes it on this target: fused
// where the instruction set has FMA, else a rounded product then the add.
HWY_INLINE float MulAddScalar(float a, float b, float c) {
#if HWY_NATIVE_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

HWY_INLINE hn::Vec<D> LoadWeights(D d, const hwy::float16_t* p) {
  const hn::Rebind<hwy::float16_t, D> d16;  // f16 -> fp32 is exact
  return hn::PromoteTo(d, hn::LoadU(d16, p));
}
HWY_INLINE float WeightAt(const float* p, int64_t j) { return p[j]; }
HWY_INLINE float WeightAt(const hwy::float16_t* p, int64_t j) {
  uint16_t bits;
  hwy::CopyBytes<2>(p + j, &bits);
  return f16_to_f32(bits);  // exact, as PromoteTo
}
HWY_INLINE float WeightAt(const uint16_t* p, int64_t j) {
  const uint32_t u = uint32_t(p[j]) << 16;
  float w;
  hwy::CopyBytes<4>(&u, &w);
  return w;
}

// The lanes combined by halving: lane l += lane l + L/2 for l < L/2, then
// the same over L/2 lanes, ... down to lane 0. In vector registers (one
// add per halving) when there is no tail, else on the stored lanes; the
// same additions either way.
HWY_INLINE float SumHalvingScalar(float* a) {
  for (int half = kSumLanes / 2; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) a[l] += a[l + half];
  return a[0];
}
template <class DV>
HWY_INLINE float SumHalving(DV d, hn::Vec<DV> v) {
#if HWY_TARGET == HWY_SCALAR  // one lane per vector: nothing to halve
  (void)d;
  return hn::GetLane(v);
#else
  if constexpr (hn::MaxLanes(DV()) == 1) {
    (void)d;
    return hn::GetLane(v);
  } else {
    const hn::Half<DV> dh;
    return SumHalving(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
#endif
}
HWY_INLINE float SumHalving(hn::Vec<D>* vecs) {
  // Across the kVecs vectors first: they hold lanes [v * kLanes, (v + 1) * kLanes).
  for (int count = kVecs; count > 1; count /= 2)
    for (int j = 0; j < count / 2; ++j) vecs[j] = hn::Add(vecs[j], vecs[j + count / 2]);
  return SumHalving(D(), vecs[0]);
}

// y[t * ldy + r] = x[t] . w[r] over n columns for t < RT, r < RW.
// With prefetch_next, also prefetches the next tile's weight rows: in
// decode and verify calls (few input rows) the weights stream from L3 or
// DRAM, and the hardware prefetcher alone does not keep RW short row
// streams fed.
template <int RT, int RW, class W>
HWY_NOINLINE void Tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t n, float* y, int64_t ldy,
                       bool prefetch_next) {
  const D d;
  using Vec = hn::Vec<D>;
  Vec acc[RT][RW][kVecs];
  for (int t = 0; t < RT; ++t)
    for (int r = 0; r < RW; ++r)
      for (int v = 0; v < kVecs; ++v) acc[t][r][v] = hn::Zero(d);
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int v = 0; v < kVecs; ++v) {
      Vec wv[RW];
      for (int r = 0; r < RW; ++r) {
        wv[r] = LoadWeights(d, w + r * ldw + i + v * kLanes);
        if (prefetch_next) hwy::Prefetch(w + (r + RW) * ldw + i + v * kLanes);
      }
      for (int t = 0; t < RT; ++t) {
        const Vec xv = hn::LoadU(d, x + t * ldx + i + v * kLanes);
        for (int r = 0; r < RW; ++r) acc[t][r][v] = hn::MulAdd(xv, wv[r], acc[t][r][v]);
      }
    }
  for (int t = 0; t < RT; ++t)
    for (int r = 0; r < RW; ++r) {
      if (i == n) {
        y[t * ldy + r] = SumHalving(acc[t][r]);
        continue;
      }
      HWY_ALIGN float a[kSumLanes];
      for (int v = 0; v < kVecs; ++v) hn::Store(acc[t][r][v], d, a + v * kLanes);
      const float* xt = x + t * ldx;
      const W* wr = w + r * ldw;
      for (int64_t j = i, l = 0; j < n; ++j, ++l) a[l] = MulAddScalar(xt[j], WeightAt(wr, j), a[l]);  // tail: lanes 0..
      y[t * ldy + r] = SumHalvingScalar(a);
    }
}

// A tile of RT input rows x rw <= RW weight rows (smaller ones at the
// block's edges; the same per-element arithmetic).
template <class W, int RT, int RW>
void TileOfWidth(int rw, const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t n, float* y, int64_t ldy,
                 bool prefetch_next) {
  if constexpr (RW > 1) {
    if (rw < RW) return TileOfWidth<W, RT, RW - 1>(rw, x, ldx, w, ldw, n, y, ldy, prefetch_next);
  }
  Tile<RT, RW>(x, ldx, w, ldw, n, y, ldy, prefetch_next);
}
template <class W, int RT = kTileRows>
void TileUpTo(int rt, int rw, const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t n, float* y,
              int64_t ldy, bool prefetch_next) {
  if constexpr (RT > 1) {
    if (rt < RT) return TileUpTo<W, RT - 1>(rt, rw, x, ldx, w, ldw, n, y, ldy, prefetch_next);
  }
  TileOfWidth<W, RT, kTileWeights>(rw, x, ldx, w, ldw, n, y, ldy, prefetch_next);
}

// One input row: twice the weight rows per tile, so that enough independent
// FMA chains and weight streams are in flight.
constexpr int kSingleRowWeights = 2 * kTileWeights;

// Weight tiles outer, so that each tile's weights are read from cache once
// per kTileRows input rows.
template <class W>
void Block(const float* x, int64_t ldx, int T, const W* w, int64_t ldw, int rows, int64_t n, float* y, int64_t ldy) {
  if (T == 1) {
    for (int r = 0; r < rows; r += kSingleRowWeights)
      TileOfWidth<W, 1, kSingleRowWeights>(std::min(kSingleRowWeights, rows - r), x, ldx, w + r * ldw, ldw, n, y + r,
                                           ldy, /*prefetch_next=*/true);
    return;
  }
  // Up to kTileRows input rows (verify rows) pass over each weight tile once,
  // so the weights stream as in decode: prefetch. More rows reuse the tile
  // from cache.
  const bool prefetch_next = T <= kTileRows;
  for (int r = 0; r < rows; r += kTileWeights) {
    const int rw = std::min(kTileWeights, rows - r);
    for (int t = 0; t < T; t += kTileRows)
      TileUpTo<W>(std::min(kTileRows, T - t), rw, x + t * ldx, ldx, w + r * ldw, ldw, n, y + t * ldy + r, ldy,
                  prefetch_next);
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
void GemmBlockF16(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n,
                  float* y, int64_t ldy) {
  Block(x, ldx, T, reinterpret_cast<const hwy::float16_t*>(w), ldw, rows, n, y, ldy);
}
int SumLanes() { return kSumLanes; }
bool UsesFma() { return HWY_NATIVE_FMA != 0; }

}  // namespace nextn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nextn::cpu {

HWY_EXPORT(GemmBlockF32);
HWY_EXPORT(GemmBlockBf16);
HWY_EXPORT(GemmBlockF16);
HWY_EXPORT(SumLanes);
HWY_EXPORT(UsesFma);

void gemm_block(const float* x, int64_t ldx, int T, const float* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmBlockF32)(x, ldx, T, w, ldw, rows, n, y, ldy);
}
void gemm_block(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmBlockBf16)(x, ldx, T, w, ldw, rows, n, y, ldy);
}
void gemm_block_f16(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n,
                    float* y, int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmBlockF16)(x, ldx, T, w, ldw, rows, n, y, ldy);
}
int gemm_sum_lanes() { return HWY_DYNAMIC_DISPATCH(SumLanes)(); }
bool gemm_uses_fma() { return HWY_DYNAMIC_DISPATCH(UsesFma)(); }

}  // namespace nextn::cpu
#endif  // HWY_ONCE
