// The CPU backend's vectorized kernels against their scalar definitions (bit
// for bit, every length including tails), and the thread pool's contract.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <cstdlib>
#include <random>
#include <stdexcept>

#include "backend/cpu/gdn_simd.h"
#include "backend/cpu/simd.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace nextn {
namespace {

// The scalar definition of cpu::dot (ops.h): 8 interleaved partial sums, the
// tail into lanes 0.., combined pairwise.
float scalar_dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CpuSimd, DotRowsEqualsTheScalarDefinition) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 100, 257, 1024}) {
    std::vector<float> x(size_t(n) + 1), w(size_t(4 * n) + 4);
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = normal(rng);
    for (int rows = 1; rows <= 4; ++rows) {
      const float* ptr[4] = {w.data(), w.data() + n + 1, w.data() + 2 * n + 2, w.data() + 3 * n + 3};
      float out[4];
      cpu::dot_rows(x.data(), ptr, rows, n, out);
      for (int r = 0; r < rows; ++r)
        EXPECT_EQ(bits_of(out[r]), bits_of(scalar_dot(x.data(), ptr[r], n))) << "n " << n << " rows " << rows << " r " << r;
    }
  }
  EXPECT_NE(std::string(cpu::simd_target_name()), "");
}

TEST(CpuSimd, DotRowsBf16EqualsTheScalarDefinitionOnWidenedRows) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> any(0, 0xffff);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {0, 1, 7, 8, 9, 17, 64, 100, 257}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng);
    std::vector<uint16_t> w(size_t(4 * n));
    for (auto& v : w) {
      v = uint16_t(any(rng));
      if ((v & 0x7f80) == 0x7f80) v &= 0xbfff;  // finite values only (no inf/NaN exponent)
    }
    std::vector<float> wide(w.size());
    for (size_t i = 0; i < w.size(); ++i) wide[i] = bf16_to_f32(w[i]);
    for (int rows = 1; rows <= 4; ++rows) {
      const uint16_t* ptr[4] = {w.data(), w.data() + n, w.data() + 2 * n, w.data() + 3 * n};
      float out[4];
      cpu::dot_rows_bf16(x.data(), ptr, rows, n, out);
      for (int r = 0; r < rows; ++r)
        EXPECT_EQ(bits_of(out[r]), bits_of(scalar_dot(x.data(), wide.data() + r * n, n))) << "n " << n << " r " << r;
    }
  }
}

TEST(CpuSimd, DequantizeRowEqualsTheScalarDefinition) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> word(0, UINT32_MAX);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      const int64_t cols = 2 * 128;
      const int per_word = 32 / bits;
      std::vector<uint32_t> words(size_t(cols / per_word));
      std::vector<float> scales(size_t(cols / group)), biases(size_t(cols / group));
      for (auto& v : words) v = word(rng);
      for (auto& v : scales) v = normal(rng);
      for (auto& v : biases) v = normal(rng);
      std::vector<float> out(static_cast<size_t>(cols));
      cpu::dequantize_row(words.data(), scales.data(), biases.data(), bits, group, cols, out.data());
      for (int64_t c = 0; c < cols; ++c) {
        const uint32_t q = (words[size_t(c / per_word)] >> (bits * (c % per_word))) & ((1u << bits) - 1u);
        const float s = scales[size_t(c / group)] * float(q);
        const float want = s + biases[size_t(c / group)];
        ASSERT_EQ(bits_of(out[size_t(c)]), bits_of(want)) << "bits " << bits << " group " << group << " col " << c;
      }
    }
}

TEST(CpuSimd, AddScaledEqualsTheScalarLoop) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 64, 100}) {
    std::vector<float> acc(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (auto& x : acc) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    const float p = normal(rng);
    std::vector<float> want = acc;
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] += p * v[size_t(i)];
    cpu::add_scaled(acc.data(), v.data(), p, n);
    // Bit for bit (memcmp of an empty vector's null data would be undefined).
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(acc[size_t(i)]), std::bit_cast<uint32_t>(want[size_t(i)])) << "n " << n << " i " << i;
  }
}

