// Qwen3.5 checkpoint: layout detection, logical -> stored names, shape and
// dtype validation, norm shifting, dense and MLX-affine weights.
#include "io/checkpoint.h"

#include <cstring>
#include <set>

#include "core/error.h"
#include "io/moe_experts.h"

namespace nextn {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::CausalLM: return "causal-lm (model.layers.*)";
    case Layout::ConditionalGeneration: return "conditional-generation (model.language_model.*)";
    case Layout::Mlx: return "mlx (language_model.model.*)";
  }
  return "?";
}

const char* layout_prefix(Layout l) {
  switch (l) {
    case Layout::CausalLM: return "model.";
    case Layout::ConditionalGeneration: return "model.language_model.";
    case Layout::Mlx: return "language_model.model.";
  }
  return "";
}

const char* layout_head(Layout l) { return l == Layout::Mlx ? "language_model.lm_head" : "lm_head"; }

std::optional<Layout> detect_layout(const std::vector<std::string>& names, std::string* why) {
  bool mlx = false, cond = false, causal = false;
  for (const auto& n : names) {
    if (n.starts_with("language_model.model.")) {
      mlx = true;
    } else if (n.starts_with("model.language_model.")) {
      cond = true;
    } else if (n.starts_with("model.layers.") || n.starts_with("model.embed_tokens.") ||
               n.starts_with("model.norm.")) {
      causal = true;
    }
  }
  const int count = int(mlx) + int(cond) + int(causal);
  if (count == 1) return mlx ? Layout::Mlx : cond ? Layout::ConditionalGeneration : Layout::CausalLM;
  if (why) {
    if (count == 0) {
      *why = "no tensor named model.layers.* (ForCausalLM), model.language_model.* (ForConditionalGeneration) or "
             "language_model.model.* (mlx)";
    } else {
      std::string found;
      if (causal) found += " model.layers.*";
      if (cond) found += " model.language_model.*";
      if (mlx) found += " language_model.model.*";
      *why = "tensors of more than one layout:" + found;
    }
  }
  return std::nullopt;
}

bool is_one_plus_norm(const std::string& logical_in) {
  std::string n = logical_in;
  if (n.ends_with(".weight")) n.resize(n.size() - 7);
  if (n == "norm" || n == "mtp.norm" || n == "mtp.pre_fc_norm_embedding" || n == "mtp.pre_fc_norm_hidden") return true;
  if (!n.starts_with("layers.") && !n.starts_with("mtp.layers.")) return false;
  return n.ends_with(".input_layernorm") || n.ends_with(".post_attention_layernorm") ||
         n.ends_with(".self_attn.q_norm") || n.ends_with(".self_attn.k_norm");
}

Qwen35Checkpoint Qwen35Checkpoint::open(const std::string& dir) {
  std::string label = dir;
  while (label.size() > 1 && label.back() == '/') label.pop_back();
  Qwen35Config config = load_qwen35_config(dir);
  return assemble(label, std::move(config), TensorStore::open(dir));
}

