// Filters, tests, attribute access, string/dict methods and globals of the
// chat-template interpreter, each following its Jinja/Python counterpart.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/jinja_args.h"

namespace nextn::jinja {

namespace detail {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        Interpreter& in, int line) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    auto cps = split_code_points(s);
    int64_t n = 0;
    for (auto& cp : cps) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += cp;
      in.check_size(out.size(), line);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    in.check_size(out.size(), line);
    pos = hit + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

}  // namespace detail

namespace {
using namespace detail;

Value py_split(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
  ValueList out;
  if (!sep || sep->is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace ignored.
    auto cps = split_code_points(s);
    std::string cur;
    bool in_word = false;
    int64_t splits = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      const bool ws = py_strip(cps[i], nullptr, true, true).empty();
      if (maxsplit >= 0 && splits >= maxsplit && in_word) {
        // Remainder goes unsplit, minus trailing whitespace.
        std::string rest;
        for (size_t j = i; j < cps.size(); ++j) rest += cps[j];
        cur += rest;
        out.push_back(Value::from_string(py_strip(cur, nullptr, false, true)));
        return Value::from_list(std::move(out));
      }
      if (ws) {
        if (in_word) {
          out.push_back(Value::from_string(cur));
          cur.clear();
          in_word = false;
          ++splits;
        }
      } else {
        cur += cps[i];
        in_word = true;
      }
    }
    if (in_word) out.push_back(Value::from_string(cur));
    return Value::from_list(std::move(out));
  }
  if (!sep->is_string()) fail_at(line, "split: separator must be a string or None");
  if (sep->text.empty()) fail_at(line, "split: empty separator");
  size_t pos = 0;
  int64_t n = 0;
  while (maxsplit < 0 || n < maxsplit) {
    const size_t hit = s.find(sep->text, pos);
    if (hit == std::string::npos) break;
    out.push_back(Value::from_string(s.substr(pos, hit - pos)));
    pos = hit + sep->text.size();
    ++n;
  }
  out.push_back(Value::from_string(s.substr(pos)));
  return Value::from_list(std::move(out));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, int line, const char* fn) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) fail_at(line, fmt::format("{} arg must be str or a tuple of str", fn));
    if (a.text.size() > s.size()) return false;
    return prefix ? s.compare(0, a.text.size(), a.text) == 0
                  : s.compare(s.size() - a.text.size(), a.text.size(), a.text) == 0;
  };
  if (affix.is_list() && affix.is_tuple) {
    for (const auto& a : *affix.list)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

}  // namespace

std::string detail::title_case(const std::string& s) {

  std::string out = s;
  bool start = true;
  for (auto& c : out) {
    if (std::isalpha((unsigned char)c)) {
      c = char(start ? std::toupper((unsigned char)c) : std::tolower((unsigned char)c));
      start = false;
    } else {
      start = !std::isdigit((unsigned char)c) && !(c & 0x80);
    }
  }
  return out;
}

