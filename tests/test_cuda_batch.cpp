// The CUDA sequence group (backend/cuda/qwen35_group.cpp), as
// tests/test_batch_runtime.cpp checks the CPU one: on every transformers
// fixture (fp32 and bf16 activations) and on two synthetic checkpoints whose
// matrices take the streamed q4 kernel and the split-K bf16 kernel, sequences
// of different prompts whose target forwards run together (1-row decode
// steps beside verify blocks and prefills, a prompt longer than one forward,
// more rows than one forward holds, verify blocks rolled back, sequences
// joining late) give the same logits and argmax bits as each sequence run
// alone; an Error in one sequence changes none; and generate() with and
// without MTP drafts on threads whose forwards a ForwardScheduler shares
// gives each its solo tokens and counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fixture_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/device_handles.h"
#include "backend/cuda/qwen35.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "model/batch_runtime.h"
#include "model/forward_scheduler.h"
#include "speculative/generate.h"
#include "test_cuda_util.h"
#endif

namespace nextn {
namespace {

#ifdef NEXTN_HAVE_CUDA

// NEXTN_CUDA_ACT is read when the weights are loaded.
struct ActEnv {
  explicit ActEnv(bool fp32) { setenv("NEXTN_CUDA_ACT", fp32 ? "fp32" : "bf16", 1); }
  ~ActEnv() { unsetenv("NEXTN_CUDA_ACT"); }
};

std::unique_ptr<SequenceGroup> make_group(const Qwen35Checkpoint& ck, bool fp32) {
  ActEnv env(fp32);
  return make_sequence_group(ck, BackendKind::Cuda);
}

std::unique_ptr<ModelRuntime> make_alone(const Qwen35Checkpoint& ck, int cap, bool fp32) {
  ActEnv env(fp32);
  return make_cuda_runtime(ck, cap);
}

// One step of a sequence's script: a target forward, then optionally a
// rollback to `keep` of its rows (0: none).
struct Step {
  std::vector<int32_t> tokens;
  int keep = 0;
};

// Scripts of different lengths from a prompt: the first steps of some add
// up to more than kMaxRows rows (two group forwards), one is a prompt longer
// than kMaxRows (its own forward inside forward_together), the later steps
// mix 1-row decode steps with verify blocks, some rolled back.
std::vector<std::vector<Step>> scripts(const std::vector<int32_t>& p) {
  const auto at = [&](size_t i) { return p[i % p.size()]; };
  const auto repeat = [&](size_t n, size_t from) {
    std::vector<int32_t> v;
    for (size_t i = 0; i < n; ++i) v.push_back(at(from + i));
    return v;
  };
  std::vector<int32_t> reversed(p.rbegin(), p.rend());
  return {
      {{p}, {{at(1)}}, {{at(2), at(3), at(0)}, 2}, {{at(3)}}, {{at(1), at(2)}, 1}, {{at(0)}}},
      {{reversed}, {{at(0), at(3), at(1), at(2)}, 3}, {{at(2)}}, {{at(1)}}, {{at(3), at(0), at(2)}, 1}},
      {{{at(2), at(0)}}, {{at(1)}}, {{at(0), at(1)}}, {{at(3)}}, {{at(2), at(2), at(2)}, 2}, {{at(1)}}},
      {{repeat(70, 1)}, {{at(1)}}, {{at(2), at(0), at(1), at(3), at(2)}, 2}, {{at(0)}}, {{at(3), at(1)}, 1}},
      {{repeat(40, 2)}, {{at(0), at(1)}, 1}, {{at(3)}}, {{at(2)}}, {{at(0), at(2), at(1), at(3)}, 4}},
      {{{at(3)}}, {{at(2)}}, {{at(1), at(1), at(1), at(1)}, 4}, {{at(0)}}, {{at(2), at(3)}, 1}, {{at(1)}}},
      {{repeat(33, 3)}, {{at(1), at(0), at(2)}, 3}, {{at(0)}}, {{at(1)}}},
  };
}

// The logits of every row of a forward as raw bits, then the argmax of its rows.
void keep_rows(ModelRuntime& rt, int rows, std::vector<float>& logits, std::vector<int32_t>& argmax) {
  const int V = rt.vocab();
  for (int j = 0; j < rows; ++j) {
    logits.resize(logits.size() + size_t(V));
    rt.head_logits(j, &logits[logits.size() - size_t(V)]);
  }
  for (int first = 0; first < rows; first += 64) {
    const int n = std::min(64, rows - first);
    argmax.resize(argmax.size() + size_t(n));
    rt.head_argmax(first, n, n, &argmax[argmax.size() - size_t(n)]);
  }
}

struct Trace {
  std::vector<float> logits;
  std::vector<int32_t> argmax, lengths;
};

// Every sequence's script alone, then all of them through one group with
// the given first steps delayed; the traces must be equal bit for bit. The
// number of sequences grows from 1 to all of them.
void check_together_equals_alone(const Qwen35Checkpoint& ck, const std::vector<int32_t>& prompt, bool fp32) {
  const auto all = scripts(prompt);
  const int cap = 160;
  std::vector<Trace> alone(all.size());
  for (size_t s = 0; s < all.size(); ++s) {
    auto rt = make_alone(ck, cap, fp32);
    for (const Step& st : all[s]) {
      rt->target_forward(st.tokens);
      keep_rows(*rt, int(st.tokens.size()), alone[s].logits, alone[s].argmax);
      if (st.keep) rt->target_rollback(st.keep);
      alone[s].lengths.push_back(rt->target_length());
    }
  }
  auto group = make_group(ck, fp32);
  ASSERT_TRUE(group->shares_forwards());
  ASSERT_GE(group->max_sequences(), int(all.size()));
  const std::vector<int> delay = {0, 0, 2, 0, 1, 3, 1};
  for (size_t n : {size_t(1), size_t(2), size_t(4), all.size()}) {
    SCOPED_TRACE(std::to_string(n) + " sequences, " + (fp32 ? "fp32" : "bf16"));
    std::vector<std::unique_ptr<ModelRuntime>> seqs;
    for (size_t s = 0; s < n; ++s) seqs.push_back(group->add_sequence(cap));
    std::vector<Trace> together(n);
    int max_shared = 0;
    for (int g = 0;; ++g) {
      std::vector<ModelRuntime*> rts;
      std::vector<std::span<const int32_t>> tokens;
      std::vector<size_t> who;
      for (size_t s = 0; s < n; ++s) {
        const int k = g - delay[s];
        if (k < 0 || k >= int(all[s].size())) continue;
        rts.push_back(seqs[s].get());
        tokens.push_back(all[s][size_t(k)].tokens);
        who.push_back(s);
      }
      if (rts.empty()) break;
      max_shared = std::max(max_shared, int(rts.size()));
      group->forward_together(rts, tokens);
      for (size_t i = 0; i < who.size(); ++i) {
        const Step& st = all[who[i]][size_t(g - delay[who[i]])];
        Trace& t = together[who[i]];
        keep_rows(*rts[i], int(st.tokens.size()), t.logits, t.argmax);
        if (st.keep) rts[i]->target_rollback(st.keep);
        t.lengths.push_back(rts[i]->target_length());
      }
    }
    EXPECT_EQ(max_shared, int(n));  // at the fourth forward every sequence is in
    for (size_t s = 0; s < n; ++s) {
      ASSERT_EQ(together[s].logits.size(), alone[s].logits.size()) << "sequence " << s;
      EXPECT_EQ(std::memcmp(together[s].logits.data(), alone[s].logits.data(), alone[s].logits.size() * sizeof(float)),
                0)
          << "sequence " << s;
      EXPECT_EQ(together[s].argmax, alone[s].argmax) << "sequence " << s;
      EXPECT_EQ(together[s].lengths, alone[s].lengths) << "sequence " << s;
    }
  }
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
  for (bool fp32 : {true, false}) check_together_equals_alone(ck, ref.prompt, fp32);
}

// Refused calls (a bad token id, a negative one, capacity, a sequence listed
// twice, one of another group) change no sequence; then a good call gives
// each its solo bits.
void check_errors_change_nothing(const Qwen35Checkpoint& ck, const std::vector<int32_t>& prompt) {
  auto group = make_group(ck, false);
  auto a = group->add_sequence(16), b = group->add_sequence(16);
  const std::vector<int32_t> good = {prompt[0], prompt[1]};
  const std::vector<int32_t> other = {prompt[2], prompt[1], prompt[0]};
  const std::vector<int32_t> bad = {prompt[0], int32_t(ck.config().vocab_size)};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> too_long(17, prompt[0]);
  ModelRuntime* both[] = {a.get(), b.get()};
  for (const auto* wrong : {&bad, &negative, &too_long}) {
    const std::span<const int32_t> tokens[] = {good, *wrong};
    EXPECT_THROW(group->forward_together(both, tokens), Error);
    EXPECT_EQ(a->target_length(), 0);
    EXPECT_EQ(b->target_length(), 0);
  }
  const std::span<const int32_t> twice[] = {good, good};
  ModelRuntime* same[] = {a.get(), a.get()};
  EXPECT_THROW(group->forward_together(same, twice), Error);
  EXPECT_EQ(a->target_length(), 0);
  auto stranger = make_alone(ck, 16, false);
  ModelRuntime* mixed[] = {a.get(), stranger.get()};
  EXPECT_THROW(group->forward_together(mixed, twice), Error);
  EXPECT_EQ(a->target_length(), 0);

  // After the refusals the sequences forward as fresh ones.
  const std::span<const int32_t> fine[] = {good, other};
  group->forward_together(both, fine);
  for (size_t i = 0; i < 2; ++i) {
    auto solo = make_alone(ck, 16, false);
    solo->target_forward(fine[i]);
    Trace want, got;
    keep_rows(*solo, int(fine[i].size()), want.logits, want.argmax);
    keep_rows(*both[i], int(fine[i].size()), got.logits, got.argmax);
    EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0) << i;
    EXPECT_EQ(got.argmax, want.argmax) << i;
  }
}

TEST_P(CudaBatch, AnErrorInOneSequenceChangesNone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const int64_t base = cuda::live_count();
  check_errors_change_nothing(ck, ref.prompt);
  EXPECT_EQ(cuda::live_count(), base) << "a destroyed group or sequence left objects behind";
}

// generate() on threads of their own, their forwards shared by a
// ForwardScheduler over the CUDA group, against generate() alone.
TEST_P(CudaBatch, ScheduledGenerationsEqualSoloRuns) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  std::vector<std::vector<int32_t>> prompts;
  for (size_t len : {ref.prompt.size(), size_t(1), size_t(3), ref.prompt.size() / 2 + 1, size_t(2)})
    prompts.emplace_back(ref.prompt.begin(), ref.prompt.begin() + std::min(len, ref.prompt.size()));
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ck.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (bool fp32 : {false, true})
    for (DraftKind draft : drafts)
      for (int K : {4, 8}) {
        const std::string what_run =
            std::string(draft_kind_name(draft)) + (fp32 ? " fp32" : " bf16") + " K=" + std::to_string(K);
        GenerateOptions o;
        o.draft = draft;
        o.ignore_eos = true;
        o.block_size = K;
        const int cap = runtime_capacity(int(ref.prompt.size()), 24, kMaxBlockSize);
        std::vector<GenerateResult> alone;
        for (size_t i = 0; i < prompts.size(); ++i) {
          o.max_new_tokens = 12 + 3 * int(i);  // different lengths: sequences leave at different steps
          auto rt = make_alone(ck, cap, fp32);
          alone.push_back(generate(*rt, prompts[i], o));
        }
        auto group = make_group(ck, fp32);
        ForwardScheduler scheduler(*group);
        std::vector<std::unique_ptr<ModelRuntime>> seqs;
        std::vector<GenerateResult> together(prompts.size());
        std::vector<std::thread> threads;
        for (size_t i = 0; i < prompts.size(); ++i) {
          seqs.push_back(group->add_sequence(cap));
          scheduler.reserve();  // all share their prefill forward
        }
        for (size_t i = 0; i < prompts.size(); ++i)
          threads.emplace_back([&, i, o]() mutable {
            o.max_new_tokens = 12 + 3 * int(i);
            ScheduledSequence rt(scheduler, *seqs[i], /*reserved=*/true);
            together[i] = generate(rt, prompts[i], o);
          });
        for (auto& t : threads) t.join();
        int64_t forwards_alone = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
          const std::string what = what_run + " prompt " + std::to_string(i);
          EXPECT_EQ(together[i].tokens, alone[i].tokens) << what;
          const VerifyCounters &x = together[i].stats.counters, &y = alone[i].stats.counters;
          EXPECT_EQ(x.rounds, y.rounds) << what;
          EXPECT_EQ(x.accepted, y.accepted) << what;
          EXPECT_EQ(x.rows_projected, y.rows_projected) << what;
          EXPECT_EQ(together[i].stats.mtp_work.entries, alone[i].stats.mtp_work.entries) << what;
          forwards_alone += 1 + y.rounds;
        }
        const ForwardScheduler::Totals t = scheduler.totals();
        EXPECT_EQ(t.sequence_forwards, forwards_alone) << what_run;
        EXPECT_LT(t.forwards, forwards_alone) << what_run;  // the prefills at least were gathered as one
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
  const auto ck = Qwen35Checkpoint::open(dir);
  check_together_equals_alone(ck, {3, 17, 256, 9, 1000, 44, 512, 7, 128, 64, 33, 900}, false);
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
