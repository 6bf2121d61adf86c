// The oracle: nextn's CPU backend against transformers on every fixture and on the shipped
// trained model (models/nextn-code-15m).
// Greedy tokens identical; per position max|dlogit| / max|ref logit| <= 1e-4;
// teacher-forced MTP drafts identical at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/runtime.h"

namespace nextn {
namespace {

using test::fixture_dirs;
using test::load_reference;

double rel_row_error(const float* got, const float* ref, int64_t n) {
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, double(std::fabs(got[i] - ref[i])));
    max_ref = std::max(max_ref, double(std::fabs(ref[i])));
  }
  return max_diff / max_ref;
}

class Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Fixture, TeacherForcedLogitsMatchTransformers) {
  const auto ref = load_reference(GetParam());
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  ASSERT_EQ(ref.vocab, ckpt.config().vocab_size);
  auto rt = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 4);
  rt->target_forward(ref.sequence);
  std::vector<float> logits(static_cast<size_t>(ref.vocab));
  for (size_t p = 0; p < ref.sequence.size(); ++p) {
    rt->head_logits(int(p), logits.data());
    EXPECT_LE(rel_row_error(logits.data(), &ref.logits[p * ref.vocab], ref.vocab), 1e-4) << "position " << p;
  }
}

TEST_P(Fixture, GreedyTokensMatchTransformers) {
  const auto ref = load_reference(GetParam());
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  auto rt = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 4);
  const int V = ckpt.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  rt->target_forward(ref.prompt);
  int32_t tok = 0;
  rt->head_argmax(int(ref.prompt.size()) - 1, 1, &tok);
  std::vector<int32_t> got{tok};
  while (got.size() < ref.greedy.size()) {
    rt->target_forward(std::span<const int32_t>(&got.back(), 1));
    // Incremental decode logits match the reference too.
    rt->head_logits(0, logits.data());
    const size_t p = ref.prompt.size() + got.size() - 1;
    EXPECT_LE(rel_row_error(logits.data(), &ref.logits[p * V], V), 1e-4) << "decode position " << p;
    rt->head_argmax(0, 1, &tok);
    got.push_back(tok);
  }
  EXPECT_EQ(got, ref.greedy);
}

TEST_P(Fixture, TeacherForcedDraftsMatchTransformers) {
  const auto ref = load_reference(GetParam());
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  if (ckpt.mtp_layers() == 0) GTEST_SKIP() << "no MTP head";
  auto rt = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 4);
  rt->target_forward(ref.sequence);
  const std::vector<int32_t> next(ref.sequence.begin() + 1, ref.sequence.end());
  mtp_of(*rt).mtp_forward(next, 0);
  std::vector<int32_t> drafts(next.size());
  mtp_of(*rt).mtp_argmax(int(drafts.size()), drafts.data());
  EXPECT_EQ(drafts, ref.drafts);
}

TEST_P(Fixture, VerifyRowsEqualSingleStepDecodeBitForBit) {
  // Row j of a K-wide forward equals one-token decode of the same prefix.
  const auto ref = load_reference(GetParam());
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const int V = ckpt.config().vocab_size;
  const int K = 6;
  const size_t n = ref.prompt.size();
  auto wide = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 4);
  auto step = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 4);
  wide->target_forward(ref.prompt);
  step->target_forward(ref.prompt);
  wide->target_forward(std::span<const int32_t>(ref.sequence.data() + n, K));
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
  for (int j = 0; j < K; ++j) {
    step->target_forward(std::span<const int32_t>(ref.sequence.data() + n + j, 1));
    wide->head_logits(j, a.data());
    step->head_logits(0, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "row " << j;
  }
}

TEST_P(Fixture, RollbackRestoresTheExactState) {
  // Forward K tokens, keep 2, continue: identical to never having seen the rest.
  const auto ref = load_reference(GetParam());
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const int V = ckpt.config().vocab_size;
  const size_t n = ref.prompt.size();
  auto a = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 8);
  auto b = make_runtime(ckpt, BackendKind::Cpu, int(ref.sequence.size()) + 8);
  a->target_forward(ref.prompt);
  b->target_forward(ref.prompt);
  std::vector<int32_t> junk = {ref.sequence[n], ref.sequence[n + 1], 7, 11, 13};
  a->target_forward(junk);
  a->target_rollback(4);  // two rollbacks of one forward: the second keeps a prefix of the first
  a->target_rollback(2);
  b->target_forward(std::span<const int32_t>(ref.sequence.data() + n, 2));
  ASSERT_EQ(a->target_length(), b->target_length());
  a->target_forward(std::span<const int32_t>(ref.sequence.data() + n + 2, 3));
  b->target_forward(std::span<const int32_t>(ref.sequence.data() + n + 2, 3));
  std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
  for (int j = 0; j < 3; ++j) {
    a->head_logits(j, la.data());
    b->head_logits(j, lb.data());
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "row " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, Fixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const auto& info) {
                           std::string s = test::fixture_name(info.param);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fixture);

// The shipped trained model carries a transformers reference too (scripts/train/make_model_reference.py).
INSTANTIATE_TEST_SUITE_P(ShippedModel, Fixture,
                         ::testing::Values(std::string(NEXTN_SOURCE_DIR) + "/models/nextn-code-15m"),
                         [](const auto& info) {
                           std::string s = test::fixture_name(info.param);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(Fixtures, ArePresent) { EXPECT_GE(fixture_dirs().size(), 3u) << "tests/fixtures should hold the transformers fixtures"; }

}  // namespace
}  // namespace nextn