Qwen35Checkpoint Qwen35Checkpoint::assemble(const std::string& label, Qwen35Config config, TensorStore store) {
  Qwen35Checkpoint ck;
  ck.dir_ = label;
  ck.config_ = std::move(config);
  ck.store_ = std::move(store);
  const std::vector<std::string> names = ck.store_.names();

  std::string why;
  auto layout = detect_layout(names, &why);
  if (!layout) fail("{}: cannot detect the checkpoint layout: {}", ck.dir_, why);
  ck.layout_ = *layout;

  // MTP: top-level mtp.* (all layouts), else language_model.mtp.*.
  bool top = false, nested = false;
  std::set<std::string> mtp_layer_ids;
  for (const auto& n : names) {
    if (n.starts_with("mtp.")) top = true;
    if (n.starts_with("language_model.mtp.")) nested = true;
  }
  ck.mtp_prefix_ = (!top && nested) ? "language_model.mtp." : "mtp.";
  const std::string layers_prefix = ck.mtp_prefix_ + "layers.";
  for (const auto& n : names) {
    if (!n.starts_with(layers_prefix)) continue;
    std::string rest = n.substr(layers_prefix.size());
    std::string id = rest.substr(0, rest.find('.'));
    if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) mtp_layer_ids.insert(id);
  }
  if (!top && !nested) {
    ck.mtp_layers_ = 0;  // no MTP tensors at all: no head, whatever the config says
  } else if (ck.config_.mtp_num_hidden_layers >= 0) {
    ck.mtp_layers_ = ck.config_.mtp_num_hidden_layers;
  } else {
    ck.mtp_layers_ = static_cast<int>(mtp_layer_ids.size());
  }
  // Both runtimes load mtp.layers.0 only; a deeper head would be silently
  // truncated (and the default block size would count layers never run).
  if (ck.mtp_layers_ > 1) {
    const std::string where = ck.config_.mtp_num_hidden_layers >= 0
                                  ? fmt::format("config.json: field 'mtp_num_hidden_layers' is {}", ck.mtp_layers_)
                                  : fmt::format("{} {}* tensor layers are stored", ck.mtp_layers_, layers_prefix);
    fail("{}: {}: nextn runs a single MTP layer (mtp.layers.0); multi-layer MTP heads are not supported", ck.dir_,
         where);
  }
  // One count for everybody: runtimes carry the config, the CLI the checkpoint.
  ck.config_.mtp_num_hidden_layers = ck.mtp_layers_;
  ck.check_tied_head();

  // Norm convention from the first linear-attention layer's conv1d shape.
  ck.norms_shifted_ = ck.layout_ == Layout::Mlx;
  const int64_t K = ck.config_.linear_conv_kernel_dim;
  for (int i = 0; i < ck.config_.num_hidden_layers; ++i) {
    if (ck.config_.full_attention[size_t(i)]) continue;
    const TensorView* t =
        ck.store_.find(ck.stored_name("layers." + std::to_string(i) + ".linear_attn.conv1d") + ".weight");
    if (t && t->shape.size() == 3 && K != 1) {
      if (t->shape[1] == 1 && t->shape[2] == K) ck.norms_shifted_ = false;
      if (t->shape[1] == K && t->shape[2] == 1) ck.norms_shifted_ = true;
    }
    break;
  }
  return ck;
}

void Qwen35Checkpoint::check_tied_head() const {
  const std::string head = stored_name("lm_head") + ".weight";
  const TensorView* h = store_.find(head);
  if (!config_.tie_word_embeddings) {
    if (!module_stored(store_, stored_name("lm_head")))
      fail("{}: config.json: field 'tie_word_embeddings' is false but no '{}' is stored (an untied model needs its "
           "own LM head)",
           dir_, head);
    return;
  }
  if (!h) return;
  // Tied, yet a head is stored: transformers ties it to the embedding and
  // ignores the stored bytes, so they must be the embedding's bytes.
  const std::string embed = stored_name("embed_tokens");
  for (const char* suffix : {".weight", ".scales", ".biases"}) {
    const TensorView* a = store_.find(stored_name("lm_head") + suffix);
    const TensorView* b = store_.find(embed + suffix);
    if (!a && !b) continue;
    const bool same = a && b && a->dtype == b->dtype && a->shape == b->shape && a->nbytes == b->nbytes &&
                      std::memcmp(a->data, b->data, a->nbytes) == 0;
    if (!same)
      fail("{}: config.json: field 'tie_word_embeddings' is true but the stored '{}' differs from '{}{}' (set it "
           "to false to use the stored head)",
           dir_, head, embed, suffix);
  }
}

std::string Qwen35Checkpoint::stored_name(const std::string& logical) const {
  if (logical.starts_with("mtp.")) return mtp_prefix_ + logical.substr(4);
  if (logical == "lm_head" || logical.starts_with("lm_head.")) return layout_head(layout_) + logical.substr(7);
  return layout_prefix(layout_) + logical;
}

std::optional<std::string> Qwen35Checkpoint::logical_name(const std::string& stored) const {
  if (stored.starts_with(mtp_prefix_)) return "mtp." + stored.substr(mtp_prefix_.size());
  const std::string head = layout_head(layout_);
  if (stored == head || stored.starts_with(head + ".")) return "lm_head" + stored.substr(head.size());
  const std::string prefix = layout_prefix(layout_);
  if (stored.starts_with(prefix)) {
    std::string rest = stored.substr(prefix.size());
    if (layout_ == Layout::CausalLM && rest.starts_with("language_model.")) return std::nullopt;
    if (rest.starts_with("visual.")) return std::nullopt;
    return rest;
  }
  return std::nullopt;
}

bool Qwen35Checkpoint::has(const std::string& logical) const {
  const std::string s = stored_name(logical);
  return module_stored(store_, s) || store_.find(s) != nullptr;
}

bool module_stored(const TensorStore& store, const std::string& mod) {
  return store.find(mod + ".weight") || store.find(mod + ".qweight") || store.find(mod + ".weight_packed");
}

