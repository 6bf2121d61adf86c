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
// a ForwardScheduler shares gives each its solo tokens and counters. A
// disabled benchmark times decode steps of 1-32 sequences together against
// one after another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fixture_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/device_handles.h"
#include "backend/cuda/qwen35.h"
#include "batch_checks.h"
#include "block_choice_util.h"
#include "cuda_alone_util.h"
#include "engine/generate.h"
#include "engine/step_loop.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "model/batch_runtime.h"
#include "step_failure_checks.h"
#include "test_cuda_util.h"
#endif

namespace nextn {
namespace {

#ifdef NEXTN_HAVE_CUDA

using test::cuda_alone;
RuntimeOptions cuda_options(bool fp32, bool graphs = true) { return test::cuda_mode_options(fp32, graphs); }

std::unique_ptr<SequenceGroup> make_group(const Qwen35Checkpoint& ck, bool fp32, bool graphs = true) {
  auto group = make_sequence_group(ck, BackendKind::Cuda, cuda_options(fp32, graphs));
  EXPECT_STREQ(group->backend_name(), "cuda");
  EXPECT_TRUE(group->shares_forwards());
  EXPECT_EQ(group->max_sequences(), 32);
  return group;
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
  // Launched directly instead of from the group graphs.
  {
    SCOPED_TRACE("bf16 without graphs");
    auto group = make_group(ck, false, false);
    test::check_together_equals_alone(cuda_alone(ck, false, false), *group, ref.prompt, {7});
  }
}

// Many row counts: 80 forwards of two sequences, the second 1..40 rows,
// each rolled back to one token; whatever padded shape (GroupPassShape) a
// step lands on, and whether its graph is new or replayed, every row still
// equals the sequence's solo row.
TEST_P(CudaBatch, ManyForwardShapesEqualEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const auto& p = ref.prompt;
  const int steps = 80, cap = steps + 64;
  // Step k: the first sequence forwards 1 or 2 tokens, the second 1..40.
  auto tokens_of = [&](int seq, int k) {
    const int n = seq == 0 ? 1 + k % 2 : 1 + (k / 2) % 40;
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(p[size_t(k + 3 * i + seq) % p.size()]);
    return v;
  };
  test::BatchTrace alone[2], together[2];
  for (int seq = 0; seq < 2; ++seq) {
    auto rt = cuda_alone(ck, false)(cap);
    for (int k = 0; k < steps; ++k) {
      const auto t = tokens_of(seq, k);
      rt->target_forward(t);
      test::keep_rows(*rt, int(t.size()), alone[seq]);
      rt->target_rollback(1);
      alone[seq].lengths.push_back(rt->target_length());
    }
  }
  auto group = make_group(ck, false);
  auto a = group->add_sequence(cap), b = group->add_sequence(cap);
  ModelRuntime* both[] = {a.get(), b.get()};
  for (int k = 0; k < steps; ++k) {
    const std::vector<int32_t> t[] = {tokens_of(0, k), tokens_of(1, k)};
    const std::span<const int32_t> spans[] = {t[0], t[1]};
    group->forward_together(both, spans);
    for (int seq = 0; seq < 2; ++seq) {
      test::keep_rows(*both[seq], int(t[seq].size()), together[seq]);
      both[seq]->target_rollback(1);
      together[seq].lengths.push_back(both[seq]->target_length());
    }
  }
  for (int seq = 0; seq < 2; ++seq) test::expect_same_trace(together[seq], alone[seq], "sequence " + std::to_string(seq));
}

// The group graphs are keyed by a pass's shape, not by its sequences: the
// lead with a different partner every step (one shape, three partners, the
// partners' positions all different) replays one graph over tables of other
// sequences, and every row equals its sequence's solo row.
TEST_P(CudaBatch, OneGraphOverChangingSequencesEqualsEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const auto& p = ref.prompt;
  const int steps = 12, cap = 64;
  // Step k forwards the lead (sequence 0) and partner 1 + k % 3, two tokens each.
  auto tokens_of = [&](int seq, int k) {
    return std::vector<int32_t>{p[size_t(5 * seq + k) % p.size()], p[size_t(5 * seq + k + 1) % p.size()]};
  };
  auto runs_in = [](int seq, int k) { return seq == 0 || seq == 1 + k % 3; };
  test::BatchTrace alone[4], together[4];
  for (int seq = 0; seq < 4; ++seq) {
    auto rt = cuda_alone(ck, false)(cap);
    for (int k = 0; k < steps; ++k) {
      if (!runs_in(seq, k)) continue;
      const auto t = tokens_of(seq, k);
      rt->target_forward(t);
      test::keep_rows(*rt, int(t.size()), alone[seq]);
      rt->target_rollback(1);
      alone[seq].lengths.push_back(rt->target_length());
    }
  }
  auto group = make_group(ck, false);
  std::vector<std::unique_ptr<ModelRuntime>> seqs;
  for (int seq = 0; seq < 4; ++seq) seqs.push_back(group->add_sequence(cap));
  for (int k = 0; k < steps; ++k) {
    const int partner = 1 + k % 3;
    ModelRuntime* both[] = {seqs[0].get(), seqs[size_t(partner)].get()};
    const std::vector<int32_t> t[] = {tokens_of(0, k), tokens_of(partner, k)};
    const std::span<const int32_t> spans[] = {t[0], t[1]};
    group->forward_together(both, spans);
    const int ids[] = {0, partner};
    for (int i = 0; i < 2; ++i) {
      test::keep_rows(*both[i], 2, together[ids[i]]);
      both[i]->target_rollback(1);
      together[ids[i]].lengths.push_back(both[i]->target_length());
    }
  }
  for (int seq = 0; seq < 4; ++seq)
    test::expect_same_trace(together[seq], alone[seq], "sequence " + std::to_string(seq));
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

TEST_P(CudaBatch, SteppedGenerationsEqualSoloRuns) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ck.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (bool fp32 : {false, true}) {
    SCOPED_TRACE(fp32 ? "fp32" : "bf16");
    auto group = make_group(ck, fp32);
    for (DraftKind draft : drafts)
      for (int K : {4, 8}) test::check_stepped_generations(cuda_alone(ck, fp32), *group, ref.prompt, draft, K);
  }
}

// The MTP head over the group (qwen35_group_mtp.cpp): pairings of several
// sequences in one pass and their draft chains of different lengths, each
// chained step one pass, give every sequence the drafts its own
// mtp_forward / mtp_draft give; three times over the same sequences (reset
// between), so the group graphs are launched directly, captured and replayed.
TEST_P(CudaBatch, MtpTogetherEqualsEachAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  if (ck.mtp_layers() == 0) GTEST_SKIP() << "no MTP head";
  const auto ref = test::load_reference(GetParam());
  const std::vector<std::vector<int32_t>> prompts = {ref.prompt, {1, 5, 9}, {7, 7, 7, 7, 7}, {ref.prompt[0], 3}};
  const std::vector<std::vector<int>> chains = {{5, 1, 3, 2}, {2, 4, 4, 1}, {0, 3, 1, 8}};
  for (bool fp32 : {false, true}) {
    SCOPED_TRACE(fp32 ? "fp32" : "bf16");
    auto group = make_group(ck, fp32);
    std::vector<std::unique_ptr<ModelRuntime>> seqs, solo;
    std::vector<ModelRuntime*> raw;
    for (size_t i = 0; i < prompts.size(); ++i) {
      seqs.push_back(group->add_sequence(128));
      solo.push_back(cuda_alone(ck, fp32)(128));
      raw.push_back(seqs.back().get());
    }
    for (int pass = 0; pass < 3; ++pass) {
      for (auto& s : seqs) s->reset();
      for (auto& s : solo) s->reset();
      // Round 0 pairs each prompt with its next tokens; later rounds one
      // committed token each (the last draft, or 2).
      std::vector<std::vector<int32_t>> rows = prompts, last(prompts.size(), std::vector<int32_t>{2});
      for (size_t round = 0; round < chains.size(); ++round) {
        std::vector<std::span<const int32_t>> rows_span, next_span;
        std::vector<std::vector<int32_t>> next(prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
          next[i].assign(rows[i].begin() + 1, rows[i].end());
          next[i].push_back(last[i].back());
          rows_span.emplace_back(rows[i]);
          next_span.emplace_back(next[i]);
          solo[i]->target_forward(rows[i]);
          mtp_of(*solo[i]).mtp_forward(next[i], 0);
        }
        group->forward_together(raw, rows_span);
        const StepWork before = group->step_work();
        group->mtp_forward_together(raw, next_span);
        const std::vector<int>& n = chains[round];
        std::vector<int32_t> got(size_t(8 * prompts.size()));
        group->mtp_draft_together(raw, n, got.data());
        const StepWork did = group->step_work().since(before);
        EXPECT_EQ(did.mtp_forward_launches, 1);
        EXPECT_EQ(did.mtp_draft_launches, *std::max_element(n.begin(), n.end()));
        size_t at = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
          std::vector<int32_t> want(size_t(n[i]));
          mtp_of(*solo[i]).mtp_draft(n[i], want.data());
          const std::vector<int32_t> mine(got.begin() + long(at), got.begin() + long(at) + n[i]);
          at += size_t(n[i]);
          EXPECT_EQ(mine, want) << "pass " << pass << " round " << round << " sequence " << i;
          EXPECT_EQ(mtp_of(*seqs[i]).mtp_length(), mtp_of(*solo[i]).mtp_length());
          EXPECT_EQ(mtp_of(*seqs[i]).mtp_work().entries, mtp_of(*solo[i]).mtp_work().entries);
          EXPECT_EQ(mtp_of(*seqs[i]).mtp_work().argmax_rows, mtp_of(*solo[i]).mtp_work().argmax_rows);
          // Next round: the chain's entries rolled back, one committed token.
          const int keep = mtp_of(*solo[i]).mtp_length() - std::max(0, n[i] - 1);
          mtp_of(*solo[i]).mtp_rollback(keep);
          mtp_of(*seqs[i]).mtp_rollback(keep);
          rows[i] = {want.empty() ? 2 : want[0]};
          last[i] = rows[i];
        }
      }
    }
  }
}

// All-or-nothing steps (tests/step_failure_checks.h), bf16 mode: the
// allocator refuses the prefill workspace of a 70-token prompt joining a
// decoding sequence (the one allocation a CUDA step makes), and a cache
// overrun and a bad token id each fail one sequence alone; the others keep
// their solo tokens, the failed slot serves again, nothing leaks.
TEST_P(CudaBatch, RefusedReservationFailsOneSequenceAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const int64_t base = cuda::live_count();
  {
    auto group = make_group(ck, false);
    test::check_refused_reservations(cuda_alone(ck, false), *group, cuda::device_allocator(), ref.prompt,
                                     /*mid_decode=*/false, "hidden rows");
  }
  EXPECT_EQ(cuda::live_count(), base);
}

// A step of prompt chunks only (no head) waits for its chunk
// (SequenceGroup::wait_for): one counted host sync in each such step, so the
// device never falls behind the host by a queue of chunks; the tokens equal
// the solo run at the same chunk size.
TEST_P(CudaBatch, PromptOnlyStepsWaitForTheirChunk) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const std::vector<int32_t> prompt = test::cycled(ref.prompt, 150);
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.ignore_eos = true;
  o.prefill_chunk = 40;  // chunks of 40, 40, 40, 30: three steps without a head
  auto group = make_group(ck, false);
  auto seq = group->add_sequence(256);
  const RuntimeProbe* probe = find_probe(*seq);
  ASSERT_NE(probe, nullptr);
  StepLoop loop(*group);
  const int id = loop.add(*seq, prompt, o);
  for (int step = 0; step < 3; ++step) {
    const int64_t before = probe->host_syncs();
    loop.step();
    EXPECT_EQ(probe->host_syncs() - before, 1) << "step " << step;
  }
  while (loop.running() > 0) loop.step();
  std::vector<StepLoop::Finished> done = loop.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, id);
  ASSERT_FALSE(done[0].error);
  auto alone = cuda_alone(ck, false)(256);
  EXPECT_EQ(done[0].result.tokens, generate(*alone, prompt, o).tokens);
}

