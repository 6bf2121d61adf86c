#include "bench/verify_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace nextn::bench {
namespace {

bool same_counters(const VerifyCounters& a, const VerifyCounters& b) {
  return a.rounds == b.rounds && a.drafted == b.drafted && a.accepted == b.accepted &&
         a.accepted_at == b.accepted_at && a.rows_projected == b.rows_projected && a.walk_steps == b.walk_steps &&
         a.walk_rows == b.walk_rows && a.head_bytes_read == b.head_bytes_read &&
         a.logits_bytes_written == b.logits_bytes_written && a.head_calls == b.head_calls && a.paths == b.paths &&
         a.verify_taken == b.verify_taken;
}

std::string join_ints(const std::vector<int64_t>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

std::string short_list(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

std::string arm_label(const ArmResult& a) { return fmt::format("K={} {}", a.block_size, verify_arm_name(a.arm)); }

}  // namespace

std::string drafter_signature(DraftKind draft, const OracleSpec& o, DraftCost cost) {
  if (draft != DraftKind::Oracle) return draft_kind_name(draft);
  std::string s = o.accept_rate >= 0          ? fmt::format("oracle rate {} seed {}", o.accept_rate, o.seed)
                  : !o.position_rates.empty() ? fmt::format("oracle rates {} seed {}", fmt::join(o.position_rates, ","), o.seed)
                                              : fmt::format("oracle pattern {}", o.pattern);
  if (cost == DraftCost::Mtp) s += " cost mtp";
  return s;
}

void check_verify_bench_options(const VerifyBenchOptions& o) {
  if (o.block_sizes.empty()) fail("--block-sizes: give at least one block size");
  for (int K : o.block_sizes) check_block_size(K);
  for (size_t i = 0; i < o.block_sizes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (o.block_sizes[i] == o.block_sizes[j]) fail("--block-sizes: {} listed twice", o.block_sizes[i]);
  if (o.arms.empty()) fail("--verify: give at least one arm");
  for (VerifyArm a : o.arms) {
    if (a == VerifyArm::Auto) fail("--verify: a benchmark measures concrete arms; 'auto' is not one");
    if (a == VerifyArm::Pad)
      for (int K : o.block_sizes) resolve_pad_width(K, o.pad_width);
  }
  if (o.draft == DraftKind::None) fail("--draft none has no verify rounds to measure: use mtp or oracle");
  if (o.draft == DraftKind::Oracle) check_oracle_spec(o.oracle);
  if (o.draft != DraftKind::Oracle && o.draft_cost != DraftCost::Free)
    fail("--draft-cost applies to --draft oracle only");
  if (o.repeats < 1) fail("--repeats {} must be at least 1", o.repeats);
  if (o.max_new_tokens < 2) fail("-n {}: a verify benchmark needs at least 2 tokens", o.max_new_tokens);
}

VerifyBench::VerifyBench(RuntimeFactory factory, VerifyBenchOptions options)
    : factory_(std::move(factory)), o_(std::move(options)) {
  check_verify_bench_options(o_);
  if (o_.prompt.empty()) fail("the prompt is empty");
}

GenerateOptions VerifyBench::run_options(const ArmResult& a) const {
  GenerateOptions g;
  g.max_new_tokens = o_.max_new_tokens;
  g.draft = o_.draft;
  g.oracle = o_.oracle;
  g.draft_cost = o_.draft_cost;
  g.block_size = a.block_size;
  g.ignore_eos = true;
  return g;
}

ModelRuntime& VerifyBench::fresh_runtime() {
  if (!rt_) {
    const int max_k = *std::max_element(o_.block_sizes.begin(), o_.block_sizes.end());
    rt_ = factory_(runtime_capacity(int(o_.prompt.size()), o_.max_new_tokens, max_k));
    ++built_;
  } else {
    rt_->reset();
  }
  return *rt_;
}

void VerifyBench::attribute() {
  report_ = VerifyBenchReport{};
  report_.reference = greedy_generate(fresh_runtime(), o_.prompt, o_.max_new_tokens, /*ignore_eos=*/true).tokens;
  for (int K : o_.block_sizes)
    for (VerifyArm arm : o_.arms) {
      ArmResult a;
      a.block_size = K;
      a.arm = arm;
      const ArmChoice choice = arm_choice(a);
      const GenerateResult r = generate_verify_arm(fresh_runtime(), o_.prompt, run_options(a), choice, &report_.reference);
      a.counters = r.stats.counters;
      a.mtp_work = r.stats.mtp_work;
      if (o_.draft_cost == DraftCost::Mtp && r.stats.counters.rounds > 1 && r.stats.mtp_work.entries == 0)
        a.violations.push_back("--draft-cost mtp: the runtime counted no MTP work");
      for (auto& v : counter_violations(a.counters)) a.violations.push_back(std::move(v));
      a.tokens_match = r.tokens == report_.reference;
      a.acceptance = a.counters.drafted > 0 ? double(a.counters.accepted) / double(a.counters.drafted) : 0.0;
      a.tokens_per_round = a.counters.rounds > 0 ? double(r.stats.generated - 1) / double(a.counters.rounds) : 0.0;
      for (const auto& v : a.violations) report_.refusals.push_back(arm_label(a) + ": " + v);
      if (!a.tokens_match)
        report_.refusals.push_back(arm_label(a) + ": tokens differ from plain greedy (the arms disagree)");
      report_.arms.push_back(std::move(a));
    }
  report_.runtimes_built = built_;
}

ArmChoice VerifyBench::arm_choice(const ArmResult& a) const {
  ArmChoice c;
  c.arm = a.arm;
  c.pad_width = o_.pad_width;
  c.fault = o_.fault;
  return c;
}

void VerifyBench::time() {
  if (report_.arms.empty() || !report_.refusals.empty()) fail("internal: timing an unattributed benchmark");
  const size_t n_arms = o_.arms.size();
  for (size_t k = 0; k < o_.block_sizes.size(); ++k)
    for (int rep = 0; rep < o_.repeats; ++rep)
      for (size_t i = 0; i < n_arms; ++i) {
        ArmResult& a = report_.arms[k * n_arms + (rep % 2 == 0 ? i : n_arms - 1 - i)];
        const ArmChoice choice = arm_choice(a);
        const GenerateResult r =
            generate_verify_arm(fresh_runtime(), o_.prompt, run_options(a), choice, &report_.reference);
        if (r.tokens != report_.reference)
          report_.refusals.push_back(fmt::format("{}: repeat {} tokens differ from plain greedy", arm_label(a), rep));
        if (!same_counters(r.stats.counters, a.counters))
          report_.refusals.push_back(fmt::format("{}: repeat {} counters differ from the attribution run", arm_label(a), rep));
        const auto& c = r.stats.counters;
        a.tokens_per_second.push_back(r.stats.tokens_per_second());
        a.round_ms.push_back(c.rounds > 0 ? r.stats.round_ms / double(c.rounds) : 0.0);
        a.verify_ms.push_back(c.rounds > 0 ? r.stats.verify_ms / double(c.rounds) : 0.0);
        a.draft_ms.push_back(c.rounds > 0 ? r.stats.draft_ms / double(c.rounds) : 0.0);
      }
  for (ArmResult& a : report_.arms) {
    a.tps = summarize(a.tokens_per_second);
    a.round = summarize(a.round_ms);
    a.verify = summarize(a.verify_ms);
    a.draft = summarize(a.draft_ms);
  }
  report_.timed = true;
  report_.runtimes_built = built_;
}

std::string counters_text(const VerifyBenchReport& r) {
  std::string s =
      "counters (untimed attribution run per arm; totals over the run; rows/bytes/walk/path counted by the runtime):\n";
  s += fmt::format("  {:>3} {:<8} {:<8} {:>6} {:>7} {:>8} {:>6} {:>8} {:>9} {:>14} {:>14} {:>4}  {:<18} {}\n", "K", "arm",
                   "taken", "rounds", "drafted", "accepted", "accept", "rows", "walk_rows", "head_MB/round",
                   "logits_B/round", "pad", "accepted_at", "identity");
  for (const ArmResult& a : r.arms) {
    const auto& c = a.counters;
    std::string verdict = a.violations.empty() ? "ok" : "FAIL: " + a.violations.front();
    if (a.violations.size() > 1) verdict += fmt::format(" (+{} more)", a.violations.size() - 1);
    if (!a.tokens_match) verdict += "; tokens differ";
    const double rounds = c.rounds > 0 ? double(c.rounds) : 1.0;
    s += fmt::format("  {:>3} {:<8} {:<8} {:>6} {:>7} {:>8} {:>6.3f} {:>8} {:>9} {:>14.3f} {:>14.0f} {:>4}  {:<18} {}\n",
                     a.block_size, verify_arm_name(a.arm), c.verify_taken, c.rounds, c.drafted, c.accepted,
                     a.acceptance, c.rows_projected, c.walk_rows, double(c.head_bytes_read) / rounds / 1e6,
                     double(c.logits_bytes_written) / rounds, c.pad_width > 0 ? std::to_string(c.pad_width) : "-",
                     short_list(join_ints(c.accepted_at), 18), verdict);
  }
  if (!r.arms.empty() && r.arms.front().mtp_work.entries > 0)
    s += fmt::format("  MTP work per run (runtime): {} entries, {} chained steps, {} argmax rows\n",
                     r.arms.front().mtp_work.entries, r.arms.front().mtp_work.chained_steps,
                     r.arms.front().mtp_work.argmax_rows);
  return s;
}

std::string table_text(const VerifyBenchReport& r, const VerifyBenchOptions& o) {
  std::string s = fmt::format(
      "timing: median [min, max] over {} repeats, arms A..N then N..A; round = draft through rollback, "
      "verify = target forward + projection + accept\n",
      o.repeats);
  s += fmt::format("  {:>3} {:<8} {:>30} {:>30} {:>30} {:>30} {:>10}\n", "K", "arm", "tokens/s", "round_ms",
                   "verify_ms", "draft_ms", "vs batched");
  for (const ArmResult& a : r.arms) {
    std::string rel = "-";
    for (const ArmResult& b : r.arms)
      if (b.block_size == a.block_size && b.arm == VerifyArm::Batched && b.tps.median > 0)
        rel = fmt::format("{:.3f}x", a.tps.median / b.tps.median);
    s += fmt::format("  {:>3} {:<8} {:>30} {:>30} {:>30} {:>30} {:>10}\n", a.block_size, verify_arm_name(a.arm),
                     format_summary(a.tps, 1), format_summary(a.round, 4), format_summary(a.verify, 4),
                     format_summary(a.draft, 4), rel);
  }
  return s;
}

nlohmann::ordered_json report_json(const VerifyBenchReport& r, const VerifyBenchOptions& o) {
  nlohmann::ordered_json j;
  j["settings"] = {{"block_sizes", o.block_sizes},
                   {"draft", draft_kind_name(o.draft)},
                   {"draft_cost", draft_cost_name(o.draft_cost)},
                   {"repeats", o.repeats},
                   {"prompt_tokens", o.prompt.size()},
                   {"max_new_tokens", o.max_new_tokens}};
  if (o.draft == DraftKind::Oracle) {
    if (o.oracle.accept_rate >= 0)
      j["settings"]["accept_rate"] = o.oracle.accept_rate;
    else if (!o.oracle.position_rates.empty())
      j["settings"]["accept_rates"] = o.oracle.position_rates;
    else
      j["settings"]["accept_pattern"] = o.oracle.pattern;
    j["settings"]["seed"] = o.oracle.seed;
  }
  j["runtimes_built"] = r.runtimes_built;
  j["refused"] = r.refusals.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.refusals);
  nlohmann::ordered_json arms = nlohmann::ordered_json::array();
  for (const ArmResult& a : r.arms) {
    const auto& c = a.counters;
    nlohmann::ordered_json x;
    x["block_size"] = a.block_size;
    x["verify"] = verify_arm_name(a.arm);
    x["counters"] = {{"rounds", c.rounds},
                     {"drafted", c.drafted},
                     {"accepted", c.accepted},
                     {"accepted_at", c.accepted_at},
                     {"rows_projected", c.rows_projected},
                     {"head_bytes_read", c.head_bytes_read},
                     {"logits_bytes_written", c.logits_bytes_written},
                     {"walk_rows", c.walk_rows},
                     {"head_calls", c.head_calls},
                     {"walk_steps", c.walk_steps},
                     {"head_paths", c.paths},
                     {"round_violations", c.round_violation_count},
                     {"verify_requested", c.verify_requested},
                     {"verify_chosen", c.verify_chosen},
                     {"verify_taken", c.verify_taken}};
    x["mtp_work"] = {{"entries", a.mtp_work.entries},
                     {"chained_steps", a.mtp_work.chained_steps},
                     {"argmax_rows", a.mtp_work.argmax_rows}};
    if (a.arm == VerifyArm::Pad) x["counters"]["pad_width"] = c.pad_width;
    x["identity_violations"] = a.violations;
    x["tokens_match"] = a.tokens_match;
    x["acceptance"] = a.acceptance;
    x["tokens_per_round"] = a.tokens_per_round;
    if (r.timed) {
      x["tokens_per_second"] = summary_json(a.tps);
      x["round_ms"] = summary_json(a.round);
      x["verify_ms"] = summary_json(a.verify);
      x["draft_ms"] = summary_json(a.draft);
    }
    arms.push_back(std::move(x));
  }
  j["arms"] = std::move(arms);
  return j;
}

}  // namespace nextn::bench
