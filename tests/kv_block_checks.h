// What a group whose sequences hold their KV caches in blocks (model/kv_pool.h;
// docs/engine.md, "Memory that grows with use") must show, on any backend:
// check_kv_blocks_follow_use and check_full_pool_fails_alone. Used by the
// Gemma 4 group tests (CPU and CUDA), whose two pools (full-attention layers,
// sliding rings) differ in what a sequence holds of each.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "batch_checks.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/step_loop.h"
#include "model/batch_runtime.h"
#include "model/kv_pool.h"

namespace nextn::test {

inline std::vector<int> pools_in_use(const std::vector<KvPoolUse>& pools) {
  std::vector<int> n;
  for (const KvPoolUse& u : pools) n.push_back(u.pool->stats().in_use);
  return n;
}

// Sequences hold nothing before their first forward; a sequence of P
// positions holds exactly u.blocks_for(P) blocks of each pool (a ring's pool:
// no more than its ring); reset gives every block back, and another sequence
// that takes them again (another prompt, no new memory) answers as a fresh
// runtime; destroyed sequences give theirs back.
inline void check_kv_blocks_follow_use(SequenceGroup& group, const RuntimeMaker& alone,
                                       const std::vector<int32_t>& prompt, int n) {
  const std::vector<KvPoolUse> pools = group.kv_pools();
  ASSERT_FALSE(pools.empty());
  const int cap = int(prompt.size()) + n + 8;
  auto fresh = [&](const std::vector<int32_t>& p) {
    auto rt = alone(cap);
    return greedy_generate(*rt, p, n, /*ignore_eos=*/true).tokens;
  };
  std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
  other[0] = prompt[0];
  auto first = group.add_sequence(cap), second = group.add_sequence(cap);
  EXPECT_EQ(pools_in_use(pools), std::vector<int>(pools.size(), 0)) << "held before a forward";
  EXPECT_EQ(greedy_generate(*first, prompt, n, true).tokens, fresh(prompt));
  const int positions = first->target_length();
  std::vector<int> allocated;
  for (const KvPoolUse& u : pools) {
    SCOPED_TRACE(u.name);
    EXPECT_EQ(u.pool->stats().in_use, u.blocks_for(positions)) << positions << " positions";
    allocated.push_back(u.pool->stats().allocated);
    if (u.ring_blocks > 0) {
      EXPECT_LT(u.blocks_for(positions), kv_blocks_for(positions)) << "the ring did not wrap";
    }
  }
  first->reset();
  EXPECT_EQ(pools_in_use(pools), std::vector<int>(pools.size(), 0)) << "held after reset";
  EXPECT_EQ(greedy_generate(*second, other, n, true).tokens, fresh(other));
  for (size_t i = 0; i < pools.size(); ++i)
    EXPECT_EQ(pools[i].pool->stats().allocated, allocated[i]) << pools[i].name << ": new memory for reused blocks";
  first.reset();
  second.reset();
  EXPECT_EQ(pools_in_use(pools), std::vector<int>(pools.size(), 0)) << "held by destroyed sequences";
}

// With the first pool limited to two blocks, a sequence whose prompt fills
// one block and a second sequence holding the other: the first fails alone
// with "the KV cache is full" at the step that would write position 64,
// before anything of that step runs; the second's tokens equal its solo run.
inline void check_full_pool_fails_alone(SequenceGroup& group, const RuntimeMaker& alone,
                                        const std::vector<int32_t>& prompt) {
  const std::vector<KvPoolUse> pools = group.kv_pools();
  ASSERT_FALSE(pools.empty());
  const KvPoolUse& full = pools[0];
  ASSERT_EQ(full.ring_blocks, 0) << "the first pool must hold every position";
  full.pool->set_limit(2);
  std::vector<int32_t> long_prompt;
  for (size_t i = 0; i < 60; ++i) long_prompt.push_back(prompt[i % prompt.size()]);
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.ignore_eos = true;
  auto fresh = alone(128);
  const auto want = generate(*fresh, prompt, o).tokens;

  auto a = group.add_sequence(128), b = group.add_sequence(128);
  StepLoop loop(group);
  const int ia = loop.add(*a, long_prompt, o), ib = loop.add(*b, prompt, o);
  std::vector<StepLoop::Finished> done;
  while (loop.running() > 0) {
    loop.step();
    for (auto& f : loop.take_finished()) done.push_back(std::move(f));
  }
  ASSERT_EQ(done.size(), 2u);
  for (const auto& f : done) {
    if (f.id == ia) {
      ASSERT_TRUE(f.error);
      try {
        std::rethrow_exception(f.error);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the KV cache is full"), std::string::npos) << e.what();
      }
      EXPECT_EQ(int(long_prompt.size()) + int(f.result.tokens.size()) - 1, kKvBlockTokens);
    } else {
      EXPECT_EQ(f.id, ib);
      EXPECT_FALSE(f.error);
      EXPECT_EQ(f.result.tokens, want);
    }
  }
  EXPECT_EQ(a->target_length(), 0);  // the failed slot was reset
  b->reset();
  EXPECT_EQ(pools_in_use(pools), std::vector<int>(pools.size(), 0));
  full.pool->set_limit(0);
}

}  // namespace nextn::test
