// Qwen3.5 MoE on the CUDA backend (docs/moe.md, "CUDA"):
//  - the transformers MoE fixtures (every expert layout, MTP layer included)
//    in the fp32 mode: teacher-forced argmax and MTP drafts equal to
//    transformers' on every row, greedy equal to transformers', speculative
//    == greedy for several K, and a group of sequences == each alone;
//  - a synthetic MoE checkpoint at widths the bf16 kernels take (bf16 and
//    MLX q4 experts): the CUDA fp32 mode's logits against the CPU
//    backend's, and in the bf16 mode speculative == greedy (MTP and oracle),
//    graphs == eager launches, group forwards == each alone and stepped
//    generations == solo runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "fixture_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#include "batch_checks.h"
#include "cuda_alone_util.h"
#include "engine/generate.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "model/batch_runtime.h"
#include "model/bench_interfaces.h"
#include "model/mtp_head.h"
#include "model/runtime.h"
#include "test_cuda_util.h"
#endif

namespace nextn {
namespace {

#ifdef NEXTN_HAVE_CUDA

using test::cuda_alone;

std::vector<std::string> moe_fixture_dirs() {
  std::vector<std::string> out;
  for (const std::string& d : test::fixture_dirs())
    if (load_qwen35_config(d).moe) out.push_back(d);
  if (out.empty()) out.push_back("");
  return out;
}

class CudaMoe : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam().empty()) GTEST_SKIP() << "no MoE fixtures";
  }
};

TEST_P(CudaMoe, TeacherForcedFp32MatchesTransformers) {
  NEXTN_REQUIRE_GPU();
  const std::string dir = GetParam();
  const auto ref = test::load_reference(dir);
  const auto ck = Qwen35Checkpoint::open(dir);
  const int L = int(ref.sequence.size());
  const int64_t V = ref.vocab;
  auto rt = cuda_alone(ck, true)(L + 8);
  rt->target_forward(ref.sequence);  // longer than 64 rows: the MoE block in slices
  std::vector<float> logits(static_cast<size_t>(V));
  double max_err_std = 0;
  for (int i = 0; i < L; ++i) {
    const float* want = &ref.logits[size_t(i) * V];
    const test::RowStats s = test::row_stats(want, V);
    rt->head_logits(i, logits.data());
    for (int64_t v = 0; v < V; ++v)
      max_err_std = std::max(max_err_std, std::fabs(double(logits[size_t(v)]) - want[v]) / s.std);
    int32_t got = 0;
    rt->head_argmax(i, 1, &got);
    EXPECT_EQ(got, s.top1) << "row " << i;
  }
  EXPECT_LT(max_err_std, 1e-3);
  int mtp_rows = 0;
  if (ck.mtp_layers() > 0 && !ref.drafts.empty()) {
    for (int p0 = 0; p0 < L - 1; p0 += 64) {
      const int n = std::min(64, L - 1 - p0);
      std::vector<int32_t> next(ref.sequence.begin() + p0 + 1, ref.sequence.begin() + p0 + 1 + n),
          drafts(static_cast<size_t>(n));
      mtp_of(*rt).mtp_forward(next, p0);
      mtp_of(*rt).mtp_argmax(n, drafts.data());
      for (int i = 0; i < n; ++i) EXPECT_EQ(drafts[size_t(i)], ref.drafts[size_t(p0 + i)]) << "MTP row " << p0 + i;
      mtp_rows += n;
    }
  }
  std::printf("[cuda fp32] %s: %d target rows, %d MTP rows equal transformers; max |logit err| / std %.3g\n",
              test::fixture_name(dir).c_str(), L, mtp_rows, max_err_std);
}

TEST_P(CudaMoe, GreedyAndSpeculativeFp32EqualTransformers) {
  NEXTN_REQUIRE_GPU();
  const std::string dir = GetParam();
  const auto ref = test::load_reference(dir);
  const auto ck = Qwen35Checkpoint::open(dir);
  const RuntimeFactory factory = [&](int cap) { return cuda_alone(ck, true)(cap); };
  GenerateOptions g;
  g.max_new_tokens = int(ref.greedy.size());
  g.ignore_eos = true;
  EXPECT_EQ(generate_fresh(factory, ref.prompt, g).tokens, ref.greedy);
  const bool mtp = ck.mtp_layers() > 0;
  for (int K : {2, 3, 4, 7}) {
    GenerateOptions o = g;
    o.block_size = K;
    o.draft = mtp ? DraftKind::Mtp : DraftKind::Oracle;
    o.oracle.accept_rate = 0.7;
    o.oracle.seed = uint64_t(K);
    EXPECT_EQ(generate_fresh(factory, ref.prompt, o).tokens, ref.greedy) << "K=" << K;
  }
}

