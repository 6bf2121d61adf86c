// make-checkpoint's transformers formats (--quant fp8, gptq4): the tensors of
// one quantized Linear, their random contents and the quantization_config,
// as Qwen's FP8 releases and GPTQModel's 4-bit uploads store them (the loader
// is src/io/hf_quant_decode.cpp; layouts in docs/formats.md).
//
// Values: each stored code is a table lookup of one random byte (8 per
// 64-bit draw, so a 27B writes at disk speed); the tables are symmetric about
// 0 so the dequantized weights have mean 0, and each block's or group's scale
// is std / sd(codes) times U(0.8, 1.2), so they have the std the bf16 preset
// draws (as the MLX q4 scales do).
#include <array>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "io/synthetic_rng.h"
#include "io/synthetic_specs.h"

namespace nextn {

namespace {

using namespace synthetic_rng;

// A 256-entry code table and the std of the values it stands for (mean 0).
template <typename Code>
struct CodeTable {
  std::array<Code, 256> code{};
  float sd = 0;
};

// Byte b -> the e4m3 code nearest ((b + 0.5) / 256 * 2 - 1) * 448: uniform
// over the format's finite range, as a block whose largest weight maps to 448.
const CodeTable<uint8_t>& fp8_table() {
  static const CodeTable<uint8_t> t = [] {
    CodeTable<uint8_t> t;
    double s2 = 0;
    for (int b = 0; b < 256; ++b) {
      // ties go to the smaller magnitude: the table stays symmetric
      t.code[size_t(b)] = f32_to_fp8_e4m3(((float(b) + 0.5f) / 256.0f * 2.0f - 1.0f) * 448.0f);
      const double v = fp8_e4m3_to_f32(t.code[size_t(b)]);
      s2 += v * v;
    }
    t.sd = float(std::sqrt(s2 / 256));
    return t;
  }();
  return t;
}

// Byte b -> nibble 8 + round(((b + 0.5) / 256 * 15) - 7.5): q - 8 in [-7, 7],
// symmetric (a symmetric GPTQ rarely uses -8; dropping it keeps the mean 0).
const CodeTable<uint8_t>& gptq4_table() {
  static const CodeTable<uint8_t> t = [] {
    CodeTable<uint8_t> t;
    double s2 = 0;
    for (int b = 0; b < 256; ++b) {
      const long q = std::lround((double(b) + 0.5) / 256.0 * 15.0 - 7.5);
      t.code[size_t(b)] = uint8_t(8 + q);
      s2 += double(q * q);
    }
    t.sd = float(std::sqrt(s2 / 256));
    return t;
  }();
  return t;
}

float jittered_scale(uint64_t key, int64_t i, float std_target, float sd_codes) {
  return std_target / sd_codes * (0.8f + 0.4f * unit(draw(key, uint64_t(i))));
}

}  // namespace

std::optional<HfSyntheticQuant> hf_synthetic_quant(const std::string& quant) {
  if (quant == "fp8") return HfSyntheticQuant::Fp8;
  if (quant == "gptq4") return HfSyntheticQuant::Gptq4;
  return std::nullopt;
}

void push_hf_quant_matrix_specs(std::vector<Spec>& v, const std::string& mod, int64_t rows, int64_t cols, float std_,
                                HfSyntheticQuant q, int64_t group, MatrixSplit split) {
  // Each tensor with the axes (and stored units) a rank's rows or columns fall on.
  auto push = [&](Spec s, int row_axis, int64_t row_per, int col_axis, int64_t col_per) {
    s.tp = stored_split(split, row_axis, row_per, col_axis, col_per);
    v.push_back(std::move(s));
  };
  if (q == HfSyntheticQuant::Fp8) {
    const int64_t b = kFp8Block;  // partial edge blocks are allowed (ceil)
    push({mod + ".weight", DType::F8_E4M3, {rows, cols}, Fill::Fp8Codes, 0, std_, mod + ".weight"}, 0, 1, 1, 1);
    push({mod + ".weight_scale_inv", DType::F32, {(rows + b - 1) / b, (cols + b - 1) / b}, Fill::Fp8ScaleInv, 0, std_,
          mod + ".qparams"},
         0, b, 1, b);
    return;
  }
  if (group < 8 || cols % group != 0)
    fail("make-checkpoint: {}: gptq group size {} does not divide its {} inputs", mod, group, cols);
  if (rows % 8 != 0) fail("make-checkpoint: {}: {} outputs cannot be packed 8 per int32 (gptq qzeros)", mod, rows);
  const int64_t ng = cols / group;
  // GPTQ stores the transpose: inputs (packed 8 per word, or per group) first.
  push({mod + ".qweight", DType::I32, {cols / 8, rows}, Fill::GptqQweight, 0, std_, mod + ".qweight"}, 1, 1, 0, 8);
  push({mod + ".qzeros", DType::I32, {ng, rows / 8}, Fill::GptqZeros, 0, 0, mod + ".qzeros"}, 1, 8, 0, group);
  push({mod + ".scales", DType::F16, {ng, rows}, Fill::GptqScales, 0, std_, mod + ".qparams"}, 1, 1, 0, group);
  Spec g{mod + ".g_idx", DType::I32, {cols}, Fill::GroupIndex, 0, 0, mod + ".g_idx"};
  g.group = group;
  push(std::move(g), -1, 1, 0, 1);
}

bool fill_hf_quant_range(const Spec& s, uint64_t key, int64_t begin, int64_t end, uint8_t* out) {
  switch (s.fill) {
    case Fill::Fp8Codes: {
      const auto& t = fp8_table();
      uint64_t r = 0;
      for (int64_t i = begin; i < end; ++i) {
        if (i == begin || (i & 7) == 0) r = draw(key, uint64_t(i) >> 3);
        out[i] = t.code[(r >> (8 * (i & 7))) & 0xFF];
      }
      return true;
    }
    case Fill::GptqQweight: {
      const auto& t = gptq4_table();
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t r = draw(key, uint64_t(i));
        uint32_t w = 0;
        for (int k = 0; k < 8; ++k) w |= uint32_t(t.code[(r >> (8 * k)) & 0xFF]) << (4 * k);
        std::memcpy(out + 4 * i, &w, 4);
      }
      return true;
    }
    case Fill::GptqZeros:
      for (int64_t i = begin; i < end; ++i) {
        const uint32_t w = 0x77777777u;
        std::memcpy(out + 4 * i, &w, 4);
      }
      return true;
    case Fill::Fp8ScaleInv:
      for (int64_t i = begin; i < end; ++i) {
        const float v = jittered_scale(key, i, s.hi, fp8_table().sd);
        std::memcpy(out + 4 * i, &v, 4);
      }
      return true;
    case Fill::GptqScales:
      for (int64_t i = begin; i < end; ++i) {
        const uint16_t h = f32_to_f16(jittered_scale(key, i, s.hi, gptq4_table().sd));
        std::memcpy(out + 2 * i, &h, 2);
      }
      return true;
    case Fill::GroupIndex:
      for (int64_t i = begin; i < end; ++i) {
        const int32_t g = int32_t(i / s.group);
        std::memcpy(out + 4 * i, &g, 4);
      }
      return true;
    default: return false;
  }
}

nlohmann::ordered_json hf_quantization_config(HfSyntheticQuant q, int64_t group,
                                              const std::vector<std::string>& not_converted) {
  if (q == HfSyntheticQuant::Fp8)
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {kFp8Block, kFp8Block}},
            {"modules_to_not_convert", not_converted}};
  return {{"quant_method", "gptq"}, {"bits", 4},  {"group_size", group}, {"desc_act", false},
          {"sym", true},            {"checkpoint_format", "gptq"}};
}

}  // namespace nextn
