// The routed experts of a MoE layer, in each layout found in the wild, told
// apart by tensor names (<mlp> is the stored module that holds the experts:
// Qwen3.5's MLP "model.layers.3.mlp", Gemma 4's decoder layer
// "model.language_model.layers.3"; E experts of width I over hidden size H):
//  PerExpert: <mlp>.experts.{e}.{gate,up,down}_proj.weight [I, H], [I, H],
//             [H, I], as transformers' save_pretrained writes them (each
//             module may be in any format checkpoint_matrix reads).
//  Stacked:   <mlp>.experts.gate_up_proj [E, 2I, H] (gate rows first, then
//             up) and <mlp>.experts.down_proj [E, H, I], as transformers holds
//             them in memory.
//  SwitchMlp: <mlp>.switch_mlp.{gate,up,down}_proj.weight [E, I, H],
//             [E, I, H], [E, H, I], as mlx-lm writes them: dense, or MLX
//             affine (U32 [E, rows, cols*bits/32] + .scales / .biases
//             [E, rows, cols/group]).
//  SwitchGlu: <mlp>.experts.switch_glu.{gate,up,down}_proj.weight, the same
//             tensors under the name mlx-lm gives Gemma 4's experts.
// An expert of a stacked layout is handed out as a WeightRef over views into
// the stored tensors (no copy), so backends read every layout as matrices.
#pragma once
#include <cstdint>
#include <string>

#include "io/checkpoint.h"

namespace nextn {

enum class ExpertLayout { PerExpert, Stacked, SwitchMlp, SwitchGlu };
const char* expert_layout_name(ExpertLayout layout);

struct ExpertMatrices {
  WeightRef gate;  // [I, H]
  WeightRef up;    // [I, H]
  WeightRef down;  // [H, I]
};

// The layout of <mlp>'s experts; throws Error naming <mlp> when no layout's
// tensors are stored, or more than one's.
ExpertLayout detect_expert_layout(const TensorStore& store, const std::string& dir, const std::string& mlp);

// Expert `expert` of <mlp>, shapes and dtypes checked (the stacked tensors
// against [E, 2I, H] / [E, H, I] and so on); `form` as in checkpoint_matrix.
ExpertMatrices expert_matrices(const TensorStore& store, const QuantConfig& quant, const std::string& dir,
                               const std::string& mlp, ExpertLayout layout, int expert, int64_t num_experts,
                               int64_t I, int64_t H, MatrixForm form = MatrixForm::Fp32);

// The same over a checkpoint's logical layer ("layers.3", "mtp.layers.0").
ExpertLayout expert_layout(const Qwen35Checkpoint& ck, const std::string& layer);
ExpertMatrices expert_matrices(const Qwen35Checkpoint& ck, const std::string& layer, ExpertLayout layout, int expert,
                               MatrixForm form = MatrixForm::Fp32);
// Checks a MoE layer's MLP without decoding anything: the router mlp.gate
// [E, H], every expert, mlp.shared_expert.{gate,up,down}_proj [Is, H],
// [Is, H], [H, Is] and mlp.shared_expert_gate [1, H].
void validate_moe_mlp(const Qwen35Checkpoint& ck, const std::string& layer);

}  // namespace nextn
