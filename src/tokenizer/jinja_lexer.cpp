// Template lexer: text / {{ }} / {% %} / {# #} with Jinja's whitespace
// rules as transformers configures them (trim_blocks=True: one newline after
// a block or comment tag is dropped; lstrip_blocks=True: spaces and tabs from
// the start of a line up to a block or comment tag are dropped; `-` strips
// all whitespace on that side, `+` turns the automatic stripping off).
#include <cctype>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/utf8.h"

namespace nextn::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip_ws(const std::string& s) {
  size_t e = s.size();
  while (e > 0 && is_ws(s[e - 1])) --e;
  return s.substr(0, e);
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Token> run() {
    size_t text_start = 0;
    bool strip_next_text = false;  // previous tag ended with `-`
    bool trim_newline = false;     // previous tag was a block/comment (trim_blocks)
    while (true) {
      const size_t open = find_tag(text_start);
      std::string text = src_.substr(text_start, (open == std::string::npos ? src_.size() : open) - text_start);
      const int text_line = line_at(text_start);
      bool trimmed_newline = false;
      if (strip_next_text) {
        size_t b = 0;
        while (b < text.size() && is_ws(text[b])) ++b;
        text.erase(0, b);
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
        trimmed_newline = true;
      }
      if (open == std::string::npos) {
        emit_text(text, text_line);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%', '#'
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: whitespace between the last newline (or a line
        // start) and the tag goes.
        const size_t nl = text.rfind('\n');
        const size_t lpos = nl == std::string::npos ? 0 : nl + 1;
        const bool line_starting =
            nl != std::string::npos || trimmed_newline || text_start == 0 || src_[text_start - 1] == '\n';
        if (line_starting && lpos < text.size()) {
          bool all_ws = true;
          for (size_t i = lpos; i < text.size(); ++i)
            if (!is_ws(text[i])) all_ws = false;
          if (all_ws) text.erase(lpos);
        }
      }
      emit_text(text, text_line);
      size_t pos = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      char end_sign = '\0';
      if (kind == '#') {
        const size_t close = src_.find("#}", pos);
        if (close == std::string::npos) throw Error(fmt::format("line {}: unterminated comment", line_at(open)));
        if (close > pos && (src_[close - 1] == '-' || src_[close - 1] == '+')) end_sign = src_[close - 1];
        text_start = close + 2;
      } else {
        tokens_.push_back({kind == '{' ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", line_at(open)});
        pos = lex_code(pos, kind == '{' ? '}' : '%', end_sign);
        tokens_.push_back({kind == '{' ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", line_at(pos)});
        text_start = pos;
      }
      strip_next_text = end_sign == '-';
      trim_newline = kind != '{' && end_sign != '+';
    }
    tokens_.push_back({Token::Kind::End, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  const std::string& src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;

  int line_at(size_t pos) {
    if (pos < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  void emit_text(const std::string& text, int line) {
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, text, line});
  }

  // Lexes expression tokens up to the closing `}}` / `%}`; returns the
  // position after it and reports a `-`/`+` before the closer.
  size_t lex_code(size_t pos, char closer, char& end_sign) {
    const int start_line = line_at(pos);
    while (true) {
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
      if (pos >= src_.size())
        throw Error(fmt::format("line {}: unexpected end of template, expected '{}}}'", start_line,
                                closer == '}' ? "}" : "%"));
      const char c = src_[pos];
      auto closes_at = [&](size_t p) { return p + 1 < src_.size() && src_[p] == closer && src_[p + 1] == '}'; };
      if (closes_at(pos)) return pos + 2;
      if ((c == '-' || c == '+') && closes_at(pos + 1)) {
        end_sign = c;
        return pos + 3;
      }
      const int line = line_at(pos);
      if (std::isalpha((unsigned char)c) || c == '_') {
        size_t e = pos;
        while (e < src_.size() && (std::isalnum((unsigned char)src_[e]) || src_[e] == '_')) ++e;
        tokens_.push_back({Token::Kind::Name, src_.substr(pos, e - pos), line});
        pos = e;
      } else if (std::isdigit((unsigned char)c)) {
        size_t e = pos;
        bool is_float = false;
        while (e < src_.size() && (std::isdigit((unsigned char)src_[e]) || src_[e] == '_')) ++e;
        if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit((unsigned char)src_[e + 1])) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit((unsigned char)src_[e])) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t f = e + 1;
          if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
          if (f < src_.size() && std::isdigit((unsigned char)src_[f])) {
            is_float = true;
            e = f;
            while (e < src_.size() && std::isdigit((unsigned char)src_[e])) ++e;
          }
        }
        std::string num;
        for (size_t i = pos; i < e; ++i)
          if (src_[i] != '_') num += src_[i];
        tokens_.push_back({is_float ? Token::Kind::Float : Token::Kind::Int, num, line});
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos, line);
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/",
                                           "%",  "~",  "|",  ".",  ",",  ":",  "(", ")", "[", "]", "{", "}", "="};
        bool matched = false;
        for (const char* op : kOps) {
          const size_t n = std::char_traits<char>::length(op);
          if (src_.compare(pos, n, op) == 0) {
            tokens_.push_back({Token::Kind::Op, op, line});
            pos += n;
            matched = true;
            break;
          }
        }
        if (!matched) throw Error(fmt::format("line {}: unexpected character '{}'", line, c));
      }
    }
  }

  // Python string literal escapes, as Jinja unescapes them.
  size_t lex_string(size_t pos, int line) {
    const char quote = src_[pos++];
    std::string out;
    while (true) {
      if (pos >= src_.size()) throw Error(fmt::format("line {}: unterminated string literal", line));
      const char c = src_[pos++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= src_.size()) throw Error(fmt::format("line {}: unterminated string literal", line));
      const char e = src_[pos++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (pos >= src_.size() || !std::isxdigit((unsigned char)src_[pos]))
            throw Error(fmt::format("line {}: bad \\x/\\u escape in string literal", line));
          const char h = src_[pos++];
          v = v * 16 + uint32_t(std::isdigit((unsigned char)h) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x': tok::append_utf8(out, char32_t(hex(2))); break;
        case 'u': tok::append_utf8(out, char32_t(hex(4))); break;
        case 'U': {
          const uint32_t cp = hex(8);
          if (cp > 0x10FFFF) throw Error(fmt::format("line {}: bad \\U escape in string literal", line));
          tok::append_utf8(out, char32_t(cp));
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Kind::String, out, line});
    return pos;
  }
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) {
  // Jinja first turns \r\n and \r into \n and (keep_trailing_newline=False)
  // drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized).run();
}

}  // namespace nextn::jinja
