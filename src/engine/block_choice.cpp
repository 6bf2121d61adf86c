#include "engine/block_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace nextn {
namespace {

constexpr double kPseudoRounds = 4.0;   // a sequence's own counts outweigh the pool after a few rounds
constexpr double kPooledPrior = 2.0;    // the pool's position i starts at position i-1's estimate
constexpr double kVerifyAverage = 0.25; // weight of a new measured step in its table cell
constexpr double kDraftDecay = 0.97;    // the draft line forgets old steps
constexpr double kPoolDecay = 0.9995;   // the pool follows a changing workload
constexpr int kExploreAfter = 16;       // rounds at K = 1 before one round drafts again, at one or two sequences
constexpr int kExplorersPerStep = 2;    // ... and more rounds with more sequences: about kExplorersPerStep / kExploreAfter per step
constexpr int kFirstRounds = 2;         // rounds a new sequence drafts at least one token
constexpr int kRefinePasses = 3;

int bucket(int sequences) {
  int b = 1;
  while (b * 2 <= sequences) b *= 2;
  return b;
}

}  // namespace

void CostModelChooser::record_verify(int sequences, int rows, double ms) {
  if (sequences < 1 || rows < 1 || !(ms > 0)) return;
  auto& table = verify_[bucket(sequences)];
  auto [it, fresh] = table.emplace(rows, ms);
  if (!fresh) it->second += kVerifyAverage * (ms - it->second);
}

void CostModelChooser::observe_prompt_step(int sequences, int rows, double ms) {
  // Without a measured table the prediction is a row count, not milliseconds: nothing to compare.
  if (sequences < 1 || rows < 1 || !(ms > 0) || verify_.empty()) return;
  prompt_scale_ += kVerifyAverage * (ms / verify_ms(sequences, rows) - prompt_scale_);
}

std::map<std::pair<int, int>, double> CostModelChooser::verify_table() const {
  std::map<std::pair<int, int>, double> out;
  for (const auto& [b, table] : verify_)
    for (const auto& [rows, ms] : table) out[{b, rows}] = ms;
  return out;
}

double CostModelChooser::verify_ms(int sequences, int rows) const {
  if (verify_.empty()) return double(rows);  // nothing measured: every row costs the same, so K stays 1
  // The sequences' own bucket, else the nearest measured one below, else above.
  auto it = verify_.upper_bound(bucket(sequences));
  if (it != verify_.begin()) --it;
  const std::map<int, double>& table = it->second;
  const auto above = table.lower_bound(rows);
  if (above != table.end() && above->first == rows) return above->second;
  if (above == table.begin()) return above->second;  // fewer rows than any measured: no cheaper
  const auto below = std::prev(above);
  if (above == table.end()) return below->second * double(rows) / double(below->first);  // wider: rows scale
  const double f = double(rows - below->first) / double(above->first - below->first);
  return below->second + f * (above->second - below->second);
}

void CostModelChooser::observe_step(int sequences, int rows, double verify_ms, int chain, int drafts, double draft_ms) {
  record_verify(sequences, rows, verify_ms);
  if (chain < 1 || drafts < 1 || !(draft_ms >= 0)) return;
  const double x = chain, y = drafts;
  sxx_ = kDraftDecay * sxx_ + x * x;
  sxy_ = kDraftDecay * sxy_ + x * y;
  syy_ = kDraftDecay * syy_ + y * y;
  sxt_ = kDraftDecay * sxt_ + x * draft_ms;
  syt_ = kDraftDecay * syt_ + y * draft_ms;
  ++draft_steps_;
}

