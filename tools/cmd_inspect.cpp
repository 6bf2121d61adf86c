// nextn inspect PATH: tensors (name, dtype, shape, bytes, quantization), the
// detected layout and, for a model directory, a config summary and a full
// validation of the tensors the model reads. PATH may also be a single
// .safetensors file or a directory of safetensors without config.json.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/moe_experts.h"

namespace nextn::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string schedule_text(const std::vector<bool>& full) {
  int n_full = 0;
  std::string at;
  for (size_t i = 0; i < full.size(); ++i)
    if (full[i]) {
      at += (n_full++ ? "," : "") + std::to_string(i);
    }
  return fmt::format("{} linear + {} full attention (full at {})", full.size() - size_t(n_full), n_full,
                     n_full ? at : std::string("none"));
}

std::string ids_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// How layer 0's experts are stored, or why they cannot be read.
std::string experts_stored(const Qwen35Checkpoint& ck) {
  try {
    return expert_layout_name(expert_layout(ck, "layers.0"));
  } catch (const Error& e) {
    return fmt::format("unreadably ({})", e.what());
  }
}

json config_json(const Qwen35Config& c) {
  json j;
  j["model_type"] = c.model_type;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["intermediate_size"] = c.intermediate_size;
  if (c.moe) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  }
  j["vocab_size"] = c.vocab_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["linear_num_key_heads"] = c.linear_num_key_heads;
  j["linear_key_head_dim"] = c.linear_key_head_dim;
  j["linear_num_value_heads"] = c.linear_num_value_heads;
  j["linear_value_head_dim"] = c.linear_value_head_dim;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["partial_rotary_factor"] = c.partial_rotary_factor;
  j["rotary_dim"] = c.rotary_dim();
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  std::vector<std::string> types;
  for (bool f : c.full_attention) types.push_back(f ? "full_attention" : "linear_attention");
  j["layer_types"] = types;
  j["mtp_num_hidden_layers"] = c.mtp_num_hidden_layers;
  j["eos_token_ids"] = c.eos_token_ids;
  return j;
}

