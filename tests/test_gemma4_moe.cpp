// Gemma 4 MoE specifics (enable_moe_block, the 26B-A4B layer; docs/moe.md).
// The transformers comparisons run on the gemma4-moe-* fixtures in the
// shared Gemma 4 suites, which scan tests/fixtures/gemma4: teacher-forced
// logits within 1e-4, greedy tokens and a 150-token run
// (test_gemma4_fixtures.cpp), speculative == greedy for K = 2..16 with the
// oracle (same file) and with the assistant, the assistant's drafts
// (test_gemma4_assistant.cpp, test_draft_trace_gemma4.cpp), batched == solo
// (test_gemma4_group.cpp), the CLI and the server. Here: those fixtures
// cover several expert counts and top-k; the block against a naive forward
// written from transformers' code, ties to the lower expert id, rows
// independent of their neighbours; the config's MoE fields. Expert layouts
// and their errors: test_gemma4_moe_layouts.cpp; the CUDA backend on these
// fixtures: test_cuda_gemma4.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "backend/cpu/gemma4_layer.h"
#include "cli_util.h"
#include "core/error.h"
#include "gemma4_fixture_util.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "io/gemma4_config.h"
#include "io/moe_experts.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> moe_dirs() { return test::gemma4_fixture_dirs(/*moe=*/true); }

// ---------------------------------------------------------------------------
// The fixtures

TEST(Gemma4MoeFixtures, CoverSeveralExpertCountsAndTopKInTheStackedLayout) {
  const auto dirs = moe_dirs();
  ASSERT_GE(dirs.size(), 2u);
  std::set<std::pair<int, int>> shapes;
  for (const std::string& dir : dirs) {
    const auto ck = Gemma4Checkpoint::open(dir + "/target");
    const Gemma4TextConfig& c = ck.config();
    ASSERT_TRUE(c.moe) << dir;
    shapes.insert({c.num_experts, c.top_k_experts});
    EXPECT_LT(c.top_k_experts, c.num_experts) << dir << ": top-k of every expert routes nothing";
    std::ifstream f(dir + "/reference.json");
    const json moe = json::parse(f).at("moe");
    EXPECT_EQ(moe.at("num_experts").get<int>(), c.num_experts) << dir;
    EXPECT_EQ(moe.at("top_k_experts").get<int>(), c.top_k_experts) << dir;
    EXPECT_EQ(moe.at("moe_intermediate_size").get<int>(), c.moe_intermediate_size) << dir;
    EXPECT_GE(moe.at("router_gap_min").get<double>(), 1e-4) << dir << ": a router choice too close to call";
    for (int i = 0; i < c.num_hidden_layers; ++i)
      EXPECT_EQ(detect_expert_layout(ck.store(), ck.dir(), ck.stored("layers." + std::to_string(i))),
                ExpertLayout::Stacked)
          << dir << " layer " << i;
    // The assistant stays dense (transformers refuses a MoE one).
    EXPECT_FALSE(Gemma4Checkpoint::open_assistant(dir + "/assistant").config().moe) << dir;
  }
  EXPECT_GE(shapes.size(), 2u);
  EXPECT_FALSE(test::gemma4_fixture_dirs(/*moe=*/false).empty());
}

// ---------------------------------------------------------------------------
// The block against a naive forward

std::shared_ptr<cpu::Matrix> f32_matrix(int64_t rows, int64_t cols, const std::vector<float>& values) {
  TensorView v;
  v.name = "test";
  v.dtype = DType::F32;
  v.shape = {rows, cols};
  v.data = reinterpret_cast<const uint8_t*>(values.data());
  v.nbytes = values.size() * sizeof(float);
  WeightRef w;
  w.name = v.name;
  w.weight = &v;
  w.rows = rows;
  w.cols = cols;
  return cpu::Matrix::load(w);  // copies the values
}

