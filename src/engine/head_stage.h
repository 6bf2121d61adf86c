// How an engine step turns target rows into tokens. The product's stage is
// BatchedHead: one LM-head argmax over every row of every sequence that
// needs a token (SequenceGroup::head_argmax_together). `nextn bench verify`
// swaps in the other verify arms (bench/verify_arms.h) to measure them
// through the same step; the product never runs them.
#pragma once
#include <cstdint>
#include <span>

#include "model/batch_runtime.h"
#include "speculative/verify_counters.h"

namespace nextn {

// One sequence's rows of this step that need argmax tokens.
struct HeadPick {
  ModelRuntime* sequence = nullptr;
  int first = 0, count = 0;          // rows of its last forward
  bool verify = false;               // a verify round: rows 0..count-1 over [bonus, drafts]
  std::span<const int32_t> drafts;   // verify: the count-1 drafts
  int32_t* out = nullptr;            // the picks (an early-exit arm fills rows up to the first mismatch)
  VerifyCounters* counters = nullptr;  // the sequence's run totals (an arm that records rounds adds to them)
};

class HeadStage {
 public:
  virtual ~HeadStage() = default;
  virtual void pick(SequenceGroup& group, std::span<const HeadPick> picks) = 0;
  // True when pick() adds each verify round's head numbers to the counters
  // itself; otherwise the engine copies the runtime's head counters once,
  // when the sequence ends.
  virtual bool records_rounds() const { return false; }
};

class BatchedHead final : public HeadStage {
 public:
  void pick(SequenceGroup& group, std::span<const HeadPick> picks) override;
};

}  // namespace nextn
