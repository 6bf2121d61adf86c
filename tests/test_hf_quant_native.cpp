// The native codecs of transformers' formats (MatrixForm::Native, what the
// CUDA bf16 mode streams): for every format, a module at a shape the codecs
// take (256 x 256 random codes, scales and zeros) is handed over in the codec
// docs/formats.md names, and each of its rows read through that codec
// (dequantize_row) is the row the dequantizing form (Fp32) gives (bit for bit
// but for the sign of an affine zero);
// where no codec holds the format exactly (activation order, a 160-column
// module) the module arrives dequantized instead.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kMod = "model.layers.0.mlp.down_proj";

struct Module {
  json config;
  std::deque<std::string> bytes;  // owns the tensors until written
  std::vector<TensorToWrite> tensors;
  template <typename T>
  void add(const std::string& suffix, DType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
    bytes.emplace_back(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    tensors.push_back({kMod + suffix, dt, std::move(shape), bytes.back().data(), bytes.back().size()});
  }
};

std::vector<uint32_t> random_words(std::mt19937& rng, size_t n) {
  std::vector<uint32_t> w(n);
  for (auto& x : w) x = rng();
  return w;
}

// fp16 scales of either sign, well inside fp16's range.
std::vector<uint16_t> f16_scales(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd(0.0f, 0.01f);
  std::vector<uint16_t> s(n);
  for (auto& x : s) x = f32_to_f16(nd(rng));
  return s;
}

// Zeros packed 8 per int32 along the output: every one `zero` (stored as is),
// or random 4-bit values.
std::vector<uint32_t> zeros_words(std::mt19937& rng, size_t n, int zero) {
  std::vector<uint32_t> w(n);
  for (auto& x : w) {
    x = 0;
    for (int j = 0; j < 8; ++j) x |= uint32_t(zero >= 0 ? zero : int(rng() & 15u)) << (4 * j);
  }
  return w;
}

Module gptq(std::mt19937& rng, int64_t rows, int64_t cols, int64_t g, bool sym, bool permuted, int bits = 4) {
  Module m;
  m.config = {{"quant_method", "gptq"}, {"bits", bits}, {"group_size", g}, {"sym", sym}, {"desc_act", permuted},
              {"checkpoint_format", "gptq"}};
  const int64_t ng = cols / g, per = 32 / bits;
  m.add(".qweight", DType::I32, {cols / per, rows}, random_words(rng, size_t(cols / per * rows)));
  if (bits == 4) {
    m.add(".qzeros", DType::I32, {ng, rows / 8}, zeros_words(rng, size_t(ng * rows / 8), sym ? 7 : -1));
  } else {  // 8-bit zeros, stored minus one: 127 when symmetric
    std::vector<uint32_t> z(size_t(ng * rows / 4));
    for (auto& x : z) x = sym ? 0x7f7f7f7fu : rng();
    m.add(".qzeros", DType::I32, {ng, rows / 4}, z);
  }
  m.add(".scales", DType::F16, {ng, rows}, f16_scales(rng, size_t(ng * rows)));
  std::vector<int32_t> gi(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) gi[size_t(i)] = int32_t(permuted ? (i * 7) % ng : i / g);
  m.add(".g_idx", DType::I32, {cols}, gi);
  return m;
}

Module awq(std::mt19937& rng, int64_t rows, int64_t cols, int64_t g) {
  Module m;
  m.config = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", g}, {"version", "gemm"}, {"zero_point", true}};
  const int64_t ng = cols / g;
  m.add(".qweight", DType::I32, {cols, rows / 8}, random_words(rng, size_t(cols * rows / 8)));
  m.add(".qzeros", DType::I32, {ng, rows / 8}, zeros_words(rng, size_t(ng * rows / 8), -1));
  m.add(".scales", DType::F16, {ng, rows}, f16_scales(rng, size_t(ng * rows)));
  return m;
}

std::vector<uint8_t> fp8_codes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> c(n);
  for (auto& x : c) {
    x = uint8_t(rng());
    if ((x & 0x7f) == 0x7f) x &= 0xfe;  // no NaN codes
  }
  return c;
}

