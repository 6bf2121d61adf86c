// Pre-tokenizers of tokenizer.json: Split (String or Regex pattern, the five
// behaviors, invert), ByteLevel (GPT-2 byte-to-char mapping, optional prefix
// space and GPT-2 regex), Sequence. They cut normalized text into words;
// BPE never merges across a word boundary.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/json_reader.h"
#include "tokenizer/normalizer.h"

namespace nextn::tok {

struct PreTokenizer {
  enum class Kind { Split, ByteLevel, Sequence };
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  Kind kind = Kind::Split;
  Pattern pattern;                 // Split
  Behavior behavior = Behavior::Isolated;
  bool invert = false;             // Split
  bool add_prefix_space = false;   // ByteLevel
  std::shared_ptr<const Regex> byte_level_regex;  // ByteLevel with use_regex: the GPT-2 pattern
  std::vector<PreTokenizer> steps;  // Sequence
};

PreTokenizer parse_pre_tokenizer(const Field& f);
// Splits each word of `words` further (or maps it, for ByteLevel).
std::vector<std::string> pre_tokenize(const PreTokenizer& p, std::vector<std::string> words);

// GPT-2's byte -> printable char table (as UTF-8) and its inverse.
const std::string& byte_level_char(unsigned char b);
// The byte a ByteLevel char stands for, or -1.
int byte_level_byte(char32_t c);

}  // namespace nextn::tok
