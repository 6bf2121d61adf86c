// CudaQwen35's prefill: the tokens of a long forward, all but its last
// <= kMaxRows (which the 64-row graphs run, so that rollback and the
// batch-invariance contract of short forwards are untouched), in chunks of
// kPrefillRows through PrefillGemm (cuBLAS tensor cores on bf16-expanded
// weights) instead of 64-row slices of the streamed decode kernel. Attention
// goes through attention_prefill (tensor cores, the whole chunk in one
// launch; an unsupported head_dim: the decode kernel in max_rows_ slices,
// reusing the decode workspace), the GDN recurrence through
// gdn_prefill_recurrence (a projection buffer narrower than the value width:
// the decode kernel). The other operations are the decode kernels on more
// rows. Only in the bf16 mode: the fp32 mode, which the CPU parity tests
// use, keeps every forward on the graphs.
//
// The workspace (PrefillWorkspace, prefill_workspace.h: activations, GDN
// projections and conv outputs for kPrefillRows rows, the weight expansion
// scratch, the cuBLAS handle) is held only while a prompt needs it: a long
// forward allocates it, the next forward that needs none (the first decode
// step), reset() or the destructor releases it; a step reserves it before
// its first launch (reserve_step), from the group's allocator. Releasing it
// at the next forward rather than at the end of the prompt leaves it in place for whoever samples device memory
// after the prompt (bench decode's peak), and costs the first decode step a
// device sync. The prefill does not run inside a graph, so no graph holds
// its pointers.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_workspace.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/error.h"

namespace nextn::cuda {

int graph_only_rows(bool prefill_gemm, Act act) {
  return prefill_gemm && act == Act::BF16 ? kMaxRows : std::numeric_limits<int>::max();
}

bool CudaQwen35::prefill_applies(int T) const { return T > graph_only_rows(prefill_gemm_enabled_, act_); }

void CudaQwen35::prefill_release() {
  if (!prefill_) return;
  ws_.wait(stream_);  // queued prefill work may still read the buffers
  prefill_.reset();
}

void CudaQwen35::prefill_allocate() {
  if (prefill_) return;
  Allocator* const from = allocator_ ? *allocator_ : nullptr;  // null: cudaMalloc (the product)
  prefill_ = std::make_unique<PrefillWorkspace>(*w_, ws_, state_, max_rows_, stream_, from);
}

void CudaQwen35::reserve_step(std::span<const int32_t> tokens, int mtp_end) {
  check_forward(tokens);
  if (mtp_end > 0 && !w_->has_mtp)
    fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  if (mtp_end > max_tokens_) fail("MTP cache capacity {} exceeded ({} entries)", max_tokens_, mtp_end);
  hold_positions(std::max(state_.length + int(tokens.size()), mtp_end));
  hold_rows(int(tokens.size()));
  // A refusal part way leaves the sequence holding none: what the
  // workspace's constructor took goes back as it unwinds.
  if (prefill_applies(int(tokens.size()))) prefill_allocate();
}

void CudaQwen35::prefill_chunk(int n) {
  const LayerContext c = layer_context();
  const StepBuffers& b = prefill_->rows;
  c.mark("embed");
  cuda::embed_rows(w_->embed, b.tokens, n, b.x, H_, stream_);
  for (auto& L : w_->layers) decoder_layer(c, L, n, b, sequence_view());
  c.mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H_, w_->final_norm, cfg_.rms_norm_eps, n, H_, ws_.hidden, act_, H_,
                &ws_.d_args->out_row, stream_);
}

void CudaQwen35::prefill(std::span<const int32_t> tokens) {
  prefill_allocate();
  std::optional<PdlSuspend> no_pdl;  // PdlPolicy::Off reaches the launches outside graphs too
  if (graphs_.pdl_off_all()) no_pdl.emplace();
  const int total = int(tokens.size());
  // Profile mode: the same marks as in the graphs, recorded as plain events.
  ProfileMarks marks;
  if (profiler_.on()) {
    profiler_.record_into(&marks);
    profiler_.set_prefix("prefill.");
  }
  for (int done = 0; done < total;) {
    const int n = std::min(kPrefillRows, total - done);
    StepArgs a = args();
    a.pos = state_.length + done;
    a.out_row = done;
    ws_.upload(a, stream_);
    std::vector<int> pos(size_t(prefill_slices(max_rows_)));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = a.pos + int(i) * max_rows_;
    CUDA_CHECK(cudaMemcpyAsync(prefill_->d_tokens, tokens.data() + done, size_t(n) * 4, cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(prefill_->d_pos, pos.data(), pos.size() * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
    prefill_chunk(n);
    state_.parity ^= 1;
    done += n;
  }
  if (profiler_.on()) {
    profiler_.mark("end", stream_);
    profiler_.record_into(nullptr);
    profiler_.set_prefix({});
    profiler_.add_intervals(marks, stream_);
  }
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
