// The Gemma 4 forward on the CPU, layer by layer (docs/gemma4.md):
//   x = embed(token) * embed_scale
//   per layer: h = x + post_attn_norm(attn(input_norm(x)))
//              x = (h + post_ff_norm(down(gelu_tanh(gate(n)) * up(n)))) * layer_scalar,  n = pre_ff_norm(h)
//              (a MoE layer adds its routed experts to the MLP's output: gemma4_moe.cpp)
//   hidden = norm(x); logits = softcap(hidden . embed^T)
// Attention: q/k RMSNorm with weight, v RMSNorm without, RoPE per layer type,
// scale 1.0; sliding layers see the last `sliding_window` positions.
//
// KV caches live in blocks of 64 positions from the group's two pools (one
// for the full-attention layers, one for the sliding layers' rings), taken
// as a sequence grows (gemma4_model.h, LayerKv): full layers hold every
// position, sliding layers a ring of sliding_window + 1 + kMaxRows slots.
// Forwards run in chunks of at most
// kMaxRows rows per sequence, so a chunk's writes only overwrite positions
// older than any query or rollback can reach (a rollback keeps at least one
// row of the last forward and, for a forward of more than kMaxRows rows, all
// but kMaxRows of them).
//
// A runtime is one sequence over a Gemma4Model; make_cpu_gemma4_runtime
// gives it a model of its own, the group (gemma4_group.cpp) shares one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/gemma4_model.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "io/gemma4_checkpoint.h"

