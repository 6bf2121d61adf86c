// The quantized checkpoint formats transformers loads (config.json
// `quantization_config.quant_method`): FP8 block-scaled (`fp8`), GPTQ
// (`gptq`, checkpoint_format gptq), AWQ (`awq`, version gemm) and
// compressed-tensors (`pack-quantized` int4/int8, `float-quantized` FP8).
//
// The CPU path dequantizes at load: a module stored in one of these formats is
// handed to the backends as a dense fp32 [out, in] matrix holding exactly the
// values the format's formula gives (fp32 arithmetic from the stored fp16 /
// bf16 / fp32 scales, one rounding per element), so every backend runs it
// unchanged. Whether a module is quantized is decided by its tensors (the
// format's packed weight or scale is stored), the config supplies the
// parameters and is cross-checked against the shapes. Layouts: docs/formats.md.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/weight_codec.h"

namespace nextn {

enum class QuantMethod { None, MlxAffine, Fp8, Gptq, Awq, CompressedTensors };
const char* quant_method_name(QuantMethod m);  // "fp8", "gptq", ...

// One compressed-tensors config group: the weights' scheme and its targets.
struct CtScheme {
  std::string name;                  // "group_0"
  std::vector<std::string> targets;  // "Linear", a module name, or "re:<regex>"
  std::string format;                // "pack-quantized" or "float-quantized"
  int bits = 0;                      // int: 4 or 8; float: 8 (e4m3)
  bool is_float = false;             // type "float" (FP8) vs "int"
  std::string strategy;              // "tensor", "channel", "group" or "block"
  int group_size = 0;                // strategy group
  int block_out = 0, block_in = 0;   // strategy block
  bool symmetric = true;
  std::string activations;  // "" when none, else what input_activations asks for (stated, not applied)
};

struct HfQuant {
  QuantMethod method = QuantMethod::None;
  // fp8: weight_block_size [out, in] (0, 0 = per-tensor scale) and modules_to_not_convert.
  int block_out = 128, block_in = 128;
  std::vector<std::string> not_convert;
  std::string activation_scheme;  // fp8 "dynamic" / "static": stated, weights run weight-only
  // gptq / awq.
  int bits = 0;
  int group_size = 0;  // -1 (gptq): one group over the whole input
  bool sym = true, desc_act = false, zero_point = true;
  // compressed-tensors.
  std::vector<CtScheme> schemes;
  std::vector<std::string> ignore;
  std::string ct_format;  // top-level `format`

  // One line for `nextn inspect`: format, bits, group or block size, activations.
  std::string summary() const;
  // The compressed-tensors scheme for a stored module path, nullptr when no
  // group targets it or `ignore` excludes it. `linear` says whether the module
  // is a Linear (every matrix but the embedding), for the target "Linear".
  const CtScheme* scheme_for(const std::string& module, bool linear) const;
  // fp8: true when modules_to_not_convert names the module (transformers' match).
  bool not_converted(const std::string& module) const;
};

// Parses a `quantization_config` object that has a `quant_method` (`path` is
// "quantization_config" for messages). Refuses every method and variant not
// run (bitsandbytes, gptq_v2, AWQ gemv/marlin, other compressed-tensors
// formats, ...) by name. Throws Error "<file>: field '<path>...': ...".
HfQuant parse_hf_quant(const std::string& file, const nlohmann::json& block, const std::string& path);

// A module as hf_decode hands it over: dequantized to fp32 (`view` a dense F32
// [rows, cols] tensor over `values`, so it can stand where a stored `.weight`
// would), or in a native codec (MatrixForm::Native): `view` the codes (Fp8:
// the stored F8_E4M3 weight; Affine / ZeroInt: U32 words over `codes`, MLX's
// packing), `scales_view` / `biases_view` F32 [rows, cols/group] (ZeroInt:
// `biases` holds the zeros, integers as floats).
struct DecodedMatrix {
  TensorView view;
  std::vector<float> values;
  WeightCodec codec = WeightCodec::Dense;
  int bits = 0, group = 0;
  std::vector<uint32_t> codes;
  std::vector<float> scales, biases;
  TensorView scales_view, biases_view;
  std::string label;  // "gptq q4 g128", for inspect
};

// True when `mod` ("model.layers.0.mlp.up_proj") is stored in q's format
// (fp8: `.weight_scale_inv`; gptq/awq: `.qweight`; compressed-tensors:
// `.weight_packed`, or `.weight_scale` beside an FP8 `.weight`).
bool hf_module_quantized(const TensorStore& store, const HfQuant& q, const std::string& mod);

// The label `nextn inspect` prints beside the module's tensors ("gptq q4
// g128", "fp8 b128x128", "ct int4 g32"); "" when the module is not quantized.
std::string hf_module_label(const TensorStore& store, const HfQuant& q, const std::string& mod);

// Checks every tensor of quantized module `mod` against [rows, cols] (dtype,
// shape, g_idx range, the config's bits / group / block) and hands it over in
// `form`: Fp32 dequantizes; Native keeps the codes where a codec holds the
// format exactly (docs/formats.md, "Native codecs": columns a multiple of
// 128, groups of 32, 64 or a multiple of 128, no activation order; 8-bit
// codes: a bias -scale * zero exact in fp32) and dequantizes otherwise;
// Checked returns nullptr. `dir` and the tensor names appear in every error.
// `linear` as for scheme_for.
std::shared_ptr<const DecodedMatrix> hf_decode(const TensorStore& store, const HfQuant& q, const std::string& dir,
                                               const std::string& mod, int64_t rows, int64_t cols, bool linear,
                                               MatrixForm form);

}  // namespace nextn
