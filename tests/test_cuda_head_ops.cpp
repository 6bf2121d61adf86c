// The LM head's device counters at the kernel level (kernels.h HeadCounters):
// every head kernel family (generic tensor-core bf16 / q4 / q8, the streamed
// q4 / q8 kernel, the fp32-mode CUDA-core kernel) counts the rows it
// projected, the weight bytes it read (checked against a formula of the
// layout written here, independently of the kernels' own), the logits it
// stored, and the path; a projection stopped by the walk's flag counts
// nothing; the while walk's step and the flag walk's compare count the rows
// they took and stop at the planted mismatch. Fixed seeds. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/kernels.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::HeadCounters;
using cuda::WKind;
using test::DevBuf;
using test::TestMatrix;

struct Case {
  WKind kind;
  bool f32;       // the fp32-activation mode
  bool sb_exact;  // false: the generic fp32-scale kernel even where the streamed one could serve
  int group;
  const char* what;
};

int bits_of(WKind k) { return k == WKind::Q4 ? 4 : 8; }
bool quantized(WKind k) { return k == WKind::Q4 || k == WKind::Q8; }

// Bytes one projection reads, from the layouts as docs/cuda-backend.md
// describes them: the streamed stage units (128 x 128 tiles of packed words
// plus a u32 (scale, bias) per group, rows padded to 128), else row-major
// weights (+ fp32 scale and bias per group).
int64_t expected_bytes(const Case& c, int rows, int cols) {
  if (!quantized(c.kind)) return int64_t(rows) * cols * (c.f32 ? 4 : 2);
  const int bits = bits_of(c.kind);
  if (!c.f32 && c.sb_exact && cols % 128 == 0) {
    const int64_t unit = 128 * 128 * bits / 8 + 128 * (128 / c.group) * 4;
    return int64_t((rows + 127) / 128) * (cols / 128) * unit;
  }
  return int64_t(rows) * (int64_t(cols) * bits / 8 + int64_t(cols / c.group) * 8);
}

HeadCounters read(const DevBuf& b) { return b.get<HeadCounters>(1)[0]; }
void zero(DevBuf& b) { ASSERT_EQ(cudaMemset(b.p, 0, b.bytes), cudaSuccess); }

const Case kCases[] = {
    {WKind::BF16, false, true, 64, "bf16 generic"},
    {WKind::Q4, false, true, 64, "q4 streamed"},
    {WKind::Q4, false, false, 64, "q4 generic"},
    {WKind::Q8, false, true, 32, "q8 streamed"},
    {WKind::Q8, false, false, 128, "q8 generic"},
    {WKind::BF16, true, true, 64, "fp32 mode dense"},
    {WKind::Q4, true, true, 64, "fp32 mode q4"},
};

TEST(CudaHeadOps, ProjectionsCountTheirRowsBytesAndLogits) {
  NEXTN_REQUIRE_GPU();
  std::mt19937_64 rng(20261130);
  const int V = 1000, H = 256;  // 1000 rows: a partial last tile for every kernel
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    TestMatrix tm(rng, c.kind, V, H, c.group);
    auto dm = tm.device(c.f32, c.sb_exact);
    dm.splits = 1;  // the head is never split
    const Act act = c.f32 ? Act::F32 : Act::BF16;
    const int64_t bytes = expected_bytes(c, V, H);
    EXPECT_EQ(cuda::head_read_bytes(dm, act), bytes);
    for (int T : {1, 5}) {
      SCOPED_TRACE(T);
      const auto x = test::randn(rng, size_t(T) * H, 1.0f, true);
      DevBuf dx(x.size() * 4), y(size_t(T) * V * 4), counters(sizeof(HeadCounters)), out(64 * 4);
      DevBuf scratch(size_t(cuda::argmax_scratch_bytes(V)) * T), pairs(size_t(cuda::argmax_pairs_bytes(dm)));
      if (c.f32)
        dx.put(x);
      else
        dx.put(test::to_bf16_bits(x));
      auto* hc = counters.as<HeadCounters>();

      zero(counters);
      cuda::matmul(dm, dx.p, act, T, H, y.as<float>(), V, false, nullptr, nullptr, {hc, 1});
      cuda::argmax_rows(y.as<float>(), T, V, V, scratch.p, out.as<int32_t>(), nullptr, hc);
      HeadCounters k = read(counters);
      EXPECT_EQ(k.rows_projected, unsigned(T));
      EXPECT_EQ(int64_t(k.head_bytes_read), bytes);
      EXPECT_EQ(k.logits_bytes_written, unsigned(T * V * 4));
      EXPECT_EQ(k.head_calls, 1u);
      EXPECT_EQ(k.walk_rows, 0u);
      EXPECT_EQ(k.last_path, 1);
      const auto unfused = out.get<int32_t>(size_t(T));

      zero(counters);
      cuda::matmul_argmax(dm, dx.p, act, T, H, pairs.p, out.as<int32_t>(), nullptr, nullptr, {hc, 3});
      k = read(counters);
      EXPECT_EQ(k.rows_projected, unsigned(T));
      EXPECT_EQ(int64_t(k.head_bytes_read), bytes);
      EXPECT_EQ(k.logits_bytes_written, 0u);
      EXPECT_EQ(k.head_calls, 1u);
      EXPECT_EQ(k.last_path, 3);
      EXPECT_EQ(out.get<int32_t>(size_t(T)), unfused);

      // A projection the walk's stop flag cancels reads nothing and counts nothing.
      DevBuf stop(4);
      const std::vector<int> one{1};
      stop.put(one);
      zero(counters);
      cuda::matmul_argmax(dm, dx.p, act, T, H, pairs.p, nullptr, stop.as<int>(), nullptr, {hc, 5});
      k = read(counters);
      EXPECT_EQ(k.rows_projected, 0u);
      EXPECT_EQ(k.head_bytes_read, 0u);
      EXPECT_EQ(k.last_path, 0);
    }
  }
}

