// The chained streamed projections (matmul_chain.h, issue 24's persistent
// prototype): a chain of MLP blocks in one launch must leave every buffer as
// the folded calls one by one leave it, bit for bit. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/chain_bench.h"
#include "backend/cuda/matmul_chain.h"
#include "backend/cuda/matmul_stream.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::WKind;
using test::DevBuf;
using test::TestMatrix;

// `layers` MLP blocks of hidden size H and intermediate size I: x += down .
// swiglu(gate_up . rmsnorm(x)), layer after layer, at T rows; the chain
// against the same folded calls launched one by one. gu_splits and
// down_splits (0: the production choice) set the matrices' split-K.
void check_mlp_chain(std::mt19937_64& rng, int layers, int H, int I, int T, int gu_splits = 0, int down_splits = 0) {
  SCOPED_TRACE(testing::Message() << "layers " << layers << " H " << H << " I " << I << " T " << T << " splits "
                                  << gu_splits << "/" << down_splits);
  std::vector<std::unique_ptr<TestMatrix>> gate_up, down;
  std::vector<cuda::DevMatrix> gu_dev, down_dev;
  std::vector<std::unique_ptr<DevBuf>> gammas;
  int64_t scratch_floats = 1;
  for (int l = 0; l < layers; ++l) {
    gate_up.push_back(std::make_unique<TestMatrix>(rng, WKind::Q4, 2 * I, H, 64));
    down.push_back(std::make_unique<TestMatrix>(rng, WKind::Q4, H, I, 64));
    gu_dev.push_back(gate_up.back()->device());
    down_dev.push_back(down.back()->device());
    if (gu_splits > 0) gu_dev.back().splits = gu_splits;
    if (down_splits > 0) down_dev.back().splits = down_splits;
    ASSERT_NE(gu_dev.back().packed, nullptr);
    ASSERT_NE(down_dev.back().packed, nullptr);
    auto g = test::randn(rng, size_t(H), 0.3f);
    for (auto& v : g) v += 1.0f;
    gammas.push_back(std::make_unique<DevBuf>(g.size() * 4));
    gammas.back()->put(g);
    scratch_floats = std::max({scratch_floats, cuda::splitk_scratch_floats(gu_dev.back()),
                               cuda::splitk_scratch_floats(down_dev.back())});
  }
  const int ld_proj = 2 * I + 32;
  const auto x0 = test::randn(rng, size_t(T) * H, 1.0f);
  struct Run {
    DevBuf x, proj, scratch;
    Run(int T, int H, int ld_proj, int64_t sf) : x(size_t(T) * H * 4), proj(size_t(T) * ld_proj * 4), scratch(size_t(sf) * 4) {
      cudaMemset(scratch.p, 0, scratch.bytes);
    }
  };
  Run want(T, H, ld_proj, scratch_floats), got(T, H, ld_proj, scratch_floats);
  want.x.put(x0);
  got.x.put(x0);
  std::vector<cuda::ChainLink> links;
  for (int l = 0; l < layers; ++l) {
    const float* gamma = gammas[size_t(l)]->as<float>();
    cuda::stream_matmul_normed(gu_dev[size_t(l)], want.x.as<float>(), H, gamma, 1e-6f, T, want.proj.as<float>(),
                               ld_proj, false, want.scratch.as<float>(), nullptr);
    cuda::stream_matmul_swiglu(down_dev[size_t(l)], want.proj.as<float>(), ld_proj, I, T, want.x.as<float>(), H, true,
                               want.scratch.as<float>(), nullptr);
    links.push_back(cuda::norm_link(gu_dev[size_t(l)], got.x.as<float>(), H, gamma, 1e-6f, got.proj.as<float>(),
                                    ld_proj, false));
    links.push_back(cuda::swiglu_link(down_dev[size_t(l)], got.proj.as<float>(), ld_proj, I, got.x.as<float>(), H, true));
  }
  const cuda::StreamChain chain(links, T);
  ASSERT_LE(chain.scratch_floats(), scratch_floats);
  chain.launch(got.scratch.as<float>(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (DevBuf* b : {&want.x, &want.proj}) {
    DevBuf& other = b == &want.x ? got.x : got.proj;
    const auto a = b->get<uint8_t>(b->bytes), c = other.get<uint8_t>(other.bytes);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size())) << (b == &want.x ? "x" : "proj");
  }
  // Launched again from the same x, the chain (its counters reset by the
  // last block) gives the same bits again.
  got.x.put(x0);
  chain.launch(got.scratch.as<float>(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto a = want.x.get<uint8_t>(want.x.bytes), c = got.x.get<uint8_t>(got.x.bytes);
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size())) << "second launch";
}

// Unsplit gate_up and split-K down (a 256-row down of 2048 columns), every
// folded width class (one batch of producer rows, two), one layer and four.
TEST(CudaChain, MlpChainIsTheFoldedCallsOneByOne) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int T : {1, 3, 8}) {
    check_mlp_chain(rng, 1, 256, 384, T);
    check_mlp_chain(rng, 4, 256, 2048, T);
  }
}

// Links of different item counts: a 2-item gate_up (256x2048) beside a
// 16-item down (2048x128) leaves most blocks without a gate_up item, so
// their first link is a down and they skip every norm link; and a split-K
// gate_up (512x1024 in 4 splits), whose tiles finish in their last split's
// block, at every link boundary.
TEST(CudaChain, MlpChainWithUnevenLinks) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int T : {1, 6}) {
    check_mlp_chain(rng, 3, 2048, 128, T, 1, 1);
    check_mlp_chain(rng, 3, 1024, 256, T, 4, 2);
  }
}

