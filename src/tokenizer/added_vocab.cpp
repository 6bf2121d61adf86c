#include "tokenizer/added_vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

std::vector<AddedToken> parse_added_tokens(const Field& f) {
  std::vector<AddedToken> out;
  std::set<int32_t> ids;
  std::set<std::string> contents;
  for (const auto& t : f.items()) {
    AddedToken a;
    a.id = int32_t(t.at("id").u32());
    const Field c = t.at("content");
    a.content = c.str();
    if (a.content.empty()) c.fail("is empty");
    if (find_invalid_utf8(a.content) != std::string::npos) c.fail("is not valid UTF-8");
    a.single_word = t.bool_or("single_word", false);
    a.lstrip = t.bool_or("lstrip", false);
    a.rstrip = t.bool_or("rstrip", false);
    a.special = t.bool_or("special", false);
    a.normalized = t.bool_or("normalized", !a.special);
    if (!ids.insert(a.id).second) t.at("id").fail(fmt::format("id {} is used by another added token", a.id));
    if (!contents.insert(a.content).second) c.fail(fmt::format("'{}' is added twice", printable(a.content)));
    out.push_back(std::move(a));
  }
  return out;
}

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& match_text) {
  tokens_ = tokens;
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (match_text[k].empty()) continue;
    int node = 0;
    for (unsigned char c : match_text[k]) {
      auto& nx = trie_[size_t(node)].next;
      auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, 0),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
      if (it != nx.end() && it->first == c) {
        node = it->second;
      } else {
        const int fresh = int(trie_.size());
        nx.insert(it, {c, fresh});
        trie_.push_back(Node{});
        node = fresh;
      }
    }
    // Two contents normalizing to one string: the first added token wins.
    if (trie_[size_t(node)].token < 0) trie_[size_t(node)].token = int(k);
  }
}

std::pair<int, size_t> AddedTokenMatcher::longest_at(const std::string& text, size_t pos) const {
  int node = 0, best = -1;
  size_t best_end = pos;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& nx = trie_[size_t(node)].next;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, 0),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it == nx.end() || it->first != c) break;
    node = it->second;
    if (trie_[size_t(node)].token >= 0) best = trie_[size_t(node)].token, best_end = i + 1;
  }
  return {best, best_end};
}

namespace {

// Rust's char::is_alphanumeric plus '_' decide what a "word" is for
// single_word; PCRE2 gives the Unicode properties.
bool is_word_char(char32_t cp) {
  static const Regex word(R"(^[\p{Alphabetic}\p{Nd}\p{Nl}\p{No}_]$)", "single_word character class");
  std::string s;
  append_utf8(s, cp);
  return !word.find_all(s).empty();
}

char32_t last_char(const std::string& s, size_t end) {
  size_t i = end;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  size_t len = 1;
  return i > 0 ? decode_utf8_at(s, i - 1, len) : 0;
}

}  // namespace

std::vector<TextPiece> AddedTokenMatcher::split(const std::string& text) const {
  std::vector<TextPiece> out;
  if (text.empty() || tokens_.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return out;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    auto [k, end] = longest_at(text, pos);
    if (k < 0) {
      size_t len = 1;
      decode_utf8_at(text, pos, len);
      pos += len;
      continue;
    }
    const AddedToken& t = tokens_[size_t(k)];
    size_t start = pos, stop = end;
    pos = end;  // the next search starts after this match, as aho-corasick's
    if (t.single_word) {
      size_t len = 1;
      const bool start_ok = start == 0 || !is_word_char(last_char(text, start));
      const bool stop_ok = stop == text.size() || !is_word_char(decode_utf8_at(text, stop, len));
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t len = 1;
        if (!is_unicode_whitespace(decode_utf8_at(text, b, len))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      size_t len = 1;
      while (stop < text.size() && is_unicode_whitespace(decode_utf8_at(text, stop, len))) stop += len;
    }
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
  return out;
}

}  // namespace nextn::tok
