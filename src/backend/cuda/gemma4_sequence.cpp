// A CUDA Gemma 4 sequence over a shared CudaGemma4Model: its KV block tables
// and hidden rows, its forwards (alone or together with the group's other
// sequences: the same passes), rollback, reset and the Gemma4Target view the
// assistant drafter reads (copies from the device, mirrored per layer).
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/gemma4_assistant.h"
#include "backend/cuda/gemma4_runtime.h"
#include "core/dtype.h"

namespace nextn::cuda {

CudaGemma4::CudaGemma4(std::shared_ptr<CudaGemma4Model> model, int max_tokens)
    : Gemma4Runtime(max_tokens, kMaxRows), m_(std::move(model)) {
  const CudaGemma4Model& m = *m_;
  ring_slots_ = gemma4_ring_slots(m.cfg, max_tokens, kMaxRows);
  full_kv_ = KvTable(m.full_pool, max_tokens, mem_);
  ring_kv_ = KvTable(m.ring_pool, ring_slots_, mem_, "the sliding-window KV cache");
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const Gemma4LayerSpec& spec = m.layers[i].spec;
    Gemma4LayerCache c;
    c.blocks = reinterpret_cast<float* const*>(spec.sliding ? ring_kv_.device() : full_kv_.device());
    c.k_at = m.kv_at[i];
    c.v_at = c.k_at + size_t(kKvBlockTokens) * size_t(spec.kv_heads) * size_t(spec.head_dim);
    c.slots = m.slots(spec, max_tokens);
    caches_.push_back(c);
  }
  d_caches_ = mem_.alloc<Gemma4LayerCache>(caches_.size() * sizeof(Gemma4LayerCache), "the KV cache table");
  CUDA_CHECK(cudaMemcpy(d_caches_, caches_.data(), caches_.size() * sizeof(Gemma4LayerCache), cudaMemcpyHostToDevice));
  d_head_ = mem_.alloc<HeadCounters>(sizeof(HeadCounters), "head counters");
  CUDA_CHECK(cudaMemset(d_head_, 0, sizeof(HeadCounters)));
  mirrors_.resize(caches_.size());
  CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaGemma4::hold_forward(int T) {
  full_kv_.hold(length_ + T, m_->stream);
  ring_kv_.hold(std::min(length_ + T, ring_slots_), m_->stream);
  if (T > hidden_rows_) {  // grown in whole passes; the old rows are no longer read
    const int rows = std::min(max_tokens_, (T + kMaxRows - 1) / kMaxRows * kMaxRows);
    DeviceMemory grown;
    void* p = grown.alloc(size_t(rows) * size_t(m_->H) * size_t(act_size(m_->act)), "hidden rows", &device_allocator());
    CUDA_CHECK(cudaStreamSynchronize(m_->stream));  // queued work may still read the old rows
    hidden_mem_ = std::move(grown);
    hidden_ = p;
    hidden_rows_ = rows;
  }
}

// Work queued on the shared stream may still read this sequence's memory.
CudaGemma4::~CudaGemma4() {
  if (m_ && m_->stream) (void)cudaStreamSynchronize(m_->stream);
}

void CudaGemma4::reset() {
  CUDA_CHECK(cudaStreamSynchronize(m_->stream));
  // The KV blocks go back to the pools (their slots are written before they
  // are read); the head counters restart.
  full_kv_.release();
  ring_kv_.release();
  CUDA_CHECK(cudaMemsetAsync(d_head_, 0, sizeof(HeadCounters), m_->stream));
  CUDA_CHECK(cudaMemsetAsync(m_->d_walk, 0, 2 * sizeof(int), m_->stream));
  CUDA_CHECK(cudaStreamSynchronize(m_->stream));
  head_shift_ = {};
  clear_positions();
  invalidate_mirrors(0);
}

void CudaGemma4::check_forward(std::span<const int32_t> tokens) const {
  if (tokens.empty()) fail("target_forward: no tokens");
  check_capacity(int(tokens.size()));
  for (int32_t t : tokens)
    if (t < 0 || t >= m_->V) fail("token id {} is outside the vocabulary [0, {})", t, m_->V);
}

void CudaGemma4::target_forward(std::span<const int32_t> tokens) {
  CudaGemma4* self = this;
  forward_together({&self, 1}, {&tokens, 1});
}

void CudaGemma4::forward_together(std::span<CudaGemma4* const> seqs,
                                  std::span<const std::span<const int32_t>> tokens) {
  if (seqs.empty() || seqs.size() != tokens.size())
    fail("internal: forward_together of {} sequences and {} token lists", seqs.size(), tokens.size());
  CudaGemma4Model& m = *seqs[0]->m_;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i]->m_.get() != &m) fail("internal: forward_together over sequences of different models");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j] == seqs[i]) fail("internal: forward_together lists one sequence twice");
    seqs[i]->check_forward(tokens[i]);
  }
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->hold_forward(int(tokens[i].size()));
  // Passes of at most kMaxRows rows, filled in list order; a sequence's rows
  // may continue in the next pass (each row reads only its own caches, which
  // the earlier pass has written).
  std::vector<Gemma4Piece> pass;
  int rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    CudaGemma4& s = *seqs[i];
    s.invalidate_mirrors(s.length_);
    const int T = int(tokens[i].size());
    for (int c = 0; c < T;) {
      const int n = std::min(T - c, kMaxRows - rows);
      pass.push_back({&s, tokens[i].subspan(size_t(c), size_t(n)), s.length_ + c, c});
      rows += n;
      c += n;
      if (rows == kMaxRows) {
        m.forward_pass(pass);
        pass.clear();
        rows = 0;
      }
    }
  }
  if (!pass.empty()) m.forward_pass(pass);
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->record_forward(int(tokens[i].size()));
}

