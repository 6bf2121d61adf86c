// Gemma 4 config.json parsing (see gemma4_config.h for the precedence rules).
#include "io/gemma4_config.h"

#include "core/error.h"
#include "io/config_json.h"

namespace nextn {

using namespace config_json;

namespace {

constexpr int kMaxLayers = 4096;

struct RopeSpec {
  double theta = 0;
  double factor = 0;  // partial_rotary_factor (proportional only)
  bool proportional = false;
};

// rope_parameters[layer_type], else the transformers default for that type.
RopeSpec read_rope(const Reader& r, bool sliding) {
  const char* type = sliding ? "sliding_attention" : "full_attention";
  RopeSpec s;
  s.proportional = !sliding;
  s.theta = sliding ? 10000.0 : 1000000.0;
  s.factor = sliding ? 1.0 : 0.25;
  auto rp = r.find("rope_parameters");
  if (!rp) return s;
  if (!rp->value->is_object()) r.bad(rp->path, fmt::format("expected an object, got {}", type_word(*rp->value)));
  auto it = rp->value->find(type);
  if (it == rp->value->end() || it->is_null()) return s;
  const std::string path = rp->path + "." + type;
  if (!it->is_object()) r.bad(path, fmt::format("expected an object, got {}", type_word(*it)));
  const Reader t(r.file(), {{&*it, path + "."}});
  if (auto f = t.find("rope_type")) {
    if (!f->value->is_string()) t.bad(f->path, "expected a string");
    const std::string rt = f->value->get<std::string>();
    if (rt == "default") {
      s.proportional = false;
      s.factor = 1.0;
    } else if (rt == "proportional") {
      s.proportional = true;
      s.factor = 1.0;  // transformers' proportional default when the key is absent
    } else {
      t.bad(f->path, fmt::format("unsupported rope type '{}' (supported: default, proportional)", printable(rt)));
    }
  }
  if (auto f = t.find("rope_theta")) s.theta = t.positive_number(*f);
  if (auto f = t.find("partial_rotary_factor")) {
    s.factor = t.positive_number(*f);
    if (s.factor > 1.0) t.bad(f->path, "expected at most 1");
  }
  if (auto f = t.find("factor"))
    if (t.positive_number(*f) != 1.0) t.bad(f->path, "rope scaling factors other than 1 are not supported");
  return s;
}

void refuse_if(const Reader& r, const std::string& key, bool bad_value, const std::string& what) {
  if (auto f = r.find(key); f && bad_value) r.bad(f->path, what);
}

Gemma4TextConfig parse_text(const Reader& r, const std::string& model_type, bool assistant) {
  Gemma4TextConfig c;
  c.model_type = model_type;
  c.hidden_size = r.req_positive_int("hidden_size");
  c.num_hidden_layers = r.req_positive_int("num_hidden_layers", kMaxLayers);
  c.intermediate_size = r.req_positive_int("intermediate_size");
  c.vocab_size = r.req_positive_int("vocab_size");
  c.num_attention_heads = r.req_positive_int("num_attention_heads");
  const int kv_heads = r.opt_positive_int("num_key_value_heads", 4);
  const int head_dim = r.opt_positive_int("head_dim", 256);
  c.sliding_window = r.opt_positive_int("sliding_window", 512);
  c.max_position_embeddings = r.opt_positive_int("max_position_embeddings", 131072);
  if (auto f = r.find("rms_norm_eps")) c.rms_norm_eps = static_cast<float>(r.positive_number(*f));
  if (auto f = r.find("final_logit_softcapping")) c.final_logit_softcapping = static_cast<float>(r.positive_number(*f));
  if (auto f = r.find("tie_word_embeddings")) c.tie_word_embeddings = r.boolean(*f);
  bool k_eq_v = false;
  if (auto f = r.find("attention_k_eq_v")) k_eq_v = r.boolean(*f);

  // ---- features nextn does not run ----
  if (auto f = r.find("hidden_activation")) {
    if (!f->value->is_string() || f->value->get<std::string>() != "gelu_pytorch_tanh")
      r.bad(f->path, "only gelu_pytorch_tanh is supported");
  }
  {
    auto f = r.find("hidden_size_per_layer_input");
    const int ple = f ? r.nonneg_int(*f) : 256;  // transformers' default turns per-layer embeddings on
    if (ple != 0)
      r.bad(f ? f->path : r.preferred("hidden_size_per_layer_input"),
            fmt::format("per-layer embeddings ({}) are not supported (expected 0)", ple));
  }
  if (auto f = r.find("enable_moe_block"); f && r.boolean(*f)) {
    if (assistant) r.bad(f->path, "a gemma4_assistant is dense (expected false, as transformers requires)");
    c.moe = true;
    c.num_experts = r.req_positive_int("num_experts", kMaxExperts);
    c.top_k_experts = r.req_positive_int("top_k_experts", kMaxExperts);
    c.moe_intermediate_size = r.req_positive_int("moe_intermediate_size");
    if (c.top_k_experts > c.num_experts)
      r.bad(r.find("top_k_experts")->path,
            fmt::format("{} experts per token but num_experts is {}", c.top_k_experts, c.num_experts));
  }
  refuse_if(r, "use_bidirectional_attention", true, "bidirectional attention is not supported (expected null)");
  if (auto f = r.find("attention_bias"); f && r.boolean(*f)) r.bad(f->path, "attention bias is not supported");
  if (auto f = r.find("num_kv_shared_layers")) c.num_kv_shared_layers = r.nonneg_int(*f, kMaxLayers);
  if (!assistant && c.num_kv_shared_layers != 0)
    r.bad(r.find("num_kv_shared_layers")->path, "KV sharing inside a target model is not supported (expected 0)");

  // ---- layer schedule ----
  std::vector<bool> sliding;
  if (auto lt = r.find("layer_types")) {
    if (!lt->value->is_array())
      r.bad(lt->path, fmt::format("expected a list of layer types, got {}", type_word(*lt->value)));
    if (lt->value->size() != size_t(c.num_hidden_layers))
      r.bad(lt->path,
            fmt::format("has {} entries, expected num_hidden_layers = {}", lt->value->size(), c.num_hidden_layers));
    for (size_t i = 0; i < lt->value->size(); ++i) {
      const json& t = (*lt->value)[i];
      const std::string p = fmt::format("{}[{}]", lt->path, i);
      if (!t.is_string()) r.bad(p, fmt::format("expected a string, got {}", type_word(t)));
      const std::string s = t.get<std::string>();
      if (s != "sliding_attention" && s != "full_attention")
        r.bad(p, fmt::format("unknown layer type '{}' (expected sliding_attention or full_attention)", printable(s)));
      sliding.push_back(s == "sliding_attention");
    }
  } else {
    for (int i = 0; i < c.num_hidden_layers; ++i) sliding.push_back((i + 1) % 6 != 0);
  }
  sliding.back() = false;  // transformers forces the last layer to full attention

  // ---- per-layer shapes ----
  std::vector<std::pair<int, int>> shape(size_t(c.num_hidden_layers), {head_dim, kv_heads});  // head_dim, kv heads
  if (auto plc = r.find("per_layer_config")) {
    if (!plc->value->is_object()) r.bad(plc->path, fmt::format("expected an object, got {}", type_word(*plc->value)));
    for (auto e = plc->value->begin(); e != plc->value->end(); ++e) {
      const std::string path = plc->path + "." + e.key();
      const std::string& k = e.key();
      if (k.empty() || k.size() > 6 || k.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(k) >= c.num_hidden_layers)
        r.bad(path, fmt::format("expected a layer index below num_hidden_layers = {}", c.num_hidden_layers));
      if (!e->is_object()) r.bad(path, fmt::format("expected an object, got {}", type_word(*e)));
      const Reader lr(r.file(), {{&*e, path + "."}});
      for (auto f = e->begin(); f != e->end(); ++f)
        if (f.key() != "head_dim" && f.key() != "num_key_value_heads")
          lr.bad(path + "." + f.key(), "unsupported per-layer override (supported: head_dim, num_key_value_heads)");
      auto& s = shape[size_t(std::stoi(k))];
      s.first = lr.opt_positive_int("head_dim", s.first);
      s.second = lr.opt_positive_int("num_key_value_heads", s.second);
    }
  } else {
    const int global_hd = r.opt_positive_int("global_head_dim", 512);
    int global_kv = kv_heads;
    if (k_eq_v) global_kv = r.opt_positive_int("num_global_key_value_heads", kv_heads);
    for (int i = 0; i < c.num_hidden_layers; ++i)
      if (!sliding[size_t(i)]) shape[size_t(i)] = {global_hd, global_kv};
  }

  const RopeSpec rope_sliding = read_rope(r, true), rope_full = read_rope(r, false);
  int type_head_dim[2] = {0, 0};  // RoPE tables are per layer type: one head_dim per type
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    Gemma4LayerSpec L;
    L.sliding = sliding[size_t(i)];
    L.head_dim = shape[size_t(i)].first;
    L.kv_heads = shape[size_t(i)].second;
    L.k_eq_v = k_eq_v && !L.sliding;
    const std::string where = fmt::format("per_layer_config (layer {})", i);
    if (L.head_dim % 2 != 0) r.bad(where, fmt::format("head_dim {} must be even", L.head_dim));
    if (c.num_attention_heads % L.kv_heads != 0)
      r.bad(where, fmt::format("num_key_value_heads {} does not divide num_attention_heads {}", L.kv_heads,
                               c.num_attention_heads));
    if (int64_t(c.num_attention_heads) * L.head_dim > INT_MAX / 2)
      r.bad(where, "num_attention_heads * head_dim does not fit in 32 bits");
    int& seen = type_head_dim[L.sliding ? 1 : 0];
    if (seen != 0 && seen != L.head_dim)
      r.bad(where, fmt::format("head_dim {} differs from {} of an earlier {} layer (RoPE is set per layer type)",
                               L.head_dim, seen, L.sliding ? "sliding" : "full"));
    seen = L.head_dim;
    const RopeSpec& rs = L.sliding ? rope_sliding : rope_full;
    L.rope_theta = rs.theta;
    // transformers: int(partial_rotary_factor * head_dim // 2) rotated pairs (proportional), all pairs (default)
    L.rope_pairs = rs.proportional ? int(std::floor(rs.factor * double(L.head_dim) / 2.0)) : L.head_dim / 2;
    c.layers.push_back(L);
  }
  if (int64_t(c.hidden_size) * 2 > INT_MAX)
    r.bad(r.preferred("hidden_size"), "2 * hidden_size does not fit in 32 bits");
  return c;
}

json parse_root(const std::string& text, const std::string& file) {
  json root = parse_json(text, file);
  if (!root.is_object()) fail("{}: expected a JSON object at the top level, got {}", file, type_word(root));
  return root;
}

std::string model_type_of(const json& root, const std::string& file) {
  auto mt = root.find("model_type");
  if (mt == root.end() || mt->is_null()) fail("{}: field 'model_type': missing", file);
  if (!mt->is_string()) fail("{}: field 'model_type': expected a string, got {}", file, type_word(*mt));
  return mt->get<std::string>();
}

const json* text_config_of(const json& root, const std::string& file, bool required) {
  auto tc = root.find("text_config");
  if (tc == root.end() || tc->is_null()) {
    if (required) fail("{}: field 'text_config': missing (the assistant's gemma4_text config)", file);
    return nullptr;
  }
  if (!tc->is_object()) fail("{}: field 'text_config': expected an object, got {}", file, type_word(*tc));
  auto tmt = tc->find("model_type");
  if (tmt != tc->end() && !tmt->is_null() && !(tmt->is_string() && tmt->get<std::string>() == "gemma4_text"))
    fail("{}: field 'text_config.model_type': expected \"gemma4_text\"", file);
  return &*tc;
}

}  // namespace