// The stall budget (engine/prefill_budget.h) on CUDA: in bf16 the group
// cuts a prompt's chunks only within 64 rows (a wider forward takes the
// prefill GEMMs, whose rows a cut would change); fp32 runs every forward on
// the graphs. A 150-token prompt joins a decoding sequence: with chunks of
// 64 it forwards 3 rows in its first step (planted costs: a step of 1
// sequence and 1 row may grow to 4 rows) and then what the measured steps
// allow, with chunks of 100 its whole chunks. Both sequences answer as
// their solo runs at the same chunk size.
TEST_P(CudaBatch, AStallBudgetCutsPromptsOnlyWithinTheInvariantRows) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const std::vector<int32_t> prompt = test::cycled(ref.prompt, 150);
  EXPECT_EQ(make_group(ck, true)->chunk_invariant_rows(), std::numeric_limits<int>::max());
  auto group = make_group(ck, false);
  ASSERT_EQ(group->chunk_invariant_rows(), 64);
  for (int chunk : {64, 100}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    GenerateOptions o;
    o.max_new_tokens = 64;  // the first decodes through the whole prompt's arrival
    o.ignore_eos = true;
    o.prefill_chunk = chunk;
    auto first = group->add_sequence(256), second = group->add_sequence(256);
    StepLoop loop(*group);
    loop.set_prefill_stall(2);
    for (int sequences : {1, 2})
      for (const auto& [rows, ms] : {std::pair{1, 1.0}, {2, 1.0}, {4, 2.0}, {8, 4.0}})
        loop.cost_model().record_verify(sequences, rows, ms);
    const int id_first = loop.add(*first, ref.prompt, o);
    loop.step();
    std::vector<int> prompt_rows;
    loop.on_step = [&](const StepReport& r) {
      if (r.prefill_rows > 0) prompt_rows.push_back(r.prefill_rows);
    };
    const int id_second = loop.add(*second, prompt, o);
    while (loop.running() > 0) loop.step();
    if (chunk == 100) {
      EXPECT_EQ(prompt_rows, (std::vector<int>{100, 50}));
    } else {
      ASSERT_FALSE(prompt_rows.empty());
      EXPECT_EQ(prompt_rows[0], 3);
      int rows = 0;
      for (int r : prompt_rows) {
        EXPECT_LE(r, chunk);
        rows += r;
      }
      EXPECT_EQ(rows, int(prompt.size()));
    }
    for (auto& f : loop.take_finished()) {
      ASSERT_FALSE(f.error);
      auto alone = cuda_alone(ck, false)(256);
      EXPECT_EQ(f.result.tokens, generate(*alone, f.id == id_first ? ref.prompt : prompt, o).tokens)
          << (f.id == id_second ? "the prompt that joined" : "the decoding sequence");
    }
  }
}

