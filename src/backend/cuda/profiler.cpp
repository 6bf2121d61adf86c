// The profile mode's marks and totals (profiler.h).
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/profiler.h"

#include "backend/cuda/check.h"

namespace nextn::cuda {

void Profiler::mark(const char* op, cudaStream_t s) {
  if (recording_ == nullptr) return;
  recording_->emplace_back(make_event(), prefix_ + op);
  cudaStreamCaptureStatus status{};
  CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  // In a capture the event becomes a graph node; outside one (the prefill) a plain record.
  if (status == cudaStreamCaptureStatusActive)
    CUDA_CHECK(cudaEventRecordWithFlags(recording_->back().first, s, cudaEventRecordExternal));
  else
    CUDA_CHECK(cudaEventRecord(recording_->back().first, s));
}

void Profiler::add_intervals(const ProfileMarks& marks, cudaStream_t s) {
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i + 1 < marks.size(); ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, marks[i].first, marks[i + 1].first));
    auto& slot = op_ms_[marks[i].second];
    slot.first += 1;
    slot.second += double(ms);
  }
}

std::vector<OpTiming> Profiler::timings() const {
  std::vector<OpTiming> v;
  for (const auto& [op, t] : op_ms_) v.push_back({op, t.first, t.second});
  return v;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
