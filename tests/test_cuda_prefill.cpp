// The CUDA runtime's decode-speed machinery (issue 12), on a synthetic q4
// checkpoint whose every matrix takes the streamed kernel (preset
// test-stream):
//  - the prefill GEMM path (forwards longer than kMaxRows, bf16 mode): greedy
//    == speculative for every verify arm after a long prompt; its last-row
//    logits (tensor-core attention, GDN recurrence in row parts) close to the
//    64-row graph path (RuntimeOptions::prefill_gemm false), also for a
//    second long forward;
//  - programmatic dependent launch changes no bit (PdlSuspend, and every
//    PdlPolicy, vs default);
//  - the profile mode (RuntimeOptions::profile) times the operations it ran,
//    as many as it ran, and changes no token.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/launch.cuh"
#include "backend/cuda/qwen35.h"
#include "bench/verify_arms.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "engine/generate.h"
#include "model/bench_interfaces.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

// One q4 test-stream checkpoint per process.
const std::string& stream_checkpoint() {
  static const std::string dir = test::make_stream_q4_checkpoint("nextn-prefill-test-stream-q4", 23);
  return dir;
}

std::unique_ptr<ModelRuntime> make_rt(const Qwen35Checkpoint& ck, int cap, const RuntimeOptions& options = {}) {
  return make_cuda_runtime(ck, cap, kMaxForwardRows, options);
}

std::vector<int32_t> long_prompt(int n, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = int32_t((int64_t(i) * 7919 + 13) % vocab);
  return p;
}

TEST(CudaPrefill, LongPromptSpeculativeEqualsGreedy) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(stream_checkpoint());
  // 700 tokens: one full 512-row prefill chunk, one partial, then the graphs.
  const auto prompt = long_prompt(700, ck.config().vocab_size);
  const RuntimeFactory factory = [&](int cap) { return make_rt(ck, cap); };
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.ignore_eos = true;
  const auto greedy = generate_fresh(factory, prompt, g).tokens;
  ASSERT_EQ(greedy.size(), 24u);
  for (int K : {2, 4, 8, 17}) {
    for (VerifyArm arm : {VerifyArm::Batched, VerifyArm::Walk, VerifyArm::Pad, VerifyArm::Fused}) {
      GenerateOptions o = g;
      o.block_size = K;
      o.draft = DraftKind::Oracle;
      o.oracle.accept_rate = 0.7;
      o.oracle.seed = uint64_t(K);
      EXPECT_EQ(generate_fresh_verify_arm(factory, prompt, o, arm).tokens, greedy)
          << "K=" << K << " arm " << verify_arm_name(arm);
      if (arm == VerifyArm::Batched) {  // and the product's head
        EXPECT_EQ(generate_fresh(factory, prompt, o).tokens, greedy) << "K=" << K << " product";
      }
    }
    GenerateOptions m = g;
    m.block_size = K;
    m.draft = DraftKind::Mtp;
    EXPECT_EQ(generate_fresh(factory, prompt, m).tokens, greedy) << "K=" << K << " mtp";
  }
}

TEST(CudaPrefill, CloseToTheGraphPath) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(stream_checkpoint());
  const int V = ck.config().vocab_size;
  const auto prompt = long_prompt(600, V);
  std::vector<std::vector<float>> logits;
  for (bool gemm : {true, false}) {
    auto rt = make_rt(ck, 640, {.prefill_gemm = gemm});
    rt->target_forward(prompt);
    logits.emplace_back(size_t(V));
    rt->head_logits(int(prompt.size()) - 1, logits.back().data());
  }
  double diff = 0, norm = 0;
  for (int i = 0; i < V; ++i) {
    ASSERT_TRUE(std::isfinite(logits[0][size_t(i)]));
    diff += std::pow(double(logits[0][size_t(i)]) - logits[1][size_t(i)], 2);
    norm += std::pow(double(logits[1][size_t(i)]), 2);
  }
  const double rel = std::sqrt(diff / norm);
  std::printf("[cuda prefill] last-row logits, GEMM vs 64-row graphs after 600 tokens: relative error %.2e\n", rel);
  EXPECT_GT(rel, 0.0) << "the two paths are expected to differ in the last bits (another summation order)";
  EXPECT_LT(rel, 0.02);
}

