// Gemma 4 configs, read from config.json (+ generation_config.json): the
// dense text model (`gemma4` with `text_config`, or `gemma4_text`) and its
// assistant drafter (`gemma4_assistant`). Defaults follow transformers 5.17's
// Gemma4TextConfig / Gemma4AssistantConfig; see docs/gemma4.md.
//
//  - layer_types: the explicit list, else 5 sliding : 1 full; the last layer
//    is always full (transformers forces it).
//  - per-layer attention shapes: `per_layer_config` {"<layer>": {head_dim,
//    num_key_value_heads}}; when absent, full layers take global_head_dim
//    (default 512) and, with attention_k_eq_v, num_global_key_value_heads.
//  - rope_parameters per layer type: sliding "default" (theta 1e4, all
//    pairs), full "proportional" (theta 1e6, the first
//    int(partial_rotary_factor * head_dim // 2) pairs rotate, the rest have
//    frequency 0).
//  - MoE (enable_moe_block, a target only): num_experts, top_k_experts
//    (1..num_experts) and moe_intermediate_size are required; every layer
//    then runs its dense MLP and its routed experts side by side
//    (docs/moe.md).
//  - Refused with one error line: per-layer embeddings
//    (hidden_size_per_layer_input > 0), MoE blocks in an assistant (as
//    transformers refuses them), KV sharing in a target,
//    bidirectional attention, attention bias, activations other than
//    gelu_pytorch_tanh, rope scaling factors.
//  - quantization: the top-level MLX affine block (io/quant_config.h), as
//    for Qwen3.5; the checkpoint reads it per stored module.
#pragma once
#include <string>
#include <vector>

#include "io/quant_config.h"

namespace nextn {

struct Gemma4LayerSpec {
  bool sliding = true;  // sliding_attention, else full_attention
  int head_dim = 0;
  int kv_heads = 0;
  bool k_eq_v = false;  // full layer with attention_k_eq_v: no v_proj, values are the raw k projection
  double rope_theta = 10000.0;
  int rope_pairs = 0;  // frequency pairs that rotate (of head_dim / 2); the others are the identity
};

struct Gemma4TextConfig {
  std::string model_type;  // gemma4, gemma4_text (or the assistant's inner gemma4_text)
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  int num_attention_heads = 0;
  int sliding_window = 512;  // a sliding layer at position p sees keys p - sliding_window + 1 .. p
  float rms_norm_eps = 1e-6f;
  float final_logit_softcapping = 0.0f;  // 0: none
  bool tie_word_embeddings = true;
  int max_position_embeddings = 131072;
  int num_kv_shared_layers = 0;  // 0 for a target; num_hidden_layers for an assistant
  bool moe = false;               // enable_moe_block: routed experts beside each layer's dense MLP
  int num_experts = 0;            // E (moe only)
  int top_k_experts = 0;          // k experts per token, 1 <= k <= E (moe only)
  int moe_intermediate_size = 0;  // each expert's width (moe only)
  std::vector<Gemma4LayerSpec> layers;
  std::vector<int> eos_token_ids;
  QuantConfig quant;  // present == false: dense

  int last_layer_of(bool sliding) const;  // -1 when none
};

struct Gemma4AssistantConfig {
  Gemma4TextConfig text;  // every layer reads the target's K/V
  int backbone_hidden_size = 0;
  bool use_ordered_embeddings = false;
  int num_centroids = 2048;
  int centroid_intermediate_top_k = 32;
};

// "gemma4", "gemma4_text", "gemma4_assistant", or "" when config.json has
// another model_type (or none). Throws only when config.json cannot be read
// or parsed.
std::string gemma4_model_type(const std::string& dir);

Gemma4TextConfig load_gemma4_config(const std::string& dir);
Gemma4AssistantConfig load_gemma4_assistant_config(const std::string& dir);
// From JSON text (file names for messages only); for tests and fuzzing.
Gemma4TextConfig parse_gemma4_config(const std::string& config_json, const std::string& config_file,
                                     const std::string* generation_json = nullptr,
                                     const std::string& generation_file = "");
Gemma4AssistantConfig parse_gemma4_assistant_config(const std::string& config_json, const std::string& config_file);

}  // namespace nextn
