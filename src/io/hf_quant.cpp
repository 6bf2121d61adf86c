// config.json `quantization_config` blocks of transformers' quantizers (see
// hf_quant.h): what is run is parsed, every other method or variant is
// refused by name so a checkpoint never loads as something it is not.
#include "io/hf_quant.h"

#include <regex>

#include "core/error.h"
#include "io/config_json.h"

namespace nextn {

using json = nlohmann::json;
using namespace config_json;

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::None: return "none";
    case QuantMethod::MlxAffine: return "mlx affine";
    case QuantMethod::Fp8: return "fp8";
    case QuantMethod::Gptq: return "gptq";
    case QuantMethod::Awq: return "awq";
    case QuantMethod::CompressedTensors: return "compressed-tensors";
  }
  return "?";
}

namespace {

// Field access with "<file>: field '<path>.<key>': ..." errors.
struct Block {
  const std::string& file;
  const json& obj;
  std::string path;

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail("{}: field '{}{}': {}", file, path, key.empty() ? "" : "." + key, what);
  }
  const json* get(const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<std::string> str(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, fmt::format("expected a string, got {}", type_word(*v)));
    return v->get<std::string>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(key, fmt::format("expected a boolean, got {}", type_word(*v)));
    return v->get<bool>();
  }
  std::optional<int64_t> integer(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() < INT32_MIN || v->get<int64_t>() > INT32_MAX)
      bad(key, fmt::format("expected an integer, got {}", type_word(*v)));
    return v->get<int64_t>();
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    const json* v = get(key);
    if (!v) return out;
    if (!v->is_array()) bad(key, fmt::format("expected a list of strings, got {}", type_word(*v)));
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) bad(fmt::format("{}[{}]", key, i), "expected a string");
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }
};

// A `re:` pattern must compile here, not first at the module it would match.
void check_patterns(const Block& b, const std::string& key, const std::vector<std::string>& pats, bool re_prefix) {
  for (size_t i = 0; i < pats.size(); ++i) {
    if (re_prefix && !pats[i].starts_with("re:")) continue;
    try {
      std::regex(re_prefix ? pats[i].substr(3) : pats[i]);
    } catch (const std::regex_error&) {
      b.bad(fmt::format("{}[{}]", key, i), fmt::format("invalid regular expression '{}'", printable(pats[i])));
    }
  }
}

int bits_4_or_8(const Block& b, const std::string& key, int64_t def) {
  const int64_t bits = b.integer(key).value_or(def);
  if (bits != 4 && bits != 8)
    b.bad(key, fmt::format("{}-bit weights are not supported (supported: 4, 8)", bits));
  return int(bits);
}

void parse_fp8(const Block& b, HfQuant& q) {
  if (auto f = b.str("fmt"); f && *f != "e4m3")
    b.bad("fmt", fmt::format("FP8 format '{}' is not supported (supported: e4m3)", printable(*f)));
  if (auto f = b.str("scale_fmt"); f && *f != "float")
    b.bad("scale_fmt", fmt::format("scale format '{}' is not supported (supported: float, fp32 scales)", printable(*f)));
  q.activation_scheme = b.str("activation_scheme").value_or("dynamic");
  // transformers' default is (128, 128); an explicit null means one scale per tensor.
  auto bs_it = b.obj.find("weight_block_size");
  if (bs_it != b.obj.end() && bs_it->is_null()) {
    q.block_out = q.block_in = 0;
  } else if (const json* bs = b.get("weight_block_size")) {
    if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer() ||
        (*bs)[0].get<int64_t>() < 1 || (*bs)[1].get<int64_t>() < 1 || (*bs)[0].get<int64_t>() > (1 << 20) ||
        (*bs)[1].get<int64_t>() > (1 << 20))
      b.bad("weight_block_size", "expected [out, in], two positive integers");
    q.block_out = int((*bs)[0].get<int64_t>());
    q.block_in = int((*bs)[1].get<int64_t>());
  }
  // MiniMax writes the list as `ignored_layers` (transformers accepts both).
  const char* key = b.get("modules_to_not_convert") || !b.get("ignored_layers") ? "modules_to_not_convert" : "ignored_layers";
  q.not_convert = b.strings(key);
  check_patterns(b, key, q.not_convert, false);
}

