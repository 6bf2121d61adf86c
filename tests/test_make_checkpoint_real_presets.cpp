// make-checkpoint's real-shape MoE presets (issue 25 item 3; docs/moe.md
// lists the sources and the assumed values): qwen3.5-122b-a10b,
// qwen3.5-397b-a17b, gemma4-26b-a4b and its assistant. Their config.json as
// nextn's own parsers read it, and their sizes against the published
// parameter counts, nothing written (the targets take 14 to 806 GB).
#include <gtest/gtest.h>

#include <string>

#include "cli_util.h"
#include "io/config.h"
#include "io/gemma4_config.h"
#include "io/synthetic.h"
#include "io/synthetic_gemma4.h"

namespace nextn {
namespace {

struct QwenMoeShape {
  const char* preset;
  int hidden, layers, heads, kv_heads, lin_v_heads, experts, top_k, expert_width, shared_width;
};

// Every field the loader reads, in both layouts' configs.
void expect_qwen_moe_config(const QwenMoeShape& w) {
  const auto p = synthetic_preset(w.preset);
  ASSERT_TRUE(p) << w.preset;
  for (const char* q : {"q4", "bf16"}) {
    SCOPED_TRACE(std::string(w.preset) + " " + q);
    const Qwen35Config c = parse_qwen35_config(synthetic_config_json(*p, q), "config.json");
    EXPECT_EQ(c.model_type, "qwen3_5_moe");
    EXPECT_TRUE(c.moe);
    EXPECT_EQ(c.hidden_size, w.hidden);
    EXPECT_EQ(c.num_hidden_layers, w.layers);
    EXPECT_EQ(c.num_attention_heads, w.heads);
    EXPECT_EQ(c.num_key_value_heads, w.kv_heads);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.linear_num_key_heads, 16);
    EXPECT_EQ(c.linear_key_head_dim, 128);
    EXPECT_EQ(c.linear_num_value_heads, w.lin_v_heads);
    EXPECT_EQ(c.linear_value_head_dim, 128);
    EXPECT_EQ(c.linear_conv_kernel_dim, 4);
    EXPECT_EQ(c.num_experts, w.experts);
    EXPECT_EQ(c.num_experts_per_tok, w.top_k);
    EXPECT_EQ(c.moe_intermediate_size, w.expert_width);
    EXPECT_EQ(c.shared_expert_intermediate_size, w.shared_width);
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.mtp_num_hidden_layers, 1);
    ASSERT_EQ(c.full_attention.size(), size_t(w.layers));
    for (int i = 0; i < w.layers; ++i) EXPECT_EQ(c.full_attention[size_t(i)], (i + 1) % 4 == 0) << i;
    EXPECT_EQ(c.quant.present, std::string(q) == "q4");
    if (c.quant.present) {  // mlx-lm's 8-bit gates, the last layer's and the MTP layer's included
      const std::string last = "language_model.model.layers." + std::to_string(w.layers - 1) + ".";
      for (const std::string& l : {last, std::string("mtp.layers.0.")})
        for (const char* m : {"mlp.gate", "mlp.shared_expert_gate"}) EXPECT_EQ(c.quant.for_module(l + m)->bits, 8) << l << m;
      EXPECT_EQ(c.quant.for_module(last + "mlp.switch_mlp.down_proj")->bits, 4);
    }
  }
}

TEST(MakeCheckpointRealPresets, Qwen35_397bA17bConfig) {
  expect_qwen_moe_config({"qwen3.5-397b-a17b", 4096, 60, 32, 2, 64, 512, 10, 1024, 1024});
}

TEST(MakeCheckpointRealPresets, Qwen35_122bA10bConfig) {
  expect_qwen_moe_config({"qwen3.5-122b-a10b", 3072, 48, 32, 2, 64, 256, 8, 1024, 1024});
}

