// The CUDA sequence group (backend/cuda/qwen35_group.cpp) through the checks
// the CPU group passes (tests/batch_checks.h): on every transformers fixture
// in both activation modes, and on two synthetic checkpoints whose matrices
// take the streamed q4 kernel and the split-K bf16 kernel, sequences of
// different prompts whose target forwards run together (1-row decode steps
// beside verify blocks and prefills, a prompt longer than one forward, more
// rows than one forward holds, verify blocks rolled back, sequences joining
// late) give the same logits and argmax bits as each sequence run alone;
// refused calls change nothing and a destroyed group leaves no CUDA object
// behind; generate() with and without MTP drafts on threads whose forwards
// a ForwardScheduler shares gives each its solo tokens and counters.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fixture_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/device_handles.h"
#include "backend/cuda/qwen35.h"
#include "batch_checks.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "model/batch_runtime.h"
#include "test_cuda_util.h"
#endif

namespace nextn {
namespace {

#ifdef NEXTN_HAVE_CUDA

// NEXTN_CUDA_ACT is read when the weights are loaded (a group's sequences
// take the group's mode).
struct ActEnv {
  explicit ActEnv(bool fp32) { setenv("NEXTN_CUDA_ACT", fp32 ? "fp32" : "bf16", 1); }
  ~ActEnv() { unsetenv("NEXTN_CUDA_ACT"); }
};

std::unique_ptr<SequenceGroup> make_group(const Qwen35Checkpoint& ck, bool fp32) {
  ActEnv env(fp32);
  auto group = make_sequence_group(ck, BackendKind::Cuda);
  EXPECT_STREQ(group->backend_name(), "cuda");
  EXPECT_TRUE(group->shares_forwards());
  EXPECT_EQ(group->max_sequences(), 32);
  return group;
}

test::RuntimeMaker cuda_alone(const Qwen35Checkpoint& ck, bool fp32) {
  return [&ck, fp32](int cap) {
    ActEnv env(fp32);
    return make_cuda_runtime(ck, cap);
  };
}

class CudaBatch : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam().empty()) GTEST_SKIP() << "no fixtures";
  }
};

TEST_P(CudaBatch, ForwardsTogetherEqualEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  for (bool fp32 : {true, false}) {
    SCOPED_TRACE(fp32 ? "fp32" : "bf16");
    auto group = make_group(ck, fp32);
    test::check_together_equals_alone(cuda_alone(ck, fp32), *group, ref.prompt, {1, 2, 4, 7});
  }
}

TEST_P(CudaBatch, AnErrorInOneSequenceChangesNone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const int64_t base = cuda::live_count();
  {
    auto group = make_group(ck, false);
    test::check_errors_change_nothing(cuda_alone(ck, false), *group, ref.prompt, ck.config().vocab_size);
  }
  EXPECT_EQ(cuda::live_count(), base) << "a destroyed group or sequence left objects behind";
}

TEST_P(CudaBatch, ScheduledGenerationsEqualSoloRuns) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ck.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (bool fp32 : {false, true}) {
    SCOPED_TRACE(fp32 ? "fp32" : "bf16");
    auto group = make_group(ck, fp32);
    for (DraftKind draft : drafts)
      for (int K : {4, 8}) test::check_scheduled_generations(cuda_alone(ck, fp32), *group, ref.prompt, draft, K);
  }
}

std::vector<std::string> fixture_params() {
  auto d = test::fixture_dirs();
  if (d.empty()) d.push_back("");
  return d;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBatch, testing::ValuesIn(fixture_params()),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param.empty() ? "none" : test::fixture_name(i.param);
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The fixtures are too narrow for the streamed kernel and for split-K: a
// synthetic q4 g64 checkpoint whose matrices are all streamed, and a bf16
// one whose wider matrices split along k, both in the bf16 mode.
void check_synthetic(const char* preset, const char* quant) {
  const std::string dir = testing::TempDir() + "nextn-test-batch-" + preset + "-" + quant;
  std::filesystem::remove_all(dir);
  MakeCheckpointOptions mo;
  mo.quant = quant;
  mo.seed = 17;
  make_checkpoint(*synthetic_preset(preset), mo, dir);
  {
    const auto ck = Qwen35Checkpoint::open(dir);
    auto group = make_group(ck, false);
    test::check_together_equals_alone(cuda_alone(ck, false), *group, {3, 17, 256, 9, 1000, 44, 512, 7, 128, 64, 33, 900},
                                      {2, 7});
  }
  std::filesystem::remove_all(dir);
}

TEST(CudaBatchSynthetic, StreamedQ4ForwardsTogetherEqualEachAlone) {
  NEXTN_REQUIRE_GPU();
  check_synthetic("test-stream", "q4");
}

TEST(CudaBatchSynthetic, SplitKBf16ForwardsTogetherEqualEachAlone) {
  NEXTN_REQUIRE_GPU();
  check_synthetic("small-19m", "bf16");
}

#endif  // NEXTN_HAVE_CUDA

}  // namespace
}  // namespace nextn
