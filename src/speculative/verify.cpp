#include "speculative/verify.h"

#include <numeric>

#include "core/error.h"
#include "model/runtime.h"

namespace nextn {

const char* verify_arm_name(VerifyArm arm) {
  switch (arm) {
    case VerifyArm::Batched: return "batched";
    case VerifyArm::Walk: return "walk";
    case VerifyArm::Pad: return "pad";
    case VerifyArm::Fused: return "fused";
    case VerifyArm::Auto: return "auto";
  }
  return "?";
}

VerifyArm parse_verify_arm(const std::string& name) {
  for (VerifyArm a : {VerifyArm::Batched, VerifyArm::Walk, VerifyArm::Pad, VerifyArm::Fused, VerifyArm::Auto})
    if (name == verify_arm_name(a)) return a;
  fail("--verify: unknown arm '{}' (expected batched, walk, pad, fused or auto)", name);
}

std::vector<VerifyArm> parse_verify_arms(const std::string& list) {
  std::vector<VerifyArm> arms;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const VerifyArm a = parse_verify_arm(item);
    if (a == VerifyArm::Auto) fail("--verify: a benchmark measures concrete arms; 'auto' is not one");
    for (VerifyArm b : arms)
      if (a == b) fail("--verify: arm '{}' listed twice", item);
    arms.push_back(a);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return arms;
}

void check_block_size(int block_size) {
  if (block_size < kMinBlockSize || block_size > kMaxBlockSize)
    fail("--block-size {} is outside [{}, {}]", block_size, kMinBlockSize, kMaxBlockSize);
}

int resolve_pad_width(int block_size, int requested) {
  check_block_size(block_size);
  int p = requested;
  if (p == 0) p = std::min(kMaxPadWidth, (block_size / 16 + 1) * 16);
  if (p > kMaxPadWidth) fail("--pad-width {} exceeds {}", p, kMaxPadWidth);
  if (p <= block_size) {
    if (requested == 0)
      fail("the pad arm needs a width above the block size {}, and widths stop at {}: no pad arm at K = {}",
           block_size, kMaxPadWidth, block_size);
    fail("--pad-width {} must exceed the block size {} (a pad width equal to K is the batched arm)", p, block_size);
  }
  return p;
}

Verifier::Verifier(VerifyArm arm, int pad_width, Fault fault) : arm_(arm), pad_width_(pad_width), fault_(fault) {
  if (arm == VerifyArm::Auto) fail("internal: the auto arm must be resolved before verifying");
  if (arm == VerifyArm::Pad && (pad_width < 1 || pad_width > kMaxPadWidth)) fail("internal: pad width {}", pad_width);
}

VerifyOutcome Verifier::verify(ModelRuntime& rt, std::span<const int32_t> drafts) {
  const int W = int(drafts.size()) + 1;
  out_.assign(size_t(std::max(W, pad_width_)), 0);
  VerifyOutcome r;
  VerifyArm path = arm_;
  if (path == VerifyArm::Walk && fault_ == Fault::WalkAsBatched) path = VerifyArm::Batched;  // the planted fault
  r.taken = path;
  if (path == VerifyArm::Walk) {
    const int steps = rt.head_walk(drafts, out_.data());
    if (steps < 1 || steps > W) fail("internal: head_walk projected {} rows of {}", steps, W);
    r.rows_projected = steps;
    r.walk_steps = steps;
    r.accepted = steps - 1;
    for (int j = 0; j < r.accepted; ++j)
      if (out_[size_t(j)] != drafts[size_t(j)]) fail("internal: head_walk continued past a mismatch at row {}", j);
    if (r.accepted < W - 1 && out_[size_t(r.accepted)] == drafts[size_t(r.accepted)])
      fail("internal: head_walk stopped at row {} without a mismatch", r.accepted);
    r.next = out_[size_t(r.accepted)];
    return r;
  }
  if (path == VerifyArm::Batched) {
    rt.head_argmax(0, W, W, out_.data());
    r.rows_projected = W;
  } else if (path == VerifyArm::Pad) {
    if (pad_width_ < W) fail("internal: pad width {} below the verify width {}", pad_width_, W);
    rt.head_argmax(0, W, pad_width_, out_.data());
    r.rows_projected = pad_width_;
  } else {
    rt.head_argmax_fused(0, W, out_.data());
    r.rows_projected = W;
  }
  int a = 0;
  while (a < W - 1 && out_[size_t(a)] == drafts[size_t(a)]) ++a;
  r.accepted = a;
  r.next = out_[size_t(a)];
  return r;
}

std::vector<std::string> counter_violations(const VerifyCounters& c) {
  std::vector<std::string> v;
  auto need = [&](bool ok, std::string what) {
    if (!ok) v.push_back(std::move(what));
  };
  const std::string& arm = c.verify_requested == "auto" ? c.verify_taken : c.verify_requested;
  need(c.verify_taken == arm, fmt::format("verify_taken is '{}' but the arm is '{}'", c.verify_taken, arm));
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
  if (arm == "batched" || arm == "fused") {
    need(c.rows_projected == c.drafted + c.rounds,
         fmt::format("{}: rows_projected {} != drafted + rounds = {}", arm, c.rows_projected, c.drafted + c.rounds));
    need(c.walk_steps == 0, fmt::format("{}: walk_steps {} != 0", arm, c.walk_steps));
  } else if (arm == "walk") {
    need(c.rows_projected == c.accepted + c.rounds,
         fmt::format("walk: rows_projected {} != accepted + rounds = {}", c.rows_projected, c.accepted + c.rounds));
    need(c.walk_steps == c.rows_projected,
         fmt::format("walk: walk_steps {} != rows_projected {}", c.walk_steps, c.rows_projected));
    need(c.rounds == 0 || c.walk_steps > 0, "walk: no walk steps were taken");
  } else if (arm == "pad") {
    need(c.pad_width > c.block_size && c.pad_width <= kMaxPadWidth,
         fmt::format("pad: width {} not in ({}, {}]", c.pad_width, c.block_size, kMaxPadWidth));
    need(c.rows_projected == c.rounds * c.pad_width,
         fmt::format("pad: rows_projected {} != rounds x P = {}", c.rows_projected, c.rounds * c.pad_width));
    need(c.walk_steps == 0, fmt::format("pad: walk_steps {} != 0", c.walk_steps));
  } else {
    v.push_back(fmt::format("unknown arm '{}'", arm));
  }
  return v;
}

}  // namespace nextn
