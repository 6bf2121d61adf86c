// The Qwen3.5 forward on the CPU, layer by layer (model-spec §A), with the
// rollback of §B: attention KV truncated; GDN conv state rebuilt from the
// verify rows; GDN recurrent state restored from a snapshot taken before the
// forward and replayed over the accepted prefix from the recorded inputs.
// Threads split independent outputs only (matrix rows, attention heads, GDN
// heads, vocabulary chunks of the fused argmax), never one reduction, so every
// value is the same at any thread count.
#include "backend/cpu/qwen35.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/head.h"
#include "backend/cpu/ops.h"
#include "core/fault.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"

namespace nextn {
namespace {

using cpu::Matrix;
using MatrixPtr = std::shared_ptr<Matrix>;

struct AttentionWeights {
  MatrixPtr q, k, v, o;
  std::vector<float> q_norm, k_norm;
};

struct GdnWeights {
  MatrixPtr qkv, z, b, a, out;
  std::vector<float> conv;  // [conv_dim][kernel]
  std::vector<float> a_log, dt_bias, norm;
};

struct LayerWeights {
  bool full = false;
  std::vector<float> input_norm, post_norm;
  AttentionWeights attn;
  GdnWeights gdn;
  MatrixPtr gate, up, down;
};

struct KvCache {
  std::vector<float> k, v;  // [max_tokens][kv_heads][head_dim]
};

struct GdnState {
  std::vector<float> conv;  // [kernel-1][conv_dim]: pre-conv rows, oldest first
  std::vector<float> S;     // [v_heads][dk][dv]
  // What rollback needs from the last forward. The snapshot is taken only
  // for forwards of more than one token: rollback of a one-token forward
  // keeps it whole.
  std::vector<float> conv_before, S_before;  // snapshot
  std::vector<float> mixed;                  // [T][conv_dim] pre-conv rows
  std::vector<float> q, k, v, g, beta;       // recurrence inputs per token
};

class CpuQwen35 final : public ModelRuntime {
 public:
  CpuQwen35(const Qwen35Checkpoint& ckpt, int max_tokens, const CpuRuntimeOptions& options);