void parse_gptq(const Block& b, HfQuant& q) {
  // transformers writes `checkpoint_format`, GPTQModel also `format`. Only
  // v1 ("gptq": zeros stored minus one) is decoded; gptq_v2 stores them as is.
  for (const char* key : {"checkpoint_format", "format"})
    if (auto f = b.str(key); f && *f != "gptq")
      b.bad(key, fmt::format("GPTQ checkpoint format '{}' is not supported (supported: gptq)", printable(*f)));
  q.bits = bits_4_or_8(b, "bits", 4);
  const int64_t g = b.integer("group_size").value_or(128);
  if (g != -1 && (g < 1 || g > (1 << 20))) b.bad("group_size", fmt::format("expected -1 or a positive integer, got {}", g));
  q.group_size = int(g);
  q.sym = b.boolean("sym").value_or(true);
  q.desc_act = b.boolean("desc_act").value_or(false);
}

void parse_awq(const Block& b, HfQuant& q) {
  if (auto v = b.str("version"); v) {
    std::string lower = *v;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (lower != "gemm")
      b.bad("version", fmt::format("AWQ version '{}' is not supported (supported: gemm; gemv, marlin, exllama "
                                   "and ipex pack differently)",
                                   printable(*v)));
  }
  // transformers 5.23's AwqConfig saves backend "auto" (the same gemm packing, its kernel chosen at load).
  if (auto be = b.str("backend"); be && *be != "autoawq" && *be != "auto")
    b.bad("backend", fmt::format("AWQ backend '{}' is not supported (supported: autoawq, auto)", printable(*be)));
  q.bits = int(b.integer("bits").value_or(b.integer("w_bit").value_or(4)));
  if (q.bits != 4) b.bad("bits", fmt::format("{}-bit AWQ is not supported (supported: 4)", q.bits));
  const int64_t g = b.integer("group_size").value_or(b.integer("q_group_size").value_or(128));
  if (g < 1 || g > (1 << 20)) b.bad("group_size", fmt::format("expected a positive integer, got {}", g));
  q.group_size = int(g);
  q.zero_point = b.boolean("zero_point").value_or(true);
  q.not_convert = b.strings("modules_to_not_convert");
}

std::string describe_activations(const Block& a) {
  const std::string type = a.str("type").value_or("int");
  const int64_t bits = a.integer("num_bits").value_or(8);
  const std::string strategy = a.str("strategy").value_or("tensor");
  const bool dynamic = a.get("dynamic") && a.obj.at("dynamic").is_boolean() ? a.obj.at("dynamic").get<bool>()
                                                                            : false;
  return fmt::format("{}{} {} per-{}", type == "float" ? "fp" : "int", bits, dynamic ? "dynamic" : "static",
                     strategy);
}