WeightRef checkpoint_matrix(const TensorStore& store, const QuantConfig& quant, const std::string& dir,
                            const std::string& mod, int64_t rows, int64_t cols, MatrixForm form) {
  WeightRef w;
  w.name = mod + ".weight";
  w.rows = rows;
  w.cols = cols;
  if (rows <= 0 || cols <= 0) fail("{}: tensor '{}': requested shape [{}, {}] is not positive", dir, w.name, rows, cols);
  if (quant.method != QuantMethod::None && quant.method != QuantMethod::MlxAffine) {
    // transformers' formats: the stored tensors decide whether the module is
    // quantized (their `.scales` is not MLX's, so the affine path is skipped).
    if (hf_module_quantized(store, quant.hf, mod)) {
      const bool linear = !mod.ends_with("embed_tokens");
      w.decoded = hf_decode(store, quant.hf, dir, mod, rows, cols, linear, form);
      if (w.decoded) {
        w.weight = &w.decoded->view;
        const WeightCodec codec = w.decoded->codec;
        if (codec != WeightCodec::Dense) {
          w.scales = &w.decoded->scales_view;
          if (codec == WeightCodec::Affine) w.biases = &w.decoded->biases_view;
          if (codec == WeightCodec::ZeroInt) w.zeros = &w.decoded->biases_view;
          if (codec != WeightCodec::Affine) w.native_codec = codec;
          w.quant = {w.decoded->bits, w.decoded->group};
        }
      } else {  // checked only: point at a stored tensor of the module
        for (const char* suffix : {".weight", ".qweight", ".weight_packed"})
          if (!w.weight) w.weight = store.find(mod + suffix);
      }
      return w;
    }
    w.weight = store.find(w.name);
    if (!w.weight) {
      if (store.find(mod + ".qweight") || store.find(mod + ".weight_packed"))
        fail("{}: module '{}' is stored packed but not in the config's '{}' layout", dir, mod,
             quant_method_name(quant.method));
      fail("{}: missing tensor '{}'", dir, w.name);
    }
    if (w.weight->dtype == DType::F8_E4M3)
      fail("{}: tensor '{}': dtype F8_E4M3 but no '{}.{}' scale is stored", dir, w.name, mod,
           quant.method == QuantMethod::Fp8 ? "weight_scale_inv" : "weight_scale");
    if (!is_float_dtype(w.weight->dtype))
      fail("{}: tensor '{}': dtype {}, expected F32, BF16 or F16 (a module not stored in the '{}' format)", dir,
           w.name, dtype_name(w.weight->dtype), quant_method_name(quant.method));
    const std::vector<int64_t> want{rows, cols};
    if (w.weight->shape != want)
      fail("{}: tensor '{}': shape {}, expected {}", dir, w.name, shape_str(w.weight->shape), shape_str(want));
    return w;
  }
  w.weight = store.find(w.name);
  if (!w.weight) fail("{}: missing tensor '{}'", dir, w.name);
  const TensorView* scales = store.find(mod + ".scales");
  if (!scales) {
    if (!is_float_dtype(w.weight->dtype)) {
      if (w.weight->dtype == DType::U32)
        fail("{}: tensor '{}': dtype U32 (quantized?) but there is no '{}.scales'", dir, w.name, mod);
      fail("{}: tensor '{}': dtype {}, expected F32, BF16 or F16", dir, w.name, dtype_name(w.weight->dtype));
    }
    const std::vector<int64_t> want{rows, cols};
    if (w.weight->shape != want)
      fail("{}: tensor '{}': shape {}, expected {}", dir, w.name, shape_str(w.weight->shape), shape_str(want));
    return w;
  }

  // MLX affine.
  if (!quant.present)
    fail("{}: tensor '{}.scales' is stored but config.json has no 'quantization' (bits, group_size)", dir, mod);
  auto q = quant.for_module(mod);
  if (!q) fail("{}: tensor '{}.scales' is stored but config.json's quantization marks '{}' as not quantized", dir, mod, mod);
  w.quant = *q;
  w.scales = scales;
  w.biases = store.find(mod + ".biases");
  if (!w.biases) fail("{}: missing tensor '{}.biases'", dir, mod);
  if (w.weight->dtype != DType::U32)
    fail("{}: tensor '{}': dtype {}, expected U32 (packed {}-bit, '{}.scales' is stored)", dir, w.name,
         dtype_name(w.weight->dtype), q->bits, mod);
  if (cols % q->group_size != 0)
    fail("{}: tensor '{}': {} input columns are not a multiple of the group size {}", dir, w.name, cols,
         q->group_size);
  const std::vector<int64_t> packed{rows, cols * q->bits / 32};
  if (w.weight->shape != packed)
    fail("{}: tensor '{}': shape {}, expected {} ({}-bit packing of [{}, {}])", dir, w.name,
         shape_str(w.weight->shape), shape_str(packed), q->bits, rows, cols);
  const std::vector<int64_t> groups{rows, cols / q->group_size};
  for (const TensorView* t : {w.scales, w.biases}) {
    if (!is_float_dtype(t->dtype))
      fail("{}: tensor '{}': dtype {}, expected F32, BF16 or F16", dir, t->name, dtype_name(t->dtype));
    if (t->shape != groups)
      fail("{}: tensor '{}': shape {}, expected {} (group size {} over [{}, {}])", dir, t->name,
           shape_str(t->shape), shape_str(groups), q->group_size, rows, cols);
  }
  return w;
}

