// The CPU communicator (core/comm.h): the ranks are threads of one process
// (core/rank_threads.h runs them) and exchange data through shared memory.
// Each collective publishes the rank's buffer, meets the others at a
// barrier and reads theirs; the sum is split by element ranges, each range
// summed by one rank in rank order, so the result does not depend on which
// thread arrives first.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "core/comm.h"
#include "core/error.h"

namespace nextn {

// What a rank waiting in a collective gets when another rank failed
// (CpuCommGroup::abort): the failure itself is the other rank's error.
class CommAborted : public Error {
 public:
  CommAborted() : Error("tensor parallel: another rank failed during a collective") {}
};

// Whether `e` is a CommAborted: an error that only reports another rank's
// failure (RankThreads::run's is_secondary).
bool is_comm_aborted(const std::exception_ptr& e);

class CpuCommGroup {
 public:
  explicit CpuCommGroup(int size);  // size >= 1 ranks
  ~CpuCommGroup();
  CpuCommGroup(const CpuCommGroup&) = delete;
  CpuCommGroup& operator=(const CpuCommGroup&) = delete;

  int size() const { return int(slots_.size()); }
  // Rank `rank`'s communicator; only that rank's thread calls it.
  Communicator& communicator(int rank);
  // Wakes every rank waiting in a collective (they throw CommAborted), and
  // every later collective throws too until reset(): a rank that failed
  // calls it so that the others do not wait for it forever.
  void abort();
  // Ready for collectives again; only while no rank is inside one.
  void reset();

 private:
  class Rank;
  // What rank r publishes for the collective in progress.
  struct Slot {
    const float* data = nullptr;
    size_t count = 0;
    std::vector<float> sums;  // all_reduce_sum: this rank's range of the sum
    ArgmaxCandidate* rows = nullptr;
  };
  // Waits until every rank has arrived; throws CommAborted after abort().
  void barrier();
  void all_reduce_sum(int rank, float* data, size_t count);
  void all_gather(int rank, const float* send, size_t count, float* recv);
  void argmax_reduce(int rank, std::span<ArgmaxCandidate> rows);
  // Throws Error (on every rank alike) when the ranks' counts differ.
  void check_counts(const char* what) const;

  std::vector<Slot> slots_;  // [size]
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable arrived_all_;
  int arrived_ = 0;
  uint64_t phase_ = 0;  // barriers passed
  bool aborted_ = false;
};

}  // namespace nextn
