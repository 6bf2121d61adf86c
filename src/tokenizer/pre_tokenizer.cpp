#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

namespace {

// GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
// other 68 bytes map to U+0100.. in byte order.
struct ByteTable {
  std::array<std::string, 256> chars;
  std::array<char32_t, 256> cps{};
  ByteTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      cps[b] = printable ? char32_t(b) : char32_t(256 + n++);
      append_utf8(chars[b], cps[b]);
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

PreTokenizer::Behavior parse_behavior(const Field& f) {
  const std::string& b = f.str();
  if (b == "Removed") return PreTokenizer::Behavior::Removed;
  if (b == "Isolated") return PreTokenizer::Behavior::Isolated;
  if (b == "MergedWithPrevious") return PreTokenizer::Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return PreTokenizer::Behavior::MergedWithNext;
  if (b == "Contiguous") return PreTokenizer::Behavior::Contiguous;
  f.fail("unsupported behavior '" + printable(b) +
         "' (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

using Span = std::pair<size_t, size_t>;

// Hugging Face's NormalizedString::split: pieces flagged match / no-match,
// then combined by the behavior; empty pieces are dropped.
void split_word(const Pattern& pattern, PreTokenizer::Behavior behavior, bool invert, const Word& word,
                std::vector<Word>& out) {
  const std::string& w = word.text;
  std::vector<std::pair<Span, bool>> pieces;  // (span, is_match)
  if (w.empty()) {
    pieces.push_back({{0, 0}, false});
  } else {
    size_t prev = 0;
    for (auto [s, e] : pattern.find_all(w)) {
      if (prev != s) pieces.push_back({{prev, s}, false});
      pieces.push_back({{s, e}, true});
      prev = e;
    }
    if (prev != w.size()) pieces.push_back({{prev, w.size()}, false});
  }
  if (invert)
    for (auto& pc : pieces) pc.second = !pc.second;

  std::vector<std::pair<Span, bool>> kept;  // (span, remove)
  using B = PreTokenizer::Behavior;
  switch (behavior) {
    case B::Isolated:
      for (auto& pc : pieces) kept.push_back({pc.first, false});
      break;
    case B::Removed:
      kept = pieces;
      break;
    case B::Contiguous: {
      bool previous_match = false;
      for (auto& [span, m] : pieces) {
        if (m == previous_match && !kept.empty())
          kept.back().first.second = span.second;
        else
          kept.push_back({span, false});
        previous_match = m;
      }
      break;
    }
    case B::MergedWithPrevious: {
      bool previous_match = false;
      for (auto& [span, m] : pieces) {
        if (m && !previous_match && !kept.empty())
          kept.back().first.second = span.second;
        else
          kept.push_back({span, false});
        previous_match = m;
      }
      break;
    }
    case B::MergedWithNext: {
      bool previous_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->second && !previous_match && !kept.empty())
          kept.back().first.first = it->first.first;
        else
          kept.push_back({it->first, false});
        previous_match = it->second;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (auto& [span, remove] : kept)
    if (!remove && span.second > span.first)
      out.push_back({w.substr(span.first, span.second - span.first), word.at_origin && span.first == 0});
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return table().chars[b]; }

int byte_level_byte(char32_t c) {
  static const auto inverse = [] {
    std::array<int, 512> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[table().cps[b]] = b;
    return inv;
  }();
  return c < 512 ? inverse[c] : -1;
}

PreTokenizer parse_pre_tokenizer(const Field& f) {
  PreTokenizer p;
  const std::string t = f.type({"Split", "ByteLevel", "Metaspace", "Sequence"});
  if (t == "Split") {
    p.kind = PreTokenizer::Kind::Split;
    p.pattern = parse_pattern(f.at("pattern"));
    p.behavior = parse_behavior(f.at("behavior"));
    p.invert = f.bool_or("invert", false);
  } else if (t == "ByteLevel") {
    p.kind = PreTokenizer::Kind::ByteLevel;
    p.add_prefix_space = f.bool_or("add_prefix_space", true);
    f.bool_or("trim_offsets", true);  // offsets only; type-checked
    if (f.bool_or("use_regex", true)) p.byte_level_regex = std::make_shared<Regex>(kGpt2Regex, f.where());
  } else if (t == "Metaspace") {
    p.kind = PreTokenizer::Kind::Metaspace;
    const Field r = f.at("replacement");
    p.replacement = r.str();
    size_t len = 0;
    if (p.replacement.empty() || find_invalid_utf8(p.replacement) != std::string::npos ||
        (decode_utf8_at(p.replacement, 0, len), len != p.replacement.size()))
      r.fail("is not one character");
    p.prepend = parse_prepend_scheme(f);
    p.split = f.bool_or("split", true);
  } else {
    p.kind = PreTokenizer::Kind::Sequence;
    for (const auto& s : f.at("pretokenizers").items()) p.steps.push_back(parse_pre_tokenizer(s));
  }
  return p;
}

PreTokenizer::Prepend parse_prepend_scheme(const Field& f) {
  if (auto s = f.get("prepend_scheme")) {
    const std::string& v = s->str();
    if (v == "always") return PreTokenizer::Prepend::Always;
    if (v == "never") return PreTokenizer::Prepend::Never;
    if (v == "first") return PreTokenizer::Prepend::First;
    s->fail("unsupported prepend_scheme '" + printable(v) + "' (supported: always, never, first)");
  }
  // Files older than prepend_scheme say add_prefix_space.
  return f.bool_or("add_prefix_space", true) ? PreTokenizer::Prepend::Always : PreTokenizer::Prepend::Never;
}

std::vector<Word> pre_tokenize(const PreTokenizer& p, std::vector<Word> words) {
  std::vector<Word> out;
  switch (p.kind) {
    case PreTokenizer::Kind::Sequence:
      for (const auto& s : p.steps) words = pre_tokenize(s, std::move(words));
      return words;
    case PreTokenizer::Kind::Split:
      for (const auto& w : words) split_word(p.pattern, p.behavior, p.invert, w, out);
      return out;
    case PreTokenizer::Kind::Metaspace: {
      const Pattern space{" ", nullptr}, repl{p.replacement, nullptr};
      for (const auto& w : words) {
        std::string s = replace_all(space, w.text, p.replacement);
        const bool prepend =
            p.prepend == PreTokenizer::Prepend::Always || (p.prepend == PreTokenizer::Prepend::First && w.at_origin);
        if (prepend && s.rfind(p.replacement, 0) != 0) s = p.replacement + s;
        if (p.split)
          split_word(repl, PreTokenizer::Behavior::MergedWithNext, /*invert=*/false, Word{s, w.at_origin}, out);
        else if (!s.empty())
          out.push_back({s, w.at_origin});
      }
      return out;
    }
    case PreTokenizer::Kind::ByteLevel:
      for (auto& w : words) {
        std::string word = w.text;
        if (p.add_prefix_space && word.rfind(' ', 0) != 0) word = " " + word;
        std::vector<Word> parts;
        if (p.byte_level_regex) {
          size_t prev = 0;
          for (auto [s, e] : p.byte_level_regex->find_all(word)) {
            if (prev != s) parts.push_back({word.substr(prev, s - prev), w.at_origin && prev == 0});
            if (e > s) parts.push_back({word.substr(s, e - s), w.at_origin && s == 0});
            prev = e;
          }
          if (prev != word.size()) parts.push_back({word.substr(prev), w.at_origin && prev == 0});
        } else {
          parts.push_back({std::move(word), w.at_origin});
        }
        for (const auto& part : parts) {
          std::string mapped;
          for (unsigned char c : part.text) mapped += byte_level_char(c);
          if (!mapped.empty()) out.push_back({std::move(mapped), part.at_origin});
        }
      }
      return out;
  }
  return out;
}

}  // namespace nextn::tok