CtScheme parse_ct_group(const Block& top, const std::string& name, const json& g, const std::string& top_format) {
  const Block gb{top.file, g, top.path + ".config_groups." + name};
  if (!g.is_object()) gb.bad("", fmt::format("expected an object, got {}", type_word(g)));
  CtScheme s;
  s.name = name;
  s.targets = gb.strings("targets");
  if (s.targets.empty()) gb.bad("targets", "missing or empty (expected module names, \"Linear\" or \"re:\" patterns)");
  check_patterns(gb, "targets", s.targets, true);
  s.format = gb.str("format").value_or(top_format);
  if (s.format != "pack-quantized" && s.format != "float-quantized")
    gb.bad(gb.get("format") ? "format" : "",
           fmt::format("compressed-tensors format '{}' is not supported (supported: pack-quantized, "
                       "float-quantized)",
                       printable(s.format)));
  const json* w = gb.get("weights");
  if (!w || !w->is_object()) gb.bad("weights", "missing (expected the weights' quantization arguments)");
  const Block wb{top.file, *w, gb.path + ".weights"};
  const std::string type = wb.str("type").value_or("int");
  if (type != "int" && type != "float")
    wb.bad("type", fmt::format("weight type '{}' is not supported (supported: int, float)", printable(type)));
  s.is_float = type == "float";
  s.bits = int(wb.integer("num_bits").value_or(8));
  if (s.is_float && s.bits != 8) wb.bad("num_bits", fmt::format("{}-bit float weights are not supported (supported: 8)", s.bits));
  if (!s.is_float && s.bits != 4 && s.bits != 8)
    wb.bad("num_bits", fmt::format("{}-bit int weights are not supported (supported: 4, 8)", s.bits));
  if (s.is_float != (s.format == "float-quantized"))
    wb.bad("type", fmt::format("'{}' weights cannot be stored {}", type, s.format));
  s.symmetric = wb.boolean("symmetric").value_or(true);
  if (s.is_float && !s.symmetric) wb.bad("symmetric", "asymmetric FP8 weights are not supported");
  s.strategy = wb.str("strategy").value_or("tensor");
  if (s.strategy == "group") {
    const int64_t gs = wb.integer("group_size").value_or(0);
    if (gs < 1 || gs > (1 << 20)) wb.bad("group_size", "expected a positive integer for strategy 'group'");
    s.group_size = int(gs);
  } else if (s.strategy == "block") {
    const json* bs = wb.get("block_structure");
    if (!bs || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
        !(*bs)[1].is_number_integer() || (*bs)[0].get<int64_t>() < 1 || (*bs)[1].get<int64_t>() < 1 ||
        (*bs)[0].get<int64_t>() > (1 << 20) || (*bs)[1].get<int64_t>() > (1 << 20))
      wb.bad("block_structure", "expected [out, in], two positive integers for strategy 'block'");
    s.block_out = int((*bs)[0].get<int64_t>());
    s.block_in = int((*bs)[1].get<int64_t>());
  } else if (s.strategy != "tensor" && s.strategy != "channel") {
    wb.bad("strategy", fmt::format("weight strategy '{}' is not supported (supported: tensor, channel, group, block)",
                                   printable(s.strategy)));
  }
  if (wb.get("dynamic") && wb.boolean("dynamic").value_or(false)) wb.bad("dynamic", "dynamic weight scales are not supported");
  if (auto ao = wb.str("actorder"); ao && *ao != "weight")
    wb.bad("actorder", fmt::format("activation order '{}' (a stored weight_g_idx) is not supported", printable(*ao)));
  if (const json* a = gb.get("input_activations")) {
    if (!a->is_object()) gb.bad("input_activations", fmt::format("expected an object, got {}", type_word(*a)));
    s.activations = describe_activations(Block{top.file, *a, gb.path + ".input_activations"});
  }
  return s;
}

void parse_ct(const Block& b, HfQuant& q) {
  q.ct_format = b.str("format").value_or("");
  if (auto st = b.str("quantization_status"); st && *st != "compressed" && *st != "frozen")
    b.bad("quantization_status", fmt::format("status '{}' is not supported (the weights must be stored "
                                             "compressed)",
                                             printable(*st)));
  // compressed-tensors writes both keys as {} for a dense, untransformed model
  // (ModelCompressor.update_config, 0.20.1); anything in them changes the
  // weights' meaning, so it is refused rather than ignored.
  if (const json* sp = b.get("sparsity_config"); sp && !(sp->is_object() && sp->empty()))
    b.bad("sparsity_config", "sparse compressed-tensors checkpoints are not supported");
  if (const json* tr = b.get("transform_config"); tr && !(tr->is_object() && tr->empty()))
    b.bad("transform_config", "transformed (rotated) compressed-tensors checkpoints are not supported");
  const json* groups = b.get("config_groups");
  if (!groups || !groups->is_object() || groups->empty())
    b.bad("config_groups", "missing or empty (expected at least one group of quantized weights)");
  for (auto it = groups->begin(); it != groups->end(); ++it) q.schemes.push_back(parse_ct_group(b, it.key(), *it, q.ct_format));
  q.ignore = b.strings("ignore");
  check_patterns(b, "ignore", q.ignore, true);
}

// compressed-tensors' match: "re:<pattern>" is re.match (anchored at the
// start), a plain target the exact module name or, for "Linear", its class.
bool ct_match(const std::string& target, const std::string& module, bool linear) {
  if (target.starts_with("re:")) {
    return std::regex_search(module, std::regex(target.substr(3)), std::regex_constants::match_continuous);
  }
  if (target == "Linear") return linear;
  return target == module;
}

}  // namespace

