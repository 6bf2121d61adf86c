#include "speculative/drafter.h"

#include <cmath>

#include "core/error.h"

namespace nextn {

void Drafter::draft_logits(float*) { fail("--draft {}: this drafter cannot draft for sampling (temperature > 0)", name()); }

void Drafter::draft_step(int32_t) { fail("--draft {}: this drafter cannot draft for sampling (temperature > 0)", name()); }

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

}  // namespace nextn
