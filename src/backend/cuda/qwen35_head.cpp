// CudaQwen35's LM-head operations: the verify arms (batched / padded,
// fused, the early-exit walk in its two variants) and their work counters.
//
// Counting (ModelRuntime::head_work): the head kernels themselves add to a
// HeadCounters block in device memory (kernels.h): a projection block adds
// the weight bytes it read and the logits it stored, the block of the first
// output tile adds the rows and records the path; the walk's step adds the
// rows it took; the last kernel of an entry point adds one call. The host
// only passes the counters' address and the path id into the captured
// launches, and copies the block back in head_work().
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/head_counters.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/qwen35_runtime.h"
#include "core/error.h"

namespace nextn::cuda {

void CudaQwen35::head_project(int width, const HeadTally& tally) {
  cuda::gather_rows(hidden_, H_, &d_args_->first_row, &d_args_->n_real, width, head_in_, act_, stream_);
  cuda::matmul(w_->head, head_in_, act_, width, H_, logits_, V_, false, nullptr, stream_, tally);
}

void CudaQwen35::head_argmax_padded(int first, int count, int width, int32_t* out) {
  if (first < 0 || count < 0 || width < count || first + count > last_T_)
    fail("head_argmax: rows [{}, {}) of width {} outside the last forward's {} rows", first, first + count, width,
         last_T_);
  check_rows("head_argmax", width);
  if (count == 0) return;
  StepArgs a = args();
  a.first_row = first;
  a.n_real = std::min(width, last_T_ - first);
  upload(a);
  const bool padded = width > count;  // the path id is baked into the graph: one graph per (width, padded)
  const HeadTally t = tally(padded ? HeadPath::Padded : HeadPath::Batched);
  replay(GraphKind::HeadArgmax, width, padded ? 1 : 0, [&] {
    head_project(width, t);
    cuda::argmax_rows(logits_, width, V_, V_, argmax_scratch_, d_out_, stream_, t.counters);
  });
  fetch(d_out_, sizeof(int32_t) * size_t(count), out);
}

void CudaQwen35::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  check_rows("head_argmax_fused", count);
  fused_argmax_rows(GraphKind::HeadFused, w_->head, hidden_, first, count, out, tally(HeadPath::Fused));
}

DevMatrix CudaQwen35::draft_head() const {
  DevMatrix view = w_->head;
  view.rows = draft_vocab();
  return view;
}

// Rows [first, first + count) of `rows` (hidden_ or mtp_hidden_) through
// `head` (the LM head or its draft_head prefix) with the argmax fused in;
// one graph per (kind, count, head rows).
void CudaQwen35::fused_argmax_rows(GraphKind kind, const DevMatrix& head, const void* rows, int first, int count,
                                   int32_t* out, const HeadTally& t) {
  if (count == 0) return;
  StepArgs a = args();
  a.first_row = first;
  a.n_real = count;
  upload(a);
  replay(kind, count, head.rows, [&] {
    cuda::gather_rows(rows, H_, &d_args_->first_row, &d_args_->n_real, count, head_in_, act_, stream_);
    cuda::matmul_argmax(head, head_in_, act_, count, H_, pairs_, d_out_, nullptr, stream_, t);
  });
  fetch(d_out_, sizeof(int32_t) * size_t(count), out);
}

int CudaQwen35::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int nd = int(drafts.size());
  const int rows = std::min(nd + 1, last_T_);
  if (rows < 1) fail("head_walk: no rows in the last forward");
  if (nd > kMaxRows) fail("head_walk: {} drafts above {}", nd, kMaxRows);
  check_rows("head_walk", rows);
  if (fault_ == Fault::RuntimeWalkAsBatched) return walk_as_batched(drafts, rows, out);
  StepArgs a = args();
  std::copy(drafts.begin(), drafts.end(), a.drafts);
  upload(a);
  const int steps = walk_variant_ == WalkVariant::While ? walk_while(rows, nd, out) : walk_flag(rows, nd, out);
  if (steps < 1 || steps > rows) fail("internal: the device walk reports {} rows of {}", steps, rows);
  return steps;
}

