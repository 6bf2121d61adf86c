// Config precedence rules (docs/config.md) and every malformed-config error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/config.h"

using nextn::Error;
using nextn::parse_qwen35_config;
using nextn::Qwen35Config;
using json = nlohmann::json;

namespace {

json text_fields() {
  return json{{"hidden_size", 64},
              {"num_hidden_layers", 4},
              {"intermediate_size", 128},
              {"vocab_size", 1000},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"linear_num_key_heads", 2},
              {"linear_key_head_dim", 16},
              {"linear_num_value_heads", 4},
              {"linear_value_head_dim", 16},
              {"linear_conv_kernel_dim", 4},
              {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", true}};
}

json text_config() {
  json j = text_fields();
  j["model_type"] = "qwen3_5_text";
  return j;
}

json cond_config() {
  json tc = text_fields();
  tc["model_type"] = "qwen3_5_text";
  return json{{"model_type", "qwen3_5"}, {"text_config", tc}, {"tie_word_embeddings", false}};
}

Qwen35Config parse(const json& j) { return parse_qwen35_config(j.dump(), "config.json"); }
Qwen35Config parse(const json& j, const json& gen) {
  std::string g = gen.dump();
  return parse_qwen35_config(j.dump(), "config.json", &g, "generation_config.json");
}

// Parsing must fail with exactly one line naming the file and the field.
std::string expect_error_text(const std::string& text, const std::string& field, const std::string* gen = nullptr,
                         const std::string& file = "config.json") {
  try {
    parse_qwen35_config(text, "config.json", gen, "generation_config.json");
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    if (!field.empty()) {
      EXPECT_EQ(msg.rfind(file + ": field '" + field + "': ", 0), 0u) << msg;
    } else {
      EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << msg;
    }
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a nextn::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error for " << text;
  return "";
}
std::string expect_error(const json& j, const std::string& field) { return expect_error_text(j.dump(), field); }

}  // namespace

TEST(Config, TextModelFields) {
  Qwen35Config c = parse(text_config());
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.key_dim(), 32);
  EXPECT_EQ(c.value_dim(), 64);
  EXPECT_EQ(c.conv_dim(), 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_EQ(c.mtp_num_hidden_layers, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.quant.present);
}

TEST(Config, TransformersDefaults) {
  json j = {{"model_type", "qwen3_5_text"}, {"hidden_size", 64},        {"num_hidden_layers", 8},
            {"intermediate_size", 128},     {"vocab_size", 1000},       {"num_attention_heads", 16},
            {"num_key_value_heads", 4}};
  Qwen35Config c = parse(j);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_key_head_dim, 128);
  EXPECT_EQ(c.linear_num_value_heads, 32);
  EXPECT_EQ(c.linear_value_head_dim, 128);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 64);
  // full_attention_interval default 4
  EXPECT_EQ(c.full_attention, (std::vector<bool>{false, false, false, true, false, false, false, true}));
}

TEST(Config, TextConfigBeforeTopLevel) {
  json j = cond_config();
  j["text_config"]["hidden_size"] = 96;
  j["hidden_size"] = 4096;                      // ignored: text_config wins
  j["text_config"].erase("intermediate_size");  // only at the top level: used
  j["intermediate_size"] = 256;
  j["text_config"]["head_dim"] = nullptr;  // null counts as absent
  j["head_dim"] = 32;
  Qwen35Config c = parse(j);
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_EQ(c.hidden_size, 96);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_TRUE(c.tie_word_embeddings);  // text_config's true beats the top level's false
}

TEST(Config, Qwen35WithoutTextConfigReadsTopLevel) {
  json j = text_fields();
  j["model_type"] = "qwen3_5";
  Qwen35Config c = parse(j);
  EXPECT_EQ(c.hidden_size, 64);
}

TEST(Config, MissingFieldNamesPreferredPlace) {
  json j = cond_config();
  j["text_config"].erase("vocab_size");
  expect_error(j, "text_config.vocab_size");
  json t = text_config();
  t.erase("num_hidden_layers");
  expect_error(t, "num_hidden_layers");
}

TEST(Config, LayerTypesBeatInterval) {
  json j = text_config();
  j["layer_types"] = {"full_attention", "linear_attention", "full_attention", "linear_attention"};
  j["full_attention_interval"] = 2;
  Qwen35Config c = parse(j);
  EXPECT_EQ(c.full_attention, (std::vector<bool>{true, false, true, false}));
  j.erase("layer_types");
  c = parse(j);
  EXPECT_EQ(c.full_attention, (std::vector<bool>{false, true, false, true}));
  j.erase("full_attention_interval");
  c = parse(j);
  EXPECT_EQ(c.full_attention, (std::vector<bool>{false, false, false, true}));
}