TEST_P(CudaMoe, GroupFp32EqualsEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  auto group = make_sequence_group(ck, BackendKind::Cuda, test::cuda_mode_options(true));
  test::check_together_equals_alone(cuda_alone(ck, true), *group, ref.prompt, {2, 7});
  if (ck.mtp_layers() > 0)
    test::check_stepped_generations(cuda_alone(ck, true), *group, ref.prompt, DraftKind::Mtp, 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMoe, testing::ValuesIn(moe_fixture_dirs()),
                         [](const testing::TestParamInfo<std::string>& i) { return test::fixture_param_name(i.param); });

// test-tiny-moe (hidden 64, 8 experts top-2, expert width 64, shared 128,
// MTP layer) written in one storage format.
class CudaMoeSynthetic : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "nextn-test-cuda-moe-" + GetParam();
    std::filesystem::remove_all(dir_);
    MakeCheckpointOptions mo;
    mo.quant = GetParam();
    mo.seed = 23;
    make_checkpoint(*synthetic_preset("test-tiny-moe"), mo, dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  const std::vector<int32_t> prompt_{3, 17, 256, 9, 100, 44, 212, 7, 128, 64, 33, 90};
};

// fp32 mode: the same logits as the CPU backend, row by row, over a
// 70-token forward (slices of 64 rows) and a decode step.
TEST_P(CudaMoeSynthetic, Fp32LogitsEqualTheCpuBackend) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(dir_);
  std::vector<int32_t> seq;
  for (int i = 0; i < 70; ++i) seq.push_back(prompt_[size_t(i) % prompt_.size()] + i);
  auto gpu = cuda_alone(ck, true)(80);
  auto cpu = make_runtime(ck, BackendKind::Cpu, 80);
  const int V = ck.config().vocab_size;
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
  double worst = 0;
  auto compare = [&](int rows) {
    for (int i = 0; i < rows; ++i) {
      gpu->head_logits(i, a.data());
      cpu->head_logits(i, b.data());
      const test::RowStats s = test::row_stats(b.data(), V);
      for (int v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(a[size_t(v)]) - b[size_t(v)]) / s.std);
    }
  };
  gpu->target_forward(seq);
  cpu->target_forward(seq);
  compare(70);
  const std::vector<int32_t> one{5};
  gpu->target_forward(one);
  cpu->target_forward(one);
  compare(1);
  EXPECT_LT(worst, 1e-3);
  std::printf("[cuda fp32] test-tiny-moe %s: max |logit - cpu| / std %.3g\n", GetParam(), worst);
}

// bf16 mode: speculative == greedy byte for byte, MTP and oracle drafts.
TEST_P(CudaMoeSynthetic, SpeculativeEqualsGreedyBf16) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(dir_);
  const RuntimeFactory factory = [&](int cap) { return cuda_alone(ck, false)(cap); };
  GenerateOptions g;
  g.max_new_tokens = 40;
  g.ignore_eos = true;
  const auto greedy = generate_fresh(factory, prompt_, g).tokens;
  ASSERT_EQ(greedy.size(), 40u);
  for (DraftKind draft : {DraftKind::Mtp, DraftKind::Oracle})
    for (int K : {2, 3, 4, 5, 8, 16}) {
      GenerateOptions o = g;
      o.block_size = K;
      o.draft = draft;
      o.oracle.accept_rate = 0.8;
      o.oracle.seed = uint64_t(K * 3);
      EXPECT_EQ(generate_fresh(factory, prompt_, o).tokens, greedy)
          << (draft == DraftKind::Mtp ? "mtp" : "oracle") << " K=" << K;
    }
}

TEST_P(CudaMoeSynthetic, GraphsMatchEagerLaunches) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(dir_);
  std::vector<std::vector<float>> logits;
  for (bool graphs : {true, false}) {
    auto rt = cuda_alone(ck, false, graphs)(64);
    rt->target_forward(prompt_);
    for (int32_t t : {5, 77, 300}) rt->target_forward({&t, 1});
    logits.emplace_back(static_cast<size_t>(ck.config().vocab_size));
    rt->head_logits(0, logits.back().data());
  }
  EXPECT_EQ(logits[0], logits[1]);
}

TEST_P(CudaMoeSynthetic, GroupBf16EqualsEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(dir_);
  auto group = make_sequence_group(ck, BackendKind::Cuda, test::cuda_mode_options(false));
  test::check_together_equals_alone(cuda_alone(ck, false), *group, prompt_, {1, 2, 7});
  for (int K : {4, 8}) test::check_stepped_generations(cuda_alone(ck, false), *group, prompt_, DraftKind::Mtp, K);
}

// The grouped kernels' byte counter (RuntimeProbe::expert_bytes_read): a
// one-row step reads each layer's k experts once, weights and scales; four
// rows read more, at most four times as much (the union of their experts).
TEST_P(CudaMoeSynthetic, ExpertBytesCounterCountsWhatTheKernelsRead) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(dir_);
  const auto& c = ck.config();
  const bool q4 = std::string(GetParam()) == "q4";
  const uint64_t weights = uint64_t(3) * uint64_t(c.moe_intermediate_size) * uint64_t(c.hidden_size);  // gate, up, down
  const uint64_t per_expert = q4 ? weights / 2 + weights / 64 * 4  // nibbles + a bf16 (scale, bias) per group of 64
                                 : weights * 2;                    // bf16
  auto rt = cuda_alone(ck, false)(64);
  RuntimeProbe& probe = probe_of(*rt);
  rt->target_forward(prompt_);
  uint64_t before = probe.expert_bytes_read();
  const int32_t one = 5;
  rt->target_forward({&one, 1});
  const uint64_t step = probe.expert_bytes_read() - before;
  EXPECT_EQ(step, uint64_t(c.num_hidden_layers) * uint64_t(c.num_experts_per_tok) * per_expert);
  before = probe.expert_bytes_read();
  const std::vector<int32_t> four{7, 300, 41, 9};
  rt->target_forward(four);
  const uint64_t block = probe.expert_bytes_read() - before;
  EXPECT_GT(block, step);
  EXPECT_LE(block, 4 * step);
  std::printf("[cuda bf16] test-tiny-moe %s: expert bytes per 1-row step %llu, per 4-row forward %llu\n", GetParam(),
              (unsigned long long)step, (unsigned long long)block);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaMoeSynthetic, testing::Values("bf16", "q4"),
                         [](const testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

#endif  // NEXTN_HAVE_CUDA

}  // namespace
}  // namespace nextn
