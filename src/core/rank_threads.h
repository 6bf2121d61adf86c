// Runs the ranks of a tensor-parallel model as threads (docs/tensor-parallel.md):
// one persistent thread per rank past the first, rank 0 on the calling
// thread. Every rank must run at once (they meet in collectives), so this is
// not a ThreadPool, whose chunks may run one after another on one thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nextn {

class RankThreads {
 public:
  explicit RankThreads(int ranks);  // ranks >= 1
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int ranks() const { return int(workers_.size()) + 1; }
  // fn(rank) on every rank at once; returns when all have returned. When a
  // rank throws, on_error() runs at once on its thread (it aborts the
  // communicator, so that ranks waiting for it in a collective stop waiting);
  // after all have returned the lowest rank's error is rethrown, preferring
  // an error of its own to one that only reports another rank's failure
  // (`is_secondary`).
  void run(const std::function<void(int)>& fn, const std::function<void()>& on_error,
           const std::function<bool(const std::exception_ptr&)>& is_secondary);

 private:
  void work(std::stop_token stop, int rank);
  void run_rank(int rank);

  std::vector<std::jthread> workers_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // bumped per run
  int finished_ = 0;         // workers done with the current run
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void()>* on_error_ = nullptr;
  std::vector<std::exception_ptr> errors_;  // [ranks], the current run's
};

}  // namespace nextn
