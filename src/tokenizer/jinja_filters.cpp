// Jinja filters and the globals transformers' chat environment defines
// (range, namespace, dict, raise_exception, strftime_now).
#include <algorithm>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja_args.h"

namespace nextn::jinja {

using namespace detail;

namespace {

ValueList sorted_copy(Interpreter& in, ValueList items, bool reverse, bool case_sensitive, const std::string& attr,
                      int line) {
  auto key = [&](const Value& v) {
    Value k = attr.empty() ? v : attribute_path(in, v, attr, line);
    if (!case_sensitive && k.is_string()) k.text = ascii_lower(k.text);
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(key(v), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    const int c = compare_values(a.first, b.first, line);
    return reverse ? c > 0 : c < 0;
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

std::string do_indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string> lines;
  std::string cur;
  const std::string text = s + "\n";
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += text[i];
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) {
        rv += '\n';
        rv += pad;
      }
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += '\n';
      if (!lines[i].empty()) rv += pad;
      rv += lines[i];
    }
  }
  if (first) rv.insert(0, pad);
  return rv;
}

Value to_number(const Value& v, bool want_int, const Value& dflt) {
  if (v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool)
    return want_int ? Value::from_int(int_of(v)) : Value::from_float(double(int_of(v)));
  if (v.kind == Value::Kind::Float) {
    if (!want_int) return v;
    if (!std::isfinite(v.number) || std::fabs(v.number) >= 9.2e18) return dflt;
    return Value::from_int(int64_t(v.number));
  }
  if (v.is_string()) {
    const std::string s = py_strip(v.text, nullptr, true, true);
    if (s.empty()) return dflt;
    char* end = nullptr;
    errno = 0;
    if (want_int) {
      const long long x = std::strtoll(s.c_str(), &end, 10);
      if (end == s.c_str() + s.size() && errno == 0) return Value::from_int(x);
      const double d = std::strtod(s.c_str(), &end);  // Jinja's int filter also accepts "3.7"
      if (end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::from_int(int64_t(d));
      return dflt;
    }
    const double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size()) return Value::from_float(d);
  }
  return dflt;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& call, int line) {
  Args a(call, name, line);
  using K = Value::Kind;
  if (name == "safe") return a.done(0), v;
  if (name == "string") return a.done(0), Value::from_string(to_str(v));
  if (name == "tojson") {
    const bool ascii = a.flag(0, "ensure_ascii", false);
    const Value indent = a.value(1, "indent", Value::none());
    const Value separators = a.value(2, "separators", Value::none());
    const bool sort_keys = a.flag(3, "sort_keys", false);
    a.done(4);
    int ind = -1;
    if (is_int_like(indent)) ind = int(std::clamp<int64_t>(int_of(indent), 0, 64));
    else if (!indent.is_none()) fail_at(line, "tojson: indent must be an integer");
    if (separators.is_none()) return Value::from_string(to_json(v, ind, sort_keys, nullptr, nullptr, ascii));
    if (!separators.is_list() || separators.list->size() != 2 || !(*separators.list)[0].is_string() ||
        !(*separators.list)[1].is_string())
      fail_at(line, "tojson: separators must be a pair of strings");
    return Value::from_string(
        to_json(v, ind, sort_keys, &(*separators.list)[0].text, &(*separators.list)[1].text, ascii));
  }
  if (name == "trim") {
    const Value* chars = a.get(0, "chars");
    a.done(1);
    const std::string* set = chars && chars->is_string() ? &chars->text : nullptr;
    return Value::from_string(py_strip(to_str(v), set, true, true));
  }
  if (name == "length" || name == "count") {
    a.done(0);
    switch (v.kind) {
      case K::Undefined: return Value::from_int(0);
      case K::String: return Value::from_int(int64_t(code_point_count(v.text)));
      case K::List: return Value::from_int(int64_t(v.list->size()));
      case K::Dict: return Value::from_int(int64_t(v.dict->size()));
      default: fail_at(line, fmt::format("object of type '{}' has no len()", type_name(v)));
    }
  }
  if (name == "upper") return a.done(0), Value::from_string(ascii_upper(to_str(v)));
  if (name == "lower") return a.done(0), Value::from_string(ascii_lower(to_str(v)));
  if (name == "title") return a.done(0), Value::from_string(title_case(to_str(v)));
  if (name == "capitalize") {
    a.done(0);
    std::string s = ascii_lower(to_str(v));
    if (!s.empty()) s[0] = char(std::toupper((unsigned char)s[0]));
    return Value::from_string(s);
  }
  if (name == "replace") {
    const std::string from = a.str(0, "old", ""), to = a.str(1, "new", "");
    const Value count = a.value(2, "count", Value::none());
    a.done(3);
    return Value::from_string(replace_all(to_str(v), from, to, is_int_like(count) ? int_of(count) : -1, in, line));
  }
  if (name == "default" || name == "d") {
    const Value dflt = a.value(0, "default_value", Value::from_string(""));
    const bool boolean = a.flag(1, "boolean", false);
    a.done(2);
    if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
    return v;
  }
  if (name == "items") {
    a.done(0);
    if (v.is_undefined()) return Value::from_list({});
    if (!v.is_mapping()) fail_at(line, "Can only get item pairs from a mapping.");
    ValueList out;
    for (const auto& [k, x] : *v.dict) out.push_back(Value::from_list({Value::from_string(k), x}, true));
    return Value::from_list(std::move(out));
  }
  if (name == "list") return a.done(0), Value::from_list(iterate(v, line));
  if (name == "dictsort") {
    const bool case_sensitive = a.flag(0, "case_sensitive", false);
    const std::string by = a.str(1, "by", "key");
    const bool reverse = a.flag(2, "reverse", false);
    a.done(3);
    if (!v.is_mapping()) fail_at(line, "dictsort: expected a mapping");
    const size_t pos = by == "key" ? 0 : by == "value" ? 1 : 2;
    if (pos == 2) fail_at(line, "dictsort: 'by' must be 'key' or 'value'");
    ValueList pairs;
    for (const auto& [k, x] : *v.dict) pairs.push_back(Value::from_list({Value::from_string(k), x}, true));
    return Value::from_list(sorted_copy(in, std::move(pairs), reverse, case_sensitive, pos ? "1" : "0", line));
  }
  if (name == "sort") {
    const bool reverse = a.flag(0, "reverse", false);
    const bool case_sensitive = a.flag(1, "case_sensitive", false);
    const std::string attr = a.str(2, "attribute", "");
    a.done(3);
    return Value::from_list(sorted_copy(in, iterate(v, line), reverse, case_sensitive, attr, line));
  }
  if (name == "reverse") {
    a.done(0);
    if (v.is_string()) {
      auto cps = split_code_points(v.text);
      std::string s;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) s += *it;
      return Value::from_string(s);
    }
    ValueList items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::from_list(std::move(items));
  }
  if (name == "first" || name == "last") {
    a.done(0);
    ValueList items = iterate(v, line);
    if (items.empty()) return undefined_because("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const std::string sep = a.str(0, "d", "");
    const std::string attr = a.str(1, "attribute", "");
    a.done(2);
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v, line)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attr.empty() ? item : attribute_path(in, item, attr, line));
      in.check_size(out.size(), line);
    }
    return Value::from_string(std::move(out));
  }
  if (name == "map") {
    ValueList out;
    const Value* attr = nullptr;
    for (auto& [k, x] : call.keyword)
      if (k == "attribute") attr = &x;
    if (attr) {
      const Value dflt = a.value(99, "default", Value::undefined());
      (void)a.get(99, "attribute");
      a.done(0);
      if (!attr->is_string()) fail_at(line, "map: attribute must be a string");
      for (const auto& item : iterate(v, line)) {
        Value x = attribute_path(in, item, attr->text, line);
        out.push_back(x.is_undefined() ? dflt : x);
      }
      return Value::from_list(std::move(out));
    }
    if (call.positional.empty() || !call.positional[0].is_string()) fail_at(line, "map: expected a filter name");
    const std::string filter = call.positional[0].text;
    for (const auto& item : iterate(v, line)) {
      CallArgs rest;
      rest.positional.assign(call.positional.begin() + 1, call.positional.end());
      rest.keyword = call.keyword;
      in.step(line);
      out.push_back(apply_filter(in, filter, item, rest, line));
    }
    return Value::from_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    size_t next = 0;
    std::string attr;
    if (by_attr) {
      if (call.positional.empty() || !call.positional[0].is_string()) fail_at(line, name + ": expected an attribute");
      attr = call.positional[0].text;
      next = 1;
    }
    std::string test;
    if (call.positional.size() > next) {
      if (!call.positional[next].is_string()) fail_at(line, name + ": expected a test name");
      test = call.positional[next].text;
      ++next;
    }
    ValueList out;
    for (const auto& item : iterate(v, line)) {
      in.step(line);
      const Value subject = by_attr ? attribute_path(in, item, attr, line) : item;
      bool ok;
      if (test.empty()) {
        ok = truthy(subject);
      } else {
        CallArgs rest;
        rest.positional.assign(call.positional.begin() + long(next), call.positional.end());
        rest.keyword = call.keyword;
        ok = apply_test(in, test, subject, rest, line);
      }
      if (ok == keep_if) out.push_back(item);
    }
    return Value::from_list(std::move(out));
  }
  if (name == "unique") {
    const bool case_sensitive = a.flag(0, "case_sensitive", false);
    const std::string attr = a.str(1, "attribute", "");
    a.done(2);
    ValueList out, seen;
    for (const auto& item : iterate(v, line)) {
      Value k = attr.empty() ? item : attribute_path(in, item, attr, line);
      if (!case_sensitive && k.is_string()) k.text = ascii_lower(k.text);
      bool dup = false;
      for (const auto& s : seen)
        if (equals(s, k)) dup = true;
      in.step(line);
      if (!dup) {
        seen.push_back(k);
        out.push_back(item);
      }
    }
    return Value::from_list(std::move(out));
  }
  if (name == "int") {
    const Value dflt = a.value(0, "default", Value::from_int(0));
    a.done(2);
    return to_number(v, true, dflt);
  }
  if (name == "float") {
    const Value dflt = a.value(0, "default", Value::from_float(0.0));
    a.done(1);
    return to_number(v, false, dflt);
  }
  if (name == "abs") {
    a.done(0);
    if (v.kind == K::Float) return Value::from_float(std::fabs(v.number));
    if (!is_int_like(v) || int_of(v) == INT64_MIN) fail_at(line, "abs: expected a number");
    return Value::from_int(int_of(v) < 0 ? -int_of(v) : int_of(v));
  }
  if (name == "round") {
    const Value precision = a.value(0, "precision", Value::from_int(0));
    const std::string method = a.str(1, "method", "common");
    a.done(2);
    if (!v.is_number() || !is_int_like(precision)) fail_at(line, "round: expected a number");
    const double scale = std::pow(10.0, double(std::clamp<int64_t>(int_of(precision), -30, 30)));
    const double x = v.kind == K::Float ? v.number : double(int_of(v));
    double r = method == "ceil" ? std::ceil(x * scale) : method == "floor" ? std::floor(x * scale)
                                                    : std::nearbyint(x * scale);  // Python rounds half to even
    return Value::from_float(r / scale);
  }
  if (name == "sum" || name == "min" || name == "max") {
    a.done(0);
    ValueList items = iterate(v, line);
    if (name == "sum") {
      Value acc = Value::from_int(0);
      for (const auto& x : items) {
        if (!x.is_number() || !acc.is_number()) fail_at(line, "sum: expected numbers");
        if (acc.kind == K::Float || x.kind == K::Float)
          acc = Value::from_float((acc.kind == K::Float ? acc.number : double(int_of(acc))) +
                                  (x.kind == K::Float ? x.number : double(int_of(x))));
        else if (__builtin_add_overflow(int_of(acc), int_of(x), &acc.integer))
          fail_at(line, "integer overflow");
      }
      return acc;
    }
    if (items.empty()) return undefined_because("No " + name + " item, sequence was empty.");
    Value best = items[0];
    for (const auto& x : items) {
      const int c = compare_values(x, best, line);
      if (name == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  if (name == "indent") {
    const Value width = a.value(0, "width", Value::from_int(4));
    const bool first = a.flag(1, "first", false);
    const bool blank = a.flag(2, "blank", false);
    a.done(3);
    std::string pad = width.is_string() ? width.text
                                        : std::string(size_t(std::clamp<int64_t>(int_of(width), 0, 256)), ' ');
    const std::string s = to_str(v);
    in.check_size(s.size() * (pad.size() + 1), line);
    return Value::from_string(do_indent(s, pad, first, blank));
  }
  if (name == "escape" || name == "e") return a.done(0), Value::from_string(html_escape(to_str(v)));
  if (name == "attr") {
    const std::string attr = a.str(0, "name", "");
    a.done(1);
    return get_attribute(in, v, attr, line);
  }
  fail_at(line, fmt::format("no filter named '{}'", name));
}

// Errors raised by the template itself keep their message verbatim.
const Value* find_global(Interpreter& in, const std::string& name) {
  auto& g = in.globals();
  if (g.empty()) {
    Interpreter* ip = &in;
    g["range"] = Value::callable([ip](CallArgs& c) -> Value {
      std::vector<int64_t> n;
      for (const auto& v : c.positional) {
        if (!is_int_like(v)) throw NativeError("range() arguments must be integers");
        n.push_back(int_of(v));
      }
      if (n.empty() || n.size() > 3 || !c.keyword.empty()) throw NativeError("range() takes 1 to 3 integer arguments");
      const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], st = n.size() > 2 ? n[2] : 1;
      if (st == 0) throw NativeError("range() arg 3 must not be zero");
      ValueList out;
      for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) {
        ip->step(0);
        out.push_back(Value::from_int(i));
        if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st)) break;
      }
      return Value::from_list(std::move(out));
    });
    auto build_dict = [](CallArgs& c) {
      ValueDict d;
      if (c.positional.size() > 1) throw NativeError("dict()/namespace() take at most one positional argument");
      if (!c.positional.empty()) {
        if (!c.positional[0].is_dict()) throw NativeError("dict()/namespace() positional argument must be a mapping");
        d = *c.positional[0].dict;
      }
      Value tmp = Value::from_dict(std::move(d));
      for (auto& [k, v] : c.keyword) tmp.set(k, v);
      return tmp;
    };
    g["namespace"] = Value::callable([build_dict](CallArgs& c) {
      Value d = build_dict(c);
      for (const auto& kv : *d.dict)
        if (!kv.first.empty() && kv.first[0] == '_')
          throw NativeError("Chat templates cannot store underscore-prefixed attributes on a namespace");
      d.is_namespace = true;
      return d;
    });
    g["dict"] = Value::callable(build_dict);
    g["raise_exception"] = Value::callable([](CallArgs& c) -> Value {
      throw TemplateRaised(c.positional.empty() ? std::string() : to_str(c.positional[0]));
    });
    g["strftime_now"] = Value::callable([](CallArgs& c) -> Value {
      if (c.positional.size() != 1 || !c.positional[0].is_string()) throw NativeError("strftime_now() takes one format string");
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[512];
      const size_t n = std::strftime(buf, sizeof buf, c.positional[0].text.c_str(), &tm);
      return Value::from_string(std::string(buf, n));
    });
  }
  auto it = g.find(name);
  return it == g.end() ? nullptr : &it->second;
}

}  // namespace nextn::jinja
