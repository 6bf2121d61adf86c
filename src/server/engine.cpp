#include "server/engine.h"

#include <fmt/core.h>

#include <algorithm>

#include "core/error.h"
#include "engine/generate.h"
#include "speculative/gemma4_drafter.h"

#include "sampling/stop_strings.h"

namespace nextn::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kOracleTruths = 4096;  // oracle answers kept at most
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Engine::Engine(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& tokenizer, const EngineOptions& options,
               Metrics& metrics)
    : Engine(make_sequence_group(ckpt, options.backend, options.runtime), tokenizer, options, metrics) {}

Engine::Engine(std::unique_ptr<SequenceGroup> group, const tok::Tokenizer& tokenizer, const EngineOptions& options,
               Metrics& metrics)
    : tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      group_(std::move(group)),
      steps_(*group_),
      seeds_(std::random_device{}()) {
  const bool auto_k = options_.block_policy == BlockPolicy::Auto;
  options_.block_size =
      resolve_block_size(options_.block_policy, options_.block_size, default_block_size(group_->info().mtp_layers));
  if (options_.limits.max_batch < 1) fail("--max-batch {} must be at least 1", options_.limits.max_batch);
  if (options_.draft == DraftKind::Oracle) check_oracle_spec(options_.oracle);
  max_batch_ = std::min(options_.limits.max_batch, group_->max_sequences());
  capacity_ = std::max(kProbePositions, runtime_capacity(options_.limits.max_prompt_tokens, options_.limits.max_tokens,
                                                         options_.block_size));
  // Every slot now: a server that cannot hold max-batch sequences fails at
  // start, not at its Nth request.
  for (int i = 0; i < max_batch_; ++i) free_slots_.push_back(group_->add_sequence(capacity_));
  kv_pools_ = group_->kv_pools();
  if (options_.kv_cache_tokens < 0) fail("--kv-cache-tokens {} must not be negative", options_.kv_cache_tokens);
  if (!kv_pools_.empty()) {
    for (const KvPoolUse& u : kv_pools_) {
      // A sequence's ring never holds more positions than the sequence, so
      // --kv-cache-tokens bounds every pool by the blocks of that many positions.
      const int limit = options_.kv_cache_tokens > 0 ? kv_blocks_for(options_.kv_cache_tokens)
                                                     : max_batch_ * u.blocks_for(capacity_);
      // The cost probe below and the longest request must fit.
      const int least = std::max(u.blocks_for(capacity_), max_batch_ * u.blocks_for(kProbePositions));
      if (limit < least)
        fail("--kv-cache-tokens {}: the KV cache must hold at least {} positions (one request of the longest prompt "
             "plus max_tokens, and the start-up probe of every slot)",
             options_.kv_cache_tokens, least * kKvBlockTokens);
      u.pool->set_limit(limit);
    }
    report_kv_pools();
  } else if (options_.kv_cache_tokens > 0) {
    fail("--kv-cache-tokens: the {} backend's sequences of this model hold their own caches (no shared KV pool)",
         group_->backend_name());
  }
  steps_.set_prefill_stall(options_.prefill_stall);
  const bool budget = options_.prefill_stall > 0;
  if (budget && options_.prefill_chunk > group_->chunk_invariant_rows())
    fail("--prefill-stall: the {} backend cuts a prompt's chunks only within {} tokens (a wider forward takes another "
         "path, which a cut would change); set --prefill-chunk {} or less",
         group_->backend_name(), group_->chunk_invariant_rows(), group_->chunk_invariant_rows());
  const bool drafts = options_.make_drafter || options_.draft != DraftKind::None;
  if ((drafts && auto_k) || budget) {
    // The budget weighs prompt rows beside decode rows: the probe measures up to 8 rows a sequence.
    std::vector<ModelRuntime*> slots;
    for (auto& slot : free_slots_) slots.push_back(slot.get());
    probe_step_costs(*group_, slots, budget ? std::max(options_.block_size, kAutoMaxBlockSize) : options_.block_size,
                     steps_.cost_model());
  }
  work_before_ = group_->step_work();
  steps_.on_step = [this, step = uint64_t(0)](const StepReport& r) mutable {
    metrics_.step(r, group_->step_work().since(work_before_));
    if (options_.log_steps)
      fmt::print(stderr,
                 "step {}: {} sequences, {} rows ({} prompt{}), {:.2f} ms: forward {:.2f}, head {:.2f}, pairing {:.2f}, "
                 "drafts {:.2f}\n",
                 ++step, r.sequences, r.rows, r.prefill_rows,
                 r.prompt_budget >= 0 ? fmt::format(", budget {}", r.prompt_budget) : std::string(), r.ms,
                 r.forward_ms, r.head_ms, r.pairing_ms, r.draft_ms);
    report_kv_pools();
    if (r.choice) metrics_.block_choice(r.chosen_k, *r.choice, steps_.cost_model().verify_table());
  };
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int Engine::vocab() const { return group_->info().vocab_size; }

int Engine::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(queue_.size() + running_jobs_.size());
}

