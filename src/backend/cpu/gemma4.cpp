// The Gemma 4 forward on the CPU, layer by layer (docs/gemma4.md):
//   x = embed(token) * embed_scale
//   per layer: h = x + post_attn_norm(attn(input_norm(x)))
//              x = (h + post_ff_norm(down(gelu_tanh(gate(n)) * up(n)))) * layer_scalar,  n = pre_ff_norm(h)
//   hidden = norm(x); logits = softcap(hidden . embed^T)
// Attention: q/k RMSNorm with weight, v RMSNorm without, RoPE per layer type,
// scale 1.0; sliding layers see the last `sliding_window` positions.
//
// KV caches are ring buffers: full layers hold every position, sliding layers
// sliding_window + 1 + kMaxRows slots. Forwards run in chunks of at most
// kMaxRows rows, so a chunk's writes only overwrite positions older than
// any query or rollback can reach (a rollback keeps at least one row of the
// last forward and, for a forward of more than kMaxRows rows, all but
// kMaxRows of them).
#include "backend/cpu/gemma4.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/gemma4_layer.h"
#include "backend/cpu/head.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/gemma4_checkpoint.h"
#include "model/gemma4_runtime.h"

namespace nextn {
namespace {

using cpu::Gemma4Layer;
using cpu::Matrix;
using MatrixPtr = std::shared_ptr<Matrix>;

constexpr int kMaxRows = 64;  // rows per forward chunk (the largest verify block)

struct RingKv {
  int slots = 0;
  std::vector<float> k, v;  // [slots][kv_heads][head_dim], position p at slot p % slots
};

class CpuGemma4 final : public Gemma4Runtime {
 public:
  CpuGemma4(const Gemma4Checkpoint& ck, int max_tokens, const CpuRuntimeOptions& options);

