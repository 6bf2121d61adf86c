// `nextn make-checkpoint`: random-weight Qwen3.5 checkpoints at the real
// shapes (model-spec §A.1), with the MTP head, for timing. Speed depends on
// shapes, not values, so these stand in for the real weights, which cannot
// be downloaded here.
//
//  - bf16: Hugging Face Qwen3_5ForConditionalGeneration naming
//    (model.language_model.*, lm_head.weight when untied, mtp.*), norms stored
//    as gamma - 1, conv1d [C, 1, K].
//  - q4: the mlx-community layout `nextn quantize` writes (language_model.model.*,
//    language_model.lm_head.*, mtp.*; every 2-D weight MLX affine 4-bit g64
//    with bf16 scales and biases; real-gamma norms; conv1d [C, K, 1]).
//    The packed words are drawn directly (uniform nibbles) and each group gets
//    scale s = ±std/4.61 (sign random, as MLX's scales may be negative) and
//    bias -7.5 s, so the dequantized weights have mean ~0 and the target std.
//  - fp8, gptq4: the bf16 layout with the decoder layers' Linears (attention
//    q/k/v/o, GDN in_proj_qkv/z and out_proj, the MLP or the experts and the
//    shared expert) stored in transformers' formats as the real uploads are:
//    fp8 e4m3 with fp32 weight_scale_inv per 128x128 block
//    (quant_method fp8, Qwen's FP8 releases), or GPTQ 4-bit symmetric group
//    128 (checkpoint_format gptq). GDN in_proj_a/b, the MoE router and
//    shared_expert_gate, the embedding, the LM head and the MTP head stay
//    bf16 (fp8 lists them in modules_to_not_convert).
//    src/io/synthetic_hf_quant.cpp; docs/formats.md.
//
// MoE presets (num_experts > 0, model_type qwen3_5_moe; docs/moe.md): every
// layer's MLP, the MTP layer's included, is a MoE block: the router mlp.gate
// [E, H], the routed experts, mlp.shared_expert.{gate,up,down}_proj and
// mlp.shared_expert_gate [1, H]. bf16 stores the experts per expert
// (mlp.experts.{e}.*_proj.weight, what transformers' save_pretrained writes
// for qwen3_5_moe); q4 stacks them as mlx-lm does (mlp.switch_mlp.*_proj
// [E, rows, cols] at 4 bits) with the router and shared_expert_gate at 8 bits
// (per-module overrides in the quantization block, as mlx-lm quantizes them).
//
// Values: every element is a function of (seed, tensor name, element index)
// alone (splitmix64 keyed by an FNV-1a hash of the name), so the bytes do not
// depend on the thread count or the shard size: the command and the seed
// reproduce the checkpoint. Projections std 0.02 (embedding and LM head
// included), norms near their real values, A_log/dt_bias as transformers
// initialises them, conv1d uniform in ±0.5.
//
// Tensors are generated and written one shard at a time (shard_bytes each,
// model-0000i-of-0000N.safetensors + model.safetensors.index.json), so the
// host holds one shard at most.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nextn {

class Qwen35Checkpoint;

struct SyntheticPreset {
  std::string name;
  int hidden = 0, layers = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int lin_k_heads = 0, lin_k_dim = 0, lin_v_heads = 0, lin_v_dim = 0, conv_kernel = 4;
  int vocab = 0;
  bool tie = false;
  // MoE (0 experts: dense, `intermediate` is the MLP width).
  int experts = 0, experts_per_tok = 0, moe_intermediate = 0, shared_intermediate = 0;
  bool moe() const { return experts > 0; }
};

// qwen3.5-0.8b, qwen3.5-4b, qwen3.5-27b (the real configs), test-tiny and
// test-stream (small shapes for the unit tests, the second with every matrix
// a multiple of 128 columns wide; not real models), small-19m (the size of a
// small default model: CPU benchmarks), the MoE qwen3.5-35b-a3b and
// qwen3.5-397b-a17b (the real configs), qwen3.5-122b-a10b (its published
// shapes, some widths assumed: synthetic.cpp, docs/moe.md) and test-tiny-moe
// (MoE, small shapes for the unit tests). nullopt for others.
std::optional<SyntheticPreset> synthetic_preset(const std::string& name);
std::vector<std::string> synthetic_preset_names();

struct MakeCheckpointOptions {
  std::string quant = "q4";  // q4 (MLX affine 4-bit, group 64), bf16, fp8 or gptq4
  uint64_t seed = 0;
  uint64_t shard_bytes = uint64_t(4) << 30;  // a shard closes once it reaches this size
  int threads = 0;                            // 0: hardware concurrency
};

struct MakeCheckpointReport {
  std::vector<std::string> files;  // shard file names, in order
  int tensors = 0;
  uint64_t bytes = 0;  // tensor bytes written
  double seconds = 0;
};

// The config.json text (Qwen3_5ForConditionalGeneration or, for MoE presets,
// Qwen3_5MoeForConditionalGeneration; text_config block, mtp_num_hidden_layers
// 1, quantization blocks for q4, quantization_config for fp8 and gptq4).
std::string synthetic_config_json(const SyntheticPreset& p, const std::string& quant);

// The tensor bytes make_checkpoint would write, without generating any (a
// real preset's size is known before its tens of GB are written).
uint64_t synthetic_checkpoint_bytes(const SyntheticPreset& p, const std::string& quant);

// What `make-checkpoint --size-only` prints (io/synthetic_size.cpp).
struct SyntheticCheckpointSize {
  int tensors = 0;
  uint64_t total = 0;              // every tensor's bytes: what make_checkpoint writes
  std::vector<uint64_t> per_rank;  // [degree]: the tensor bytes each tensor-parallel rank holds
};

// The size of the checkpoint make_checkpoint would write, from the same
// tensor list, nothing generated; and, split over `degree` ranks as
// `--tensor-parallel` loads it (io/tensor_parallel_plan.h), the bytes of
// the stored tensors each rank holds: replicated tensors whole, split ones
// the rank's rows or columns (a cut inside a quantization group or an fp8
// block counts the whole group or block on both sides). Throws Error for a
// quant or a degree the model cannot take (check_tensor_parallel's message).
SyntheticCheckpointSize synthetic_checkpoint_size(const SyntheticPreset& p, const std::string& quant, int degree = 1);

// Writes the checkpoint into out_dir (created; must hold no safetensors).
// Throws Error.
MakeCheckpointReport make_checkpoint(const SyntheticPreset& p, const MakeCheckpointOptions& o,
                                     const std::string& out_dir);

// The same checkpoint (the same bytes: shard_bytes aside, o as above) in host
// memory, opened, without a file: what `bench decode --preset` runs, so a
// preset larger than the disk (the 122B-A10B at q4 is 65 GiB) loads straight
// from memory to the device. Throws Error (the mapping's failure included).
Qwen35Checkpoint synthetic_checkpoint_in_memory(const SyntheticPreset& p, const MakeCheckpointOptions& o);

}  // namespace nextn
