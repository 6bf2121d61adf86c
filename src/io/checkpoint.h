// A Qwen3.5 checkpoint: config + tensors + the layout that maps logical
// weight names to stored ones. Backend-neutral: each backend converts the
// WeightRefs it is handed into its own layout.
//
// Logical names are relative to the text model: "embed_tokens",
// "layers.3.self_attn.q_proj", "norm", "lm_head", and "mtp.fc",
// "mtp.layers.0.self_attn.q_proj", "mtp.norm" for the MTP head.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/safetensors.h"
#include "io/weight_codec.h"

namespace nextn {

enum class Layout {
  CausalLM,               // model.layers.*, lm_head.weight
  ConditionalGeneration,  // model.language_model.*, lm_head.weight; model.visual.* skipped
  Mlx,                    // language_model.model.*, language_model.lm_head.*
};
const char* layout_name(Layout l);
// The layout implied by tensor names (model.layers.* / model.language_model.* /
// language_model.model.*). nullopt when none or more than one matches; *why
// then says which.
std::optional<Layout> detect_layout(const std::vector<std::string>& names, std::string* why = nullptr);
// Text-model prefix ("model.", "model.language_model.", "language_model.model.")
// and stored LM head module ("lm_head", "lm_head", "language_model.lm_head").
const char* layout_prefix(Layout l);
const char* layout_head(Layout l);
// True for the (1+w) norms, by logical name (with or without ".weight"):
// input_layernorm, post_attention_layernorm, norm, q_norm, k_norm and every
// MTP norm; false for linear_attn.norm and everything else.
bool is_one_plus_norm(const std::string& logical);

// Views of one expert's slice of stacked [E, rows, cols] tensors (io/moe_experts.h).
struct SliceViews {
  TensorView weight, scales, biases;
};

// A matrix [rows, cols] (out, in) as stored: dense (F32/F16/BF16), or MLX
// affine-quantized (U32 packed + scales + biases, any float dtype each). A
// module in one of transformers' formats (fp8, gptq, awq, compressed-tensors)
// arrives in the MatrixForm asked for: dequantized (`weight` a dense F32 view
// owned by `decoded`) or in a native codec (scales F32 [rows, cols/group],
// views owned by `decoded` or stored).
struct WeightRef {
  std::string name;  // stored name of `.weight`
  const TensorView* weight = nullptr;
  const TensorView* scales = nullptr;  // null when dense
  const TensorView* biases = nullptr;  // null unless Affine
  // Fp8 or ZeroInt when a native form holds one (checkpoint_matrix); else
  // Dense, and `scales` tells Affine from Dense (codec()).
  WeightCodec native_codec = WeightCodec::Dense;
  QuantParams quant;  // bits == 0 when dense (Fp8: 8)
  int64_t rows = 0, cols = 0;
  std::shared_ptr<const DecodedMatrix> decoded = nullptr;  // keeps a dequantized `weight` alive
  std::shared_ptr<const SliceViews> slice = nullptr;  // keeps the views of a stacked expert's slice alive
  const TensorView* zeros = nullptr;  // ZeroInt: F32 [rows, cols/group], each an integer
  bool quantized() const { return scales != nullptr; }
  WeightCodec codec() const {
    return native_codec != WeightCodec::Dense ? native_codec : quantized() ? WeightCodec::Affine : WeightCodec::Dense;
  }
};

// The matrix stored as module `mod` ("<mod>.weight", and for MLX affine
// "<mod>.scales" / "<mod>.biases" with bits and group size from `quant`),
// checked against [rows, cols] (a quantized one: packed [rows, cols*bits/32],
// scales/biases [rows, cols/group]); `dir` names the checkpoint in errors.
// Both families' loaders (Qwen3.5 here, Gemma 4) read their matrices so.
// `form` says how a transformers-format module arrives (MatrixForm).
WeightRef checkpoint_matrix(const TensorStore& store, const QuantConfig& quant, const std::string& dir,
                            const std::string& mod, int64_t rows, int64_t cols, MatrixForm form = MatrixForm::Fp32);
// True when module `mod` is stored: `<mod>.weight`, or a transformers format's
// packed weight (`.qweight`, `.weight_packed`).
bool module_stored(const TensorStore& store, const std::string& mod);

class Qwen35Checkpoint {
 public:
  // Throws Error; also for a config that contradicts the tensors (more than
  // one MTP layer, tie_word_embeddings false without a stored LM head, or true
  // with a stored head whose bytes differ from the embedding's).
  static Qwen35Checkpoint open(const std::string& dir);
  // The same checks over a config and tensors already at hand (a checkpoint
  // generated in memory, io/synthetic.h); `label` stands for the directory.
  static Qwen35Checkpoint assemble(const std::string& label, Qwen35Config config, TensorStore store);

