// The verify arms, a bench-only layer: how the target's LM head turns the K
// rows of a verify forward into target tokens and an acceptance length. All
// arms compute the same tokens; they differ in what they project
// (docs/speculative.md). The product runs the recorded verdict, batched, as
// the engine's BatchedHead (engine/head_stage.h); `nextn bench verify` and
// the tests swap ArmHeadStage in at the engine step's head, so every arm is
// measured through the production step with its counters checked per round.
//
//   arm      runtime call                  head path     rows_projected  logits bytes   walk_rows
//   batched  head_argmax(0, W)             Batched       W               W x V x 4      0
//   walk     head_walk(drafts)             Walk/WalkFlag a+1             (as written)   a+1
//   pad      head_argmax_padded(0, W, P)   Padded        P               P x V x 4      0
//   fused    head_argmax_fused(0, W)       Fused         W               0              0
//
// W is the round's verify width (K, or fewer in a last round cut by the token
// budget), `a` the number of drafts accepted and V the vocabulary. Batched is
// ModelRuntime's head; the others are the runtime's VerifyHeadArms
// (model/bench_interfaces.h), which the verifier reaches with verify_arms_of.
//
// Every number in that table comes from the runtime: the verifier diffs
// ModelRuntime::head_work() around its call and checks the row of the arm it
// was built for, per round. It never writes a counter itself, so a runtime
// that runs another path than the one asked for (the planted faults, core/fault.h)
// is caught by its own counters.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/fault.h"
#include "engine/generate.h"
#include "engine/head_stage.h"
#include "model/runtime.h"
#include "speculative/verify_counters.h"

namespace nextn {

class ModelRuntime;

enum class VerifyArm { Batched, Walk, Pad, Fused, Auto };

const char* verify_arm_name(VerifyArm arm);
VerifyArm parse_verify_arm(const std::string& name);  // throws Error listing the arms
// A comma-separated list of concrete arms (no auto); throws Error.
std::vector<VerifyArm> parse_verify_arms(const std::string& list);

// The pad arm's width: `requested` (0: default = the smallest multiple of 16
// above K, capped at 64). Throws Error when the width would not exceed K or
// exceeds 64 (so K = 64 has no pad arm).
int resolve_pad_width(int block_size, int requested);

// The arm a runtime head path belongs to (Walk and WalkFlag: walk; None: Auto,
// which is no concrete arm).
VerifyArm arm_of_path(HeadPath path);

struct VerifyOutcome {
  int accepted = 0;     // drafts accepted (longest matching prefix)
  int32_t next = 0;     // the target's token at row `accepted` (bonus / correction)
  int walk_steps = 0;   // head_walk's return value (walk calls only)
  // Copied from the runtime: head_work() after the call minus before.
  int64_t rows_projected = 0, head_bytes_read = 0, logits_bytes_written = 0, walk_rows = 0, head_calls = 0;
  HeadPath path = HeadPath::None;        // the runtime's last_path after the call
  VerifyArm taken = VerifyArm::Batched;  // arm_of_path(path)
  std::vector<std::string> violations;   // this round's identity failures (empty when consistent)
};

// One arm, resolved (never Auto). Call after target_forward over
// [bonus, drafts...] (W = drafts.size() + 1 rows).
class Verifier {
 public:
  Verifier(VerifyArm arm, int pad_width, Fault fault);
  VerifyOutcome verify(ModelRuntime& rt, std::span<const int32_t> drafts);
  VerifyArm arm() const { return arm_; }
  int pad_width() const { return pad_width_; }

 private:
  void check_round(const ModelRuntime& rt, int W, VerifyOutcome& r) const;
  VerifyArm arm_;
  int pad_width_;
  Fault fault_;
  std::vector<int32_t> out_;
};

// An arm as a benchmark asks for it.
struct ArmChoice {
  VerifyArm arm = VerifyArm::Batched;  // concrete (auto resolved by bench/calibration.h)
  int pad_width = 0;                   // pad: 0 = default for K (resolve_pad_width)
  bool chosen_by_auto = false;         // stats then say verify_requested "auto", with auto's source and reason
  std::string auto_source, auto_reason;
  Fault fault = Fault::None;           // walk-as-batched: planted in the Verifier (bench verify --fault, tests)
};

// The engine step's head stage running one arm through a Verifier: verify
// rounds go through the arm and add its counters per round; prefill and plain
// decode rows take the one-row argmax every arm shares. choice.fault plants
// the verifier's fault (core/fault.h).
class ArmHeadStage final : public HeadStage {
 public:
  // pad_width: resolved already (resolve_pad_width) for the pad arm.
  explicit ArmHeadStage(const ArmChoice& choice);
  void pick(SequenceGroup& group, std::span<const HeadPick> picks) override;
  bool records_rounds() const override { return true; }
  // Labels a finished run's stats with the arm: requested ("auto" when auto
  // chose it), chosen, pad width, auto's source and reason.
  void label(GenerateStats& stats) const;

 private:
  ArmChoice choice_;
  Verifier verifier_;
};

// generate() (engine/generate.h) with `choice`'s arm at the head, the
// stats labelled. The pad width is resolved from options.block_size.
GenerateResult generate_verify_arm(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& options,
                                   const ArmChoice& choice, const std::vector<int32_t>* oracle_truth = nullptr);

// generate_fresh() (engine/generate.h) with `arm` at the head (pad: the
// default width for options.block_size), the stats labelled.
GenerateResult generate_fresh_verify_arm(const RuntimeFactory& factory, std::span<const int32_t> prompt,
                                         const GenerateOptions& options, VerifyArm arm);

}  // namespace nextn
