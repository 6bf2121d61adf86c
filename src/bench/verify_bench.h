// The guarded verify-arm harness behind `nextn bench verify`. It runs the
// production loop (spec/generate.h), never a microbenchmark:
//
//  1. attribute(): a plain greedy reference run, then one untimed run per
//     (K, arm), which doubles as the discarded warm-up. Each run's counters
//     must match its arm's identity (spec/verify.h: counter_violations) and
//     its tokens must equal the reference. Anything else is a refusal: the
//     caller prints the counters and no table, and exits 2.
//  2. time(): `repeats` timed runs per (K, arm), arms in order A..N on even
//     repeats and N..A on odd ones (ABBA). Every timed run is held to the
//     same counters and tokens as its attribution run; a difference is a
//     refusal too.
// All runs share ONE runtime, built once (one weight load) and reset()
// before each run. The identity counters are the runtime's own
// (ModelRuntime::head_work), copied by the verifier.
// Benchmarks always generate exactly -n tokens (EOS is ignored).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "bench/verify_arms.h"
#include "engine/generate.h"

namespace nextn::bench {

struct VerifyBenchOptions {
  std::vector<int> block_sizes = {3, 4, 8, 16, 32};
  std::vector<VerifyArm> arms = {VerifyArm::Batched, VerifyArm::Walk, VerifyArm::Pad, VerifyArm::Fused};
  DraftKind draft = DraftKind::Mtp;
  OracleSpec oracle;
  DraftCost draft_cost = DraftCost::Free;  // oracle only
  int pad_width = 0;  // 0: the default per K
  int repeats = 5;
  std::vector<int32_t> prompt;
  int max_new_tokens = 64;
  // The planted fault (bench verify --fault): walk-as-batched goes to every
  // walk arm's verifier here; runtime-walk-as-batched is the factory's
  // (RuntimeOptions::fault).
  Fault fault = Fault::None;
};
// Throws Error for impossible settings (all but the prompt, which the
// constructor checks).
void check_verify_bench_options(const VerifyBenchOptions& o);

struct ArmResult {
  int block_size = 0;
  VerifyArm arm = VerifyArm::Batched;
  VerifyCounters counters;  // the attribution run's
  std::vector<std::string> violations;
  bool tokens_match = false;
  MtpWork mtp_work;          // the attribution run's MTP counters (runtime)
  double acceptance = 0, tokens_per_round = 0;
  std::vector<double> tokens_per_second, round_ms, verify_ms, draft_ms;  // one sample per timed run
  Summary tps, round, verify, draft;
};

struct VerifyBenchReport {
  std::vector<int32_t> reference;  // plain greedy tokens
  std::vector<ArmResult> arms;     // block sizes in order, arms in order within each
  std::vector<std::string> refusals;
  bool timed = false;
  int runtimes_built = 0;  // 1: every run reused the one runtime through reset()
};

class VerifyBench {
 public:
  VerifyBench(RuntimeFactory factory, VerifyBenchOptions options);
  void attribute();
  void time();  // only after attribute() with no refusals
  const VerifyBenchReport& report() const { return report_; }
  const VerifyBenchOptions& options() const { return o_; }

 private:
  GenerateOptions run_options(const ArmResult& a) const;
  ArmChoice arm_choice(const ArmResult& a) const;  // the arm, the pad width and the planted fault
  ModelRuntime& fresh_runtime();  // the one runtime, reset (built on first use)
  RuntimeFactory factory_;
  std::unique_ptr<ModelRuntime> rt_;
  int built_ = 0;
  VerifyBenchOptions o_;
  VerifyBenchReport report_;
};

// Per-arm counters, one row each, with the identity verdict.
std::string counters_text(const VerifyBenchReport& r);
// Medians [min, max] of tokens/s, round_ms and verify_ms, and tokens/s
// relative to batched at the same K.
std::string table_text(const VerifyBenchReport& r, const VerifyBenchOptions& o);
nlohmann::ordered_json report_json(const VerifyBenchReport& r, const VerifyBenchOptions& o);

// The drafter as a benchmark's header names it ("mtp", "oracle rate 0.8 seed 1 cost mtp").
std::string drafter_signature(DraftKind draft, const OracleSpec& oracle, DraftCost cost);

}  // namespace nextn::bench
