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
// The workspace (activations, GDN projections and conv outputs for
// kPrefillRows rows, the weight expansion scratch, the cuBLAS handle) lives
// in prefill_mem_ only while a prompt needs it: a long forward allocates it,
// the next forward that needs none (the first decode step), reset() or the
// destructor releases it; a step reserves it before its first launch
// (reserve_step), from the group's allocator. Releasing it at the next forward rather than at the
// end of the prompt leaves it in place for whoever samples device memory
// after the prompt (bench decode's peak), and costs the first decode step a
// device sync. The prefill does not run inside a graph, so no graph holds
// its pointers.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/error.h"

namespace nextn::cuda {

bool CudaQwen35::prefill_applies(int T) const { return prefill_gemm_enabled_ && act_ == Act::BF16 && T > kMaxRows; }

void CudaQwen35::prefill_release() {
  if (!prefill_gemm_ && prefill_mem_.total() == 0) return;  // none held (or an allocation that failed part way)
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued prefill work may still read the buffers
  prefill_gemm_.reset();
  prefill_mem_ = DeviceMemory();
  prefill_buffers_ = StepBuffers{};
  prefill_gdn_host_.clear();
  d_prefill_tokens_ = nullptr;
  d_prefill_pos_ = nullptr;
  prefill_scratch_ = nullptr;
}

// Attention slices of max_rows_ rows per prefill chunk.
static int prefill_slices(int max_rows) { return (kPrefillRows + max_rows - 1) / max_rows; }

void CudaQwen35::prefill_allocate() {
  if (prefill_gemm_) return;
  prefill_release();  // what an earlier attempt that ran out of memory left
  const auto& c = cfg_;
  const size_t P = kPrefillRows, as = size_t(act_size(act_));
  const int qd = c.num_attention_heads * c.head_dim;
  DeviceMemory& mem = prefill_mem_;
  Allocator* const from = allocator_ ? *allocator_ : nullptr;  // null: cudaMalloc (the product)
  StepBuffers& b = prefill_buffers_;
  b.x = mem.alloc<float>(P * H_ * 4, "prefill activations", from);
  b.xn = mem.alloc(P * 2 * H_ * as, "prefill activations", from);
  b.proj = mem.alloc<float>(P * size_t(proj_ld_) * 4, "prefill activations", from);
  b.act = mem.alloc(P * size_t(act_ld_) * as, "prefill activations", from);
  b.q = mem.alloc<float>(P * size_t(qd) * 4, "prefill activations", from);
  d_prefill_tokens_ = mem.alloc<int32_t>(P * 4, "prefill tokens", from);
  d_prefill_pos_ = mem.alloc<int>(size_t(prefill_slices(max_rows_)) * sizeof(int), "prefill positions", from);
  b.tokens = d_prefill_tokens_;
  b.prefill = true;
  prefill_gdn_host_ = gdn_host_;
  if (!gdn_host_.empty()) {
    const int gdn_ld = gdn_host_.front().proj_ld, cd = c.conv_dim();
    auto* proj = mem.alloc<float>(P * size_t(gdn_ld) * 4, "prefill GDN projections", from);
    auto* conv_out = mem.alloc<float>(P * size_t(cd) * 4, "prefill GDN conv outputs", from);
    for (auto& t : prefill_gdn_host_) {
      t.proj = proj;
      t.conv_out = conv_out;
      t.y = b.act;
    }
  }
  b.gdn_table = mem.alloc<GdnLayer>(std::max<size_t>(1, prefill_gdn_host_.size()) * sizeof(GdnLayer),
                                    "prefill GDN table", from);
  if (!prefill_gdn_host_.empty())
    CUDA_CHECK(cudaMemcpy(b.gdn_table, prefill_gdn_host_.data(), prefill_gdn_host_.size() * sizeof(GdnLayer),
                          cudaMemcpyHostToDevice));
  b.gdn_host = &prefill_gdn_host_;
  int64_t scratch = 0;
  auto track = [&](const DevMatrix& m) {
    if (PrefillGemm::supported(m)) scratch = std::max(scratch, PrefillGemm::scratch_bytes(m));
  };
  for (const auto& L : w_->layers) {
    for (const auto* lin : {&L.attn.qkv, &L.gdn_in, &L.gate_up})
      for (const auto& p : lin->parts) track(p.m);
    track(L.attn.o);
    track(L.gdn_out);
    track(L.down);
  }
  prefill_scratch_ = mem.alloc(size_t(std::max<int64_t>(scratch, 16)), "prefill weight expansion", from);
  prefill_gemm_ = std::make_unique<PrefillGemm>(stream_);
}

void CudaQwen35::reserve_step(std::span<const int32_t> tokens, int mtp_end) {
  check_forward(tokens);
  if (mtp_end > 0 && !w_->has_mtp)
    fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  if (mtp_end > max_tokens_) fail("MTP cache capacity {} exceeded ({} entries)", max_tokens_, mtp_end);
  if (!prefill_applies(int(tokens.size()))) return;
  try {
    prefill_allocate();
  } catch (const DeviceFault&) {
    throw;
  } catch (...) {
    prefill_release();  // what it took before the refusal: the sequence leaves the step holding none
    throw;
  }
}

void CudaQwen35::prefill_project(const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy,
                                 bool accumulate) {
  if (PrefillGemm::supported(W)) {
    prefill_gemm_->matmul(W, x, T, ldx, y, ldy, accumulate, prefill_scratch_);
    return;
  }
  const size_t as = size_t(act_size(act_));
  for (int t0 = 0; t0 < T; t0 += max_rows_)
    cuda::matmul(W, static_cast<const char*>(x) + size_t(t0) * size_t(ldx) * as, act_, std::min(max_rows_, T - t0),
                 ldx, y + size_t(t0) * size_t(ldy), ldy, accumulate, splitk_, stream_);
}

void CudaQwen35::prefill_attention(int T, void* k_cache, void* v_cache, const StepBuffers& b) {
  // The decode kernel in max_rows_ slices is the fallback for shapes the tensor-core kernel does not take.
  if (cuda::attention_prefill_supports(attn_shape_)) {
    // d_prefill_pos_[0]: the chunk's first position (prefill() runs in the bf16 mode only).
    cuda::attention_prefill(attn_shape_, b.q, k_cache, v_cache, b.proj, proj_ld_, T, d_prefill_pos_, b.act, stream_);
    return;
  }
  const int qd = cfg_.num_attention_heads * cfg_.head_dim;
  const size_t as = size_t(act_size(act_));
  for (int t0 = 0, i = 0; t0 < T; t0 += max_rows_, ++i)
    cuda::attention(attn_shape_, b.q + size_t(t0) * qd, k_cache, v_cache, act_, b.proj + size_t(t0) * proj_ld_,
                    proj_ld_, std::min(max_rows_, T - t0), d_prefill_pos_ + i, max_tokens_, attn_partial_,
                    static_cast<char*>(b.act) + size_t(t0) * qd * as, stream_);
}

void CudaQwen35::prefill_chunk(int n) {
  const StepBuffers& b = prefill_buffers_;
  mark("embed");
  cuda::embed_rows(w_->embed, b.tokens, n, b.x, H_, stream_);
  for (auto& L : w_->layers) decoder_layer(L, n, b);
  mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H_, w_->final_norm, cfg_.rms_norm_eps, n, H_, hidden_, act_, H_, &d_args_->out_row,
                stream_);
}

