// scripts/decode_ab.py, flow only: real `nextn bench decode --json` objects
// from the CPU backend (a tiny in-memory preset, plain and K = 4), two
// "binaries" A and B, compared as scripts/device/decode_ab.sh compares them,
// so a broken comparison is found here and not after a device call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;

TEST(DecodeAbScript, ComparesDecodeAndSpeculativeRoundsPerBlockSize) {
  if (!test::python3_available()) GTEST_SKIP() << "no python3 for decode_ab.py";
  const std::string root = fs::path(NEXTN_FIXTURES).parent_path().parent_path().string();
  test::TempDir out;
  for (const char* side : {"base", "new"})
    for (int k : {1, 4}) {
      const std::string draft = k > 1 ? " --draft mtp --block-size 4" : "";
      const auto r = test::run_cli("bench decode --backend cpu --preset test-tiny --quant q4 --prompt-len 4 -n 8 "
                                   "--repeats 1 --json" + draft);
      ASSERT_EQ(r.code, 0) << r.err;
      std::ofstream(out.str() + "/decode_tiny_k" + std::to_string(k) + "_" + side + ".json") << r.out;
    }
  const std::string js = out.str() + "/ab.json";
  const auto ab = test::run_shell("python3 " + root + "/scripts/decode_ab.py --a '" + out.str() +
                                  "/decode_*_base.json' --b '" + out.str() +
                                  "/decode_*_new.json' --commit-a aaa --commit-b bbb --json " + js);
  ASSERT_EQ(ab.code, 0) << ab.out << ab.err;
  const std::string& table = ab.out;
  EXPECT_NE(table.find("| test-tiny | q4 | 1 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| test-tiny | q4 | 4 |"), std::string::npos) << table;
  const auto j = nlohmann::json::parse(test::read_file(js));
  ASSERT_EQ(j["rows"].size(), 4u) << j.dump();  // (K = 1, 4) x (a, b)
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["commit"], row["side"] == "a" ? "aaa" : "bbb");
    EXPECT_GT(row["decode_tok_s"].get<double>(), 0.0);
    if (row["block_size"] == 1) {
      EXPECT_TRUE(row.contains("roofline_share")) << row.dump();
      EXPECT_FALSE(row.contains("ms_per_round")) << row.dump();
    } else {
      EXPECT_EQ(row["block_size"], 4);
      EXPECT_GT(row["ms_per_round"].get<double>(), 0.0) << row.dump();
    }
  }
  // A glob that matches nothing is an error with one line, not a traceback.
  const auto bad = test::run_shell("python3 " + root + "/scripts/decode_ab.py --a '" + out.str() + "/none_*.json' --b '" +
                                   out.str() + "/decode_*_new.json' --commit-a a --commit-b b");
  EXPECT_NE(bad.code, 0);
  EXPECT_EQ(bad.err.rfind("error: no bench decode JSON object", 0), 0u) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

}  // namespace
}  // namespace nextn