// A Gemma4Moe of random fp32 weights, kept beside it as plain arrays for the naive forward.
struct RandomMoe {
  int H, E, I, k;
  Gemma4TextConfig config;
  std::vector<float> router, gate, up, down;  // [E][H], [E][I][H], [E][I][H], [E][H][I]
  cpu::Gemma4Moe W;

  RandomMoe(int H_, int E_, int I_, int k_, uint32_t seed) : H(H_), E(E_), I(I_), k(k_) {
    config.hidden_size = H;
    config.num_experts = E;
    config.top_k_experts = k;
    config.moe_intermediate_size = I;
    config.moe = true;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    auto fill = [&](size_t n, float offset = 0.0f) {
      std::vector<float> v(n);
      for (float& x : v) x = offset + normal(rng);
      return v;
    };
    router = fill(size_t(E) * H);
    gate = fill(size_t(E) * I * H);
    up = fill(size_t(E) * I * H);
    down = fill(size_t(E) * H * I);
    W.router_scale = fill(size_t(H), 1.0f);
    W.per_expert_scale = fill(size_t(E), 1.0f);
    W.post_mlp_norm = fill(size_t(H), 1.0f);
    W.pre_experts_norm = fill(size_t(H), 1.0f);
    W.post_experts_norm = fill(size_t(H), 1.0f);
    build();
  }

  void build() {
    W.router = f32_matrix(E, H, router);
    W.experts.clear();
    for (int e = 0; e < E; ++e) {
      auto slice = [&](const std::vector<float>& v, int64_t rows, int64_t cols) {
        const auto first = v.begin() + int64_t(e) * rows * cols;
        return f32_matrix(rows, cols, std::vector<float>(first, first + rows * cols));
      };
      W.experts.push_back({slice(gate, I, H), slice(up, I, H), slice(down, H, I)});
    }
  }

  // transformers' decoder layer, written out: RMSNorm as Gemma4RMSNorm, the
  // router as Gemma4TextRouter (top-k by falling probability, equal ones by
  // rising id), the experts as Gemma4TextExperts. `force` replaces the
  // router's choice.
  std::vector<float> naive(const float* x, const float* m, std::vector<int> force = {}) const {
    const float eps = config.rms_norm_eps;
    auto rms = [&](const float* v, const float* w) {
      double ss = 0;
      for (int d = 0; d < H; ++d) ss += double(v[d]) * v[d];
      const double inv = 1.0 / std::sqrt(ss / H + eps);
      std::vector<float> o(static_cast<size_t>(H));
      for (int d = 0; d < H; ++d) o[size_t(d)] = float(v[d] * inv) * (w ? w[d] : 1.0f);
      return o;
    };
    std::vector<float> r = rms(x, nullptr);
    for (int d = 0; d < H; ++d) r[size_t(d)] *= W.router_scale[size_t(d)] / std::sqrt(float(H));
    std::vector<double> p(static_cast<size_t>(E));
    double total = 0;
    for (int e = 0; e < E; ++e) {
      double l = 0;
      for (int d = 0; d < H; ++d) l += double(router[size_t(e) * H + d]) * r[size_t(d)];
      p[size_t(e)] = std::exp(l);
      total += p[size_t(e)];
    }
    std::vector<int> order(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    std::vector<int> chosen = force.empty() ? std::vector<int>(order.begin(), order.begin() + k) : force;
    double top = 0;
    for (int e : chosen) top += p[size_t(e)] / total;
    const std::vector<float> z = rms(x, W.pre_experts_norm.data());
    std::vector<float> y(static_cast<size_t>(H), 0.0f);
    std::sort(chosen.begin(), chosen.end());  // added by rising id
    for (int e : chosen) {
      const double w = p[size_t(e)] / total / top * W.per_expert_scale[size_t(e)];
      std::vector<double> act(static_cast<size_t>(I));
      for (int i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int d = 0; d < H; ++d) {
          g += double(gate[(size_t(e) * I + i) * H + d]) * z[size_t(d)];
          u += double(up[(size_t(e) * I + i) * H + d]) * z[size_t(d)];
        }
        act[size_t(i)] = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
      }
      for (int d = 0; d < H; ++d) {
        double o = 0;
        for (int i = 0; i < I; ++i) o += double(down[(size_t(e) * H + d) * I + i]) * act[size_t(i)];
        y[size_t(d)] += float(o * w);
      }
    }
    const std::vector<float> a = rms(m, W.post_mlp_norm.data()), b = rms(y.data(), W.post_experts_norm.data());
    std::vector<float> out(static_cast<size_t>(H));
    for (int d = 0; d < H; ++d) out[size_t(d)] = a[size_t(d)] + b[size_t(d)];
    return out;
  }

