// The BPE model of tokenizer.json: vocab, merges by rank, byte_fallback
// (<0xNN> tokens), unk_token with fuse_unk, continuing_subword_prefix,
// end_of_word_suffix, ignore_merges. Encodes one pre-tokenized word.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_reader.h"

namespace nextn::tok {

class BpeModel {
 public:
  static BpeModel parse(const Field& model);

  // Appends the ids of `word` (a non-empty pre-token) to `out`.
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(const std::string& token) const;
  // The token of `id`, or null when the vocab has no such id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest vocab id.
  int32_t id_limit() const { return int32_t(id_to_token_.size()); }

 private:
  struct MergeResult {
    uint32_t rank;
    int32_t id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  std::vector<int32_t> merge_word(const std::string& word) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::optional<std::string>> id_to_token_;
  std::unordered_map<uint64_t, MergeResult> merges_;
  std::optional<std::string> unk_token_;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0xNN> ids for byte_fallback, -1 when missing
};

}  // namespace nextn::tok
