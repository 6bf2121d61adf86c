#include "speculative/drafter.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace nextn {
namespace {
constexpr int kMaxRateList = 64;  // at least one per draft position of the widest block (63)
}  // namespace

void Drafter::draft_logits(float*) { fail("--draft {}: this drafter cannot draft for sampling (temperature > 0)", name()); }

void Drafter::draft_step(int32_t) { fail("--draft {}: this drafter cannot draft for sampling (temperature > 0)", name()); }

void Drafter::propose_together(std::span<Drafter* const> drafters, std::span<const int> n,
                               std::span<std::vector<int32_t>* const> out) {
  if (drafters.size() != n.size() || drafters.size() != out.size())
    fail("internal: propose_together of {} drafters, {} counts, {} outputs", drafters.size(), n.size(), out.size());
  for (size_t i = 0; i < drafters.size(); ++i) drafters[i]->propose(n[i], *out[i]);
}

// ---- oracle ----

void check_oracle_spec(const OracleSpec& spec) {
  const bool rate = spec.accept_rate >= 0.0 || std::isnan(spec.accept_rate);
  const int given = int(rate) + int(!spec.position_rates.empty()) + int(!spec.pattern.empty());
  if (given > 1) fail("--accept-rate, --accept-rates and --accept-pattern are exclusive: give one");
  if (given == 0) fail("--draft oracle needs --accept-rate p, --accept-rates p1,p2,... or --accept-pattern 1101...");
  if (rate) {
    if (!(spec.accept_rate >= 0.0 && spec.accept_rate <= 1.0))
      fail("--accept-rate {} is outside [0, 1]", spec.accept_rate);
    return;
  }
  for (double p : spec.position_rates)
    if (!(p >= 0.0 && p <= 1.0)) fail("--accept-rates: {} is outside [0, 1]", p);
  for (char c : spec.pattern)
    if (c != '0' && c != '1') fail("--accept-pattern '{}': only the characters 0 and 1 are allowed", spec.pattern);
}

std::vector<double> parse_position_rates(const std::string& list) {
  std::vector<double> rates;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    double v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size())
      fail("--accept-rates '{}': expected probabilities separated by commas (e.g. 0.9,0.8,0.7)", list);
    rates.push_back(v);
    if (rates.size() > size_t(kMaxRateList)) fail("--accept-rates: more than {} positions", kMaxRateList);
    at = comma + 1;
  }
  return rates;
}

OracleSpec oracle_spec_from_flags(const std::string& draft, const OracleFlags& f) {
  OracleSpec o;
  if (draft != "oracle") {
    if (f.accept_rate || f.position_rates || f.pattern || f.seed)
      fail("--accept-rate, --accept-rates, --accept-pattern and --seed apply to --draft oracle only");
    return o;
  }
  if (f.accept_rate) o.accept_rate = *f.accept_rate;
  if (f.position_rates) o.position_rates = parse_position_rates(*f.position_rates);
  if (f.pattern) {
    if (f.pattern->empty()) fail("--accept-pattern: the pattern is empty (use 0s and 1s, e.g. 1101)");
    o.pattern = *f.pattern;
  }
  if (f.seed) o.seed = *f.seed;
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

bool OracleDrafter::draw(int position) {
  const bool by_position = !spec_.position_rates.empty();
  if (spec_.accept_rate >= 0.0 || by_position) {
    const double p = by_position ? spec_.position_rates[std::min(size_t(position), spec_.position_rates.size() - 1)]
                                 : spec_.accept_rate;
    const double u = double(rng_() >> 11) * 0x1.0p-53;  // uniform [0, 1), portable
    return u < p;
  }
  const bool hit = spec_.pattern[pattern_pos_] == '1';
  pattern_pos_ = (pattern_pos_ + 1) % spec_.pattern.size();
  return hit;
}

void OracleDrafter::propose(int n, std::vector<int32_t>& out) {
  out.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    const size_t pos = committed_ + size_t(i);
    const bool hit = draw(i);  // one draw per drafted token, past the truth's end too
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
