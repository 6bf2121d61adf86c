// The KV cache in blocks (model/kv_pool.h; docs/engine.md, "Memory that
// grows with use"): the pool's bookkeeping; CPU sequences that grow through
// blocks, hand them back and reuse other sequences' blocks in another order
// answer as fresh runs; a server whose pool holds two requests' budgets
// queues the others and still answers every one as its solo run.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/generate.h"
#include "engine/step_loop.h"
#include "engine_test_util.h"
#include "kv_block_checks.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "model/kv_pool.h"
#include "server/engine.h"
#include "step_failure_checks.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn {
namespace {

const std::string kModel = std::string(NEXTN_SOURCE_DIR) + "/models/default";

TEST(KvBlockPool, GrowsByArenasReusesBlocksAndStopsAtItsLimit) {
  test::RefusingAllocator alloc(host_allocator());
  {
    KvBlockPool pool(256, 3, alloc);
    EXPECT_EQ(kv_blocks_for(0), 0);
    EXPECT_EQ(kv_blocks_for(64), 1);
    EXPECT_EQ(kv_blocks_for(65), 2);
    std::vector<void*> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.take("test"));
    KvPoolStats s = pool.stats();
    EXPECT_EQ(s.allocated, 6);  // two arenas of 3
    EXPECT_EQ(s.in_use, 4);
    for (size_t i = 0; i < held.size(); ++i)
      for (size_t j = 0; j < i; ++j) EXPECT_NE(held[i], held[j]);
    pool.give(held[1]);
    EXPECT_EQ(pool.take("test"), held[1]);  // a given block is taken again before any new memory
    EXPECT_EQ(pool.stats().allocated, 6);

    // The limit: not below what the pool holds; the last arena cut short by it.
    EXPECT_THROW(pool.set_limit(5), Error);
    pool.set_limit(7);
    held.push_back(pool.take("test"));
    held.push_back(pool.take("test"));
    held.push_back(pool.take("test"));  // the 7th block: an arena of one
    EXPECT_EQ(pool.stats().allocated, 7);
    try {
      pool.take("the KV cache");
      ADD_FAILURE() << "took a block past the limit";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the KV cache is full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(pool.stats().in_use, 7);

    // Promises: admission against the limit, given back at the end.
    EXPECT_TRUE(pool.promise(4));
    EXPECT_FALSE(pool.promise(4));
    EXPECT_TRUE(pool.promise(3));
    EXPECT_FALSE(pool.promise(1));
    pool.unpromise(3);
    EXPECT_EQ(pool.stats().promised, 4);
    for (void* b : held) pool.give(b);
    EXPECT_EQ(pool.stats().in_use, 0);

    // An allocator's refusal leaves the pool as it was.
    KvBlockPool small(128, 2, alloc);
    alloc.refuse(1);
    EXPECT_THROW(small.take("the KV cache"), Error);
    EXPECT_EQ(small.stats().allocated, 0);
    EXPECT_EQ(small.stats().in_use, 0);
    EXPECT_NE(small.take("the KV cache"), nullptr);
  }
  EXPECT_EQ(alloc.refused.size(), 1u);
}

// A block table takes blocks as its positions grow, never moves its data
// (the layer views read it in place), gives every block back on release and
// on destruction, keeps what it took when the pool refuses part way, and
// refuses positions past its capacity.
TEST(KvBlockTable, GrowsInPlaceAndGivesEveryBlockBack) {
  test::RefusingAllocator alloc(host_allocator());
  KvBlockPool pool(256, 2, alloc);
  {
    KvBlockTable table(&pool, 300, "test blocks");
    void* const* data = table.data();
    table.hold(1);
    EXPECT_EQ(table.blocks(), 1);
    table.hold(64);
    EXPECT_EQ(table.blocks(), 1);
    table.hold(65);
    EXPECT_EQ(table.blocks(), 2);
    EXPECT_EQ(table.bytes_held(), 512u);
    table.hold(300);
    EXPECT_EQ(table.blocks(), 5);
    EXPECT_EQ(table.data(), data);
    EXPECT_THROW(table.hold(321), Error);  // past its 5 blocks' capacity
    EXPECT_EQ(pool.stats().in_use, 5);
    table.release();
    EXPECT_EQ(pool.stats().in_use, 0);

    pool.set_limit(6);
    KvBlockTable other(&pool, 640, "test blocks");
    table.hold(128);
    try {
      other.hold(640);
      ADD_FAILURE() << "held 10 blocks of a 6-block pool";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("test blocks"), std::string::npos) << e.what();
    }
    EXPECT_EQ(other.blocks(), 4);  // what it took before the refusal, given back with it
    KvBlockTable moved(std::move(other));
    EXPECT_EQ(moved.blocks(), 4);
    EXPECT_EQ(other.blocks(), 0);
  }
  EXPECT_EQ(pool.stats().in_use, 0);
  KvBlockTable none(nullptr, 640, "no pool");
  none.hold(640);
  EXPECT_EQ(none.blocks(), 0);
  EXPECT_EQ(none.bytes_held(), 0u);
}