  const Qwen35Config& config() const override { return cfg_; }
  const char* backend_name() const override { return "cpu"; }
  int target_length() const override { return length_; }
  void target_forward(std::span<const int32_t> tokens) override;
  void target_rollback(int keep) override;
  void head_argmax(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;
  void head_logits(int row, float* out) override;
  HeadWork head_work() const override { return head_work_; }
  void reset() override;
  MtpWork mtp_work() const override { return mtp_work_; }
  int mtp_length() const override { return mtp_length_; }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override;
  void mtp_step(int32_t token) override;
  void mtp_argmax(int count, int32_t* out) override;
  void mtp_logits(float* out) override;
  void mtp_rollback(int length) override;

 private:
  void embed(const int32_t* tokens, int T, float* x) const;
  void decoder_layer(const LayerWeights& L, KvCache& kv, GdnState* gdn, int pos, int T, float* x);
  void attention(const AttentionWeights& W, KvCache& kv, int pos, int T, const float* xn, float* out);
  void gdn_mixer(const GdnWeights& W, GdnState& st, int T, const float* xn, float* out);
  // One token of the recurrence for value heads [h0, h1).
  void gdn_step(GdnState& st, int h0, int h1, const float* q, const float* k, const float* v, const float* g,
                const float* beta, float* o) const;
  void mlp(const LayerWeights& L, int T, const float* xn, float* out);
  void check_tokens(std::span<const int32_t> tokens) const;
  void mtp_run(const int32_t* tokens, const float* hidden, int n);
  cpu::HeadThreads head_threads() { return {&pool_, min_chunk_work_}; }

  Qwen35Config cfg_;
  int max_tokens_;
  ThreadPool pool_;
  int64_t min_chunk_work_;
  MatrixPtr embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<KvCache> kv_;
  std::vector<GdnState> gdn_;
  int length_ = 0;
  int forward_start_ = 0;  // length before the last target_forward
  int last_T_ = 0;         // rows of the last target_forward still in the caches
  std::vector<float> hidden_;  // [last_T][H], post final norm
  HeadWork head_work_;         // counted by the head ops (backend/cpu/head.h)
  MtpWork mtp_work_;           // counted in mtp_run / mtp_step / mtp_argmax
  Fault fault_ = Fault::None;  // NEXTN_FAULT, read once at construction

  // MTP head
  bool has_mtp_ = false;
  MatrixPtr mtp_fc_;
  std::vector<float> mtp_norm_emb_, mtp_norm_hid_, mtp_norm_;
  LayerWeights mtp_layer_;
  KvCache mtp_kv_;
  int mtp_length_ = 0;
  int mtp_last_n_ = 0;
  std::vector<float> mtp_hidden_;  // [last n][H], post mtp.norm
};

AttentionWeights load_attention(const Qwen35Checkpoint& ck, const std::string& p) {
  const auto& c = ck.config();
  AttentionWeights a;
  const int H = c.hidden_size, hd = c.head_dim;
  a.q = Matrix::load(ck.matrix(p + ".q_proj", int64_t(c.num_attention_heads) * hd * 2, H));
  a.k = Matrix::load(ck.matrix(p + ".k_proj", int64_t(c.num_key_value_heads) * hd, H));
  a.v = Matrix::load(ck.matrix(p + ".v_proj", int64_t(c.num_key_value_heads) * hd, H));
  a.o = Matrix::load(ck.matrix(p + ".o_proj", H, int64_t(c.num_attention_heads) * hd));
  a.q_norm = ck.norm(p + ".q_norm", hd, true);
  a.k_norm = ck.norm(p + ".k_norm", hd, true);
  return a;
}

LayerWeights load_layer(const Qwen35Checkpoint& ck, const std::string& p, bool full) {
  const auto& c = ck.config();
  const int H = c.hidden_size;
  LayerWeights L;
  L.full = full;
  L.input_norm = ck.norm(p + ".input_layernorm", H, true);
  L.post_norm = ck.norm(p + ".post_attention_layernorm", H, true);
  if (full) {
    L.attn = load_attention(ck, p + ".self_attn");
  } else {
    const std::string g = p + ".linear_attn";
    const int Hv = c.linear_num_value_heads;
    L.gdn.qkv = Matrix::load(ck.matrix(g + ".in_proj_qkv", c.conv_dim(), H));
    L.gdn.z = Matrix::load(ck.matrix(g + ".in_proj_z", c.value_dim(), H));
    L.gdn.b = Matrix::load(ck.matrix(g + ".in_proj_b", Hv, H));
    L.gdn.a = Matrix::load(ck.matrix(g + ".in_proj_a", Hv, H));
    L.gdn.out = Matrix::load(ck.matrix(g + ".out_proj", H, c.value_dim()));
    L.gdn.conv = ck.conv1d(g + ".conv1d", c.conv_dim(), c.linear_conv_kernel_dim);
    L.gdn.a_log = ck.vector(g + ".A_log", Hv);
    L.gdn.dt_bias = ck.vector(g + ".dt_bias", Hv);
    L.gdn.norm = ck.norm(g + ".norm", c.linear_value_head_dim, false);
  }
  L.gate = Matrix::load(ck.matrix(p + ".mlp.gate_proj", c.intermediate_size, H));
  L.up = Matrix::load(ck.matrix(p + ".mlp.up_proj", c.intermediate_size, H));
  L.down = Matrix::load(ck.matrix(p + ".mlp.down_proj", H, c.intermediate_size));
  return L;
}

CpuQwen35::CpuQwen35(const Qwen35Checkpoint& ck, int max_tokens, const CpuRuntimeOptions& options)
    : cfg_(ck.config()),
      max_tokens_(max_tokens),
      pool_(options.threads > 0 ? options.threads : default_thread_count()),
      min_chunk_work_(options.min_chunk_work),
      fault_(read_fault_hook()) {
  if (max_tokens < 1) fail("--backend cpu: max_tokens {} must be positive", max_tokens);
  const int H = cfg_.hidden_size;
  embed_ = Matrix::load(ck.matrix("embed_tokens", cfg_.vocab_size, H));
  const WeightRef head = ck.lm_head();
  lm_head_ = head.weight == ck.matrix("embed_tokens", cfg_.vocab_size, H).weight ? embed_ : Matrix::load(head);
  final_norm_ = ck.norm("norm", H, true);
  const int kv_row = cfg_.num_key_value_heads * cfg_.head_dim;
  for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
    const bool full = cfg_.full_attention[size_t(i)];
    layers_.push_back(load_layer(ck, "layers." + std::to_string(i), full));
    KvCache kv;
    GdnState st;
    if (full) {
      kv.k.assign(size_t(max_tokens) * kv_row, 0.0f);
      kv.v.assign(size_t(max_tokens) * kv_row, 0.0f);
    } else {
      st.conv.assign(size_t(cfg_.linear_conv_kernel_dim - 1) * cfg_.conv_dim(), 0.0f);
      st.S.assign(size_t(cfg_.linear_num_value_heads) * cfg_.linear_key_head_dim * cfg_.linear_value_head_dim, 0.0f);
    }
    kv_.push_back(std::move(kv));
    gdn_.push_back(std::move(st));
  }
  has_mtp_ = ck.mtp_layers() > 0;
  if (has_mtp_) {
    mtp_fc_ = Matrix::load(ck.matrix("mtp.fc", H, 2 * H));
    mtp_norm_emb_ = ck.norm("mtp.pre_fc_norm_embedding", H, true);
    mtp_norm_hid_ = ck.norm("mtp.pre_fc_norm_hidden", H, true);
    mtp_norm_ = ck.norm("mtp.norm", H, true);
    mtp_layer_ = load_layer(ck, "mtp.layers.0", true);
    mtp_kv_.k.assign(size_t(max_tokens) * kv_row, 0.0f);
    mtp_kv_.v.assign(size_t(max_tokens) * kv_row, 0.0f);
  }
}

void CpuQwen35::reset() {
  // KV rows past the length are never read, so truncating is clearing; the
  // GDN states are read from position 0 and must be zero again.
  for (GdnState& st : gdn_) {
    std::fill(st.conv.begin(), st.conv.end(), 0.0f);
    std::fill(st.S.begin(), st.S.end(), 0.0f);
    st.conv_before.clear();
    st.S_before.clear();
    st.mixed.clear();
    st.q.clear(), st.k.clear(), st.v.clear(), st.g.clear(), st.beta.clear();
  }
  length_ = forward_start_ = last_T_ = 0;
  hidden_.clear();
  mtp_length_ = mtp_last_n_ = 0;
  mtp_hidden_.clear();
  head_work_ = HeadWork{};
  mtp_work_ = MtpWork{};
}

void CpuQwen35::check_tokens(std::span<const int32_t> tokens) const {
  for (int32_t t : tokens)
    if (t < 0 || t >= cfg_.vocab_size) fail("token id {} is outside the vocabulary [0, {})", t, cfg_.vocab_size);
}

void CpuQwen35::embed(const int32_t* tokens, int T, float* x) const {
  for (int t = 0; t < T; ++t) embed_->row(tokens[t], x + size_t(t) * cfg_.hidden_size);
}

void CpuQwen35::target_forward(std::span<const int32_t> tokens) {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  if (length_ + T > max_tokens_) fail("sequence of {} tokens exceeds the cache capacity {}", length_ + T, max_tokens_);
  check_tokens(tokens);
  const int H = cfg_.hidden_size;
  std::vector<float> x(size_t(T) * H);
  embed(tokens.data(), T, x.data());
  for (size_t i = 0; i < layers_.size(); ++i) {
    GdnState* st = layers_[i].full ? nullptr : &gdn_[i];
    if (st && T > 1) {  // snapshot for rollback
      st->conv_before = st->conv;
      st->S_before = st->S;
    }
    decoder_layer(layers_[i], kv_[i], st, length_, T, x.data());
  }
  hidden_.resize(size_t(T) * H);
  for (int t = 0; t < T; ++t) cpu::rmsnorm(&x[size_t(t) * H], final_norm_.data(), cfg_.rms_norm_eps, H, &hidden_[size_t(t) * H]);
  forward_start_ = length_;
  length_ += T;
  last_T_ = T;
}

void CpuQwen35::target_rollback(int keep) {
  if (keep < 1 || keep > last_T_) fail("target_rollback: keep {} outside [1, {}]", keep, last_T_);
  if (keep == last_T_) return;
  const int cd = cfg_.conv_dim(), km1 = cfg_.linear_conv_kernel_dim - 1;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].full) continue;  // KV: truncation is the length change below
    GdnState& st = gdn_[i];
    // Conv state: the last K-1 pre-conv rows of [old state ; accepted verify rows].
    std::vector<float> hist(size_t(km1 + keep) * cd);
    std::copy(st.conv_before.begin(), st.conv_before.end(), hist.begin());
    std::copy(st.mixed.begin(), st.mixed.begin() + size_t(keep) * cd, hist.begin() + size_t(km1) * cd);
    std::copy(hist.end() - size_t(km1) * cd, hist.end(), st.conv.begin());
    // Recurrent state: snapshot + replay of the recorded recurrence inputs.
    st.S = st.S_before;
    const int dk = cfg_.linear_key_head_dim, dv = cfg_.linear_value_head_dim, Hv = cfg_.linear_num_value_heads;
    pool_.parallel_for(Hv, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> o(size_t(Hv) * dv);
      for (int t = 0; t < keep; ++t)
        gdn_step(st, int(h0), int(h1), &st.q[size_t(t) * Hv * dk], &st.k[size_t(t) * Hv * dk],
                 &st.v[size_t(t) * Hv * dv], &st.g[size_t(t) * Hv], &st.beta[size_t(t) * Hv], o.data());
    });
  }
  length_ = forward_start_ + keep;
  last_T_ = keep;  // a second rollback of the same forward keeps a prefix of these
}