void Engine::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& job : queue_) job->cancel();
  for (auto& job : running_jobs_) job->cancel();
}

std::string Engine::fault() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fault_;
}

std::optional<std::pair<std::string, std::string>> Engine::refuses(const CompletionRequest& r) const {
  if (options_.draft == DraftKind::Oracle && !r.sampling.greedy())
    return std::pair<std::string, std::string>{
        "temperature", "this server drafts with the oracle (--draft oracle), which replays greedy answers: "
                       "temperature must be 0"};
  return std::nullopt;
}

std::vector<int32_t> Engine::oracle_truth(ModelRuntime& slot, const Job& job) {
  std::vector<int32_t> key = {job.request.max_tokens, job.request.ignore_eos ? 1 : 0};
  key.insert(key.end(), job.prompt.begin(), job.prompt.end());
  if (auto it = truths_.find(key); it != truths_.end()) {
    metrics_.oracle_truth(/*replayed=*/true);
    return it->second;
  }
  std::vector<int32_t> truth = greedy_generate(slot, job.prompt, job.request.max_tokens, job.request.ignore_eos).tokens;
  slot.reset();
  metrics_.oracle_truth(/*replayed=*/false);
  if (truths_.size() >= kOracleTruths) truths_.clear();  // a bound, not a policy: a benchmark repeats few prompts
  truths_.emplace(std::move(key), truth);
  return truth;
}

int Engine::kv_budget(int prompt_tokens, int max_tokens) const {
  return runtime_capacity(prompt_tokens, max_tokens, options_.block_size);
}

void Engine::report_kv_pools() {
  if (kv_pools_.empty()) return;
  std::vector<std::pair<std::string, KvPoolStats>> stats;
  for (const KvPoolUse& u : kv_pools_) stats.emplace_back(u.name, u.pool->stats());
  metrics_.kv_pools(std::move(stats));
}

bool Engine::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (int(queue_.size()) >= options_.limits.queue_depth) return false;
    queue_.push_back(std::move(job));
    metrics_.set_queue(int(queue_.size()), int(running_jobs_.size()));
  }
  cv_.notify_all();
  return true;
}

// A running job as the loop thread serves it.
struct Engine::Serving {
  std::shared_ptr<Job> job;
  std::unique_ptr<ModelRuntime> slot;
  tok::StreamDecoder decoder;
  StopMatcher stops;
  std::vector<int> eos_ids;
  std::vector<float> logits;
  int completion_tokens = 0;
  int kv_positions = 0;  // KV positions promised to it at admission
  double queue_s = 0, first_token_s = -1;
  Clock::time_point last_commit{};
  Serving(std::shared_ptr<Job> j, std::unique_ptr<ModelRuntime> s, const tok::Tokenizer& tokenizer)
      : job(std::move(j)), slot(std::move(s)), decoder(tokenizer), stops(job->request.stop) {}
};