  std::vector<float> mix(int T, const float* x, const float* m) const {
    std::vector<float> out(m, m + size_t(T) * H);
    cpu::gemma4_moe_mix(W, config, T, x, out.data(), nullptr, 1);
    return out;
  }
};

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return d / scale;
}

std::vector<float> random_rows(int T, int H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> v(size_t(T) * H);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(Gemma4MoeBlock, MatchesANaiveForwardAndEachRowIsItsOwn) {
  for (auto [E, k] : {std::pair{5, 3}, std::pair{8, 2}, std::pair{4, 1}}) {
    const RandomMoe moe(24, E, 12, k, 100 + uint32_t(E));
    const int T = 6, H = moe.H;
    const std::vector<float> x = random_rows(T, H, 7), m = random_rows(T, H, 8);
    const std::vector<float> got = moe.mix(T, x.data(), m.data());
    for (int t = 0; t < T; ++t) {
      const std::vector<float> row(got.begin() + t * H, got.begin() + (t + 1) * H);
      EXPECT_LE(max_rel_diff(row, moe.naive(&x[size_t(t) * H], &m[size_t(t) * H])), 1e-5)
          << "E=" << E << " k=" << k << " row " << t;
      // Alone, the row is the same bits as among the others.
      EXPECT_EQ(moe.mix(1, &x[size_t(t) * H], &m[size_t(t) * H]), row) << "E=" << E << " k=" << k << " row " << t;
    }
  }
}

TEST(Gemma4MoeBlock, RouterTiesGoToTheLowerExpertId) {
  RandomMoe moe(16, 4, 8, 2, 31);
  const int H = moe.H;
  const std::vector<float> x = random_rows(1, H, 9), m = random_rows(1, H, 10);
  // Router rows 1.5u, u, -u, u with u along x * router.scale, scaled so that
  // u . r is about 1 (r: the router's input): expert 0 first, then experts
  // 1 and 3 tie exactly (the same row, the same dot product) with a weight
  // large enough to tell them apart.
  double ss = 0, s = 0;
  for (int d = 0; d < H; ++d) ss += double(x[size_t(d)]) * x[size_t(d)];
  for (int d = 0; d < H; ++d) {
    const double sx = double(x[size_t(d)]) * moe.W.router_scale[size_t(d)];
    s += sx * sx / std::sqrt(ss / H) / std::sqrt(double(H));
  }
  for (int d = 0; d < H; ++d) {
    const float u = float(x[size_t(d)] * moe.W.router_scale[size_t(d)] / s);
    moe.router[size_t(0) * H + d] = 1.5f * u;
    moe.router[size_t(1) * H + d] = u;
    moe.router[size_t(2) * H + d] = -u;
    moe.router[size_t(3) * H + d] = u;
  }
  moe.build();
  const std::vector<float> got = moe.mix(1, x.data(), m.data());
  EXPECT_LE(max_rel_diff(got, moe.naive(x.data(), m.data(), {0, 1})), 1e-5);
  // Expert 3 in place of expert 1 gives another result: the choice is seen.
  EXPECT_GT(max_rel_diff(got, moe.naive(x.data(), m.data(), {0, 3})), 1e-3);
}

// ---------------------------------------------------------------------------
// Config

json moe_text() {
  return json{{"model_type", "gemma4_text"},
              {"hidden_size", 64},
              {"num_hidden_layers", 2},
              {"intermediate_size", 96},
              {"vocab_size", 512},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"hidden_size_per_layer_input", 0},
              {"enable_moe_block", true},
              {"num_experts", 128},
              {"top_k_experts", 8},
              {"moe_intermediate_size", 704}};
}

