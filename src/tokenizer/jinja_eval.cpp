#include "tokenizer/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"

namespace nextn::jinja {

namespace {

[[noreturn]] void fail_at(int line, const std::string& msg) { throw Error(fmt::format("line {}: {}", line, msg)); }

Value undefined_named(const std::string& why) {
  Value v;
  v.text = why;
  return v;
}

[[noreturn]] void fail_undefined(const Value& v, int line) {
  fail_at(line, v.text.empty() ? "value is undefined" : v.text);
}

bool is_int_like(const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool; }
int64_t int_of(const Value& v) { return v.kind == Value::Kind::Bool ? int64_t(v.boolean) : v.integer; }
double float_of(const Value& v) { return v.kind == Value::Kind::Float ? v.number : double(int_of(v)); }

// True if `v` reaches the dict `target` (a namespace stored into itself
// would form a reference cycle).
bool holds_dict(const Value& v, const ValueDict* target, int depth) {
  if (depth > 256) return true;
  if (v.kind == Value::Kind::Dict) {
    if (v.dict.get() == target) return true;
    for (const auto& kv : *v.dict)
      if (holds_dict(kv.second, target, depth + 1)) return true;
  } else if (v.kind == Value::Kind::List) {
    for (const auto& x : *v.list)
      if (holds_dict(x, target, depth + 1)) return true;
  }
  return false;
}

}  // namespace

// Bounds the C++ stack: every template construct recurses through exec/eval.
Interpreter::RecursionGuard::RecursionGuard(Interpreter& interp, int line) : in(interp) {
  constexpr int kMaxRecursion = 1000;
  if (++in.recursion_ > kMaxRecursion) {
    --in.recursion_;
    fail_at(line, fmt::format("template recursion deeper than {} levels", kMaxRecursion));
  }
}

void Interpreter::step(int line) {
  if (++steps_ > limits_.max_steps) fail_at(line, fmt::format("template exceeded {} steps", limits_.max_steps));
}

void Interpreter::check_size(size_t bytes, int line) {
  if (bytes > limits_.max_output_bytes)
    fail_at(line, fmt::format("template output exceeds {} bytes", limits_.max_output_bytes));
}

// Deeply nested values would make printing and destruction recurse deeply.
void Interpreter::check_nesting(const Value& v, int line) {
  constexpr size_t kMaxNesting = 200;
  if (nesting_depth(v, kMaxNesting + 1) > kMaxNesting)
    fail_at(line, fmt::format("value nested deeper than {} levels", kMaxNesting));
}

void Interpreter::append(std::string& out, const std::string& s, int line) {
  check_size(out.size() + s.size(), line);
  out += s;
}

std::string Interpreter::run(const Template& tmpl, const ValueDict& context) {
  Scope root;
  for (const auto& [k, v] : context) root.vars[k] = v;
  root_ = scope_ = &root;
  std::string out;
  const Flow f = exec_body(tmpl.body, out);
  if (f != Flow::Normal) fail_at(1, "'break' or 'continue' outside a loop");
  root_ = scope_ = nullptr;
  return out;
}

Value Interpreter::lookup(const std::string& name, int line) {
  (void)line;
  for (Scope* s = scope_; s; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* g = find_global(*this, name)) return *g;
  return undefined_named("'" + name + "' is undefined");
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  step(s.line);
  RecursionGuard guard(*this, s.line);
  switch (s.kind) {
    case Stmt::Kind::Text: append(out, s.text, s.line); break;
    case Stmt::Kind::Output: append(out, to_str(eval(*s.expr)), s.line); break;
    case Stmt::Kind::If:
      for (size_t i = 0; i < s.branches.size(); ++i) {
        if (i < s.conditions.size() && !truthy(eval(*s.conditions[i]))) continue;
        return exec_body(s.branches[i], out);
      }
      break;
    case Stmt::Kind::For: return exec_for(s, out);
    case Stmt::Kind::Set: exec_set(s); break;
    case Stmt::Kind::SetBlock: {
      std::string captured;
      const Flow f = exec_body(s.branches[0], captured);
      scope_->vars[s.targets[0]] = Value::from_string(std::move(captured));
      return f;
    }
    case Stmt::Kind::Macro: scope_->vars[s.targets[0]] = make_macro(s); break;
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
    case Stmt::Kind::Generation: return exec_body(s.branches[0], out);
  }
  return Flow::Normal;
}

static void bind_targets(std::unordered_map<std::string, Value>& vars, const std::vector<std::string>& targets,
                         const Value& v, int line) {
  if (targets.size() == 1) {
    vars[targets[0]] = v;
    return;
  }
  ValueList parts = iterate(v, line);
  if (parts.size() != targets.size())
    fail_at(line, fmt::format("cannot unpack {} values into {} names", parts.size(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) vars[targets[i]] = parts[i];
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, std::string& out) {
  ValueList items = iterate(eval(*s.expr), s.line);
  Scope* outer = scope_;
  if (s.loop_filter) {
    ValueList kept;
    for (const auto& item : items) {
      step(s.line);
      Scope probe;
      probe.parent = outer;
      bind_targets(probe.vars, s.targets, item, s.line);
      scope_ = &probe;
      const bool keep = truthy(eval(*s.loop_filter));
      scope_ = outer;
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    return exec_body(s.branches[1], out);
  }
  const size_t n = items.size();
  auto cycle_index = std::make_shared<size_t>(0);
  for (size_t i = 0; i < n; ++i) {
    step(s.line);
    Scope iter;
    iter.parent = outer;
    bind_targets(iter.vars, s.targets, items[i], s.line);
    ValueDict loop = {
        {"index", Value::from_int(int64_t(i) + 1)},
        {"index0", Value::from_int(int64_t(i))},
        {"revindex", Value::from_int(int64_t(n - i))},
        {"revindex0", Value::from_int(int64_t(n - i - 1))},
        {"first", Value::from_bool(i == 0)},
        {"last", Value::from_bool(i + 1 == n)},
        {"length", Value::from_int(int64_t(n))},
        {"depth", Value::from_int(1)},
        {"depth0", Value::from_int(0)},
    };
    if (i > 0) loop.emplace_back("previtem", items[i - 1]);
    if (i + 1 < n) loop.emplace_back("nextitem", items[i + 1]);
    const size_t index = i;
    loop.emplace_back("cycle", Value::callable([index, line = s.line](CallArgs& a) -> Value {
                        if (a.positional.empty()) fail_at(line, "no items for cycling given");
                        return a.positional[index % a.positional.size()];
                      }));
    iter.vars["loop"] = Value::from_dict(std::move(loop));
    scope_ = &iter;
    Flow f;
    try {
      f = exec_body(s.branches[0], out);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (s.attr_target) {
    Value ns = lookup(s.targets[0], s.line);
    if (!(ns.kind == Value::Kind::Dict && ns.is_namespace))
      fail_at(s.line, "cannot assign attribute on non-namespace object");
    if (!s.targets[1].empty() && s.targets[1][0] == '_')
      fail_at(s.line, "Chat templates cannot store underscore-prefixed attributes on a namespace");
    if (holds_dict(v, ns.dict.get(), 0))
      fail_at(s.line, "a namespace cannot contain itself");
    check_nesting(v, s.line);
    ns.set(s.targets[1], std::move(v));
    return;
  }
  bind_targets(scope_->vars, s.targets, v, s.line);
}

Value Interpreter::make_macro(const Stmt& s) {
  const Stmt* def = &s;
  return Value::callable([this, def](CallArgs& args) -> Value {
    if (++call_depth_ > limits_.max_depth) {
      --call_depth_;
      fail_at(def->line, fmt::format("macro '{}' nested deeper than {} calls", def->targets[0], limits_.max_depth));
    }
    Scope frame;
    frame.parent = root_;
    Scope* saved = scope_;
    std::string out;
    try {
      if (args.positional.size() > def->params.size())
        fail_at(def->line, fmt::format("macro '{}' takes not more than {} argument(s)", def->targets[0],
                                       def->params.size()));
      std::vector<bool> bound(def->params.size(), false);
      for (size_t i = 0; i < args.positional.size(); ++i) {
        frame.vars[def->params[i]] = args.positional[i];
        bound[i] = true;
      }
      for (auto& [k, v] : args.keyword) {
        size_t i = 0;
        while (i < def->params.size() && def->params[i] != k) ++i;
        if (i == def->params.size())
          fail_at(def->line, fmt::format("macro '{}' takes no keyword argument '{}'", def->targets[0], k));
        frame.vars[k] = v;
        bound[i] = true;
      }
      scope_ = &frame;
      for (size_t i = 0; i < def->params.size(); ++i) {
        if (bound[i]) continue;
        frame.vars[def->params[i]] =
            def->defaults[i] ? eval(*def->defaults[i])
                             : undefined_named("parameter '" + def->params[i] + "' was not provided");
      }
      exec_body(def->branches[0], out);
    } catch (...) {
      scope_ = saved;
      --call_depth_;
      throw;
    }
    scope_ = saved;
    --call_depth_;
    return Value::from_string(std::move(out));
  });
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first_arg) {
  CallArgs args;
  const size_t n_pos = e.positional;
  for (size_t i = 0; i < n_pos; ++i) args.positional.push_back(eval(*e.children[first_arg + i]));
  for (size_t k = 0; k < e.kwarg_names.size(); ++k)
    args.keyword.emplace_back(e.kwarg_names[k], eval(*e.children[first_arg + n_pos + k]));
  return args;
}

Value Interpreter::call(const Value& fn, CallArgs& args, int line) {
  step(line);
  if (fn.kind == Value::Kind::Undefined) fail_undefined(fn, line);
  if (fn.kind != Value::Kind::Callable) fail_at(line, fmt::format("'{}' object is not callable", type_name(fn)));
  try {
    Value r = (*fn.fn)(args);
    if (r.is_list() || r.is_dict()) check_nesting(r, line);
    return r;
  } catch (const NativeError& e) {
    throw Error(fmt::format("line {}: {}", line, e.what()));
  }
}

Value Interpreter::eval(const Expr& e) {
  RecursionGuard guard(*this, e.line);
  Value result;
  switch (e.kind) {
    case Expr::Kind::Literal: return e.literal;
    case Expr::Kind::Name: return lookup(e.name, e.line);
    case Expr::Kind::Attr: return get_attribute(*this, eval(*e.children[0]), e.name, e.line);
    case Expr::Kind::Index: {
      Value obj = eval(*e.children[0]);
      return get_item(*this, obj, eval(*e.children[1]), e.line);
    }
    case Expr::Kind::Slice: return eval_slice(eval(*e.children[0]), e);
    case Expr::Kind::Call: {
      Value fn = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      result = call(fn, args, e.line);
      break;
    }
    case Expr::Kind::Filter: {
      step(e.line);
      Value subject = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      result = apply_filter(*this, e.name, subject, args, e.line);
      break;
    }
    case Expr::Kind::Test: {
      Value subject = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      const bool r = apply_test(*this, e.name, subject, args, e.line);
      return Value::from_bool(e.negated ? !r : r);
    }
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
      Value v = eval(*e.children[0]);
      if (v.is_undefined()) fail_undefined(v, e.line);
      if (!v.is_number()) fail_at(e.line, fmt::format("bad operand type for unary -: '{}'", type_name(v)));
      if (e.kind == Expr::Kind::Pos) return is_int_like(v) ? Value::from_int(int_of(v)) : v;
      if (v.kind == Value::Kind::Float) return Value::from_float(-v.number);
      if (int_of(v) == INT64_MIN) fail_at(e.line, "integer overflow");
      return Value::from_int(-int_of(v));
    }
    case Expr::Kind::Not: return Value::from_bool(!truthy(eval(*e.children[0])));
    case Expr::Kind::And: {
      Value a = eval(*e.children[0]);
      return truthy(a) ? eval(*e.children[1]) : a;
    }
    case Expr::Kind::Or: {
      Value a = eval(*e.children[0]);
      return truthy(a) ? a : eval(*e.children[1]);
    }
    case Expr::Kind::Binary: result = eval_binary(e.name, eval(*e.children[0]), eval(*e.children[1]), e.line); break;
    case Expr::Kind::Compare: {
      Value left = eval(*e.children[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.children[i + 1]);
        if (!eval_compare(e.ops[i], left, right, e.line)) return Value::from_bool(false);
        left = std::move(right);
      }
      return Value::from_bool(true);
    }
    case Expr::Kind::Cond:
      if (truthy(eval(*e.children[0]))) return eval(*e.children[1]);
      return e.children[2] ? eval(*e.children[2]) : Value::undefined();
    case Expr::Kind::ListLit:
    case Expr::Kind::TupleLit: {
      ValueList items;
      for (const auto& c : e.children) items.push_back(eval(*c));
      Value list = Value::from_list(std::move(items), e.kind == Expr::Kind::TupleLit);
      check_nesting(list, e.line);
      return list;
    }
    case Expr::Kind::DictLit: {
      Value d = Value::from_dict({});
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value k = eval(*e.children[i]);
        if (!k.is_string()) fail_at(e.line, "dict literal keys must be strings");
        d.set(k.text, eval(*e.children[i + 1]));
      }
      check_nesting(d, e.line);
      return d;
    }
  }
  if (result.is_string()) check_size(result.text.size(), e.line);
  return result;
}

Value Interpreter::eval_slice(const Value& obj, const Expr& e) {
  auto bound = [&](const ExprPtr& p) -> std::optional<int64_t> {
    if (!p) return std::nullopt;
    Value v = eval(*p);
    if (v.is_none()) return std::nullopt;
    if (!is_int_like(v)) fail_at(e.line, "slice indices must be integers or None");
    return int_of(v);
  };
  const auto start = bound(e.children[1]), stop = bound(e.children[2]), stride = bound(e.children[3]);
  const int64_t st = stride.value_or(1);
  if (st == 0) fail_at(e.line, "slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string> chars;
  bool is_str = false;
  if (obj.is_string()) {
    chars = split_code_points(obj.text);
    is_str = true;
  } else if (obj.is_list()) {
    items = *obj.list;
  } else if (obj.is_undefined()) {
    fail_undefined(obj, e.line);
  } else {
    fail_at(e.line, fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  const int64_t n = int64_t(is_str ? chars.size() : items.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), en = clamp(stop, st > 0 ? n : -1);
  std::string s;
  ValueList out;
  for (int64_t i = b; st > 0 ? i < en : i > en; i += st) {
    if (is_str) s += chars[size_t(i)];
    else out.push_back(items[size_t(i)]);
  }
  if (is_str) return Value::from_string(std::move(s));
  return Value::from_list(std::move(out), obj.is_tuple);
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") {
    check_size(to_str(a).size() + to_str(b).size(), line);
    return Value::from_string(to_str(a) + to_str(b));
  }
  if (a.is_undefined()) fail_undefined(a, line);
  if (b.is_undefined()) fail_undefined(b, line);
  auto unsupported = [&]() -> Value {
    fail_at(line, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.text.size() + b.text.size(), line);
      return Value::from_string(a.text + b.text);
    }
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      ValueList items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      check_size(items.size() * sizeof(Value), line);
      return Value::from_list(std::move(items), a.is_tuple);
    }
  }
  if (op == "*" && (a.is_string() || a.is_list()) && is_int_like(b)) {
    const int64_t times = std::max<int64_t>(0, int_of(b));
    const size_t unit = a.is_string() ? a.text.size() : a.list->size() * sizeof(Value);
    if (unit && uint64_t(times) > limits_.max_output_bytes / unit + 1) check_size(SIZE_MAX, line);
    check_size(unit * size_t(times), line);
    if (a.is_string()) {
      std::string s;
      for (int64_t i = 0; i < times; ++i) s += a.text;
      return Value::from_string(std::move(s));
    }
    ValueList items;
    for (int64_t i = 0; i < times; ++i) items.insert(items.end(), a.list->begin(), a.list->end());
    return Value::from_list(std::move(items), a.is_tuple);
  }
  if (op == "*" && is_int_like(a) && (b.is_string() || b.is_list())) return eval_binary(op, b, a, line);
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool ints = is_int_like(a) && is_int_like(b);
  const int64_t x = int_of(a), y = int_of(b);
  const double fx = float_of(a), fy = float_of(b);
  int64_t r = 0;
  if (op == "+") {
    if (!ints) return Value::from_float(fx + fy);
    if (__builtin_add_overflow(x, y, &r)) fail_at(line, "integer overflow");
    return Value::from_int(r);
  }
  if (op == "-") {
    if (!ints) return Value::from_float(fx - fy);
    if (__builtin_sub_overflow(x, y, &r)) fail_at(line, "integer overflow");
    return Value::from_int(r);
  }
  if (op == "*") {
    if (!ints) return Value::from_float(fx * fy);
    if (__builtin_mul_overflow(x, y, &r)) fail_at(line, "integer overflow");
    return Value::from_int(r);
  }
  if (op == "/") {
    if (fy == 0) fail_at(line, "division by zero");
    return Value::from_float(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) fail_at(line, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) fail_at(line, "integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::from_int(op == "//" ? q : m);
    }
    if (fy == 0) fail_at(line, "float division by zero");
    const double q = std::floor(fx / fy);
    if (op == "//") return Value::from_float(q);
    double m = std::fmod(fx, fy);
    if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
    return Value::from_float(m);
  }
  if (op == "**") {
    if (ints && y >= 0) {
      int64_t acc = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(acc, x, &acc)) fail_at(line, "integer overflow");
        if (acc == 0 || acc == 1) break;
        step(line);
      }
      return Value::from_int(acc);
    }
    return Value::from_float(std::pow(fx, fy));
  }
  return unsupported();
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        fail_at(line, fmt::format("'in <string>' requires string as left operand, not {}", type_name(a)));
      found = b.text.find(a.text) != std::string::npos;
    } else if (b.is_dict()) {
      found = a.is_string() && b.find(a.text) != nullptr;
    } else if (b.is_list()) {
      for (const auto& item : *b.list)
        if (equals(a, item)) {
          found = true;
          break;
        }
    } else if (!b.is_undefined()) {
      fail_at(line, fmt::format("argument of type '{}' is not iterable", type_name(b)));
    }
    return op == "in" ? found : !found;
  }
  const int c = compare_values(a, b, line);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

int compare_values(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) {
    if (is_int_like(a) && is_int_like(b)) return int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b) ? 1 : 0;
    const double x = float_of(a), y = float_of(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.text.compare(b.text) < 0 ? -1 : a.text == b.text ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (equals((*a.list)[i], (*b.list)[i])) continue;
      return compare_values((*a.list)[i], (*b.list)[i], line);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  if (a.is_undefined()) fail_undefined(a, line);
  if (b.is_undefined()) fail_undefined(b, line);
  fail_at(line, fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

ValueList iterate(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return *v.list;
    case Value::Kind::String: {
      ValueList out;
      for (auto& cp : split_code_points(v.text)) out.push_back(Value::from_string(cp));
      return out;
    }
    case Value::Kind::Dict: {
      if (v.is_namespace) fail_at(line, "'Namespace' object is not iterable");
      ValueList out;
      for (const auto& kv : *v.dict) out.push_back(Value::from_string(kv.first));
      return out;
    }
    default: fail_at(line, fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

std::string render_template(const Template& tmpl, const ValueDict& context, const Limits& limits) {
  Interpreter in(limits);
  return in.run(tmpl, context);
}

}  // namespace nextn::jinja