void Engine::loop() {
  for (;;) {
    struct Admitted {
      std::shared_ptr<Job> job;
      std::unique_ptr<ModelRuntime> slot;
      int kv_positions = 0;
    };
    std::vector<Admitted> admitted;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || steps_.running() > 0 || (!queue_.empty() && !free_slots_.empty()); });
      if (stopping_) {  // jobs still queued end with an error; running ones finish
        for (auto& job : queue_) {
          JobEvent e;
          e.final = true;
          e.error = "the server is shutting down";
          job->push(std::move(e));
        }
        queue_.clear();
        if (steps_.running() == 0) break;
      }
      while (!queue_.empty() && !free_slots_.empty()) {
        std::shared_ptr<Job> job = std::move(queue_.front());
        queue_.pop_front();
        if (job->cancelled()) {  // went away while queued: no slot taken
          metrics_.cancelled();
          JobEvent gone;
          gone.final = true;
          gone.finish_reason = "cancelled";
          job->push(std::move(gone));
          continue;
        }
        // Its whole KV budget promised, or it waits (first come, first
        // served: the jobs behind it wait too) until running jobs give back theirs.
        const int kv_positions = kv_pools_.empty() ? 0 : kv_budget(int(job->prompt.size()), job->request.max_tokens);
        if (!promise_positions(kv_pools_, kv_positions)) {
          queue_.push_front(std::move(job));
          metrics_.kv_wait();
          break;
        }
        running_jobs_.push_back(job);
        admitted.push_back({std::move(job), std::move(free_slots_.back()), kv_positions});
        free_slots_.pop_back();
      }
      report_kv_pools();
      metrics_.set_queue(int(queue_.size()), int(running_jobs_.size()));
    }
    // Jobs admitted together share their first step.
    for (Admitted& a : admitted) start(std::move(a.job), std::move(a.slot), a.kv_positions);
    steps_.step();
    for (StepLoop::Finished& f : steps_.take_finished()) complete(f);
  }
}

void Engine::start(std::shared_ptr<Job> job, std::unique_ptr<ModelRuntime> slot, int kv_positions) {
  auto serving = std::make_unique<Serving>(job, std::move(slot), tokenizer_);
  serving->kv_positions = kv_positions;
  Serving& sv = *serving;
  const CompletionRequest& req = job->request;
  sv.queue_s = std::chrono::duration<double>(Clock::now() - job->enqueued).count();
  if (!req.ignore_eos) sv.eos_ids = group_->info().eos_token_ids;
  try {
    // The slot is fresh: every path that gives one back resets it (release, the
    // oracle's truth run, the start-up probe).
    // The drafter reads the sequence's own state (a Gemma 4 target's hidden rows and K/V).
    std::unique_ptr<Drafter> drafter = options_.make_drafter ? options_.make_drafter(*sv.slot) : nullptr;
    GenerateOptions o;
    o.max_new_tokens = req.max_tokens;
    o.prefill_chunk = options_.prefill_chunk;
    // A drafter drafts, unless it only gives the oracle its cost (--draft-cost ASSISTANT_DIR).
    o.draft = drafter && options_.draft_cost != DraftCost::Drafter ? DraftKind::None : options_.draft;
    o.block_size = options_.block_size;
    o.block_policy = options_.block_policy;
    if (o.block_policy == BlockPolicy::Auto && !req.sampling.greedy() && req.seed_given) {
      // A seed promises the same answer again: at a K the step's timing
      // chooses it would not keep it, so seeded sampling runs at the fixed default.
      o.block_policy = BlockPolicy::Fixed;
      o.block_size = options_.make_drafter ? kAssistantBlockSize : default_block_size(group_->info().mtp_layers);
    }
    o.oracle = options_.oracle;
    // Each request its own draws (from --seed): streams of one prompt must not replay one draw sequence.
    if (o.draft == DraftKind::Oracle)
      o.oracle.seed = options_.oracle.seed + 0x9E3779B97F4A7C15ull * uint64_t(++oracle_requests_);
    o.draft_cost = options_.draft_cost;
    o.draft_vocab = drafter || options_.draft != DraftKind::Mtp ? 0 : options_.draft_vocab;
    o.ignore_eos = req.ignore_eos;
    o.sampling = req.sampling;
    if (!req.sampling.greedy() && !req.seed_given) o.sampling.seed = seeds_();
    ModelRuntime* rt = sv.slot.get();
    o.sink = [this, &sv, rt](std::span<const int32_t> tokens, int first_row) {
      const CompletionRequest& rq = sv.job->request;
      const auto now = Clock::now();
      if (sv.first_token_s < 0) {
        sv.first_token_s = seconds_since(sv.job->enqueued);
      } else {
        metrics_.tokens_committed(int(tokens.size()), std::chrono::duration<double>(now - sv.last_commit).count());
      }
      sv.last_commit = now;
      JobEvent ev;
      for (size_t i = 0; i < tokens.size() && !sv.stops.stopped(); ++i) {
        const int32_t t = tokens[i];
        ++sv.completion_tokens;
        if (rq.logprobs) {
          sv.logits.resize(size_t(rt->vocab()));
          rt->head_logits(first_row + int(i), sv.logits.data());
          const TokenLogprob lp = token_logprob(sv.logits, t, rq.top_logprobs);
          LogprobEntry entry{tokenizer_.decode({t}), lp.logprob, {}};
          for (const auto& [id, v] : lp.top) entry.top.emplace_back(tokenizer_.decode({id}), v);
          ev.logprobs.push_back(std::move(entry));
        }
        if (std::find(sv.eos_ids.begin(), sv.eos_ids.end(), t) != sv.eos_ids.end()) continue;  // EOS adds no text
        ev.text += sv.stops.feed(sv.decoder.step(t));
      }
      if (!ev.text.empty() || !ev.logprobs.empty()) sv.job->push(std::move(ev));
      return !sv.stops.stopped() && !sv.job->cancelled();
    };
    std::vector<int32_t> truth;
    if (o.draft == DraftKind::Oracle && o.max_new_tokens > 0) truth = oracle_truth(*sv.slot, *job);
    const int id = steps_.add(*sv.slot, job->prompt, o, std::move(drafter), std::move(truth));
    serving_.emplace(id, std::move(serving));
  } catch (const std::exception& e) {  // a request the loop refused: it fails alone, the slot goes back
    // The fault is recorded before the client hears of the failure, so a
    // /health that follows the 500 already reads 503.
    if (dynamic_cast<const DeviceFault*>(&e)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (fault_.empty()) fault_ = e.what();
    }
    JobEvent fail_event;
    fail_event.final = true;
    fail_event.error = e.what();
    job->push(std::move(fail_event));
    release(job, std::move(sv.slot), kv_positions);
    return;
  }
  // A request for no tokens finished in add().
  for (StepLoop::Finished& f : steps_.take_finished()) complete(f);
}

