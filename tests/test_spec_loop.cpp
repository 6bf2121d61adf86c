// The speculative round loop (the engine step, engine/step_loop.h, as a batch
// of one) against a toy runtime (test_spec_mock.h): exactness for every K,
// head (the product's batched head and every verify arm of
// bench/verify_arms.h at the step's head), budget and drafter; every
// acceptance length; budget and EOS edges; counter identities; the fault hook.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "bench/verify_arms.h"
#include "core/error.h"
#include "engine/generate.h"
#include "test_spec_mock.h"

namespace nextn {
namespace {

using testing::MockOptions;
using testing::MockRuntime;

const std::vector<int32_t> kPrompt = {3, 1, 4, 1, 5, 9, 2, 6};
// The heads a run can have at the engine step: the product's (nullopt:
// BatchedHead, which the runtime's counters are read around once at the end)
// or a verify arm (ArmHeadStage, every round's counters checked).
using Head = std::optional<VerifyArm>;
const Head kHeads[] = {std::nullopt, VerifyArm::Batched, VerifyArm::Walk, VerifyArm::Pad, VerifyArm::Fused};
const char* head_name(const Head& h) { return h ? verify_arm_name(*h) : "product"; }
// The arm a head's stats report as chosen: the product runs the batched verify.
const char* chosen_of(const Head& h) { return h ? verify_arm_name(*h) : "batched"; }

std::vector<int> block_sizes() {
  std::vector<int> ks = {2, 3, 4, 5, 6, 7, 8, 16, 32, 63, 64};  // 64: no pad arm (skipped below)
  return ks;
}

GenerateResult run(const MockOptions& mo, const GenerateOptions& o) {
  return generate_fresh(testing::mock_factory(mo), kPrompt, o);
}

ArmChoice arm_choice(VerifyArm arm, int pad_width = 0, Fault fault = Fault::None) {
  ArmChoice c;
  c.arm = arm;
  c.pad_width = pad_width;  // pad: 0 = the default for K
  c.fault = fault;
  return c;
}

// run() with a verify arm at the step's head (generate_verify_arm): a fresh
// runtime as generate_fresh makes it, the oracle's truth from plain greedy on
// it first.
GenerateResult run_arm(const MockOptions& mo, const GenerateOptions& o, VerifyArm arm, int pad_width = 0,
                       Fault fault = Fault::None) {
  auto rt = testing::mock_factory(mo)(runtime_capacity(int(kPrompt.size()), o.max_new_tokens,
                                                       o.block_size == 0 ? kMaxBlockSize : o.block_size));
  std::vector<int32_t> truth;
  const bool oracle = o.draft == DraftKind::Oracle;
  if (oracle) {
    truth = greedy_generate(*rt, kPrompt, o.max_new_tokens, o.ignore_eos).tokens;
    rt->reset();
  }
  return generate_verify_arm(*rt, kPrompt, o, arm_choice(arm, pad_width, fault), oracle ? &truth : nullptr);
}

GenerateResult run(const MockOptions& mo, const GenerateOptions& o, const Head& head) {
  return head ? run_arm(mo, o, *head) : run(mo, o);
}

std::vector<int32_t> greedy(const MockOptions& mo, int n, bool ignore_eos = false) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = ignore_eos;
  return run(mo, o).tokens;
}

void expect_identities(const GenerateStats& s) {
  const auto v = counter_violations(s.counters);
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v.front());
}

TEST(SpecLoop, GreedyIsDeterministicAndCounted) {
  MockOptions mo;
  const auto a = run(mo, GenerateOptions{});
  EXPECT_EQ(a.tokens.size(), 32u);
  EXPECT_EQ(a.stats.counters.rounds, 31);
  EXPECT_EQ(a.stats.counters.verify_taken, "none");
  EXPECT_EQ(a.tokens, greedy(mo, 32));
}

