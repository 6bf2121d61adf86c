// CudaGemma4's LM-head entry points: batched / padded argmax (one sequence's
// rows, or the group's rows of several in one projection), fused argmax,
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

void CudaGemma4Model::gather_hidden(const void* rows_src, int first, int n_real, int width) {
  const int range[2] = {first, n_real};
  CUDA_CHECK(cudaMemcpyAsync(d_head_rows, range, sizeof(range), cudaMemcpyHostToDevice, stream));
  gather_rows(rows_src, H, d_head_rows, d_head_rows + 1, width, head_in, act, stream);
}

void CudaGemma4::head_argmax_padded(int first, int count, int width, int32_t* out) {
  if (first < 0 || count < 0 || width < count || first + count > last_T_)
    fail("head_argmax: rows [{}, {}) of width {} outside the last forward's {} rows", first, first + count, width,
         last_T_);
  if (width > kMaxRows) fail("head_argmax: width {} above {}", width, kMaxRows);
  if (count == 0) return;
  CudaGemma4Model& m = *m_;
  const HeadTally t = tally(width > count ? HeadPath::Padded : HeadPath::Batched);
  m.gather_hidden(hidden_, first, std::min(width, last_T_ - first), width);
  matmul(m.head, m.head_in, m.act, width, m.H, m.logits, m.V, false, nullptr, m.stream, t);
  argmax_rows(m.logits, width, m.V, m.V, m.argmax_scratch, m.d_out, m.stream, t.counters);
  m.fetch(m.d_out, sizeof(int32_t) * size_t(count), out);
}

void CudaGemma4::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  if (count > kMaxRows) fail("head_argmax_fused: {} rows above {}", count, kMaxRows);
  if (count == 0) return;
  CudaGemma4Model& m = *m_;
  m.gather_hidden(hidden_, first, count, count);
  matmul_argmax(m.head, m.head_in, m.act, count, m.H, m.pairs, m.d_out, nullptr, m.stream, tally(HeadPath::Fused));
  m.fetch(m.d_out, sizeof(int32_t) * size_t(count), out);
}

// Per row j: a projection + argmax whose blocks return at once when the stop
// flag is set (reading and counting nothing), then the compare that sets the
// flag at the first mismatch and counts the rows taken. One copy back.
int CudaGemma4::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int nd = int(drafts.size());
  const int rows = std::min(nd + 1, last_T_);
  if (rows < 1) fail("head_walk: no rows in the last forward");
  if (nd > kMaxRows) fail("head_walk: {} drafts above {}", nd, kMaxRows);
  CudaGemma4Model& m = *m_;
  if (nd > 0)
    CUDA_CHECK(cudaMemcpyAsync(m.d_drafts, drafts.data(), sizeof(int32_t) * size_t(nd), cudaMemcpyHostToDevice,
                               m.stream));
  CUDA_CHECK(cudaMemsetAsync(m.d_walk, 0, 2 * sizeof(int), m.stream));
  const HeadTally t = tally(HeadPath::WalkFlag);
  const size_t row_bytes = size_t(m.H) * size_t(act_size(m.act));
  for (int j = 0; j < rows; ++j) {
    const void* x = static_cast<const char*>(hidden_) + size_t(j) * row_bytes;
    matmul_argmax(m.head, x, m.act, 1, m.H, m.pairs, nullptr, m.d_walk, m.stream, t);
    walk_compare(m.head, m.act, m.pairs, j, m.d_drafts, std::min(nd, rows - 1), m.d_out, m.d_walk, m.d_walk + 1,
                 m.stream, d_head_);
  }
  CUDA_CHECK(cudaMemcpyAsync(m.d_out + rows, m.d_walk + 1, sizeof(int), cudaMemcpyDeviceToDevice, m.stream));
  std::vector<int32_t> got(size_t(rows) + 1);
  m.fetch(m.d_out, sizeof(int32_t) * got.size(), got.data());
  const int steps = got[size_t(rows)];
  if (steps < 1 || steps > rows) fail("internal: the device walk reports {} rows of {}", steps, rows);
  std::copy(got.begin(), got.begin() + steps, out);
  return steps;
}

