// A sequence's captured CUDA graphs (docs/cuda-backend.md, "Graphs"): each
// step kind is captured once per shape key on the sequence's stream and
// replayed after; the kernel nodes of every replay are counted
// (RuntimeProbe::kernels_launched). The group passes' graphs are keyed by
// the pass's shape and kept bounded (group_replay).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/device_handles.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/profiler.h"
#include "core/options.h"

namespace nextn::cuda {

enum class GraphKind : int {
  Forward, MtpForward, MtpStep, HeadArgmax, HeadFused, Walk, Logits, MtpArgmax, MtpDraft, WalkWhile, MtpLogits,
  GroupForward, GroupMtpForward, GroupMtpDraft, GroupRollback
};
const char* graph_kind_name(GraphKind kind);

// Group graphs one lead keeps (each is one captured group pass).
constexpr int kMaxGroupGraphs = 128;

class GraphCache {
 public:
  // Captures and replays on `stream`, marking ops through `prof` (both the
  // sequence's, and outliving this cache). options: cuda_graphs and pdl.
  GraphCache(const RuntimeOptions& options, cudaStream_t stream, Profiler& prof);
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // RuntimeOptions::cuda_graphs: false runs every step's launches directly.
  bool enabled() const { return use_graphs_; }
  // PdlPolicy::Off: no programmatic edges anywhere (the launches outside
  // graphs too).
  bool pdl_off_all() const { return pdl_off_all_; }
  int64_t kernels_launched() const { return kernels_launched_; }
  // Drops every captured graph (a buffer they point to was replaced); the
  // next replays capture again. The caller has waited for the stream.
  void clear() {
    graphs_.clear();
    group_graph_ids_.clear();
  }

  // Replays the graph for (kind, a, b), capturing `record` the first time; or
  // runs `record` directly when graphs are off (RuntimeOptions::cuda_graphs).
  template <typename F>
  void replay(GraphKind kind, int a, int b, F&& record);
  // Replays the group graph of `kind` for `key`, capturing `record` at the
  // key's second use (its first launches directly: a batch may never come
  // again); at most kMaxGroupGraphs of them are kept.
  template <typename F>
  void group_replay(GraphKind kind, std::vector<std::pair<uint64_t, int>> key, F&& record);

 private:
  // Graphs captured without programmatic edges (RuntimeOptions::pdl,
  // resolved at construction; PDL changes no bits). A group forward always
  // has more than one row.
  bool pdl_off(GraphKind kind, int rows) const {
    return pdl_off_all_ ||
           (pdl_off_multi_row_ && (kind == GraphKind::GroupForward || (kind == GraphKind::Forward && rows > 1)));
  }
  static int count_kernel_nodes(cudaGraph_t g);

  bool use_graphs_ = true;
  bool pdl_off_all_ = false;
  bool pdl_off_multi_row_ = false;
  cudaStream_t stream_;
  Profiler& prof_;
  // A captured step: its executable graph, the kernel nodes in it, and (in
  // the profile mode) the timing events between its operations.
  struct CapturedGraph {
    GraphExec exec;
    int kernels = 0;
    ProfileMarks marks;
  };
  std::map<std::tuple<int, int, int>, CapturedGraph> graphs_;
  int64_t kernels_launched_ = 0;
  // The group passes this sequence led: their shape key -> the `a` of the
  // graph and how often the key came. Bounded (group_replay).
  struct GroupGraphKey {
    GraphKind kind = GraphKind::GroupForward;
    int id = 0;
    int uses = 0;
  };
  std::map<std::vector<std::pair<uint64_t, int>>, GroupGraphKey> group_graph_ids_;
  int next_group_graph_id_ = 0;
};

template <typename F>
inline void GraphCache::replay(GraphKind kind, int a, int b, F&& record) {
  if (!use_graphs_) {
    std::optional<PdlSuspend> no_pdl;
    if (pdl_off_all_) no_pdl.emplace();
    record();
    return;
  }
  const auto key = std::make_tuple(int(kind), a, b);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    CapturedGraph entry;
    prof_.record_into(prof_.on() ? &entry.marks : nullptr);
    std::optional<PdlSuspend> no_pdl;
    if (pdl_off(kind, a)) no_pdl.emplace();
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      prof_.mark(graph_kind_name(kind), stream_);
      record();
      prof_.mark("end", stream_);
    } catch (...) {
      prof_.record_into(nullptr);
      Graph partial;
      (void)end_capture(stream_, &partial);
      (void)cudaGetLastError();
      throw;
    }
    prof_.record_into(nullptr);
    Graph graph;
    CUDA_CHECK(end_capture(stream_, &graph));
    entry.kernels = count_kernel_nodes(graph);
    entry.exec = instantiate(graph);
    it = graphs_.emplace(key, std::move(entry)).first;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
  kernels_launched_ += it->second.kernels;
  if (prof_.on()) prof_.add_intervals(it->second.marks, stream_);
}

// The server's batches change as requests come and go and as their blocks
// differ, and capturing a graph of thousands of nodes for a batch that never
// comes again costs more than launching it: a key's first use launches
// directly (and always with --graphs off), its second captures. Past
// kMaxGroupGraphs keys the lead drops them all (after its stream is idle)
// and starts over.
template <typename F>
inline void GraphCache::group_replay(GraphKind kind, std::vector<std::pair<uint64_t, int>> key, F&& record) {
  key.emplace_back(~uint64_t(0), int(kind));  // the kinds' keys apart
  auto it = group_graph_ids_.find(key);
  if (it == group_graph_ids_.end()) {
    if (group_graph_ids_.size() >= size_t(kMaxGroupGraphs)) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (const auto& entry : group_graph_ids_)
        graphs_.erase(std::make_tuple(int(entry.second.kind), entry.second.id, 0));
      group_graph_ids_.clear();
    }
    it = group_graph_ids_.emplace(std::move(key), GroupGraphKey{kind, next_group_graph_id_++, 0}).first;
  }
  if (it->second.uses++ == 0) {
    std::optional<PdlSuspend> no_pdl;
    if (pdl_off_all_) no_pdl.emplace();
    record();
  } else {
    replay(kind, it->second.id, 0, record);
  }
}

}  // namespace nextn::cuda
