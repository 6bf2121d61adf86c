// Chunked prefill (engine/step_loop.cpp, docs/engine.md "Chunked prefill"):
// a prompt forwarded a chunk per step gives the same tokens, the same MTP
// drafts (its chunks' pairings) and the same counters at every chunk size,
// alone and beside decoding sequences; while a long prompt arrives, the
// sequences already decoding get a token every step and no step forwards
// more than one chunk of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "backend/cpu/qwen35.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/prefill_budget.h"
#include "engine/step_loop.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"

namespace nextn {
namespace {

const CpuRuntimeOptions kOptions{.threads = 2, .min_chunk_work = 1};

// The fixture's prompt three times over: 30 tokens, several chunks.
std::vector<int32_t> long_prompt(const std::string& dir) {
  const auto ref = test::load_reference(dir);
  std::vector<int32_t> p;
  for (int i = 0; i < 3; ++i) p.insert(p.end(), ref.prompt.begin(), ref.prompt.end());
  return p;
}

// Steps the loop to its end: each finished sequence (by_id: its index) has
// the tokens of its solo run.
void finish_each_as_alone(StepLoop& loop, const std::map<int, size_t>& by_id,
                          const std::vector<std::vector<int32_t>>& solo) {
  loop.on_step = nullptr;
  while (loop.running() > 0) loop.step();
  for (auto& f : loop.take_finished()) {
    ASSERT_FALSE(f.error);
    EXPECT_EQ(f.result.tokens, solo[by_id.at(f.id)]) << "sequence " << by_id.at(f.id);
  }
}

class ChunkedPrefill : public ::testing::TestWithParam<std::string> {};

TEST_P(ChunkedPrefill, ChunkSizesChangeNoToken) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const std::vector<int32_t> prompt = long_prompt(GetParam());
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ckpt.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (DraftKind draft : drafts) {
    GenerateOptions o;
    o.draft = draft;
    o.max_new_tokens = 16;
    o.ignore_eos = true;
    const int cap = runtime_capacity(int(prompt.size()), o.max_new_tokens, kMaxBlockSize);
    auto rt = make_cpu_runtime(ckpt, cap, kOptions);
    const GenerateResult whole = generate(*rt, prompt, o);  // the default chunk holds the whole prompt
    for (int chunk : {1, 4, 7, 29}) {
      SCOPED_TRACE(std::string(draft_kind_name(draft)) + " chunk " + std::to_string(chunk));
      o.prefill_chunk = chunk;
      rt->reset();
      const GenerateResult r = generate(*rt, prompt, o);
      EXPECT_EQ(r.tokens, whole.tokens);
      EXPECT_EQ(r.stats.counters.rounds, whole.stats.counters.rounds);
      EXPECT_EQ(r.stats.counters.accepted_at, whole.stats.counters.accepted_at);  // the same drafts
      EXPECT_EQ(r.stats.mtp_work.entries, whole.stats.mtp_work.entries);
    }
  }
}

// Two sequences decode; a long prompt joins at step 2 with chunks of 4: every
// step until it is in forwards at most 4 of its tokens beside one row (or one
// verify block) per decoding sequence, and each decoding sequence commits
// tokens in every one of those steps. Everyone's tokens equal their solo runs.
TEST_P(ChunkedPrefill, DecodingSequencesKeepSteppingWhileAPromptArrives) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const std::vector<int32_t> prompt = long_prompt(GetParam());
  constexpr int kChunk = 4;
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ckpt.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (DraftKind draft : drafts) {
    SCOPED_TRACE(draft_kind_name(draft));
    const std::vector<std::vector<int32_t>> prompts = {ref.prompt, {1, 5, 9}, prompt};
    GenerateOptions o;
    o.draft = draft;
    o.ignore_eos = true;
    o.max_new_tokens = 40;
    o.prefill_chunk = kChunk;
    const int K = draft == DraftKind::Mtp ? default_block_size(ckpt.mtp_layers()) : 1;
    const int cap = runtime_capacity(int(prompt.size()), o.max_new_tokens, kMaxBlockSize);
    std::vector<std::vector<int32_t>> solo;
    for (const auto& p : prompts) {
      auto rt = make_cpu_runtime(ckpt, cap, kOptions);
      GenerateOptions whole = o;
      whole.prefill_chunk = kDefaultPrefillChunk;
      solo.push_back(generate(*rt, p, whole).tokens);
    }
    auto group = make_cpu_sequence_group(ckpt, kOptions);
    std::vector<std::unique_ptr<ModelRuntime>> slots;
    for (size_t i = 0; i < prompts.size(); ++i) slots.push_back(group->add_sequence(cap));
    StepLoop loop(*group);
    std::map<int, size_t> by_id;
    std::vector<int> tokens_this_step(prompts.size(), 0);
    auto sink_for = [&](size_t i) {
      return [&, i](std::span<const int32_t> t, int) {
        tokens_this_step[i] += int(t.size());
        return true;
      };
    };
    for (size_t i = 0; i < 2; ++i) {
      GenerateOptions oi = o;
      oi.prefill_chunk = kDefaultPrefillChunk;  // their prompts in one step: decoding from step 2
      oi.sink = sink_for(i);
      by_id[loop.add(*slots[i], prompts[i], oi)] = i;
    }
    loop.step();  // both prefill
    loop.step();  // both decode
    GenerateOptions ol = o;
    ol.sink = sink_for(2);
    by_id[loop.add(*slots[2], prompts[2], ol)] = 2;
    const int chunks = (int(prompt.size()) + kChunk - 1) / kChunk;
    int prompt_rows = 0;
    loop.on_step = [&](const StepReport& r) {
      EXPECT_LE(r.prefill_rows, kChunk);
      EXPECT_LE(r.rows, kChunk + 2 * K);
      prompt_rows += r.prefill_rows;
    };
    for (int s = 0; s < chunks; ++s) {
      std::fill(tokens_this_step.begin(), tokens_this_step.end(), 0);
      loop.step();
      EXPECT_GT(tokens_this_step[0], 0) << "step " << s;
      EXPECT_GT(tokens_this_step[1], 0) << "step " << s;
      EXPECT_EQ(tokens_this_step[2], s + 1 == chunks ? 1 : 0) << "step " << s;  // its first token with its last chunk
    }
    EXPECT_EQ(prompt_rows, int(prompt.size()));
    finish_each_as_alone(loop, by_id, solo);
  }
}

