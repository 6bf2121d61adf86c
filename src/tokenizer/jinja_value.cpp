#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace nextn::jinja {

Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::from_bool(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.boolean = b;
  return v;
}
Value Value::from_int(int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.integer = i;
  return v;
}
Value Value::from_float(double d) {
  Value v;
  v.kind = Kind::Float;
  v.number = d;
  return v;
}
Value Value::from_string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.text = std::move(s);
  return v;
}
Value Value::from_list(ValueList items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<ValueList>(std::move(items));
  v.is_tuple = tuple;
  return v;
}
Value Value::from_dict(ValueDict items) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<ValueDict>(std::move(items));
  return v;
}
Value Value::namespace_of(ValueDict items) {
  Value v = from_dict(std::move(items));
  v.is_namespace = true;
  return v;
}
Value Value::callable(NativeFn f) {
  Value v;
  v.kind = Kind::Callable;
  v.fn = std::make_shared<NativeFn>(std::move(f));
  return v;
}

namespace {
// Recursive, so the depth is bounded: a 100000-deep request field would
// otherwise overflow the stack here and again when the Value is destroyed
// (shared_ptr chains free recursively). The bound also keeps every later
// walk over a converted value shallow: printing, equals, nesting_depth and
// tojson's JsonWriter (which has its own guard at 512).
Value value_from_json(const nlohmann::ordered_json& j, int depth) {
  using Type = nlohmann::ordered_json::value_t;
  if ((j.type() == Type::array || j.type() == Type::object) && depth >= Value::kMaxJsonDepth)
    fail("JSON value nested deeper than {} levels", Value::kMaxJsonDepth);
  switch (j.type()) {
    case Type::null: return Value::none();
    case Type::boolean: return Value::from_bool(j.get<bool>());
    case Type::number_integer: return Value::from_int(j.get<int64_t>());
    case Type::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) return Value::from_float(double(u));
      return Value::from_int(int64_t(u));
    }
    case Type::number_float: return Value::from_float(j.get<double>());
    case Type::string: return Value::from_string(j.get<std::string>());
    case Type::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e, depth + 1));
      return Value::from_list(std::move(items));
    }
    case Type::object: {
      ValueDict items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), value_from_json(it.value(), depth + 1));
      return Value::from_dict(std::move(items));
    }
    default: return Value::none();
  }
}
}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j, 0); }

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict)
    if (k == key) {
      old = std::move(v);
      return;
    }
  dict->emplace_back(key, std::move(v));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.boolean;
    case Value::Kind::Int: return v.integer != 0;
    case Value::Kind::Float: return v.number != 0.0;
    case Value::Kind::String: return !v.text.empty();
    case Value::Kind::List: return !v.list->empty();
    case Value::Kind::Dict: return v.is_namespace || !v.dict->empty();
    case Value::Kind::Callable: return true;
  }
  return false;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed for
  // 1e-4 <= |d| < 1e16, scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out;
  if (exp >= -5 && exp < 16) {  // Python repr switches to exponent below 1e-4
    if (exp < -4) {
      // fall through to scientific below
    } else if (exp < 0) {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
  }
  if (out.empty()) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  if (neg) out.insert(0, 1, '-');
  return out;
}

static std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == q) out += std::string("\\") + char(c);
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out += char(c);
  }
  return out + q;
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return repr_string(v.text);
    case Value::Kind::Undefined: return "Undefined";
    default: break;
  }
  if (v.kind == Value::Kind::List) {
    std::string out = v.is_tuple ? "(" : "[";
    for (size_t i = 0; i < v.list->size(); ++i) {
      if (i) out += ", ";
      out += repr((*v.list)[i]);
    }
    if (v.is_tuple && v.list->size() == 1) out += ",";
    return out + (v.is_tuple ? ")" : "]");
  }
  if (v.kind == Value::Kind::Dict) {
    std::string out = v.is_namespace ? "<Namespace {" : "{";
    bool first = true;
    for (const auto& [k, e] : *v.dict) {
      if (!first) out += ", ";
      first = false;
      out += repr_string(k) + ": " + repr(e);
    }
    return out + (v.is_namespace ? "}>" : "}");
  }
  return to_str(v);
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.boolean ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.integer);
    case Value::Kind::Float: return float_repr(v.number);
    case Value::Kind::String: return v.text;
    case Value::Kind::Callable: return "<function>";
    default: return repr(v);
  }
}

static double as_double(const Value& v) {
  if (v.kind == Value::Kind::Float) return v.number;
  if (v.kind == Value::Kind::Bool) return v.boolean ? 1 : 0;
  return double(v.integer);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float) {
      const int64_t x = a.kind == Value::Kind::Bool ? a.boolean : a.integer;
      const int64_t y = b.kind == Value::Kind::Bool ? b.boolean : b.integer;
      return x == y;
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.text == b.text;
    case Value::Kind::List:
      if (a.list->size() != b.list->size() || a.is_tuple != b.is_tuple) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::Kind::Dict:
      if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, e] : *a.dict) {
        const Value* o = b.find(k);
        if (!o || !equals(e, *o)) return false;
      }
      return true;
    case Value::Kind::Callable: return a.fn == b.fn;
    default: return false;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.is_tuple ? "tuple" : "list";
    case Value::Kind::Dict: return v.is_namespace ? "Namespace" : "dict";
    case Value::Kind::Callable: return "function";
  }
  return "object";
}

