// The value type of the chat-template Jinja interpreter. It mirrors the
// Python objects a template sees under transformers' Jinja environment:
// Jinja's Undefined, None, bool, int, float, str, list/tuple, dict (insertion
// ordered, string keys), a mutable namespace, and callables (macros, bound
// string/dict methods, globals). Printing, equality, truthiness and JSON
// output follow Python so rendered prompts match apply_chat_template byte
// for byte.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nextn::jinja {

struct Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion ordered

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using NativeFn = std::function<Value(CallArgs&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };
  Kind kind = Kind::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string text;
  std::shared_ptr<ValueList> list;  // List (is_tuple marks a tuple)
  std::shared_ptr<ValueDict> dict;  // Dict (is_namespace marks a namespace)
  std::shared_ptr<NativeFn> fn;     // Callable
  bool is_tuple = false;
  bool is_namespace = false;

  static Value undefined() { return Value{}; }
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double d);
  static Value from_string(std::string s);
  static Value from_list(ValueList items, bool tuple = false);
  static Value from_dict(ValueDict items);
  static Value namespace_of(ValueDict items);
  static Value callable(NativeFn f);
  // Throws nextn::Error when `j` nests more than kMaxJsonDepth arrays/objects
  // ([] is one level): template variables come from requests and from
  // tokenizer configs, and the conversion recurses.
  static constexpr int kMaxJsonDepth = 128;
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_mapping() const { return kind == Kind::Dict && !is_namespace; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }

  // Dict lookup; nullptr when absent.
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);  // dicts and namespaces only
};

// Python truthiness (Undefined is falsy).
bool truthy(const Value& v);
// Python str(): what `{{ v }}` prints. Undefined prints "".
std::string to_str(const Value& v);
// Python repr(), used inside printed lists and dicts.
std::string repr(const Value& v);
// Python's repr of a float ("1.0", "1e-05", "inf").
std::string float_repr(double d);
// Python ==.
bool equals(const Value& a, const Value& b);
// json.dumps(v, ensure_ascii=..., indent=indent, separators=..., sort_keys=...);
// indent < 0 means None. Throws nextn::Error on values JSON cannot hold.
std::string to_json(const Value& v, int indent, bool sort_keys, const std::string* item_sep = nullptr,
                    const std::string* key_sep = nullptr, bool ensure_ascii = false);
// Name of the Python type, for error messages ("str", "dict", ...).
std::string type_name(const Value& v);

// Nesting depth of lists/dicts in `v`, counting stops once past `limit`.
size_t nesting_depth(const Value& v, size_t limit);

// UTF-8 helpers: Python strings index by code point.
std::vector<std::string> split_code_points(const std::string& s);
size_t code_point_count(const std::string& s);
// Python str.strip/lstrip/rstrip; chars == nullptr strips Unicode whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);

}  // namespace nextn::jinja
