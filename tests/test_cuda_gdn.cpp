// The Gated DeltaNet kernels (gdn.cu) against the CPU reference
// (CpuQwen35::gdn_mixer's arithmetic): all tokens at once, token by token,
// the rollback replay, and the one-launch decode step against the conv and
// recurrence kernels, bit for bit. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/kernels.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using test::DevBuf;
using test::rel_err;

std::vector<float> as_floats(const DevBuf& b, size_t n, Act act) {
  return act == Act::F32 ? b.get<float>(n) : test::bf16_bits_to_f32(b.get<uint16_t>(n));
}

struct GdnCpuState {
  std::vector<float> conv;  // [K-1][cd]
  std::vector<float> S;     // [Hv][dk][dv]
};

// CpuQwen35::gdn_mixer from the projections on: conv, l2norm, gates,
// recurrence, gated norm. Returns y [T][vd]; updates st.
std::vector<float> cpu_gdn(const cuda::GdnShape& g, const std::vector<float>& proj, int ld, int T,
                           const std::vector<float>& conv_w, const std::vector<float>& a_log,
                           const std::vector<float>& dt_bias, const std::vector<float>& norm_w, GdnCpuState& st) {
  const int cd = g.conv_dim(), K = g.K, kd = g.Hk * g.dk, vd = g.Hv * g.dv, ratio = g.Hv / g.Hk;
  const int dk = g.dk, dv = g.dv;
  std::vector<float> y(size_t(T) * vd), c(static_cast<size_t>(cd));
  const float qscale = 1.0f / std::sqrt(float(dk));
  for (int t = 0; t < T; ++t) {
    const float* m = &proj[size_t(t) * ld];
    for (int ch = 0; ch < cd; ++ch) {
      float s = 0;
      for (int i = 0; i < K - 1; ++i) s += conv_w[size_t(ch) * K + i] * st.conv[size_t(i) * cd + ch];
      s += conv_w[size_t(ch) * K + K - 1] * m[ch];
      c[size_t(ch)] = cpu::silu(s);
    }
    std::memmove(st.conv.data(), st.conv.data() + cd, size_t(K - 2) * cd * 4);
    std::copy(m, m + cd, st.conv.begin() + long(K - 2) * cd);
    for (int h = 0; h < g.Hk; ++h) {
      cpu::l2norm(&c[size_t(h) * dk], dk, 1e-6f);
      cpu::l2norm(&c[size_t(kd + h * dk)], dk, 1e-6f);
      for (int d = 0; d < dk; ++d) c[size_t(h * dk + d)] *= qscale;
    }
    for (int h = 0; h < g.Hv; ++h) {
      const float* q = &c[size_t(h / ratio) * dk];
      const float* k = &c[size_t(kd + (h / ratio) * dk)];
      const float* v = &c[size_t(2 * kd + h * dv)];
      const float beta = cpu::sigmoid(m[cd + vd + h]);
      const float gg = -std::exp(a_log[size_t(h)]) * cpu::softplus(m[cd + vd + g.Hv + h] + dt_bias[size_t(h)]);
      float* S = &st.S[size_t(h) * dk * dv];
      const float decay = std::exp(gg);
      for (int i = 0; i < dk * dv; ++i) S[i] *= decay;
      std::vector<float> mem(size_t(dv), 0.0f), o(size_t(dv), 0.0f);
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) mem[size_t(j)] += S[i * dv + j] * k[i];
      for (int j = 0; j < dv; ++j) mem[size_t(j)] = (v[j] - mem[size_t(j)]) * beta;
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) S[i * dv + j] += k[i] * mem[size_t(j)];
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) o[size_t(j)] += S[i * dv + j] * q[i];
      float* yh = &y[size_t(t) * vd + h * dv];
      cpu::rmsnorm(o.data(), norm_w.data(), g.eps, dv, yh);
      for (int j = 0; j < dv; ++j) yh[j] *= cpu::silu(m[cd + h * dv + j]);
    }
  }
  return y;
}

