// The serving engine (server/engine.h) without HTTP: greedy responses equal
// generate() byte for byte also when several requests arrive at once, with
// and without the MTP drafter, with one LM-head launch per engine step;
// requests that join a running one share its engine steps and still answer
// what they answer alone (greedy and seeded sampling); a cancelled job frees
// its slot; a full queue refuses; stop strings cut the text; a request whose
// step reservation runs out of memory fails alone and its slot serves again.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/generate.h"
#include "io/checkpoint.h"
#include "server/engine.h"
#include "tokenizer/model_tokenizer.h"
#include "engine_test_util.h"
#include "step_failure_checks.h"

namespace nextn::server {
namespace {

using namespace std::chrono_literals;
const std::string kModel = std::string(NEXTN_SOURCE_DIR) + "/models/default";

using engine_test::Finished;
using engine_test::wait;

std::shared_ptr<Job> greedy_job(const tok::Tokenizer& t, const std::string& prompt, int max_tokens,
                                std::vector<std::string> stop = {}, bool ignore_eos = false) {
  CompletionRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.stop = std::move(stop);
  r.ignore_eos = ignore_eos;
  return std::make_shared<Job>(r, t.encode(prompt));
}

// What `nextn generate --prompt P -n N` computes: its text without a final EOS token.
std::string reference_text(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t, const std::string& prompt, int n,
                           DraftKind draft) {
  const auto ids = t.encode(prompt);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.draft = draft;
  auto r = generate_fresh([&](int cap) { return make_runtime(ckpt, BackendKind::Cpu, cap); }, ids, o);
  const auto& eos = ckpt.config().eos_token_ids;
  if (!r.tokens.empty() && std::find(eos.begin(), eos.end(), r.tokens.back()) != eos.end()) r.tokens.pop_back();
  return t.decode(r.tokens);
}

// What a seeded sampled request computes alone: generate() (temperature > 0) on a fresh runtime.
std::string reference_sampled_text(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t, const CompletionRequest& r,
                                   DraftKind draft) {
  const auto ids = t.encode(r.prompt);
  GenerateOptions o;
  o.max_new_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.draft = draft;
  auto rt = make_runtime(ckpt, BackendKind::Cpu, runtime_capacity(int(ids.size()), r.max_tokens, kMaxBlockSize));
  auto res = generate(*rt, ids, o);
  const auto& eos = ckpt.config().eos_token_ids;
  if (!res.tokens.empty() && std::find(eos.begin(), eos.end(), res.tokens.back()) != eos.end()) res.tokens.pop_back();
  return t.decode(res.tokens);
}

// Options of the engines below: prompts of up to 64 tokens.
EngineOptions engine_options(DraftKind draft, int max_tokens) {
  EngineOptions eo;
  eo.draft = draft;
  eo.limits.max_prompt_tokens = 64;
  eo.limits.max_tokens = max_tokens;
  return eo;
}

using engine_test::metric;

// Issue 23's CPU criterion: 12 concurrent greedy requests through an engine
// of at most 8 sequences (4 wait in the queue and join as others finish)
// answer as their solo runs, one LM-head launch per engine step.
TEST(ServerEngine, ConcurrentGreedyResponsesEqualGenerate) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const std::vector<std::string> prompts = {"def fibonacci(n):", "import os\n", "class Stack:", "for i in range(",
                                            "x = [", "# sort a list\n", "while True:", "def add(a, b):",
                                            "print(", "return None", "if x > 0:", "try:\n"};
  for (DraftKind draft : {DraftKind::None, DraftKind::Mtp}) {
    Metrics metrics;
    EngineOptions eo = engine_options(draft, 64);
    eo.limits.max_batch = 8;
    eo.limits.queue_depth = 16;
    Engine engine(ckpt, tokenizer, eo, metrics);
    std::vector<std::shared_ptr<Job>> jobs;
    for (size_t i = 0; i < prompts.size(); ++i) jobs.push_back(greedy_job(tokenizer, prompts[i], 40));
    const std::vector<Finished> got = engine_test::serve_all(engine, jobs);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].text, reference_text(ckpt, tokenizer, prompts[i], 40, draft))
          << draft_kind_name(draft) << " prompt " << i;
      EXPECT_TRUE(got[i].finish_reason == "length" || got[i].finish_reason == "stop");
    }
    const std::string m = metrics.render();
    EXPECT_NE(m.find("nextn_generations_total 12"), std::string::npos) << m;
    EXPECT_LE(metric(m, "nextn_step_sequences_sum") / metric(m, "nextn_step_sequences_count"), 8.0) << m;
    if (draft == DraftKind::Mtp) {
      EXPECT_NE(m.find("nextn_verify_rounds_total{arm=\"batched\"}"), std::string::npos);
    }
    // Every request is greedy: the CPU group makes one LM-head launch per
    // step, for every sequence in it; the MTP head at most one pairing
    // forward per step and one launch per chained draft step.
    const double steps = metric(m, "nextn_engine_steps_total");
    EXPECT_GT(steps, 0) << m;
    EXPECT_EQ(metric(m, "nextn_step_sequences_count"), steps) << m;
    EXPECT_EQ(metric(m, "nextn_lm_head_launches_total"), steps) << m;
    if (draft == DraftKind::Mtp) {
      const int K = default_block_size(ckpt.mtp_layers());
      EXPECT_GT(metric(m, "nextn_mtp_forward_launches_total"), 0) << m;
      EXPECT_LE(metric(m, "nextn_mtp_forward_launches_total"), steps) << m;
      EXPECT_GT(metric(m, "nextn_mtp_draft_launches_total"), 0) << m;
      EXPECT_LE(metric(m, "nextn_mtp_draft_launches_total"), steps * (K - 1)) << m;
      EXPECT_GT(metric(m, "nextn_rollback_launches_total"), 0) << m;  // some round kept fewer rows than it verified
    } else {
      EXPECT_EQ(metric(m, "nextn_mtp_forward_launches_total"), 0) << m;
      EXPECT_EQ(metric(m, "nextn_mtp_draft_launches_total"), 0) << m;
      EXPECT_EQ(metric(m, "nextn_rollback_launches_total"), 0) << m;  // one row per step: nothing to undo
    }
    // Every prompt was prefilled once; every token after a request's first
    // is one time-between-tokens observation.
    int prompt_rows = 0, tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      prompt_rows += int(tokenizer.encode(prompts[i]).size());
      tokens += got[i].completion_tokens;
    }
    EXPECT_EQ(metric(m, "nextn_engine_prefill_rows_total"), prompt_rows) << m;
    EXPECT_GT(metric(m, "nextn_engine_step_rows_total"), prompt_rows) << m;
    EXPECT_EQ(metric(m, "nextn_time_between_tokens_seconds_count"), tokens - int(prompts.size())) << m;
  }
}

