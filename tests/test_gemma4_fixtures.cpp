// nextn's CPU Gemma 4 runtime against transformers on every Gemma 4 fixture
// (tests/fixtures/gemma4, scripts/fixtures/make_gemma4_fixtures.py): greedy
// tokens identical (also on a run long enough to wrap the sliding-window
// rings), logits within 1e-4 of the largest reference logit, multi-row rows
// bit-identical to one-row decode, rollback exact, and speculative output
// identical to greedy for K = 2..16.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/gemma4.h"
#include "bench/verify_arms.h"
#include "cli_util.h"
#include "gemma4_fixture_util.h"
#include "io/gemma4_checkpoint.h"
#include "engine/generate.h"

namespace nextn {
namespace {

using test::Gemma4Reference;
using test::load_gemma4_reference;
using test::relative_row_error;

std::unique_ptr<ModelRuntime> runtime(const Gemma4Checkpoint& ck, int cap) {
  return make_cpu_gemma4_runtime(ck, cap, CpuRuntimeOptions{.threads = 2, .min_chunk_work = 1});
}

class Gemma4Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Fixture, TeacherForcedLogitsMatchTransformers) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  ASSERT_EQ(ref.vocab, ck.config().vocab_size);
  auto rt = runtime(ck, int(ref.sequence.size()) + 4);
  rt->target_forward(ref.sequence);
  std::vector<float> logits(size_t(ref.vocab));
  for (size_t p = 0; p < ref.sequence.size(); ++p) {
    rt->head_logits(int(p), logits.data());
    EXPECT_LE(relative_row_error(logits.data(), &ref.logits[p * ref.vocab], ref.vocab), 1e-4) << "position " << p;
  }
}

TEST_P(Gemma4Fixture, GreedyTokensMatchTransformers) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  auto rt = runtime(ck, int(ref.sequence.size()) + 4);
  EXPECT_EQ(test::decode_greedy(*rt, ref.prompt, int(ref.greedy.size())), ref.greedy);
}

TEST_P(Gemma4Fixture, LongGreedyRunWrapsTheSlidingRingsAndMatchesTransformers) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const int n = int(ref.long_greedy.size());
  ASSERT_GT(int(ref.prompt.size()) + n, ck.config().sliding_window + 65 + 8) << "the run must wrap the rings";
  auto rt = runtime(ck, int(ref.prompt.size()) + n + 1);
  // Decode all but the last long_rows tokens, then one forward over those:
  // its rows must give the reference logits (which chose those tokens).
  const int tail = int(ref.long_rows);
  std::vector<int32_t> got = test::decode_greedy(*rt, ref.prompt, n - tail);
  rt->target_forward(std::span<const int32_t>(&got.back(), 1));
  std::vector<float> logits(size_t(ref.vocab));
  for (int r = 0; r < tail; ++r) {
    if (r > 0) rt->target_forward(std::span<const int32_t>(&got.back(), 1));
    rt->head_logits(0, logits.data());
    EXPECT_LE(relative_row_error(logits.data(), &ref.long_logits[size_t(r) * ref.vocab], ref.vocab), 1e-4)
        << "row " << r;
    int32_t tok = 0;
    rt->head_argmax(0, 1, &tok);
    got.push_back(tok);
  }
  EXPECT_EQ(got, ref.long_greedy);
}

TEST_P(Gemma4Fixture, VerifyRowsEqualSingleStepDecodeBitForBit) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const int V = ck.config().vocab_size, K = 12;  // wider than the sliding windows
  const size_t n = ref.prompt.size();
  auto wide = runtime(ck, int(ref.sequence.size()) + 4);
  auto step = make_cpu_gemma4_runtime(ck, int(ref.sequence.size()) + 4, CpuRuntimeOptions{.threads = 1});
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

TEST_P(Gemma4Fixture, RollbackRestoresTheExactState) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const int V = ck.config().vocab_size;
  const size_t n = ref.prompt.size();
  auto a = runtime(ck, int(ref.sequence.size()) + 16);
  auto b = runtime(ck, int(ref.sequence.size()) + 16);
  a->target_forward(ref.prompt);
  b->target_forward(ref.prompt);
  // Junk longer than the sliding window: its keys must not leak after the rollback.
  std::vector<int32_t> junk = {ref.sequence[n], ref.sequence[n + 1], 7, 11, 13, 17, 19, 23, 29, 31, 37};
  a->target_forward(junk);
  a->target_rollback(5);
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