WeightRef Qwen35Checkpoint::matrix(const std::string& logical, int64_t rows, int64_t cols, MatrixForm form) const {
  return checkpoint_matrix(store_, config_.quant, dir_, stored_name(logical), rows, cols, form);
}

WeightRef Qwen35Checkpoint::lm_head() const {
  const int64_t V = config_.vocab_size, H = config_.hidden_size;
  if (module_stored(store_, stored_name("lm_head"))) return matrix("lm_head", V, H);
  return matrix("embed_tokens", V, H);
}

namespace {

// A float tensor of `size` elements with the given shape, as fp32.
std::vector<float> read_floats(const std::string& dir, const TensorView& t, const std::vector<int64_t>& want) {
  if (!is_float_dtype(t.dtype))
    fail("{}: tensor '{}': dtype {}, expected F32, BF16 or F16", dir, t.name, dtype_name(t.dtype));
  if (t.shape != want) fail("{}: tensor '{}': shape {}, expected {}", dir, t.name, shape_str(t.shape), shape_str(want));
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_float(t.dtype, t.data, i);
  return out;
}

}  // namespace

std::vector<float> Qwen35Checkpoint::norm(const std::string& logical, int64_t size, bool one_plus) const {
  const std::string name = stored_name(logical) + ".weight";
  const TensorView* t = store_.find(name);
  if (!t) fail("{}: missing tensor '{}'", dir_, name);
  std::vector<float> g = read_floats(dir_, *t, {size});
  if (one_plus && !norms_shifted_)
    for (float& x : g) x = 1.0f + x;
  return g;
}

std::vector<float> Qwen35Checkpoint::vector(const std::string& logical, int64_t size) const {
  const std::string bare = stored_name(logical);
  const TensorView* t = store_.find(bare);
  if (!t) t = store_.find(bare + ".weight");
  if (!t) fail("{}: missing tensor '{}'", dir_, bare);
  return read_floats(dir_, *t, {size});
}

std::vector<float> Qwen35Checkpoint::conv1d(const std::string& logical, int64_t channels, int64_t kernel) const {
  const std::string name = stored_name(logical) + ".weight";
  const TensorView* t = store_.find(name);
  if (!t) fail("{}: missing tensor '{}'", dir_, name);
  // [C, 1, K] and [C, K, 1] hold the same bytes in the same order.
  const std::vector<int64_t> hf{channels, 1, kernel}, mlx{channels, kernel, 1};
  if (t->shape != hf && t->shape != mlx)
    fail("{}: tensor '{}': shape {}, expected {} (HF) or {} (mlx)", dir_, name, shape_str(t->shape), shape_str(hf),
         shape_str(mlx));
  return read_floats(dir_, *t, t->shape);
}

