// `nextn draft-trace --draft DIR`: the Gemma 4 assistant's teacher-forced
// first-step drafts. On every Gemma 4 fixture they equal transformers' first
// draft after each prefix (reference.json's drafts_from_prefix, made by
// scripts/fixtures/make_gemma4_fixtures.py) and every first draft the
// assistant proposes in real speculative rounds at K = 2; inputs that cannot
// run are one error line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/gemma4.h"
#include "cli_util.h"
#include "engine/generate.h"
#include "gemma4_fixture_util.h"
#include "io/gemma4_checkpoint.h"
#include "speculative/gemma4_drafter.h"

namespace nextn {
namespace {

using test::expect_one_error_line;
using test::run_cli;

std::string id_list(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

// Records each round's first draft beside the target length it was proposed
// at, into a list that outlives it (generate ends the drafter's life).
using FirstDrafts = std::vector<std::pair<int, int32_t>>;
class RecordingDrafter final : public Drafter {
 public:
  RecordingDrafter(std::unique_ptr<Drafter> inner, const ModelRuntime& rt, FirstDrafts& firsts)
      : inner_(std::move(inner)), rt_(rt), firsts_(firsts) {}
  const char* name() const override { return inner_->name(); }
  void begin(std::span<const int32_t> prompt, int32_t first) override { inner_->begin(prompt, first); }
  void propose(int n, std::vector<int32_t>& out) override {
    inner_->propose(n, out);
    if (!out.empty()) firsts_.emplace_back(rt_.target_length(), out[0]);
  }
  void commit(std::span<const int32_t> drafts, int accepted, int32_t next) override {
    inner_->commit(drafts, accepted, next);
  }

 private:
  std::unique_ptr<Drafter> inner_;
  const ModelRuntime& rt_;
  FirstDrafts& firsts_;  // (target length, first draft)
};

class DraftTraceGemma4 : public ::testing::TestWithParam<std::string> {};

TEST_P(DraftTraceGemma4, AssistantDraftsMatchTransformersAfterEveryPrefix) {
  const auto ref = test::load_gemma4_reference(GetParam());
  const auto r = run_cli("draft-trace -m " + ref.target() + " --draft " + ref.assistant() + " --prompt-ids " +
                         id_list(ref.sequence) + " --json --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto drafts = nlohmann::json::parse(r.out).at("drafts").get<std::vector<int32_t>>();
  ASSERT_EQ(drafts.size(), ref.sequence.size() - 1);
  ASSERT_FALSE(ref.drafts.empty());
  for (const auto& d : ref.drafts) {
    ASSERT_EQ(d.bonus, ref.sequence[size_t(d.prefix_len)]);  // teacher forcing: the bonus is the next token
    EXPECT_EQ(drafts[size_t(d.prefix_len - 1)], d.drafts.at(0)) << "prefix " << d.prefix_len;
  }
  // The plain listing gives the same drafts.
  const auto plain = run_cli("draft-trace -m " + ref.target() + " --draft " + ref.assistant() + " --prompt-ids " +
                             id_list(ref.sequence) + " --threads 2");
  ASSERT_EQ(plain.code, 0) << plain.err;
  std::string want;
  for (size_t i = 0; i < drafts.size(); ++i) {
    if (i) want += ' ';
    want += std::to_string(drafts[i]);
  }
  EXPECT_EQ(plain.out, want + "\n");
}

TEST_P(DraftTraceGemma4, AssistantDraftsEqualTheFirstDraftsOfRealRounds) {
  const auto ref = test::load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  AssistantModel assistant(ref.assistant(), ck.config(), 2);
  GenerateOptions o;
  o.ignore_eos = true;
  o.max_new_tokens = 24;
  o.block_size = 2;  // one draft per round: every round's draft is a first-step draft
  auto rt = make_cpu_gemma4_runtime(ck, runtime_capacity(int(ref.prompt.size()), o.max_new_tokens, 2),
                                    CpuRuntimeOptions{.threads = 2});
  FirstDrafts firsts;
  const GenerateResult g = generate_with_drafter(
      *rt, std::make_unique<RecordingDrafter>(assistant.drafter(*rt), *rt, firsts), ref.prompt, o);
  std::vector<int32_t> seq = ref.prompt;
  seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
  auto fresh = make_cpu_gemma4_runtime(ck, int(seq.size()), CpuRuntimeOptions{.threads = 2});
  const std::vector<int32_t> trace = assistant_draft_trace(*fresh, assistant, seq);
  ASSERT_EQ(trace.size(), seq.size() - 1);
  ASSERT_GE(firsts.size(), 4u);
  for (const auto& [length, draft] : firsts) {
    // A round at target length L pairs the bonus seq[L] with hidden row L-1: the trace's entry L-1.
    ASSERT_LT(size_t(length), seq.size());
    EXPECT_EQ(trace[size_t(length - 1)], draft) << "round at length " << length;
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, DraftTraceGemma4, ::testing::ValuesIn(test::gemma4_fixture_dirs()),
                         [](const auto& info) { return test::gemma4_case_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DraftTraceGemma4);

TEST(DraftTraceGemma4Errors, InputsThatCannotRunAreOneErrorLine) {
  const auto dirs = test::gemma4_fixture_dirs();
  ASSERT_GE(dirs.size(), 2u);
  const auto a = test::load_gemma4_reference(dirs[0]), b = test::load_gemma4_reference(dirs[1]);
  const std::string qwen = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";
  const std::string ids = " --prompt-ids 5,6,7";
  const auto trace = [&](const std::string& args) { return run_cli("draft-trace " + args); };
  expect_one_error_line(trace("-m " + a.target() + ids + " --draft " + b.assistant()), "backbone_hidden_size");
  expect_one_error_line(trace("-m " + a.target() + ids + " --draft " + a.target()), "not a Gemma 4 assistant");
  expect_one_error_line(trace("-m " + a.assistant() + ids + " --draft " + a.assistant()), "gemma4_assistant");
  expect_one_error_line(trace("-m " + qwen + ids + " --draft " + a.assistant()), "not one");
  expect_one_error_line(trace("-m " + a.target() + ids + " --draft mtp"), "no MTP head");
  expect_one_error_line(trace("-m " + a.target() + " --prompt-ids 5,999999 --draft " + a.assistant()),
                        "outside the vocabulary");
  expect_one_error_line(trace("-m " + a.target() + " --prompt-ids 5 --draft " + a.assistant()), "at least 2");
  expect_one_error_line(trace("-m " + a.target() + ids + " --draft oracle"), "--draft");
  expect_one_error_line(trace("-m " + a.target() + ids + " --draft " + a.assistant() + " --threads -1"), "--threads");
}

}  // namespace
}  // namespace nextn
