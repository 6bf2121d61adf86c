// Helpers for the CUDA tests (tests/test_cuda_*.cpp): device buffers, random
// matrices in every storage kind, and the CPU reference's view of them.
// Only meaningful in a build with the CUDA backend.
#pragma once
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "core/dtype.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"

namespace nextn::test {

inline bool have_cuda_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

#define NEXTN_REQUIRE_GPU() \
  if (!::nextn::test::have_cuda_device()) GTEST_SKIP() << "no CUDA device on this machine"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// A logit row's argmax and its top-1/top-2 gap in units of the row's std
// (the bf16 tests check a row's argmax only where that gap is clear).
struct RowStats {
  int32_t top1;
  double margin_std;  // (top1 - top2) / std
  double std;
};

inline RowStats row_stats(const float* x, int64_t n) {
  const int32_t a = cpu::argmax(x, n);
  double mean = 0, m2 = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= double(n);
  for (int64_t i = 0; i < n; ++i) m2 += (x[i] - mean) * (x[i] - mean);
  const double sd = std::sqrt(m2 / double(n));
  float second = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (i != a) second = std::max(second, x[i]);
  return {a, (double(x[a]) - double(second)) / sd, sd};
}

// A device allocation, filled with NaN bytes (0xff) so that unwritten
// outputs show.
// The streamed kernel at one block per SM for the scope (set_stream_caps):
// a matrix of more items than blocks gives blocks several items.
struct OneBlockPerSm {
  OneBlockPerSm() { cuda::set_stream_caps(1, 0); }
  ~OneBlockPerSm() { cuda::set_stream_caps(0, 0); }
  OneBlockPerSm(const OneBlockPerSm&) = delete;
  OneBlockPerSm& operator=(const OneBlockPerSm&) = delete;
};

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) {
    if (cudaMalloc(&p, n ? n : 16) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    poison();
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void poison() { cudaMemset(p, 0xff, bytes); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  template <typename T>
  void put(const std::vector<T>& v, size_t offset_bytes = 0) {
    if (cudaMemcpy(static_cast<char*>(p) + offset_bytes, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) !=
        cudaSuccess)
      throw std::runtime_error("cudaMemcpy H2D failed");
  }
  template <typename T>
  std::vector<T> get(size_t count, size_t offset_bytes = 0) const {
    std::vector<T> v(count);
    if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("kernel failed");
    if (cudaMemcpy(v.data(), static_cast<const char*>(p) + offset_bytes, count * sizeof(T), cudaMemcpyDeviceToHost) !=
        cudaSuccess)
      throw std::runtime_error("cudaMemcpy D2H failed");
    return v;
  }
};

// One attention layer's cache in KV blocks (kernels.h, KvBlocks) as the
// runtime lays them out, for the kernel tests: `positions` rows of
// `row_bytes`, in blocks of `layers` layers each, this cache layer `layer`;
// the table lists the blocks in reverse address order, so a kernel that
// ignored it would read the wrong rows. Unwritten bytes are NaN (0xff).
struct PagedKv {
  PagedKv(int positions, size_t row_bytes, int layers = 2, int layer = 1)
      : n_blocks(kv_blocks_for(positions)),
        row(row_bytes),
        block_bytes(size_t(layers) * 2 * kKvBlockTokens * row_bytes),
        layer_(layer),
        image(size_t(n_blocks) * block_bytes, 0xff),
        blocks(size_t(n_blocks) * block_bytes),
        table(size_t(n_blocks) * sizeof(void*)) {
    std::vector<void*> t(static_cast<size_t>(n_blocks));
    for (int b = 0; b < n_blocks; ++b) t[size_t(b)] = static_cast<char*>(blocks.p) + at(b);
    table.put(t);
  }
  // Keys (which 0) or values (1) of positions [0, n) from `rows` ([n][row_bytes]).
  void put(int which, const void* rows, int n) {
    for (int p = 0; p < n; ++p)
      std::memcpy(&image[offset(which, p)], static_cast<const char*>(rows) + size_t(p) * row, row);
    blocks.put(image);
  }
  template <typename T>
  void put(int which, const std::vector<T>& rows) {
    put(which, rows.data(), int(rows.size() * sizeof(T) / row));
  }
  // Keys or values of positions [0, n) as the device holds them, [n][row_bytes].
  template <typename T>
  std::vector<T> get(int which, int n) const {
    const auto all = blocks.get<uint8_t>(image.size());
    std::vector<T> out(size_t(n) * row / sizeof(T));
    for (int p = 0; p < n; ++p) std::memcpy(reinterpret_cast<char*>(out.data()) + size_t(p) * row, &all[offset(which, p)], row);
    return out;
  }
  cuda::KvBlocks view() const { return {table.as<void*>(), layer_}; }

  const int n_blocks;
  const size_t row, block_bytes;

 private:
  size_t at(int b) const { return size_t(n_blocks - 1 - b) * block_bytes; }  // block b's bytes in `blocks`
  size_t offset(int which, int p) const {
    return at(p / kKvBlockTokens) + (size_t(layer_ * 2 + which) * kKvBlockTokens + size_t(p % kKvBlockTokens)) * row;
  }
  int layer_;
  std::vector<uint8_t> image;
  DevBuf blocks, table;
};

// A fresh synthetic q4 g64 checkpoint of preset test-stream (every matrix
// a multiple of 128 columns wide, so the whole model takes the streamed
// kernel) in the test temp dir under `name`; returns its directory.
inline std::string make_stream_q4_checkpoint(const std::string& name, uint64_t seed) {
  const std::string dir = testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  MakeCheckpointOptions mo;
  mo.quant = "q4";
  mo.seed = seed;
  make_checkpoint(*synthetic_preset("test-stream"), mo, dir);
  return dir;
}

// Random inputs from fixed seeds, so a failure reproduces: each call gives
// the next seed of a fixed sequence (NEXTN_TEST_SEED moves the whole
// sequence, to try other inputs); the seed is printed on failure.
inline uint64_t fresh_seed() {
  static uint64_t next = [] {
    const char* s = std::getenv("NEXTN_TEST_SEED");
    return s && *s ? std::strtoull(s, nullptr, 10) : uint64_t(20261130);
  }();
  return (next++) * 0x9e3779b97f4a7c15ull + 1;
}

inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

inline std::vector<float> randn(std::mt19937_64& rng, size_t n, float scale = 1.0f, bool bf16 = false) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16 ? round_bf16(d(rng)) : d(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

inline std::vector<float> bf16_bits_to_f32(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_f32(b[i]);
  return v;
}

// ||a - b|| / ||b|| in double; NaN anywhere gives +inf.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A random weight matrix in one storage kind, as the checkpoint would hand it
// over (a WeightRef for the CPU reference) and as the CUDA backend holds it.
struct TestMatrix {
  cuda::WKind kind;
  int rows, cols, group;
  std::vector<uint8_t> weight;                 // stored bytes (F32 / BF16 / packed U32)
  std::vector<uint16_t> scales, biases;        // bf16 (quantized)
  TensorView tw, ts, tb;
  std::unique_ptr<DevBuf> dw, ds, db, dsb;

  TestMatrix(std::mt19937_64& rng, cuda::WKind k, int r, int c, int g = 64) : kind(k), rows(r), cols(c), group(g) {
    const float scale = 1.0f / std::sqrt(float(c));
    if (k == cuda::WKind::F32 || k == cuda::WKind::BF16) {
      const auto v = randn(rng, size_t(r) * c, scale, true);
      if (k == cuda::WKind::F32) {
        weight.resize(v.size() * 4);
        std::memcpy(weight.data(), v.data(), weight.size());
      } else {
        const auto b = to_bf16_bits(v);
        weight.resize(b.size() * 2);
        std::memcpy(weight.data(), b.data(), weight.size());
      }
    } else {
      const int bits = k == cuda::WKind::Q4 ? 4 : 8;
      const size_t words = size_t(r) * c * bits / 32;
      weight.resize(words * 4);
      std::uniform_int_distribution<uint32_t> u;
      for (size_t i = 0; i < words; ++i) {
        const uint32_t w = u(rng);
        std::memcpy(&weight[i * 4], &w, 4);
      }
      const size_t groups = size_t(r) * (c / g);
      // MLX-like: scale of either sign, bias at the group's edge.
      const float qmax = float((1 << bits) - 1);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (size_t i = 0; i < groups; ++i) {
        const float s = nd(rng) * 2.0f * scale / qmax;
        scales.push_back(f32_to_bf16(s));
        biases.push_back(f32_to_bf16(-s * qmax * 0.5f + nd(rng) * 0.1f * scale));
      }
    }
  }

  WeightRef ref() {
    const bool q = kind == cuda::WKind::Q4 || kind == cuda::WKind::Q8;
    tw = TensorView{};
    tw.name = "w.weight";
    tw.dtype = kind == cuda::WKind::F32 ? DType::F32 : kind == cuda::WKind::BF16 ? DType::BF16 : DType::U32;
    tw.data = weight.data();
    tw.nbytes = weight.size();
    WeightRef w;
    w.name = "w.weight";
    w.weight = &tw;
    w.rows = rows;
    w.cols = cols;
    if (q) {
      ts = TensorView{};
      ts.dtype = DType::BF16;
      ts.data = reinterpret_cast<const uint8_t*>(scales.data());
      ts.nbytes = scales.size() * 2;
      tb = ts;
      tb.data = reinterpret_cast<const uint8_t*>(biases.data());
      w.scales = &ts;
      w.biases = &tb;
      w.quant.bits = kind == cuda::WKind::Q4 ? 4 : 8;
      w.quant.group_size = group;
    }
    return w;
  }

  std::shared_ptr<cpu::Matrix> cpu() { return cpu::Matrix::load(ref()); }

  // The device copy; `as` F32 converts dense storage to fp32 (the fp32 mode).
  // swiglu_pairs: the rows are [gate; up] and the streamed copy pairs them
  // (DevMatrix::swiglu_pairs; unsplit), as the loader does for an MLP.
  cuda::DevMatrix device(bool f32 = false, bool sb_exact = true, bool swiglu_pairs = false) {
    cuda::DevMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.group = group;
    m.kind = kind;
    if (kind == cuda::WKind::BF16 && f32) {
      std::vector<uint16_t> b(weight.size() / 2);
      std::memcpy(b.data(), weight.data(), weight.size());
      const auto v = bf16_bits_to_f32(b);
      dw = std::make_unique<DevBuf>(v.size() * 4);
      dw->put(v);
      m.kind = cuda::WKind::F32;
    } else {
      dw = std::make_unique<DevBuf>(weight.size());
      dw->put(weight);
    }
    m.w = dw->p;
    if (!scales.empty()) {
      const auto s = bf16_bits_to_f32(scales), b = bf16_bits_to_f32(biases);
      ds = std::make_unique<DevBuf>(s.size() * 4);
      db = std::make_unique<DevBuf>(b.size() * 4);
      ds->put(s);
      db->put(b);
      m.scales = ds->as<float>();
      m.biases = db->as<float>();
    }
    m.splits = swiglu_pairs ? 1 : cuda::choose_splits(rows, cols, m.kind);
    m.swiglu_pairs = swiglu_pairs;
    m.sb_exact = sb_exact;  // false: the generic fp32-scale kernel, as for a checkpoint with fp32 scales
    if (!scales.empty()) {
      dsb = std::make_unique<DevBuf>(size_t(cuda::pack_quant_bytes(m)));
      cuda::pack_quant(m, dsb->p, nullptr);
    }
    return m;
  }
};

// The CPU reference's y = x . W^T for T rows of x [T][cols].
inline std::vector<float> cpu_matmul(TestMatrix& tm, const std::vector<float>& x, int T) {
  std::vector<float> y(size_t(T) * tm.rows);
  cpu::matmul(*tm.cpu(), x.data(), T, y.data());
  return y;
}

}  // namespace nextn::test
#endif  // NEXTN_HAVE_CUDA
