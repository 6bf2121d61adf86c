// Qwen3.5 text config, read from config.json (+ generation_config.json).
//
// Precedence, field by field (documented in docs/config.md):
//  1. model_type `qwen3_5` / `qwen3_5_moe`: fields come from `text_config`
//     (model_type `qwen3_5_text` / `qwen3_5_moe_text`) first, then the top
//     level; `qwen3_5_text` / `qwen3_5_moe_text`: top level. Anything else is
//     an error listing the supported types. A null value counts as absent.
//  2. layer_types: the explicit list, else full_attention_interval (default 4):
//     layer i is full attention iff (i+1) % interval == 0.
//  3. rope: `rope_parameters` {rope_theta, partial_rotary_factor}, then
//     top-level keys of the same names, then transformers' defaults (theta
//     10000, factor 0.25). mrope_section is not read: for text-only input the
//     three M-RoPE position streams are equal and the split changes nothing.
//  4. EOS: generation_config.json `eos_token_id`, then config (text_config,
//     then top level); int or list; none when null/absent everywhere.
//  5. mtp_num_hidden_layers from the config, else counted from `mtp.layers.*`
//     tensors by the checkpoint loader (-1 here means "not in the config").
//  6. quantization (top level): `quantization`, else `quantization_config`;
//     only MLX affine (mode "affine"); per-module overrides keyed by module
//     path. A block with `quant_method` (GPTQ, AWQ, bitsandbytes,
//     compressed-tensors, FP8, ...) is an error naming the method.
//  7. MoE (the *_moe types, docs/moe.md): num_experts, num_experts_per_tok
//     (at most num_experts), moe_intermediate_size and
//     shared_expert_intermediate_size, all required; intermediate_size is not
//     read (every layer, the MTP layer too, is a sparse MoE block, as in
//     transformers' Qwen3_5MoeDecoderLayer).
//  Required: model_type, hidden_size, num_hidden_layers, intermediate_size
//  (dense only), vocab_size, num_attention_heads, num_key_value_heads. Every
//  other field falls back to transformers' Qwen3_5TextConfig default.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/quant_config.h"

namespace nextn {

struct Qwen35Config {
  std::string model_type;  // qwen3_5, qwen3_5_text, qwen3_5_moe or qwen3_5_moe_text
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int intermediate_size = 0;  // the dense MLP's; 0 in a MoE config
  // Mixture of experts (moe true): every layer's MLP is a router over
  // num_experts SwiGLU experts of width moe_intermediate_size, top
  // num_experts_per_tok of them per token, plus a gated shared expert.
  bool moe = false;
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int shared_expert_intermediate_size = 0;
  int vocab_size = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int linear_num_key_heads = 0;
  int linear_key_head_dim = 0;
  int linear_num_value_heads = 0;
  int linear_value_head_dim = 0;
  int linear_conv_kernel_dim = 4;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 0.25;
  bool attn_output_gate = true;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 32768;  // a runtime holding more positions is refused (make_runtime)
  std::vector<bool> full_attention;  // per layer: true = gated full attention, false = Gated DeltaNet
  int mtp_num_hidden_layers = -1;     // -1: not given by the config
  std::vector<int> eos_token_ids;     // empty: generate to -n
  QuantConfig quant;

  int rotary_dim() const;  // head_dim * partial_rotary_factor, even
  int key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Reads <dir>/config.json and, if present, <dir>/generation_config.json.
// Throws Error naming the file and the field.
Qwen35Config load_qwen35_config(const std::string& dir);
// The same from JSON text (file names used in messages only); for tests and fuzzing.
Qwen35Config parse_qwen35_config(const std::string& config_json, const std::string& config_file,
                                 const std::string* generation_json = nullptr,
                                 const std::string& generation_file = "");

}  // namespace nextn
