// Gemma 4 config parsing (io/gemma4_config.h): transformers' defaults and
// per-layer overrides, and one error line naming the field for bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gemma4_fixture_util.h"
#include "io/gemma4_checkpoint.h"
#include "io/gemma4_config.h"

namespace nextn {
namespace {

using json = nlohmann::json;

json text() {
  return json{{"model_type", "gemma4_text"}, {"hidden_size", 64}, {"num_hidden_layers", 6},
              {"intermediate_size", 96},     {"vocab_size", 512}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2},    {"head_dim", 16},    {"hidden_size_per_layer_input", 0}};
}

Gemma4TextConfig parse(const json& j) { return parse_gemma4_config(j.dump(), "config.json"); }

// Exactly one line naming the file and the field.
void expect_error(const json& j, const std::string& field, bool assistant = false) {
  try {
    if (assistant)
      parse_gemma4_assistant_config(j.dump(), "config.json");
    else
      parse(j);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg << " (expected the field " << field << ")";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return;
  }
  ADD_FAILURE() << "no error for field " << field;
}

TEST(Gemma4Config, DefaultsFollowTransformers) {
  const Gemma4TextConfig c = parse(text());
  ASSERT_EQ(c.layers.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(c.layers[size_t(i)].sliding) << i;  // 5 sliding : 1 full
  EXPECT_FALSE(c.layers[5].sliding);
  EXPECT_EQ(c.layers[0].head_dim, 16);
  EXPECT_EQ(c.layers[0].rope_pairs, 8);  // default RoPE: all pairs
  EXPECT_EQ(c.layers[0].rope_theta, 10000.0);
  EXPECT_EQ(c.layers[5].head_dim, 512);   // global_head_dim default
  EXPECT_EQ(c.layers[5].kv_heads, 2);     // num_global_key_value_heads applies with K = V only
  EXPECT_EQ(c.layers[5].rope_pairs, 64);  // proportional: int(0.25 * 512 // 2)
  EXPECT_EQ(c.layers[5].rope_theta, 1e6);
  EXPECT_FALSE(c.layers[5].k_eq_v);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.final_logit_softcapping, 0.0f);
  EXPECT_EQ(c.last_layer_of(true), 4);
  EXPECT_EQ(c.last_layer_of(false), 5);
}

TEST(Gemma4Config, GlobalOverridesAndTheLastLayerIsFull) {
  json j = text();
  j["attention_k_eq_v"] = true;
  j["global_head_dim"] = 32;
  j["num_global_key_value_heads"] = 1;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                      "sliding_attention", "full_attention", "sliding_attention"};
  j["final_logit_softcapping"] = 30.0;
  const Gemma4TextConfig c = parse(j);
  EXPECT_FALSE(c.layers[1].sliding);
  EXPECT_FALSE(c.layers[5].sliding);  // forced, as transformers does
  for (int i : {1, 4, 5}) {
    EXPECT_EQ(c.layers[size_t(i)].head_dim, 32);
    EXPECT_EQ(c.layers[size_t(i)].kv_heads, 1);
    EXPECT_TRUE(c.layers[size_t(i)].k_eq_v);
  }
  EXPECT_FALSE(c.layers[0].k_eq_v);
  EXPECT_EQ(c.final_logit_softcapping, 30.0f);
}

TEST(Gemma4Config, PerLayerConfigWinsAndGemma4ReadsTextConfig) {
  json tc = text();
  tc["per_layer_config"] = {{"5", {{"head_dim", 64}, {"num_key_value_heads", 1}}}};
  tc["global_head_dim"] = 999;  // ignored when per_layer_config is given
  json top = {{"model_type", "gemma4"}, {"text_config", tc}};
  const Gemma4TextConfig c = parse_gemma4_config(top.dump(), "config.json");
  EXPECT_EQ(c.model_type, "gemma4");
  EXPECT_EQ(c.layers[5].head_dim, 64);
  EXPECT_EQ(c.layers[5].kv_heads, 1);
  EXPECT_EQ(c.layers[0].head_dim, 16);
}

