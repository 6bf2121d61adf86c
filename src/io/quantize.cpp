// MLX affine quantizer and the checkpoint rewrite behind `nextn quantize`.
#include "io/quantize.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "io/safetensors.h"

namespace nextn {

namespace fs = std::filesystem;

void quantize_affine(const float* w, int64_t rows, int64_t cols, int bits, int group, uint32_t* packed,
                     float* scales, float* biases) {
  if ((bits != 4 && bits != 8) || (group != 32 && group != 64 && group != 128))
    fail("quantize: unsupported bits {} / group size {}", bits, group);
  if (rows < 0 || cols <= 0 || cols % group != 0)
    fail("quantize: {} columns are not a positive multiple of the group size {}", cols, group);
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  const int per_word = 32 / bits;
  const int64_t n_groups = rows * (cols / group);
  for (int64_t i = 0; i < n_groups; ++i) {
    const float* g = w + i * group;
    float w_min = std::numeric_limits<float>::infinity();
    float w_max = -w_min;
    for (int j = 0; j < group; ++j) {
      w_max = std::max(w_max, g[j]);
      w_min = std::min(w_min, g[j]);
    }
    const bool mask = std::abs(w_min) > std::abs(w_max);
    float scale = std::max((w_max - w_min) / n_bins, eps);
    scale = mask ? scale : -scale;
    const float edge = mask ? w_min : w_max;
    const float q0 = std::rint(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
    uint32_t* out = packed + i * (group / per_word);
    for (int j = 0; j < group / per_word; ++j) {
      uint32_t word = 0;
      for (int k = 0; k < per_word; ++k) {
        float q = std::rint((g[j * per_word + k] - bias) / scale);
        q = std::min(std::max(q, 0.0f), n_bins);
        if (!(q >= 0.0f)) q = 0.0f;  // NaN: keep the cast defined
        word |= static_cast<uint32_t>(q) << (k * bits);
      }
      out[j] = word;
    }
    scales[i] = scale;
    biases[i] = bias;
  }
}

namespace {

// Runs f(begin, end) over [0, n) split across the machine's cores.
template <typename F>
void parallel_rows(int64_t n, F f) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 64);
  const int64_t chunk = std::max<int64_t>(1, (n + threads - 1) / threads);
  if (n <= chunk) {
    f(int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    pool.emplace_back([&, t, b, e] {
      try {
        f(b, e);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& ex : errors)
    if (ex) std::rethrow_exception(ex);
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot read", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) fail("{}: cannot create", p.string());
  f << text;
  f.flush();
  if (!f) fail("{}: write failed", p.string());
}


// An input that is quantized already (config block or stored scales): Error.
void refuse_quantized(const std::string& dir, const QuantConfig& quant, const std::vector<std::string>& names) {
  if (quant.present) fail("{}: already quantized (config.json has 'quantization')", dir);
  for (const auto& n : names)
    if (n.ends_with(".scales")) fail("{}: already quantized (tensor '{}')", dir, n);
}

// The output directory must not be the input nor hold another checkpoint; created when absent.
void prepare_output_dir(const std::string& in_dir, const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    if (!fs::is_directory(out_dir, ec)) fail("{}: exists and is not a directory", out_dir);
    if (fs::equivalent(out_dir, in_dir, ec)) fail("{}: the output directory is the input directory", out_dir);
    for (const auto& e : fs::directory_iterator(out_dir, ec)) {
      const std::string f = e.path().filename().string();
      if (f.ends_with(".safetensors") || f == "model.safetensors.index.json")
        fail("{}: already holds {}; remove it or choose another output directory", out_dir, f);
    }
  } else {
    fs::create_directories(out_dir, ec);
    if (ec) fail("{}: cannot create directory: {}", out_dir, ec.message());
  }
}

// A dense 2-D float `t` written as module `mod`: MLX affine (<mod>.weight
// packed, .scales, .biases) when its width is a multiple of the group, else
// as stored (listed in rep.unquantizable). Output bytes live in `buffers`.
void quantize_or_keep(const std::string& dir, const TensorView& t, const std::string& mod, int bits, int group,
                      std::deque<std::vector<uint8_t>>& buffers, std::vector<TensorToWrite>& out,
                      QuantizeReport& rep) {
  const std::string& name = t.name;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  if (cols % group != 0 || rows == 0) {
    out.push_back({mod + ".weight", t.dtype, t.shape, t.data, t.nbytes});
    rep.unquantizable.push_back(name);
    ++rep.kept;
    return;
  }
  const int64_t words = cols * bits / 32, groups = cols / group;
  auto& packed = buffers.emplace_back(size_t(rows * words) * 4);
  std::vector<float> scales(size_t(rows * groups)), biases(size_t(rows * groups));
  parallel_rows(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<uint32_t> words_buf(static_cast<size_t>(words));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        row[size_t(c)] = load_float(t.dtype, t.data, size_t(r * cols + c));
        if (!std::isfinite(row[size_t(c)]))
          fail("{}: tensor '{}': non-finite value at [{}, {}]; cannot quantize", dir, name, r, c);
      }
      quantize_affine(row.data(), 1, cols, bits, group, words_buf.data(), &scales[size_t(r * groups)],
                      &biases[size_t(r * groups)]);
      std::memcpy(packed.data() + size_t(r * words) * 4, words_buf.data(), size_t(words) * 4);
    }
  });
  // Scales and biases in bf16 for a bf16 model (as MLX), else f32.
  const DType sdt = t.dtype == DType::BF16 ? DType::BF16 : DType::F32;
  auto store_floats = [&](const std::vector<float>& v) -> std::vector<uint8_t>& {
    auto& buf = buffers.emplace_back(v.size() * dtype_size(sdt));
    for (size_t i = 0; i < v.size(); ++i) {
      if (sdt == DType::BF16) {
        const uint16_t h = f32_to_bf16(v[i]);
        std::memcpy(buf.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(buf.data() + 4 * i, &v[i], 4);
      }
    }
    return buf;
  };
  auto& sb = store_floats(scales);
  auto& bb = store_floats(biases);
  out.push_back({mod + ".weight", DType::U32, {rows, words}, packed.data(), packed.size()});
  out.push_back({mod + ".scales", sdt, {rows, groups}, sb.data(), sb.size()});
  out.push_back({mod + ".biases", sdt, {rows, groups}, bb.data(), bb.size()});
  ++rep.quantized;
}

// <out>/model.safetensors, config.json (as read, key order kept, plus the
// quantization blocks) and the side files (generation config, tokenizer).
void write_quantized(const std::string& in_dir, const std::string& out_dir, const std::vector<TensorToWrite>& out,
                     int bits, int group, QuantizeReport& rep) {
  std::error_code ec;
  rep.out_file = (fs::path(out_dir) / "model.safetensors").string();
  for (const auto& t : out) rep.bytes_out += t.nbytes;
  write_safetensors(rep.out_file, out, {{"format", "mlx"}});

  // config.json: as read (key order kept), plus the quantization blocks.
  const fs::path in_cfg = fs::path(in_dir) / "config.json";
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(read_text(in_cfg));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", in_cfg.string(), e.what());
  }
  const nlohmann::ordered_json q = {{"group_size", group}, {"bits", bits}, {"mode", "affine"}};
  cfg["quantization"] = q;
  cfg["quantization_config"] = q;
  write_text(fs::path(out_dir) / "config.json", cfg.dump(2) + "\n");

  // generation_config.json and the tokenizer files travel along.
  for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
                        "merges.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                        "chat_template.json"}) {
    const fs::path src = fs::path(in_dir) / f;
    if (!fs::is_regular_file(src, ec)) continue;
    fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("{}: cannot copy to {}: {}", src.string(), out_dir, ec.message());
    rep.copied_files.push_back(f);
  }
}