void CudaGemma4::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  CudaGemma4Model& m = *m_;
  m.gather_hidden(hidden_, row, 1, 1);
  matmul(m.head, m.head_in, m.act, 1, m.H, m.logits, m.V, false, nullptr, m.stream, {});  // not verify work: uncounted
  if (const float cap = m.cfg.final_logit_softcapping; cap > 0.0f) softcap_floats(m.logits, m.V, cap, m.stream);
  m.fetch(m.logits, sizeof(float) * size_t(m.V), out);
}

// The group head (gemma4_group.cpp) counts a call on the first sequence's
// counters; the others' rows and calls are shifted here.
HeadWork CudaGemma4::head_work() const {
  HeadCounters c{};
  m_->fetch(d_head_, sizeof(c), &c);
  HeadWork w = head_work_of(c);
  w.rows_projected += head_shift_.rows_projected;
  w.head_bytes_read += head_shift_.head_bytes_read;
  w.logits_bytes_written += head_shift_.logits_bytes_written;
  w.head_calls += head_shift_.head_calls;
  if (head_shift_.last_path != HeadPath::None) w.last_path = head_shift_.last_path;
  return w;
}

void CudaGemma4::head_argmax_together(std::span<CudaGemma4* const> seqs, std::span<const SequenceRows> rows,
                                      int32_t* out) {
  if (seqs.empty() || seqs.size() != rows.size())
    fail("internal: head_argmax_together of {} sequences and {} row lists", seqs.size(), rows.size());
  CudaGemma4Model& m = *seqs[0]->m_;
  int R = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const CudaGemma4& s = *seqs[i];
    const SequenceRows& r = rows[i];
    if (r.first < 0 || r.count < 1 || r.first + r.count > s.last_T_ || s.m_.get() != &m)
      fail("head_argmax: rows [{}, {}) outside the last forward's {} rows", r.first, r.first + r.count, s.last_T_);
    R += r.count;
  }
  if (R > kMaxRows) fail("internal: head_argmax_together of {} rows above {}", R, kMaxRows);
  CudaGemma4& lead = *seqs[0];
  const size_t row_bytes = size_t(m.H) * size_t(act_size(m.act));
  size_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(m.head_in) + at * row_bytes,
                               static_cast<const char*>(seqs[i]->hidden_) + size_t(rows[i].first) * row_bytes,
                               size_t(rows[i].count) * row_bytes, cudaMemcpyDeviceToDevice, m.stream));
    at += size_t(rows[i].count);
  }
  // The lead's counters before and after: the device counts the whole call there.
  HeadCounters* counts = m.h_counts.get();  // pinned: the copies wait for nothing
  CUDA_CHECK(cudaMemcpyAsync(&counts[0], lead.d_head_, sizeof(HeadCounters), cudaMemcpyDeviceToHost, m.stream));
  const HeadTally t = lead.tally(HeadPath::Batched);
  matmul(m.head, m.head_in, m.act, R, m.H, m.logits, m.V, false, nullptr, m.stream, t);
  argmax_rows(m.logits, R, m.V, m.V, m.argmax_scratch, m.d_out, m.stream, t.counters);
  CUDA_CHECK(cudaMemcpyAsync(&counts[1], lead.d_head_, sizeof(HeadCounters), cudaMemcpyDeviceToHost, m.stream));
  m.fetch(m.d_out, sizeof(int32_t) * size_t(R), out);
  // Each sequence gets its own rows and logits, the head read once, one call.
  const HeadWork was = head_work_of(counts[0]), call = head_work_of(counts[1]);
  const int64_t bytes = call.head_bytes_read - was.head_bytes_read;
  const int64_t logits_per_row = int64_t(m.V) * int64_t(sizeof(float));
  for (size_t i = 0; i < seqs.size(); ++i) {
    HeadWork& shift = seqs[i]->head_shift_;
    const int64_t rows_i = rows[i].count, counted = i == 0 ? R : 0;
    shift.rows_projected += rows_i - counted;
    shift.logits_bytes_written += (rows_i - counted) * logits_per_row;
    if (i > 0) {
      shift.head_bytes_read += bytes;
      shift.head_calls += 1;
    }
    shift.last_path = HeadPath::Batched;
  }
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
