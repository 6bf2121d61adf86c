// The streamed matmul's folds (matmul_stream.h, stream_fold.cuh): the op
// before a projection run inside its kernel must give the bits of that op's
// own kernel followed by the plain streamed matmul, and stay near the CPU's
// fp32 reference. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/projection_bench.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::WKind;
using test::DevBuf;
using test::rel_err;
using test::cpu_matmul;
using test::TestMatrix;

struct Shape {
  int rows, cols, group;
};

size_t scratch_bytes(const cuda::DevMatrix& dm) { return size_t(std::max<int64_t>(1, cuda::splitk_scratch_floats(dm))) * 4; }

// The RMSNorm folded into the activation load: the bits of the norm
// kernel's bf16 rows then the streamed matmul at every folded width (the
// producer's two batches of rows at T > 4), for rows that fill the
// consumers' batches of loads and ones that do not, rows wider than the norm
// kernel keeps in registers (its loop form), split-K and partial tiles, a
// row stride wider than the row, plain and accumulating outputs.
TEST(CudaFolds, NormMatmulIsTheNormThenTheMatmul) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const float eps = 1e-6f;
  for (WKind kind : {WKind::Q4, WKind::Q8}) {
    for (const Shape& sh : {Shape{200, 1152, 32}, Shape{320, 2048, 64} /* split-K */, Shape{256, 5120, 64},
                             Shape{300, 2560, 128} /* partial tile */, Shape{640, 6144, 64},
                             Shape{128, 8192, 64} /* beyond 24 per thread */}) {
      TestMatrix tm(rng, kind, sh.rows, sh.cols, sh.group);
      const auto dm = tm.device();
      ASSERT_NE(dm.packed, nullptr);
      const int ld = sh.cols + 64;
      auto gamma = test::randn(rng, size_t(sh.cols), 0.3f);
      for (auto& g : gamma) g += 1.0f;
      DevBuf dg(gamma.size() * 4), scratch(scratch_bytes(dm));
      dg.put(gamma);
      cudaMemset(scratch.p, 0, scratch.bytes);  // split-K counters start at zero
      EXPECT_FALSE(cuda::stream_folds_norm(dm, cuda::kFoldedRows + 1));
      for (int T = 1; T <= cuda::kFoldedRows; ++T) {
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(testing::Message() << (kind == WKind::Q4 ? "q4" : "q8") << " [" << sh.rows << "x" << sh.cols
                                          << "] splits " << dm.splits << " T=" << T << (accumulate ? " accumulate" : ""));
          ASSERT_TRUE(cuda::stream_folds_norm(dm, T));
          const auto x = test::randn(rng, size_t(T) * ld, 2.0f);
          const auto y0 = test::randn(rng, size_t(T) * sh.rows, 1.0f);
          DevBuf dx(x.size() * 4), dxn(size_t(T) * sh.cols * 2), want(y0.size() * 4), got(y0.size() * 4);
          dx.put(x);
          want.put(y0);
          got.put(y0);
          cuda::rmsnorm(dx.p, Act::F32, ld, dg.as<float>(), eps, T, sh.cols, dxn.p, Act::BF16, sh.cols, nullptr, nullptr);
          cuda::matmul(dm, dxn.p, Act::BF16, T, sh.cols, want.as<float>(), sh.rows, accumulate, scratch.as<float>(), nullptr);
          cuda::stream_matmul_normed(dm, dx.as<float>(), ld, dg.as<float>(), eps, T, got.as<float>(), sh.rows,
                                     accumulate, scratch.as<float>(), nullptr);
          const auto a = want.get<float>(y0.size()), b = got.get<float>(y0.size());
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
          // And near the CPU's fp32 norm and matmul (the bf16 rows bound the error).
          std::vector<float> xn(size_t(T) * sh.cols);
          for (int t = 0; t < T; ++t) cpu::rmsnorm(&x[size_t(t) * ld], gamma.data(), eps, sh.cols, &xn[size_t(t) * sh.cols]);
          auto ref = cpu_matmul(tm, xn, T);
          if (accumulate)
            for (size_t i = 0; i < ref.size(); ++i) ref[i] += y0[i];
          EXPECT_LT(rel_err(b, ref), 1e-2);
        }
      }
    }
  }
}