void CpuQwen35::decoder_layer(const LayerWeights& L, KvCache& kv, GdnState* gdn, int pos, int T, float* x) {
  const int H = cfg_.hidden_size;
  std::vector<float> xn(size_t(T) * H), mix(size_t(T) * H);
  for (int t = 0; t < T; ++t) cpu::rmsnorm(x + size_t(t) * H, L.input_norm.data(), cfg_.rms_norm_eps, H, &xn[size_t(t) * H]);
  if (L.full)
    attention(L.attn, kv, pos, T, xn.data(), mix.data());
  else
    gdn_mixer(L.gdn, *gdn, T, xn.data(), mix.data());
  for (size_t i = 0; i < xn.size(); ++i) x[i] += mix[i];
  for (int t = 0; t < T; ++t) cpu::rmsnorm(x + size_t(t) * H, L.post_norm.data(), cfg_.rms_norm_eps, H, &xn[size_t(t) * H]);
  mlp(L, T, xn.data(), mix.data());
  for (size_t i = 0; i < xn.size(); ++i) x[i] += mix[i];
}

void CpuQwen35::mlp(const LayerWeights& L, int T, const float* xn, float* out) {
  const int I = cfg_.intermediate_size;
  std::vector<float> g(size_t(T) * I), u(size_t(T) * I);
  cpu::matmul(*L.gate, xn, T, g.data(), 0, -1, &pool_, min_chunk_work_);
  cpu::matmul(*L.up, xn, T, u.data(), 0, -1, &pool_, min_chunk_work_);
  for (size_t i = 0; i < g.size(); ++i) g[i] = cpu::silu(g[i]) * u[i];
  cpu::matmul(*L.down, g.data(), T, out, 0, -1, &pool_, min_chunk_work_);
}

