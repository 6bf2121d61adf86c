#include "io/synthetic.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <thread>

#include <sys/mman.h>

#include <cerrno>

#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/synthetic_rng.h"
#include "io/synthetic_specs.h"

namespace nextn {

namespace fs = std::filesystem;

namespace {

using namespace synthetic_rng;

constexpr float kProjStd = 0.02f;
constexpr float kQ4StdOfNibble = 4.6098f;  // sqrt((16^2 - 1) / 12)
constexpr float kQ8StdOfByte = 73.9003f;   // sqrt((256^2 - 1) / 12)

float scale_of(uint64_t key, int64_t g, float std_target, int bits) {
  const uint64_t r = draw(key, uint64_t(g));
  const float mag = std_target / (bits == 8 ? kQ8StdOfByte : kQ4StdOfNibble) * (0.8f + 0.4f * unit(r));
  return (r & 1u) ? -mag : mag;
}

void fill_range(const Spec& s, uint64_t seed, int64_t begin, int64_t end, uint8_t* out) {
  const uint64_t key = stream_key(seed, s.key_name);
  if (fill_hf_quant_range(s, key, begin, end, out)) return;
  switch (s.fill) {
    case Fill::Uniform:
      for (int64_t i = begin; i < end; ++i) {
        const uint16_t h = to_bf16(s.lo + (s.hi - s.lo) * unit(draw(key, uint64_t(i))));
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case Fill::Packed:
      for (int64_t i = begin; i < end; ++i) {
        const uint32_t w = uint32_t(draw(key, uint64_t(i)) >> 16);
        std::memcpy(out + 4 * i, &w, 4);
      }
      break;
    case Fill::Scales:
    case Fill::Biases:
      for (int64_t i = begin; i < end; ++i) {
        const float sc = std::bit_cast<float>(uint32_t(to_bf16(scale_of(key, i, s.hi, s.bits))) << 16);
        const float mid = s.bits == 8 ? -127.5f : -7.5f;  // the middle of the code range: mean ~0
        const uint16_t h = to_bf16(s.fill == Fill::Scales ? sc : mid * sc);
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case Fill::ALogF32:
      for (int64_t i = begin; i < end; ++i) {
        const float v = std::log(1.0f + 15.0f * unit(draw(key, uint64_t(i))));
        std::memcpy(out + 4 * i, &v, 4);
      }
      break;
    case Fill::Permutation: {
      // i -> (a * i + b) mod n with gcd(a, n) = 1: a bijection of [0, n), drawn from the key.
      const uint64_t n = uint64_t(s.numel());
      uint64_t a = (draw(key, 0) % n) | 1u;
      while (std::gcd(a, n) != 1) a = (a + 2) % n;
      const uint64_t b = draw(key, 1) % n;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t v = int64_t((a * uint64_t(i) % n + b) % n);  // n <= 2^31: no overflow
        std::memcpy(out + 8 * i, &v, 8);
      }
      break;
    }
    case Fill::DtBias:
      for (int64_t i = begin; i < end; ++i) {
        const double dt = std::exp(std::log(1e-3) + (std::log(1e-1) - std::log(1e-3)) * unit(draw(key, uint64_t(i))));
        const uint16_t h = to_bf16(float(std::log(std::expm1(dt))));
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    default: fail("make-checkpoint: tensor '{}': no generator for its fill", s.name);
  }
}

}  // namespace

SpecSplit stored_split(const MatrixSplit& split, int row_axis, int64_t row_per, int col_axis, int64_t col_per) {
  if (split.split == TensorParallelSplit::Replicated || (!split.cols && row_axis < 0)) return {};
  return split.cols ? SpecSplit{split.split, split.unit, col_axis, col_per}
                    : SpecSplit{split.split, split.unit, row_axis, row_per};
}

void push_matrix_specs(std::vector<Spec>& v, const std::string& mod, int64_t rows, int64_t cols, float std_, int bits,
                       int64_t stack, MatrixSplit split) {
  // [rows, c] or, stacked, [stack, rows, c].
  auto shape = [&](int64_t c) {
    return stack > 0 ? std::vector<int64_t>{stack, rows, c} : std::vector<int64_t>{rows, c};
  };
  const int row_axis = stack > 0 ? 1 : 0;
  // Each tensor with the stored columns per logical column group it packs.
  auto push = [&](Spec s, int64_t col_per) {
    s.tp = stored_split(split, row_axis, 1, row_axis + 1, col_per);
    v.push_back(std::move(s));
  };
  if (bits == 0) {
    const float a = std_ * std::sqrt(3.0f);  // uniform in ±a has std std_
    push({mod + ".weight", DType::BF16, shape(cols), Fill::Uniform, -a, a, mod + ".weight"}, 1);
    return;
  }
  constexpr int64_t g = kSyntheticGroup;
  if (bits != 4 && bits != 8) fail("make-checkpoint: {}: {}-bit quantization (expected 4 or 8)", mod, bits);
  if (cols % g != 0) fail("make-checkpoint: {}: input size {} is not a multiple of the group size {}", mod, cols, g);
  push({mod + ".weight", DType::U32, shape(cols * bits / 32), Fill::Packed, 0, 0, mod + ".weight"}, 32 / bits);
  push({mod + ".scales", DType::BF16, shape(cols / g), Fill::Scales, 0, std_, mod + ".qparams", bits}, g);
  push({mod + ".biases", DType::BF16, shape(cols / g), Fill::Biases, 0, std_, mod + ".qparams", bits}, g);
}

namespace {

void check_quant(const std::string& quant) {
  if (quant != "q4" && quant != "bf16" && !hf_synthetic_quant(quant))
    fail("make-checkpoint: --quant '{}': expected q4, bf16, fp8 or gptq4", quant);
}

// GPTQ's group: 128, or the largest divisor of 128 that divides every
// quantized module's input (the test presets' 64-wide ones; the real presets'
// inputs are all multiples of 128).
int64_t gptq_group(const SyntheticPreset& p) {
  int64_t g = kGptqGroup;
  for (int64_t c : {int64_t(p.hidden), int64_t(p.heads) * p.head_dim, int64_t(p.lin_v_heads) * p.lin_v_dim,
                    int64_t(p.intermediate), int64_t(p.moe_intermediate), int64_t(p.shared_intermediate)})
    if (c > 0) g = std::gcd(g, c);
  return g;
}

// The decoder layers' Linears that the transformers formats leave bf16, as
// Qwen's FP8 releases list them (beside the embedding, the LM head and the
// MTP head): the GDN's one-row-per-head in_proj_a/b, the MoE router and
// shared_expert_gate.
std::vector<std::string> not_converted_modules(const SyntheticPreset& p) {
  std::vector<std::string> v{"lm_head", "model.language_model.embed_tokens"};
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = "model.language_model.layers." + std::to_string(i) + ".";
    if ((i + 1) % 4 != 0)
      for (const char* m : {"linear_attn.in_proj_a", "linear_attn.in_proj_b"}) v.push_back(l + m);
    if (p.moe())
      for (const char* m : {"mlp.gate", "mlp.shared_expert_gate"}) v.push_back(l + m);
  }
  v.push_back("mtp");
  return v;
}

}  // namespace

// Every tensor of the checkpoint, by stored name: the MLX layout for q4, the
// Hugging Face one for the others (fp8 and gptq4 quantize the decoder
// layers' Linears but those not_converted_modules names). Each says what a
// tensor-parallel rank holds of it, as backend/cpu/qwen35_shard.cpp loads it.
std::vector<Spec> qwen35_synthetic_specs(const SyntheticPreset& p, const std::string& quant) {
  check_quant(quant);
  std::vector<Spec> v;
  const bool q4 = quant == "q4";
  const auto hf = hf_synthetic_quant(quant);
  const int64_t group = gptq_group(p);
  const std::string pre = q4 ? "language_model.model." : "model.language_model.";
  const std::string head = q4 ? "language_model.lm_head" : "lm_head";
  const int64_t H = p.hidden;
  auto matrix = [&](const std::string& mod, int64_t rows, int64_t cols, MatrixSplit split = {},
                    bool quantizable = true) {
    if (hf && quantizable && mod.starts_with(pre + "layers."))
      push_hf_quant_matrix_specs(v, mod, rows, cols, kProjStd, *hf, group, split);
    else
      push_matrix_specs(v, mod, rows, cols, kProjStd, q4 ? 4 : 0, 0, split);
  };
  using S = TensorParallelSplit;
  auto rows_by = [](S s, int64_t unit = 1) { return MatrixSplit{s, unit, false}; };
  auto cols_by = [](S s, int64_t unit = 1) { return MatrixSplit{s, unit, true}; };
  // A vector (or conv taps) split along its first axis.
  auto vector_split = [](S s) { return SpecSplit{s, 1, 0, 1}; };
  // (1+w) norms: the real gamma (q4, mlx stores it shifted) or gamma - 1 (HF).
  auto norm1p = [&](const std::string& mod, int64_t n) {
    const float c = q4 ? 1.0f : 0.0f;
    v.push_back({mod + ".weight", DType::BF16, {n}, Fill::Uniform, c - 0.1f, c + 0.1f, mod + ".weight"});
  };
  auto attention = [&](const std::string& l) {
    const int64_t hd = p.head_dim;
    matrix(l + "self_attn.q_proj", int64_t(p.heads) * hd * 2, H, rows_by(S::QueryHeads, 2 * hd));  // [query | gate]
    matrix(l + "self_attn.k_proj", int64_t(p.kv_heads) * hd, H, rows_by(S::KvHeads, hd));
    matrix(l + "self_attn.v_proj", int64_t(p.kv_heads) * hd, H, rows_by(S::KvHeads, hd));
    matrix(l + "self_attn.o_proj", H, int64_t(p.heads) * hd, cols_by(S::QueryHeads, hd));
    norm1p(l + "self_attn.q_norm", hd);
    norm1p(l + "self_attn.k_norm", hd);
  };
  // The router and shared_expert_gate: 8-bit in q4 (synthetic_config_json
  // names them in the quantization block's overrides).
  auto gate8 = [&](const std::string& mod, int64_t rows) {
    push_matrix_specs(v, mod, rows, H, kProjStd, q4 ? 8 : 0);
  };
  auto mlp_norms = [&](const std::string& l) {
    norm1p(l + "input_layernorm", H);
    norm1p(l + "post_attention_layernorm", H);
    if (!p.moe()) {
      matrix(l + "mlp.gate_proj", p.intermediate, H, rows_by(S::Mlp));
      matrix(l + "mlp.up_proj", p.intermediate, H, rows_by(S::Mlp));
      matrix(l + "mlp.down_proj", H, p.intermediate, cols_by(S::Mlp));
      return;
    }
    const int64_t E = p.experts, I = p.moe_intermediate, Is = p.shared_intermediate;
    gate8(l + "mlp.gate", E);
    if (q4) {
      push_matrix_specs(v, l + "mlp.switch_mlp.gate_proj", I, H, kProjStd, 4, E, rows_by(S::ExpertMlp));
      push_matrix_specs(v, l + "mlp.switch_mlp.up_proj", I, H, kProjStd, 4, E, rows_by(S::ExpertMlp));
      push_matrix_specs(v, l + "mlp.switch_mlp.down_proj", H, I, kProjStd, 4, E, cols_by(S::ExpertMlp));
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = l + "mlp.experts." + std::to_string(e) + ".";
        matrix(x + "gate_proj", I, H, rows_by(S::ExpertMlp));
        matrix(x + "up_proj", I, H, rows_by(S::ExpertMlp));
        matrix(x + "down_proj", H, I, cols_by(S::ExpertMlp));
      }
    }
    matrix(l + "mlp.shared_expert.gate_proj", Is, H, rows_by(S::SharedExpertMlp));
    matrix(l + "mlp.shared_expert.up_proj", Is, H, rows_by(S::SharedExpertMlp));
    matrix(l + "mlp.shared_expert.down_proj", H, Is, cols_by(S::SharedExpertMlp));
    gate8(l + "mlp.shared_expert_gate", 1);
  };

