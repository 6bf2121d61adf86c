// Qwen3.5 config.json / generation_config.json parsing. Every failure is one
// Error line: "<file>: field '<path>': <what was expected>".
#include "io/config.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>

#include "core/error.h"
#include "io/config_json.h"

namespace nextn {

using json = nlohmann::json;

namespace {

using namespace config_json;

constexpr int kMaxLayers = 4096;  // sanity bound: real checkpoints have <= 100

}  // namespace

int Qwen35Config::rotary_dim() const {
  // Python's int(head_dim * partial_rotary_factor): truncation.
  return static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
}

Qwen35Config parse_qwen35_config(const std::string& config_json, const std::string& config_file,
                                 const std::string* generation_json, const std::string& generation_file) {
  try {
    const json root = parse_json(config_json, config_file);
    if (!root.is_object()) fail("{}: expected a JSON object at the top level, got {}", config_file, type_word(root));

    Qwen35Config c;
    auto mt = root.find("model_type");
    if (mt == root.end() || mt->is_null()) fail("{}: field 'model_type': missing (supported: qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text)", config_file);
    if (!mt->is_string()) fail("{}: field 'model_type': expected a string, got {}", config_file, type_word(*mt));
    c.model_type = mt->get<std::string>();

    std::vector<std::pair<const json*, std::string>> sources;
    const bool nested = c.model_type == "qwen3_5" || c.model_type == "qwen3_5_moe";
    c.moe = c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text";
    if (nested) {
      const std::string text_type = c.model_type + "_text";
      auto tc = root.find("text_config");
      if (tc != root.end() && !tc->is_null()) {
        if (!tc->is_object())
          fail("{}: field 'text_config': expected an object, got {}", config_file, type_word(*tc));
        auto tmt = tc->find("model_type");
        if (tmt != tc->end() && !tmt->is_null() && !(tmt->is_string() && tmt->get<std::string>() == text_type))
          fail("{}: field 'text_config.model_type': expected \"{}\"", config_file, text_type);
        sources.push_back({&*tc, "text_config."});
      } else {
        sources.push_back({nullptr, "text_config."});
      }
      sources.push_back({&root, ""});
    } else if (c.model_type == "qwen3_5_text" || c.model_type == "qwen3_5_moe_text") {
      sources.push_back({&root, ""});
    } else {
      fail("{}: field 'model_type': unsupported model type '{}' (supported: qwen3_5, qwen3_5_text, qwen3_5_moe, "
           "qwen3_5_moe_text)",
           config_file, printable(c.model_type));
    }
    const Reader r(config_file, sources);

    // ---- sizes ----
    c.hidden_size = r.req_positive_int("hidden_size");
    c.num_hidden_layers = r.req_positive_int("num_hidden_layers", kMaxLayers);
    if (c.moe) {
      c.num_experts = r.req_positive_int("num_experts", kMaxExperts);
      c.num_experts_per_tok = r.req_positive_int("num_experts_per_tok", kMaxExperts);
      c.moe_intermediate_size = r.req_positive_int("moe_intermediate_size");
      c.shared_expert_intermediate_size = r.req_positive_int("shared_expert_intermediate_size");
      if (c.num_experts_per_tok > c.num_experts)
        r.bad(r.find("num_experts_per_tok")->path,
              fmt::format("{} experts per token but num_experts is {}", c.num_experts_per_tok, c.num_experts));
    } else {
      c.intermediate_size = r.req_positive_int("intermediate_size");
    }
    c.vocab_size = r.req_positive_int("vocab_size");
    c.num_attention_heads = r.req_positive_int("num_attention_heads");
    c.num_key_value_heads = r.req_positive_int("num_key_value_heads");
    c.head_dim = r.opt_positive_int("head_dim", 256);
    c.linear_num_key_heads = r.opt_positive_int("linear_num_key_heads", 16);
    c.linear_key_head_dim = r.opt_positive_int("linear_key_head_dim", 128);
    c.linear_num_value_heads = r.opt_positive_int("linear_num_value_heads", 32);
    c.linear_value_head_dim = r.opt_positive_int("linear_value_head_dim", 128);
    c.linear_conv_kernel_dim = r.opt_positive_int("linear_conv_kernel_dim", 4);
    c.max_position_embeddings = r.opt_positive_int("max_position_embeddings", 32768);
    if (auto f = r.find("rms_norm_eps")) c.rms_norm_eps = static_cast<float>(r.positive_number(*f));
    if (auto f = r.find("tie_word_embeddings")) c.tie_word_embeddings = r.boolean(*f);
    if (auto f = r.find("attn_output_gate")) {
      c.attn_output_gate = r.boolean(*f);
      if (!c.attn_output_gate)
        r.bad(f->path, "only gated attention (true) is supported");
    }

    // ---- consistency ----
    auto path_of = [&](const std::string& key) {
      auto f = r.find(key);
      return f ? f->path : r.preferred(key);
    };
    if (c.num_attention_heads % c.num_key_value_heads != 0)
      r.bad(path_of("num_key_value_heads"),
            fmt::format("{} does not divide num_attention_heads {}", c.num_key_value_heads, c.num_attention_heads));
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
      r.bad(path_of("linear_num_value_heads"), fmt::format("{} is not a multiple of linear_num_key_heads {}",
                                                           c.linear_num_value_heads, c.linear_num_key_heads));
    // Products the model computes in int must fit.
    auto fits = [&](int64_t v, const std::string& key, const char* what) {
      if (v > INT_MAX) r.bad(path_of(key), fmt::format("{} = {} does not fit in 32 bits", what, v));
    };
    fits(int64_t(c.num_attention_heads) * c.head_dim * 2, "num_attention_heads", "2 * num_attention_heads * head_dim");
    fits(int64_t(c.num_key_value_heads) * c.head_dim, "num_key_value_heads", "num_key_value_heads * head_dim");
    fits(2 * int64_t(c.linear_num_key_heads) * c.linear_key_head_dim +
             int64_t(c.linear_num_value_heads) * c.linear_value_head_dim,
         "linear_num_value_heads", "conv_dim");
    fits(int64_t(c.hidden_size) * 2, "hidden_size", "2 * hidden_size");

    // ---- layer schedule ----
    if (auto lt = r.find("layer_types")) {
      if (!lt->value->is_array())
        r.bad(lt->path, fmt::format("expected a list of layer types, got {}", type_word(*lt->value)));
      if (lt->value->size() != static_cast<size_t>(c.num_hidden_layers))
        r.bad(lt->path, fmt::format("has {} entries, expected num_hidden_layers = {}", lt->value->size(),
                                    c.num_hidden_layers));
      for (size_t i = 0; i < lt->value->size(); ++i) {
        const json& t = (*lt->value)[i];
        const std::string p = fmt::format("{}[{}]", lt->path, i);
        if (!t.is_string()) r.bad(p, fmt::format("expected a string, got {}", type_word(t)));
        const std::string s = t.get<std::string>();
        // transformers' remap_legacy_layer_types: attention -> full, mamba/conv -> linear.
        if (s == "full_attention" || s == "attention") {
          c.full_attention.push_back(true);
        } else if (s == "linear_attention" || s == "mamba" || s == "conv") {
          c.full_attention.push_back(false);
        } else {
          r.bad(p, fmt::format("unknown layer type '{}' (expected full_attention or linear_attention)", printable(s)));
        }
      }
    } else {
      int interval = 4;
      if (auto f = r.find("full_attention_interval")) interval = r.positive_int(*f);
      for (int i = 0; i < c.num_hidden_layers; ++i) c.full_attention.push_back((i + 1) % interval == 0);
    }

    // ---- rope ----
    {
      const json* rp = nullptr;
      std::string rp_path;
      if (auto f = r.find("rope_parameters")) {
        if (!f->value->is_object()) r.bad(f->path, fmt::format("expected an object, got {}", type_word(*f->value)));
        rp = f->value;
        rp_path = f->path + ".";
      }
      std::vector<std::pair<const json*, std::string>> rsrc;
      if (rp) rsrc.push_back({rp, rp_path});
      for (const auto& s : sources) rsrc.push_back(s);
      const Reader rr(config_file, rsrc);
      if (rp) {
        auto t = rp->find("rope_type");
        if (t == rp->end() || t->is_null()) t = rp->find("type");
        if (t != rp->end() && !t->is_null()) {
          if (!t->is_string()) r.bad(rp_path + "rope_type", "expected a string");
          if (t->get<std::string>() != "default")
            r.bad(rp_path + "rope_type",
                  fmt::format("unsupported rope type '{}' (supported: default)", printable(t->get<std::string>())));
        }
      }
      if (auto f = rr.find("rope_theta")) c.rope_theta = rr.positive_number(*f);
      std::string factor_path = rp ? rp_path + "partial_rotary_factor" : r.preferred("partial_rotary_factor");
      if (auto f = rr.find("partial_rotary_factor")) {
        c.partial_rotary_factor = rr.positive_number(*f);
        factor_path = f->path;
      }
      if (c.partial_rotary_factor > 1.0)
        r.bad(factor_path, fmt::format("{} makes the rotary dim exceed head_dim {}", c.partial_rotary_factor, c.head_dim));
      const int rd = c.rotary_dim();
      if (rd <= 0 || rd % 2 != 0)
        r.bad(factor_path, fmt::format("rotary dim int(head_dim {} * {}) = {} must be even and positive", c.head_dim,
                                       c.partial_rotary_factor, rd));
    }
    // mrope_section is not read: nextn decodes text only, where the three
    // M-RoPE position streams are equal, so the section split changes nothing.

    // ---- MTP ----
    if (auto f = r.find("mtp_num_hidden_layers")) c.mtp_num_hidden_layers = r.nonneg_int(*f, kMaxLayers);

    // ---- EOS: generation_config.json, then the config ----
    bool have_eos = false;
    if (generation_json) {
      const json g = parse_json(*generation_json, generation_file);
      if (!g.is_object())
        fail("{}: expected a JSON object at the top level, got {}", generation_file, type_word(g));
      const Reader gr(generation_file, {{&g, ""}});
      if (auto f = gr.find("eos_token_id")) {
        c.eos_token_ids = parse_eos(gr, *f, c.vocab_size);
        have_eos = true;
      }
    }
    if (!have_eos) {
      if (auto f = r.find("eos_token_id")) c.eos_token_ids = parse_eos(r, *f, c.vocab_size);
    }

    // ---- quantization ----
    c.quant = parse_quant_config(config_file, root, /*allow_hf=*/true);
    return c;
  } catch (const Error&) {
    throw;
  } catch (const json::exception& e) {  // safety net: never let a library exception escape
    fail("{}: invalid config: {}", config_file, e.what());
  }
}

Qwen35Config load_qwen35_config(const std::string& dir) {
  const ConfigFiles f = read_config_files(dir);
  if (f.generation) return parse_qwen35_config(f.config, f.config_path, &*f.generation, f.generation_path);
  return parse_qwen35_config(f.config, f.config_path);
}

}  // namespace nextn
