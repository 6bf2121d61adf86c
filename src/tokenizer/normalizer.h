// Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD (ICU), Replace (a
// literal string or a regex), Prepend, Sequence. Applied to each stretch of
// text between added tokens, before pre-tokenization.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_reader.h"
#include "tokenizer/regex.h"

namespace nextn::tok {

struct Normalizer {
  enum class Kind { NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence };
  Kind kind = Kind::NFC;
  std::string literal;                 // Replace: the String pattern
  std::shared_ptr<const Regex> regex;  // Replace: the Regex pattern (else null)
  std::string content;                 // Replace: the replacement; Prepend: the prefix
  std::vector<Normalizer> steps;       // Sequence
};

Normalizer parse_normalizer(const Field& f);
// `text` is valid UTF-8; so is the result.
std::string normalize(const Normalizer& n, const std::string& text);

// Replaces every non-overlapping match of a String/Regex pattern object
// ({"String": s} or {"Regex": r}), shared with the Replace decoder and Split.
struct Pattern {
  std::string literal;
  std::shared_ptr<const Regex> regex;
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
};
Pattern parse_pattern(const Field& f);
std::string replace_all(const Pattern& p, const std::string& text, const std::string& content);

}  // namespace nextn::tok
