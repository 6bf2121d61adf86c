#include "server/engine.h"

#include <algorithm>

#include "core/error.h"

#include "sampling/stop_strings.h"
#include "speculative/sampled_generate.h"

namespace nextn::server {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Engine::Engine(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& tokenizer, const EngineOptions& options,
               Metrics& metrics)
    : Engine(make_sequence_group(ckpt, options.backend, options.cpu_threads), tokenizer, options, metrics) {}

Engine::Engine(std::unique_ptr<SequenceGroup> group, const tok::Tokenizer& tokenizer, const EngineOptions& options,
               Metrics& metrics)
    : tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      group_(std::move(group)),
      scheduler_(*group_),
      seeds_(std::random_device{}()) {
  if (options_.block_size == 0) options_.block_size = default_block_size(group_->info().mtp_layers);
  if (options_.limits.max_batch < 1) fail("--max-batch {} must be at least 1", options_.limits.max_batch);
  max_batch_ = std::min(options_.limits.max_batch, group_->max_sequences());
  capacity_ = runtime_capacity(options_.limits.max_prompt_tokens, options_.limits.max_tokens, options_.block_size);
  // Every slot now: a server that cannot hold max-batch sequences fails at
  // start, not at its Nth request; and a CUDA sequence's construction
  // synchronizes the device, which must not happen while a worker's
  // sequence captures a graph.
  for (int i = 0; i < max_batch_; ++i) free_slots_.push_back(group_->add_sequence(capacity_));
  scheduler_.on_forward = [this](int sequences, int rows) { metrics_.shared_forward(sequences, rows); };
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
  return int(queue_.size()) + running_;
}

void Engine::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& job : queue_) job->cancel();
  for (auto& [id, job] : running_jobs_) job->cancel();
}

std::string Engine::fault() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fault_;
}

bool Engine::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (int(queue_.size()) >= options_.limits.queue_depth) return false;
    queue_.push_back(std::move(job));
    metrics_.set_queue(int(queue_.size()), running_);
  }
  cv_.notify_all();
  return true;
}

void Engine::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stopping_ || !finished_workers_.empty() || (!queue_.empty() && running_ < max_batch_);
    });
    for (int id : finished_workers_) {  // threads whose jobs ended
      workers_[id].join();
      workers_.erase(id);
    }
    finished_workers_.clear();
    if (stopping_) break;
    if (queue_.empty() || running_ >= max_batch_) continue;
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    if (job->cancelled()) {  // went away while queued: no slot taken
      metrics_.set_queue(int(queue_.size()), running_);
      metrics_.cancelled();
      JobEvent gone;
      gone.final = true;
      gone.finish_reason = "cancelled";
      job->push(std::move(gone));
      continue;
    }
    // running_ < max_batch_ slots are taken, so one is free.
    std::unique_ptr<ModelRuntime> slot = std::move(free_slots_.back());
    free_slots_.pop_back();
    ++running_;
    metrics_.set_queue(int(queue_.size()), running_);
    const int id = next_worker_++;
    // Reserved here, so that jobs admitted together share their first forward.
    scheduler_.reserve();
    try {
      running_jobs_[id] = job;
      workers_[id] = std::thread(&Engine::work, this, job, std::move(slot), seeds_(), id);
    } catch (const std::exception& e) {  // no thread: no slot taken, the job fails
      scheduler_.unreserve();
      workers_.erase(id);
      running_jobs_.erase(id);
      --running_;
      JobEvent fail_event;
      fail_event.final = true;
      fail_event.error = e.what();
      job->push(std::move(fail_event));
    }
  }
  // Jobs still queued at shutdown end with an error; running ones finish.
  for (auto& job : queue_) {
    JobEvent e;
    e.final = true;
    e.error = "the server is shutting down";
    job->push(std::move(e));
  }
  queue_.clear();
  cv_.wait(lock, [&] { return running_ == 0; });
  lock.unlock();
  for (auto& [id, t] : workers_) t.join();
}

