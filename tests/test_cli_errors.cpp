// Bad input through the CLI: each case prints exactly one `error: ...` line
// naming the file, tensor or field, and exits 1. Corrupted copies of a
// transformers fixture stand in for real broken checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::run_cli;
using test::TempDir;

const std::string kFixture = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";

// Copies the fixture's checkpoint files (not the references) into `dir`.
void copy_fixture(const fs::path& dir) {
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    if (fs::exists(fs::path(kFixture) / f)) fs::copy_file(fs::path(kFixture) / f, dir / f);
}

struct Split {
  nlohmann::json header;
  std::string data;
};

Split split_safetensors(const fs::path& file) {
  const std::string bytes = test::read_file(file.string());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

void join_safetensors(const fs::path& file, const Split& s) {
  std::string h = s.header.dump();
  while (h.size() % 8) h += ' ';
  const uint64_t n = h.size();
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << s.data;
}

void expect_one_error(const test::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
  EXPECT_TRUE(r.out.empty()) << r.out;
}

std::string gen(const TempDir& d) { return "generate -m " + d.str() + " --prompt-ids 1,2,3 -n 2"; }

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kFixture)) << kFixture << " is committed; a missing fixture is a failure";
    copy_fixture(dir.path);
  }
  fs::path st() const { return dir.path / "model.safetensors"; }
  TempDir dir;
};

TEST_F(CliErrors, TruncatedFile) {
  const auto size = fs::file_size(st());
  fs::resize_file(st(), size - 100);
  expect_one_error(run_cli(gen(dir)), "model.safetensors");
}

TEST_F(CliErrors, HeaderLengthBeyondFile) {
  std::fstream f(st(), std::ios::in | std::ios::out | std::ios::binary);
  const uint64_t huge = uint64_t(1) << 40;
  f.write(reinterpret_cast<const char*>(&huge), 8);
  f.close();
  expect_one_error(run_cli(gen(dir)), "model.safetensors");
}

TEST_F(CliErrors, OverlappingTensors) {
  auto s = split_safetensors(st());
  // Point one tensor at another's bytes: same dtype and shape, overlapping span.
  std::string a, b;
  std::vector<std::string> names;
  for (auto& [name, v] : s.header.items())
    if (name != "__metadata__") names.push_back(name);
  for (size_t i = 0; i < names.size() && b.empty(); ++i)
    for (size_t k = i + 1; k < names.size() && b.empty(); ++k)
      if (s.header[names[i]]["dtype"] == s.header[names[k]]["dtype"] &&
          s.header[names[i]]["shape"] == s.header[names[k]]["shape"]) {
        a = names[i];
        b = names[k];
      }
  ASSERT_FALSE(b.empty());
  s.header[b]["data_offsets"] = s.header[a]["data_offsets"];
  join_safetensors(st(), s);
  const auto r = run_cli(gen(dir));
  expect_one_error(r, "model.safetensors");
  EXPECT_NE(r.err.find("overlap"), std::string::npos) << r.err;
}

TEST_F(CliErrors, WrongByteSizeForDtype) {
  auto s = split_safetensors(st());
  s.header["model.norm.weight"]["dtype"] = "BF16";  // stored as F32: span is twice the BF16 size
  join_safetensors(st(), s);
  expect_one_error(run_cli(gen(dir)), "model.norm.weight");
}

TEST_F(CliErrors, MissingTensor) {
  auto s = split_safetensors(st());
  s.header["renamed.weight"] = s.header["model.norm.weight"];
  s.header.erase("model.norm.weight");
  join_safetensors(st(), s);
  expect_one_error(run_cli(gen(dir)), "model.norm.weight");
}

TEST_F(CliErrors, WrongShape) {
  auto s = split_safetensors(st());
  auto& shape = s.header["model.layers.0.mlp.down_proj.weight"]["shape"];
  shape = nlohmann::json::array({shape[1], shape[0]});  // same bytes, transposed shape
  join_safetensors(st(), s);
  expect_one_error(run_cli(gen(dir)), "model.layers.0.mlp.down_proj.weight");
}

TEST_F(CliErrors, MalformedConfig) {
  std::ofstream(dir.path / "config.json", std::ios::trunc) << "{ \"model_type\": \"qwen3_5_text\", ";
  expect_one_error(run_cli(gen(dir)), "config.json");
}

