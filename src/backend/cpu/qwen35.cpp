// The Qwen3.5 forward on the CPU, layer by layer (model-spec §A), with the
// rollback of §B: attention KV truncated; GDN conv state rebuilt from the
// verify rows; GDN recurrent state restored from a snapshot taken before the
// forward and replayed over the accepted prefix from the recorded inputs.
// Threads split independent outputs only (matrix rows, attention heads, GDN
// heads, vocabulary chunks of the fused argmax), never one reduction, so every
// value is the same at any thread count.
#include "backend/cpu/qwen35.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/head.h"
#include "backend/cpu/ops.h"
#include "core/fault.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"

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

// Left uninitialised: a row is written before it is read, so the pages of
// a slot's positions it never reaches cost no memory.
struct KvCache {
  std::unique_ptr<float[]> k, v;  // [max_tokens][kv_heads][head_dim]
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

// One sequence's rows inside a layer call over the rows of several
// sequences: rows [row0, row0 + T) of the call, at positions pos.. of that
// sequence, whose caches for this layer are kv (attention) or gdn (GDN).
struct Segment {
  KvCache* kv = nullptr;
  GdnState* gdn = nullptr;
  int pos = 0, row0 = 0, T = 0;
};

// What every sequence of a group shares: the config, the weights and the
// thread pool. Layer calls take the rows of one or more sequences: the
// matrix products run over all of them at once (each output element is one
// dot(), so a row's values do not depend on its neighbours), attention and
// the GDN recurrence per sequence.
struct CpuModel {
  CpuModel(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options);

  void embed(const int32_t* tokens, int T, float* x) const;
  void check_tokens(std::span<const int32_t> tokens) const;
  void decoder_layer(const LayerWeights& L, std::span<const Segment> segs, int N, float* x);
  void attention(const AttentionWeights& W, std::span<const Segment> segs, int N, const float* xn, float* out);
  void gdn_mixer(const GdnWeights& W, std::span<const Segment> segs, int N, const float* xn, float* out);
  // One token of the recurrence for value heads [h0, h1).
  void gdn_step(GdnState& st, int h0, int h1, const float* q, const float* k, const float* v, const float* g,
                const float* beta, float* o) const;
  void mlp(const LayerWeights& L, int N, const float* xn, float* out);
  // Output rows [0, rows) of w (-1: all).
  void matmul(const Matrix& w, const float* x, int T, float* y, int64_t rows = -1) {
    cpu::matmul(w, x, T, y, 0, rows, &pool, min_chunk_work);
  }
  cpu::HeadThreads head_threads() { return {&pool, min_chunk_work}; }

  Qwen35Config cfg;
  ThreadPool pool;
  int64_t min_chunk_work;
  Fault fault = Fault::None;  // NEXTN_FAULT, read once at construction
  MatrixPtr embed_tokens, lm_head;
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  // MTP head
  bool has_mtp = false;
  MatrixPtr mtp_fc;
  std::vector<float> mtp_norm_emb, mtp_norm_hid, mtp_norm;
  LayerWeights mtp_layer;
};

// One sequence: its caches, states and counters over a shared CpuModel.
class CpuQwen35 final : public ModelRuntime {
 public:
  CpuQwen35(std::shared_ptr<CpuModel> model, int max_tokens);

  const Qwen35Config& config() const override { return m_->cfg; }
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
  int draft_vocab() const override { return draft_vocab_; }
  void set_draft_vocab(int n) override { draft_vocab_ = effective_draft_vocab(n, m_->cfg.vocab_size); }

  const CpuModel* model() const { return m_.get(); }
  // target_forward(tokens[i]) on seqs[i], one trunk forward over all rows;
  // every sequence is checked before any changes.
  static void forward_together(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens);
  // The group's step calls (model/batch_runtime.h), one projection or MTP
  // layer call for all the sequences.
  static void head_argmax_together(std::span<CpuQwen35* const> seqs, std::span<const SequenceRows> rows, int32_t* out);
  static void mtp_forward_together(std::span<CpuQwen35* const> seqs,
                                   std::span<const std::span<const int32_t>> next_tokens);
  static void mtp_draft_together(std::span<CpuQwen35* const> seqs, std::span<const int> n, int32_t* out,
                                 StepWork& work);

 private:
  void check_forward(std::span<const int32_t> tokens) const;
  void check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const;
  // The MTP layer over several sequences' new entries: tokens[s] paired with
  // the rows at hidden[s] ([n][H]), appended to seqs[s]'s MTP cache.
  static void mtp_run(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens,
                      std::span<const float* const> hidden);
  // Argmax over each sequence's draft vocabulary of its last MTP entry, one
  // projection for all: into *out[s].
  static void mtp_argmax_last(std::span<CpuQwen35* const> seqs, std::span<int32_t* const> out);