TEST(Config, LegacyLayerTypeNames) {
  json j = text_config();
  j["layer_types"] = {"attention", "mamba", "conv", "full_attention"};
  EXPECT_EQ(parse(j).full_attention, (std::vector<bool>{true, false, false, true}));
}

TEST(Config, RopePrecedence) {
  json j = text_config();
  j["rope_theta"] = 5000.0;
  j["partial_rotary_factor"] = 0.5;
  j["mrope_section"] = {2, 1, 1};
  Qwen35Config c = parse(j);  // top-level keys
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.rotary_dim(), 8);

  j["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", 1e7},
                          {"partial_rotary_factor", 0.25},
                          {"mrope_section", {1, 1, 0}},
                          {"mrope_interleaved", true}};
  c = parse(j);  // rope_parameters wins
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 4);

  j["rope_parameters"] = {{"rope_theta", 1e6}};  // partial: the rest from the top level
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);

  json k = cond_config();  // qwen3_5: text_config.rope_parameters
  k["text_config"]["rope_parameters"] = {{"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}};
  k["rope_parameters"] = {{"rope_theta", 3.0}};
  EXPECT_DOUBLE_EQ(parse(k).rope_theta, 1e7);
}

TEST(Config, EosPrecedence) {
  json j = text_config();
  j["eos_token_id"] = 7;
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int>{7}));
  EXPECT_EQ(parse(j, json{{"eos_token_id", json::array({5, 6, 5})}}).eos_token_ids, (std::vector<int>{5, 6}));
  EXPECT_EQ(parse(j, json{{"eos_token_id", nullptr}}).eos_token_ids, (std::vector<int>{7}));  // null: next source
  EXPECT_EQ(parse(j, json{{"do_sample", true}}).eos_token_ids, (std::vector<int>{7}));        // absent: next
  j["eos_token_id"] = nullptr;
  EXPECT_TRUE(parse(j, json{{"eos_token_id", nullptr}}).eos_token_ids.empty());
  j.erase("eos_token_id");
  EXPECT_TRUE(parse(j).eos_token_ids.empty());

  json k = cond_config();  // qwen3_5: text_config, then top level
  k["eos_token_id"] = 3;
  EXPECT_EQ(parse(k).eos_token_ids, (std::vector<int>{3}));
  k["text_config"]["eos_token_id"] = 4;
  EXPECT_EQ(parse(k).eos_token_ids, (std::vector<int>{4}));
}

TEST(Config, MtpLayers) {
  json j = text_config();
  EXPECT_EQ(parse(j).mtp_num_hidden_layers, -1);
  j["mtp_num_hidden_layers"] = 1;
  EXPECT_EQ(parse(j).mtp_num_hidden_layers, 1);
  j["mtp_num_hidden_layers"] = 0;
  EXPECT_EQ(parse(j).mtp_num_hidden_layers, 0);
}

TEST(Config, Quantization) {
  json j = text_config();
  j["quantization_config"] = {{"group_size", 32}, {"bits", 8}};
  Qwen35Config c = parse(j);
  ASSERT_TRUE(c.quant.present);
  EXPECT_EQ(c.quant.defaults.bits, 8);
  EXPECT_EQ(c.quant.defaults.group_size, 32);

  j["quantization"] = {{"group_size", 64},
                       {"bits", 4},
                       {"mode", "affine"},
                       {"language_model.model.layers.0.mlp.gate_proj", {{"bits", 8}, {"group_size", 128}}},
                       {"language_model.model.layers.0.mlp.up_proj", false}};
  c = parse(j);  // `quantization` wins over `quantization_config`
  EXPECT_EQ(c.quant.defaults.bits, 4);
  EXPECT_EQ(c.quant.defaults.group_size, 64);
  auto g = c.quant.for_module("language_model.model.layers.0.mlp.gate_proj");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->bits, 8);
  EXPECT_EQ(g->group_size, 128);
  EXPECT_FALSE(c.quant.for_module("language_model.model.layers.0.mlp.up_proj"));
  auto d = c.quant.for_module("language_model.model.layers.1.mlp.up_proj");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->bits, 4);
}

