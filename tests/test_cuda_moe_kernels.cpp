// The MoE kernels of src/backend/cuda/moe.cu on random inputs:
//  - moe_route == cpu::route_top_k (the same experts, ties to the lower id;
//    weights within float rounding);
//  - the grouped expert matmul over experts uploaded by upload_experts, in
//    every expert kind (F32, BF16, MLX Q4 / Q8), against the dequantized
//    rows in double, and each row's bits alone == among all rows (batch
//    invariance), both input modes (one row per token, one per pair);
//  - moe_combine against the host sum in rising expert id.
#include <gtest/gtest.h>

#ifdef NEXTN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/moe_router.h"
#include "backend/cuda/moe_layer.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::WKind;
using test::DevBuf;

TEST(CudaMoeKernels, RouteEqualsTheCpuRouterWithTies) {
  NEXTN_REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  for (auto [E, k] : {std::pair{8, 2}, {6, 3}, {256, 8}, {512, 10}, {4, 4}}) {
    const int T = 7;
    auto logits = test::randn(rng, size_t(T) * E, 2.0f);
    for (int e = 0; e < E; e += 3) logits[size_t(e)] = logits[1];  // row 0: ties (the lower id wins)
    for (int e = 0; e < E; ++e) logits[size_t(E) + e] = 0.5f;      // row 1: all equal
    DevBuf dl(logits.size() * 4), dc(size_t(T) * k * 4), dw(size_t(T) * k * 4);
    dl.put(logits);
    cuda::moe_route(dl.as<float>(), E, T, E, k, dc.as<int32_t>(), dw.as<float>(), nullptr);
    const auto got_c = dc.get<int32_t>(size_t(T) * k);
    const auto got_w = dw.get<float>(size_t(T) * k);
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> c(static_cast<size_t>(k));
      std::vector<float> w(static_cast<size_t>(k));
      cpu::route_top_k(&logits[size_t(t) * E], E, k, c.data(), w.data());
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(got_c[size_t(t) * k + j], c[size_t(j)]) << "E=" << E << " row " << t << " slot " << j;
        EXPECT_NEAR(got_w[size_t(t) * k + j], w[size_t(j)], 1e-6f) << "E=" << E << " row " << t << " slot " << j;
      }
    }
  }
}

// E experts of [rows, cols] in one kind; T rows routed to k distinct experts each.
struct ExpertCase {
  WKind kind;
  int E, rows, cols, T, k;
};

void check_grouped_matmul(const ExpertCase& c, bool x_per_pair) {
  SCOPED_TRACE(testing::Message() << "kind " << int(c.kind) << " E=" << c.E << " [" << c.rows << "x" << c.cols
                                  << "] T=" << c.T << " k=" << c.k << (x_per_pair ? " x per pair" : ""));
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<std::unique_ptr<test::TestMatrix>> mats;
  std::vector<std::vector<WeightRef>> refs;
  for (int e = 0; e < c.E; ++e) {
    mats.push_back(std::make_unique<test::TestMatrix>(rng, c.kind, c.rows, c.cols, 32));
    refs.push_back({mats.back()->ref()});
  }
  const Act act = c.kind == WKind::F32 ? Act::F32 : Act::BF16;
  cuda::DeviceMemory mem;
  const cuda::DevExperts W = cuda::upload_experts(refs, act, mem, "test experts");
  EXPECT_EQ(W.kind, c.kind);
  // Routing: row t takes k distinct experts, some experts by no row.
  std::vector<int32_t> chosen;
  for (int t = 0; t < c.T; ++t) {
    std::vector<int32_t> ids(static_cast<size_t>(c.E - 1));
    std::iota(ids.begin(), ids.end(), 0);  // expert E-1 is never chosen
    std::shuffle(ids.begin(), ids.end(), rng);
    chosen.insert(chosen.end(), ids.begin(), ids.begin() + c.k);
  }
  const int P = c.T * c.k, xrows = x_per_pair ? P : c.T;
  auto xf = test::randn(rng, size_t(xrows) * c.cols, 1.0f, /*bf16=*/true);
  DevBuf dx(xf.size() * 4);
  if (act == Act::F32) dx.put(xf);
  else dx.put(test::to_bf16_bits(xf));
  auto run = [&](const std::vector<int32_t>& ch, int T, const void* x) {
    DevBuf dc(ch.size() * 4), dplan(cuda::moe_plan_ints(T, c.k, c.E) * 4), dy(size_t(T) * c.k * c.rows * 4);
    dc.put(ch);
    const cuda::MoePlan plan = cuda::moe_plan_at(dplan.as<int>(), T, c.k, c.E);
    cuda::moe_plan(dc.as<int32_t>(), T, c.k, c.E, plan, nullptr);
    cuda::moe_experts_matmul(W, plan, T, c.k, x, act, c.cols, x_per_pair, dy.as<float>(), c.rows, nullptr);
    return dy.get<float>(size_t(T) * c.k * c.rows);
  };
  const auto y = run(chosen, c.T, dx.p);
  std::vector<float> wrow(static_cast<size_t>(c.cols));
  double worst = 0;
  for (int p = 0; p < P; ++p) {
    const auto& m = *mats[size_t(chosen[size_t(p)])]->cpu();
    const float* xr = &xf[size_t(x_per_pair ? p : p / c.k) * c.cols];
    for (int n = 0; n < c.rows; ++n) {
      m.row(n, wrow.data());
      double want = 0, mag = 0;
      for (int i = 0; i < c.cols; ++i) want += double(wrow[size_t(i)]) * xr[i], mag += std::fabs(double(wrow[size_t(i)]) * xr[i]);
      worst = std::max(worst, std::fabs(y[size_t(p) * c.rows + n] - want) / std::max(mag, 1e-30));
    }
  }
  EXPECT_LT(worst, 1e-5) << "error relative to the sum of |products|";
  // Each row alone: the same bits.
  const size_t as = act == Act::F32 ? 4 : 2;
  for (int t = 0; t < c.T; ++t) {
    const std::vector<int32_t> one(chosen.begin() + t * c.k, chosen.begin() + (t + 1) * c.k);
    const void* x = static_cast<const char*>(dx.p) + size_t(x_per_pair ? t * c.k : t) * c.cols * as;
    const auto alone = run(one, 1, x);
    for (int i = 0; i < c.k * c.rows; ++i)
      ASSERT_EQ(alone[size_t(i)], y[size_t(t) * c.k * c.rows + i]) << "row " << t << " element " << i;
  }
}

