// The Qwen3.5 forward on the CPU, layer by layer (model-spec §A), with the
// rollback of §B: attention KV truncated; GDN conv state rebuilt from the
// verify rows; GDN recurrent state restored from a snapshot taken before the
// forward and replayed over the accepted prefix from the recorded inputs.
// Threads split independent outputs only (matrix rows, attention heads, GDN
// heads, vocabulary chunks of the fused argmax), never one reduction, so every
// value is the same at any thread count.
#include "backend/cpu/qwen35.h"
#include "backend/cpu/qwen35_model.h"
#include "backend/cpu/qwen35_tp.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/head.h"
#include "backend/cpu/gdn_simd.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/simd.h"
#include "core/fault.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"

namespace nextn {
namespace cpu_qwen35 {

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
  if (c.moe) {
    L.moe = load_moe(ck, p);
    return L;
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
      fault(options.fault) {
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

CpuModel::CpuModel(const Qwen35Config& rank_config, const CpuRuntimeOptions& options, Communicator* communicator)
    : cfg(rank_config),
      pool(options.threads > 0 ? options.threads : default_thread_count()),
      min_chunk_work(options.min_chunk_work),
      fault(options.fault),
      comm(communicator) {}

CpuQwen35::CpuQwen35(std::shared_ptr<CpuModel> model, int max_tokens)
    : m_(std::move(model)),
      max_tokens_(max_tokens),
      kv_(m_->kv_layers() > 0 ? &m_->kv_pool() : nullptr, max_tokens, "the KV cache"),
      hidden_(RowAlloc<float>(&m_->allocator, "hidden rows")),
      mtp_hidden_(RowAlloc<float>(&m_->allocator, "MTP hidden rows")),
      draft_vocab_(m_->cfg.vocab_size) {
  if (max_tokens < 1) fail("--backend cpu: max_tokens {} must be positive", max_tokens);
  const Qwen35Config& cfg = m_->cfg;
  for (const LayerWeights& L : m_->layers) {
    GdnState st(&m_->allocator);
    if (!L.full) {
      st.conv.assign(size_t(cfg.linear_conv_kernel_dim - 1) * cfg.conv_dim(), 0.0f);
      st.S.assign(size_t(cfg.linear_num_value_heads) * cfg.linear_key_head_dim * cfg.linear_value_head_dim, 0.0f);
    }
    gdn_.push_back(std::move(st));
  }
}

CpuQwen35::~CpuQwen35() = default;

KvBlockPool& CpuModel::kv_pool() {
  if (!kv_pool_) {
    const size_t row = size_t(cfg.num_key_value_heads) * size_t(cfg.head_dim);
    kv_pool_ = std::make_unique<KvBlockPool>(size_t(kv_layers()) * 2 * kKvBlockTokens * row * sizeof(float), 4,
                                             host_allocator());
  }
  return *kv_pool_;
}

int CpuModel::kv_layers() const {
  int n = has_mtp ? 1 : 0;
  for (const LayerWeights& L : layers) n += L.full ? 1 : 0;
  return n;
}

KvLayer CpuModel::kv_layer(const KvBlockTable& blocks, int index) const {
  const size_t row = size_t(cfg.num_key_value_heads) * size_t(cfg.head_dim);
  const size_t k_at = size_t(index) * 2 * kKvBlockTokens * row;
  return KvLayer{blocks.data(), k_at, k_at + kKvBlockTokens * row, row};
}

void CpuQwen35::reset() {
  // The KV blocks go back to the pool (their rows are written before they
  // are read); the GDN states are read from position 0 and must be zero again.
  kv_.release();
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

void CpuQwen35::check_forward(std::span<const int32_t> tokens) {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  if (length_ + T > max_tokens_) fail("sequence of {} tokens exceeds the cache capacity {}", length_ + T, max_tokens_);
  m_->check_tokens(tokens);
  kv_.hold(length_ + T);
}

void CpuQwen35::reserve_step(std::span<const int32_t> tokens, int mtp_end) {
  check_forward(tokens);
  if (mtp_end > 0 && !m_->has_mtp)
    fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  if (mtp_end > max_tokens_) fail("MTP cache capacity {} exceeded ({} entries)", max_tokens_, mtp_end);
  kv_.hold(mtp_end);
  reserve_rows(int(tokens.size()), mtp_end > 0);
}

void CpuQwen35::reserve_rows(int T, bool mtp) {
  const Qwen35Config& c = m_->cfg;
  const size_t rows = size_t(T), H = size_t(c.hidden_size), Hv = size_t(c.linear_num_value_heads);
  const size_t dk = size_t(c.linear_key_head_dim), dv = size_t(c.linear_value_head_dim);
  hidden_.reserve(rows * H);
  for (size_t i = 0; i < m_->layers.size(); ++i) {
    if (m_->layers[i].full) continue;
    GdnState& st = gdn_[i];
    if (T > 1) {
      st.conv_before.reserve(st.conv.size());
      st.S_before.reserve(st.S.size());
    }
    st.mixed.reserve(rows * size_t(c.conv_dim()));
    st.q.reserve(rows * Hv * dk);
    st.k.reserve(rows * Hv * dk);
    st.v.reserve(rows * Hv * dv);
    st.g.reserve(rows * Hv);
    st.beta.reserve(rows * Hv);
  }
  if (mtp) mtp_hidden_.reserve(rows * H);  // a pairing writes at most the forward's rows, a chained step one
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
  // Their row buffers before any changes (a step reserved them already).
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->reserve_rows(int(tokens[s].size()), false);
  const int H = m.cfg.hidden_size;
  std::vector<float> x(size_t(N) * H);
  std::vector<Segment> segs(seqs.size());
  for (size_t s = 0, row = 0; s < seqs.size(); row += tokens[s].size(), ++s) {
    m.embed(tokens[s].data(), int(tokens[s].size()), &x[row * H]);
    segs[s] = Segment{{}, nullptr, seqs[s]->length_, int(row), int(tokens[s].size())};
  }
  for (size_t i = 0, kv_index = 0; i < m.layers.size(); kv_index += m.layers[i].full ? 1 : 0, ++i) {
    for (size_t s = 0; s < seqs.size(); ++s) {
      CpuQwen35& q = *seqs[s];
      if (m.layers[i].full) segs[s].kv = m.kv_layer(q.kv_, int(kv_index));
      segs[s].gdn = m.layers[i].full ? nullptr : &q.gdn_[i];
      if (segs[s].gdn && segs[s].T > 1) {  // snapshot for rollback
        segs[s].gdn->conv_before.assign(segs[s].gdn->conv.begin(), segs[s].gdn->conv.end());
        segs[s].gdn->S_before.assign(segs[s].gdn->S.begin(), segs[s].gdn->S.end());
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
    st.S.assign(st.S_before.begin(), st.S_before.end());
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
  // Tensor parallelism: each rank's mix is its heads' share of o_proj /
  // out_proj; the sum over ranks is the layer's (every rank gets the same
  // bits, so the residual stream stays replicated).
  if (comm) comm->all_reduce_sum(mix.data(), mix.size());
  for (size_t i = 0; i < xn.size(); ++i) x[i] += mix[i];
  for (int t = 0; t < N; ++t) cpu::rmsnorm(x + size_t(t) * H, L.post_norm.data(), cfg.rms_norm_eps, H, &xn[size_t(t) * H]);
  mlp(L, N, xn.data(), mix.data());
  if (comm) comm->all_reduce_sum(mix.data(), mix.size());  // the down projections' shares
  for (size_t i = 0; i < xn.size(); ++i) x[i] += mix[i];
}

void CpuModel::mlp(const LayerWeights& L, int N, const float* xn, float* out) {
  if (L.moe) {
    moe_mlp(*L.moe, N, xn, out);
    return;
  }
  const int I = cfg.intermediate_size;
  std::vector<float> g(size_t(N) * I), u(size_t(N) * I);
  matmul(*L.gate, xn, N, g.data());
  matmul(*L.up, xn, N, u.data());
  // Element by element, so rows can go to different threads (prefill: the
  // exp in silu is a noticeable share of a layer). One silu is counted as 64
  // multiply-adds against min_chunk_work.
  pool.parallel_for(N, std::max<int64_t>(1, min_chunk_work / (int64_t(I) * 64)), [&](int64_t t0, int64_t t1) {
    for (size_t i = size_t(t0) * I; i < size_t(t1) * I; ++i) g[i] = cpu::silu(g[i]) * u[i];
  });
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
        std::copy(tmp.begin(), tmp.end(), sg.kv.key(sg.pos + t) + h * hd);
        std::copy(&v[r * kv_row + h * hd], &v[r * kv_row + h * hd] + hd, sg.kv.value(sg.pos + t) + h * hd);
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
      const KvLayer& kv = sg.kv;
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
          for (int j0 = 0; j0 < n_keys; j0 += 4) {  // four keys per call, each exactly cpu::dot
            const int nk = std::min(4, n_keys - j0);
            const float* keys[4];
            for (int i = 0; i < nk; ++i) keys[i] = kv.key(j0 + i) + kh * hd;
            cpu::dot_rows(q.data(), keys, nk, hd, &scores[size_t(j0)]);
            for (int j = j0; j < j0 + nk; ++j) {
              scores[size_t(j)] *= scale;
              mx = std::max(mx, scores[size_t(j)]);
            }
          }
          float sum = 0.0f;
          for (int j = 0; j < n_keys; ++j) {
            scores[size_t(j)] = std::exp(scores[size_t(j)] - mx);
            sum += scores[size_t(j)];
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int j = 0; j < n_keys; ++j) {
            const float p = scores[size_t(j)] / sum;
            cpu::add_scaled(acc.data(), kv.value(j) + kh * hd, p, hd);
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
    cpu::gdn_head_step(S, dk, dv, qh, kh, vh, std::exp(g[h]), beta[h], mem.data(), o + size_t(h) * dv);
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
  std::vector<float> o(size_t(N) * vd), y(size_t(N) * vd);
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
    // Pre-conv rows [conv state (K-1 rows) ; this forward's T rows]: token t's
    // taps are rows t .. t+K-1, so the tokens are independent and split over
    // threads (each value as before: taps in order, then silu).
    std::vector<float> hist(size_t(K - 1 + T) * cd);
    std::copy(st.conv.begin(), st.conv.end(), hist.begin());
    std::copy(st.mixed.begin(), st.mixed.end(), hist.begin() + size_t(K - 1) * cd);
    // A token is about cd * (K + 64) multiply-adds (64 for silu's exp).
    const int64_t grain = std::max<int64_t>(1, min_chunk_work / (int64_t(cd) * (K + 64)));
    pool.parallel_for(T, grain, [&](int64_t t0, int64_t t1) {
      std::vector<float> c(static_cast<size_t>(cd)), qh(static_cast<size_t>(dk)), kh(static_cast<size_t>(dk));
      for (int t = int(t0); t < int(t1); ++t) {
        const size_t r = size_t(sg.row0 + t);
        // Causal depthwise conv: taps 0..K-2 from the previous rows, K-1 from this token.
        for (int ch = 0; ch < cd; ++ch) {
          const float* w = &W.conv[size_t(ch) * K];
          float s = 0.0f;
          for (int i = 0; i < K - 1; ++i) s += w[i] * hist[size_t(t + i) * cd + ch];
          s += w[K - 1] * hist[size_t(t + K - 1) * cd + ch];
          c[size_t(ch)] = cpu::silu(s);
        }
        float* qt = &st.q[size_t(t) * Hv * dk];
        float* kt = &st.k[size_t(t) * Hv * dk];
        for (int h = 0; h < Hk; ++h) {  // l2-normalise per key head, then repeat_interleave to value heads
          std::copy(c.begin() + h * dk, c.begin() + (h + 1) * dk, qh.begin());
          std::copy(c.begin() + kd + h * dk, c.begin() + kd + (h + 1) * dk, kh.begin());
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
          st.g[size_t(t) * Hv + h] =
              -std::exp(W.a_log[size_t(h)]) * cpu::softplus(a[r * Hv + h] + W.dt_bias[size_t(h)]);
        }
      }
    });
    // The conv state: the last K-1 pre-conv rows.
    std::copy(hist.end() - long(st.conv.size()), hist.end(), st.conv.begin());
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

}  // namespace cpu_qwen35

CpuRuntimeOptions cpu_options(const RuntimeOptions& options) {
  CpuRuntimeOptions c;
  c.threads = options.cpu_threads;
  c.fault = options.fault;
  c.tensor_parallel = options.tensor_parallel;
  return c;
}

std::unique_ptr<ModelRuntime> make_cpu_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                               const CpuRuntimeOptions& options) {
  if (max_tokens < 1) fail("--backend cpu: max_tokens {} must be positive", max_tokens);
  if (options.tensor_parallel != 1) return make_cpu_tensor_parallel_runtime(ckpt, max_tokens, options);
  return std::make_unique<cpu_qwen35::CpuQwen35>(std::make_shared<cpu_qwen35::CpuModel>(ckpt, options), max_tokens);
}

}  // namespace nextn
