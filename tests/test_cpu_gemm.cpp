// The blocked CPU matrix product (src/backend/cpu/gemm.h) for every weight
// kind the CPU backend holds (fp32, bf16, f16, MLX q4 and q8): each output element
// is gemm.h's summation order on the row's values, bit for bit; a row computed
// alone equals the same row inside a call of many rows (and every prefix
// of the call); and the result is the same at 1, 2 and 7 threads with the
// work cut as finely as it goes. Shapes cover partial panels, partial tiles
// and column tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"

namespace nextn {
namespace {

enum class Kind { F32, BF16, F16, Q4, Q8 };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::F32: return "f32";
    case Kind::BF16: return "bf16";
    case Kind::F16: return "f16";
    case Kind::Q4: return "q4";
    default: return "q8";
  }
}

// gemm.h's summation order with L = cpu::gemm_sum_lanes() partial sums:
// lane l takes columns i = l mod L by multiply-add (fused where the
// dispatched instruction set has FMA), the tail into lanes 0.., then
// halving: lane l += lane l + L/2, ... down to lane 0.
float multiply_add(float a, float b, float c) { return cpu::gemm_uses_fma() ? std::fma(a, b, c) : a * b + c; }

float reference_dot(const float* a, const float* b, int64_t n) {
  const int L = cpu::gemm_sum_lanes();
  std::vector<float> acc(size_t(L), 0.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) acc[size_t(l)] = multiply_add(a[i + l], b[i + l], acc[size_t(l)]);
  for (int l = 0; i < n; ++i, ++l) acc[size_t(l)] = multiply_add(a[i], b[i], acc[size_t(l)]);
  for (int half = L / 2; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) acc[size_t(l)] += acc[size_t(l + half)];
  return acc[0];
}

// A random [rows, cols] weight in one storage kind, loaded as the backend loads it.
struct RandomMatrix {
  std::vector<uint8_t> weight;
  std::vector<float> scales, biases;
  TensorView tw, ts, tb;
  std::shared_ptr<cpu::Matrix> m;

  RandomMatrix(std::mt19937_64& rng, Kind kind, int64_t rows, int64_t cols, int group = 32) {
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(cols)));
    WeightRef w;
    w.name = "w.weight";
    w.rows = rows;
    w.cols = cols;
    tw.name = "w.weight";
    tw.data = nullptr;
    if (kind == Kind::F32 || kind == Kind::BF16 || kind == Kind::F16) {
      const size_t n = size_t(rows * cols);
      tw.dtype = kind == Kind::F32 ? DType::F32 : kind == Kind::BF16 ? DType::BF16 : DType::F16;
      weight.resize(n * (kind == Kind::F32 ? 4 : 2));
      for (size_t i = 0; i < n; ++i) {
        const float v = normal(rng);
        if (kind == Kind::F32) std::memcpy(&weight[4 * i], &v, 4);
        else {
          const uint16_t b = kind == Kind::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
          std::memcpy(&weight[2 * i], &b, 2);
        }
      }
    } else {
      const int bits = kind == Kind::Q4 ? 4 : 8;
      tw.dtype = DType::U32;
      weight.resize(size_t(rows * cols * bits / 8));
      std::uniform_int_distribution<int> byte(0, 255);
      for (auto& b : weight) b = uint8_t(byte(rng));
      for (int64_t g = 0; g < rows * (cols / group); ++g) {
        scales.push_back(normal(rng) / float((1 << bits) - 1));
        biases.push_back(normal(rng));
      }
      ts.dtype = tb.dtype = DType::F32;
      ts.data = reinterpret_cast<const uint8_t*>(scales.data());
      tb.data = reinterpret_cast<const uint8_t*>(biases.data());
      ts.nbytes = tb.nbytes = scales.size() * 4;
      w.scales = &ts;
      w.biases = &tb;
      w.quant.bits = bits;
      w.quant.group_size = group;
    }
    tw.data = weight.data();
    tw.nbytes = weight.size();
    w.weight = &tw;
    m = cpu::Matrix::load(w);
  }
};

std::vector<float> random_inputs(std::mt19937_64& rng, int T, int64_t cols) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(size_t(T * cols));
  for (auto& v : x) v = normal(rng);
  return x;
}

