// The matmul family at the Qwen3.5-27B LM-head shape (248320 x 5120), bf16
// and MLX q4 g64, for W = 1..64 rows: plain projection and the fused
// projection+argmax. Asserts that at this shape (the vocabulary spans
// thousands of argmax chunks and pairs) the fused argmax picks, for every row
// and every W, what argmax of the projected logits picks; prints "[bench]"
// timings beside it: median of 20 timed launches after 3 warm-ups, CUDA
// events, random (not zero) data from a fixed seed. Disabled by default (a
// 2.5 GB matrix); the device script runs it with NEXTN_DEVICE_BENCH=1
// (--gtest_also_run_disabled_tests).
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::WKind;
using test::DevBuf;

// Fills a device buffer with random bytes (a 64 MiB random block, repeated).
void fill_random(DevBuf& b, std::mt19937_64& rng, bool bf16_values) {
  std::vector<uint16_t> block(size_t(32) << 20);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::uniform_int_distribution<uint32_t> u(0, 0xffff);
  for (auto& v : block) v = bf16_values ? f32_to_bf16(d(rng)) : uint16_t(u(rng));
  const size_t bytes = block.size() * 2;
  for (size_t off = 0; off < b.bytes; off += bytes)
    cudaMemcpy(static_cast<char*>(b.p) + off, block.data(), std::min(bytes, b.bytes - off), cudaMemcpyHostToDevice);
}

template <typename F>
double median_ms(F&& launch) {
  const cuda::Event a = cuda::make_event(), b = cuda::make_event();
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TEST(CudaBench, DISABLED_LmHeadProjection) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int V = 248320, H = 5120;
  for (WKind kind : {WKind::BF16, WKind::Q4}) {
    cuda::DevMatrix m;
    m.kind = kind;
    m.rows = V;
    m.cols = H;
    m.group = 64;
    m.splits = 1;
    const size_t wbytes = kind == WKind::BF16 ? size_t(V) * H * 2 : size_t(V) * H / 2;
    DevBuf w(wbytes), s(kind == WKind::Q4 ? size_t(V) * (H / 64) * 4 : 16), bb(kind == WKind::Q4 ? size_t(V) * (H / 64) * 4 : 16);
    fill_random(w, rng, kind == WKind::BF16);
    if (kind == WKind::Q4) {
      std::vector<float> sv(size_t(V) * (H / 64)), bv(sv.size());
      std::normal_distribution<float> d(0.0f, 0.002f);
      for (size_t i = 0; i < sv.size(); ++i) {  // exact in bf16, as MLX stores them: the streamed kernel's head
        sv[i] = bf16_to_f32(f32_to_bf16(d(rng)));
        bv[i] = bf16_to_f32(f32_to_bf16(-7.5f * sv[i]));
      }
      s.put(sv);
      bb.put(bv);
      m.scales = s.as<float>();
      m.biases = bb.as<float>();
    }
    m.w = w.p;
    std::unique_ptr<DevBuf> packed;  // the layout the runtime's head reads (pack_quant, as at load)
    if (kind == WKind::Q4) {
      packed = std::make_unique<DevBuf>(size_t(std::max<int64_t>(16, cuda::pack_quant_bytes(m))));
      cuda::pack_quant(m, packed->p, nullptr);
    }
    const double bytes = double(wbytes) + (kind == WKind::Q4 ? double(V) * (H / 64) * 8 : 0.0);
    DevBuf x(size_t(64) * H * 2), y(size_t(64) * V * 4), pairs(static_cast<size_t>(cuda::argmax_pairs_bytes(m))), out(64 * 4);
    x.put(test::to_bf16_bits(test::randn(rng, size_t(64) * H)));
    for (int W : {1, 2, 4, 8, 16, 32, 64}) {
      const double ms = median_ms([&] {
        cuda::matmul(m, x.p, Act::BF16, W, H, y.as<float>(), V, false, nullptr, nullptr);
      });
      const double fms = median_ms([&] {
        cuda::matmul_argmax(m, x.p, Act::BF16, W, H, pairs.p, out.as<int32_t>(), nullptr, nullptr);
      });
      std::printf("[bench] head %s %dx%d W=%2d: project %.3f ms (%.0f GB/s of weights), fused argmax %.3f ms (%.0f GB/s)\n",
                  kind == WKind::BF16 ? "bf16" : "q4g64", V, H, W, ms, bytes / ms / 1e6, fms, bytes / fms / 1e6);
      const auto logits = y.get<float>(size_t(W) * V);
      const auto fused = out.get<int32_t>(size_t(W));
      for (int r = 0; r < W; ++r)
        ASSERT_EQ(fused[size_t(r)], cpu::argmax(&logits[size_t(r) * V], V))
            << (kind == WKind::BF16 ? "bf16" : "q4g64") << " W=" << W << " row " << r;
    }
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  // Copy bandwidth on the same machine, for scale (bytes read + written).
  DevBuf a(size_t(2) << 30), b(size_t(2) << 30);
  const double ms = median_ms([&] { cudaMemcpyAsync(b.p, a.p, a.bytes, cudaMemcpyDeviceToDevice); });
  std::printf("[bench] device-to-device copy 2 GiB: %.3f ms, %.0f GB/s (read + write)\n", ms, 2.0 * double(a.bytes) / ms / 1e6);
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
