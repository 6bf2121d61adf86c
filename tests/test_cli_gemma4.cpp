// `nextn generate` with Gemma 4 checkpoints as a user runs it: transformers'
// greedy tokens, the same tokens with the assistant (--draft DIR) and with
// the oracle at several block sizes, and one `error:` line for pairings
// that cannot run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "gemma4_fixture_util.h"

namespace nextn {
namespace {

using test::expect_one_error_line;
using test::run_cli;

std::string ids(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

std::vector<int32_t> tokens_of(const test::CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out).at("tokens").get<std::vector<int32_t>>();
}

TEST(CliGemma4, GreedyAssistantAndOracleGiveTransformersTokens) {
  const auto dirs = test::gemma4_fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) {
    const auto ref = test::load_gemma4_reference(dir);
    const std::string base = "generate -m " + ref.target() + " --prompt-ids " + ids(ref.prompt) + " -n " +
                             std::to_string(ref.greedy.size()) + " --ignore-eos --json";
    EXPECT_EQ(tokens_of(run_cli(base)), ref.greedy) << dir;
    for (int K : {2, 4, 9}) {
      const std::string k = " --block-size " + std::to_string(K);
      EXPECT_EQ(tokens_of(run_cli(base + " --draft " + ref.assistant() + k)), ref.greedy) << dir << " K=" << K;
      EXPECT_EQ(tokens_of(run_cli(base + " --draft oracle --accept-rate 0.7" + k)), ref.greedy) << dir;
    }
    const auto r = run_cli(base + " --draft " + ref.assistant());
    EXPECT_EQ(nlohmann::json::parse(r.out)["stats"]["draft"], "assistant");
  }
}

TEST(CliGemma4, TextPromptAndChatGiveTransformersTokensAndText) {
  int checked = 0;
  for (const std::string& dir : test::gemma4_fixture_dirs()) {
    const auto ref = test::load_gemma4_reference(dir);
    if (ref.prompt_text.empty()) continue;
    ASSERT_EQ(ref.prompt_text.find('\''), std::string::npos);
    const std::string base = "generate -m " + ref.target() + " --prompt '" + ref.prompt_text + "' -n " +
                             std::to_string(ref.text_greedy.size()) + " --ignore-eos --json";
    for (const std::string& draft : {std::string("none"), ref.assistant()}) {
      const auto plain = run_cli(base + " --draft " + draft);
      EXPECT_EQ(tokens_of(plain), ref.text_greedy) << draft;
      EXPECT_EQ(nlohmann::json::parse(plain.out)["text"], ref.text_greedy_text);
      const auto chat = run_cli(base + " --chat --draft " + draft);
      EXPECT_EQ(tokens_of(chat), ref.chat_greedy) << draft;
      EXPECT_EQ(nlohmann::json::parse(chat.out)["text"], ref.chat_greedy_text);
    }
    ++checked;
  }
  EXPECT_GE(checked, 1) << "no Gemma 4 fixture ships a tokenizer";
}

// The verify decision's benchmark runs a Gemma target too (oracle drafts):
// every arm's tokens equal greedy and its counters pass the identity checks,
// and the rows each arm projected tell the arms apart.
TEST(CliGemma4, BenchVerifyRunsEveryArm) {
  const auto dirs = test::gemma4_fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  const auto ref = test::load_gemma4_reference(dirs.front());
  const auto r = run_cli("bench verify -m " + ref.target() +
                         " --draft oracle --accept-rate 0.8 --block-sizes 3,8 --repeats 1 -n 12 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("refused").is_null()) << j.at("refused");
  ASSERT_EQ(j.at("arms").size(), 8u);
  for (const auto& arm : j.at("arms")) {
    const auto& c = arm.at("counters");
    EXPECT_TRUE(arm.at("tokens_match").get<bool>()) << arm.at("verify");
    EXPECT_TRUE(arm.at("identity_violations").empty()) << arm.at("verify");
    EXPECT_EQ(c.at("verify_taken"), arm.at("verify"));
    if (arm.at("verify") == "walk") {
      EXPECT_EQ(c.at("walk_rows"), c.at("rows_projected"));
    }
    if (arm.at("verify") == "fused") {
      EXPECT_EQ(c.at("logits_bytes_written"), 0);
    }
  }
  expect_one_error_line(run_cli("bench verify -m " + ref.target() + " --draft mtp --block-sizes 3 -n 4"), "--draft mtp");
}

TEST(CliGemma4, PairingsThatCannotRunAreOneErrorLine) {
  const auto dirs = test::gemma4_fixture_dirs();
  ASSERT_GE(dirs.size(), 2u);
  const auto a = test::load_gemma4_reference(dirs[0]), b = test::load_gemma4_reference(dirs[1]);
  const std::string g = " --prompt-ids 5,6,7 -n 4";
  // Another target's assistant: hidden sizes differ (48 vs 64).
  expect_one_error_line(run_cli("generate -m " + a.target() + g + " --draft " + b.assistant()), "backbone_hidden_size");
  expect_one_error_line(run_cli("generate -m " + a.assistant() + g), "gemma4_assistant");
  expect_one_error_line(run_cli("generate -m " + a.target() + g + " --draft " + a.target()), "not a Gemma 4 assistant");
  expect_one_error_line(run_cli("generate -m " + a.target() + g + " --draft mtp"), "no MTP head");
  expect_one_error_line(run_cli("generate -m " + a.target() + g + " --backend cuda"), "--backend cuda");
  // The verify arms are bench verify's: generate has no arm flag.
  expect_one_error_line(run_cli("generate -m " + a.target() + g + " --draft " + a.assistant() + " --verify walk"),
                        "--verify");
}

}  // namespace
}  // namespace nextn
