// The engine step (docs/engine.md): one thread steps every running sequence
// of a SequenceGroup together. A step:
//   rows      each sequence's new rows: its prompt (prefill), one decode
//             row, or a verify block [bonus, drafts];
//   trunk     one forward over all of them (forward_together);
//   head      the argmax of every row that needs a token, one LM-head call
//             for all greedy sequences (the HeadStage); sampled sequences
//             read their rows' logits;
//   accept    per sequence on the host: the accepted drafts and the next
//             token (speculative/acceptance.h), committed to its sink;
//   rollback  each sequence keeps its accepted rows;
//   draft     the MTP head pairs the committed tokens with their rows for
//             every MTP sequence in one call, then drafts the next step's
//             tokens, each chained step one call for every sequence still
//             drafting; the oracle and the Gemma 4 assistant draft per sequence.
//             Before the pairing, the next step's block size of every
//             BlockPolicy::Auto sequence is chosen (engine/block_choice.h); one
//             that will not draft (K = 1) skips its pairing.
// `nextn generate` is a batch of one through it (engine/generate.h); the
// server adds and removes sequences between steps (server/engine.h).
//
// Every sequence computes exactly what it would alone: the group's calls are
// batch-invariant, so which neighbours share a step changes only the time.
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/block_choice.h"
#include "engine/head_stage.h"
#include "model/batch_runtime.h"
#include "speculative/drafter.h"
#include "speculative/generation.h"

namespace nextn {

// What one step did (for metrics).
struct StepReport {
  int sequences = 0;     // sequences in the step
  int rows = 0;          // trunk rows over all of them
  int prefill_rows = 0;  // of those, prompt rows
  int prompt_budget = -1;  // the prompt rows the stall budget allowed (-1: no budget applied)
  double prompt_scale = 0;  // the cost model's prompt_scale() the budget used (where one applied)
  double ms = 0;         // wall time of the step
  // Its parts (host wall time; device work lands in the part that waits for it):
  double forward_ms = 0;  // the reservation and the trunk forward's launches
  double head_ms = 0;     // the LM head, acceptance and the next block sizes
  double pairing_ms = 0;  // rollback and the MTP pairing
  double draft_ms = 0;    // the next round's drafts
  std::vector<int> chosen_k;  // the block sizes the chooser set for the next step (auto sequences)
  const BlockChoiceReport* choice = nullptr;  // its inputs, when it chose
};

class StepLoop {
 public:
  // head: the head stage (nullptr: BatchedHead, the product's). Both must outlive the loop.
  explicit StepLoop(SequenceGroup& group, HeadStage* head = nullptr);
  ~StepLoop();
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // Adds a sequence on `slot`, a fresh sequence of the group (target_length
  // 0), from the next step on. Checks the request first (Error, nothing
  // added). drafter: one of its own (the Gemma 4 assistant), used instead
  // of options.draft; oracle_truth: the plain greedy output for the oracle.
  // Returns its id. A request for no tokens finishes at once.
  int add(ModelRuntime& slot, std::span<const int32_t> prompt, const GenerateOptions& options,
          std::unique_ptr<Drafter> drafter = nullptr, std::vector<int32_t> oracle_truth = {});

  // One step over every running sequence. A sequence that finishes (budget,
  // EOS, its sink said stop) leaves the batch. Before the step's first
  // launch every sequence's rows are checked and the memory they need is
  // reserved (ModelRuntime::reserve_step): a sequence that cannot proceed
  // (bad token ids, over its capacity, out of memory) finishes alone with the
  // error, its slot reset, and the others run the step as if it had never
  // been there. When the step fails after its first launch (a device fault,
  // an error inside a call), every sequence in it finishes with the error
  // (docs/engine.md, "Failures"); the caller reads them from take_finished().
  void step();
  // Sequences still running.
  int running() const { return int(runs_.size()); }

  struct Finished {
    int id = 0;
    GenerateResult result;      // complete stats; tokens as committed (also on an error)
    std::exception_ptr error;   // set when the sequence failed
  };
  // The sequences that finished since the last call.
  std::vector<Finished> take_finished();

  std::function<void(const StepReport&)> on_step;  // after each step
  int64_t steps() const { return steps_; }

  // The cost model that chooses the block size of BlockPolicy::Auto
  // sequences (probe_step_costs seeds it before the first request).
  CostModelChooser& cost_model() { return cost_model_; }
  // A test seam: another chooser in its place (nullptr: the cost model's back).
  void set_block_chooser(BlockChooser* chooser) { chooser_ = chooser ? chooser : &cost_model_; }
  // Chunked prefill within a cost budget (engine/prefill_budget.h): while
  // sequences decode, a step's prompt rows keep its predicted time within
  // `stall` times the decode rows' alone (0: every prompt its whole chunk).
  // Error for a factor in (0, 1].
  void set_prefill_stall(double stall);

 private:
  struct Run;
  void fail_all(std::exception_ptr error);
  void cut_prompts(StepReport& report);  // each prompt's rows this step (its next chunk, within the stall budget)
  void reserve();  // the step's reservation: fails alone the sequences that cannot proceed
  void fail_alone(Run& run, std::exception_ptr error);
  void finish(Run& run);
  // The parts of a step (step_loop.cpp).
  void pick_tokens(std::vector<Run*>& greedy);
  void commit_round(Run& run, std::span<const int32_t> picks);
  void draft_next(std::span<Run* const> runs);
  void choose_blocks(std::span<Run* const> runs, StepReport& report);

  SequenceGroup& group_;
  HeadStage* head_;
  std::unique_ptr<HeadStage> batched_;
  CostModelChooser cost_model_;
  BlockChooser* chooser_ = &cost_model_;
  std::vector<std::unique_ptr<Run>> runs_;
  std::vector<Finished> finished_;
  int next_id_ = 0;
  int64_t steps_ = 0;
  double prefill_stall_ = 0;
};

}  // namespace nextn
