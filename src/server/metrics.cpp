#include "server/metrics.h"

#include <fmt/format.h>

namespace nextn::server {

void Histogram::observe(double x) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (x <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  ++count_;
  sum_ += x;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

namespace {
std::vector<double> latency_buckets() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}; }
}  // namespace

Metrics::Metrics()
    : queue_(latency_buckets()),
      first_token_(latency_buckets()),
      latency_(latency_buckets()),
      step_sequences_({1, 2, 4, 8, 16, 32, 64, 128}),
      step_rows_hist_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}),
      step_seconds_({0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2.5}),
      between_tokens_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      block_size_({1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64}),
      prompt_budget_({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) {}

void Metrics::block_choice(std::span<const int> chosen, const BlockChoiceReport& choice,
                           const std::map<std::pair<int, int>, double>& cost_table) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int k : chosen) block_size_.observe(k);
  choice_ = choice;
  cost_table_ = cost_table;
}

void Metrics::oracle_truth(bool replayed) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(replayed ? truths_replayed_ : truths_run_);
}

void Metrics::step(const StepReport& report, const StepWork& work) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  step_rows_ += uint64_t(report.rows);
  prefill_rows_ += uint64_t(report.prefill_rows);
  work_ = work;
  step_sequences_.observe(report.sequences);
  step_rows_hist_.observe(report.rows);
  step_seconds_.observe(report.ms / 1e3);
  if (report.prompt_budget >= 0) {
    prompt_budget_.observe(report.prompt_budget);
    prompt_scale_ = report.prompt_scale;
  }
  if (report.ms > slowest_step_.ms) slowest_step_ = {report.sequences, report.rows, report.prefill_rows, report.ms};
}

void Metrics::tokens_committed(int tokens, double gap_s) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < tokens; ++i) between_tokens_.observe(gap_s / tokens);
}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::cancelled() {
  std::lock_guard<std::mutex> lock(mu_);
  ++cancelled_;
}

void Metrics::generation(const GenerateStats& s, int completion_tokens, double queue_s, double first_token_s,
                         double total_s) {
  std::lock_guard<std::mutex> lock(mu_);
  const VerifyCounters& c = s.counters;
  ++generations_;
  prompt_tokens_ += uint64_t(s.prompt_tokens);
  completion_tokens_ += uint64_t(completion_tokens);
  rounds_ += uint64_t(c.rounds);
  drafted_ += uint64_t(c.drafted);
  accepted_ += uint64_t(c.accepted);
  if (accepted_at_.size() < c.accepted_at.size()) accepted_at_.resize(c.accepted_at.size(), 0);
  for (size_t i = 0; i < c.accepted_at.size(); ++i) accepted_at_[i] += uint64_t(c.accepted_at[i]);
  if (c.rounds > 0) rounds_by_arm_[c.verify_chosen] += uint64_t(c.rounds);
  queue_.observe(queue_s);
  if (first_token_s >= 0) first_token_.observe(first_token_s);
  latency_.observe(total_s);
}

void Metrics::set_queue(int waiting, int running) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_ = waiting;
  running_ = running;
}

void Metrics::kv_pools(std::vector<std::pair<std::string, KvPoolStats>> pools) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_ = std::move(pools);
}

void Metrics::kv_wait() {
  std::lock_guard<std::mutex> lock(mu_);
  ++kv_waits_;
}

void Metrics::connections(int open) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_open_ = open;
}

void Metrics::connection_evicted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++evicted_;
}

void Metrics::connection_timed_out() {
  std::lock_guard<std::mutex> lock(mu_);
  ++timed_out_;
}

