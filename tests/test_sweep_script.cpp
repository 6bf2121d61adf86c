// scripts/device/sweep_verify.sh and sweep_tables.py, flow only: the GPU
// sweep's script run on the CPU backend with a fixture checkpoint (tiny
// settings), so a broken script is found here and not in a device call.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;

TEST(SweepScript, CpuFlowWritesGuardAndRunsAndTables) {
  const std::string root = fs::path(NEXTN_FIXTURES).parent_path().parent_path().string();
  const std::string fixture = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";
  if (!fs::exists(fixture + "/config.json")) GTEST_SKIP() << "fixture missing";
  test::TempDir out;
  const std::string build = fs::path(NEXTN_BINARY).parent_path().string();
  const std::string cmd = "OUT=" + out.str() + " NEXTN_BUILD=" + build +
                          " NEXTN_SWEEP_BACKEND=cpu NEXTN_SWEEP_MODELS='tiny=@" + fixture +
                          "' NEXTN_SWEEP_K=3,4 NEXTN_SWEEP_RATES='0.8' NEXTN_SWEEP_WHILE_RATES='0.8' NEXTN_SWEEP_REPEATS=1 NEXTN_SWEEP_N=12 "
                          "NEXTN_SWEEP_BUDGET=300 bash " + root + "/scripts/device/sweep_verify.sh";
  const auto sweep = test::run_shell(cmd);
  ASSERT_EQ(sweep.code, 0) << sweep.out << sweep.err;
  const auto guard = nlohmann::json::parse(test::read_file(out.str() + "/json/guard.json"));
  EXPECT_EQ(guard["verdict"], "PASS") << guard.dump();
  EXPECT_EQ(guard["exit"], 2);
  for (const char* cost : {"free", "mtp"}) {
    const auto j = nlohmann::json::parse(test::read_file(out.str() + "/json/verify_tiny_r0.8_" + cost + ".json"));
    EXPECT_TRUE(j["refused"].is_null()) << cost;
    EXPECT_EQ(j["settings"]["draft_cost"], cost);
    EXPECT_EQ(j["arms"].size(), 8u);  // K = 3, 4 x four arms
    EXPECT_EQ(j["runtimes_built"], 1);
  }
  const auto alt_walk = nlohmann::json::parse(test::read_file(out.str() + "/json/verify_tiny_r0.8_free_while.json"));
  EXPECT_EQ(alt_walk["arms"].size(), 4u);  // batched, walk at K = 3, 4
  EXPECT_TRUE(fs::exists(out.str() + "/logs.tar.gz"));
  if (!test::python3_available()) GTEST_SKIP() << "no python3 for sweep_tables.py";
  const auto tables = test::run_shell("python3 " + root + "/scripts/device/sweep_tables.py " + out.str() + " " + out.str());
  ASSERT_EQ(tables.code, 0) << tables.out << tables.err;
  const std::string& md = tables.out;
  for (const char* s : {"Guard: --fault runtime-walk-as-batched on cpu: exit 2", "draft cost mtp, oracle acceptance 0.8",
                        "| 4 | walk |", "WHILE-graph walk (--walk while)", "Winners per K",
                        "Spread between the two calls"})
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
}

}  // namespace
}  // namespace nextn