TEST(Config, LoadFromDirectory) {
  auto dir = std::filesystem::temp_directory_path() / "nextn_test_config_dir";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  json j = text_config();
  j["eos_token_id"] = 1;
  std::ofstream(dir / "config.json") << j.dump();
  EXPECT_EQ(nextn::load_qwen35_config(dir.string()).eos_token_ids, (std::vector<int>{1}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 3]})";
  EXPECT_EQ(nextn::load_qwen35_config(dir.string()).eos_token_ids, (std::vector<int>{2, 3}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": "x"})";
  try {
    nextn::load_qwen35_config(dir.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: field 'eos_token_id'"), std::string::npos);
  }
  std::filesystem::remove(dir / "config.json");
  EXPECT_THROW(nextn::load_qwen35_config(dir.string()), Error);
  std::filesystem::remove_all(dir);
}

// ---- malformed configs: one Error naming file and field ----

TEST(ConfigErrors, MalformedJson) {
  std::string m = expect_error_text("{\"model_type\": ", "");
  EXPECT_NE(m.find("malformed JSON"), std::string::npos) << m;
  expect_error_text("[1, 2]", "");
  expect_error_text("", "");
  std::string bad_gen = "{";
  std::string msg = expect_error_text(text_config().dump(), "", &bad_gen, "generation_config.json");
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos);
}

TEST(ConfigErrors, ModelType) {
  json j = text_config();
  j.erase("model_type");
  expect_error(j, "model_type");
  j["model_type"] = 3;
  expect_error(j, "model_type");
  j["model_type"] = "llama";
  std::string m = expect_error(j, "model_type");
  EXPECT_NE(m.find("qwen3_5, qwen3_5_text"), std::string::npos) << m;
  j["model_type"] = "qwen3_moe";  // Qwen3's MoE, not Qwen3.5's
  expect_error(j, "model_type");
  json k = cond_config();
  k["text_config"]["model_type"] = "qwen3_next";
  expect_error(k, "text_config.model_type");
  k["text_config"] = "oops";
  expect_error(k, "text_config");
}

TEST(ConfigErrors, WrongTypesAndNonPositiveSizes) {
  for (const char* f : {"hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_key_head_dim",
                        "linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim"}) {
    for (json bad : {json(0), json(-4), json(2.5), json("64"), json(true), json::array({1}), json(1e12)}) {
      json k = cond_config();
      k["text_config"][f] = bad;
      std::string m = expect_error(k, std::string("text_config.") + f);
      EXPECT_NE(m.find("positive integer"), std::string::npos) << m;
    }
    json t = text_config();
    t[f] = 0;
    expect_error(t, f);
  }
  json t = text_config();
  t["rms_norm_eps"] = -1;
  expect_error(t, "rms_norm_eps");
  t = text_config();
  t["rms_norm_eps"] = "small";
  expect_error(t, "rms_norm_eps");
  t = text_config();
  t["tie_word_embeddings"] = "yes";
  expect_error(t, "tie_word_embeddings");
  t = text_config();
  t["attn_output_gate"] = false;
  expect_error(t, "attn_output_gate");
  t = text_config();
  t["num_hidden_layers"] = 100000;
  expect_error(t, "num_hidden_layers");
  t = text_config();
  t["mtp_num_hidden_layers"] = -1;
  expect_error(t, "mtp_num_hidden_layers");
  t = text_config();
  t["full_attention_interval"] = 0;
  expect_error(t, "full_attention_interval");
}

TEST(ConfigErrors, InconsistentDims) {
  json k = cond_config();
  k["text_config"]["num_key_value_heads"] = 3;  // 4 heads
  expect_error(k, "text_config.num_key_value_heads");
  k = cond_config();
  k["text_config"]["linear_num_value_heads"] = 3;  // 2 key heads
  expect_error(k, "text_config.linear_num_value_heads");
  k = cond_config();
  k["text_config"]["layer_types"] = {"full_attention", "linear_attention"};
  std::string m = expect_error(k, "text_config.layer_types");
  EXPECT_NE(m.find("num_hidden_layers"), std::string::npos);
  k = cond_config();
  k["text_config"]["layer_types"] = {"full_attention", "linear_attention", "sliding_attention", "full_attention"};
  expect_error(k, "text_config.layer_types[2]");
  k["text_config"]["layer_types"] = {"full_attention", "linear_attention", 3, "full_attention"};
  expect_error(k, "text_config.layer_types[2]");
  k["text_config"]["layer_types"] = "full_attention";
  expect_error(k, "text_config.layer_types");
  k = cond_config();
  k["text_config"]["num_attention_heads"] = 1 << 30;
  k["text_config"]["num_key_value_heads"] = 1;
  k["text_config"]["head_dim"] = 1 << 10;
  expect_error(k, "text_config.num_attention_heads");
}

TEST(ConfigErrors, Rope) {
  json k = cond_config();
  // head_dim 16: factor 0.3 -> int(4.8) = 4 (fine); 0.1875 -> 3 (odd); 2.0 -> 32 > 16
  k["text_config"]["rope_parameters"] = {{"partial_rotary_factor", 0.1875}};
  expect_error(k, "text_config.rope_parameters.partial_rotary_factor");
  k["text_config"]["rope_parameters"] = {{"partial_rotary_factor", 2.0}};
  expect_error(k, "text_config.rope_parameters.partial_rotary_factor");
  k["text_config"]["rope_parameters"] = {{"partial_rotary_factor", 0.01}};  // rotary dim 0
  expect_error(k, "text_config.rope_parameters.partial_rotary_factor");
  k["text_config"]["rope_parameters"] = json::object();
  k["text_config"]["partial_rotary_factor"] = 0.1875;
  expect_error(k, "text_config.partial_rotary_factor");
  k = cond_config();
  k["text_config"]["rope_parameters"] = {{"rope_theta", -1}};
  expect_error(k, "text_config.rope_parameters.rope_theta");
  k["text_config"]["rope_parameters"] = {{"rope_type", "yarn"}};
  expect_error(k, "text_config.rope_parameters.rope_type");
  k["text_config"]["rope_parameters"] = 1e7;
  expect_error(k, "text_config.rope_parameters");
}

TEST(ConfigErrors, Eos) {
  json t = text_config();
  t["eos_token_id"] = "</s>";
  expect_error(t, "eos_token_id");
  t["eos_token_id"] = {1, -2};
  expect_error(t, "eos_token_id[1]");
  t["eos_token_id"] = 1000;  // vocab 1000
  expect_error(t, "eos_token_id");
  std::string gen = R"({"eos_token_id": [1, 2.5]})";
  expect_error_text(text_config().dump(), "eos_token_id[1]", &gen, "generation_config.json");
  gen = "[]";
  expect_error_text(text_config().dump(), "", &gen, "generation_config.json");
}

TEST(ConfigErrors, Quantization) {
  json t = text_config();
  t["quantization"] = {{"bits", 3}, {"group_size", 64}};
  expect_error(t, "quantization.bits");
  t["quantization"] = {{"bits", 4}, {"group_size", 48}};
  expect_error(t, "quantization.group_size");
  t["quantization"] = {{"bits", 4}, {"group_size", 64}, {"mode", "mxfp4"}};
  std::string m = expect_error(t, "quantization.mode");
  EXPECT_NE(m.find("affine"), std::string::npos);
  t["quantization"] = {{"group_size", 64}};
  expect_error(t, "quantization.bits");
  t["quantization"] = 4;
  expect_error(t, "quantization");
  t["quantization"] = {{"bits", 4}, {"group_size", 64}, {"model.layers.0.mlp.gate_proj", {{"bits", 2}}}};
  expect_error(t, "quantization.model.layers.0.mlp.gate_proj.bits");
  t.erase("quantization");
  t["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemv"}};
  expect_error(t, "quantization_config.version");  // a transformers format's variant not run (docs/formats.md)
}