int Gemma4TextConfig::last_layer_of(bool sliding) const {
  for (int i = int(layers.size()) - 1; i >= 0; --i)
    if (layers[size_t(i)].sliding == sliding) return i;
  return -1;
}

Gemma4TextConfig parse_gemma4_config(const std::string& config_json, const std::string& config_file,
                                     const std::string* generation_json, const std::string& generation_file) {
  try {
    const json root = parse_root(config_json, config_file);
    const std::string mt = model_type_of(root, config_file);
    std::vector<std::pair<const json*, std::string>> sources;
    if (mt == "gemma4") {
      sources.push_back({text_config_of(root, config_file, false), "text_config."});
      sources.push_back({&root, ""});
    } else if (mt == "gemma4_text") {
      sources.push_back({&root, ""});
    } else {
      fail("{}: field 'model_type': unsupported model type '{}' (supported: gemma4, gemma4_text)", config_file,
           printable(mt));
    }
    const Reader r(config_file, sources);
    Gemma4TextConfig c = parse_text(r, mt, false);
    c.quant = parse_quant_config(config_file, root);
    bool have_eos = false;
    if (generation_json) {
      const json g = parse_json(*generation_json, generation_file);
      if (!g.is_object()) fail("{}: expected a JSON object at the top level, got {}", generation_file, type_word(g));
      const Reader gr(generation_file, {{&g, ""}});
      if (auto f = gr.find("eos_token_id")) {
        c.eos_token_ids = parse_eos(gr, *f, c.vocab_size);
        have_eos = true;
      }
    }
    if (!have_eos)
      if (auto f = r.find("eos_token_id")) c.eos_token_ids = parse_eos(r, *f, c.vocab_size);
    return c;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // safety net: never let a library exception escape
    fail("{}: invalid config: {}", config_file, e.what());
  }
}