TEST(CudaMoeKernels, GroupedMatmulEveryKindIsExactAndBatchInvariant) {
  NEXTN_REQUIRE_GPU();
  for (WKind kind : {WKind::F32, WKind::BF16, WKind::Q4, WKind::Q8})
    for (bool per_pair : {false, true}) {
      check_grouped_matmul({kind, 9, 40, 256, 13, 3}, per_pair);  // several passes of 4 rows per expert
      check_grouped_matmul({kind, 5, 70, 64, 2, 2}, per_pair);    // a tile partly past the rows
    }
  check_grouped_matmul({WKind::F32, 4, 24, 20, 5, 1}, false);  // a width that is no multiple of 8 (element loop)
}

TEST(CudaMoeKernels, CombineAddsExpertsByRisingIdThenTheGatedSharedExpert) {
  NEXTN_REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  const int T = 5, k = 3, H = 96, gate_ld = 7;
  const std::vector<int32_t> chosen{4, 1, 2, 0, 7, 3, 5, 6, 2, 1, 0, 3, 9, 8, 4};
  const auto w = test::randn(rng, size_t(T) * k), y = test::randn(rng, size_t(T) * k * H),
             shared = test::randn(rng, size_t(T) * H), gate = test::randn(rng, size_t(T) * gate_ld),
             x0 = test::randn(rng, size_t(T) * H);
  DevBuf dc(chosen.size() * 4), dw(w.size() * 4), dy(y.size() * 4), ds(shared.size() * 4), dg(gate.size() * 4),
      dx(x0.size() * 4);
  dc.put(chosen), dw.put(w), dy.put(y), ds.put(shared), dg.put(gate), dx.put(x0);
  cuda::moe_combine(dy.as<float>(), dc.as<int32_t>(), dw.as<float>(), T, k, H, ds.as<float>(), dg.as<float>() + 2,
                    gate_ld, dx.as<float>(), H, nullptr);
  const auto got = dx.get<float>(x0.size());
  for (int t = 0; t < T; ++t) {
    std::vector<int> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return chosen[size_t(t * k + a)] < chosen[size_t(t * k + b)]; });
    const float g = 1.0f / (1.0f + std::exp(-gate[size_t(t) * gate_ld + 2]));
    for (int h = 0; h < H; ++h) {
      float r = 0.0f;
      for (int j : order) r += y[(size_t(t) * k + j) * H + h] * w[size_t(t) * k + j];
      r += g * shared[size_t(t) * H + h];
      EXPECT_NEAR(got[size_t(t) * H + h], x0[size_t(t) * H + h] + r, 1e-5f) << "row " << t << " h " << h;
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