// With ensure_ascii, non-ASCII code points become \\uXXXX (surrogate pairs
// above U+FFFF), as Python's json does.
static void json_escape_code_point(std::string& out, const std::string& s, size_t& i) {
  const unsigned char c = s[i];
  const size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  uint32_t cp = 0xFFFD;
  if (n > 1 && i + n <= s.size()) {
    cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint32_t((unsigned char)s[i + k]) & 0x3F);
  }
  i += n - 1;
  char b[16];
  if (cp >= 0x10000) {
    cp -= 0x10000;
    std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
  } else {
    std::snprintf(b, sizeof b, "\\u%04x", cp);
  }
  out += b;
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    if (ensure_ascii && c >= 0x80) {
      json_escape_code_point(out, s, i);
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

namespace {
struct JsonWriter {
  int indent;
  bool sort_keys;
  bool ensure_ascii;
  std::string item_sep, key_sep;
  std::string out;
  // Values from JSON are at most Value::kMaxJsonDepth deep and template-built
  // ones are held to 200 by the interpreter (check_nesting); this guard is for
  // anything else.
  int depth_guard = 0;

  void newline(int level) {
    out += '\n';
    out.append(size_t(indent) * size_t(level), ' ');
  }
  void write(const Value& v, int level) {
    if (++depth_guard > 512) throw Error("tojson: value nested too deeply");
    switch (v.kind) {
      case Value::Kind::None: out += "null"; break;
      case Value::Kind::Bool: out += v.boolean ? "true" : "false"; break;
      case Value::Kind::Int: out += std::to_string(v.integer); break;
      case Value::Kind::Float:
        if (std::isnan(v.number)) out += "NaN";
        else if (std::isinf(v.number)) out += v.number > 0 ? "Infinity" : "-Infinity";
        else out += float_repr(v.number);
        break;
      case Value::Kind::String: json_string(out, v.text, ensure_ascii); break;
      case Value::Kind::List: {
        if (v.list->empty()) {
          out += "[]";
          break;
        }
        out += '[';
        for (size_t i = 0; i < v.list->size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          write((*v.list)[i], level + 1);
        }
        if (indent >= 0) newline(level);
        out += ']';
        break;
      }
      case Value::Kind::Dict: {
        if (v.is_namespace) throw Error("tojson: Object of type Namespace is not JSON serializable");
        if (v.dict->empty()) {
          out += "{}";
          break;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : *v.dict) items.push_back(&kv);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          json_string(out, items[i]->first, ensure_ascii);
          out += key_sep;
          write(items[i]->second, level + 1);
        }
        if (indent >= 0) newline(level);
        out += '}';
        break;
      }
      default: throw Error("tojson: Object of type " + type_name(v) + " is not JSON serializable");
    }
    --depth_guard;
  }
};
}  // namespace

std::string to_json(const Value& v, int indent, bool sort_keys, const std::string* item_sep,
                    const std::string* key_sep, bool ensure_ascii) {
  JsonWriter w{indent, sort_keys, ensure_ascii, item_sep ? *item_sep : (indent >= 0 ? "," : ", "),
               key_sep ? *key_sep : ": ", {}};
  w.write(v, 0);
  return std::move(w.out);
}

size_t nesting_depth(const Value& v, size_t limit) {
  if (limit == 0) return 1;
  size_t deepest = 0;
  if (v.kind == Value::Kind::List) {
    for (const auto& x : *v.list) deepest = std::max(deepest, nesting_depth(x, limit - 1));
  } else if (v.kind == Value::Kind::Dict) {
    for (const auto& kv : *v.dict) deepest = std::max(deepest, nesting_depth(kv.second, limit - 1));
  } else {
    return 0;
  }
  return deepest + 1;
}

std::vector<std::string> split_code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

// Python's str.isspace() set, as UTF-8.
static size_t whitespace_len_at(const std::string& s, size_t i) {
  const unsigned char c = s[i];
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  static const char* const kWide[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                      "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const char* w : kWide) {
    const size_t n = std::char_traits<char>::length(w);
    if (s.compare(i, n, w) == 0) return n;
  }
  // U+2000..U+200A
  if (i + 2 < s.size() && c == 0xe2 && (unsigned char)s[i + 1] == 0x80 && (unsigned char)s[i + 2] >= 0x80 &&
      (unsigned char)s[i + 2] <= 0x8a)
    return 3;
  return 0;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::vector<std::string> cps = split_code_points(s);
  std::vector<std::string> strip_set;
  if (chars) strip_set = split_code_points(*chars);
  auto strippable = [&](const std::string& cp) {
    if (chars) return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
    return whitespace_len_at(cp, 0) == cp.size();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b])) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

}  // namespace nextn::jinja