double CostModelChooser::draft_ms(int chain, int drafts) const {
  if (chain < 1 || draft_steps_ == 0) return 0.0;
  // Least squares of ms = a * chain + b * drafts (ridge: steps of one mix make the sums collinear).
  const double ridge = 1e-3 * (sxx_ + syy_) + 1e-12;
  const double axx = sxx_ + ridge, ayy = syy_ + ridge;
  const double det = axx * ayy - sxy_ * sxy_;
  double a = (sxt_ * ayy - syt_ * sxy_) / det;
  double b = (syt_ * axx - sxt_ * sxy_) / det;
  if (a < 0) a = 0, b = syt_ / ayy;
  if (b < 0) b = 0, a = sxt_ / axx;
  return std::max(0.0, a * chain + b * drafts);
}

double CostModelChooser::predicted_ms(int sequences, int rows, int chain, int drafts) const {
  return std::max(1e-6, verify_ms(sequences, rows) + draft_ms(chain, drafts));
}

void CostModelChooser::observe_round(int offered, int accepted) {
  const size_t need = size_t(std::max(offered, 0));
  if (pooled_offered_.size() < need) pooled_offered_.resize(need, 0.0), pooled_accepted_.resize(need, 0.0);
  for (size_t i = 0; i < pooled_offered_.size(); ++i) {
    pooled_offered_[i] *= kPoolDecay;
    pooled_accepted_[i] *= kPoolDecay;
  }
  for (int i = 0; i < offered; ++i) pooled_offered_[size_t(i)] += 1;
  for (int i = 0; i < accepted; ++i) pooled_accepted_[size_t(i)] += 1;
}

double CostModelChooser::pooled_acceptance(int position) const {
  double g = 0.5;
  for (int i = 0; i <= position; ++i) {
    const double off = size_t(i) < pooled_offered_.size() ? pooled_offered_[size_t(i)] : 0.0;
    const double acc = size_t(i) < pooled_accepted_.size() ? pooled_accepted_[size_t(i)] : 0.0;
    g = (acc + kPooledPrior * g) / (off + kPooledPrior);
  }
  return g;
}

double CostModelChooser::acceptance(std::span<const int64_t> offered, std::span<const int64_t> accepted,
                                    int position) const {
  const size_t i = size_t(position);
  const double off = i < offered.size() ? double(offered[i]) : 0.0;
  const double acc = i < accepted.size() ? double(accepted[i]) : 0.0;
  return (acc + kPseudoRounds * pooled_acceptance(position)) / (off + kPseudoRounds);
}

