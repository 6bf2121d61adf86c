// The MoE kernels of src/backend/cuda/moe.cu on random inputs:
//  - moe_route_plan's routing == cpu::route_top_k (the same experts, ties
//    to the lower id; weights within float rounding; with a per-expert
//    scale, each weight times its expert's), and its plan (the active
//    experts rising, each one's pairs, every pair once);
//  - the grouped expert matmul over experts uploaded by upload_experts, in
//    every expert kind (F32, BF16, MLX Q4 / Q8), against the dequantized
//    rows in double, and each row's bits alone == among all rows (batch
//    invariance), both input modes (one row per token, one per pair), and
//    the gate_up pass with the GLU in its epilogue == the plain pass +
//    swiglu (Qwen3.5) or + gemma4_geglu (Gemma 4);
//  - moe_combine against the host sum in rising expert id, with the gated
//    shared expert into the residual and without it stored fresh.
#include <gtest/gtest.h>

#ifdef NEXTN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "backend/cpu/moe_router.h"
#include "backend/cuda/gemma4_kernels.h"
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
    DevBuf dl(logits.size() * 4), dc(size_t(T) * k * 4), dw(size_t(T) * k * 4),
        dplan(cuda::moe_plan_ints(T, k, E) * 4);
    dl.put(logits);
    const cuda::MoePlan plan = cuda::moe_plan_at(dplan.as<int>(), T, k, E);
    cuda::moe_route_plan(dl.as<float>(), E, T, E, k, nullptr, dc.as<int32_t>(), dw.as<float>(), plan, nullptr);
    const auto got_c = dc.get<int32_t>(size_t(T) * k);
    const auto got_w = dw.get<float>(size_t(T) * k);
    // With a per-expert scale (Gemma 4's per_expert_scale): the same experts, each weight times its scale.
    const auto scale = test::randn(rng, size_t(E), 1.0f);
    DevBuf ds(scale.size() * 4), dw2(size_t(T) * k * 4);
    ds.put(scale);
    cuda::moe_route_plan(dl.as<float>(), E, T, E, k, ds.as<float>(), dc.as<int32_t>(), dw2.as<float>(), plan, nullptr);
    EXPECT_EQ(dc.get<int32_t>(size_t(T) * k), got_c) << "E=" << E;
    const auto got_ws = dw2.get<float>(size_t(T) * k);
    for (size_t q = 0; q < got_ws.size(); ++q)
      EXPECT_EQ(got_ws[q], got_w[q] * scale[size_t(got_c[q])]) << "E=" << E << " pair " << q;
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> c(static_cast<size_t>(k));
      std::vector<float> w(static_cast<size_t>(k));
      cpu::route_top_k(&logits[size_t(t) * E], E, k, c.data(), w.data());
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(got_c[size_t(t) * k + j], c[size_t(j)]) << "E=" << E << " row " << t << " slot " << j;
        EXPECT_NEAR(got_w[size_t(t) * k + j], w[size_t(j)], 1e-6f) << "E=" << E << " row " << t << " slot " << j;
      }
    }
    // The plan: active experts rising, each one's pairs rising, every pair once.
    const size_t A = size_t(cuda::moe_active_bound(T, k, E));
    const auto raw = dplan.get<int>(cuda::moe_plan_ints(T, k, E));
    const int n_active = raw[0];
    std::vector<int> want_active(got_c.begin(), got_c.end());
    std::sort(want_active.begin(), want_active.end());
    want_active.erase(std::unique(want_active.begin(), want_active.end()), want_active.end());
    ASSERT_EQ(n_active, int(want_active.size())) << "E=" << E;
    std::vector<int> want_pairs;
    for (int a : want_active)
      for (int q = 0; q < T * k; ++q)
        if (got_c[size_t(q)] == a) want_pairs.push_back(q);
    EXPECT_EQ(std::vector<int>(raw.begin() + 1, raw.begin() + 1 + n_active), want_active) << "E=" << E;
    EXPECT_EQ(raw[1 + A + size_t(n_active)], T * k) << "E=" << E;
    // Each expert's pairs in any order (every pair's result is its own bits in any pass).
    std::vector<int> got_pairs(raw.begin() + long(2 * A + 2), raw.end());
    for (int u = 0; u < n_active; ++u) {
      const int b = raw[1 + A + size_t(u)], e = raw[1 + A + size_t(u) + 1];
      ASSERT_LE(b, e);
      std::sort(got_pairs.begin() + b, got_pairs.begin() + e);
    }
    EXPECT_EQ(got_pairs, want_pairs) << "E=" << E;
  }
}