std::vector<float> product(const cpu::Matrix& m, const float* x, int T, ThreadPool* pool = nullptr) {
  std::vector<float> y(size_t(T * m.rows()));
  cpu::matmul(m, x, T, y.data(), 0, -1, pool, /*min_chunk_work=*/1);
  return y;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

struct Shape {
  int64_t rows, cols;
};
// Column tails (cols % 8 != 0) exist for dense weights only: MLX groups are multiples of 32.
const Shape kDenseShapes[] = {{1, 8}, {5, 3}, {17, 100}, {33, 257}, {70, 64}, {9, 16}, {12, 47}};
const Shape kQuantShapes[] = {{1, 32}, {17, 96}, {33, 256}, {70, 64}};

template <class F>
void for_each_case(F&& f) {
  std::mt19937_64 rng(2027);
  for (Kind kind : {Kind::F32, Kind::BF16, Kind::F16, Kind::Q4, Kind::Q8}) {
    const bool q = kind == Kind::Q4 || kind == Kind::Q8;
    for (const Shape& s : q ? std::span<const Shape>(kQuantShapes) : std::span<const Shape>(kDenseShapes)) {
      SCOPED_TRACE(testing::Message() << kind_name(kind) << " [" << s.rows << " x " << s.cols << "]");
      RandomMatrix rm(rng, kind, s.rows, s.cols);
      f(rng, *rm.m);
    }
  }
}

TEST(CpuGemm, EveryElementFollowsTheSummationOrder) {
  for_each_case([](std::mt19937_64& rng, const cpu::Matrix& m) {
    const int64_t cols = m.cols();
    std::vector<float> wr(size_t(m.rows() * cols));
    for (int64_t r = 0; r < m.rows(); ++r) m.row(r, &wr[size_t(r * cols)]);
    for (int T : {1, 2, 5, 9, 67}) {
      const auto x = random_inputs(rng, T, cols);
      const auto y = product(m, x.data(), T);
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < m.rows(); ++r) {
          const float want = reference_dot(&x[size_t(t * cols)], &wr[size_t(r * cols)], cols);
          ASSERT_TRUE(same_bits(&y[size_t(t * m.rows() + r)], &want, 1)) << "T " << T << " row " << t << " out " << r;
        }
    }
  });
}

TEST(CpuGemm, RowAloneEqualsRowInABatch) {
  for_each_case([](std::mt19937_64& rng, const cpu::Matrix& m) {
    const int T = 2 * cpu::kInputBlockRows + 3;  // several input blocks, a partial one last
    const int64_t V = m.rows();
    const auto x = random_inputs(rng, T, m.cols());
    const auto all = product(m, x.data(), T);
    for (int t = 0; t < T; ++t) {
      const auto one = product(m, &x[size_t(t * m.cols())], 1);
      ASSERT_TRUE(same_bits(one.data(), &all[size_t(t * V)], size_t(V))) << "row " << t;
    }
    for (int T2 : {2, 3, 4, 5, 8, 63, 64, 65}) {
      const auto prefix = product(m, x.data(), T2);
      ASSERT_TRUE(same_bits(prefix.data(), all.data(), prefix.size())) << "first " << T2 << " rows";
    }
    // A slice of output rows [first, first + count) equals those columns of the full product.
    const int64_t first = V / 3, count = V - V / 3;
    std::vector<float> slice(size_t(T * count));
    cpu::matmul(m, x.data(), T, slice.data(), first, count, nullptr, 1);
    for (int t = 0; t < T; ++t)
      ASSERT_TRUE(same_bits(&slice[size_t(t * count)], &all[size_t(t * V + first)], size_t(count))) << "row " << t;
  });
}

TEST(CpuGemm, ThreadCountDoesNotChangeBits) {
  ThreadPool one(1), two(2), seven(7);
  for_each_case([&](std::mt19937_64& rng, const cpu::Matrix& m) {
    for (int T : {1, 4, 2 * cpu::kInputBlockRows + 1}) {
      const auto x = random_inputs(rng, T, m.cols());
      const auto ref = product(m, x.data(), T, &one);
      EXPECT_TRUE(same_bits(product(m, x.data(), T, &two).data(), ref.data(), ref.size())) << "2 threads, T " << T;
      EXPECT_TRUE(same_bits(product(m, x.data(), T, &seven).data(), ref.data(), ref.size())) << "7 threads, T " << T;
      EXPECT_TRUE(same_bits(product(m, x.data(), T).data(), ref.data(), ref.size())) << "no pool, T " << T;
    }
  });
}

}  // namespace
}  // namespace nextn
