// The serving engine with K chosen per step (BlockPolicy::Auto, the
// server's default with a drafter) and with the oracle drafter: concurrent
// greedy responses equal their solo plain runs; the probe's launches are not
// the requests'; the block-choice metrics appear; an oracle request repeated
// replays its truth instead of running it again; a sampled request to the
// oracle is refused by field.
#include <gtest/gtest.h>

#include <thread>

#include "engine/generate.h"
#include "io/checkpoint.h"
#include "server/engine.h"
#include "tokenizer/model_tokenizer.h"
#include "engine_test_util.h"

namespace nextn::server {
namespace {

const std::string kModel = std::string(NEXTN_SOURCE_DIR) + "/models/default";
using engine_test::Finished;
using engine_test::wait;

std::shared_ptr<Job> job_for(const tok::Tokenizer& t, const std::string& prompt, int max_tokens) {
  CompletionRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return std::make_shared<Job>(r, t.encode(prompt));
}

std::string plain_text(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t, const std::string& prompt, int n) {
  return engine_test::plain_greedy_text(ckpt, t, t.encode(prompt), n, 256);
}

using engine_test::metric;

using engine_test::serve_all;

TEST(ServerEngineAuto, ConcurrentGreedyAtChosenBlockSizesEqualsPlain) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const std::vector<std::string> prompts = {"def fibonacci(n):", "import os\n", "class Stack:", "for i in range(",
                                            "x = [", "# sort a list\n", "while True:", "print("};
  for (DraftKind draft : {DraftKind::Mtp, DraftKind::Oracle}) {
    Metrics metrics;
    EngineOptions eo;
    eo.draft = draft;
    eo.block_policy = BlockPolicy::Auto;
    eo.oracle.position_rates = {0.9, 0.8, 0.7};
    eo.draft_cost = draft == DraftKind::Oracle ? DraftCost::Mtp : DraftCost::Free;
    eo.limits.max_prompt_tokens = 64;
    eo.limits.max_tokens = 48;
    eo.limits.max_batch = 8;
    Engine engine(ckpt, tokenizer, eo, metrics);
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& p : prompts) jobs.push_back(job_for(tokenizer, p, 40));
    const auto got = serve_all(engine, jobs);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i].text, plain_text(ckpt, tokenizer, prompts[i], 40)) << draft_kind_name(draft) << " " << i;
    const std::string m = metrics.render();
    const double steps = metric(m, "nextn_engine_steps_total");
    EXPECT_GT(steps, 0);
    // The probe ran forwards and head launches before the first request: not counted as the requests'.
    EXPECT_EQ(metric(m, "nextn_lm_head_launches_total"), steps) << m;
    EXPECT_GT(metric(m, "nextn_block_size_chosen_count"), 0) << m;
    EXPECT_NE(m.find("nextn_step_cost_ms{sequences=\"8\",rows=\"64\"}"), std::string::npos) << m;
    EXPECT_NE(m.find("nextn_pooled_acceptance{position=\"1\"}"), std::string::npos) << m;
    if (draft == DraftKind::Oracle) {
      EXPECT_EQ(metric(m, "nextn_oracle_truths_run_total"), double(prompts.size())) << m;
      EXPECT_EQ(metric(m, "nextn_oracle_truths_replayed_total"), 0) << m;
      EXPECT_GT(metric(m, "nextn_mtp_draft_launches_total"), 0) << m;  // draft cost mtp: the chain ran
    }
  }
}

TEST(ServerEngineAuto, TheOracleReplaysARepeatedRequestAndRefusesSampling) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  Metrics metrics;
  EngineOptions eo;
  eo.draft = DraftKind::Oracle;
  eo.oracle.accept_rate = 0.8;
  eo.block_size = 4;
  eo.limits.max_prompt_tokens = 64;
  eo.limits.max_tokens = 48;
  Engine engine(ckpt, tokenizer, eo, metrics);
  const std::string prompt = "def fibonacci(n):";
  const auto first = serve_all(engine, {job_for(tokenizer, prompt, 32)});
  const auto again = serve_all(engine, {job_for(tokenizer, prompt, 32), job_for(tokenizer, prompt, 16)});
  EXPECT_EQ(first[0].text, plain_text(ckpt, tokenizer, prompt, 32));
  EXPECT_EQ(again[0].text, first[0].text);
  EXPECT_EQ(again[1].text, plain_text(ckpt, tokenizer, prompt, 16));
  const std::string m = metrics.render();
  EXPECT_EQ(metric(m, "nextn_oracle_truths_run_total"), 2) << m;  // 32 tokens, then 16: another answer
  EXPECT_EQ(metric(m, "nextn_oracle_truths_replayed_total"), 1) << m;
  EXPECT_GT(metric(m, "nextn_accepted_tokens_total"), 0) << m;
  CompletionRequest sampled;
  sampled.sampling.temperature = 0.7;
  const auto refused = engine.refuses(sampled);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->first, "temperature");
  CompletionRequest greedy;
  greedy.sampling.temperature = 0;
  EXPECT_FALSE(engine.refuses(greedy));
}

}  // namespace
}  // namespace nextn::server
