#include "model/forward_scheduler.h"

namespace nextn {

ForwardScheduler::Totals ForwardScheduler::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

void ForwardScheduler::reserve() {
  std::lock_guard<std::mutex> lock(mu_);
  ++members_;
}

void ForwardScheduler::unreserve() {
  enter(true);
  leave();
}

void ForwardScheduler::enter(bool reserved) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!reserved) ++members_;
  cv_.wait(lock, [&] { return !turn_taken_; });
  turn_taken_ = true;
}

void ForwardScheduler::leave() {
  std::unique_lock<std::mutex> lock(mu_);  // the leaving member holds the turn
  --members_;
  // The others may all be waiting for this one to reach its forward.
  if (!pending_.empty() && int(pending_.size()) == members_) run_pending(lock);
  turn_taken_ = false;
  cv_.notify_all();
}

void ForwardScheduler::forward(ModelRuntime& sequence, std::span<const int32_t> tokens) {
  std::unique_lock<std::mutex> lock(mu_);  // the caller holds the turn
  Request request{&sequence, tokens, false, nullptr};
  pending_.push_back(&request);
  if (int(pending_.size()) == members_) {
    run_pending(lock);  // the last to arrive runs them all and keeps the turn
  } else {
    turn_taken_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return request.done && !turn_taken_; });
    turn_taken_ = true;
  }
  if (request.error) std::rethrow_exception(request.error);
}

void ForwardScheduler::run_pending(std::unique_lock<std::mutex>& lock) {
  std::vector<Request*> batch;
  batch.swap(pending_);
  lock.unlock();  // the turn stays taken: no member runs, none enters
  auto alone = [](Request* r) {
    try {
      r->sequence->target_forward(r->tokens);
    } catch (...) {
      r->error = std::current_exception();
    }
  };
  int rows = 0;
  std::vector<ModelRuntime*> sequences;
  std::vector<std::span<const int32_t>> tokens;
  for (Request* r : batch) {
    sequences.push_back(r->sequence);
    tokens.push_back(r->tokens);
    rows += int(r->tokens.size());
  }
  if (batch.size() == 1 || !group_.shares_forwards()) {
    for (Request* r : batch) alone(r);
  } else {
    try {
      group_.forward_together(sequences, tokens);
    } catch (...) {
      // Nothing changed (the group checks every sequence first): each alone,
      // so that only the sequence at fault sees the error.
      for (Request* r : batch) alone(r);
    }
  }
  if (on_forward) on_forward(int(batch.size()), rows);
  lock.lock();
  ++totals_.forwards;
  totals_.rows += rows;
  totals_.sequence_forwards += int64_t(batch.size());
  for (Request* r : batch) r->done = true;
  cv_.notify_all();
}

ScheduledSequence::ScheduledSequence(ForwardScheduler& scheduler, ModelRuntime& sequence, bool reserved)
    : scheduler_(scheduler), rt_(sequence) {
  scheduler_.enter(reserved);
}

ScheduledSequence::~ScheduledSequence() { scheduler_.leave(); }

}  // namespace nextn