void CudaQwen35::prefill(std::span<const int32_t> tokens) {
  prefill_allocate();
  std::optional<PdlSuspend> no_pdl;  // PdlPolicy::Off reaches the launches outside graphs too
  if (pdl_off_all_) no_pdl.emplace();
  const int total = int(tokens.size());
  // Profile mode: the same marks as in the graphs, recorded as plain events.
  std::vector<std::pair<Event, std::string>> marks;
  if (profile_) {
    capturing_marks_ = &marks;
    prof_prefix_ = "prefill.";
  }
  for (int done = 0; done < total;) {
    const int n = std::min(kPrefillRows, total - done);
    StepArgs a = args();
    a.pos = length_ + done;
    a.out_row = done;
    upload(a);
    std::vector<int> pos(size_t(prefill_slices(max_rows_)));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = a.pos + int(i) * max_rows_;
    CUDA_CHECK(cudaMemcpyAsync(d_prefill_tokens_, tokens.data() + done, size_t(n) * 4, cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(d_prefill_pos_, pos.data(), pos.size() * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
    prefill_chunk(n);
    parity_ ^= 1;
    done += n;
  }
  if (profile_) {
    mark("end");
    capturing_marks_ = nullptr;
    prof_prefix_.clear();
    add_intervals(marks);
  }
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
