// The Gemma 4 assistant as a Drafter (speculative/drafter.h). It keeps no
// cache of its own: each round's first draft pairs the bonus token with the
// target's hidden row that predicted it (the last kept row of the target's
// last forward) and reads the target's K/V; further drafts chain the
// assistant's post_projection output. The query position stays at the
// bonus's position (the target's length) for the whole round. Sampled
// drafting (Drafter::draft_logits) runs the same chain, continuing each
// step with the sampled token, and hands out the assistant head's logits.
// The chain (model/gemma4_target.h) runs where the target does: on its
// device for a CUDA target (reading its caches in place), else on the CPU.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/gemma4_assistant.h"
#include "speculative/drafter.h"

namespace nextn {

class Gemma4Checkpoint;
class Gemma4Target;

class Gemma4AssistantDrafter final : public Drafter {
 public:
  explicit Gemma4AssistantDrafter(std::unique_ptr<AssistantChain> chain);
  // The CPU assistant over `rt` (a Gemma 4 runtime of either backend; Error otherwise).
  Gemma4AssistantDrafter(ModelRuntime& rt, CpuGemma4Assistant& assistant);
  const char* name() const override { return "assistant"; }
  void begin(std::span<const int32_t> prompt, int32_t first) override;
  void propose(int n, std::vector<int32_t>& out) override;
  void commit(std::span<const int32_t> drafts, int accepted, int32_t next) override;
  void draft_logits(float* out) override;   // the chain's next logits (the round's first: from the bonus)
  void draft_step(int32_t token) override;  // continues the chain with `token`
  const void* batch_key() const override { return chain_->batch_key(); }
  // Every drafter's chain started at its bonus, then their steps together (AssistantChain::propose_together).
  void propose_together(std::span<Drafter* const> drafters, std::span<const int> n,
                        std::span<std::vector<int32_t>* const> out) override;

 private:
  std::unique_ptr<AssistantChain> chain_;
  int32_t bonus_ = 0;
  bool in_round_ = false;  // sampled drafting: the round's chain has started
};

// An assistant checkpoint opened and checked against its target, from which
// each sequence (a server job) makes its own drafter. The assistant's
// scratch is not for two callers at once: the drafters of one
// AssistantModel run on one thread (the engine's step loop).
class AssistantModel {
 public:
  // Errors (one line) for a directory that is not a Gemma 4 assistant, or one
  // that does not fit the target whose config is `target`.
  AssistantModel(const std::string& dir, const Gemma4TextConfig& target, int cpu_threads = 0);
  ~AssistantModel();
  // `rt` must be a Gemma 4 runtime of the target (Error otherwise). The
  // drafter runs on rt's device when it has one (Gemma4Target::device_assistant).
  std::unique_ptr<Drafter> drafter(ModelRuntime& rt);
  // The CPU assistant over rt whatever its backend (the reference the CUDA
  // assistant's tests compare with).
  std::unique_ptr<Drafter> cpu_drafter(ModelRuntime& rt);
  // Steps the CPU assistant has run (CpuGemma4Assistant::steps; 0 before its first drafter).
  int64_t cpu_steps() const { return assistant_ ? assistant_->steps() : 0; }

 private:
  std::unique_ptr<const Gemma4Checkpoint> checkpoint_;
  Gemma4TextConfig target_;
  int cpu_threads_ = 0;
  std::unique_ptr<CpuGemma4Assistant> assistant_;  // made at the first CPU drafter
};

// Teacher-forced first-step drafts (`nextn draft-trace --draft DIR`): out[p]
// is the guess for ids[p+2] that a round's first draft makes with ids[p+1]
// as its bonus after the target held ids[0..p] (its hidden row p, its K/V
// of positions 0..p), for p in [0, ids.size() - 2]. `rt` is a fresh Gemma 4
// runtime of at least ids.size() - 1 positions; it takes one one-token
// forward per id (the assistant reads the last row only; the rows are batch
// invariant, so they equal any forward's) and is left holding ids[0..n-2].
std::vector<int32_t> assistant_draft_trace(ModelRuntime& rt, AssistantModel& assistant, std::span<const int32_t> ids);

// Error (one line) unless `dir`'s config.json says gemma4_assistant.
void check_assistant_dir(const std::string& dir);

// True when `draft` (a --draft value) names a directory: a drafter checkpoint.
bool is_drafter_checkpoint(const std::string& draft);

// The default block size with an assistant: 4 (three drafts per round).
constexpr int kAssistantBlockSize = 4;

}  // namespace nextn
