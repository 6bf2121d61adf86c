// The MTP head of a target sequence (docs/engine.md "Interfaces"): the
// draft model that Qwen3.5 checkpoints carry beside the trunk. A runtime
// whose checkpoint has one hands it out through ModelRuntime::mtp(); the
// CPU and CUDA Qwen3.5 sequences implement both interfaces, so the head
// reads the trunk's hidden rows in place. Gemma 4 has none (it drafts with
// a separate assistant checkpoint: engine/drafter.h).
//
// The methods keep their mtp_ prefix: a class implementing both interfaces
// has a target_forward and an mtp_forward, a target_rollback and an
// mtp_rollback, a head_work and an mtp_work, and the prefix says which
// sequence a call moves.
//
// Exactness: as ModelRuntime's (model/runtime.h): row j of a multi-row
// call equals a one-row call with the same prefix, bit for bit.
#pragma once
#include <cstdint>
#include <span>

namespace nextn {

class ModelRuntime;

// What the MTP head computed, counted where the work runs: entries its
// decoder layer processed (mtp_forward rows and chained mtp_step / mtp_draft
// steps) and the rows its LM-head argmax projected. Cumulative since
// construction or the runtime's reset().
struct MtpWork {
  int64_t entries = 0;        // MTP decoder-layer rows run (forward rows + chained steps)
  int64_t chained_steps = 0;  // of those, chained draft steps (mtp_step or inside mtp_draft)
  int64_t argmax_rows = 0;    // MTP logits rows projected for an argmax
};

class MtpHead {
 public:
  virtual ~MtpHead() = default;

  // Entries held in the MTP cache (entry p pairs token p+1 with the
  // target's hidden row of position p).
  virtual int mtp_length() const = 0;
  // Appends MTP entries p = mtp_length() ... for i in [0, n): entry p pairs
  // next_tokens[i] (token p+1) with target hidden row first_row + i of the
  // last target_forward.
  virtual void mtp_forward(std::span<const int32_t> next_tokens, int first_row) = 0;
  // One chained draft step: entry p pairs `token` with the MTP's own output
  // hidden of the previous entry.
  virtual void mtp_step(int32_t token) = 0;
  // Argmax of the last `count` entries' logits (most recent call only).
  virtual void mtp_argmax(int count, int32_t* out) = 0;
  virtual void mtp_rollback(int length) = 0;
  // n chained drafts: out[0] = argmax of the last entry of the most recent
  // MTP call; out[i] = argmax after mtp_step(out[i-1]). Appends n-1 entries.
  // The default runs that loop from the host; a backend may chain it on the
  // device with one copy back.
  virtual void mtp_draft(int n, int32_t* out);
  // Full logits (vocab floats) of the last entry of the most recent MTP
  // call, for drafting by sampling (engine/step_loop.h,
  // speculative/acceptance.h). Uncounted: not argmax work. A head that
  // cannot give them throws Error (it cannot sample drafts).
  virtual void mtp_logits(float* out) = 0;
  // Counters of the MTP head's work so far (see MtpWork); the runtime's
  // reset() clears them.
  virtual MtpWork mtp_work() const = 0;

  // ---- draft vocabulary (docs/speculative.md §10) ----
  // The MTP head's own projections (mtp_argmax, mtp_draft, mtp_logits)
  // cover token ids [0, draft_vocab()) only: drafts are argmaxes over that
  // prefix, and mtp_logits writes -inf past it, so sampled drafts are drawn
  // from exactly the distribution it hands out. The target's head (head_*)
  // always covers the whole vocabulary: the output stays exact, only
  // acceptance changes. Byte-level BPE ids follow merge order, so a prefix
  // holds the frequent tokens and needs no gather table. Kept across reset().
  virtual int draft_vocab() const = 0;
  // n in [1, vocab): the prefix [0, n); 0 or n >= vocab: the whole
  // vocabulary (a larger n is clamped, so one flag value fits models of any
  // vocabulary). Error for n < 0 (effective_draft_vocab); a head that
  // cannot restrict its drafts throws for any n that would.
  virtual void set_draft_vocab(int n) = 0;
};

// The draft vocabulary set_draft_vocab(n) gives a model of `vocab` ids:
// n in [1, vocab) stays, 0 or n >= vocab is vocab; Error naming --draft-vocab
// for n < 0.
int effective_draft_vocab(int n, int vocab);

// rt.mtp(), or Error naming the backend when the sequence has no MTP head
// (callers check ModelInfo::mtp_layers first and report the checkpoint;
// this is the internal backstop).
MtpHead& mtp_of(ModelRuntime& rt);

}  // namespace nextn
