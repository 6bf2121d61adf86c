// The draft vocabulary (MtpHead::set_draft_vocab, --draft-vocab): the
// MTP head drafts from token ids [0, N) only, the target's head stays whole.
//  - speculative output with a subset equals plain greedy for K = 2..8 on
//    every fixture with an MTP head and on the shipped model;
//  - every draft is below N, where the whole vocabulary drafts ids >= N on
//    the same text (so an ignored subset fails the test);
//  - the subset's mtp_logits are the full row's first N values bit for bit
//    and -inf past them, and mtp_argmax is their argmax;
//  - set_draft_vocab's values: 0 and >= vocab mean the whole vocabulary,
//    < 0 is an error; the setting survives reset();
//  - the CLI: generate / bench decode report it; bad values are one error
//    line naming the flag;
//  - the serving engine drafts from the subset (greedy and seeded sampled
//    answers equal their solo runs with it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/error.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/runtime.h"
#include "draft_vocab_util.h"
#include "engine_test_util.h"
#include "server/engine.h"
#include "engine/generate.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn {
namespace {

using test::kShippedCodePrompt;
using test::kShippedModel;
using test::RecordingHead;

std::vector<std::string> mtp_model_dirs() {
  std::vector<std::string> dirs;
  for (const auto& d : test::fixture_dirs())
    if (Qwen35Checkpoint::open(d).mtp_layers() > 0) dirs.push_back(d);
  dirs.push_back(kShippedModel);
  return dirs;
}

std::vector<int32_t> prompt_for(const std::string& dir, int vocab) {
  if (dir == kShippedModel) return kShippedCodePrompt;
  const auto ref = test::load_reference(dir);
  std::vector<int32_t> p(ref.sequence.begin(), ref.sequence.begin() + std::min<long>(8, long(ref.sequence.size())));
  for (int32_t& t : p) t %= vocab;
  return p;
}

TEST(DraftVocab, SpeculativeWithASubsetEqualsPlainGreedyForEveryK) {
  constexpr int kTokens = 24;
  for (const auto& dir : mtp_model_dirs()) {
    const auto ckpt = Qwen35Checkpoint::open(dir);
    const int V = ckpt.config().vocab_size;
    const auto prompt = prompt_for(dir, V);
    const int cap = runtime_capacity(int(prompt.size()), kTokens, 8);
    auto rt = make_runtime(ckpt, BackendKind::Cpu, cap);
    const auto greedy = greedy_generate(*rt, prompt, kTokens, /*ignore_eos=*/true).tokens;
    for (int N : {V / 2, V / 8}) {
      for (int K = 2; K <= 8; ++K) {
        rt->reset();
        const auto r = generate(*rt, prompt, test::mtp_options(kTokens, K, N));
        SCOPED_TRACE(::testing::Message() << test::fixture_name(dir) << " N=" << N << " K=" << K);
        ASSERT_EQ(r.tokens, greedy);
        EXPECT_EQ(r.stats.draft_vocab, N);
        EXPECT_EQ(mtp_of(*rt).draft_vocab(), N);
        EXPECT_GT(r.stats.counters.drafted, 0);
      }
    }
  }
}

// Drafts of one generation on `rt` with draft vocabulary n (0: whole), as
// the engine step drafted and verified them.
std::vector<int32_t> drafts_of(ModelRuntime& rt, const std::vector<int32_t>& prompt, int n, int tokens, int K) {
  rt.reset();
  RecordingHead d;
  const auto r = generate(rt, prompt, test::mtp_options(tokens, K, n), nullptr, &d);
  EXPECT_EQ(mtp_of(rt).draft_vocab(), n == 0 ? rt.vocab() : n);  // generate set it from the options
  EXPECT_EQ(int64_t(d.proposed.size()), r.stats.counters.drafted);
  return d.proposed;
}

TEST(DraftVocab, DraftsStayInsideTheSubsetWhereTheWholeVocabularyLeavesIt) {
  for (const auto& dir : mtp_model_dirs()) {
    const auto ckpt = Qwen35Checkpoint::open(dir);
    const int V = ckpt.config().vocab_size;
    const auto prompt = prompt_for(dir, V);
    auto rt = make_runtime(ckpt, BackendKind::Cpu, runtime_capacity(int(prompt.size()), 32, 4));
    const int N = V / 8;
    const auto whole = drafts_of(*rt, prompt, 0, 32, 4);
    // The precondition that makes the check below mean something.
    ASSERT_TRUE(std::any_of(whole.begin(), whole.end(), [&](int32_t t) { return t >= N; }))
        << test::fixture_name(dir) << ": no full-vocabulary draft at or above " << N;
    const auto subset = drafts_of(*rt, prompt, N, 32, 4);
    ASSERT_FALSE(subset.empty());
    for (int32_t t : subset) EXPECT_LT(t, N) << test::fixture_name(dir);
  }
}

TEST(DraftVocab, SubsetLogitsAreThePrefixAndTheArgmaxIsTheirs) {
  for (const auto& dir : mtp_model_dirs()) {
    const auto ckpt = Qwen35Checkpoint::open(dir);
    const int V = ckpt.config().vocab_size;
    const auto prompt = prompt_for(dir, V);
    auto rt = make_runtime(ckpt, BackendKind::Cpu, int(prompt.size()) + 8);
    rt->target_forward(prompt);
    const std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
    mtp_of(*rt).mtp_forward(next, 0);
    std::vector<float> full(static_cast<size_t>(V)), sub(static_cast<size_t>(V));
    mtp_of(*rt).mtp_logits(full.data());
    for (int N : {1, 7, V / 3, V - 1}) {
      mtp_of(*rt).set_draft_vocab(N);
      mtp_of(*rt).mtp_logits(sub.data());
      SCOPED_TRACE(::testing::Message() << test::fixture_name(dir) << " N=" << N);
      ASSERT_TRUE(std::equal(sub.begin(), sub.begin() + N, full.begin())) << "the prefix differs from the full row";
      for (int v = N; v < V; ++v) ASSERT_EQ(sub[size_t(v)], -INFINITY) << "id " << v;
      int32_t am = -1;
      mtp_of(*rt).mtp_argmax(1, &am);
      EXPECT_EQ(am, int32_t(std::max_element(full.begin(), full.begin() + N) - full.begin()));
    }
    mtp_of(*rt).set_draft_vocab(0);
    mtp_of(*rt).mtp_logits(sub.data());
    EXPECT_EQ(sub, full);
  }
}

TEST(DraftVocab, SetDraftVocabValues) {
  const auto ckpt = Qwen35Checkpoint::open(kShippedModel);
  const int V = ckpt.config().vocab_size;
  auto rt = make_runtime(ckpt, BackendKind::Cpu, 16);
  EXPECT_EQ(mtp_of(*rt).draft_vocab(), V);  // the default: the whole vocabulary
  mtp_of(*rt).set_draft_vocab(100);
  EXPECT_EQ(mtp_of(*rt).draft_vocab(), 100);
  rt->reset();
  EXPECT_EQ(mtp_of(*rt).draft_vocab(), 100);  // a setting, not sequence state
  mtp_of(*rt).set_draft_vocab(V + 1000);
  EXPECT_EQ(mtp_of(*rt).draft_vocab(), V);  // clamped
  mtp_of(*rt).set_draft_vocab(0);
  EXPECT_EQ(mtp_of(*rt).draft_vocab(), V);
  EXPECT_THROW(mtp_of(*rt).set_draft_vocab(-1), Error);
  EXPECT_EQ(effective_draft_vocab(5, 10), 5);
  EXPECT_EQ(effective_draft_vocab(10, 10), 10);
  // Only MTP drafts can be restricted.
  GenerateOptions o;
  o.draft_vocab = 100;
  o.max_new_tokens = 4;
  rt->reset();
  EXPECT_THROW(generate(*rt, kShippedCodePrompt, o), Error);
}

// ---- the CLI ----

nlohmann::json json_of(const test::CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(DraftVocabCli, GenerateReportsTheSubsetAndKeepsTheTokens) {
  const std::string ids = fmt::format("{}", fmt::join(kShippedCodePrompt, ","));
  const std::string g = "generate -m " + kShippedModel + " --prompt-ids " + ids + " -n 24 --ignore-eos --json ";
  const auto plain = json_of(test::run_cli(g));
  const auto full = json_of(test::run_cli(g + "--draft mtp --block-size 4"));
  const auto subset = json_of(test::run_cli(g + "--draft mtp --block-size 4 --draft-vocab 1024"));
  const auto clamped = json_of(test::run_cli(g + "--draft mtp --block-size 4 --draft-vocab 1000000"));
  EXPECT_EQ(full["tokens"], plain["tokens"]);
  EXPECT_EQ(subset["tokens"], plain["tokens"]);
  EXPECT_EQ(clamped["tokens"], plain["tokens"]);
  EXPECT_FALSE(plain["stats"].contains("draft_vocab"));
  EXPECT_EQ(full["stats"]["draft_vocab"], 8192);
  EXPECT_EQ(subset["stats"]["draft_vocab"], 1024);
  EXPECT_EQ(clamped["stats"]["draft_vocab"], 8192);
  EXPECT_EQ(clamped["stats"]["accepted_at"], full["stats"]["accepted_at"]);
}

TEST(DraftVocabCli, BadValuesAreOneErrorLineNamingTheFlag) {
  const std::string g = "generate -m " + kShippedModel + " --prompt-ids 1,2,3 -n 4 ";
  for (const std::string bad : {"0", "-5", "abc", "''"})
    test::expect_one_error_line(test::run_cli(g + "--draft mtp --draft-vocab " + bad), "--draft-vocab");
  test::expect_one_error_line(test::run_cli(g + "--draft-vocab 100"), "--draft-vocab");
  test::expect_one_error_line(test::run_cli(g + "--draft oracle --accept-rate 0.5 --draft-vocab 100"), "--draft-vocab");
  test::expect_one_error_line(test::run_cli("bench decode -m " + kShippedModel + " --draft-vocab 100"), "--draft-vocab");
  test::expect_one_error_line(test::run_cli("serve -m " + kShippedModel + " --draft-vocab 100 --port 0"), "--draft-vocab");
}

TEST(DraftVocabCli, BenchDecodeReportsTheSubset) {
  const auto r = json_of(test::run_cli("bench decode -m " + kShippedModel +
                                       " --draft mtp --block-size 4 --draft-vocab 2048 -n 16 --prompt-len 8 "
                                       "--repeats 1 --json"));
  EXPECT_EQ(r["settings"]["draft_vocab"], 2048);
  EXPECT_GT(r["drafted"].get<int>(), 0);
}

// ---- the serving engine ----

// One job alone on an engine drafting with the MTP head from ids [0, n):
// its text and the engine's accepted-draft counter.
std::pair<std::string, double> serve_alone(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t,
                                           const server::CompletionRequest& req, int n) {
  server::Metrics metrics;
  server::EngineOptions eo;
  eo.draft = DraftKind::Mtp;
  eo.draft_vocab = n;
  eo.limits.max_prompt_tokens = 64;
  eo.limits.max_tokens = 64;
  server::Engine engine(ckpt, t, eo, metrics);
  auto job = std::make_shared<server::Job>(req, t.encode(req.prompt));
  EXPECT_TRUE(engine.submit(job));
  const auto done = server::engine_test::wait(*job);
  const std::string m = metrics.render(), name = "\nnextn_accepted_tokens_total ";
  const size_t at = m.find(name);
  EXPECT_NE(at, std::string::npos) << m;
  return {done.text, at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size()))};
}

