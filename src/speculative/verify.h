// The verify arms: how the target's LM head turns the K rows of a verify
// forward into target tokens and an acceptance length. All arms compute the
// same tokens; they differ in what they project, and each is counted so a
// harness can prove which one ran (docs/speculative.md).
//
//   batched  head_argmax(0, W, W)      all W rows projected     rows += W
//   walk     head_walk(drafts)         rows 0..first mismatch   rows += a+1, walk_steps += a+1
//   pad      head_argmax(0, W, P)      P >= W rows (zero pad)   rows += P
//   fused    head_argmax_fused(0, W)   argmax fused, no logits  rows += W
//
// W is the round's verify width (K, or fewer in a last round cut by the token
// budget) and `a` the number of drafts accepted.
//
// Counters are bumped by the code path that actually ran, never by the arm
// that was asked for: a fault that makes one arm run another's path shows up
// in the counters (the fault hook below exists to prove that).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/fault.h"

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

struct VerifyOutcome {
  int accepted = 0;     // drafts accepted (longest matching prefix)
  int32_t next = 0;     // the target's token at row `accepted` (bonus / correction)
  int rows_projected = 0;
  int walk_steps = 0;
  VerifyArm taken = VerifyArm::Batched;  // the path that ran
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
  VerifyArm arm_;
  int pad_width_;
  Fault fault_;
  std::vector<int32_t> out_;
};

// Run totals a harness checks against an arm's identity.
struct VerifyCounters {
  int64_t rounds = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
  std::vector<int64_t> accepted_at;  // [i]: rounds where draft i (0-based) was accepted
  int64_t rows_projected = 0;
  int64_t walk_steps = 0;
  int block_size = 0;
  int pad_width = 0;  // pad arm only
  std::string verify_requested, verify_taken;
};

// Every way `c` breaks the identity of the arm it claims (`requested`, or
// for auto the arm taken); empty when consistent.
std::vector<std::string> counter_violations(const VerifyCounters& c);

}  // namespace nextn
