// Added tokens ("added_tokens" of tokenizer.json): found in the text before
// normalization and splitting (normalized=false) or in each normalized
// stretch (normalized=true), leftmost-longest, never merged with their
// neighbours. lstrip/rstrip swallow adjacent whitespace; single_word
// requires non-word characters (or the text's ends) on both sides.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_reader.h"

namespace nextn::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// One piece of split text: an added token (id >= 0) or text to tokenize.
struct TextPiece {
  std::string text;
  int32_t added_id = -1;
};

class AddedTokenMatcher {
 public:
  // `tokens` are those with one value of `normalized`; their `match_text`
  // is what is searched for (content, or its normalized form).
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& match_text);
  // Hugging Face's AddedVocabulary::find_matches over `text`.
  std::vector<TextPiece> split(const std::string& text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;  // sorted by byte
    int token = -1;                                   // index into tokens_ when a token ends here
  };
  // Longest token starting at text[pos]: (token index, end), or index -1.
  std::pair<int, size_t> longest_at(const std::string& text, size_t pos) const;
  std::vector<Node> trie_{Node{}};
  std::vector<AddedToken> tokens_;
};

// Parses and validates "added_tokens".
std::vector<AddedToken> parse_added_tokens(const Field& f);

}  // namespace nextn::tok
