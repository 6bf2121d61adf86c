// `nextn generate` and `nextn bench` as a user runs them: speculative output
// equals plain greedy with stats; impossible flags are one `error:` line and
// exit 1; the verify harness refuses the planted walk fault with exit 2 and
// no table, prints a table otherwise; generate runs the batched verify head
// and has no arm flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

const std::string kRoot = NEXTN_FIXTURES;
const std::string kTied = kRoot + "/qwen35-causal-tied";
const std::string kQ4 = kRoot + "/qwen35-causal-tied-mlx-q4";
const std::string kPrompt = "--prompt-ids 764,2009,1185,347,498,393,1093,1155,785,1252";

std::vector<std::string> mtp_fixtures() {
  std::vector<std::string> out;
  for (const char* f : {"qwen35-causal-tied", "qwen35-cond-untied", "qwen35-causal-sharded"})
    if (fs::exists(kRoot + "/" + f + "/config.json")) out.push_back(kRoot + "/" + f);
  return out;
}

nlohmann::json parse_json(const test::CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_one_error(const test::CliResult& r, const std::string& needle, int code = 1) {
  EXPECT_EQ(r.code, code) << r.out << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
}

class CliGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kTied + "/config.json")) << kTied << " is committed; a missing fixture is a failure";
  }
};

TEST_F(CliGenerate, MtpOutputEqualsPlainGreedyWithStats) {
  for (const auto& dir : mtp_fixtures()) {
    const std::string base = "generate -m " + dir + " --prompt-ids 5,6,7,8,9 -n 20 --json";
    const auto plain = parse_json(run_cli(base + " --draft none"));
    ASSERT_EQ(plain["tokens"].size(), plain["stats"]["generated"].get<size_t>());
    EXPECT_TRUE(plain["text"].is_null());
    for (int K : {2, 4, 7}) {
      const auto spec = parse_json(run_cli(base + " --draft mtp --block-size " + std::to_string(K)));
      EXPECT_EQ(spec["tokens"], plain["tokens"]) << dir << " K=" << K;
      const auto& s = spec["stats"];
      for (const char* k : {"rounds", "drafted", "accepted", "accepted_at", "rows_projected", "walk_steps",
                            "block_size", "verify_requested", "verify_taken", "tokens_per_second"})
        EXPECT_TRUE(s.contains(k)) << k;
      EXPECT_EQ(s["block_size"], K);
      EXPECT_EQ(s["verify_requested"], "batched");  // the recorded verdict, the only head the product runs
      EXPECT_EQ(s["verify_taken"], "batched");      // what the runtime's own head counters say ran
      EXPECT_EQ(s["rows_projected"], s["drafted"].get<int>() + s["rounds"].get<int>());
      EXPECT_TRUE(s["identity_violations"].empty()) << s.dump();
      EXPECT_EQ(s["accepted_at"].size(), size_t(K - 1));
      EXPECT_EQ(s["draft"], "mtp");
    }
  }
}

TEST_F(CliGenerate, OracleDraftsAtAFixedRateAndPattern) {
  const std::string plain_cmd = "generate -m " + kTied + " " + kPrompt + " -n 24 --json";
  const std::string base = plain_cmd + " --block-size 5";
  const auto plain = parse_json(run_cli(plain_cmd));
  const auto rate = parse_json(run_cli(base + " --draft oracle --accept-rate 0.7 --seed 3"));
  EXPECT_EQ(rate["tokens"], plain["tokens"]);
  const auto all = parse_json(run_cli(base + " --draft oracle --accept-rate 1"));
  EXPECT_EQ(all["tokens"], plain["tokens"]);
  EXPECT_EQ(all["stats"]["accepted"], all["stats"]["drafted"]);
  const auto none = parse_json(run_cli(base + " --draft oracle --accept-pattern 0"));
  EXPECT_EQ(none["stats"]["accepted"], 0);
  EXPECT_EQ(none["stats"]["rounds"], 23);
  const auto pat = parse_json(run_cli(base + " --draft oracle --accept-pattern 1101"));
  EXPECT_EQ(pat["tokens"], plain["tokens"]);
  // Per position: every first draft true, every second one wrong.
  const auto pos = parse_json(run_cli(base + " --draft oracle --accept-rates 1,0"));
  EXPECT_EQ(pos["tokens"], plain["tokens"]);
  const auto& at = pos["stats"]["accepted_at"];
  EXPECT_GE(at[0].get<int>(), pos["stats"]["rounds"].get<int>() - 1) << pos.dump();  // the last round may draft none
  EXPECT_EQ(at[1], 0);
  EXPECT_EQ(pos["stats"]["accepted"], at[0]);
  expect_one_error(run_cli(base + " --draft oracle --accept-rates 0.9,x"), "--accept-rates");
  expect_one_error(run_cli(base + " --draft oracle --accept-rates 0.9,1.5"), "--accept-rates");
  expect_one_error(run_cli(base + " --draft oracle --accept-rates 0.9 --accept-rate 0.5"), "exclusive");
  expect_one_error(run_cli(base + " --draft mtp --accept-rates 0.9"), "--draft oracle only");
}

