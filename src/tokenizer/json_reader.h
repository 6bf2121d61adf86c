// Typed, path-naming access to tokenizer.json. Every accessor checks the
// JSON type and fails with one line "FILE: PATH: what is wrong", e.g.
// "tokenizer.json: pre_tokenizer.pretokenizers[0].behavior: ...".
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace nextn::tok {

using Json = nlohmann::json;

// Parses `text`, refusing invalid JSON, NUL bytes and duplicate object keys.
Json parse_json_strict(const std::string& text, const std::string& file);

// Untrusted strings in messages: one line, bounded, control bytes escaped.
std::string printable(std::string_view s);

class Field {
 public:
  Field(const Json& value, std::string path, const std::string& file)
      : v_(&value), path_(std::move(path)), file_(&file) {}

  [[noreturn]] void fail(const std::string& what) const;
  const std::string& path() const { return path_; }
  // "FILE: PATH", the prefix of this field's errors.
  std::string where() const;
  const Json& json() const { return *v_; }
  bool is_null() const { return v_->is_null(); }

  // Object members: required, or absent/null -> nullopt.
  Field at(const std::string& key) const;
  std::optional<Field> get(const std::string& key) const;
  // Array elements; object members as (key, value).
  std::vector<Field> items() const;
  std::vector<std::pair<std::string, Field>> members() const;

  const std::string& str() const;
  bool boolean() const;
  uint32_t u32() const;  // a non-negative integer below 2^31 (a token id or a count)

  // Optional members with a default when absent or null.
  bool bool_or(const std::string& key, bool dflt) const;
  std::optional<std::string> str_or_null(const std::string& key) const;
  // The member "type", checked against `supported` (named in the error).
  std::string type(const std::vector<std::string>& supported) const;

 private:
  void need_object() const;
  const Json* v_;
  std::string path_;
  const std::string* file_;
};

}  // namespace nextn::tok