// E experts of [rows, cols] in one kind; T rows routed to k distinct experts each.
struct ExpertCase {
  WKind kind;
  int E, rows, cols, T, k;
};

// fp32_scales: quantized experts whose scales are not exact in bf16 (stored
// F32), which the upload keeps as two fp32 arrays instead of bf16 pairs.
void check_grouped_matmul(const ExpertCase& c, bool x_per_pair, bool fp32_scales = false) {
  SCOPED_TRACE(testing::Message() << "kind " << int(c.kind) << " E=" << c.E << " [" << c.rows << "x" << c.cols
                                  << "] T=" << c.T << " k=" << c.k << (x_per_pair ? " x per pair" : "")
                                  << (fp32_scales ? " fp32 scales" : ""));
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<std::unique_ptr<test::TestMatrix>> mats;
  std::vector<std::vector<WeightRef>> refs;
  std::vector<std::vector<float>> scales32(static_cast<size_t>(c.E));
  std::vector<TensorView> scale_views(static_cast<size_t>(c.E));
  for (int e = 0; e < c.E; ++e) {
    mats.push_back(std::make_unique<test::TestMatrix>(rng, c.kind, c.rows, c.cols, 32));
    refs.push_back({mats.back()->ref()});
    if (fp32_scales) {
      for (uint16_t b : mats.back()->scales) scales32[size_t(e)].push_back(bf16_to_f32(b) * (1.0f + 1.0f / 1024));
      TensorView& v = scale_views[size_t(e)];
      v.name = "w.scales";
      v.dtype = DType::F32;
      v.data = reinterpret_cast<const uint8_t*>(scales32[size_t(e)].data());
      v.nbytes = scales32[size_t(e)].size() * 4;
      refs.back()[0].scales = &v;
    }
  }
  const Act act = c.kind == WKind::F32 ? Act::F32 : Act::BF16;
  cuda::DeviceMemory mem;
  const cuda::DevExperts W = cuda::upload_experts(refs, act, mem, "test experts");
  EXPECT_EQ(W.kind, c.kind);
  if (c.kind == WKind::Q4 || c.kind == WKind::Q8) {
    EXPECT_EQ(W.sb16 == nullptr, fp32_scales);
  }
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
  // Logits that make the router choose `ch` (row t's slot j gets 10 - j, the rest 0).
  // gate: none (the plain pass) or the GLU's activation.
  auto run = [&](const std::vector<int32_t>& ch, int T, const void* x, std::optional<cuda::MoeGate> gate = {}) {
    std::vector<float> logits(size_t(T) * c.E, 0.0f);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < c.k; ++j) logits[size_t(t) * c.E + ch[size_t(t * c.k + j)]] = 10.0f - float(j);
    DevBuf dl(logits.size() * 4), dc(ch.size() * 4), dw(ch.size() * 4), dplan(cuda::moe_plan_ints(T, c.k, c.E) * 4),
        dy(size_t(T) * c.k * c.rows * 4);
    dl.put(logits);
    const cuda::MoePlan plan = cuda::moe_plan_at(dplan.as<int>(), T, c.k, c.E);
    cuda::moe_route_plan(dl.as<float>(), c.E, T, c.E, c.k, nullptr, dc.as<int32_t>(), dw.as<float>(), plan, nullptr);
    EXPECT_EQ(dc.get<int32_t>(ch.size()), ch);
    if (!gate) {
      cuda::moe_experts_matmul(W, plan, T, c.k, x, act, c.cols, x_per_pair, dy.as<float>(), c.rows, nullptr);
      return dy.get<float>(size_t(T) * c.k * c.rows);
    }
    const int I = c.rows / 2;
    const size_t n = size_t(T) * c.k * I;
    DevBuf da(n * 4);
    cuda::moe_experts_glu(W, *gate, plan, T, c.k, x, act, c.cols, da.p, I, nullptr);
    std::vector<float> out(n);
    if (act == Act::F32) {
      out = da.get<float>(n);
    } else {
      const auto b = da.get<uint16_t>(n);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(b[i]);
    }
    return out;
  };
  const auto y = run(chosen, c.T, dx.p);
  std::vector<std::shared_ptr<cpu::Matrix>> ref;  // the CPU's dequantized view of each expert
  for (const auto& r : refs) ref.push_back(cpu::Matrix::load(r[0]));
  std::vector<float> wrow(static_cast<size_t>(c.cols));
  double worst = 0;
  for (int p = 0; p < P; ++p) {
    const cpu::Matrix& m = *ref[size_t(chosen[size_t(p)])];
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
  if (x_per_pair || c.rows % 2 != 0) return;
  // gate_up with the GLU fused: the same bits as the plain pass, then
  // swiglu() (Qwen3.5) or gemma4_geglu() (Gemma 4).
  const int I = c.rows / 2;
  DevBuf dy(y.size() * 4), da(size_t(P) * I * 4);
  dy.put(y);
  for (cuda::MoeGate gate : {cuda::MoeGate::Silu, cuda::MoeGate::GeluTanh}) {
    if (gate == cuda::MoeGate::Silu) cuda::swiglu(dy.as<float>(), c.rows, I, P, da.p, act, I, nullptr);
    else cuda::gemma4_geglu(dy.as<float>(), c.rows, I, P, da.p, act, I, nullptr);
    std::vector<float> want(size_t(P) * I);
    if (act == Act::F32) {
      want = da.get<float>(want.size());
    } else {
      const auto b = da.get<uint16_t>(want.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = bf16_to_f32(b[i]);
    }
    EXPECT_EQ(run(chosen, c.T, dx.p, gate), want) << (gate == cuda::MoeGate::Silu ? "silu" : "gelu_tanh");
  }
}

TEST(CudaMoeKernels, GroupedMatmulEveryKindIsExactAndBatchInvariant) {
  NEXTN_REQUIRE_GPU();
  for (WKind kind : {WKind::F32, WKind::BF16, WKind::Q4, WKind::Q8})
    for (bool per_pair : {false, true}) {
      check_grouped_matmul({kind, 9, 40, 256, 13, 3}, per_pair);  // several passes of 4 rows per expert
      check_grouped_matmul({kind, 5, 70, 64, 2, 2}, per_pair);    // a tile partly past the rows
      check_grouped_matmul({kind, 4, 16, 64, 64, 3}, per_pair);   // 64 rows: an expert's pairs in 16 passes
    }
  check_grouped_matmul({WKind::F32, 4, 24, 20, 5, 1}, false);  // a width that is no multiple of 8 (element loop)
  for (WKind kind : {WKind::Q4, WKind::Q8}) check_grouped_matmul({kind, 6, 40, 128, 9, 2}, false, /*fp32_scales=*/true);
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
                    gate_ld, dx.as<float>(), H, cuda::CombineInto::Residual, nullptr);
  const auto got = dx.get<float>(x0.size());
  // No shared expert, stored fresh (Gemma 4): the routed sum alone.
  DevBuf dr(x0.size() * 4);
  dr.put(x0);
  cuda::moe_combine(dy.as<float>(), dc.as<int32_t>(), dw.as<float>(), T, k, H, nullptr, nullptr, 0, dr.as<float>(), H,
                    cuda::CombineInto::Fresh, nullptr);
  const auto routed = dr.get<float>(x0.size());
  for (int t = 0; t < T; ++t) {
    std::vector<int> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return chosen[size_t(t * k + a)] < chosen[size_t(t * k + b)]; });
    const float g = 1.0f / (1.0f + std::exp(-gate[size_t(t) * gate_ld + 2]));
    for (int h = 0; h < H; ++h) {
      float r = 0.0f;
      for (int j : order) r += y[(size_t(t) * k + j) * H + h] * w[size_t(t) * k + j];
      EXPECT_NEAR(routed[size_t(t) * H + h], r, 1e-5f) << "row " << t << " h " << h;
      r += g * shared[size_t(t) * H + h];
      EXPECT_NEAR(got[size_t(t) * H + h], x0[size_t(t) * H + h] + r, 1e-5f) << "row " << t << " h " << h;
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