Module fp8(std::mt19937& rng, int64_t rows, int64_t cols, int bo, int bi) {
  Module m;
  m.config = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {bo, bi}}};
  m.add(".weight", DType::F8_E4M3, {rows, cols}, fp8_codes(rng, size_t(rows * cols)));
  std::vector<float> s(size_t(((rows + bo - 1) / bo) * ((cols + bi - 1) / bi)));
  std::normal_distribution<float> nd(0.0f, 1e-3f);
  for (auto& x : s) x = nd(rng);
  m.add(".weight_scale_inv", DType::F32, {(rows + bo - 1) / bo, (cols + bi - 1) / bi}, s);
  return m;
}

json ct_config(const json& weights, const std::string& format) {
  return {{"quant_method", "compressed-tensors"}, {"format", format}, {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}}};
}

// compressed-tensors int4, `g` 0: per channel; fp32 scales when `f32_scales`.
Module ct_int4(std::mt19937& rng, int64_t rows, int64_t cols, int64_t g, bool sym, bool f32_scales) {
  Module m;
  json w = {{"num_bits", 4}, {"type", "int"}, {"symmetric", sym}, {"strategy", g ? "group" : "channel"}};
  if (g) w["group_size"] = g;
  m.config = ct_config(w, "pack-quantized");
  const int64_t ng = g ? cols / g : 1;
  m.add(".weight_packed", DType::I32, {rows, cols / 8}, random_words(rng, size_t(rows * cols / 8)));
  if (f32_scales) {
    std::normal_distribution<float> nd(0.0f, 0.01f);
    std::vector<float> s(size_t(rows * ng));
    for (auto& x : s) x = nd(rng);
    m.add(".weight_scale", DType::F32, {rows, ng}, s);
  } else {
    std::vector<uint16_t> s(size_t(rows * ng));
    std::normal_distribution<float> nd(0.0f, 0.01f);
    for (auto& x : s) x = f32_to_bf16(nd(rng));
    m.add(".weight_scale", DType::BF16, {rows, ng}, s);
  }
  if (!sym) m.add(".weight_zero_point", DType::I32, {rows / 8, ng}, zeros_words(rng, size_t(rows / 8 * ng), -1));
  m.add(".weight_shape", DType::I64, {2}, std::vector<int64_t>{rows, cols});
  return m;
}