// The stall budget (engine/prefill_budget.h): one sequence decodes (one row
// a step; with MTP a block of 2); a 30-token prompt joins with chunks of up
// to 29. With a step planted at 1 ms for up to 2 rows, 2 ms at 4, 4 ms at 8
// and --prefill-stall 2, a step may cost 2 ms: 4 rows, so 3 prompt rows
// beside the decode row (2 beside the block) in the first step the prompt
// joins. The later ones follow what those steps measured (prompt_scale):
// each carries what its budget allows, at least one row. With nothing
// decoding, a prompt forwards its whole chunk. Both answer as their solo
// runs with whole chunks.
TEST_P(ChunkedPrefill, AStallBudgetCutsChunksBesideDecodingSequencesAndChangesNoToken) {
  const auto ckpt = Qwen35Checkpoint::open(GetParam());
  const auto ref = test::load_reference(GetParam());
  const std::vector<int32_t> prompt = long_prompt(GetParam());
  std::vector<DraftKind> drafts = {DraftKind::None};
  if (ckpt.mtp_layers() > 0) drafts.push_back(DraftKind::Mtp);
  for (DraftKind draft : drafts) {
    SCOPED_TRACE(draft_kind_name(draft));
    GenerateOptions o;
    o.draft = draft;
    const int K = draft == DraftKind::Mtp ? 2 : 1;  // decode rows a step
    if (draft == DraftKind::Mtp) o.block_size = K;
    o.ignore_eos = true;
    o.max_new_tokens = 48;  // the first still decodes when the second's prompt is in
    o.prefill_chunk = 29;
    const std::vector<std::vector<int32_t>> prompts = {ref.prompt, prompt};
    const int cap = runtime_capacity(int(prompt.size()), o.max_new_tokens, kMaxBlockSize);
    std::vector<std::vector<int32_t>> solo;
    for (const auto& p : prompts) {
      auto rt = make_cpu_runtime(ckpt, cap, kOptions);
      solo.push_back(generate(*rt, p, o).tokens);
    }
    auto group = make_cpu_sequence_group(ckpt, kOptions);
    std::vector<std::unique_ptr<ModelRuntime>> slots;
    for (size_t i = 0; i < prompts.size(); ++i) slots.push_back(group->add_sequence(cap));
    StepLoop loop(*group);
    loop.set_prefill_stall(2);
    for (int sequences : {1, 2})
      for (const auto& [rows, ms] : {std::pair{1, 1.0}, {2, 1.0}, {4, 2.0}, {8, 4.0}})
        loop.cost_model().record_verify(sequences, rows, ms);
    std::vector<int> budgets, prompt_rows;
    loop.on_step = [&](const StepReport& r) {
      budgets.push_back(r.prompt_budget);
      prompt_rows.push_back(r.prefill_rows);
    };
    std::map<int, size_t> by_id;
    by_id[loop.add(*slots[0], prompts[0], o)] = 0;
    loop.step();  // its prompt alone: the whole chunk, no budget
    EXPECT_EQ(budgets, std::vector<int>{-1});
    EXPECT_EQ(prompt_rows, std::vector<int>{int(ref.prompt.size())});
    budgets.clear(), prompt_rows.clear();
    by_id[loop.add(*slots[1], prompts[1], o)] = 1;
    int left = int(prompt.size());
    while (left > 0) {
      loop.step();
      ASSERT_FALSE(budgets.empty());
      const int s = int(budgets.size()) - 1;
      // The budget never exceeds what the prompt holds, and the prompt moves every step.
      if (s == 0) {
        EXPECT_EQ(budgets[0], 4 - K);
      }
      EXPECT_GE(budgets[size_t(s)], 0) << "step " << s;
      EXPECT_LE(budgets[size_t(s)], left) << "step " << s;
      EXPECT_EQ(prompt_rows[size_t(s)], std::max(1, budgets[size_t(s)])) << "step " << s;
      left -= prompt_rows[size_t(s)];
    }
    finish_each_as_alone(loop, by_id, solo);
  }
}