TEST_P(CudaBatch, OverrunAndBadTokenFailOneSequenceAlone) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  auto group = make_group(ck, false);
  test::check_bad_rows_fail_alone(cuda_alone(ck, false), *group, ref.prompt);
}

// K per step on the CUDA group: the probe runs real forwards and fills the
// cost table; sequences at chosen K, and at a cycling K whose rounds at
// K = 1 skip the MTP pairing, give plain greedy's tokens.
TEST_P(CudaBatch, AutoBlockSizesEqualPlainGreedy) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(GetParam());
  if (ck.mtp_layers() == 0) GTEST_SKIP() << "no MTP head";
  const auto ref = test::load_reference(GetParam());
  const std::vector<std::vector<int32_t>> prompts = {ref.prompt, {1, 5, 9}, {7, 7, 7, 7, 7}};
  constexpr int kTokens = 24;
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) {
    auto rt = cuda_alone(ck, false)(128);
    plain.push_back(greedy_generate(*rt, p, kTokens, /*ignore_eos=*/true).tokens);
  }
  for (bool cycling : {false, true}) {
    SCOPED_TRACE(cycling ? "cycling K" : "cost model");
    auto group = make_group(ck, false);
    std::vector<std::unique_ptr<ModelRuntime>> slots;
    std::vector<ModelRuntime*> raw;
    for (size_t i = 0; i < prompts.size(); ++i) {
      slots.push_back(group->add_sequence(128));
      raw.push_back(slots.back().get());
    }
    StepLoop loop(*group);
    test::CyclingChooser chooser;
    if (cycling) {
      loop.set_block_chooser(&chooser);
    } else {
      probe_step_costs(*group, raw, kAutoMaxBlockSize, loop.cost_model());
      EXPECT_EQ(loop.cost_model().verify_table().size(), 2u * 4u);  // n = 1, 2 at K = 1, 2, 4, 8
    }
    std::map<int, size_t> by_id;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateOptions o;
      o.max_new_tokens = kTokens;
      o.ignore_eos = true;
      o.draft = DraftKind::Mtp;
      o.block_policy = BlockPolicy::Auto;
      by_id[loop.add(*raw[i], prompts[i], o)] = i;
    }
    while (loop.running() > 0) loop.step();
    for (auto& f : loop.take_finished()) {
      ASSERT_FALSE(f.error);
      EXPECT_EQ(f.result.tokens, plain[by_id.at(f.id)]) << "prompt " << by_id.at(f.id);
    }
  }
}