// A sequence of 150 positions spans three blocks; after it is reset, a new
// sequence takes its blocks (most recently given first, so in another order
// than the first sequence held them) and answers what a fresh runtime does.
TEST(KvBlockPool, CpuSequencesReuseEachOthersBlocksExactly) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  auto group = make_sequence_group(ckpt, BackendKind::Cpu);
  const std::vector<KvPoolUse> pools = group->kv_pools();
  ASSERT_EQ(pools.size(), 1u);
  KvBlockPool* pool = pools[0].pool;
  const std::vector<int32_t> a = {970, 11, 1879, 0, 13, 220, 3555}, b = {1350, 7, 16, 17, 12, 20};
  const int n = 150;
  auto fresh = [&](const std::vector<int32_t>& prompt) {
    auto rt = make_runtime(ckpt, BackendKind::Cpu, int(prompt.size()) + n + 8);
    return greedy_generate(*rt, prompt, n, /*ignore_eos=*/true).tokens;
  };
  auto first = group->add_sequence(256), second = group->add_sequence(256);
  EXPECT_EQ(pool->stats().in_use, 0);  // nothing held before a forward
  EXPECT_EQ(greedy_generate(*first, a, n, true).tokens, fresh(a));
  const int held = pool->stats().in_use, allocated = pool->stats().allocated;
  EXPECT_GE(held, kv_blocks_for(int(a.size()) + n - 1));
  EXPECT_LE(held, kv_blocks_for(int(a.size()) + n + 8));
  first->reset();
  EXPECT_EQ(pool->stats().in_use, 0);
  EXPECT_EQ(greedy_generate(*second, b, n, true).tokens, fresh(b));
  EXPECT_EQ(pool->stats().allocated, allocated);  // the first sequence's blocks, taken again
  // The MTP head writes its entries into the same blocks.
  second->reset();
  GenerateOptions o;
  o.max_new_tokens = n;
  o.draft = DraftKind::Mtp;
  o.ignore_eos = true;
  const auto spec = generate(*first, a, o).tokens;
  EXPECT_EQ(spec, fresh(a));
  first.reset();
  second.reset();
  EXPECT_EQ(pool->stats().in_use, 0);  // destroyed sequences give theirs back
}

// A step that needs a block the pool cannot give fails only the sequence
// that needs it (docs/engine.md, "Failures"): with a limit of two blocks, a
// sequence whose prompt fills its first block and a second sequence holding
// the other, the first fails with "the KV cache is full" when it reaches
// position 64, before anything of that step runs; the second's tokens equal
// its solo run, and the failed slot, reset, holds nothing
// (tests/kv_block_checks.h, shared with Gemma 4's two pools).
TEST(KvBlockPool, ASequenceThatFindsThePoolFullFailsAlone) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  auto group = make_sequence_group(ckpt, BackendKind::Cpu);
  ASSERT_EQ(group->kv_pools().size(), 1u);
  test::check_full_pool_fails_alone(*group, [&](int cap) { return make_runtime(ckpt, BackendKind::Cpu, cap); },
                                    {1350, 7, 16, 17, 12});
}