void Engine::complete(StepLoop::Finished& f) {
  auto it = serving_.find(f.id);
  if (it == serving_.end()) return;
  std::unique_ptr<Serving> serving = std::move(it->second);
  serving_.erase(it);
  Serving& sv = *serving;
  Job& job = *sv.job;
  JobEvent last;
  last.final = true;
  if (f.error) {
    try {
      std::rethrow_exception(f.error);
    } catch (const DeviceFault& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (fault_.empty()) fault_ = e.what();
      last.error = e.what();
    } catch (const std::exception& e) {
      last.error = e.what();
    }
  } else {
    const GenerateStats& stats = f.result.stats;
    if (!sv.stops.stopped()) {
      last.text = sv.stops.feed(sv.decoder.finish());
      last.text += sv.stops.flush();
    }
    last.finish_reason = sv.stops.stopped() || stats.stop == "eos" ? "stop" : job.cancelled() ? "cancelled" : "length";
    last.prompt_tokens = int(job.prompt.size());
    last.completion_tokens = sv.completion_tokens;
    if (last.finish_reason == "cancelled") metrics_.cancelled();
    metrics_.generation(stats, sv.completion_tokens, sv.queue_s, sv.first_token_s, seconds_since(job.enqueued));
  }
  job.push(std::move(last));
  release(sv.job, std::move(sv.slot), sv.kv_positions);
}

void Engine::release(std::shared_ptr<Job> job, std::unique_ptr<ModelRuntime> slot, int kv_positions) {
  try {
    slot->reset();  // its KV blocks back to the pool (and reset again before its next job)
  } catch (const std::exception& e) {  // a DeviceFault: recorded; the slot still goes back
    std::lock_guard<std::mutex> lock(mu_);
    if (fault_.empty()) fault_ = e.what();
  }
  unpromise_positions(kv_pools_, kv_positions);
  std::lock_guard<std::mutex> lock(mu_);
  std::erase(running_jobs_, job);
  free_slots_.push_back(std::move(slot));
  metrics_.set_queue(int(queue_.size()), int(running_jobs_.size()));
  report_kv_pools();
}

}  // namespace nextn::server
