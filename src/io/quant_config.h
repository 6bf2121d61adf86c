// MLX affine quantization parameters from config.json, shared by the
// Qwen3.5 (config.cpp) and Gemma 4 (gemma4_config.cpp) parsers.
//
// The block: top-level `quantization`, else `quantization_config`; only MLX
// affine (mode "affine", bits 4 or 8, group_size 32, 64 or 128); per-module
// overrides keyed by module path (an object of params, or `false`: not
// quantized). A block with `quant_method` is one of transformers' formats:
// for Qwen3.5 (allow_hf) fp8, gptq, awq and compressed-tensors are parsed into
// `hf` (io/hf_quant.h), every other method is an error naming it; Gemma 4
// refuses them all.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

#include "io/hf_quant.h"

namespace nextn {

struct QuantParams {
  int bits = 0;        // 4 or 8
  int group_size = 0;  // 32, 64 or 128
};

struct QuantConfig {
  bool present = false;  // an MLX affine block (method MlxAffine)
  QuantMethod method = QuantMethod::None;
  HfQuant hf;  // method Fp8, Gptq, Awq or CompressedTensors
  QuantParams defaults;
  // Module path (as written in config.json, e.g. "language_model.model.layers.0.mlp.gate_proj")
  // -> params, or nullopt when the override says `false` (not quantized).
  std::map<std::string, std::optional<QuantParams>> overrides;

  // Params for a stored module path ("language_model.model.layers.0.mlp.gate_proj"):
  // its override, else the defaults; nullopt when not present or overridden `false`.
  std::optional<QuantParams> for_module(const std::string& module_path) const;
};

// The quantization block of a parsed config.json root (`file` for messages);
// present == false when there is none. Throws Error.
QuantConfig parse_quant_config(const std::string& file, const nlohmann::json& root, bool allow_hf = false);

}  // namespace nextn
