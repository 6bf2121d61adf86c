#include "speculative/drafter.h"

#include <cmath>

#include "core/error.h"
#include "model/runtime.h"

namespace nextn {

void Drafter::draft_logits(float*) { fail("--draft {}: this drafter cannot draft for sampling (temperature > 0)", name()); }

void Drafter::draft_step(int32_t) { fail("--draft {}: this drafter cannot draft for sampling (temperature > 0)", name()); }

// ---- MTP ----

MtpDrafter::MtpDrafter(ModelRuntime& rt) : rt_(rt) {}

void MtpDrafter::begin(std::span<const int32_t> prompt, int32_t first) {
  // Entries 0..n-1: (x_1, h_0) ... (x_n = first, h_{n-1}).
  if (rt_.mtp_length() != 0) fail("internal: the MTP cache is not empty at the start of a sequence");
  if (rt_.target_length() != int(prompt.size())) fail("internal: MtpDrafter::begin must follow the prefill");
  buf_.assign(prompt.begin() + 1, prompt.end());
  buf_.push_back(first);
  rt_.mtp_forward(buf_, 0);
  committed_ = int(prompt.size());
}

void MtpDrafter::propose(int n, std::vector<int32_t>& out) {
  out.resize(size_t(n));
  if (n == 0) return;
  rt_.mtp_draft(n, out.data());  // chained from the last entry of the latest mtp_forward
}

void MtpDrafter::draft_logits(float* out) { rt_.mtp_logits(out); }

void MtpDrafter::draft_step(int32_t token) { rt_.mtp_step(token); }

void MtpDrafter::commit(std::span<const int32_t> drafts, int accepted, int32_t next) {
  // Drop the chained speculative entries, then pair the committed tokens
  // d_1..d_a, next with the verify rows 0..a (the true post-norm hiddens).
  rt_.mtp_rollback(committed_);
  buf_.assign(drafts.begin(), drafts.begin() + accepted);
  buf_.push_back(next);
  rt_.mtp_forward(buf_, 0);
  committed_ += accepted + 1;
  if (committed_ != rt_.target_length())
    fail("internal: MTP holds {} entries, target {} positions", committed_, rt_.target_length());
}

// ---- oracle ----

void check_oracle_spec(const OracleSpec& spec) {
  const bool rate = spec.accept_rate >= 0.0 || std::isnan(spec.accept_rate);
  if (rate && !spec.pattern.empty()) fail("--accept-rate and --accept-pattern are exclusive: give one");
  if (rate) {
    if (!(spec.accept_rate >= 0.0 && spec.accept_rate <= 1.0))
      fail("--accept-rate {} is outside [0, 1]", spec.accept_rate);
    return;
  }
  if (spec.pattern.empty()) fail("--draft oracle needs --accept-rate p or --accept-pattern 1101...");
  for (char c : spec.pattern)
    if (c != '0' && c != '1') fail("--accept-pattern '{}': only the characters 0 and 1 are allowed", spec.pattern);
}

OracleSpec oracle_spec_from_flags(const std::string& draft, const double* accept_rate, const std::string* pattern,
                                  const uint64_t* seed) {
  OracleSpec o;
  if (draft != "oracle") {
    if (accept_rate || pattern || seed) fail("--accept-rate, --accept-pattern and --seed apply to --draft oracle only");
    return o;
  }
  if (accept_rate) o.accept_rate = *accept_rate;
  if (pattern) {
    if (pattern->empty()) fail("--accept-pattern: the pattern is empty (use 0s and 1s, e.g. 1101)");
    o.pattern = *pattern;
  }
  if (seed) o.seed = *seed;
  check_oracle_spec(o);
  return o;
}

OracleDrafter::OracleDrafter(std::vector<int32_t> truth, const OracleSpec& spec, int vocab)
    : truth_(std::move(truth)), spec_(spec), vocab_(vocab), rng_(spec.seed) {
  check_oracle_spec(spec_);
}

void OracleDrafter::begin(std::span<const int32_t>, int32_t first) {
  if (truth_.empty() || truth_[0] != first)
    fail("internal: the oracle's greedy run does not start with the target's first token");
  committed_ = 1;
}

bool OracleDrafter::draw() {
  if (spec_.accept_rate >= 0.0) {
    const double u = double(rng_() >> 11) * 0x1.0p-53;  // uniform [0, 1), portable
    return u < spec_.accept_rate;
  }
  const bool hit = spec_.pattern[pattern_pos_] == '1';
  pattern_pos_ = (pattern_pos_ + 1) % spec_.pattern.size();
  return hit;
}

void OracleDrafter::propose(int n, std::vector<int32_t>& out) {
  out.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    const size_t pos = committed_ + size_t(i);
    const bool hit = draw();  // one draw per drafted token, past the truth's end too
    if (pos >= truth_.size()) {
      out[size_t(i)] = 0;
      continue;
    }
    const int32_t t = truth_[pos];
    out[size_t(i)] = hit ? t : int32_t((int64_t(t) + 1) % vocab_);
  }
}

void OracleDrafter::commit(std::span<const int32_t>, int accepted, int32_t) {
  // A divergence from the truth is not detected here: callers compare the
  // outputs (an inexact backend must show up as a token mismatch).
  committed_ += size_t(accepted) + 1;
}

// ---- oracle at MTP cost ----

OracleAtMtpCostDrafter::OracleAtMtpCostDrafter(ModelRuntime& rt, std::vector<int32_t> truth, const OracleSpec& spec)
    : mtp_(rt), oracle_(std::move(truth), spec, rt.vocab()) {}

void OracleAtMtpCostDrafter::begin(std::span<const int32_t> prompt, int32_t first) {
  mtp_.begin(prompt, first);
  oracle_.begin(prompt, first);
}

void OracleAtMtpCostDrafter::propose(int n, std::vector<int32_t>& out) {
  mtp_.propose(n, discarded_);  // the cost: the chain runs, its tokens are dropped
  oracle_.propose(n, out);
}

void OracleAtMtpCostDrafter::commit(std::span<const int32_t> drafts, int accepted, int32_t next) {
  mtp_.commit(drafts, accepted, next);  // pairs the committed (oracle) tokens with the verify rows
  oracle_.commit(drafts, accepted, next);
}

}  // namespace nextn
