// CudaGemma4's LM-head entry points: batched / padded argmax, fused argmax,
// the early-exit walk (the flag variant of qwen35_head.cpp, launched on the
// stream) and full logits with the final softcap. The argmax paths project
// the raw logits: the softcap is monotone, and the CPU runtime takes the
// argmax of the raw logits too.
//
// The head kernels count their own work into the HeadCounters block
// (kernels.h); head_work() only copies it back.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/head_counters.h"
#include "backend/cuda/gemma4_runtime.h"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {

// head_in_ rows r < width: hidden row first + r for r < n_real, else zeros.
void CudaGemma4::gather_hidden(int first, int n_real, int width) {
  const int rows[2] = {first, n_real};
  CUDA_CHECK(cudaMemcpyAsync(d_rows_, rows, sizeof(rows), cudaMemcpyHostToDevice, stream_));
  gather_rows(hidden_, H_, d_rows_, d_rows_ + 1, width, head_in_, act_, stream_);
}

void CudaGemma4::head_argmax_padded(int first, int count, int width, int32_t* out) {
  if (first < 0 || count < 0 || width < count || first + count > last_T_)
    fail("head_argmax: rows [{}, {}) of width {} outside the last forward's {} rows", first, first + count, width,
         last_T_);
  if (width > kMaxRows) fail("head_argmax: width {} above {}", width, kMaxRows);
  if (count == 0) return;
  const HeadTally t = tally(width > count ? HeadPath::Padded : HeadPath::Batched);
  gather_hidden(first, std::min(width, last_T_ - first), width);
  matmul(head_, head_in_, act_, width, H_, logits_, V_, false, nullptr, stream_, t);
  argmax_rows(logits_, width, V_, V_, argmax_scratch_, d_out_, stream_, t.counters);
  fetch(d_out_, sizeof(int32_t) * size_t(count), out);
}

void CudaGemma4::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  if (count > kMaxRows) fail("head_argmax_fused: {} rows above {}", count, kMaxRows);
  if (count == 0) return;
  gather_hidden(first, count, count);
  matmul_argmax(head_, head_in_, act_, count, H_, pairs_, d_out_, nullptr, stream_, tally(HeadPath::Fused));
  fetch(d_out_, sizeof(int32_t) * size_t(count), out);
}

// Per row j: a projection + argmax whose blocks return at once when the stop
// flag is set (reading and counting nothing), then the compare that sets the
// flag at the first mismatch and counts the rows taken. One copy back.
int CudaGemma4::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int nd = int(drafts.size());
  const int rows = std::min(nd + 1, last_T_);
  if (rows < 1) fail("head_walk: no rows in the last forward");
  if (nd > kMaxRows) fail("head_walk: {} drafts above {}", nd, kMaxRows);
  if (nd > 0)
    CUDA_CHECK(cudaMemcpyAsync(d_drafts_, drafts.data(), sizeof(int32_t) * size_t(nd), cudaMemcpyHostToDevice,
                               stream_));
  CUDA_CHECK(cudaMemsetAsync(d_walk_, 0, 2 * sizeof(int), stream_));
  const HeadTally t = tally(HeadPath::WalkFlag);
  const size_t row_bytes = size_t(H_) * size_t(act_size(act_));
  for (int j = 0; j < rows; ++j) {
    const void* x = static_cast<const char*>(hidden_) + size_t(j) * row_bytes;
    matmul_argmax(head_, x, act_, 1, H_, pairs_, nullptr, d_walk_, stream_, t);
    walk_compare(head_, act_, pairs_, j, d_drafts_, std::min(nd, rows - 1), d_out_, d_walk_, d_walk_ + 1, stream_,
                 d_head_);
  }
  CUDA_CHECK(cudaMemcpyAsync(d_out_ + rows, d_walk_ + 1, sizeof(int), cudaMemcpyDeviceToDevice, stream_));
  std::vector<int32_t> got(size_t(rows) + 1);
  fetch(d_out_, sizeof(int32_t) * got.size(), got.data());
  const int steps = got[size_t(rows)];
  if (steps < 1 || steps > rows) fail("internal: the device walk reports {} rows of {}", steps, rows);
  std::copy(got.begin(), got.begin() + steps, out);
  return steps;
}

void CudaGemma4::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  gather_hidden(row, 1, 1);
  matmul(head_, head_in_, act_, 1, H_, logits_, V_, false, nullptr, stream_, {});  // not verify work: uncounted
  if (const float cap = cfg_.final_logit_softcapping; cap > 0.0f) softcap_floats(logits_, V_, cap, stream_);
  fetch(logits_, sizeof(float) * size_t(V_), out);
}

HeadWork CudaGemma4::head_work() const {
  HeadCounters c{};
  fetch(d_head_, sizeof(c), &c);
  return head_work_of(c);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
