// The guarded harness (src/bench) on the toy runtime: it times attributable
// arms, refuses the planted walk fault and a backend whose arms disagree on
// tokens.
#include <gtest/gtest.h>

#include <regex>

#include <filesystem>
#include <fstream>

#include "bench/decode_bench.h"
#include "bench/machine.h"
#include "bench/verify_bench.h"
#include "core/error.h"
#include "test_spec_mock.h"

namespace nextn {
namespace {

using testing::MockOptions;

bench::VerifyBenchOptions small_options() {
  bench::VerifyBenchOptions o;
  o.block_sizes = {3, 8};
  o.repeats = 3;
  o.prompt = {5, 6, 7, 8};
  o.max_new_tokens = 40;
  return o;
}

TEST(SpecBench, Summaries) {
  auto s = bench::summarize({3, 1, 2});
  EXPECT_EQ(s.median, 2);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 3);
  s = bench::summarize({4, 1, 2, 3});
  EXPECT_EQ(s.median, 2.5);
  EXPECT_EQ(bench::summarize({}).n, 0);
}

TEST(SpecBench, TimesAttributableArms) {
  bench::VerifyBench b(testing::mock_factory(MockOptions{}), small_options());
  b.attribute();
  ASSERT_TRUE(b.report().refusals.empty()) << b.report().refusals.front();
  b.time();
  const auto& r = b.report();
  ASSERT_TRUE(r.refusals.empty()) << r.refusals.front();
  ASSERT_EQ(r.arms.size(), 8u);
  for (const auto& a : r.arms) {
    EXPECT_EQ(a.tokens_per_second.size(), 3u);
    EXPECT_TRUE(a.tokens_match);
    EXPECT_EQ(a.counters.verify_taken, verify_arm_name(a.arm));
  }
  const std::string counters = bench::counters_text(r);
  EXPECT_NE(counters.find("walk"), std::string::npos);
  EXPECT_NE(bench::table_text(r, b.options()).find("vs batched"), std::string::npos);
  const auto j = bench::report_json(r, b.options());
  EXPECT_TRUE(j["refused"].is_null());
  EXPECT_EQ(j["arms"].size(), 8u);
}

// A refusal names the walk arm at some K and no other arm.
void expect_only_walk_refused(const bench::VerifyBenchReport& r) {
  ASSERT_FALSE(r.refusals.empty());
  for (const auto& msg : r.refusals) EXPECT_NE(msg.find(" walk: "), std::string::npos) << msg;
  for (const auto& a : r.arms) {
    EXPECT_TRUE(a.tokens_match);  // silent faults: the output is right
    EXPECT_EQ(a.violations.empty(), a.arm != VerifyArm::Walk) << verify_arm_name(a.arm);
    if (a.arm == VerifyArm::Walk) {
      EXPECT_EQ(a.counters.verify_taken, "batched");
      EXPECT_EQ(a.counters.walk_rows, 0);
    }
  }
}

TEST(SpecBench, RefusesThePlantedWalkFault) {
  {  // control: the same bench without the fault times every arm
    bench::VerifyBench b(testing::mock_factory(MockOptions{}), small_options());
    b.attribute();
    ASSERT_TRUE(b.report().refusals.empty()) << b.report().refusals.front();
  }
  bench::VerifyBenchOptions faulty = small_options();
  faulty.fault = Fault::WalkAsBatched;
  bench::VerifyBench b(testing::mock_factory(MockOptions{}), faulty);
  b.attribute();
  expect_only_walk_refused(b.report());
  EXPECT_THROW(b.time(), Error);  // no timing once refused
}

TEST(SpecBench, RefusesTheRuntimeWalkFault) {
  MockOptions mo;
  mo.walk_as_batched = true;  // inside the runtime: the verifier calls head_walk as usual
  bench::VerifyBench b(testing::mock_factory(mo), small_options());
  b.attribute();
  expect_only_walk_refused(b.report());
  bool names_path = false;
  for (const auto& msg : b.report().refusals) names_path |= msg.find("'batched'") != std::string::npos;
  EXPECT_TRUE(names_path) << b.report().refusals.front();
  EXPECT_THROW(b.time(), Error);
}

TEST(SpecBench, OneRuntimeServesEveryRun) {
  int built = 0;
  auto inner = testing::mock_factory(MockOptions{});
  RuntimeFactory counting = [&](int cap) {
    ++built;
    return inner(cap);
  };
  auto o = small_options();
  o.draft = DraftKind::Oracle;
  o.oracle.accept_rate = 0.8;
  o.draft_cost = DraftCost::Mtp;
  bench::VerifyBench b(counting, o);
  b.attribute();
  ASSERT_TRUE(b.report().refusals.empty()) << b.report().refusals.front();
  b.time();
  ASSERT_TRUE(b.report().refusals.empty()) << b.report().refusals.front();
  EXPECT_EQ(built, 1);
  EXPECT_EQ(b.report().runtimes_built, 1);
  for (const auto& a : b.report().arms) {
    EXPECT_GT(a.mtp_work.chained_steps, 0);  // the MTP chain ran for its cost
    EXPECT_EQ(a.draft_ms.size(), 3u);
  }
  EXPECT_EQ(bench::report_json(b.report(), b.options())["settings"]["draft_cost"], "mtp");
}

TEST(SpecBench, RefusesArmsThatDisagreeOnTokens) {
  MockOptions mo;
  mo.inexact_fused = true;
  auto o = small_options();
  o.draft = DraftKind::Oracle;
  o.oracle.accept_rate = 1.0;  // full rounds, so the fused bug bites
  bench::VerifyBench b(testing::mock_factory(mo), o);
  b.attribute();
  bool saw = false;
  for (const auto& msg : b.report().refusals) saw |= msg.find("fused: tokens differ") != std::string::npos;
  EXPECT_TRUE(saw);
}

TEST(SpecBench, RejectsImpossibleOptions) {
  auto f = testing::mock_factory(MockOptions{});
  auto o = small_options();
  o.block_sizes = {64};
  EXPECT_THROW(bench::VerifyBench(f, o), Error);  // pad has no width above 64
  o.arms = {VerifyArm::Batched};
  EXPECT_NO_THROW(bench::VerifyBench(f, o));
  o.block_sizes = {1};
  EXPECT_THROW(bench::VerifyBench(f, o), Error);
  o = small_options();
  o.arms = {VerifyArm::Auto};
  EXPECT_THROW(bench::VerifyBench(f, o), Error);
  o = small_options();
  o.draft = DraftKind::None;
  EXPECT_THROW(bench::VerifyBench(f, o), Error);
  o = small_options();
  o.repeats = 0;
  EXPECT_THROW(bench::VerifyBench(f, o), Error);
  o = small_options();
  o.block_sizes = {3, 3};
  EXPECT_THROW(bench::VerifyBench(f, o), Error);
}

TEST(SpecBench, DecodeBench) {
  bench::DecodeBenchOptions o;
  o.prompt_len = 6;
  o.max_new_tokens = 10;
  o.repeats = 2;
  const auto r = bench::run_decode_bench(testing::mock_factory(MockOptions{}), 50, o);
  EXPECT_EQ(r.decode_tps.size(), 2u);
  EXPECT_EQ(r.generated, 10);
  EXPECT_GT(r.decode.median, 0);
}

TEST(SpecBench, MachineRecord) {
  auto m = bench::machine_begin("cpu");
  bench::machine_end(m, "cpu");
  // Built from a git checkout, so the build-time stamp is a commit hash.
  EXPECT_EQ(bench::source_commit_origin(), "git");
  EXPECT_TRUE(std::regex_match(m.commit, std::regex("[0-9a-f]{40}(-dirty)?"))) << m.commit;
  // Three load averages read from /proc/loadavg, never a fallback word.
  const std::regex loads("[0-9]+\\.[0-9]{2} [0-9]+\\.[0-9]{2} [0-9]+\\.[0-9]{2}");
  EXPECT_TRUE(std::regex_match(m.load_before, loads)) << m.load_before;
  EXPECT_TRUE(std::regex_match(m.load_after, loads)) << m.load_after;
  EXPECT_NE(bench::machine_text(m).find("commit"), std::string::npos);
}

}  // namespace
}  // namespace nextn