// The parameter counts against the published ones: 397B (rounded) and
// 122.11B, which leave out the MTP layer (6.6B of the 397B's here, 2.5B of
// the 122B's); and q4 at MLX's 0.5625 bytes a weight.
TEST(MakeCheckpointRealPresets, QwenMoeSizesMatchThePublishedCounts) {
  const auto big = synthetic_preset("qwen3.5-397b-a17b"), mid = synthetic_preset("qwen3.5-122b-a10b");
  ASSERT_TRUE(big && mid);
  const double big_params = double(synthetic_checkpoint_size(*big, "bf16").total) / 2;
  EXPECT_GT(big_params, 396.0e9 + 6.5e9);
  EXPECT_LT(big_params, 397.5e9 + 6.7e9);
  const double mid_params = double(synthetic_checkpoint_size(*mid, "bf16").total) / 2;
  EXPECT_GT(mid_params, 122.0e9 + 2.4e9);
  EXPECT_LT(mid_params, 122.2e9 + 2.6e9);
  // q4: 4 bits + a bf16 scale and bias per 64 weights (0.5625 bytes), a little more for the 8-bit gates.
  const double big_q4 = double(synthetic_checkpoint_size(*big, "q4").total);
  EXPECT_GT(big_q4, big_params * 0.5625);
  EXPECT_LT(big_q4, big_params * 0.57);
  // The 397B splits over 1, 2, 4 and 8 ranks (its 2 KV heads replicated past 2) but not 3.
  for (int n : {1, 2, 4, 8}) {
    const SyntheticCheckpointSize s = synthetic_checkpoint_size(*big, "q4", n);
    ASSERT_EQ(s.per_rank.size(), size_t(n));
    EXPECT_GE(s.per_rank[0], s.total / uint64_t(n)) << n;  // the replicated tensors on every rank
    EXPECT_LT(s.per_rank[0], s.total / uint64_t(n) + (uint64_t(2) << 30)) << n;
  }
  test::expect_error_naming([&] { synthetic_checkpoint_size(*big, "q4", 3); }, "--tensor-parallel 3");
}

TEST(MakeCheckpointRealPresets, Gemma4_26bA4bConfig) {
  const auto t = gemma4_synthetic_preset("gemma4-26b-a4b");
  ASSERT_TRUE(t);
  for (const char* q : {"bf16", "q4"}) {
    SCOPED_TRACE(q);
    const Gemma4TextConfig c = parse_gemma4_config(gemma4_synthetic_config_json(*t, q), "config.json");
    EXPECT_EQ(c.model_type, "gemma4");
    EXPECT_TRUE(c.moe);
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_EQ(c.top_k_experts, 8);
    EXPECT_EQ(c.moe_intermediate_size, 704);
    EXPECT_EQ(c.intermediate_size, 2112);
    EXPECT_EQ(c.hidden_size, 2816);
    EXPECT_EQ(c.num_hidden_layers, 30);
    EXPECT_EQ(c.num_attention_heads, 16);
    EXPECT_EQ(c.vocab_size, 262144);
    EXPECT_EQ(c.sliding_window, 1024);
    EXPECT_FLOAT_EQ(c.final_logit_softcapping, 30.0f);
    EXPECT_EQ(c.max_position_embeddings, 262144);
    EXPECT_TRUE(c.tie_word_embeddings);
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const Gemma4LayerSpec& s = c.layers[size_t(i)];
      EXPECT_EQ(s.sliding, (i + 1) % 6 != 0) << i;
      EXPECT_EQ(s.head_dim, s.sliding ? 256 : 512) << i;
      EXPECT_EQ(s.kv_heads, s.sliding ? 8 : 2) << i;
      EXPECT_EQ(s.k_eq_v, !s.sliding) << i;
    }
    EXPECT_EQ(c.quant.present, std::string(q) == "q4");
    if (c.quant.present) {  // the router at 8 bits, as mlx-lm quantizes it; the experts at 4
      EXPECT_EQ(c.quant.for_module("model.language_model.layers.29.router.proj")->bits, 8);
      EXPECT_EQ(c.quant.for_module("model.language_model.layers.29.experts.switch_glu.down_proj")->bits, 4);
    }
  }
  // 25.2B parameters (text model), as published.
  const double params = double(gemma4_synthetic_checkpoint_size(*t, "bf16").total) / 2;
  EXPECT_GT(params, 25.1e9);
  EXPECT_LT(params, 25.3e9);
}

TEST(MakeCheckpointRealPresets, Gemma4_26bA4bAssistantFitsItsTarget) {
  const auto t = gemma4_synthetic_preset("gemma4-26b-a4b"), a = gemma4_synthetic_preset("gemma4-26b-a4b-assistant");
  ASSERT_TRUE(t && a);
  const Gemma4TextConfig c = parse_gemma4_config(gemma4_synthetic_config_json(*t), "config.json");
  const Gemma4AssistantConfig ac = parse_gemma4_assistant_config(gemma4_synthetic_config_json(*a), "config.json");
  EXPECT_FALSE(ac.text.moe);  // a gemma4_assistant is dense
  EXPECT_EQ(ac.backbone_hidden_size, 2816);
  EXPECT_EQ(ac.text.hidden_size, 1024);
  EXPECT_EQ(ac.text.num_hidden_layers, 4);
  EXPECT_EQ(ac.text.vocab_size, c.vocab_size);
  EXPECT_EQ(ac.text.sliding_window, c.sliding_window);
  for (const Gemma4LayerSpec& s : ac.text.layers) {  // the K/V it reads: the target's last layer of its type
    const Gemma4LayerSpec& ts = c.layers[size_t(c.last_layer_of(s.sliding))];
    EXPECT_EQ(s.head_dim, ts.head_dim);
    EXPECT_EQ(s.kv_heads, ts.kv_heads);
  }
}

}  // namespace
}  // namespace nextn
