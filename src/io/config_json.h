// The JSON field reading shared by the config parsers (Qwen3.5 in
// config.cpp, Gemma 4 in gemma4_config.cpp): every failure is one Error line
// "<file>: field '<path>': <what was expected>".
#pragma once
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace nextn::config_json {

using json = nlohmann::json;

// Sanity bound on a MoE config's expert counts (Qwen3.5 MoE and Gemma 4):
// real checkpoints have <= 512.
constexpr int kMaxExperts = 65536;

// Quotes user text for a one-line message: control bytes escaped, long text cut.
inline std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

inline const char* type_word(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a float";
    default:
      return "something else";
  }
}

inline json parse_json(const std::string& text, const std::string& file) {
  try {
    json j = json::parse(text);
    return j;
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> drop the tag
    if (auto p = what.find("] "); p != std::string::npos && what.starts_with("[json.exception"))
      what = what.substr(p + 2);
    for (char& c : what)
      if (c == '\n' || c == '\r') c = ' ';
    fail("{}: malformed JSON: {}", file, what);
  }
}

// Where a field was found: its value and its dotted path ("text_config.hidden_size").
struct Found {
  const json* value = nullptr;
  std::string path;
};

// Looks fields up in a list of JSON objects, first non-null occurrence wins.
class Reader {
 public:
  Reader(std::string file, std::vector<std::pair<const json*, std::string>> sources)
      : file_(std::move(file)), sources_(std::move(sources)) {}

  const std::string& file() const { return file_; }

  std::optional<Found> find(const std::string& key) const {
    for (const auto& [obj, prefix] : sources_) {
      if (!obj) continue;
      auto it = obj->find(key);
      if (it != obj->end() && !it->is_null()) return Found{&*it, prefix + key};
    }
    return std::nullopt;
  }
  // The path reported when a field is absent everywhere: its preferred place.
  std::string preferred(const std::string& key) const { return sources_.front().second + key; }

  [[noreturn]] void bad(const std::string& path, const std::string& what) const {
    fail("{}: field '{}': {}", file_, path, what);
  }

  int positive_int(const Found& f, int64_t max = INT_MAX) const {
    const json& v = *f.value;
    if (v.is_number_unsigned() || v.is_number_integer()) {
      if (v.is_number_unsigned()) {
        uint64_t u = v.get<uint64_t>();
        if (u >= 1 && u <= static_cast<uint64_t>(max)) return static_cast<int>(u);
      } else {
        int64_t i = v.get<int64_t>();
        if (i >= 1 && i <= max) return static_cast<int>(i);
      }
      if (max < INT_MAX) bad(f.path, fmt::format("expected a positive integer of at most {}", max));
    }
    bad(f.path, "expected a positive integer");
  }
  int nonneg_int(const Found& f, int64_t max = INT_MAX) const {
    const json& v = *f.value;
    if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(max))
      return static_cast<int>(v.get<uint64_t>());
    if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= max)
      return static_cast<int>(v.get<int64_t>());
    bad(f.path, "expected a non-negative integer");
  }
  double positive_number(const Found& f) const {
    const json& v = *f.value;
    if (v.is_number()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d > 0) return d;
    }
    bad(f.path, "expected a positive number");
  }
  bool boolean(const Found& f) const {
    if (!f.value->is_boolean()) bad(f.path, fmt::format("expected a boolean, got {}", type_word(*f.value)));
    return f.value->get<bool>();
  }

  int req_positive_int(const std::string& key, int64_t max = INT_MAX) const {
    auto f = find(key);
    if (!f) bad(preferred(key), "missing (expected a positive integer)");
    return positive_int(*f, max);
  }
  int opt_positive_int(const std::string& key, int def, int64_t max = INT_MAX) const {
    auto f = find(key);
    return f ? positive_int(*f, max) : def;
  }

 private:
  std::string file_;
  std::vector<std::pair<const json*, std::string>> sources_;
};

// eos_token_id: an int or a list of ints, each in [0, vocab).
inline std::vector<int> parse_eos(const Reader& r, const Found& f, int vocab) {
  std::vector<int> ids;
  auto one = [&](const json& v, const std::string& path) {
    Found e{&v, path};
    int id = r.nonneg_int(e);
    if (id >= vocab) r.bad(path, fmt::format("token id {} is outside the vocabulary (vocab_size {})", id, vocab));
    for (int x : ids)
      if (x == id) return;
    ids.push_back(id);
  };
  if (f.value->is_array()) {
    for (size_t i = 0; i < f.value->size(); ++i) one((*f.value)[i], fmt::format("{}[{}]", f.path, i));
  } else if (f.value->is_number()) {
    one(*f.value, f.path);
  } else {
    r.bad(f.path, fmt::format("expected an integer or a list of integers, got {}", type_word(*f.value)));
  }
  return ids;
}

// <dir>/config.json and, when present, <dir>/generation_config.json as text.
struct ConfigFiles {
  std::string config, config_path;
  std::optional<std::string> generation;
  std::string generation_path;
};
ConfigFiles read_config_files(const std::string& dir);  // throws Error naming the file

}  // namespace nextn::config_json
