// A Gemma 4 checkpoint (target or assistant): its config, its tensors and the
// prefix of its text model. Matrices dense (F32, BF16, F16) or MLX
// affine-quantized (4/8-bit, config.json's `quantization`), as Qwen3.5's
// (checkpoint_matrix in io/checkpoint.h). Logical
// names are relative to the text model ("embed_tokens",
// "layers.3.self_attn.q_proj", "norm"); the assistant's own tensors are
// top-level ("pre_projection", "post_projection", "masked_embedding.*").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/gemma4_config.h"
#include "io/safetensors.h"

namespace nextn {

class Gemma4Checkpoint {
 public:
  // A target (`gemma4` / `gemma4_text`): model.*, model.language_model.* or (mlx-lm's
  // layout) language_model.model.* tensors with language_model.lm_head. Throws Error.
  static Gemma4Checkpoint open(const std::string& dir);
  // An assistant (`gemma4_assistant`). Throws Error.
  static Gemma4Checkpoint open_assistant(const std::string& dir);

  const Gemma4TextConfig& config() const { return config_; }  // the assistant's inner text config for an assistant
  const Gemma4AssistantConfig& assistant_config() const { return assistant_; }
  bool is_assistant() const { return is_assistant_; }
  const std::string& dir() const { return dir_; }
  const TensorStore& store() const { return store_; }

  // A [rows, cols] matrix, dense or quantized; `top_level` names a tensor outside the
  // text model ("lm_head" maps to the layout's head module).
  WeightRef matrix(const std::string& logical, int64_t rows, int64_t cols, bool top_level = false) const;
  // The LM head: the tied embedding, or lm_head when stored and untied.
  WeightRef lm_head() const;
  bool has(const std::string& logical) const;  // "<text prefix><logical>.weight" stored
  // A float vector of exactly `size` elements (norm weights, layer_scalar), as fp32.
  std::vector<float> vector(const std::string& stored_name, int64_t size) const;
  std::string stored(const std::string& logical) const { return prefix_ + logical; }
  // sqrt(hidden_size) as fp32, rounded to the embedding's stored dtype (as
  // transformers rounds it for a model loaded in that dtype); for a quantized
  // embedding, to its scales' dtype (the dtype mlx-lm computes in).
  float embed_scale() const;
  // The assistant's token_ordering buffer [vocab] (a permutation of the vocabulary).
  std::vector<int32_t> token_ordering() const;
  // Before a target runtime of `max_tokens` positions is built (any backend):
  // a target, and a capacity within max_position_embeddings. Throws Error.
  void check_target_capacity(int max_tokens) const;

 private:
  std::string dir_;
  Gemma4TextConfig config_;
  Gemma4AssistantConfig assistant_;
  bool is_assistant_ = false;
  TensorStore store_;
  std::string prefix_ = "model.";
  std::string head_ = "lm_head";  // the untied LM head's module
};

// The target layers an assistant's layers read K/V from: [0] its full
// layers', [1] its sliding layers' (-1: it has none of that kind). Throws
// Error (one line naming the assistant's config field) when the assistant
// does not fit the target: backbone hidden size, vocabulary, its sliding
// window, the head shapes of the layers whose K/V it reads.
struct AssistantKvLayers {
  int full = -1, sliding = -1;
};
AssistantKvLayers check_assistant_fits(const Gemma4Checkpoint& assistant, const Gemma4TextConfig& target);

// The capacity rule of check_target_capacity, for a group that no longer
// holds its checkpoint: 1 to max_position_embeddings positions.
void check_gemma4_capacity(const std::string& dir, const Gemma4TextConfig& config, int max_tokens);


}  // namespace nextn