void CostModelChooser::choose(std::span<const BlockCandidate> candidates, int plain, std::span<int> k) {
  const int n = int(candidates.size());
  const int sequences = n + plain;
  // gain[s][K-1]: E(K) of sequence s.
  std::vector<std::vector<double>> gain(static_cast<size_t>(n));
  int widest = 1;
  for (int s = 0; s < n; ++s) {
    const BlockCandidate& c = candidates[size_t(s)];
    const int max_k = std::max(1, c.max_k);
    widest = std::max(widest, max_k);
    auto& e = gain[size_t(s)];
    e.assign(size_t(max_k), 1.0);
    double reach = 1.0;
    for (int K = 2; K <= max_k; ++K) {
      reach *= acceptance(c.offered, c.accepted, K - 2);
      e[size_t(K - 1)] = e[size_t(K - 2)] + reach;
    }
  }
  auto rate = [&](std::span<const int> ks, double* ms_out = nullptr, double* tokens_out = nullptr) {
    int rows = plain, chain = 0, drafts = 0;
    double tokens = plain;
    for (int s = 0; s < n; ++s) {
      const int K = ks[size_t(s)];
      rows += K;
      chain = std::max(chain, K - 1);
      drafts += K - 1;
      tokens += gain[size_t(s)][size_t(K - 1)];
    }
    const double ms = predicted_ms(sequences, rows, chain, drafts);
    if (ms_out) *ms_out = ms;
    if (tokens_out) *tokens_out = tokens;
    return tokens / ms;
  };
  std::vector<int> best(static_cast<size_t>(n), 1), trial(static_cast<size_t>(n));
  double best_rate = rate(best);
  for (int u = 2; u <= widest; ++u) {  // every sequence at the same K first (the draft chain's fixed cost is shared)
    for (int s = 0; s < n; ++s) trial[size_t(s)] = std::min(u, std::max(1, candidates[size_t(s)].max_k));
    const double r = rate(trial);
    if (r > best_rate) best_rate = r, best = trial;
  }
  for (int pass = 0; pass < kRefinePasses; ++pass) {  // then each sequence a step up or down
    bool moved = false;
    for (int s = 0; s < n; ++s) {
      for (const int step : {1, -1}) {
        const int K = best[size_t(s)] + step;
        if (K < 1 || K > std::max(1, candidates[size_t(s)].max_k)) continue;
        trial = best;
        trial[size_t(s)] = K;
        const double r = rate(trial);
        if (r > best_rate) best_rate = r, best = trial, moved = true;
      }
    }
    if (!moved) break;
  }
  // A re-drafting round costs its step a pairing pass, a draft chain and a
  // verify row; with many sequences it comes that much less often, so that a
  // head that never hits costs about the same share of steps at any
  // concurrency (measured: at 32 streams on the 27B shape, one sequence in
  // 16 re-drafting every step cost 9 % of plain decoding).
  const int explore_after = kExploreAfter * std::max(1, sequences / kExplorersPerStep);
  for (int s = 0; s < n; ++s) {
    const BlockCandidate& c = candidates[size_t(s)];
    // A sequence drafts at least one token in its first rounds (it has no
    // acceptance of its own yet) and now and then after it stopped drafting,
    // so its estimate can recover when its text becomes predictable again.
    const bool unmeasured = c.offered.empty() || c.offered[0] < kFirstRounds;
    if (best[size_t(s)] == 1 && c.max_k >= 2 && (unmeasured || c.rounds_without_drafts >= explore_after))
      best[size_t(s)] = 2;
    k[size_t(s)] = best[size_t(s)];
  }
  report_.sequences = sequences;
  report_.speculative = n;
  rate(best, &report_.predicted_ms, &report_.expected_tokens);
  const int positions = std::max(widest - 1, int(pooled_offered_.size()));
  report_.pooled_acceptance.resize(size_t(positions));
  for (int i = 0; i < positions; ++i) report_.pooled_acceptance[size_t(i)] = pooled_acceptance(i);
}

void probe_step_costs(SequenceGroup& group, std::span<ModelRuntime* const> slots, int max_k,
                      CostModelChooser& chooser) {
  using Clock = std::chrono::steady_clock;
  for (ModelRuntime* s : slots)
    if (s->target_length() != 0) fail("internal: the step-cost probe needs fresh sequences");
  const std::vector<int32_t> one = {0};
  for (size_t n = 1; n <= slots.size(); n *= 2) {
    const auto seqs = slots.first(n);
    std::vector<std::span<const int32_t>> prompts(n, std::span<const int32_t>(one));
    group.forward_together(seqs, prompts);
    for (int K : {1, 2, 4, 8}) {
      if (K > max_k) break;
      const std::vector<int32_t> block(size_t(K), 0);
      std::vector<std::span<const int32_t>> rows(n, std::span<const int32_t>(block));
      std::vector<SequenceRows> heads;
      for (ModelRuntime* s : seqs) heads.push_back({s, 0, K});
      std::vector<int32_t> picks(n * size_t(K));
      double fastest = std::numeric_limits<double>::infinity();
      for (int rep = 0; rep < 3; ++rep) {  // the first captures graphs and warms caches
        const auto t0 = Clock::now();
        group.forward_together(seqs, rows);
        group.head_argmax_together(heads, picks.data());
        for (ModelRuntime* s : seqs) s->target_rollback(1);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (rep > 0) fastest = std::min(fastest, ms);
      }
      chooser.record_verify(int(n), int(n) * K, fastest);
    }
    for (ModelRuntime* s : seqs) s->reset();
  }
}

}  // namespace nextn
