// CudaQwen35's LM-head operations: the verify arms (batched / padded,
// fused, the early-exit walk in its two variants) and their work counters.
//
// Counting (ModelRuntime::head_work): the head kernels themselves add to a
// HeadCounters block in device memory (kernels.h): a projection block adds
// the weight bytes it read and the logits it stored, the block of the first
// output tile adds the rows and records the path; the walk's step adds the
// rows it took; the last kernel of an entry point adds one call. The host
// only passes the counters' address and the path id into the captured
// launches; the block comes back with each call's fetch (Workspace::fetch).
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
  cuda::gather_rows(ws_.hidden, H_, &ws_.d_args->first_row, &ws_.d_args->n_real, width, ws_.head_in, act_, stream_);
  cuda::matmul(w_->head, ws_.head_in, act_, width, H_, ws_.logits, V_, false, nullptr, stream_, tally);
}

void CudaQwen35::head_argmax_padded(int first, int count, int width, int32_t* out) {
  if (first < 0 || count < 0 || width < count || first + count > state_.last_T)
    fail("head_argmax: rows [{}, {}) of width {} outside the last forward's {} rows", first, first + count, width,
         state_.last_T);
  check_rows("head_argmax", width);
  if (count == 0) return;
  StepArgs a = args();
  a.first_row = first;
  a.n_real = std::min(width, state_.last_T - first);
  ws_.upload(a, stream_);
  const bool padded = width > count;  // the path id is baked into the graph: one graph per (width, padded)
  const HeadTally t = tally(padded ? HeadPath::Padded : HeadPath::Batched);
  graphs_.replay(GraphKind::HeadArgmax, width, padded ? 1 : 0, [&] {
    head_project(width, t);
    cuda::argmax_rows(ws_.logits, width, V_, V_, ws_.argmax_scratch, ws_.d_out, stream_, t.counters);
  });
  ws_.fetch(ws_.d_out, sizeof(int32_t) * size_t(count), out, stream_);
}

void CudaQwen35::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > state_.last_T) fail("head_argmax_fused: rows outside the last forward");
  check_rows("head_argmax_fused", count);
  fused_argmax_rows(GraphKind::HeadFused, w_->head, ws_.hidden, first, count, out, tally(HeadPath::Fused));
}

DevMatrix CudaQwen35::draft_head() const {
  DevMatrix view = w_->head;
  view.rows = draft_vocab();
  return view;
}

// Rows [first, first + count) of `rows` (ws_.hidden or ws_.mtp_hidden) through
// `head` (the LM head or its draft_head prefix) with the argmax fused in;
// one graph per (kind, count, head rows).
void CudaQwen35::fused_argmax_rows(GraphKind kind, const DevMatrix& head, const void* rows, int first, int count,
                                   int32_t* out, const HeadTally& t) {
  if (count == 0) return;
  StepArgs a = args();
  a.first_row = first;
  a.n_real = count;
  ws_.upload(a, stream_);
  graphs_.replay(kind, count, head.rows, [&] {
    cuda::gather_rows(rows, H_, &ws_.d_args->first_row, &ws_.d_args->n_real, count, ws_.head_in, act_, stream_);
    cuda::matmul_argmax(head, ws_.head_in, act_, count, H_, ws_.pairs, ws_.d_out, nullptr, stream_, t);
  });
  ws_.fetch(ws_.d_out, sizeof(int32_t) * size_t(count), out, stream_);
}

int CudaQwen35::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int nd = int(drafts.size());
  const int rows = std::min(nd + 1, state_.last_T);
  if (rows < 1) fail("head_walk: no rows in the last forward");
  if (nd > kMaxRows) fail("head_walk: {} drafts above {}", nd, kMaxRows);
  check_rows("head_walk", rows);
  if (fault_ == Fault::RuntimeWalkAsBatched) return walk_as_batched(drafts, rows, out);
  StepArgs a = args();
  std::copy(drafts.begin(), drafts.end(), a.drafts);
  ws_.upload(a, stream_);
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

// One row of the while walk: project ws_.head_in (row j of the forward, put
// there by the previous step), then the step kernel compares, counts and
// either stops (WHILE condition 0) or copies row j + 1 into ws_.head_in.
void CudaQwen35::record_walk_body(int rows, int nd, cudaStream_t s, cudaGraphConditionalHandle handle,
                                  int use_handle) {
  const int row_bytes = H_ * act_size(act_);
  cuda::matmul_argmax(w_->head, ws_.head_in, act_, 1, H_, ws_.pairs, nullptr, nullptr, s, tally(HeadPath::Walk));
  cuda::walk_step(w_->head, act_, ws_.pairs, ws_.d_walk, ws_.d_args->drafts, std::min(nd, rows - 1), ws_.d_out, rows,
                  ws_.hidden, row_bytes, ws_.head_in, ws_.d_head, handle, use_handle, s);
}