  std::shared_ptr<CpuModel> m_;
  int max_tokens_;
  std::vector<KvCache> kv_;    // per layer (attention layers only)
  std::vector<GdnState> gdn_;  // per layer (GDN layers only)
  int length_ = 0;
  int forward_start_ = 0;  // length before the last target_forward
  int last_T_ = 0;         // rows of the last target_forward still in the caches
  std::vector<float> hidden_;  // [last_T][H], post final norm
  HeadWork head_work_;         // counted by the head ops (backend/cpu/head.h)
  MtpWork mtp_work_;           // counted in mtp_run / mtp_step / mtp_argmax
  KvCache mtp_kv_;
  int mtp_length_ = 0;
  int mtp_last_n_ = 0;
  std::vector<float> mtp_hidden_;  // [last n][H], post mtp.norm
  int draft_vocab_;                // the MTP projections cover ids [0, draft_vocab_)
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

CpuModel::CpuModel(const Qwen35Checkpoint& ck, const CpuRuntimeOptions& options)
    : cfg(ck.config()),
      pool(options.threads > 0 ? options.threads : default_thread_count()),
      min_chunk_work(options.min_chunk_work),
      fault(read_fault_hook()) {
  const int H = cfg.hidden_size;
  embed_tokens = Matrix::load(ck.matrix("embed_tokens", cfg.vocab_size, H));
  const WeightRef head = ck.lm_head();
  lm_head = head.weight == ck.matrix("embed_tokens", cfg.vocab_size, H).weight ? embed_tokens : Matrix::load(head);
  final_norm = ck.norm("norm", H, true);
  for (int i = 0; i < cfg.num_hidden_layers; ++i)
    layers.push_back(load_layer(ck, "layers." + std::to_string(i), cfg.full_attention[size_t(i)]));
  has_mtp = ck.mtp_layers() > 0;
  if (has_mtp) {
    mtp_fc = Matrix::load(ck.matrix("mtp.fc", H, 2 * H));
    mtp_norm_emb = ck.norm("mtp.pre_fc_norm_embedding", H, true);
    mtp_norm_hid = ck.norm("mtp.pre_fc_norm_hidden", H, true);
    mtp_norm = ck.norm("mtp.norm", H, true);
    mtp_layer = load_layer(ck, "mtp.layers.0", true);
  }
}

CpuQwen35::CpuQwen35(std::shared_ptr<CpuModel> model, int max_tokens)
    : m_(std::move(model)), max_tokens_(max_tokens), draft_vocab_(m_->cfg.vocab_size) {
  if (max_tokens < 1) fail("--backend cpu: max_tokens {} must be positive", max_tokens);
  const Qwen35Config& cfg = m_->cfg;
  const int kv_row = cfg.num_key_value_heads * cfg.head_dim;
  for (const LayerWeights& L : m_->layers) {
    KvCache kv;
    GdnState st;
    if (L.full) {
      kv.k = std::make_unique_for_overwrite<float[]>(size_t(max_tokens) * kv_row);
      kv.v = std::make_unique_for_overwrite<float[]>(size_t(max_tokens) * kv_row);
    } else {
      st.conv.assign(size_t(cfg.linear_conv_kernel_dim - 1) * cfg.conv_dim(), 0.0f);
      st.S.assign(size_t(cfg.linear_num_value_heads) * cfg.linear_key_head_dim * cfg.linear_value_head_dim, 0.0f);
    }
    kv_.push_back(std::move(kv));
    gdn_.push_back(std::move(st));
  }
  if (m_->has_mtp) {
    mtp_kv_.k = std::make_unique_for_overwrite<float[]>(size_t(max_tokens) * kv_row);
    mtp_kv_.v = std::make_unique_for_overwrite<float[]>(size_t(max_tokens) * kv_row);
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

void CpuModel::check_tokens(std::span<const int32_t> tokens) const {
  for (int32_t t : tokens)
    if (t < 0 || t >= cfg.vocab_size) fail("token id {} is outside the vocabulary [0, {})", t, cfg.vocab_size);
}

void CpuModel::embed(const int32_t* tokens, int T, float* x) const {
  for (int t = 0; t < T; ++t) embed_tokens->row(tokens[t], x + size_t(t) * cfg.hidden_size);
}

void CpuQwen35::check_forward(std::span<const int32_t> tokens) const {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  if (length_ + T > max_tokens_) fail("sequence of {} tokens exceeds the cache capacity {}", length_ + T, max_tokens_);
  m_->check_tokens(tokens);
}

void CpuQwen35::target_forward(std::span<const int32_t> tokens) {
  CpuQwen35* self = this;
  forward_together({&self, 1}, {&tokens, 1});
}

void CpuQwen35::forward_together(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens) {
  if (seqs.empty() || seqs.size() != tokens.size())
    fail("internal: forward_together of {} sequences and {} token lists", seqs.size(), tokens.size());
  CpuModel& m = *seqs[0]->m_;
  int N = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s]->m_.get() != &m) fail("internal: forward_together over sequences of different models");
    for (size_t r = 0; r < s; ++r)
      if (seqs[r] == seqs[s]) fail("internal: forward_together lists one sequence twice");
    seqs[s]->check_forward(tokens[s]);
    N += int(tokens[s].size());
  }
  const int H = m.cfg.hidden_size;
  std::vector<float> x(size_t(N) * H);
  std::vector<Segment> segs(seqs.size());
  for (size_t s = 0, row = 0; s < seqs.size(); row += tokens[s].size(), ++s) {
    m.embed(tokens[s].data(), int(tokens[s].size()), &x[row * H]);
    segs[s] = Segment{nullptr, nullptr, seqs[s]->length_, int(row), int(tokens[s].size())};
  }
  for (size_t i = 0; i < m.layers.size(); ++i) {
    for (size_t s = 0; s < seqs.size(); ++s) {
      CpuQwen35& q = *seqs[s];
      segs[s].kv = &q.kv_[i];
      segs[s].gdn = m.layers[i].full ? nullptr : &q.gdn_[i];
      if (segs[s].gdn && segs[s].T > 1) {  // snapshot for rollback
        segs[s].gdn->conv_before = segs[s].gdn->conv;
        segs[s].gdn->S_before = segs[s].gdn->S;
      }
    }
    m.decoder_layer(m.layers[i], segs, N, x.data());
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    CpuQwen35& q = *seqs[s];
    const int T = segs[s].T;
    q.hidden_.resize(size_t(T) * H);
    for (int t = 0; t < T; ++t)
      cpu::rmsnorm(&x[size_t(segs[s].row0 + t) * H], m.final_norm.data(), m.cfg.rms_norm_eps, H,
                   &q.hidden_[size_t(t) * H]);
    q.forward_start_ = q.length_;
    q.length_ += T;
    q.last_T_ = T;
  }
}

void CpuQwen35::target_rollback(int keep) {
  if (keep < 1 || keep > last_T_) fail("target_rollback: keep {} outside [1, {}]", keep, last_T_);
  if (keep == last_T_) return;
  const Qwen35Config& cfg = m_->cfg;
  const int cd = cfg.conv_dim(), km1 = cfg.linear_conv_kernel_dim - 1;
  for (size_t i = 0; i < m_->layers.size(); ++i) {
    if (m_->layers[i].full) continue;  // KV: truncation is the length change below
    GdnState& st = gdn_[i];
    // Conv state: the last K-1 pre-conv rows of [old state ; accepted verify rows].
    std::vector<float> hist(size_t(km1 + keep) * cd);
    std::copy(st.conv_before.begin(), st.conv_before.end(), hist.begin());
    std::copy(st.mixed.begin(), st.mixed.begin() + size_t(keep) * cd, hist.begin() + size_t(km1) * cd);
    std::copy(hist.end() - size_t(km1) * cd, hist.end(), st.conv.begin());
    // Recurrent state: snapshot + replay of the recorded recurrence inputs.
    st.S = st.S_before;
    const int dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim, Hv = cfg.linear_num_value_heads;
    m_->pool.parallel_for(Hv, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> o(size_t(Hv) * dv);
      for (int t = 0; t < keep; ++t)
        m_->gdn_step(st, int(h0), int(h1), &st.q[size_t(t) * Hv * dk], &st.k[size_t(t) * Hv * dk],
                     &st.v[size_t(t) * Hv * dv], &st.g[size_t(t) * Hv], &st.beta[size_t(t) * Hv], o.data());
    });
  }
  length_ = forward_start_ + keep;
  last_T_ = keep;  // a second rollback of the same forward keeps a prefix of these
}

