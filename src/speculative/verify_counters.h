// What the verify rounds of one generation did, as the runtime counted it
// (rows its LM head projected, bytes read and written, the head paths it
// took), and the identities those counters must satisfy for the arm that
// ran (counter_violations). The product runs the batched arm; the other
// arms are measured by `nextn bench verify` (bench/verify_arms.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nextn {

constexpr int kMinBlockSize = 2;
constexpr int kMaxBlockSize = 64;
constexpr int kMaxPadWidth = 64;

// Throws Error unless 2 <= K <= 64.
void check_block_size(int block_size);

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
