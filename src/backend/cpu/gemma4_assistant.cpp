#include "backend/cpu/gemma4_assistant.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/gemm.h"
#include "core/error.h"
#include "io/gemma4_checkpoint.h"
#include "model/gemma4_target.h"
#include "model/runtime.h"

namespace nextn {

using cpu::Gemma4Layer;
using cpu::Matrix;

CpuGemma4Assistant::CpuGemma4Assistant(const Gemma4Checkpoint& ck, const Gemma4TextConfig& target, int threads)
    : cfg_(ck.assistant_config()), pool_(threads > 0 ? threads : default_thread_count()) {
  const AssistantKvLayers kv = check_assistant_fits(ck, target);
  target_layer_[0] = kv.full;
  target_layer_[1] = kv.sliding;
  const Gemma4TextConfig& c = cfg_.text;
  const int Ha = c.hidden_size, Hb = cfg_.backbone_hidden_size;
  pre_projection_ = Matrix::load(ck.matrix("pre_projection", Ha, 2 * int64_t(Hb), true));
  post_projection_ = Matrix::load(ck.matrix("post_projection", Hb, Ha, true));
  embed_ = Matrix::load(ck.matrix("embed_tokens", c.vocab_size, Ha));  // the tied head
  final_norm_ = ck.vector(ck.stored("norm.weight"), Ha);
  for (int i = 0; i < c.num_hidden_layers; ++i) layers_.push_back(cpu::load_gemma4_layer(ck, i, false));
  if (cfg_.use_ordered_embeddings) {
    centroids_ = Matrix::load(ck.matrix("masked_embedding.centroids", cfg_.num_centroids, Ha, true));
    token_ordering_ = ck.token_ordering();
  }
}

void CpuGemma4Assistant::attention(const Gemma4Layer& L, const Gemma4Target& target, int position, const float* xn,
                                   float* out) {
  const Gemma4TextConfig& c = cfg_.text;
  const int Hq = c.num_attention_heads, kvh = L.spec.kv_heads, hd = L.spec.head_dim;
  const int layer = target_layer_[L.spec.sliding ? 1 : 0];
  // Keys: the target's positions before the query; a sliding layer reads the
  // last sliding_window + 1 of them (transformers' bidirectional window
  // |q - k| <= sliding_window, flipped to look back).
  const int last = position - 1;
  const int first = L.spec.sliding ? std::max(0, position - c.sliding_window - 1) : 0;
  if (last < 0) fail("assistant step at position 0: the target holds no K/V yet");
  std::vector<float> q(size_t(Hq) * hd), tmp(static_cast<size_t>(hd)), attn(size_t(Hq) * hd);
  std::vector<float> cs(static_cast<size_t>(hd / 2)), sn(static_cast<size_t>(hd / 2));
  std::vector<float> scores(size_t(last - first + 1));
  cpu::matmul(*L.q, xn, 1, q.data(), 0, -1, &pool_, 1 << 16);
  cpu::gemma4_rope_table(L.spec, position, cs.data(), sn.data());
  const int group = Hq / kvh;
  for (int h = 0; h < Hq; ++h) {
    cpu::rmsnorm(&q[size_t(h) * hd], L.q_norm.data(), c.rms_norm_eps, hd, tmp.data());
    cpu::rope(tmp.data(), hd, cs.data(), sn.data());
    const int kh = h / group;
    cpu::gemma4_attend(
        tmp.data(), hd, first, last, [&](int j) { return target.cached_key(layer, j) + kh * hd; },
        [&](int j) { return target.cached_value(layer, j) + kh * hd; }, scores.data(), &attn[size_t(h) * hd]);
  }
  cpu::matmul(*L.o, attn.data(), 1, out, 0, -1, &pool_, 1 << 16);
}

template <typename Visit>
void CpuGemma4Assistant::for_each_candidate(const float* d, Visit visit) {
  const int V = cfg_.text.vocab_size, C = cfg_.num_centroids, per = V / C, k = cfg_.centroid_intermediate_top_k;
  std::vector<float> cl(static_cast<size_t>(C));
  cpu::matmul(*centroids_, d, 1, cl.data(), 0, -1, &pool_, 1 << 16);
  std::vector<int> order(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cl[size_t(a)] > cl[size_t(b)]; });
  const int Ha = cfg_.text.hidden_size;
  std::vector<float> row(static_cast<size_t>(Ha));
  for (int i = 0; i < k; ++i) {
    const int centroid = order[size_t(i)];
    for (int j = 0; j < per; ++j) {
      const int32_t tok = token_ordering_[size_t(centroid) * per + j];
      embed_->row(tok, row.data());
      float score;  // summed as cpu::matmul sums the full head's logits
      cpu::gemm_block(d, Ha, 1, row.data(), Ha, 1, Ha, &score, 1);
      visit(tok, score);
    }
  }
}

