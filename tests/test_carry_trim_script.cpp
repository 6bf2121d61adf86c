// scripts/device/carry_trim.sh in a scratch git repository: `on` takes the
// named paths out of the index and ignores them (the files stay on disk and
// nothing untracked is left to travel), `off` gives back the index and the
// exclude file exactly, and a second `on` is refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;

// Runs a shell command in `dir`; returns its exit status, output and errors in `out`.
int sh(const std::string& dir, const std::string& cmd, std::string* out = nullptr) {
  const auto r = test::run_shell("cd " + dir + " && { " + cmd + "; } 2>&1");
  if (out != nullptr) *out = r.out;
  return r.code;
}

TEST(CarryTrimScript, OnLeavesPathsBehindAndOffRestoresTheIndex) {
  if (std::system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no git";
  const std::string root = fs::path(NEXTN_FIXTURES).parent_path().parent_path().string();
  test::TempDir tmp;
  const std::string repo = tmp.str() + "/repo";
  test::write_file(repo + "/docs/a.md", std::string(4096, 'd'));
  test::write_file(repo + "/src/b.cpp", "int b;\n");
  test::write_file(repo + "/tests/fixtures/keep.json", "{}\n");
  test::write_file(repo + "/tests/fixtures/tokenizers/t.json", std::string(2048, 't'));
  fs::create_directories(repo + "/scripts/device");
  fs::copy_file(root + "/scripts/device/carry_trim.sh", repo + "/scripts/device/carry_trim.sh");
  ASSERT_EQ(sh(repo, "git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm init && "
                     "mkdir -p .git/info && touch .git/info/exclude"),
            0);
  std::string exclude_before;
  ASSERT_EQ(sh(repo, "cat .git/info/exclude", &exclude_before), 0);

  std::string out;
  ASSERT_EQ(sh(repo, "NEXTN_TRIM_PATHS='docs src tests/fixtures/tokenizers absent' bash scripts/device/carry_trim.sh on",
               &out),
            0)
      << out;
  EXPECT_NE(out.find("skipped absent"), std::string::npos) << out;
  ASSERT_EQ(sh(repo, "git ls-files", &out), 0);
  EXPECT_EQ(out.find("docs/"), std::string::npos) << out;
  EXPECT_EQ(out.find("src/"), std::string::npos) << out;
  EXPECT_EQ(out.find("tokenizers/"), std::string::npos) << out;
  EXPECT_NE(out.find("tests/fixtures/keep.json"), std::string::npos) << out;
  ASSERT_EQ(sh(repo, "git ls-files --others --exclude-standard", &out), 0);
  EXPECT_EQ(out, "") << "left behind, yet untracked and not ignored: it would travel";
  EXPECT_TRUE(fs::exists(repo + "/docs/a.md"));
  ASSERT_EQ(sh(repo, "bash scripts/device/carry_trim.sh status", &out), 0);
  EXPECT_NE(out.find("commit nothing: docs src tests/fixtures/tokenizers"), std::string::npos) << out;
  EXPECT_NE(sh(repo, "bash scripts/device/carry_trim.sh on", &out), 0);
  EXPECT_NE(out.find("error: carry_trim.sh is already on"), std::string::npos) << out;

  ASSERT_EQ(sh(repo, "bash scripts/device/carry_trim.sh off", &out), 0) << out;
  ASSERT_EQ(sh(repo, "git status --porcelain", &out), 0);
  EXPECT_EQ(out, "") << "off leaves the index and tree as committed";
  std::string exclude_after;
  ASSERT_EQ(sh(repo, "cat .git/info/exclude", &exclude_after), 0);
  EXPECT_EQ(exclude_after, exclude_before);
  EXPECT_NE(sh(repo, "bash scripts/device/carry_trim.sh sideways", &out), 0);
  EXPECT_NE(out.find("error: usage"), std::string::npos) << out;
}

}  // namespace
}  // namespace nextn
