// The guarded harness (src/bench) on the toy runtime: it times attributable
// arms, refuses the planted walk fault and a backend whose arms disagree on
// tokens; calibration and auto.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bench/calibration.h"
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

struct Env {
  std::string name;
  Env(const char* n, const std::string& v) : name(n) { setenv(n, v.c_str(), 1); }
  ~Env() { unsetenv(name.c_str()); }
};

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

TEST(SpecBench, RefusesThePlantedWalkFault) {
  Env fault("NEXTN_FAULT", "walk-as-batched");
  bench::VerifyBench b(testing::mock_factory(MockOptions{}), small_options());
  b.attribute();
  const auto& r = b.report();
  ASSERT_FALSE(r.refusals.empty());
  for (const auto& msg : r.refusals) EXPECT_NE(msg.find("walk"), std::string::npos) << msg;
  EXPECT_THROW(b.time(), Error);  // no timing once refused
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
  EXPECT_FALSE(m.commit.empty());
  EXPECT_FALSE(m.load_before.empty());
  EXPECT_FALSE(m.load_after.empty());
  EXPECT_NE(bench::machine_text(m).find("commit"), std::string::npos);
}

TEST(SpecBench, CalibrationDrivesAutoAndItsAbsenceIsReported) {
  const auto root = std::filesystem::temp_directory_path() / ("nextn-calib-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "model");
  std::ofstream(root / "model" / "config.json") << "{\"model_type\": \"mock\"}";
  Env cache("NEXTN_CACHE_DIR", (root / "cache").string());
  const auto key = bench::calibration_key((root / "model").string(), "cpu");

  auto none = bench::choose_auto(key, DraftKind::Mtp, OracleSpec{}, 0);
  EXPECT_EQ(none.arm, VerifyArm::Batched);
  EXPECT_EQ(none.block_size, 0);
  EXPECT_NE(none.reason.find("no calibration"), std::string::npos);

  auto o = small_options();
  bench::VerifyBench b(testing::mock_factory(MockOptions{}), o);
  b.attribute();
  b.time();
  const std::string path = bench::write_calibration(key, b.report(), o, "test");
  EXPECT_EQ(path, bench::calibration_path(key));
  double best = 0;
  for (const auto& a : b.report().arms) best = std::max(best, a.tps.median);

  auto pick = bench::choose_auto(key, DraftKind::Mtp, OracleSpec{}, 0);
  EXPECT_NE(pick.reason.find("fastest measured"), std::string::npos) << pick.reason;
  bool found = false;
  for (const auto& a : b.report().arms)
    found |= a.arm == pick.arm && a.block_size == pick.block_size && a.tps.median == best;
  EXPECT_TRUE(found);

  auto at8 = bench::choose_auto(key, DraftKind::Mtp, OracleSpec{}, 8);
  EXPECT_EQ(at8.block_size, 8);
  auto at5 = bench::choose_auto(key, DraftKind::Mtp, OracleSpec{}, 5);
  EXPECT_EQ(at5.arm, VerifyArm::Batched);
  EXPECT_NE(at5.reason.find("no measurement"), std::string::npos) << at5.reason;
  OracleSpec rate;
  rate.accept_rate = 0.5;
  auto other = bench::choose_auto(key, DraftKind::Oracle, rate, 0);
  EXPECT_EQ(other.arm, VerifyArm::Batched);
  EXPECT_NE(other.reason.find("measured with drafter"), std::string::npos) << other.reason;
  // Another model (different config bytes) has its own key.
  std::ofstream(root / "model" / "config.json") << "{\"model_type\": \"mock2\"}";
  auto key2 = bench::calibration_key((root / "model").string(), "cpu");
  EXPECT_NE(key2.file_name(), key.file_name());
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace nextn