// --block-size auto: the step's cost model picks K every round (any K is
// exact), the stats say which.
TEST_F(CliGenerate, AutoBlockSizeIsExactAndReportsItsChoices) {
  const std::string plain_cmd = "generate -m " + kTied + " " + kPrompt + " -n 24 --json";
  const auto plain = parse_json(run_cli(plain_cmd));
  for (const std::string draft : {" --draft mtp", " --draft oracle --accept-rates 0.9,0.8,0.7"}) {
    const auto r = parse_json(run_cli(plain_cmd + draft + " --block-size auto"));
    EXPECT_EQ(r["tokens"], plain["tokens"]) << draft;
    const auto& s = r["stats"];
    EXPECT_EQ(s["block_policy"], "auto");
    EXPECT_EQ(s["block_size"], 8);
    int64_t rounds = 0;
    for (const auto& n : s["rounds_at_block_size"]) rounds += n.get<int64_t>();
    EXPECT_EQ(rounds, s["rounds"].get<int64_t>()) << s.dump();
  }
  expect_one_error(run_cli(plain_cmd + " --draft mtp --block-size automatic"), "--block-size");
  expect_one_error(run_cli(plain_cmd + " --block-size auto"), "--block-size applies to a drafter only");
}

TEST_F(CliGenerate, DefaultBlockSizeAndModel) {
  const auto r = parse_json(run_cli("generate " + kPrompt + " -n 8 --draft mtp --json"));
  EXPECT_EQ(r["stats"]["block_size"], 3);  // one MTP layer + 2
  EXPECT_EQ(r["tokens"].size(), 8u);
}

// Issue 10's "done when", on the shipped default model: a text prompt in,
// recognizable code out, MTP output equal to plain greedy, and the trained
// MTP head's first draft accepted in more than half of the rounds.
TEST_F(CliGenerate, DefaultModelContinuesCodeWithAnAcceptedMtpHead) {
  const std::string args = "generate --prompt \"def fibonacci(n):\" -n 48 --json";
  const auto greedy = parse_json(run_cli(args + " --draft none"));
  const auto mtp = parse_json(run_cli(args + " --draft mtp --block-size 3"));
  EXPECT_EQ(mtp["tokens"], greedy["tokens"]);
  ASSERT_TRUE(mtp["text"].is_string());
  EXPECT_EQ(mtp["text"], greedy["text"]);
  const std::string text = mtp["text"].get<std::string>();
  EXPECT_NE(text.find("\n"), std::string::npos) << text;
  EXPECT_TRUE(text.find("return") != std::string::npos || text.find("def ") != std::string::npos ||
              text.find("self") != std::string::npos)
      << text;
  const auto& stats = mtp["stats"];
  ASSERT_GT(stats["rounds"].get<int>(), 0);
  EXPECT_GT(stats["accepted_at"][0].get<double>() / stats["rounds"].get<double>(), 0.5) << stats.dump();
}