void run_inspect(const std::string& path, bool as_json) {
  std::error_code ec;
  if (path.empty()) fail("inspect: PATH is required (a model directory or a .safetensors file)");
  if (!fs::exists(path, ec)) fail("{}: no such file or directory", path);
  const fs::path config = fs::path(path) / "config.json";
  if (fs::is_directory(path, ec) && fs::exists(config, ec) && !fs::is_regular_file(config, ec))
    fail("{}: not a regular file", config.string());  // a directory or FIFO, not a missing config
  const bool model_dir = fs::is_directory(path, ec) && fs::is_regular_file(config, ec);

  std::optional<Qwen35Checkpoint> ck;
  std::optional<TensorStore> loose;
  std::optional<Qwen35Config> cfg;  // quantization params for a loose file, when its directory has a config
  if (model_dir) {
    ck.emplace(Qwen35Checkpoint::open(path));
  } else {
    loose.emplace(TensorStore::open(path));
    const fs::path parent = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
    if (fs::is_regular_file(parent / "config.json", ec)) {
      try {
        cfg = load_qwen35_config(parent.string());
      } catch (const Error&) {  // a loose file is listed even beside a bad config
      }
    }
  }
  const TensorStore& store = ck ? ck->store() : *loose;
  const QuantConfig* quant = ck ? &ck->config().quant : cfg ? &cfg->quant : nullptr;
  const std::vector<std::string> names = store.names();

  std::string why;
  const std::optional<Layout> layout = ck ? std::optional<Layout>(ck->layout()) : detect_layout(names, &why);

  // Per tensor: quantization of its module ("q4 g64"), when `<module>.scales` exists.
  struct Row {
    const TensorView* t;
    std::optional<QuantParams> q;
    bool affine = false;  // part of a quantized module (params may be unknown)
    std::string hf;       // a transformers format's label ("gptq q4 g128"), when its module is stored so
  };
  const bool hf = quant && quant->method != QuantMethod::None && quant->method != QuantMethod::MlxAffine;
  std::vector<Row> rows;
  uint64_t total = 0;
  for (const auto& n : names) {
    const TensorView& t = store.get(n);
    Row r{&t, std::nullopt, false, ""};
    if (hf) {
      for (const char* suffix : {".weight", ".qweight", ".qzeros", ".scales", ".g_idx", ".weight_scale_inv",
                                 ".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape"}) {
        if (!n.ends_with(suffix) || !r.hf.empty()) continue;
        r.hf = hf_module_label(store, quant->hf, n.substr(0, n.size() - std::strlen(suffix)));
      }
      total += t.nbytes;
      rows.push_back(r);
      continue;
    }
    for (const char* suffix : {".weight", ".scales", ".biases"}) {
      if (!n.ends_with(suffix)) continue;
      const std::string mod = n.substr(0, n.size() - std::strlen(suffix));
      if (store.find(mod + ".scales")) {
        r.affine = true;
        if (quant) r.q = quant->for_module(mod);
      }
    }
    total += t.nbytes;
    rows.push_back(r);
  }

  // Validation runs after the listing is built; its error is reported last.
  std::string invalid;
  if (ck) {
    try {
      ck->validate();
    } catch (const Error& e) {
      invalid = e.what();
    }
  }

  if (as_json) {
    json j;
    j["path"] = path;
    j["layout"] = layout ? json(layout_name(*layout)) : json(nullptr);
    if (!layout) j["layout_problem"] = why;
    if (ck) {
      const auto& c = ck->config();
      j["config"] = config_json(c);
      j["norms_shifted"] = ck->norms_shifted();
      j["lm_head"] = ck->lm_head().name;
      j["mtp_layers"] = ck->mtp_layers();
    }
    if (hf) {
      j["quantization"] = {{"method", quant_method_name(quant->method)}, {"summary", quant->hf.summary()}};
    } else if (quant && quant->present) {
      j["quantization"] = {{"bits", quant->defaults.bits},
                           {"group_size", quant->defaults.group_size},
                           {"mode", "affine"},
                           {"overrides", quant->overrides.size()}};
    } else {
      j["quantization"] = nullptr;
    }
    json ts = json::array();
    for (const auto& r : rows) {
      json t;
      t["name"] = r.t->name;
      t["dtype"] = std::string(dtype_name(r.t->dtype));
      t["shape"] = r.t->shape;
      t["bytes"] = r.t->nbytes;
      if (!r.hf.empty()) {
        t["quant"] = r.hf;
      } else if (r.q) {
        t["quant"] = {{"bits", r.q->bits}, {"group_size", r.q->group_size}};
      } else if (r.affine) {
        t["quant"] = "affine";
      } else {
        t["quant"] = nullptr;
      }
      ts.push_back(t);
    }
    j["tensors"] = ts;
    j["total_bytes"] = total;
    if (ck) j["valid"] = invalid.empty();
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("path: %s\n", path.c_str());
    std::printf("layout: %s\n", layout ? layout_name(*layout) : ("unknown: " + why).c_str());
    if (ck) {
      const auto& c = ck->config();
      std::printf("model_type: %s\n", c.model_type.c_str());
      if (c.moe) {
        std::printf("dims: hidden %d, vocab %d, layers %d: %s\n", c.hidden_size, c.vocab_size, c.num_hidden_layers,
                    schedule_text(c.full_attention).c_str());
        std::printf("moe: %d experts, top-%d per token, expert intermediate %d, shared expert intermediate %d, "
                    "experts stored %s\n",
                    c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.shared_expert_intermediate_size,
                    experts_stored(*ck).c_str());
      } else {
        std::printf("dims: hidden %d, intermediate %d, vocab %d, layers %d: %s\n", c.hidden_size, c.intermediate_size,
                    c.vocab_size, c.num_hidden_layers, schedule_text(c.full_attention).c_str());
      }
      std::printf("attention: %d q heads / %d kv heads x %d, rotary dim %d (theta %g), %d positions\n",
                  c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta,
                  c.max_position_embeddings);
      std::printf("gated deltanet: %d key heads x %d, %d value heads x %d, conv kernel %d\n", c.linear_num_key_heads,
                  c.linear_key_head_dim, c.linear_num_value_heads, c.linear_value_head_dim, c.linear_conv_kernel_dim);
      std::printf("rms_norm_eps: %g\n", double(c.rms_norm_eps));
      std::printf("eos: %s\n", c.eos_token_ids.empty() ? "none" : ids_text(c.eos_token_ids).c_str());
      std::printf("lm_head: %s%s\n", ck->lm_head().name.c_str(), ck->has("lm_head") ? "" : " (tied)");
      std::printf("norms: %s\n", ck->norms_shifted() ? "stored as the real gamma (mlx-converted)"
                                                     : "stored as w, (1+w) applied at load (HF)");
      std::printf("mtp: %s\n", ck->mtp_layers() > 0
                                   ? fmt::format("{} layer(s) under {}", ck->mtp_layers(), ck->mtp_prefix()).c_str()
                                   : "none");
    }
    if (hf) {
      std::printf("quantization: %s\n", quant->hf.summary().c_str());
    } else if (quant && quant->present) {
      std::printf("quantization: affine %d-bit, group %d, %zu per-module override(s)\n", quant->defaults.bits,
                  quant->defaults.group_size, quant->overrides.size());
    } else {
      std::printf("quantization: none\n");
    }
    std::printf("tensors: %zu, %llu bytes (%.2f MiB)\n", rows.size(), static_cast<unsigned long long>(total),
                double(total) / (1024.0 * 1024.0));
    size_t w = 4;
    for (const auto& r : rows) w = std::max(w, r.t->name.size());
    std::printf("%-*s  %-5s  %-20s  %12s  %s\n", int(w), "name", "dtype", "shape", "bytes", "quant");
    for (const auto& r : rows) {
      std::string q = "-";
      if (!r.hf.empty()) {
        q = r.hf;
      } else if (r.q) {
        q = fmt::format("q{} g{}", r.q->bits, r.q->group_size);
      } else if (r.affine) {
        q = "affine";
      }
      std::printf("%-*s  %-5s  %-20s  %12zu  %s\n", int(w), r.t->name.c_str(),
                  std::string(dtype_name(r.t->dtype)).c_str(), shape_text(r.t->shape).c_str(), r.t->nbytes,
                  q.c_str());
    }
    if (ck && invalid.empty()) std::printf("valid: every tensor the model reads is present with the expected shape\n");
  }
  std::fflush(stdout);
  if (!invalid.empty()) throw Error(invalid);
}

}  // namespace

void register_inspect(CLI::App& app) {
  struct Opts {
    std::string path;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("inspect", "List a checkpoint's tensors, layout, quantization and config");
  cmd->add_option("path", opts->path, "Model directory, directory of safetensors, or one .safetensors file");
  cmd->add_flag("--json", opts->json, "Print one JSON object");
  cmd->callback([opts] { run_inspect(opts->path, opts->json); });
}

}  // namespace nextn::cli
