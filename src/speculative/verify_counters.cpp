#include "speculative/verify_counters.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace nextn {

void check_block_size(int block_size) {
  if (block_size < kMinBlockSize || block_size > kMaxBlockSize)
    fail("--block-size {} is outside [{}, {}]", block_size, kMinBlockSize, kMaxBlockSize);
}

std::vector<std::string> counter_violations(const VerifyCounters& c) {
  std::vector<std::string> v;
  auto need = [&](bool ok, std::string what) {
    if (!ok) v.push_back(std::move(what));
  };
  const std::string& arm = c.verify_chosen;
  if (c.verify_requested != "auto")
    need(c.verify_chosen == c.verify_requested,
         fmt::format("the verifier ran arm '{}' but '{}' was requested", c.verify_chosen, c.verify_requested));
  const std::string expect_taken = c.rounds == 0 ? std::string("none") : arm;  // no round: no head path ran
  need(c.verify_taken == expect_taken,
       fmt::format("the runtime's head path says '{}' ran, the arm is '{}'", c.verify_taken, arm));
  need(c.accepted >= 0 && c.accepted <= c.drafted,
       fmt::format("accepted {} outside [0, drafted {}]", c.accepted, c.drafted));
  need(c.drafted <= c.rounds * (c.block_size - 1),
       fmt::format("drafted {} exceeds rounds {} x (K-1 = {})", c.drafted, c.rounds, c.block_size - 1));
  const int64_t at_sum = std::accumulate(c.accepted_at.begin(), c.accepted_at.end(), int64_t(0));
  need(at_sum == c.accepted, fmt::format("sum of accepted_at {} != accepted {}", at_sum, c.accepted));
  need(int(c.accepted_at.size()) == std::max(0, c.block_size - 1),
       fmt::format("accepted_at has {} entries, K-1 = {}", c.accepted_at.size(), c.block_size - 1));
  for (size_t i = 1; i < c.accepted_at.size(); ++i)
    need(c.accepted_at[i] <= c.accepted_at[i - 1],
         fmt::format("accepted_at[{}] = {} exceeds accepted_at[{}] = {}", i, c.accepted_at[i], i - 1, c.accepted_at[i - 1]));
  need(c.round_violation_count == 0,
       fmt::format("{} round(s) broke the identity, first: {}", c.round_violation_count,
                   c.round_violations.empty() ? std::string("?") : c.round_violations.front()));
  need(c.head_calls == c.rounds, fmt::format("{} head calls for {} rounds", c.head_calls, c.rounds));
  need(c.rounds == 0 || c.head_bytes_read > 0, "the runtime reports no head bytes read");
  const int64_t row_logits = int64_t(c.vocab) * int64_t(sizeof(float));
  auto only_path = [&](std::initializer_list<const char*> allowed) {
    for (const auto& p : c.paths) {
      bool ok = false;
      for (const char* a : allowed) ok |= p == a;
      need(ok, fmt::format("{}: the runtime ran head path '{}'", arm, p));
    }
    need(c.rounds == 0 || !c.paths.empty(), fmt::format("{}: no head path recorded", arm));
  };
  if (arm == "batched" || arm == "fused") {
    only_path({arm == "batched" ? "batched" : "fused"});
    need(c.rows_projected == c.drafted + c.rounds,
         fmt::format("{}: rows_projected {} != drafted + rounds = {}", arm, c.rows_projected, c.drafted + c.rounds));
    const int64_t logits = arm == "batched" ? c.rows_projected * row_logits : 0;
    need(c.logits_bytes_written == logits,
         fmt::format("{}: logits_bytes_written {} != {}", arm, c.logits_bytes_written, logits));
    need(c.walk_rows == 0 && c.walk_steps == 0,
         fmt::format("{}: walk_rows {}, walk_steps {} (expected 0)", arm, c.walk_rows, c.walk_steps));
  } else if (arm == "walk") {
    only_path({"walk", "walk-flag"});
    need(c.walk_rows == c.accepted + c.rounds,
         fmt::format("walk: walk_rows {} != accepted + rounds = {}", c.walk_rows, c.accepted + c.rounds));
    need(c.rows_projected == c.walk_rows,
         fmt::format("walk: rows_projected {} != walk_rows {}", c.rows_projected, c.walk_rows));
    need(c.walk_steps == c.walk_rows, fmt::format("walk: head_walk returned {} rows, the runtime counted {}",
                                                  c.walk_steps, c.walk_rows));
    need(c.rounds == 0 || c.walk_rows > 0, "walk: no walk rows were taken");
  } else if (arm == "pad") {
    only_path({"padded"});
    need(c.pad_width > c.block_size && c.pad_width <= kMaxPadWidth,
         fmt::format("pad: width {} not in ({}, {}]", c.pad_width, c.block_size, kMaxPadWidth));
    need(c.rows_projected == c.rounds * c.pad_width,
         fmt::format("pad: rows_projected {} != rounds x P = {}", c.rows_projected, c.rounds * c.pad_width));
    need(c.logits_bytes_written == c.rows_projected * row_logits,
         fmt::format("pad: logits_bytes_written {} != rows x V x 4 = {}", c.logits_bytes_written,
                     c.rows_projected * row_logits));
    need(c.walk_rows == 0 && c.walk_steps == 0,
         fmt::format("pad: walk_rows {}, walk_steps {} (expected 0)", c.walk_rows, c.walk_steps));
  } else {
    v.push_back(fmt::format("unknown arm '{}'", arm));
  }
  return v;
}

}  // namespace nextn
