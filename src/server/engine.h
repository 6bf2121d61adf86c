// The server's engine: one thread owns the model and runs the engine step
// (engine/step_loop.h) over every running request. Between steps it admits
// queued jobs first come first served, up to limits.max_batch at once, each
// on a sequence slot of one SequenceGroup (model/batch_runtime.h); a
// finished or cancelled job gives its slot back. Greedy and sampled requests,
// plain or speculative, share the same steps; each computes exactly what it
// would alone (`nextn generate` is the same step with a batch of one). Text
// is decoded incrementally (StreamDecoder) and cut at stop strings
// (StopMatcher) as tokens are committed; HTTP threads only enqueue and read
// the job's events. The engine is family-neutral: it runs any SequenceGroup
// (Qwen3.5: the backend's group; Gemma 4: a serial group over its runtime
// factory), with the MTP head, or a drafter made per job (the Gemma 4
// assistant).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "engine/step_loop.h"
#include "model/runtime.h"
#include "server/job.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace nextn::server {

// A job's own drafter on its sequence (the Gemma 4 assistant's AssistantModel::drafter).
using DrafterFactory = std::function<std::unique_ptr<Drafter>(ModelRuntime& sequence)>;

struct EngineOptions {
  BackendKind backend = BackendKind::Cpu;  // the Qwen3.5 constructor's group
  RuntimeOptions runtime;                  // its runtime options (core/options.h)
  DraftKind draft = DraftKind::None;  // none, mtp or oracle
  int block_size = 0;                 // 0: default for the checkpoint (Auto: kAutoMaxBlockSize)
  // Auto: K chosen every step by the cost model, which probe_step_costs
  // seeds at start on the engine's slots (engine/block_choice.h).
  BlockPolicy block_policy = BlockPolicy::Fixed;
  ServerLimits limits;
  DrafterFactory make_drafter;  // set: every job drafts with its own drafter from it (`draft` is ignored)
  int draft_vocab = 0;          // draft mtp: drafts over ids [0, draft_vocab) (GenerateOptions::draft_vocab)
  // draft oracle: how it drafts and what drafting costs. Each request's
  // truth is its plain greedy answer, run once on its slot before the
  // request joins the steps and kept (by prompt, max_tokens and
  // ignore_eos) so a repeated request replays it without the extra run.
  // Each request draws from its own seed (oracle.seed plus its number).
  OracleSpec oracle;
  DraftCost draft_cost = DraftCost::Free;
  int prefill_chunk = kDefaultPrefillChunk;  // GenerateOptions::prefill_chunk of every request
  // --prefill-stall (engine/prefill_budget.h): while requests decode, a
  // step's prompt rows keep it within this many times their step alone, by
  // the cost model that probe_step_costs seeds at start (0: off, every
  // prompt its whole chunk). Refused where it could not act: a chunk wider
  // than the group's chunk_invariant_rows().
  double prefill_stall = 0;
  // Positions the KV pool may hold across all requests (--kv-cache-tokens);
  // 0: max_batch requests of the longest prompt plus max_tokens. A request
  // is admitted when its own budget fits beside the running ones'
  // (docs/engine.md, "Memory that grows with use"). At least one request
  // of the longest prompt plus max_tokens, so every request the limits
  // accept is admitted in time.
  int kv_cache_tokens = 0;
  // One stderr line per engine step (--log-steps): its sequences, rows and
  // the host time of its parts (StepReport).
  bool log_steps = false;
};

class Engine {
 public:
  // Takes the group, makes one sequence slot (sized for the longest prompt
  // plus max_tokens) and starts the loop thread.
  Engine(std::unique_ptr<SequenceGroup> group, const tok::Tokenizer& tokenizer, const EngineOptions& options,
         Metrics& metrics);
  // A Qwen3.5 checkpoint on options.backend (make_sequence_group); it must outlive the engine.
  Engine(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& tokenizer, const EngineOptions& options, Metrics& metrics);
  ~Engine();
  // Queues a job; false when limits.queue_depth jobs already wait.
  bool submit(std::shared_ptr<Job> job);
  int vocab() const;
  // Jobs queued or generating.
  int active() const;
  // Cancels every queued and running job (the end of a drain).
  void cancel_all();
  // Set once a job failed with a DeviceFault: the reason, empty while the
  // device can serve. The HTTP layer then refuses work and /health says 503.
  std::string fault() const;
  // A request this engine cannot serve as asked (the oracle replays greedy
  // answers only): the field and why; nullopt when it can.
  std::optional<std::pair<std::string, std::string>> refuses(const CompletionRequest& request) const;

 private:
  struct Serving;  // a running job: its slot, text decoder, stop matcher and times
  void loop();
  // On the loop thread: starts `job` on `slot` in the step loop, or fails it.
  void start(std::shared_ptr<Job> job, std::unique_ptr<ModelRuntime> slot, int kv_positions);
  // KV positions a job's sequence may fill: its prompt, max_tokens and a verify block.
  int kv_budget(int prompt_tokens, int max_tokens) const;
  // The pools' stats to the metrics.
  void report_kv_pools();
  // The slot back (reset: its KV blocks to the pools) and the job's promise released.
  void release(std::shared_ptr<Job> job, std::unique_ptr<ModelRuntime> slot, int kv_positions);
  // On the loop thread: the final event of a finished sequence; the slot goes back.
  void complete(StepLoop::Finished& finished);
  // On the loop thread: the oracle's truth for a job (cached or run on `slot`, then reset).
  std::vector<int32_t> oracle_truth(ModelRuntime& slot, const Job& job);
  const tok::Tokenizer& tokenizer_;
  EngineOptions options_;
  Metrics& metrics_;
  std::unique_ptr<SequenceGroup> group_;
  StepLoop steps_;  // the loop thread's only
  std::map<int, std::unique_ptr<Serving>> serving_;  // by step-loop id; the loop thread's only
  int max_batch_ = 1;  // limits.max_batch, or fewer where the group holds fewer sequences
  int capacity_ = 0;   // positions per slot
  std::vector<KvPoolUse> kv_pools_;  // the group's (none: each slot holds its own caches)
  StepWork work_before_;  // the group's launches before the first request (the cost probe's)
  std::map<std::vector<int32_t>, std::vector<int32_t>> truths_;  // the oracle's, by (max_tokens, ignore_eos, prompt)
  uint64_t oracle_requests_ = 0;  // oracle requests started, for each one's seed
  std::mt19937_64 seeds_;  // seeds for requests that give none (drawn on the loop thread)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::unique_ptr<ModelRuntime>> free_slots_;
  std::vector<std::shared_ptr<Job>> running_jobs_;
  std::string fault_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nextn::server
