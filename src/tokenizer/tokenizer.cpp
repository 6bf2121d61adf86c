#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

struct Tokenizer::Impl {
  BpeModel model;
  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  std::optional<Decoder> decoder;
  PostProcessor post;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;  // id -> index into added
  std::unordered_map<std::string, int32_t> added_by_content;
  // What id_to_token gives for each added token: its content, normalized
  // when the token is (tokenizers decodes the normalized form).
  std::vector<std::string> added_token_text;
  AddedTokenMatcher raw_matcher, normalized_matcher;
  int32_t id_limit = 0;
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  return from_json(ss.str(), path);
}

Tokenizer Tokenizer::from_json(const std::string& text, const std::string& file) {
  const Json j = parse_json_strict(text, file);
  const Field root(j, "", file);
  if (!j.is_object()) root.fail("is not a JSON object");
  Tokenizer t;
  Impl& m = *t.impl_;
  root.str_or_null("version");
  // Truncation and padding apply to batches and length limits, which nextn
  // does not use; they are only type-checked.
  for (const char* k : {"truncation", "padding"})
    if (auto f = root.get(k); f && !f->json().is_object()) f->fail("is neither null nor an object");

  m.model = BpeModel::parse(root.at("model"));
  if (auto f = root.get("normalizer")) m.normalizer = parse_normalizer(*f);
  if (auto f = root.get("pre_tokenizer")) m.pre_tokenizer = parse_pre_tokenizer(*f);
  if (auto f = root.get("decoder")) m.decoder = parse_decoder(*f);
  if (auto f = root.get("post_processor")) m.post = parse_post_processor(*f);

  m.id_limit = m.model.id_limit();
  if (auto f = root.get("added_tokens")) {
    m.added = parse_added_tokens(*f);
    const auto items = f->items();
    for (size_t k = 0; k < m.added.size(); ++k) {
      const AddedToken& a = m.added[k];
      // The id Hugging Face gives a token in the model vocab is its vocab id.
      if (auto vid = m.model.token_to_id(a.content); vid && *vid != a.id)
        items[k].at("id").fail(
            fmt::format("{} differs from the model.vocab id {} of '{}'", a.id, *vid, printable(a.content)));
      if (const std::string* other = m.model.id_to_token(a.id); other && *other != a.content)
        items[k].at("id").fail(fmt::format("{} is the model.vocab id of '{}', not of '{}'", a.id, printable(*other),
                                           printable(a.content)));
      m.added_by_id[a.id] = k;
      m.added_by_content[a.content] = a.id;
      m.id_limit = std::max(m.id_limit, a.id + 1);
    }
  }

  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_text, normalized_text;
  for (const auto& a : m.added) {
    const std::string text = a.normalized && m.normalizer ? normalize(*m.normalizer, a.content) : a.content;
    m.added_token_text.push_back(text);
    if (a.normalized) {
      normalized.push_back(a);
      normalized_text.push_back(text);
    } else {
      raw.push_back(a);
      raw_text.push_back(a.content);
    }
  }
  m.raw_matcher.build(raw, raw_text);
  m.normalized_matcher.build(normalized, normalized_text);
  for (int32_t id : m.post.single)
    if (id >= 0 && !t.has_token(id))
      root.at("post_processor").fail(fmt::format("special token id {} is not in the vocabulary", id));
  return t;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, EncodeOptions o) const {
  const Impl& m = *impl_;
  if (size_t bad = find_invalid_utf8(text); bad != std::string::npos)
    fail("the text is not valid UTF-8 (byte offset {})", bad);
  std::vector<int32_t> ids;
  bool at_origin = true;  // the next piece starts at byte 0 of `text`
  for (const TextPiece& raw : m.raw_matcher.split(text)) {
    const bool raw_at_origin = std::exchange(at_origin, false);
    if (raw.added_id >= 0) {
      ids.push_back(raw.added_id);
      continue;
    }
    const std::string norm = m.normalizer ? normalize(*m.normalizer, raw.text) : raw.text;
    bool first_piece = true;
    for (const TextPiece& piece : m.normalized_matcher.split(norm)) {
      const bool piece_at_origin = raw_at_origin && std::exchange(first_piece, false);
      if (piece.added_id >= 0) {
        ids.push_back(piece.added_id);
        continue;
      }
      std::vector<Word> words{Word{piece.text, piece_at_origin}};
      if (m.pre_tokenizer) words = pre_tokenize(*m.pre_tokenizer, std::move(words));
      for (const auto& w : words)
        if (!w.text.empty()) m.model.encode_word(w.text, ids);
    }
  }
  return o.add_special_tokens ? post_process(m.post, ids) : ids;
}

const std::string* Tokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end())
    return &impl_->added_token_text[it->second];
  return impl_->model.id_to_token(id);
}

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  return impl_->model.token_to_id(token);
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

bool Tokenizer::is_fallback_byte(int32_t id) const {
  const std::string* t = id_to_token(id);
  return t && impl_->decoder && tok::is_fallback_byte(*impl_->decoder, *t);
}

int32_t Tokenizer::id_limit() const { return impl_->id_limit; }

std::string Tokenizer::decode(const std::vector<int32_t>& ids, DecodeOptions o) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* t = id_to_token(id);
    if (!t || (o.skip_special_tokens && is_special(id))) continue;
    tokens.push_back(*t);
  }
  std::string out;
  if (impl_->decoder) {
    for (const auto& s : decode_chain(*impl_->decoder, std::move(tokens))) out += s;
  } else {
    for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
  }
  return out;
}

std::string StreamDecoder::step(int32_t id) {
  ids_.push_back(id);
  if (tok_->is_fallback_byte(id)) return {};  // the run may still turn invalid
  std::string text = tok_->decode(ids_, opts_);
  if (text.size() <= prefix_.size() || text.ends_with("\xEF\xBF\xBD")) return {};
  if (text.compare(0, prefix_.size(), prefix_) != 0)
    fail("stream decode: the decoder rewrote text already emitted (token id {})", id);
  std::string fresh = text.substr(prefix_.size());
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + std::ptrdiff_t(prefix_index_));
  prefix_ = tok_->decode(ids_, opts_);
  prefix_index_ = new_prefix_index;
  return fresh;
}

std::string StreamDecoder::finish() {
  std::string text = tok_->decode(ids_, opts_);
  std::string rest;
  if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0) rest = text.substr(prefix_.size());
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return rest;
}

}  // namespace nextn::tok