void CpuQwen35::attention(const AttentionWeights& W, KvCache& kv, int pos, int T, const float* xn, float* out) {
  const int Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, hd = cfg_.head_dim;
  const int rd = cfg_.rotary_dim();
  const float eps = cfg_.rms_norm_eps;
  std::vector<float> qg(size_t(T) * Hq * hd * 2), k(size_t(T) * Hkv * hd), v(size_t(T) * Hkv * hd);
  cpu::matmul(*W.q, xn, T, qg.data(), 0, -1, &pool_, min_chunk_work_);
  cpu::matmul(*W.k, xn, T, k.data(), 0, -1, &pool_, min_chunk_work_);
  cpu::matmul(*W.v, xn, T, v.data(), 0, -1, &pool_, min_chunk_work_);
  std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(static_cast<size_t>(rd / 2)), tmp(static_cast<size_t>(hd));
  const int kv_row = Hkv * hd;
  for (int t = 0; t < T; ++t) {
    cpu::rope_angles(pos + t, rd, cfg_.rope_theta, cs.data(), sn.data());
    for (int h = 0; h < Hkv; ++h) {
      float* kh = &k[size_t(t) * kv_row + h * hd];
      cpu::rmsnorm(kh, W.k_norm.data(), eps, hd, tmp.data());
      cpu::rope(tmp.data(), rd, cs.data(), sn.data());
      std::copy(tmp.begin(), tmp.end(), &kv.k[size_t(pos + t) * kv_row + h * hd]);
      std::copy(&v[size_t(t) * kv_row + h * hd], &v[size_t(t) * kv_row + h * hd] + hd,
                &kv.v[size_t(pos + t) * kv_row + h * hd]);
    }
  }
  const float scale = 1.0f / std::sqrt(float(hd));
  const int group = Hq / Hkv;
  std::vector<float> attn(size_t(T) * Hq * hd);
  pool_.parallel_for(Hq, 1, [&](int64_t h0, int64_t h1) {  // query heads are independent
    std::vector<float> q(static_cast<size_t>(hd)), scores(static_cast<size_t>(pos + T)), acc(static_cast<size_t>(hd));
    std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(static_cast<size_t>(rd / 2));
    for (int t = 0; t < T; ++t) {
      cpu::rope_angles(pos + t, rd, cfg_.rope_theta, cs.data(), sn.data());
      const int n_keys = pos + t + 1;  // causal
      for (int h = int(h0); h < int(h1); ++h) {
        const float* qh = &qg[size_t(t) * Hq * hd * 2 + size_t(h) * hd * 2];  // [query | gate] per head
        cpu::rmsnorm(qh, W.q_norm.data(), eps, hd, q.data());
        cpu::rope(q.data(), rd, cs.data(), sn.data());
        const int kh = h / group;
        float mx = -INFINITY;
        for (int j = 0; j < n_keys; ++j) {
          scores[size_t(j)] = cpu::dot(q.data(), &kv.k[size_t(j) * kv_row + kh * hd], hd) * scale;
          mx = std::max(mx, scores[size_t(j)]);
        }
        float sum = 0.0f;
        for (int j = 0; j < n_keys; ++j) {
          scores[size_t(j)] = std::exp(scores[size_t(j)] - mx);
          sum += scores[size_t(j)];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < n_keys; ++j) {
          const float p = scores[size_t(j)] / sum;
          const float* vj = &kv.v[size_t(j) * kv_row + kh * hd];
          for (int d = 0; d < hd; ++d) acc[size_t(d)] += p * vj[d];
        }
        const float* gate = qh + hd;
        float* o = &attn[size_t(t) * Hq * hd + size_t(h) * hd];
        for (int d = 0; d < hd; ++d) o[d] = acc[size_t(d)] * cpu::sigmoid(gate[d]);
      }
    }
  });
  cpu::matmul(*W.o, attn.data(), T, out, 0, -1, &pool_, min_chunk_work_);
}