// The text of generated tokens as the engine streams it: a final EOS adds none.
std::string text_of(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t, std::vector<int32_t> tokens) {
  const auto& eos = ckpt.config().eos_token_ids;
  if (!tokens.empty() && std::find(eos.begin(), eos.end(), tokens.back()) != eos.end()) tokens.pop_back();
  return t.decode(tokens);
}

TEST(DraftVocabServe, TheEngineDraftsFromTheSubset) {
  const auto ckpt = Qwen35Checkpoint::open(kShippedModel);
  const auto t = tok::load_model_tokenizer(kShippedModel, "test");
  constexpr int N = 512;
  server::CompletionRequest req;
  req.prompt = "def fibonacci(n):";
  req.max_tokens = 48;
  const auto ids = t.encode(req.prompt);
  auto rt = make_runtime(ckpt, BackendKind::Cpu, runtime_capacity(int(ids.size()), 48, kMaxBlockSize));
  // Greedy: the text is plain greedy's; the accepted drafts are the subset's.
  req.sampling.temperature = 0;
  const auto greedy = greedy_generate(*rt, ids, 48, false).tokens;
  rt->reset();
  GenerateOptions o = test::mtp_options(48, default_block_size(1), N);
  o.ignore_eos = false;
  const auto subset = generate(*rt, ids, o);
  rt->reset();
  o.draft_vocab = 0;
  const auto whole = generate(*rt, ids, o);
  ASSERT_NE(subset.stats.counters.accepted, whole.stats.counters.accepted) << "pick an N that changes the drafts";
  const auto [text, accepted] = serve_alone(ckpt, t, req, N);
  EXPECT_EQ(text, text_of(ckpt, t, greedy));
  EXPECT_EQ(accepted, double(subset.stats.counters.accepted));
  // Seeded sampling: the answer is generate()'s sampled run with the subset, draw for draw.
  req.sampling = {.temperature = 0.8, .top_k = 20, .seed = 7};
  req.seed_given = true;
  GenerateOptions so;
  so.max_new_tokens = 48;
  so.sampling = req.sampling;
  so.draft = DraftKind::Mtp;
  so.draft_vocab = N;
  rt->reset();
  const auto sampled = generate(*rt, ids, so);
  EXPECT_EQ(sampled.stats.counters.verify_chosen, "sampled");
  EXPECT_EQ(sampled.stats.draft_vocab, N);
  EXPECT_EQ(serve_alone(ckpt, t, req, N).first, text_of(ckpt, t, sampled.tokens));
}

}  // namespace
}  // namespace nextn