int32_t CpuGemma4Assistant::head_argmax(const float* d) {
  const int V = cfg_.text.vocab_size;
  if (!cfg_.use_ordered_embeddings) {
    std::vector<float> logits(static_cast<size_t>(V));
    cpu::matmul(*embed_, d, 1, logits.data(), 0, -1, &pool_, 1 << 16);
    return cpu::argmax(logits.data(), V);
  }
  // Centroid-masked head: the top-k centroids pick k * V/C candidate tokens;
  // every other token sits below them, so the argmax is the best candidate
  // (lowest token id among equal scores, as argmax over the full row).
  int32_t best = -1;
  float best_score = -INFINITY;
  for_each_candidate(d, [&](int32_t tok, float s) {
    if (best < 0 || s > best_score || (s == best_score && tok < best)) best = tok, best_score = s;
  });
  return best;
}

void CpuGemma4Assistant::head_logits(const float* d, float* logits) {
  const int V = cfg_.text.vocab_size;
  if (!cfg_.use_ordered_embeddings) {
    cpu::matmul(*embed_, d, 1, logits, 0, -1, &pool_, 1 << 16);
  } else {
    std::fill(logits, logits + V, -INFINITY);
    for_each_candidate(d, [&](int32_t tok, float s) { logits[tok] = s; });
  }
  if (const float cap = cfg_.text.final_logit_softcapping; cap > 0.0f)
    for (int v = 0; v < V; ++v)
      if (logits[v] != -INFINITY) logits[v] = std::tanh(logits[v] / cap) * cap;  // masked tokens stay -inf
}

void CpuGemma4Assistant::forward(const Gemma4Target& target, int32_t token, const float* hidden, int position,
                                 float* d, float* hidden_out) {
  const Gemma4TextConfig& c = cfg_.text;
  const int Ha = c.hidden_size, Hb = cfg_.backbone_hidden_size;
  if (token < 0 || token >= c.vocab_size) fail("assistant: token id {} is outside the vocabulary", token);
  std::vector<float> in(size_t(2) * Hb), u(static_cast<size_t>(Ha)), a(static_cast<size_t>(Ha));
  target.scaled_embedding(token, in.data());  // embedding first, then the hidden
  std::copy(hidden, hidden + Hb, in.begin() + Hb);
  cpu::matmul(*pre_projection_, in.data(), 1, u.data(), 0, -1, &pool_, 1 << 16);
  for (const Gemma4Layer& L : layers_) {
    cpu::rmsnorm(u.data(), L.input_norm.data(), c.rms_norm_eps, Ha, d);
    attention(L, target, position, d, a.data());
    cpu::gemma4_layer_tail(L, c, 1, a.data(), u.data(), &pool_, 1 << 16);
  }
  cpu::rmsnorm(u.data(), final_norm_.data(), c.rms_norm_eps, Ha, d);
  cpu::matmul(*post_projection_, d, 1, hidden_out, 0, -1, &pool_, 1 << 16);
  ++steps_;
}

int32_t CpuGemma4Assistant::step(const Gemma4Target& target, int32_t token, const float* hidden, int position,
                                 float* hidden_out) {
  std::vector<float> d(static_cast<size_t>(cfg_.text.hidden_size));
  forward(target, token, hidden, position, d.data(), hidden_out);
  return head_argmax(d.data());
}

void CpuGemma4Assistant::step_logits(const Gemma4Target& target, int32_t token, const float* hidden, int position,
                                     float* hidden_out, float* logits) {
  std::vector<float> d(static_cast<size_t>(cfg_.text.hidden_size));
  forward(target, token, hidden, position, d.data(), hidden_out);
  head_logits(d.data(), logits);
}

namespace {

// The chain's state: the round's held position, the token the next step
// continues and the hidden row it pairs with (the target's last hidden row
// at the round's start, then the assistant's post_projection outputs).
class CpuAssistantChain final : public AssistantChain {
 public:
  CpuAssistantChain(CpuGemma4Assistant& assistant, ModelRuntime& rt, const Gemma4Target& target)
      : assistant_(assistant), rt_(rt), target_(target) {
    hidden_.resize(size_t(target.gemma4_config().hidden_size));
    next_hidden_.resize(hidden_.size());
  }
  void start(int32_t bonus) override {
    position_ = rt_.target_length();
    target_.last_hidden(hidden_.data());
    token_ = bonus;
  }
  void propose(int n, int32_t* out) override {
    for (int i = 0; i < n; ++i) {
      token_ = assistant_.step(target_, token_, hidden_.data(), position_, next_hidden_.data());
      std::swap(hidden_, next_hidden_);
      out[i] = token_;
    }
  }
  void next_logits(float* out) override {
    assistant_.step_logits(target_, token_, hidden_.data(), position_, next_hidden_.data(), out);
  }
  void advance(int32_t token) override {
    std::swap(hidden_, next_hidden_);
    token_ = token;
  }

 private:
  CpuGemma4Assistant& assistant_;
  ModelRuntime& rt_;
  const Gemma4Target& target_;
  int position_ = 0;
  int32_t token_ = 0;
  std::vector<float> hidden_, next_hidden_;
};

}  // namespace

std::unique_ptr<AssistantChain> make_cpu_assistant_chain(CpuGemma4Assistant& assistant, ModelRuntime& rt) {
  const auto* target = dynamic_cast<const Gemma4Target*>(&rt);
  if (target == nullptr) fail("--draft: a Gemma 4 assistant drafts for a Gemma 4 target only");
  return std::make_unique<CpuAssistantChain>(assistant, rt, *target);
}

}  // namespace nextn