  ModelInfo info() const override { return info_; }
  const char* backend_name() const override { return "cpu"; }
  void target_forward(std::span<const int32_t> tokens) override;
  void target_rollback(int keep) override;
  void head_argmax(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;
  void head_logits(int row, float* out) override;
  HeadWork head_work() const override { return head_work_; }
  void reset() override;

  // ---- Gemma4Target ----
  const Gemma4TextConfig& gemma4_config() const override { return cfg_; }
  void last_hidden(float* out) const override;
  void scaled_embedding(int32_t token, float* out) const override;
  const float* cached_key(int layer, int pos) const override { return cached(layer, pos, true); }
  const float* cached_value(int layer, int pos) const override { return cached(layer, pos, false); }

 private:
  const float* cached(int layer, int pos, bool key) const;
  void forward_chunk(const int32_t* tokens, int pos, int T, float* hidden);
  void attention(const Gemma4Layer& L, RingKv& kv, int pos, int T, const float* xn, float* out);
  void matmul(const Matrix& w, const float* x, int T, float* y) {
    cpu::matmul(w, x, T, y, 0, -1, &pool_, min_chunk_work_);
  }
  cpu::HeadThreads head_threads() { return {&pool_, min_chunk_work_}; }

  Gemma4TextConfig cfg_;
  ModelInfo info_;
  ThreadPool pool_;
  int64_t min_chunk_work_;
  MatrixPtr embed_, lm_head_;
  float embed_scale_ = 1.0f;
  std::vector<float> final_norm_;
  std::vector<Gemma4Layer> layers_;
  std::vector<RingKv> kv_;
  std::vector<float> hidden_;  // [last_T][H], post final norm
  HeadWork head_work_;
};

CpuGemma4::CpuGemma4(const Gemma4Checkpoint& ck, int max_tokens, const CpuRuntimeOptions& options)
    : Gemma4Runtime(max_tokens, kMaxRows),
      cfg_(ck.config()),
      pool_(options.threads > 0 ? options.threads : default_thread_count()),
      min_chunk_work_(options.min_chunk_work) {
  const int H = cfg_.hidden_size;
  info_.vocab_size = cfg_.vocab_size;
  info_.hidden_size = H;
  info_.max_position_embeddings = cfg_.max_position_embeddings;
  info_.eos_token_ids = cfg_.eos_token_ids;
  embed_ = Matrix::load(ck.matrix("embed_tokens", cfg_.vocab_size, H));
  const WeightRef head = ck.lm_head();
  lm_head_ = head.name == ck.stored("embed_tokens") + ".weight" ? embed_ : Matrix::load(head);
  embed_scale_ = ck.embed_scale();
  final_norm_ = ck.vector(ck.stored("norm.weight"), H);
  for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
    Gemma4Layer L = cpu::load_gemma4_layer(ck, i, true);
    const int hd = L.spec.head_dim, kvh = L.spec.kv_heads;
    RingKv kv;
    kv.slots = L.spec.sliding ? std::min(max_tokens, cfg_.sliding_window + 1 + kMaxRows) : max_tokens;
    kv.k.assign(size_t(kv.slots) * kvh * hd, 0.0f);
    kv.v.assign(size_t(kv.slots) * kvh * hd, 0.0f);
    layers_.push_back(std::move(L));
    kv_.push_back(std::move(kv));
  }
}

void CpuGemma4::reset() {
  clear_positions();  // ring slots are rewritten before they are read
  hidden_.clear();
  head_work_ = HeadWork{};
}

void CpuGemma4::target_forward(std::span<const int32_t> tokens) {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  check_capacity(T);
  for (int32_t t : tokens)
    if (t < 0 || t >= cfg_.vocab_size) fail("token id {} is outside the vocabulary [0, {})", t, cfg_.vocab_size);
  const int H = cfg_.hidden_size;
  hidden_.resize(size_t(T) * H);
  for (int c = 0; c < T; c += kMaxRows) {
    const int n = std::min(kMaxRows, T - c);
    forward_chunk(tokens.data() + c, length_ + c, n, &hidden_[size_t(c) * H]);
  }
  record_forward(T);
}

void CpuGemma4::target_rollback(int keep) {
  record_rollback(keep);  // the rings need no change: positions past length_ are never read
}

void CpuGemma4::forward_chunk(const int32_t* tokens, int pos, int T, float* hidden) {
  const int H = cfg_.hidden_size;
  std::vector<float> x(size_t(T) * H), xn(size_t(T) * H), mix(size_t(T) * H);
  for (int t = 0; t < T; ++t) scaled_embedding(tokens[t], &x[size_t(t) * H]);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Gemma4Layer& L = layers_[i];
    for (int t = 0; t < T; ++t)
      cpu::rmsnorm(&x[size_t(t) * H], L.input_norm.data(), cfg_.rms_norm_eps, H, &xn[size_t(t) * H]);
    attention(L, kv_[i], pos, T, xn.data(), mix.data());
    cpu::gemma4_layer_tail(L, cfg_, T, mix.data(), x.data(), &pool_, min_chunk_work_);
  }
  for (int t = 0; t < T; ++t)
    cpu::rmsnorm(&x[size_t(t) * H], final_norm_.data(), cfg_.rms_norm_eps, H, hidden + size_t(t) * H);
}

void CpuGemma4::scaled_embedding(int32_t token, float* out) const {
  embed_->row(token, out);
  for (int d = 0; d < cfg_.hidden_size; ++d) out[d] *= embed_scale_;
}

void CpuGemma4::last_hidden(float* out) const {
  if (last_T_ == 0) fail("last_hidden: no target_forward yet");
  const float* row = &hidden_[size_t(last_T_ - 1) * cfg_.hidden_size];
  std::copy(row, row + cfg_.hidden_size, out);
}

const float* CpuGemma4::cached(int layer, int pos, bool key) const {
  if (layer < 0 || layer >= int(layers_.size())) fail("cached K/V: layer {} outside [0, {})", layer, layers_.size());
  const RingKv& kv = kv_[size_t(layer)];
  if (pos < 0 || pos >= length_ || pos < length_ - kv.slots)
    fail("cached K/V: position {} of layer {} is not held (length {}, {} slots)", pos, layer, length_, kv.slots);
  const Gemma4LayerSpec& s = layers_[size_t(layer)].spec;
  const size_t at = size_t(pos % kv.slots) * s.kv_heads * s.head_dim;
  return key ? &kv.k[at] : &kv.v[at];
}

void CpuGemma4::attention(const Gemma4Layer& L, RingKv& kv, int pos, int T, const float* xn, float* out) {
  const int Hq = cfg_.num_attention_heads, kvh = L.spec.kv_heads, hd = L.spec.head_dim;
  const float eps = cfg_.rms_norm_eps;
  const int kv_row = kvh * hd;
  std::vector<float> q(size_t(T) * Hq * hd), k(size_t(T) * kv_row), v(size_t(T) * kv_row);
  matmul(*L.q, xn, T, q.data());
  matmul(*L.k, xn, T, k.data());
  if (L.v)
    matmul(*L.v, xn, T, v.data());
  else
    v = k;  // K = V: values are the raw key projection (before k_norm and RoPE)
  const std::vector<float> ones(static_cast<size_t>(hd), 1.0f);
  std::vector<float> cs(static_cast<size_t>(hd / 2)), sn(static_cast<size_t>(hd / 2)), tmp(static_cast<size_t>(hd));
  for (int t = 0; t < T; ++t) {
    cpu::gemma4_rope_table(L.spec, pos + t, cs.data(), sn.data());
    const size_t slot = size_t((pos + t) % kv.slots) * kv_row;
    for (int h = 0; h < kvh; ++h) {
      cpu::rmsnorm(&k[size_t(t) * kv_row + h * hd], L.k_norm.data(), eps, hd, &kv.k[slot + h * hd]);
      cpu::rope(&kv.k[slot + h * hd], hd, cs.data(), sn.data());
      cpu::rmsnorm(&v[size_t(t) * kv_row + h * hd], ones.data(), eps, hd, &kv.v[slot + h * hd]);
    }
    for (int h = 0; h < Hq; ++h) {  // queries in place
      float* qh = &q[size_t(t) * Hq * hd + size_t(h) * hd];
      cpu::rmsnorm(qh, L.q_norm.data(), eps, hd, tmp.data());
      cpu::rope(tmp.data(), hd, cs.data(), sn.data());
      std::copy(tmp.begin(), tmp.end(), qh);
    }
  }
  const int group = Hq / kvh;
  const int window = L.spec.sliding ? cfg_.sliding_window : pos + T;
  std::vector<float> attn(size_t(T) * Hq * hd);
  pool_.parallel_for(Hq, 1, [&](int64_t h0, int64_t h1) {  // query heads are independent
    std::vector<float> scores(static_cast<size_t>(std::min(window, pos + T)));
    for (int t = 0; t < T; ++t) {
      const int p = pos + t;
      const int first = std::max(0, p - window + 1);  // keys first..p (attention scale 1.0)
      for (int h = int(h0); h < int(h1); ++h) {
        const int kh = h / group;
        cpu::gemma4_attend(
            &q[size_t(t) * Hq * hd + size_t(h) * hd], hd, first, p,
            [&](int j) { return &kv.k[size_t(j % kv.slots) * kv_row + kh * hd]; },
            [&](int j) { return &kv.v[size_t(j % kv.slots) * kv_row + kh * hd]; }, scores.data(),
            &attn[size_t(t) * Hq * hd + size_t(h) * hd]);
      }
    }
  });
  matmul(*L.o, attn.data(), T, out);
}

void CpuGemma4::head_argmax(int first, int count, int width, int32_t* out) {
  // The softcap is monotone: the argmax of the raw logits is the argmax.
  cpu::head_argmax_of_rows(*lm_head_, hidden_.data(), last_T_, first, count, width, out, head_work_, head_threads());
}

void CpuGemma4::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  cpu::head_fused_argmax(*lm_head_, &hidden_[size_t(first) * cfg_.hidden_size], count, out, head_work_, head_threads());
}

int CpuGemma4::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int rows = std::min<int>(int(drafts.size()) + 1, last_T_);
  return cpu::head_walk_rows(*lm_head_, hidden_.data(), rows, drafts, out, head_work_, head_threads());
}

void CpuGemma4::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  matmul(*lm_head_, &hidden_[size_t(row) * cfg_.hidden_size], 1, out);
  if (const float cap = cfg_.final_logit_softcapping; cap > 0.0f)
    for (int i = 0; i < cfg_.vocab_size; ++i) out[i] = std::tanh(out[i] / cap) * cap;
}

}  // namespace

std::unique_ptr<ModelRuntime> make_cpu_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                      const CpuRuntimeOptions& options) {
  ckpt.check_target_capacity(max_tokens);
  return std::make_unique<CpuGemma4>(ckpt, max_tokens, options);
}

}  // namespace nextn
