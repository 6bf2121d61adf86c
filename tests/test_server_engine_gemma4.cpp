// The serving engine (server/engine.h) on the Gemma 4 fixtures, without
// HTTP: the target's CPU group (shared forwards, TargetModel::make_group),
// plain or with the assistant as each job's drafter. Greedy answers equal `nextn generate`'s
// (generate_fresh, generate_with_assistant) byte for byte; seeded sampled
// answers equal generate() (generate_with_drafter) run alone and repeat. The assistant's
// sampled drafts (Drafter::draft_logits: its head's logits, -inf outside
// the centroid mask) keep the plain sampling distribution: a chi-square
// test against the enumerated distribution, which a wrong acceptance rule
// fails.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "gemma4_fixture_util.h"
#include "io/gemma4_checkpoint.h"
#include "model/target_model.h"
#include "sampling_distribution_util.h"
#include "server/engine.h"
#include "engine/generate.h"
#include "engine_test_util.h"
#include "speculative/gemma4_drafter.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::server {
namespace {

using namespace std::chrono_literals;

// One tokenizer decodes every fixture's answers: the Gemma 4 test
// tokenizer (3256 ids) covers the 512-id vocabularies of the fixtures that
// ship none, and the texts are only compared with each other.
const std::string kTokenizerDir = std::string(NEXTN_FIXTURES) + "/tokenizers/gemma4";
constexpr int kThreads = 2;

using engine_test::Finished;
using engine_test::wait;

// A Gemma 4 target and (optionally) its assistant, as `nextn serve -m T [--draft A]` opens them.
struct Served {
  TargetModel target;
  std::shared_ptr<AssistantModel> assistant;
  Served(const test::Gemma4Reference& ref, bool with_assistant)
      : target(open_target_model(ref.target(), BackendKind::Cpu, {.cpu_threads = kThreads})) {
    if (with_assistant)
      assistant = std::make_shared<AssistantModel>(ref.assistant(), target.gemma4->config(), kThreads);
  }
  std::unique_ptr<Engine> engine(const tok::Tokenizer& t, Metrics& metrics) const {
    EngineOptions eo;
    eo.limits.max_prompt_tokens = 64;
    eo.limits.max_tokens = 64;
    if (assistant) {
      eo.make_drafter = [a = assistant](ModelRuntime& rt) { return a->drafter(rt); };
      eo.block_size = kAssistantBlockSize;
    }
    return std::make_unique<Engine>(target.make_group(), t, eo, metrics);
  }
};

using engine_test::metric;

// One generation alone on a fresh `rt`: with the assistant as its drafter, or plain.
GenerateResult solo_run(const Served& served, ModelRuntime& rt, bool with_assistant, const std::vector<int32_t>& prompt,
                        const GenerateOptions& o) {
  return with_assistant ? generate_with_drafter(rt, served.assistant->drafter(rt), prompt, o) : generate(rt, prompt, o);
}

std::shared_ptr<Job> job_of(const std::vector<int32_t>& prompt, int max_tokens, const SamplingParams& sampling) {
  CompletionRequest r;
  r.prompt_is_ids = true;
  r.prompt_ids = prompt;
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.seed_given = !sampling.greedy();
  r.ignore_eos = true;
  return std::make_shared<Job>(r, prompt);
}

// `serve --draft oracle --draft-cost ASSISTANT_DIR`: the oracle's tokens, the
// assistant drafting beside it for its cost. Greedy answers equal plain
// greedy; the oracle's drafts are accepted; the assistant ran a step per
// drafted token.
TEST(ServerEngineGemma4, TheOracleAtTheAssistantsCostAnswersGreedy) {
  const auto tokenizer = tok::load_model_tokenizer(kTokenizerDir, "test");
  const auto ref = test::load_gemma4_reference(test::gemma4_fixture_dirs().at(0));
  const int n = int(ref.greedy.size());
  const Served served(ref, /*with_assistant=*/true);
  EngineOptions eo;
  eo.limits.max_prompt_tokens = 64;
  eo.limits.max_tokens = 64;
  eo.draft = DraftKind::Oracle;
  eo.oracle.position_rates = {0.9, 0.8, 0.7};
  eo.draft_cost = DraftCost::Drafter;
  eo.block_size = 4;
  eo.make_drafter = [a = served.assistant](ModelRuntime& rt) { return a->drafter(rt); };
  Metrics metrics;
  const auto engine = std::make_unique<Engine>(served.target.make_group(), tokenizer, eo, metrics);
  std::vector<std::shared_ptr<Job>> jobs = {job_of(ref.prompt, n, {.temperature = 0}),
                                            job_of(ref.prompt, n, {.temperature = 0})};
  for (auto& j : jobs) ASSERT_TRUE(engine->submit(j));
  for (auto& j : jobs) EXPECT_EQ(wait(*j).text, tokenizer.decode(ref.greedy));
  const std::string m = metrics.render();
  const double drafted = metric(m, "nextn_drafted_tokens_total"), accepted = metric(m, "nextn_accepted_tokens_total");
  EXPECT_GT(accepted, 0.3 * drafted) << m;  // the oracle's rates, not the random assistant's
  EXPECT_EQ(double(served.assistant->cpu_steps()), drafted) << m;  // one assistant step per drafted token
}

TEST(ServerEngineGemma4, GreedyAnswersEqualGenerateWithAndWithoutTheAssistant) {
  const auto tokenizer = tok::load_model_tokenizer(kTokenizerDir, "test");
  for (const std::string& dir : test::gemma4_fixture_dirs()) {
    const auto ref = test::load_gemma4_reference(dir);
    const int n = int(ref.greedy.size());
    const std::vector<int32_t> other(ref.prompt.begin(), ref.prompt.begin() + long(ref.prompt.size()) / 2 + 1);
    for (bool with_assistant : {false, true}) {
      const Served served(ref, with_assistant);
      GenerateOptions o;
      o.max_new_tokens = n;
      o.ignore_eos = true;
      auto reference = [&](const std::vector<int32_t>& prompt) {
        const auto r = with_assistant ? generate_with_assistant(served.target.factory, ref.assistant(), prompt, o, kThreads)
                                      : generate_fresh(served.target.factory, prompt, o);
        return tokenizer.decode(r.tokens);
      };
      Metrics metrics;
      const auto engine = served.engine(tokenizer, metrics);
      // Two requests at once: the CPU group steps them together.
      std::vector<std::shared_ptr<Job>> jobs = {job_of(ref.prompt, n, {.temperature = 0}),
                                                job_of(other, n, {.temperature = 0})};
      for (auto& j : jobs) ASSERT_TRUE(engine->submit(j));
      const Finished a = wait(*jobs[0]), b = wait(*jobs[1]);
      EXPECT_EQ(a.text, tokenizer.decode(ref.greedy)) << dir << " assistant " << with_assistant;  // transformers
      EXPECT_EQ(a.text, reference(ref.prompt)) << dir;
      EXPECT_EQ(b.text, reference(other)) << dir;
      EXPECT_EQ(a.completion_tokens, n);
      const std::string m = metrics.render();
      EXPECT_NE(m.find("nextn_generations_total 2"), std::string::npos) << m;
      EXPECT_EQ(m.find("nextn_drafted_tokens_total 0\n") == std::string::npos, with_assistant) << m;
      // Every step made one LM-head launch, for every job in it.
      const double steps = metric(m, "nextn_engine_steps_total");
      EXPECT_GT(steps, 0) << m;
      EXPECT_EQ(metric(m, "nextn_step_sequences_count"), steps) << m;
      EXPECT_EQ(metric(m, "nextn_lm_head_launches_total"), steps) << m;
    }
  }
}

// --prefill-stall on the Gemma 4 group (any chunk is cut-invariant there):
// a request that joins while another decodes with the assistant has its
// prompt cut to the step budget, and both answer as their solo runs.
TEST(ServerEngineGemma4, AStallBudgetCutsAJoiningPromptAndChangesNoAnswer) {
  const auto tokenizer = tok::load_model_tokenizer(kTokenizerDir, "test");
  const auto ref = test::load_gemma4_reference(test::gemma4_fixture_dirs().at(0));
  const Served served(ref, /*with_assistant=*/true);
  std::vector<int32_t> joining;
  while (joining.size() < 40) joining.insert(joining.end(), ref.prompt.begin(), ref.prompt.end());
  joining.resize(40);
  constexpr int kFirstTokens = 60, kJoiningTokens = 8;
  EngineOptions eo;
  eo.limits.max_prompt_tokens = 64;
  eo.limits.max_tokens = 64;
  eo.make_drafter = [a = served.assistant](ModelRuntime& rt) { return a->drafter(rt); };
  eo.block_size = kAssistantBlockSize;
  eo.prefill_chunk = 16;
  eo.prefill_stall = 1.5;
  Metrics metrics;
  const auto engine = std::make_unique<Engine>(served.target.make_group(), tokenizer, eo, metrics);
  auto first = job_of(ref.prompt, kFirstTokens, {.temperature = 0});
  ASSERT_TRUE(engine->submit(first));
  std::string first_text;
  bool first_done = false;
  while (first_text.empty())  // it decodes before the second arrives
    for (JobEvent& ev : first->take(1000ms)) {
      first_text += ev.text;
      first_done = first_done || ev.final;
    }
  ASSERT_FALSE(first_done) << "the first request ended before the second joined";
  auto second = job_of(joining, kJoiningTokens, {.temperature = 0});
  ASSERT_TRUE(engine->submit(second));
  first_text += wait(*first).text;
  const Finished b = wait(*second);
  GenerateOptions o;
  o.ignore_eos = true;
  o.max_new_tokens = kFirstTokens;
  EXPECT_EQ(first_text, tokenizer.decode(generate_with_assistant(served.target.factory, ref.assistant(), ref.prompt, o,
                                                                 kThreads).tokens));
  o.max_new_tokens = kJoiningTokens;
  EXPECT_EQ(b.text, tokenizer.decode(generate_with_assistant(served.target.factory, ref.assistant(), joining, o,
                                                             kThreads).tokens));
  EXPECT_GT(metric(metrics.render(), "nextn_prefill_budget_rows_count"), 0) << metrics.render();
}

// Six concurrent requests, --kv-cache-tokens of four blocks and two blocks
// of each pool per request: at most two run at once, the rest wait in the
// queue (not a failure), and every answer equals its solo run. Both pools
// (full-attention layers, sliding rings) show in /metrics.
TEST(ServerEngineGemma4, AdmitsByTheFreeBlocksOfBothPoolsAndQueuesTheRest) {
  const auto tokenizer = tok::load_model_tokenizer(kTokenizerDir, "test");
  const auto ref = test::load_gemma4_reference(test::gemma4_fixture_dirs().front());
  const Served served(ref, false);
  const int n = 90;  // with a prompt of at most 32 tokens: two blocks of each pool per request
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < 6; ++i) {
    std::vector<int32_t> p(ref.prompt.begin() + long(i % ref.prompt.size()), ref.prompt.end());
    p.push_back(ref.prompt[i % ref.prompt.size()]);
    prompts.push_back(p);
  }
  Metrics metrics;
  EngineOptions eo;
  eo.limits.max_prompt_tokens = 32;
  eo.limits.max_tokens = n;
  eo.limits.max_batch = 4;
  eo.limits.queue_depth = 16;
  eo.kv_cache_tokens = 4 * kKvBlockTokens;
  Engine engine(served.target.make_group(), tokenizer, eo, metrics);
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& p : prompts) jobs.push_back(job_of(p, n, {.temperature = 0}));
  const std::vector<Finished> got = engine_test::serve_all(engine, jobs);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got[i].text, tokenizer.decode(generate_fresh(served.target.factory, prompts[i], o).tokens)) << i;
  const std::string m = metrics.render();
  EXPECT_GT(metric(m, "nextn_kv_admission_waits_total"), 0) << m;
  for (const char* pool : {"full_attention", "sliding_window"}) {
    const std::string label = std::string("{pool=\"") + pool + "\"}";
    EXPECT_EQ(metric(m, "nextn_kv_blocks_limit" + label), 4) << m;
    EXPECT_LE(metric(m, "nextn_kv_blocks_allocated" + label), 4) << m;
    EXPECT_EQ(metric(m, "nextn_kv_blocks_in_use" + label), 0) << m;
    EXPECT_EQ(metric(m, "nextn_kv_blocks_promised" + label), 0) << m;
  }
  const std::string bucket = "nextn_step_sequences_bucket{le=\"2\"} ";
  const size_t at = m.find(bucket);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_EQ(std::stod(m.substr(at + bucket.size())), metric(m, "nextn_engine_steps_total")) << m;
}