void CudaGemma4::target_rollback(int keep) {
  record_rollback(keep);
  invalidate_mirrors(length_);
}

// ---------------------------------------------------------------------------
// Gemma4Target: what the CPU assistant reads, copied back

void CudaGemma4::last_hidden(float* out) const {
  if (last_T_ == 0) fail("last_hidden: no target_forward yet");
  const int H = m_->H;
  const size_t row = size_t(last_T_ - 1) * size_t(H);
  if (m_->act == Act::F32) {
    m_->fetch(static_cast<const float*>(hidden_) + row, size_t(H) * 4, out);
    return;
  }
  bf16_row_.resize(size_t(H));
  m_->fetch(static_cast<const uint16_t*>(hidden_) + row, size_t(H) * 2, bf16_row_.data());
  for (int d = 0; d < H; ++d) out[d] = bf16_to_f32(bf16_row_[size_t(d)]);
}

const void* CudaGemma4::last_hidden_row() const {
  if (last_T_ == 0) fail("last_hidden: no target_forward yet");
  return static_cast<const char*>(hidden_) + size_t(last_T_ - 1) * size_t(m_->H) * size_t(act_size(m_->act));
}

std::unique_ptr<AssistantChain> CudaGemma4::device_assistant(const Gemma4Checkpoint& assistant) {
  std::shared_ptr<CudaAssistant> a = m_->assistant(assistant);
  return a ? make_cuda_assistant_chain(std::move(a), *this) : nullptr;
}

void CudaGemma4::scaled_embedding(int32_t token, float* out) const {
  CudaGemma4Model& m = *m_;
  if (token < 0 || token >= m.V) fail("token id {} is outside the vocabulary [0, {})", token, m.V);
  CUDA_CHECK(cudaMemcpyAsync(m.d_embed_token, &token, sizeof(token), cudaMemcpyHostToDevice, m.stream));
  embed_rows(m.embed, m.d_embed_token, 1, m.d_embed_row, m.H, m.stream);
  scale_floats(m.d_embed_row, m.H, m.embed_scale, m.stream);
  m.fetch(m.d_embed_row, size_t(m.H) * 4, out);
}

void CudaGemma4::invalidate_mirrors(int pos) const {
  for (auto& mirror : mirrors_) mirror.upto = std::min(mirror.upto, pos);
}

const float* CudaGemma4::cached(int layer, int pos, bool key) const {
  if (layer < 0 || layer >= int(caches_.size())) fail("cached K/V: layer {} outside [0, {})", layer, caches_.size());
  const Gemma4LayerCache& c = caches_[size_t(layer)];
  const Gemma4LayerSpec& spec = m_->layers[size_t(layer)].spec;
  if (pos < 0 || pos >= length_ || pos < length_ - c.slots)
    fail("cached K/V: position {} of layer {} is not held (length {}, {} slots)", pos, layer, length_, c.slots);
  const size_t kv_row = size_t(spec.kv_heads) * size_t(spec.head_dim);
  KvMirror& mirror = mirrors_[size_t(layer)];
  if (mirror.upto < length_) {
    // Positions [first, length) into their slots: one run, or two where the ring wraps.
    const int first = std::max(mirror.upto, length_ - c.slots);
    const size_t rows = size_t(std::min(length_, c.slots));
    if (mirror.k.size() < rows * kv_row) {
      mirror.k.resize(rows * kv_row);
      mirror.v.resize(rows * kv_row);
    }
    const KvTable& table = spec.sliding ? ring_kv_ : full_kv_;
    for (int p = first; p < length_;) {  // runs of slots within one block
      const int slot = p % c.slots;
      const int in_block = slot % kKvBlockTokens;
      const int n = std::min({length_ - p, c.slots - slot, kKvBlockTokens - in_block});
      const auto* block = static_cast<const float*>(table.block(slot / kKvBlockTokens));
      const size_t at = size_t(slot) * kv_row, from = size_t(in_block) * kv_row;
      const size_t bytes = size_t(n) * kv_row * sizeof(float);
      CUDA_CHECK(cudaMemcpyAsync(&mirror.k[at], block + c.k_at + from, bytes, cudaMemcpyDeviceToHost, m_->stream));
      CUDA_CHECK(cudaMemcpyAsync(&mirror.v[at], block + c.v_at + from, bytes, cudaMemcpyDeviceToHost, m_->stream));
      p += n;
    }
    CUDA_CHECK(cudaStreamSynchronize(m_->stream));
    mirror.upto = length_;
  }
  const size_t at = size_t(pos % c.slots) * kv_row;
  return key ? &mirror.k[at] : &mirror.v[at];
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