// A link from bf16 rows in the middle of a chain, split-K (as every real
// out-projection is), adding to the residual between the MLP and the next
// norm link: gate_up (norm), down (SwiGLU), out (rows), in (norm).
TEST(CudaChain, RowsLinkInsideAChain) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int H = 256, I = 384, V = 2048, R = 416;
  for (int T : {1, 7}) {
    SCOPED_TRACE(testing::Message() << "T " << T);
    TestMatrix gu(rng, WKind::Q4, 2 * I, H), dn(rng, WKind::Q4, H, I), out(rng, WKind::Q4, H, V), in(rng, WKind::Q4, R, H);
    const auto gu_d = gu.device(), dn_d = dn.device(), in_d = in.device();
    auto out_d = out.device();
    out_d.splits = 4;  // 16 chunks in 4 splits
    auto g = test::randn(rng, size_t(H), 0.3f), g2 = test::randn(rng, size_t(H), 0.3f);
    for (auto* v : {&g, &g2})
      for (auto& e : *v) e += 1.0f;
    DevBuf dg(size_t(H) * 4), dg2(size_t(H) * 4), core(size_t(T) * V * 2);
    dg.put(g);
    dg2.put(g2);
    core.put(test::to_bf16_bits(test::randn(rng, size_t(T) * V, 1.0f)));
    const auto x0 = test::randn(rng, size_t(T) * H, 1.0f);
    int64_t sf = 1;
    for (const cuda::DevMatrix* m : std::initializer_list<const cuda::DevMatrix*>{&gu_d, &dn_d, &out_d, &in_d})
      sf = std::max(sf, cuda::splitk_scratch_floats(*m));
    struct Bufs {
      DevBuf x, proj, y_in, scratch;
      Bufs(int T, int H, int I, int R, int64_t sf)
          : x(size_t(T) * H * 4), proj(size_t(T) * 2 * I * 4), y_in(size_t(T) * R * 4), scratch(size_t(sf) * 4) {
        cudaMemset(scratch.p, 0, scratch.bytes);
      }
    } want(T, H, I, R, sf), got(T, H, I, R, sf);
    want.x.put(x0);
    got.x.put(x0);
    float* sw = want.scratch.as<float>();
    cuda::stream_matmul_normed(gu_d, want.x.as<float>(), H, dg.as<float>(), 1e-6f, T, want.proj.as<float>(), 2 * I,
                               false, sw, nullptr);
    cuda::stream_matmul_swiglu(dn_d, want.proj.as<float>(), 2 * I, I, T, want.x.as<float>(), H, true, sw, nullptr);
    cuda::stream_matmul(out_d, core.p, T, V, want.x.as<float>(), H, true, sw, nullptr);
    cuda::stream_matmul_normed(in_d, want.x.as<float>(), H, dg2.as<float>(), 1e-6f, T, want.y_in.as<float>(), R, false,
                               sw, nullptr);
    float* gx = got.x.as<float>();
    const std::vector<cuda::ChainLink> links = {
        cuda::norm_link(gu_d, gx, H, dg.as<float>(), 1e-6f, got.proj.as<float>(), 2 * I, false),
        cuda::swiglu_link(dn_d, got.proj.as<float>(), 2 * I, I, gx, H, true),
        cuda::rows_link(out_d, core.p, V, gx, H, true),
        cuda::norm_link(in_d, gx, H, dg2.as<float>(), 1e-6f, got.y_in.as<float>(), R, false)};
    const cuda::StreamChain chain(links, T);
    chain.launch(got.scratch.as<float>(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto [a, b, name] : {std::tuple{&want.x, &got.x, "x"}, std::tuple{&want.proj, &got.proj, "proj"},
                              std::tuple{&want.y_in, &got.y_in, "in"}}) {
      const auto va = a->get<uint8_t>(a->bytes), vb = b->get<uint8_t>(b->bytes);
      EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size())) << name;
    }
  }
}

// At one block per SM, links with more items than blocks: blocks take
// several items of a link and wait at every boundary.
TEST(CudaChain, MlpChainWithSeveralItemsPerBlock) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const test::OneBlockPerSm caps;
  check_mlp_chain(rng, 3, 1024, 12800, 2);
}

// `nextn bench chain`, both forms: its own bits check passes (in the layer
// form, a chain that starts with a link from bf16 rows and ends with a
// second norm link) and both arms are timed.
TEST(CudaChain, BenchTimesTheChainAgainstTheLaunches) {
  NEXTN_REQUIRE_GPU();
  for (bool per_layer : {false, true}) {
    SCOPED_TRACE(per_layer ? "layer" : "mlp");
    cuda::ChainBenchConfig c;
    c.hidden = 256;
    c.intermediate = 512;
    c.layers = 3;
    if (per_layer) {
      c.in_rows = 416;  // a partial tile
      c.out_cols = 384;
    }
    c.rows = {1, 5};
    c.repeats = 4;
    c.rounds = 2;
    const auto r = cuda::bench_chain(c);
    ASSERT_EQ(r.rows.size(), 2u);
    EXPECT_GT(r.weight_bytes, 0.0);
    EXPECT_EQ(r.launches, (per_layer ? 4 : 2) * c.layers);
    EXPECT_EQ(r.chains, per_layer ? c.layers : 1);
    for (const auto& row : r.rows) {
      EXPECT_TRUE(row.equal) << "T " << row.T;
      EXPECT_GT(row.chain_ms, 0.0);
      EXPECT_GT(row.calls_ms, 0.0);
      EXPECT_GT(row.grid, 0);
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