TEST_P(Gemma4Fixture, OracleSpeculativeEqualsGreedyForEveryBlockSize) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  // Long enough to wrap the sliding rings with rollbacks in between.
  const int n = int(ref.long_greedy.size());
  std::vector<int32_t> truth;
  {
    auto rt = runtime(ck, runtime_capacity(int(ref.prompt.size()), n, 1));
    truth = greedy_generate(*rt, ref.prompt, n, true).tokens;
  }
  ASSERT_EQ(truth, ref.long_greedy);
  for (int K = 2; K <= 16; ++K) {
    for (VerifyArm arm : {VerifyArm::Batched, VerifyArm::Walk}) {
      GenerateOptions o;
      o.max_new_tokens = n;
      o.block_size = K;
      o.ignore_eos = true;
      o.draft = DraftKind::Oracle;
      o.oracle.pattern = K % 2 ? "1101001110" : "1111111110";
      auto rt = runtime(ck, runtime_capacity(int(ref.prompt.size()), n, K));
      ArmChoice choice;  // the arm at the engine step's head (bench/verify_arms.h)
      choice.arm = arm;
      const GenerateResult r = generate_verify_arm(*rt, ref.prompt, o, choice, &truth);
      ASSERT_EQ(r.tokens, truth) << "K=" << K << " arm " << verify_arm_name(arm);
      EXPECT_GT(r.stats.counters.accepted, 0);
      EXPECT_EQ(r.stats.counters.verify_chosen, verify_arm_name(arm));
      EXPECT_EQ(counter_violations(r.stats.counters), std::vector<std::string>{})
          << "K=" << K << " arm " << verify_arm_name(arm);
    }
  }
}

TEST_P(Gemma4Fixture, ConditionalGenerationLayoutGivesTheSameTokens) {
  // The released checkpoints are `gemma4` (a text_config inside, tensors under
  // model.language_model.*, a vision tower beside them): the same weights in
  // that layout must decode the same tokens.
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const test::TempDir tmp;
  const TensorStore src = TensorStore::open(ref.target());
  std::vector<TensorToWrite> out;
  const std::vector<std::string> names = src.names();
  std::vector<std::string> renamed;
  renamed.reserve(names.size() + 1);
  for (const std::string& n : names)
    renamed.push_back("model.language_model." + n.substr(std::string("model.").size()));
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorView& t = src.get(names[i]);
    out.push_back({renamed[i], t.dtype, t.shape, t.data, t.nbytes});
  }
  const float vision = 1.0f;  // a stray vision tensor is skipped
  out.push_back({"model.vision_tower.dummy.weight", DType::F32, {1}, &vision, sizeof vision});
  write_safetensors((tmp.path / "model.safetensors").string(), out);
  std::ifstream cf(ref.target() + "/config.json");
  nlohmann::json text = nlohmann::json::parse(cf);
  const nlohmann::json config = {
      {"model_type", "gemma4"}, {"text_config", text}, {"vision_config", {{"hidden_size", 8}}}};
  std::ofstream(tmp.path / "config.json") << config.dump();
  const auto ck = Gemma4Checkpoint::open(tmp.path.string());
  EXPECT_EQ(ck.config().model_type, "gemma4");
  auto rt = runtime(ck, int(ref.sequence.size()) + 4);
  EXPECT_EQ(test::decode_greedy(*rt, ref.prompt, int(ref.greedy.size())), ref.greedy);
}

INSTANTIATE_TEST_SUITE_P(Transformers, Gemma4Fixture, ::testing::ValuesIn(test::gemma4_fixture_dirs()),
                         [](const auto& info) { return test::gemma4_case_name(info.param); });

TEST(Gemma4Fixtures, ArePresent) { EXPECT_GE(test::gemma4_fixture_dirs().size(), 2u); }

}  // namespace
}  // namespace nextn