TEST(SpecLoop, MatchesGreedyForEveryBlockSizeArmBudgetAndDrafter) {
  MockOptions mo;
  for (int K : block_sizes()) {
    for (int n : {0, 1, K - 1, K, K + 1, 24, 70}) {
      const auto want = greedy(mo, n);
      for (const Head& head : kHeads) {
        if (head == VerifyArm::Pad && K == 64) continue;
        for (int d = 0; d < 3; ++d) {
          GenerateOptions o;
          o.max_new_tokens = n;
          o.block_size = K;
          if (d == 0) {
            o.draft = DraftKind::Mtp;
          } else {
            o.draft = DraftKind::Oracle;
            if (d == 1) o.oracle.accept_rate = 0.6, o.oracle.seed = uint64_t(K * 131 + n);
            if (d == 2) o.oracle.pattern = "1101110";
          }
          const auto got = run(mo, o, head);
          SCOPED_TRACE(::testing::Message() << "K=" << K << " n=" << n << " head=" << head_name(head) << " d=" << d);
          ASSERT_EQ(got.tokens, want);
          expect_identities(got.stats);
          // The runtime's head path, once a round ran ("none" when the budget allowed none).
          EXPECT_EQ(got.stats.counters.verify_taken, n >= 2 ? chosen_of(head) : "none");
          EXPECT_EQ(got.stats.counters.verify_requested, chosen_of(head));
          EXPECT_EQ(got.stats.counters.verify_chosen, chosen_of(head));
          EXPECT_EQ(got.stats.counters.paths,
                    n >= 2 ? std::vector<std::string>{head == VerifyArm::Pad ? "padded" : chosen_of(head)}
                           : std::vector<std::string>{});
          EXPECT_EQ(got.stats.generated, n);
        }
      }
    }
  }
}

TEST(SpecLoop, OnePatternPerAcceptanceLength) {
  // Pattern 1^a 0^(K-1-a): every round accepts exactly a drafts.
  MockOptions mo;
  for (int K : {2, 3, 4, 8, 16}) {
    for (int a = 0; a <= K - 1; ++a) {
      const int n = 5 * K + 3;
      GenerateOptions o;
      o.max_new_tokens = n;
      o.block_size = K;
      o.draft = DraftKind::Oracle;
      o.oracle.pattern = std::string(size_t(a), '1') + std::string(size_t(K - 1 - a), '0');
      for (const Head& head : kHeads) {
        const auto r = run(mo, o, head);
        SCOPED_TRACE(::testing::Message() << "K=" << K << " a=" << a << " head=" << head_name(head));
        ASSERT_EQ(r.tokens, greedy(mo, n));
        const auto& c = r.stats.counters;
        expect_identities(r.stats);
        // Expected counters, simulated: a round of width W draws W-1 pattern
        // characters and accepts its leading '1's.
        std::vector<int64_t> at(size_t(K - 1), 0);
        int64_t rounds = 0, accepted = 0;
        size_t pos = 0;
        for (int left = n - 1; left > 0;) {
          const int W = std::min(K, left);
          int acc = 0;
          while (acc < W - 1 && o.oracle.pattern[(pos + size_t(acc)) % o.oracle.pattern.size()] == '1') ++acc;
          for (int i = 0; i < acc; ++i) ++at[size_t(i)];
          pos += size_t(W - 1);
          ++rounds;
          accepted += acc;
          left -= acc + 1;
        }
        EXPECT_EQ(c.rounds, rounds);
        EXPECT_EQ(c.accepted, accepted);
        EXPECT_EQ(c.accepted_at, at);
        if (a > 0) {
          EXPECT_GT(c.accepted_at[size_t(a - 1)], 0);  // acceptance length a occurs
        }
        if (a < K - 1) {
          EXPECT_EQ(c.accepted_at[size_t(a)], 0);
        }
        if (head == VerifyArm::Walk) {
          EXPECT_EQ(c.walk_steps, c.accepted + c.rounds);
          EXPECT_EQ(c.walk_rows, c.accepted + c.rounds);  // the runtime's own count
        }
      }
    }
  }
}

TEST(SpecLoop, PerfectDraftsUseFullBlocksAndShrinkTheLastRound) {
  MockOptions mo;
  mo.mtp_wrong_every = 0;  // the MTP is never wrong
  for (int K : {2, 3, 5, 8}) {
    for (int n : {1, 2, K - 1, K, K + 1, 3 * K + 2}) {
      auto factory = testing::mock_factory(mo);
      auto rt = factory(runtime_capacity(int(kPrompt.size()), n, K));
      auto* mock = static_cast<MockRuntime*>(rt.get());
      GenerateOptions o;
      o.max_new_tokens = n;
      o.block_size = K;
      o.draft = DraftKind::Mtp;
      const auto r = generate(*rt, kPrompt, o);
      ASSERT_EQ(r.tokens, greedy(mo, n)) << K << " " << n;
      // Prefill commits one token, each round min(K, left).
      std::vector<int> widths = {int(kPrompt.size())};
      for (int left = n - 1; left > 0; left -= std::min(K, left)) widths.push_back(std::min(K, left));
      if (n == 0) widths.clear();
      EXPECT_EQ(mock->forward_widths, widths) << K << " " << n;
      EXPECT_EQ(r.stats.counters.accepted, r.stats.counters.drafted);
      // K-1 drafts need K-2 chained steps per round (1 from the MTP forward).
      int steps = 0;
      for (size_t i = 1; i < widths.size(); ++i) steps += std::max(0, widths[i] - 2);
      EXPECT_EQ(mock->mtp_steps, steps);
    }
  }
}

