// The CPU runtime's own counters (ModelRuntime::head_work / mtp_work), its
// reset(), and the runtime-level fault, on the transformers-made fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "bench/verify_arms.h"
#include "core/error.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/bench_interfaces.h"
#include "model/runtime.h"
#include "engine/generate.h"

namespace nextn {
namespace {

// Bytes one full pass over the LM head reads in the CPU op.
int64_t head_pass_bytes(const Qwen35Checkpoint& ck) {
  const auto head = cpu::Matrix::load(ck.lm_head());
  return head->rows() * head->row_bytes();
}

class CpuHeadWork : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuHeadWork, EachHeadEntryPointCountsWhatItDid) {
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  auto rt = make_runtime(ck, BackendKind::Cpu, 64);
  const int64_t V = rt->vocab(), pass = head_pass_bytes(ck);
  ASSERT_GT(pass, 0);
  EXPECT_EQ(rt->head_work().head_calls, 0);
  std::vector<int32_t> block(ref.sequence.begin(), ref.sequence.begin() + 6);
  rt->target_forward(block);
  std::vector<int32_t> out(16);

  HeadWork w0 = rt->head_work();
  rt->head_argmax(0, 6, out.data());
  HeadWork w = rt->head_work();
  EXPECT_EQ(w.last_path, HeadPath::Batched);
  EXPECT_EQ(w.rows_projected - w0.rows_projected, 6);
  EXPECT_EQ(w.head_bytes_read - w0.head_bytes_read, pass);  // the head read once for all rows
  EXPECT_EQ(w.logits_bytes_written - w0.logits_bytes_written, 6 * V * 4);
  EXPECT_EQ(w.head_calls - w0.head_calls, 1);

  w0 = w;
  verify_arms_of(*rt).head_argmax_padded(0, 6, 16, out.data());
  w = rt->head_work();
  EXPECT_EQ(w.last_path, HeadPath::Padded);
  EXPECT_EQ(w.rows_projected - w0.rows_projected, 16);
  EXPECT_EQ(w.logits_bytes_written - w0.logits_bytes_written, 16 * V * 4);

  w0 = w;
  verify_arms_of(*rt).head_argmax_fused(0, 6, out.data());
  w = rt->head_work();
  EXPECT_EQ(w.last_path, HeadPath::Fused);
  EXPECT_EQ(w.rows_projected - w0.rows_projected, 6);
  EXPECT_EQ(w.logits_bytes_written - w0.logits_bytes_written, 0);
  EXPECT_EQ(w.head_bytes_read - w0.head_bytes_read, pass);

  // A walk whose drafts are the true tokens for 2 rows, then wrong: 3 rows.
  std::vector<int32_t> truth(6);
  rt->head_argmax(0, 6, truth.data());
  std::vector<int32_t> drafts = {truth[0], truth[1], int32_t((truth[2] + 1) % V), truth[3], truth[4]};
  w0 = rt->head_work();
  EXPECT_EQ(verify_arms_of(*rt).head_walk(drafts, out.data()), 3);
  w = rt->head_work();
  EXPECT_EQ(w.last_path, HeadPath::Walk);
  EXPECT_EQ(w.walk_rows - w0.walk_rows, 3);
  EXPECT_EQ(w.rows_projected - w0.rows_projected, 3);
  EXPECT_EQ(w.head_bytes_read - w0.head_bytes_read, 3 * pass);  // one head pass per walked row
  EXPECT_EQ(w.logits_bytes_written - w0.logits_bytes_written, 3 * V * 4);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), std::vector<int32_t>(truth.begin(), truth.begin() + 3));
}