TEST_F(CliGenerate, ChatWrapsThePromptInTheModelsTemplate) {
  const auto plain = parse_json(run_cli("generate --prompt \"Sort a list\" -n 4 --json"));
  const auto chat = parse_json(run_cli("generate --prompt \"Sort a list\" --chat -n 4 --json"));
  // <|im_start|>user ... <|im_end|> <|im_start|>assistant ...: at least four more tokens.
  EXPECT_GE(chat["stats"]["prompt_tokens"].get<int>(), plain["stats"]["prompt_tokens"].get<int>() + 4);
  const auto no_prompt = run_cli("generate --prompt-ids 1,2 --chat -n 2");
  EXPECT_EQ(no_prompt.code, 1);
  ASSERT_EQ(no_prompt.err_lines().size(), 1u) << no_prompt.err;
  EXPECT_NE(no_prompt.err.find("--chat"), std::string::npos) << no_prompt.err;
}

TEST_F(CliGenerate, PlainTextOutputAndStatsLine) {
  const auto r = run_cli("generate -m " + kTied + " " + kPrompt + " -n 6 --draft mtp");
  EXPECT_EQ(r.code, 0) << r.err;
  const auto j = parse_json(run_cli("generate -m " + kTied + " " + kPrompt + " -n 6 --json"));
  std::string want;
  for (size_t i = 0; i < j["tokens"].size(); ++i) {
    if (i > 0) want += ' ';
    want += std::to_string(j["tokens"][i].get<int>());
  }
  EXPECT_EQ(r.out, want + "\n");
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("stats: ", 0), 0u) << r.err;
}

TEST_F(CliGenerate, ImpossibleFlagsAreOneErrorLine) {
  const std::string g = "generate -m " + kTied + " " + kPrompt + " -n 4 ";
  expect_one_error(run_cli("generate -m " + kTied + " --prompt hello -n 4"), "tokenizer.json: not found");
  expect_one_error(run_cli(g + "--draft " + kTied), "drafts for a Gemma 4 target");
  expect_one_error(run_cli(g + "--draft mtp --block-size 1"), "--block-size 1");
  expect_one_error(run_cli(g + "--draft mtp --block-size 65"), "--block-size 65");
  expect_one_error(run_cli(g + "--draft oracle --accept-rate 1.5"), "--accept-rate");
  expect_one_error(run_cli(g + "--draft oracle --accept-rate -0.1"), "--accept-rate");
  expect_one_error(run_cli(g + "--draft oracle --accept-rate 0.5 --accept-pattern 10"), "exclusive");
  expect_one_error(run_cli(g + "--draft oracle --accept-pattern 102"), "--accept-pattern");
  expect_one_error(run_cli(g + "--draft oracle --accept-pattern ''"), "empty");
  expect_one_error(run_cli(g + "--draft oracle"), "--accept-rate");
  expect_one_error(run_cli(g + "--draft mtp --accept-rate 0.5"), "oracle");
  // The verify arms are bench verify's (bench/verify_arms.h), not the product's.
  expect_one_error(run_cli(g + "--draft mtp --verify walk"), "--verify");
  expect_one_error(run_cli(g + "--draft mtp --pad-width 16"), "--pad-width");
  expect_one_error(run_cli("generate -m " + kTied + " " + kPrompt + " -n -1"), "-n -1");
  expect_one_error(run_cli("generate -m " + kTied + " --prompt-ids 1,2,99999 -n 4"), "99999");
  expect_one_error(run_cli("generate -m " + kTied + " -n 4"), "no prompt");
  expect_one_error(run_cli(g + "--backend tpu"), "tpu");
  if (fs::exists(kQ4 + "/config.json"))
    expect_one_error(run_cli("generate -m " + kQ4 + " " + kPrompt + " -n 4 --draft mtp"), "no MTP head");
}