Gemma4AssistantConfig parse_gemma4_assistant_config(const std::string& config_json, const std::string& config_file) {
  try {
    const json root = parse_root(config_json, config_file);
    const std::string mt = model_type_of(root, config_file);
    if (mt != "gemma4_assistant")
      fail("{}: field 'model_type': '{}' is not a Gemma 4 assistant (expected gemma4_assistant)", config_file,
           printable(mt));
    const json* tc = text_config_of(root, config_file, true);
    const Reader r(config_file, {{tc, "text_config."}});
    Gemma4AssistantConfig a;
    a.text = parse_text(r, "gemma4_text", true);
    a.text.quant = parse_quant_config(config_file, root);
    // Gemma4AssistantConfig sets num_kv_shared_layers = num_hidden_layers whatever the file says.
    a.text.num_kv_shared_layers = a.text.num_hidden_layers;
    const Reader top(config_file, {{&root, ""}});
    a.backbone_hidden_size = top.opt_positive_int("backbone_hidden_size", 1536);
    if (auto f = top.find("use_ordered_embeddings")) a.use_ordered_embeddings = top.boolean(*f);
    a.num_centroids = top.opt_positive_int("num_centroids", 2048);
    a.centroid_intermediate_top_k = top.opt_positive_int("centroid_intermediate_top_k", 32);
    if (a.use_ordered_embeddings) {
      if (a.text.vocab_size % a.num_centroids != 0)
        top.bad("num_centroids", fmt::format("{} does not divide vocab_size {}", a.num_centroids, a.text.vocab_size));
      if (a.centroid_intermediate_top_k > a.num_centroids)
        top.bad("centroid_intermediate_top_k",
                fmt::format("{} exceeds num_centroids {}", a.centroid_intermediate_top_k, a.num_centroids));
    }
    if (auto f = top.find("tie_word_embeddings"); f && !top.boolean(*f))
      top.bad(f->path, "the assistant's LM head is tied to its embedding (expected true)");
    return a;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}: invalid config: {}", config_file, e.what());
  }
}

std::string gemma4_model_type(const std::string& dir) {
  const ConfigFiles f = read_config_files(dir);
  const json root = parse_json(f.config, f.config_path);
  if (!root.is_object()) return "";
  auto mt = root.find("model_type");
  if (mt == root.end() || !mt->is_string()) return "";
  const std::string s = mt->get<std::string>();
  return (s == "gemma4" || s == "gemma4_text" || s == "gemma4_assistant") ? s : "";
}

Gemma4TextConfig load_gemma4_config(const std::string& dir) {
  const ConfigFiles f = read_config_files(dir);
  if (f.generation) return parse_gemma4_config(f.config, f.config_path, &*f.generation, f.generation_path);
  return parse_gemma4_config(f.config, f.config_path);
}

Gemma4AssistantConfig load_gemma4_assistant_config(const std::string& dir) {
  const ConfigFiles f = read_config_files(dir);
  return parse_gemma4_assistant_config(f.config, f.config_path);
}

}  // namespace nextn
