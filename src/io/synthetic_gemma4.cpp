#include "io/synthetic_gemma4.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/synthetic_specs.h"

namespace nextn {

namespace {

constexpr float kProjStd = 0.02f;

bool is_full(const Gemma4SyntheticPreset& p, int i) { return i + 1 == p.layers || (i + 1) % p.full_every == 0; }

// --quant -> bits (0: bf16). Throws Error for anything else.
int quant_bits(const std::string& quant) {
  if (quant == "bf16") return 0;
  if (quant == "q4") return 4;
  if (quant == "q8") return 8;
  fail("make-checkpoint: --quant '{}': expected bf16, q4 or q8 for a Gemma 4 preset", quant);
}

// A MoE layer's tensors beside the dense MLP (synthetic_gemma4.h): the
// router, its scales, the three extra norms and the experts, stacked as
// transformers (bf16) or mlx-lm (bits 4 / 8) store them.
void push_moe_specs(std::vector<Spec>& v, const Gemma4SyntheticPreset& p, const std::string& l, int bits) {
  const int64_t H = p.hidden, E = p.experts, I = p.moe_intermediate;
  auto near_one = [&](const std::string& name, int64_t n) {  // multipliers drawn near their init, 1
    v.push_back({name, DType::BF16, {n}, Fill::Uniform, 0.9f, 1.1f, name});
  };
  auto quantizable = [&](int64_t cols, int b) { return cols % kSyntheticGroup == 0 ? b : 0; };
  push_matrix_specs(v, l + "router.proj", E, H, kProjStd, quantizable(H, bits ? 8 : 0));  // 8-bit, as mlx-lm
  near_one(l + "router.scale", H);
  near_one(l + "router.per_expert_scale", E);
  for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"})
    near_one(l + n + ".weight", H);
  if (bits == 0) {
    const float a = kProjStd * std::sqrt(3.0f);  // uniform in ±a has std kProjStd
    v.push_back({l + "experts.gate_up_proj", DType::BF16, {E, 2 * I, H}, Fill::Uniform, -a, a, l + "experts.gate_up_proj"});
    v.push_back({l + "experts.down_proj", DType::BF16, {E, H, I}, Fill::Uniform, -a, a, l + "experts.down_proj"});
    return;
  }
  const std::string glu = l + "experts.switch_glu.";
  push_matrix_specs(v, glu + "gate_proj", I, H, kProjStd, quantizable(H, bits), E);
  push_matrix_specs(v, glu + "up_proj", I, H, kProjStd, quantizable(H, bits), E);
  push_matrix_specs(v, glu + "down_proj", H, I, kProjStd, quantizable(I, bits), E);
}

// Every tensor, by stored name (sorted). Quantized (bits 4/8): every matrix
// whose width is a multiple of the group (mlx-lm's rule); the others, the
// norms, layer_scalar and token_ordering stay dense.
std::vector<Spec> gemma4_specs(const Gemma4SyntheticPreset& p, int bits) {
  std::vector<Spec> v;
  const std::string pre = p.assistant ? "model." : "model.language_model.";
  const int64_t H = p.hidden;
  auto matrix = [&](const std::string& mod, int64_t rows, int64_t cols) {
    push_matrix_specs(v, mod, rows, cols, kProjStd, cols % kSyntheticGroup == 0 ? bits : 0);
  };
  auto norm = [&](const std::string& mod, int64_t n) {  // plain RMSNorm weights, near 1
    v.push_back({mod + ".weight", DType::BF16, {n}, Fill::Uniform, 0.9f, 1.1f, mod + ".weight"});
  };
  matrix(pre + "embed_tokens", p.vocab, H);
  norm(pre + "norm", H);
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = pre + "layers." + std::to_string(i) + ".";
    const bool full = is_full(p, i);
    const int64_t hd = full ? p.global_head_dim : p.head_dim, kv = full ? p.global_kv_heads : p.kv_heads;
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      norm(l + n, H);
    v.push_back({l + "layer_scalar", DType::BF16, {1}, Fill::Uniform, 1.0f, 1.0f, l + "layer_scalar"});
    matrix(l + "self_attn.q_proj", p.heads * hd, H);
    norm(l + "self_attn.q_norm", hd);
    matrix(l + "self_attn.o_proj", H, p.heads * hd);
    if (!p.assistant) {  // an assistant reads the target's K/V
      matrix(l + "self_attn.k_proj", kv * hd, H);
      norm(l + "self_attn.k_norm", hd);
      if (!full) matrix(l + "self_attn.v_proj", kv * hd, H);  // full layers: K = V
    }
    matrix(l + "mlp.gate_proj", p.intermediate, H);
    matrix(l + "mlp.up_proj", p.intermediate, H);
    matrix(l + "mlp.down_proj", H, p.intermediate);
    if (p.moe()) push_moe_specs(v, p, l, bits);
  }
  if (p.assistant) {
    matrix("pre_projection", H, 2 * int64_t(p.backbone_hidden));
    matrix("post_projection", p.backbone_hidden, H);
    if (p.centroids > 0) {
      matrix("masked_embedding.centroids", p.centroids, H);
      v.push_back({"masked_embedding.token_ordering", DType::I64, {p.vocab}, Fill::Permutation, 0, 0,
                   "masked_embedding.token_ordering"});
    }
  }
  std::sort(v.begin(), v.end(), [](const Spec& x, const Spec& y) { return x.name < y.name; });
  return v;
}

// The assistant drafter of target preset p (dense, as every gemma4_assistant): it reads the
// target's K/V, so it keeps the target's head shapes, and takes the target's hidden size as its
// backbone. Neither assistant's own config was found: 4 layers of hidden 1024, the target's
// attention heads, MLP width 4096 and the 2048-centroid head (top 32) are this generator's
// assumptions.
Gemma4SyntheticPreset assistant_of(Gemma4SyntheticPreset p) {
  p.assistant = true;
  p.backbone_hidden = p.hidden;
  p.hidden = 1024;
  p.layers = 4;
  p.intermediate = 4096;
  p.centroids = 2048;
  p.centroid_top_k = 32;
  p.softcap = 0.0f;
  return p;
}

// Gemma 4 26B-A4B, MoE (google/gemma-4-26B-A4B's text config; docs/moe.md lists the sources): 30
// layers, 5 sliding (head_dim 256, 8 KV heads, window 1024) : 1 full (global_head_dim 512, 2 KV
// heads, K = V), hidden 2816, dense MLP 2112, 16 heads, 128 experts top-8 of width 704, softcap 30,
// vocab 262144, 256K positions.
std::optional<Gemma4SyntheticPreset> gemma4_26b_a4b_preset(const std::string& name) {
  Gemma4SyntheticPreset p;
  p.name = name;
  p.hidden = 2816;
  p.vocab = 262144;
  p.heads = 16;
  p.head_dim = 256;
  p.kv_heads = 8;
  p.global_head_dim = 512;
  p.global_kv_heads = 2;
  p.sliding_window = 1024;
  p.softcap = 30.0f;
  p.max_positions = 262144;
  if (name == "gemma4-26b-a4b") {
    p.layers = 30;
    p.intermediate = 2112;
    p.experts = 128;
    p.top_k_experts = 8;
    p.moe_intermediate = 704;
    return p;
  }
  if (name == "gemma4-26b-a4b-assistant") return assistant_of(p);  // google/gemma-4-26B-A4B-it-assistant
  return std::nullopt;
}

}  // namespace

