#include "core/thread_pool.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace nextn {
namespace {
thread_local bool inside_chunk = false;  // nested parallel_for runs serially
}

int default_thread_count() {
  if (const char* env = std::getenv("NEXTN_THREADS"); env && *env) {
    int n = 0;
    const char* end = env + std::strlen(env);
    const auto [p, ec] = std::from_chars(env, end, n);
    if (ec != std::errc() || p != end || n < 1 || n > 1024)
      fail("NEXTN_THREADS: '{}' is not a thread count in [1, 1024]", env);
    return n;
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int threads) {
  if (threads < 1 || threads > 1024) fail("thread count {} outside [1, 1024]", threads);
  workers_.reserve(size_t(threads - 1));
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this, i](std::stop_token stop) { work(i, stop); });
}

ThreadPool::~ThreadPool() {
  for (auto& w : workers_) w.request_stop();
  wake_.notify_all();
  // jthread joins on destruction.
}

void ThreadPool::run_chunk(int index) {
  const int64_t begin = n_ * index / chunks_, end = n_ * (index + 1) / chunks_;
  inside_chunk = true;
  try {
    if (begin < end) (*fn_)(begin, end);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  inside_chunk = false;
}

void ThreadPool::work(int index, std::stop_token stop) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (!wake_.wait(lock, stop, [&] { return generation_ != seen; })) return;  // stop requested
      seen = generation_;
      if (index >= chunks_) continue;  // this job has fewer chunks than threads
    }
    run_chunk(index);
    std::lock_guard lock(mutex_);
    if (--pending_ == 0) done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t by_grain = (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1);
  const int chunks = int(std::min<int64_t>(size(), by_grain));
  if (chunks <= 1 || inside_chunk) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    pending_ = chunks - 1;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    error = error_;
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace nextn
