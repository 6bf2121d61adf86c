// Shared forwards (model/batch_runtime.h, model/forward_scheduler.h): on
// every transformers fixture, sequences of different prompts and lengths
// whose target forwards run together (prefills beside decode rows, verify
// blocks rolled back, a sequence joining late) give the same logits bits as
// each sequence run alone; generate() with and without MTP drafts on
// threads that share their forwards gives each its solo tokens and counters,
// and so does the serial group (forwards one after another) that backends
// without multi-sequence support get.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <thread>

#include "backend/cpu/qwen35.h"
#include "core/error.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "model/forward_scheduler.h"
#include "speculative/generate.h"

namespace nextn {
namespace {

using test::fixture_dirs;
using test::load_reference;

// One step of a sequence's script: a target forward, then optionally a
// rollback to `keep` of its rows (0: none).
struct Step {
  std::vector<int32_t> tokens;
  int keep = 0;
};

// Scripts of different lengths from the fixture's prompt tokens.
std::vector<std::vector<Step>> scripts(const std::vector<int32_t>& p) {
  const auto at = [&](size_t i) { return p[i % p.size()]; };
  std::vector<int32_t> reversed(p.rbegin(), p.rend());
  return {
      {{p}, {{at(1)}}, {{at(2), at(3), at(0)}, 2}, {{at(3)}}, {{at(1), at(2)}, 1}, {{at(0)}}},
      {{reversed}, {{at(0), at(3), at(1), at(2)}, 3}, {{at(2)}}, {{at(1)}}, {{at(3), at(0), at(2)}, 1}},
      {{{at(2), at(0)}}, {{at(1)}}, {{at(0), at(1)}}, {{at(3)}}, {{at(2), at(2), at(2)}, 2}, {{at(1)}}},
  };
}

// The logits of every row of every forward, in order, as raw bits.
using Rows = std::vector<float>;
void keep_logits(ModelRuntime& rt, int rows, Rows& out) {
  const int V = rt.vocab();
  for (int j = 0; j < rows; ++j) {
    out.resize(out.size() + size_t(V));
    rt.head_logits(j, &out[out.size() - size_t(V)]);
  }
}

class BatchRuntime : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchRuntime, ForwardsTogetherEqualEachAlone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = load_reference(GetParam());
  const CpuRuntimeOptions opt{.threads = 3, .min_chunk_work = 1};
  const auto plans = scripts(ref.prompt);
  const int cap = int(ref.prompt.size()) + 32;

  std::vector<Rows> alone(plans.size());
  for (size_t s = 0; s < plans.size(); ++s) {
    auto rt = make_cpu_runtime(ckpt, cap, opt);
    for (const Step& st : plans[s]) {
      rt->target_forward(st.tokens);
      keep_logits(*rt, int(st.tokens.size()), alone[s]);
      if (st.keep) rt->target_rollback(st.keep);
    }
  }

  // Together: sequence 2 joins two steps late, so its prefill shares a
  // forward with the others' decode and verify rows.
  auto group = make_cpu_sequence_group(ckpt, opt);
  EXPECT_TRUE(group->shares_forwards());
  std::vector<std::unique_ptr<ModelRuntime>> seqs;
  for (size_t s = 0; s < plans.size(); ++s) seqs.push_back(group->add_sequence(cap));
  const std::vector<int> delay = {0, 0, 2};
  std::vector<Rows> together(plans.size());
  int max_shared = 0;
  for (int g = 0;; ++g) {
    std::vector<ModelRuntime*> rts;
    std::vector<std::span<const int32_t>> tokens;
    std::vector<size_t> who;
    for (size_t s = 0; s < plans.size(); ++s) {
      const int k = g - delay[s];
      if (k < 0 || k >= int(plans[s].size())) continue;
      rts.push_back(seqs[s].get());
      tokens.push_back(plans[s][size_t(k)].tokens);
      who.push_back(s);
    }
    if (rts.empty()) break;
    max_shared = std::max(max_shared, int(rts.size()));
    group->forward_together(rts, tokens);
    for (size_t i = 0; i < who.size(); ++i) {
      const Step& st = plans[who[i]][size_t(g - delay[who[i]])];
      keep_logits(*rts[i], int(st.tokens.size()), together[who[i]]);
      if (st.keep) rts[i]->target_rollback(st.keep);
    }
  }
  EXPECT_EQ(max_shared, 3);
  for (size_t s = 0; s < plans.size(); ++s) {
    ASSERT_EQ(together[s].size(), alone[s].size()) << "sequence " << s;
    EXPECT_EQ(std::memcmp(together[s].data(), alone[s].data(), alone[s].size() * sizeof(float)), 0) << "sequence " << s;
  }
}

TEST_P(BatchRuntime, AnErrorInOneSequenceChangesNone) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = load_reference(GetParam());
  auto group = make_cpu_sequence_group(ckpt, {.threads = 2});
  auto a = group->add_sequence(16), b = group->add_sequence(16);
  const std::vector<int32_t> good = {ref.prompt[0], ref.prompt[1]};
  const std::vector<int32_t> bad = {ref.prompt[0], int32_t(ckpt.config().vocab_size)};
  const std::vector<int32_t> too_long(17, ref.prompt[0]);
  ModelRuntime* both[] = {a.get(), b.get()};
  for (const auto* wrong : {&bad, &too_long}) {
    const std::span<const int32_t> tokens[] = {good, *wrong};
    EXPECT_THROW(group->forward_together(both, tokens), Error);
    EXPECT_EQ(a->target_length(), 0);
    EXPECT_EQ(b->target_length(), 0);
  }
  const std::span<const int32_t> twice[] = {good, good};
  ModelRuntime* same[] = {a.get(), a.get()};
  EXPECT_THROW(group->forward_together(same, twice), Error);
  EXPECT_EQ(a->target_length(), 0);
}