TEST(Config, MropeSectionIsNotRead) {
  // Text-only positions are equal in all three M-RoPE streams: the split
  // cannot change a result, so the field is not parsed (nor validated).
  json k = cond_config();
  k["text_config"]["rope_parameters"] = {{"partial_rotary_factor", 0.25}, {"mrope_section", {1, -1, 1}}};
  EXPECT_NO_THROW(parse(k));
}

// quantization_config blocks as transformers' quantizers and their tools
// write them into config.json. GPTQ and AWQ carry bits and group_size like
// MLX's block does: before the quant_method check they parsed as MLX affine.
TEST(ConfigErrors, ForeignQuantizationMethods) {
  const std::vector<std::pair<std::string, json>> blocks = {
      {"gptq",
       {{"bits", 4}, {"group_size", 128}, {"damp_percent", 0.01}, {"desc_act", false}, {"static_groups", false},
        {"sym", true}, {"true_sequential", true}, {"model_name_or_path", nullptr},
        {"model_file_base_name", "model"}, {"quant_method", "gptq"}, {"checkpoint_format", "gptq"}}},
      {"awq",
       {{"quant_method", "awq"}, {"zero_point", true}, {"group_size", 128}, {"bits", 4}, {"version", "gemm"},
        {"modules_to_not_convert", nullptr}}},
      {"bitsandbytes",
       {{"_load_in_4bit", true}, {"_load_in_8bit", false}, {"bnb_4bit_compute_dtype", "bfloat16"},
        {"bnb_4bit_quant_storage", "uint8"}, {"bnb_4bit_quant_type", "nf4"}, {"bnb_4bit_use_double_quant", true},
        {"llm_int8_enable_fp32_cpu_offload", false}, {"llm_int8_has_fp16_weight", false},
        {"llm_int8_skip_modules", nullptr}, {"llm_int8_threshold", 6.0}, {"load_in_4bit", true},
        {"load_in_8bit", false}, {"quant_method", "bitsandbytes"}}},
      {"compressed-tensors",
       {{"config_groups",
         {{"group_0",
           {{"input_activations", nullptr}, {"output_activations", nullptr}, {"targets", {"Linear"}},
            {"weights",
             {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", false}, {"group_size", 128},
              {"num_bits", 4}, {"observer", "minmax"}, {"strategy", "group"}, {"symmetric", true},
              {"type", "int"}}}}}}},
        {"format", "pack-quantized"}, {"ignore", {"lm_head"}}, {"kv_cache_scheme", nullptr},
        {"quant_method", "compressed-tensors"}, {"quantization_status", "compressed"}}},
      {"fp8",
       {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
        {"weight_block_size", {128, 128}}}},
  };
  // Qwen3.5 runs fp8, gptq, awq and compressed-tensors (io/hf_quant.h) and
  // refuses bitsandbytes by name; an MLX block beside a transformers one is
  // contradictory.
  for (const auto& [method, block] : blocks) {
    json t = text_config();
    t["quantization_config"] = block;
    if (method == "bitsandbytes") {
      const std::string m = expect_error(t, "quantization_config.quant_method");
      EXPECT_NE(m.find("'bitsandbytes' quantization is not supported"), std::string::npos) << m;
      continue;
    }
    EXPECT_EQ(quant_method_name(parse(t).quant.method), method);
    t["quantization"] = {{"bits", 4}, {"group_size", 64}, {"mode", "affine"}};
    expect_error(t, "quantization");
  }
}