// Six concurrent requests, a pool of four blocks and two blocks per request:
// at most two run at once, the rest wait in the queue (not a failure), and
// every answer equals its solo run.
TEST(KvBlockPool, ServerAdmitsByFreeBlocksAndQueuesTheRest) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  const std::vector<std::string> prompts = {"def fibonacci(n):", "import os\n", "class Stack:",
                                            "for i in range(", "x = [", "while True:"};
  const int n = 90;  // with a short prompt: 2 blocks per request
  server::Metrics metrics;
  server::EngineOptions eo;
  eo.limits.max_prompt_tokens = 32;
  eo.limits.max_tokens = n;
  eo.limits.max_batch = 4;
  eo.limits.queue_depth = 16;
  eo.kv_cache_tokens = 4 * kKvBlockTokens;
  {
    server::EngineOptions tiny = eo;
    tiny.kv_cache_tokens = 64;  // below one request of the longest prompt plus max_tokens
    EXPECT_THROW({ server::Engine e(ckpt, tokenizer, tiny, metrics); }, Error);
  }
  server::Engine engine(ckpt, tokenizer, eo, metrics);
  std::vector<std::shared_ptr<server::Job>> jobs;
  for (const auto& p : prompts) {
    server::CompletionRequest r;
    r.prompt = p;
    r.max_tokens = n;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    jobs.push_back(std::make_shared<server::Job>(r, tokenizer.encode(p)));
  }
  const std::vector<server::engine_test::Finished> got = server::engine_test::serve_all(engine, jobs);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ids = tokenizer.encode(prompts[i]);
    auto rt = make_runtime(ckpt, BackendKind::Cpu, int(ids.size()) + n + 8);
    EXPECT_EQ(got[i].text, tokenizer.decode(greedy_generate(*rt, ids, n, true).tokens)) << "prompt " << i;
    EXPECT_EQ(got[i].finish_reason, "length");
  }
  const std::string m = metrics.render();
  auto value = [&](const std::string& name) { return server::engine_test::metric(m, name); };
  EXPECT_GT(value("nextn_kv_admission_waits_total"), 0) << m;
  EXPECT_EQ(value("nextn_kv_blocks_limit{pool=\"attention\"}"), 4) << m;
  EXPECT_LE(value("nextn_kv_blocks_allocated{pool=\"attention\"}"), 4) << m;
  EXPECT_EQ(value("nextn_kv_blocks_in_use{pool=\"attention\"}"), 0) << m;
  EXPECT_EQ(value("nextn_kv_blocks_promised{pool=\"attention\"}"), 0) << m;
  // Never more than two requests in a step: every step in the histogram's bucket le="2".
  const std::string bucket = "nextn_step_sequences_bucket{le=\"2\"} ";
  const size_t at = m.find(bucket);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_EQ(std::stod(m.substr(at + bucket.size())), value("nextn_step_sequences_count")) << m;
  EXPECT_GT(value("nextn_step_sequences_count"), 0) << m;
  // Every step timed; the slowest named by what it carried (at most the two requests).
  EXPECT_EQ(value("nextn_engine_step_seconds_count"), value("nextn_step_sequences_count")) << m;
  const std::string slowest = "nextn_engine_slowest_step_seconds{sequences=\"";
  const size_t s_at = m.find(slowest);
  ASSERT_NE(s_at, std::string::npos) << m;
  const int slowest_sequences = std::stoi(m.substr(s_at + slowest.size()));
  EXPECT_GE(slowest_sequences, 1);
  EXPECT_LE(slowest_sequences, 2);
}

}  // namespace
}  // namespace nextn
