// Tree-walking evaluator of parsed chat templates, with hard limits so a
// hostile template can neither crash nor hang the process.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace nextn::jinja {

struct Limits {
  size_t max_output_bytes = size_t(64) << 20;  // rendered text, and any one string value
  int max_depth = 256;                         // parser nesting and macro call depth
  uint64_t max_steps = 50'000'000;             // loop iterations + calls + statements
};

// Renders `tmpl` with `context` as its variables. Throws nextn::Error
// ("line N: ...") on runtime errors, raise_exception() and exceeded limits.
std::string render_template(const Template& tmpl, const ValueDict& context, const Limits& limits);

class Interpreter;

// Thrown by native callables, which know no line: Interpreter::call adds it.
class NativeError : public Error {
 public:
  explicit NativeError(const std::string& what) : Error(what) {}
};
// raise_exception(message) from the template.
class TemplateRaised : public NativeError {
 public:
  explicit TemplateRaised(const std::string& message)
      : NativeError("raise_exception: " + message), message_(message) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Builtins (jinja_builtins.cpp). `line` is for error messages.
Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args, int line);
bool apply_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args, int line);
// obj.name: dict key, bound str/dict method, or Undefined.
Value get_attribute(Interpreter& in, const Value& obj, const std::string& name, int line);
// obj[key] (Jinja tries the item first, then the attribute).
Value get_item(Interpreter& in, const Value& obj, const Value& key, int line);
// Globals: range, namespace, dict, raise_exception, strftime_now.
const Value* find_global(Interpreter& in, const std::string& name);

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}
  const Limits& limits() const { return limits_; }
  void step(int line);                       // counts work; throws past max_steps
  void check_size(size_t bytes, int line);   // throws past max_output_bytes
  std::unordered_map<std::string, Value>& globals() { return globals_; }

  std::string run(const Template& tmpl, const ValueDict& context);
  Value eval(const Expr& e);
  Value call(const Value& fn, CallArgs& args, int line);

 private:
  struct Scope {
    std::unordered_map<std::string, Value> vars;
    Scope* parent = nullptr;
  };
  enum class Flow { Normal, Break, Continue };

  Limits limits_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int recursion_ = 0;  // nested exec/eval frames, all templates and macros together
  Scope* scope_ = nullptr;
  Scope* root_ = nullptr;
  std::unordered_map<std::string, Value> globals_;
  std::vector<std::shared_ptr<Template>> keep_alive_;

  Value lookup(const std::string& name, int line);
  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s);
  Value make_macro(const Stmt& s);
  Value eval_binary(const std::string& op, const Value& a, const Value& b, int line);
  bool eval_compare(const std::string& op, const Value& a, const Value& b, int line);
  Value eval_slice(const Value& obj, const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first_arg);
  void check_nesting(const Value& v, int line);
  struct RecursionGuard {
    Interpreter& in;
    RecursionGuard(Interpreter& interp, int line);
    ~RecursionGuard() { --in.recursion_; }
  };
  void append(std::string& out, const std::string& s, int line);
};

// Python-style ordering for <, >, sort: numbers, strings, lists.
int compare_values(const Value& a, const Value& b, int line);
// Items of an iterable as Python iterates it (dict -> keys, str -> chars).
ValueList iterate(const Value& v, int line);

}  // namespace nextn::jinja