// gdn_head_step against the loops it replaced (qwen35.cpp before), bit for
// bit: value dimensions with and without a tail past the last full vector.
TEST(CpuSimd, GdnHeadStepEqualsTheScalarDefinition) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (int dk : {1, 16, 64})
    for (int dv : {1, 7, 20, 64, 70}) {
      std::vector<float> S(static_cast<size_t>(dk * dv)), q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)),
          v(static_cast<size_t>(dv));
      for (std::vector<float>* vec : {&S, &q, &k, &v})
        for (auto& x : *vec) x = normal(rng);
      const float decay = 0.9f + 0.01f * normal(rng), beta = 0.5f + 0.1f * normal(rng);
      std::vector<float> S_ref = S, mem_ref(size_t(dv), 0.0f), o_ref(size_t(dv), 0.0f);
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) {
          S_ref[size_t(i * dv + j)] *= decay;
          mem_ref[size_t(j)] += S_ref[size_t(i * dv + j)] * k[size_t(i)];
        }
      for (int j = 0; j < dv; ++j) mem_ref[size_t(j)] = (v[size_t(j)] - mem_ref[size_t(j)]) * beta;
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) {
          S_ref[size_t(i * dv + j)] += k[size_t(i)] * mem_ref[size_t(j)];
          o_ref[size_t(j)] += S_ref[size_t(i * dv + j)] * q[size_t(i)];
        }
      std::vector<float> mem(static_cast<size_t>(dv)), o(static_cast<size_t>(dv));
      cpu::gdn_head_step(S.data(), dk, dv, q.data(), k.data(), v.data(), decay, beta, mem.data(), o.data());
      EXPECT_EQ(0, std::memcmp(S.data(), S_ref.data(), S.size() * 4)) << "state, dk " << dk << " dv " << dv;
      EXPECT_EQ(0, std::memcmp(o.data(), o_ref.data(), o.size() * 4)) << "output, dk " << dk << " dv " << dv;
    }
}

TEST(ThreadPool, ChunksCoverTheRangeOnce) {
  for (int threads : {1, 2, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {1, 5, 7, 100, 1001})
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0};
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ++chunks;
          for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " i " << i;
        EXPECT_LE(chunks.load(), threads == 1 ? 1 : std::min<int64_t>(4 * threads, (n + grain - 1) / grain));
      }
  }
}

TEST(ThreadPool, RethrowsAndRunsNestedCallsSerially) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(9, 1, [](int64_t b, int64_t) {
                 if (b > 0) throw std::runtime_error("chunk failed");
               }),
               std::runtime_error);
  std::atomic<int> inner{0};
  pool.parallel_for(3, 1, [&](int64_t, int64_t) { pool.parallel_for(4, 1, [&](int64_t b, int64_t e) { inner += int(e - b); }); });
  EXPECT_EQ(inner.load(), 12);
  pool.parallel_for(6, 1, [](int64_t, int64_t) {});  // still usable after an exception
}

TEST(ThreadPool, ThreadCountFromTheEnvironment) {
  const char* saved = std::getenv("NEXTN_THREADS");
  const std::string keep = saved ? saved : "";
  setenv("NEXTN_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), 3);
  for (const char* bad : {"0", "-2", "two", "3x", "5000"}) {
    setenv("NEXTN_THREADS", bad, 1);
    EXPECT_THROW(default_thread_count(), Error) << bad;
  }
  unsetenv("NEXTN_THREADS");
  EXPECT_GE(default_thread_count(), 1);
  if (saved) setenv("NEXTN_THREADS", keep.c_str(), 1);
  EXPECT_THROW(ThreadPool(0), Error);
}

}  // namespace
}  // namespace nextn