void Qwen35Checkpoint::validate() const {
  const Qwen35Config& c = config_;
  // Shapes and dtypes only: a transformers-format module is not dequantized here.
  auto matrix = [this](const std::string& l, int64_t r, int64_t cols) { this->matrix(l, r, cols, MatrixForm::Checked); };
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, Hv = c.linear_num_value_heads;
  auto full_attention = [&](const std::string& p) {
    matrix(p + ".self_attn.q_proj", Hq * hd * 2, H);
    matrix(p + ".self_attn.k_proj", Hkv * hd, H);
    matrix(p + ".self_attn.v_proj", Hkv * hd, H);
    matrix(p + ".self_attn.o_proj", H, Hq * hd);
    norm(p + ".self_attn.q_norm", hd, true);
    norm(p + ".self_attn.k_norm", hd, true);
  };
  auto layer = [&](const std::string& p, bool full) {
    norm(p + ".input_layernorm", H, true);
    norm(p + ".post_attention_layernorm", H, true);
    if (full) {
      full_attention(p);
    } else {
      const std::string g = p + ".linear_attn";
      matrix(g + ".in_proj_qkv", c.conv_dim(), H);
      matrix(g + ".in_proj_z", c.value_dim(), H);
      matrix(g + ".in_proj_b", Hv, H);
      matrix(g + ".in_proj_a", Hv, H);
      matrix(g + ".out_proj", H, c.value_dim());
      conv1d(g + ".conv1d", c.conv_dim(), c.linear_conv_kernel_dim);
      vector(g + ".A_log", Hv);
      vector(g + ".dt_bias", Hv);
      norm(g + ".norm", c.linear_value_head_dim, false);
    }
    if (c.moe) {
      validate_moe_mlp(*this, p);
    } else {
      matrix(p + ".mlp.gate_proj", I, H);
      matrix(p + ".mlp.up_proj", I, H);
      matrix(p + ".mlp.down_proj", H, I);
    }
  };
  matrix("embed_tokens", c.vocab_size, H);
  for (int i = 0; i < c.num_hidden_layers; ++i) layer("layers." + std::to_string(i), c.full_attention[size_t(i)]);
  norm("norm", H, true);
  if (module_stored(store_, stored_name("lm_head"))) matrix("lm_head", c.vocab_size, H);
  if (mtp_layers_ > 0) {
    matrix("mtp.fc", H, 2 * H);
    norm("mtp.pre_fc_norm_embedding", H, true);
    norm("mtp.pre_fc_norm_hidden", H, true);
    for (int i = 0; i < mtp_layers_; ++i) layer("mtp.layers." + std::to_string(i), true);
    norm("mtp.norm", H, true);
  }
}

void dequantize_row(const WeightRef& w, int64_t row, float* out) {
  if (!w.weight) fail("dequantize_row: empty weight");
  if (row < 0 || row >= w.rows) fail("{}: row {} out of range [0, {})", w.name, row, w.rows);
  const size_t cols = static_cast<size_t>(w.cols);
  if (!w.quantized()) {
    const size_t base = static_cast<size_t>(row) * cols;
    for (size_t c = 0; c < cols; ++c) out[c] = load_float(w.weight->dtype, w.weight->data, base + c);
    return;
  }
  const int bits = w.quant.bits;
  const size_t group = static_cast<size_t>(w.quant.group_size);
  const size_t groups = cols / group, g0 = static_cast<size_t>(row) * groups;
  if (w.codec() == WeightCodec::Fp8) {
    const uint8_t* codes = w.weight->data + static_cast<size_t>(row) * cols;
    for (size_t c = 0; c < cols; ++c)
      out[c] = fp8_e4m3_to_f32(codes[c]) * load_float(w.scales->dtype, w.scales->data, g0 + c / group);
    return;
  }
  const size_t per_word = 32 / static_cast<size_t>(bits);
  const uint32_t mask = (1u << bits) - 1u;
  const size_t words = cols / per_word;
  const uint8_t* packed = w.weight->data + static_cast<size_t>(row) * words * 4;
  const bool zero_int = w.codec() == WeightCodec::ZeroInt;
  for (size_t g = 0; g < groups; ++g) {
    const float s = load_float(w.scales->dtype, w.scales->data, g0 + g);
    const float b = zero_int ? 0.0f : load_float(w.biases->dtype, w.biases->data, g0 + g);
    const int32_t zero = zero_int ? int32_t(load_float(w.zeros->dtype, w.zeros->data, g0 + g)) : 0;
    for (size_t c = g * group; c < (g + 1) * group; c += per_word) {
      uint32_t word = load_unaligned<uint32_t>(packed + (c / per_word) * 4);
      for (size_t j = 0; j < per_word; ++j) {
        const uint32_t q = (word >> (j * bits)) & mask;
        if (zero_int) {
          out[c + j] = s * static_cast<float>(int32_t(q) - zero);
        } else {
          const float sq = s * static_cast<float>(q);
          out[c + j] = sq + b;
        }
      }
    }
  }
}

const char* weight_codec_name(WeightCodec c) {
  switch (c) {
    case WeightCodec::Dense: return "dense";
    case WeightCodec::Affine: return "affine";
    case WeightCodec::Fp8: return "fp8";
    case WeightCodec::ZeroInt: return "int with zeros";
  }
  return "?";
}

}  // namespace nextn
