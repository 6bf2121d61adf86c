#include "core/cpu_comm.h"

#include <algorithm>

namespace nextn {

class CpuCommGroup::Rank final : public Communicator {
 public:
  Rank(CpuCommGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void all_reduce_sum(float* data, size_t count) override { group_.all_reduce_sum(rank_, data, count); }
  void all_gather(const float* send, size_t count, float* recv) override {
    group_.all_gather(rank_, send, count, recv);
  }
  void argmax_reduce(std::span<ArgmaxCandidate> rows) override { group_.argmax_reduce(rank_, rows); }

 private:
  CpuCommGroup& group_;
  int rank_;
};

CpuCommGroup::CpuCommGroup(int size) : slots_(size_t(std::max(size, 0))) {
  if (size < 1) fail("internal: a communicator of {} ranks", size);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

CpuCommGroup::~CpuCommGroup() = default;

Communicator& CpuCommGroup::communicator(int rank) {
  if (rank < 0 || rank >= size()) fail("internal: rank {} of {}", rank, size());
  return *ranks_[size_t(rank)];
}

void CpuCommGroup::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  arrived_all_.notify_all();
}

void CpuCommGroup::reset() {
  std::lock_guard lock(mutex_);
  aborted_ = false;
  arrived_ = 0;
}

void CpuCommGroup::barrier() {
  std::unique_lock lock(mutex_);
  if (aborted_) throw CommAborted();
  const uint64_t phase = phase_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++phase_;
    arrived_all_.notify_all();
    return;
  }
  arrived_all_.wait(lock, [&] { return phase_ != phase || aborted_; });
  if (phase_ == phase) throw CommAborted();
}

void CpuCommGroup::check_counts(const char* what) const {
  for (const Slot& s : slots_)
    if (s.count != slots_[0].count)
      fail("internal: tensor parallel {}: ranks passed {} and {} elements", what, slots_[0].count, s.count);
}

// Two barriers: after the first every input is published; each rank sums its
// own element range over the ranks in rank order; after the second every
// range is summed and each rank copies all of them into its data. A rank
// may leave and write its data at once: the others read only the sums then,
// and the next collective's first barrier waits for them.
void CpuCommGroup::all_reduce_sum(int rank, float* data, size_t count) {
  const size_t n = size_t(size());
  Slot& mine = slots_[size_t(rank)];
  mine.data = data;
  mine.count = count;
  barrier();
  check_counts("all_reduce_sum");
  const size_t begin = count * size_t(rank) / n, end = count * size_t(rank + 1) / n;
  mine.sums.resize(end - begin);
  for (size_t i = begin; i < end; ++i) {
    float s = slots_[0].data[i];
    for (size_t r = 1; r < n; ++r) s += slots_[r].data[i];
    mine.sums[i - begin] = s;
  }
  barrier();
  for (size_t r = 0; r < n; ++r) std::copy(slots_[r].sums.begin(), slots_[r].sums.end(), data + count * r / n);
}

void CpuCommGroup::all_gather(int rank, const float* send, size_t count, float* recv) {
  Slot& mine = slots_[size_t(rank)];
  mine.data = send;
  mine.count = count;
  barrier();
  check_counts("all_gather");
  for (size_t r = 0; r < slots_.size(); ++r) std::copy_n(slots_[r].data, count, recv + r * count);
  barrier();  // every rank has read `send` before its owner may change it
}

void CpuCommGroup::argmax_reduce(int rank, std::span<ArgmaxCandidate> rows) {
  Slot& mine = slots_[size_t(rank)];
  mine.rows = rows.data();
  mine.count = rows.size();
  barrier();
  check_counts("argmax_reduce");
  std::vector<ArgmaxCandidate> best(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (const Slot& s : slots_)  // rank order; the rule itself does not depend on it
      if (argmax_candidate_beats(s.rows[i], best[i])) best[i] = s.rows[i];
  barrier();  // every rank has read the others' rows before any is overwritten
  std::copy(best.begin(), best.end(), rows.begin());
}

bool is_comm_aborted(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CommAborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace nextn