// ---- Qwen3.5 MoE (docs/moe.md) ----

namespace {
json moe_text_config() {
  json j = text_fields();
  j.erase("intermediate_size");  // transformers' Qwen3_5MoeTextConfig has none
  j["model_type"] = "qwen3_5_moe_text";
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["shared_expert_intermediate_size"] = 48;
  return j;
}
}  // namespace

TEST(Config, MoeTextAndConditionalGeneration) {
  const Qwen35Config c = parse(moe_text_config());
  EXPECT_TRUE(c.moe);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.shared_expert_intermediate_size, 48);
  EXPECT_EQ(c.intermediate_size, 0);
  EXPECT_FALSE(parse(text_config()).moe);
  json cond = {{"model_type", "qwen3_5_moe"}, {"text_config", moe_text_config()}};
  const Qwen35Config n = parse(cond);
  EXPECT_TRUE(n.moe);
  EXPECT_EQ(n.num_experts, 8);
  cond["text_config"]["model_type"] = "qwen3_5_text";  // a dense text config inside a MoE one
  expect_error(cond, "text_config.model_type");
  json dense_cond = cond_config();
  dense_cond["text_config"]["model_type"] = "qwen3_5_moe_text";
  expect_error(dense_cond, "text_config.model_type");
}

TEST(ConfigErrors, MoeFieldsAreRequiredAndPositive) {
  for (const char* f : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"}) {
    json j = moe_text_config();
    j.erase(f);
    std::string m = expect_error(j, f);
    EXPECT_NE(m.find("missing"), std::string::npos) << m;
    for (json bad : {json(0), json(-1), json(1.5), json("8"), json(nullptr)}) {
      json k = {{"model_type", "qwen3_5_moe"}, {"text_config", moe_text_config()}};
      k["text_config"][f] = bad;
      expect_error(k, std::string("text_config.") + f);
    }
  }
  json j = moe_text_config();
  j["num_experts_per_tok"] = 9;
  std::string m = expect_error(j, "num_experts_per_tok");
  EXPECT_NE(m.find("num_experts is 8"), std::string::npos) << m;
  json dense = text_config();
  dense["num_experts"] = 8;  // a dense model type's MoE fields are not read
  EXPECT_FALSE(parse(dense).moe);
}
