// The target as the engine steps it (docs/engine.md): several sequences of
// one model over one copy of the weights. Each sequence is a ModelRuntime
// (its own KV cache, GDN state, MTP state and counters); the group runs the
// work of one engine step for all of them at once where the backend can:
// the trunk forward over every sequence's new rows, the LM-head argmax over
// every row that needs a token, the MTP head's pairing forward and its draft
// chain (each chained step one call for every sequence still drafting).
//
// Exactness: every *_together call leaves each sequence exactly (bit for
// bit) as the same call on that sequence alone would: the matrix products
// are batch-invariant (row j of a many-row product equals a one-row product)
// and attention and the GDN recurrence run per sequence.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "model/kv_pool.h"
#include "model/runtime.h"

namespace nextn {

class Qwen35Checkpoint;

// Rows [first, first + count) of a sequence's last target forward.
struct SequenceRows {
  ModelRuntime* sequence = nullptr;
  int first = 0;
  int count = 0;
};

// What a group's step calls launched, counted by the code that runs them:
// a backend that batches a call counts one launch for all its sequences, the
// per-sequence fallback one per sequence. Cumulative since construction.
struct StepWork {
  int64_t lm_head_launches = 0;     // LM-head projections of target rows (head_argmax_together)
  int64_t mtp_forward_launches = 0; // MTP pairing forwards (mtp_forward_together)
  int64_t mtp_draft_launches = 0;   // MTP draft-chain steps, the first draft's argmax included (mtp_draft_together)
  int64_t rollback_launches = 0;    // target rollbacks that undid rows (rollback_together)
  // The launches since `before`.
  StepWork since(const StepWork& before) const {
    return {lm_head_launches - before.lm_head_launches, mtp_forward_launches - before.mtp_forward_launches,
            mtp_draft_launches - before.mtp_draft_launches, rollback_launches - before.rollback_launches};
  }
};

class SequenceGroup {
 public:
  virtual ~SequenceGroup() = default;
  virtual const char* backend_name() const = 0;
  virtual ModelInfo info() const = 0;
  // How many sequences a caller should keep at once: a backend without
  // multi-sequence support gives 1 (each sequence there holds its own copy
  // of the weights).
  virtual int max_sequences() const = 0;
  // True when forward_together runs one trunk forward over all the rows;
  // false when it runs the sequences' forwards one after another.
  virtual bool shares_forwards() const = 0;
  // A fresh sequence with caches of `max_tokens` positions. The group must
  // outlive it; destroying it frees its caches. On CUDA not while another
  // thread runs one of the group's sequences: the constructor synchronizes
  // the device, which fails during that thread's graph capture (the server
  // therefore makes every slot at start, server/engine.cpp).
  virtual std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) = 0;
  // target_forward(tokens[i]) on sequences[i] for every i: distinct
  // sequences of this group, each with at least one token. When
  // shares_forwards(), every sequence is checked (token ids, capacity)
  // before any changes, so an Error leaves all of them as they were;
  // otherwise the forwards run in order and an Error leaves the sequences
  // before the failing one forwarded.
  virtual void forward_together(std::span<ModelRuntime* const> sequences,
                                std::span<const std::span<const int32_t>> tokens) = 0;

  // The argmax of every listed row (distinct sequences, rows inside their
  // last forward) into out, concatenated in list order: what
  // head_argmax(first, count, ...) on each sequence gives. The
  // default runs that per sequence.
  virtual void head_argmax_together(std::span<const SequenceRows> rows, int32_t* out);
  // mtp_forward(next_tokens[i], 0) on the MTP head of sequences[i]
  // (ModelRuntime::mtp()) for every i (distinct sequences with a head, at
  // least one token each). The default runs it per sequence.
  virtual void mtp_forward_together(std::span<ModelRuntime* const> sequences,
                                    std::span<const std::span<const int32_t>> next_tokens);
  // mtp_draft(n[i], out + sum of n[j < i]) on the MTP head of sequences[i]
  // for every i:
  // draft step j runs once for every sequence with n[i] > j. The default
  // runs each sequence's chain on its own.
  virtual void mtp_draft_together(std::span<ModelRuntime* const> sequences, std::span<const int> n, int32_t* out);
  // target_rollback(keep[i]) on sequences[i] for every i (distinct
  // sequences, keep inside their last forward). When shares_forwards(),
  // every call is checked before any sequence changes. The default runs
  // them one after another, one launch each (CUDA: one launch for all).
  virtual void rollback_together(std::span<ModelRuntime* const> sequences, std::span<const int> keep);
  // Waits until the device has run the work queued for `sequences` (a step
  // without a head, only prompt chunks: nothing else would wait for them,
  // and the host would queue chunk after chunk ahead of the device, which a
  // request joining later then waits behind). The default does nothing: the
  // CPU backend's calls return when their work is done.
  virtual void wait_for(std::span<ModelRuntime* const> sequences);