TEST(SpecLoop, OneTargetForwardPerRound) {
  MockOptions mo;
  for (const Head& head : {Head{}, Head{VerifyArm::Walk}}) {
    SCOPED_TRACE(head_name(head));
    auto rt = testing::mock_factory(mo)(200);
    auto* mock = static_cast<MockRuntime*>(rt.get());
    GenerateOptions o;
    o.max_new_tokens = 60;
    o.block_size = 4;
    o.draft = DraftKind::Mtp;
    const auto r = head ? generate_verify_arm(*rt, kPrompt, o, arm_choice(*head)) : generate(*rt, kPrompt, o);
    // Prefill + one per round: rollback never re-runs the trunk.
    EXPECT_EQ(mock->forwards, 1 + r.stats.counters.rounds);
    EXPECT_EQ(mock->head_work().rows_projected, 1 + r.stats.counters.rows_projected);
    EXPECT_EQ(mock->head_work().head_calls, 1 + r.stats.counters.rounds);  // prefill + one head call per round
    EXPECT_GT(r.stats.counters.accepted, 0);
    EXPECT_LT(r.stats.counters.accepted, r.stats.counters.drafted);
  }
}

TEST(SpecLoop, OracleAtMtpCostRunsTheMtpChainAndKeepsTheOraclesTokens) {
  MockOptions mo;
  const int n = 40, K = 5;
  const auto want = greedy(mo, n, /*ignore_eos=*/true);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.block_size = K;
  o.ignore_eos = true;
  o.draft = DraftKind::Oracle;
  o.oracle.accept_rate = 0.7;
  const auto free_run = run(mo, o);
  o.draft_cost = DraftCost::Mtp;
  const auto costed = run(mo, o);
  EXPECT_EQ(costed.tokens, want);
  EXPECT_EQ(free_run.tokens, want);
  // Same drafts, so the same rounds: the MTP chain changes the cost only.
  EXPECT_EQ(costed.stats.counters.accepted_at, free_run.stats.counters.accepted_at);
  EXPECT_EQ(costed.stats.draft_cost, "mtp");
  EXPECT_EQ(free_run.stats.mtp_work.entries, 0);
  // W-1 drafts per round: one MTP argmax each, W-2 of them after a chained
  // step (a last round of width 1 drafts nothing).
  const auto& c = costed.stats.counters;
  const auto& m = costed.stats.mtp_work;
  EXPECT_EQ(m.argmax_rows, c.drafted);
  EXPECT_GE(m.chained_steps, c.drafted - c.rounds);
  EXPECT_LE(m.chained_steps, c.drafted - c.rounds + 1);
  EXPECT_GT(m.chained_steps, 0);
  EXPECT_GT(m.entries, m.chained_steps);  // plus the commits' re-pairing forwards
  mo.mtp_layers = 0;
  EXPECT_THROW(run(mo, o), Error);  // no MTP head: no MTP cost to pay
}

TEST(SpecLoop, ResetGivesAFreshRuntime) {
  MockOptions mo;
  auto rt = testing::mock_factory(mo)(200);
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.block_size = 4;
  o.draft = DraftKind::Mtp;
  const ArmChoice walk = arm_choice(VerifyArm::Walk);
  const auto first = generate_verify_arm(*rt, kPrompt, o, walk);
  EXPECT_THROW(generate_verify_arm(*rt, kPrompt, o, walk), Error);  // not fresh
  EXPECT_THROW(generate(*rt, kPrompt, o), Error);
  rt->reset();
  EXPECT_EQ(rt->head_work().rows_projected, 0);
  EXPECT_EQ(mtp_of(*rt).mtp_work().entries, 0);
  const auto second = generate_verify_arm(*rt, kPrompt, o, walk);
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.stats.counters.accepted_at, first.stats.counters.accepted_at);
  EXPECT_EQ(second.stats.counters.walk_rows, first.stats.counters.walk_rows);
}

