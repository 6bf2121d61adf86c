// K per step (docs/engine.md, "K per step"): every step, each speculative
// sequence's block size is chosen from its acceptance so far and a cost
// model of a step measured on this machine, so that the step's expected
// tokens per millisecond is the largest the model predicts. At one stream a
// wide block is nearly free and K grows; at many streams every extra row
// costs a row of the shared trunk and K falls toward 1 (plain decoding plus
// the MTP head's pairing) by itself.
//
//   expected tokens of K:   E(K) = 1 + sum_{j=1}^{K-1} prod_{i<j} alpha_i
//   alpha_i                 P(draft i+1 accepted | drafts 1..i accepted),
//                           the sequence's counts shrunk toward the pooled
//                           estimate of every sequence (4 pseudo-rounds)
//   step cost               verify_ms(sequences, rows) + draft_ms(chain, drafts)
//
// verify_ms: per power-of-two bucket of sequences, a table over total rows,
// seeded by probe_step_costs (forwards of n sequences x K rows at start) and
// updated by every decode step (an exponential average); between measured
// row counts it interpolates, past the widest it scales with the rows.
// draft_ms: a least-squares line over the chained draft steps and the draft
// tokens of recent steps. A sequence with no acceptance of its own drafts
// at least one token in its first rounds, and once it stopped drafting it
// drafts one round in 16 x max(1, sequences / 2) (the estimate must see
// drafts to recover; with many sequences a re-drafting round is rarer, so
// that the rounds re-drafting stay about one step in eight). The
// choice never changes what a sequence
// computes: greedy output is exact at every K, and a sampled round keeps the
// plain sampling distribution at any K decided before its draws.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "model/batch_runtime.h"
#include "speculative/generation.h"

namespace nextn {

// Positions probe_step_costs takes from each slot it probes on.
constexpr int kProbePositions = 13;

// One speculative sequence as the chooser sees it.
struct BlockCandidate {
  int max_k = 1;                          // at most this (the widest block, the tokens left)
  std::span<const int64_t> offered;       // offered[i]: rounds whose draft i+1 followed accepted ones
  std::span<const int64_t> accepted;      // accepted[i]: of those, rounds whose draft i+1 was accepted
  int rounds_without_drafts = 0;          // consecutive rounds it ran at K = 1
};

// What the last choice saw and picked (for /metrics and the JSON stats).
struct BlockChoiceReport {
  int sequences = 0;                // in the step
  int speculative = 0;              // of those, choosing a K
  double predicted_ms = 0;          // the cost model's step time for the choice
  double expected_tokens = 0;       // the tokens it expects the step to commit
  std::vector<double> pooled_acceptance;  // alpha_i of every sequence together
};

class BlockChooser {
 public:
  virtual ~BlockChooser() = default;
  // k[i] in [1, candidates[i].max_k] for each candidate; `plain` sequences
  // (no drafter) share the step with one row each.
  virtual void choose(std::span<const BlockCandidate> candidates, int plain, std::span<int> k) = 0;
  // After a decode step (no prompt rows): its sequences and trunk rows and
  // the milliseconds from its forward to its rollback; its draft stage (the
  // longest chain and the draft tokens) and that stage's milliseconds.
  virtual void observe_step(int /*sequences*/, int /*rows*/, double /*verify_ms*/, int /*chain*/, int /*drafts*/,
                            double /*draft_ms*/) {}
  // One verify round of any sequence: how many drafts followed accepted
  // ones (offered) and how many of them were accepted.
  virtual void observe_round(int /*offered*/, int /*accepted*/) {}
  virtual const BlockChoiceReport& report() const = 0;
};

// The product's chooser: the cost model above.
class CostModelChooser final : public BlockChooser {
 public:
  void choose(std::span<const BlockCandidate> candidates, int plain, std::span<int> k) override;
  void observe_step(int sequences, int rows, double verify_ms, int chain, int drafts, double draft_ms) override;
  void observe_round(int offered, int accepted) override;
  const BlockChoiceReport& report() const override { return report_; }

  // A measured verify step (probe_step_costs, observe_step).
  void record_verify(int sequences, int rows, double ms);
  // A step that carried prompt rows within the stall budget
  // (engine/prefill_budget.h): what it took against what the verify table
  // predicts for its rows. Prompt rows attend to a context the probe never
  // had, so their steps may cost more than decode rows; prompt_scale()
  // follows the ratio (an exponential average; 1 before any such step, and
  // while nothing is measured).
  void observe_prompt_step(int sequences, int rows, double ms);
  double prompt_scale() const { return prompt_scale_; }
  // The model's step time (milliseconds): verify of `rows` over `sequences`
  // plus a draft stage of `chain` chained steps and `drafts` tokens.
  double predicted_ms(int sequences, int rows, int chain, int drafts) const;
  // The measured table: (sequence bucket, rows) -> milliseconds.
  std::map<std::pair<int, int>, double> verify_table() const;
  // alpha_i of a sequence with these counts (pooled: the engine-wide estimate).
  double acceptance(std::span<const int64_t> offered, std::span<const int64_t> accepted, int position) const;
  double pooled_acceptance(int position) const;

 private:
  double verify_ms(int sequences, int rows) const;
  double draft_ms(int chain, int drafts) const;
  std::map<int, std::map<int, double>> verify_;  // bucket -> rows -> ms
  // draft_ms = a * chain + b * drafts, fitted over recent steps (decayed sums).
  double sxx_ = 0, sxy_ = 0, syy_ = 0, sxt_ = 0, syt_ = 0;
  int draft_steps_ = 0;
  double prompt_scale_ = 1.0;
  std::vector<double> pooled_offered_, pooled_accepted_;
  BlockChoiceReport report_;
};

// Seeds `chooser` with forwards of n of the `slots` (fresh sequences of
// `group`; n = 1, 2, 4, ... up to all of them) at K = 1, 2, 4, 8 rows each
// (up to max_k), each with its LM-head argmax, the fastest of two after a
// warm-up, resetting the slots after each n (each needs kProbePositions). Runs before any request: what it measures is this
// machine and this model.
void probe_step_costs(SequenceGroup& group, std::span<ModelRuntime* const> slots, int max_k,
                      CostModelChooser& chooser);

}  // namespace nextn
