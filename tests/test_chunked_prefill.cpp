// Chunked prefill (engine/step_loop.cpp, docs/engine.md "Chunked prefill"):
// a prompt forwarded a chunk per step gives the same tokens, the same MTP
// drafts (its chunks' pairings) and the same counters at every chunk size,
// alone and beside decoding sequences; while a long prompt arrives, the
// sequences already decoding get a token every step and no step forwards
// more than one chunk of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <vector>

#include "backend/cpu/qwen35.h"
#include "core/error.h"
#include "engine/generate.h"
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
    loop.on_step = nullptr;
    while (loop.running() > 0) loop.step();
    for (auto& f : loop.take_finished()) {
      ASSERT_FALSE(f.error);
      EXPECT_EQ(f.result.tokens, solo[by_id.at(f.id)]) << "sequence " << by_id.at(f.id);
    }
  }
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
