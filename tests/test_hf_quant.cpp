// transformers' quantized formats (io/hf_quant.h): each case of
// tests/fixtures/quant_cases.json (written by scripts/fixtures/make_quant_cases.py
// with transformers / compressed-tensors) decoded through the loader
// (checkpoint_matrix) must give the reference's fp32 values bit for bit
// (compared by FNV-1a 64 of the fp32 bytes). Then malformed inputs: every one
// is one Error naming the tensor or the config field.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string unbase64(const std::string& in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  int bits = 0, acc = 0;
  for (char c : in) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string base64(const std::string& raw) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b;
  for (size_t i = 0; i < raw.size(); i += 3) {
    const uint32_t n = uint32_t(uint8_t(raw[i])) << 16 | (i + 1 < raw.size() ? uint32_t(uint8_t(raw[i + 1])) << 8 : 0) |
                       (i + 2 < raw.size() ? uint32_t(uint8_t(raw[i + 2])) : 0);
    b += k[n >> 18 & 63];
    b += k[n >> 12 & 63];
    b += i + 1 < raw.size() ? k[n >> 6 & 63] : '=';
    b += i + 2 < raw.size() ? k[n & 63] : '=';
  }
  return b;
}

std::string fnv1a64(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * 4; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

json load_cases() {
  std::ifstream f(std::string(NEXTN_FIXTURES) + "/quant_cases.json");
  return json::parse(f).at("cases");
}

json find_case(const std::string& name) {
  for (const auto& c : load_cases())
    if (c.at("name") == name) return c;
  ADD_FAILURE() << "no case " << name;
  return {};
}

// The case's tensors as one safetensors file in a fresh directory.
std::string write_case(const json& c, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("nextn-hfq-{}-{}", ::getpid(), tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> bytes;
  for (const auto& t : c.at("tensors")) bytes.push_back(unbase64(t.at("b64").get<std::string>()));
  std::vector<TensorToWrite> ts;
  size_t i = 0;
  for (const auto& t : c.at("tensors")) {
    const auto dt = dtype_from_name(t.at("dtype").get<std::string>());
    ts.push_back({t.at("name").get<std::string>(), *dt, t.at("shape").get<std::vector<int64_t>>(), bytes[i].data(),
                  bytes[i].size()});
    ++i;
  }
  write_safetensors((dir / "model.safetensors").string(), ts);
  return dir.string();
}

QuantConfig config_of(const json& block) {
  return parse_quant_config("config.json", json{{"quantization_config", block}}, /*allow_hf=*/true);
}

std::vector<float> decode(const json& c, const std::string& dir) {
  const TensorStore store = TensorStore::open(dir);
  const WeightRef w = checkpoint_matrix(store, config_of(c.at("config")), dir, c.at("module"), c.at("rows"),
                                        c.at("cols"));
  EXPECT_EQ(w.weight->dtype, DType::F32);
  EXPECT_FALSE(w.quantized());  // handed to the backends as a dense matrix
  const int64_t n = w.rows * w.cols;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w, r, v.data() + r * w.cols);
  return v;
}

TEST(QuantFormats, EveryCaseDecodesToTheReferenceBitForBit) {
  const json cases = load_cases();
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const std::vector<float> v = decode(c, write_case(c, c.at("name")));
    const auto head = c.at("expected_head").get<std::vector<double>>();
    for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(v[i], float(head[i])) << "element " << i;
    EXPECT_EQ(fnv1a64(v), c.at("expected_fnv1a64").get<std::string>());
  }
}

// The error of decoding a case after `edit` changes its tensors or config.
std::string error_of(json c, const std::function<void(json&)>& edit) {
  edit(c);
  try {
    decode(c, write_case(c, "bad"));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

json& tensor_of(json& c, const std::string& suffix) {
  for (auto& t : c.at("tensors"))
    if (t.at("name").get<std::string>().ends_with(suffix)) return t;
  throw std::runtime_error("no tensor " + suffix);
}

void erase_tensor(json& c, const std::string& suffix) {
  auto& ts = c.at("tensors");
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].at("name").get<std::string>().ends_with(suffix)) {
      ts.erase(i);
      return;
    }
}

