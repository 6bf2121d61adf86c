// CPU, through the checks of tests/batch_checks.h: on every transformers
// fixture, sequences of different prompts and lengths whose target forwards
// run together (prefills beside decode rows, verify blocks rolled back,
// sequences joining late) give the same logits and argmax bits as each
// sequence run alone; refused calls change nothing; generate() with and
// without MTP drafts on threads that share their forwards gives each its
// solo tokens and counters, and so does the serial group (forwards one after
// another) that backends without multi-sequence support get.
#include <gtest/gtest.h>

#include <climits>

#include "backend/cpu/qwen35.h"
#include "batch_checks.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"

namespace nextn {
namespace {

using test::fixture_dirs;
using test::load_reference;

const CpuRuntimeOptions kOptions{.threads = 3, .min_chunk_work = 1};

test::RuntimeMaker cpu_alone(const Qwen35Checkpoint& ckpt) {
  return [&ckpt](int cap) { return make_cpu_runtime(ckpt, cap, kOptions); };
}

class BatchRuntime : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchRuntime, ForwardsTogetherEqualEachAlone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = load_reference(GetParam());
  auto group = make_cpu_sequence_group(ckpt, kOptions);
  test::check_together_equals_alone(cpu_alone(ckpt), *group, ref.prompt, {1, 3, 7});
}

TEST_P(BatchRuntime, AnErrorInOneSequenceChangesNone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = load_reference(GetParam());
  auto group = make_cpu_sequence_group(ckpt, {.threads = 2});
  test::check_errors_change_nothing(cpu_alone(ckpt), *group, ref.prompt, ckpt.config().vocab_size);
}

// Sequences stepped together by the engine loop against generate() on a
// runtime alone; also through the serial group of backends without shared
// forwards (whose step calls run per sequence).
void check_stepped_generations(const std::string& dir, bool serial) {
  const auto ckpt = Qwen35Checkpoint::open(dir);
  const auto ref = load_reference(dir);
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ckpt.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (DraftKind draft : drafts) {
    auto group = serial ? make_serial_sequence_group(ckpt, BackendKind::Cpu, {.cpu_threads = 2}) : make_cpu_sequence_group(ckpt, kOptions);
    EXPECT_EQ(group->shares_forwards(), !serial);
    EXPECT_EQ(group->max_sequences(), serial ? 1 : INT_MAX);
    test::check_stepped_generations(cpu_alone(ckpt), *group, ref.prompt, draft, 0, /*batched_head=*/!serial, /*batched_mtp=*/!serial);
    if (draft == DraftKind::Mtp)
      test::check_stepped_generations(cpu_alone(ckpt), *group, ref.prompt, draft, 5, /*batched_head=*/!serial, /*batched_mtp=*/!serial);
  }
}

TEST_P(BatchRuntime, SteppedGenerationsEqualSoloRuns) { check_stepped_generations(GetParam(), false); }

TEST_P(BatchRuntime, SerialGroupGenerationsEqualSoloRuns) { check_stepped_generations(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Transformers, BatchRuntime, ::testing::ValuesIn(fixture_dirs()), [](const auto& info) {
  std::string n = test::fixture_name(info.param);
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BatchRuntime);

}  // namespace
}  // namespace nextn