// The budget is the largest row count the model fits under it (between
// measured rows it interpolates), never below none and never above what the
// prompts hold.
TEST(PrefillBudget, TheLargestPromptRowsThatFit) {
  CostModelChooser cost;
  for (const auto& [rows, ms] : {std::pair{1, 1.0}, {16, 1.0}, {32, 2.0}, {64, 4.0}}) {
    cost.record_verify(16, rows, ms);
    cost.record_verify(1, rows, ms);
  }
  EXPECT_EQ(prompt_rows_within(cost, 2.0, 16, 16, 1, 512), 16);  // 32 rows: 2 ms
  EXPECT_EQ(prompt_rows_within(cost, 3.0, 16, 16, 1, 512), 32);  // 48 rows: 3 ms
  EXPECT_EQ(prompt_rows_within(cost, 3.0, 16, 16, 1, 20), 20);   // all the prompts hold
  EXPECT_EQ(prompt_rows_within(cost, 1.5, 1, 1, 1, 512), 23);    // 24 rows: 1.5 ms
  // Steps with prompt rows that took twice their prediction: the next
  // budget counts prompt rows at 1.25x (an exponential average), so the
  // step may reach 1.6 ms of the table: 25 rows.
  cost.observe_prompt_step(16, 32, 4.0);
  EXPECT_DOUBLE_EQ(cost.prompt_scale(), 1.25);
  EXPECT_EQ(prompt_rows_within(cost, 2.0, 16, 16, 1, 512), 9);
  CostModelChooser unmeasured;
  unmeasured.observe_prompt_step(2, 8, 3.0);
  EXPECT_EQ(unmeasured.prompt_scale(), 1.0);  // no table: nothing to weigh the step against
  CostModelChooser steep;
  steep.record_verify(1, 1, 1.0);
  steep.record_verify(1, 2, 2.0);
  EXPECT_EQ(prompt_rows_within(steep, 1.5, 1, 1, 1, 512), 0);  // one more row already costs 2x
  for (double bad : {-1.0, 0.5, 1.0, std::numeric_limits<double>::infinity(), std::nan("")})
    EXPECT_THROW(check_prefill_stall(bad), Error) << bad;
  check_prefill_stall(0);
  check_prefill_stall(1.5);
}

TEST(ChunkedPrefillOptions, AChunkOfNoTokensIsRefusedByName) {
  const auto dirs = test::fixture_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no fixtures";
  const auto ckpt = Qwen35Checkpoint::open(dirs[0]);
  auto rt = make_cpu_runtime(ckpt, 64, kOptions);
  GenerateOptions o;
  o.prefill_chunk = 0;
  const std::vector<int32_t> prompt = {1, 2, 3};
  try {
    generate(*rt, prompt, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--prefill-chunk 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt->target_length(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkedPrefill, testing::ValuesIn(test::fixture_dirs()), [](const auto& info) {
  std::string n = test::fixture_name(info.param);
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ChunkedPrefill);

}  // namespace
}  // namespace nextn
