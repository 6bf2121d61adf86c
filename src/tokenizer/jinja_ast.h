// Tokens and syntax tree of the chat-template Jinja interpreter.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace nextn::jinja {

struct Token {
  enum class Kind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Kind kind;
  std::string text;  // Text content, name, operator, or unescaped string literal
  int line = 1;
};

// Splits a template into tokens, applying whitespace control ({%- -%}) and
// transformers' trim_blocks=True, lstrip_blocks=True. Comments are dropped.
std::vector<Token> lex_template(const std::string& source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal, Name, Attr, Index, Slice, Call, Filter, Test, Neg, Pos, Not, And, Or,
    Binary,   // op: + - * / // % ** ~
    Compare,  // ops[i] between operands: == != < <= > >= in notin
    Cond, ListLit, TupleLit, DictLit
  };
  Kind kind;
  int line = 1;
  Value literal;                  // Literal
  std::string name;               // Name, Attr, Filter, Test, Binary op
  std::vector<ExprPtr> children;  // operands / args / items (dict: k0, v0, k1, v1, ...)
  std::vector<std::string> kwarg_names;  // Call/Filter/Test: children after the positional ones
  std::vector<std::string> ops;          // Compare
  bool negated = false;                  // Test: `is not`
  size_t positional = 0;                 // Call/Filter/Test: number of positional args (after the subject)
  int depth = 1;                         // height of this subtree (bounded by the parser)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Generation };
  Kind kind;
  int line = 1;
  std::string text;                       // Text
  ExprPtr expr;                           // Output, For iterable, Set value
  std::vector<ExprPtr> conditions;        // If: one per branch (else branch has none)
  std::vector<Body> branches;             // If branches; For: [body, else]; Macro/SetBlock/Generation: [body]
  std::vector<std::string> targets;       // For/Set names; Set ns attr: {ns, attr}; Macro: name
  bool attr_target = false;               // Set: `set ns.attr = ...`
  ExprPtr loop_filter;                    // For: `for x in y if cond`
  std::vector<std::string> params;        // Macro parameter names
  std::vector<ExprPtr> defaults;          // Macro defaults, aligned to params (null = none)
};

struct Template {
  Body body;
};

// Parses template source; throws nextn::Error("line N: ...") on syntax errors.
std::shared_ptr<Template> parse_template(const std::string& source, int max_depth);

}  // namespace nextn::jinja