TEST(SpecLoop, StopsAtEosAnywhereInARound) {
  MockOptions base;
  const auto free_run = greedy(base, 40);
  // An EOS at generated index j: the first token, an accepted draft or a bonus.
  for (int j : {0, 1, 2, 3, 5, 8, 13}) {
    MockOptions mo = base;
    const int32_t eos = free_run[size_t(j)];
    mo.eos = {eos};
    // The first occurrence of that id is where greedy stops.
    const auto want = greedy(mo, 40);
    ASSERT_EQ(want.back(), eos);
    ASSERT_LE(want.size(), size_t(j + 1));
    EXPECT_EQ(greedy(mo, 40, /*ignore_eos=*/true), free_run);
    for (int K : {2, 3, 4, 8}) {
      for (const Head& head : kHeads) {
        for (const char* pat : {"1", "0", "10", "110"}) {
          GenerateOptions o;
          o.max_new_tokens = 40;
          o.block_size = K;
          o.draft = DraftKind::Oracle;
          o.oracle.pattern = pat;
          const auto r = run(mo, o, head);
          ASSERT_EQ(r.tokens, want) << "j=" << j << " K=" << K << " pat=" << pat << " head=" << head_name(head);
          EXPECT_EQ(r.stats.stop, "eos");
          expect_identities(r.stats);
          o.draft = DraftKind::Mtp;
          const auto m = run(mo, o, head);
          ASSERT_EQ(m.tokens, want);
          EXPECT_EQ(m.stats.stop, "eos");
          expect_identities(m.stats);
          o.ignore_eos = true;
          ASSERT_EQ(run(mo, o, head).tokens, free_run);
        }
      }
    }
  }
}

TEST(SpecLoop, DefaultBlockSizeIsMtpLayersPlusTwo) {
  EXPECT_EQ(default_block_size(1), 3);
  EXPECT_EQ(default_block_size(0), 2);
  EXPECT_EQ(default_block_size(3), 5);
  MockOptions mo;
  GenerateOptions o;
  o.draft = DraftKind::Mtp;
  EXPECT_EQ(run(mo, o).stats.counters.block_size, 3);
}

TEST(SpecLoop, RejectsImpossibleOptions) {
  MockOptions mo;
  GenerateOptions o;
  o.draft = DraftKind::Mtp;
  o.block_size = 1;
  EXPECT_THROW(run(mo, o), Error);
  o.block_size = 65;
  EXPECT_THROW(run(mo, o), Error);
  EXPECT_THROW(run_arm(mo, o, VerifyArm::Walk), Error);
  o.block_size = 64;
  EXPECT_NO_THROW(run(mo, o));
  EXPECT_THROW(run_arm(mo, o, VerifyArm::Pad), Error);  // no pad width above 64
  o.block_size = 4;
  EXPECT_THROW(run_arm(mo, o, VerifyArm::Pad, 4), Error);
  EXPECT_THROW(run_arm(mo, o, VerifyArm::Pad, 65), Error);
  EXPECT_NO_THROW(run_arm(mo, o, VerifyArm::Pad, 5));
  EXPECT_EQ(run_arm(mo, o, VerifyArm::Pad, 5).stats.counters.pad_width, 5);
  EXPECT_EQ(run_arm(mo, o, VerifyArm::Pad).stats.counters.pad_width, 16);  // 0: the default for K
  EXPECT_THROW(run_arm(mo, o, VerifyArm::Auto), Error);                    // auto is resolved before a run
  o = GenerateOptions{};
  o.max_new_tokens = -1;
  EXPECT_THROW(run(mo, o), Error);
  o.max_new_tokens = 4;
  EXPECT_THROW(generate_fresh(testing::mock_factory(mo), std::vector<int32_t>{}, o), Error);
  EXPECT_THROW(generate_fresh(testing::mock_factory(mo), std::vector<int32_t>{1, 50}, o), Error);
  o.draft = DraftKind::Oracle;
  EXPECT_THROW(run(mo, o), Error);  // neither rate nor pattern
  o.oracle.accept_rate = 1.5;
  EXPECT_THROW(run(mo, o), Error);
  o.oracle.accept_rate = 0.5;
  o.oracle.pattern = "10";
  EXPECT_THROW(run(mo, o), Error);
  o.oracle.accept_rate = -1;
  o.oracle.pattern = "12";
  EXPECT_THROW(run(mo, o), Error);
  MockOptions no_mtp;
  no_mtp.mtp_layers = 0;
  o = GenerateOptions{};
  o.draft = DraftKind::Mtp;
  EXPECT_ANY_THROW(run(no_mtp, o));
}