TEST_F(CliErrors, ConfigFieldWrongType) {
  auto j = nlohmann::json::parse(test::read_file((dir.path / "config.json").string()));
  j["hidden_size"] = "wide";
  std::ofstream(dir.path / "config.json", std::ios::trunc) << j.dump();
  expect_one_error(run_cli(gen(dir)), "hidden_size");
}

TEST_F(CliErrors, UnknownArchitecture) {
  auto j = nlohmann::json::parse(test::read_file((dir.path / "config.json").string()));
  j["model_type"] = "llama";
  std::ofstream(dir.path / "config.json", std::ios::trunc) << j.dump();
  const auto r = run_cli(gen(dir));
  expect_one_error(r, "llama");
  EXPECT_NE(r.err.find("qwen3_5"), std::string::npos) << "should list what is supported: " << r.err;
}

TEST_F(CliErrors, MissingDirectory) { expect_one_error(run_cli("generate -m /nonexistent/model --prompt-ids 1 -n 1"), "/nonexistent/model"); }

TEST(CliFlags, ImpossibleFlags) {
  const std::string m = "-m " + kFixture + " ";
  expect_one_error(run_cli("generate " + m + "--prompt-ids 1,2 -n -1"), "-n");
  expect_one_error(run_cli("generate " + m + "--prompt-ids 1,2 --block-size 1 --draft mtp"), "block-size");
  expect_one_error(run_cli("generate " + m + "--prompt-ids 1,2 --backend tpu"), "tpu");
  expect_one_error(run_cli("generate " + m + "--prompt-ids 1,x"), "x");
  expect_one_error(run_cli("generate " + m + "--prompt-ids 1,2 --no-such-flag"), "no-such-flag");
  expect_one_error(run_cli("generate " + m + "--prompt-ids 999999"), "999999");
  expect_one_error(run_cli("draft-trace " + m + "--prompt-ids 1"), "prompt-ids");
  expect_one_error(run_cli("frobnicate"), "frobnicate");
  // checked before any device work, with or without the CUDA backend
  expect_one_error(run_cli("bench projection --shape 248320x5120junk"), "248320x5120junk");
  expect_one_error(run_cli("bench projection --shape 0x5120"), "0x5120");
  expect_one_error(run_cli("bench projection --quant q3"), "q3");
}

TEST(CliThreads, BadCountsAreOneErrorAndCountsDoNotChangeTokens) {
  if (!fs::exists(kFixture)) GTEST_SKIP() << "fixture missing";
  const std::string g = "generate -m " + kFixture + " --prompt-ids 1,2,3 -n 6 --draft mtp";
  expect_one_error(run_cli(g + " --threads 0"), "--threads");
  expect_one_error(run_cli(g + " --threads many"), "--threads");
  expect_one_error(run_cli(g, "NEXTN_THREADS=2x"), "NEXTN_THREADS");
  expect_one_error(run_cli("bench decode -m " + kFixture + " --draft oracle"), "--draft oracle");
  expect_one_error(run_cli("bench decode -m " + kFixture + " --block-size 3"), "--block-size");
  const auto one = run_cli(g + " --threads 1"), three = run_cli(g, "NEXTN_THREADS=3");
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_EQ(one.out, three.out);
}

TEST(CliBenchDecode, MtpOnTheCpuReportsAcceptance) {
  if (!fs::exists(kFixture)) GTEST_SKIP() << "fixture missing";
  const auto r = run_cli("bench decode -m " + kFixture + " --draft mtp --threads 2 -n 8 --repeats 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cpu_threads"], 2);
  EXPECT_EQ(j["settings"]["draft"], "mtp");
  EXPECT_GT(j["drafted"].get<int>(), 0);
  EXPECT_GT(j["decode_tokens_per_second"]["median"].get<double>(), 0.0);
}

TEST(CliDraftTrace, MatchesTheReference) {
  ASSERT_TRUE(fs::exists(kFixture)) << kFixture << " is committed; a missing fixture is a failure";
  const auto ref = nlohmann::json::parse(test::read_file(kFixture + "/reference.json"));
  std::string ids;
  for (const auto& v : ref["sequence"]) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(v.get<int>());
  }
  const auto r = run_cli("draft-trace -m " + kFixture + " --prompt-ids " + ids + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["drafts"], ref["drafts"]);
}

}  // namespace
}  // namespace nextn
