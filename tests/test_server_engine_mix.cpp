// The serving engine under a random mix of what it combines: each round draws
// an engine (max batch, prompt chunk, the stall budget, the drafter, fixed
// or chosen block sizes, a KV cache of a few requests' budgets) and twelve
// greedy requests of random prompts and lengths from clients that arrive at
// random times. Every answer equals the request's plain greedy run alone, byte
// for byte: chunking, budget cuts, queueing for KV blocks, shared steps and
// speculation may change when a token comes, never which.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/generate.h"
#include "engine_test_util.h"
#include "io/checkpoint.h"
#include "model/kv_pool.h"
#include "server/engine.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::server {
namespace {

const std::string kModel = std::string(NEXTN_SOURCE_DIR) + "/models/default";
constexpr int kMaxPrompt = 48, kMaxTokens = 24;

// What `nextn generate --prompt-ids ... -n N` answers: plain greedy alone.
std::string alone(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t, const std::vector<int32_t>& prompt, int n) {
  return engine_test::plain_greedy_text(ckpt, t, prompt, n, runtime_capacity(kMaxPrompt, kMaxTokens, kMaxBlockSize));
}

TEST(ServerEngineMix, RandomEnginesAndArrivalsAnswerAsAlone) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const std::vector<std::string> words = {"def ", "fibonacci", "(n):", "\n    ", "return ", "import os", "class ",
                                          "Stack", "for i in range(", "x = [", "1, 2, 3", "]", "# sort ", "while True:",
                                          "print(", "if x > 0:", "self.items", " = []", "try:", "except ValueError"};
  std::mt19937 rng(20261204);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < 8; ++round) {
    EngineOptions eo;
    eo.limits.max_prompt_tokens = kMaxPrompt;
    eo.limits.max_tokens = kMaxTokens;
    eo.limits.max_batch = pick(1, 5);
    eo.limits.queue_depth = 16;
    eo.prefill_chunk = std::vector<int>{3, 7, 16, 512}[size_t(pick(0, 3))];
    eo.prefill_stall = std::vector<double>{0, 1.5, 3}[size_t(pick(0, 2))];
    eo.draft = pick(0, 1) ? DraftKind::Mtp : DraftKind::None;
    if (eo.draft == DraftKind::Mtp) {
      eo.block_policy = pick(0, 1) ? BlockPolicy::Auto : BlockPolicy::Fixed;
      if (eo.block_policy == BlockPolicy::Fixed) eo.block_size = pick(2, 5);
    }
    // Room for two to four requests' whole budgets (and the start-up probe's
    // block a slot): the rest wait for blocks.
    const int budget = runtime_capacity(kMaxPrompt, kMaxTokens, kAutoMaxBlockSize);
    const int blocks = std::max(pick(2, 4) * kv_blocks_for(budget), eo.limits.max_batch);
    eo.kv_cache_tokens = pick(0, 1) ? 0 : blocks * kKvBlockTokens;
    const std::string what = "round " + std::to_string(round) + ": max-batch " + std::to_string(eo.limits.max_batch) +
                             ", chunk " + std::to_string(eo.prefill_chunk) + ", stall " +
                             std::to_string(eo.prefill_stall) + ", " + draft_kind_name(eo.draft) + " " +
                             block_policy_name(eo.block_policy) + " K " + std::to_string(eo.block_size) +
                             ", kv-cache-tokens " + std::to_string(eo.kv_cache_tokens);
    SCOPED_TRACE(what);

    struct Request {
      std::vector<int32_t> prompt;
      int max_tokens = 0;
      int delay_ms = 0;
    };
    std::vector<Request> requests(12);
    for (Request& r : requests) {
      std::string text;
      while (true) {
        const std::string more = text + words[size_t(pick(0, int(words.size()) - 1))];
        if (!text.empty() && (int(tokenizer.encode(more).size()) > kMaxPrompt || pick(0, 5) == 0)) break;
        text = more;
      }
      r.prompt = tokenizer.encode(text);
      r.max_tokens = pick(1, kMaxTokens);
      r.delay_ms = pick(0, 30);
    }

    Metrics metrics;
    std::vector<engine_test::Finished> got(requests.size());
    {
      Engine engine(ckpt, tokenizer, eo, metrics);
      std::vector<std::thread> clients;
      for (size_t i = 0; i < requests.size(); ++i)
        clients.emplace_back([&, i] {
          std::this_thread::sleep_for(std::chrono::milliseconds(requests[i].delay_ms));
          CompletionRequest cr;
          cr.prompt_is_ids = true;
          cr.prompt_ids = requests[i].prompt;
          cr.max_tokens = requests[i].max_tokens;
          cr.sampling.temperature = 0;
          auto job = std::make_shared<Job>(cr, requests[i].prompt);
          ASSERT_TRUE(engine.submit(job));
          got[i] = engine_test::wait(*job);
        });
      for (auto& c : clients) c.join();
    }
    for (size_t i = 0; i < requests.size(); ++i)
      EXPECT_EQ(got[i].text, alone(ckpt, tokenizer, requests[i].prompt, requests[i].max_tokens)) << "request " << i;
  }
}

}  // namespace
}  // namespace nextn::server
