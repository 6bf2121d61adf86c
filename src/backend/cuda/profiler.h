// The CUDA runtime's profile mode (RuntimeOptions::profile): where a
// sequence's device time goes, per class of operation. The steps call
// mark(op) where op begins; while a graph is captured (GraphCache::replay)
// or a prefill runs, each mark records an event on the stream (a graph node
// in a capture); after the replay the intervals between consecutive marks
// are added to the op's total. Event nodes keep the kernels on both sides
// from overlapping, so this mode times each class without PDL's overlap.
// Outside the profile mode mark() records nothing.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "model/bench_interfaces.h"

namespace nextn::cuda {

// A captured step's timing events, each named by the op that begins there.
using ProfileMarks = std::vector<std::pair<Event, std::string>>;

class Profiler {
 public:
  explicit Profiler(bool on = false) : on_(on) {}
  bool on() const { return on_; }
  // Where mark() records from now on (null: nowhere). The caller owns the
  // marks (a captured graph keeps them for its replays).
  void record_into(ProfileMarks* marks) { recording_ = marks; }
  // Put before every op name marked from now on ("mtp." inside the MTP's layer).
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  void mark(const char* op, cudaStream_t s);
  // Waits for `s`, then adds the intervals between consecutive marks.
  void add_intervals(const ProfileMarks& marks, cudaStream_t s);
  std::vector<OpTiming> timings() const;
  void clear() { op_ms_.clear(); }

 private:
  bool on_ = false;
  std::string prefix_;
  ProfileMarks* recording_ = nullptr;
  std::map<std::string, std::pair<int64_t, double>> op_ms_;  // op -> (intervals, summed ms)
};

}  // namespace nextn::cuda
