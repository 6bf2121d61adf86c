#include "tokenizer/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

Pattern parse_pattern(const Field& f) {
  const auto& obj = f.json();
  if (!obj.is_object() || obj.size() != 1 || !(obj.contains("String") || obj.contains("Regex")))
    f.fail("must be {\"String\": ...} or {\"Regex\": ...}");
  Pattern p;
  if (auto s = f.get("String")) {
    p.literal = s->str();
    if (p.literal.empty()) s->fail("is empty (an empty pattern is not supported)");
    if (find_invalid_utf8(p.literal) != std::string::npos) s->fail("is not valid UTF-8");
  } else {
    const Field r = f.at("Regex");
    p.regex = std::make_shared<Regex>(r.str(), r.where());
  }
  return p;
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  if (regex) return regex->find_all(text);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t p = text.find(literal); p != std::string_view::npos; p = text.find(literal, p + literal.size()))
    out.emplace_back(p, p + literal.size());
  return out;
}

std::string replace_all(const Pattern& p, const std::string& text, const std::string& content) {
  std::string out;
  size_t prev = 0;
  for (auto [s, e] : p.find_all(text)) {
    out.append(text, prev, s - prev);
    out += content;
    prev = e;
  }
  out.append(text, prev);
  return out;
}

Normalizer parse_normalizer(const Field& f) {
  Normalizer n;
  const std::string t = f.type({"NFC", "NFD", "NFKC", "NFKD", "Replace", "Prepend", "Sequence"});
  if (t == "NFC") n.kind = Normalizer::Kind::NFC;
  if (t == "NFD") n.kind = Normalizer::Kind::NFD;
  if (t == "NFKC") n.kind = Normalizer::Kind::NFKC;
  if (t == "NFKD") n.kind = Normalizer::Kind::NFKD;
  if (t == "Replace") {
    n.kind = Normalizer::Kind::Replace;
    Pattern p = parse_pattern(f.at("pattern"));
    n.literal = p.literal;
    n.regex = p.regex;
    const Field c = f.at("content");
    n.content = c.str();
    if (find_invalid_utf8(n.content) != std::string::npos) c.fail("is not valid UTF-8");
  }
  if (t == "Prepend") {
    n.kind = Normalizer::Kind::Prepend;
    const Field c = f.at("prepend");
    n.content = c.str();
    if (find_invalid_utf8(n.content) != std::string::npos) c.fail("is not valid UTF-8");
  }
  if (t == "Sequence") {
    n.kind = Normalizer::Kind::Sequence;
    for (const auto& s : f.at("normalizers").items()) n.steps.push_back(parse_normalizer(s));
  }
  return n;
}

namespace {
std::string unicode_normal_form(const icu::Normalizer2* (*instance)(UErrorCode&), const std::string& text) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* norm = instance(st);
  if (U_FAILURE(st)) fail("ICU normalizer unavailable: {}", u_errorName(st));
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
  icu::UnicodeString out = norm->normalize(in, st);
  if (U_FAILURE(st)) fail("ICU normalization failed: {}", u_errorName(st));
  std::string s;
  out.toUTF8String(s);
  return s;
}
}  // namespace

std::string normalize(const Normalizer& n, const std::string& text) {
  switch (n.kind) {
    case Normalizer::Kind::NFC:
      return unicode_normal_form(&icu::Normalizer2::getNFCInstance, text);
    case Normalizer::Kind::NFD:
      return unicode_normal_form(&icu::Normalizer2::getNFDInstance, text);
    case Normalizer::Kind::NFKC:
      return unicode_normal_form(&icu::Normalizer2::getNFKCInstance, text);
    case Normalizer::Kind::NFKD:
      return unicode_normal_form(&icu::Normalizer2::getNFKDInstance, text);
    case Normalizer::Kind::Replace:
      return replace_all(Pattern{n.literal, n.regex}, text, n.content);
    case Normalizer::Kind::Prepend:
      return text.empty() ? text : n.content + text;
    case Normalizer::Kind::Sequence: {
      std::string s = text;
      for (const auto& step : n.steps) s = normalize(step, s);
      return s;
    }
  }
  return text;
}

}  // namespace nextn::tok