namespace nextn {
namespace cpu_gemma4 {

Gemma4Model::Gemma4Model(const Gemma4Checkpoint& ck, const CpuRuntimeOptions& options)
    : dir(ck.dir()),
      cfg(ck.config()),
      pool(options.threads > 0 ? options.threads : default_thread_count()),
      min_chunk_work(options.min_chunk_work) {
  if (ck.is_assistant()) fail("{}: a gemma4_assistant checkpoint drafts for a target; it is not a target", ck.dir());
  const int H = cfg.hidden_size;
  info.vocab_size = cfg.vocab_size;
  info.hidden_size = H;
  info.max_position_embeddings = cfg.max_position_embeddings;
  info.eos_token_ids = cfg.eos_token_ids;
  embed = Matrix::load(ck.matrix("embed_tokens", cfg.vocab_size, H));
  const WeightRef head = ck.lm_head();
  lm_head = head.name == ck.stored("embed_tokens") + ".weight" ? embed : Matrix::load(head);
  embed_scale = ck.embed_scale();
  final_norm = ck.vector(ck.stored("norm.weight"), H);
  for (int i = 0; i < cfg.num_hidden_layers; ++i) layers.push_back(cpu::load_gemma4_layer(ck, i, true));
  const Gemma4KvLayout layout = gemma4_kv_layout(cfg);
  kv_at = layout.k_at;
  if (layout.full_floats > 0)
    full_pool = std::make_unique<KvBlockPool>(layout.full_floats * sizeof(float), 4, host_allocator());
  if (layout.ring_floats > 0)
    ring_pool = std::make_unique<KvBlockPool>(layout.ring_floats * sizeof(float), 4, host_allocator());
}

std::vector<KvPoolUse> Gemma4Model::kv_pools() const {
  return gemma4_kv_pools(cfg, kMaxRows, full_pool.get(), ring_pool.get());
}

void Gemma4Model::check_capacity(int max_tokens) const {
  check_gemma4_capacity(dir, cfg, max_tokens);
}

void Gemma4Model::scaled_embedding(int32_t token, float* out) const {
  embed->row(token, out);
  for (int d = 0; d < cfg.hidden_size; ++d) out[d] *= embed_scale;
}

void Gemma4Model::layer(size_t i, std::span<const Segment> segs, int N, float* x) {
  const Gemma4Layer& L = layers[i];
  const int H = cfg.hidden_size;
  std::vector<float> xn(size_t(N) * H), mix(size_t(N) * H);
  for (int t = 0; t < N; ++t) cpu::rmsnorm(&x[size_t(t) * H], L.input_norm.data(), cfg.rms_norm_eps, H, &xn[size_t(t) * H]);
  attention(L, segs, N, xn.data(), mix.data());
  cpu::gemma4_layer_tail(L, cfg, N, mix.data(), x, &pool, min_chunk_work);
}

void Gemma4Model::attention(const Gemma4Layer& L, std::span<const Segment> segs, int N, const float* xn, float* out) {
  const int Hq = cfg.num_attention_heads, kvh = L.spec.kv_heads, hd = L.spec.head_dim;
  const float eps = cfg.rms_norm_eps;
  const int kv_row = kvh * hd;
  std::vector<float> q(size_t(N) * Hq * hd), k(size_t(N) * kv_row), v(size_t(N) * kv_row);
  matmul(*L.q, xn, N, q.data());
  matmul(*L.k, xn, N, k.data());
  if (L.v)
    matmul(*L.v, xn, N, v.data());
  else
    v = k;  // K = V: values are the raw key projection (before k_norm and RoPE)
  const std::vector<float> ones(static_cast<size_t>(hd), 1.0f);
  std::vector<float> cs(static_cast<size_t>(hd / 2)), sn(static_cast<size_t>(hd / 2)), tmp(static_cast<size_t>(hd));
  int most_keys = 0;
  for (const Segment& sg : segs) {
    const LayerKv& kv = *sg.kv;
    for (int t = 0; t < sg.T; ++t) {
      const size_t r = size_t(sg.row0 + t);
      cpu::gemma4_rope_table(L.spec, sg.pos + t, cs.data(), sn.data());
      float* key = kv.key(sg.pos + t);
      float* value = kv.value(sg.pos + t);
      for (int h = 0; h < kvh; ++h) {
        cpu::rmsnorm(&k[r * kv_row + h * hd], L.k_norm.data(), eps, hd, key + h * hd);
        cpu::rope(key + h * hd, hd, cs.data(), sn.data());
        cpu::rmsnorm(&v[r * kv_row + h * hd], ones.data(), eps, hd, value + h * hd);
      }
      for (int h = 0; h < Hq; ++h) {  // queries in place
        float* qh = &q[r * Hq * hd + size_t(h) * hd];
        cpu::rmsnorm(qh, L.q_norm.data(), eps, hd, tmp.data());
        cpu::rope(tmp.data(), hd, cs.data(), sn.data());
        std::copy(tmp.begin(), tmp.end(), qh);
      }
    }
    most_keys = std::max(most_keys, L.spec.sliding ? std::min(cfg.sliding_window, sg.pos + sg.T) : sg.pos + sg.T);
  }
  const int group = Hq / kvh;
  std::vector<float> attn(size_t(N) * Hq * hd);
  pool.parallel_for(Hq, 1, [&](int64_t h0, int64_t h1) {  // query heads are independent
    std::vector<float> scores(static_cast<size_t>(most_keys));
    for (const Segment& sg : segs) {
      const LayerKv& kv = *sg.kv;
      const int window = L.spec.sliding ? cfg.sliding_window : sg.pos + sg.T;
      for (int t = 0; t < sg.T; ++t) {
        const int p = sg.pos + t;
        const size_t r = size_t(sg.row0 + t);
        const int first = std::max(0, p - window + 1);  // keys first..p (attention scale 1.0)
        for (int h = int(h0); h < int(h1); ++h) {
          const int kh = h / group;
          cpu::gemma4_attend(
              &q[r * Hq * hd + size_t(h) * hd], hd, first, p,
              [&](int j) -> const float* { return kv.key(j) + kh * hd; },
              [&](int j) -> const float* { return kv.value(j) + kh * hd; }, scores.data(),
              &attn[r * Hq * hd + size_t(h) * hd]);
        }
      }
    }
  });
  matmul(*L.o, attn.data(), N, out);
}

CpuGemma4::CpuGemma4(std::shared_ptr<Gemma4Model> model, int max_tokens)
    : Gemma4Runtime(max_tokens, kMaxRows), m_(std::move(model)) {
  m_->check_capacity(max_tokens);
  ring_slots_ = gemma4_ring_slots(m_->cfg, max_tokens, kMaxRows);
  full_kv_ = KvBlockTable(m_->full_pool.get(), max_tokens, "the KV cache");
  ring_kv_ = KvBlockTable(m_->ring_pool.get(), ring_slots_, "the sliding-window KV cache");
  for (size_t i = 0; i < m_->layers.size(); ++i) {
    const Gemma4LayerSpec& spec = m_->layers[i].spec;
    LayerKv kv;
    kv.blocks = spec.sliding ? ring_kv_.data() : full_kv_.data();
    kv.row = size_t(spec.kv_heads) * size_t(spec.head_dim);
    kv.k_at = m_->kv_at[i];
    kv.v_at = kv.k_at + size_t(kKvBlockTokens) * kv.row;
    kv.slots = spec.sliding ? ring_slots_ : max_tokens;
    kv_.push_back(kv);
  }
}

void CpuGemma4::hold_forward(int T) {
  // Within the reserved capacities: the tables' data (what kv_ points to) never moves.
  const int positions = length_ + T;
  full_kv_.hold(positions);
  ring_kv_.hold(std::min(positions, ring_slots_));
  hidden_.reserve(size_t(T) * size_t(m_->cfg.hidden_size));
}

void CpuGemma4::reset() {
  clear_positions();
  // Blocks back to the pools: their slots are written before they are read.
  full_kv_.release();
  ring_kv_.release();
  hidden_.clear();
  head_work_ = HeadWork{};
}

void CpuGemma4::check_forward(std::span<const int32_t> tokens) const {
  if (tokens.empty()) fail("target_forward: no tokens");
  check_capacity(int(tokens.size()));
  for (int32_t t : tokens)
    if (t < 0 || t >= m_->cfg.vocab_size) fail("token id {} is outside the vocabulary [0, {})", t, m_->cfg.vocab_size);
}

void CpuGemma4::target_forward(std::span<const int32_t> tokens) {
  CpuGemma4* self = this;
  forward_together({&self, 1}, {&tokens, 1});
}

void CpuGemma4::forward_together(std::span<CpuGemma4* const> seqs, std::span<const std::span<const int32_t>> tokens) {
  if (seqs.empty() || seqs.size() != tokens.size())
    fail("internal: forward_together of {} sequences and {} token lists", seqs.size(), tokens.size());
  Gemma4Model& m = *seqs[0]->m_;
  size_t longest = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s]->m_.get() != &m) fail("internal: forward_together over sequences of different models");
    for (size_t r = 0; r < s; ++r)
      if (seqs[r] == seqs[s]) fail("internal: forward_together lists one sequence twice");
    seqs[s]->check_forward(tokens[s]);
    longest = std::max(longest, tokens[s].size());
  }
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->hold_forward(int(tokens[s].size()));
  const int H = m.cfg.hidden_size;
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->hidden_.resize(tokens[s].size() * H);
  // Chunk c of every sequence that has one, in one forward: each sequence's
  // rows are chunked exactly as alone (its ring needs that), the matmuls
  // run over all of them.
  for (size_t c = 0; c < longest; c += kMaxRows) {
    std::vector<Segment> segs;
    std::vector<size_t> who;
    int N = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (tokens[s].size() <= c) continue;
      const int T = int(std::min<size_t>(kMaxRows, tokens[s].size() - c));
      segs.push_back(Segment{nullptr, seqs[s]->length_ + int(c), N, T});
      who.push_back(s);
      N += T;
    }
    std::vector<float> x(size_t(N) * H);  // [N][H]
    for (size_t g = 0; g < segs.size(); ++g)
      for (int t = 0; t < segs[g].T; ++t)
        m.scaled_embedding(tokens[who[g]][c + size_t(t)], &x[size_t(segs[g].row0 + t) * H]);
    for (size_t i = 0; i < m.layers.size(); ++i) {
      for (size_t g = 0; g < segs.size(); ++g) segs[g].kv = &seqs[who[g]]->kv_[i];
      m.layer(i, segs, N, x.data());
    }
    for (size_t g = 0; g < segs.size(); ++g)
      for (int t = 0; t < segs[g].T; ++t)
        cpu::rmsnorm(&x[size_t(segs[g].row0 + t) * H], m.final_norm.data(), m.cfg.rms_norm_eps, H,
                     &seqs[who[g]]->hidden_[(c + size_t(t)) * H]);
  }
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->record_forward(int(tokens[s].size()));
}

