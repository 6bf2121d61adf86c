// Checkpoint: layout detection (3 layouts), names, norms, MTP, LM head,
// shape/dtype validation, dequantize_row. Also defines the synthetic-model
// builder (namespace nextn::synth) that test_quantize.cpp uses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "cli_util.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/runtime.h"

namespace nextn::synth {

struct SynthTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct SynthModel {
  nlohmann::json config;
  std::map<std::string, SynthTensor> tensors;
};

struct SynthOptions {
  Layout layout = Layout::CausalLM;
  bool tied = false;
  bool mtp = true;
  int mtp_in_config = 1;  // -1: key absent
  DType dtype = DType::BF16;
  bool visual = false;              // add model.visual.* tensors
  std::string mtp_prefix = "mtp.";  // or "language_model.mtp."
};

// Tiny dims: H 64, 2 layers (0 linear, 1 full), heads 2/1 x 32, GDN 2x16 keys,
// 4x16 values, conv_dim 128, intermediate 96, vocab 128, kernel 4.
constexpr int64_t kH = 64, kI = 96, kV = 128, kHd = 32, kHq = 2, kHkv = 1, kHv = 4, kDv = 16, kConv = 128, kK = 4;

SynthTensor float_tensor(DType dt, std::vector<int64_t> shape, const std::vector<float>& v) {
  SynthTensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.bytes.resize(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(&t.bytes[4 * i], &v[i], 4);
    } else {
      uint16_t h = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(&t.bytes[2 * i], &h, 2);
    }
  }
  return t;
}

std::vector<float> tensor_floats(const SynthTensor& t) {
  std::vector<float> out(t.bytes.size() / dtype_size(t.dtype));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_float(t.dtype, t.bytes.data(), i);
  return out;
}

nlohmann::json text_config_json(bool tied) {
  return {{"model_type", "qwen3_5_text"},
          {"hidden_size", kH},
          {"num_hidden_layers", 2},
          {"intermediate_size", kI},
          {"vocab_size", kV},
          {"num_attention_heads", kHq},
          {"num_key_value_heads", kHkv},
          {"head_dim", kHd},
          {"linear_num_key_heads", 2},
          {"linear_key_head_dim", 16},
          {"linear_num_value_heads", kHv},
          {"linear_value_head_dim", kDv},
          {"linear_conv_kernel_dim", kK},
          {"full_attention_interval", 2},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}},
          {"tie_word_embeddings", tied},
          {"eos_token_id", 5}};
}

// Logical tensors ("layers.0.mlp.up_proj.weight" ...) with HF conventions.
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> logical_tensors(bool tied, bool mtp) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> m;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, float scale = 1.0f) {
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    std::vector<float> v(static_cast<size_t>(numel));
    for (auto& x : v) x = nd(rng) * scale;
    m[n] = {std::move(shape), std::move(v)};
  };
  auto attn_layer = [&](const std::string& p) {
    add(p + ".self_attn.q_proj.weight", {kHq * kHd * 2, kH});
    add(p + ".self_attn.k_proj.weight", {kHkv * kHd, kH});
    add(p + ".self_attn.v_proj.weight", {kHkv * kHd, kH});
    add(p + ".self_attn.o_proj.weight", {kH, kHq * kHd});
    add(p + ".self_attn.q_norm.weight", {kHd});
    add(p + ".self_attn.k_norm.weight", {kHd});
  };
  auto common = [&](const std::string& p) {
    add(p + ".input_layernorm.weight", {kH});
    add(p + ".post_attention_layernorm.weight", {kH});
    add(p + ".mlp.gate_proj.weight", {kI, kH});
    add(p + ".mlp.up_proj.weight", {kI, kH});
    add(p + ".mlp.down_proj.weight", {kH, kI});
  };
  add("embed_tokens.weight", {kV, kH});
  common("layers.0");
  add("layers.0.linear_attn.in_proj_qkv.weight", {kConv, kH});
  add("layers.0.linear_attn.in_proj_z.weight", {kHv * kDv, kH});
  add("layers.0.linear_attn.in_proj_b.weight", {kHv, kH});
  add("layers.0.linear_attn.in_proj_a.weight", {kHv, kH});
  add("layers.0.linear_attn.out_proj.weight", {kH, kHv * kDv});
  add("layers.0.linear_attn.conv1d.weight", {kConv, 1, kK}, 4.0f);
  add("layers.0.linear_attn.A_log", {kHv}, 10.0f);
  add("layers.0.linear_attn.dt_bias", {kHv}, 10.0f);
  add("layers.0.linear_attn.norm.weight", {kDv}, 10.0f);
  common("layers.1");
  attn_layer("layers.1");
  add("norm.weight", {kH});
  if (!tied) add("lm_head.weight", {kV, kH});
  if (mtp) {
    add("mtp.fc.weight", {kH, 2 * kH});
    add("mtp.pre_fc_norm_embedding.weight", {kH});
    add("mtp.pre_fc_norm_hidden.weight", {kH});
    common("mtp.layers.0");
    attn_layer("mtp.layers.0");
    add("mtp.norm.weight", {kH});
  }
  return m;
}

