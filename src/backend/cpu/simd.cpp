// Highway kernels, compiled once per x86/Arm target and dispatched at run
// time (see simd.h for why the bits do not depend on the target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd.cpp"
// Arrays of vectors need sized vector types: leave out the scalable targets.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef NEXTN_CPU_SIMD_ONCE
#define NEXTN_CPU_SIMD_ONCE
#include "backend/cpu/simd.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace nextn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// R rows at once; acc[r] holds the 8 partial sums of row r as 8 / N vectors.
template <int R>
void DotRowsN(const float* x, const float* const* rows, int64_t n, float* out) {
  const hn::CappedTag<float, 8> d;
  constexpr int N = int(hn::MaxLanes(d));
  constexpr int V = 8 / N;
  static_assert(N * V == 8, "lane count must divide 8");
  using Vec = hn::Vec<decltype(d)>;
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int v = 0; v < V; ++v) {
      const Vec xv = hn::LoadU(d, x + i + v * N);
      for (int r = 0; r < R; ++r) acc[r][v] = hn::Add(acc[r][v], hn::Mul(xv, hn::LoadU(d, rows[r] + i + v * N)));
    }
  for (int r = 0; r < R; ++r) {
    HWY_ALIGN float a[8];
    for (int v = 0; v < V; ++v) hn::Store(acc[r][v], d, a + v * N);
    for (int64_t j = i, l = 0; j < n; ++j, ++l) a[l] += x[j] * rows[r][j];  // tail: lanes 0.. as dot()
    out[r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  }
}

// bf16 weights: 8 lanes widened (u16 << 16 is the fp32 with the same value).
template <int R>
void DotRowsBf16N(const float* x, const uint16_t* const* rows, int64_t n, float* out) {
  const hn::CappedTag<float, 8> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint16_t, decltype(d)> d16;
  constexpr int N = int(hn::MaxLanes(d));
  constexpr int V = 8 / N;
  static_assert(N * V == 8, "lane count must divide 8");
  using Vec = hn::Vec<decltype(d)>;
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int v = 0; v < V; ++v) {
      const Vec xv = hn::LoadU(d, x + i + v * N);
      for (int r = 0; r < R; ++r) {
        const Vec wv = hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, rows[r] + i + v * N))));
        acc[r][v] = hn::Add(acc[r][v], hn::Mul(xv, wv));
      }
    }
  for (int r = 0; r < R; ++r) {
    HWY_ALIGN float a[8];
    for (int v = 0; v < V; ++v) hn::Store(acc[r][v], d, a + v * N);
    for (int64_t j = i, l = 0; j < n; ++j, ++l) {
      const uint32_t u = uint32_t(rows[r][j]) << 16;
      float w;
      hwy::CopyBytes<4>(&u, &w);
      a[l] += x[j] * w;
    }
    out[r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  }
}

void DotRowsBf16(const float* x, const uint16_t* const* rows, int nrows, int64_t n, float* out) {
  switch (nrows) {
    case 1: return DotRowsBf16N<1>(x, rows, n, out);
    case 2: return DotRowsBf16N<2>(x, rows, n, out);
    case 3: return DotRowsBf16N<3>(x, rows, n, out);
    default: return DotRowsBf16N<4>(x, rows, n, out);
  }
}

void DotRows(const float* x, const float* const* rows, int nrows, int64_t n, float* out) {
  switch (nrows) {
    case 1: return DotRowsN<1>(x, rows, n, out);
    case 2: return DotRowsN<2>(x, rows, n, out);
    case 3: return DotRowsN<3>(x, rows, n, out);
    default: return DotRowsN<4>(x, rows, n, out);
  }
}

void AddScaled(float* acc, const float* v, float p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vp = hn::Set(d, p);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, acc + i), hn::Mul(vp, hn::LoadU(d, v + i))), d, acc + i);
  for (; i < n; ++i) acc[i] += p * v[i];
}

// kPerWord fields per 32-bit word; one vector (or several) per word.
template <int kBits>
void DequantizeRowBits(const uint32_t* words, const float* scales, const float* biases, int group, int64_t cols,
                       float* out) {
  constexpr int kPerWord = 32 / kBits;
  const hn::CappedTag<uint32_t, kPerWord> du;
  const hn::Rebind<float, decltype(du)> df;
  const hn::Rebind<int32_t, decltype(du)> di;
  constexpr int N = int(hn::MaxLanes(du));
  const auto mask = hn::Set(du, (1u << kBits) - 1u);
  const int64_t words_per_group = group / kPerWord;
  for (int64_t g = 0; g < cols / group; ++g) {
    const auto s = hn::Set(df, scales[g]), b = hn::Set(df, biases[g]);
    for (int64_t w = g * words_per_group; w < (g + 1) * words_per_group; ++w) {
      const auto word = hn::Set(du, words[w]);
      for (int k0 = 0; k0 < kPerWord; k0 += N) {
        const auto shifts = hn::Mul(hn::Iota(du, uint32_t(k0)), hn::Set(du, uint32_t(kBits)));
        const auto q = hn::ConvertTo(df, hn::BitCast(di, hn::And(hn::Shr(word, shifts), mask)));
        hn::StoreU(hn::Add(hn::Mul(s, q), b), df, out + w * kPerWord + k0);
      }
    }
  }
}

void DequantizeRow(const uint32_t* words, const float* scales, const float* biases, int bits, int group,
                   int64_t cols, float* out) {
  if (bits == 4) return DequantizeRowBits<4>(words, scales, biases, group, cols, out);
  return DequantizeRowBits<8>(words, scales, biases, group, cols, out);
}

}  // namespace nextn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nextn::cpu {

HWY_EXPORT(DotRows);
HWY_EXPORT(DotRowsBf16);
HWY_EXPORT(DequantizeRow);
HWY_EXPORT(AddScaled);

void dot_rows(const float* x, const float* const* rows, int nrows, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotRows)(x, rows, nrows, n, out);
}

void dot_rows_bf16(const float* x, const uint16_t* const* rows, int nrows, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotRowsBf16)(x, rows, nrows, n, out);
}

void dequantize_row(const uint32_t* words, const float* scales, const float* biases, int bits, int group,
                    int64_t cols, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRow)(words, scales, biases, bits, group, cols, out);
}

void add_scaled(float* acc, const float* v, float p, int64_t n) { HWY_DYNAMIC_DISPATCH(AddScaled)(acc, v, p, n); }

const char* simd_target_name() {
  // The dispatcher runs the best compiled target this CPU supports: the lowest bit.
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(usable & -usable);
}

}  // namespace nextn::cpu
#endif  // HWY_ONCE