// Two long forwards: the second one's prefill chunk attends to the first
// one's keys (pos0 > 0) and starts from its GDN state.
TEST(CudaPrefill, SecondLongForwardCloseToTheGraphPath) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(stream_checkpoint());
  const int V = ck.config().vocab_size;
  const auto prompt = long_prompt(900, V);
  const auto first = std::span(prompt).first(600), second = std::span(prompt).subspan(600);
  std::vector<std::vector<float>> logits;
  for (bool gemm : {true, false}) {
    auto rt = make_rt(ck, 960, {.prefill_gemm = gemm});
    rt->target_forward(first);
    rt->target_forward(second);
    logits.emplace_back(size_t(V));
    rt->head_logits(int(second.size()) - 1, logits.back().data());
    for (float x : logits.back()) ASSERT_TRUE(std::isfinite(x)) << (gemm ? "gemm" : "chunked");
  }
  double diff = 0, norm = 0;
  for (int i = 0; i < V; ++i) {
    diff += std::pow(double(logits[0][size_t(i)]) - logits[1][size_t(i)], 2);
    norm += std::pow(double(logits[1][size_t(i)]), 2);
  }
  const double rel = std::sqrt(diff / norm);
  std::printf("[cuda prefill] last-row logits after 600 + 300 tokens, GEMM vs 64-row graphs: relative error %.2e\n",
              rel);
  EXPECT_LT(rel, 0.02);
}

TEST(CudaPdl, SameBitsWithoutPdl) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(stream_checkpoint());
  const int V = ck.config().vocab_size;
  const auto prompt = long_prompt(90, V);
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;
  auto run = [&](const RuntimeOptions& options) {
    auto rt = make_rt(ck, 200, options);
    GenerateOptions o;
    o.max_new_tokens = 20;
    o.ignore_eos = true;
    o.draft = DraftKind::Mtp;
    o.block_size = 4;
    tokens.push_back(generate(*rt, prompt, o).tokens);
    logits.emplace_back(size_t(V));
    rt->head_logits(0, logits.back().data());
  };
  run({});
  {
    const cuda::PdlSuspend no_pdl;  // every graph of this runtime captured without programmatic edges
    run({});
  }
  for (PdlPolicy p : {PdlPolicy::On, PdlPolicy::Off, PdlPolicy::MultiRowOff}) run({.pdl = p});
  for (size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[0], tokens[i]) << "run " << i;
    EXPECT_EQ(logits[0], logits[i]) << "run " << i;
  }
}

TEST(CudaProfile, TimesEveryOperationItRan) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(stream_checkpoint());
  const auto& c = ck.config();
  // A prompt one row wider than the one-launch GDN step: its forward runs the conv and the recurrence.
  const auto prompt = long_prompt(cuda::kGdnStepRows + 1, c.vocab_size);
  auto plain = make_rt(ck, 64);
  const auto want = greedy_generate(*plain, prompt, 6, true).tokens;
  EXPECT_TRUE(probe_of(*plain).op_timings().empty());
  auto rt = make_rt(ck, 64, {.profile = true});
  EXPECT_EQ(greedy_generate(*rt, prompt, 6, true).tokens, want);
  std::map<std::string, OpTiming> t;
  for (const auto& o : probe_of(*rt).op_timings()) t[o.op] = o;
  int gdn = 0, full = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) (c.full_attention[size_t(i)] ? full : gdn) += 1;
  // 1 prompt forward + 5 single-token forwards; each runs every layer once
  // (a GDN layer's single-token forward in one launch, gdn.step; the prompt's
  // in two, gdn.conv then gdn.rec).
  EXPECT_EQ(t["gdn.conv"].count, gdn);
  EXPECT_EQ(t["gdn.rec"].count, gdn);
  EXPECT_EQ(t["gdn.step"].count, 5 * gdn);
  EXPECT_EQ(t["attn.core"].count, 6 * full);
  EXPECT_EQ(t["mlp.down"].count, 6 * (gdn + full));
  EXPECT_EQ(t["embed"].count, 6);
  for (const auto& [op, o] : t) EXPECT_GT(o.ms, 0.0) << op;
  EXPECT_GT(probe_of(*rt).kernels_launched(), 6 * (gdn + full));
  probe_of(*rt).clear_op_timings();
  EXPECT_TRUE(probe_of(*rt).op_timings().empty());
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