void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(QuantFormatsBadInput, WrongDtypeShapeMissingScaleNameTheTensor) {
  const json gptq = find_case("gptq-4bit-g8-asym-desc_act");
  expect_has(error_of(gptq, [](json& c) { tensor_of(c, ".qweight")["dtype"] = "F32"; }),
             {"down_proj.qweight", "dtype F32", "I32"});
  expect_has(error_of(gptq, [](json& c) { tensor_of(c, ".scales")["shape"] = {8, 8}; }),
             {"down_proj.scales", "shape [8, 8], expected [4, 16]"});
  expect_has(error_of(gptq, [](json& c) { erase_tensor(c, ".scales"); }), {"missing tensor", "down_proj.scales"});
  // g_idx pointing past the last group.
  expect_has(error_of(gptq,
                      [](json& c) {
                        std::vector<int32_t> g(32, 4);
                        const std::string b = base64(std::string(reinterpret_cast<const char*>(g.data()), 128));
                        tensor_of(c, ".g_idx")["b64"] = b;
                      }),
             {"down_proj.g_idx", "outside [0, 4)"});
  // A group size that does not divide the input (32 % 24).
  expect_has(error_of(gptq, [](json& c) { c["config"]["group_size"] = 24; }), {"group size 24", "32 input columns"});

  const json fp8 = find_case("fp8-block");
  expect_has(error_of(fp8, [](json& c) { erase_tensor(c, ".weight_scale_inv"); }),
             {"down_proj.weight", "F8_E4M3", "weight_scale_inv"});
  expect_has(error_of(fp8, [](json& c) { tensor_of(c, ".weight")["dtype"] = "U8"; }), {"down_proj.weight", "U8"});
  expect_has(error_of(fp8, [](json& c) { c["config"]["weight_block_size"] = {16, 32}; }),
             {"down_proj.weight_scale_inv", "shape [2, 2], expected [1, 2]"});
  expect_has(error_of(fp8, [](json& c) { c["config"]["modules_to_not_convert"] = {"model.layers.0"}; }),
             {"down_proj.weight_scale_inv", "modules_to_not_convert"});

  const json awq = find_case("awq-gemm-g16");
  expect_has(error_of(awq, [](json& c) { tensor_of(c, ".qzeros")["dtype"] = "F32"; }), {"down_proj.qzeros", "dtype F32"});
  expect_has(error_of(awq, [](json& c) { c["config"]["group_size"] = 128; }), {"group size 128"});

  const json ct = find_case("ct-int4-g8-asym");
  expect_has(error_of(ct, [](json& c) { erase_tensor(c, ".weight_zero_point"); }),
             {"missing tensor", "down_proj.weight_zero_point"});
  expect_has(error_of(ct, [](json& c) { c["config"]["config_groups"]["group_0"]["weights"]["group_size"] = 16; }),
             {"down_proj.weight_scale", "shape [16, 4], expected [16, 2]"});
  expect_has(error_of(ct, [](json& c) { c["config"]["ignore"] = {"re:model\\.layers\\.0\\..*"}; }),
             {"down_proj", "no quantization_config.config_groups entry targets it"});
  const json ctf = find_case("ct-fp8-channel");
  expect_has(error_of(ctf, [](json& c) { tensor_of(c, ".weight_scale")["shape"] = {4, 2}; }),
             {"down_proj.weight_scale", "expected [8, 1]"});
}

