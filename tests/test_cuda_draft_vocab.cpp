// The draft vocabulary on the CUDA backend (device suite, scripts/device/run.sh;
// the CPU side: tests/test_draft_vocab.cpp). The MTP drafts read a view of
// the LM head with rows = N over the same memory, so:
//  - kernels: a view's logits are the full matrix's first N logits bit for
//    bit and its fused argmax is their argmax, for every storage the head
//    takes (bf16, the streamed q4 tiles, the generic q4 kernel, fp32 mode)
//    and N on and off the 128-row tile boundaries;
//  - runtime: mtp_logits is the full row's prefix and -inf past it; the
//    device draft chain (mtp_draft) equals the host loop of mtp_step +
//    mtp_argmax and stays below N; in a generation every draft is below N
//    where the whole vocabulary drafts ids >= N;
//  - speculative output with a subset equals plain greedy for K = 2..8 on
//    the fixtures, the shipped model and a streamed-q4 synthetic checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "fixture_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "draft_vocab_util.h"
#include "engine/generate.h"
#include "test_cuda_util.h"
#endif

namespace nextn {
namespace {

#ifdef NEXTN_HAVE_CUDA

using cuda::Act;
using cuda::WKind;
using test::DevBuf;
using test::TestMatrix;

// Logits [T][m.rows] of x ([T][m.cols] fp32, sent as bf16 in the bf16 mode).
std::vector<float> logits_of(const cuda::DevMatrix& m, const DevBuf& dx, int T, Act act) {
  DevBuf dy(size_t(T) * m.rows * 4);
  cuda::matmul(m, dx.p, act, T, m.cols, dy.as<float>(), m.rows, false, nullptr, nullptr);
  return dy.get<float>(size_t(T) * m.rows);
}

TEST(CudaDraftVocab, AHeadViewOfNRowsIsTheFirstNRows) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int V = 5003, H = 256, T = 3;
  struct Storage {
    WKind kind;
    Act act;
    bool sb_exact;  // q4 in the bf16 mode: true takes the streamed tiles, false the generic kernel
  };
  for (const Storage st : {Storage{WKind::BF16, Act::BF16, true}, Storage{WKind::Q4, Act::BF16, true},
                           Storage{WKind::Q4, Act::BF16, false}, Storage{WKind::Q4, Act::F32, true},
                           Storage{WKind::BF16, Act::F32, true}}) {
    TestMatrix tm(rng, st.kind, V, H, 64);
    cuda::DevMatrix full = tm.device(st.act == Act::F32, st.sb_exact);
    full.splits = 1;  // as the LM head
    ASSERT_EQ(st.kind == WKind::Q4 && st.sb_exact, full.packed != nullptr);  // the streamed layout exists
    const auto x = test::randn(rng, size_t(T) * H, 1.0f, true);
    DevBuf dx(x.size() * 4);
    if (st.act == Act::BF16)
      dx.put(test::to_bf16_bits(x));
    else
      dx.put(x);
    const auto want = logits_of(full, dx, T, st.act);
    DevBuf pairs(static_cast<size_t>(cuda::argmax_pairs_bytes(full))), out(size_t(T) * 4);
    for (int N : {1, 100, 127, 128, 129, 1000, 4999, V}) {
      SCOPED_TRACE(::testing::Message() << "kind " << int(st.kind) << " act " << int(st.act) << " sb_exact "
                                        << st.sb_exact << " N=" << N);
      cuda::DevMatrix view = full;
      view.rows = N;
      const auto got = logits_of(view, dx, T, st.act);
      for (int t = 0; t < T; ++t)
        ASSERT_TRUE(std::equal(got.begin() + size_t(t) * N, got.begin() + size_t(t + 1) * N,
                               want.begin() + size_t(t) * V))
            << "row " << t;
      out.poison();
      cuda::matmul_argmax(view, dx.p, st.act, T, H, pairs.p, out.as<int32_t>(), nullptr, nullptr);
      const auto am = out.get<int32_t>(size_t(T));
      for (int t = 0; t < T; ++t) {
        const float* row = &want[size_t(t) * V];
        EXPECT_EQ(am[size_t(t)], int32_t(std::max_element(row, row + N) - row)) << "row " << t;
      }
    }
  }
}

// A Qwen3.5 checkpoint's runtime in the default (bf16) mode.
std::unique_ptr<ModelRuntime> cuda_rt(const Qwen35Checkpoint& ck, int cap) { return make_cuda_runtime(ck, cap); }

struct Model {
  std::string dir;
  std::vector<int32_t> prompt;
};

// The fixtures with an MTP head, the shipped model, and a streamed-q4
// synthetic checkpoint (written under the test temp dir as `tmp_name`).
std::vector<Model> models(const std::string& tmp_name) {
  std::vector<Model> out;
  for (const auto& d : test::dense_fixture_dirs()) {
    const auto ck = Qwen35Checkpoint::open(d);
    if (ck.mtp_layers() == 0) continue;
    const auto ref = test::load_reference(d);
    std::vector<int32_t> p(ref.sequence.begin(), ref.sequence.begin() + std::min<long>(8, long(ref.sequence.size())));
    out.push_back({d, p});
  }
  out.push_back({test::kShippedModel, test::kShippedCodePrompt});
  out.push_back({test::make_stream_q4_checkpoint(tmp_name, 11), {3, 17, 256, 9, 1000, 44, 512, 7, 128, 64, 33, 900}});
  return out;
}

TEST(CudaDraftVocab, SpeculativeWithASubsetEqualsPlainGreedy) {
  NEXTN_REQUIRE_GPU();
  const std::string tmp_name = "nextn-test-draft-vocab-q4";
  constexpr int kTokens = 32;
  for (const auto& m : models(tmp_name)) {
    const auto ck = Qwen35Checkpoint::open(m.dir);
    const int V = ck.config().vocab_size;
    auto rt = cuda_rt(ck, runtime_capacity(int(m.prompt.size()), kTokens, 8));
    const auto greedy = greedy_generate(*rt, m.prompt, kTokens, /*ignore_eos=*/true).tokens;
    for (int N : {V / 2, 200}) {
      for (int K = 2; K <= 8; ++K) {
        rt->reset();
        const auto r = generate(*rt, m.prompt, test::mtp_options(kTokens, K, N));
        EXPECT_EQ(r.tokens, greedy) << test::fixture_name(m.dir) << " N=" << N << " K=" << K;
        EXPECT_EQ(r.stats.draft_vocab, N);
      }
    }
  }
  std::filesystem::remove_all(testing::TempDir() + tmp_name);
}

TEST(CudaDraftVocab, LogitsArgmaxAndTheDeviceChainHonourTheSubset) {
  NEXTN_REQUIRE_GPU();
  const std::string tmp_name = "nextn-test-draft-vocab-chain";
  for (const auto& m : models(tmp_name)) {
    const auto ck = Qwen35Checkpoint::open(m.dir);
    const int V = ck.config().vocab_size;
    auto rt = cuda_rt(ck, int(m.prompt.size()) + 16);
    rt->target_forward(m.prompt);
    const std::vector<int32_t> next(m.prompt.begin() + 1, m.prompt.end());
    auto reseed = [&] {  // the MTP state after the prompt, whatever ran since
      mtp_of(*rt).mtp_rollback(0);
      mtp_of(*rt).mtp_forward(next, 0);
    };
    reseed();
    std::vector<float> full(static_cast<size_t>(V)), sub(static_cast<size_t>(V));
    mtp_of(*rt).mtp_logits(full.data());
    constexpr int kChain = 6;
    for (int N : {1, 129, V / 8, V - 1}) {
      SCOPED_TRACE(::testing::Message() << test::fixture_name(m.dir) << " N=" << N);
      mtp_of(*rt).set_draft_vocab(N);
      reseed();
      mtp_of(*rt).mtp_logits(sub.data());
      ASSERT_TRUE(std::equal(sub.begin(), sub.begin() + N, full.begin())) << "the prefix differs from the full row";
      for (int v = N; v < V; ++v) ASSERT_EQ(sub[size_t(v)], -INFINITY) << "id " << v;
      int32_t am = -1;
      mtp_of(*rt).mtp_argmax(1, &am);
      EXPECT_EQ(am, int32_t(std::max_element(full.begin(), full.begin() + N) - full.begin()));
      std::vector<int32_t> device(kChain), host(kChain);
      mtp_of(*rt).mtp_draft(kChain, device.data());
      reseed();
      mtp_of(*rt).MtpHead::mtp_draft(kChain, host.data());  // the base class's host loop
      EXPECT_EQ(device, host);
      for (int32_t t : device) EXPECT_LT(t, N);
    }
    mtp_of(*rt).set_draft_vocab(0);
    reseed();
    mtp_of(*rt).mtp_logits(sub.data());
    EXPECT_EQ(sub, full);
  }
  std::filesystem::remove_all(testing::TempDir() + tmp_name);
}

using test::RecordingHead;

TEST(CudaDraftVocab, DraftsStayInsideTheSubsetWhereTheWholeVocabularyLeavesIt) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(test::kShippedModel);
  const std::vector<int32_t>& prompt = test::kShippedCodePrompt;
  auto rt = cuda_rt(ck, runtime_capacity(int(prompt.size()), 32, 4));
  constexpr int N = 1024;
  for (int n : {0, N}) {
    rt->reset();
    RecordingHead d;  // the drafts the engine step verified (draft mtp sets the runtime's draft vocabulary to n)
    const auto r = generate(*rt, prompt, test::mtp_options(32, 4, n), nullptr, &d);
    EXPECT_EQ(mtp_of(*rt).draft_vocab(), n == 0 ? rt->vocab() : n);
    EXPECT_EQ(int64_t(d.proposed.size()), r.stats.counters.drafted);
    ASSERT_FALSE(d.proposed.empty());
    const bool outside = std::any_of(d.proposed.begin(), d.proposed.end(), [](int32_t t) { return t >= N; });
    if (n == 0)
      ASSERT_TRUE(outside) << "no full-vocabulary draft at or above " << N << ": the check below would be empty";
    else
      EXPECT_FALSE(outside);
  }
}

#endif  // NEXTN_HAVE_CUDA

}  // namespace
}  // namespace nextn