SynthModel make_model(const SynthOptions& o) {
  SynthModel sm;
  nlohmann::json tc = text_config_json(o.tied);
  if (o.mtp_in_config >= 0) tc["mtp_num_hidden_layers"] = o.mtp_in_config;
  if (o.layout == Layout::CausalLM) {
    sm.config = tc;
  } else {
    sm.config = {{"model_type", "qwen3_5"}, {"text_config", tc}, {"tie_word_embeddings", o.tied}};
  }
  const std::string prefix = layout_prefix(o.layout);
  const std::string head = layout_head(o.layout);
  for (auto& [name, sv] : logical_tensors(o.tied, o.mtp)) {
    auto [shape, values] = sv;
    std::string stored;
    if (name.starts_with("mtp.")) {
      stored = o.mtp_prefix + name.substr(4);
    } else if (name.starts_with("lm_head")) {
      stored = head + name.substr(7);
    } else {
      stored = prefix + name;
    }
    DType dt = o.dtype;
    if (o.layout == Layout::Mlx) {
      if (name.find("conv1d") != std::string::npos) shape = {kConv, kK, 1};
      if (is_one_plus_norm(name)) {  // stored as the real gamma, exactly 1 + (rounded w)
        for (auto& x : values) x = 1.0f + tensor_floats(float_tensor(o.dtype, {1}, {x}))[0];
        dt = DType::F32;
      }
    }
    sm.tensors[stored] = float_tensor(dt, shape, values);
  }
  if (o.visual) {
    sm.tensors["model.visual.patch_embed.proj.weight"] = float_tensor(o.dtype, {8, 3}, std::vector<float>(24, 0.5f));
    sm.tensors["model.visual.blocks.0.norm1.weight"] = float_tensor(o.dtype, {8}, std::vector<float>(8, 1.0f));
  }
  return sm;
}

void write_model(const SynthModel& sm, const std::string& dir, const std::string& file = "model.safetensors") {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << sm.config.dump(2);
  std::vector<TensorToWrite> tw;
  for (const auto& [name, t] : sm.tensors) tw.push_back({name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  write_safetensors(dir + "/" + file, tw);
}

// For test_quantize.cpp (which declares it): a synthetic model directory.
void write_synth_model(const std::string& dir, Layout layout, bool tied, bool mtp, DType dtype, bool visual) {
  SynthOptions o;
  o.layout = layout;
  o.tied = tied;
  o.mtp = mtp;
  o.dtype = dtype;
  o.visual = visual;
  auto sm = make_model(o);
  write_model(sm, dir);
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [5, 6]})";
}

}  // namespace nextn::synth

