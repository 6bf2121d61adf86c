// PrefillWorkspace (prefill_workspace.h): allocation, the prefill matmul and
// attention.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/prefill_workspace.h"

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/dtype.h"

namespace nextn::cuda {

PrefillWorkspace::PrefillWorkspace(const CudaQwen35Weights& w, const Workspace& ws, const SequenceState& state,
                                   int max_rows, cudaStream_t s, Allocator* from) {
  const auto& c = w.cfg;
  const int H = c.hidden_size;
  const size_t P = kPrefillRows, as = size_t(act_size(w.act));
  const int qd = c.num_attention_heads * c.head_dim;
  StepBuffers& b = rows;
  b.x = mem.alloc<float>(P * H * 4, "prefill activations", from);
  b.xn = mem.alloc(P * 2 * H * as, "prefill activations", from);
  b.proj = mem.alloc<float>(P * size_t(ws.proj_ld) * 4, "prefill activations", from);
  b.act = mem.alloc(P * size_t(ws.act_ld) * as, "prefill activations", from);
  b.q = mem.alloc<float>(P * size_t(qd) * 4, "prefill activations", from);
  d_tokens = mem.alloc<int32_t>(P * 4, "prefill tokens", from);
  d_pos = mem.alloc<int>(size_t(prefill_slices(max_rows)) * sizeof(int), "prefill positions", from);
  b.tokens = d_tokens;
  b.prefill = this;
  gdn_host = state.gdn_host;
  if (!state.gdn_host.empty()) {
    const int gdn_ld = state.gdn_host.front().proj_ld, cd = c.conv_dim();
    auto* proj = mem.alloc<float>(P * size_t(gdn_ld) * 4, "prefill GDN projections", from);
    auto* conv_out = mem.alloc<float>(P * size_t(cd) * 4, "prefill GDN conv outputs", from);
    for (auto& t : gdn_host) {
      t.proj = proj;
      t.conv_out = conv_out;
      t.y = b.act;
    }
  }
  b.gdn_table =
      mem.alloc<GdnLayer>(std::max<size_t>(1, gdn_host.size()) * sizeof(GdnLayer), "prefill GDN table", from);
  if (!gdn_host.empty())
    CUDA_CHECK(
        cudaMemcpy(b.gdn_table, gdn_host.data(), gdn_host.size() * sizeof(GdnLayer), cudaMemcpyHostToDevice));
  b.gdn_host = &gdn_host;
  int64_t need = 0;
  auto track = [&](const DevMatrix& m) {
    if (PrefillGemm::supported(m)) need = std::max(need, PrefillGemm::scratch_bytes(m));
  };
  for (const auto& L : w.layers) {
    for (const auto* lin : {&L.attn.qkv, &L.gdn_in, &L.gate_up})
      for (const auto& p : lin->parts) track(p.m);
    track(L.attn.o);
    track(L.gdn_out);
    track(L.down);
  }
  scratch = mem.alloc(size_t(std::max<int64_t>(need, 16)), "prefill weight expansion", from);
  gemm_ = std::make_unique<PrefillGemm>(s);
}

void PrefillWorkspace::project(const LayerContext& c, const DevMatrix& W, const void* x, int T, int ldx, float* y,
                               int ldy, bool accumulate) const {
  if (PrefillGemm::supported(W)) {
    gemm_->matmul(W, x, T, ldx, y, ldy, accumulate, scratch);
    return;
  }
  const size_t as = size_t(act_size(c.act));
  for (int t0 = 0; t0 < T; t0 += c.max_rows)
    cuda::matmul(W, static_cast<const char*>(x) + size_t(t0) * size_t(ldx) * as, c.act, std::min(c.max_rows, T - t0),
                 ldx, y + size_t(t0) * size_t(ldy), ldy, accumulate, c.splitk, c.stream);
}

void PrefillWorkspace::attention(const LayerContext& c, int T, KvBlocks kv, const StepBuffers& b) const {
  // The decode kernel in max_rows slices is the fallback for shapes the tensor-core kernel does not take.
  if (cuda::attention_prefill_supports(c.attn)) {
    // d_pos[0]: the chunk's first position (the prefill runs in the bf16 mode only).
    cuda::attention_prefill(c.attn, b.q, kv, b.proj, c.proj_ld, T, d_pos, b.act, c.stream);
    return;
  }
  const int qd = c.w.cfg.num_attention_heads * c.w.cfg.head_dim;
  const size_t as = size_t(act_size(c.act));
  for (int t0 = 0, i = 0; t0 < T; t0 += c.max_rows, ++i)
    cuda::attention(c.attn, b.q + size_t(t0) * qd, kv, c.act, b.proj + size_t(t0) * c.proj_ld,
                    c.proj_ld, std::min(c.max_rows, T - t0), d_pos + i, c.partial_positions, c.attn_partial,
                    static_cast<char*>(b.act) + size_t(t0) * qd * as, c.stream);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
