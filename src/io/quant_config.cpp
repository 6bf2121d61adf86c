// MLX affine quantization block of config.json (see quant_config.h).
#include "io/quant_config.h"

#include "core/error.h"
#include "io/config_json.h"

namespace nextn {

using json = nlohmann::json;

namespace {

using namespace config_json;

QuantParams parse_quant_params(const std::string& file, const json& obj, const std::string& path,
                               const QuantParams* defaults) {
  Reader r(file, {{&obj, path + "."}});
  QuantParams q;
  if (auto m = r.find("mode")) {
    if (!m->value->is_string()) r.bad(m->path, "expected a string");
    const std::string mode = m->value->get<std::string>();
    if (mode != "affine")
      r.bad(m->path, fmt::format("unsupported quantization mode '{}' (supported: affine)", printable(mode)));
  }
  auto b = r.find("bits");
  if (!b && !defaults) r.bad(path + ".bits", "missing (expected 4 or 8)");
  q.bits = b ? r.positive_int(*b, 64) : defaults->bits;
  if (q.bits != 4 && q.bits != 8) r.bad(b->path, fmt::format("unsupported bits {} (supported: 4, 8)", q.bits));
  auto g = r.find("group_size");
  if (!g && !defaults) r.bad(path + ".group_size", "missing (expected 32, 64 or 128)");
  q.group_size = g ? r.positive_int(*g, 1 << 20) : defaults->group_size;
  if (q.group_size != 32 && q.group_size != 64 && q.group_size != 128)
    r.bad(g->path, fmt::format("unsupported group size {} (supported: 32, 64, 128)", q.group_size));
  return q;
}

}  // namespace

QuantConfig parse_quant_config(const std::string& file, const json& root, bool allow_hf) {
  QuantConfig qc;
  std::string key = "quantization";
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) {
    key = "quantization_config";
    it = root.find(key);
    if (it == root.end() || it->is_null()) return qc;
  }
  const json& q = *it;
  if (!q.is_object()) fail("{}: field '{}': expected an object, got {}", file, key, type_word(q));
  // transformers' quantizers (gptq, awq, bitsandbytes, compressed-tensors,
  // fp8, ...) always write `quant_method`; MLX's affine block never does. A
  // GPTQ or AWQ block also carries bits and group_size, so without this check
  // it would pass for MLX affine and fail later as a missing tensor.
  for (const char* k : {"quantization", "quantization_config"}) {
    auto blk = root.find(k);
    if (blk == root.end() || !blk->is_object()) continue;
    auto m = blk->find("quant_method");
    if (m == blk->end()) continue;
    const std::string method = m->is_string() ? printable(m->get<std::string>()) : std::string(type_word(*m));
    if (allow_hf && method != "bitsandbytes") {
      // transformers reads `quantization_config`; a second MLX block beside
      // it would be contradictory.
      if (std::string(k) != "quantization_config")
        fail("{}: field '{}.quant_method': transformers reads quantization_config, not {}", file, k, k);
      if (auto mlx = root.find("quantization"); mlx != root.end() && !mlx->is_null())
        fail("{}: field 'quantization': an MLX block beside quantization_config.quant_method '{}' (one checkpoint "
             "has one format)",
             file, method);
      qc.method = QuantMethod::None;
      qc.hf = parse_hf_quant(file, *blk, k);
      qc.method = qc.hf.method;
      return qc;
    }
    if (allow_hf)
      fail("{}: field '{}.quant_method': 'bitsandbytes' quantization is not supported (supported: fp8, gptq, awq, "
           "compressed-tensors, MLX affine)",
           file, k);
    fail("{}: field '{}.quant_method': '{}' quantization is not supported (nextn reads MLX affine quantization: "
         "{{\"bits\": 4 or 8, \"group_size\": 32, 64 or 128, \"mode\": \"affine\"}}; quantize the unquantized "
         "checkpoint with `nextn quantize`)",
         file, k, method);
  }
  qc.present = true;
  qc.method = QuantMethod::MlxAffine;
  qc.defaults = parse_quant_params(file, q, key, nullptr);
  for (auto e = q.begin(); e != q.end(); ++e) {
    const std::string& k = e.key();
    if (k == "bits" || k == "group_size" || k == "mode") continue;
    const std::string path = key + "." + k;
    if (e->is_object()) {
      qc.overrides[k] = parse_quant_params(file, *e, path, &qc.defaults);
    } else if (e->is_boolean()) {
      if (e->get<bool>()) {
        qc.overrides[k] = qc.defaults;
      } else {
        qc.overrides[k] = std::nullopt;
      }
    }
    // Other scalar keys are ignored.
  }
  return qc;
}

std::optional<QuantParams> QuantConfig::for_module(const std::string& module_path) const {
  if (!present) return std::nullopt;
  auto it = overrides.find(module_path);
  if (it != overrides.end()) return it->second;
  return defaults;
}

}  // namespace nextn
