// A Hugging Face tokenizer.json: byte-level BPE (Qwen) or SentencePiece-style
// BPE with byte fallback (Gemma). Loading validates every field it uses and
// fails with one line naming the file and the field. See docs/tokenizer.md.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nextn::tok {

struct EncodeOptions {
  bool add_special_tokens = true;  // apply the post-processor's template (e.g. Gemma 3's <bos>)
};
struct DecodeOptions {
  bool skip_special_tokens = false;
};

class Tokenizer {
 public:
  // Reads and validates `path` (a tokenizer.json file).
  static Tokenizer load(const std::string& path);
  // `file` names the source in errors.
  static Tokenizer from_json(const std::string& text, const std::string& file);

  // `text` must be valid UTF-8 (else nextn::Error).
  std::vector<int32_t> encode(const std::string& text, EncodeOptions o = {}) const;
  // Ids without a token are skipped, as Hugging Face does; callers that
  // want an error check has_token() first.
  std::string decode(const std::vector<int32_t>& ids, DecodeOptions o = {}) const;

  bool has_token(int32_t id) const { return id_to_token(id) != nullptr; }
  const std::string* id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(const std::string& token) const;
  bool is_special(int32_t id) const;
  // A byte token of a ByteFallback decoder (tokenizer/decoder.h): it decodes
  // together with the byte tokens around it.
  bool is_fallback_byte(int32_t id) const;
  // One past the largest id of any token.
  int32_t id_limit() const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Feeds ids one at a time and returns only complete text: a character whose
// UTF-8 bytes span several tokens is held back until they have all arrived
// (Hugging Face's DecodeStream). finish() returns what is still held, with
// incomplete bytes as U+FFFD, so step()s + finish() == decode(all ids). A
// run of ByteFallback byte tokens is held until it ends, since a later byte
// can turn the whole run into U+FFFDs.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& t, DecodeOptions o = {}) : tok_(&t), opts_(o) {}
  std::string step(int32_t id);
  std::string finish();

 private:
  const Tokenizer* tok_;
  DecodeOptions opts_;
  std::vector<int32_t> ids_;  // the last emitted chunk's ids (context) + held ids
  std::string prefix_;        // decode of the context ids
  size_t prefix_index_ = 0;   // ids_[0, prefix_index_) are the context
};

}  // namespace nextn::tok
