// The checks every SequenceGroup must pass (model/batch_runtime.h), shared
// by the CPU group's tests (tests/test_batch_runtime.cpp) and the CUDA
// group's (tests/test_cuda_batch.cpp): forwards together == each sequence
// alone, bit for bit; refused calls change nothing; sequences the engine
// step (engine/step_loop.h) runs together == generate() alone.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/batch_runtime.h"
#include "model/bench_interfaces.h"
#include "engine/generate.h"
#include "engine/step_loop.h"

namespace nextn::test {

// A fresh runtime of `cap` positions, alone (the reference).
using RuntimeMaker = std::function<std::unique_ptr<ModelRuntime>(int cap)>;

// One step of a sequence's script: a target forward, then optionally a
// rollback to `keep` of its rows (0: none).
struct BatchStep {
  std::vector<int32_t> tokens;
  int keep = 0;
};

// Seven scripts from a prompt: the first steps of some add up to more than
// 64 rows (the CUDA group's forward limit), one is a 70-token prompt, the
// later steps mix 1-row decode steps with verify blocks, some rolled back.
inline std::vector<std::vector<BatchStep>> batch_scripts(const std::vector<int32_t>& p) {
  const auto at = [&](size_t i) { return p[i % p.size()]; };
  const auto run = [&](size_t n, size_t from) {
    std::vector<int32_t> v;
    for (size_t i = 0; i < n; ++i) v.push_back(at(from + i));
    return v;
  };
  std::vector<int32_t> reversed(p.rbegin(), p.rend());
  return {
      {{p}, {{at(1)}}, {{at(2), at(3), at(0)}, 2}, {{at(3)}}, {{at(1), at(2)}, 1}, {{at(0)}}},
      {{reversed}, {{at(0), at(3), at(1), at(2)}, 3}, {{at(2)}}, {{at(1)}}, {{at(3), at(0), at(2)}, 1}},
      {{{at(2), at(0)}}, {{at(1)}}, {{at(0), at(1)}}, {{at(3)}}, {{at(2), at(2), at(2)}, 2}, {{at(1)}}},
      {{run(70, 1)}, {{at(1)}}, {{at(2), at(0), at(1), at(3), at(2)}, 2}, {{at(0)}}, {{at(3), at(1)}, 1}},
      {{run(40, 2)}, {{at(0), at(1)}, 1}, {{at(3)}}, {{at(2)}}, {{at(0), at(2), at(1), at(3)}, 4}},
      {{{at(3)}}, {{at(2)}}, {{at(1), at(1), at(1), at(1)}, 4}, {{at(0)}}, {{at(2), at(3)}, 1}, {{at(1)}}},
      {{run(33, 3)}, {{at(1), at(0), at(2)}, 3}, {{at(0)}}, {{at(1)}}},
  };
}

// Forwards at which each script starts when they run together: sequences
// join late, so prompts share forwards with decode and verify rows; at the
// fourth forward all seven are in.
inline const std::vector<int> kBatchScriptDelay = {0, 0, 2, 0, 1, 3, 1};

// What a script left: every row's logits (raw bits), every row's argmax,
// the length after each step.
struct BatchTrace {
  std::vector<float> logits;
  std::vector<int32_t> argmax, lengths;
};

inline void keep_rows(ModelRuntime& rt, int rows, BatchTrace& t) {
  const int V = rt.vocab();
  for (int j = 0; j < rows; ++j) {
    t.logits.resize(t.logits.size() + size_t(V));
    rt.head_logits(j, &t.logits[t.logits.size() - size_t(V)]);
  }
  for (int first = 0; first < rows; first += 64) {
    const int n = std::min(64, rows - first);
    t.argmax.resize(t.argmax.size() + size_t(n));
    rt.head_argmax(first, n, &t.argmax[t.argmax.size() - size_t(n)]);
  }
}

inline void expect_same_trace(const BatchTrace& got, const BatchTrace& want, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0) << what;
  EXPECT_EQ(got.argmax, want.argmax) << what;
  EXPECT_EQ(got.lengths, want.lengths) << what;
}

