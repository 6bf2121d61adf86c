// `nextn make-checkpoint --preset gemma4-31b | gemma4-31b-assistant |
// gemma4-26b-a4b | gemma4-26b-a4b-assistant`: random-weight Gemma 4
// checkpoints at the 31B's and the 26B-A4B's (MoE) real shapes, and their
// assistants', for timing (docs/gemma4.md, docs/moe.md). bf16 (the default), or MLX
// affine q4 / q8 group 64 (every matrix whose width is a multiple of 64:
// packed words, bf16 scales and biases, drawn as the Qwen3.5 q4 presets draw
// them; norms, layer_scalar and token_ordering dense, config.json with the
// `quantization` block). Hugging Face names in every case: the
// target as `gemma4` (Gemma4ForConditionalGeneration, tensors under
// model.language_model.*, tied head), the assistant as `gemma4_assistant`
// (model.*, pre/post_projection, the centroid-masked head). Values as the
// Qwen3.5 generator draws them (io/synthetic.h): a function of the seed,
// the tensor name and the element index only.
//
// MoE targets (experts > 0, `enable_moe_block`): every layer keeps its dense
// MLP and adds router.proj [E, H], router.scale [H],
// router.per_expert_scale [E], pre_feedforward_layernorm_2 and
// post_feedforward_layernorm_{1,2}, and the experts as the releases store
// them: bf16 as transformers' save_pretrained writes Gemma 4
// (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]); q4 / q8
// as mlx-lm does (experts.switch_glu.{gate,up,down}_proj [E, I, H],
// [E, I, H], [E, H, I], a projection whose width is not a multiple of 64
// left dense) with router.proj at 8 bits (a per-module override in the
// quantization block).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "io/synthetic.h"

namespace nextn {

struct Gemma4SyntheticPreset {
  std::string name;
  bool assistant = false;
  int hidden = 0, layers = 0, intermediate = 0, heads = 0, vocab = 0;
  int head_dim = 0, kv_heads = 0;                // sliding layers
  int global_head_dim = 0, global_kv_heads = 0;  // full layers (K = V: no v_proj)
  int sliding_window = 0;
  int full_every = 6;          // layer i is full when (i + 1) % full_every == 0; the last layer always is
  float softcap = 0.0f;        // final_logit_softcapping (0: none)
  int max_positions = 0;
  int backbone_hidden = 0;     // assistant: the target's hidden size
  int centroids = 0, centroid_top_k = 0;  // assistant: ordered-embedding head (0: plain tied head)
  int experts = 0, top_k_experts = 0, moe_intermediate = 0;  // MoE target (0 experts: dense)
  bool moe() const { return experts > 0; }
};

// gemma4-31b, gemma4-31b-assistant, gemma4-26b-a4b (MoE),
// gemma4-26b-a4b-assistant; nullopt for others.
std::optional<Gemma4SyntheticPreset> gemma4_synthetic_preset(const std::string& name);
std::vector<std::string> gemma4_synthetic_preset_names();

// quant: bf16, q4 or q8 (else Error).
std::string gemma4_synthetic_config_json(const Gemma4SyntheticPreset& p, const std::string& quant = "bf16");

// Writes the checkpoint (o.quant: bf16, q4 or q8). Throws Error.
MakeCheckpointReport make_gemma4_checkpoint(const Gemma4SyntheticPreset& p, const MakeCheckpointOptions& o,
                                            const std::string& out_dir);

// What make_gemma4_checkpoint would write, from the same tensor list,
// nothing generated. Gemma 4 is not split (docs/tensor-parallel.md): one
// rank, which holds it all.
SyntheticCheckpointSize gemma4_synthetic_checkpoint_size(const Gemma4SyntheticPreset& p, const std::string& quant);

}  // namespace nextn