TEST(ServerEngineGemma4, SeededSampledAnswersRepeatAndEqualTheirSoloRun) {
  const auto tokenizer = tok::load_model_tokenizer(kTokenizerDir, "test");
  const auto ref = test::load_gemma4_reference(test::gemma4_fixture_dirs().front());
  const SamplingParams sampling = {.temperature = 0.8, .top_p = 0.95, .seed = 7};
  for (bool with_assistant : {false, true}) {
    const Served served(ref, with_assistant);
    auto rt = served.target.factory(runtime_capacity(int(ref.prompt.size()), 24, kAssistantBlockSize));
    GenerateOptions o;
    o.max_new_tokens = 24;
    o.sampling = sampling;
    o.block_size = kAssistantBlockSize;
    o.ignore_eos = true;
    const auto solo = solo_run(served, *rt, with_assistant, ref.prompt, o);
    Metrics metrics;
    const auto engine = served.engine(tokenizer, metrics);
    auto first = job_of(ref.prompt, 24, sampling), second = job_of(ref.prompt, 24, sampling);
    ASSERT_TRUE(engine->submit(first));
    ASSERT_TRUE(engine->submit(second));
    const Finished a = wait(*first), b = wait(*second);
    EXPECT_EQ(a.text, tokenizer.decode(solo.tokens)) << "assistant " << with_assistant;
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(solo.stats.draft, with_assistant ? "assistant" : "none");
  }
}