// `nextn quantize` of a Gemma 4 target or assistant: every 2-D float
// `.weight` of the text model (target: its prefix and LM head; assistant:
// every tensor) quantized under its stored name; norms, layer_scalar and
// token_ordering as stored; a target's other tensors (vision, audio) dropped.
QuantizeReport quantize_gemma4(const std::string& in_dir, const std::string& out_dir, const std::string& model_type,
                               int bits, int group) {
  const Gemma4Checkpoint ck = model_type == "gemma4_assistant" ? Gemma4Checkpoint::open_assistant(in_dir)
                                                               : Gemma4Checkpoint::open(in_dir);
  const std::vector<std::string> names = ck.store().names();
  refuse_quantized(ck.dir(), ck.config().quant, names);
  prepare_output_dir(in_dir, out_dir);
  QuantizeReport rep;
  std::deque<std::vector<uint8_t>> buffers;
  std::vector<TensorToWrite> out;
  const std::string head = ck.lm_head().name;
  for (const auto& name : names) {
    const TensorView& t = ck.store().get(name);
    if (!ck.is_assistant() && !name.starts_with(ck.stored("")) && name != head) {
      ++rep.dropped;
      continue;
    }
    if (t.shape.size() == 2 && name.ends_with(".weight") && is_float_dtype(t.dtype)) {
      quantize_or_keep(ck.dir(), t, name.substr(0, name.size() - 7), bits, group, buffers, out, rep);
      continue;
    }
    out.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
    ++rep.kept;
  }
  write_quantized(in_dir, out_dir, out, bits, group, rep);
  return rep;
}

}  // namespace

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& opt) {
  if (opt.bits != 4 && opt.bits != 8) fail("quantize: --bits {} is not supported (supported: 4, 8)", opt.bits);
  if (opt.group_size != 32 && opt.group_size != 64 && opt.group_size != 128)
    fail("quantize: --group-size {} is not supported (supported: 32, 64, 128)", opt.group_size);

  std::string gemma;
  try {
    gemma = gemma4_model_type(in_dir);
  } catch (const Error&) {
    // no readable config.json: Qwen35Checkpoint::open below says so
  }
  if (!gemma.empty()) return quantize_gemma4(in_dir, out_dir, gemma, opt.bits, opt.group_size);
  const Qwen35Checkpoint ck = Qwen35Checkpoint::open(in_dir);
  const TensorStore& store = ck.store();
  const std::vector<std::string> names = store.names();
  refuse_quantized(ck.dir(), ck.config().quant, names);
  ck.validate();  // a broken input fails here, before anything is written

  prepare_output_dir(in_dir, out_dir);

  QuantizeReport rep;
  const int bits = opt.bits, group = opt.group_size;
  std::deque<std::vector<uint8_t>> buffers;  // owned output data (stable addresses)
  std::vector<TensorToWrite> out;

  // A tied head stored anyway (same bytes as the embedding) is dropped.
  const std::string head_name = ck.stored_name("lm_head") + ".weight";
  bool drop_head = false;
  if (const TensorView* h = store.find(head_name); h && ck.config().tie_word_embeddings) {
    const TensorView* e = store.find(ck.stored_name("embed_tokens") + ".weight");
    drop_head = e && e->dtype == h->dtype && e->shape == h->shape && e->nbytes == h->nbytes &&
                std::memcmp(e->data, h->data, h->nbytes) == 0;
  }

  for (const auto& name : names) {
    const TensorView& t = store.get(name);
    const auto logical = ck.logical_name(name);
    if (!logical || (drop_head && name == head_name)) {
      ++rep.dropped;
      continue;
    }
    std::string oname;
    if (logical->starts_with("mtp.")) {
      oname = *logical;
    } else if (*logical == "lm_head" || logical->starts_with("lm_head.")) {
      oname = "language_model." + *logical;
    } else {
      oname = "language_model.model." + *logical;
    }

    if (is_one_plus_norm(*logical) && logical->ends_with(".weight")) {
      if (!is_float_dtype(t.dtype)) fail("{}: tensor '{}': dtype {}, expected a float norm", ck.dir(), name, dtype_name(t.dtype));
      if (ck.norms_shifted()) {
        out.push_back({oname, t.dtype, t.shape, t.data, t.nbytes});
        ++rep.kept;
      } else {  // HF stores gamma - 1: write the real gamma, exact in fp32
        auto& buf = buffers.emplace_back(size_t(t.numel()) * 4);
        for (int64_t i = 0; i < t.numel(); ++i) {
          const float g = 1.0f + load_float(t.dtype, t.data, size_t(i));
          std::memcpy(buf.data() + 4 * i, &g, 4);
        }
        out.push_back({oname, DType::F32, t.shape, buf.data(), buf.size()});
        ++rep.shifted_norms;
      }
      continue;
    }
    if (logical->ends_with(".conv1d.weight") && t.shape.size() == 3) {
      // [C, 1, K] (HF) and [C, K, 1] (MLX) are the same bytes.
      std::vector<int64_t> shape = t.shape;
      if (shape[1] == 1) std::swap(shape[1], shape[2]);
      out.push_back({oname, t.dtype, shape, t.data, t.nbytes});
      ++rep.kept;
      continue;
    }
    if (t.shape.size() == 2 && logical->ends_with(".weight") && is_float_dtype(t.dtype)) {
      quantize_or_keep(ck.dir(), t, oname.substr(0, oname.size() - 7), bits, group, buffers, out, rep);
      continue;
    }
    // A_log, dt_bias, linear_attn.norm, anything else: as stored.
    out.push_back({oname, t.dtype, t.shape, t.data, t.nbytes});
    ++rep.kept;
  }

  write_quantized(in_dir, out_dir, out, bits, group, rep);
  return rep;
}

}  // namespace nextn