void CpuModel::decoder_layer(const LayerWeights& L, std::span<const Segment> segs, int N, float* x) {
  const int H = cfg.hidden_size;
  std::vector<float> xn(size_t(N) * H), mix(size_t(N) * H);
  for (int t = 0; t < N; ++t) cpu::rmsnorm(x + size_t(t) * H, L.input_norm.data(), cfg.rms_norm_eps, H, &xn[size_t(t) * H]);
  if (L.full)
    attention(L.attn, segs, N, xn.data(), mix.data());
  else
    gdn_mixer(L.gdn, segs, N, xn.data(), mix.data());
  for (size_t i = 0; i < xn.size(); ++i) x[i] += mix[i];
  for (int t = 0; t < N; ++t) cpu::rmsnorm(x + size_t(t) * H, L.post_norm.data(), cfg.rms_norm_eps, H, &xn[size_t(t) * H]);
  mlp(L, N, xn.data(), mix.data());
  for (size_t i = 0; i < xn.size(); ++i) x[i] += mix[i];
}

void CpuModel::mlp(const LayerWeights& L, int N, const float* xn, float* out) {
  const int I = cfg.intermediate_size;
  std::vector<float> g(size_t(N) * I), u(size_t(N) * I);
  matmul(*L.gate, xn, N, g.data());
  matmul(*L.up, xn, N, u.data());
  for (size_t i = 0; i < g.size(); ++i) g[i] = cpu::silu(g[i]) * u[i];
  matmul(*L.down, g.data(), N, out);
}