  matrix(pre + "embed_tokens", p.vocab, H);
  norm1p(pre + "norm", H);
  if (!p.tie) matrix(head, p.vocab, H, rows_by(S::Vocab));  // a tied head is the (replicated) embedding
  const int64_t kd = int64_t(p.lin_k_heads) * p.lin_k_dim, vd = int64_t(p.lin_v_heads) * p.lin_v_dim;
  const int64_t cd = 2 * kd + vd;
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = pre + "layers." + std::to_string(i) + ".";
    mlp_norms(l);
    if ((i + 1) % 4 == 0) {
      attention(l);
      continue;
    }
    const std::string g = l + "linear_attn.";
    matrix(g + "in_proj_qkv", cd, H, rows_by(S::GdnChannels));
    matrix(g + "in_proj_z", vd, H, rows_by(S::GdnValueHeads, p.lin_v_dim));
    matrix(g + "in_proj_b", p.lin_v_heads, H, rows_by(S::GdnValueHeads), false);
    matrix(g + "in_proj_a", p.lin_v_heads, H, rows_by(S::GdnValueHeads), false);
    matrix(g + "out_proj", H, vd, cols_by(S::GdnValueHeads, p.lin_v_dim));
    const std::vector<int64_t> conv_shape =
        q4 ? std::vector<int64_t>{cd, p.conv_kernel, 1} : std::vector<int64_t>{cd, 1, p.conv_kernel};
    v.push_back({g + "conv1d.weight", DType::BF16, conv_shape, Fill::Uniform, -0.5f, 0.5f, g + "conv1d.weight"});
    v.back().tp = vector_split(S::GdnChannels);
    v.push_back({g + "A_log", DType::F32, {p.lin_v_heads}, Fill::ALogF32, 0, 0, g + "A_log"});
    v.back().tp = vector_split(S::GdnValueHeads);
    v.push_back({g + "dt_bias", DType::BF16, {p.lin_v_heads}, Fill::DtBias, 0, 0, g + "dt_bias"});
    v.back().tp = vector_split(S::GdnValueHeads);
    // The gated output norm is an ordinary RMSNorm (w near 1) in both layouts.
    v.push_back({g + "norm.weight", DType::BF16, {p.lin_v_dim}, Fill::Uniform, 0.9f, 1.1f, g + "norm.weight"});
  }
  // MTP head: fc [H, 2H], its norms, one full-attention decoder layer, mtp.norm.
  matrix("mtp.fc", H, 2 * H);
  norm1p("mtp.pre_fc_norm_embedding", H);
  norm1p("mtp.pre_fc_norm_hidden", H);
  norm1p("mtp.norm", H);
  mlp_norms("mtp.layers.0.");
  attention("mtp.layers.0.");
  std::sort(v.begin(), v.end(), [](const Spec& a, const Spec& b) { return a.name < b.name; });
  return v;
}