TEST_F(CliGenerate, OracleAtMtpCostRunsTheMtpHeadAndMatchesGreedy) {
  const std::string g = "generate -m " + kTied + " " + kPrompt + " -n 24 --json ";
  const auto plain = parse_json(run_cli(g));
  const auto costed =
      parse_json(run_cli(g + "--draft oracle --accept-rate 0.8 --draft-cost mtp --block-size 5"));
  EXPECT_EQ(costed["tokens"], plain["tokens"]);
  EXPECT_EQ(costed["stats"]["draft_cost"], "mtp");
  EXPECT_GT(costed["stats"]["mtp_work"]["chained_steps"].get<int>(), 0);  // counted by the CPU runtime's MTP path
  EXPECT_EQ(costed["stats"]["mtp_work"]["argmax_rows"], costed["stats"]["drafted"]);
  const auto free_run = parse_json(run_cli(g + "--draft oracle --accept-rate 0.8 --block-size 5"));
  EXPECT_EQ(free_run["stats"]["mtp_work"]["entries"], 0);
  EXPECT_EQ(free_run["stats"]["accepted_at"], costed["stats"]["accepted_at"]);
  expect_one_error(run_cli(g + "--draft mtp --draft-cost mtp"), "--draft-cost");
  expect_one_error(run_cli(g + "--draft oracle --accept-rate 0.8 --draft-cost cheap"), "cheap");
  if (fs::exists(kQ4 + "/config.json"))
    expect_one_error(run_cli("generate -m " + kQ4 + " " + kPrompt + " -n 4 --draft oracle --accept-rate 0.8 --draft-cost mtp"),
                     "no MTP head");
}

