#include "tokenizer/json_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <set>

#include "core/error.h"

namespace nextn::tok {

std::string printable(std::string_view s) {
  constexpr size_t kMax = 120;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  if (s.size() > kMax) out += "...";
  return out;
}

Json parse_json_strict(const std::string& text, const std::string& file) {
  // nlohmann stops at a NUL as if at the end, leaving later bytes unchecked.
  if (const void* nul = std::memchr(text.data(), 0, text.size()))
    fail("{}: invalid JSON: NUL byte at offset {}", file, static_cast<const char*>(nul) - text.data());
  // nlohmann keeps the last of duplicate keys silently; two "type"s or two
  // vocab entries for one string must not shadow each other.
  std::vector<std::set<std::string>> keys;
  std::optional<std::string> dup;
  auto cb = [&](int, Json::parse_event_t ev, Json& parsed) -> bool {
    if (ev == Json::parse_event_t::object_start) keys.emplace_back();
    if (ev == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == Json::parse_event_t::key && !keys.empty() && parsed.is_string() && !dup &&
        !keys.back().insert(parsed.get_ref<const std::string&>()).second)
      dup = parsed.get<std::string>();
    return true;
  };
  Json j;
  try {
    j = Json::parse(text, cb, /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    std::string msg = e.what();
    if (auto p = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      msg = msg.substr(p + 2);
    fail("{}: invalid JSON: {}", file, printable(msg));
  }
  if (dup) fail("{}: invalid JSON: duplicate key '{}'", file, printable(*dup));
  return j;
}

namespace {
const char* type_word(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a float";
    default:
      return "not a JSON value";
  }
}
}  // namespace

void Field::fail(const std::string& what) const {
  nextn::fail("{}: {}: {}", *file_, path_.empty() ? "top level" : path_, what);
}

void Field::need_object() const {
  if (!v_->is_object()) fail(fmt::format("is {}, not an object", type_word(*v_)));
}

std::string Field::where() const { return *file_ + ": " + (path_.empty() ? "top level" : path_); }

Field Field::at(const std::string& key) const {
  need_object();
  auto it = v_->find(key);
  const std::string p = path_.empty() ? key : path_ + "." + key;
  if (it == v_->end()) nextn::fail("{}: {}: missing", *file_, p);
  return Field(*it, p, *file_);
}

std::optional<Field> Field::get(const std::string& key) const {
  need_object();
  auto it = v_->find(key);
  if (it == v_->end() || it->is_null()) return std::nullopt;
  return Field(*it, path_.empty() ? key : path_ + "." + key, *file_);
}

std::vector<Field> Field::items() const {
  if (!v_->is_array()) fail(fmt::format("is {}, not an array", type_word(*v_)));
  std::vector<Field> out;
  out.reserve(v_->size());
  for (size_t i = 0; i < v_->size(); ++i) out.emplace_back((*v_)[i], fmt::format("{}[{}]", path_, i), *file_);
  return out;
}

std::vector<std::pair<std::string, Field>> Field::members() const {
  need_object();
  std::vector<std::pair<std::string, Field>> out;
  out.reserve(v_->size());
  for (auto it = v_->begin(); it != v_->end(); ++it)
    out.emplace_back(it.key(), Field(it.value(), fmt::format("{}['{}']", path_, printable(it.key())), *file_));
  return out;
}

const std::string& Field::str() const {
  if (!v_->is_string()) fail(fmt::format("is {}, not a string", type_word(*v_)));
  return v_->get_ref<const std::string&>();
}

bool Field::boolean() const {
  if (!v_->is_boolean()) fail(fmt::format("is {}, not a boolean", type_word(*v_)));
  return v_->get<bool>();
}

uint32_t Field::u32() const {
  if (v_->is_number_unsigned() && v_->get<uint64_t>() <= uint64_t(INT32_MAX)) return uint32_t(v_->get<uint64_t>());
  if (v_->is_number_integer() && v_->get<int64_t>() >= 0 && v_->get<int64_t>() <= INT32_MAX)
    return uint32_t(v_->get<int64_t>());
  fail(fmt::format("is {}, not an integer in [0, 2^31)", v_->is_number() ? printable(v_->dump()) : type_word(*v_)));
}

bool Field::bool_or(const std::string& key, bool dflt) const {
  auto f = get(key);
  return f ? f->boolean() : dflt;
}

std::optional<std::string> Field::str_or_null(const std::string& key) const {
  auto f = get(key);
  if (!f) return std::nullopt;
  return f->str();
}

std::string Field::type(const std::vector<std::string>& supported) const {
  const std::string& t = at("type").str();
  for (const auto& s : supported)
    if (s == t) return t;
  nextn::fail("{}: {}: unsupported type '{}' (supported: {})", *file_, path_.empty() ? "type" : path_ + ".type",
              printable(t), fmt::join(supported, ", "));
}

}  // namespace nextn::tok