void CpuQwen35::gdn_step(GdnState& st, int h0, int h1, const float* q, const float* k, const float* v,
                         const float* g, const float* beta, float* o) const {
  const int dk = cfg_.linear_key_head_dim, dv = cfg_.linear_value_head_dim;
  std::vector<float> mem(static_cast<size_t>(dv));
  for (int h = h0; h < h1; ++h) {
    float* S = &st.S[size_t(h) * dk * dv];  // [dk][dv]
    const float* qh = q + size_t(h) * dk;
    const float* kh = k + size_t(h) * dk;
    const float* vh = v + size_t(h) * dv;
    const float decay = std::exp(g[h]);
    // Two sweeps over S; per element the same operations in the same order
    // as decay, then read (S k), then write (+ k mem), then output (S q).
    std::fill(mem.begin(), mem.end(), 0.0f);
    for (int i = 0; i < dk; ++i) {
      float* Si = S + size_t(i) * dv;
      for (int j = 0; j < dv; ++j) {
        Si[j] *= decay;
        mem[size_t(j)] += Si[j] * kh[i];
      }
    }
    for (int j = 0; j < dv; ++j) mem[size_t(j)] = (vh[j] - mem[size_t(j)]) * beta[h];
    float* oh = o + size_t(h) * dv;
    for (int j = 0; j < dv; ++j) oh[j] = 0.0f;
    for (int i = 0; i < dk; ++i) {
      float* Si = S + size_t(i) * dv;
      for (int j = 0; j < dv; ++j) {
        Si[j] += kh[i] * mem[size_t(j)];
        oh[j] += Si[j] * qh[i];
      }
    }
  }
}

