// Shared helpers of the builtins (jinja_builtins.cpp, jinja_filters.cpp):
// Python-style argument access and small string utilities.
#pragma once
#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja_eval.h"

namespace nextn::jinja::detail {

[[noreturn]] inline void fail_at(int line, const std::string& msg) {
  throw Error(fmt::format("line {}: {}", line, msg));
}

inline Value undefined_because(const std::string& why) {
  Value v;
  v.text = why;
  return v;
}

inline bool is_int_like(const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool; }
inline int64_t int_of(const Value& v) { return v.kind == Value::Kind::Bool ? int64_t(v.boolean) : v.integer; }

// Argument access by position or keyword; done() rejects leftovers.
struct Args {
  CallArgs& a;
  const std::string& fn;
  int line;
  std::vector<bool> used_kw;
  Args(CallArgs& args, const std::string& name, int ln) : a(args), fn(name), line(ln), used_kw(args.keyword.size()) {}

  const Value* get(size_t pos, const char* name) {
    if (pos < a.positional.size()) return &a.positional[pos];
    for (size_t i = 0; i < a.keyword.size(); ++i)
      if (a.keyword[i].first == name) {
        used_kw[i] = true;
        return &a.keyword[i].second;
      }
    return nullptr;
  }
  Value value(size_t pos, const char* name, Value dflt) {
    const Value* v = get(pos, name);
    return v ? *v : dflt;
  }
  bool flag(size_t pos, const char* name, bool dflt) {
    const Value* v = get(pos, name);
    return v ? truthy(*v) : dflt;
  }
  std::string str(size_t pos, const char* name, const std::string& dflt) {
    const Value* v = get(pos, name);
    if (!v || v->is_none()) return dflt;
    if (!v->is_string()) fail_at(line, fmt::format("{}: argument '{}' must be a string", fn, name));
    return v->text;
  }
  void done(size_t max_positional) {
    if (a.positional.size() > max_positional)
      fail_at(line, fmt::format("{}() takes at most {} argument(s)", fn, max_positional));
    for (size_t i = 0; i < a.keyword.size(); ++i)
      if (!used_kw[i])
        fail_at(line, fmt::format("{}() got an unexpected keyword argument '{}'", fn, a.keyword[i].first));
  }
};

inline std::string ascii_upper(std::string s) {
  for (auto& c : s) c = char(std::toupper((unsigned char)c));
  return s;
}
inline std::string ascii_lower(std::string s) {
  for (auto& c : s) c = char(std::tolower((unsigned char)c));
  return s;
}
std::string title_case(const std::string& s);
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        Interpreter& in, int line);
// `a.b.0` attribute paths, as map/selectattr/sort(attribute=) take them.
Value attribute_path(Interpreter& in, Value v, const std::string& path, int line);
std::string html_escape(const std::string& s);

}  // namespace nextn::jinja::detail
