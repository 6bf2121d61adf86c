// All-or-nothing steps on the CPU group (docs/engine.md, "Failures";
// tests/step_failure_checks.h): a planted allocation failure in a step's
// reservation, mid-prefill and mid-decode, a cache overrun and a bad token
// id each fail one sequence alone; the others keep their solo tokens and
// the failed slot serves again.
#include <gtest/gtest.h>

#include "backend/cpu/qwen35.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "step_failure_checks.h"

namespace nextn {
namespace {

const CpuRuntimeOptions kOptions{.threads = 2};

class StepFailures : public ::testing::TestWithParam<std::string> {};

TEST_P(StepFailures, RefusedReservationFailsOneSequenceAlone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  auto group = make_cpu_sequence_group(ckpt, kOptions);
  test::check_refused_reservations([&](int cap) { return make_cpu_runtime(ckpt, cap, kOptions); }, *group,
                                   host_allocator(), ref.prompt, /*mid_decode=*/true, "hidden rows");
}

TEST_P(StepFailures, OverrunAndBadTokenFailOneSequenceAlone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  auto group = make_cpu_sequence_group(ckpt, kOptions);
  test::check_bad_rows_fail_alone([&](int cap) { return make_cpu_runtime(ckpt, cap, kOptions); }, *group, ref.prompt);
}

// The serial group (Gemma 4's; backends without shared forwards) runs the
// same reservation through each runtime's reserve_step: bad rows fail alone.
TEST_P(StepFailures, SerialGroupBadRowsFailOneSequenceAlone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  auto group = make_serial_sequence_group(ckpt, BackendKind::Cpu, RuntimeOptions{.cpu_threads = 2});
  test::check_bad_rows_fail_alone([&](int cap) { return make_cpu_runtime(ckpt, cap, kOptions); }, *group, ref.prompt);
}

INSTANTIATE_TEST_SUITE_P(Transformers, StepFailures, ::testing::ValuesIn(test::fixture_dirs()), [](const auto& info) {
  std::string n = test::fixture_name(info.param);
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(StepFailures);

}  // namespace
}  // namespace nextn