namespace {

int thread_count(int requested) {
  if (requested > 0) return requested;
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

// Fills specs [b, e) into out[i - b] (each specs[i].nbytes() long) on
// `threads` threads, in chunks of 2^20 elements taken in turn: every element
// is a function of (seed, name, index), so the bytes do not depend on the
// thread count.
void fill_specs(const std::vector<Spec>& specs, size_t b, size_t e, const std::vector<uint8_t*>& out, uint64_t seed,
                int threads) {
  struct Task {
    size_t t;
    int64_t begin, end;
  };
  std::vector<Task> tasks;
  constexpr int64_t kChunk = int64_t(1) << 20;
  for (size_t i = b; i < e; ++i)
    for (int64_t c = 0, n = specs[i].numel(); c < n; c += kChunk) tasks.push_back({i, c, std::min(n, c + kChunk)});
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next.fetch_add(1)) < tasks.size();)
      fill_range(specs[tasks[k].t], seed, tasks[k].begin, tasks[k].end, out[tasks[k].t - b]);
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace

std::optional<SyntheticPreset> synthetic_preset(const std::string& name) {
  //                              H     L   I      Hq  Hkv hd   Hk  dk   Hv  dv   K  V       tie
  if (name == "qwen3.5-0.8b") return SyntheticPreset{name, 1024, 24, 3584, 8, 2, 256, 16, 128, 16, 128, 4, 248320, true};
  if (name == "qwen3.5-4b") return SyntheticPreset{name, 2560, 32, 9216, 16, 4, 256, 16, 128, 32, 128, 4, 248320, true};
  if (name == "qwen3.5-27b")
    return SyntheticPreset{name, 5120, 64, 17408, 24, 4, 256, 16, 128, 48, 128, 4, 248320, false};
  if (name == "test-tiny") return SyntheticPreset{name, 64, 4, 128, 2, 1, 32, 2, 16, 4, 16, 4, 512, false};
  // Every matrix with a multiple of 128 columns: the CUDA streamed kernel's shapes.
  if (name == "test-stream") return SyntheticPreset{name, 128, 4, 384, 2, 1, 64, 2, 32, 4, 32, 4, 1024, false};
  // About 19M parameters (MTP included): the size of nextn's own default model, for CPU benchmarks.
  if (name == "small-19m") return SyntheticPreset{name, 384, 8, 1024, 4, 2, 64, 4, 64, 4, 96, 4, 8192, true};
  // MoE (intermediate 0; then experts, top-k, expert width, shared expert width).
  // Qwen/Qwen3.5-35B-A3B's text config (transformers' Qwen3_5MoeTextConfig defaults).
  if (name == "qwen3.5-35b-a3b")
    return SyntheticPreset{name, 2048, 40, 0, 16, 2, 256, 16, 128, 32, 128, 4, 248320, false, 256, 8, 512, 512};
  // Qwen/Qwen3.5-122B-A10B. Published (docs/moe.md lists the sources): 48 layers, 256 experts top-8,
  // vocab 248320. Inferred from a published expert-parameter count (2 H I E L = 77.3B): hidden 3072,
  // expert width 1024. Assumed, as the 397B-A17B's (its config.json was not found): 32 heads, 2 KV
  // heads, head_dim 256, linear attention 16 key x 128 and 64 value heads x 128, shared expert width
  // 1024, untied head. With these the parameters without the MTP layer come to the published 122.1B.
  if (name == "qwen3.5-122b-a10b")
    return SyntheticPreset{name, 3072, 48, 0, 32, 2, 256, 16, 128, 64, 128, 4, 248320, false, 256, 8, 1024, 1024};
  // Qwen/Qwen3.5-397B-A17B: hidden 4096, 60 layers, 32 heads, 2 KV heads, head_dim 256, linear
  // attention 16 key x 128 and 64 value heads x 128, 512 experts top-10, expert and shared width 1024,
  // vocab 248320, untied (docs/moe.md lists the sources). About 800 GB in bf16: for sizing.
  if (name == "qwen3.5-397b-a17b")
    return SyntheticPreset{name, 4096, 60, 0, 32, 2, 256, 16, 128, 64, 128, 4, 248320, false, 512, 10, 1024, 1024};
  // Tests: 8 experts top-2; every matrix 64 columns wide or a multiple (q4 groups);
  // shared width != expert width so a swapped shape fails to load.
  if (name == "test-tiny-moe") return SyntheticPreset{name, 64, 4, 0, 2, 1, 32, 2, 16, 4, 16, 4, 512, false, 8, 2, 64, 128};
  return std::nullopt;
}

std::vector<std::string> synthetic_preset_names() {
  return {"qwen3.5-0.8b",      "qwen3.5-4b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b",
          "qwen3.5-397b-a17b", "test-tiny",  "test-stream", "small-19m",       "test-tiny-moe"};
}

std::string synthetic_config_json(const SyntheticPreset& p, const std::string& quant) {
  using J = nlohmann::ordered_json;
  J layer_types = J::array();
  for (int i = 0; i < p.layers; ++i) layer_types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  J text = {
      {"model_type", p.moe() ? "qwen3_5_moe_text" : "qwen3_5_text"},
      {"hidden_size", p.hidden},
      {"num_hidden_layers", p.layers},
      {"intermediate_size", p.intermediate},
      {"vocab_size", p.vocab},
      {"num_attention_heads", p.heads},
      {"num_key_value_heads", p.kv_heads},
      {"head_dim", p.head_dim},
      {"linear_num_key_heads", p.lin_k_heads},
      {"linear_key_head_dim", p.lin_k_dim},
      {"linear_num_value_heads", p.lin_v_heads},
      {"linear_value_head_dim", p.lin_v_dim},
      {"linear_conv_kernel_dim", p.conv_kernel},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attn_output_gate", true},
      {"full_attention_interval", 4},
      {"layer_types", layer_types},
      {"max_position_embeddings", 262144},
      {"rope_parameters",
       {{"rope_type", "default"},
        {"rope_theta", 10000000.0},
        {"partial_rotary_factor", 0.25},
        {"mrope_section", {11, 11, 10}},
        {"mrope_interleaved", true}}},
      {"mamba_ssm_dtype", "float32"},
      {"mtp_num_hidden_layers", 1},
      {"mtp_use_dedicated_embeddings", false},
      {"tie_word_embeddings", p.tie},
      {"eos_token_id", p.vocab > 248044 ? 248044 : p.vocab - 1},
      {"dtype", "bfloat16"},
  };
  if (p.moe()) {  // no dense MLP: its width is not in transformers' MoE config either
    text.erase("intermediate_size");
    text["num_experts"] = p.experts;
    text["num_experts_per_tok"] = p.experts_per_tok;
    text["moe_intermediate_size"] = p.moe_intermediate;
    text["shared_expert_intermediate_size"] = p.shared_intermediate;
    text["router_aux_loss_coef"] = 0.001;
    text["output_router_logits"] = false;
  }
  J cfg = {{"architectures", {p.moe() ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
           {"model_type", p.moe() ? "qwen3_5_moe" : "qwen3_5"},
           {"tie_word_embeddings", p.tie},
           {"text_config", text},
           {"nextn_synthetic", {{"preset", p.name}, {"quant", quant}, {"note", "random weights at the real shapes"}}}};
  if (quant == "q4") {
    J q = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"}};
    if (p.moe()) {  // the 8-bit gates qwen35_synthetic_specs writes, by stored module path
      std::vector<std::string> layers;
      for (int i = 0; i < p.layers; ++i) layers.push_back("language_model.model.layers." + std::to_string(i) + ".");
      layers.push_back("mtp.layers.0.");
      for (const auto& l : layers)
        for (const char* m : {"mlp.gate", "mlp.shared_expert_gate"})
          q[l + m] = {{"group_size", 64}, {"bits", 8}};
    }
    cfg["quantization"] = q;
    cfg["quantization_config"] = q;
  }
  if (const auto hf = hf_synthetic_quant(quant))
    cfg["quantization_config"] = hf_quantization_config(*hf, gptq_group(p), not_converted_modules(p));
  return cfg.dump(2) + "\n";
}

uint64_t synthetic_checkpoint_bytes(const SyntheticPreset& p, const std::string& quant) {
  uint64_t n = 0;
  for (const Spec& s : qwen35_synthetic_specs(p, quant)) n += s.nbytes();
  return n;
}

MakeCheckpointReport make_checkpoint(const SyntheticPreset& p, const MakeCheckpointOptions& o,
                                     const std::string& out_dir) {
  return write_synthetic(qwen35_synthetic_specs(p, o.quant), synthetic_config_json(p, o.quant), o.quant == "q4" ? "mlx" : "pt", o,
                         out_dir);
}

Qwen35Checkpoint synthetic_checkpoint_in_memory(const SyntheticPreset& p, const MakeCheckpointOptions& o) {
  const std::vector<Spec> specs = qwen35_synthetic_specs(p, o.quant);
  const std::string label = fmt::format("preset {} ({}, seed {}, in memory)", p.name, o.quant, o.seed);
  // One anonymous mapping for every tensor, each at a 64-byte offset; its
  // pages are touched first by the threads that fill them.
  std::vector<uint64_t> at(specs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    at[i] = total;
    total += (specs[i].nbytes() + 63) / 64 * 64;
  }
  void* map = ::mmap(nullptr, std::max<uint64_t>(total, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    fail("{}: cannot map {:.2f} GiB of host memory: {}", label, double(total) / double(1ull << 30), std::strerror(errno));
  std::shared_ptr<const void> memory(map, [size = std::max<uint64_t>(total, 1)](const void* m) {
    ::munmap(const_cast<void*>(m), size);
  });
  auto* base = static_cast<uint8_t*>(map);
  std::vector<uint8_t*> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) out[i] = base + at[i];
  fill_specs(specs, 0, specs.size(), out, o.seed, thread_count(o.threads));
  std::vector<TensorView> views;
  views.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    views.push_back({specs[i].name, specs[i].dtype, specs[i].shape, base + at[i], size_t(specs[i].nbytes()), nullptr});
  const std::string config = synthetic_config_json(p, o.quant);
  return Qwen35Checkpoint::assemble(label, parse_qwen35_config(config, label + " config.json"),
                                    TensorStore::in_memory(label, std::move(views), std::move(memory)));
}

MakeCheckpointReport write_synthetic(const std::vector<Spec>& specs, const std::string& config_json,
                                     const std::string& format, const MakeCheckpointOptions& o,
                                     const std::string& out_dir) {
  if (o.shard_bytes == 0) fail("make-checkpoint: the shard size must be positive");
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    if (!fs::is_directory(out_dir, ec)) fail("{}: exists and is not a directory", out_dir);
    for (const auto& e : fs::directory_iterator(out_dir, ec)) {
      const std::string f = e.path().filename().string();
      if (f.ends_with(".safetensors") || f == "model.safetensors.index.json")
        fail("{}: already holds {}; remove it or choose another output directory", out_dir, f);
    }
  } else {
    fs::create_directories(out_dir, ec);
    if (ec) fail("{}: cannot create directory: {}", out_dir, ec.message());
  }

  // Shard plan: consecutive tensors (name order) until a shard reaches shard_bytes.
  std::vector<std::pair<size_t, size_t>> shards;  // [begin, end) into specs
  {
    size_t b = 0;
    uint64_t acc = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      acc += specs[i].nbytes();
      if (acc >= o.shard_bytes || i + 1 == specs.size()) {
        shards.push_back({b, i + 1});
        b = i + 1;
        acc = 0;
      }
    }
  }
  const int threads = thread_count(o.threads);
  MakeCheckpointReport rep;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    const size_t b = shards[s].first, e = shards[s].second;
    std::vector<std::vector<uint8_t>> bufs(e - b);
    std::vector<uint8_t*> dst(e - b);
    for (size_t i = b; i < e; ++i) {
      bufs[i - b].resize(specs[i].nbytes());
      dst[i - b] = bufs[i - b].data();
    }
    fill_specs(specs, b, e, dst, o.seed, threads);

    std::vector<TensorToWrite> out;
    for (size_t i = b; i < e; ++i) {
      out.push_back({specs[i].name, specs[i].dtype, specs[i].shape, bufs[i - b].data(), bufs[i - b].size()});
      weight_map[specs[i].name] = file;
      rep.bytes += bufs[i - b].size();
      ++rep.tensors;
    }
    write_safetensors((fs::path(out_dir) / file).string(), out, {{"format", format}});
    rep.files.push_back(file);
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", rep.bytes}}}, {"weight_map", weight_map}};
  auto write_text = [&](const std::string& name, const std::string& text) {
    const fs::path path = fs::path(out_dir) / name;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) fail("{}: write failed", path.string());
  };
  write_text("model.safetensors.index.json", index.dump(2) + "\n");
  write_text("config.json", config_json);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace nextn
