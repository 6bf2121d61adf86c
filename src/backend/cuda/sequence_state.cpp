// SequenceState (sequence_state.h): allocation, the GDN table, reset.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/sequence_state.h"

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/dtype.h"

namespace nextn::cuda {

SequenceState::SequenceState(const CudaQwen35Weights& w, int max_tokens, int rows, int gdn_ld) : max_rows(rows) {
  const auto& c = w.cfg;
  const size_t as = size_t(act_size(w.act));
  kv_bytes = size_t(max_tokens) * c.num_key_value_heads * c.head_dim * as;
  kv.resize(size_t(w.kv_layers));
  for (auto& p : kv) {
    p.k = mem.alloc(kv_bytes, "the KV cache");
    p.v = mem.alloc(kv_bytes, "the KV cache");
    CUDA_CHECK(cudaMemset(p.k, 0, kv_bytes));
    CUDA_CHECK(cudaMemset(p.v, 0, kv_bytes));
  }
  {  // the caches' pointers on the device, for the group passes (GroupEntry::kv)
    std::vector<void*> table;
    for (const auto& p : kv) table.push_back(p.k), table.push_back(p.v);
    d_kv_table = mem.alloc<void*>(std::max<size_t>(1, table.size()) * sizeof(void*), "the KV cache table");
    if (!table.empty())
      CUDA_CHECK(cudaMemcpy(d_kv_table, table.data(), table.size() * sizeof(void*), cudaMemcpyHostToDevice));
  }
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
  for (const auto& p : kv) {
    zero(p.k, kv_bytes);
    zero(p.v, kv_bytes);
  }
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
