// The server's Prometheus metrics (GET /metrics, text format 0.0.4):
// requests by endpoint and status, tokens, speculative rounds, drafted and
// accepted tokens (in total and per draft position), rounds per verify arm,
// queue gauges, latency histograms and the engine's steps (how many
// requests and rows each covered, the LM-head and MTP draft launches they
// made, the time between a request's tokens), the block size chosen per
// step with what it was chosen from. Thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/step_loop.h"
#include "model/batch_runtime.h"
#include "model/kv_pool.h"

namespace nextn::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double x);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  // One finished generation: its counters, the seconds it waited in the
  // queue, until its first token and in all.
  void generation(const GenerateStats& stats, int completion_tokens, double queue_s, double first_token_s, double total_s);
  void set_queue(int waiting, int running);
  // A job cancelled because its client went away (running or still queued).
  void cancelled();
  // One engine step; `work`: the group's launch counters after it.
  void step(const StepReport& report, const StepWork& work);
  // A request's tokens committed together after `gap_s` seconds since its
  // previous ones (or since its first token): each of the `tokens` is
  // observed as gap_s / tokens in the time-between-tokens histogram.
  void tokens_committed(int tokens, double gap_s);
  // The block sizes chosen for the next step (K per step, engine/block_choice.h),
  // the choice's inputs and the cost model's measured table.
  void block_choice(std::span<const int> chosen, const BlockChoiceReport& choice,
                    const std::map<std::pair<int, int>, double>& cost_table);
  // The oracle drafter's truth for a request: replayed from an earlier one, or run.
  void oracle_truth(bool replayed);
  // The HTTP layer's connections: open now, closed at the cap to make room
  // (an idle or half-sent one), closed for a timeout, refused at the cap
  // with nothing to evict.
  void connections(int open);
  void connection_evicted();
  void connection_timed_out();
  void connection_refused();
  // The KV pools' blocks by pool name (model/kv_pool.h), and an admission
  // that found a pool's promises full (the queue's head waits for running
  // requests).
  void kv_pools(std::vector<std::pair<std::string, KvPoolStats>> pools);
  void kv_wait();
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0, rounds_ = 0, drafted_ = 0, accepted_ = 0, generations_ = 0;
  uint64_t cancelled_ = 0;
  std::vector<uint64_t> accepted_at_;
  std::map<std::string, uint64_t> rounds_by_arm_;
  int waiting_ = 0, running_ = 0;
  uint64_t steps_ = 0, step_rows_ = 0, prefill_rows_ = 0;
  double prompt_scale_ = 1.0;  // the --prefill-stall budget's last prompt scale
  StepWork work_;
  BlockChoiceReport choice_;
  std::map<std::pair<int, int>, double> cost_table_;
  uint64_t truths_run_ = 0, truths_replayed_ = 0;
  int connections_open_ = 0;
  uint64_t evicted_ = 0, timed_out_ = 0, refused_ = 0;
  std::vector<std::pair<std::string, KvPoolStats>> kv_;  // by pool name
  uint64_t kv_waits_ = 0;
  Histogram queue_, first_token_, latency_, step_sequences_, step_rows_hist_, step_seconds_, between_tokens_, block_size_,
      prompt_budget_;
  struct {
    int sequences = 0, rows = 0, prefill_rows = 0;
    double ms = 0;
  } slowest_step_;
};

}  // namespace nextn::server
