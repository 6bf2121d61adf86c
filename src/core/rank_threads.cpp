#include "core/rank_threads.h"

#include "core/error.h"

namespace nextn {

RankThreads::RankThreads(int ranks) {
  if (ranks < 1) fail("internal: {} ranks", ranks);
  errors_.resize(size_t(ranks));
  for (int r = 1; r < ranks; ++r) workers_.emplace_back([this, r](std::stop_token stop) { work(stop, r); });
}

RankThreads::~RankThreads() {
  for (auto& w : workers_) w.request_stop();
  wake_.notify_all();
}  // the jthreads join

void RankThreads::run_rank(int rank) {
  try {
    (*fn_)(rank);
  } catch (...) {
    errors_[size_t(rank)] = std::current_exception();
    (*on_error_)();
  }
}

void RankThreads::work(std::stop_token stop, int rank) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (!wake_.wait(lock, stop, [&] { return generation_ != seen; })) return;  // stop requested
      seen = generation_;
    }
    run_rank(rank);
    std::lock_guard lock(mutex_);
    if (++finished_ == int(workers_.size())) done_.notify_one();
  }
}

void RankThreads::run(const std::function<void(int)>& fn, const std::function<void()>& on_error,
                      const std::function<bool(const std::exception_ptr&)>& is_secondary) {
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    on_error_ = &on_error;
    finished_ = 0;
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_rank(0);
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_ == int(workers_.size()); });
  }
  std::exception_ptr first;
  for (const auto& e : errors_)
    if (e && !is_secondary(e)) {
      first = e;
      break;
    }
  for (const auto& e : errors_)
    if (!first && e) first = e;
  if (first) std::rethrow_exception(first);
}

}  // namespace nextn