namespace {

Value string_method(Interpreter& in, const std::string& self, const std::string& name, CallArgs& call, int line) {
  Args a(call, name, line);
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.get(0, "prefix");
    if (!affix) fail_at(line, name + "() takes at least 1 argument");
    a.done(1);
    return Value::from_bool(affix_match(self, *affix, name == "startswith", line, name.c_str()));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = a.get(0, "chars");
    a.done(1);
    const std::string* set = (chars && chars->is_string()) ? &chars->text : nullptr;
    return Value::from_string(py_strip(self, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    const Value* sep = a.get(0, "sep");
    const Value maxsplit = a.value(1, "maxsplit", Value::from_int(-1));
    a.done(2);
    if (!is_int_like(maxsplit)) fail_at(line, "split: maxsplit must be an integer");
    return py_split(self, sep, int_of(maxsplit), line);
  }
  if (name == "upper") return a.done(0), Value::from_string(ascii_upper(self));
  if (name == "lower") return a.done(0), Value::from_string(ascii_lower(self));
  if (name == "title") return a.done(0), Value::from_string(title_case(self));
  if (name == "capitalize") {
    a.done(0);
    std::string s = ascii_lower(self);
    if (!s.empty()) s[0] = char(std::toupper((unsigned char)s[0]));
    return Value::from_string(s);
  }
  if (name == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    const Value count = a.value(2, "count", Value::from_int(-1));
    a.done(3);
    if (!from || !to || !from->is_string() || !to->is_string() || !is_int_like(count))
      fail_at(line, "replace() takes two strings and an optional count");
    return Value::from_string(replace_all(self, from->text, to->text, int_of(count), in, line));
  }
  if (name == "find" || name == "count") {
    const Value* sub = a.get(0, "sub");
    a.done(1);
    if (!sub || !sub->is_string()) fail_at(line, name + "() needs a string argument");
    if (name == "find") {
      const size_t at = self.find(sub->text);
      return Value::from_int(at == std::string::npos ? -1 : int64_t(code_point_count(self.substr(0, at))));
    }
    if (sub->text.empty()) return Value::from_int(int64_t(code_point_count(self)) + 1);
    int64_t n = 0;
    for (size_t p = self.find(sub->text); p != std::string::npos; p = self.find(sub->text, p + sub->text.size())) ++n;
    return Value::from_int(n);
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    a.done(1);
    if (!items) fail_at(line, "join() takes one argument");
    std::string out;
    bool first = true;
    for (const auto& v : iterate(*items, line)) {
      if (!v.is_string()) fail_at(line, fmt::format("sequence item: expected str instance, {} found", type_name(v)));
      if (!first) out += self;
      first = false;
      out += v.text;
      in.check_size(out.size(), line);
    }
    return Value::from_string(std::move(out));
  }
  fail_at(line, fmt::format("'str' object has no attribute '{}'", name));
}

const char* const kStringMethods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split",
                                      "upper", "lower", "title", "capitalize", "replace", "find", "count", "join"};
const char* const kDictMethods[] = {"get", "items", "keys", "values"};

ValueList dict_items(const Value& d) {
  ValueList out;
  for (const auto& [k, v] : *d.dict) out.push_back(Value::from_list({Value::from_string(k), v}, true));
  return out;
}

Value dict_method(const Value& self, const std::string& name, CallArgs& call, int line) {
  Args a(call, name, line);
  if (name == "get") {
    const Value* key = a.get(0, "key");
    const Value dflt = a.value(1, "default", Value::none());
    a.done(2);
    if (!key) fail_at(line, "get() takes at least 1 argument");
    if (!key->is_string()) return dflt;
    const Value* v = self.find(key->text);
    return v ? *v : dflt;
  }
  a.done(0);
  if (name == "items") return Value::from_list(dict_items(self));
  ValueList out;
  for (const auto& [k, v] : *self.dict) out.push_back(name == "keys" ? Value::from_string(k) : v);
  return Value::from_list(std::move(out));
}

template <size_t N>
bool contains(const char* const (&names)[N], const std::string& n) {
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

}  // namespace

Value detail::attribute_path(Interpreter& in, Value v, const std::string& path, int line) {
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits && v.is_list() ? get_item(in, v, Value::from_int(std::stoll(part)), line)
                              : get_item(in, v, Value::from_string(part), line);
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

std::string detail::html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

using namespace detail;

Value get_attribute(Interpreter& in, const Value& obj, const std::string& name, int line) {
  (void)in;
  switch (obj.kind) {
    case Value::Kind::Undefined: fail_at(line, obj.text.empty() ? "value is undefined" : obj.text);
    case Value::Kind::String:
      if (contains(kStringMethods, name)) {
        const std::string self = obj.text;
        Interpreter* ip = &in;
        return Value::callable([ip, self, name, line](CallArgs& a) { return string_method(*ip, self, name, a, line); });
      }
      break;
    case Value::Kind::Dict:
      if (!obj.is_namespace && contains(kDictMethods, name)) {
        const Value self = obj;
        return Value::callable([self, name, line](CallArgs& a) { return dict_method(self, name, a, line); });
      }
      if (const Value* v = obj.find(name)) return *v;
      break;
    default: break;
  }
  return undefined_because(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

Value get_item(Interpreter& in, const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) fail_at(line, obj.text.empty() ? "value is undefined" : obj.text);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.find(key.text)) return *v;
  } else if (obj.is_list() && is_int_like(key)) {
    int64_t i = int_of(key);
    if (i < 0) i += int64_t(obj.list->size());
    if (i >= 0 && i < int64_t(obj.list->size())) return (*obj.list)[size_t(i)];
  } else if (obj.is_string() && is_int_like(key)) {
    auto cps = split_code_points(obj.text);
    int64_t i = int_of(key);
    if (i < 0) i += int64_t(cps.size());
    if (i >= 0 && i < int64_t(cps.size())) return Value::from_string(cps[size_t(i)]);
  }
  if (key.is_string()) return get_attribute(in, obj, key.text, line);
  return undefined_because(fmt::format("'{} object' has no element {}", type_name(obj), repr(key)));
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& call, int line) {
  Args a(call, name, line);
  auto arg0 = [&]() -> Value {
    const Value* x = a.get(0, "other");
    if (!x) fail_at(line, fmt::format("test '{}' needs an argument", name));
    a.done(1);
    return *x;
  };
  using K = Value::Kind;
  if (name == "defined") return a.done(0), !v.is_undefined();
  if (name == "undefined") return a.done(0), v.is_undefined();
  if (name == "none") return a.done(0), v.is_none();
  if (name == "boolean") return a.done(0), v.kind == K::Bool;
  if (name == "true") return a.done(0), v.kind == K::Bool && v.boolean;
  if (name == "false") return a.done(0), v.kind == K::Bool && !v.boolean;
  if (name == "integer") return a.done(0), v.kind == K::Int;
  if (name == "float") return a.done(0), v.kind == K::Float;
  if (name == "number") return a.done(0), v.is_number();
  if (name == "string") return a.done(0), v.is_string();
  if (name == "mapping") return a.done(0), v.is_mapping();
  // Jinja's Undefined is an empty iterable with len() 0.
  if (name == "iterable") return a.done(0), v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined();
  if (name == "sequence") return a.done(0), v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined();
  if (name == "callable") return a.done(0), v.kind == K::Callable;
  if (name == "lower") return a.done(0), v.is_string() && ascii_lower(v.text) == v.text;
  if (name == "upper") return a.done(0), v.is_string() && ascii_upper(v.text) == v.text;
  if (name == "escaped") return a.done(0), false;
  if (name == "odd" || name == "even") {
    a.done(0);
    if (!is_int_like(v)) fail_at(line, fmt::format("test '{}' needs an integer", name));
    return (((int_of(v) % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = arg0();
    if (!is_int_like(v) || !is_int_like(d) || int_of(d) == 0) fail_at(line, "divisibleby needs non-zero integers");
    return int_of(v) % int_of(d) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg0());
  if (name == "ne" || name == "!=") return !equals(v, arg0());
  if (name == "sameas") {
    const Value o = arg0();
    if (v.kind != o.kind) return false;
    if (v.is_list()) return v.list == o.list;
    if (v.is_dict()) return v.dict == o.dict;
    return equals(v, o);
  }
  if (name == "lt" || name == "<") return compare_values(v, arg0(), line) < 0;
  if (name == "le" || name == "<=") return compare_values(v, arg0(), line) <= 0;
  if (name == "gt" || name == ">") return compare_values(v, arg0(), line) > 0;
  if (name == "ge" || name == ">=") return compare_values(v, arg0(), line) >= 0;
  if (name == "in") {
    const Value c = arg0();
    if (c.is_string()) return v.is_string() && c.text.find(v.text) != std::string::npos;
    if (c.is_dict()) return v.is_string() && c.find(v.text);
    for (const auto& x : iterate(c, line))
      if (equals(v, x)) return true;
    return false;
  }
  (void)in;
  fail_at(line, fmt::format("no test named '{}'", name));
}

}  // namespace nextn::jinja
