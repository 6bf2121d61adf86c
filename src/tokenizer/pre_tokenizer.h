// Pre-tokenizers of tokenizer.json: Split (String or Regex pattern, the five
// behaviors, invert), ByteLevel (GPT-2 byte-to-char mapping, optional prefix
// space and GPT-2 regex), Metaspace (SentencePiece's "▁"), Sequence. They cut normalized text into words;
// BPE never merges across a word boundary.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/json_reader.h"
#include "tokenizer/normalizer.h"

namespace nextn::tok {

struct PreTokenizer {
  enum class Kind { Split, ByteLevel, Metaspace, Sequence };
  enum class Prepend { Always, Never, First };
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  Kind kind = Kind::Split;
  Pattern pattern;  // Split
  Behavior behavior = Behavior::Isolated;
  bool invert = false;                            // Split
  bool add_prefix_space = false;                  // ByteLevel
  std::shared_ptr<const Regex> byte_level_regex;  // ByteLevel with use_regex: the GPT-2 pattern
  std::string replacement;                        // Metaspace: the char spaces become
  Prepend prepend = Prepend::Always;              // Metaspace: when to prepend `replacement`
  bool split = true;                              // Metaspace: cut before each `replacement`
  std::vector<PreTokenizer> steps;                // Sequence
};

// A piece of text; at_origin: it starts at byte 0 of the encoded text
// (Metaspace's prepend_scheme "first" prepends only there).
struct Word {
  std::string text;
  bool at_origin = false;
};

PreTokenizer parse_pre_tokenizer(const Field& f);
// Splits each word of `words` further (or maps it, for ByteLevel).
std::vector<Word> pre_tokenize(const PreTokenizer& p, std::vector<Word> words);
PreTokenizer::Prepend parse_prepend_scheme(const Field& parent);

// GPT-2's byte -> printable char table (as UTF-8) and its inverse.
const std::string& byte_level_char(unsigned char b);
// The byte a ByteLevel char stands for, or -1.
int byte_level_byte(char32_t c);

}  // namespace nextn::tok
