// Workspace (workspace.h): allocation, the argument ring, result copies, reset.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/workspace.h"

#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/dtype.h"

namespace nextn::cuda {

Workspace::Workspace(const CudaQwen35Weights& w, const WorkspaceDims& dims, const AttnShape& attn_shape, int R)
    : rows(R), H(w.cfg.hidden_size), act(w.act), proj_ld(dims.proj_ld), act_ld(dims.act_ld), attn(attn_shape),
      hidden_rows(dims.hidden_rows), partial_positions(dims.partial_positions) {
  const auto& c = w.cfg;
  const int V = c.vocab_size, qd = c.num_attention_heads * c.head_dim;
  const size_t as = size_t(act_size(act));
  d_args = mem.alloc<StepArgs>(sizeof(StepArgs), "step arguments");
  d_chain_args = mem.alloc<StepArgs>(sizeof(StepArgs) * 2 * size_t(R), "draft chain arguments");
  CUDA_CHECK(cudaMemset(d_args, 0, sizeof(StepArgs)));
  x = mem.alloc<float>(size_t(R) * H * 4, "activations");
  xn = mem.alloc(size_t(R) * 2 * H * as, "activations");
  proj = mem.alloc<float>(size_t(R) * proj_ld * 4, "activations");
  act_buf = mem.alloc(size_t(R) * act_ld * as, "activations");
  q = mem.alloc<float>(size_t(R) * qd * 4, "activations");
  attn_partial =
      partial_mem.alloc<float>(size_t(cuda::attn_partial_floats(attn, partial_positions, R)) * 4, "attention partials");
  // The splits' counters, zero before the (non-blocking) stream's first attention.
  CUDA_CHECK(cudaMemset(attn_partial, 0, size_t(cuda::attn_counter_bytes(attn))));
  CUDA_CHECK(cudaDeviceSynchronize());
  const size_t splitk_bytes = size_t(w.splitk_floats_for(R)) * 4;
  splitk = mem.alloc<float>(splitk_bytes, "split-K partials");
  CUDA_CHECK(cudaMemset(splitk, 0, splitk_bytes));  // the streamed kernel's tile counters start at zero
  hidden = hidden_mem.alloc(size_t(hidden_rows) * H * as, "hidden rows");
  mtp_hidden = hidden_mem.alloc(size_t(hidden_rows) * H * as, "MTP hidden rows");
  CUDA_CHECK(cudaMemset(hidden, 0, size_t(hidden_rows) * H * as));
  CUDA_CHECK(cudaMemset(mtp_hidden, 0, size_t(hidden_rows) * H * as));
  mtp_src = mem.alloc(size_t(R) * H * as, "MTP inputs");
  head_in = mem.alloc(size_t(R) * H * as, "head inputs");
  logits = mem.alloc<float>(size_t(R) * V * 4, "logits");
  pairs = mem.alloc(size_t(cuda::argmax_pairs_bytes(w.head, R)), "argmax pairs");
  argmax_scratch = mem.alloc(size_t(cuda::argmax_scratch_bytes(V)) * R, "argmax");
  d_out = mem.alloc<int32_t>(size_t(R + 2) * 4, "tokens");
  d_group_drafts = mem.alloc<int32_t>(size_t(R) * kMaxGroupSequences * 4, "group drafts");
  d_walk = mem.alloc<int>(2 * sizeof(int), "walk counters");
  d_head = mem.alloc<HeadCounters>(sizeof(HeadCounters), "head counters");
  CUDA_CHECK(cudaMemset(d_head, 0, sizeof(HeadCounters)));
  if (c.moe) moe = MoeScratch(moe_shape(c), act, R, mem);

  h_args = make_pinned<StepArgs>(kArgSlots);
  h_out = make_pinned<int32_t>(size_t(R) + 2);
  h_head = make_pinned<HeadCounters>(1);
  *h_head.get() = HeadCounters{};
  h_chain_args = make_pinned<StepArgs>(size_t(2) * size_t(R));
  for (auto& e : arg_events) e = make_event(cudaEventDisableTiming);
}

void Workspace::upload(const StepArgs& a, cudaStream_t s) {
  const int slot = arg_slot;
  arg_slot = (arg_slot + 1) % kArgSlots;
  CUDA_CHECK(cudaEventSynchronize(arg_events[slot]));
  h_args[slot] = a;
  CUDA_CHECK(cudaMemcpyAsync(d_args, &h_args[slot], sizeof(StepArgs), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaEventRecord(arg_events[slot], s));
}

void Workspace::wait(cudaStream_t s) const {
  ++host_syncs;
  CUDA_CHECK(cudaStreamSynchronize(s));
}

void Workspace::fetch(const void* src, size_t bytes, void* dst, cudaStream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(h_head.get(), d_head, sizeof(HeadCounters), cudaMemcpyDeviceToHost, s));
  if (bytes <= sizeof(int32_t) * size_t(rows + 2)) {
    CUDA_CHECK(cudaMemcpyAsync(h_out, src, bytes, cudaMemcpyDeviceToHost, s));
    wait(s);
    std::memcpy(dst, h_out, bytes);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    wait(s);
  }
}

void Workspace::grow_hidden(int new_rows, Allocator* from, cudaStream_t s) {
  if (new_rows <= hidden_rows) return;
  const size_t row = size_t(H) * size_t(act_size(act)), old = size_t(hidden_rows) * row, grown = size_t(new_rows) * row;
  DeviceMemory m;
  void* h = m.alloc(grown, "hidden rows", from);
  void* mh = m.alloc(grown, "MTP hidden rows", from);
  CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(h) + old, 0, grown - old, s));
  CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(mh) + old, 0, grown - old, s));
  CUDA_CHECK(cudaMemcpyAsync(h, hidden, old, cudaMemcpyDeviceToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(mh, mtp_hidden, old, cudaMemcpyDeviceToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));  // the old buffers are read: they go now
  hidden_mem = std::move(m);
  hidden = h;
  mtp_hidden = mh;
  hidden_rows = new_rows;
}

void Workspace::grow_partials(int positions, Allocator* from) {
  if (positions <= partial_positions) return;
  DeviceMemory m;
  float* p = m.alloc<float>(size_t(cuda::attn_partial_floats(attn, positions, rows)) * 4, "attention partials", from);
  // The splits' counters, zero before the (non-blocking) stream's next attention.
  CUDA_CHECK(cudaMemset(p, 0, size_t(cuda::attn_counter_bytes(attn))));
  CUDA_CHECK(cudaDeviceSynchronize());
  partial_mem = std::move(m);
  attn_partial = p;
  partial_positions = positions;
}

void Workspace::reset(cudaStream_t s) {
  auto zero = [&](void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s)); };
  const size_t as = size_t(act_size(act));
  zero(d_args, sizeof(StepArgs));
  zero(hidden, size_t(hidden_rows) * H * as);
  zero(mtp_hidden, size_t(hidden_rows) * H * as);
  zero(d_walk, 2 * sizeof(int));
  zero(d_head, sizeof(HeadCounters));
  *h_head.get() = HeadCounters{};
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