// generate() on threads of their own, their forwards shared by a
// ForwardScheduler, against generate() on a runtime alone; also through
// the serial group of backends without shared forwards.
void check_scheduled_generations(const std::string& dir, bool serial) {
  const auto ckpt = Qwen35Checkpoint::open(dir);
  const auto ref = load_reference(dir);
  const CpuRuntimeOptions opt{.threads = 2, .min_chunk_work = 1};
  std::vector<std::vector<int32_t>> prompts;
  for (size_t len : {ref.prompt.size(), size_t(1), size_t(3), ref.prompt.size() / 2 + 1})
    prompts.emplace_back(ref.prompt.begin(), ref.prompt.begin() + std::min(len, ref.prompt.size()));
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ckpt.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (DraftKind draft : drafts) {
    GenerateOptions o;
    o.draft = draft;
    o.ignore_eos = true;
    const int cap = runtime_capacity(int(ref.prompt.size()), 24, kMaxBlockSize);
    std::vector<GenerateResult> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
      o.max_new_tokens = 12 + 4 * int(i);  // different lengths: sequences leave at different steps
      auto rt = make_cpu_runtime(ckpt, cap, opt);
      alone.push_back(generate(*rt, prompts[i], o));
    }
    auto group = serial ? make_serial_sequence_group(ckpt, BackendKind::Cpu, 2) : make_cpu_sequence_group(ckpt, opt);
    EXPECT_EQ(group->shares_forwards(), !serial);
    EXPECT_EQ(group->max_sequences(), serial ? 1 : INT_MAX);
    ForwardScheduler scheduler(*group);
    std::vector<std::unique_ptr<ModelRuntime>> seqs;
    std::vector<GenerateResult> together(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
      seqs.push_back(group->add_sequence(cap));
      scheduler.reserve();  // all four share their prefill forward
    }
    for (size_t i = 0; i < prompts.size(); ++i)
      threads.emplace_back([&, i, o]() mutable {
        o.max_new_tokens = 12 + 4 * int(i);
        ScheduledSequence rt(scheduler, *seqs[i], /*reserved=*/true);
        together[i] = generate(rt, prompts[i], o);
      });
    for (auto& t : threads) t.join();
    int64_t forwards_alone = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string what = std::string(draft_kind_name(draft)) + " prompt " + std::to_string(i);
      EXPECT_EQ(together[i].tokens, alone[i].tokens) << what;
      const VerifyCounters &x = together[i].stats.counters, &y = alone[i].stats.counters;
      EXPECT_EQ(x.rounds, y.rounds) << what;
      EXPECT_EQ(x.accepted, y.accepted) << what;
      EXPECT_EQ(x.rows_projected, y.rows_projected) << what;
      EXPECT_EQ(together[i].stats.mtp_work.entries, alone[i].stats.mtp_work.entries) << what;
      forwards_alone += 1 + y.rounds;  // the prefill and one forward per round
    }
    const ForwardScheduler::Totals t = scheduler.totals();
    EXPECT_EQ(t.sequence_forwards, forwards_alone);
    EXPECT_LT(t.forwards, forwards_alone);  // the prefills at least were gathered as one
  }
}

TEST_P(BatchRuntime, ScheduledGenerationsEqualSoloRuns) { check_scheduled_generations(GetParam(), false); }

TEST_P(BatchRuntime, SerialGroupGenerationsEqualSoloRuns) { check_scheduled_generations(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Transformers, BatchRuntime, ::testing::ValuesIn(fixture_dirs()), [](const auto& info) {
  std::string n = test::fixture_name(info.param);
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BatchRuntime);

}  // namespace
}  // namespace nextn
