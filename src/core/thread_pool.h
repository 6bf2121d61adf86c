// A small persistent thread pool for data-parallel loops. parallel_for cuts
// [0, n) into contiguous chunks and returns when all are done. Callers parallelise over independent outputs only, so results do not
// depend on the thread count or on where the chunks are cut.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nextn {

// NEXTN_THREADS when set to a positive integer, else the hardware concurrency
// (at least 1). Throws Error on a malformed NEXTN_THREADS.
int default_thread_count();

class ThreadPool {
 public:
  // threads >= 1 (the calling thread counts as one; threads - 1 workers).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // fn(begin, end) over contiguous chunks of [0, n), each at least `grain`
  // items (the last may be shorter), up to 4 per thread. Threads, the caller
  // included, claim chunks until none is left, so a descheduled worker on a
  // busy machine delays only the chunk it holds. Idle workers poll for the
  // next job (pausing, then yielding the core) before they sleep. Rethrows the first
  // exception a chunk threw. A call from inside a chunk runs serially.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void work(std::stop_token stop);
  // Claims and runs chunks of job `generation` until none is left.
  void run_chunks(uint64_t generation);

  std::vector<std::jthread> workers_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // bumped per job
  // Copies for polling without the mutex: the latest job's generation, and
  // the generation whose chunks have all finished.
  std::atomic<uint64_t> published_{0}, all_finished_{0};
  // The current job, all guarded by mutex_:
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0, next_chunk_ = 0, finished_chunks_ = 0;
  std::exception_ptr error_;
};

}  // namespace nextn