void CpuQwen35::gdn_mixer(const GdnWeights& W, GdnState& st, int T, const float* xn, float* out) {
  const int cd = cfg_.conv_dim(), K = cfg_.linear_conv_kernel_dim;
  const int Hk = cfg_.linear_num_key_heads, Hv = cfg_.linear_num_value_heads;
  const int dk = cfg_.linear_key_head_dim, dv = cfg_.linear_value_head_dim;
  const int kd = cfg_.key_dim(), vd = cfg_.value_dim(), ratio = Hv / Hk;
  st.mixed.resize(size_t(T) * cd);
  std::vector<float> z(size_t(T) * vd), b(size_t(T) * Hv), a(size_t(T) * Hv);
  cpu::matmul(*W.qkv, xn, T, st.mixed.data(), 0, -1, &pool_, min_chunk_work_);
  cpu::matmul(*W.z, xn, T, z.data(), 0, -1, &pool_, min_chunk_work_);
  cpu::matmul(*W.b, xn, T, b.data(), 0, -1, &pool_, min_chunk_work_);
  cpu::matmul(*W.a, xn, T, a.data(), 0, -1, &pool_, min_chunk_work_);
  st.q.resize(size_t(T) * Hv * dk);
  st.k.resize(size_t(T) * Hv * dk);
  st.v.resize(size_t(T) * Hv * dv);
  st.g.resize(size_t(T) * Hv);
  st.beta.resize(size_t(T) * Hv);
  std::vector<float> c(static_cast<size_t>(cd)), o(size_t(T) * vd), y(size_t(T) * vd);
  const float qscale = 1.0f / std::sqrt(float(dk));
  for (int t = 0; t < T; ++t) {
    const float* m = &st.mixed[size_t(t) * cd];
    // Causal depthwise conv: taps 0..K-2 from the conv state, K-1 from this token.
    for (int ch = 0; ch < cd; ++ch) {
      const float* w = &W.conv[size_t(ch) * K];
      float s = 0.0f;
      for (int i = 0; i < K - 1; ++i) s += w[i] * st.conv[size_t(i) * cd + ch];
      s += w[K - 1] * m[ch];
      c[size_t(ch)] = cpu::silu(s);
    }
    // Shift the conv state: drop the oldest row, append this token's pre-conv row.
    if (K > 1) {
      std::memmove(st.conv.data(), st.conv.data() + cd, size_t(K - 2) * cd * sizeof(float));
      std::copy(m, m + cd, st.conv.begin() + size_t(K - 2) * cd);
    }
    float* qt = &st.q[size_t(t) * Hv * dk];
    float* kt = &st.k[size_t(t) * Hv * dk];
    for (int h = 0; h < Hk; ++h) {  // l2-normalise per key head, then repeat_interleave to value heads
      std::vector<float> qh(c.begin() + h * dk, c.begin() + (h + 1) * dk);
      std::vector<float> kh(c.begin() + kd + h * dk, c.begin() + kd + (h + 1) * dk);
      cpu::l2norm(qh.data(), dk, 1e-6f);
      cpu::l2norm(kh.data(), dk, 1e-6f);
      for (int d = 0; d < dk; ++d) qh[size_t(d)] *= qscale;
      for (int r = 0; r < ratio; ++r) {
        std::copy(qh.begin(), qh.end(), qt + size_t(h * ratio + r) * dk);
        std::copy(kh.begin(), kh.end(), kt + size_t(h * ratio + r) * dk);
      }
    }
    std::copy(c.begin() + 2 * kd, c.begin() + 2 * kd + vd, &st.v[size_t(t) * vd]);
    for (int h = 0; h < Hv; ++h) {
      st.beta[size_t(t) * Hv + h] = cpu::sigmoid(b[size_t(t) * Hv + h]);
      st.g[size_t(t) * Hv + h] = -std::exp(W.a_log[size_t(h)]) * cpu::softplus(a[size_t(t) * Hv + h] + W.dt_bias[size_t(h)]);
    }
  }
  // The recurrence and the gated RMSNorm, value heads in parallel: head h's
  // state sees its tokens in order, heads never mix.
  pool_.parallel_for(Hv, 1, [&](int64_t h0, int64_t h1) {
    for (int t = 0; t < T; ++t) {
      gdn_step(st, int(h0), int(h1), &st.q[size_t(t) * Hv * dk], &st.k[size_t(t) * Hv * dk], &st.v[size_t(t) * vd],
               &st.g[size_t(t) * Hv], &st.beta[size_t(t) * Hv], &o[size_t(t) * vd]);
      for (int h = int(h0); h < int(h1); ++h) {  // norm(o) * w * silu(z)
        const float* oh = &o[size_t(t) * vd + h * dv];
        float* yh = &y[size_t(t) * vd + h * dv];
        cpu::rmsnorm(oh, W.norm.data(), cfg_.rms_norm_eps, dv, yh);
        const float* zh = &z[size_t(t) * vd + h * dv];
        for (int d = 0; d < dv; ++d) yh[d] *= cpu::silu(zh[d]);
      }
    }
  });
  cpu::matmul(*W.out, y.data(), T, out, 0, -1, &pool_, min_chunk_work_);
}