void CpuModel::attention(const AttentionWeights& W, std::span<const Segment> segs, int N, const float* xn, float* out) {
  const int Hq = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const int rd = cfg.rotary_dim();
  const float eps = cfg.rms_norm_eps;
  std::vector<float> qg(size_t(N) * Hq * hd * 2), k(size_t(N) * Hkv * hd), v(size_t(N) * Hkv * hd);
  matmul(*W.q, xn, N, qg.data());
  matmul(*W.k, xn, N, k.data());
  matmul(*W.v, xn, N, v.data());
  std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(static_cast<size_t>(rd / 2)), tmp(static_cast<size_t>(hd));
  const int kv_row = Hkv * hd;
  int max_keys = 0;
  for (const Segment& sg : segs) {  // each sequence's new keys and values into its own cache
    max_keys = std::max(max_keys, sg.pos + sg.T);
    for (int t = 0; t < sg.T; ++t) {
      const size_t r = size_t(sg.row0 + t);
      cpu::rope_angles(sg.pos + t, rd, cfg.rope_theta, cs.data(), sn.data());
      for (int h = 0; h < Hkv; ++h) {
        float* kh = &k[r * kv_row + h * hd];
        cpu::rmsnorm(kh, W.k_norm.data(), eps, hd, tmp.data());
        cpu::rope(tmp.data(), rd, cs.data(), sn.data());
        std::copy(tmp.begin(), tmp.end(), &sg.kv->k[size_t(sg.pos + t) * kv_row + h * hd]);
        std::copy(&v[r * kv_row + h * hd], &v[r * kv_row + h * hd] + hd,
                  &sg.kv->v[size_t(sg.pos + t) * kv_row + h * hd]);
      }
    }
  }
  const float scale = 1.0f / std::sqrt(float(hd));
  const int group = Hq / Hkv;
  std::vector<float> attn(size_t(N) * Hq * hd);
  pool.parallel_for(Hq, 1, [&](int64_t h0, int64_t h1) {  // query heads are independent
    std::vector<float> q(static_cast<size_t>(hd)), scores(static_cast<size_t>(max_keys)), acc(static_cast<size_t>(hd));
    std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(static_cast<size_t>(rd / 2));
    for (const Segment& sg : segs) {  // each row attends to its own sequence's cache
      const KvCache& kv = *sg.kv;
      for (int t = 0; t < sg.T; ++t) {
        const size_t r = size_t(sg.row0 + t);
        cpu::rope_angles(sg.pos + t, rd, cfg.rope_theta, cs.data(), sn.data());
        const int n_keys = sg.pos + t + 1;  // causal
        for (int h = int(h0); h < int(h1); ++h) {
          const float* qh = &qg[r * Hq * hd * 2 + size_t(h) * hd * 2];  // [query | gate] per head
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
          float* o = &attn[r * Hq * hd + size_t(h) * hd];
          for (int d = 0; d < hd; ++d) o[d] = acc[size_t(d)] * cpu::sigmoid(gate[d]);
        }
      }
    }
  });
  matmul(*W.o, attn.data(), N, out);
}