TEST_F(CliGenerate, BenchVerifyPrintsCountersThenATable) {
  const auto r = run_cli("bench verify -m " + kTied + " --block-sizes 3,8 --verify batched,walk,pad,fused --repeats 2 -n 16");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const size_t counters = r.out.find("counters");
  const size_t timing = r.out.find("timing:");
  ASSERT_NE(counters, std::string::npos) << r.out;
  ASSERT_NE(timing, std::string::npos) << r.out;
  EXPECT_LT(counters, timing);
  for (const char* s : {"vs batched", "commit:", "load average", "rows", "walk_rows", "head_MB/round", "draft_ms"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  const auto j = parse_json(run_cli("bench verify -m " + kTied +
                                    " --block-sizes 4 --verify batched,walk --draft oracle --accept-rate 0.8 --repeats 1 -n 12 --json"));
  EXPECT_TRUE(j["refused"].is_null());
  ASSERT_EQ(j["arms"].size(), 2u);
  EXPECT_TRUE(j["arms"][0].contains("tokens_per_second"));
  EXPECT_TRUE(j["machine"].contains("commit"));
}

// One fault, two places: the verifier's walk arm (walk-as-batched) or the CPU
// runtime's head_walk (runtime-walk-as-batched). Either way bench verify prints
// the counters, refuses with exit 2 and prints no table; without the fault the
// same command prints one (so the assertions below can fail).
void expect_refused_fault(const std::string& fault, const std::string& model, const std::string& prompt) {
  const std::string cmd = "bench verify -m " + model + " " + prompt +
                          " --block-sizes 3,4 --verify batched,walk --draft oracle --accept-rate 0.8 --repeats 1 -n 12";
  const auto clean = run_cli(cmd);
  ASSERT_EQ(clean.code, 0) << clean.out << clean.err;
  ASSERT_NE(clean.out.find("timing:"), std::string::npos) << clean.out;
  const auto r = run_cli(cmd + " --fault " + fault);
  expect_one_error(r, "cannot be attributed", 2);
  EXPECT_NE(r.out.find("counters"), std::string::npos) << r.out;  // counters are printed...
  EXPECT_EQ(r.out.find("timing:"), std::string::npos) << r.out;   // ...and no table
  // The refusal names the walk arm at both K, and what the runtime says ran.
  for (const char* k : {"K=3 walk: ", "K=4 walk: "}) EXPECT_NE(r.out.find(k), std::string::npos) << k << r.out;
  EXPECT_EQ(r.out.find("K=3 batched: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the runtime's head path says 'batched' ran, the arm is 'walk'"), std::string::npos) << r.out;
  const auto j = run_cli(cmd + " --json --fault " + fault);
  EXPECT_EQ(j.code, 2);
  const auto jj = nlohmann::json::parse(j.out);
  ASSERT_FALSE(jj["refused"].is_null());
  for (const auto& arm : jj["arms"]) {
    EXPECT_FALSE(arm.contains("tokens_per_second"));
    EXPECT_TRUE(arm["tokens_match"].get<bool>());  // a silent fault: right tokens, wrong path
    if (arm["verify"] == "walk") {
      EXPECT_EQ(arm["counters"]["verify_taken"], "batched");
      EXPECT_EQ(arm["counters"]["walk_rows"], 0);
      EXPECT_EQ(arm["counters"]["head_paths"], nlohmann::json::array({"batched"}));
      EXPECT_FALSE(arm["identity_violations"].empty());
    } else {
      EXPECT_TRUE(arm["identity_violations"].empty());
    }
  }
}

TEST_F(CliGenerate, BenchVerifyRefusesThePlantedWalkFault) {
  expect_refused_fault("walk-as-batched", kTied, kPrompt);
  // An unknown fault name is a usage error, not a silent no-op.
  expect_one_error(run_cli("bench verify -m " + kTied + " --repeats 1 -n 8 --fault bogus"), "--fault");
}

TEST_F(CliGenerate, BenchVerifyRefusesTheRuntimeWalkFault) {
  expect_refused_fault("runtime-walk-as-batched", kTied, kPrompt);
}

TEST_F(CliGenerate, BenchVerifyAtMtpCostAndTheStampedCommit) {
  const auto j = parse_json(run_cli("bench verify -m " + kTied + " " + kPrompt +
                                    " --block-sizes 4 --verify batched,walk --draft oracle --accept-rate 0.8 "
                                    "--draft-cost mtp --repeats 2 -n 12 --json",
                                    "GIT_DIR=/nonexistent PATH=/nonexistent"));  // no git at run time
  EXPECT_TRUE(j["refused"].is_null());
  EXPECT_EQ(j["runtimes_built"], 1);
  EXPECT_EQ(j["settings"]["draft_cost"], "mtp");
  for (const auto& arm : j["arms"]) {
    EXPECT_GT(arm["mtp_work"]["chained_steps"].get<int>(), 0);
    EXPECT_TRUE(arm.contains("draft_ms"));
  }
  const std::string commit = j["machine"]["commit"];
  EXPECT_NE(commit, "unknown");
  EXPECT_GE(commit.size(), 40u) << commit;
  EXPECT_EQ(j["machine"]["commit_source"], "git");
}

TEST_F(CliGenerate, BenchFlagsAreChecked) {
  const std::string v = "bench verify -m " + kTied + " --repeats 1 -n 8 ";
  expect_one_error(run_cli(v + "--verify batched,auto"), "auto");
  expect_one_error(run_cli(v + "--verify batched,nope"), "nope");
  expect_one_error(run_cli(v + "--block-sizes 3,65"), "65");
  expect_one_error(run_cli(v + "--block-sizes 64 --verify pad"), "no pad arm");
  expect_one_error(run_cli(v + "--draft none"), "--draft none");
  expect_one_error(run_cli(v + "--draft oracle"), "--accept-rate");
  expect_one_error(run_cli(v + "--repeats 0"), "--repeats");
}

TEST_F(CliGenerate, BenchDecode) {
  const auto r = run_cli("bench decode -m " + kTied + " --prompt-len 8 -n 8 --repeats 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("prefill tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("load average"), std::string::npos) << r.out;
  const auto j = parse_json(run_cli("bench decode -m " + kTied + " --prompt-len 8 -n 8 --repeats 2 --json"));
  EXPECT_GT(j["decode_tokens_per_second"]["median"].get<double>(), 0);
  EXPECT_GT(j["prefill_tokens_per_second"]["median"].get<double>(), 0);
}

// --breakdown on a backend that does not time its operations says so (CUDA's
// profile tables are tested in tests/test_cuda_prefill.cpp), and MTP runs
// report ms per round.
TEST(CliBench, DecodeBreakdownOnTheCpuSaysItIsNotMeasured) {
  const auto r = run_cli("bench decode -m " + kTied + " --prompt-len 8 -n 8 --repeats 1 --breakdown --draft mtp");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("breakdown: this backend does not time its operations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ms per round"), std::string::npos) << r.out;
  const auto j = parse_json(run_cli("bench decode -m " + kTied + " --prompt-len 8 -n 8 --repeats 1 --breakdown --json"));
  EXPECT_FALSE(j["breakdown"]["measured"].get<bool>());
  EXPECT_TRUE(j["breakdown"]["parts"].empty());
}

}  // namespace
}  // namespace nextn