void CpuGemma4::target_rollback(int keep) {
  record_rollback(keep);  // the rings need no change: positions past length_ are never read
}

void CpuGemma4::last_hidden(float* out) const {
  if (last_T_ == 0) fail("last_hidden: no target_forward yet");
  const float* row = &hidden_[size_t(last_T_ - 1) * m_->cfg.hidden_size];
  std::copy(row, row + m_->cfg.hidden_size, out);
}

const float* CpuGemma4::cached(int layer, int pos, bool key) const {
  if (layer < 0 || layer >= int(kv_.size())) fail("cached K/V: layer {} outside [0, {})", layer, kv_.size());
  const LayerKv& kv = kv_[size_t(layer)];
  if (pos < 0 || pos >= length_ || pos < length_ - kv.slots)
    fail("cached K/V: position {} of layer {} is not held (length {}, {} slots)", pos, layer, length_, kv.slots);
  return key ? kv.key(pos) : kv.value(pos);
}

void CpuGemma4::head_argmax_padded(int first, int count, int width, int32_t* out) {
  // The softcap is monotone: the argmax of the raw logits is the argmax.
  cpu::head_argmax_of_rows(*m_->lm_head, hidden_.data(), last_T_, first, count, width, out, head_work_,
                           m_->head_threads());
}

