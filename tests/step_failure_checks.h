// All-or-nothing steps (docs/engine.md, "Failures"), the checks the CPU
// group (tests/test_step_failures.cpp) and the CUDA group
// (tests/test_cuda_batch.cpp) pass: a sequence that cannot proceed in a step
// (its reservation refused by the allocator the test substitutes, a bad
// token id, a cache overrun) finishes alone with the error, every other
// sequence's tokens equal its solo run, and the failed slot, reset, serves
// a request correctly.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/step_loop.h"
#include "model/batch_runtime.h"

namespace nextn::test {

// Passes requests on to `base` and refuses a chosen one as an out-of-memory
// would (an Error naming the use): the seam of SequenceGroup::set_allocator.
class RefusingAllocator final : public Allocator {
 public:
  explicit RefusingAllocator(Allocator& base) : base_(base) {}
  // Refuses the n-th request from now (1: the next one).
  void refuse(int n) { refuse_at_ = requests_ + n; }
  // Or every request it says yes to.
  std::function<bool(size_t bytes, const std::string& what)> refuse_if;
  void* allocate(size_t bytes, const char* what) override {
    if (++requests_ == refuse_at_ || (refuse_if && refuse_if(bytes, what))) {
      refused.emplace_back(what);
      fail("out of memory (planted) allocating {} bytes for {}", bytes, what);
    }
    return base_.allocate(bytes, what);
  }
  void release(void* p, size_t bytes) noexcept override { base_.release(p, bytes); }
  std::vector<std::string> refused;  // the uses refused, in order

 private:
  Allocator& base_;
  int64_t requests_ = 0, refuse_at_ = -1;
};

// Proposes its drafts from `truth` (the plain greedy output), except an id
// past the vocabulary as the first draft of its second round.
class BadTokenDrafter final : public Drafter {
 public:
  BadTokenDrafter(std::vector<int32_t> truth, int vocab) : truth_(std::move(truth)), vocab_(vocab) {}
  const char* name() const override { return "bad-token"; }
  void begin(std::span<const int32_t>, int32_t) override { at_ = 1; }
  void propose(int n, std::vector<int32_t>& out) override {
    out.resize(size_t(n));
    for (int i = 0; i < n; ++i) out[size_t(i)] = size_t(at_ + i) < truth_.size() ? truth_[size_t(at_ + i)] : 0;
    if (++rounds_ == 2 && n > 0) out[0] = vocab_ + 7;
  }
  void commit(std::span<const int32_t>, int accepted, int32_t) override { at_ += accepted + 1; }

 private:
  std::vector<int32_t> truth_;
  int vocab_, at_ = 1, rounds_ = 0;
};

// One sequence of a failure scenario.
struct StepSequence {
  std::vector<int32_t> prompt;
  int join = 0;      // the step before which it is added
  int capacity = 0;  // its slot's positions (0: enough)
  bool bad_drafter = false;
};

// `n` tokens cycled from `p`, starting at `from`.
inline std::vector<int32_t> cycled(const std::vector<int32_t>& p, size_t n, size_t from = 0) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back(p[(from + i) % p.size()]);
  return v;
}

// The sequences through one StepLoop over `group` (before_step(step) runs
// before each step), every sequence with options `o`; `failing` must fail
// (its error containing `failing_error`), every other one equal its solo run
// (alone(capacity) + generate). Then the failed slots, reset by the loop,
// run their requests again (on a slot of enough positions, else as they
// were) and equal their solo runs.
inline void check_fails_alone(const std::function<std::unique_ptr<ModelRuntime>(int)>& alone, SequenceGroup& group,
                              const std::vector<StepSequence>& seqs, const GenerateOptions& o,
                              const std::vector<size_t>& failing, const std::string& failing_error,
                              const std::function<void(int)>& before_step = {}) {
  const int enough = runtime_capacity(80, o.max_new_tokens, kMaxBlockSize);
  const int vocab = group.info().vocab_size;
  std::vector<GenerateResult> solo;
  for (const StepSequence& s : seqs) {
    auto rt = alone(enough);
    solo.push_back(generate(*rt, s.prompt, o));
  }
  std::vector<std::unique_ptr<ModelRuntime>> slots;
  for (const StepSequence& s : seqs) slots.push_back(group.add_sequence(s.capacity > 0 ? s.capacity : enough));
  StepLoop loop(group);
  std::vector<int> ids(seqs.size(), -1);
  std::vector<StepLoop::Finished> done;
  for (int step = 0; step < 4 || loop.running() > 0; ++step) {
    for (size_t i = 0; i < seqs.size(); ++i)
      if (ids[i] < 0 && seqs[i].join == step) {
        GenerateOptions so = o;
        std::unique_ptr<Drafter> drafter;
        if (seqs[i].bad_drafter) {
          drafter = std::make_unique<BadTokenDrafter>(solo[i].tokens, vocab);
          so.draft = DraftKind::None;
        }
        ids[i] = loop.add(*slots[i], seqs[i].prompt, so, std::move(drafter));
      }
    if (before_step) before_step(step);
    loop.step();
    for (auto& f : loop.take_finished()) done.push_back(std::move(f));
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    const StepLoop::Finished* f = nullptr;
    for (const auto& d : done)
      if (d.id == ids[i]) f = &d;
    ASSERT_NE(f, nullptr);
    const bool fails = std::find(failing.begin(), failing.end(), i) != failing.end();
    if (!fails) {
      EXPECT_FALSE(f->error);
      EXPECT_EQ(f->result.tokens, solo[i].tokens);
      continue;
    }
    ASSERT_TRUE(f->error);
    try {
      std::rethrow_exception(f->error);
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(failing_error), std::string::npos) << e.what();
    }
    EXPECT_EQ(slots[i]->target_length(), 0);  // reset by the loop
    if (const MtpHead* head = slots[i]->mtp()) {  // Gemma 4 has none
      EXPECT_EQ(head->mtp_length(), 0);
    }
    // The slot serves again (a slot too small for the request: a fresh one of enough positions).
    auto again = seqs[i].capacity > 0 ? group.add_sequence(enough) : std::move(slots[i]);
    StepLoop retry(group);
    const int id = retry.add(*again, seqs[i].prompt, o);
    while (retry.running() > 0) retry.step();
    auto fin = retry.take_finished();
    ASSERT_EQ(fin.size(), 1u);
    EXPECT_EQ(fin[0].id, id);
    EXPECT_FALSE(fin[0].error);
    EXPECT_EQ(fin[0].result.tokens, solo[i].tokens);
  }
}

