#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

BpeModel BpeModel::parse(const Field& m) {
  m.type({"BPE"});
  BpeModel b;
  if (auto d = m.get("dropout")) d->fail("is not supported (only null): dropout makes encoding random");
  b.unk_token_ = m.str_or_null("unk_token");
  b.continuing_subword_prefix_ = m.str_or_null("continuing_subword_prefix").value_or("");
  b.end_of_word_suffix_ = m.str_or_null("end_of_word_suffix").value_or("");
  b.fuse_unk_ = m.bool_or("fuse_unk", false);
  b.byte_fallback_ = m.bool_or("byte_fallback", false);
  b.ignore_merges_ = m.bool_or("ignore_merges", false);

  const Field vocab = m.at("vocab");
  for (const auto& [token, idf] : vocab.members()) {
    const int32_t id = int32_t(idf.u32());
    if (size_t(id) >= b.id_to_token_.size()) b.id_to_token_.resize(size_t(id) + 1);
    if (b.id_to_token_[size_t(id)])
      idf.fail(fmt::format("id {} is also the id of '{}'", id, printable(*b.id_to_token_[size_t(id)])));
    b.id_to_token_[size_t(id)] = token;
    b.vocab_.emplace(token, id);
  }
  if (b.unk_token_ && !b.vocab_.count(*b.unk_token_))
    m.at("unk_token").fail(fmt::format("'{}' is not in model.vocab", printable(*b.unk_token_)));
  for (int v = 0; v < 256; ++v) {
    auto it = b.vocab_.find(fmt::format("<0x{:02X}>", v));
    b.byte_ids_[v] = it == b.vocab_.end() ? -1 : it->second;
  }

  const size_t prefix_len = b.continuing_subword_prefix_.size();
  const auto merges = m.at("merges").items();
  for (uint32_t rank = 0; rank < merges.size(); ++rank) {
    const Field& mf = merges[rank];
    std::string a, c;
    if (mf.json().is_string()) {
      const std::string& s = mf.str();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        mf.fail(fmt::format("'{}' is not two tokens separated by one space", printable(s)));
      a = s.substr(0, sp);
      c = s.substr(sp + 1);
    } else if (mf.json().is_array()) {
      const auto parts = mf.items();
      if (parts.size() != 2) mf.fail(fmt::format("has {} elements, not a pair [a, b]", parts.size()));
      a = parts[0].str();
      c = parts[1].str();
    } else {
      mf.fail("is neither \"a b\" nor [a, b]");
    }
    auto ia = b.vocab_.find(a), ic = b.vocab_.find(c);
    if (ia == b.vocab_.end()) mf.fail(fmt::format("token '{}' is not in model.vocab", printable(a)));
    if (ic == b.vocab_.end()) mf.fail(fmt::format("token '{}' is not in model.vocab", printable(c)));
    // The right part's continuing-subword prefix is dropped in the merge.
    const std::string merged =
        a + (prefix_len > 0 && c.rfind(b.continuing_subword_prefix_, 0) == 0 ? c.substr(prefix_len) : c);
    auto im = b.vocab_.find(merged);
    if (im == b.vocab_.end()) mf.fail(fmt::format("merged token '{}' is not in model.vocab", printable(merged)));
    // A repeated pair keeps its last rank, as Hugging Face's map does.
    b.merges_[pair_key(ia->second, ic->second)] = MergeResult{rank, im->second};
  }
  return b;
}

std::optional<int32_t> BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= id_to_token_.size() || !id_to_token_[size_t(id)]) return nullptr;
  return &*id_to_token_[size_t(id)];
}

// Initial symbols: one per char (vocab token, or <0xNN> bytes, or unk),
// then merges applied lowest rank first (leftmost on ties), as Hugging
// Face's Word::merge_all.
std::vector<int32_t> BpeModel::merge_word(const std::string& w) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<int32_t> ids;
  int32_t pending_unk = -1;  // the unk id while unknown chars are pending (fused ones wait here)
  for (size_t i = 0; i < w.size();) {
    size_t len = 1;
    decode_utf8_at(w, i, len);
    std::string s = w.substr(i, len);
    if (i > 0 && !continuing_subword_prefix_.empty()) s = continuing_subword_prefix_ + s;
    if (i + len == w.size() && !end_of_word_suffix_.empty()) s += end_of_word_suffix_;
    i += len;
    if (auto it = vocab_.find(s); it != vocab_.end()) {
      if (pending_unk >= 0) ids.push_back(pending_unk), pending_unk = -1;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : s) all = all && byte_ids_[c] >= 0;
      if (all) {
        // A pending unk stays pending across byte tokens, as in Hugging Face.
        for (unsigned char c : s) ids.push_back(byte_ids_[c]);
        continue;
      }
    }
    if (unk_token_) {
      const int32_t unk = vocab_.at(*unk_token_);
      if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
      pending_unk = unk;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
  if (ids.size() < 2) return ids;

  std::vector<Symbol> sym(ids.size());
  for (size_t k = 0; k < ids.size(); ++k)
    sym[k] = Symbol{ids[k], int(k) - 1, k + 1 < ids.size() ? int(k + 1) : -1, true};
  struct Cand {
    uint32_t rank;
    int pos;
    int32_t new_id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand> queue;
  auto lookup = [&](int32_t a, int32_t b) -> const MergeResult* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < sym.size(); ++k)
    if (auto* m = lookup(sym[k].id, sym[k + 1].id)) queue.push({m->rank, int(k), m->id});
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Symbol& cur = sym[size_t(top.pos)];
    if (!cur.alive || cur.next < 0) continue;
    const Symbol right = sym[size_t(cur.next)];
    const MergeResult* m = lookup(cur.id, right.id);
    if (!m || m->id != top.new_id) continue;  // a stale entry
    sym[size_t(cur.next)].alive = false;
    cur.id = top.new_id;
    cur.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (auto* p = lookup(sym[size_t(cur.prev)].id, cur.id)) queue.push({p->rank, cur.prev, p->id});
    if (cur.next >= 0)
      if (auto* n = lookup(cur.id, sym[size_t(cur.next)].id)) queue.push({n->rank, top.pos, n->id});
  }
  std::vector<int32_t> out;
  for (const auto& s : sym)
    if (s.alive) out.push_back(s.id);
  return out;
}

void BpeModel::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges_)
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  const auto ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace nextn::tok
