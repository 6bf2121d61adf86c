// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse,
// Strip, Metaspace, Sequence. Each maps a list of token strings to a new list (Hugging
// Face's decode_chain); the final text is their concatenation.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/json_reader.h"
#include "tokenizer/normalizer.h"

namespace nextn::tok {

struct Decoder {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence };
  Kind kind = Kind::ByteLevel;
  Pattern pattern;                       // Replace
  std::string content;                   // Replace: replacement; Strip: the char stripped
  uint32_t start = 0, stop = 0;          // Strip
  bool strip_first_replacement = false;  // Metaspace: prepend_scheme is not "never"
  std::vector<Decoder> steps;            // Sequence
};

Decoder parse_decoder(const Field& f);
std::vector<std::string> decode_chain(const Decoder& d, std::vector<std::string> tokens);
// True when `d` (or a step of it) is ByteFallback and `token` is one of its
// "<0xNN>" byte tokens: a run of them decodes as a whole (its bytes as text,
// or one U+FFFD per byte when they are not valid UTF-8).
bool is_fallback_byte(const Decoder& d, const std::string& token);

}  // namespace nextn::tok
