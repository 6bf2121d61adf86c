// GraphCache (graph_cache.h): the PDL policy it captures under, the kinds'
// names (the profile mode's first mark of a graph) and kernel-node counting.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/graph_cache.h"

namespace nextn::cuda {

GraphCache::GraphCache(const RuntimeOptions& options, cudaStream_t stream, Profiler& prof)
    : use_graphs_(options.cuda_graphs), stream_(stream), prof_(prof) {
  // PdlPolicy::Off, the default: no graph and no prefill launch with PDL. Measured
  // on 9704bb8 (docs/benchmark_results/decode-h200-2026-12-05c.md): one-row
  // decode took 12.7 % (27B q4), 6.5 % (4B) and 0.8 % (0.8B) less without
  // it, and the K = 4 rounds 0-3.7 % less. (On 12-01, before the folds, the
  // attention split and the GDN step, it was the faster setting.)
  pdl_off_all_ = options.pdl == PdlPolicy::Off;
  pdl_off_multi_row_ = options.pdl == PdlPolicy::MultiRowOff;
}

const char* graph_kind_name(GraphKind kind) {
  switch (kind) {
    case GraphKind::Forward: return "forward";
    case GraphKind::MtpForward: return "mtp_forward";
    case GraphKind::MtpStep: return "mtp_step";
    case GraphKind::HeadArgmax: return "head_argmax";
    case GraphKind::HeadFused: return "head_fused";
    case GraphKind::Walk: return "walk";
    case GraphKind::Logits: return "logits";
    case GraphKind::MtpArgmax: return "mtp_argmax";
    case GraphKind::MtpDraft: return "mtp_draft";
    case GraphKind::WalkWhile: return "walk_while";
    case GraphKind::MtpLogits: return "mtp_logits";
    case GraphKind::GroupForward: return "group_forward";
    case GraphKind::GroupMtpForward: return "group_mtp_forward";
    case GraphKind::GroupMtpDraft: return "group_mtp_draft";
    case GraphKind::GroupRollback: return "group_rollback";
  }
  return "?";
}

int GraphCache::count_kernel_nodes(cudaGraph_t g) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  int kernels = 0;
  for (auto node : nodes) {
    cudaGraphNodeType t{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeKernel) ++kernels;
  }
  return kernels;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