std::vector<std::string> fixture_params() {
  auto d = test::dense_fixture_dirs();
  if (d.empty()) d.push_back("");
  return d;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBatch, testing::ValuesIn(fixture_params()),
                         [](const testing::TestParamInfo<std::string>& i) { return test::fixture_param_name(i.param); });

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

// Greedy decode steps of N sequences at the Qwen3.5-0.8B shape (synthetic
// q4 g64 weights, bf16 mode): each step is one target forward of one token
// per sequence plus each sequence's argmax, run as one forward_together
// (the group) or as N target_forwards (what the serial group did), over the
// same shared weights. Asserts that both give every sequence the same
// tokens; prints "[bench]" wall times per step (after 4 warm-up steps, host
// clock, each step ending in the argmax copies). Disabled by default; the
// device script runs it with NEXTN_DEVICE_BENCH=1.
TEST(CudaBench, DISABLED_GroupDecodeSteps) {
  NEXTN_REQUIRE_GPU();
  // NEXTN_BENCH_GROUP_PRESET picks the shape (default qwen3.5-0.8b).
  const char* preset_env = std::getenv("NEXTN_BENCH_GROUP_PRESET");
  const std::string preset = preset_env ? preset_env : "qwen3.5-0.8b";
  const std::string dir = testing::TempDir() + "nextn-bench-group-" + preset + "-q4";
  std::filesystem::remove_all(dir);
  MakeCheckpointOptions mo;
  mo.quant = "q4";
  mo.seed = 5;
  ASSERT_TRUE(synthetic_preset(preset).has_value()) << preset;
  make_checkpoint(*synthetic_preset(preset), mo, dir);
  {
    const auto ck = Qwen35Checkpoint::open(dir);
    auto group = make_group(ck, false);
    constexpr int kWarm = 4, kSteps = 24;
    for (int n : {1, 2, 4, 8, 16, 32}) {
      std::vector<std::vector<int32_t>> tokens_of[2];
      double ms_of[2] = {0, 0};
      double first_ms = 0;  // together: forward + the first sequence's head (it waits for the forward)
      for (int together = 0; together < 2; ++together) {
        std::vector<std::unique_ptr<ModelRuntime>> seqs;
        std::vector<ModelRuntime*> rts;
        std::vector<std::vector<int32_t>> next(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          seqs.push_back(group->add_sequence(64));
          rts.push_back(seqs.back().get());
          const std::vector<int32_t> prompt = {int32_t(1 + i), int32_t(100 + 7 * i), 42, int32_t(9 + i)};
          rts.back()->target_forward(prompt);
          int32_t t = 0;
          rts.back()->head_argmax(3, 1, &t);
          next[size_t(i)] = {t};
        }
        tokens_of[together] = next;
        auto t0 = std::chrono::steady_clock::now();
        for (int step = 0; step < kWarm + kSteps; ++step) {
          if (step == kWarm) t0 = std::chrono::steady_clock::now();
          const auto step_start = std::chrono::steady_clock::now();
          if (together) {
            std::vector<std::span<const int32_t>> spans(next.begin(), next.end());
            group->forward_together(rts, spans);
          } else {
            for (int i = 0; i < n; ++i) rts[size_t(i)]->target_forward(next[size_t(i)]);
          }
          for (int i = 0; i < n; ++i) {
            rts[size_t(i)]->head_argmax(0, 1, next[size_t(i)].data());
            tokens_of[together][size_t(i)].push_back(next[size_t(i)][0]);
            if (i == 0 && together && step >= kWarm)
              first_ms +=
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count();
          }
        }
        ms_of[together] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kSteps;
      }
      EXPECT_EQ(tokens_of[1], tokens_of[0]) << n << " sequences";
      std::printf("[bench] %s q4 decode step, %2d sequences: together %.3f ms (%.0f tok/s), one after another "
                  "%.3f ms (%.0f tok/s)\n",
                  preset.c_str(), n, ms_of[1], 1000.0 * n / ms_of[1], ms_of[0], 1000.0 * n / ms_of[0]);
      std::printf("[bench]   together: forward + first head %.3f ms, the other %d heads %.3f ms\n", first_ms / kSteps,
                  n - 1, ms_of[1] - first_ms / kSteps);
    }
  }
  std::filesystem::remove_all(dir);
}

#endif  // NEXTN_HAVE_CUDA

}  // namespace
}  // namespace nextn