namespace nextn {
namespace {

using synth::SynthOptions;
using test::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

Qwen35Checkpoint make(const TempDir& d, const SynthOptions& o) {
  synth::write_model(synth::make_model(o), d.str());
  return Qwen35Checkpoint::open(d.str());
}

TEST(Checkpoint, LayoutCausalLM) {
  TempDir d;
  auto ck = make(d, {.layout = Layout::CausalLM});
  EXPECT_EQ(ck.layout(), Layout::CausalLM);
  EXPECT_FALSE(ck.norms_shifted());
  EXPECT_EQ(ck.stored_name("layers.0.mlp.up_proj"), "model.layers.0.mlp.up_proj");
  EXPECT_EQ(ck.stored_name("lm_head"), "lm_head");
  EXPECT_EQ(ck.stored_name("mtp.fc"), "mtp.fc");
  EXPECT_EQ(ck.logical_name("model.layers.0.mlp.up_proj.weight"), "layers.0.mlp.up_proj.weight");
  EXPECT_EQ(ck.logical_name("lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(ck.logical_name("mtp.norm.weight"), "mtp.norm.weight");
  EXPECT_EQ(ck.mtp_layers(), 1);
  EXPECT_EQ(ck.lm_head().name, "lm_head.weight");
  EXPECT_NO_THROW(ck.validate());
}

TEST(Checkpoint, LayoutConditionalGenerationSkipsVisual) {
  TempDir d;
  auto ck = make(d, {.layout = Layout::ConditionalGeneration, .visual = true});
  EXPECT_EQ(ck.layout(), Layout::ConditionalGeneration);
  EXPECT_FALSE(ck.norms_shifted());
  EXPECT_EQ(ck.stored_name("embed_tokens"), "model.language_model.embed_tokens");
  EXPECT_EQ(ck.lm_head().name, "lm_head.weight");
  EXPECT_FALSE(ck.logical_name("model.visual.blocks.0.norm1.weight"));
  EXPECT_EQ(ck.config().model_type, "qwen3_5");
  EXPECT_NO_THROW(ck.validate());
}

TEST(Checkpoint, LayoutMlx) {
  TempDir d;
  auto ck = make(d, {.layout = Layout::Mlx});
  EXPECT_EQ(ck.layout(), Layout::Mlx);
  EXPECT_TRUE(ck.norms_shifted());  // conv1d [C, K, 1]
  EXPECT_EQ(ck.stored_name("layers.1.self_attn.q_proj"), "language_model.model.layers.1.self_attn.q_proj");
  EXPECT_EQ(ck.lm_head().name, "language_model.lm_head.weight");
  EXPECT_EQ(ck.logical_name("language_model.lm_head.weight"), "lm_head.weight");
  EXPECT_NO_THROW(ck.validate());
}

TEST(Checkpoint, SameValuesInEveryLayout) {
  TempDir a, b, c;
  auto hf = make(a, {.layout = Layout::CausalLM});
  auto cg = make(b, {.layout = Layout::ConditionalGeneration});
  auto mx = make(c, {.layout = Layout::Mlx});
  for (const auto* ck : {&cg, &mx}) {
    for (const char* n : {"layers.0.input_layernorm", "layers.1.self_attn.q_norm", "norm", "mtp.pre_fc_norm_hidden",
                          "mtp.layers.0.self_attn.k_norm", "mtp.norm"}) {
      const int64_t size = std::string(n).find("_norm") != std::string::npos &&
                                   std::string(n).find("self_attn") != std::string::npos
                               ? synth::kHd
                               : synth::kH;
      EXPECT_EQ(ck->norm(n, size, true), hf.norm(n, size, true)) << n;
    }
    EXPECT_EQ(ck->norm("layers.0.linear_attn.norm", synth::kDv, false),
              hf.norm("layers.0.linear_attn.norm", synth::kDv, false));
    EXPECT_EQ(ck->conv1d("layers.0.linear_attn.conv1d", synth::kConv, synth::kK),
              hf.conv1d("layers.0.linear_attn.conv1d", synth::kConv, synth::kK));
    EXPECT_EQ(ck->vector("layers.0.linear_attn.A_log", synth::kHv), hf.vector("layers.0.linear_attn.A_log", synth::kHv));
    std::vector<float> r1(synth::kH), r2(synth::kH);
    dequantize_row(ck->matrix("layers.0.mlp.up_proj", synth::kI, synth::kH), 7, r1.data());
    dequantize_row(hf.matrix("layers.0.mlp.up_proj", synth::kI, synth::kH), 7, r2.data());
    EXPECT_EQ(r1, r2);
  }
  // HF norms get +1; the plain GDN norm does not.
  const TensorView& raw = hf.store().get("model.layers.0.input_layernorm.weight");
  EXPECT_EQ(hf.norm("layers.0.input_layernorm", synth::kH, true)[3], 1.0f + load_float(raw.dtype, raw.data, 3));
  EXPECT_EQ(hf.norm("layers.0.input_layernorm", synth::kH, false)[3], load_float(raw.dtype, raw.data, 3));
}

TEST(Checkpoint, TiedHeadIsTheEmbedding) {
  TempDir d;
  auto ck = make(d, {.layout = Layout::CausalLM, .tied = true});
  WeightRef h = ck.lm_head();
  EXPECT_EQ(h.name, "model.embed_tokens.weight");
  EXPECT_EQ(h.weight, ck.matrix("embed_tokens", synth::kV, synth::kH).weight);
  EXPECT_FALSE(ck.has("lm_head"));
  TempDir m;
  auto mx = make(m, {.layout = Layout::Mlx, .tied = true});
  EXPECT_EQ(mx.lm_head().name, "language_model.model.embed_tokens.weight");
}

TEST(Checkpoint, MtpLayerCount) {
  TempDir a;
  EXPECT_EQ(make(a, {.mtp_in_config = -1}).mtp_layers(), 1);  // counted from mtp.layers.*
  TempDir b;
  auto no_head = make(b, {.mtp = false, .mtp_in_config = 1});
  EXPECT_EQ(no_head.mtp_layers(), 0);  // no mtp.* tensors: no head
  // The config carries the same count, so a runtime (which sees only the
  // config) and the CLI (which sees the checkpoint) pick the same default K.
  EXPECT_EQ(no_head.config().mtp_num_hidden_layers, 0);
  TempDir c;
  EXPECT_EQ(make(c, {.mtp = true, .mtp_in_config = 0}).mtp_layers(), 0);  // config says 0
  EXPECT_EQ(make(a, {.mtp_in_config = -1}).config().mtp_num_hidden_layers, 1);
  TempDir e;
  auto ck = make(e, {.layout = Layout::Mlx, .mtp_in_config = -1, .mtp_prefix = "language_model.mtp."});
  EXPECT_EQ(ck.mtp_layers(), 1);
  EXPECT_EQ(ck.mtp_prefix(), "language_model.mtp.");
  EXPECT_EQ(ck.stored_name("mtp.fc"), "language_model.mtp.fc");
  EXPECT_NO_THROW(ck.validate());
}

TEST(Checkpoint, MoreThanOneMtpLayerIsRefused) {
  // Config says 2: the runtimes would run mtp.layers.0 only.
  TempDir a;
  synth::write_model(synth::make_model({.mtp_in_config = 2}), a.str());
  std::string m = error_of([&] { Qwen35Checkpoint::open(a.str()); });
  EXPECT_NE(m.find("'mtp_num_hidden_layers' is 2"), std::string::npos) << m;
  EXPECT_NE(m.find("single MTP layer"), std::string::npos) << m;
  // No count in the config: two stored layers are counted and refused alike.
  TempDir b;
  auto sm = synth::make_model({.mtp_in_config = -1});
  sm.tensors["mtp.layers.1.input_layernorm.weight"] = sm.tensors["mtp.layers.0.input_layernorm.weight"];
  synth::write_model(sm, b.str());
  m = error_of([&] { Qwen35Checkpoint::open(b.str()); });
  EXPECT_NE(m.find("2 mtp.layers.* tensor layers"), std::string::npos) << m;
}

TEST(Checkpoint, TiedFlagMustMatchTheTensors) {
  // Untied, but no LM head stored: transformers would start from a random head.
  TempDir a;
  auto untied = synth::make_model({.tied = false});
  untied.tensors.erase("lm_head.weight");
  synth::write_model(untied, a.str());
  std::string m = error_of([&] { Qwen35Checkpoint::open(a.str()); });
  EXPECT_NE(m.find("'tie_word_embeddings' is false but no 'lm_head.weight'"), std::string::npos) << m;

  // Tied, with a stored head that is not the embedding: which one is meant?
  TempDir b;
  auto tied = synth::make_model({.tied = true});
  tied.tensors["lm_head.weight"] = synth::make_model({.tied = false}).tensors.at("lm_head.weight");
  synth::write_model(tied, b.str());
  m = error_of([&] { Qwen35Checkpoint::open(b.str()); });
  EXPECT_NE(m.find("'tie_word_embeddings' is true but the stored 'lm_head.weight' differs"), std::string::npos) << m;

  // Tied, with a stored copy of the embedding: consistent, accepted.
  TempDir c;
  tied.tensors["lm_head.weight"] = tied.tensors.at("model.embed_tokens.weight");
  synth::write_model(tied, c.str());
  EXPECT_NO_THROW(Qwen35Checkpoint::open(c.str()).validate());
}

TEST(Checkpoint, RuntimeCapacityWithinMaxPositionEmbeddings) {
  TempDir d;
  auto sm = synth::make_model({});
  sm.config["max_position_embeddings"] = 16;
  synth::write_model(sm, d.str());
  const auto ck = Qwen35Checkpoint::open(d.str());
  EXPECT_NO_THROW(make_runtime(ck, BackendKind::Cpu, 16));
  std::string m = error_of([&] { make_runtime(ck, BackendKind::Cpu, 17); });
  EXPECT_NE(m.find("needs up to 17 positions"), std::string::npos) << m;
  EXPECT_NE(m.find("max_position_embeddings is 16"), std::string::npos) << m;
  m = error_of([&] { make_runtime(ck, BackendKind::Cpu, 0); });
  EXPECT_NE(m.find("capacity 0"), std::string::npos) << m;
}

TEST(Checkpoint, LayoutErrors) {
  TempDir d;
  auto sm = synth::make_model({});
  sm.tensors["language_model.model.norm.weight"] = sm.tensors["model.norm.weight"];
  synth::write_model(sm, d.str());
  std::string m = error_of([&] { Qwen35Checkpoint::open(d.str()); });
  EXPECT_NE(m.find("more than one layout"), std::string::npos) << m;

  TempDir e;
  synth::SynthModel none;
  none.config = synth::text_config_json(false);
  none.tensors["foo.weight"] = synth::float_tensor(DType::F32, {2}, {1, 2});
  synth::write_model(none, e.str());
  m = error_of([&] { Qwen35Checkpoint::open(e.str()); });
  EXPECT_NE(m.find("cannot detect the checkpoint layout"), std::string::npos) << m;
  EXPECT_EQ(m.rfind(e.str() + ": ", 0), 0u) << m;

  std::string names_why;
  EXPECT_FALSE(detect_layout({"model.visual.x"}, &names_why));
  EXPECT_EQ(detect_layout({"model.layers.0.x", "mtp.fc.weight", "lm_head.weight"}), Layout::CausalLM);
  EXPECT_EQ(detect_layout({"model.language_model.norm.weight", "model.visual.x"}), Layout::ConditionalGeneration);
  EXPECT_EQ(detect_layout({"language_model.model.norm.weight", "language_model.lm_head.weight"}), Layout::Mlx);
}

TEST(Checkpoint, MissingTensorAndWrongShape) {
  TempDir d;
  auto sm = synth::make_model({});
  sm.tensors.erase("model.layers.0.mlp.up_proj.weight");
  sm.tensors["model.layers.1.mlp.down_proj.weight"] =
      synth::float_tensor(DType::BF16, {synth::kH, 5}, std::vector<float>(size_t(synth::kH) * 5, 0.f));
  synth::write_model(sm, d.str());
  auto ck = Qwen35Checkpoint::open(d.str());
  EXPECT_EQ(error_of([&] { ck.matrix("layers.0.mlp.up_proj", synth::kI, synth::kH); }),
            d.str() + ": missing tensor 'model.layers.0.mlp.up_proj.weight'");
  EXPECT_EQ(error_of([&] { ck.matrix("layers.1.mlp.down_proj", synth::kH, synth::kI); }),
            d.str() + ": tensor 'model.layers.1.mlp.down_proj.weight': shape [64, 5], expected [64, 96]");
  EXPECT_EQ(error_of([&] { ck.norm("layers.0.input_layernorm", 65, true); }),
            d.str() + ": tensor 'model.layers.0.input_layernorm.weight': shape [64], expected [65]");
  EXPECT_NE(error_of([&] { ck.conv1d("layers.0.linear_attn.conv1d", synth::kConv, 3); }).find("[128, 1, 3]"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { ck.vector("layers.0.linear_attn.missing", 4); }),
            d.str() + ": missing tensor 'model.layers.0.linear_attn.missing'");
  EXPECT_NE(error_of([&] { ck.validate(); }).find("missing tensor 'model.layers.0.mlp.up_proj.weight'"),
            std::string::npos);
}

TEST(Checkpoint, MissingConfigOrDir) {
  TempDir d;
  std::string m = error_of([&] { Qwen35Checkpoint::open(d.str()); });
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
  m = error_of([&] { Qwen35Checkpoint::open(d.str() + "/nope"); });
  EXPECT_NE(m.find("nope"), std::string::npos) << m;
}

// ---- quantized matrices ----

struct PackedCase {
  std::vector<uint32_t> packed;
  std::vector<float> scales, biases;  // [rows][groups]
  std::vector<float> expect;          // [rows][cols]
};

// Random q values packed MLX-style, with random (some negative) scales.
PackedCase make_packed(int64_t rows, int64_t cols, int bits, int group, DType sdt, DType bdt, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedCase pc;
  const int per = 32 / bits;
  const int64_t groups = cols / group;
  pc.packed.assign(size_t(rows * cols / per), 0);
  for (int64_t i = 0; i < rows * groups; ++i) {
    float s = std::uniform_real_distribution<float>(-0.02f, 0.02f)(rng);
    float b = std::uniform_real_distribution<float>(-0.3f, 0.3f)(rng);
    // round through the stored dtype so the expectation uses what is read back
    pc.scales.push_back(synth::tensor_floats(synth::float_tensor(sdt, {1}, {s}))[0]);
    pc.biases.push_back(synth::tensor_floats(synth::float_tensor(bdt, {1}, {b}))[0]);
  }
  pc.expect.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t q = rng() & ((1u << bits) - 1);
      pc.packed[size_t((r * cols + c) / per)] |= q << ((c % per) * bits);
      const float s = pc.scales[size_t(r * groups + c / group)], b = pc.biases[size_t(r * groups + c / group)];
      const float sq = s * float(q);
      pc.expect[size_t(r * cols + c)] = sq + b;
    }
  return pc;
}

TEST(Quantized, DequantizeRowAllFormats) {
  int seed = 1;
  for (int bits : {4, 8})
    for (int group : {32, 64, 128})
      for (auto [sdt, bdt] : {std::pair{DType::BF16, DType::BF16}, std::pair{DType::F32, DType::F16},
                              std::pair{DType::F16, DType::BF16}, std::pair{DType::F32, DType::F32}}) {
        const int64_t rows = 3, cols = 256;
        PackedCase pc = make_packed(rows, cols, bits, group, sdt, bdt, uint32_t(seed++));
        auto st = synth::float_tensor(sdt, {rows, cols / group}, pc.scales);
        auto bt = synth::float_tensor(bdt, {rows, cols / group}, pc.biases);
        TensorView wv{"w.weight", DType::U32, {rows, cols * bits / 32},
                      reinterpret_cast<const uint8_t*>(pc.packed.data()), pc.packed.size() * 4, nullptr};
        TensorView sv{"w.scales", sdt, st.shape, st.bytes.data(), st.bytes.size(), nullptr};
        TensorView bv{"w.biases", bdt, bt.shape, bt.bytes.data(), bt.bytes.size(), nullptr};
        WeightRef w;
        w.name = "w.weight";
        w.weight = &wv;
        w.scales = &sv;
        w.biases = &bv;
        w.quant = {bits, group};
        w.rows = rows;
        w.cols = cols;
        bool negative = false;
        for (float s : pc.scales) negative |= s < 0;
        ASSERT_TRUE(negative);
        std::vector<float> row(cols);
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(w, r, row.data());
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(row[size_t(c)], pc.expect[size_t(r * cols + c)])
                << "bits " << bits << " group " << group << " r " << r << " c " << c;
        }
        EXPECT_THROW(dequantize_row(w, rows, row.data()), Error);
      }
}

TEST(Quantized, NibbleAndByteOrder) {
  // Element j of a word sits in bits [j*bits, (j+1)*bits): lowest first.
  uint32_t w4 = 0x76543210u, w8 = 0x04030201u;
  std::vector<float> one(1, 1.0f), zero(1, 0.0f);
  for (auto [bits, word] : {std::pair{4, w4}, std::pair{8, w8}}) {
    const int64_t cols = 32;
    std::vector<uint32_t> packed(size_t(cols * bits / 32), word);
    auto st = synth::float_tensor(DType::F32, {1, 1}, one);
    auto bt = synth::float_tensor(DType::F32, {1, 1}, zero);
    TensorView wv{"w", DType::U32, {1, cols * bits / 32}, reinterpret_cast<const uint8_t*>(packed.data()),
                  packed.size() * 4, nullptr};
    TensorView sv{"s", DType::F32, {1, 1}, st.bytes.data(), 4, nullptr};
    TensorView bv{"b", DType::F32, {1, 1}, bt.bytes.data(), 4, nullptr};
    WeightRef w{"w", &wv, &sv, &bv, WeightCodec::Dense, {bits, 32}, 1, cols};
    std::vector<float> row(cols);
    dequantize_row(w, 0, row.data());
    if (bits == 4) {
      EXPECT_EQ(row[0], 0);
      EXPECT_EQ(row[1], 1);
      EXPECT_EQ(row[7], 7);
      EXPECT_EQ(row[8], 0);
    } else {
      EXPECT_EQ(row[0], 1);
      EXPECT_EQ(row[1], 2);
      EXPECT_EQ(row[3], 4);
      EXPECT_EQ(row[4], 1);
    }
  }
}

// A checkpoint with one quantized module, to check shape validation.
struct QuantCk {
  TempDir dir;
  std::string mod = "language_model.model.layers.0.mlp.up_proj";
  void write(const std::vector<int64_t>& wshape, DType wdt, const std::vector<int64_t>& sshape,
             const std::vector<int64_t>& bshape, const nlohmann::json& quant, bool with_biases = true) {
    auto sm = synth::make_model({.layout = Layout::Mlx});
    if (!quant.is_null()) sm.config["quantization"] = quant;
    auto numel = [](const std::vector<int64_t>& s) {
      int64_t n = 1;
      for (auto d : s) n *= d;
      return n;
    };
    synth::SynthTensor w;
    w.dtype = wdt;
    w.shape = wshape;
    w.bytes.assign(size_t(numel(wshape)) * dtype_size(wdt), 0x11);
    sm.tensors[mod + ".weight"] = w;
    sm.tensors[mod + ".scales"] = synth::float_tensor(DType::BF16, sshape, std::vector<float>(size_t(numel(sshape)), -0.5f));
    if (with_biases)
      sm.tensors[mod + ".biases"] = synth::float_tensor(DType::F32, bshape, std::vector<float>(size_t(numel(bshape)), 0.25f));
    synth::write_model(sm, dir.str());
  }
};

TEST(Quantized, ShapeValidation) {
  const nlohmann::json q4 = {{"bits", 4}, {"group_size", 32}, {"mode", "affine"}};
  const int64_t I = synth::kI, H = synth::kH;
  {
    QuantCk c;
    c.write({I, H / 8}, DType::U32, {I, H / 32}, {I, H / 32}, q4);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    WeightRef w = ck.matrix("layers.0.mlp.up_proj", I, H);
    EXPECT_TRUE(w.quantized());
    EXPECT_EQ(w.quant.bits, 4);
    EXPECT_EQ(w.quant.group_size, 32);
    std::vector<float> row(H);
    dequantize_row(w, 0, row.data());
    EXPECT_EQ(row[0], -0.5f * 1 + 0.25f);  // 0x11 bytes: every nibble is 1
    EXPECT_NO_THROW(ck.validate());
  }
  {
    QuantCk c;  // packed shape wrong
    c.write({I, H / 4}, DType::U32, {I, H / 32}, {I, H / 32}, q4);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_EQ(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }),
              c.dir.str() + ": tensor '" + c.mod + ".weight': shape [96, 16], expected [96, 8] (4-bit packing of [96, 64])");
  }
  {
    QuantCk c;  // scales shape wrong
    c.write({I, H / 8}, DType::U32, {I, H / 64}, {I, H / 32}, q4);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_EQ(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }),
              c.dir.str() + ": tensor '" + c.mod + ".scales': shape [96, 1], expected [96, 2] (group size 32 over [96, 64])");
  }
  {
    QuantCk c;  // biases shape wrong
    c.write({I, H / 8}, DType::U32, {I, H / 32}, {I, 3}, q4);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_NE(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }).find(c.mod + ".biases': shape [96, 3]"),
              std::string::npos);
  }
  {
    QuantCk c;  // biases missing
    c.write({I, H / 8}, DType::U32, {I, H / 32}, {I, H / 32}, q4, false);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_EQ(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }),
              c.dir.str() + ": missing tensor '" + c.mod + ".biases'");
  }
  {
    QuantCk c;  // weight not U32
    c.write({I, H / 8}, DType::F32, {I, H / 32}, {I, H / 32}, q4);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_NE(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }).find("expected U32"), std::string::npos);
  }
  {
    QuantCk c;  // no quantization block
    c.write({I, H / 8}, DType::U32, {I, H / 32}, {I, H / 32}, nullptr);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_NE(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }).find("no 'quantization'"), std::string::npos);
  }
  {
    QuantCk c;  // 8-bit override for this module, and the matching shapes
    nlohmann::json q = q4;
    q[c.mod] = {{"bits", 8}, {"group_size", 64}};
    c.write({I, H / 4}, DType::U32, {I, 1}, {I, 1}, q);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    WeightRef w = ck.matrix("layers.0.mlp.up_proj", I, H);
    EXPECT_EQ(w.quant.bits, 8);
    EXPECT_EQ(w.quant.group_size, 64);
  }
  {
    QuantCk c;  // override false but .scales stored
    nlohmann::json q = q4;
    q[c.mod] = false;
    c.write({I, H / 8}, DType::U32, {I, H / 32}, {I, H / 32}, q);
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_NE(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }).find("not quantized"), std::string::npos);
  }
  {
    QuantCk c;  // U32 weight without scales
    auto sm = synth::make_model({.layout = Layout::Mlx});
    synth::SynthTensor w;
    w.dtype = DType::U32;
    w.shape = {I, H / 8};
    w.bytes.assign(size_t(I * H / 8 * 4), 0);
    sm.tensors[c.mod + ".weight"] = w;
    synth::write_model(sm, c.dir.str());
    auto ck = Qwen35Checkpoint::open(c.dir.str());
    EXPECT_NE(error_of([&] { ck.matrix("layers.0.mlp.up_proj", I, H); }).find("no '" + c.mod + ".scales'"),
              std::string::npos);
  }
}

