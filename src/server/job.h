// One generation request as the engine sees it, and the channel its results
// flow back through: the engine thread pushes events (text deltas with their
// logprobs, then one final event); the HTTP thread waits on them. Cancelling
// (a client that went away) makes the engine stop the job after its current
// round, or skip it if it is still queued.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "server/request.h"

namespace nextn::server {

struct LogprobEntry {
  std::string token;  // the token's own text
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;
};

struct JobEvent {
  std::string text;                   // new text (may be empty)
  std::vector<LogprobEntry> logprobs; // one per token this event covers (when asked for)
  bool final = false;
  // final only:
  std::string finish_reason;  // "stop" or "length"
  int prompt_tokens = 0, completion_tokens = 0;
  std::string error;  // non-empty: the generation failed (HTTP 500)
};

class Job {
 public:
  Job(CompletionRequest request, std::vector<int32_t> prompt)
      : request(std::move(request)), prompt(std::move(prompt)), enqueued(std::chrono::steady_clock::now()) {}
  const CompletionRequest request;
  const std::vector<int32_t> prompt;
  const std::chrono::steady_clock::time_point enqueued;

  void push(JobEvent e);
  // Waits up to `timeout` for events and takes all that arrived (0: only
  // what is there).
  std::vector<JobEvent> take(std::chrono::milliseconds timeout);
  // Called (on the pushing thread, outside the job's lock) after every push,
  // and once at once if events are already waiting: the event-driven HTTP
  // layer posts a wake-up to its connection from it instead of blocking a
  // thread in take().
  void set_listener(std::function<void()> listener);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
  std::function<void()> listener_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace nextn::server
