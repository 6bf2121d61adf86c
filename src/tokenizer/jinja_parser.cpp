// Recursive-descent parser for the Jinja subset chat templates use. The
// expression grammar follows Jinja's precedence: conditional < or < and <
// not < comparison < + - < ~ < * / // % < ** < unary < postfix/filter/test.
#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace nextn::jinja {

namespace {

using TK = Token::Kind;

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_depth) : toks_(std::move(toks)), max_depth_(max_depth) {}

  std::shared_ptr<Template> run() {
    auto t = std::make_shared<Template>();
    std::string stop;
    t->body = parse_body({}, stop);
    return t;
  }

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_)
        throw Error(fmt::format("line {}: template nested too deeply (limit {})", p.peek().line, p.max_depth_));
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void error(const std::string& msg) const { throw Error(fmt::format("line {}: {}", peek().line, msg)); }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TK::Op && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == TK::Name && peek(ahead).text == n;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) error(fmt::format("expected '{}', got {}", op, describe(peek())));
    next();
  }
  std::string expect_name() {
    if (peek().kind != TK::Name) error(fmt::format("expected a name, got {}", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TK::BlockEnd) error(fmt::format("expected '%}}', got {}", describe(peek())));
    next();
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TK::End: return "end of template";
      case TK::BlockEnd: return "'%}'";
      case TK::VarEnd: return "'}}'";
      case TK::Text: return "text";
      default: return "'" + t.text + "'";
    }
  }

  // Parses statements until a block tag whose keyword is in `stops`; leaves
  // that keyword in `stop` (consumed) with the tag's remainder unread.
  Body parse_body(const std::vector<std::string>& stops, std::string& stop) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TK::End) {
        if (!stops.empty())
          error(fmt::format("unexpected end of template, expected '{}'", stops.back()));
        return body;
      }
      if (t.kind == TK::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->line = t.line;
        s->text = t.text;
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind == TK::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = t.line;
        s->expr = parse_expression();
        if (peek().kind != TK::VarEnd) error(fmt::format("expected '}}}}', got {}", describe(peek())));
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != TK::BlockBegin) error(fmt::format("unexpected {}", describe(t)));
      next();
      const std::string kw = expect_name();
      for (const auto& s : stops)
        if (kw == s) {
          stop = kw;
          return body;
        }
      body.push_back(parse_statement(kw, t.line));
    }
  }

  StmtPtr parse_statement(const std::string& kw, int line) {
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string stop;
    if (kw == "if") {
      s->kind = Stmt::Kind::If;
      s->conditions.push_back(parse_expression());
      expect_block_end();
      while (true) {
        s->branches.push_back(parse_body({"elif", "else", "endif"}, stop));
        if (stop == "elif") {
          s->conditions.push_back(parse_expression());
          expect_block_end();
        } else if (stop == "else") {
          expect_block_end();
          s->branches.push_back(parse_body({"endif"}, stop));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = Stmt::Kind::For;
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) error("expected 'in' in for loop");
      next();
      s->expr = parse_or_chain_no_cond();
      if (is_name("if")) {
        next();
        s->loop_filter = parse_or_chain_no_cond();
      }
      if (is_name("recursive")) error("recursive for loops are not supported");
      expect_block_end();
      s->branches.push_back(parse_body({"else", "endfor"}, stop));
      if (stop == "else") {
        expect_block_end();
        s->branches.push_back(parse_body({"endfor"}, stop));
      } else {
        s->branches.emplace_back();
      }
      expect_block_end();
    } else if (kw == "set") {
      const std::string first = expect_name();
      if (is_op(".")) {
        next();
        s->kind = Stmt::Kind::Set;
        s->attr_target = true;
        s->targets = {first, expect_name()};
        expect_op("=");
        s->expr = parse_tuple_or_expression();
        expect_block_end();
      } else {
        s->targets.push_back(first);
        while (is_op(",")) {
          next();
          s->targets.push_back(expect_name());
        }
        if (is_op("=")) {
          next();
          s->kind = Stmt::Kind::Set;
          s->expr = parse_tuple_or_expression();
          expect_block_end();
        } else {
          if (s->targets.size() != 1) error("block set takes one name");
          s->kind = Stmt::Kind::SetBlock;
          expect_block_end();
          s->branches.push_back(parse_body({"endset"}, stop));
          expect_block_end();
        }
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        s->params.push_back(expect_name());
        if (is_op("=")) {
          next();
          s->defaults.push_back(parse_expression());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!is_op(",")) break;
        next();
      }
      expect_op(")");
      expect_block_end();
      s->branches.push_back(parse_body({"endmacro"}, stop));
      if (peek().kind == TK::Name) next();  // `{% endmacro name %}`
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end();
    } else if (kw == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      s->kind = Stmt::Kind::Generation;
      expect_block_end();
      s->branches.push_back(parse_body({"endgeneration"}, stop));
      expect_block_end();
    } else {
      throw Error(fmt::format("line {}: unknown or unsupported tag '{}'", line, kw));
    }
    return s;
  }

  // Records the subtree height; long operator or attribute chains would
  // otherwise make evaluation recurse without bound.
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    for (const auto& c : e->children)
      if (c) d = std::max(d, c->depth);
    e->depth = d + 1;
    if (e->depth > max_depth_)
      throw Error(fmt::format("line {}: expression nested too deeply (limit {})", e->line, max_depth_));
    return e;
  }

  ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // `a, b` without brackets is a tuple (e.g. `set a = 1, 2`).
  ExprPtr parse_tuple_or_expression() {
    const int line = peek().line;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::TupleLit, line);
    t->children.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().kind == TK::BlockEnd || peek().kind == TK::VarEnd) break;
      t->children.push_back(parse_expression());
    }
    return seal(std::move(t));
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    const int line = peek().line;
    ExprPtr e = parse_or();
    if (is_name("if")) {
      next();
      auto c = make(Expr::Kind::Cond, line);
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expression();
      }
      c->children.push_back(std::move(cond));
      c->children.push_back(std::move(e));
      c->children.push_back(std::move(other));
      return seal(std::move(c));
    }
    return e;
  }

  // For-loop iterables and filters stop before `if`.
  ExprPtr parse_or_chain_no_cond() { return parse_or(); }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      auto e = make(Expr::Kind::Or, line);
      e->children.push_back(std::move(left));
      e->children.push_back(parse_and());
      left = seal(std::move(e));
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      auto e = make(Expr::Kind::And, line);
      e->children.push_back(std::move(left));
      e->children.push_back(parse_not());
      left = seal(std::move(e));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      auto e = make(Expr::Kind::Not, line);
      e->children.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (peek().kind == TK::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
           peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare, line);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(first);
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(Expr::Kind::Binary, line);
    e->name = op;
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return seal(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make(t.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, t.line);
      node->children.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_and_test(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TK::Name: {
        next();
        auto e = make(Expr::Kind::Literal, t.line);
        if (t.text == "true" || t.text == "True") e->literal = Value::from_bool(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::from_bool(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
        }
        return e;
      }
      case TK::String: {
        next();
        auto e = make(Expr::Kind::Literal, t.line);
        std::string s = t.text;
        while (peek().kind == TK::String) s += next().text;  // adjacent literals concatenate
        e->literal = Value::from_string(std::move(s));
        return e;
      }
      case TK::Int: {
        next();
        auto e = make(Expr::Kind::Literal, t.line);
        int64_t v = 0;
        auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc()) e->literal = Value::from_float(std::strtod(t.text.c_str(), nullptr));
        else e->literal = Value::from_int(v);
        return e;
      }
      case TK::Float: {
        next();
        auto e = make(Expr::Kind::Literal, t.line);
        e->literal = Value::from_float(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case TK::Op:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return make(Expr::Kind::TupleLit, t.line);
          }
          ExprPtr first = parse_expression();
          if (is_op(")")) {
            next();
            return first;
          }
          auto tup = make(Expr::Kind::TupleLit, t.line);
          tup->children.push_back(std::move(first));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tup->children.push_back(parse_expression());
          }
          expect_op(")");
          return seal(std::move(tup));
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::ListLit, t.line);
          while (!is_op("]")) {
            list->children.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return seal(std::move(list));
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::DictLit, t.line);
          while (!is_op("}")) {
            dict->children.push_back(parse_expression());
            expect_op(":");
            dict->children.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return seal(std::move(dict));
        }
        break;
      default: break;
    }
    error(fmt::format("unexpected {}", describe(t)));
  }

  // Call arguments after '(' (consumed); positional first, then name=value.
  void parse_call_args(Expr& e) {
    bool seen_keyword = false;
    while (!is_op(")")) {
      if (peek().kind == TK::Name && is_op("=", 1)) {
        e.kwarg_names.push_back(next().text);
        next();
        e.children.push_back(parse_expression());
        seen_keyword = true;
      } else {
        if (seen_keyword) error("positional argument after keyword argument");
        e.children.push_back(parse_expression());
        ++e.positional;
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        auto e = make(Expr::Kind::Attr, line);
        if (peek().kind == TK::Int) e->name = next().text;  // `x.0`
        else e->name = expect_name();
        e->children.push_back(std::move(node));
        node = seal(std::move(e));
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            next();
            if (++colons > 2) error("too many ':' in slice");
            continue;
          }
          if (parts[colons]) error("expected ':' or ']' in subscript");
          parts[colons] = parse_expression();
        }
        expect_op("]");
        if (colons == 0) {
          if (!parts[0]) error("empty subscript");
          auto e = make(Expr::Kind::Index, line);
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(parts[0]));
          node = seal(std::move(e));
        } else {
          auto e = make(Expr::Kind::Slice, line);
          e->children.push_back(std::move(node));
          for (auto& p : parts) e->children.push_back(std::move(p));
          node = seal(std::move(e));
        }
      } else if (is_op("(")) {
        const int line = next().line;
        auto e = make(Expr::Kind::Call, line);
        e->children.push_back(std::move(node));
        parse_call_args(*e);
        node = seal(std::move(e));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_and_test(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        auto e = make(Expr::Kind::Filter, line);
        e->name = expect_name();
        e->children.push_back(std::move(node));
        if (is_op("(")) {
          next();
          parse_call_args(*e);
        }
        node = parse_postfix(seal(std::move(e)));
      } else if (is_name("is")) {
        const int line = next().line;
        auto e = make(Expr::Kind::Test, line);
        if (is_name("not")) {
          next();
          e->negated = true;
        }
        e->name = expect_name();
        e->children.push_back(std::move(node));
        if (is_op("(")) {
          next();
          parse_call_args(*e);
        } else if (peek().kind == TK::String || peek().kind == TK::Int || peek().kind == TK::Float ||
                   (peek().kind == TK::Name && !is_name("and") && !is_name("or") && !is_name("if") &&
                    !is_name("else") && !is_name("is") && !is_name("in") && !is_name("not"))) {
          // `x is divisibleby 3`, `x is sameas none`
          e->children.push_back(parse_primary());
          e->children.back() = parse_postfix(std::move(e->children.back()));
          ++e->positional;
        }
        node = seal(std::move(e));
      } else {
        return node;
      }
    }
  }
};

}  // namespace

std::shared_ptr<Template> parse_template(const std::string& source, int max_depth) {
  return Parser(lex_template(source), max_depth).run();
}

}  // namespace nextn::jinja
