// The CPU backend's results do not depend on its thread count: on every
// transformers fixture (q4 included), logits of multi-row and one-row
// forwards, the fused argmax, MTP drafts, plain greedy and speculative
// tokens are bit for bit the same at 1, 2 and 7 threads. The runtimes split
// every matrix product down to single rows (min_chunk_work 1), so the tiny
// fixture shapes exercise the same splits a real model gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "backend/cpu/qwen35.h"
#include "bench/verify_arms.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/bench_interfaces.h"
#include "model/runtime.h"
#include "engine/generate.h"

namespace nextn {
namespace {

using test::fixture_dirs;
using test::load_reference;

struct Outputs {
  std::vector<float> logits;     // every row of every forward, in order
  std::vector<int32_t> fused;    // head_argmax_fused over the prefill rows
  std::vector<int32_t> mtp;      // teacher-forced MTP drafts over the prompt
  std::vector<int32_t> greedy;   // plain greedy tokens
  std::vector<std::vector<int32_t>> speculative;  // MTP speculative tokens, several K x arms
};

Outputs run_at(const Qwen35Checkpoint& ckpt, const test::Reference& ref, int threads) {
  const CpuRuntimeOptions opt{.threads = threads, .min_chunk_work = 1};
  const RuntimeFactory factory = [&](int cap) { return make_cpu_runtime(ckpt, cap, opt); };
  const int V = ckpt.config().vocab_size;
  const int n = int(ref.prompt.size());
  Outputs out;
  std::vector<float> row(static_cast<size_t>(V));
  auto keep_rows = [&](ModelRuntime& rt, int rows) {
    for (int j = 0; j < rows; ++j) {
      rt.head_logits(j, row.data());
      out.logits.insert(out.logits.end(), row.begin(), row.end());
    }
  };
  {
    auto rt = factory(int(ref.sequence.size()) + 8);
    rt->target_forward(ref.prompt);  // prefill: many rows
    keep_rows(*rt, n);
    out.fused.resize(size_t(n));
    verify_arms_of(*rt).head_argmax_fused(0, n, out.fused.data());
    if (ckpt.mtp_layers() > 0) {
      std::vector<int32_t> drafts(size_t(n - 1));
      mtp_of(*rt).mtp_forward(std::span<const int32_t>(ref.prompt.data() + 1, size_t(n - 1)), 0);
      mtp_of(*rt).mtp_argmax(n - 1, drafts.data());
      out.mtp.assign(drafts.begin(), drafts.end());
    }
    // A verify-like forward rolled back (the GDN replay runs), then one-row steps.
    const std::vector<int32_t> verify = {ref.sequence[size_t(n)], 5, 9, 1};
    rt->target_forward(verify);
    keep_rows(*rt, int(verify.size()));
    rt->target_rollback(1);
    for (int j = 1; j < 4 && n + j < int(ref.sequence.size()); ++j) {
      rt->target_forward(std::span<const int32_t>(ref.sequence.data() + n + j, 1));
      keep_rows(*rt, 1);
    }
  }
  {
    auto rt = factory(runtime_capacity(n, 24, 1));
    out.greedy = greedy_generate(*rt, ref.prompt, 24, /*ignore_eos=*/true).tokens;
  }
  if (ckpt.mtp_layers() > 0) {
    // The product's head (BatchedHead; nullopt) at K = 3, then verify arms at the engine step's head.
    const std::pair<int, std::optional<VerifyArm>> runs[] = {
        {3, std::nullopt}, {3, VerifyArm::Batched}, {4, VerifyArm::Walk}, {5, VerifyArm::Fused}};
    for (const auto& [K, arm] : runs) {
      GenerateOptions o;
      o.max_new_tokens = 24;
      o.draft = DraftKind::Mtp;
      o.block_size = K;
      o.ignore_eos = true;
      auto rt = factory(runtime_capacity(n, 24, K));
      ArmChoice choice;
      if (arm) choice.arm = *arm;
      out.speculative.push_back(
          (arm ? generate_verify_arm(*rt, ref.prompt, o, choice) : generate(*rt, ref.prompt, o)).tokens);
    }
  }
  return out;
}

class CpuThreads : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuThreads, ResultsAreBitwiseIndependentOfTheThreadCount) {
  const auto ref = load_reference(GetParam());
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const Outputs one = run_at(ckpt, ref, 1);
  ASSERT_FALSE(one.logits.empty());
  for (const auto& tokens : one.speculative) EXPECT_EQ(tokens, one.greedy);  // exact speculation
  for (int threads : {2, 7}) {
    SCOPED_TRACE(testing::Message() << threads << " threads");
    const Outputs many = run_at(ckpt, ref, threads);
    ASSERT_EQ(one.logits.size(), many.logits.size());
    EXPECT_EQ(0, std::memcmp(one.logits.data(), many.logits.data(), one.logits.size() * sizeof(float)));
    EXPECT_EQ(one.fused, many.fused);
    EXPECT_EQ(one.mtp, many.mtp);
    EXPECT_EQ(one.greedy, many.greedy);
    EXPECT_EQ(one.speculative, many.speculative);
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, CpuThreads, ::testing::ValuesIn(fixture_dirs()), [](const auto& info) {
  std::string s = test::fixture_name(info.param);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CpuThreads);

}  // namespace
}  // namespace nextn
