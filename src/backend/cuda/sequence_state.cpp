// SequenceState (sequence_state.h): allocation, the GDN table, reset.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/sequence_state.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/check.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/dtype.h"

namespace nextn::cuda {

std::shared_ptr<KvBlockPool> make_kv_pool(const CudaQwen35Weights& w) {
  if (w.kv_layers == 0) return nullptr;
  const auto& c = w.cfg;
  const size_t row = size_t(c.num_key_value_heads) * size_t(c.head_dim) * size_t(act_size(w.act));
  // Arenas of 8 blocks: the 27B's block is 4.25 MiB (17 layers of 64 positions), an arena 34 MiB.
  return std::make_shared<KvBlockPool>(size_t(w.kv_layers) * 2 * kKvBlockTokens * row, 8, device_allocator());
}

SequenceState::SequenceState(const CudaQwen35Weights& w, int max_tokens, int rows, int gdn_ld,
                             std::shared_ptr<KvBlockPool> kv_pool)
    : max_rows(rows) {
  const auto& c = w.cfg;
  kv = KvTable(std::move(kv_pool), max_tokens, mem);
  d_kv_blocks = kv.device();
  const int cd = c.conv_dim(), Hv = c.linear_num_value_heads;
  gdn_host = w.gdn;  // the weights' pointers; the state and row pointers below are this sequence's
  for (auto& t : gdn_host) {
    const size_t conv_state = size_t(2) * (c.linear_conv_kernel_dim - 1) * cd * 4 + 16;
    const size_t S = size_t(2) * Hv * c.linear_key_head_dim * c.linear_value_head_dim * 4;
    gdn_conv_bytes = conv_state;
    gdn_S_bytes = S;
    t.proj = mem.alloc<float>(size_t(max_rows) * gdn_ld * 4, "GDN projections");
    t.proj_ld = gdn_ld;
    t.conv_out = mem.alloc<float>(size_t(max_rows) * cd * 4, "GDN conv outputs");
    t.conv_state = mem.alloc<float>(conv_state, "GDN conv state");
    t.S = mem.alloc<float>(S, "GDN recurrent state");
    CUDA_CHECK(cudaMemset(t.conv_state, 0, conv_state));
    CUDA_CHECK(cudaMemset(t.S, 0, S));
    CUDA_CHECK(cudaMemset(const_cast<float*>(t.proj), 0, size_t(max_rows) * gdn_ld * 4));
  }
}

void SequenceState::upload_gdn_table(const CudaQwen35Weights& w, void* y) {
  for (const auto& L : w.layers)
    if (!L.full) gdn_host[size_t(L.gdn_index)].y = y;
  gdn_table = mem.alloc<GdnLayer>(std::max<size_t>(1, gdn_host.size()) * sizeof(GdnLayer), "GDN table");
  if (!gdn_host.empty())
    CUDA_CHECK(cudaMemcpy(gdn_table, gdn_host.data(), gdn_host.size() * sizeof(GdnLayer), cudaMemcpyHostToDevice));
}

void SequenceState::reset(cudaStream_t s) {
  auto zero = [&](void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s)); };
  kv.release();
  for (auto& t : gdn_host) {
    zero(t.conv_state, gdn_conv_bytes);
    zero(t.S, gdn_S_bytes);
    zero(const_cast<float*>(t.proj), size_t(max_rows) * size_t(t.proj_ld) * 4);
  }
  length = forward_start = last_T = last_chunk_T = parity = 0;
  mtp_length = mtp_last_n = 0;
  head_shift = HeadWork{};
  mtp_work = MtpWork{};
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