// The planted fault (RuntimeOptions::fault, runtime-walk-as-batched): the
// walk entry point silently projects all rows in one batched call. The
// tokens stay right; the counters, written by the batched kernels, say what
// ran.
int CudaQwen35::walk_as_batched(std::span<const int32_t> drafts, int rows, int32_t* out) {
  head_argmax(0, rows, out);
  int steps = 1;
  while (steps < rows && out[steps - 1] == drafts[size_t(steps - 1)]) ++steps;
  return steps;
}

// One row of the while walk: project head_in_ (row j of the forward, put
// there by the previous step), then the step kernel compares, counts and
// either stops (WHILE condition 0) or copies row j + 1 into head_in_.
void CudaQwen35::record_walk_body(int rows, int nd, cudaStream_t s, cudaGraphConditionalHandle handle,
                                  int use_handle) {
  const int row_bytes = H_ * act_size(act_);
  cuda::matmul_argmax(w_->head, head_in_, act_, 1, H_, pairs_, nullptr, nullptr, s, tally(HeadPath::Walk));
  cuda::walk_step(w_->head, act_, pairs_, d_walk_, d_args_->drafts, std::min(nd, rows - 1), d_out_, rows, hidden_,
                  row_bytes, head_in_, d_head_, handle, use_handle, s);
}

// Device-side early exit that skips the work: a conditional WHILE node whose
// body projects one row; the step kernel of the row that mismatches sets the
// condition to 0, so no later row is launched. One graph per (rows, drafts);
// one copy back. Without graphs (RuntimeOptions::cuda_graphs false) the host
// runs the body row by row and reads the stop flag after each.
int CudaQwen35::walk_while(int rows, int nd, int32_t* out) {
  const size_t row_bytes = size_t(H_) * size_t(act_size(act_));
  auto prelude = [&] {
    CUDA_CHECK(cudaMemsetAsync(d_walk_, 0, 2 * sizeof(int), stream_));
    CUDA_CHECK(cudaMemcpyAsync(head_in_, hidden_, row_bytes, cudaMemcpyDeviceToDevice, stream_));
  };
  // The conditional node and its body graph take plain edges only.
  const PdlSuspend no_pdl;
  if (use_graphs_) {
    replay(GraphKind::WalkWhile, rows, nd, [&] {
      prelude();
      cudaStreamCaptureStatus status{};
      cudaGraph_t graph = nullptr;
      const cudaGraphNode_t* deps = nullptr;
      size_t n_deps = 0;
      CUDA_CHECK(cudaStreamGetCaptureInfo(stream_, &status, nullptr, &graph, &deps, nullptr, &n_deps));
      cudaGraphConditionalHandle handle{};
      CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
      cudaGraphNodeParams node_params{};
      node_params.type = cudaGraphNodeTypeConditional;
      node_params.conditional.handle = handle;
      node_params.conditional.type = cudaGraphCondTypeWhile;
      node_params.conditional.size = 1;
      cudaGraphNode_t node = nullptr;
      CUDA_CHECK(cudaGraphAddNode(&node, graph, deps, nullptr, n_deps, &node_params));
      CUDA_CHECK(cudaStreamUpdateCaptureDependencies(stream_, &node, nullptr, 1, cudaStreamSetCaptureDependencies));
      cudaGraph_t body = node_params.conditional.phGraph_out[0];
      CUDA_CHECK(cudaStreamBeginCaptureToGraph(body_stream_, body, nullptr, nullptr, 0,
                                               cudaStreamCaptureModeThreadLocal));
      try {
        record_walk_body(rows, nd, body_stream_, handle, 1);
      } catch (...) {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(body_stream_, &g);
        throw;
      }
      cudaGraph_t captured = nullptr;
      CUDA_CHECK(cudaStreamEndCapture(body_stream_, &captured));
    });
  } else {
    prelude();
    int stopped[2] = {0, 0};
    for (int j = 0; j < rows && stopped[1] == 0; ++j) {
      record_walk_body(rows, nd, stream_, cudaGraphConditionalHandle{}, 0);
      fetch(d_walk_, sizeof(stopped), stopped);
    }
  }
  std::vector<int32_t> got(size_t(rows) + 1);
  fetch(d_out_, sizeof(int32_t) * (size_t(rows) + 1), got.data());
  const int steps = got[size_t(rows)];
  if (steps >= 1 && steps <= rows) std::copy(got.begin(), got.begin() + steps, out);
  return steps;
}