TEST(Gemma4Config, EosFromGenerationConfigFirst) {
  json j = text();
  j["eos_token_id"] = 1;
  const std::string gen = json{{"eos_token_id", {1, 106}}}.dump();
  const Gemma4TextConfig c = parse_gemma4_config(j.dump(), "config.json", &gen, "generation_config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 106}));
}

TEST(Gemma4Config, BadInputIsOneLineNamingTheField) {
  auto with = [](const char* key, json v) {
    json j = text();
    j[key] = std::move(v);
    return j;
  };
  expect_error(with("model_type", "gemma3_text"), "model_type");
  expect_error(with("hidden_size", -1), "hidden_size");
  expect_error(with("hidden_size_per_layer_input", 256), "hidden_size_per_layer_input");
  {
    json j = text();
    j.erase("hidden_size_per_layer_input");  // transformers' default (256) turns PLE on
    expect_error(j, "hidden_size_per_layer_input");
  }
  expect_error(with("enable_moe_block", "yes"), "enable_moe_block");  // MoE fields: test_gemma4_moe.cpp
  expect_error(with("num_kv_shared_layers", 2), "num_kv_shared_layers");
  expect_error(with("hidden_activation", "gelu"), "hidden_activation");
  expect_error(with("use_bidirectional_attention", "all"), "use_bidirectional_attention");
  expect_error(with("layer_types", json::array({"sliding_attention"})), "layer_types");
  expect_error(with("layer_types", json{"a", "b", "c", "d", "e", "f"}), "layer_types[0]");
  expect_error(with("num_key_value_heads", 3), "num_key_value_heads");
  expect_error(with("per_layer_config", {{"9", {{"head_dim", 8}}}}), "per_layer_config.9");
  expect_error(with("per_layer_config", {{"5", {{"sliding_window", 8}}}}), "per_layer_config.5.sliding_window");
  expect_error(with("rope_parameters", {{"full_attention", {{"rope_type", "yarn"}}}}),
               "rope_parameters.full_attention.rope_type");
  expect_error(with("rope_parameters", {{"sliding_attention", {{"factor", 2.0}}}}),
               "rope_parameters.sliding_attention.factor");
  expect_error(with("final_logit_softcapping", -3), "final_logit_softcapping");
  expect_error(with("quantization", {{"bits", 4}}), "quantization");
  expect_error(with("eos_token_id", 9999), "eos_token_id");
}

// The MLX affine block is read as for Qwen3.5 (io/quant_config.h), top level
// of a target's and of an assistant's config.json; other methods are refused.
TEST(Gemma4Config, MlxQuantizationBlockIsReadAndOtherMethodsRefused) {
  json j = text();
  j["quantization"] = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"}, {"model.embed_tokens", false}};
  const Gemma4TextConfig c = parse(j);
  ASSERT_TRUE(c.quant.present);
  EXPECT_EQ(c.quant.defaults.bits, 4);
  EXPECT_EQ(c.quant.defaults.group_size, 64);
  EXPECT_FALSE(c.quant.for_module("model.embed_tokens"));
  EXPECT_EQ(c.quant.for_module("model.layers.0.mlp.up_proj")->bits, 4);
  EXPECT_FALSE(parse(text()).quant.present);
  j["quantization"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  expect_error(j, "quant_method");
  j["quantization"] = {{"bits", 3}, {"group_size", 64}};
  expect_error(j, "quantization.bits");
}

json assistant() {
  json tc = text();
  tc["num_hidden_layers"] = 2;
  tc["layer_types"] = {"sliding_attention", "full_attention"};
  return json{{"model_type", "gemma4_assistant"}, {"text_config", tc},   {"backbone_hidden_size", 64},
              {"use_ordered_embeddings", true},   {"num_centroids", 16}, {"centroid_intermediate_top_k", 4}};
}

TEST(Gemma4Config, Assistant) {
  json qa = assistant();
  qa["quantization_config"] = {{"group_size", 32}, {"bits", 8}};
  EXPECT_EQ(parse_gemma4_assistant_config(qa.dump(), "config.json").text.quant.defaults.bits, 8);
  const Gemma4AssistantConfig a = parse_gemma4_assistant_config(assistant().dump(), "config.json");
  EXPECT_EQ(a.backbone_hidden_size, 64);
  EXPECT_TRUE(a.use_ordered_embeddings);
  EXPECT_EQ(a.text.num_kv_shared_layers, 2);
  auto bad = assistant();
  bad["num_centroids"] = 7;  // does not divide the vocabulary
  expect_error(bad, "num_centroids", true);
  bad = assistant();
  bad.erase("text_config");
  expect_error(bad, "text_config", true);
  bad = assistant();
  bad["model_type"] = "gemma4_text";
  expect_error(bad, "model_type", true);
  bad = assistant();
  bad["text_config"]["model_type"] = "qwen3_5_text";
  expect_error(bad, "text_config.model_type", true);
}

TEST(Gemma4Config, FixtureCheckpointsOpen) {
  for (const std::string& dir : test::gemma4_fixture_dirs()) {
    const auto t = Gemma4Checkpoint::open(dir + "/target");
    EXPECT_EQ(gemma4_model_type(dir + "/target"), "gemma4_text");
    const auto a = Gemma4Checkpoint::open_assistant(dir + "/assistant");
    EXPECT_EQ(a.assistant_config().backbone_hidden_size, t.config().hidden_size);
    EXPECT_THROW(Gemma4Checkpoint::open(dir + "/assistant"), Error);
    EXPECT_THROW(Gemma4Checkpoint::open_assistant(dir + "/target"), Error);
  }
  EXPECT_EQ(gemma4_model_type(std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied"), "");
}

}  // namespace
}  // namespace nextn