void CpuQwen35::head_argmax(int first, int count, int width, int32_t* out) {
  cpu::head_argmax_of_rows(*lm_head_, hidden_.data(), last_T_, first, count, width, out, head_work_, head_threads());
}

void CpuQwen35::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  cpu::head_fused_argmax(*lm_head_, &hidden_[size_t(first) * cfg_.hidden_size], count, out, head_work_, head_threads());
}

int CpuQwen35::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int rows = std::min<int>(int(drafts.size()) + 1, last_T_);
  if (fault_ == Fault::RuntimeWalkAsBatched) {
    // The planted runtime fault: every row through the batched projection,
    // and the walk's return value computed as if it had walked. Only the
    // op's own counters (path Batched, rows = W, walk_rows 0) give it away.
    cpu::head_project_argmax(*lm_head_, hidden_.data(), rows, rows, out, head_work_, head_threads());
    int a = 0;
    while (a < int(drafts.size()) && a + 1 < rows && out[a] == drafts[size_t(a)]) ++a;
    return a + 1;
  }
  return cpu::head_walk_rows(*lm_head_, hidden_.data(), rows, drafts, out, head_work_, head_threads());
}

void CpuQwen35::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  cpu::matmul(*lm_head_, &hidden_[size_t(row) * cfg_.hidden_size], 1, out, 0, -1, &pool_, min_chunk_work_);
}

