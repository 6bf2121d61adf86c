#include "core/thread_pool.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace nextn {
namespace {
thread_local bool inside_chunk = false;  // nested parallel_for runs serially

// How a worker (or the caller waiting for the last chunk) waits before it
// sleeps on the condition variable: the jobs of one forward (a matrix
// product, attention, the GDN heads, the next product) arrive microseconds
// apart, and a sleep and wake-up through the kernel costs more than that.
// First 256 polls with the pause instruction (about 10 us), then 64 polls
// yielding the core between polls: on an idle machine a yield returns at
// once, on a busy one it lets another runnable thread (often this pool's
// own caller) have the core instead of burning it. Measured on the shared
// 2-core machine: pure pause-polling for ~50 us doubled decode when the
// machine was quiet but cost a third under load 6; this mix kept the gain
// and matched the sleeping pool under load.
constexpr int kPausePolls = 256;
constexpr int kYieldPolls = 64;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

template <class Ready>
void poll_until(Ready ready) {
  for (int i = 0; i < kPausePolls; ++i) {
    if (ready()) return;
    cpu_relax();
  }
  for (int i = 0; i < kYieldPolls && !ready(); ++i) std::this_thread::yield();
}
}  // namespace

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
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this](std::stop_token stop) { work(stop); });
}

ThreadPool::~ThreadPool() {
  for (auto& w : workers_) w.request_stop();
  wake_.notify_all();
  // Joined here, not by the jthreads' own destructors: workers_ is declared
  // before the mutex and condition variables, so it is destroyed after them,
  // and a worker still inside wake_.wait() would touch a destroyed wake_
  // (ASan: heap-use-after-free in condition_variable_any::wait).
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks(uint64_t generation) {
  for (;;) {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t begin, end;
    {
      std::lock_guard lock(mutex_);
      if (generation_ != generation || next_chunk_ >= chunks_) return;
      const int c = next_chunk_++;
      fn = fn_;
      begin = n_ * c / chunks_;
      end = n_ * (c + 1) / chunks_;
    }
    inside_chunk = true;
    std::exception_ptr error;
    try {
      if (begin < end) (*fn)(begin, end);
    } catch (...) {
      error = std::current_exception();
    }
    inside_chunk = false;
    std::lock_guard lock(mutex_);
    if (error && !error_) error_ = error;
    if (++finished_chunks_ == chunks_) {
      all_finished_.store(generation, std::memory_order_release);
      done_.notify_one();
    }
  }
}

void ThreadPool::work(std::stop_token stop) {
  uint64_t seen = 0;
  for (;;) {
    poll_until([&] { return published_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mutex_);
      if (!wake_.wait(lock, stop, [&] { return generation_ != seen; })) return;  // stop requested
      seen = generation_;
    }
    run_chunks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t g = std::max<int64_t>(grain, 1);
  const int chunks = int(std::min<int64_t>(int64_t(size()) * 4, (n + g - 1) / g));
  if (size() == 1 || chunks <= 1 || inside_chunk) {
    fn(0, n);
    return;
  }
  uint64_t generation;
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    next_chunk_ = finished_chunks_ = 0;
    error_ = nullptr;
    generation = ++generation_;
    published_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(generation);
  poll_until([&] { return all_finished_.load(std::memory_order_acquire) == generation; });
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_chunks_ == chunks_; });
    error = error_;
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace nextn