void CpuGemma4::head_argmax_together(std::span<CpuGemma4* const> seqs, std::span<const SequenceRows> rows,
                                     int32_t* out) {
  std::vector<cpu::SequenceHeadRows> parts;
  for (size_t s = 0; s < rows.size(); ++s)
    parts.push_back({seqs[s]->hidden_.data(), seqs[s]->last_T_, rows[s].first, rows[s].count, &seqs[s]->head_work_});
  cpu::head_argmax_together(*seqs[0]->m_->lm_head, parts, out, seqs[0]->m_->head_threads());
}

void CpuGemma4::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  cpu::head_fused_argmax(*m_->lm_head, &hidden_[size_t(first) * m_->cfg.hidden_size], count, out, head_work_,
                         m_->head_threads());
}

int CpuGemma4::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int rows = std::min<int>(int(drafts.size()) + 1, last_T_);
  return cpu::head_walk_rows(*m_->lm_head, hidden_.data(), rows, drafts, out, head_work_, m_->head_threads());
}

void CpuGemma4::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  m_->matmul(*m_->lm_head, &hidden_[size_t(row) * m_->cfg.hidden_size], 1, out);
  if (const float cap = m_->cfg.final_logit_softcapping; cap > 0.0f)
    for (int i = 0; i < m_->cfg.vocab_size; ++i) out[i] = std::tanh(out[i] / cap) * cap;
}

}  // namespace cpu_gemma4

std::unique_ptr<ModelRuntime> make_cpu_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                      const CpuRuntimeOptions& options) {
  ckpt.check_target_capacity(max_tokens);
  return std::make_unique<cpu_gemma4::CpuGemma4>(std::make_shared<cpu_gemma4::Gemma4Model>(ckpt, options), max_tokens);
}

}  // namespace nextn