HfQuant parse_hf_quant(const std::string& file, const json& block, const std::string& path) {
  const Block b{file, block, path};
  const json& m = block.at("quant_method");
  if (!m.is_string()) b.bad("quant_method", fmt::format("expected a string, got {}", type_word(m)));
  const std::string method = m.get<std::string>();
  HfQuant q;
  if (method == "fp8") {
    q.method = QuantMethod::Fp8;
    parse_fp8(b, q);
  } else if (method == "gptq") {
    q.method = QuantMethod::Gptq;
    parse_gptq(b, q);
  } else if (method == "awq") {
    q.method = QuantMethod::Awq;
    parse_awq(b, q);
  } else if (method == "compressed-tensors") {
    q.method = QuantMethod::CompressedTensors;
    parse_ct(b, q);
  } else {
    b.bad("quant_method", fmt::format("'{}' quantization is not supported (supported: fp8, gptq, awq, "
                                      "compressed-tensors, and MLX affine without a quant_method)",
                                      printable(method)));
  }
  return q;
}

bool HfQuant::not_converted(const std::string& module) const {
  // transformers' should_convert_module (5.23): the key as a regex matching a
  // prefix of the name that ends at a module boundary (before a '.', after a
  // '.', or at the end), or a suffix of the name.
  for (const auto& key : not_convert) {
    if (module.ends_with(key)) return true;
    const std::regex re(key);
    for (size_t len = 0; len <= module.size(); ++len) {
      const bool boundary = len == module.size() || module[len] == '.' || (len > 0 && module[len - 1] == '.');
      if (boundary && std::regex_match(module.begin(), module.begin() + long(len), re)) return true;
    }
  }
  return false;
}

const CtScheme* HfQuant::scheme_for(const std::string& module, bool linear) const {
  for (const auto& ig : ignore)
    if (ct_match(ig, module, linear)) return nullptr;
  for (const auto& s : schemes)
    for (const auto& t : s.targets)
      if (ct_match(t, module, linear)) return &s;
  return nullptr;
}

std::string hf_module_label(const TensorStore& store, const HfQuant& q, const std::string& mod) {
  if (!hf_module_quantized(store, q, mod)) return "";
  switch (q.method) {
    case QuantMethod::Fp8:
      return q.block_out ? fmt::format("fp8 b{}x{}", q.block_out, q.block_in) : std::string("fp8 per-tensor");
    case QuantMethod::Gptq:
      return fmt::format("gptq q{} {}", q.bits, q.group_size == -1 ? std::string("g-all") : fmt::format("g{}", q.group_size));
    case QuantMethod::Awq: return fmt::format("awq q4 g{}", q.group_size);
    case QuantMethod::CompressedTensors: {
      const CtScheme* s = q.scheme_for(mod, !mod.ends_with("embed_tokens"));
      if (!s) return "ct (no scheme)";
      std::string detail = s->strategy == "group"   ? fmt::format("g{}", s->group_size)
                           : s->strategy == "block" ? fmt::format("b{}x{}", s->block_out, s->block_in)
                                                    : s->strategy;
      return fmt::format("ct {}{} {}", s->is_float ? "fp" : "int", s->bits, detail);
    }
    default: return "";
  }
}

std::string HfQuant::summary() const {
  switch (method) {
    case QuantMethod::Fp8:
      return fmt::format("fp8 e4m3, {} (scale_inv), activation_scheme {} (not applied: weight-only run)",
                         block_out ? fmt::format("weight blocks {}x{}", block_out, block_in)
                                   : std::string("one scale per tensor"),
                         activation_scheme);
    case QuantMethod::Gptq:
      return fmt::format("gptq {}-bit, group {}, {}, desc_act {}", bits,
                         group_size == -1 ? std::string("whole input") : std::to_string(group_size),
                         sym ? "symmetric" : "asymmetric", desc_act ? "true" : "false");
    case QuantMethod::Awq:
      return fmt::format("awq gemm {}-bit, group {}, zero_point {}", bits, group_size, zero_point ? "true" : "false");
    case QuantMethod::CompressedTensors: {
      std::string s = "compressed-tensors";
      for (const auto& g : schemes) {
        s += fmt::format(" [{}: {} {}{} {}", g.name, g.format, g.is_float ? "fp" : "int", g.bits, g.strategy);
        if (g.strategy == "group") s += fmt::format(" {}", g.group_size);
        if (g.strategy == "block") s += fmt::format(" {}x{}", g.block_out, g.block_in);
        if (!g.is_float) s += g.symmetric ? " symmetric" : " asymmetric";
        if (!g.activations.empty()) s += ", activations " + g.activations + " (not applied: weight-only run)";
        s += "]";
      }
      return s;
    }
    default: return quant_method_name(method);
  }
}

}  // namespace nextn