// Every script alone, then the first n scripts through `group` for each n
// of `counts` (n <= 7): every sequence's trace equals its solo trace.
inline void check_together_equals_alone(const RuntimeMaker& alone, SequenceGroup& group,
                                        const std::vector<int32_t>& prompt, const std::vector<size_t>& counts) {
  const auto all = batch_scripts(prompt);
  const int cap = 160;
  std::vector<BatchTrace> solo(all.size());
  for (size_t s = 0; s < all.size(); ++s) {
    auto rt = alone(cap);
    for (const BatchStep& st : all[s]) {
      rt->target_forward(st.tokens);
      keep_rows(*rt, int(st.tokens.size()), solo[s]);
      if (st.keep) rt->target_rollback(st.keep);
      solo[s].lengths.push_back(rt->target_length());
    }
  }
  EXPECT_TRUE(group.shares_forwards());
  for (size_t n : counts) {
    SCOPED_TRACE(std::to_string(n) + " sequences");
    ASSERT_LE(n, all.size());
    std::vector<std::unique_ptr<ModelRuntime>> seqs;
    for (size_t s = 0; s < n; ++s) seqs.push_back(group.add_sequence(cap));
    std::vector<BatchTrace> together(n);
    size_t max_shared = 0;
    for (int g = 0;; ++g) {
      std::vector<ModelRuntime*> rts;
      std::vector<std::span<const int32_t>> tokens;
      std::vector<const BatchStep*> steps;
      std::vector<size_t> who;
      for (size_t s = 0; s < n; ++s) {
        const int k = g - kBatchScriptDelay[s];
        if (k < 0 || k >= int(all[s].size())) continue;
        rts.push_back(seqs[s].get());
        tokens.push_back(all[s][size_t(k)].tokens);
        steps.push_back(&all[s][size_t(k)]);
        who.push_back(s);
      }
      if (rts.empty()) break;
      max_shared = std::max(max_shared, rts.size());
      group.forward_together(rts, tokens);
      for (size_t i = 0; i < who.size(); ++i) {
        BatchTrace& t = together[who[i]];
        keep_rows(*rts[i], int(steps[i]->tokens.size()), t);
        if (steps[i]->keep) rts[i]->target_rollback(steps[i]->keep);
        t.lengths.push_back(rts[i]->target_length());
      }
    }
    EXPECT_EQ(max_shared, n);
    for (size_t s = 0; s < n; ++s) expect_same_trace(together[s], solo[s], "sequence " + std::to_string(s));
  }
}

// Refused calls (a token id past the vocabulary, a negative one, a
// sequence over its capacity, one listed twice, one of another group) leave
// every sequence as it was; a good call after them gives each sequence its
// solo rows. `prompt` has at least three tokens.
inline void check_errors_change_nothing(const RuntimeMaker& alone, SequenceGroup& group,
                                        const std::vector<int32_t>& prompt, int vocab) {
  auto a = group.add_sequence(16), b = group.add_sequence(16);
  const std::vector<int32_t> good = {prompt[0], prompt[1]};
  const std::vector<int32_t> other = {prompt[2], prompt[1], prompt[0]};
  const std::vector<int32_t> bad = {prompt[0], vocab};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> too_long(17, prompt[0]);
  ModelRuntime* both[] = {a.get(), b.get()};
  for (const auto* wrong : {&bad, &negative, &too_long}) {
    const std::span<const int32_t> tokens[] = {good, *wrong};
    EXPECT_THROW(group.forward_together(both, tokens), Error);
    EXPECT_EQ(a->target_length(), 0);
    EXPECT_EQ(b->target_length(), 0);
  }
  const std::span<const int32_t> twice[] = {good, good};
  ModelRuntime* same[] = {a.get(), a.get()};
  EXPECT_THROW(group.forward_together(same, twice), Error);
  EXPECT_EQ(a->target_length(), 0);
  auto stranger = alone(16);
  ModelRuntime* mixed[] = {a.get(), stranger.get()};
  EXPECT_THROW(group.forward_together(mixed, twice), Error);
  EXPECT_EQ(a->target_length(), 0);
  EXPECT_EQ(stranger->target_length(), 0);

  const std::span<const int32_t> fine[] = {good, other};
  group.forward_together(both, fine);
  for (size_t i = 0; i < 2; ++i) {
    auto solo = alone(16);
    solo->target_forward(fine[i]);
    BatchTrace want, got;
    keep_rows(*solo, int(fine[i].size()), want);
    keep_rows(*both[i], int(fine[i].size()), got);
    expect_same_trace(got, want, "sequence " + std::to_string(i));
  }
}