// Exactly one line naming the file and the field.
void expect_config_error(const json& j, const std::string& field, bool assistant = false) {
  try {
    if (assistant)
      parse_gemma4_assistant_config(j.dump(), "config.json");
    else
      parse_gemma4_config(j.dump(), "config.json");
    ADD_FAILURE() << "no error for field " << field;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("config.json: field '" + field + "'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Gemma4MoeConfig, FieldsAreReadAndBadOnesAreOneLineNamingTheField) {
  const Gemma4TextConfig c = parse_gemma4_config(moe_text().dump(), "config.json");
  EXPECT_TRUE(c.moe);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.top_k_experts, 8);
  EXPECT_EQ(c.moe_intermediate_size, 704);
  EXPECT_EQ(c.intermediate_size, 96);  // the dense MLP beside the experts
  // The released layout: text_config inside a `gemma4` config.
  const json top = {{"model_type", "gemma4"}, {"text_config", moe_text()}};
  EXPECT_EQ(parse_gemma4_config(top.dump(), "config.json").top_k_experts, 8);
  {  // enable_moe_block false: the MoE fields are ignored, as transformers ignores them
    json j = moe_text();
    j["enable_moe_block"] = false;
    j["top_k_experts"] = 999;
    EXPECT_FALSE(parse_gemma4_config(j.dump(), "config.json").moe);
  }
  auto with = [](const char* key, json v) {
    json j = moe_text();
    j[key] = std::move(v);
    return j;
  };
  for (const char* key : {"num_experts", "top_k_experts", "moe_intermediate_size"}) {
    json missing = moe_text();
    missing.erase(key);
    expect_config_error(missing, key);
    expect_config_error(with(key, 0), key);
    expect_config_error(with(key, -3), key);
    expect_config_error(with(key, "8"), key);
    expect_config_error(with(key, 2.5), key);
  }
  expect_config_error(with("top_k_experts", 129), "top_k_experts");  // more than num_experts
  expect_config_error(with("num_experts", 1 << 20), "num_experts");
  expect_config_error(with("enable_moe_block", "true"), "enable_moe_block");
  {
    json t = moe_text();
    t.erase("num_experts");
    expect_config_error(json{{"model_type", "gemma4"}, {"text_config", t}}, "text_config.num_experts");
  }
  {  // transformers' Gemma4AssistantConfig refuses a MoE text config
    json tc = moe_text();
    tc["layer_types"] = {"sliding_attention", "full_attention"};
    const json a = {{"model_type", "gemma4_assistant"}, {"text_config", tc}, {"backbone_hidden_size", 64}};
    expect_config_error(a, "text_config.enable_moe_block", /*assistant=*/true);
  }
  // The CLI: one `error: ` line.
  const std::string src = moe_dirs().front() + "/target";
  const test::TempDir tmp;
  std::ifstream cf(src + "/config.json");
  json cfg = json::parse(cf);
  cfg["top_k_experts"] = cfg["num_experts"].get<int>() + 1;
  std::ofstream(tmp.path / "config.json") << cfg.dump();
  fs::copy_file(src + "/model.safetensors", tmp.path / "model.safetensors");
  test::expect_one_error_line(test::run_cli("generate -m " + tmp.str() + " --prompt-ids 1,2,3 -n 2"),
                              "'top_k_experts'");
}

}  // namespace
}  // namespace nextn
