#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

Decoder parse_decoder(const Field& f) {
  Decoder d;
  const std::string t = f.type({"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "Sequence"});
  if (t == "ByteLevel") {
    d.kind = Decoder::Kind::ByteLevel;
    for (const char* k : {"add_prefix_space", "trim_offsets", "use_regex"})
      f.bool_or(k, false);  // no effect on decoding
  } else if (t == "Replace") {
    d.kind = Decoder::Kind::Replace;
    d.pattern = parse_pattern(f.at("pattern"));
    const Field c = f.at("content");
    d.content = c.str();
    if (find_invalid_utf8(d.content) != std::string::npos) c.fail("is not valid UTF-8");
  } else if (t == "ByteFallback") {
    d.kind = Decoder::Kind::ByteFallback;
  } else if (t == "Fuse") {
    d.kind = Decoder::Kind::Fuse;
  } else if (t == "Strip") {
    d.kind = Decoder::Kind::Strip;
    const Field c = f.at("content");
    d.content = c.str();
    size_t len = 0;
    if (d.content.empty() || find_invalid_utf8(d.content) != std::string::npos ||
        (decode_utf8_at(d.content, 0, len), len != d.content.size()))
      c.fail("is not one character");
    d.start = f.at("start").u32();
    d.stop = f.at("stop").u32();
  } else if (t == "Metaspace") {
    d.kind = Decoder::Kind::Metaspace;
    const Field r = f.at("replacement");
    d.content = r.str();
    size_t len = 0;
    if (d.content.empty() || find_invalid_utf8(d.content) != std::string::npos ||
        (decode_utf8_at(d.content, 0, len), len != d.content.size()))
      r.fail("is not one character");
    d.strip_first_replacement = parse_prepend_scheme(f) != PreTokenizer::Prepend::Never;
    f.bool_or("split", true);
  } else {
    d.kind = Decoder::Kind::Sequence;
    for (const auto& s : f.at("decoders").items()) d.steps.push_back(parse_decoder(s));
  }
  return d;
}

namespace {

// "<0xNN>" -> the byte, as Rust's u8::from_str_radix(&token[3..5], 16),
// which also takes a leading '+' before a single digit.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (t[3] == '+' && lo >= 0) return lo;
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

std::u32string code_points(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    out += decode_utf8_at(s, i, len);
    i += len;
  }
  return out;
}

}  // namespace

std::vector<std::string> decode_chain(const Decoder& d, std::vector<std::string> tokens) {
  switch (d.kind) {
    case Decoder::Kind::Sequence:
      for (const auto& s : d.steps) tokens = decode_chain(s, std::move(tokens));
      return tokens;
    case Decoder::Kind::Fuse: {
      std::string all;
      for (const auto& t : tokens) all += t;
      return {all};
    }
    case Decoder::Kind::Replace:
      for (auto& t : tokens) t = replace_all(d.pattern, t, d.content);
      return tokens;
    case Decoder::Kind::ByteLevel: {
      // Each token maps char -> byte; a token with a char outside the table
      // contributes its own UTF-8 bytes. The bytes are then read lossily.
      std::string bytes;
      for (const auto& t : tokens) {
        std::string mapped;
        bool all = true;
        for (char32_t c : code_points(t)) {
          const int b = byte_level_byte(c);
          if (b < 0) {
            all = false;
            break;
          }
          mapped += char(b);
        }
        bytes += all ? mapped : t;
      }
      return {utf8_lossy(bytes)};
    }
    case Decoder::Kind::ByteFallback: {
      std::vector<std::string> out;
      std::string pending;
      auto flush = [&] {
        if (pending.empty()) return;
        if (find_invalid_utf8(pending) == std::string::npos) {
          out.push_back(pending);
        } else {
          for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");  // one U+FFFD per byte
        }
        pending.clear();
      };
      for (auto& t : tokens) {
        const int b = byte_token_value(t);
        if (b >= 0) {
          pending += char(b);
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      return out;
    }
    case Decoder::Kind::Metaspace: {
      // Replacement chars become spaces, except in the first token, where
      // they are dropped (the prepended one), as Hugging Face does.
      const char32_t repl = code_points(d.content)[0];
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string s;
        for (char32_t c : code_points(tokens[i])) {
          if (c != repl)
            append_utf8(s, c);
          else if (!(i == 0 && d.strip_first_replacement))
            s += ' ';
        }
        tokens[i] = s;
      }
      return tokens;
    }
    case Decoder::Kind::Strip:
      for (auto& t : tokens) {
        const std::u32string cs = code_points(t);
        const char32_t strip = code_points(d.content)[0];
        size_t begin = 0, end = cs.size();
        while (begin < d.start && begin < end && cs[begin] == strip) ++begin;
        size_t cut = 0;
        while (cut < d.stop && end > begin && cs[end - 1] == strip) --end, ++cut;
        std::string s;
        for (size_t k = begin; k < end; ++k) append_utf8(s, cs[k]);
        t = s;
      }
      return tokens;
  }
  return tokens;
}

bool is_fallback_byte(const Decoder& d, const std::string& token) {
  if (d.kind == Decoder::Kind::ByteFallback) return byte_token_value(token) >= 0;
  for (const Decoder& step : d.steps)
    if (is_fallback_byte(step, token)) return true;
  return false;
}

}  // namespace nextn::tok