// Device-side early exit that skips the work: a conditional WHILE node whose
// body projects one row; the step kernel of the row that mismatches sets the
// condition to 0, so no later row is launched. One graph per (rows, drafts);
// one copy back. Without graphs (RuntimeOptions::cuda_graphs false) the host
// runs the body row by row and reads the stop flag after each.
int CudaQwen35::walk_while(int rows, int nd, int32_t* out) {
  const size_t row_bytes = size_t(H_) * size_t(act_size(act_));
  auto prelude = [&] {
    CUDA_CHECK(cudaMemsetAsync(ws_.d_walk, 0, 2 * sizeof(int), stream_));
    CUDA_CHECK(cudaMemcpyAsync(ws_.head_in, ws_.hidden, row_bytes, cudaMemcpyDeviceToDevice, stream_));
  };
  // The conditional node and its body graph take plain edges only.
  const PdlSuspend no_pdl;
  if (graphs_.enabled()) {
    graphs_.replay(GraphKind::WalkWhile, rows, nd, [&] {
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
      ws_.fetch(ws_.d_walk, sizeof(stopped), stopped, stream_);
    }
  }
  std::vector<int32_t> got(size_t(rows) + 1);
  ws_.fetch(ws_.d_out, sizeof(int32_t) * (size_t(rows) + 1), got.data(), stream_);
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
  graphs_.replay(GraphKind::Walk, rows, nd, [&] {
    CUDA_CHECK(cudaMemsetAsync(ws_.d_walk, 0, 2 * sizeof(int), stream_));
    const size_t row_bytes = size_t(H_) * act_size(act_);
    for (int j = 0; j < rows; ++j) {
      const void* x = static_cast<const char*>(ws_.hidden) + size_t(j) * row_bytes;
      cuda::matmul_argmax(w_->head, x, act_, 1, H_, ws_.pairs, nullptr, ws_.d_walk, stream_, t);
      cuda::walk_compare(w_->head, act_, ws_.pairs, j, ws_.d_args->drafts, std::min(nd, rows - 1), ws_.d_out, ws_.d_walk,
                         ws_.d_walk + 1, stream_, ws_.d_head);
    }
    CUDA_CHECK(cudaMemcpyAsync(ws_.d_out + rows, ws_.d_walk + 1, sizeof(int), cudaMemcpyDeviceToDevice, stream_));
  });
  std::vector<int32_t> got(size_t(rows) + 1);
  ws_.fetch(ws_.d_out, sizeof(int32_t) * (size_t(rows) + 1), got.data(), stream_);
  const int steps = got[size_t(rows)];
  if (steps >= 1 && steps <= rows) std::copy(got.begin(), got.begin() + steps, out);
  return steps;
}

void CudaQwen35::head_logits(int row, float* out) {
  if (row < 0 || row >= state_.last_T)
    fail("head_logits: row {} outside the last forward's {} rows", row, state_.last_T);
  StepArgs a = args();
  a.first_row = row;
  a.n_real = 1;
  ws_.upload(a, stream_);
  graphs_.replay(GraphKind::Logits, 1, 0, [&] { head_project(1, {}); });  // not verify work: uncounted
  ws_.fetch(ws_.logits, sizeof(float) * size_t(V_), out, stream_);
}

void CudaQwen35::mtp_logits(float* out) {
  if (state_.mtp_last_n == 0) fail("mtp_logits before any mtp_forward");
  StepArgs a = args();
  a.first_row = state_.mtp_last_n - 1;
  a.n_real = 1;
  ws_.upload(a, stream_);
  const DevMatrix head = draft_head();
  graphs_.replay(GraphKind::MtpLogits, 1, head.rows, [&] {  // uncounted, as head_logits
    cuda::gather_rows(ws_.mtp_hidden, H_, &ws_.d_args->first_row, &ws_.d_args->n_real, 1, ws_.head_in, act_, stream_);
    cuda::matmul(head, ws_.head_in, act_, 1, H_, ws_.logits, V_, false, nullptr, stream_, {});
  });
  ws_.fetch(ws_.logits, sizeof(float) * size_t(head.rows), out, stream_);
  // Ids past the draft vocabulary are never drafted: probability 0, as on the CPU.
  std::fill(out + head.rows, out + V_, -INFINITY);
}

HeadWork CudaQwen35::head_work() const {
  // As of the last fetch (Workspace::fetch): no call is running.
  HeadWork w = head_work_of(*ws_.h_head.get());
  w.rows_projected += state_.head_shift.rows_projected;
  w.head_bytes_read += state_.head_shift.head_bytes_read;
  w.logits_bytes_written += state_.head_shift.logits_bytes_written;
  w.head_calls += state_.head_shift.head_calls;
  if (state_.head_shift.last_path != HeadPath::None) w.last_path = state_.head_shift.last_path;
  return w;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
