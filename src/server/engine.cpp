#include "server/engine.h"

#include <algorithm>

#include "sampling/stop_strings.h"
#include "speculative/sampled_generate.h"

namespace nextn::server {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Engine::Engine(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& tokenizer, const EngineOptions& options,
               Metrics& metrics)
    : tokenizer_(tokenizer), options_(options), metrics_(metrics), seeds_(std::random_device{}()) {
  if (options_.block_size == 0) options_.block_size = default_block_size(ckpt.mtp_layers());
  const int cap = runtime_capacity(options_.limits.max_prompt_tokens, options_.limits.max_tokens, options_.block_size);
  rt_ = make_runtime(ckpt, options_.backend, cap, options_.cpu_threads);
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

int Engine::vocab() const { return rt_->vocab(); }

bool Engine::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (int(queue_.size()) >= options_.limits.queue_depth) return false;
    queue_.push_back(std::move(job));
    metrics_.set_queue(int(queue_.size()), 1);
  }
  cv_.notify_all();
  return true;
}

void Engine::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      job = std::move(queue_.front());
      queue_.pop_front();
      metrics_.set_queue(int(queue_.size()), 1);
    }
    if (!job->cancelled()) {
      try {
        run(*job);
      } catch (const std::exception& e) {  // the runtime is reset before the next job
        JobEvent fail_event;
        fail_event.final = true;
        fail_event.error = e.what();
        job->push(std::move(fail_event));
      }
    } else {
      JobEvent gone;
      gone.final = true;
      gone.finish_reason = "cancelled";
      job->push(std::move(gone));
    }
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.set_queue(int(queue_.size()), 0);
  }
  // Jobs still queued at shutdown end with an error.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& job : queue_) {
    JobEvent e;
    e.final = true;
    e.error = "the server is shutting down";
    job->push(std::move(e));
  }
}

void Engine::run(Job& job) {
  const CompletionRequest& req = job.request;
  const auto started = Clock::now();
  const double queue_s = std::chrono::duration<double>(started - job.enqueued).count();
  double first_token_s = -1;
  rt_->reset();
  const std::vector<int> eos_ids = req.ignore_eos ? std::vector<int>{} : rt_->config().eos_token_ids;
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
        logits.resize(size_t(rt_->vocab()));
        rt_->head_logits(first_row + int(i), logits.data());
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
    o.verify = VerifyArm::Batched;
    o.ignore_eos = req.ignore_eos;
    o.sink = sink;
    result = generate(*rt_, job.prompt, o);
  } else {
    SampledOptions o;
    o.max_new_tokens = req.max_tokens;
    o.sampling = req.sampling;
    if (!req.seed_given) o.sampling.seed = seeds_();
    o.draft = options_.draft;
    o.block_size = options_.block_size;
    o.ignore_eos = req.ignore_eos;
    o.sink = sink;
    result = sampled_generate(*rt_, job.prompt, o);
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
  metrics_.generation(result.stats, completion_tokens, queue_s, first_token_s, seconds_since(job.enqueued));
  job.push(std::move(last));
}

}  // namespace nextn::server
