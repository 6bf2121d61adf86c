// make-checkpoint's Gemma 4 MoE target (the gemma4-26b-a4b preset's
// generator, io/synthetic_gemma4.h) at tiny widths: in bf16 (transformers'
// stacked experts) and q4 / q8 (mlx-lm's switch_glu, router at 8 bits, a
// down_proj whose width is not a multiple of 64 left dense), the CPU backend
// loads what it writes, the experts have the drawn spread, it decodes, and
// speculative output with its (dense) assistant equals greedy.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/gemma4.h"
#include "cli_util.h"
#include "engine/generate.h"
#include "gemma4_synthetic_util.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "io/moe_experts.h"
#include "speculative/gemma4_drafter.h"

namespace nextn {
namespace {

using test::TempDir;

// Mean and std of an expert matrix's dequantized values.
std::pair<double, double> moments(const WeightRef& w) {
  double s = 0, s2 = 0;
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (float x : row) s += x, s2 += double(x) * x;
  }
  const double n = double(w.rows) * double(w.cols), mean = s / n;
  return {mean, std::sqrt(s2 / n - mean * mean)};
}

void check_pair(const std::string& quant, int expert_width) {
  SCOPED_TRACE(quant + ", expert width " + std::to_string(expert_width));
  const TempDir tmp;
  const test::Gemma4Shape shape = test::moe_gemma4_shape(expert_width);
  test::write_shrunk_gemma4_pair(shape, tmp.str(), quant);
  const auto ck = Gemma4Checkpoint::open(tmp.str() + "/target");
  const Gemma4TextConfig& c = ck.config();
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.top_k_experts, 2);
  EXPECT_EQ(c.moe_intermediate_size, expert_width);
  const int bits = quant == "q4" ? 4 : quant == "q8" ? 8 : 0;
  const std::string layer = ck.stored("layers.6");  // the last layer: full attention
  const ExpertLayout layout = detect_expert_layout(ck.store(), ck.dir(), layer);
  EXPECT_EQ(layout, bits ? ExpertLayout::SwitchGlu : ExpertLayout::Stacked);
  EXPECT_EQ(ck.matrix("layers.6.router.proj", c.num_experts, c.hidden_size).quant.bits, bits ? 8 : 0);
  std::set<float> firsts;
  for (int e = 0; e < c.num_experts; ++e) {
    const ExpertMatrices m =
        expert_matrices(ck.store(), c.quant, ck.dir(), layer, layout, e, c.num_experts, expert_width, c.hidden_size);
    EXPECT_EQ(m.gate.quant.bits, bits) << e;
    EXPECT_EQ(m.down.quant.bits, expert_width % 64 == 0 ? bits : 0) << e;  // mlx-lm's rule
    for (const WeightRef* w : {&m.gate, &m.up, &m.down}) {
      const auto [mean, sd] = moments(*w);
      EXPECT_NEAR(mean, 0.0, 0.004) << e;
      EXPECT_NEAR(sd, 0.02, 0.004) << e;
    }
    std::vector<float> row(size_t(m.gate.cols));
    dequantize_row(m.gate, 0, row.data());
    firsts.insert(row[0]);
  }
  EXPECT_GT(firsts.size(), 4u);  // each expert drawn on its own

  const std::vector<int32_t> prompt{2, 17, 300, 45, 9, 128, 77};
  const RuntimeFactory factory = [&ck](int cap) {
    return make_cpu_gemma4_runtime(ck, cap, CpuRuntimeOptions{.threads = 2});
  };
  GenerateOptions g;
  g.max_new_tokens = 32;
  g.ignore_eos = true;
  const std::vector<int32_t> greedy = generate_fresh(factory, prompt, g).tokens;
  ASSERT_EQ(greedy.size(), 32u);
  EXPECT_GT(std::set<int32_t>(greedy.begin(), greedy.end()).size(), 1u);
  for (int K : {2, 4}) {
    GenerateOptions s = g;
    s.block_size = K;
    const GenerateResult r = generate_with_assistant(factory, tmp.str() + "/assistant", prompt, s, 2);
    EXPECT_EQ(r.tokens, greedy) << "K=" << K;
    EXPECT_EQ(r.stats.draft, "assistant");
    EXPECT_GT(r.stats.counters.drafted, 0) << "K=" << K;
  }
}

TEST(MakeCheckpointGemma4Moe, Bf16StackedLoadsDecodesAndSpeculatesExactly) { check_pair("bf16", 64); }
TEST(MakeCheckpointGemma4Moe, Q4SwitchGluLoadsDecodesAndSpeculatesExactly) { check_pair("q4", 64); }
TEST(MakeCheckpointGemma4Moe, Q8WithADenseDownProjLoadsDecodesAndSpeculatesExactly) { check_pair("q8", 48); }

}  // namespace
}  // namespace nextn