TEST(ServerEngine, CancelFreesTheEngineAndAFullQueueRefuses) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  Metrics metrics;
  EngineOptions eo = engine_options(DraftKind::None, 2000);
  eo.limits.queue_depth = 1;
  eo.limits.max_batch = 1;  // the second job waits in the queue
  Engine engine(ckpt, tokenizer, eo, metrics);
  auto long_job = greedy_job(tokenizer, "def f():", 2000, {}, /*ignore_eos=*/true);
  ASSERT_TRUE(engine.submit(long_job));
  // Running once its first event arrives.
  std::vector<JobEvent> first;
  while (first.empty()) first = long_job->take(1000ms);
  auto queued = greedy_job(tokenizer, "import", 8);
  ASSERT_TRUE(engine.submit(queued));
  EXPECT_FALSE(engine.submit(greedy_job(tokenizer, "x", 8)));  // depth 1: full
  long_job->cancel();
  const Finished cancelled = wait(*long_job);
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_LT(cancelled.completion_tokens, 2000);
  const Finished next = wait(*queued);
  EXPECT_EQ(next.text, reference_text(ckpt, tokenizer, "import", 8, DraftKind::None));
}

// Jobs that arrive while a long one runs join it (up to max_batch) and
// their rows share its engine steps; each answer is still its solo run's,
// byte for byte: greedy, and seeded sampling with its own generator.
TEST(ServerEngine, JoiningJobsShareStepsAndAnswerAsAlone) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  for (DraftKind draft : {DraftKind::None, DraftKind::Mtp}) {
    Metrics metrics;
    EngineOptions eo = engine_options(draft, 4000);
    eo.limits.max_batch = 3;  // the long job and two others; the third waits for a free slot
    Engine engine(ckpt, tokenizer, eo, metrics);
    auto long_job = greedy_job(tokenizer, "def f():", 4000, {}, /*ignore_eos=*/true);
    ASSERT_TRUE(engine.submit(long_job));
    std::vector<JobEvent> first;
    while (first.empty()) first = long_job->take(1000ms);
    CompletionRequest sampled;
    sampled.prompt = "class Stack:";
    sampled.max_tokens = 20;
    sampled.sampling.temperature = 0.8;
    sampled.sampling.top_p = 0.9;
    sampled.sampling.seed = 7;
    sampled.seed_given = true;
    std::vector<std::shared_ptr<Job>> jobs = {greedy_job(tokenizer, "import os\n", 24),
                                              std::make_shared<Job>(sampled, tokenizer.encode(sampled.prompt)),
                                              greedy_job(tokenizer, "for i in range(", 16)};
    for (auto& j : jobs) ASSERT_TRUE(engine.submit(j));
    std::vector<Finished> got;
    for (auto& j : jobs) got.push_back(wait(*j));
    EXPECT_EQ(got[0].text, reference_text(ckpt, tokenizer, "import os\n", 24, draft)) << draft_kind_name(draft);
    EXPECT_EQ(got[1].text, reference_sampled_text(ckpt, tokenizer, sampled, draft)) << draft_kind_name(draft);
    EXPECT_EQ(got[2].text, reference_text(ckpt, tokenizer, "for i in range(", 16, draft)) << draft_kind_name(draft);
    long_job->cancel();
    EXPECT_EQ(wait(*long_job).finish_reason, "cancelled");
    const std::string m = metrics.render();
    const double alone = metric(m, "nextn_step_sequences_bucket{le=\"1\"}");
    const double all = metric(m, "nextn_step_sequences_count");
    EXPECT_GE(alone, 0) << m;
    EXPECT_GT(all, alone) << m;  // some steps served several jobs
    EXPECT_EQ(metric(m, "nextn_step_sequences_bucket{le=\"2\"}") < all, true) << m;  // and some three at once
    EXPECT_EQ(metric(m, "nextn_engine_steps_total"), all) << m;
    EXPECT_GT(metric(m, "nextn_engine_step_rows_total"), all) << m;
    // The long greedy job ran in every step, so each step made one LM-head
    // launch for its greedy sequences (the sampled one reads its rows' logits).
    EXPECT_EQ(metric(m, "nextn_lm_head_launches_total"), all) << m;
    int prompt_rows = int(long_job->prompt.size());
    for (auto& j : jobs) prompt_rows += int(j->prompt.size());
    EXPECT_EQ(metric(m, "nextn_engine_prefill_rows_total"), prompt_rows) << m;  // each prompt prefilled once
  }
}

