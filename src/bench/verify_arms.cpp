#include "bench/verify_arms.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "model/bench_interfaces.h"
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

VerifyArm arm_of_path(HeadPath path) {
  switch (path) {
    case HeadPath::Batched: return VerifyArm::Batched;
    case HeadPath::Padded: return VerifyArm::Pad;
    case HeadPath::Fused: return VerifyArm::Fused;
    case HeadPath::Walk:
    case HeadPath::WalkFlag: return VerifyArm::Walk;
    case HeadPath::None: break;
  }
  return VerifyArm::Auto;
}

Verifier::Verifier(VerifyArm arm, int pad_width, Fault fault) : arm_(arm), pad_width_(pad_width), fault_(fault) {
  if (arm == VerifyArm::Auto) fail("internal: the auto arm must be resolved before verifying");
  if (arm == VerifyArm::Pad && (pad_width < 1 || pad_width > kMaxPadWidth)) fail("internal: pad width {}", pad_width);
}

VerifyOutcome Verifier::verify(ModelRuntime& rt, std::span<const int32_t> drafts) {
  const int W = int(drafts.size()) + 1;
  out_.assign(size_t(std::max(W, pad_width_)), 0);
  VerifyOutcome r;
  VerifyArm call = arm_;
  if (call == VerifyArm::Walk && fault_ == Fault::WalkAsBatched) call = VerifyArm::Batched;  // the planted fault
  const HeadWork before = rt.head_work();
  if (call == VerifyArm::Walk) {
    const int steps = verify_arms_of(rt).head_walk(drafts, out_.data());
    if (steps < 1 || steps > W) fail("internal: head_walk projected {} rows of {}", steps, W);
    r.walk_steps = steps;
    r.accepted = steps - 1;
    for (int j = 0; j < r.accepted; ++j)
      if (out_[size_t(j)] != drafts[size_t(j)]) fail("internal: head_walk continued past a mismatch at row {}", j);
    if (r.accepted < W - 1 && out_[size_t(r.accepted)] == drafts[size_t(r.accepted)])
      fail("internal: head_walk stopped at row {} without a mismatch", r.accepted);
  } else {
    if (call == VerifyArm::Batched) {
      rt.head_argmax(0, W, out_.data());  // the product's head
    } else if (call == VerifyArm::Pad) {
      if (pad_width_ < W) fail("internal: pad width {} below the verify width {}", pad_width_, W);
      verify_arms_of(rt).head_argmax_padded(0, W, pad_width_, out_.data());
    } else {
      verify_arms_of(rt).head_argmax_fused(0, W, out_.data());
    }
    int a = 0;
    while (a < W - 1 && out_[size_t(a)] == drafts[size_t(a)]) ++a;
    r.accepted = a;
  }
  r.next = out_[size_t(r.accepted)];
  const HeadWork after = rt.head_work();
  r.rows_projected = after.rows_projected - before.rows_projected;
  r.head_bytes_read = after.head_bytes_read - before.head_bytes_read;
  r.logits_bytes_written = after.logits_bytes_written - before.logits_bytes_written;
  r.walk_rows = after.walk_rows - before.walk_rows;
  r.head_calls = after.head_calls - before.head_calls;
  r.path = after.last_path;
  r.taken = arm_of_path(r.path);
  check_round(rt, W, r);
  return r;
}

// The row of the identity table (verify_arms.h) for the arm this verifier was
// built for, against what the runtime reports it did in this one call.
void Verifier::check_round(const ModelRuntime& rt, int W, VerifyOutcome& r) const {
  auto need = [&](bool ok, std::string what) {
    if (!ok) r.violations.push_back(std::move(what));
  };
  const int64_t row_logits = int64_t(rt.vocab()) * int64_t(sizeof(float));
  const char* arm = verify_arm_name(arm_);
  need(r.head_calls == 1, fmt::format("{}: the runtime ran {} head calls for one verify", arm, r.head_calls));
  need(r.head_bytes_read > 0, fmt::format("{}: the runtime reports no head bytes read", arm));
  switch (arm_) {
    case VerifyArm::Batched:
      need(r.path == HeadPath::Batched, fmt::format("batched: the runtime ran path {}", head_path_name(r.path)));
      need(r.rows_projected == W, fmt::format("batched: {} rows projected, W = {}", r.rows_projected, W));
      need(r.logits_bytes_written == W * row_logits,
           fmt::format("batched: {} logits bytes written, W x V x 4 = {}", r.logits_bytes_written, W * row_logits));
      need(r.walk_rows == 0, fmt::format("batched: {} walk rows", r.walk_rows));
      break;
    case VerifyArm::Pad:
      need(r.path == HeadPath::Padded, fmt::format("pad: the runtime ran path {}", head_path_name(r.path)));
      need(r.rows_projected == pad_width_, fmt::format("pad: {} rows projected, P = {}", r.rows_projected, pad_width_));
      need(r.logits_bytes_written == pad_width_ * row_logits,
           fmt::format("pad: {} logits bytes written, P x V x 4 = {}", r.logits_bytes_written, pad_width_ * row_logits));
      need(r.walk_rows == 0, fmt::format("pad: {} walk rows", r.walk_rows));
      break;
    case VerifyArm::Fused:
      need(r.path == HeadPath::Fused, fmt::format("fused: the runtime ran path {}", head_path_name(r.path)));
      need(r.rows_projected == W, fmt::format("fused: {} rows projected, W = {}", r.rows_projected, W));
      need(r.logits_bytes_written == 0, fmt::format("fused: {} logits bytes written", r.logits_bytes_written));
      need(r.walk_rows == 0, fmt::format("fused: {} walk rows", r.walk_rows));
      break;
    case VerifyArm::Walk:
      need(r.path == HeadPath::Walk || r.path == HeadPath::WalkFlag,
           fmt::format("walk: the runtime ran path {}", head_path_name(r.path)));
      need(r.walk_rows == r.accepted + 1, fmt::format("walk: {} walk rows, accepted + 1 = {}", r.walk_rows, r.accepted + 1));
      need(r.rows_projected == r.walk_rows,
           fmt::format("walk: {} rows projected, {} walk rows", r.rows_projected, r.walk_rows));
      need(r.logits_bytes_written <= r.walk_rows * row_logits,
           fmt::format("walk: {} logits bytes written for {} rows", r.logits_bytes_written, r.walk_rows));
      break;
    case VerifyArm::Auto: break;
  }
}