// Both walk steps on six rows with a planted mismatch: the rows they take,
// what they project (the while walk launches only the rows it takes; the
// flag walk launches all, and the cancelled ones count nothing).
TEST(CudaHeadOps, WalkStepsCountRowsTakenAndStopAtTheMismatch) {
  NEXTN_REQUIRE_GPU();
  std::mt19937_64 rng(7001);
  const int V = 3001, H = 128, T = 6;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    TestMatrix tm(rng, c.kind, V, H, c.group);
    auto dm = tm.device(c.f32, c.sb_exact);
    dm.splits = 1;
    const Act act = c.f32 ? Act::F32 : Act::BF16;
    const int esz = c.f32 ? 4 : 2;
    const auto x = test::randn(rng, size_t(T) * H, 1.0f, true);
    DevBuf dx(x.size() * 4), next(size_t(H) * 4), counters(sizeof(HeadCounters)), out(size_t(T + 2) * 4);
    DevBuf pairs(size_t(cuda::argmax_pairs_bytes(dm))), state(8);
    if (c.f32)
      dx.put(x);
    else
      dx.put(test::to_bf16_bits(x));
    cuda::matmul_argmax(dm, dx.p, act, T, H, pairs.p, out.as<int32_t>(), nullptr, nullptr);
    const auto want = out.get<int32_t>(size_t(T));
    auto* hc = counters.as<HeadCounters>();
    const int64_t bytes = expected_bytes(c, V, H);
    for (int mismatch : {0, 2, 5, -1}) {
      SCOPED_TRACE(mismatch);
      std::vector<int32_t> drafts(want.begin(), want.begin() + (T - 1));
      if (mismatch >= 0 && mismatch < T - 1) drafts[size_t(mismatch)] = (drafts[size_t(mismatch)] + 1) % V;
      const int taken = (mismatch >= 0 && mismatch < T - 1) ? mismatch + 1 : T;
      DevBuf dd(drafts.size() * 4);
      dd.put(drafts);

      // while walk, host-driven (the runtime's graph puts the same two launches in a WHILE body)
      zero(counters);
      zero(state);
      out.poison();
      ASSERT_EQ(cudaMemcpy(next.p, dx.p, size_t(H) * esz, cudaMemcpyDeviceToDevice), cudaSuccess);
      int launched = 0;
      for (int j = 0; j < T; ++j) {
        cuda::matmul_argmax(dm, next.p, act, 1, H, pairs.p, nullptr, nullptr, nullptr, {hc, 4});
        cuda::walk_step(dm, act, pairs.p, state.as<int>(), dd.as<int32_t>(), T - 1, out.as<int32_t>(), T, dx.p,
                        H * esz, next.p, hc, cudaGraphConditionalHandle{}, 0, nullptr);
        ++launched;
        if (state.get<int>(2)[1] != 0) break;
      }
      EXPECT_EQ(launched, taken);
      HeadCounters k = read(counters);
      EXPECT_EQ(k.rows_projected, unsigned(taken));
      EXPECT_EQ(k.walk_rows, unsigned(taken));
      EXPECT_EQ(int64_t(k.head_bytes_read), taken * bytes);
      EXPECT_EQ(k.head_calls, 1u);
      EXPECT_EQ(k.logits_bytes_written, 0u);
      EXPECT_EQ(k.last_path, 4);
      auto o = out.get<int32_t>(size_t(T + 1));
      EXPECT_EQ(o[size_t(T)], taken);
      for (int j = 0; j < taken; ++j) EXPECT_EQ(o[size_t(j)], want[size_t(j)]) << j;

      // flag walk: every row launched, the cancelled ones count nothing
      zero(counters);
      zero(state);
      out.poison();
      for (int j = 0; j < T; ++j) {
        cuda::matmul_argmax(dm, static_cast<char*>(dx.p) + size_t(j) * H * esz, act, 1, H, pairs.p, nullptr,
                            state.as<int>(), nullptr, {hc, 5});
        cuda::walk_compare(dm, act, pairs.p, j, dd.as<int32_t>(), T - 1, out.as<int32_t>(), state.as<int>(),
                           state.as<int>() + 1, nullptr, hc);
      }
      k = read(counters);
      EXPECT_EQ(state.get<int>(2)[1], taken);
      EXPECT_EQ(k.rows_projected, unsigned(taken));
      EXPECT_EQ(k.walk_rows, unsigned(taken));
      EXPECT_EQ(int64_t(k.head_bytes_read), taken * bytes);
      EXPECT_EQ(k.head_calls, 1u);
      EXPECT_EQ(k.last_path, 5);
      o = out.get<int32_t>(size_t(taken));
      for (int j = 0; j < taken; ++j) EXPECT_EQ(o[size_t(j)], want[size_t(j)]) << j;
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
