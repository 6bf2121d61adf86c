// A toy ModelRuntime for testing the speculative loop independent of real
// weights. The "model" is a rolling hash: the state after position p is
// mix(state p-1, token p) and its argmax is state % vocab, so every prefix has
// one deterministic greedy continuation and multi-row calls are trivially
// exact. The MTP head is the same hash (a perfect drafter), corrupted at
// positions a salt selects, so acceptance lengths vary.
//
// The mock checks the loop's bookkeeping as it goes (throws on violation):
// MTP entry p must pair token p+1 with the target's row for position p,
// head calls must stay inside the last forward, rollbacks inside bounds.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "model/bench_interfaces.h"
#include "model/runtime.h"

namespace nextn::testing {

inline uint64_t mock_mix(uint64_t h, int32_t t) {
  uint64_t z = h ^ (uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct MockOptions {
  int vocab = 50;
  std::vector<int> eos;
  int mtp_layers = 1;
  uint64_t mtp_salt = 7;      // which MTP entries are corrupted
  int mtp_wrong_every = 3;    // an entry is corrupted when hash(p, salt) % this == 0 (0: never)
  bool inexact_fused = false;  // a planted backend bug: the fused arm's last row of a 3+ row call is off by one
  // A planted runtime fault: head_walk projects all rows through the batched
  // path (its counters say so) and returns what the walk would have.
  bool walk_as_batched = false;
  // A planted counting bug: head_walk reports one walk row less than it took.
  bool undercount_walk = false;
};

class MockRuntime final : public ModelRuntime, public MtpHead, public VerifyHeadArms {
 public:
  explicit MockRuntime(const MockOptions& o, int max_tokens) : o_(o), max_tokens_(max_tokens) {
    cfg_.model_type = "mock";
    cfg_.vocab_size = o.vocab;
    cfg_.eos_token_ids = o.eos;
    cfg_.mtp_num_hidden_layers = o.mtp_layers;
  }
  const Qwen35Config& config() const override { return cfg_; }
  const char* backend_name() const override { return "mock"; }
  int target_length() const override { return int(seq_.size()); }

  void target_forward(std::span<const int32_t> tokens) override {
    need(!tokens.empty(), "target_forward: no tokens");
    need(int(seq_.size() + tokens.size()) <= max_tokens_, "target_forward: capacity");
    last_start_ = int(seq_.size());
    last_T_ = int(tokens.size());
    for (int32_t t : tokens) {
      need(t >= 0 && t < o_.vocab, "target_forward: token outside vocab");
      const uint64_t prev = states_.empty() ? 0x1234 : states_.back();
      seq_.push_back(t);
      states_.push_back(mock_mix(prev, t));
    }
    rows_.assign(states_.end() - last_T_, states_.end());
    ++forwards;
    forward_widths.push_back(last_T_);
  }
  void target_rollback(int keep) override {
    need(keep >= 1 && keep <= last_T_, "target_rollback: keep outside [1, T]");
    seq_.resize(size_t(last_start_ + keep));
    states_.resize(seq_.size());
  }
  void head_argmax(int first, int count, int32_t* out) override { head_argmax_padded(first, count, count, out); }
  void head_argmax_padded(int first, int count, int width, int32_t* out) override {
    need(first >= 0 && count >= 0 && width >= count && first + count <= last_T_, "head_argmax: rows");
    for (int r = 0; r < count; ++r) out[r] = int32_t(rows_[size_t(first + r)] % uint64_t(o_.vocab));
    count_projection(width, width == count ? HeadPath::Batched : HeadPath::Padded);
    work_.logits_bytes_written += int64_t(width) * o_.vocab * 4;
  }
  void head_argmax_fused(int first, int count, int32_t* out) override {
    need(first >= 0 && count >= 0 && first + count <= last_T_, "head_argmax_fused: rows");
    for (int r = 0; r < count; ++r) out[r] = int32_t(rows_[size_t(first + r)] % uint64_t(o_.vocab));
    if (o_.inexact_fused && count >= 3) out[count - 1] = (out[count - 1] + 1) % o_.vocab;
    count_projection(count, HeadPath::Fused);
  }
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override {
    const int rows = std::min<int>(int(drafts.size()) + 1, last_T_);
    if (o_.walk_as_batched) {
      head_argmax(0, rows, out);
      int a = 0;
      while (a < int(drafts.size()) && a + 1 < rows && out[a] == drafts[size_t(a)]) ++a;
      return a + 1;
    }
    int taken = 0;
    for (int j = 0; j < rows; ++j) {
      out[j] = int32_t(rows_[size_t(j)] % uint64_t(o_.vocab));
      work_.rows_projected += 1;
      work_.head_bytes_read += kHeadBytes;
      work_.logits_bytes_written += int64_t(o_.vocab) * 4;
      ++taken;
      if (j == int(drafts.size()) || out[j] != drafts[size_t(j)]) break;
    }
    work_.walk_rows += o_.undercount_walk ? taken - 1 : taken;
    ++work_.head_calls;
    work_.last_path = HeadPath::Walk;
    return taken;
  }
  void head_logits(int, float*) override { throw std::logic_error("mock: head_logits"); }
  HeadWork head_work() const override { return work_; }
  void reset() override {
    seq_.clear();
    states_.clear();
    rows_.clear();
    last_start_ = last_T_ = 0;
    mtp_.clear();
    mtp_last_n_ = 0;
    work_ = HeadWork{};
    mtp_work_ = MtpWork{};
    ++resets;
  }

  MtpHead* mtp() override { return o_.mtp_layers > 0 ? this : nullptr; }

  // ---- MtpHead ----
  MtpWork mtp_work() const override { return mtp_work_; }
  int mtp_length() const override { return int(mtp_.size()); }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override {
    need(o_.mtp_layers > 0, "mtp_forward: no MTP head");
    need(!next_tokens.empty() && first_row >= 0 && first_row + int(next_tokens.size()) <= last_T_, "mtp_forward: rows");
    for (size_t i = 0; i < next_tokens.size(); ++i) {
      const int p = int(mtp_.size());
      const int row_pos = last_start_ + first_row + int(i);
      need(row_pos == p, "mtp_forward: entry " + std::to_string(p) + " paired with the row of position " +
                             std::to_string(row_pos));
      need(p < int(seq_.size()), "mtp_forward: entry past the target's committed positions");
      const int32_t tok = next_tokens[i];
      if (p + 1 < int(seq_.size()))
        need(tok == seq_[size_t(p + 1)], "mtp_forward: entry " + std::to_string(p) + " token is not token p+1");
      else
        need(tok == int32_t(states_[size_t(p)] % uint64_t(o_.vocab)), "mtp_forward: last entry token is not the bonus");
      mtp_.push_back(mock_mix(rows_[size_t(first_row) + i], tok));
    }
    mtp_work_.entries += int64_t(next_tokens.size());
    mtp_last_n_ = int(next_tokens.size());
  }
  void mtp_step(int32_t token) override {
    need(mtp_last_n_ > 0 && !mtp_.empty(), "mtp_step before mtp_forward");
    mtp_.push_back(mock_mix(mtp_.back(), token));
    mtp_last_n_ = 1;
    ++mtp_steps;
    ++mtp_work_.entries;
    ++mtp_work_.chained_steps;
  }
  void mtp_argmax(int count, int32_t* out) override {
    need(count >= 0 && count <= mtp_last_n_, "mtp_argmax: count");
    for (int i = 0; i < count; ++i) {
      const size_t e = mtp_.size() - size_t(count) + size_t(i);
      int32_t t = int32_t(mtp_[e] % uint64_t(o_.vocab));
      if (o_.mtp_wrong_every > 0 && mock_mix(o_.mtp_salt, int32_t(e)) % uint64_t(o_.mtp_wrong_every) == 0)
        t = (t + 1) % o_.vocab;
      out[i] = t;
    }
    mtp_work_.argmax_rows += count;
  }
  void mtp_rollback(int length) override {
    need(length >= 0 && length <= int(mtp_.size()), "mtp_rollback: length");
    mtp_.resize(size_t(length));
  }
  // The toy head has no logits to sample from and drafts over the whole vocabulary.
  void mtp_logits(float*) override { fail("the mock backend has no MTP logits (needed to sample drafts)"); }
  int draft_vocab() const override { return o_.vocab; }
  void set_draft_vocab(int n) override {
    if (effective_draft_vocab(n, o_.vocab) != o_.vocab) fail("--draft-vocab {}: the mock runtime cannot restrict its drafts", n);
  }

  static constexpr int64_t kHeadBytes = 1000;  // the toy head's "size", per projection pass
  int forwards = 0;
  int mtp_steps = 0;
  int resets = 0;
  std::vector<int> forward_widths;

 private:
  void count_projection(int rows, HeadPath path) {
    work_.rows_projected += rows;
    work_.head_bytes_read += kHeadBytes;
    ++work_.head_calls;
    work_.last_path = path;
  }
  static void need(bool ok, const std::string& what) {
    if (!ok) throw std::logic_error("mock runtime: " + what);
  }
  MockOptions o_;
  int max_tokens_;
  Qwen35Config cfg_;
  std::vector<int32_t> seq_;
  std::vector<uint64_t> states_;  // state after position p
  std::vector<uint64_t> rows_;    // rows of the last forward
  int last_start_ = 0, last_T_ = 0;
  std::vector<uint64_t> mtp_;  // MTP output "hidden" per entry
  int mtp_last_n_ = 0;
  HeadWork work_;
  MtpWork mtp_work_;
};

inline auto mock_factory(const MockOptions& o) {
  return [o](int max_tokens) -> std::unique_ptr<ModelRuntime> { return std::make_unique<MockRuntime>(o, max_tokens); };
}

}  // namespace nextn::testing