TEST(SpecVerify, PadWidthDefaults) {
  EXPECT_EQ(resolve_pad_width(2, 0), 16);
  EXPECT_EQ(resolve_pad_width(8, 0), 16);
  EXPECT_EQ(resolve_pad_width(15, 0), 16);
  EXPECT_EQ(resolve_pad_width(16, 0), 32);
  EXPECT_EQ(resolve_pad_width(32, 0), 48);
  EXPECT_EQ(resolve_pad_width(48, 0), 64);
  EXPECT_EQ(resolve_pad_width(63, 0), 64);
  EXPECT_THROW(resolve_pad_width(64, 0), Error);
  EXPECT_EQ(resolve_pad_width(3, 4), 4);
  EXPECT_THROW(resolve_pad_width(3, 3), Error);
  EXPECT_THROW(resolve_pad_width(3, 2), Error);
  EXPECT_THROW(resolve_pad_width(3, 65), Error);
}

TEST(SpecVerify, ParsesArms) {
  EXPECT_EQ(parse_verify_arm("walk"), VerifyArm::Walk);
  EXPECT_EQ(parse_verify_arm("auto"), VerifyArm::Auto);
  EXPECT_THROW(parse_verify_arm("fast"), Error);
  EXPECT_EQ(parse_verify_arms("batched,walk,pad,fused").size(), 4u);
  EXPECT_THROW(parse_verify_arms("batched,,walk"), Error);
  EXPECT_THROW(parse_verify_arms("batched,auto"), Error);
  EXPECT_THROW(parse_verify_arms("walk,walk"), Error);
}

TEST(SpecVerify, FaultHookMakesTheWalkRunBatchedAndTheCountersShowIt) {
  MockOptions mo;
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.block_size = 4;
  o.draft = DraftKind::Mtp;
  const auto clean = run_arm(mo, o, VerifyArm::Walk);
  EXPECT_TRUE(counter_violations(clean.stats.counters).empty());
  EXPECT_EQ(clean.stats.counters.verify_taken, "walk");
  {
    const auto faulty = run_arm(mo, o, VerifyArm::Walk, 0, Fault::WalkAsBatched);
    EXPECT_EQ(faulty.tokens, clean.tokens);  // silent: same output
    EXPECT_EQ(faulty.stats.counters.verify_requested, "walk");
    EXPECT_EQ(faulty.stats.counters.verify_chosen, "walk");
    EXPECT_EQ(faulty.stats.counters.verify_taken, "batched");  // what the runtime's path says
    EXPECT_EQ(faulty.stats.counters.paths, std::vector<std::string>{"batched"});
    EXPECT_EQ(faulty.stats.counters.walk_rows, 0);
    EXPECT_GT(faulty.stats.counters.round_violation_count, 0);
    EXPECT_FALSE(counter_violations(faulty.stats.counters).empty());
    // Other arms are untouched, and so is the product's head.
    EXPECT_TRUE(counter_violations(run_arm(mo, o, VerifyArm::Batched).stats.counters).empty());
    const auto product = run(mo, o);
    EXPECT_EQ(product.tokens, clean.tokens);
    EXPECT_TRUE(counter_violations(product.stats.counters).empty());
  }
  EXPECT_EQ(parse_fault("walk-as-batched"), Fault::WalkAsBatched);
  EXPECT_EQ(parse_fault("none"), Fault::None);
  EXPECT_THROW(parse_fault("bogus"), Error);  // a typo is an error, not a silent no-op
}