// The SwiGLU fold of one down matrix against the swiglu kernel's bf16 rows
// then the streamed matmul (bitwise), and the CPU's fp32 reference, at every
// folded width, accumulating into the residual as the layer does and not.
void check_swiglu_fold(std::mt19937_64& rng, WKind kind, const Shape& sh) {
  TestMatrix tm(rng, kind, sh.rows, sh.cols, sh.group);
  const auto dm = tm.device();
  ASSERT_NE(dm.packed, nullptr);
  const int I = sh.cols, ld = 2 * I + 32;  // gate | up, then padding (as the projection buffer)
  DevBuf scratch(scratch_bytes(dm));
  cudaMemset(scratch.p, 0, scratch.bytes);
  EXPECT_FALSE(cuda::stream_folds_swiglu(dm, cuda::kFoldedRows + 1));
  for (int T = 1; T <= cuda::kFoldedRows; ++T) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(testing::Message() << (kind == WKind::Q4 ? "q4" : "q8") << " [" << sh.rows << "x" << sh.cols
                                      << "] splits " << dm.splits << " T=" << T << (accumulate ? " accumulate" : ""));
      ASSERT_TRUE(cuda::stream_folds_swiglu(dm, T));
      const auto gu = test::randn(rng, size_t(T) * ld, 2.0f);
      const auto y0 = test::randn(rng, size_t(T) * sh.rows, 1.0f);
      DevBuf dgu(gu.size() * 4), dact(size_t(T) * I * 2), want(y0.size() * 4), got(y0.size() * 4);
      dgu.put(gu);
      want.put(y0);
      got.put(y0);
      cuda::swiglu(dgu.as<float>(), ld, I, T, dact.p, Act::BF16, I, nullptr);
      cuda::matmul(dm, dact.p, Act::BF16, T, I, want.as<float>(), sh.rows, accumulate, scratch.as<float>(), nullptr);
      cuda::stream_matmul_swiglu(dm, dgu.as<float>(), ld, I, T, got.as<float>(), sh.rows, accumulate,
                                 scratch.as<float>(), nullptr);
      const auto a = want.get<float>(y0.size()), b = got.get<float>(y0.size());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
      std::vector<float> act(size_t(T) * I);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < I; ++i) act[size_t(t) * I + i] = cpu::silu(gu[size_t(t) * ld + i]) * gu[size_t(t) * ld + I + i];
      auto ref = cpu_matmul(tm, act, T);
      if (accumulate)
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += y0[i];
      EXPECT_LT(rel_err(b, ref), 1e-2);
    }
  }
}

// The SwiGLU folded into the down projection's activation load, a stage's
// columns at a time: unsplit and split-K, partial tiles, the 27B's
// 17,408-wide rows.
TEST(CudaFolds, SwigluMatmulIsTheSwigluThenTheMatmul) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (WKind kind : {WKind::Q4, WKind::Q8})
    for (const Shape& sh : {Shape{200, 1152, 32}, Shape{320, 2048, 64}, Shape{300, 2560, 128},
                             Shape{256, 9728, 64}, Shape{640, 17408, 64}})
      check_swiglu_fold(rng, kind, sh);
}

// More items than blocks: at one block per SM (the bench's tuning cap) a
// 200-tile matrix gives most blocks two items, and the producer's slices
// follow the ring across them.
TEST(CudaFolds, SwigluMatmulWithSeveralItemsPerBlock) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const test::OneBlockPerSm caps;
  check_swiglu_fold(rng, WKind::Q4, Shape{25600, 1152, 32});
}

// `nextn bench projection --fold`: its own check that the fold gives the
// bits of the op's kernel then the matmul, and both arms timed.
TEST(CudaFolds, ProjectionBenchTimesTheFoldAgainstItsKernels) {
  NEXTN_REQUIRE_GPU();
  for (const char* fold : {"norm", "swiglu"}) {
    SCOPED_TRACE(fold);
    cuda::ProjBenchConfig c;
    c.rows = 640;
    c.cols = 2048;
    c.widths = {1, 5};
    c.fold = fold;
    c.repeats = 4;
    c.rounds = 2;
    const auto r = cuda::bench_projection(c);
    EXPECT_TRUE(r.fold_equal);
    EXPECT_TRUE(r.invariant);
    ASSERT_EQ(r.rows.size(), 2u);
    for (const auto& row : r.rows) {
      EXPECT_GT(row.ms_median, 0.0);
      EXPECT_GT(row.unfolded_ms_median, 0.0);
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