TEST(Checkpoint, IsOnePlusNorm) {
  for (const char* n : {"layers.3.input_layernorm", "layers.3.post_attention_layernorm.weight", "norm.weight",
                        "layers.7.self_attn.q_norm", "layers.7.self_attn.k_norm.weight", "mtp.pre_fc_norm_embedding",
                        "mtp.pre_fc_norm_hidden.weight", "mtp.layers.0.input_layernorm.weight",
                        "mtp.layers.0.post_attention_layernorm", "mtp.layers.0.self_attn.q_norm.weight",
                        "mtp.layers.0.self_attn.k_norm", "mtp.norm.weight"})
    EXPECT_TRUE(is_one_plus_norm(n)) << n;
  for (const char* n : {"layers.0.linear_attn.norm.weight", "layers.0.linear_attn.A_log", "embed_tokens.weight",
                        "layers.0.mlp.up_proj.weight", "lm_head.weight", "mtp.fc.weight"})
    EXPECT_FALSE(is_one_plus_norm(n)) << n;
}

// ---- transformers-made fixtures ----

class FixtureCheckpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureCheckpoint, OpensAndValidates) {
  const std::string dir = std::string(NEXTN_FIXTURES) + "/" + GetParam();
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir << " is committed; a missing fixture is a failure";
  auto ck = Qwen35Checkpoint::open(dir);
  EXPECT_NO_THROW(ck.validate());
  EXPECT_FALSE(ck.norms_shifted());
  const std::string name = GetParam();
  if (name == "qwen35-cond-untied") {
    EXPECT_EQ(ck.layout(), Layout::ConditionalGeneration);
    EXPECT_EQ(ck.config().model_type, "qwen3_5");
    EXPECT_EQ(ck.lm_head().name, "lm_head.weight");
  } else {
    EXPECT_EQ(ck.layout(), Layout::CausalLM);
  }
  if (name == "qwen35-causal-tied") {
    EXPECT_EQ(ck.lm_head().name, "model.embed_tokens.weight");
    EXPECT_EQ(ck.config().full_attention,
              (std::vector<bool>{false, false, false, true, false, false, false, true}));
  }
  if (name == "qwen35-causal-sharded") {
    EXPECT_EQ(ck.config().full_attention,
              (std::vector<bool>{false, true, false, false, false, false, true, false}));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureCheckpoint,
                         ::testing::Values("qwen35-causal-tied", "qwen35-cond-untied", "qwen35-causal-sharded"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace nextn