// The flag walk: per row, a projection+argmax whose blocks return at once
// when the stop flag is set (they then read nothing and count nothing), then
// a compare that sets it at the first mismatch and counts the rows it took.
// All rows' kernels are launched; one graph; one copy back.
int CudaQwen35::walk_flag(int rows, int nd, int32_t* out) {
  const HeadTally t = tally(HeadPath::WalkFlag);
  replay(GraphKind::Walk, rows, nd, [&] {
    CUDA_CHECK(cudaMemsetAsync(d_walk_, 0, 2 * sizeof(int), stream_));
    const size_t row_bytes = size_t(H_) * act_size(act_);
    for (int j = 0; j < rows; ++j) {
      const void* x = static_cast<const char*>(hidden_) + size_t(j) * row_bytes;
      cuda::matmul_argmax(w_->head, x, act_, 1, H_, pairs_, nullptr, d_walk_, stream_, t);
      cuda::walk_compare(w_->head, act_, pairs_, j, d_args_->drafts, std::min(nd, rows - 1), d_out_, d_walk_,
                         d_walk_ + 1, stream_, d_head_);
    }
    CUDA_CHECK(cudaMemcpyAsync(d_out_ + rows, d_walk_ + 1, sizeof(int), cudaMemcpyDeviceToDevice, stream_));
  });
  std::vector<int32_t> got(size_t(rows) + 1);
  fetch(d_out_, sizeof(int32_t) * (size_t(rows) + 1), got.data());
  const int steps = got[size_t(rows)];
  if (steps >= 1 && steps <= rows) std::copy(got.begin(), got.begin() + steps, out);
  return steps;
}

void CudaQwen35::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  StepArgs a = args();
  a.first_row = row;
  a.n_real = 1;
  upload(a);
  replay(GraphKind::Logits, 1, 0, [&] { head_project(1, {}); });  // not verify work: uncounted
  fetch(logits_, sizeof(float) * size_t(V_), out);
}

void CudaQwen35::mtp_logits(float* out) {
  if (mtp_last_n_ == 0) fail("mtp_logits before any mtp_forward");
  StepArgs a = args();
  a.first_row = mtp_last_n_ - 1;
  a.n_real = 1;
  upload(a);
  const DevMatrix head = draft_head();
  replay(GraphKind::MtpLogits, 1, head.rows, [&] {  // uncounted, as head_logits
    cuda::gather_rows(mtp_hidden_, H_, &d_args_->first_row, &d_args_->n_real, 1, head_in_, act_, stream_);
    cuda::matmul(head, head_in_, act_, 1, H_, logits_, V_, false, nullptr, stream_, {});
  });
  fetch(logits_, sizeof(float) * size_t(head.rows), out);
  // Ids past the draft vocabulary are never drafted: probability 0, as on the CPU.
  std::fill(out + head.rows, out + V_, -INFINITY);
}

HeadWork CudaQwen35::head_work() const {
  HeadCounters c{};
  CUDA_CHECK(cudaMemcpyAsync(&c, d_head_, sizeof(c), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  HeadWork w = head_work_of(c);
  w.rows_projected += head_shift_.rows_projected;
  w.head_bytes_read += head_shift_.head_bytes_read;
  w.logits_bytes_written += head_shift_.logits_bytes_written;
  w.head_calls += head_shift_.head_calls;
  if (head_shift_.last_path != HeadPath::None) w.last_path = head_shift_.last_path;
  return w;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