TEST_P(CpuHeadWork, RuntimeFaultRunsTheBatchedPathAndSaysSo) {
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  std::vector<int32_t> block(ref.sequence.begin(), ref.sequence.begin() + 6);
  auto clean = make_runtime(ck, BackendKind::Cpu, 64);
  clean->target_forward(block);
  std::vector<int32_t> truth(6), out_clean(6), out_fault(6);
  clean->head_argmax(0, 6, truth.data());
  std::vector<int32_t> drafts = {truth[0], int32_t((truth[1] + 1) % clean->vocab()), truth[2], truth[3], truth[4]};
  EXPECT_EQ(verify_arms_of(*clean).head_walk(drafts, out_clean.data()), 2);

  auto faulty = make_runtime(ck, BackendKind::Cpu, 64, {.fault = Fault::RuntimeWalkAsBatched});
  faulty->target_forward(block);
  EXPECT_EQ(verify_arms_of(*faulty).head_walk(drafts, out_fault.data()), 2);  // same answer...
  EXPECT_EQ(out_fault[0], out_clean[0]);
  EXPECT_EQ(out_fault[1], out_clean[1]);
  const HeadWork w = faulty->head_work();  // ...but its own counters tell
  EXPECT_EQ(w.last_path, HeadPath::Batched);
  EXPECT_EQ(w.rows_projected, 6);
  EXPECT_EQ(w.walk_rows, 0);
}

TEST_P(CpuHeadWork, ResetEqualsAFreshRuntimeAndClearsTheCounters) {
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.block_size = 4;
  o.ignore_eos = true;
  o.draft = ck.mtp_layers() > 0 ? DraftKind::Mtp : DraftKind::None;
  ArmChoice walk;  // the walk arm at the engine step's head (bench/verify_arms.h)
  walk.arm = VerifyArm::Walk;
  auto fresh = make_runtime(ck, BackendKind::Cpu, 64);
  const auto want = generate_verify_arm(*fresh, ref.prompt, o, walk);
  auto rt = make_runtime(ck, BackendKind::Cpu, 64);
  GenerateOptions other = o;  // a different run first, to leave state behind
  other.block_size = 3;
  generate(*rt, ref.prompt, other);  // the product's batched head
  EXPECT_GT(rt->head_work().head_calls, 0);
  rt->reset();
  EXPECT_EQ(rt->target_length(), 0);
  // A checkpoint without MTP tensors (mlx conversions) has no head: no entries.
  auto mtp_entries = [](ModelRuntime& r) { return r.mtp() ? r.mtp()->mtp_work().entries : 0; };
  EXPECT_EQ(rt->mtp() ? rt->mtp()->mtp_length() : 0, 0);
  EXPECT_EQ(rt->head_work().head_calls, 0);
  EXPECT_EQ(rt->head_work().rows_projected, 0);
  EXPECT_EQ(mtp_entries(*rt), 0);
  const auto got = generate_verify_arm(*rt, ref.prompt, o, walk);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.stats.counters.accepted_at, want.stats.counters.accepted_at);
  EXPECT_EQ(got.stats.counters.walk_rows, want.stats.counters.walk_rows);
  EXPECT_EQ(rt->head_work().rows_projected, fresh->head_work().rows_projected);
  EXPECT_EQ(mtp_entries(*rt), mtp_entries(*fresh));
}

TEST_P(CpuHeadWork, MtpWorkIsCountedByTheMtpPath) {
  const auto ck = Qwen35Checkpoint::open(GetParam());
  if (ck.mtp_layers() == 0) GTEST_SKIP() << "no MTP head";
  const auto ref = test::load_reference(GetParam());
  auto rt = make_runtime(ck, BackendKind::Cpu, 64);
  rt->target_forward(ref.prompt);
  const int n = int(ref.prompt.size());
  std::vector<int32_t> next(ref.prompt.begin() + 1, ref.prompt.end());
  next.push_back(ref.greedy.at(0));
  mtp_of(*rt).mtp_forward(next, 0);
  std::vector<int32_t> drafts(5);
  mtp_of(*rt).mtp_draft(5, drafts.data());
  const MtpWork m = mtp_of(*rt).mtp_work();
  EXPECT_EQ(m.entries, n + 4);  // n forward rows + 4 chained steps
  EXPECT_EQ(m.chained_steps, 4);
  EXPECT_EQ(m.argmax_rows, 5);
  EXPECT_EQ(rt->head_work().head_calls, 0);  // MTP work is not verify work
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuHeadWork, ::testing::ValuesIn(test::fixture_dirs()), [](const auto& info) {
  std::string s = test::fixture_name(info.param);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CpuHeadWork);

}  // namespace
}  // namespace nextn