// --log-steps: one stderr line per engine step, numbered, with its rows and
// parts; none without it.
TEST(ServerEngine, LogStepsPrintsOneLinePerStep) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  for (bool log : {false, true}) {
    Metrics metrics;
    EngineOptions eo = engine_options(DraftKind::Mtp, 16);
    eo.log_steps = log;
    testing::internal::CaptureStderr();
    {
      Engine engine(ckpt, tokenizer, eo, metrics);
      auto job = greedy_job(tokenizer, "def add(a, b):", 6);
      ASSERT_TRUE(engine.submit(job));
      wait(*job);
    }
    const std::string err = testing::internal::GetCapturedStderr();
    const int steps = int(metric(metrics.render(), "nextn_engine_steps_total"));
    ASSERT_GT(steps, 1);
    size_t lines = 0;
    for (size_t at = err.find("step "); at != std::string::npos; at = err.find("\nstep ", at + 1)) ++lines;
    EXPECT_EQ(lines, log ? size_t(steps) : 0u) << err;
    if (log) {
      EXPECT_NE(err.find("step 1: 1 sequences, "), std::string::npos) << err;
      EXPECT_NE(err.find(" prompt), "), std::string::npos) << err;
      EXPECT_NE(err.find("pairing "), std::string::npos) << err;
    }
  }
}

// --prefill-stall: requests that join while others decode have their prompt
// chunks cut to the step's cost budget (the log shows the budget), and every
// answer, greedy and seeded sampled, plain and with MTP, is still its solo
// run's. A factor of 1 or less is refused by name.
TEST(ServerEngine, AStallBudgetCutsPromptsAndChangesNoAnswer) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const std::vector<std::string> prompts = {
      "def fibonacci(n):", "import os\nimport sys\nimport json\nimport re\n# read every file\n",
      "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):",
      "for i in range(10):\n    for j in range(10):\n        print(i, j)\n", "x = [1, 2, 3, 4, 5, 6, 7, 8, 9]",
      "# sort a list of pairs by their second item, then by the first\n"};
  const std::vector<int> max_tokens = {6, 30, 12, 30, 20, 30};
  CompletionRequest sampled;
  sampled.prompt = prompts[2];
  sampled.max_tokens = 20;
  sampled.sampling.temperature = 0.8;
  sampled.sampling.seed = 11;
  sampled.seed_given = true;
  for (DraftKind draft : {DraftKind::None, DraftKind::Mtp}) {
    Metrics metrics;
    EngineOptions eo = engine_options(draft, 64);
    eo.limits.max_batch = 3;
    eo.prefill_chunk = 16;
    eo.prefill_stall = 1.5;
    eo.log_steps = true;
    testing::internal::CaptureStderr();
    std::vector<Finished> got;
    {
      Engine engine(ckpt, tokenizer, eo, metrics);
      std::vector<std::shared_ptr<Job>> jobs;
      for (size_t i = 0; i < prompts.size(); ++i) jobs.push_back(greedy_job(tokenizer, prompts[i], max_tokens[i]));
      jobs.push_back(std::make_shared<Job>(sampled, tokenizer.encode(sampled.prompt)));
      got = engine_test::serve_all(engine, jobs);
    }
    const std::string err = testing::internal::GetCapturedStderr();
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i].text, reference_text(ckpt, tokenizer, prompts[i], max_tokens[i], draft))
          << draft_kind_name(draft) << " prompt " << i;
    EXPECT_EQ(got.back().text, reference_sampled_text(ckpt, tokenizer, sampled, draft)) << draft_kind_name(draft);
    EXPECT_NE(err.find(", budget "), std::string::npos) << err;  // someone joined while others decoded
    const std::string m = metrics.render();
    EXPECT_GT(metric(m, "nextn_prefill_budget_rows_count"), 0) << m;
    EXPECT_GT(metric(m, "nextn_prefill_prompt_scale"), 0) << m;
  }
  for (double bad : {1.0, 0.5, -2.0}) {
    Metrics metrics;
    EngineOptions eo = engine_options(DraftKind::None, 8);
    eo.prefill_stall = bad;
    try {
      Engine engine(ckpt, tokenizer, eo, metrics);
      ADD_FAILURE() << "accepted --prefill-stall " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--prefill-stall"), std::string::npos) << e.what();
    }
  }
}