void CpuModel::gdn_step(GdnState& st, int h0, int h1, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, float* o) const {
  const int dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim;
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

void CpuModel::gdn_mixer(const GdnWeights& W, std::span<const Segment> segs, int N, const float* xn, float* out) {
  const int cd = cfg.conv_dim(), K = cfg.linear_conv_kernel_dim;
  const int Hk = cfg.linear_num_key_heads, Hv = cfg.linear_num_value_heads;
  const int dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim;
  const int kd = cfg.key_dim(), vd = cfg.value_dim(), ratio = Hv / Hk;
  std::vector<float> mixed(size_t(N) * cd), z(size_t(N) * vd), b(size_t(N) * Hv), a(size_t(N) * Hv);
  matmul(*W.qkv, xn, N, mixed.data());
  matmul(*W.z, xn, N, z.data());
  matmul(*W.b, xn, N, b.data());
  matmul(*W.a, xn, N, a.data());
  std::vector<float> c(static_cast<size_t>(cd)), o(size_t(N) * vd), y(size_t(N) * vd);
  const float qscale = 1.0f / std::sqrt(float(dk));
  for (const Segment& sg : segs) {  // the conv and the recurrence inputs, per sequence
    GdnState& st = *sg.gdn;
    const int T = sg.T;
    st.mixed.assign(mixed.begin() + size_t(sg.row0) * cd, mixed.begin() + size_t(sg.row0 + T) * cd);
    st.q.resize(size_t(T) * Hv * dk);
    st.k.resize(size_t(T) * Hv * dk);
    st.v.resize(size_t(T) * Hv * dv);
    st.g.resize(size_t(T) * Hv);
    st.beta.resize(size_t(T) * Hv);
    for (int t = 0; t < T; ++t) {
      const size_t r = size_t(sg.row0 + t);
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
        for (int rep = 0; rep < ratio; ++rep) {
          std::copy(qh.begin(), qh.end(), qt + size_t(h * ratio + rep) * dk);
          std::copy(kh.begin(), kh.end(), kt + size_t(h * ratio + rep) * dk);
        }
      }
      std::copy(c.begin() + 2 * kd, c.begin() + 2 * kd + vd, &st.v[size_t(t) * vd]);
      for (int h = 0; h < Hv; ++h) {
        st.beta[size_t(t) * Hv + h] = cpu::sigmoid(b[r * Hv + h]);
        st.g[size_t(t) * Hv + h] = -std::exp(W.a_log[size_t(h)]) * cpu::softplus(a[r * Hv + h] + W.dt_bias[size_t(h)]);
      }
    }
  }
  // The recurrence and the gated RMSNorm, value heads in parallel: head h's
  // state sees its sequence's tokens in order, heads and sequences never mix.
  pool.parallel_for(Hv, 1, [&](int64_t h0, int64_t h1) {
    for (const Segment& sg : segs) {
      GdnState& st = *sg.gdn;
      for (int t = 0; t < sg.T; ++t) {
        const size_t r = size_t(sg.row0 + t);
        gdn_step(st, int(h0), int(h1), &st.q[size_t(t) * Hv * dk], &st.k[size_t(t) * Hv * dk], &st.v[size_t(t) * vd],
                 &st.g[size_t(t) * Hv], &st.beta[size_t(t) * Hv], &o[r * vd]);
        for (int h = int(h0); h < int(h1); ++h) {  // norm(o) * w * silu(z)
          const float* oh = &o[r * vd + h * dv];
          float* yh = &y[r * vd + h * dv];
          cpu::rmsnorm(oh, W.norm.data(), cfg.rms_norm_eps, dv, yh);
          const float* zh = &z[r * vd + h * dv];
          for (int d = 0; d < dv; ++d) yh[d] *= cpu::silu(zh[d]);
        }
      }
    }
  });
  matmul(*W.out, y.data(), N, out);
}

void CpuQwen35::head_argmax(int first, int count, int width, int32_t* out) {
  cpu::head_argmax_of_rows(*m_->lm_head, hidden_.data(), last_T_, first, count, width, out, head_work_,
                           m_->head_threads());
}

void CpuQwen35::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  cpu::head_fused_argmax(*m_->lm_head, &hidden_[size_t(first) * m_->cfg.hidden_size], count, out, head_work_,
                         m_->head_threads());
}

int CpuQwen35::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int rows = std::min<int>(int(drafts.size()) + 1, last_T_);
  if (m_->fault == Fault::RuntimeWalkAsBatched) {
    // The planted runtime fault: every row through the batched projection,
    // and the walk's return value computed as if it had walked. Only the
    // op's own counters (path Batched, rows = W, walk_rows 0) give it away.
    cpu::head_project_argmax(*m_->lm_head, hidden_.data(), rows, rows, out, head_work_, m_->head_threads());
    int a = 0;
    while (a < int(drafts.size()) && a + 1 < rows && out[a] == drafts[size_t(a)]) ++a;
    return a + 1;
  }
  return cpu::head_walk_rows(*m_->lm_head, hidden_.data(), rows, drafts, out, head_work_, m_->head_threads());
}