TEST(QuantFormatsBadInput, ConfigsNotRunAreRefusedByName) {
  auto err = [](const json& block) -> std::string {
    try {
      config_of(block);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  expect_has(err({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}), {"quant_method", "'bitsandbytes'"});
  expect_has(err({{"quant_method", "hqq"}}), {"quantization_config.quant_method", "'hqq' quantization is not supported"});
  expect_has(err({{"quant_method", 3}}), {"quantization_config.quant_method", "expected a string"});
  expect_has(err({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"checkpoint_format", "gptq_v2"}}),
             {"quantization_config.checkpoint_format", "'gptq_v2'"});
  expect_has(err({{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}}), {"quantization_config.bits", "3-bit"});
  expect_has(err({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemv"}}),
             {"quantization_config.version", "'gemv'"});
  expect_has(err({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "marlin"}}),
             {"quantization_config.version", "'marlin'"});
  json ct = find_case("ct-int4-g8-asym").at("config");
  ct["format"] = "marlin-24";
  expect_has(err(ct), {"quantization_config.config_groups.group_0", "'marlin-24'"});
  ct["format"] = "nvfp4-pack-quantized";
  expect_has(err(ct), {"'nvfp4-pack-quantized'"});
  ct = find_case("ct-int4-g8-asym").at("config");
  ct["config_groups"]["group_0"]["weights"]["num_bits"] = 2;
  expect_has(err(ct), {"quantization_config.config_groups.group_0.weights.num_bits", "2-bit"});
  ct = find_case("ct-int4-g8-asym").at("config");
  ct["sparsity_config"] = json::object();  // what compressed-tensors writes for a dense model: accepted
  ct["transform_config"] = json::object();
  EXPECT_EQ(config_of(ct).method, QuantMethod::CompressedTensors);
  ct["sparsity_config"] = {{"format", "sparse-24-bitmask"}, {"sparsity_structure", "2:4"}};
  expect_has(err(ct), {"quantization_config.sparsity_config", "sparse"});
  ct["sparsity_config"] = json::object();
  ct["transform_config"] = {{"config_groups", {{"R1", {{"type", "hadamard"}}}}}};
  expect_has(err(ct), {"quantization_config.transform_config", "transformed"});
  expect_has(err({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemm"}, {"backend", "llm-awq"}}),
             {"quantization_config.backend", "'llm-awq'"});
  EXPECT_EQ(config_of({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemm"}, {"backend", "auto"}}).method,
            QuantMethod::Awq);
  ct = find_case("ct-int4-g8-asym").at("config");
  ct["ignore"] = {"re:("};
  expect_has(err(ct), {"quantization_config.ignore[0]", "invalid regular expression"});
  expect_has(err({{"quant_method", "fp8"}, {"weight_block_size", {128}}}), {"quantization_config.weight_block_size"});
  expect_has(err({{"quant_method", "fp8"}, {"scale_fmt", "ue8m0"}}), {"quantization_config.scale_fmt", "'ue8m0'"});
}

TEST(QuantFormats, ActivationQuantizationIsReadAndStated) {
  json ct = find_case("ct-fp8-channel").at("config");
  ct["config_groups"]["group_0"]["input_activations"] = {
      {"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}, {"symmetric", true}};
  const QuantConfig q = config_of(ct);
  EXPECT_EQ(q.method, QuantMethod::CompressedTensors);
  const std::string s = q.hf.summary();
  EXPECT_NE(s.find("activations fp8 dynamic per-token (not applied: weight-only run)"), std::string::npos) << s;
  EXPECT_NE(config_of(find_case("fp8-block").at("config")).hf.summary().find("weight blocks 8x32"), std::string::npos);
}

// transformers 5.23's should_convert_module: prefix at a module boundary, regex, or suffix.
TEST(QuantFormats, ModulesToNotConvertMatchesLikeTransformers) {
  HfQuant q;
  q.not_convert = {"model.layers.1", "mlp.gate", "lm_head", "layers\\.2.*"};
  EXPECT_TRUE(q.not_converted("model.layers.1.mlp.up_proj"));
  EXPECT_FALSE(q.not_converted("model.layers.11.mlp.up_proj"));
  EXPECT_FALSE(q.not_converted("model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(q.not_converted("lm_head"));
  EXPECT_FALSE(q.not_converted("model.layers.2.mlp.up_proj"));  // regex anchored at the start
}

}  // namespace
}  // namespace nextn