  const Qwen35Config& config() const { return config_; }
  Layout layout() const { return layout_; }
  const TensorStore& store() const { return store_; }
  const std::string& dir() const { return dir_; }
  // True when the (1+w) norms are stored as the real gamma (mlx-converted,
  // detected by conv1d stored [C, K, 1]).
  bool norms_shifted() const { return norms_shifted_; }
  // 0 when the checkpoint has no MTP head, else 1: open() refuses more (the
  // runtimes run mtp.layers.0 only). config().mtp_num_hidden_layers is set to
  // the same count, so runtimes and the CLI derive the same default block size.
  int mtp_layers() const { return mtp_layers_; }

  bool has(const std::string& logical) const;  // "<logical>.weight" (or bare name) stored
  // A linear/embedding weight; shape checked against [rows, cols] (for a
  // quantized one: packed [rows, cols*bits/32], scales/biases [rows, cols/group]).
  WeightRef matrix(const std::string& logical, int64_t rows, int64_t cols, MatrixForm form = MatrixForm::Fp32) const;
  // The LM head: lm_head if stored, else the (tied) embedding.
  WeightRef lm_head() const;
  // A norm weight as the real multiplicative gamma: for a (1+w) norm
  // (`one_plus`), 1 is added unless norms_shifted().
  std::vector<float> norm(const std::string& logical, int64_t size, bool one_plus) const;
  // Any other float vector (A_log, dt_bias), exact size check.
  std::vector<float> vector(const std::string& logical, int64_t size) const;
  // conv1d depthwise weight as [channels][kernel] floats, from [C,1,K] (HF) or [C,K,1] (MLX).
  std::vector<float> conv1d(const std::string& logical, int64_t channels, int64_t kernel) const;

  std::string stored_name(const std::string& logical) const;  // with layout prefix, no suffix
  // The inverse: the logical name of a stored tensor name (suffix kept:
  // "model.layers.0.mlp.up_proj.weight" -> "layers.0.mlp.up_proj.weight",
  // "lm_head.weight" -> "lm_head.weight"); nullopt when the tensor is not part
  // of the text model, its LM head or its MTP head (e.g. model.visual.*).
  std::optional<std::string> logical_name(const std::string& stored) const;
  // "mtp." or "language_model.mtp." (where the MTP tensors are stored).
  const std::string& mtp_prefix() const { return mtp_prefix_; }
  // Checks every tensor the model reads (trunk, head, and the MTP head when
  // mtp_layers() > 0): presence, dtype, shape. Throws the first problem.
  void validate() const;

 private:
  void check_tied_head() const;

  std::string dir_;
  Qwen35Config config_;
  TensorStore store_;
  Layout layout_ = Layout::CausalLM;
  bool norms_shifted_ = false;
  int mtp_layers_ = 0;
  std::string mtp_prefix_ = "mtp.";
};

// Fills out[cols] with row `row` of a WeightRef in fp32, dense (F32/BF16/F16)
// or quantized (per codec, fp32, no FMA: scale * q + bias, fp8 * scale,
// scale * (q - zero)). Throws Error for a row out of range.
void dequantize_row(const WeightRef& w, int64_t row, float* out);

}  // namespace nextn
