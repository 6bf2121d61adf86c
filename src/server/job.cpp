#include "server/job.h"

namespace nextn::server {

void Job::push(JobEvent e) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

void Job::set_listener(std::function<void()> listener) {
  bool waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener_ = listener;
    waiting = !events_.empty();
  }
  if (waiting && listener) listener();
}

std::vector<JobEvent> Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<JobEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

}  // namespace nextn::server