struct GdnDevice {
  cuda::GdnShape g;
  int ld, rows;
  DevBuf proj, conv_out, conv_state, S, conv_w, a_log, dt_bias, norm_w, y, table, parity;
  GdnDevice(const cuda::GdnShape& g_, int rows_, Act act)
      : g(g_),
        ld(g_.conv_dim() + g_.Hv * g_.dv + 2 * g_.Hv),
        rows(rows_),
        proj(size_t(rows_) * ld * 4),
        conv_out(size_t(rows_) * g_.conv_dim() * 4),
        conv_state(size_t(2) * (g_.K - 1) * g_.conv_dim() * 4),
        S(size_t(2) * g_.Hv * g_.dk * g_.dv * 4),
        conv_w(size_t(g_.conv_dim()) * g_.K * 4),
        a_log(size_t(g_.Hv) * 4),
        dt_bias(size_t(g_.Hv) * 4),
        norm_w(size_t(g_.dv) * 4),
        y(size_t(rows_) * g_.Hv * g_.dv * (act == Act::F32 ? 4 : 2)),
        table(sizeof(cuda::GdnLayer)),
        parity(4) {
    cuda::GdnLayer t{};
    t.proj = proj.as<float>();
    t.conv_out = conv_out.as<float>();
    t.conv_state = conv_state.as<float>();
    t.S = S.as<float>();
    t.conv_w = conv_w.as<float>();
    t.a_log = a_log.as<float>();
    t.dt_bias = dt_bias.as<float>();
    t.norm_w = norm_w.as<float>();
    t.y = y.p;
    t.proj_ld = ld;
    cudaMemcpy(table.p, &t, sizeof(t), cudaMemcpyHostToDevice);
  }
  void step(int T, int parity_v, Act act) {
    parity.put(std::vector<int>{parity_v});
    const auto* tab = table.as<cuda::GdnLayer>();
    cuda::gdn_conv(g, tab, 0, 1, T, parity.as<int>(), 0, false, nullptr);
    cuda::gdn_recurrence(g, tab, 0, 1, T, parity.as<int>(), 0, false, act, nullptr);
  }
  void step_in_one_launch(int T, int parity_v, Act act) {
    parity.put(std::vector<int>{parity_v});
    cuda::gdn_step(g, table.as<cuda::GdnLayer>(), 0, T, parity.as<int>(), act, nullptr);
  }
  void rollback(int keep, int parity_v, Act act) {
    parity.put(std::vector<int>{parity_v});
    const auto* tab = table.as<cuda::GdnLayer>();
    cuda::gdn_conv(g, tab, 0, 1, keep, parity.as<int>(), 1, true, nullptr);
    cuda::gdn_recurrence(g, tab, 0, 1, keep, parity.as<int>(), 1, true, act, nullptr);
  }
};

TEST(CudaGdn, MatchesCpuStepsAndRollback) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (Act act : {Act::F32, Act::BF16}) {
    for (const cuda::GdnShape& g : {cuda::GdnShape{2, 4, 32, 16, 4, 1e-6f}, cuda::GdnShape{16, 48, 128, 128, 4, 1e-6f}}) {
      SCOPED_TRACE(testing::Message() << "act " << int(act) << " Hv " << g.Hv << " dk " << g.dk);
      const int T = 6, cd = g.conv_dim(), vd = g.Hv * g.dv, ld = cd + vd + 2 * g.Hv;
      const auto proj = test::randn(rng, size_t(T) * ld, 1.0f);
      const auto conv_w = test::randn(rng, size_t(cd) * g.K, 0.5f);
      std::vector<float> a_log(static_cast<size_t>(g.Hv)), dt = test::randn(rng, size_t(g.Hv), 0.5f);
      std::uniform_real_distribution<float> u(std::log(0.05f), 0.0f);
      for (auto& v : a_log) v = u(rng);
      auto norm_w = test::randn(rng, size_t(g.dv), 0.2f);
      for (auto& v : norm_w) v += 1.0f;
      GdnCpuState st0{test::randn(rng, size_t(g.K - 1) * cd), test::randn(rng, size_t(g.Hv) * g.dk * g.dv, 0.3f)};

      GdnDevice d(g, T, act);
      d.proj.put(proj);
      d.conv_w.put(conv_w);
      d.a_log.put(a_log);
      d.dt_bias.put(dt);
      d.norm_w.put(norm_w);
      d.conv_state.put(st0.conv);  // buffer 0
      d.S.put(st0.S);
      // all T tokens at once: reads buffer 0, writes buffer 1
      d.step(T, 0, act);
      const auto y = as_floats(d.y, size_t(T) * vd, act);
      const size_t Sn = size_t(g.Hv) * g.dk * g.dv, Cn = size_t(g.K - 1) * cd;
      const auto S_all = d.S.get<float>(Sn, Sn * 4);
      const auto C_all = d.conv_state.get<float>(Cn, Cn * 4);
      GdnCpuState st = st0;
      const auto ref_y = cpu_gdn(g, proj, ld, T, conv_w, a_log, dt, norm_w, st);
      EXPECT_LT(rel_err(y, ref_y), act == Act::F32 ? 1e-5 : 4e-3);
      EXPECT_LT(rel_err(S_all, st.S), 1e-5);
      EXPECT_EQ(C_all, st.conv);

      // Rollback to 3 tokens: replay from buffer 0 into buffer 1 (the current parity is 1).
      d.rollback(3, 1, act);
      const auto S_rb = d.S.get<float>(Sn, Sn * 4);
      const auto C_rb = d.conv_state.get<float>(Cn, Cn * 4);

      // Token by token through a fresh device state: T single steps, parity flipping.
      GdnDevice e(g, T, act);
      e.conv_w.put(conv_w);
      e.a_log.put(a_log);
      e.dt_bias.put(dt);
      e.norm_w.put(norm_w);
      e.conv_state.put(st0.conv);
      e.S.put(st0.S);
      int parity = 0;
      std::vector<uint8_t> y_steps;
      const size_t esz = act == Act::F32 ? 4 : 2;
      for (int t = 0; t < T; ++t) {
        e.proj.put(std::vector<float>(proj.begin() + long(t) * ld, proj.begin() + long(t + 1) * ld));
        e.step(1, parity, act);
        parity ^= 1;
        const auto yt = e.y.get<uint8_t>(size_t(vd) * esz);
        y_steps.insert(y_steps.end(), yt.begin(), yt.end());
        if (t == 2) {  // after 3 tokens: the rolled-back state, bit for bit
          EXPECT_EQ(0, std::memcmp(e.S.get<float>(Sn, parity * Sn * 4).data(), S_rb.data(), Sn * 4)) << "S after rollback";
          EXPECT_EQ(e.conv_state.get<float>(Cn, parity * Cn * 4), C_rb) << "conv state after rollback";
        }
      }
      const auto y_all_raw = d.y.get<uint8_t>(size_t(T) * vd * esz);
      // d.y was not touched by the replay (replay writes no output)
      EXPECT_EQ(0, std::memcmp(y_steps.data(), y_all_raw.data(), y_steps.size())) << "y: T at once vs token by token";
      EXPECT_EQ(0, std::memcmp(e.S.get<float>(Sn, parity * Sn * 4).data(), S_all.data(), Sn * 4)) << "final S";
    }
  }
}