std::optional<Gemma4SyntheticPreset> gemma4_synthetic_preset(const std::string& name) {
  if (name.starts_with("gemma4-26b-a4b")) return gemma4_26b_a4b_preset(name);
  // Gemma 4 31B (text_config of its config.json): 60 layers, 5 sliding (head_dim 256, 16 KV heads,
  // window 1024) : 1 full (global_head_dim 512, 4 KV heads, K = V), softcap 30, 256K positions.
  Gemma4SyntheticPreset p;
  p.name = name;
  p.hidden = 5376;
  p.vocab = 262144;
  p.heads = 32;
  p.head_dim = 256;
  p.kv_heads = 16;
  p.global_head_dim = 512;
  p.global_kv_heads = 4;
  p.sliding_window = 1024;
  p.softcap = 30.0f;
  p.max_positions = 262144;
  if (name == "gemma4-31b") {
    p.layers = 60;
    p.intermediate = 21504;
    return p;
  }
  if (name == "gemma4-31b-assistant") return assistant_of(p);
  return std::nullopt;
}

std::vector<std::string> gemma4_synthetic_preset_names() {
  return {"gemma4-31b", "gemma4-31b-assistant", "gemma4-26b-a4b", "gemma4-26b-a4b-assistant"};
}

std::string gemma4_synthetic_config_json(const Gemma4SyntheticPreset& p, const std::string& quant) {
  const int bits = quant_bits(quant);
  using J = nlohmann::ordered_json;
  J layer_types = J::array();
  for (int i = 0; i < p.layers; ++i) layer_types.push_back(is_full(p, i) ? "full_attention" : "sliding_attention");
  J text = {
      {"model_type", "gemma4_text"},
      {"hidden_size", p.hidden},
      {"num_hidden_layers", p.layers},
      {"intermediate_size", p.intermediate},
      {"vocab_size", p.vocab},
      {"num_attention_heads", p.heads},
      {"num_key_value_heads", p.kv_heads},
      {"head_dim", p.head_dim},
      {"global_head_dim", p.global_head_dim},
      {"num_global_key_value_heads", p.global_kv_heads},
      {"attention_k_eq_v", true},
      {"sliding_window", p.sliding_window},
      {"layer_types", layer_types},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention", {{"rope_type", "proportional"}, {"rope_theta", 1000000.0}, {"partial_rotary_factor", 0.25}}}}},
      {"final_logit_softcapping", p.softcap > 0 ? J(p.softcap) : J(nullptr)},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"rms_norm_eps", 1e-6},
      {"attention_bias", false},
      {"enable_moe_block", p.moe()},
      {"hidden_size_per_layer_input", 0},
      {"num_kv_shared_layers", p.assistant ? p.layers : 0},
      {"max_position_embeddings", p.max_positions},
      {"tie_word_embeddings", true},
      {"eos_token_id", 1},
      {"dtype", "bfloat16"},
  };
  if (p.moe()) {
    text["num_experts"] = p.experts;
    text["top_k_experts"] = p.top_k_experts;
    text["moe_intermediate_size"] = p.moe_intermediate;
  }
  const J note = {{"preset", p.name}, {"quant", quant}, {"note", "random weights at the real shapes"}};
  // Top level, as mlx-lm writes it (both keys, as `nextn quantize` does).
  auto with_quant = [&](J cfg) {
    if (bits == 0) return cfg;
    J q = {{"group_size", kSyntheticGroup}, {"bits", bits}, {"mode", "affine"}};
    if (p.moe() && bits != 8 && p.hidden % kSyntheticGroup == 0)  // the 8-bit routers push_moe_specs writes
      for (int i = 0; i < p.layers; ++i)
        q["model.language_model.layers." + std::to_string(i) + ".router.proj"] = {{"group_size", kSyntheticGroup},
                                                                                  {"bits", 8}};
    cfg["quantization"] = q;
    cfg["quantization_config"] = q;
    return cfg;
  };
  if (p.assistant) {
    J cfg = {{"architectures", {"Gemma4AssistantForCausalLM"}},
             {"model_type", "gemma4_assistant"},
             {"backbone_hidden_size", p.backbone_hidden},
             {"use_ordered_embeddings", p.centroids > 0},
             {"num_centroids", p.centroids > 0 ? p.centroids : 2048},
             {"centroid_intermediate_top_k", p.centroid_top_k > 0 ? p.centroid_top_k : 32},
             {"tie_word_embeddings", true},
             {"text_config", text},
             {"nextn_synthetic", note}};
    return with_quant(cfg).dump(2) + "\n";
  }
  J cfg = {{"architectures", {"Gemma4ForConditionalGeneration"}},
           {"model_type", "gemma4"},
           {"tie_word_embeddings", true},
           {"text_config", text},
           {"nextn_synthetic", note}};
  return with_quant(cfg).dump(2) + "\n";
}

MakeCheckpointReport make_gemma4_checkpoint(const Gemma4SyntheticPreset& p, const MakeCheckpointOptions& o,
                                            const std::string& out_dir) {
  const int bits = quant_bits(o.quant);
  return write_synthetic(gemma4_specs(p, bits), gemma4_synthetic_config_json(p, o.quant), bits ? "mlx" : "pt", o,
                         out_dir);
}

SyntheticCheckpointSize gemma4_synthetic_checkpoint_size(const Gemma4SyntheticPreset& p, const std::string& quant) {
  const std::vector<Spec> specs = gemma4_specs(p, quant_bits(quant));
  SyntheticCheckpointSize r;
  r.tensors = int(specs.size());
  for (const Spec& t : specs) r.total += t.nbytes();
  r.per_rank = {r.total};
  return r;
}

}  // namespace nextn