// The allocator refuses the first request of a step's reservations, which
// the second sequence makes: mid-prefill (it joins with a 70-token prompt
// beside a sequence decoding) and, where decode rows grow a sequence's
// buffers (the CPU: a 1-token prompt whose first verify block has K rows),
// mid-decode. The refused use must contain `refused_use`.
inline void check_refused_reservations(const std::function<std::unique_ptr<ModelRuntime>(int)>& alone,
                                       SequenceGroup& group, Allocator& base, const std::vector<int32_t>& prompt,
                                       bool mid_decode, const std::string& refused_use) {
  GenerateOptions o;
  o.draft = group.info().mtp_layers > 0 ? DraftKind::Mtp : DraftKind::None;
  o.ignore_eos = true;
  o.max_new_tokens = 8;
  RefusingAllocator refusing(base);
  group.set_allocator(&refusing);
  {
    SCOPED_TRACE("mid-prefill");
    // Sequence 0 decodes from step 0; 1-3 join at step 2 (1 and 2 with long prompts).
    const std::vector<StepSequence> seqs = {
        {prompt, 0}, {cycled(prompt, 70, 1), 2}, {cycled(prompt, 70, 2), 2}, {cycled(prompt, 3, 3), 2}};
    check_fails_alone(alone, group, seqs, o, {1}, "planted", [&](int step) {
      if (step == 2) refusing.refuse(1);
    });
    ASSERT_EQ(refusing.refused.size(), 1u);
    EXPECT_NE(refusing.refused[0].find(refused_use), std::string::npos) << refusing.refused[0];
  }
  if (mid_decode && o.draft == DraftKind::Mtp) {
    SCOPED_TRACE("mid-decode");
    refusing.refused.clear();
    // All join at step 0; sequence 1's prompt is one token, its first verify block (step 1) K rows.
    const std::vector<StepSequence> seqs = {
        {cycled(prompt, 70, 1), 0}, {cycled(prompt, 1, 2), 0}, {prompt, 0}, {cycled(prompt, 3, 3), 0}};
    check_fails_alone(alone, group, seqs, o, {1}, "planted", [&](int step) {
      if (step == 1) refusing.refuse(1);
    });
    ASSERT_EQ(refusing.refused.size(), 1u);
  }
  group.set_allocator(nullptr);
}

// A sequence whose slot is too small for its request (it overruns mid-decode)
// and one whose drafter proposes an id past the vocabulary both fail alone.
inline void check_bad_rows_fail_alone(const std::function<std::unique_ptr<ModelRuntime>(int)>& alone,
                                      SequenceGroup& group, const std::vector<int32_t>& prompt) {
  GenerateOptions o;
  o.ignore_eos = true;
  o.max_new_tokens = 10;
  o.draft = group.info().mtp_layers > 0 ? DraftKind::Mtp : DraftKind::None;
  {
    SCOPED_TRACE("capacity");
    const std::vector<StepSequence> seqs = {
        {prompt, 0}, {cycled(prompt, 4, 1), 0, 4 + 5}, {cycled(prompt, 5, 2), 1}};  // 1: 5 positions past its prompt
    check_fails_alone(alone, group, seqs, o, {1}, "capacity");
  }
  {
    SCOPED_TRACE("bad token");
    o.draft = DraftKind::None;  // the drafted ones: plain greedy drafting its own truth
    const std::vector<StepSequence> seqs = {
        {prompt, 0}, {cycled(prompt, 6, 3), 0, 0, /*bad_drafter=*/true}, {cycled(prompt, 5, 2), 1}};
    check_fails_alone(alone, group, seqs, o, {1}, "outside the vocabulary");
  }
}

}  // namespace nextn::test
