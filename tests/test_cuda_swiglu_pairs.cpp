// A SwiGLU MLP's gate_up with its gate and up rows paired in the streamed
// layout (DevMatrix::swiglu_pairs, stream_layout.cuh's source_row): the
// SwiGLU epilogue must give the bits of the plain matmul then the swiglu
// kernel, and every other reader (plain outputs, the prefill expansion)
// must see the checkpoint's row order. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/prefill.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::WKind;
using test::DevBuf;
using test::TestMatrix;

struct Mlp {
  int I, cols, group;
};

// Two device copies of the same [gate; up] weights (one seed): plain
// (unsplit, so that its sums are the paired copy's) and paired.
struct PairedCopies {
  std::mt19937_64 rng_plain, rng_paired;
  TestMatrix plain_tm, paired_tm;
  cuda::DevMatrix plain, paired;
  PairedCopies(uint64_t seed, WKind kind, const Mlp& s)
      : rng_plain(seed),
        rng_paired(seed),
        plain_tm(rng_plain, kind, 2 * s.I, s.cols, s.group),
        paired_tm(rng_paired, kind, 2 * s.I, s.cols, s.group) {
    plain = plain_tm.device();
    plain.splits = 1;  // the layout does not depend on the split; the sums do
    paired = paired_tm.device(false, true, true);
  }
};

std::vector<uint16_t> bf16_rows(const DevBuf& b, size_t n) { return b.get<uint16_t>(n); }

// At every width the epilogue takes (1..kFoldedRows), with and without the
// folded norm, for shapes with a partial last tile and a partial last
// 128-row block of pairs, q4 and q8; the columns past I untouched.
TEST(CudaFolds, SwigluEpilogueIsTheMatmulThenTheSwigluKernel) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const float eps = 1e-6f;
  for (WKind kind : {WKind::Q4, WKind::Q8}) {
    for (const Mlp& s : {Mlp{256, 1152, 32}, Mlp{200, 2048, 64}, Mlp{1000, 1024, 128}}) {
      PairedCopies w(rng(), kind, s);
      ASSERT_NE(w.paired.packed, nullptr);
      ASSERT_TRUE(w.paired.swiglu_pairs);
      EXPECT_FALSE(cuda::stream_fuses_swiglu(w.plain, 1));
      EXPECT_FALSE(cuda::stream_fuses_swiglu(w.paired, cuda::kFoldedRows + 1));
      const int ld = s.cols + 32, ldo = s.I + 24, rows = 2 * s.I;
      auto gamma = test::randn(rng, size_t(s.cols), 0.3f);
      for (auto& g : gamma) g += 1.0f;
      DevBuf dg(gamma.size() * 4);
      dg.put(gamma);
      for (int T = 1; T <= cuda::kFoldedRows; ++T) {
        SCOPED_TRACE(testing::Message() << (kind == WKind::Q4 ? "q4" : "q8") << " I=" << s.I << " cols=" << s.cols
                                        << " g" << s.group << " T=" << T);
        ASSERT_TRUE(cuda::stream_fuses_swiglu(w.paired, T));
        const auto x = test::randn(rng, size_t(T) * ld, 2.0f);
        const auto fill = test::randn(rng, size_t(T) * ldo / 2 + 1, 1.0f);  // garbage the kernels must not touch
        DevBuf dx(x.size() * 4), dxn(size_t(T) * s.cols * 2), gu(size_t(T) * rows * 4);
        DevBuf want(size_t(T) * ldo * 2), got(size_t(T) * ldo * 2), got_normed(size_t(T) * ldo * 2);
        dx.put(x);
        for (DevBuf* b : {&want, &got, &got_normed}) cudaMemcpy(b->p, fill.data(), b->bytes, cudaMemcpyHostToDevice);
        cuda::rmsnorm(dx.p, Act::F32, ld, dg.as<float>(), eps, T, s.cols, dxn.p, Act::BF16, s.cols, nullptr, nullptr);
        cuda::matmul(w.plain, dxn.p, Act::BF16, T, s.cols, gu.as<float>(), rows, false, nullptr, nullptr);
        cuda::swiglu(gu.as<float>(), rows, s.I, T, want.p, Act::BF16, ldo, nullptr);
        cuda::stream_gate_up_swiglu(w.paired, dxn.p, T, s.cols, got.p, ldo, nullptr);
        const auto a = bf16_rows(want, size_t(T) * ldo), b = bf16_rows(got, size_t(T) * ldo);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 2)) << "epilogue";
        if (cuda::stream_folds_norm(w.paired, T)) {
          cuda::stream_gate_up_swiglu_normed(w.paired, dx.as<float>(), ld, dg.as<float>(), eps, T, got_normed.p, ldo,
                                             nullptr);
          const auto c = bf16_rows(got_normed, size_t(T) * ldo);
          EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * 2)) << "epilogue with the folded norm";
        }
      }
    }
  }
}

// The paired copy's plain outputs (any width, one fragment or several) and
// its prefill GEMM are in the checkpoint's row order.
TEST(CudaFolds, PairedGateUpKeepsTheRowOrderElsewhere) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  cudaStream_t stream = nullptr;
  cuda::PrefillGemm gemm(stream);
  for (WKind kind : {WKind::Q4, WKind::Q8}) {
    for (const Mlp& s : {Mlp{200, 2048, 64}, Mlp{1000, 1024, 128}, Mlp{16448, 1024, 64} /* two prefill blocks */}) {
      PairedCopies w(rng(), kind, s);
      const int rows = 2 * s.I;
      for (int T : {1, 9, 40, cuda::kMaxRows}) {
        SCOPED_TRACE(testing::Message() << (kind == WKind::Q4 ? "q4" : "q8") << " I=" << s.I << " T=" << T);
        const auto xn = test::to_bf16_bits(test::randn(rng, size_t(T) * s.cols, 1.0f));
        DevBuf dxn(xn.size() * 2), want(size_t(T) * rows * 4), got(size_t(T) * rows * 4);
        dxn.put(xn);
        cuda::matmul(w.plain, dxn.p, Act::BF16, T, s.cols, want.as<float>(), rows, false, nullptr, nullptr);
        cuda::matmul(w.paired, dxn.p, Act::BF16, T, s.cols, got.as<float>(), rows, false, nullptr, nullptr);
        const auto a = want.get<float>(size_t(T) * rows), b = got.get<float>(size_t(T) * rows);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "plain outputs";
      }
      // Prefill: the expanded blocks back in row order (cuBLAS's sums may
      // differ between the one GEMM and the two halves: near, not equal).
      const int T = 70;
      const auto xn = test::to_bf16_bits(test::randn(rng, size_t(T) * s.cols, 1.0f));
      DevBuf dxn(xn.size() * 2), want(size_t(T) * rows * 4), got(size_t(T) * rows * 4);
      DevBuf scratch(size_t(std::max<int64_t>(cuda::PrefillGemm::scratch_bytes(w.plain),
                                              cuda::PrefillGemm::scratch_bytes(w.paired))));
      dxn.put(xn);
      gemm.matmul(w.plain, dxn.p, T, s.cols, want.as<float>(), rows, false, scratch.p);
      gemm.matmul(w.paired, dxn.p, T, s.cols, got.as<float>(), rows, false, scratch.p);
      EXPECT_LT(test::rel_err(got.get<float>(size_t(T) * rows), want.get<float>(size_t(T) * rows)), 1e-5) << "prefill";
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