void Metrics::connection_refused() {
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  out += "# HELP nextn_requests_total HTTP requests by endpoint and status.\n# TYPE nextn_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("nextn_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  counter("nextn_generations_total", "Generations run to completion (or cancelled) by the engine.", generations_);
  counter("nextn_cancelled_total", "Jobs cancelled because their client went away (running or queued).", cancelled_);
  counter("nextn_prompt_tokens_total", "Prompt tokens prefilled.", prompt_tokens_);
  counter("nextn_completion_tokens_total", "Tokens generated.", completion_tokens_);
  counter("nextn_rounds_total", "Decode rounds (one target forward each after the prefill).", rounds_);
  counter("nextn_drafted_tokens_total", "Draft tokens proposed by the drafter.", drafted_);
  counter("nextn_accepted_tokens_total", "Draft tokens accepted by verification.", accepted_);
  out += "# HELP nextn_accepted_at_position_total Rounds whose draft at this position (1-based) was accepted.\n"
         "# TYPE nextn_accepted_at_position_total counter\n";
  for (size_t i = 0; i < accepted_at_.size(); ++i)
    out += fmt::format("nextn_accepted_at_position_total{{position=\"{}\"}} {}\n", i + 1, accepted_at_[i]);
  out += "# HELP nextn_verify_rounds_total Rounds by verify arm (none: plain decoding).\n"
         "# TYPE nextn_verify_rounds_total counter\n";
  for (const auto& [arm, n] : rounds_by_arm_) out += fmt::format("nextn_verify_rounds_total{{arm=\"{}\"}} {}\n", arm, n);
  out += fmt::format("# HELP nextn_queue_waiting Requests waiting for the engine.\n# TYPE nextn_queue_waiting gauge\n"
                     "nextn_queue_waiting {}\n", waiting_);
  out += fmt::format("# HELP nextn_requests_running Requests the engine is generating.\n"
                     "# TYPE nextn_requests_running gauge\nnextn_requests_running {}\n", running_);
  if (!kv_.empty()) {
    auto gauge = [&](const char* name, const char* help, auto value) {
      out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
      for (const auto& [pool, stats] : kv_) out += fmt::format("{}{{pool=\"{}\"}} {}\n", name, pool, value(stats));
    };
    gauge("nextn_kv_block_positions", "Positions per KV cache block.", [](const KvPoolStats&) { return kKvBlockTokens; });
    gauge("nextn_kv_block_bytes", "Bytes per KV cache block of the pool.",
          [](const KvPoolStats& s) { return s.block_bytes; });
    gauge("nextn_kv_blocks_limit", "KV cache blocks the pool may hold (--kv-cache-tokens).",
          [](const KvPoolStats& s) { return s.limit; });
    gauge("nextn_kv_blocks_allocated", "KV cache blocks whose memory the pool holds (it grows with use).",
          [](const KvPoolStats& s) { return s.allocated; });
    gauge("nextn_kv_blocks_in_use", "KV cache blocks held by running requests.",
          [](const KvPoolStats& s) { return s.in_use; });
    gauge("nextn_kv_blocks_promised", "KV cache blocks promised to running requests (their whole budgets).",
          [](const KvPoolStats& s) { return s.promised; });
    counter("nextn_kv_admission_waits_total",
            "Admissions deferred because the next request's KV budget did not fit beside the running ones'.",
            kv_waits_);
  }
  counter("nextn_engine_steps_total", "Engine steps run (one trunk forward each, over every running request).", steps_);
  counter("nextn_engine_step_rows_total", "Token rows those steps' trunk forwards covered, all requests together.",
          step_rows_);
  counter("nextn_engine_prefill_rows_total", "Of those, prompt rows.", prefill_rows_);
  counter("nextn_lm_head_launches_total", "LM-head projections of target rows (batched: one per step for every greedy request).",
          uint64_t(work_.lm_head_launches));
  counter("nextn_mtp_forward_launches_total", "MTP pairing forwards (batched: one per step for every MTP request).",
          uint64_t(work_.mtp_forward_launches));
  counter("nextn_mtp_draft_launches_total", "MTP draft-chain steps (batched: one per chained step for every MTP request).",
          uint64_t(work_.mtp_draft_launches));
  counter("nextn_rollback_launches_total",
          "Target rollbacks of rounds that kept fewer rows than they verified (CUDA: one launch per step for all of them).",
          uint64_t(work_.rollback_launches));
  counter("nextn_oracle_truths_run_total", "Oracle drafter: greedy answers run first to learn a request's truth.",
          truths_run_);
  counter("nextn_oracle_truths_replayed_total", "Oracle drafter: requests whose truth an earlier identical one gave.",
          truths_replayed_);
  block_size_.render(out, "nextn_block_size_chosen", "Block size K chosen for a request's next step (K per step).");
  out += fmt::format("# HELP nextn_block_choice_predicted_ms The cost model's time for the last chosen step.\n"
                     "# TYPE nextn_block_choice_predicted_ms gauge\nnextn_block_choice_predicted_ms {}\n"
                     "# HELP nextn_block_choice_expected_tokens Tokens the last chosen step is expected to commit.\n"
                     "# TYPE nextn_block_choice_expected_tokens gauge\nnextn_block_choice_expected_tokens {}\n",
                     choice_.predicted_ms, choice_.expected_tokens);
  out += "# HELP nextn_pooled_acceptance Acceptance of draft i given drafts before it accepted, all requests pooled.\n"
         "# TYPE nextn_pooled_acceptance gauge\n";
  for (size_t i = 0; i < choice_.pooled_acceptance.size(); ++i)
    out += fmt::format("nextn_pooled_acceptance{{position=\"{}\"}} {}\n", i + 1, choice_.pooled_acceptance[i]);
  out += "# HELP nextn_step_cost_ms Measured verify-step milliseconds by sequences (power-of-two bucket) and rows.\n"
         "# TYPE nextn_step_cost_ms gauge\n";
  for (const auto& [key, ms] : cost_table_)
    out += fmt::format("nextn_step_cost_ms{{sequences=\"{}\",rows=\"{}\"}} {}\n", key.first, key.second, ms);
  out += fmt::format("# HELP nextn_http_connections_open Client connections open.\n"
                     "# TYPE nextn_http_connections_open gauge\nnextn_http_connections_open {}\n", connections_open_);
  counter("nextn_http_connections_evicted_total",
          "Idle or half-sent connections closed at the connection cap to make room for a new one.", evicted_);
  counter("nextn_http_timeouts_total", "Connections closed because headers, body, keep-alive or a write ran out of time.",
          timed_out_);
  counter("nextn_http_connections_refused_total",
          "Connections refused (503) at the cap because every open one had a request in progress.", refused_);
  step_sequences_.render(out, "nextn_step_sequences", "Requests in one engine step.");
  step_rows_hist_.render(out, "nextn_step_rows", "Trunk rows of one engine step.");
  prompt_budget_.render(out, "nextn_prefill_budget_rows",
                        "Prompt rows the --prefill-stall budget allowed a step beside decoding requests.");
  out += fmt::format("# HELP nextn_prefill_prompt_scale Measured over predicted time of the budget's steps with prompt "
                     "rows (an exponential average; 1 before any).\n"
                     "# TYPE nextn_prefill_prompt_scale gauge\nnextn_prefill_prompt_scale {}\n",
                     prompt_scale_);
  step_seconds_.render(out, "nextn_engine_step_seconds", "Wall time of one engine step, all its requests together.");
  out += fmt::format("# HELP nextn_engine_slowest_step_seconds The slowest engine step so far, by its sequences, "
                     "rows and prompt rows.\n# TYPE nextn_engine_slowest_step_seconds gauge\n"
                     "nextn_engine_slowest_step_seconds{{sequences=\"{}\",rows=\"{}\",prefill_rows=\"{}\"}} {}\n",
                     slowest_step_.sequences, slowest_step_.rows, slowest_step_.prefill_rows, slowest_step_.ms / 1e3);
  between_tokens_.render(out, "nextn_time_between_tokens_seconds",
                         "Seconds between a request's tokens (a round's tokens share its gap equally).");
  queue_.render(out, "nextn_queue_wait_seconds", "Seconds from arrival to the start of generation.");
  first_token_.render(out, "nextn_time_to_first_token_seconds", "Seconds from arrival to the first generated token.");
  latency_.render(out, "nextn_generation_seconds", "Seconds from arrival to the end of generation.");
  return out;
}

}  // namespace nextn::server