TEST(SpecVerify, RuntimeFaultIsCaughtByTheRuntimesOwnCounters) {
  // The runtime's head_walk runs the batched path but returns what a walk
  // would: the verifier's return-value bookkeeping is fooled, the runtime's
  // counters are not.
  MockOptions mo;
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.block_size = 4;
  o.draft = DraftKind::Mtp;
  const auto clean = run_arm(mo, o, VerifyArm::Walk);
  mo.walk_as_batched = true;
  const auto faulty = run_arm(mo, o, VerifyArm::Walk);
  EXPECT_EQ(faulty.tokens, clean.tokens);
  const auto& c = faulty.stats.counters;
  EXPECT_EQ(c.walk_steps, clean.stats.counters.walk_steps);  // the return value looks like a walk
  EXPECT_EQ(c.walk_rows, 0);
  EXPECT_EQ(c.verify_taken, "batched");
  EXPECT_EQ(c.rows_projected, c.drafted + c.rounds);
  const auto v = counter_violations(c);
  ASSERT_FALSE(v.empty());
  bool names_path = false;
  for (const auto& m : v) names_path |= m.find("'batched'") != std::string::npos;
  EXPECT_TRUE(names_path) << v.front();
}

TEST(SpecVerify, ARuntimeThatMiscountsIsCaught) {
  MockOptions mo;
  mo.undercount_walk = true;
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.block_size = 4;
  o.draft = DraftKind::Mtp;
  const auto r = run_arm(mo, o, VerifyArm::Walk);
  EXPECT_GT(r.stats.counters.round_violation_count, 0);
  EXPECT_FALSE(counter_violations(r.stats.counters).empty());
  ASSERT_FALSE(r.stats.counters.round_violations.empty());
  EXPECT_NE(r.stats.counters.round_violations.front().find("walk rows"), std::string::npos)
      << r.stats.counters.round_violations.front();
}

TEST(SpecVerify, IdentitiesCatchMislabelledCounters) {
  VerifyCounters c;
  c.rounds = 10;
  c.drafted = 30;
  c.accepted = 12;
  c.block_size = 4;
  c.vocab = 50;
  c.accepted_at = {6, 4, 2};
  c.head_calls = 10;
  c.head_bytes_read = 10000;
  auto as = [&](const char* arm, const char* path) {
    c.verify_requested = c.verify_chosen = c.verify_taken = arm;
    c.paths = {path};
  };
  as("batched", "batched");
  c.rows_projected = 40;
  c.logits_bytes_written = 40 * 50 * 4;
  EXPECT_TRUE(counter_violations(c).empty());
  as("fused", "fused");
  EXPECT_FALSE(counter_violations(c).empty());  // fused writes no logits
  c.logits_bytes_written = 0;
  EXPECT_TRUE(counter_violations(c).empty());
  c.paths = {"batched"};
  EXPECT_FALSE(counter_violations(c).empty());  // the runtime ran another path
  as("walk", "walk");
  EXPECT_FALSE(counter_violations(c).empty());
  c.rows_projected = c.walk_steps = c.walk_rows = 22;
  EXPECT_TRUE(counter_violations(c).empty());
  c.walk_rows = 21;  // the runtime took fewer rows than the walk returned
  EXPECT_FALSE(counter_violations(c).empty());
  c.walk_rows = 22;
  c.head_calls = 9;
  EXPECT_FALSE(counter_violations(c).empty());
  c.head_calls = 10;
  as("pad", "padded");
  c.walk_steps = c.walk_rows = 0;
  c.pad_width = 16;
  c.rows_projected = 160;
  c.logits_bytes_written = 160 * 50 * 4;
  EXPECT_TRUE(counter_violations(c).empty());
  c.accepted_at = {2, 4, 6};
  EXPECT_FALSE(counter_violations(c).empty());
  c.accepted_at = {6, 4, 2};
  // auto: checked against the arm auto recorded, never against itself.
  c.verify_requested = "auto";
  EXPECT_TRUE(counter_violations(c).empty());
  c.verify_taken = "batched";
  EXPECT_FALSE(counter_violations(c).empty());
  c.verify_taken = "pad";
  c.verify_chosen = "batched";  // auto chose batched, the runtime ran the padded path
  EXPECT_FALSE(counter_violations(c).empty());
  c.verify_requested = "pad";
  c.verify_chosen = "walk";  // a verifier built for another arm than requested
  EXPECT_FALSE(counter_violations(c).empty());
  c.verify_chosen = "pad";
  c.round_violation_count = 1;
  c.round_violations = {"round 3: pad: 15 rows projected, P = 16"};
  EXPECT_FALSE(counter_violations(c).empty());
}

}  // namespace
}  // namespace nextn
