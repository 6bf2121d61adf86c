// The verify arms: how the target's LM head turns the K rows of a verify
// forward into target tokens and an acceptance length. All arms compute the
// same tokens; they differ in what they project (docs/speculative.md).
//
//   arm      runtime call              head path     rows_projected  logits bytes   walk_rows
//   batched  head_argmax(0, W, W)      Batched       W               W x V x 4      0
//   walk     head_walk(drafts)         Walk/WalkFlag a+1             (as written)   a+1
//   pad      head_argmax(0, W, P)      Padded        P               P x V x 4      0
//   fused    head_argmax_fused(0, W)   Fused         W               0              0
//
// W is the round's verify width (K, or fewer in a last round cut by the token
// budget), `a` the number of drafts accepted and V the vocabulary.
//
// Every number in that table comes from the runtime: the verifier diffs
// ModelRuntime::head_work() around its call and checks the row of the arm it
// was built for, per round. It never writes a counter itself, so a runtime
// that runs another path than the one asked for (NEXTN_FAULT, core/fault.h)
// is caught by its own counters.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/fault.h"
#include "model/runtime.h"

namespace nextn {

class ModelRuntime;

enum class VerifyArm { Batched, Walk, Pad, Fused, Auto };

const char* verify_arm_name(VerifyArm arm);
VerifyArm parse_verify_arm(const std::string& name);  // throws Error listing the arms
// A comma-separated list of concrete arms (no auto); throws Error.
std::vector<VerifyArm> parse_verify_arms(const std::string& list);

constexpr int kMinBlockSize = 2;
constexpr int kMaxBlockSize = 64;
constexpr int kMaxPadWidth = 64;

// Throws Error unless 2 <= K <= 64.
void check_block_size(int block_size);
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

// Run totals a harness checks against an arm's identity. The head numbers are
// sums of the runtime's own counters over the verify calls.
struct VerifyCounters {
  int64_t rounds = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
  std::vector<int64_t> accepted_at;  // [i]: rounds where draft i (0-based) was accepted
  int64_t rows_projected = 0;        // runtime: rows that read the head
  int64_t head_bytes_read = 0;       // runtime
  int64_t logits_bytes_written = 0;  // runtime
  int64_t walk_rows = 0;             // runtime: rows its walks took
  int64_t head_calls = 0;            // runtime: head entry points run by the verifier
  int64_t walk_steps = 0;            // sum of head_walk's return values
  std::vector<std::string> paths;    // runtime head paths seen (head_path_name), in first-seen order
  std::vector<std::string> round_violations;  // per-round identity failures (the first 20)
  int64_t round_violation_count = 0;
  int block_size = 0;
  int pad_width = 0;  // pad arm only
  int vocab = 0;
  // What was asked ("auto" included), the concrete arm the verifier was built
  // for (auto's recorded choice), and the arm the runtime's paths say ran.
  std::string verify_requested, verify_chosen, verify_taken;
};

// Every way `c` breaks the identity of the arm it was run with
// (`verify_chosen`, which must equal `verify_requested` unless that is auto);
// empty when consistent. Uses the runtime-reported numbers only.
std::vector<std::string> counter_violations(const VerifyCounters& c);

}  // namespace nextn