// Sampled drafting runs the greedy chain's steps: taking the argmax of each
// draft_logits gives propose's drafts. The centroid-masked head leaves
// exactly k * V/C tokens finite.
TEST(Gemma4AssistantLogits, ArgmaxGivesTheGreedyDraftsAndTheMaskLeavesTheCandidates) {
  for (const std::string& dir : test::gemma4_fixture_dirs()) {
    const auto ref = test::load_gemma4_reference(dir);
    const Served served(ref, true);
    const auto assistant_ck = Gemma4Checkpoint::open_assistant(ref.assistant());
    const Gemma4AssistantConfig& ac = assistant_ck.assistant_config();
    auto rt = served.target.factory(int(ref.prompt.size()) + 8);
    rt->target_forward(ref.prompt);
    const auto greedy = served.assistant->drafter(*rt), sampled = served.assistant->drafter(*rt);
    const int32_t bonus = ref.greedy.front();
    greedy->begin(ref.prompt, bonus);
    sampled->begin(ref.prompt, bonus);
    std::vector<int32_t> want, got;
    greedy->propose(3, want);
    std::vector<float> logits(size_t(rt->vocab()));
    for (int i = 0; i < 3; ++i) {
      if (i > 0) sampled->draft_step(got.back());
      sampled->draft_logits(logits.data());
      got.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      const long finite = std::count_if(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
      const long candidates = ac.use_ordered_embeddings
                                  ? long(ac.centroid_intermediate_top_k) * (rt->vocab() / ac.num_centroids)
                                  : long(rt->vocab());
      EXPECT_EQ(finite, candidates) << dir;
    }
    EXPECT_EQ(got, want) << dir;
  }
}

// The distribution test of tests/test_sampled_speculative.cpp with the
// assistant as the drafter: the first four tokens (the prefill's, two
// drafted positions, a bonus or correction; K = 3) at temperature 1, top_k 3.
// The fixtures are random models, so the assistant's top 3 rarely meets the
// target's: gemma4-default-bf16 (full head) and gemma4-kv-shared-fp32 (the
// centroid-masked head) accept some drafts, gemma4-tokenizer-bf16 none, so
// it would test only the rejection branch and is left out.
constexpr int kTokens = 4, kRuns = 2500;
const std::vector<std::string> kDistributionFixtures = {"gemma4-default-bf16", "gemma4-kv-shared-fp32"};

test::TupleCounts sample_counts(const Served& served, const std::vector<int32_t>& prompt, bool speculative,
                                AcceptRule rule, VerifyCounters* totals) {
  auto rt = served.target.factory(int(prompt.size()) + 16);
  test::TupleCounts counts;
  for (int seed = 0; seed < kRuns; ++seed) {
    rt->reset();
    GenerateOptions o;
    o.max_new_tokens = kTokens;
    o.sampling = {.temperature = 1.0, .top_k = 3, .seed = uint64_t(seed) * 7919 + 1};
    o.block_size = 3;
    o.ignore_eos = true;
    o.accept_rule = rule;
    const auto r = solo_run(served, *rt, speculative, prompt, o);
    EXPECT_EQ(int(r.tokens.size()), kTokens);
    ++counts[r.tokens];
    totals->drafted += r.stats.counters.drafted;
    totals->accepted += r.stats.counters.accepted;
  }
  return counts;
}

test::TupleDistribution exact_distribution(const Served& served, const std::vector<int32_t>& prompt) {
  auto rt = served.target.factory(int(prompt.size()) + 16);
  return test::exact_sampling_distribution(*rt, prompt, {.temperature = 1.0, .top_k = 3}, kTokens);
}

TEST(SampledSpeculativeGemma4, AssistantDraftsKeepThePlainSamplingDistribution) {
  for (const std::string& name : kDistributionFixtures) {
    const auto ref = test::load_gemma4_reference(std::string(NEXTN_FIXTURES) + "/gemma4/" + name);
    const Served served(ref, true);
    const auto exact = exact_distribution(served, ref.prompt);
    VerifyCounters plain_c, spec_c;
    const auto [plain, plain_df] =
        test::chi_square(exact, sample_counts(served, ref.prompt, false, AcceptRule::Exact, &plain_c), kRuns);
    const auto [spec, spec_df] =
        test::chi_square(exact, sample_counts(served, ref.prompt, true, AcceptRule::Exact, &spec_c), kRuns);
    EXPECT_LT(plain, test::chi_square_limit(plain_df)) << name;
    EXPECT_LT(spec, test::chi_square_limit(spec_df)) << name;
    // Drafts were accepted and rejected, so both branches of the rule ran.
    EXPECT_GT(spec_c.accepted, 0) << name;
    EXPECT_LT(spec_c.accepted, spec_c.drafted) << name;
    std::printf("%s: chi-square of plain sampling %.1f (df %d, limit %.1f), with the assistant %.1f (df %d, limit "
                "%.1f; %lld of %lld drafts accepted)\n",
                name.c_str(), plain, plain_df, test::chi_square_limit(plain_df), spec, spec_df,
                test::chi_square_limit(spec_df), (long long)spec_c.accepted, (long long)spec_c.drafted);
  }
}

// The test has the power to see a wrong rule on the fixture whose drafts
// are accepted most often.
TEST(SampledSpeculativeGemma4, AWrongAcceptanceRuleFailsTheSameTest) {
  const auto ref = test::load_gemma4_reference(std::string(NEXTN_FIXTURES) + "/gemma4/" + kDistributionFixtures[0]);
  const Served served(ref, true);
  VerifyCounters c;
  const auto [wrong, df] = test::chi_square(exact_distribution(served, ref.prompt),
                                            sample_counts(served, ref.prompt, true, AcceptRule::ResampleFromTarget, &c),
                                            kRuns);
  EXPECT_GT(wrong, test::chi_square_limit(df));
  std::printf("chi-square of the wrong rule: %.1f (df %d, limit %.1f)\n", wrong, df, test::chi_square_limit(df));
}

}  // namespace
}  // namespace nextn::server