TEST(ServerEngine, StopStringsCutTheText) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const std::string full = reference_text(ckpt, tokenizer, "def fibonacci(n):", 40, DraftKind::None);
  ASSERT_GT(full.size(), 12u);
  const std::string stop = full.substr(8, 3);
  Metrics metrics;
  const EngineOptions eo = engine_options(DraftKind::None, 64);
  Engine engine(ckpt, tokenizer, eo, metrics);
  auto job = greedy_job(tokenizer, "def fibonacci(n):", 40, {stop});
  ASSERT_TRUE(engine.submit(job));
  const Finished f = wait(*job);
  EXPECT_EQ(f.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(f.finish_reason, "stop");
}

}  // namespace
}  // namespace nextn::server

namespace nextn::server {
namespace {

// The allocator refuses the hidden rows of prompts over 40 tokens (a planted
// out-of-memory, docs/engine.md "Failures"): the long request fails alone
// with the error while the others, sharing its steps, answer as alone; once
// memory is back the same request, on a reused slot, answers as alone.
TEST(ServerEngine, ARequestOutOfMemoryFailsAlone) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const int H = ckpt.config().hidden_size;
  std::atomic<bool> short_of_memory{true};
  test::RefusingAllocator refusing(host_allocator());  // outlives the engine's slots
  refusing.refuse_if = [&](size_t bytes, const std::string& what) {
    return short_of_memory.load() && what == "hidden rows" && bytes >= size_t(40) * size_t(H) * sizeof(float);
  };
  std::string long_prompt;
  for (int i = 0; tokenizer.encode(long_prompt).size() <= 44; ++i) long_prompt += "x = f(x) + " + std::to_string(i) + "\n";
  ASSERT_GT(tokenizer.encode(long_prompt).size(), 40u);
  ASSERT_LE(tokenizer.encode(long_prompt).size(), 64u);
  const std::vector<std::string> prompts = {"def fibonacci(n):", long_prompt, "import os\n", "class Stack:"};
  Metrics metrics;
  auto group = make_sequence_group(ckpt, BackendKind::Cpu);
  group->set_allocator(&refusing);
  Engine engine(std::move(group), tokenizer, engine_options(DraftKind::None, 24), metrics);
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& p : prompts) jobs.push_back(greedy_job(tokenizer, p, 24));
  for (auto& job : jobs) ASSERT_TRUE(engine.submit(job));
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (i == 1) {
      std::string error;
      for (bool final = false; !final;)
        for (JobEvent& ev : jobs[i]->take(1000ms))
          if (ev.final) {
            final = true;
            error = ev.error;
          }
      EXPECT_NE(error.find("out of memory (planted)"), std::string::npos) << error;
      EXPECT_NE(error.find("hidden rows"), std::string::npos) << error;
      continue;
    }
    EXPECT_EQ(wait(*jobs[i]).text, reference_text(ckpt, tokenizer, prompts[i], 24, DraftKind::None)) << i;
  }
  EXPECT_EQ(engine.fault(), "");  // out of memory is no device fault: the server goes on
  short_of_memory = false;
  auto again = greedy_job(tokenizer, long_prompt, 24);
  ASSERT_TRUE(engine.submit(again));
  EXPECT_EQ(wait(*again).text, reference_text(ckpt, tokenizer, long_prompt, 24, DraftKind::None));
}

}  // namespace
}  // namespace nextn::server