void CpuQwen35::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  m_->matmul(*m_->lm_head, &hidden_[size_t(row) * m_->cfg.hidden_size], 1, out);
}

void CpuQwen35::mtp_run(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens,
                        std::span<const float* const> hidden) {
  CpuModel& m = *seqs[0]->m_;
  if (!m.has_mtp) fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  int N = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int n = int(tokens[s].size());
    if (seqs[s]->mtp_length_ + n > seqs[s]->max_tokens_) fail("MTP cache capacity {} exceeded", seqs[s]->max_tokens_);
    N += n;
  }
  const Qwen35Config& cfg = m.cfg;
  const int H = cfg.hidden_size;
  std::vector<float> e(size_t(N) * H), cat(size_t(N) * 2 * H), u(size_t(N) * H);
  std::vector<Segment> segs(seqs.size());
  for (size_t s = 0, row = 0; s < seqs.size(); row += tokens[s].size(), ++s) {
    const int n = int(tokens[s].size());
    m.embed(tokens[s].data(), n, &e[row * H]);
    for (int i = 0; i < n; ++i) {  // fc input: [norm(embed(next token)) ; norm(hidden)], embedding first
      const size_t r = row + size_t(i);
      cpu::rmsnorm(&e[r * H], m.mtp_norm_emb.data(), cfg.rms_norm_eps, H, &cat[r * 2 * H]);
      cpu::rmsnorm(hidden[s] + size_t(i) * H, m.mtp_norm_hid.data(), cfg.rms_norm_eps, H, &cat[r * 2 * H + H]);
    }
    segs[s] = Segment{&seqs[s]->mtp_kv_, nullptr, seqs[s]->mtp_length_, int(row), n};
  }
  m.matmul(*m.mtp_fc, cat.data(), N, u.data());
  m.decoder_layer(m.mtp_layer, segs, N, u.data());
  for (size_t s = 0; s < seqs.size(); ++s) {
    CpuQwen35& q = *seqs[s];
    const int n = segs[s].T;
    q.mtp_hidden_.resize(size_t(n) * H);
    for (int i = 0; i < n; ++i)
      cpu::rmsnorm(&u[size_t(segs[s].row0 + i) * H], m.mtp_norm.data(), cfg.rms_norm_eps, H, &q.mtp_hidden_[size_t(i) * H]);
    q.mtp_length_ += n;
    q.mtp_last_n_ = n;
    q.mtp_work_.entries += n;
  }
}

void CpuQwen35::check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const {
  const int n = int(next_tokens.size());
  if (n <= 0 || first_row < 0 || first_row + n > last_T_)
    fail("mtp_forward: rows [{}, {}) outside the last forward's {} rows", first_row, first_row + n, last_T_);
  m_->check_tokens(next_tokens);
}

void CpuQwen35::mtp_forward_together(std::span<CpuQwen35* const> seqs,
                                     std::span<const std::span<const int32_t>> next_tokens) {
  std::vector<const float*> hidden;
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s]->check_mtp_forward(next_tokens[s], 0);
    hidden.push_back(seqs[s]->hidden_.data());
  }
  mtp_run(seqs, next_tokens, hidden);
}

void CpuQwen35::mtp_argmax_last(std::span<CpuQwen35* const> seqs, std::span<int32_t* const> out) {
  CpuModel& m = *seqs[0]->m_;
  const int H = m.cfg.hidden_size;
  const int S = int(seqs.size());
  int N = 0;  // rows [0, N) of the head cover every sequence's draft vocabulary
  std::vector<float> x(size_t(S) * H);
  for (int s = 0; s < S; ++s) {
    const CpuQwen35& q = *seqs[size_t(s)];
    if (q.mtp_last_n_ == 0) fail("mtp_draft before any mtp_forward");
    std::copy(q.mtp_hidden_.end() - H, q.mtp_hidden_.end(), &x[size_t(s) * H]);
    N = std::max(N, q.draft_vocab_);
  }
  // Each logit is one dot(): the same bits for this row alone and over the
  // first draft_vocab rows only (mtp_argmax).
  std::vector<float> logits(size_t(S) * size_t(N));
  m.matmul(*m.lm_head, x.data(), S, logits.data(), N);
  for (int s = 0; s < S; ++s) {
    CpuQwen35& q = *seqs[size_t(s)];
    *out[size_t(s)] = cpu::argmax(&logits[size_t(s) * size_t(N)], q.draft_vocab_);
    ++q.mtp_work_.argmax_rows;
  }
}