void CpuQwen35::mtp_run(const int32_t* tokens, const float* hidden, int n) {
  if (!has_mtp_) fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  if (mtp_length_ + n > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  const int H = cfg_.hidden_size;
  std::vector<float> e(size_t(n) * H), cat(size_t(n) * 2 * H), u(size_t(n) * H);
  embed(tokens, n, e.data());
  for (int i = 0; i < n; ++i) {  // fc input: [norm(embed(next token)) ; norm(hidden)], embedding first
    cpu::rmsnorm(&e[size_t(i) * H], mtp_norm_emb_.data(), cfg_.rms_norm_eps, H, &cat[size_t(i) * 2 * H]);
    cpu::rmsnorm(hidden + size_t(i) * H, mtp_norm_hid_.data(), cfg_.rms_norm_eps, H, &cat[size_t(i) * 2 * H + H]);
  }
  cpu::matmul(*mtp_fc_, cat.data(), n, u.data(), 0, -1, &pool_, min_chunk_work_);
  decoder_layer(mtp_layer_, mtp_kv_, nullptr, mtp_length_, n, u.data());
  mtp_hidden_.resize(size_t(n) * H);
  for (int i = 0; i < n; ++i) cpu::rmsnorm(&u[size_t(i) * H], mtp_norm_.data(), cfg_.rms_norm_eps, H, &mtp_hidden_[size_t(i) * H]);
  mtp_length_ += n;
  mtp_last_n_ = n;
  mtp_work_.entries += n;
}

void CpuQwen35::mtp_forward(std::span<const int32_t> next_tokens, int first_row) {
  const int n = int(next_tokens.size());
  if (n <= 0 || first_row < 0 || first_row + n > last_T_)
    fail("mtp_forward: rows [{}, {}) outside the last forward's {} rows", first_row, first_row + n, last_T_);
  check_tokens(next_tokens);
  mtp_run(next_tokens.data(), &hidden_[size_t(first_row) * cfg_.hidden_size], n);
}

void CpuQwen35::mtp_step(int32_t token) {
  if (mtp_last_n_ == 0) fail("mtp_step before any mtp_forward");
  check_tokens({&token, 1});
  std::vector<float> h(mtp_hidden_.end() - cfg_.hidden_size, mtp_hidden_.end());
  mtp_run(&token, h.data(), 1);
  ++mtp_work_.chained_steps;
}

void CpuQwen35::mtp_argmax(int count, int32_t* out) {
  if (count < 0 || count > mtp_last_n_) fail("mtp_argmax: {} entries, last call made {}", count, mtp_last_n_);
  const int H = cfg_.hidden_size, V = cfg_.vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  for (int i = 0; i < count; ++i) {
    cpu::matmul(*lm_head_, &mtp_hidden_[size_t(mtp_last_n_ - count + i) * H], 1, logits.data(), 0, -1, &pool_, min_chunk_work_);
    out[i] = cpu::argmax(logits.data(), V);
    ++mtp_work_.argmax_rows;
  }
}

void CpuQwen35::mtp_logits(float* out) {
  if (mtp_last_n_ == 0) fail("mtp_logits before any mtp_forward");
  const int H = cfg_.hidden_size;
  // The same projection mtp_argmax takes its argmax of.
  cpu::matmul(*lm_head_, &mtp_hidden_[size_t(mtp_last_n_ - 1) * H], 1, out, 0, -1, &pool_, min_chunk_work_);
}

void CpuQwen35::mtp_rollback(int length) {
  if (length < 0 || length > mtp_length_) fail("mtp_rollback: length {} outside [0, {}]", length, mtp_length_);
  mtp_length_ = length;
}

}  // namespace

std::unique_ptr<ModelRuntime> make_cpu_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                               const CpuRuntimeOptions& options) {
  return std::make_unique<CpuQwen35>(ckpt, max_tokens, options);
}

}  // namespace nextn