namespace {

ArmChoice resolved(ArmChoice c, int block_size) {
  if (c.arm == VerifyArm::Auto) fail("internal: the auto arm must be resolved before verifying");
  c.pad_width = c.arm == VerifyArm::Pad ? resolve_pad_width(block_size, c.pad_width) : 0;
  return c;
}

}  // namespace

ArmHeadStage::ArmHeadStage(const ArmChoice& choice)
    : choice_(choice), verifier_(choice.arm, choice.pad_width, choice.fault) {}

void ArmHeadStage::pick(SequenceGroup&, std::span<const HeadPick> picks) {
  for (const HeadPick& p : picks) {
    if (!p.verify) {
      p.sequence->head_argmax(p.first, p.count, p.out);
      continue;
    }
    const VerifyOutcome v = verifier_.verify(*p.sequence, p.drafts);
    for (int j = 0; j < v.accepted; ++j) p.out[j] = p.drafts[size_t(j)];  // the rows the arm matched
    p.out[v.accepted] = v.next;
    VerifyCounters& c = *p.counters;
    c.rows_projected += v.rows_projected;
    c.head_bytes_read += v.head_bytes_read;
    c.logits_bytes_written += v.logits_bytes_written;
    c.walk_rows += v.walk_rows;
    c.head_calls += v.head_calls;
    c.walk_steps += v.walk_steps;
    const std::string path = head_path_name(v.path);
    if (std::find(c.paths.begin(), c.paths.end(), path) == c.paths.end()) c.paths.push_back(path);
    // The arm the runtime's paths say ran; a mix of paths is "mixed". The
    // engine counts the round after the pick: rounds is the rounds before it.
    const std::string taken = v.taken == VerifyArm::Auto ? std::string("none") : verify_arm_name(v.taken);
    c.verify_taken = c.rounds == 0 || c.verify_taken == taken ? taken : "mixed";
    for (const std::string& msg : v.violations) {
      ++c.round_violation_count;
      if (c.round_violations.size() < 20) c.round_violations.push_back(fmt::format("round {}: {}", c.rounds + 1, msg));
    }
  }
}

void ArmHeadStage::label(GenerateStats& stats) const {
  VerifyCounters& c = stats.counters;
  if (c.verify_chosen == "none" || c.verify_chosen == "sampled") return;  // no verify rounds through an arm
  c.verify_requested = choice_.chosen_by_auto ? "auto" : verify_arm_name(choice_.arm);
  c.verify_chosen = verify_arm_name(choice_.arm);
  c.pad_width = choice_.pad_width;
  stats.auto_source = choice_.auto_source;
  stats.auto_reason = choice_.auto_reason;
}

GenerateResult generate_verify_arm(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& options,
                                   const ArmChoice& choice, const std::vector<int32_t>* oracle_truth) {
  const int K = options.block_size != 0 ? options.block_size : default_block_size(rt.info().mtp_layers);
  ArmHeadStage head(resolved(choice, K));
  GenerateResult r = generate(rt, prompt, options, oracle_truth, &head);
  head.label(r.stats);
  return r;
}

GenerateResult generate_fresh_verify_arm(const RuntimeFactory& factory, std::span<const int32_t> prompt,
                                         const GenerateOptions& options, VerifyArm arm) {
  ArmChoice choice;
  choice.arm = arm;
  ArmHeadStage head(resolved(choice, options.block_size));
  GenerateResult r = generate_fresh(factory, prompt, options, &head);
  head.label(r.stats);
  return r;
}

}  // namespace nextn