void CpuQwen35::mtp_draft_together(std::span<CpuQwen35* const> seqs, std::span<const int> n, int32_t* out,
                                   StepWork& work) {
  std::vector<int32_t*> dst;  // each sequence's first draft
  for (size_t s = 0; s < seqs.size(); ++s) {
    dst.push_back(out);
    out += std::max(0, n[s]);
  }
  const int H = seqs.empty() ? 0 : seqs[0]->m_->cfg.hidden_size;
  std::vector<CpuQwen35*> live;
  std::vector<int32_t*> at;
  for (int j = 0;; ++j) {  // draft j of every sequence drafting more than j
    live.clear();
    at.clear();
    for (size_t s = 0; s < seqs.size(); ++s)
      if (n[s] > j) live.push_back(seqs[s]), at.push_back(dst[s] + j);
    if (live.empty()) return;
    if (j > 0) {  // one chained step: entry p pairs the previous draft with the MTP's own last hidden
      std::vector<std::vector<float>> prev(live.size());
      std::vector<const float*> hidden;
      std::vector<std::span<const int32_t>> tokens;
      for (size_t s = 0; s < live.size(); ++s) {
        prev[s].assign(live[s]->mtp_hidden_.end() - H, live[s]->mtp_hidden_.end());
        hidden.push_back(prev[s].data());
        tokens.emplace_back(at[s] - 1, 1);
      }
      mtp_run(live, tokens, hidden);
      for (CpuQwen35* q : live) ++q->mtp_work_.chained_steps;
    }
    mtp_argmax_last(live, at);
    ++work.mtp_draft_launches;
  }
}

void CpuQwen35::head_argmax_together(std::span<CpuQwen35* const> seqs, std::span<const SequenceRows> rows,
                                     int32_t* out) {
  CpuModel& m = *seqs[0]->m_;
  const int H = m.cfg.hidden_size;
  int R = 0;
  for (size_t s = 0; s < rows.size(); ++s) {
    const SequenceRows& r = rows[s];
    if (r.first < 0 || r.count < 1 || r.first + r.count > seqs[s]->last_T_)
      fail("head_argmax: rows [{}, {}) outside the last forward's {} rows", r.first, r.first + r.count,
           seqs[s]->last_T_);
    R += r.count;
  }
  std::vector<float> x(size_t(R) * H);
  for (size_t s = 0, row = 0; s < rows.size(); row += size_t(rows[s].count), ++s)
    std::copy(&seqs[s]->hidden_[size_t(rows[s].first) * H], &seqs[s]->hidden_[size_t(rows[s].first + rows[s].count) * H],
              &x[row * H]);
  HeadWork call;  // what the one projection read and wrote, counted by the op
  cpu::head_project_argmax(*m.lm_head, x.data(), R, R, out, call, m.head_threads());
  for (size_t s = 0; s < rows.size(); ++s) {  // each sequence's share: its rows, the head read once for all
    HeadWork& w = seqs[s]->head_work_;
    w.rows_projected += rows[s].count;
    w.head_bytes_read += call.head_bytes_read;
    w.logits_bytes_written += call.logits_bytes_written / R * rows[s].count;
    w.head_calls += 1;
    w.last_path = HeadPath::Batched;
  }
}

void CpuQwen35::mtp_forward(std::span<const int32_t> next_tokens, int first_row) {
  check_mtp_forward(next_tokens, first_row);
  CpuQwen35* self = this;
  const float* hidden = &hidden_[size_t(first_row) * m_->cfg.hidden_size];
  mtp_run({&self, 1}, {&next_tokens, 1}, {&hidden, 1});
}

void CpuQwen35::mtp_step(int32_t token) {
  if (mtp_last_n_ == 0) fail("mtp_step before any mtp_forward");
  m_->check_tokens({&token, 1});
  std::vector<float> h(mtp_hidden_.end() - m_->cfg.hidden_size, mtp_hidden_.end());
  CpuQwen35* self = this;
  const std::span<const int32_t> tokens(&token, 1);
  const float* hidden = h.data();
  mtp_run({&self, 1}, {&tokens, 1}, {&hidden, 1});
  ++mtp_work_.chained_steps;
}

