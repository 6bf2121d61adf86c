// The CUDA Gemma 4 sequence group (backend/cuda/gemma4_group.cpp) through
// the checks of tests/batch_checks.h, on every Gemma 4 fixture and in both
// modes where the bf16 kernels take its shapes: forwards run together
// (prefills beside decode rows, a 70-token prompt over two passes, verify
// blocks rolled back, sequences joining late) give the same logits and
// argmax bits as each sequence alone; refused calls change nothing;
// generations stepped together by the engine loop, plain and with the CPU
// assistant drafting for each sequence, give each its solo tokens and
// counters with one LM-head launch per step and no rollback launch; the
// caches' blocks follow each sequence's positions.
// Skipped without a GPU (the device suite runs them: scripts/device/run.sh).
#include <gtest/gtest.h>

#ifdef NEXTN_HAVE_CUDA
#include <string>

#include "backend/cuda/gemma4.h"
#include "batch_checks.h"
#include "gemma4_fixture_util.h"
#include "kv_block_checks.h"
#include "io/gemma4_checkpoint.h"
#include "model/batch_runtime.h"
#include "model/target_model.h"
#include "speculative/gemma4_drafter.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using test::load_gemma4_reference;


std::vector<RuntimeOptions> modes_for(const Gemma4TextConfig& c) {
  std::vector<RuntimeOptions> m{{.act = Activations::Fp32}};
  if (test::cuda_bf16_fits(c)) m.push_back({.act = Activations::Bf16});
  return m;
}

std::string mode_name(const RuntimeOptions& o) { return o.act == Activations::Fp32 ? "fp32" : "bf16"; }

test::RuntimeMaker cuda_alone(const Gemma4Checkpoint& ck, const RuntimeOptions& o) {
  return [&ck, o](int cap) { return make_cuda_gemma4_runtime(ck, cap, o); };
}

class CudaGemma4Group : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGemma4Group, ForwardsTogetherEqualEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  // The 70-token script reaches 75 positions: past the sliding rings' slots.
  ASSERT_LT(ck.config().sliding_window + 1 + 64, 75) << "the scripts must wrap the sliding rings";
  for (const RuntimeOptions& o : modes_for(ck.config())) {
    SCOPED_TRACE(mode_name(o));
    auto group = make_cuda_gemma4_group(ck, o);
    EXPECT_TRUE(group->shares_forwards());
    test::check_together_equals_alone(cuda_alone(ck, o), *group, ref.prompt, {1, 3, 7});
  }
}

TEST_P(CudaGemma4Group, AnErrorInOneSequenceChangesNone) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const RuntimeOptions o{.act = Activations::Fp32};
  auto group = make_cuda_gemma4_group(ck, o);
  test::check_errors_change_nothing(cuda_alone(ck, o), *group, ref.prompt, ck.config().vocab_size);
}

// The caches in blocks from the group's two pools (tests/kv_block_checks.h).
TEST_P(CudaGemma4Group, KvBlocksFollowUseAndAFullPoolFailsOneSequenceAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const RuntimeOptions o{.act = Activations::Fp32};
  auto group = make_cuda_gemma4_group(ck, o);
  ASSERT_EQ(group->kv_pools().size(), 2u);
  test::check_kv_blocks_follow_use(*group, cuda_alone(ck, o), ref.prompt, 150);
  auto fresh_group = make_cuda_gemma4_group(ck, o);  // a pool that holds no arena yet
  test::check_full_pool_fails_alone(*fresh_group, cuda_alone(ck, o), ref.prompt);
}

TEST_P(CudaGemma4Group, SteppedGenerationsEqualSoloRuns) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  for (const RuntimeOptions& o : modes_for(ck.config())) {
    SCOPED_TRACE(mode_name(o));
    auto group = make_cuda_gemma4_group(ck, o);
    test::check_stepped_generations(cuda_alone(ck, o), *group, ref.prompt, DraftKind::None);
    EXPECT_EQ(group->step_work().rollback_launches, 0);
  }
}

TEST_P(CudaGemma4Group, SteppedGenerationsWithTheAssistantEqualSoloRuns) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  AssistantModel assistant(ref.assistant(), ck.config(), 2);
  const test::DrafterMaker drafter = [&assistant](ModelRuntime& rt) { return assistant.drafter(rt); };
  for (const RuntimeOptions& o : modes_for(ck.config())) {
    auto group = make_cuda_gemma4_group(ck, o);
    for (int K : {2, kAssistantBlockSize, 7}) {
      SCOPED_TRACE(mode_name(o) + " K=" + std::to_string(K));
      test::check_stepped_generations(cuda_alone(ck, o), *group, ref.prompt, DraftKind::None, K, true, true, drafter);
    }
    EXPECT_EQ(group->step_work().rollback_launches, 0);  // positions only
  }
}

TEST_P(CudaGemma4Group, TheCudaTargetModelGroupSharesForwards) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const TargetModel target = open_target_model(ref.target(), BackendKind::Cuda, {.act = Activations::Fp32});
  auto group = target.make_group();
  EXPECT_TRUE(group->shares_forwards());
  EXPECT_EQ(group->max_sequences(), 64);
  EXPECT_EQ(group->info().vocab_size, target.info.vocab_size);
  EXPECT_EQ(group->info().mtp_layers, 0);
  EXPECT_STREQ(group->backend_name(), "cuda");
  auto a = group->add_sequence(8);
  EXPECT_THROW(group->add_sequence(target.info.max_position_embeddings + 1), Error);
  EXPECT_THROW(group->add_sequence(0), Error);
}

INSTANTIATE_TEST_SUITE_P(Transformers, CudaGemma4Group, ::testing::ValuesIn(test::gemma4_fixture_dirs()),
                         [](const auto& info) { return test::gemma4_case_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGemma4Group);

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
