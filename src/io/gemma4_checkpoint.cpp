#include "io/gemma4_checkpoint.h"

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace nextn {

namespace {

std::string trimmed(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

Gemma4Checkpoint Gemma4Checkpoint::open(const std::string& dir) {
  Gemma4Checkpoint ck;
  ck.dir_ = trimmed(dir);
  ck.config_ = load_gemma4_config(dir);
  ck.store_ = TensorStore::open(dir);
  std::string why;
  const auto layout = detect_layout(ck.store_.names(), &why);
  if (!layout) fail("{}: cannot detect the checkpoint layout: {}", ck.dir_, why);
  ck.prefix_ = layout_prefix(*layout);
  ck.head_ = layout_head(*layout);
  if (!ck.config_.tie_word_embeddings && !ck.store_.find(ck.head_ + ".weight"))
    fail("{}: config.json: field 'tie_word_embeddings' is false but there is no tensor '{}.weight'", ck.dir_,
         ck.head_);
  return ck;
}

Gemma4Checkpoint Gemma4Checkpoint::open_assistant(const std::string& dir) {
  Gemma4Checkpoint ck;
  ck.dir_ = trimmed(dir);
  ck.assistant_ = load_gemma4_assistant_config(dir);
  ck.config_ = ck.assistant_.text;
  ck.is_assistant_ = true;
  ck.store_ = TensorStore::open(dir);
  ck.prefix_ = "model.";
  return ck;
}

bool Gemma4Checkpoint::has(const std::string& logical) const { return store_.find(stored(logical) + ".weight"); }

WeightRef Gemma4Checkpoint::matrix(const std::string& logical, int64_t rows, int64_t cols, bool top_level) const {
  const std::string mod = !top_level ? stored(logical) : logical == "lm_head" ? head_ : logical;
  return checkpoint_matrix(store_, config_.quant, dir_, mod, rows, cols);
}

WeightRef Gemma4Checkpoint::lm_head() const {
  const int64_t V = config_.vocab_size, H = config_.hidden_size;
  if (!config_.tie_word_embeddings && !is_assistant_) return matrix("lm_head", V, H, true);
  return matrix("embed_tokens", V, H);
}

std::vector<float> Gemma4Checkpoint::vector(const std::string& name, int64_t size) const {
  const TensorView* t = store_.find(name);
  if (!t) fail("{}: missing tensor '{}'", dir_, name);
  if (!is_float_dtype(t->dtype))
    fail("{}: tensor '{}': dtype {}, expected F32, BF16 or F16", dir_, name, dtype_name(t->dtype));
  if (t->shape != std::vector<int64_t>{size})
    fail("{}: tensor '{}': shape {}, expected [{}]", dir_, name, shape_text(t->shape), size);
  std::vector<float> out(static_cast<size_t>(size));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_float(t->dtype, t->data, i);
  return out;
}

float Gemma4Checkpoint::embed_scale() const {
  const float s = std::sqrt(float(config_.hidden_size));
  const WeightRef e = matrix("embed_tokens", config_.vocab_size, config_.hidden_size);
  // A quantized embedding dequantizes in its scales' dtype (mlx-lm computes
  // in the model's dtype, which the scales carry): round to that.
  switch (e.quantized() ? e.scales->dtype : e.weight->dtype) {
    case DType::BF16:
      return bf16_to_f32(f32_to_bf16(s));
    case DType::F16:
      return f16_to_f32(f32_to_f16(s));
    default:
      return s;
  }
}

std::vector<int32_t> Gemma4Checkpoint::token_ordering() const {
  const std::string name = "masked_embedding.token_ordering";
  const TensorView* t = store_.find(name);
  if (!t) fail("{}: missing tensor '{}' (use_ordered_embeddings is true)", dir_, name);
  const int64_t V = config_.vocab_size;
  if (t->shape != std::vector<int64_t>{V})
    fail("{}: tensor '{}': shape {}, expected [{}]", dir_, name, shape_text(t->shape), V);
  if (t->dtype != DType::I64 && t->dtype != DType::I32)
    fail("{}: tensor '{}': dtype {}, expected I64 or I32", dir_, name, dtype_name(t->dtype));
  std::vector<int32_t> out(static_cast<size_t>(V));
  std::vector<bool> seen(static_cast<size_t>(V), false);
  for (int64_t i = 0; i < V; ++i) {
    const int64_t v =
        t->dtype == DType::I64 ? load_unaligned<int64_t>(t->data + 8 * i) : load_unaligned<int32_t>(t->data + 4 * i);
    if (v < 0 || v >= V || seen[size_t(v)])
      fail("{}: tensor '{}': entry {} ({}) makes it no permutation of the vocabulary", dir_, name, i, v);
    seen[size_t(v)] = true;
    out[size_t(i)] = int32_t(v);
  }
  return out;
}

void Gemma4Checkpoint::check_target_capacity(int max_tokens) const {
  const Gemma4Checkpoint& ckpt = *this;
  if (ckpt.is_assistant())
    fail("{}: a gemma4_assistant checkpoint drafts for a target; it is not a target", ckpt.dir());
  check_gemma4_capacity(ckpt.dir(), ckpt.config(), max_tokens);
}

AssistantKvLayers check_assistant_fits(const Gemma4Checkpoint& ck, const Gemma4TextConfig& target) {
  const Gemma4AssistantConfig& a = ck.assistant_config();
  const Gemma4TextConfig& c = a.text;
  const std::string where = ck.dir() + "/config.json";
  if (a.backbone_hidden_size != target.hidden_size)
    fail("{}: field 'backbone_hidden_size': {} does not match the target's hidden_size {}", where,
         a.backbone_hidden_size, target.hidden_size);
  if (c.vocab_size != target.vocab_size)
    fail("{}: field 'text_config.vocab_size': {} does not match the target's vocab_size {}", where, c.vocab_size,
         target.vocab_size);
  if (c.sliding_window > target.sliding_window)
    fail("{}: field 'text_config.sliding_window': {} exceeds the target's {} (its K/V cache holds no more)", where,
         c.sliding_window, target.sliding_window);
  AssistantKvLayers kv;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const Gemma4LayerSpec& s = c.layers[size_t(i)];
    const int t = target.last_layer_of(s.sliding);
    if (t < 0)
      fail("{}: field 'text_config.layer_types[{}]': the target has no {} layer to read K/V from", where, i,
           s.sliding ? "sliding" : "full");
    const Gemma4LayerSpec& ts = target.layers[size_t(t)];
    if (s.head_dim != ts.head_dim || s.kv_heads != ts.kv_heads)
      fail("{}: layer {} ({}): head_dim {} x {} KV heads, but the target's layer {} has {} x {}", where, i,
           s.sliding ? "sliding" : "full", s.head_dim, s.kv_heads, t, ts.head_dim, ts.kv_heads);
    (s.sliding ? kv.sliding : kv.full) = t;
  }
  return kv;
}

void check_gemma4_capacity(const std::string& dir, const Gemma4TextConfig& config, int max_tokens) {
  if (max_tokens <= 0) fail("runtime capacity {} tokens: expected at least 1", max_tokens);
  if (max_tokens > config.max_position_embeddings)
    fail(
        "{}: this run needs up to {} positions (prompt + tokens to generate + verify block) but config.json's "
        "max_position_embeddings is {}",
        dir, max_tokens, config.max_position_embeddings);
}

}  // namespace nextn