void CpuQwen35::mtp_argmax(int count, int32_t* out) {
  if (count < 0 || count > mtp_last_n_) fail("mtp_argmax: {} entries, last call made {}", count, mtp_last_n_);
  const int H = m_->cfg.hidden_size, N = draft_vocab_;
  std::vector<float> logits(static_cast<size_t>(N));
  for (int i = 0; i < count; ++i) {
    // Head rows [0, N) only: each logit is one dot(), the same bits as in the full projection.
    m_->matmul(*m_->lm_head, &mtp_hidden_[size_t(mtp_last_n_ - count + i) * H], 1, logits.data(), N);
    out[i] = cpu::argmax(logits.data(), N);
    ++mtp_work_.argmax_rows;
  }
}

void CpuQwen35::mtp_logits(float* out) {
  if (mtp_last_n_ == 0) fail("mtp_logits before any mtp_forward");
  const int H = m_->cfg.hidden_size, N = draft_vocab_;
  // The same projection mtp_argmax takes its argmax of; ids past the draft
  // vocabulary can never be drafted, so they get probability 0.
  m_->matmul(*m_->lm_head, &mtp_hidden_[size_t(mtp_last_n_ - 1) * H], 1, out, N);
  std::fill(out + N, out + m_->cfg.vocab_size, -INFINITY);
}

void CpuQwen35::mtp_rollback(int length) {
  if (length < 0 || length > mtp_length_) fail("mtp_rollback: length {} outside [0, {}]", length, mtp_length_);
  mtp_length_ = length;
}

// The CPU group: one CpuModel, sequences over it, shared forwards.
class CpuSequenceGroup final : public SequenceGroup {
 public:
  CpuSequenceGroup(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options)
      : model_(std::make_shared<CpuModel>(ckpt, options)), max_positions_(ckpt.config().max_position_embeddings) {}
  const char* backend_name() const override { return "cpu"; }
  ModelInfo info() const override { return qwen35_info(model_->cfg); }
  int max_sequences() const override { return INT_MAX; }
  bool shares_forwards() const override { return true; }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override {
    if (max_tokens > max_positions_)
      fail("a sequence of up to {} positions exceeds config.json's max_position_embeddings {}", max_tokens,
           max_positions_);
    return std::make_unique<CpuQwen35>(model_, max_tokens);
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    CpuQwen35::forward_together(own(sequences, tokens.size(), "forward_together"), tokens);
  }
  void head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) override {
    std::vector<ModelRuntime*> sequences;
    for (const SequenceRows& r : rows) sequences.push_back(r.sequence);
    if (rows.empty()) return;
    CpuQwen35::head_argmax_together(own(sequences, rows.size(), "head_argmax_together"), rows, out);
    ++step_work_.lm_head_launches;
  }
  void mtp_forward_together(std::span<ModelRuntime* const> sequences,
                            std::span<const std::span<const int32_t>> next_tokens) override {
    if (sequences.empty()) return;
    CpuQwen35::mtp_forward_together(own(sequences, next_tokens.size(), "mtp_forward_together"), next_tokens);
    ++step_work_.mtp_forward_launches;
  }
  void mtp_draft_together(std::span<ModelRuntime* const> sequences, std::span<const int> n, int32_t* out) override {
    if (sequences.empty()) return;
    CpuQwen35::mtp_draft_together(own(sequences, n.size(), "mtp_draft_together"), n, out, step_work_);
  }

 private:
  // The group's own sequences, each listed once, and as many as the other list.
  std::vector<CpuQwen35*> own(std::span<ModelRuntime* const> sequences, size_t lists, const char* what) const {
    if (sequences.size() != lists || sequences.empty())
      fail("internal: {} of {} sequences and {} lists", what, sequences.size(), lists);
    std::vector<CpuQwen35*> seqs;
    for (ModelRuntime* rt : sequences) {
      auto* q = dynamic_cast<CpuQwen35*>(rt);
      if (q == nullptr || q->model() != model_.get()) fail("internal: {} over a sequence of another group", what);
      if (std::find(seqs.begin(), seqs.end(), q) != seqs.end()) fail("internal: {} lists one sequence twice", what);
      seqs.push_back(q);
    }
    return seqs;
  }
  std::shared_ptr<CpuModel> model_;
  int max_positions_;
};

}  // namespace

std::unique_ptr<ModelRuntime> make_cpu_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                               const CpuRuntimeOptions& options) {
  if (max_tokens < 1) fail("--backend cpu: max_tokens {} must be positive", max_tokens);
  return std::make_unique<CpuQwen35>(std::make_shared<CpuModel>(ckpt, options), max_tokens);
}

std::unique_ptr<SequenceGroup> make_cpu_sequence_group(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options) {
  return std::make_unique<CpuSequenceGroup>(ckpt, options);
}

}  // namespace nextn
