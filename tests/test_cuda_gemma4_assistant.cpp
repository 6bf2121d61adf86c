// The Gemma 4 assistant on the GPU (backend/cuda/gemma4_assistant.h), on
// every Gemma 4 fixture: a CUDA target's drafter runs there (AssistantModel
// picks the target's device); in the fp32 mode its teacher-forced first
// drafts equal transformers' after every prefix, its chained greedy drafts
// equal the CPU assistant's reading the same CUDA target round after round,
// and its sampled-drafting logits are the CPU assistant's (the same tokens
// masked to -inf, the others within 1e-4 of the largest). The bf16 mode's
// agreement with transformers is printed. Speculative == greedy with it:
// tests/test_cuda_gemma4.cpp (CudaGemma4Spec) and test_cuda_gemma4_group.cpp.
// Skipped without a GPU (the device suite runs them: scripts/device/run.sh).
#include <gtest/gtest.h>

#ifdef NEXTN_HAVE_CUDA
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/gemma4.h"
#include "gemma4_fixture_util.h"
#include "io/gemma4_checkpoint.h"
#include "speculative/gemma4_drafter.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using test::load_gemma4_reference;

const RuntimeOptions kFp32{.act = Activations::Fp32};


class CudaGemma4Assistant : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGemma4Assistant, FirstDraftsMatchTransformersAfterEveryPrefix) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  ASSERT_FALSE(ref.drafts.empty());
  std::vector<RuntimeOptions> modes{kFp32};
  if (test::cuda_bf16_fits(ck.config()) && test::cuda_bf16_fits(Gemma4Checkpoint::open_assistant(ref.assistant()).assistant_config().text))
    modes.push_back({.act = Activations::Bf16});
  for (const RuntimeOptions& o : modes) {
    const bool fp32 = o.act == Activations::Fp32;
    auto rt = make_cuda_gemma4_runtime(ck, int(ref.sequence.size()), o);
    AssistantModel assistant(ref.assistant(), ck.config(), 2);
    const std::vector<int32_t> trace = assistant_draft_trace(*rt, assistant, ref.sequence);
    ASSERT_EQ(trace.size(), ref.sequence.size() - 1);
    int same = 0;
    for (const auto& d : ref.drafts) {
      const bool eq = trace[size_t(d.prefix_len - 1)] == d.drafts.at(0);
      same += eq ? 1 : 0;
      if (fp32) {
        EXPECT_TRUE(eq) << "prefix " << d.prefix_len;
      }
    }
    std::printf("[cuda %s] gemma4 %s: assistant first drafts equal transformers' at %d of %zu prefixes\n",
                fp32 ? "fp32" : "bf16", test::gemma4_case_name(GetParam()).c_str(), same, ref.drafts.size());
  }
}

TEST_P(CudaGemma4Assistant, ChainedDraftsEqualTheCpuAssistantFp32) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  auto rt = make_cuda_gemma4_runtime(ck, int(ref.sequence.size()) + 8, kFp32);
  AssistantModel assistant(ref.assistant(), ck.config(), 2);
  auto gpu = assistant.drafter(*rt), cpu = assistant.cpu_drafter(*rt);
  // Rounds after a prefill and after one- and three-row forwards (one rolled back).
  const size_t n = ref.prompt.size();
  rt->target_forward(std::span(ref.sequence).first(n));
  int rounds = 0;
  for (size_t at = n; at + 3 < ref.sequence.size() && rounds < 6; ++rounds) {
    const int32_t bonus = ref.sequence[at];
    gpu->begin(std::span(ref.sequence).first(at), bonus);
    cpu->begin(std::span(ref.sequence).first(at), bonus);
    std::vector<int32_t> a, b;
    gpu->propose(5, a);
    cpu->propose(5, b);
    EXPECT_EQ(a, b) << "round at length " << rt->target_length();
    if (rounds % 2 == 0) {
      rt->target_forward(std::span(ref.sequence).subspan(at, 1));
      at += 1;
    } else {
      rt->target_forward(std::span(ref.sequence).subspan(at, 3));
      rt->target_rollback(2);
      at += 2;
    }
  }
  EXPECT_GE(rounds, 3);
}

TEST_P(CudaGemma4Assistant, SampledLogitsEqualTheCpuAssistantFp32) {
  NEXTN_REQUIRE_GPU();
  const auto ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  auto rt = make_cuda_gemma4_runtime(ck, int(ref.sequence.size()) + 8, kFp32);
  AssistantModel assistant(ref.assistant(), ck.config(), 2);
  auto gpu = assistant.drafter(*rt), cpu = assistant.cpu_drafter(*rt);
  const size_t n = ref.prompt.size();
  rt->target_forward(std::span(ref.sequence).first(n));
  gpu->begin(std::span(ref.sequence).first(n), ref.sequence[n]);
  cpu->begin(std::span(ref.sequence).first(n), ref.sequence[n]);
  const int V = ck.config().vocab_size;
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
  for (int step = 0; step < 4; ++step) {
    gpu->draft_logits(a.data());
    cpu->draft_logits(b.data());
    float scale = 0.0f;
    int best = 0;
    for (int v = 0; v < V; ++v)
      if (std::isfinite(b[size_t(v)])) {
        scale = std::max(scale, std::fabs(b[size_t(v)]));
        if (b[size_t(v)] > b[size_t(best)] || !std::isfinite(b[size_t(best)])) best = v;
      }
    int masked = 0;
    for (int v = 0; v < V; ++v) {
      ASSERT_EQ(std::isfinite(a[size_t(v)]), std::isfinite(b[size_t(v)])) << "token " << v << " step " << step;
      if (!std::isfinite(b[size_t(v)])) {
        ++masked;
        continue;
      }
      EXPECT_NEAR(a[size_t(v)], b[size_t(v)], 1e-4f * scale) << "token " << v << " step " << step;
    }
    if (step == 0) std::printf("[cuda fp32] gemma4 %s: assistant logits, %d of %d tokens masked\n",
                               test::gemma4_case_name(GetParam()).c_str(), masked, V);
    gpu->draft_step(best);  // the chain continues with the CPU's greedy pick on both sides
    cpu->draft_step(best);
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, CudaGemma4Assistant, ::testing::ValuesIn(test::gemma4_fixture_dirs()),
                         [](const auto& info) { return test::gemma4_case_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGemma4Assistant);

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
