// The CPU Gemma 4 sequence group (backend/cpu/gemma4_group.cpp) through the
// checks of tests/batch_checks.h, on every Gemma 4 fixture: sequences whose
// forwards run together (prefills beside decode rows, a 70-token prompt in
// two chunks, verify blocks rolled back, sequences joining late) give the
// same logits and argmax bits as each alone; refused calls change nothing;
// generations stepped together by the engine loop, plain and with the
// assistant drafting for each sequence, give each its solo tokens and
// counters with one LM-head launch per step.
#include <gtest/gtest.h>

#include <climits>

#include "backend/cpu/gemma4.h"
#include "batch_checks.h"
#include "gemma4_fixture_util.h"
#include "kv_block_checks.h"
#include "io/gemma4_checkpoint.h"
#include "model/batch_runtime.h"
#include "model/target_model.h"
#include "speculative/gemma4_drafter.h"

namespace nextn {
namespace {

using test::load_gemma4_reference;

// The group and the solo runtimes on different thread counts: results must not depend on them.
const CpuRuntimeOptions kGroupOptions{.threads = 3, .min_chunk_work = 1};
const CpuRuntimeOptions kAloneOptions{.threads = 2, .min_chunk_work = 1};

test::RuntimeMaker cpu_alone(const Gemma4Checkpoint& ck) {
  return [&ck](int cap) { return make_cpu_gemma4_runtime(ck, cap, kAloneOptions); };
}

class Gemma4Group : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Group, ForwardsTogetherEqualEachAlone) {
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  // The 70-token script reaches 75 positions: past the sliding rings' slots.
  ASSERT_LT(ck.config().sliding_window + 1 + 64, 75) << "the scripts must wrap the sliding rings";
  auto group = make_cpu_gemma4_group(ck, kGroupOptions);
  EXPECT_EQ(group->max_sequences(), INT_MAX);
  test::check_together_equals_alone(cpu_alone(ck), *group, ref.prompt, {1, 3, 7});
}

TEST_P(Gemma4Group, AnErrorInOneSequenceChangesNone) {
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  auto group = make_cpu_gemma4_group(ck, {.threads = 2});
  test::check_errors_change_nothing(cpu_alone(ck), *group, ref.prompt, ck.config().vocab_size);
}

TEST_P(Gemma4Group, KvBlocksFollowUseAndAFullPoolFailsOneSequenceAlone) {
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  auto group = make_cpu_gemma4_group(ck, kGroupOptions);
  const std::vector<KvPoolUse> pools = group->kv_pools();
  ASSERT_EQ(pools.size(), 2u);  // every fixture has full and sliding layers
  EXPECT_EQ(std::string(pools[1].name), "sliding_window");
  EXPECT_EQ(pools[1].ring_blocks, kv_blocks_for(ck.config().sliding_window + 1 + 64));
  test::check_kv_blocks_follow_use(*group, cpu_alone(ck), ref.prompt, 150);
  auto fresh_group = make_cpu_gemma4_group(ck, kGroupOptions);  // a pool that holds no arena yet
  test::check_full_pool_fails_alone(*fresh_group, cpu_alone(ck), ref.prompt);
}

TEST_P(Gemma4Group, SteppedGenerationsEqualSoloRuns) {
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  auto group = make_cpu_gemma4_group(ck, kGroupOptions);
  test::check_stepped_generations(cpu_alone(ck), *group, ref.prompt, DraftKind::None);
}

TEST_P(Gemma4Group, SteppedGenerationsWithTheAssistantEqualSoloRuns) {
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  AssistantModel assistant(ref.assistant(), ck.config(), 2);
  const test::DrafterMaker drafter = [&assistant](ModelRuntime& rt) { return assistant.drafter(rt); };
  auto group = make_cpu_gemma4_group(ck, kGroupOptions);
  for (int K : {2, kAssistantBlockSize, 7}) {
    SCOPED_TRACE("K=" + std::to_string(K));
    test::check_stepped_generations(cpu_alone(ck), *group, ref.prompt, DraftKind::None, K, true, true, drafter);
  }
}

TEST_P(Gemma4Group, TheCpuTargetModelGroupSharesForwards) {
  // What `nextn serve -m GEMMA_DIR` runs on the CPU.
  const auto ref = load_gemma4_reference(GetParam());
  const TargetModel target = open_target_model(ref.target(), BackendKind::Cpu, RuntimeOptions{.cpu_threads = 2});
  auto group = target.make_group();
  EXPECT_TRUE(group->shares_forwards());
  EXPECT_EQ(group->max_sequences(), INT_MAX);
  EXPECT_EQ(group->info().vocab_size, target.info.vocab_size);
  EXPECT_EQ(group->info().mtp_layers, 0);
  EXPECT_STREQ(group->backend_name(), "cpu");
  auto a = group->add_sequence(8);
  EXPECT_THROW(group->add_sequence(target.info.max_position_embeddings + 1), Error);
}

INSTANTIATE_TEST_SUITE_P(Transformers, Gemma4Group, ::testing::ValuesIn(test::gemma4_fixture_dirs()),
                         [](const auto& info) { return test::gemma4_case_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Gemma4Group);

}  // namespace
}  // namespace nextn