  // The widest forward that a prompt may be cut into without changing a
  // bit: a prompt forwarded in chunks of at most this many rows leaves the
  // same caches however the chunks are cut (the CPU: any width, every op is
  // batch-invariant; CUDA Qwen3.5 in bf16: 64, since a wider forward takes
  // the prefill GEMMs for all but its last 64 rows). The engine shrinks a
  // prompt's chunk to a step's cost budget only within it
  // (engine/prefill_budget.h). The default: 0 (never shrunk).
  virtual int chunk_invariant_rows() const { return 0; }

  StepWork step_work() const { return step_work_; }
  // The pools the sequences' KV blocks come from (model/kv_pool.h), which
  // admission promises blocks against; empty where each sequence holds its
  // own caches (the serial and solo groups).
  virtual std::vector<KvPoolUse> kv_pools() { return {}; }

  // A test seam (docs/engine.md, "Failures"), no product setting: the
  // allocator that the reservations of this group's sequences
  // (ModelRuntime::reserve_step) draw from from now on; nullptr: the
  // backend's default. A substitute hands out the default's blocks (a test
  // refuses chosen requests and passes the others on) and outlives the
  // group's sequences. The default throws: the group reserves nothing.
  virtual void set_allocator(Allocator* allocator);

 protected:
  StepWork step_work_;  // incremented by the calls above (and a backend's overrides) as they launch
};

// CPU and CUDA: one weight load, shared forwards (CUDA: up to 32 sequences,
// backend/cuda/qwen35_group.cpp). A CUDA request in a build without the CUDA
// backend gets the serial group, whose first sequence reports it.
std::unique_ptr<SequenceGroup> make_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind,
                                                   const RuntimeOptions& options = {});
// The fallback make_sequence_group gives a backend without multi-sequence
// support (sequences from make_runtime, forwards one after another); any
// backend may use it (tests run it on the CPU).
std::unique_ptr<SequenceGroup> make_serial_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind,
                                                          const RuntimeOptions& options = {});
// The serial group of any model family: sequences from `factory` (which
// owns or outlives the weights), facts from `info`.
std::unique_ptr<SequenceGroup> make_serial_sequence_group(RuntimeFactory factory, ModelInfo info,
                                                          const std::string& backend_name);
// The group of one existing sequence (`nextn generate`, the benchmarks, the
// tests: a batch of one through the engine). It holds no others
// (max_sequences 1; add_sequence throws); `sequence` must outlive it.
std::unique_ptr<SequenceGroup> make_solo_group(ModelRuntime& sequence);

// What a group's calls check of the sequences they are given: each one of
// the group's own (a `Seq` for which `belongs` holds), each listed once;
// Error ("internal: ...") naming `what` otherwise. Used by every backend's
// group.
template <typename Seq, typename Belongs>
std::vector<Seq*> own_sequences(std::span<ModelRuntime* const> sequences, const char* what, Belongs&& belongs) {
  std::vector<Seq*> seqs;
  seqs.reserve(sequences.size());
  for (ModelRuntime* rt : sequences) {
    auto* s = dynamic_cast<Seq*>(rt);
    if (s == nullptr || !belongs(*s)) fail("internal: {} over a sequence of another group", what);
    if (std::find(seqs.begin(), seqs.end(), s) != seqs.end()) fail("internal: {} lists one sequence twice", what);
    seqs.push_back(s);
  }
  return seqs;
}
// The same, for a call with another list of `lists` entries, one per sequence (at least one).
template <typename Seq, typename Belongs>
std::vector<Seq*> own_sequences(std::span<ModelRuntime* const> sequences, size_t lists, const char* what,
                                Belongs&& belongs) {
  if (sequences.size() != lists || sequences.empty())
    fail("internal: {} of {} sequences and {} lists", what, sequences.size(), lists);
  return own_sequences<Seq>(sequences, what, std::forward<Belongs>(belongs));
}

}  // namespace nextn