Module ct_fp8_channel(std::mt19937& rng, int64_t rows, int64_t cols) {
  Module m;
  m.config = ct_config({{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"}},
                       "float-quantized");
  m.add(".weight", DType::F8_E4M3, {rows, cols}, fp8_codes(rng, size_t(rows * cols)));
  std::vector<uint16_t> s(static_cast<size_t>(rows));
  std::normal_distribution<float> nd(0.0f, 1e-3f);
  for (auto& x : s) x = f32_to_bf16(nd(rng));
  m.add(".weight_scale", DType::BF16, {rows, 1}, s);
  return m;
}

struct Case {
  std::string name;
  Module module;
  int64_t rows, cols;
  WeightCodec codec;  // expected in the Native form
  int group;          // its group (native codecs)
};

void check_case(const Case& c) {
  SCOPED_TRACE(c.name);
  const fs::path dir = fs::temp_directory_path() / fmt::format("nextn-native-{}-{}", ::getpid(), c.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), c.module.tensors);
  const TensorStore store = TensorStore::open(dir.string());
  const QuantConfig q =
      parse_quant_config("config.json", json{{"quantization_config", c.module.config}}, /*allow_hf=*/true);
  const WeightRef deq = checkpoint_matrix(store, q, dir.string(), kMod, c.rows, c.cols, MatrixForm::Fp32);
  const WeightRef nat = checkpoint_matrix(store, q, dir.string(), kMod, c.rows, c.cols, MatrixForm::Native);
  ASSERT_EQ(deq.codec(), WeightCodec::Dense);
  ASSERT_EQ(nat.codec(), c.codec) << weight_codec_name(nat.codec());
  if (c.codec != WeightCodec::Dense) {
    EXPECT_EQ(nat.quant.group_size, c.group);
    EXPECT_EQ(nat.scales->dtype, DType::F32);
    EXPECT_EQ(nat.biases != nullptr, c.codec == WeightCodec::Affine);
    EXPECT_EQ(nat.zeros != nullptr, c.codec == WeightCodec::ZeroInt);
  }
  std::vector<float> a(size_t(c.cols)), b(size_t(c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    dequantize_row(deq, r, a.data());
    dequantize_row(nat, r, b.data());
    // Equal as values: where q == zero the affine form gives +0 (s*q + -(s*q))
    // and the dequantized one s * 0, -0 for a negative scale; no sum differs.
    for (size_t k = 0; k < a.size(); ++k) ASSERT_EQ(a[k], b[k]) << "row " << r << " column " << k;
    if (c.codec != WeightCodec::Affine) {
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "row " << r;
    }
  }
  fs::remove_all(dir);
}

TEST(QuantNative, EachFormatArrivesInItsCodecWithTheSameValues) {
  std::mt19937 rng(11);
  const int64_t R = 256, C = 256;
  std::deque<Case> cases;  // never relocates a Case: its tensors point into its bytes
  cases.push_back({"fp8-b128", fp8(rng, R, C, 128, 128), R, C, WeightCodec::Fp8, 128});
  cases.push_back({"fp8-b64-partial-rows", fp8(rng, 200, C, 128, 64), 200, C, WeightCodec::Fp8, 64});
  cases.push_back({"gptq4-sym-g128", gptq(rng, R, C, 128, true, false), R, C, WeightCodec::ZeroInt, 128});
  cases.push_back({"gptq4-sym-g32", gptq(rng, R, C, 32, true, false), R, C, WeightCodec::ZeroInt, 32});
  cases.push_back({"gptq4-asym-g64", gptq(rng, R, C, 64, false, false), R, C, WeightCodec::ZeroInt, 64});
  cases.push_back({"gptq4-whole-row", gptq(rng, R, C, 256, true, false), R, C, WeightCodec::ZeroInt, 128});
  cases.push_back({"gptq8-asym-g128", gptq(rng, R, C, 128, false, false, 8), R, C, WeightCodec::Affine, 128});
  cases.push_back({"awq-g128", awq(rng, R, C, 128), R, C, WeightCodec::ZeroInt, 128});
  cases.push_back({"ct-int4-sym-g64", ct_int4(rng, R, C, 64, true, false), R, C, WeightCodec::ZeroInt, 64});
  cases.push_back({"ct-int4-asym-g32", ct_int4(rng, R, C, 32, false, false), R, C, WeightCodec::ZeroInt, 32});
  cases.push_back({"ct-int4-asym-f32-scales", ct_int4(rng, R, C, 32, false, true), R, C, WeightCodec::ZeroInt, 32});
  cases.push_back({"ct-int4-sym-channel", ct_int4(rng, R, C, 0, true, false), R, C, WeightCodec::ZeroInt, 128});
  cases.push_back({"ct-fp8-channel", ct_fp8_channel(rng, R, C), R, C, WeightCodec::Fp8, 128});
  // No codec holds these: dequantized.
  cases.push_back({"gptq4-act-order", gptq(rng, R, C, 32, true, true), R, C, WeightCodec::Dense, 0});
  cases.push_back({"gptq4-160-cols", gptq(rng, R, 160, 32, true, false), R, 160, WeightCodec::Dense, 0});
  cases.push_back({"fp8-b48", fp8(rng, R, 192, 128, 48), R, 192, WeightCodec::Dense, 0});
  for (const auto& c : cases) check_case(c);
}

// A NaN code is refused in the native form as in the dequantizing one.
TEST(QuantNative, Fp8NanCodeIsRefusedByName) {
  std::mt19937 rng(3);
  Module m = fp8(rng, 128, 128, 128, 128);
  m.bytes[0][300] = char(0xff);
  const fs::path dir = fs::temp_directory_path() / fmt::format("nextn-native-{}-nan", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), m.tensors);
  const TensorStore store = TensorStore::open(dir.string());
  const QuantConfig q = parse_quant_config("config.json", json{{"quantization_config", m.config}}, /*allow_hf=*/true);
  for (MatrixForm form : {MatrixForm::Fp32, MatrixForm::Native}) {
    try {
      checkpoint_matrix(store, q, dir.string(), kMod, 128, 128, form);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kMod + ".weight': element 300 is a NaN code"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace nextn