// Four prompts of different lengths (and different token budgets, so that
// sequences leave at different steps, and two that join two steps late)
// stepped together by one StepLoop over `group`, against generate() alone:
// the same tokens and counters. Where the group batches its LM head
// (batched_head), every step makes one LM-head launch for all its sequences
// (the rows fit one call here); where it batches the MTP head (batched_mtp),
// each chained draft step one MTP launch. block_size 0: the default.
// drafter: each sequence's own drafter (the Gemma 4 assistant), alone and
// together, in place of `draft` (then DraftKind::None).
using DrafterMaker = std::function<std::unique_ptr<Drafter>(ModelRuntime&)>;
inline void check_stepped_generations(const RuntimeMaker& alone, SequenceGroup& group, const std::vector<int32_t>& prompt,
                                      DraftKind draft, int block_size = 0, bool batched_head = true,
                                      bool batched_mtp = true, const DrafterMaker& drafter = {}) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t len : {prompt.size(), size_t(1), size_t(3), prompt.size() / 2 + 1})
    prompts.emplace_back(prompt.begin(), prompt.begin() + long(std::min(len, prompt.size())));
  GenerateOptions o;
  o.draft = draft;
  o.ignore_eos = true;
  if (block_size > 0) o.block_size = block_size;
  const int cap = runtime_capacity(int(prompt.size()), 24, kMaxBlockSize);
  std::vector<GenerateResult> solo;
  for (size_t i = 0; i < prompts.size(); ++i) {
    o.max_new_tokens = 12 + 4 * int(i);
    auto rt = alone(cap);
    solo.push_back(drafter ? generate_with_drafter(*rt, drafter(*rt), prompts[i], o) : generate(*rt, prompts[i], o));
  }
  std::vector<std::unique_ptr<ModelRuntime>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back(group.add_sequence(cap));
  const StepWork before = group.step_work();
  // The host's waits for the device's results, where the backend counts them (CUDA).
  auto host_syncs = [&] {
    int64_t n = 0;
    for (const auto& s : seqs)
      if (const RuntimeProbe* p = find_probe(*s)) n += p->host_syncs();
    return n;
  };
  const int64_t syncs_before = host_syncs();
  StepLoop loop(group);
  int64_t rows = 0, step_reports = 0, max_sequences = 0;
  loop.on_step = [&](const StepReport& r) {
    rows += r.rows;
    ++step_reports;
    max_sequences = std::max<int64_t>(max_sequences, r.sequences);
  };
  std::vector<int> ids(prompts.size(), -1);
  for (int step = 0; step < 3 || loop.running() > 0; ++step) {
    for (size_t i = 0; i < prompts.size(); ++i)
      if (ids[i] < 0 && (i < 2 || step == 2)) {
        o.max_new_tokens = 12 + 4 * int(i);
        ids[i] = loop.add(*seqs[i], prompts[i], o, drafter ? drafter(*seqs[i]) : nullptr);
      }
    loop.step();
  }
  std::vector<GenerateResult> together(prompts.size());
  for (StepLoop::Finished& f : loop.take_finished()) {
    ASSERT_FALSE(f.error);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == f.id) together[i] = std::move(f.result);
  }
  int64_t rows_alone = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = std::string(drafter ? "drafter" : draft_kind_name(draft)) + " K=" + std::to_string(o.block_size) +
                             " prompt " + std::to_string(i);
    EXPECT_EQ(together[i].tokens, solo[i].tokens) << what;
    const VerifyCounters &x = together[i].stats.counters, &y = solo[i].stats.counters;
    EXPECT_EQ(x.rounds, y.rounds) << what;
    EXPECT_EQ(x.accepted, y.accepted) << what;
    EXPECT_EQ(x.accepted_at, y.accepted_at) << what;
    EXPECT_EQ(x.rows_projected, y.rows_projected) << what;
    EXPECT_EQ(x.head_calls, y.head_calls) << what;
    EXPECT_EQ(together[i].stats.mtp_work.entries, solo[i].stats.mtp_work.entries) << what;
    EXPECT_EQ(together[i].stats.mtp_work.argmax_rows, solo[i].stats.mtp_work.argmax_rows) << what;
    rows_alone += int64_t(prompts[i].size()) + y.drafted + y.rounds;  // the prompt, then every round's rows
  }
  EXPECT_EQ(rows, rows_alone);  // every row ran once
  EXPECT_EQ(step_reports, loop.steps());
  EXPECT_EQ(max_sequences, int64_t(prompts.size()));  // all four shared steps
  const StepWork after = group.step_work();
  // At most two per step: the head's tokens and the MTP chain's drafts
  // (the head counters come back with the tokens).
  EXPECT_LE(host_syncs() - syncs_before, 2 * loop.steps());
  const int64_t head = after.lm_head_launches - before.lm_head_launches;
  if (batched_head)
    EXPECT_EQ(head, loop.steps());  // one LM-head launch per step for every sequence in it
  else
    EXPECT_GE(head, loop.steps());
  // CUDA rolls every round of a step back in one launch.
  if (batched_head && std::string(group.backend_name()) == "cuda") {
    EXPECT_LE(after.rollback_launches - before.rollback_launches, loop.steps());
  }
  if (batched_mtp) {
    if (draft == DraftKind::Mtp) {
      const int K = o.block_size > 0 ? o.block_size : default_block_size(group.info().mtp_layers);
      EXPECT_LE(after.mtp_draft_launches - before.mtp_draft_launches, loop.steps() * (K - 1));
      EXPECT_LE(after.mtp_forward_launches - before.mtp_forward_launches, loop.steps());
    }
  }
}

}  // namespace nextn::test