void Engine::work(std::shared_ptr<Job> job, std::unique_ptr<ModelRuntime> slot, uint64_t seed, int worker) {
  try {
    ScheduledSequence rt(scheduler_, *slot, /*reserved=*/true);  // waits for a turn; shares its target forwards
    run(*job, rt, *slot, seed);
  } catch (const std::exception& e) {  // the slot is reset before its next job
    if (dynamic_cast<const DeviceFault*>(&e)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (fault_.empty()) fault_ = e.what();
    }
    JobEvent fail_event;
    fail_event.final = true;
    fail_event.error = e.what();
    job->push(std::move(fail_event));
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_jobs_.erase(worker);
  free_slots_.push_back(std::move(slot));
  --running_;
  finished_workers_.push_back(worker);
  metrics_.set_queue(int(queue_.size()), running_);
  cv_.notify_all();
}

void Engine::run(Job& job, ModelRuntime& rt, ModelRuntime& slot, uint64_t seed) {
  const CompletionRequest& req = job.request;
  const auto started = Clock::now();
  const double queue_s = std::chrono::duration<double>(started - job.enqueued).count();
  double first_token_s = -1;
  rt.reset();
  const std::vector<int> eos_ids = req.ignore_eos ? std::vector<int>{} : rt.info().eos_token_ids;
  // The drafter reads the sequence's own state (a Gemma 4 target's hidden
  // rows and K/V); its loop's forwards still go through `rt`.
  const std::unique_ptr<Drafter> drafter = options_.make_drafter ? options_.make_drafter(slot) : nullptr;
  tok::StreamDecoder decoder(tokenizer_);
  StopMatcher stops(req.stop);
  std::vector<float> logits;
  int completion_tokens = 0;

  const TokenSink sink = [&](std::span<const int32_t> tokens, int first_row) {
    if (first_token_s < 0) first_token_s = seconds_since(job.enqueued);
    JobEvent ev;
    for (size_t i = 0; i < tokens.size() && !stops.stopped(); ++i) {
      const int32_t t = tokens[i];
      ++completion_tokens;
      if (req.logprobs) {
        logits.resize(size_t(rt.vocab()));
        rt.head_logits(first_row + int(i), logits.data());
        const TokenLogprob lp = token_logprob(logits, t, req.top_logprobs);
        LogprobEntry entry{tokenizer_.decode({t}), lp.logprob, {}};
        for (const auto& [id, v] : lp.top) entry.top.emplace_back(tokenizer_.decode({id}), v);
        ev.logprobs.push_back(std::move(entry));
      }
      if (std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end()) continue;  // EOS ends the text, adds none
      ev.text += stops.feed(decoder.step(t));
    }
    if (!ev.text.empty() || !ev.logprobs.empty()) job.push(std::move(ev));
    return !stops.stopped() && !job.cancelled();
  };

  GenerateResult result;
  if (req.sampling.greedy()) {
    GenerateOptions o;
    o.max_new_tokens = req.max_tokens;
    o.draft = options_.draft;
    o.block_size = options_.block_size;
    o.draft_vocab = drafter ? 0 : options_.draft_vocab;
    o.verify = VerifyArm::Batched;
    o.ignore_eos = req.ignore_eos;
    o.sink = sink;
    result = drafter ? speculative_generate(rt, *drafter, job.prompt, o) : generate(rt, job.prompt, o);
  } else {
    SampledOptions o;
    o.max_new_tokens = req.max_tokens;
    o.sampling = req.sampling;
    if (!req.seed_given) o.sampling.seed = seed;
    o.draft = options_.draft;
    o.block_size = options_.block_size;
    o.draft_vocab = drafter ? 0 : options_.draft_vocab;
    o.ignore_eos = req.ignore_eos;
    o.sink = sink;
    result = drafter ? sampled_generate(rt, drafter.get(), job.prompt, o) : sampled_generate(rt, job.prompt, o);
  }
  JobEvent last;
  last.final = true;
  if (!stops.stopped()) {
    last.text = stops.feed(decoder.finish());
    last.text += stops.flush();
  }
  last.finish_reason = stops.stopped() || result.stats.stop == "eos" ? "stop" : job.cancelled() ? "cancelled" : "length";
  last.prompt_tokens = int(job.prompt.size());
  last.completion_tokens = completion_tokens;
  if (last.finish_reason == "cancelled") metrics_.cancelled();
  metrics_.generation(result.stats, completion_tokens, queue_s, first_token_s, seconds_since(job.enqueued));
  job.push(std::move(last));
}

}  // namespace nextn::server