// The step stages a step's conv inputs in shared rows sized for 4 taps:
// longer convs go to the two kernels (a host decision, no GPU needed).
TEST(CudaGdn, StepTakesConvsOfAtMostFourTaps) {
  for (int K = 1; K <= 6; ++K) {
    const cuda::GdnShape g{16, 48, 128, 128, K, 1e-6f};
    EXPECT_EQ(cuda::gdn_step_fits(g, 1), K <= 4) << "K " << K;
    EXPECT_EQ(cuda::gdn_step_fits(g, cuda::kGdnStepRows), K <= 4) << "K " << K;
  }
}

// The one-launch decode step (gdn_step) writes what gdn_conv then
// gdn_recurrence write, bit for bit: y, the new S and conv state, and the
// conv_out rows a later rollback replays from; for every width it takes,
// both parities, both activation modes, key heads shared by several value
// heads and not.
TEST(CudaGdn, StepIsTheConvThenTheRecurrence) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (Act act : {Act::F32, Act::BF16}) {
    for (const cuda::GdnShape& g : {cuda::GdnShape{2, 4, 32, 16, 4, 1e-6f}, cuda::GdnShape{4, 4, 64, 128, 4, 1e-6f},
                                    cuda::GdnShape{16, 48, 128, 128, 4, 1e-6f}, cuda::GdnShape{2, 4, 32, 16, 2, 1e-6f}}) {
      const int cd = g.conv_dim();
      ASSERT_FALSE(cuda::gdn_step_fits(g, cuda::kGdnStepRows + 1));
      for (int T = 1; T <= cuda::kGdnStepRows; ++T) {
        for (int parity : {0, 1}) {
          SCOPED_TRACE(testing::Message() << "act " << int(act) << " Hv " << g.Hv << " dk " << g.dk << " T " << T
                                          << " parity " << parity);
          ASSERT_TRUE(cuda::gdn_step_fits(g, T));
          GdnDevice a(g, T, act), b(g, T, act);
          const auto proj = test::randn(rng, size_t(T) * a.ld, 1.0f);
          const auto conv_w = test::randn(rng, size_t(cd) * g.K, 0.5f);
          const auto a_log = test::randn(rng, size_t(g.Hv), 0.5f), dt = test::randn(rng, size_t(g.Hv), 0.5f);
          auto norm_w = test::randn(rng, size_t(g.dv), 0.2f);
          for (auto& v : norm_w) v += 1.0f;
          const auto conv = test::randn(rng, size_t(2) * (g.K - 1) * cd);
          const auto S = test::randn(rng, size_t(2) * g.Hv * g.dk * g.dv, 0.3f);
          for (GdnDevice* d : {&a, &b}) {
            d->proj.put(proj);
            d->conv_w.put(conv_w);
            d->a_log.put(a_log);
            d->dt_bias.put(dt);
            d->norm_w.put(norm_w);
            d->conv_state.put(conv);
            d->S.put(S);
          }
          a.step(T, parity, act);
          b.step_in_one_launch(T, parity, act);
          for (const auto& [name, x, y] : {std::tuple{"y", &a.y, &b.y}, std::tuple{"conv_out", &a.conv_out, &b.conv_out},
                                           std::tuple{"S", &a.S, &b.S}, std::tuple{"conv state", &a.conv_state, &b.conv_state}}) {
            const auto want = x->get<uint8_t>(x->bytes), got = y->get<uint8_t>(y->bytes);
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << name;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
